//! The statistics views pgshard answers from its memory, as SQL bodies that replace a
//! reference to the view in a client's statement (the parse-tree rewrite of
//! `citus_settings::catalog`): pgshard's rows become a typed VALUES list, joined on the
//! coordinator node with `pg_stat_activity` / `pg_roles` / `pg_database`, so
//! PostgreSQL itself filters, joins, orders, and decides what the client's role may
//! see: another role's statement shows as `<insufficient privilege>` unless the
//! client has that role's privileges or `pg_read_all_stats`, as in `pg_stat_activity`
//! and `pg_stat_statements`.
//!
//! - `citus_stat_activity`: a row per client session of this pgshard process (its
//!   own backend on the coordinator node, the statement pgshard runs for it,
//!   `is_worker_query` false) and a row per node backend a session holds (that
//!   node's `pg_stat_activity` row, `is_worker_query` true, the session's
//!   `global_pid`, the node's `nodeid`).
//! - `citus_dist_stat_activity`: its rows with `is_worker_query` false.
//! - `citus_lock_waits`: the waits between sessions (the deadlock detector's wait-for
//!   graph) with both sessions' statements.
//! - `citus_stat_statements`: `stats::statements`' counters.
//!
//! A session's `global_pid` is Citus's: `nodeid * 10^10 + pid`, the coordinator's
//! `nodeid` (group 0 in `pg_dist_node`; [`NODE_NOT_IN_METADATA`] when it is not
//! there) and the pid of the session's own coordinator-node backend (the pid its
//! client was given).

use super::activity::Activity;
use super::statements;
use crate::sql::quote::quote_literal;
use std::time::{SystemTime, UNIX_EPOCH};

/// The names of the views this module answers.
pub const VIEWS: [&str; 4] = [
    "citus_stat_activity",
    "citus_dist_stat_activity",
    "citus_lock_waits",
    "citus_stat_statements",
];

/// Citus's node id for a coordinator missing from `pg_dist_node`.
pub const NODE_NOT_IN_METADATA: i32 = 99999999;

/// Citus's `global_pid` of backend `pid` on node `nodeid`.
pub fn global_pid(nodeid: i32, pid: i32) -> i64 {
    nodeid as i64 * 10_000_000_000 + pid as i64
}

/// Whether `text` may name one of the views (a cheap test before gathering rows).
pub fn mentioned(text: &str) -> bool {
    let bytes = text.as_bytes();
    VIEWS.iter().any(|v| {
        bytes
            .windows(v.len())
            .any(|w| w.eq_ignore_ascii_case(v.as_bytes()))
    })
}

/// A client session of this process.
#[derive(Debug, Clone)]
pub struct SessionRow {
    /// Its own coordinator-node backend's pid.
    pub pid: i32,
    pub activity: Activity,
}

/// A node backend a session holds: that node's `pg_stat_activity` row as JSON.
#[derive(Debug, Clone)]
pub struct NodeBackendRow {
    pub global_pid: i64,
    pub nodeid: i32,
    pub row_json: String,
}

/// What the views show, gathered once per statement reading them.
#[derive(Debug, Clone, Default)]
pub struct Live {
    pub coordinator_nodeid: i32,
    pub sessions: Vec<SessionRow>,
    pub node_backends: Vec<NodeBackendRow>,
    /// (waiting, blocking) sessions' global pids.
    pub waits: Vec<(i64, i64)>,
    pub statements: Vec<statements::Row>,
}

impl Live {
    /// The body replacing a reference to view `name` (None: not one of them).
    pub fn body(&self, name: &str) -> Option<String> {
        Some(match name {
            "citus_stat_activity" => self.stat_activity_sql(),
            "citus_dist_stat_activity" => self.dist_stat_activity_sql(),
            "citus_lock_waits" => self.lock_waits_sql(),
            "citus_stat_statements" => self.stat_statements_sql(),
            _ => return None,
        })
    }

