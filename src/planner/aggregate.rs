//! Multi-shard SELECTs answered by a combine step on the coordinator node's
//! PostgreSQL: each shard runs a *worker query* whose rows go into a temporary table
//! there, and the client's own statement text runs over that table (the table
//! reference swapped, WHERE already applied on the shards). PostgreSQL itself then
//! does GROUP BY, HAVING, ORDER BY, DISTINCT, LIMIT and every expression, so types,
//! NULL order, collation and numeric semantics are exactly its own.
//!
//! Two ways to fill the table:
//! - *partial aggregation*: when every aggregate decomposes (count, sum, min, max, avg,
//!   bool_and/or, bit_and/or) and GROUP BY names plain columns, shards group and
//!   aggregate, and each aggregate call in the client's text becomes its combine over
//!   the partial columns (`count(*)` → `sum(pgs_a0)::int8`);
//! - *raw rows*: otherwise the shards send the columns the statement reads (WHERE
//!   applied, LIMIT pushed down where sorting by plain columns makes that safe) and the
//!   statement runs unchanged over them. Always exact; bounded by a size limit.

use super::func_name;
use crate::catalog::DistTable;
use crate::sql::clauses::{
    call_end, call_open_paren, select_clauses, target_entry_ends, SelectClauses,
};
use crate::sql::parse::RelRef;
use crate::sql::quote::{quote_ident, quote_qualified};
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self, SortByDir, SortByNulls};
use pg_query::NodeRef;

/// The temporary table the combine query reads.
pub const PARTIALS_TABLE: &str = "pg_temp.pgs_partials";

/// How a decomposable aggregate is computed on the shards and combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartialKind {
    Count,
    Sum,
    Min,
    Max,
    BoolAnd,
    BoolOr,
    BitAnd,
    BitOr,
    /// sum and count on the shards, their quotient on the coordinator.
    Avg,
}

impl PartialKind {
    pub(crate) fn of(name: &str) -> Option<PartialKind> {
        Some(match name {
            "count" => PartialKind::Count,
            "sum" => PartialKind::Sum,
            "min" => PartialKind::Min,
            "max" => PartialKind::Max,
            "bool_and" | "every" => PartialKind::BoolAnd,
            "bool_or" => PartialKind::BoolOr,
            "bit_and" => PartialKind::BitAnd,
            "bit_or" => PartialKind::BitOr,
            "avg" => PartialKind::Avg,
            _ => return None,
        })
    }

    /// Duplicates do not change the result: DISTINCT inside the call is harmless.
    pub(crate) fn idempotent(self) -> bool {
        matches!(
            self,
            PartialKind::Min
                | PartialKind::Max
                | PartialKind::BoolAnd
                | PartialKind::BoolOr
                | PartialKind::BitAnd
                | PartialKind::BitOr
        )
    }
}

/// A piece of the combine query text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CombinePiece {
    Text(String),
    /// The combine expression of partial aggregate `i` (it depends on the partial
    /// columns' types, known when the temporary table exists).
    Agg(usize),
    /// The shard's qualified name (worker queries).
    Shard,
}

/// One way of answering: what the shards run and what the coordinator runs after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CombineStage {
    /// The worker query with `{shard}` standing for the shard's qualified name.
    pub worker: Vec<CombinePiece>,
    /// The worker query's columns over the (empty) shell table, without WHERE or
    /// LIMIT: `CREATE TEMP TABLE ... AS <shape> WITH NO DATA` gives exact types.
    pub shape: String,
    /// The client's statement over the temporary table.
    pub combine: Vec<CombinePiece>,
    /// Aggregates computed as partials, in `Agg(i)` order.
    pub partials: Vec<PartialKind>,
    /// Whether shards send raw rows (the size limit matters most here).
    pub raw_rows: bool,
    /// Raw rows grouped on the coordinator: the shell table (quoted) whose primary key
    /// the temporary table copies when it has all its columns, so PostgreSQL's
    /// functional-dependency rule (`GROUP BY id` selecting other columns) holds there too.
    pub key_of: Option<String>,
    /// Partial aggregates without GROUP BY: the worker query returns one row per
    /// shard, so a node's task may run it shard by shard (`MultiShardPlan::node_sql`).
    pub one_row: bool,
    /// A join's worker query (`join/combine.rs`): every relation spliced with its shard
    /// of the task's shard index, in place of `worker` over one table.
    pub worker_template: Option<super::template::ShardSqlTemplate>,
}

