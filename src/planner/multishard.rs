//! Multi-shard reads of one distributed table: the statement runs on every shard in
//! parallel and pgshard combines the results. Supported shapes: plain selections
//! (LIMIT pushed down as LIMIT+OFFSET, then re-applied) and count/sum/min/max without
//! GROUP BY. Everything else is refused with 0A000 rather than answered wrongly.

use super::aggregate::{plan_combine, CombinePlan, CombineStage};
use super::template::{node_relation, union_of_statements, Edit, RelTarget, ShardSqlTemplate};
use super::{func_name, Plan};
use crate::catalog::{DistTable, ShardId};
use crate::error::{PgError, PgResult};
use crate::sql::parse::RelRef;
use pg_query::protobuf::a_const::Val;
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self, LimitOption, SetOperation};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggKind {
    Count,
    Sum,
    Min,
    Max,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiShardShape {
    /// Rows of every shard concatenated.
    Plain,
    /// One row: each column an aggregate combined over the shards' partial values.
    Aggregate {
        aggs: Vec<AggKind>,
        names: Vec<String>,
        /// When min/max are among them: the client's FROM clause read with each
        /// aggregate's argument (NULL for count/sum) and `WHERE false`, to run on the
        /// coordinator node's empty shells. Its columns carry the arguments' types and
        /// collations, so that the combine's `min`/`max` compare as the shards did
        /// (`collate "en-x-icu"`), not in the default collation of bare parameters.
        collation_source: Option<String>,
    },
    /// Shards fill a temporary table on the coordinator node, which runs the
    /// client's statement over it (`aggregate.rs`).
    Combine,
}

/// LIMIT / OFFSET as the coordinator re-applies them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    None,
    Const(i64),
    Param(usize),
}

#[derive(Debug)]
pub struct MultiShardPlan {
    pub table: Arc<DistTable>,
    pub template: ShardSqlTemplate,
    pub shape: MultiShardShape,
    pub limit: Bound,
    pub offset: i64,
    /// Functions called in the target list that might be user-defined aggregates or
    /// window functions: the executor checks them against the coordinator node.
    pub functions: Vec<String>,
    /// The combine plan (shape Combine), or the exact fallback of the other shapes
    /// when a function turns out to be a user-defined aggregate.
    pub combine: Option<Arc<CombinePlan>>,
    /// One task per node, over the UNION ALL of its shards (`template::node_relation`),
    /// instead of one task per shard: true when the statement reads nothing a
    /// subquery in place of the table would change (`node_tasks_allowed`).
    pub node_tasks: bool,
}

/// Fewest shards of a node for which its task aggregates shard by shard
/// (`MultiShardPlan::node_sql`). PostgreSQL runs such a task as a Parallel Append of
/// whole-shard aggregates, which keeps at most one process per shard busy; from 3
/// shards on that is at least what a scan of the node's shards under one aggregate
/// gets with PostgreSQL's default `max_parallel_workers_per_gather` (2 workers and
/// the leader).
pub const PER_SHARD_AGGREGATE_MIN_SHARDS: usize = 3;

/// Statement text above which the work a node is given stays one shard's statement at
/// a time. A node's task repeats the client's expressions once per shard (the
/// `UNION ALL` of its shards' statements, or of its shards under the WHERE clause),
/// and PostgreSQL plans, and JIT-compiles, the whole task at once: a 20,000-term OR
/// chain over 16 shards took a worker backend to 4.8 GB. Above this size each shard
/// gets its own task, run one after the other on the node's connection (a statement's
/// memory is freed before the next), and without JIT (`jit_off_wrapped`): LLVM's
/// optimisation passes grow faster than the expression, took about 1 GB and half a
/// minute for one shard's 20,000-term chain, and do not answer a cancel meanwhile.
pub const LARGE_STATEMENT_BYTES: usize = 8 * 1024;

impl MultiShardPlan {
    /// What one node runs for shards `ids` of the table (in the combine step, the
    /// worker query of `stage`): one statement per shard, or, with node tasks, one
    /// statement for all of them.
    pub fn tasks(&self, stage: Option<&CombineStage>, ids: &[ShardId]) -> Vec<String> {
        match self.node_sql(stage, ids) {
            Some(sql) => vec![sql],
            None => ids.iter().map(|id| self.shard_sql(stage, *id)).collect(),
        }
    }

