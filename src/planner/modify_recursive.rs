//! Recursive planning of UPDATE / DELETE (`UPDATE ... FROM`, `DELETE ... USING`,
//! subqueries anywhere) that no earlier step could push down as a whole, as Citus's
//! `recursive_planning.c` does for modifications. The parts the statement cannot run
//! where its target lives become subplans (`recursive::Cutter`, the SELECT path's own
//! cutting): its CTEs, its uncorrelated subqueries, then the tables themselves
//! (`SELECT * FROM t`, filtered by the WHERE conjuncts on that table alone).
//!
//! - A hash-distributed or reference target: everything but the target, reference
//!   tables and intermediate results is cut (local tables, other distributed tables,
//!   subqueries reading them, every CTE, uncorrelated subqueries calling functions,
//!   which PostgreSQL evaluates once); the results are *shipped* to the nodes the
//!   statement runs on, and it runs there shard by shard (routed to one shard when its
//!   WHERE fixes the target's distribution column) or, for a reference table, on every
//!   placement. On the workers an intermediate result is a table of its own,
//!   `pgshard_intermediate.pgs_intermediate_<pid>_<n>` (see `ShippedResult`).
//! - A local target (on the coordinator node): what reads distributed or reference
//!   tables is cut, and the statement runs on the coordinator node over the
//!   intermediate results there.
//!
//! The executor's half is `executor::session::shipped_results`.

use super::distvalue::find_equality;
use super::multishard::ModifyPlan;
use super::recursive::{
    deparse_node, is_intermediate_result, modifies, statement_of, Cutter, OuterRuns, SubPlan,
};
use super::router::RouterPlan;
use super::template::{Edit, RelTarget, ShardMap, ShardSqlTemplate};
use super::{Names, Plan};
use crate::catalog::{Catalog, DistTable, PartitionMethod};
use crate::error::{sqlstate, PgError, PgResult};
use crate::sql::parse::{full_relations, Statement};
use crate::sql::walk;
use pg_query::protobuf::{self, node::Node as N};
use std::sync::Arc;

/// The schema of intermediate results on the workers (made by pgshard on first use,
/// `CREATE` granted to every role).
pub const SHIPPED_SCHEMA: &str = "pgshard_intermediate";

/// An UPDATE / DELETE run in parts: its subplans into intermediate results first, the
/// shipped ones copied to the nodes the outer statement runs on, then the outer
/// statement.
#[derive(Debug, Clone)]
pub struct ModifyRecursivePlan {
    pub subplans: Vec<SubPlan>,
    /// The intermediate results the outer statement reads on the workers.
    pub shipped: Vec<ShippedResult>,
    /// The statement with every cut subtree replaced (on the workers: by the shipped
    /// tables' names).
    pub outer: Statement,
    /// `Router` (a write to one shard), `MultiShardModify`, `ReferenceWrite`, or
    /// `Local` (a local target; nothing shipped).
    pub outer_plan: Plan,
    /// "UPDATE" or "DELETE" (the command tag).
    pub verb: &'static str,
    pub returning: bool,
}

/// An intermediate result as the workers see it. It is an ordinary (unlogged) table,
/// not a temporary one: PostgreSQL cannot PREPARE a transaction that touched a
/// temporary table, and a write on several nodes is committed with 2PC. It is created
/// inside the session's transaction on that node (pgshard's own block in autocommit)
/// and dropped before it ends, so no other session ever sees it.
#[derive(Debug, Clone)]
pub struct ShippedResult {
    /// Index into `subplans`.
    pub subplan: usize,
    /// `pgshard_intermediate.pgs_intermediate_<pid>_<n>`, quoted as SQL.
    pub table: String,
}

fn shipped_name(coordinator_table: &str) -> String {
    let n = coordinator_table.trim_start_matches("pg_temp.pgs_intermediate_");
    format!(
        "{SHIPPED_SCHEMA}.pgs_intermediate_{}_{n}",
        std::process::id()
    )
}

