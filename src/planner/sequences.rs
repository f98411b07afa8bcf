//! Writes on distributed and reference tables with columns filled from a sequence
//! (`serial`, `bigserial`, `smallserial`, identity columns, `DEFAULT nextval('s')`).
//! The sequence lives on the coordinator node only (the shards' columns have no
//! default): an INSERT that fills such a column, or that PostgreSQL's identity rules
//! decide (`OVERRIDING ...`, a value given for a `GENERATED ALWAYS` column), runs
//! through the table's shell on the client's own coordinator-node connection
//! (`insert_select::plan_via_coordinator`), so PostgreSQL computes every default and
//! raises its own errors, and `currval` / `lastval` are the session's. An UPDATE
//! setting such a column to DEFAULT is refused; one giving a `GENERATED ALWAYS` column
//! a value gets PostgreSQL's error.

use super::{PlanInput, Step};
use crate::catalog::{DistTable, SequenceColumn};
use crate::error::{sqlstate, PgError, PgResult};
use pg_query::protobuf::{self, node::Node as N, OverridingKind};
use std::sync::Arc;

/// The ladder step: INSERTs filling a sequence column through the coordinator node,
/// UPDATEs of sequence columns checked; everything else declines.
pub(super) fn step(i: &PlanInput) -> PgResult<Step> {
    let (relation, target_list) = match i.node {
        N::InsertStmt(ins) => (ins.relation.as_ref(), None),
        N::UpdateStmt(u) => (u.relation.as_ref(), Some(&u.target_list)),
        _ => return Ok(Step::NotMine),
    };
    let Some(table) = target(i, relation) else {
        return Ok(Step::NotMine);
    };
    match (i.node, target_list) {
        (N::InsertStmt(ins), _) => {
            if !insert_needs_shell(i.node, ins, &table) {
                return Ok(Step::NotMine);
            }
            let reads_distributed = i.references().dist.len() > 1;
            Ok(Step::Planned(super::insert_select::plan_via_coordinator(
                ins,
                &i.stmt.text,
                table,
                reads_distributed,
            )?))
        }
        (_, Some(targets)) => match update_check(targets, &table) {
            Some(e) => Ok(Step::Planned(super::Plan::Unsupported(e))),
            None => Ok(Step::NotMine),
        },
        _ => Ok(Step::NotMine),
    }
}

/// The write's target when it is a distributed or reference table with sequence
/// columns.
fn target(i: &PlanInput, relation: Option<&protobuf::RangeVar>) -> Option<Arc<DistTable>> {
    let at = relation?.location.max(0) as usize;
    let refs = i.references();
    refs.dist
        .iter()
        .find(|(r, _)| refs.rels[*r].location == at)
        .map(|(_, t)| t.clone())
        .filter(|t| !t.sequence_columns.is_empty())
}

/// Whether the INSERT fills a sequence column with its default, or leaves a decision
/// to PostgreSQL's identity rules.
fn insert_needs_shell(node: &N, ins: &protobuf::InsertStmt, table: &DistTable) -> bool {
    if ins.r#override != OverridingKind::OverridingNotSet as i32 {
        return true;
    }
    let (_, keyword) = crate::sql::parse::calls_and_defaults(node);
    let uses = super::router::default_use(node, keyword);
    let position = |c: &SequenceColumn| table.columns.iter().position(|n| *n == c.name);
    let fills = |c: &SequenceColumn| match &uses {
        super::DefaultUse::Nothing => false,
        super::DefaultUse::Any => true,
        super::DefaultUse::AllExcept(given) => !given.contains(&c.name),
        super::DefaultUse::AllAfter(k) => position(c).is_some_and(|p| p >= *k),
    };
    // A GENERATED ALWAYS column given a value: PostgreSQL's 428C9 (ON CONFLICT DO
    // UPDATE setting one too).
    let given_always = table.sequence_columns.iter().any(|c| c.always && !fills(c));
    let conflict_sets_always = ins
        .on_conflict_clause
        .as_ref()
        .is_some_and(|oc| !oc.target_list.is_empty())
        && table.sequence_columns.iter().any(|c| c.always);
    table.sequence_columns.iter().any(fills) || given_always || conflict_sets_always
}