    /// One shard's statement: the client's text (or the stage's worker query) over it.
    pub fn shard_sql(&self, stage: Option<&CombineStage>, id: ShardId) -> String {
        match stage {
            Some(CombineStage {
                worker_template: Some(t),
                ..
            }) => t.for_shard(id),
            Some(st) => st.worker_sql(&node_relation(&self.table.schema, &self.table.name, &[id])),
            None => self.template.for_shard(id),
        }
    }

    /// One node's statement over its shards `ids`, None where tasks stay per shard.
    /// Aggregates without GROUP BY (one row per shard) are computed shard by shard, as
    /// the `UNION ALL` of each shard's statement: PostgreSQL cannot push an aggregate
    /// below the append of a `UNION ALL` subquery, so over the shards' union every row
    /// would pass through the append (and a projection) before reaching the
    /// aggregate, about a quarter more CPU for `count(*)`. Other statements read the
    /// `UNION ALL` of the shards as their table (`node_relation`): grouped partials
    /// shard by shard could multiply the rows sent by the number of shards.
    pub fn node_sql(&self, stage: Option<&CombineStage>, ids: &[ShardId]) -> Option<String> {
        if !self.node_tasks
            || ids.is_empty()
            || stage.is_some_and(|st| st.worker_template.is_some())
        {
            return None;
        }
        let one_row_per_shard = match stage {
            Some(st) => st.one_row,
            None => matches!(self.shape, MultiShardShape::Aggregate { .. }),
        };
        if one_row_per_shard && ids.len() >= PER_SHARD_AGGREGATE_MIN_SHARDS {
            return Some(union_of_statements(
                ids.iter().map(|id| self.shard_sql(stage, *id)),
            ));
        }
        match stage {
            Some(st) => {
                Some(st.worker_sql(&node_relation(&self.table.schema, &self.table.name, ids)))
            }
            None => self.template.for_node(ids),
        }
    }
}

/// UPDATE or DELETE without a fixed distribution value: the statement runs on every
/// shard; row counts are added, RETURNING rows concatenated.
#[derive(Debug)]
pub struct ModifyPlan {
    pub table: Arc<DistTable>,
    pub template: ShardSqlTemplate,
    /// "UPDATE" or "DELETE" (the command tag).
    pub verb: &'static str,
    pub returning: bool,
}

fn refuse(what: &str) -> PgResult<Plan> {
    Ok(Plan::Unsupported(PgError::not_supported(format!(
        "pgshard does not support {what} in queries across shards of a distributed table yet"
    ))))
}

/// The relations of a join pushed down shard by shard (see `join.rs`): every
/// relation's edit and target, relation 0 being the table iterated over.
pub struct Joined {
    pub edits: Vec<Edit>,
    pub targets: Vec<RelTarget>,
}

/// A join of co-located / reference tables across all shards: the streamed shapes
/// (plain selections, count/sum/min/max without GROUP BY). Everything else is the
/// join's combine (`join/combine.rs`), tried when this refuses.
pub fn plan_select_joined(
    s: &protobuf::SelectStmt,
    text: &str,
    table: Arc<DistTable>,
    joined: Joined,
) -> PgResult<Plan> {
    if s.op != SetOperation::SetopNone as i32 {
        return refuse("UNION / INTERSECT / EXCEPT");
    }
    if !s.locking_clause.is_empty() {
        return refuse("FOR UPDATE / FOR SHARE");
    }
    if s.into_clause.is_some() {
        return refuse("SELECT INTO");
    }
    if s.limit_option == LimitOption::WithTies as i32 {
        return refuse("FETCH ... WITH TIES");
    }
    let simple = s.distinct_clause.is_empty()
        && s.group_clause.is_empty()
        && s.having_clause.is_none()
        && s.sort_clause.is_empty()
        && s.window_clause.is_empty();
    if simple {
        if let Some(p) = plan_streamed(
            s,
            text,
            joined.edits,
            Some(joined.targets),
            &table,
            None,
            false,
        )? {
            return Ok(p);
        }
    }
    refuse("joins other than plain selections and count/sum/min/max (no GROUP BY, ORDER BY or DISTINCT)")
}