type PlanText<'a> = &'a dyn Fn(&str) -> PgResult<Plan>;

/// Plans an UPDATE / DELETE in parts, or None when it cannot be (the earlier refusal
/// stands).
pub fn plan_modify_recursive(
    node: &N,
    catalog: &Catalog,
    names: &Names,
    plan_text: PlanText<'_>,
) -> Option<Plan> {
    let (target, verb, set_columns) = match node {
        N::UpdateStmt(u) => (
            u.relation.as_ref()?,
            "UPDATE",
            u.target_list
                .iter()
                .filter_map(|t| match t.node.as_ref() {
                    Some(N::ResTarget(rt)) => Some(rt.name.clone()),
                    _ => None,
                })
                .collect::<Vec<_>>(),
        ),
        N::DeleteStmt(d) => (d.relation.as_ref()?, "DELETE", Vec::new()),
        _ => return None,
    };
    let returning = match node {
        N::UpdateStmt(u) => &u.returning_clause,
        N::DeleteStmt(d) => &d.returning_clause,
        _ => return None,
    }
    .as_ref()
    .is_some_and(|r| !r.exprs.is_empty());
    if modifies(node) {
        // Modifying CTEs: not here.
        return None;
    }
    let schema = (!target.schemaname.is_empty()).then_some(target.schemaname.as_str());
    let table = names.resolve(catalog, schema, &target.relname).cloned();
    if let Some(col) = table.as_ref().and_then(|t| t.dist_column.as_ref()) {
        if set_columns.contains(&col.name) {
            return Some(Plan::Unsupported(PgError::new(
                sqlstate::FEATURE_NOT_SUPPORTED,
                format!(
                    "modifying the partition value of rows is not allowed (column \"{}\")",
                    col.name
                ),
            )));
        }
    }
    let runs = match table {
        Some(_) => OuterRuns::OnWorkers,
        None => OuterRuns::OnCoordinator,
    };
    let mut cx = Cutter::new(catalog, names, plan_text, runs);
    let mut tree = node.clone();
    cx.cut_ctes(&mut tree);
    cx.cut_subqueries(&mut tree);
    cx.pull_tables(&mut tree);
    if cx.failed || (cx.subplans.is_empty() && runs == OuterRuns::OnCoordinator) {
        return None;
    }
    let Some(table) = table else {
        // A local target: the statement runs on the coordinator node over the results.
        let outer = deparse_node(&tree).ok()?;
        return match plan_text(&outer) {
            Ok(Plan::Local) => Some(Plan::ModifyRecursive(Arc::new(ModifyRecursivePlan {
                subplans: std::mem::take(&mut cx.subplans),
                shipped: Vec::new(),
                outer: statement_of(outer),
                outer_plan: Plan::Local,
                verb,
                returning,
            }))),
            _ => None,
        };
    };
    if with_clause(&tree).is_some() {
        // A CTE that could not be cut (recursive, modifying) would run per shard.
        return None;
    }
    let subplans = std::mem::take(&mut cx.subplans);
    // The results the outer statement reads, under their names on the workers.
    let mut shipped: Vec<ShippedResult> = Vec::new();
    let mut rename = |n: &mut protobuf::Node, _: bool| -> bool {
        if let Some(N::RangeVar(rv)) = n.node.as_mut() {
            if is_intermediate_result(rv) {
                let coordinator_table = format!("pg_temp.{}", rv.relname);
                let Some(i) = subplans.iter().position(|s| s.table == coordinator_table) else {
                    return true;
                };
                let name = shipped_name(&coordinator_table);
                if !shipped.iter().any(|s| s.subplan == i) {
                    shipped.push(ShippedResult {
                        subplan: i,
                        table: name.clone(),
                    });
                }
                rv.schemaname = SHIPPED_SCHEMA.to_string();
                rv.relname = name
                    .trim_start_matches(&format!("{SHIPPED_SCHEMA}."))
                    .to_string();
            }
            return true;
        }
        false
    };
    walk::statement(&mut tree, false, &mut rename);
    let text = deparse_node(&tree).ok()?;
    let outer = statement_of(text);
    let outer_plan = match on_workers(&outer, &table, verb, names, catalog) {
        Ok(Some(p)) => p,
        Ok(None) | Err(_) => return None,
    };
    Some(Plan::ModifyRecursive(Arc::new(ModifyRecursivePlan {
        subplans,
        shipped,
        outer,
        outer_plan,
        verb,
        returning,
    })))
}

