//! The combine step of joins pushed down shard by shard (`mod.rs` proves the pairing):
//! a join with GROUP BY, HAVING, aggregates, windows, DISTINCT, ORDER BY or LIMIT runs
//! per shard index, and the coordinator combine (`aggregate.rs`'s stages, executed by
//! `executor/multishard.rs`) finishes it over the join's output rows:
//! - *whole*: grouped by a distribution column of a relation that no outer join nulls
//!   (a group's rows then all lie in one shard index), windows partitioned so, or no
//!   grouping at all: each shard index runs the whole statement (ORDER BY and LIMIT
//!   pushed as LIMIT+OFFSET), and the coordinator node only merges: DISTINCT again,
//!   ORDER BY, LIMIT / OFFSET;
//! - *partial aggregation*: decomposable aggregates grouped by plain columns: each
//!   shard index groups its join rows, the coordinator combines the partials with the
//!   single-table path's combine expressions;
//! - *raw rows*: the joined columns the statement reads (WHERE applied on the shards),
//!   and the client's statement over them on the coordinator node (always exact; also
//!   the fallback of user-defined aggregates).
//!
//! Worker queries and the coordinator's query are rewritten on the parse tree and
//! deparsed; the worker's relations are then spliced with their shards as in the
//! client's own text (`ShardSqlTemplate`).

use super::super::aggregate::{
    figure_colname, partial_column, partial_count_column, CombinePiece, CombinePlan, CombineStage,
    PartialKind,
};
use super::super::func_name;
use super::super::template::{Edit, RelTarget, ShardSqlTemplate};
use super::tree::{
    column, deparse, expr_key, int_const, is_aggregate, partials_table, string_node, target, visit,
    visit_read_parts,
};
use crate::catalog::{DistTable, PartitionMethod};
use crate::sql::parse::{full_relations, string_items, RelRef};
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self, LimitOption};
use std::sync::Arc;

/// The relations of a join proven to pair shard by shard, as the combine reads them.
pub struct JoinScope<'a> {
    /// Every table reference of the statement (subqueries' included), text order.
    pub rels: &'a [(RelRef, Arc<DistTable>)],
    /// The relations of the statement's own FROM clause (indexes into `rels`).
    pub outer: Vec<usize>,
    /// Relations on the nullable side of an outer join.
    pub nullable: Vec<bool>,
    /// `rels` index → the relation's slot in the template (the primary is slot 0).
    pub slots: Vec<usize>,
    /// The template's relations, slot order.
    pub targets: Vec<RelTarget>,
}

/// What a column reference of the statement names.
#[derive(Debug, Clone, PartialEq)]
enum Col {
    /// A column of relation `rels[i]`.
    Rel(usize, String),
    /// `*`, `t.*` or a whole-row reference.
    Row,
    /// Something else (an output column's name, a USING column, a typo).
    Unknown,
}

impl JoinScope<'_> {
    fn name_of(&self, i: usize) -> &str {
        let (r, _) = &self.rels[i];
        r.alias.as_deref().unwrap_or(&r.name)
    }

    fn resolve(&self, cr: &protobuf::ColumnRef) -> Col {
        if matches!(
            cr.fields.last().and_then(|f| f.node.as_ref()),
            Some(N::AStar(_))
        ) {
            return Col::Row;
        }
        let names = string_items(&cr.fields);
        let by_name = |q: &str, schema: Option<&str>| -> Vec<usize> {
            self.outer
                .iter()
                .copied()
                .filter(|i| {
                    let (r, _) = &self.rels[*i];
                    self.name_of(*i) == q
                        && schema.map_or(true, |s| {
                            r.alias.is_none() && r.schema.as_deref() == Some(s)
                        })
                })
                .collect()
        };
        let column_of = |hits: Vec<usize>, col: &str| match hits.as_slice() {
            [i] if self.rels[*i].1.columns.iter().any(|c| c == col) => {
                Col::Rel(*i, col.to_string())
            }
            _ => Col::Unknown,
        };
        match names.as_slice() {
            [col] => {
                let hits: Vec<usize> = self
                    .outer
                    .iter()
                    .copied()
                    .filter(|i| self.rels[*i].1.columns.iter().any(|c| c == col))
                    .collect();
                if hits.is_empty() && !by_name(col, None).is_empty() {
                    return Col::Row;
                }
                column_of(hits, col)
            }
            [q, col] => column_of(by_name(q, None), col),
            [s, q, col] => column_of(by_name(q, Some(s)), col),
            _ => Col::Unknown,
        }
    }

    /// A distribution column of a hash table that no outer join nulls: its rows with
    /// one value all lie in one shard index.
    fn is_safe_dist_column(&self, n: &protobuf::Node) -> bool {
        let Some(N::ColumnRef(cr)) = n.node.as_ref() else {
            return false;
        };
        match self.resolve(cr) {
            Col::Rel(i, col) => {
                let t = &self.rels[i].1;
                t.method == PartitionMethod::Hash
                    && !self.nullable[i]
                    && t.dist_column.as_ref().is_some_and(|d| d.name == col)
            }
            _ => false,
        }
    }
}

