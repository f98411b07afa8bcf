//! The clauses of an INSERT ... SELECT that runs through the coordinator
//! (`insert_select::plan_via_coordinator`, `plan_into_local`), isolated on the parse
//! tree: the client's `ON CONFLICT` deparsed on its own (the shell's INSERT and every
//! shard's INSERT carry it as written), and a read-only `WITH` of the INSERT moved into
//! its SELECT (`WITH x AS (...) INSERT INTO t SELECT ... FROM x` is planned as
//! `INSERT INTO t WITH x AS (...) SELECT ... FROM x`, whose SELECT pgshard's planner
//! takes whole: recursive planning turns its CTEs into subplans).

use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self, InsertStmt};

/// The client's `ON CONFLICT ...` as it runs on the shell and on each shard.
#[derive(Debug, Clone)]
pub struct ViaOnConflict {
    /// ` ON CONFLICT (k, id) DO UPDATE SET v = excluded.v WHERE ...`, deparsed.
    pub clause: String,
    /// `DO UPDATE` (not `DO NOTHING`): every row of a shard then goes in one
    /// statement, so PostgreSQL's "cannot affect row a second time" (21000) still fires.
    pub do_update: bool,
    /// The functions it calls (a reference table's placements must compute the same).
    pub functions: Vec<String>,
}

/// Whether any CTE of the INSERT's own WITH modifies data (`WITH x AS (DELETE ...)`):
/// those are not this path's.
pub fn has_modifying_cte(i: &InsertStmt) -> bool {
    i.with_clause.as_ref().is_some_and(|w| {
        w.ctes.iter().any(|c| match c.node.as_ref() {
            Some(N::CommonTableExpr(cte)) => !matches!(
                cte.ctequery.as_deref().and_then(|q| q.node.as_ref()),
                Some(N::SelectStmt(_))
            ),
            _ => true,
        })
    })
}

/// The INSERT with its own read-only WITH moved into its SELECT (the same scope: the
/// INSERT's CTEs are visible only in its SELECT once ON CONFLICT and RETURNING name
/// no subquery). `Err` says why it cannot be moved.
pub fn with_moved_into_select(i: &InsertStmt) -> Result<InsertStmt, &'static str> {
    let Some(with) = i.with_clause.clone() else {
        return Ok(i.clone());
    };
    if has_modifying_cte(i) {
        return Err("WITH of data-modifying statements");
    }
    let clauses =
        serde_json::to_string(&(&i.on_conflict_clause, &i.returning_clause)).unwrap_or_default();
    if clauses.contains("\"SubLink\"") {
        return Err("WITH with subqueries in ON CONFLICT or RETURNING");
    }
    let mut out = i.clone();
    out.with_clause = None;
    match out.select_stmt.as_deref_mut().and_then(|x| x.node.as_mut()) {
        Some(N::SelectStmt(s)) if s.with_clause.is_none() && s.values_lists.is_empty() => {
            s.with_clause = Some(with);
        }
        Some(N::SelectStmt(_)) => return Err("WITH on both the INSERT and its SELECT"),
        _ => return Err("WITH over an INSERT without a SELECT"),
    }
    Ok(out)
}

/// The client's ON CONFLICT deparsed on its own; `Err` says why it cannot run on the
/// shards (a constraint named: the shards' constraints carry their shard id; a
/// subquery: it would read the shell's empty tables).
pub fn on_conflict(i: &InsertStmt) -> Result<Option<ViaOnConflict>, &'static str> {
    let Some(oc) = i.on_conflict_clause.as_deref() else {
        return Ok(None);
    };
    if oc.infer.as_ref().is_some_and(|inf| !inf.conname.is_empty()) {
        return Err("ON CONFLICT ON CONSTRAINT (name the conflict's columns instead)");
    }
    let node = N::OnConflictClause(Box::new(oc.clone()));
    let json = serde_json::to_string(&node).unwrap_or_default();
    if json.contains("\"SubLink\"") || json.contains("\"ParamRef\"") {
        return Err("subqueries or parameters in ON CONFLICT");
    }
    // `INSERT INTO pgshard_target DEFAULT VALUES ON CONFLICT ...`, the head cut off.
    let probe = InsertStmt {
        relation: Some(protobuf::RangeVar {
            relname: "pgshard_target".into(),
            inh: true,
            relpersistence: "p".into(),
            ..Default::default()
        }),
        on_conflict_clause: Some(Box::new(oc.clone())),
        r#override: protobuf::OverridingKind::OverridingNotSet as i32,
        ..Default::default()
    };
    let text = N::InsertStmt(Box::new(probe))
        .deparse(Default::default())
        .map_err(|_| "pgshard could not isolate the ON CONFLICT clause")?;
    let clause = text
        .strip_prefix("INSERT INTO pgshard_target DEFAULT VALUES")
        .filter(|c| c.starts_with(" ON CONFLICT"))
        .ok_or("pgshard could not isolate the ON CONFLICT clause")?;
    Ok(Some(ViaOnConflict {
        clause: clause.to_string(),
        do_update: oc.action == protobuf::OnConflictAction::OnconflictUpdate as i32,
        functions: crate::sql::parse::function_calls(&node),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insert(sql: &str) -> InsertStmt {
        let parsed = pg_query::parse(sql, 0).unwrap();
        match parsed.protobuf.stmts[0].stmt.as_ref().unwrap().node.clone() {
            Some(N::InsertStmt(i)) => *i,
            _ => panic!("not an INSERT"),
        }
    }

    #[test]
    fn on_conflict_is_deparsed_on_its_own() {
        let i = insert(
            "INSERT INTO t AS w SELECT * FROM s ON CONFLICT (k, id) DO UPDATE \
             SET v = coalesce(w.v, 0) + excluded.v WHERE w.t <> 'x' RETURNING w.k",
        );
        let oc = on_conflict(&i).unwrap().unwrap();
        assert_eq!(
            oc.clause,
            " ON CONFLICT (k, id) DO UPDATE SET v = COALESCE(w.v, 0) + excluded.v WHERE w.t <> 'x'"
        );
        assert!(oc.do_update);
        let i = insert("INSERT INTO t SELECT * FROM s ON CONFLICT DO NOTHING");
        let oc = on_conflict(&i).unwrap().unwrap();
        assert_eq!(oc.clause, " ON CONFLICT DO NOTHING");
        assert!(!oc.do_update);
        let i = insert("INSERT INTO t SELECT * FROM s ON CONFLICT ON CONSTRAINT t_pkey DO NOTHING");
        assert!(on_conflict(&i).is_err());
    }

    #[test]
    fn a_read_only_with_moves_into_the_select() {
        let i = insert("WITH x AS (SELECT k FROM s) INSERT INTO t SELECT k FROM x");
        let moved = with_moved_into_select(&i).unwrap();
        let text = N::InsertStmt(Box::new(moved))
            .deparse(Default::default())
            .unwrap();
        assert_eq!(
            text,
            "INSERT INTO t WITH x AS (SELECT k FROM s) SELECT k FROM x"
        );
        let i = insert("WITH x AS (DELETE FROM s RETURNING k) INSERT INTO t SELECT k FROM x");
        assert!(has_modifying_cte(&i));
        assert!(with_moved_into_select(&i).is_err());
    }
}