impl CombineStage {
    pub fn worker_sql(&self, shard: &str) -> String {
        self.worker
            .iter()
            .map(|p| match p {
                CombinePiece::Text(t) => t.as_str(),
                CombinePiece::Shard => shard,
                CombinePiece::Agg(_) => "",
            })
            .collect()
    }

    pub fn combine_sql(&self, agg: &dyn Fn(usize) -> String) -> String {
        let mut out = String::new();
        for p in &self.combine {
            match p {
                CombinePiece::Text(t) => out.push_str(t),
                CombinePiece::Agg(i) => out.push_str(&agg(*i)),
                CombinePiece::Shard => {}
            }
        }
        out
    }
}

/// The combine plan of one SELECT: partial aggregation where it applies, raw rows always.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CombinePlan {
    pub partial: Option<CombineStage>,
    pub raw: CombineStage,
}

/// Names of the partial columns of aggregate `i`.
pub fn partial_column(i: usize) -> String {
    format!("pgs_a{i}")
}
pub fn partial_count_column(i: usize) -> String {
    format!("pgs_c{i}")
}

const WINDOW_OR_SPECIAL: &[&str] = &[
    "rank",
    "dense_rank",
    "row_number",
    "percent_rank",
    "cume_dist",
    "ntile",
    "lag",
    "lead",
    "first_value",
    "last_value",
    "nth_value",
];

/// An aggregate call found in the statement.
struct AggCall<'a> {
    fc: &'a protobuf::FuncCall,
    start: usize,
    end: usize,
}