fn with_clause(n: &N) -> Option<&protobuf::WithClause> {
    match n {
        N::UpdateStmt(u) => u.with_clause.as_ref(),
        N::DeleteStmt(d) => d.with_clause.as_ref(),
        _ => None,
    }
}

/// The outer statement's plan on the workers: its target spliced with each shard (or
/// its reference table's one shard), every other reference table with its shard; the
/// statement reads nothing else but intermediate results. None when it does.
fn on_workers(
    outer: &Statement,
    table: &Arc<DistTable>,
    verb: &'static str,
    names: &Names,
    catalog: &Catalog,
) -> PgResult<Option<Plan>> {
    let Some(node) = outer.node.as_ref() else {
        return Ok(None);
    };
    let (target, where_clause, returning) = match node {
        N::UpdateStmt(u) => (
            u.relation.as_ref(),
            u.where_clause.as_deref(),
            &u.returning_clause,
        ),
        N::DeleteStmt(d) => (
            d.relation.as_ref(),
            d.where_clause.as_deref(),
            &d.returning_clause,
        ),
        _ => return Ok(None),
    };
    let Some(target) = target else {
        return Ok(None);
    };
    let returning = returning.as_ref().is_some_and(|r| !r.exprs.is_empty());
    let text = &outer.text;
    let mut targets = vec![RelTarget::primary(table)];
    let mut edits = Vec::new();
    for r in full_relations(node) {
        if r.location == target.location.max(0) as usize {
            edits.push(Edit::relation_of(text, &r, 0)?);
            continue;
        }
        let Some(t) = names.resolve(catalog, r.schema.as_deref(), &r.name) else {
            continue;
        };
        match (t.method, t.shards.as_slice()) {
            (PartitionMethod::Reference, [one]) => {
                edits.push(Edit::relation_of(text, &r, targets.len())?);
                targets.push(RelTarget {
                    schema: t.schema.clone(),
                    table: t.name.clone(),
                    map: ShardMap::Fixed(one.shard_id),
                });
            }
            _ => return Ok(None),
        }
    }
    if edits.is_empty() {
        return Ok(None);
    }
    let template = ShardSqlTemplate::with_relations(text, targets, edits);
    if table.method == PartitionMethod::Reference {
        let (functions, default_keyword) = crate::sql::parse::calls_and_defaults(node);
        return Ok(Some(Plan::ReferenceWrite {
            table: table.clone(),
            template,
            tag: verb.to_string(),
            functions,
            defaults: super::router::default_use(node, default_keyword),
            evaluate_once: None,
        }));
    }
    let Some(col) = table.dist_column.as_ref() else {
        return Ok(None);
    };
    let names_target = |q: &str| match &target.alias {
        Some(a) => q == a.aliasname,
        None => q == target.relname,
    };
    Ok(Some(
        match find_equality(where_clause, col, &names_target) {
            Some((value, _)) => Plan::Router(Arc::new(RouterPlan {
                table: table.clone(),
                template,
                values: vec![value],
                is_insert: false,
                read_only: false,
                value_exprs: Vec::new(),
                relation_span: None,
                add_alias: false,
            })),
            None => Plan::MultiShardModify(Arc::new(ModifyPlan {
                table: table.clone(),
                template,
                verb,
                returning,
            })),
        },
    ))
}

#[cfg(test)]
mod tests {
    use crate::planner::Plan;

    fn plan(sql: &str) -> Plan {
        crate::planner::join::tests::plan_over_abcr(sql)
    }