    fn stat_activity_sql(&self) -> String {
        let epoch = |t: Option<SystemTime>| {
            t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map(|d| format!("{:.6}", d.as_secs_f64()))
        };
        let sessions = rows_sql(
            &[
                ("pid", "int4"),
                ("gpid", "int8"),
                ("query", "text"),
                ("state", "text"),
                ("query_start", "float8"),
                ("state_change", "float8"),
                ("xact_start", "float8"),
            ],
            self.sessions
                .iter()
                .map(|s| {
                    let a = &s.activity;
                    vec![
                        Some(s.pid.to_string()),
                        Some(global_pid(self.coordinator_nodeid, s.pid).to_string()),
                        Some(a.query.to_string()),
                        Some(a.state.label().to_string()),
                        epoch(a.query_start),
                        epoch(Some(a.state_change)),
                        epoch(a.xact_start),
                    ]
                })
                .collect(),
        );
        let nodes = rows_sql(
            &[("gpid", "int8"), ("nodeid", "int4"), ("j", "json")],
            self.node_backends
                .iter()
                .map(|b| {
                    vec![
                        Some(b.global_pid.to_string()),
                        Some(b.nodeid.to_string()),
                        Some(b.row_json.clone()),
                    ]
                })
                .collect(),
        );
        let all_stats = "pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE')";
        let seen = format!("(pg_catalog.pg_has_role(a.usesysid, 'USAGE') OR {all_stats})");
        let idle = format!("{seen} AND r.state <> 'active'");
        let wseen = format!(
            "(EXISTS (SELECT FROM pg_catalog.pg_roles o WHERE o.rolname = b.usename \
             AND pg_catalog.pg_has_role(o.oid, 'USAGE')) OR {all_stats})"
        );
        let w = |col: &str| format!("CASE WHEN {wseen} THEN b.{col} END AS {col}");
        let worker_cols = [
            "client_addr",
            "client_hostname",
            "client_port",
            "backend_start",
            "xact_start",
            "query_start",
            "state_change",
            "wait_event_type",
            "wait_event",
            "state",
            "backend_xid",
            "backend_xmin",
            "query_id",
        ]
        .map(w)
        .join(", ");
        format!(
            "SELECT r.gpid AS global_pid, {coord}::pg_catalog.int4 AS nodeid, false AS is_worker_query, \
               a.datid, a.datname, a.pid, a.leader_pid, a.usesysid, a.usename, a.application_name, \
               a.client_addr, a.client_hostname, a.client_port, a.backend_start, \
               CASE WHEN {seen} THEN pg_catalog.to_timestamp(r.xact_start) END AS xact_start, \
               CASE WHEN {seen} THEN pg_catalog.to_timestamp(r.query_start) END AS query_start, \
               CASE WHEN {seen} THEN pg_catalog.to_timestamp(r.state_change) END AS state_change, \
               CASE WHEN {idle} THEN 'Client'::pg_catalog.text END AS wait_event_type, \
               CASE WHEN {idle} THEN 'ClientRead'::pg_catalog.text END AS wait_event, \
               CASE WHEN {seen} THEN r.state END AS state, a.backend_xid, a.backend_xmin, a.query_id, \
               CASE WHEN {seen} THEN r.query ELSE '<insufficient privilege>' END AS query, a.backend_type \
             FROM ({sessions}) r JOIN pg_catalog.pg_stat_activity a ON a.pid = r.pid \
             UNION ALL \
             SELECT w.gpid, w.nodeid, true, b.datid, b.datname, b.pid, {leader}, b.usesysid, b.usename, \
               b.application_name, {worker_cols}, \
               CASE WHEN {wseen} THEN b.query ELSE '<insufficient privilege>' END AS query, \
               {backend_type} \
             FROM ({nodes}) w, LATERAL pg_catalog.json_populate_record(NULL::pg_catalog.pg_stat_activity, w.j) b",
            coord = self.coordinator_nodeid,
            leader = w("leader_pid"),
            backend_type = w("backend_type"),
        )
    }

    fn dist_stat_activity_sql(&self) -> String {
        format!(
            "SELECT * FROM ({}) s WHERE NOT s.is_worker_query",
            self.stat_activity_sql()
        )
    }

    fn lock_waits_sql(&self) -> String {
        let mut waits = self.waits.clone();
        waits.sort_unstable();
        waits.dedup();
        let edges = rows_sql(
            &[("waiting", "int8"), ("blocking", "int8")],
            waits
                .iter()
                .map(|(w, b)| vec![Some(w.to_string()), Some(b.to_string())])
                .collect(),
        );
        let dist = self.dist_stat_activity_sql();
        format!(
            "SELECT waiting.global_pid AS waiting_gpid, blocking.global_pid AS blocking_gpid, \
               waiting.query AS blocked_statement, \
               blocking.query AS current_statement_in_blocking_process, \
               waiting.nodeid AS waiting_nodeid, blocking.nodeid AS blocking_nodeid \
             FROM ({edges}) e JOIN ({dist}) waiting ON waiting.global_pid = e.waiting \
             JOIN ({dist}) blocking ON blocking.global_pid = e.blocking"
        )
    }

