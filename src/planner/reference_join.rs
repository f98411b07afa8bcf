//! Reads of several reference tables and nothing else (joins of any kind, self-joins,
//! subqueries, set operations): every worker holds a placement of every reference table,
//! so the whole statement runs on one placement as the client wrote it, each table's name
//! replaced by its shard's, as Citus's router planner does. Before this step they were
//! planned recursively: each table pulled onto the coordinator node first.
//!
//! Declines (the later steps plan it) when a table's placement is missing from the
//! chosen worker, when the statement has a WITH anywhere (a CTE's name could hide a
//! table's, and recursive planning cuts CTEs on their own), locks rows (`FOR UPDATE`:
//! the same rows on every placement would have to be locked) or creates a table.

use super::router::RouterPlan;
use super::template::{Edit, RelTarget, ShardMap, ShardSqlTemplate};
use super::{Plan, PlanInput, Step, ValueSource};
use crate::catalog::PartitionMethod;
use crate::error::PgResult;
use pg_query::protobuf::{self, node::Node as N};
use pg_query::NodeRef;
use std::sync::Arc;

/// The ladder's step: a SELECT whose table references are all reference tables, two or
/// more (one is the router's), routed to the first one's placement.
pub(super) fn reference_tables_only(i: &PlanInput) -> PgResult<Step> {
    let N::SelectStmt(s) = i.node else {
        return Ok(Step::NotMine);
    };
    let refs = i.references();
    let all_reference = refs.rels.len() >= 2
        && refs.dist.len() == refs.rels.len()
        && refs
            .dist
            .iter()
            .all(|(_, t)| t.method == PartitionMethod::Reference && t.shards.len() == 1);
    if !all_reference || s.into_clause.is_some() || cte_or_lock(s, i.node) {
        return Ok(Step::NotMine);
    }
    let primary = refs.dist[0].1.clone();
    let Some(&group) = primary.shards[0].placement_groups.first() else {
        return Ok(Step::NotMine);
    };
    if !refs
        .dist
        .iter()
        .all(|(_, t)| t.shards[0].placement_groups.contains(&group))
    {
        return Ok(Step::NotMine);
    }
    let mut targets = Vec::new();
    let mut edits = Vec::new();
    for (slot, (at, t)) in refs.dist.iter().enumerate() {
        targets.push(RelTarget {
            schema: t.schema.clone(),
            table: t.name.clone(),
            map: match slot {
                0 => ShardMap::Same,
                _ => ShardMap::Fixed(t.shards[0].shard_id),
            },
        });
        edits.push(Edit::relation_of(&i.stmt.text, &refs.rels[*at], slot)?);
    }
    Ok(Step::Planned(Plan::Router(Arc::new(RouterPlan {
        template: ShardSqlTemplate::with_relations(&i.stmt.text, targets, edits),
        table: primary,
        // A reference table's only shard covers every hash.
        values: vec![ValueSource::Hash(0)],
        is_insert: false,
        read_only: true,
        value_exprs: Vec::new(),
        relation_span: None,
        add_alias: false,
    }))))
}

/// Whether the statement has a CTE or a locking clause anywhere.
fn cte_or_lock(s: &protobuf::SelectStmt, node: &N) -> bool {
    let own = |s: &protobuf::SelectStmt| s.with_clause.is_some() || !s.locking_clause.is_empty();
    own(s)
        || node.nodes().iter().any(|(n, _, _, _)| match n {
            NodeRef::SelectStmt(s) => own(s),
            NodeRef::WithClause(_) | NodeRef::CommonTableExpr(_) => true,
            _ => false,
        })
}

#[cfg(test)]
mod tests {
    use crate::planner::join::tests::plan_over_abcr;
    use crate::planner::Plan;

    fn routed_sql(sql: &str) -> Option<String> {
        match plan_over_abcr(sql) {
            Plan::Router(r) => Some(r.template.for_shard(r.table.shards[0].shard_id)),
            _ => None,
        }
    }

    #[test]
    fn reference_only_reads_run_on_one_placement() {
        assert_eq!(
            routed_sql("SELECT x.k, y.v FROM r x FULL JOIN r y ON x.v = y.v").as_deref(),
            Some(
                r#"SELECT x.k, y.v FROM "public"."r_400" x FULL JOIN "public"."r_400" y ON x.v = y.v"#
            )
        );
        assert!(
            routed_sql("SELECT k FROM r WHERE v IN (SELECT v FROM r x WHERE x.k = r.k)")
                .is_some_and(|s| s.contains(r#""public"."r_400" AS "r""#))
        );
        assert!(routed_sql("SELECT k FROM r UNION SELECT v FROM r").is_some());
    }

    #[test]
    fn declines_what_is_not_only_reference_tables() {
        // A distributed table, a local one, a CTE, a row lock: not this step's.
        for sql in [
            "SELECT * FROM r JOIN a ON a.v = r.v",
            "SELECT * FROM r JOIN local_t l ON l.v = r.v",
            "WITH x AS (SELECT * FROM r) SELECT * FROM x JOIN r ON x.k = r.k",
            "SELECT * FROM r x JOIN r y ON x.k = y.k FOR UPDATE",
            "SELECT * FROM r x WHERE x.k IN (SELECT k FROM r FOR SHARE)",
        ] {
            let p = plan_over_abcr(sql);
            assert!(!matches!(p, Plan::Router(_)), "{sql}: {p:?}");
        }
    }
}