/// An UPDATE's SET list against the sequence columns: PostgreSQL's error for a
/// `GENERATED ALWAYS` column given a value, a refusal for DEFAULT (the shards have no
/// sequence).
fn update_check(targets: &[protobuf::Node], table: &DistTable) -> Option<PgError> {
    for t in targets {
        let Some(N::ResTarget(rt)) = t.node.as_ref() else {
            continue;
        };
        let Some(col) = table.sequence_columns.iter().find(|c| c.name == rt.name) else {
            continue;
        };
        let is_default = matches!(
            rt.val.as_ref().and_then(|v| v.node.as_ref()),
            Some(N::SetToDefault(_))
        );
        // `(a, b) = (DEFAULT, 1)`: a multi-assignment's source is a row.
        let multi = matches!(
            rt.val.as_ref().and_then(|v| v.node.as_ref()),
            Some(N::MultiAssignRef(_))
        );
        if col.always && !is_default && !multi {
            return Some(
                PgError::new(
                    sqlstate::GENERATED_ALWAYS,
                    format!("column \"{}\" can only be updated to DEFAULT", col.name),
                )
                .with_detail(format!(
                    "Column \"{}\" is an identity column defined as GENERATED ALWAYS.",
                    col.name
                )),
            );
        }
        if is_default || multi {
            return Some(PgError::not_supported(format!(
                "pgshard does not support setting column \"{}\" of the distributed table \"{}\" \
                 to DEFAULT: its sequence lives on the coordinator node",
                col.name, table.name
            )));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> DistTable {
        let c = crate::planner::tests::catalog_of_t(&["id", "v", "w"]);
        let mut t = (**c.qualified("public", "t").unwrap()).clone();
        t.sequence_columns = vec![SequenceColumn {
            name: "id".into(),
            always: false,
        }];
        t
    }

    fn needs_shell(sql: &str, t: &DistTable) -> bool {
        let tree = crate::sql::parse::first_tree(sql, "test").unwrap();
        let node = tree.node.unwrap();
        let N::InsertStmt(ins) = &node else { panic!() };
        insert_needs_shell(&node, ins, t)
    }

    #[test]
    fn inserts_filling_a_sequence_column_go_through_the_shell() {
        let t = table();
        assert!(needs_shell("INSERT INTO t (v) VALUES (1)", &t));
        assert!(needs_shell("INSERT INTO t VALUES (DEFAULT, 1)", &t));
        assert!(needs_shell("INSERT INTO t DEFAULT VALUES", &t));
        assert!(needs_shell("INSERT INTO t (v) SELECT 1", &t));
        assert!(!needs_shell("INSERT INTO t VALUES (1, 2)", &t));
        assert!(!needs_shell("INSERT INTO t (v, id) VALUES (1, 2)", &t));
        assert!(needs_shell(
            "INSERT INTO t OVERRIDING USER VALUE VALUES (1, 2)",
            &t
        ));
        let mut always = t.clone();
        always.sequence_columns[0].always = true;
        assert!(needs_shell("INSERT INTO t VALUES (1, 2)", &always));
    }

    #[test]
    fn updates_of_sequence_columns() {
        let mut t = table();
        let check = |sql: &str, t: &DistTable| {
            let tree = crate::sql::parse::first_tree(sql, "test").unwrap();
            let Some(N::UpdateStmt(u)) = tree.node else {
                panic!()
            };
            update_check(&u.target_list, t).map(|e| e.code)
        };
        assert_eq!(check("UPDATE t SET v = 1", &t), None);
        assert_eq!(check("UPDATE t SET id = 5", &t), None);
        assert_eq!(
            check("UPDATE t SET id = DEFAULT", &t).as_deref(),
            Some("0A000")
        );
        t.sequence_columns[0].always = true;
        assert_eq!(check("UPDATE t SET id = 5", &t).as_deref(), Some("428C9"));
    }
}