/// The output column names PostgreSQL gives the statement's target list.
fn output_names(s: &protobuf::SelectStmt) -> Vec<String> {
    s.target_list
        .iter()
        .map(|t| match t.node.as_ref() {
            Some(N::ResTarget(rt)) if !rt.name.is_empty() => rt.name.clone(),
            Some(N::ResTarget(rt)) => rt
                .val
                .as_deref()
                .and_then(|v| figure_colname(v).0)
                .unwrap_or_else(|| "?column?".into()),
            _ => "?column?".into(),
        })
        .collect()
}

/// A bare column name in ORDER BY naming an output column (PostgreSQL prefers the
/// output column there).
fn output_named(n: &protobuf::Node, outputs: &[String]) -> Option<usize> {
    let Some(N::ColumnRef(cr)) = n.node.as_ref() else {
        return None;
    };
    match string_items(&cr.fields).as_slice() {
        [name] if cr.fields.len() == 1 => outputs.iter().position(|o| o == name),
        _ => None,
    }
}

/// [`visit`] over what the coordinator's query reads ([`visit_read_parts`]) and its
/// ORDER BY keys, except a key naming an output column (it stays so).
fn visit_coordinator_parts(
    coord: &mut protobuf::SelectStmt,
    outputs: &[String],
    rewrite: &mut dyn FnMut(&mut protobuf::Node, bool) -> bool,
) {
    visit_read_parts(coord, false, rewrite);
    for item in coord.sort_clause.iter_mut() {
        if let Some(N::SortBy(sb)) = item.node.as_mut() {
            if sb
                .node
                .as_deref()
                .is_some_and(|k| output_named(k, outputs).is_some())
            {
                continue;
            }
        }
        visit(item, false, rewrite);
    }
}

/// The worker query as a template over the shards, and its shape over the shells.
fn worker_stage(
    worker: &protobuf::SelectStmt,
    sc: &JoinScope,
) -> Result<(ShardSqlTemplate, String), String> {
    let text = deparse(worker)?;
    let tree = crate::sql::parse::first_tree(&text, "a join's worker query")
        .map_err(|e| e.message.clone())?;
    let found = full_relations(tree.node.as_ref().ok_or("an empty worker query")?);
    let mut original: Vec<usize> = (0..sc.rels.len()).collect();
    original.sort_by_key(|i| sc.rels[*i].0.location);
    if found.len() != original.len() {
        return Err("a join pgshard could not rewrite".into());
    }
    let mut edits = Vec::new();
    for (new, &i) in found.iter().zip(&original) {
        let old = &sc.rels[i].0;
        if new.name != old.name || new.alias != old.alias || new.schema != old.schema {
            return Err("a join pgshard could not rewrite".into());
        }
        edits.push(Edit::relation_of(&text, new, sc.slots[i]).map_err(|e| e.message.clone())?);
    }
    let template = ShardSqlTemplate::with_relations(&text, sc.targets.clone(), edits);
    let shape = template.for_shells();
    Ok((template, shape))
}

fn stage(
    worker: &protobuf::SelectStmt,
    combine: Vec<CombinePiece>,
    partials: Vec<PartialKind>,
    raw_rows: bool,
    sc: &JoinScope,
) -> Result<CombineStage, String> {
    let (template, shape) = worker_stage(worker, sc)?;
    Ok(CombineStage {
        worker: vec![],
        shape,
        combine,
        partials,
        raw_rows,
        key_of: None,
        one_row: false,
        worker_template: Some(template),
    })
}