    fn stat_statements_sql(&self) -> String {
        let rows = rows_sql(
            &[
                ("queryid", "int8"),
                ("username", "text"),
                ("dbname", "text"),
                ("query", "text"),
                ("executor", "text"),
                ("partition_key", "text"),
                ("calls", "int8"),
            ],
            self.statements
                .iter()
                .map(|s| {
                    vec![
                        Some(s.queryid.to_string()),
                        Some(s.user.clone()),
                        Some(s.database.clone()),
                        Some(s.query.clone()),
                        Some(s.executor.to_string()),
                        s.partition_key.clone(),
                        Some(s.calls.to_string()),
                    ]
                })
                .collect(),
        );
        let seen = "(s.username = CURRENT_USER::pg_catalog.text \
                    OR pg_catalog.pg_has_role('pg_read_all_stats', 'MEMBER'))";
        format!(
            "SELECT CASE WHEN {seen} THEN s.queryid END AS queryid, r.oid AS userid, d.oid AS dbid, \
               CASE WHEN {seen} THEN s.query ELSE '<insufficient privilege>' END AS query, \
               s.executor, s.partition_key, s.calls \
             FROM ({rows}) s LEFT JOIN pg_catalog.pg_roles r ON r.rolname = s.username \
             LEFT JOIN pg_catalog.pg_database d ON d.datname = s.dbname"
        )
    }
}

/// Typed rows as a query: a VALUES list (every value a quoted literal cast to its
/// column's type), or no row of those columns.
fn rows_sql(cols: &[(&str, &str)], rows: Vec<Vec<Option<String>>>) -> String {
    let names: Vec<&str> = cols.iter().map(|(n, _)| *n).collect();
    if rows.is_empty() {
        let nulls: Vec<String> = cols
            .iter()
            .map(|(n, t)| format!("NULL::pg_catalog.{t} AS {n}"))
            .collect();
        return format!("SELECT {} WHERE false", nulls.join(", "));
    }
    let values: Vec<String> = rows
        .iter()
        .map(|row| {
            let items: Vec<String> = row
                .iter()
                .zip(cols)
                .map(|(v, (_, t))| match v {
                    Some(v) => format!("{}::pg_catalog.{t}", quote_literal(v)),
                    None => format!("NULL::pg_catalog.{t}"),
                })
                .collect();
            format!("({})", items.join(", "))
        })
        .collect();
    format!(
        "SELECT * FROM (VALUES {}) AS v({})",
        values.join(", "),
        names.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_body_parses_with_and_without_rows() {
        let mut live = Live {
            coordinator_nodeid: 1,
            ..Default::default()
        };
        for name in VIEWS {
            pg_query::parse(&live.body(name).unwrap(), 0).unwrap();
        }
        live.sessions.push(SessionRow {
            pid: 42,
            activity: Activity::default(),
        });
        live.node_backends.push(NodeBackendRow {
            global_pid: global_pid(1, 42),
            nodeid: 2,
            row_json: "{\"pid\": 7}".into(),
        });
        live.waits.push((global_pid(1, 42), global_pid(1, 43)));
        live.statements.push(statements::Row {
            queryid: -5,
            user: "o'neil".into(),
            database: "db".into(),
            query: "SELECT $1".into(),
            executor: statements::ADAPTIVE,
            partition_key: None,
            calls: 3,
        });
        for name in VIEWS {
            let sql = live.body(name).unwrap();
            pg_query::parse(&sql, 0).unwrap();
        }
        assert!(live
            .body("citus_stat_statements")
            .unwrap()
            .contains("'o''neil'"));
        assert_eq!(global_pid(1, 42), 10_000_000_042);
        assert!(mentioned("select * from CITUS_STAT_ACTIVITY"));
        assert!(!mentioned("select 1"));
        assert!(live.body("pg_class").is_none());
    }
}
