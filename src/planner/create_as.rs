//! `CREATE TABLE x AS SELECT ... FROM dist` and `SELECT ... INTO x FROM dist`: x is a
//! local table on the coordinator node filled with the distributed SELECT's rows. The
//! table is made by PostgreSQL itself from the SELECT over the shells (`CREATE TABLE x
//! AS <select> WITH NO DATA`: exact column names, types, typmods and collations; the
//! query is planned, never run), then filled as an INSERT into a local table selecting
//! from distributed ones (`insert_select::InsertIntoLocalPlan`), all in one
//! transaction. `WITH NO DATA` written by the client runs on the coordinator node as
//! it is; materialized views over distributed tables are refused (a refresh would read
//! the empty shells). `CREATE TABLE x (LIKE dist ...)` makes a local table from the
//! shell's definition on the coordinator node (LIKE copies neither the shell's guard
//! trigger nor its inheritance child).

use super::insert_select::InsertIntoLocalPlan;
use super::Plan;
use crate::catalog::DistTable;
use crate::error::{PgError, PgResult};
use crate::sql::parse::RelRef;
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self, ObjectType};
use std::sync::Arc;

#[derive(Debug)]
pub struct CreateAsPlan {
    /// `CREATE TABLE x AS <select> WITH NO DATA` (deparsed).
    pub create: String,
    /// Whether `IF NOT EXISTS` was written: an existing table is then left alone.
    pub if_not_exists: bool,
    /// The rows' INSERT into the new table (no column list: the table's columns are
    /// the SELECT's, in order).
    pub fill: InsertIntoLocalPlan,
}

fn refuse(why: &str) -> PgResult<Plan> {
    Ok(Plan::Unsupported(PgError::not_supported(format!(
        "pgshard does not support {why} yet"
    ))))
}

/// Whether this planner owns the statement.
pub fn applies(node: &N) -> bool {
    match node {
        N::CreateTableAsStmt(_) => true,
        N::SelectStmt(s) => s.into_clause.is_some(),
        _ => false,
    }
}

/// Whether the only distributed tables a CREATE TABLE names are LIKE sources or the
/// targets of its foreign keys (not INHERITS or PARTITION OF: those are refused
/// later). A foreign key to a distributed or reference table is on the shells, for
/// the new table to be distributed next (`create_distributed_table` checks it and
/// makes it per shard pair, `commands::foreign_keys`).
pub fn only_like_sources(c: &protobuf::CreateStmt, dist: &[(&RelRef, Arc<DistTable>)]) -> bool {
    let location = |r: &protobuf::RangeVar| r.location.max(0) as usize;
    let key_target = |n: &protobuf::Node| match n.node.as_ref() {
        Some(N::Constraint(k)) => k.pktable.as_ref().map(location),
        _ => None,
    };
    let mut allowed: Vec<usize> = Vec::new();
    for e in &c.table_elts {
        match e.node.as_ref() {
            Some(N::TableLikeClause(l)) => allowed.extend(l.relation.as_ref().map(location)),
            Some(N::ColumnDef(cd)) => allowed.extend(cd.constraints.iter().filter_map(key_target)),
            Some(N::Constraint(_)) => allowed.extend(key_target(e)),
            _ => {}
        }
    }
    !dist.is_empty() && dist.iter().all(|(r, _)| allowed.contains(&r.location))
}