/// Plans the combine of a join (see the module comment). Err is the reason it
/// cannot be done (the statement then goes on down the ladder).
pub fn plan(
    s: &protobuf::SelectStmt,
    sc: &JoinScope,
    calls_functions: bool,
) -> Result<CombinePlan, String> {
    if !s.locking_clause.is_empty() || s.into_clause.is_some() {
        return Err("FOR UPDATE or SELECT INTO".into());
    }
    if s.limit_option == LimitOption::WithTies as i32 {
        return Err("FETCH ... WITH TIES".into());
    }
    let root = N::SelectStmt(Box::new(s.clone()));
    for (n, _, _, _) in root.nodes() {
        match n {
            pg_query::NodeRef::GroupingSet(_) => return Err("GROUPING SETS, CUBE or ROLLUP".into()),
            pg_query::NodeRef::RangeVar(rv)
                if rv.alias.as_ref().is_some_and(|a| !a.colnames.is_empty()) =>
            {
                return Err("column aliases of a table".into())
            }
            _ => {}
        }
    }
    let whole = whole_stage(s, sc)?;
    let raw = raw_stage(s, sc);
    match whole {
        Some((w, grouped)) => {
            // A user-defined aggregate (only known at run time) takes the raw stage:
            // where there is none, only a statement grouped by the distribution
            // column computes it exactly per shard index.
            let raw = match raw {
                Ok(r) => r,
                Err(_) if grouped || !calls_functions => w.clone(),
                Err(e) => return Err(e),
            };
            Ok(CombinePlan {
                partial: Some(w),
                raw,
            })
        }
        None => {
            let raw = raw?;
            Ok(CombinePlan {
                partial: partial_stage(s, sc)?,
                raw,
            })
        }
    }
}

/// The effective PARTITION BY of a window.
fn window_partition<'a>(
    s: &'a protobuf::SelectStmt,
    w: &'a protobuf::WindowDef,
    depth: usize,
) -> Option<&'a [protobuf::Node]> {
    if !w.partition_clause.is_empty() || depth > 8 {
        return Some(&w.partition_clause);
    }
    let named = if !w.refname.is_empty() {
        &w.refname
    } else {
        &w.name
    };
    if named.is_empty() {
        return Some(&w.partition_clause);
    }
    let def = s.window_clause.iter().find_map(|x| match x.node.as_ref() {
        Some(N::WindowDef(d)) if &d.name == named && !std::ptr::eq(d.as_ref(), w) => Some(d),
        _ => None,
    })?;
    window_partition(s, def, depth + 1)
}

