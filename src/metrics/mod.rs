//! pgshard's own metrics, in Prometheus's text format (`metrics_listen` in the config,
//! served by `endpoint.rs`): clients, statements by kind, the latency clients see,
//! commits by protocol, prepared transactions recovered, errors by SQLSTATE and the
//! node connections in use.
//!
//! The metrics are process-wide and updated where things happen with a relaxed atomic
//! add (a statement, a commit, an error); what is cheaper read than kept (the node
//! pools) is read when scraped. Counting costs nothing measurable on the routed path:
//! one add per statement and two clock reads per client round trip.

pub mod endpoint;

use crate::planner::Plan;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::OnceLock;
use std::time::Instant;

/// What a statement ran as, for `pgshard_statements_total{kind}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementKind {
    /// On one shard (the router, its fast path, pipelined reads).
    Router,
    /// On every shard of its tables, results merged by pgshard.
    MultiShard,
    /// On the coordinator node as written (local tables, catalog reads).
    Local,
    /// Rows moved between nodes first (broadcast, repartition joins).
    Repartition,
    /// Subplans into intermediate results first (recursive planning).
    Recursive,
    /// Several statements' worth: INSERT ... SELECT, COPY, reference writes, DDL,
    /// Citus functions.
    Other,
    /// Transaction control, settings, session commands.
    Session,
}

impl StatementKind {
    const ALL: [StatementKind; 7] = [
        StatementKind::Router,
        StatementKind::MultiShard,
        StatementKind::Local,
        StatementKind::Repartition,
        StatementKind::Recursive,
        StatementKind::Other,
        StatementKind::Session,
    ];

    fn label(self) -> &'static str {
        match self {
            StatementKind::Router => "router",
            StatementKind::MultiShard => "multi_shard",
            StatementKind::Local => "local",
            StatementKind::Repartition => "repartition",
            StatementKind::Recursive => "recursive",
            StatementKind::Other => "other",
            StatementKind::Session => "session",
        }
    }

    /// The kind of a planned statement.
    pub fn of(plan: &Plan) -> StatementKind {
        match plan {
            Plan::Router(_) => StatementKind::Router,
            Plan::MultiShard(_) | Plan::MultiShardModify(_) => StatementKind::MultiShard,
            Plan::Local => StatementKind::Local,
            Plan::Repartition(_) => StatementKind::Repartition,
            Plan::Recursive(_) | Plan::ModifyRecursive(_) => StatementKind::Recursive,
            Plan::Session(_) => StatementKind::Session,
            _ => StatementKind::Other,
        }
    }
}

/// How a distributed transaction committed, for `pgshard_commits_total{protocol}`.
#[derive(Debug, Clone, Copy)]
pub enum CommitProtocol {
    /// One node wrote, or the session chose one-phase commit.
    OnePhase,
    /// Two-phase commit over the nodes that wrote.
    TwoPhase,
}