pub fn plan_select(
    s: &protobuf::SelectStmt,
    text: &str,
    rel: &RelRef,
    rel_edit: Edit,
    table: Arc<DistTable>,
) -> PgResult<Plan> {
    if s.op != SetOperation::SetopNone as i32 {
        return refuse("UNION / INTERSECT / EXCEPT");
    }
    if !s.locking_clause.is_empty() {
        return refuse("FOR UPDATE / FOR SHARE");
    }
    if s.into_clause.is_some() {
        return refuse("SELECT INTO");
    }
    if s.from_clause.len() != 1 || !matches!(s.from_clause[0].node.as_ref(), Some(N::RangeVar(_))) {
        return refuse("joins or several FROM items");
    }
    if s.limit_option == LimitOption::WithTies as i32 {
        return refuse("FETCH ... WITH TIES");
    }
    let combine = match plan_combine(s, text, rel, &table, KNOWN_AGGREGATES) {
        Ok(c) => Some(Arc::new(c)),
        Err(what) => return refuse(&what),
    };
    let simple = s.distinct_clause.is_empty()
        && s.group_clause.is_empty()
        && s.having_clause.is_none()
        && s.sort_clause.is_empty()
        && s.window_clause.is_empty();
    // A large statement runs shard by shard: a node's task would repeat it once per
    // shard (`LARGE_STATEMENT_BYTES`).
    let node_tasks = text.len() <= LARGE_STATEMENT_BYTES && node_tasks_allowed(s);
    if simple {
        if let Some(p) = plan_streamed(
            s,
            text,
            vec![rel_edit],
            None,
            &table,
            combine.clone(),
            node_tasks,
        )? {
            return Ok(p);
        }
    }
    Ok(Plan::MultiShard(Arc::new(MultiShardPlan {
        template: ShardSqlTemplate::new(text, &table, vec![]),
        table,
        shape: MultiShardShape::Combine,
        limit: Bound::None,
        offset: 0,
        functions: combine_functions(s),
        combine,
        node_tasks,
    })))
}

/// Function names anywhere in the target list, HAVING and ORDER BY: a user-defined
/// aggregate among them rules partial aggregation out.
pub(crate) fn combine_functions(s: &protobuf::SelectStmt) -> Vec<String> {
    let mut out = Vec::new();
    let root = N::SelectStmt(Box::new(s.clone()));
    for (n, _, _, _) in root.nodes() {
        if let pg_query::NodeRef::FuncCall(fc) = n {
            if let Some(name) = func_name(fc) {
                if !KNOWN_AGGREGATES.contains(&name.as_str()) && !out.contains(&name) {
                    out.push(name);
                }
            }
        }
    }
    out
}

