//! `DECLARE name CURSOR FOR <query reading distributed tables>`, as psql sends it with
//! FETCH_COUNT and drivers for server-side cursors (psycopg's named cursors). The query
//! runs through pgshard's own planner when the cursor is declared and its rows are kept
//! on the coordinator node in a temporary table of the block, in their order; the
//! cursor itself is PostgreSQL's own, declared there over that table, so FETCH / MOVE /
//! CLOSE (any direction, SCROLL, BINARY) are PostgreSQL's and reach it as ordinary
//! statements on the block's coordinator connection.

use super::Plan;
use crate::error::{PgError, PgResult};
use pg_query::protobuf;
use pg_query::protobuf::node::Node as N;

/// PostgreSQL's `CURSOR_OPT_HOLD` (parsenodes.h): `WITH HOLD`.
const CURSOR_OPT_HOLD: i32 = 0x0020;

#[derive(Debug)]
pub struct DeclareCursorPlan {
    /// The client's DECLARE (name and options); its query is replaced when it runs.
    stmt: protobuf::DeclareCursorStmt,
    /// The cursor's query alone (deparsed), planned and run by pgshard.
    pub select: String,
}

impl DeclareCursorPlan {
    /// The client's DECLARE, with the same name and options, over `query` instead.
    pub fn declare_over(&self, query: &str) -> PgResult<String> {
        let node = crate::sql::parse::first_tree(query, "cursor query")?;
        let declare = protobuf::DeclareCursorStmt {
            query: Some(node),
            ..self.stmt.clone()
        };
        N::DeclareCursorStmt(Box::new(declare))
            .deparse(Default::default())
            .map_err(|e| PgError::internal(format!("cannot deparse the DECLARE: {e}")))
    }
}

/// Plans a DECLARE whose query reads distributed tables; `plan_query` plans that query
/// alone, so a shape pgshard refuses is refused here, at DECLARE.
pub fn plan_declare(
    d: &protobuf::DeclareCursorStmt,
    plan_query: &dyn Fn(&str) -> PgResult<Plan>,
) -> PgResult<Plan> {
    if d.options & CURSOR_OPT_HOLD != 0 {
        return Ok(Plan::Unsupported(PgError::not_supported(
            "pgshard does not support WITH HOLD cursors over distributed tables yet: \
             the cursor lives in the transaction block's connection to the coordinator node",
        )));
    }
    let Some(query @ N::SelectStmt(_)) = d.query.as_deref().and_then(|q| q.node.as_ref()) else {
        return Ok(Plan::Unsupported(PgError::not_supported(
            "pgshard does not support this cursor query yet",
        )));
    };
    let select = query
        .deparse(Default::default())
        .map_err(|e| PgError::internal(format!("cannot deparse the cursor query: {e}")))?;
    match plan_query(&select)? {
        Plan::Router(r) if r.read_only => {}
        Plan::MultiShard(_) => {}
        Plan::Unsupported(e) => return Ok(Plan::Unsupported(e)),
        _ => {
            return Ok(Plan::Unsupported(PgError::not_supported(
                "pgshard does not support this query in a cursor yet",
            )))
        }
    }
    let mut stmt = d.clone();
    stmt.query = None;
    Ok(Plan::DeclareCursor(std::sync::Arc::new(
        DeclareCursorPlan { stmt, select },
    )))
}

/// The query a materialized cursor reads: the kept columns under the client's column
/// names, in the order the rows came.
pub fn materialized_query(table: &str, names: &[String]) -> String {
    let columns: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("c{} AS {}", i + 1, crate::sql::quote::quote_ident(n)))
        .collect();
    format!(
        "SELECT {} FROM pg_temp.{} ORDER BY pgshard_ord",
        columns.join(", "),
        crate::sql::quote::quote_ident(table)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declare_stmt(sql: &str) -> Box<protobuf::DeclareCursorStmt> {
        match crate::sql::parse::first_tree(sql, "test").unwrap().node {
            Some(N::DeclareCursorStmt(d)) => d,
            _ => panic!("not a DECLARE: {sql}"),
        }
    }

    fn declare(sql: &str, inner: Plan) -> Plan {
        let d = declare_stmt(sql);
        let inner = std::cell::RefCell::new(Some(inner));
        plan_declare(&d, &|_| Ok(inner.borrow_mut().take().unwrap())).unwrap()
    }

    fn refused_query() -> Plan {
        Plan::Unsupported(PgError::internal("the query's own refusal"))
    }

    #[test]
    fn options_and_name_are_kept_over_the_materialized_rows() {
        let sql =
            "DECLARE \"Cur\" BINARY SCROLL CURSOR WITHOUT HOLD FOR SELECT a FROM t WHERE b = $1";
        let d = declare_stmt(sql);
        let plan = DeclareCursorPlan {
            select: String::new(),
            stmt: protobuf::DeclareCursorStmt { query: None, ..*d },
        };
        let q = materialized_query("pgshard_cursor_1", &["a".into(), "we\"ird".into()]);
        assert_eq!(
            q,
            "SELECT c1 AS \"a\", c2 AS \"we\"\"ird\" FROM pg_temp.\"pgshard_cursor_1\" ORDER BY pgshard_ord"
        );
        assert_eq!(
            plan.declare_over(&q).unwrap(),
            "DECLARE \"Cur\" BINARY SCROLL CURSOR FOR SELECT c1 AS a, c2 AS \"we\"\"ird\" \
             FROM pg_temp.pgshard_cursor_1 ORDER BY pgshard_ord"
        );
    }

    #[test]
    fn with_hold_and_refused_queries_are_refused() {
        let refused = |p: Plan| matches!(p, Plan::Unsupported(e) if e.code == "0A000");
        assert!(refused(declare(
            "DECLARE c CURSOR WITH HOLD FOR SELECT * FROM t",
            Plan::Local
        )));
        // The query's own refusal is the DECLARE's.
        assert!(matches!(
            declare("DECLARE c CURSOR FOR SELECT * FROM t", refused_query()),
            Plan::Unsupported(e) if e.code == "XX000"
        ));
        assert!(refused(declare(
            "DECLARE c CURSOR FOR SELECT * FROM t",
            Plan::Local
        )));
    }
}