/// The whole statement per shard index, the coordinator node merging. None when the
/// statement's groups or windows may span shard indexes; also whether it is grouped.
fn whole_stage(
    s: &protobuf::SelectStmt,
    sc: &JoinScope,
) -> Result<Option<(CombineStage, bool)>, String> {
    let mut probe = s.clone();
    let mut has_agg = false;
    let mut windows: Vec<protobuf::WindowDef> = Vec::new();
    let mut rows = false;
    visit_read_parts(&mut probe, true, &mut |n, inside| {
        match n.node.as_ref() {
            Some(N::FuncCall(fc)) if !inside && is_aggregate(fc) => has_agg = true,
            Some(N::FuncCall(fc)) => {
                if let Some(w) = fc.over.as_deref() {
                    windows.push(w.clone());
                }
            }
            Some(N::ColumnRef(cr)) if sc.resolve(cr) == Col::Row => rows = true,
            _ => {}
        }
        false
    });
    if rows {
        return Ok(None);
    }
    let grouped = has_agg || !s.group_clause.is_empty() || s.having_clause.is_some();
    let outputs = output_names(s);
    if grouped {
        let by_dist = s.group_clause.iter().any(|g| match g.node.as_ref() {
            Some(N::AConst(c)) => match c.val.as_ref() {
                Some(protobuf::a_const::Val::Ival(i)) => s
                    .target_list
                    .get((i.ival as usize).wrapping_sub(1))
                    .and_then(|t| match t.node.as_ref() {
                        Some(N::ResTarget(rt)) => rt.val.as_deref(),
                        _ => None,
                    })
                    .is_some_and(|v| sc.is_safe_dist_column(v)),
                _ => false,
            },
            _ => sc.is_safe_dist_column(g),
        });
        if !by_dist {
            return Ok(None);
        }
    }
    for w in &windows {
        let part = window_partition(s, w, 0).unwrap_or(&[]);
        if !part.iter().any(|p| sc.is_safe_dist_column(p)) {
            return Ok(None);
        }
    }
    let distinct = !s.distinct_clause.is_empty();
    if s.distinct_clause.iter().any(|d| d.node.is_some()) {
        return Ok(None); // DISTINCT ON
    }
    // The worker: the client's statement with its outputs renamed pgs_c<i>, ORDER BY
    // expressions that are no output added as pgs_o<j>.
    let mut worker = s.clone();
    for (i, t) in worker.target_list.iter_mut().enumerate() {
        match t.node.as_mut() {
            Some(N::ResTarget(rt)) => rt.name = format!("pgs_c{i}"),
            _ => return Ok(None),
        }
    }
    // GROUP BY an output column's name: its position (the name is renamed).
    for g in worker.group_clause.iter_mut() {
        if let Some(N::ColumnRef(cr)) = g.node.as_ref() {
            if sc.resolve(cr) == Col::Unknown {
                if let Some(i) = output_named(g, &outputs) {
                    *g = int_const(i as i32 + 1);
                }
            }
        }
    }
    let target_keys: Vec<String> = s
        .target_list
        .iter()
        .map(|t| match t.node.as_ref() {
            Some(N::ResTarget(rt)) => rt.val.as_deref().map(expr_key).unwrap_or_default(),
            _ => String::new(),
        })
        .collect();
    let mut coord_sort = Vec::new();
    let mut worker_sort = Vec::new();
    let mut hidden = 0;
    for item in &s.sort_clause {
        let Some(N::SortBy(sb)) = item.node.as_ref() else {
            return Ok(None);
        };
        let Some(key) = sb.node.as_deref() else {
            return Ok(None);
        };
        let position = match key.node.as_ref() {
            Some(N::AConst(c)) => match c.val.as_ref() {
                Some(protobuf::a_const::Val::Ival(i))
                    if i.ival >= 1 && (i.ival as usize) <= outputs.len() =>
                {
                    Some(i.ival as usize - 1)
                }
                _ => return Ok(None),
            },
            _ => output_named(key, &outputs).or_else(|| {
                let k = expr_key(key);
                target_keys.iter().position(|t| *t == k)
            }),
        };
        let name = match position {
            Some(i) => format!("pgs_c{i}"),
            None if distinct => return Ok(None),
            None => {
                let name = format!("pgs_o{hidden}");
                hidden += 1;
                worker.target_list.push(target(key.clone(), &name));
                name
            }
        };
        let mut by = sb.clone();
        by.node = Some(Box::new(column(&[&name])));
        worker_sort.push(protobuf::Node {
            node: Some(N::SortBy(by.clone())),
        });
        coord_sort.push(protobuf::Node {
            node: Some(N::SortBy(by)),
        });
    }
    // LIMIT (+ OFFSET) on each shard index, ordered as the client's; the coordinator
    // node applies both again.
    worker.sort_clause = Vec::new();
    worker.limit_offset = None;
    worker.limit_count = None;
    worker.limit_option = LimitOption::Default as i32;
    let pushable =
        |n: &Option<Box<protobuf::Node>>| match n.as_deref().and_then(|x| x.node.as_ref()) {
            None => Some(None),
            Some(N::AConst(c))
                if !c.isnull && matches!(c.val, Some(protobuf::a_const::Val::Ival(_))) =>
            {
                Some(Some(n.as_deref().cloned().unwrap_or_default()))
            }
            Some(N::ParamRef(_)) => Some(Some(n.as_deref().cloned().unwrap_or_default())),
            _ => None,
        };
    if let (Some(Some(limit)), Some(offset)) = (pushable(&s.limit_count), pushable(&s.limit_offset))
    {
        worker.sort_clause = worker_sort;
        worker.limit_option = LimitOption::Count as i32;
        worker.limit_count = Some(Box::new(match offset {
            None => limit,
            Some(off) => plus_int8(limit, off),
        }));
    }
    let coordinator = protobuf::SelectStmt {
        distinct_clause: s.distinct_clause.clone(),
        target_list: outputs
            .iter()
            .enumerate()
            .map(|(i, name)| target(column(&[&format!("pgs_c{i}")]), name))
            .collect(),
        from_clause: vec![partials_table()],
        sort_clause: coord_sort,
        limit_count: s.limit_count.clone(),
        limit_offset: s.limit_offset.clone(),
        limit_option: s.limit_option,
        op: protobuf::SetOperation::SetopNone as i32,
        ..Default::default()
    };
    let combine = vec![CombinePiece::Text(deparse(&coordinator)?)];
    Ok(Some((stage(&worker, combine, vec![], false, sc)?, grouped)))
}