/// Plain selections and count/sum/min/max without GROUP BY: rows streamed from the
/// shards. None when the statement needs the combine step instead.
fn plan_streamed(
    s: &protobuf::SelectStmt,
    text: &str,
    rel_edits: Vec<Edit>,
    targets: Option<Vec<RelTarget>>,
    table: &Arc<DistTable>,
    combine: Option<Arc<CombinePlan>>,
    node_tasks: bool,
) -> PgResult<Option<Plan>> {
    let mut functions = Vec::new();
    let mut aggs = Vec::new();
    let mut names = Vec::new();
    let mut agg_args: Vec<Option<protobuf::Node>> = Vec::new();
    let mut plain_columns = 0;
    for t in &s.target_list {
        let Some(N::ResTarget(rt)) = t.node.as_ref() else {
            return Ok(None);
        };
        let Some(val) = rt.val.as_deref() else {
            return Ok(None);
        };
        match aggregate_of(val) {
            Some(Ok(kind)) => {
                aggs.push(kind);
                agg_args.push(match (kind, val.node.as_ref()) {
                    (AggKind::Min | AggKind::Max, Some(N::FuncCall(fc))) => {
                        fc.args.first().cloned()
                    }
                    _ => None,
                });
                names.push(if rt.name.is_empty() {
                    agg_name(kind).to_string()
                } else {
                    rt.name.clone()
                });
            }
            Some(Err(_)) => return Ok(None),
            None => {
                if !plain_expression(val, &mut functions) {
                    return Ok(None);
                }
                plain_columns += 1;
            }
        }
    }
    if !aggs.is_empty() && plain_columns > 0 {
        return Ok(None);
    }
    let Ok(limit) = bound(s.limit_count.as_deref()) else {
        return Ok(None);
    };
    let offset = match bound(s.limit_offset.as_deref()) {
        Ok(Bound::None) => 0,
        Ok(Bound::Const(n)) => n,
        _ => return Ok(None),
    };
    let mut edits = rel_edits;
    let shape = if aggs.is_empty() {
        // Each shard returns up to LIMIT+OFFSET rows and skips none.
        if let (Some(off), true) = (s.limit_offset.as_deref(), offset > 0) {
            edits.push(Edit::number(text, const_location(off), "0".into())?);
            match (limit, s.limit_count.as_deref()) {
                (Bound::Const(n), Some(lc)) => edits.push(Edit::number(
                    text,
                    const_location(lc),
                    n.saturating_add(offset).to_string(),
                )?),
                (Bound::None, _) => {}
                _ => return Ok(None),
            }
        }
        MultiShardShape::Plain
    } else {
        let collation_source = if aggs
            .iter()
            .any(|a| matches!(a, AggKind::Min | AggKind::Max))
        {
            match collation_source(s, &agg_args) {
                Some(q) => Some(q),
                // Arguments with parameters: the combine step reads them exactly.
                None => return Ok(None),
            }
        } else {
            None
        };
        MultiShardShape::Aggregate {
            aggs,
            names,
            collation_source,
        }
    };
    if !matches!(shape, MultiShardShape::Plain)
        && (s.limit_count.is_some() || s.limit_offset.is_some())
        && (offset > 0 || matches!(limit, Bound::Const(0) | Bound::Param(_)))
    {
        return Ok(None);
    }
    Ok(Some(Plan::MultiShard(Arc::new(MultiShardPlan {
        template: match targets {
            Some(t) => ShardSqlTemplate::with_relations(text, t, edits),
            None => ShardSqlTemplate::new(text, table, edits),
        },
        table: table.clone(),
        shape,
        limit,
        offset,
        functions,
        combine,
        node_tasks,
    }))))
}

/// `SELECT <arg or NULL per aggregate> FROM <the client's FROM> WHERE false`, deparsed
/// (see `MultiShardShape::Aggregate::collation_source`). None when an argument holds a
/// parameter (its type would be unknown there) or deparsing fails.
fn collation_source(s: &protobuf::SelectStmt, args: &[Option<protobuf::Node>]) -> Option<String> {
    let null = || protobuf::Node {
        node: Some(N::AConst(protobuf::AConst {
            isnull: true,
            val: None,
            location: -1,
        })),
    };
    let mut targets = Vec::new();
    for a in args {
        let val = match a {
            Some(a) => {
                let has_param = N::ResTarget(Box::new(protobuf::ResTarget {
                    val: Some(Box::new(a.clone())),
                    ..Default::default()
                }))
                .nodes()
                .iter()
                .any(|(n, _, _, _)| matches!(n, pg_query::NodeRef::ParamRef(_)));
                if has_param {
                    return None;
                }
                a.clone()
            }
            None => null(),
        };
        targets.push(protobuf::Node {
            node: Some(N::ResTarget(Box::new(protobuf::ResTarget {
                val: Some(Box::new(val)),
                location: -1,
                ..Default::default()
            }))),
        });
    }
    let probe = protobuf::SelectStmt {
        target_list: targets,
        from_clause: s.from_clause.clone(),
        where_clause: Some(Box::new(super::join::tree::bool_const(false))),
        limit_option: LimitOption::Default as i32,
        op: SetOperation::SetopNone as i32,
        ..Default::default()
    };
    N::SelectStmt(Box::new(probe))
        .deparse(Default::default())
        .ok()
}

/// System columns: they differ per shard and a UNION ALL subquery has none.
const SYSTEM_COLUMNS: &[&str] = &["ctid", "xmin", "xmax", "cmin", "cmax", "tableoid"];