type Labels = Vec<(&'static str, String)>;

/// Every metric of the process.
pub struct Metrics {
    registry: Registry,
    clients: Gauge,
    client_connections: Counter,
    statements: [Counter; StatementKind::ALL.len()],
    round_trip_seconds: Histogram,
    commits: [Counter; 2],
    recovered: Counter,
    errors: Family<Labels, Counter>,
    pool_in_use: Family<Labels, Gauge>,
    pool_idle: Family<Labels, Gauge>,
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// The process's metrics (made at first use).
pub fn get() -> &'static Metrics {
    METRICS.get_or_init(Metrics::new)
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix("pgshard");
        let clients = Gauge::default();
        registry.register("clients", "Client connections open now", clients.clone());
        let client_connections = Counter::default();
        registry.register(
            "client_connections",
            "Client connections accepted",
            client_connections.clone(),
        );
        let by_kind = Family::<Labels, Counter>::default();
        registry.register(
            "statements",
            "Statements run, by what they ran as",
            by_kind.clone(),
        );
        let statements = StatementKind::ALL.map(|k| {
            by_kind
                .get_or_create(&vec![("kind", k.label().to_string())])
                .clone()
        });
        // 50 µs .. ~26 s.
        let round_trip_seconds = Histogram::new(exponential_buckets(0.00005, 2.0, 20));
        registry.register(
            "round_trip_seconds",
            "Time from a client's query (or first extended-protocol message) to its ReadyForQuery",
            round_trip_seconds.clone(),
        );
        let by_protocol = Family::<Labels, Counter>::default();
        registry.register(
            "commits",
            "Distributed transactions committed, by commit protocol",
            by_protocol.clone(),
        );
        let commits = ["one_phase", "two_phase"].map(|p| {
            by_protocol
                .get_or_create(&vec![("protocol", p.to_string())])
                .clone()
        });
        let recovered = Counter::default();
        registry.register(
            "prepared_transactions_recovered",
            "Prepared transactions committed or rolled back by recovery",
            recovered.clone(),
        );
        let errors = Family::<Labels, Counter>::default();
        registry.register(
            "errors",
            "Errors sent to clients, by SQLSTATE",
            errors.clone(),
        );
        let pool_in_use = Family::<Labels, Gauge>::default();
        registry.register(
            "node_connections_in_use",
            "Pooled node connections in use, by node",
            pool_in_use.clone(),
        );
        let pool_idle = Family::<Labels, Gauge>::default();
        registry.register(
            "node_connections_idle",
            "Pooled node connections idle, by node",
            pool_idle.clone(),
        );
        Metrics {
            registry,
            clients,
            client_connections,
            statements,
            round_trip_seconds,
            commits,
            recovered,
            errors,
            pool_in_use,
            pool_idle,
        }
    }

    /// The text exposition, with the node pools' use as `pools` reports it now.
    pub fn render(&self, pools: &[(String, usize, usize)]) -> String {
        for (node, in_use, idle) in pools {
            let labels = vec![("node", node.clone())];
            self.pool_in_use.get_or_create(&labels).set(*in_use as i64);
            self.pool_idle.get_or_create(&labels).set(*idle as i64);
        }
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// A client connected; the returned guard counts it until dropped.
pub fn client_connected() -> ClientGuard {
    let m = get();
    m.clients.inc();
    m.client_connections.inc();
    ClientGuard
}

/// Counts one connected client (`client_connected`).
pub struct ClientGuard;

impl Drop for ClientGuard {
    fn drop(&mut self) {
        get().clients.dec();
    }
}

/// A statement ran as `kind`.
pub fn statement(kind: StatementKind) {
    get().statements[kind as usize].inc();
}

/// A client round trip that began at `started` ended (ReadyForQuery written).
pub fn round_trip(started: Instant) {
    get()
        .round_trip_seconds
        .observe(started.elapsed().as_secs_f64());
}

/// A distributed transaction committed.
pub fn committed(protocol: CommitProtocol) {
    get().commits[protocol as usize].inc();
}

/// Recovery committed or rolled back `n` prepared transactions.
pub fn recovered(n: u64) {
    get().recovered.inc_by(n);
}

/// An error with SQLSTATE `code` was sent to a client.
pub fn error(code: &str) {
    get()
        .errors
        .get_or_create(&vec![("sqlstate", code.to_string())])
        .inc();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_show_in_the_text() {
        statement(StatementKind::Router);
        statement(StatementKind::Router);
        committed(CommitProtocol::TwoPhase);
        error("23505");
        round_trip(Instant::now());
        let text = get().render(&[("w1:5432".into(), 3, 2)]);
        assert!(
            text.contains("pgshard_statements_total{kind=\"router\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("pgshard_commits_total{protocol=\"two_phase\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("pgshard_errors_total{sqlstate=\"23505\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("pgshard_node_connections_in_use{node=\"w1:5432\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("pgshard_round_trip_seconds_count 1"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