/// `(a)::int8 + (b)::int8`.
fn plus_int8(a: protobuf::Node, b: protobuf::Node) -> protobuf::Node {
    let cast = |x: protobuf::Node| protobuf::Node {
        node: Some(N::TypeCast(Box::new(protobuf::TypeCast {
            arg: Some(Box::new(x)),
            type_name: Some(protobuf::TypeName {
                names: vec![string_node("pg_catalog"), string_node("int8")],
                typemod: -1,
                location: -1,
                ..Default::default()
            }),
            location: -1,
        }))),
    };
    protobuf::Node {
        node: Some(N::AExpr(Box::new(protobuf::AExpr {
            kind: protobuf::AExprKind::AexprOp as i32,
            name: vec![string_node("+")],
            lexpr: Some(Box::new(cast(a))),
            rexpr: Some(Box::new(cast(b))),
            location: -1,
            ..Default::default()
        }))),
    }
}

/// The coordinator's statement: the client's, reading the temporary table, each
/// output keeping its name.
fn coordinator_statement(s: &protobuf::SelectStmt, outputs: &[String]) -> protobuf::SelectStmt {
    let mut c = s.clone();
    c.from_clause = vec![partials_table()];
    c.where_clause = None;
    for (t, name) in c.target_list.iter_mut().zip(outputs) {
        if let Some(N::ResTarget(rt)) = t.node.as_mut() {
            rt.name = name.clone();
        }
    }
    c
}

/// Every column the statement reads as raw rows (see the module comment).
fn raw_stage(s: &protobuf::SelectStmt, sc: &JoinScope) -> Result<CombineStage, String> {
    let outputs = output_names(s);
    let mut coord = coordinator_statement(s, &outputs);
    let mut columns: Vec<(usize, String)> = Vec::new();
    let mut failure: Option<String> = None;
    let grouped_keys: Vec<Col> = s
        .group_clause
        .iter()
        .filter_map(|g| match g.node.as_ref() {
            Some(N::ColumnRef(cr)) => Some(sc.resolve(cr)),
            _ => None,
        })
        .collect();
    let grouped = !s.group_clause.is_empty();
    let mut rewrite = |n: &mut protobuf::Node, inside: bool| -> bool {
        match n.node.as_ref() {
            Some(N::SubLink(_)) => failure = Some("subqueries outside WHERE".into()),
            Some(N::ColumnRef(cr)) => match sc.resolve(cr) {
                Col::Rel(i, col) => {
                    // PostgreSQL's functional dependency (GROUP BY a key, other columns
                    // selected) does not hold over the temporary table.
                    if grouped && !inside && !grouped_keys.contains(&Col::Rel(i, col.clone())) {
                        failure = Some("columns outside GROUP BY".into());
                    }
                    let k = match columns.iter().position(|c| c.0 == i && c.1 == col) {
                        Some(k) => k,
                        None => {
                            columns.push((i, col));
                            columns.len() - 1
                        }
                    };
                    *n = column(&[&format!("pgs_r{k}")]);
                }
                Col::Row => failure = Some("whole rows or *".into()),
                Col::Unknown => {
                    if output_named(n, &outputs).is_none() {
                        failure = Some("a column pgshard could not place".into());
                    }
                }
            },
            _ => {}
        }
        false
    };
    visit_coordinator_parts(&mut coord, &outputs, &mut rewrite);
    if let Some(f) = failure {
        return Err(f);
    }
    let mut worker = s.clone();
    worker.target_list = columns
        .iter()
        .enumerate()
        .map(|(k, (i, col))| target(column(&[sc.name_of(*i), col]), &format!("pgs_r{k}")))
        .collect();
    if worker.target_list.is_empty() {
        worker.target_list.push(target(int_const(1), "pgs_r0"));
    }
    clear_above_where(&mut worker);
    let combine = vec![CombinePiece::Text(deparse(&coord)?)];
    stage(&worker, combine, vec![], true, sc)
}

fn clear_above_where(w: &mut protobuf::SelectStmt) {
    w.group_clause = Vec::new();
    w.having_clause = None;
    w.sort_clause = Vec::new();
    w.distinct_clause = Vec::new();
    w.window_clause = Vec::new();
    w.limit_count = None;
    w.limit_offset = None;
    w.limit_option = LimitOption::Default as i32;
}

const MARKER: &str = "pgs_combine_marker_";