    fn parts(sql: &str) -> std::sync::Arc<super::ModifyRecursivePlan> {
        match plan(sql) {
            Plan::ModifyRecursive(p) => p,
            other => panic!("{sql}: not planned in parts: {other:?}"),
        }
    }

    #[test]
    fn local_tables_and_other_distributed_tables_are_shipped() {
        let p = parts("UPDATE a SET v = l.v FROM l WHERE a.k = l.k");
        assert_eq!(p.subplans.len(), 1);
        assert_eq!(p.subplans[0].stmt.text, "SELECT * FROM l");
        assert!(matches!(p.subplans[0].plan, Plan::Local));
        assert_eq!(p.shipped.len(), 1);
        let Plan::MultiShardModify(m) = &p.outer_plan else {
            panic!("not per shard: {:?}", p.outer_plan)
        };
        let shipped = &p.shipped[0].table;
        assert_eq!(
            m.template.for_shard(101),
            format!(
                r#"UPDATE "public"."a_101" AS "a" SET v = l.v FROM {shipped} l WHERE a.k = l.k"#
            )
        );
        // Not co-located: c is pulled, its filter first.
        let p =
            parts("DELETE FROM a USING c WHERE a.v = c.v AND c.v > 3 AND a.k = 5 RETURNING a.k");
        assert_eq!(p.subplans[0].stmt.text, "SELECT * FROM c WHERE c.v > 3");
        assert!(matches!(&p.outer_plan, Plan::Router(r) if !r.read_only));
    }

    #[test]
    fn subqueries_become_results_and_correlated_ones_read_pulled_tables() {
        let p = parts("UPDATE a SET v = 1 WHERE a.k IN (SELECT c.k FROM c WHERE c.v = 2)");
        assert_eq!(p.subplans.len(), 1);
        assert_eq!(p.subplans[0].stmt.text, "SELECT c.k FROM c WHERE c.v = 2");
        let p = parts("DELETE FROM a WHERE EXISTS (SELECT 1 FROM l WHERE l.k = a.k AND l.v = a.v)");
        assert_eq!(p.subplans[0].stmt.text, "SELECT * FROM l");
        // A reference table stays where it is.
        let p = parts("UPDATE a SET v = r.v FROM r, l WHERE a.v = r.v AND l.k = a.k");
        assert_eq!(p.subplans.len(), 1);
        let Plan::MultiShardModify(m) = &p.outer_plan else {
            panic!("not per shard")
        };
        assert!(m.template.for_shard(100).contains(r#""public"."r_400""#));
    }

    #[test]
    fn reference_and_local_targets() {
        let p = parts("UPDATE r SET v = a.v FROM a WHERE r.k = a.v");
        assert!(matches!(p.outer_plan, Plan::ReferenceWrite { .. }));
        assert_eq!(p.shipped.len(), 1);
        let p = parts("DELETE FROM l USING a WHERE l.k = a.k");
        assert!(matches!(p.outer_plan, Plan::Local));
        assert!(p.shipped.is_empty());
        assert!(p.outer.text.contains("pg_temp.pgs_intermediate_"));
    }

    #[test]
    fn reference_tables_alone_need_no_result() {
        let p = parts("UPDATE r SET v = x.v FROM r x WHERE x.k = r.v");
        assert!(p.subplans.is_empty() && p.shipped.is_empty());
        assert!(matches!(p.outer_plan, Plan::ReferenceWrite { .. }));
        let p = parts("DELETE FROM a WHERE a.v IN (SELECT r.v FROM r WHERE r.k > 2)");
        assert!(p.subplans.is_empty());
        assert!(matches!(p.outer_plan, Plan::MultiShardModify(_)));
    }

    #[test]
    fn the_distribution_column_is_not_set() {
        assert!(matches!(
            plan("UPDATE a SET k = l.k FROM l WHERE a.v = l.v"),
            Plan::Unsupported(e) if e.code == "0A000"
        ));
    }
}