/// Plans the combine of a single-table SELECT. Err is the reason it cannot be done.
pub fn plan_combine(
    s: &protobuf::SelectStmt,
    text: &str,
    rel: &RelRef,
    table: &DistTable,
    known_aggregates: &[&str],
) -> Result<CombinePlan, String> {
    let clauses = select_clauses(text).ok_or("this statement shape")?;
    let from = clauses.from.ok_or("a SELECT without FROM")?;
    if clauses.locking.is_some() {
        return Err("FOR UPDATE / FOR SHARE".into());
    }
    let (rel_start, rel_end) = crate::sql::parse::qualified_name_span(text, rel.location)
        .ok_or("a table reference pgshard could not locate")?;
    if rel_start < from.body || rel_end > from.end {
        return Err("this FROM clause".into());
    }
    let alias = rel.alias.clone().unwrap_or_else(|| table.name.clone());
    // Spans read by the combine step (everything but FROM and WHERE).
    let mut read_spans = vec![clauses.target];
    for c in [clauses.group, clauses.having, clauses.window, clauses.order] {
        if let Some(c) = c {
            read_spans.push((c.body, c.end));
        }
    }
    // DISTINCT ON (...) lies between SELECT and the target list.
    read_spans.push((0, clauses.target.0));
    let in_read = |loc: i32| {
        let l = loc.max(0) as usize;
        read_spans.iter().any(|(a, b)| l >= *a && l < *b)
    };

    let mut aggs: Vec<AggCall> = Vec::new();
    let mut has_window = false;
    let mut has_sublink = false;
    let root = N::SelectStmt(Box::new(s.clone()));
    for (n, _, _, _) in root.nodes() {
        match n {
            NodeRef::FuncCall(fc) if in_read(fc.location) => {
                let name = func_name(fc).unwrap_or_default();
                if fc.over.is_some() || WINDOW_OR_SPECIAL.contains(&name.as_str()) {
                    has_window = true;
                    continue;
                }
                let is_agg = known_aggregates.contains(&name.as_str())
                    || fc.agg_star
                    || fc.agg_distinct
                    || !fc.agg_order.is_empty()
                    || fc.agg_filter.is_some()
                    || fc.agg_within_group;
                if is_agg {
                    let start = fc.location.max(0) as usize;
                    let end = call_end(text, start).ok_or("an aggregate call")?;
                    aggs.push(AggCall { fc, start, end });
                }
            }
            NodeRef::SubLink(_) => has_sublink = true,
            _ => {}
        }
    }
    // Column references, wherever they sit (pg_query's walker skips some places,
    // such as ORDER BY inside an aggregate): found through the tree's serde form.
    let column_refs: Vec<(ColumnRefName, usize)> = column_refs_json(&root)
        .into_iter()
        .filter(|(_, loc)| in_read(*loc as i32))
        .collect();
    aggs.sort_by_key(|a| a.start);
    // Only outermost calls are combined; a nested one is PostgreSQL's error to give.
    let nested = aggs.windows(2).any(|w| w[1].start < w[0].end);

    let col_of = |c: &ColumnRefName| -> ColumnUse {
        let names: Vec<Option<&str>> = c.iter().map(|f| f.as_deref()).collect();
        match names.last() {
            Some(None) => ColumnUse::All, // `*` or `t.*`
            Some(Some(name)) => {
                if table.columns.iter().any(|c| c == name) {
                    ColumnUse::Column(name.to_string())
                } else if names.len() == 1 && *name == alias {
                    ColumnUse::All // whole-row reference
                } else {
                    ColumnUse::Other // an output column name
                }
            }
            None => ColumnUse::Other,
        }
    };

    // The columns the combine step reads.
    let mut needed: Vec<String> = Vec::new();
    let mut all = false;
    for (c, _) in &column_refs {
        match col_of(c) {
            ColumnUse::All => all = true,
            ColumnUse::Column(n) if !needed.contains(&n) => needed.push(n),
            _ => {}
        }
    }
    if all {
        needed = table.columns.clone();
    }
    if needed.is_empty() {
        needed.push(
            table
                .columns
                .first()
                .cloned()
                .ok_or("a table without columns")?,
        );
    }

    let shard_from = |shell: Option<&str>| -> Vec<CombinePiece> {
        let mut v = vec![CombinePiece::Text(" FROM ".into())];
        match shell {
            Some(s) => v.push(CombinePiece::Text(s.to_string())),
            None => v.push(CombinePiece::Shard),
        }
        v.push(CombinePiece::Text(format!(" AS {}", quote_ident(&alias))));
        v
    };
    let where_text = clauses
        .where_
        .map(|w| format!(" WHERE {}", text[w.body..w.end].trim()))
        .unwrap_or_default();
    let shell = quote_qualified(&table.schema, &table.name);

    // The combine query: the client's text, table swapped, WHERE gone.
    let combine_text = |agg_edits: &[(usize, usize, CombinePiece)]| -> Vec<CombinePiece> {
        let mut edits: Vec<(usize, usize, CombinePiece)> = agg_edits.to_vec();
        let mut with = PARTIALS_TABLE.to_string();
        if rel.alias.is_none() {
            with.push_str(&format!(" AS {}", quote_ident(&table.name)));
        }
        edits.push((rel_start, rel_end, CombinePiece::Text(with)));
        if let Some(w) = clauses.where_ {
            edits.push((w.keyword, w.end, CombinePiece::Text(" ".into())));
        }
        edits.sort_by_key(|e| e.0);
        let mut out = Vec::new();
        let mut at = 0;
        for (s, e, p) in edits {
            out.push(CombinePiece::Text(text[at..s].to_string()));
            out.push(p);
            at = e;
        }
        out.push(CombinePiece::Text(text[at..clauses.end].to_string()));
        out
    };

    // ---- raw rows ----
    let cols: Vec<String> = needed.iter().map(|c| quote_ident(c)).collect();
    let select_list = cols.join(", ");
    // A set-returning function in the target list could turn a shard's first rows
    // into fewer output rows than LIMIT needs: no pushdown then.
    let target_calls = target_function_calls(&root, clauses.target);
    let pushdown = if aggs.is_empty() && !has_window && s.group_clause.is_empty() && !target_calls {
        limit_pushdown(s, text, &clauses, table)
    } else {
        None
    };
    let mut worker = vec![CombinePiece::Text(format!("SELECT {select_list}"))];
    worker.extend(shard_from(None));
    worker.push(CombinePiece::Text(format!(
        "{where_text}{}",
        pushdown.unwrap_or_default()
    )));
    let mut shape = format!("SELECT {select_list}");
    for p in shard_from(Some(&shell)) {
        if let CombinePiece::Text(t) = p {
            shape.push_str(&t);
        }
    }
    let raw = CombineStage {
        worker,
        shape,
        combine: combine_text(&[]),
        partials: vec![],
        raw_rows: true,
        key_of: (!s.group_clause.is_empty()).then(|| shell.clone()),
        one_row: false,
        worker_template: None,
    };

    // ---- partial aggregation ----
    let partial = (|| -> Option<CombineStage> {
        if has_window || nested || has_sublink || clauses.window.is_some() {
            return None;
        }
        if aggs.is_empty() && s.group_clause.is_empty() {
            return None;
        }
        // GROUP BY items: plain columns, or positions of targets that are plain columns.
        let mut groups: Vec<String> = Vec::new();
        for g in &s.group_clause {
            let col = match g.node.as_ref()? {
                N::ColumnRef(c) => c,
                N::AConst(c) => {
                    let Some(protobuf::a_const::Val::Ival(i)) = c.val.as_ref() else {
                        return None;
                    };
                    let t = s.target_list.get((i.ival as usize).checked_sub(1)?)?;
                    let Some(N::ResTarget(rt)) = t.node.as_ref() else {
                        return None;
                    };
                    match rt.val.as_deref()?.node.as_ref()? {
                        N::ColumnRef(c) => c,
                        _ => return None,
                    }
                }
                _ => return None,
            };
            match col_of(&column_ref_name(col)) {
                ColumnUse::Column(n) => {
                    if !groups.contains(&n) {
                        groups.push(n)
                    }
                }
                _ => return None,
            }
        }
        // Columns read outside aggregates must be grouped ones.
        for (c, loc) in &column_refs {
            if aggs.iter().any(|a| *loc >= a.start && *loc < a.end) {
                continue;
            }
            match col_of(c) {
                ColumnUse::Column(n) if groups.contains(&n) => {}
                ColumnUse::Other => {}
                _ => return None,
            }
        }
        let mut partial_list: Vec<String> = groups.iter().map(|g| quote_ident(g)).collect();
        let mut kinds = Vec::new();
        let mut edits = Vec::new();
        // The same call written twice (in the target list and ORDER BY) is one partial.
        let mut seen: Vec<&str> = Vec::new();
        for a in aggs.iter() {
            let call = &text[a.start..a.end];
            if let Some(j) = seen.iter().position(|c| *c == call) {
                edits.push((a.start, a.end, CombinePiece::Agg(j)));
                continue;
            }
            let i = seen.len();
            seen.push(call);
            let name = func_name(a.fc)?;
            let kind = PartialKind::of(&name)?;
            if a.fc.agg_within_group || !a.fc.agg_order.is_empty() {
                return None;
            }
            if a.fc.agg_distinct && !kind.idempotent() {
                return None;
            }
            let ok_args = if kind == PartialKind::Count {
                a.fc.agg_star || a.fc.args.len() == 1
            } else {
                a.fc.args.len() == 1
            };
            if !ok_args {
                return None;
            }
            match kind {
                PartialKind::Avg => {
                    let open = call_open_paren(text, a.start)?;
                    let rest = &text[open..a.end];
                    partial_list.push(format!("sum{rest} AS {}", quote_ident(&partial_column(i))));
                    partial_list.push(format!(
                        "count{rest} AS {}",
                        quote_ident(&partial_count_column(i))
                    ));
                }
                _ => partial_list.push(format!("{call} AS {}", quote_ident(&partial_column(i)))),
            }
            kinds.push(kind);
            edits.push((a.start, a.end, CombinePiece::Agg(i)));
        }
        let list = partial_list.join(", ");
        let group_by = if groups.is_empty() {
            String::new()
        } else {
            let g: Vec<String> = groups.iter().map(|g| quote_ident(g)).collect();
            format!(" GROUP BY {}", g.join(", "))
        };
        let mut worker = vec![CombinePiece::Text(format!("SELECT {list}"))];
        worker.extend(shard_from(None));
        worker.push(CombinePiece::Text(format!("{where_text}{group_by}")));
        let shape = format!(
            "SELECT {list} FROM {shell} AS {}{group_by}",
            quote_ident(&alias)
        );
        // Output names stay the client's: an entry whose aggregate is replaced by its
        // combine gets PostgreSQL's name for the original expression as an alias.
        let ends = target_entry_ends(text, clauses.target)?;
        if ends.len() != s.target_list.len() {
            return None;
        }
        let mut entry_start = clauses.target.0;
        for (t, end) in s.target_list.iter().zip(ends) {
            let start = std::mem::replace(&mut entry_start, end);
            let Some(N::ResTarget(rt)) = t.node.as_ref() else {
                return None;
            };
            let Some(val) = rt.val.as_deref() else {
                return None;
            };
            let has_agg = aggs.iter().any(|a| a.start >= start && a.end <= end);
            if !rt.name.is_empty() || !has_agg {
                continue;
            }
            let name = figure_colname(val).0.unwrap_or_else(|| "?column?".into());
            edits.push((
                end,
                end,
                CombinePiece::Text(format!(" AS {}", quote_ident(&name))),
            ));
        }
        Some(CombineStage {
            worker,
            shape,
            combine: combine_text(&edits),
            partials: kinds,
            raw_rows: false,
            key_of: None,
            one_row: groups.is_empty(),
            worker_template: None,
        })
    })();
    Ok(CombinePlan { partial, raw })
}

