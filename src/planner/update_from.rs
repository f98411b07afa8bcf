//! `UPDATE t SET ... FROM u ... WHERE t.k = u.k` and `DELETE FROM t USING u ...` where
//! the target is a hash-distributed table and every other table is co-located with it
//! and joined on the distribution columns, or a reference table: matching rows share a
//! shard index, so the statement runs shard by shard (`UPDATE t_i ... FROM u_i`), as
//! `join::pair_shards` proves for joins. With a distribution value fixed it is routed
//! to one shard index; otherwise it runs on every shard (counts added, RETURNING rows
//! concatenated) in one distributed transaction. Other shapes are refused with 0A000
//! (they need the FROM side planned first, as recursive planning does).

use super::join::pair_shards;
use super::multishard::ModifyPlan;
use super::router::RouterPlan;
use super::template::ShardSqlTemplate;
use super::Plan;
use crate::catalog::{DistTable, PartitionMethod};
use crate::error::{sqlstate, PgError, PgResult};
use crate::sql::parse::RelRef;
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self};
use std::sync::Arc;

fn refuse(verb: &str, why: &str) -> PgResult<Plan> {
    Ok(Plan::Unsupported(PgError::not_supported(format!(
        "pgshard does not support this {verb} on distributed tables yet: {why}"
    ))))
}

/// The parts of an UPDATE ... FROM / DELETE ... USING this planner reads.
struct Shape<'a> {
    verb: &'static str,
    target: &'a protobuf::RangeVar,
    from_items: &'a [protobuf::Node],
    where_clause: Option<&'a protobuf::Node>,
    has_with: bool,
    returning: bool,
    /// The columns an UPDATE sets.
    set_columns: Vec<&'a str>,
}

fn shape(node: &N) -> Option<Shape<'_>> {
    match node {
        N::UpdateStmt(u) if !u.from_clause.is_empty() => Some(Shape {
            verb: "UPDATE",
            target: u.relation.as_ref()?,
            from_items: &u.from_clause,
            where_clause: u.where_clause.as_deref(),
            has_with: u.with_clause.is_some(),
            returning: u
                .returning_clause
                .as_ref()
                .is_some_and(|r| !r.exprs.is_empty()),
            set_columns: u
                .target_list
                .iter()
                .filter_map(|t| match t.node.as_ref() {
                    Some(N::ResTarget(rt)) => Some(rt.name.as_str()),
                    _ => None,
                })
                .collect(),
        }),
        N::DeleteStmt(d) if !d.using_clause.is_empty() => Some(Shape {
            verb: "DELETE",
            target: d.relation.as_ref()?,
            from_items: &d.using_clause,
            where_clause: d.where_clause.as_deref(),
            has_with: d.with_clause.is_some(),
            returning: d
                .returning_clause
                .as_ref()
                .is_some_and(|r| !r.exprs.is_empty()),
            set_columns: Vec::new(),
        }),
        _ => None,
    }
}

/// Whether this planner owns the statement: an UPDATE with FROM or a DELETE with USING.
pub fn applies(node: &N) -> bool {
    shape(node).is_some()
}