/// Plans a CREATE TABLE AS / SELECT INTO whose query reads distributed tables.
pub fn plan_create_as(node: &N, text: &str) -> PgResult<Plan> {
    let (query, into) = match node {
        N::CreateTableAsStmt(c) => {
            if c.objtype != ObjectType::ObjectTable as i32 {
                return refuse("materialized views over distributed tables");
            }
            let Some(query) = c.query.as_deref().and_then(|q| q.node.as_ref()) else {
                return refuse("this CREATE TABLE AS");
            };
            if !matches!(query, N::SelectStmt(_)) {
                return refuse("CREATE TABLE AS EXECUTE over distributed tables");
            }
            let Some(into) = c.into.as_deref() else {
                return refuse("this CREATE TABLE AS");
            };
            (query.clone(), (into.clone(), c.if_not_exists))
        }
        N::SelectStmt(s) => {
            let Some(into) = s.into_clause.as_deref() else {
                return refuse("this SELECT INTO");
            };
            let mut query = (**s).clone();
            query.into_clause = None;
            (N::SelectStmt(Box::new(query)), (into.clone(), false))
        }
        _ => return refuse("this statement"),
    };
    let (into, if_not_exists) = into;
    if into.skip_data {
        // Nothing is read: PostgreSQL makes the table from the shells alone.
        return Ok(Plan::Local);
    }
    let params = serde_json::to_string(&query)
        .map_err(|e| PgError::internal(format!("CREATE TABLE AS: {e}")))?;
    if params.contains("\"ParamRef\"") {
        // PostgreSQL's own answer: a utility statement has no parameters.
        return Ok(Plan::Local);
    }
    let Some(rel) = into.rel.clone() else {
        return refuse("this CREATE TABLE AS");
    };
    let select = match query.deparse(Default::default()) {
        Ok(s) => s,
        Err(_) => return refuse("this CREATE TABLE AS (pgshard could not isolate its SELECT)"),
    };
    let create = N::CreateTableAsStmt(Box::new(protobuf::CreateTableAsStmt {
        query: Some(Box::new(protobuf::Node { node: Some(query) })),
        into: Some(Box::new(protobuf::IntoClause {
            skip_data: true,
            ..into
        })),
        objtype: ObjectType::ObjectTable as i32,
        is_select_into: false,
        if_not_exists,
    }))
    .deparse(Default::default())
    .map_err(|e| PgError::internal(format!("CREATE TABLE AS of {text:?}: {e}")))?;
    // The INSERT names the table as created: a temporary one is found first on the
    // path (pg_temp), so its persistence is not written again.
    let relation = protobuf::RangeVar {
        relpersistence: "p".into(),
        inh: true,
        alias: None,
        ..rel
    };
    let insert = protobuf::InsertStmt {
        relation: Some(relation),
        r#override: protobuf::OverridingKind::OverridingNotSet as i32,
        ..Default::default()
    };
    Ok(Plan::CreateTableAs(Arc::new(CreateAsPlan {
        create,
        if_not_exists,
        fill: InsertIntoLocalPlan { insert, select },
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planned(sql: &str) -> Plan {
        let node = crate::sql::parse::first_statement_for_tests(sql);
        plan_create_as(&node, sql).unwrap()
    }

    #[test]
    fn create_as_makes_the_table_empty_then_inserts() {
        let Plan::CreateTableAs(p) =
            planned("CREATE TEMP TABLE x (a, b) AS SELECT k, v FROM t WHERE v > 1")
        else {
            panic!("not planned")
        };
        let spaced = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(
            spaced(&p.create),
            "CREATE TEMPORARY TABLE x(a, b) AS SELECT k, v FROM t WHERE v > 1 WITH NO DATA"
        );
        assert_eq!(p.fill.select, "SELECT k, v FROM t WHERE v > 1");
        let Plan::CreateTableAs(p) = planned("SELECT k, count(*) INTO s.y FROM t GROUP BY k")
        else {
            panic!("not planned")
        };
        assert!(spaced(&p.create)
            .starts_with("CREATE TABLE s.y AS SELECT k, count(*) FROM t GROUP BY k"));
        assert!(p.create.ends_with("WITH NO DATA"), "{}", p.create);
        assert!(matches!(
            planned("CREATE TABLE x AS SELECT * FROM t WITH NO DATA"),
            Plan::Local
        ));
        assert!(matches!(
            planned("CREATE MATERIALIZED VIEW x AS SELECT * FROM t"),
            Plan::Unsupported(_)
        ));
    }
}