/// PostgreSQL's name for an output column without an alias (FigureColname), with
/// its strength: 2 a real name, 1 a fallback (`case`, a type name), 0 none.
pub fn figure_colname(n: &protobuf::Node) -> (Option<String>, u8) {
    let Some(node) = n.node.as_ref() else {
        return (None, 0);
    };
    let last_string = |nodes: &[protobuf::Node]| {
        nodes.iter().rev().find_map(|f| match f.node.as_ref() {
            Some(N::String(s)) => Some(s.sval.clone()),
            _ => None,
        })
    };
    match node {
        N::ColumnRef(c) => match c.fields.last().and_then(|f| f.node.as_ref()) {
            Some(N::String(s)) => (Some(s.sval.clone()), 2),
            _ => (None, 0),
        },
        N::AIndirection(i) => match last_string(&i.indirection) {
            Some(s) => (Some(s), 2),
            None => i.arg.as_deref().map_or((None, 0), figure_colname),
        },
        N::FuncCall(fc) => (last_string(&fc.funcname), 2),
        N::AExpr(e) if e.kind == protobuf::AExprKind::AexprNullif as i32 => {
            (Some("nullif".into()), 2)
        }
        N::TypeCast(tc) => {
            let (name, strength) = tc.arg.as_deref().map_or((None, 0), figure_colname);
            if strength > 1 {
                return (name, strength);
            }
            match tc.type_name.as_ref().and_then(|t| last_string(&t.names)) {
                Some(t) => (Some(t), 1),
                None => (name, strength),
            }
        }
        N::CollateClause(c) => c.arg.as_deref().map_or((None, 0), figure_colname),
        N::CaseExpr(_) => (Some("case".into()), 1),
        N::AArrayExpr(_) => (Some("array".into()), 2),
        N::RowExpr(_) => (Some("row".into()), 2),
        N::CoalesceExpr(_) => (Some("coalesce".into()), 2),
        N::MinMaxExpr(m) => (
            Some(
                if m.op == protobuf::MinMaxOp::IsGreatest as i32 {
                    "greatest"
                } else {
                    "least"
                }
                .into(),
            ),
            2,
        ),
        N::GroupingFunc(_) => (Some("grouping".into()), 2),
        _ => (None, 0),
    }
}