/// Plans an UPDATE ... FROM / DELETE ... USING; `rels` are the statement's references to
/// distributed tables in text order, `all_refs` the number of all its table references.
pub fn plan_update_from(
    node: &N,
    text: &str,
    rels: &[(RelRef, Arc<DistTable>)],
    all_refs: usize,
) -> PgResult<Plan> {
    let Some(s) = shape(node) else {
        return Ok(Plan::Unsupported(PgError::internal(
            "update_from planned a statement without FROM / USING",
        )));
    };
    let verb = s.verb;
    if s.has_with {
        return refuse(verb, "WITH");
    }
    if rels.len() != all_refs {
        return refuse(
            verb,
            "tables other than co-located distributed tables and reference tables (local tables, or tables in subqueries)",
        );
    }
    let target_at = s.target.location.max(0) as usize;
    let Some(target) = rels.iter().position(|(r, _)| r.location == target_at) else {
        return refuse(verb, "pgshard could not place the target table");
    };
    let table = rels[target].1.clone();
    if table.method != PartitionMethod::Hash {
        return refuse(
            verb,
            &format!(
                "the target \"{}\" is not a hash-distributed table",
                table.name
            ),
        );
    }
    if let Some(col) = &table.dist_column {
        if s.set_columns.contains(&col.name.as_str()) {
            return Ok(Plan::Unsupported(PgError::new(
                sqlstate::FEATURE_NOT_SUPPORTED,
                format!(
                    "modifying the partition value of rows is not allowed (column \"{}\")",
                    col.name
                ),
            )));
        }
    }
    let paired = match pair_shards(text, rels, s.from_items, Some(target), s.where_clause, true)? {
        Ok(p) => p,
        Err(reason) => return refuse(verb, &reason),
    };
    let primary = rels[paired.primary].1.clone();
    let template =
        ShardSqlTemplate::with_relations(text, paired.joined.targets, paired.joined.edits);
    Ok(match paired.fixed {
        Some(value) => Plan::Router(Arc::new(RouterPlan {
            template,
            table: primary,
            values: vec![value],
            is_insert: false,
            read_only: false,
            // The simple-protocol shape cache handles one relation only.
            value_exprs: Vec::new(),
            relation_span: None,
            add_alias: false,
        })),
        None => Plan::MultiShardModify(Arc::new(ModifyPlan {
            table: primary,
            template,
            verb,
            returning: s.returning,
        })),
    })
}

#[cfg(test)]
mod tests {
    use crate::planner::Plan;

    fn plan(sql: &str) -> Plan {
        crate::planner::join::tests::plan_over_abcr(sql)
    }

    /// This step refuses it: refused, or planned in parts by `modify_recursive`.
    fn refused(sql: &str) -> bool {
        matches!(plan(sql), Plan::Unsupported(e) if e.code == "0A000")
            || matches!(plan(sql), Plan::ModifyRecursive(_))
    }

    #[test]
    fn colocated_update_from_runs_shard_by_shard() {
        let Plan::MultiShardModify(m) = plan("UPDATE a SET v = b.v FROM b WHERE a.k = b.k") else {
            panic!("not per shard")
        };
        assert_eq!(
            m.template.for_shard(101),
            r#"UPDATE "public"."a_101" AS "a" SET v = b.v FROM "public"."b_201" AS "b" WHERE a.k = b.k"#
        );
        let Plan::MultiShardModify(m) =
            plan("DELETE FROM a x USING r WHERE x.v = r.v RETURNING x.k")
        else {
            panic!("not per shard")
        };
        assert!(m.returning);
        assert_eq!(
            m.template.for_shard(100),
            r#"DELETE FROM "public"."a_100" x USING "public"."r_400" AS "r" WHERE x.v = r.v RETURNING x.k"#
        );
        assert!(matches!(
            plan("UPDATE a SET v = 1 FROM b WHERE a.k = b.k AND b.k = 7"),
            Plan::Router(_)
        ));
    }

    #[test]
    fn other_shapes_are_refused() {
        assert!(refused("UPDATE a SET v = b.v FROM b WHERE a.v = b.k"));
        assert!(refused("UPDATE a SET v = c.v FROM c WHERE a.k = c.k"));
        assert!(refused("UPDATE r SET v = a.v FROM a WHERE r.v = a.k"));
        assert!(refused("UPDATE a SET k = b.k FROM b WHERE a.k = b.k"));
        assert!(refused(
            "DELETE FROM a USING (SELECT * FROM b) s WHERE a.k = s.k"
        ));
        assert!(refused(
            "WITH x AS (SELECT 1) UPDATE a SET v = b.v FROM b WHERE a.k = b.k"
        ));
    }
}