/// Whether a single-table read may run as one task per node over the UNION ALL of
/// the node's shards instead of one task per shard. The subquery has the table's
/// columns under the same alias, so the answer is the same, except for what names
/// the relation itself: system columns (`ctid`, `tableoid`, ...), `ONLY` (no
/// subquery after it), `TABLESAMPLE`, and whole-row references (`t`, `f(t.*)`),
/// whose type would become `record`. Those keep one task per shard.
pub fn node_tasks_allowed(s: &protobuf::SelectStmt) -> bool {
    let Some(N::RangeVar(rv)) = s.from_clause.first().and_then(|f| f.node.as_ref()) else {
        return false;
    };
    if s.from_clause.len() != 1 || !rv.inh {
        return false;
    }
    let rel_name = rv
        .alias
        .as_ref()
        .map_or(rv.relname.as_str(), |a| a.aliasname.as_str());
    // `t.*` directly as an output column only expands to the columns.
    let top_stars = s
        .target_list
        .iter()
        .filter(|t| {
            matches!(t.node.as_ref(), Some(N::ResTarget(rt)) if rt.val.as_deref().is_some_and(|v| {
                matches!(v.node.as_ref(), Some(N::ColumnRef(c)) if c.fields.len() > 1
                    && matches!(c.fields.last().and_then(|f| f.node.as_ref()), Some(N::AStar(_))))
            }))
        })
        .count();
    let mut stars = 0;
    let root = N::SelectStmt(Box::new(s.clone()));
    for (n, _, _, _) in root.nodes() {
        match n {
            pg_query::NodeRef::RangeTableSample(_) => return false,
            pg_query::NodeRef::ColumnRef(c) => {
                let names = crate::sql::parse::string_items(&c.fields);
                let star = matches!(
                    c.fields.last().and_then(|f| f.node.as_ref()),
                    Some(N::AStar(_))
                );
                if star && c.fields.len() > 1 {
                    stars += 1;
                }
                match names.last() {
                    Some(last) if !star && SYSTEM_COLUMNS.contains(last) => return false,
                    Some(only) if !star && names.len() == 1 && *only == rel_name => return false,
                    _ => {}
                }
            }
            _ => {}
        }
    }
    stars == top_stars
}

fn agg_name(k: AggKind) -> &'static str {
    match k {
        AggKind::Count => "count",
        AggKind::Sum => "sum",
        AggKind::Min => "min",
        AggKind::Max => "max",
    }
}

fn const_location(n: &protobuf::Node) -> usize {
    match n.node.as_ref() {
        Some(N::AConst(c)) => c.location.max(0) as usize,
        _ => 0,
    }
}

fn bound(n: Option<&protobuf::Node>) -> PgResult<Bound> {
    let Some(n) = n else { return Ok(Bound::None) };
    match n.node.as_ref() {
        Some(N::AConst(c)) if c.isnull => Ok(Bound::None),
        Some(N::AConst(c)) => match c.val.as_ref() {
            Some(Val::Ival(i)) if i.ival >= 0 => Ok(Bound::Const(i.ival as i64)),
            Some(Val::Fval(f)) => f
                .fval
                .parse::<i64>()
                .ok()
                .filter(|v| *v >= 0)
                .map(Bound::Const)
                .ok_or_else(|| {
                    PgError::not_supported("LIMIT/OFFSET must be a non-negative integer here")
                }),
            _ => Err(PgError::not_supported(
                "LIMIT/OFFSET must be a non-negative integer here",
            )),
        },
        Some(N::ParamRef(p)) if p.number >= 1 => Ok(Bound::Param(p.number as usize - 1)),
        _ => Err(PgError::not_supported(
            "pgshard supports only constant LIMIT/OFFSET across shards",
        )),
    }
}