/// The shape query with each parameter `$n` replaced by a NULL of its type: the
/// temporary table is created by a simple query, which has no parameters, and a
/// parameter inside an aggregate's arguments or FILTER decides the partial's type.
pub fn shape_with_params(shape: &str, types: &[u32]) -> Result<String, String> {
    let toks = crate::sql::clauses::tokens(shape, 0).ok_or("unreadable shape")?;
    let mut out = String::with_capacity(shape.len());
    let mut at = 0;
    for t in toks {
        let tok = &shape[t.start..t.end];
        let Some(n) = tok.strip_prefix('$').and_then(|d| d.parse::<usize>().ok()) else {
            continue;
        };
        let oid = types.get(n.wrapping_sub(1)).copied().unwrap_or(0);
        let name = builtin_type_name(oid).ok_or_else(|| {
            format!("a parameter of type {oid} inside an aggregate across shards")
        })?;
        out.push_str(&shape[at..t.start]);
        out.push_str(&format!("CAST(NULL AS {name})"));
        at = t.end;
    }
    out.push_str(&shape[at..]);
    Ok(out)
}

fn builtin_type_name(oid: u32) -> Option<&'static str> {
    Some(match oid {
        16 => "pg_catalog.bool",
        17 => "pg_catalog.bytea",
        18 => "pg_catalog.char",
        19 => "pg_catalog.name",
        20 => "pg_catalog.int8",
        21 => "pg_catalog.int2",
        23 => "pg_catalog.int4",
        25 | 0 => "pg_catalog.text",
        26 => "pg_catalog.oid",
        114 => "pg_catalog.json",
        700 => "pg_catalog.float4",
        701 => "pg_catalog.float8",
        790 => "pg_catalog.money",
        1042 => "pg_catalog.bpchar",
        1043 => "pg_catalog.varchar",
        1082 => "pg_catalog.date",
        1083 => "pg_catalog.time",
        1114 => "pg_catalog.timestamp",
        1184 => "pg_catalog.timestamptz",
        1186 => "pg_catalog.interval",
        1266 => "pg_catalog.timetz",
        1700 => "pg_catalog.numeric",
        2950 => "pg_catalog.uuid",
        3802 => "pg_catalog.jsonb",
        1007 => "pg_catalog.int4[]",
        1016 => "pg_catalog.int8[]",
        1009 => "pg_catalog.text[]",
        _ => return None,
    })
}