/// Partial aggregation per shard index (see the module comment). None when an
/// aggregate or a grouping key does not decompose.
fn partial_stage(s: &protobuf::SelectStmt, sc: &JoinScope) -> Result<Option<CombineStage>, String> {
    if !s.window_clause.is_empty() {
        return Ok(None);
    }
    // GROUP BY plain columns of the join's relations.
    let mut groups: Vec<(usize, String)> = Vec::new();
    for g in &s.group_clause {
        let Some(N::ColumnRef(cr)) = g.node.as_ref() else {
            return Ok(None);
        };
        match sc.resolve(cr) {
            Col::Rel(i, col) if !groups.contains(&(i, col.clone())) => groups.push((i, col)),
            Col::Rel(..) => {}
            _ => return Ok(None),
        }
    }
    let outputs = output_names(s);
    let mut coord = coordinator_statement(s, &outputs);
    let mut calls: Vec<(String, protobuf::FuncCall)> = Vec::new();
    let mut ok = true;
    let mut rewrite = |n: &mut protobuf::Node, _inside: bool| -> bool {
        match n.node.as_ref() {
            Some(N::SubLink(_)) => ok = false,
            Some(N::FuncCall(fc)) if fc.over.is_some() => ok = false,
            Some(N::FuncCall(fc)) if is_aggregate(fc) => {
                let key = expr_key(n);
                let i = match calls.iter().position(|c| c.0 == key) {
                    Some(i) => i,
                    None => {
                        calls.push((key, (**fc).clone()));
                        calls.len() - 1
                    }
                };
                *n = protobuf::Node {
                    node: Some(N::FuncCall(Box::new(protobuf::FuncCall {
                        funcname: vec![string_node(&format!("{MARKER}{i}"))],
                        location: -1,
                        ..Default::default()
                    }))),
                };
                return true;
            }
            Some(N::ColumnRef(cr)) => match sc.resolve(cr) {
                Col::Rel(i, col) => match groups.iter().position(|g| g.0 == i && g.1 == col) {
                    Some(k) => *n = column(&[&format!("pgs_g{k}")]),
                    None => ok = false,
                },
                Col::Row => ok = false,
                Col::Unknown => ok &= output_named(n, &outputs).is_some(),
            },
            _ => {}
        }
        false
    };
    visit_coordinator_parts(&mut coord, &outputs, &mut rewrite);
    if !ok || (calls.is_empty() && groups.is_empty()) {
        return Ok(None);
    }
    // The worker: group keys and each aggregate's partial.
    let mut list: Vec<protobuf::Node> = groups
        .iter()
        .enumerate()
        .map(|(k, (i, col))| target(column(&[sc.name_of(*i), col]), &format!("pgs_g{k}")))
        .collect();
    let mut kinds = Vec::new();
    for (i, (_, fc)) in calls.iter().enumerate() {
        let Some(kind) = func_name(fc).and_then(|n| PartialKind::of(&n)) else {
            return Ok(None);
        };
        if fc.agg_within_group
            || !fc.agg_order.is_empty()
            || (fc.agg_distinct && !kind.idempotent())
        {
            return Ok(None);
        }
        let args_ok = if kind == PartialKind::Count {
            fc.agg_star || fc.args.len() == 1
        } else {
            fc.args.len() == 1
        };
        if !args_ok {
            return Ok(None);
        }
        let call = |name: &str| {
            let mut c = fc.clone();
            c.funcname = vec![string_node("pg_catalog"), string_node(name)];
            protobuf::Node {
                node: Some(N::FuncCall(Box::new(c))),
            }
        };
        match kind {
            PartialKind::Avg => {
                list.push(target(call("sum"), &partial_column(i)));
                list.push(target(call("count"), &partial_count_column(i)));
            }
            _ => list.push(target(
                protobuf::Node {
                    node: Some(N::FuncCall(Box::new(fc.clone()))),
                },
                &partial_column(i),
            )),
        }
        kinds.push(kind);
    }
    let mut worker = s.clone();
    clear_above_where(&mut worker);
    worker.target_list = list;
    worker.group_clause = groups
        .iter()
        .map(|(i, col)| column(&[sc.name_of(*i), col]))
        .collect();
    // The coordinator's text, each marker an aggregate's combine.
    let text = deparse(&coord)?;
    let mut combine = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find(MARKER) {
        combine.push(CombinePiece::Text(rest[..at].to_string()));
        let after = &rest[at + MARKER.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let i: usize = after[..digits].parse().map_err(|_| "a marker")?;
        let after = &after[digits..];
        let after = after.strip_prefix("()").ok_or("a marker")?;
        combine.push(CombinePiece::Agg(i));
        rest = after;
    }
    combine.push(CombinePiece::Text(rest.to_string()));
    let mut st = stage(&worker, combine, kinds, false, sc)?;
    st.one_row = groups.is_empty();
    Ok(Some(st))
}