/// `Some(Ok(kind))` for an aggregate pgshard combines, `Some(Err)` for one it
/// cannot, `None` for anything that is not an aggregate call at the top.
fn aggregate_of(val: &protobuf::Node) -> Option<Result<AggKind, &'static str>> {
    let Some(N::FuncCall(fc)) = val.node.as_ref() else {
        return None;
    };
    let name = func_name(fc)?;
    let kind = match name.as_str() {
        "count" => AggKind::Count,
        "sum" => AggKind::Sum,
        "min" => AggKind::Min,
        "max" => AggKind::Max,
        _ => return None,
    };
    if fc.over.is_some() {
        return Some(Err("window functions"));
    }
    if fc.agg_distinct || fc.agg_filter.is_some() || !fc.agg_order.is_empty() || fc.agg_within_group
    {
        return Some(Err("DISTINCT, FILTER or ORDER BY inside aggregates"));
    }
    let arity_ok = if kind == AggKind::Count {
        fc.agg_star || fc.args.len() == 1
    } else {
        fc.args.len() == 1
    };
    if !arity_ok {
        return Some(Err("this aggregate call"));
    }
    if fc.args.iter().any(|a| contains_aggregate(a)) {
        return Some(Err("nested aggregates"));
    }
    Some(Ok(kind))
}

pub const KNOWN_AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "array_agg",
    "string_agg",
    "bool_and",
    "bool_or",
    "every",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "variance",
    "var_pop",
    "var_samp",
    "bit_and",
    "bit_or",
    "bit_xor",
    "json_agg",
    "jsonb_agg",
    "json_object_agg",
    "jsonb_object_agg",
    "xmlagg",
    "corr",
    "covar_pop",
    "covar_samp",
    "regr_count",
    "percentile_cont",
    "percentile_disc",
    "mode",
    "rank",
    "dense_rank",
    "row_number",
    "range_agg",
];

fn contains_aggregate(n: &protobuf::Node) -> bool {
    let mut fns = Vec::new();
    !plain_expression(n, &mut fns) || fns.iter().any(|f| KNOWN_AGGREGATES.contains(&f.as_str()))
}

/// Whether an expression is safe to compute row by row on each shard. Function names
/// are collected so the executor can rule out user-defined aggregates.
pub(crate) fn plain_expression(n: &protobuf::Node, functions: &mut Vec<String>) -> bool {
    let Some(node) = n.node.as_ref() else {
        return true;
    };
    let all = |nodes: &[protobuf::Node], f: &mut Vec<String>| {
        nodes.iter().all(|x| plain_expression(x, f))
    };
    let opt = |x: &Option<Box<protobuf::Node>>, f: &mut Vec<String>| {
        x.as_deref().map_or(true, |x| plain_expression(x, f))
    };
    match node {
        N::ColumnRef(_)
        | N::AConst(_)
        | N::ParamRef(_)
        | N::SqlvalueFunction(_)
        | N::AStar(_)
        | N::String(_) => true,
        N::AExpr(e) => opt(&e.lexpr, functions) && opt(&e.rexpr, functions),
        N::BoolExpr(b) => all(&b.args, functions),
        N::TypeCast(t) => opt(&t.arg, functions),
        N::CollateClause(c) => opt(&c.arg, functions),
        N::NullTest(t) => opt(&t.arg, functions),
        N::BooleanTest(t) => opt(&t.arg, functions),
        N::CoalesceExpr(c) => all(&c.args, functions),
        N::MinMaxExpr(m) => all(&m.args, functions),
        N::List(l) => all(&l.items, functions),
        N::AArrayExpr(a) => all(&a.elements, functions),
        N::RowExpr(r) => all(&r.args, functions),
        N::AIndirection(i) => opt(&i.arg, functions) && all(&i.indirection, functions),
        N::AIndices(i) => opt(&i.lidx, functions) && opt(&i.uidx, functions),
        N::CaseExpr(c) => {
            opt(&c.arg, functions) && all(&c.args, functions) && opt(&c.defresult, functions)
        }
        N::CaseWhen(w) => opt(&w.expr, functions) && opt(&w.result, functions),
        N::FuncCall(fc) => {
            if fc.over.is_some()
                || fc.agg_star
                || fc.agg_distinct
                || fc.agg_filter.is_some()
                || !fc.agg_order.is_empty()
            {
                return false;
            }
            match func_name(fc) {
                Some(name) if !KNOWN_AGGREGATES.contains(&name.as_str()) => {
                    functions.push(name);
                    all(&fc.args, functions)
                }
                _ => false,
            }
        }
        _ => false,
    }
}