/// Whether a function is called inside the target list span.
fn target_function_calls(root: &N, target: (usize, usize)) -> bool {
    root.nodes().iter().any(|(n, _, _, _)| {
        matches!(n, NodeRef::FuncCall(fc)
            if (fc.location.max(0) as usize) >= target.0 && (fc.location.max(0) as usize) < target.1)
    })
}

/// A column reference's name parts (None for `*`).
pub(super) type ColumnRefName = Vec<Option<String>>;

fn column_ref_name(c: &protobuf::ColumnRef) -> ColumnRefName {
    c.fields
        .iter()
        .map(|f| match f.node.as_ref() {
            Some(N::String(s)) => Some(s.sval.clone()),
            _ => None,
        })
        .collect()
}

/// Every ColumnRef of a tree with its location, found through the tree's serde form.
/// The tree is written out as JSON text and only each ColumnRef object is read back: a
/// `serde_json::Value` of the whole tree (a map per node) took 380 MB of pgshard's
/// memory for a 100,000-element IN list, its text a tenth of that. Inside a JSON
/// string every quote is escaped, so `"ColumnRef":` right after `{` or `,` (compact
/// JSON has no blanks) is a key.
pub(super) fn column_refs_json(root: &N) -> Vec<(ColumnRefName, usize)> {
    const KEY: &str = "\"ColumnRef\":";
    let json = serde_json::to_string(root).unwrap_or_default();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(i) = json[from..].find(KEY) {
        let at = from + i;
        from = at + KEY.len();
        if at == 0 || !matches!(json.as_bytes()[at - 1], b'{' | b',') {
            continue;
        }
        let Some(Ok(cr)) = serde_json::Deserializer::from_str(&json[from..])
            .into_iter::<serde_json::Value>()
            .next()
        else {
            continue;
        };
        let fields = cr
            .get("fields")
            .and_then(|f| f.as_array())
            .map(|a| {
                a.iter()
                    .map(|f| {
                        f.pointer("/node/String/sval")
                            .and_then(|s| s.as_str())
                            .map(str::to_string)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let loc = cr.get("location").and_then(|l| l.as_i64()).unwrap_or(0);
        found.push((fields, loc.max(0) as usize));
    }
    found
}

enum ColumnUse {
    Column(String),
    All,
    Other,
}

/// `ORDER BY <plain columns> LIMIT n+m` for the shards, when sorting by the table's
/// own columns makes every shard's first n+m rows a superset of the answer's.
fn limit_pushdown(
    s: &protobuf::SelectStmt,
    text: &str,
    clauses: &SelectClauses,
    table: &DistTable,
) -> Option<String> {
    if !s.distinct_clause.is_empty() || s.having_clause.is_some() || clauses.fetch.is_some() {
        return None;
    }
    let limit = clauses.limit?;
    let simple = |t: &str| -> bool {
        let t = t.trim();
        !t.is_empty()
            && (t.bytes().all(|b| b.is_ascii_digit())
                || (t.starts_with('$') && t[1..].bytes().all(|b| b.is_ascii_digit())))
    };
    let limit_text = text[limit.body..limit.end].trim();
    if !simple(limit_text) {
        return None;
    }
    let offset_text = match clauses.offset {
        Some(o) => {
            let t = text[o.body..o.end].trim();
            if !simple(t) {
                return None;
            }
            Some(t)
        }
        None => None,
    };
    // Output names shadow columns in ORDER BY.
    let outputs: Vec<&str> = s
        .target_list
        .iter()
        .filter_map(|t| match t.node.as_ref() {
            Some(N::ResTarget(rt)) if !rt.name.is_empty() => Some(rt.name.as_str()),
            _ => None,
        })
        .collect();
    let mut keys = Vec::new();
    for item in &s.sort_clause {
        let Some(N::SortBy(sb)) = item.node.as_ref() else {
            return None;
        };
        let Some(N::ColumnRef(c)) = sb.node.as_ref().and_then(|n| n.node.as_ref()) else {
            return None;
        };
        let Some(Some(N::String(name))) = c.fields.last().map(|f| f.node.as_ref()) else {
            return None;
        };
        let name = name.sval.as_str();
        if !table.columns.iter().any(|c| c == name) || outputs.contains(&name) {
            return None;
        }
        let dir = match SortByDir::try_from(sb.sortby_dir).ok()? {
            SortByDir::SortbyDefault | SortByDir::SortbyAsc => "ASC",
            SortByDir::SortbyDesc => "DESC",
            _ => return None,
        };
        let nulls = match SortByNulls::try_from(sb.sortby_nulls).ok()? {
            SortByNulls::SortbyNullsDefault => "",
            SortByNulls::SortbyNullsFirst => " NULLS FIRST",
            SortByNulls::SortbyNullsLast => " NULLS LAST",
            _ => return None,
        };
        keys.push(format!("{} {dir}{nulls}", quote_ident(name)));
    }
    let order = if keys.is_empty() {
        String::new()
    } else {
        format!(" ORDER BY {}", keys.join(", "))
    };
    let n = match offset_text {
        Some(o) => format!("({limit_text})::int8 + ({o})::int8"),
        None => limit_text.to_string(),
    };
    Some(format!("{order} LIMIT {n}"))
}
