//! `pgshard bench`: the reference workloads (docs/BENCHMARKS.md, /work/shared/workloads.md)
//! against pgshard and against one plain PostgreSQL with the same settings, measured in
//! the same run, interleaved.
//!
//! One invocation:
//! 1. starts a plain PostgreSQL 15 in `OUT/plain` (the cluster workers' settings, no
//!    test shortcuts) and a local pgshard cluster in `OUT/cluster` (`cluster_up`), on
//!    free ports;
//! 2. loads W1 (when a W1 workload is selected): `pgbench -i -s S` into the plain
//!    server, and through pgshard followed by `SET citus.shard_count = 32` and the four
//!    `create_distributed_table` calls in one psql session, then `vacuum analyze` of the
//!    four tables through pgshard (the shards are new tables: this is pgbench -i's own
//!    vacuum step, which the plain server's tables got);
//! 3. runs every workload R times, pgshard and plain alternating, and records pgbench's
//!    (W3: sysbench's) figures, latency percentiles (sampled per-transaction log;
//!    sysbench's histogram) and the CPU time of pgshard and of every PostgreSQL server
//!    (from /proc); before the first W2 workload it makes W2's table `w2` and writes
//!    each variant's script with ids chosen from the shard ranges (`w2.rs`), trying its
//!    statements through pgshard first; before W3, `sysbench prepare` on both and
//!    `create_distributed_table('sbtest1', 'id')`; a workload pgshard refuses (0A000)
//!    is reported as skipped with pgshard's message, any other failure as an error;
//!    before the first W4 workload it loads W4's table `test` (ROWS rows: on the plain
//!    server directly; through pgshard as a local table, then `create_distributed_table`),
//!    and a W4 workload times one query (warm-up, then timed executions, median) and
//!    checks that both targets answer the same; `w4-copy` times psql's `\copy` of
//!    W4's rows into an empty table `test_copy` on both;
//! 4. prints a table, writes `OUT/bench.json` (every raw figure, the machine, versions,
//!    settings, date and command) and `OUT/bench.svg` (the ratios);
//! 5. stops everything it started (also on error and Ctrl-C) and deletes the data
//!    directories (logs stay in `OUT/plain/logs`, `OUT/cluster/logs`, `OUT/runs`).
//!
//! Progress goes to stderr, the table to stdout.

mod client;
pub mod cpu;
mod machine;
mod pgbench;
mod queries;
pub mod report;
mod runs;
mod setup;
mod sysbench;
pub mod tpch;
mod w2;
mod w5;

use queries::*;
use runs::*;
use setup::*;

use crate::cluster::node::{self, Node, Settings};
use crate::cluster::{cluster_down, cluster_up, ClusterInfo, ClusterOptions};
use anyhow::{anyhow, bail, Context, Result};
use pgbench::{Env, StdoutToStderr};
use report::{
    QueryFigures, QueryLoad, QueryRun, Reference, Run, ServerCpu, Status, Target, WorkloadResult,
};
use serde_json::json;
use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Command-line arguments of `pgshard bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Workloads to run (default: all): w1-select-prepared, w1-select-simple, w1-tpcb,
    /// w1-tpcb-simple, w1-tpcb-vs-own-2pc, w1-tpcb-1pc, w2-9shards-2pc, w2-9shards-1pc,
    /// w2-2shards-2pc, w2-2shards-1pc, w2-1shard, w2-1row, w3-sysbench-insert, w4-count,
    /// w4-groupby, w4-copy, w4q-cte-groups, w4q-from-limit, w4q-union, w4q-cte-join,
    /// w4q-in-subquery, tpch-q01 ... tpch-q22, w5-none-login ... w5-sync-on-logout; a
    /// prefix (w1, w2, ..., tpch, w5) selects a group. TPC-H and W5 run only when named.
    pub workloads: Vec<String>,
    /// pgbench scale factor (100,000 accounts each) [default: 10; --quick: 1]; for
    /// TPC-H its scale factor, fractions allowed [default: 1; --quick: 0.01].
    #[arg(long)]
    pub scale: Option<f64>,
    /// pgbench clients (-c) [default: 16].
    #[arg(long)]
    pub clients: Option<u32>,
    /// Seconds per run (-T) [default: 30; --quick: 3].
    #[arg(long)]
    pub duration: Option<u32>,
    /// Workers of the pgshard cluster.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Runs per workload and target [default: 3; --quick: 1; TPC-H: 1].
    #[arg(long)]
    pub repeat: Option<u32>,
    /// Rows of W4's table `test` [default: 10,000,000; --quick: 100,000].
    #[arg(long)]
    pub w4_rows: Option<u64>,
    /// Directory for the servers, logs and results.
    #[arg(long, default_value = "pgshard-bench")]
    pub out: PathBuf,
    /// A short smoke run: scale 1, 3 s, one repetition, 100,000 W4 rows (explicit options
    /// still win).
    #[arg(long)]
    pub quick: bool,
    /// First port to try: the plain server and the cluster take WORKERS+3 consecutive
    /// free ports from here on.
    #[arg(long, default_value_t = 26000)]
    pub port: u16,
    /// Keep the data directories and pgbench's per-transaction logs (servers are
    /// stopped all the same).
    #[arg(long)]
    pub keep: bool,
    /// Clients (pgbench, sysbench, psql) reach both targets through their Unix-domain
    /// sockets instead of TCP on 127.0.0.1.
    #[arg(long)]
    pub unix_sockets: bool,
    /// Run the measured clients (pgbench, sysbench, psql) as a LOGIN role of this name,
    /// which the bench creates with a password on both targets and grants only what
    /// the workloads need; the setup stays with the superuser.
    #[arg(long, value_name = "NAME")]
    pub client_role: Option<String>,
    /// Clients connect with sslmode=require to both targets (the plain PostgreSQL then
    /// serves TLS with a self-signed certificate); over TCP only.
    #[arg(long)]
    pub client_tls: bool,
    /// pgshard processes on the cluster's one catalog (`cluster up --coordinators N`):
    /// pgbench workloads run one pgbench per process's port at once, clients and
    /// threads divided among them, and their throughput summed (runs.rs).
    #[arg(long, default_value_t = 1)]
    pub coordinators: usize,
}

/// What a workload runs.
#[derive(Clone, Copy)]
enum Kind {
    /// pgbench's builtin script against the W1 tables, with these options besides
    /// -c/-j/-T and logging.
    Pgbench(&'static [&'static str]),
    /// pgbench with a script of ours (`-f`, written to `OUT/runs/NAME.pgbench`), in this
    /// query mode (-M).
    Script { mode: &'static str, script: Script },
    /// W3: `sysbench oltp_insert ... run` against `sbtest1`.
    Sysbench,
    /// One query against W4's table `test`, timed.
    Query { sql: &'static str, compare: Compare },
    /// TPC-H query number N (1-22) against the TPC-H tables (tpch/), timed.
    Tpch(usize),
    /// W4's rows copied into an empty table `test_copy` with psql's `\copy`, timed.
    Copy,
}

/// The scripts of ours.
#[derive(Clone, Copy)]
enum Script {
    /// pgbench's TPC-B transaction after `SET citus.multi_shard_commit_protocol`:
    /// pgshard takes no startup options (PGOPTIONS), so the setting travels with every
    /// transaction, on both targets (a placeholder setting to PostgreSQL).
    Tpcb { protocol: &'static str },
    /// pgbench's TPC-B transaction committed by one PostgreSQL with its own two-phase
    /// commit: END replaced by PREPARE TRANSACTION and COMMIT PREPARED (one gid per
    /// client), the work every participant of a pgshard 2PC commit does. Run on the
    /// plain PostgreSQL only; pgshard runs pgbench's built-in TPC-B in the same mode.
    TpcbOwnTwoPhase,
    /// W2: one INSERT of 9 rows (or 1) landing as `spread` says, after
    /// `SET citus.multi_shard_commit_protocol` when `protocol` is given.
    W2 {
        spread: w2::Spread,
        protocol: Option<&'static str>,
    },
    /// W5's login or logout script, in one of its standby configurations (w5.rs).
    W5(w5::Variant),
}

/// How the two targets' answers to a query must agree.
#[derive(Clone, Copy)]
enum Compare {
    /// Every row, in order.
    Rows,
    /// The last column's values, sorted: ties at a LIMIT may keep different groups
    /// with the same counts.
    LastColumn,
}

/// One benchmark workload.
struct Workload {
    name: &'static str,
    description: &'static str,
    kind: Kind,
    /// (Citus / one PostgreSQL, pgshard's goal), as ratios where above 1 is faster than
    /// one PostgreSQL.
    reference: (Option<f64>, Option<f64>),
}

impl Workload {
    fn pgbench_options(&self) -> Vec<&'static str> {
        match self.kind {
            Kind::Pgbench(args) => args.to_vec(),
            Kind::Script { mode, .. } => vec!["-M", mode],
            _ => vec![],
        }
    }

    /// Runs against the pgbench tables of W1.
    fn uses_w1(&self) -> bool {
        matches!(
            self.kind,
            Kind::Pgbench(_)
                | Kind::Script {
                    script: Script::Tpcb { .. } | Script::TpcbOwnTwoPhase,
                    ..
                }
        )
    }

    fn uses_w2(&self) -> bool {
        matches!(
            self.kind,
            Kind::Script {
                script: Script::W2 { .. },
                ..
            }
        )
    }

    /// What the bench runs on a target before each run (what pgbench itself would do
    /// unless -n, and emptying the tables an insert workload fills).
    fn before_run(&self) -> &'static [&'static str] {
        if self.uses_w1() {
            &[
                "vacuum pgbench_branches",
                "vacuum pgbench_tellers",
                "truncate pgbench_history",
            ]
        } else if self.uses_w2() {
            &["truncate w2"]
        } else if matches!(self.kind, Kind::Sysbench) {
            // sysbench's unique ids differ from run to run: an empty table has no
            // duplicate keys.
            &["truncate sbtest1"]
        } else {
            &[]
        }
    }
}

/// The W2 variants of workloads.md (9 shards 2PC/1PC, 2 shards 1PC, 1 shard 9 rows, 1
/// row) and 2 shards with 2PC.
const fn w2(
    name: &'static str,
    description: &'static str,
    spread: w2::Spread,
    protocol: Option<&'static str>,
) -> Workload {
    Workload {
        name,
        description,
        kind: Kind::Script {
            mode: "prepared",
            script: Script::W2 { spread, protocol },
        },
        reference: (None, None),
    }
}

/// Citus ratios and pgshard goals from workloads.md (this machine, scale 10, 16 clients;
/// W4: 10 M rows, Citus 423 ms vs 243 ms for count(*) and 761 ms vs 540 ms for the GROUP
/// BY; goal: no slower than one PostgreSQL).
const WORKLOADS: &[Workload] = &[
    Workload {
        name: "w1-select-prepared",
        description: "W1 select-only: one primary-key lookup in pgbench_accounts per \
                      transaction (pgbench -S), extended protocol with prepared statements",
        kind: Kind::Pgbench(&["-M", "prepared", "-S"]),
        reference: (Some(0.15), Some(0.8)),
    },
    Workload {
        name: "w1-select-simple",
        description: "W1 select-only (pgbench -S) over the simple query protocol: every \
                      statement parsed and planned again",
        kind: Kind::Pgbench(&["-M", "simple", "-S"]),
        reference: (Some(0.19), Some(0.8)),
    },
    Workload {
        name: "w1-tpcb",
        description: "W1 TPC-B read-write: BEGIN; UPDATE accounts; SELECT accounts; UPDATE \
                      tellers; UPDATE branches; INSERT history; END (prepared); the rows of \
                      one transaction live on different shards: pgshard commits with 2PC \
                      (its default citus.multi_shard_commit_protocol)",
        kind: Kind::Pgbench(&["-M", "prepared"]),
        reference: (Some(0.12), Some(0.6)),
    },
    Workload {
        name: "w1-tpcb-simple",
        description: "W1 TPC-B read-write over the simple query protocol (-M simple), 2PC",
        kind: Kind::Pgbench(&["-M", "simple"]),
        reference: (None, Some(0.6)),
    },
    Workload {
        name: "w1-tpcb-vs-own-2pc",
        description: "W1 TPC-B (-M simple) through pgshard (2PC across workers) against one \
                      PostgreSQL committing the same transaction with its own two-phase \
                      commit (PREPARE TRANSACTION + COMMIT PREPARED instead of END): what \
                      2PC costs any PostgreSQL on this machine; compare the plain TPS with \
                      w1-tpcb-simple's",
        kind: Kind::Script {
            mode: "simple",
            script: Script::TpcbOwnTwoPhase,
        },
        reference: (None, None),
    },
    Workload {
        name: "w1-tpcb-1pc",
        description: "W1 TPC-B read-write (prepared) committed with 1PC: pgbench's TPC-B \
                      script preceded by SET citus.multi_shard_commit_protocol = '1pc' in \
                      every transaction (pgshard takes no startup options; PostgreSQL runs \
                      the same SET on a placeholder setting), one statement more than \
                      w1-tpcb",
        kind: Kind::Script {
            mode: "prepared",
            script: Script::Tpcb { protocol: "1pc" },
        },
        reference: (None, Some(0.6)),
    },
    w2(
        "w2-9shards-2pc",
        "W2 fan-out: INSERT of 9 consecutive ids landing on 9 different shards (of 32), \
         committed with 2PC (SET citus.multi_shard_commit_protocol = '2pc' first)",
        w2::Spread::NineShards,
        Some("2pc"),
    ),
    w2(
        "w2-9shards-1pc",
        "W2 fan-out: INSERT of 9 consecutive ids landing on 9 different shards, committed \
         with 1PC (SET citus.multi_shard_commit_protocol = '1pc' first)",
        w2::Spread::NineShards,
        Some("1pc"),
    ),
    w2(
        "w2-2shards-2pc",
        "W2 fan-out: INSERT of 9 ids landing on exactly 2 shards, 2PC",
        w2::Spread::TwoShards,
        Some("2pc"),
    ),
    w2(
        "w2-2shards-1pc",
        "W2 fan-out: INSERT of 9 ids landing on exactly 2 shards, 1PC",
        w2::Spread::TwoShards,
        Some("1pc"),
    ),
    w2(
        "w2-1shard",
        "W2: INSERT of 9 ids all landing on one shard (no commit protocol involved)",
        w2::Spread::OneShard,
        None,
    ),
    w2("w2-1row", "W2: INSERT of one row", w2::Spread::OneRow, None),
    Workload {
        name: "w3-sysbench-insert",
        description: "W3 sysbench oltp_insert (--auto_inc=off): one single-row INSERT into \
                      sbtest1 (primary key id, index on k) per transaction, simple query \
                      protocol; pgshard: sbtest1 created by sysbench prepare through \
                      pgshard, then create_distributed_table('sbtest1', 'id')",
        kind: Kind::Sysbench,
        reference: (Some(0.23), Some(0.7)),
    },
    Workload {
        name: "w4-count",
        description: "W4 analytics: count(*) over the whole distributed table test (a \
                      scan of every shard, partial counts summed by pgshard); time of one \
                      query",
        kind: Kind::Query {
            sql: "select count(*) from test",
            compare: Compare::Rows,
        },
        reference: (Some(0.57), Some(1.0)),
    },
    Workload {
        name: "w4-groupby",
        description: "W4 analytics: the ten most frequent values of c1 (GROUP BY, ORDER BY \
                      count, LIMIT across all shards); time of one query",
        kind: Kind::Query {
            sql: "select c1, count(*) from test group by c1 order by count(*) desc limit 10",
            compare: Compare::LastColumn,
        },
        reference: (Some(0.71), Some(1.0)),
    },
    w4q(
        "w4q-cte-groups",
        "a CTE grouping every row (subplan: the combine step), the spread of its counts on \
         the coordinator node",
        "with g as (select c1, count(*) as n from test group by c1) select max(n) - min(n) from g",
    ),
    w4q(
        "w4q-from-limit",
        "a FROM subquery with ORDER BY id LIMIT 10000 (subplan: LIMIT pushed to every shard), \
         aggregated on the coordinator node",
        "select count(*), sum(c2) from (select c2 from test order by id limit 10000) s",
    ),
    w4q(
        "w4q-union",
        "UNION of two filtered selections (one subplan per arm), ordered",
        "select c1 from test where c2 = 1 and c3 = 1 union select c1 from test where c2 = 2 \
         and c3 = 2 order by 1",
    ),
    w4q(
        "w4q-cte-join",
        "two grouped CTEs (two subplans) joined on the coordinator node",
        "with a as (select c1, count(*) as n from test where c2 < 50 group by c1), \
         b as (select c1, count(*) as n from test where c2 >= 50 group by c1) \
         select a.c1, a.n, b.n from a join b using (c1) order by a.c1",
    ),
    w4q(
        "w4q-in-subquery",
        "IN (subquery) between two filtered selections of 1,000 rows each (two subplans)",
        "select count(*) from (select c1 from test where id <= 1000) s \
         where c1 in (select c2 from test where id <= 1000)",
    ),
    Workload {
        name: "w4-copy",
        description: "W4 load by COPY: W4's rows (a CSV file exported from the plain \
                      server) copied with psql's \\copy into an empty table test_copy, \
                      distributed by id through pgshard; time of one COPY and rows/s",
        kind: Kind::Copy,
        reference: (None, Some(1.0)),
    },
];

/// A W4 query with CTEs, subqueries or set operations (recursive planning), compared
/// row by row; the group `w4q`.
const fn w4q(name: &'static str, description: &'static str, sql: &'static str) -> Workload {
    Workload {
        name,
        description,
        kind: Kind::Query {
            sql,
            compare: Compare::Rows,
        },
        reference: (None, None),
    }
}

/// W4's table, and its rows (`setseed` first, in the same transaction, so that both
/// targets get the same data and answer the same).
const W4_CREATE: &str =
    "create table test (id int, c1 int, c2 int, c3 int, info text, crt_time timestamp)";
const W4_SEED: &str = "select setseed(0.4)";
fn w4_insert(rows: u64) -> String {
    format!(
        "insert into test select id, random()*100, random()*100, random()*100, \
         md5(random()::text), clock_timestamp() from generate_series(1, {rows}) t(id)"
    )
}
/// Executions of a W4 query per run: untimed, then timed (the median is the run's time).
const QUERY_WARMUP: u32 = 1;
const QUERY_TIMED: u32 = 3;
/// Longest a W4 query or load statement may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(600);

/// How a query workload runs: repetitions (one run per target each), and per run the
/// untimed then timed executions on one connection.
#[derive(Debug, Clone, Copy)]
struct QueryTiming {
    repeat: u32,
    warmup: u32,
    timed: u32,
    /// Longest one execution may take: the client gives up then (and cancels it).
    timeout: Duration,
    /// Sent as `SET statement_timeout` at the start of each run, so that the servers
    /// stop a query themselves (the client's wait is a little longer).
    statement_timeout: bool,
    /// A warm-up execution longer than this leaves one timed execution.
    one_timed_after: Option<Duration>,
}

impl QueryTiming {
    /// W4's queries.
    fn w4(opts: &Options) -> QueryTiming {
        QueryTiming {
            repeat: opts.repeat,
            warmup: QUERY_WARMUP,
            timed: QUERY_TIMED,
            timeout: QUERY_TIMEOUT,
            statement_timeout: false,
            one_timed_after: None,
        }
    }
}
const LOAD_TIMEOUT: Duration = Duration::from_secs(3 * 3600);

const THREADS: u32 = 2;
/// `--table-size` of sysbench's prepare (oltp_insert inserts no rows there; its `k`
/// values are drawn from 1..table size).
const SYSBENCH_TABLE_SIZE: u32 = 10_000;
const SHARD_COUNT: u32 = 32;
/// Fraction of transactions pgbench logs for the latency percentiles.
const SAMPLING_RATE: f64 = 0.1;
const W1_TABLES: [(&str, &str); 4] = [
    ("pgbench_accounts", "aid"),
    ("pgbench_branches", "bid"),
    ("pgbench_tellers", "tid"),
    ("pgbench_history", "aid"),
];

/// The resolved options.
struct Options {
    workloads: Vec<&'static Workload>,
    scale: u32,
    /// TPC-H's scale factor and repetitions (tpch/).
    tpch_scale: f64,
    tpch_repeat: u32,
    clients: u32,
    threads: u32,
    duration: u32,
    workers: usize,
    repeat: u32,
    w4_rows: u64,
    out: PathBuf,
    port: u16,
    keep: bool,
    unix_sockets: bool,
    client_role: Option<client::ClientRole>,
    client_tls: bool,
    coordinators: usize,
}

impl Options {
    fn resolve(a: BenchArgs) -> Result<Options> {
        let mut workloads = Vec::new();
        let all = || {
            WORKLOADS
                .iter()
                .chain(tpch::WORKLOADS.iter())
                .chain(w5::WORKLOADS)
        };
        for name in &a.workloads {
            let chosen: Vec<&'static Workload> = all()
                .filter(|w| w.name == name || w.name.starts_with(&format!("{name}-")))
                .collect();
            if chosen.is_empty() {
                bail!(
                    "unknown workload {name:?}; known: {} (or a group: w1, w2, w3, w4, w4q, \
                     tpch)",
                    all().map(|w| w.name).collect::<Vec<_>>().join(", ")
                );
            }
            for w in chosen {
                if !workloads.iter().any(|x: &&Workload| x.name == w.name) {
                    workloads.push(w);
                }
            }
        }
        if workloads.is_empty() {
            workloads = WORKLOADS.iter().collect();
        }
        let q = a.quick;
        let w1 = workloads.iter().any(|w| w.uses_w1());
        let pgbench_scale = match a.scale {
            None => Some(if q { 1 } else { 10 }),
            Some(s) if s.fract() == 0.0 && (1.0..=u32::MAX as f64).contains(&s) => Some(s as u32),
            Some(_) if w1 => None,
            // Not used: only TPC-H reads a fractional scale.
            Some(_) => Some(1),
        };
        let Some(pgbench_scale) = pgbench_scale else {
            bail!("--scale must be a whole number of at least 1 for pgbench (W1)");
        };
        let tpch_scale = a.scale.unwrap_or(if q { 0.01 } else { 1.0 });
        // Below SF 0.01 dbgen's partsupp formula repeats (part, supplier) pairs.
        if !(0.01..=1000.0).contains(&tpch_scale) {
            bail!("--scale must be between 0.01 and 1000 for TPC-H");
        }
        let o = Options {
            workloads,
            scale: pgbench_scale,
            tpch_scale,
            tpch_repeat: a.repeat.unwrap_or(1),
            clients: a.clients.unwrap_or(16),
            threads: THREADS.min(a.clients.unwrap_or(16)),
            duration: a.duration.unwrap_or(if q { 3 } else { 30 }),
            workers: a.workers,
            repeat: a.repeat.unwrap_or(if q { 1 } else { 3 }),
            w4_rows: a.w4_rows.unwrap_or(if q { 100_000 } else { 10_000_000 }),
            out: a.out,
            port: a.port,
            keep: a.keep,
            unix_sockets: a.unix_sockets,
            client_role: a
                .client_role
                .as_deref()
                .map(client::ClientRole::new)
                .transpose()?,
            client_tls: a.client_tls,
            coordinators: a.coordinators.max(1),
        };
        if o.client_tls && o.unix_sockets {
            bail!("--client-tls is for TCP clients: PostgreSQL has no TLS on Unix sockets");
        }
        if o.scale == 0
            || o.clients == 0
            || o.duration == 0
            || o.repeat == 0
            || o.workers == 0
            || o.w4_rows == 0
        {
            bail!(
                "--scale, --clients, --duration, --repeat, --workers and --w4-rows must be at \
                 least 1"
            );
        }
        if o.w4_rows > i32::MAX as u64 {
            bail!(
                "--w4-rows must fit W4's int column id (at most {})",
                i32::MAX
            );
        }
        Ok(o)
    }

    fn plain_dir(&self) -> PathBuf {
        self.out.join("plain")
    }
    fn cluster_dir(&self) -> PathBuf {
        self.out.join("cluster")
    }
    fn runs_dir(&self) -> PathBuf {
        self.out.join("runs")
    }
}

/// Progress lines on stderr, with the time since the start.
struct Progress(Instant);

impl Progress {
    fn say(&self, msg: impl AsRef<str>) {
        let s = self.0.elapsed().as_secs();
        eprintln!("[bench {:>2}:{:02}] {}", s / 60, s % 60, msg.as_ref());
    }
}

/// What this invocation started, for the final clean-up.
#[derive(Default)]
struct Started {
    plain: Option<Node>,
    plain_standbys: Vec<Node>,
    cluster: bool,
}

/// Runs the benchmark (see the module comment).
pub async fn run(args: BenchArgs) -> Result<()> {
    let mut opts = Options::resolve(args)?;
    let progress = Progress(Instant::now());
    fs::create_dir_all(&opts.out).with_context(|| format!("creating {}", opts.out.display()))?;
    opts.out = fs::canonicalize(&opts.out)?;
    node::check_reachable(&opts.out)?;

    let mut started = Started::default();
    let result = tokio::select! {
        r = bench(&opts, &progress, &mut started) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };
    if let Err(e) = &result {
        progress.say(format!("failed: {e:#}"));
    }
    progress.say("stopping the servers and pgshard");
    let stopped = stop_everything(&opts, &started).await;
    if let Err(e) = &stopped {
        progress.say(format!("clean-up: {e:#}"));
    }
    result?;
    stopped?;
    progress.say("done");
    Ok(())
}

async fn bench(opts: &Options, progress: &Progress, started: &mut Started) -> Result<()> {
    for tool in ["pgbench", "psql"] {
        let mut cmd = pgbench::command(tool, &vec![]);
        cmd.arg("--version");
        let ok = pgbench::run(cmd, None).await.is_ok_and(|o| o.success());
        if !ok {
            bail!("{tool} is needed on PATH (install postgresql-client-15)");
        }
    }
    let date = machine::now_utc();
    let machine = machine::describe();
    let revision = machine::pgshard_revision();
    let command = machine::command_line();
    remove_previous(opts, progress).await?;
    fs::create_dir_all(opts.runs_dir())?;

    let w5 = opts.workloads.iter().any(|w| w.name.starts_with("w5-"));
    let extra = if w5 { w5::extra_ports(opts.workers) } else { 0 };
    // The cluster's other pgshard processes listen after its nodes.
    let extra = extra + opts.coordinators as u16 - 1;
    let base = free_ports(opts.port, opts.workers as u16 + 3 + extra)?;
    let plain_port = base;
    let cluster_port = base + 1;
    progress.say(format!(
        "starting a plain PostgreSQL on port {plain_port} and a pgshard cluster with {} \
         workers on ports {cluster_port}-{} in {}",
        opts.workers,
        cluster_port + opts.workers as u16 + 1,
        opts.out.display()
    ));

    // Both at once: initdb dominates.
    let plain_node = plain_node(opts, plain_port);
    started.plain = Some(plain_node.clone());
    started.cluster = true;
    let password = node::random_password();
    let plain_start = {
        let (n, pw) = (plain_node.clone(), password.clone());
        tokio::task::spawn_blocking(move || -> Result<()> {
            node::server_dir(n.log_file.parent().unwrap_or(Path::new(".")), 0o755)?;
            node::server_dir(&n.socket_dir, 0o755)?;
            n.create(
                &pw,
                Settings {
                    fast: false,
                    async_commit: true,
                    parallel_workers_per_gather: None,
                },
            )
            .context("initdb of the plain PostgreSQL")?;
            n.start()?;
            Ok(())
        })
    };
    let cluster_opts = ClusterOptions {
        dir: opts.cluster_dir(),
        workers: opts.workers,
        port: cluster_port,
        listen_host: "127.0.0.1".into(),
        pgshard_exe: std::env::current_exe()?,
        fast: false,
        // The reference measurements' setting, on both sides.
        async_commit: true,
        coordinators: opts.coordinators,
        ..ClusterOptions::default()
    };
    let (plain_res, cluster_res) = {
        let _quiet = StdoutToStderr::new();
        tokio::join!(plain_start, cluster_up(&cluster_opts))
    };
    plain_res??;
    let cluster = cluster_res.context("starting the pgshard cluster")?;
    // Clients connect over TCP on 127.0.0.1, or with --unix-sockets through each
    // target's socket directory.
    let plain_host = if opts.unix_sockets {
        plain_node.socket_dir.to_string_lossy().into_owned()
    } else {
        "127.0.0.1".to_string()
    };
    let plain_env: Env = [
        ("PGHOST", plain_host),
        ("PGPORT", plain_port.to_string()),
        ("PGUSER", "postgres".into()),
        ("PGPASSWORD", password),
        ("PGDATABASE", "postgres".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let mut pgshard_env: Env = cluster.pg_env();
    if opts.unix_sockets {
        for (k, v) in pgshard_env.iter_mut() {
            if k == "PGHOST" {
                *v = cluster.socket_dir.to_string_lossy().into_owned();
            }
        }
    }
    progress.say("servers and pgshard are up");

    // Who the measured clients are and how they connect (client.rs). The superuser's
    // environments (setup) use the same transport as the clients'.
    if opts.client_tls {
        progress.say("turning TLS on in the plain PostgreSQL (self-signed certificate)");
        client::serve_tls(&plain_node, &plain_env).await?;
    }
    let sslmode = client::sslmode(opts.client_tls);
    let plain_env = client::with_var(&plain_env, "PGSSLMODE", sslmode);
    let pgshard_env = client::with_var(&pgshard_env, "PGSSLMODE", sslmode);
    if let Some(role) = &opts.client_role {
        progress.say(format!(
            "creating the client role {} on both targets (LOGIN, a password, no other \
             attribute)",
            role.name
        ));
        let workers: Vec<crate::backend::NodeAddr> = cluster
            .worker_ports
            .iter()
            .map(|&port| crate::backend::NodeAddr {
                host: cluster.node_host.clone(),
                port,
            })
            .collect();
        let config = opts.cluster_dir().join("pgshard.toml");
        role.create(&plain_env, &pgshard_env, &config, &workers)
            .await?;
    }
    let plain_client = client::client_env(&plain_env, opts.client_role.as_ref());
    let pgshard_client = client::client_env(&pgshard_env, opts.client_role.as_ref());
    let mut clients = serde_json::Map::new();
    for (name, env) in [("plain", &plain_client), ("pgshard", &pgshard_client)] {
        let seen = client::check(env, opts.client_role.as_ref(), opts.client_tls)
            .await
            .with_context(|| format!("checking the clients' connection to {name}"))?;
        clients.insert(name.into(), serde_json::to_value(seen)?);
    }

    // Load W1 (W4 is loaded before its first workload).
    let mut load = serde_json::Map::new();
    let w1 = opts.workloads.iter().any(|w| w.uses_w1());
    if w1 {
        let t = Instant::now();
        progress.say(format!(
            "pgbench -i -s {} into the plain PostgreSQL",
            opts.scale
        ));
        pgbench_init(opts, &plain_env, "load-plain").await?;
        load.insert("plain_init_s".into(), json!(t.elapsed().as_secs_f64()));
        let t = Instant::now();
        progress.say(format!("pgbench -i -s {} through pgshard", opts.scale));
        pgbench_init(opts, &pgshard_env, "load-pgshard").await?;
        load.insert("pgshard_init_s".into(), json!(t.elapsed().as_secs_f64()));
        let t = Instant::now();
        progress.say(format!(
            "distributing the W1 tables through pgshard ({SHARD_COUNT} shards)"
        ));
        distribute(opts, &pgshard_env).await?;
        load.insert("distribute_s".into(), json!(t.elapsed().as_secs_f64()));
        if let Some(role) = &opts.client_role {
            for (table, _) in W1_TABLES {
                role.grant(table, &plain_env, &pgshard_env, &node_envs(&cluster))
                    .await?;
            }
        }
        progress.say("checkpoint on every server");
        checkpoint_all(&cluster, &plain_env).await?;
    }
    let postgres = server_settings(opts, &plain_env, &cluster).await;

    let plain_target = TargetCtx {
        target: Target::Plain,
        admin: plain_env,
        client: plain_client,
        probe: cpu::Probe {
            pgshard_pid: None,
            servers: vec![("plain".into(), plain_node.data_dir.clone())],
        },
    };
    let pgshard_pid: u32 = fs::read_to_string(opts.cluster_dir().join("pgshard.pid"))
        .context("reading pgshard.pid")?
        .trim()
        .parse()
        .context("parsing pgshard.pid")?;
    let mut servers = vec![(
        "coordinator".to_string(),
        opts.cluster_dir().join("coordinator"),
    )];
    for i in 1..=cluster.worker_ports.len() {
        servers.push((
            format!("worker{i}"),
            opts.cluster_dir().join(format!("worker{i}")),
        ));
    }
    let pgshard_target = TargetCtx {
        target: Target::Pgshard,
        admin: pgshard_env,
        client: pgshard_client,
        probe: cpu::Probe {
            pgshard_pid: Some(pgshard_pid),
            servers,
        },
    };

    // The runs.
    let mut results = Vec::new();
    let mut seq = 0;
    let mut w4_load: Option<QueryLoad> = None;
    let mut tpch_load: Option<tpch::TpchLoad> = None;
    let mut w2_setup: Option<W2Setup> = None;
    let mut w3_setup: Option<Option<(Status, String)>> = None;
    let mut w5_setup: Option<w5::W5Setup> = None;
    let total = opts.workloads.len();
    for (i, w) in opts.workloads.iter().enumerate() {
        progress.say(format!("workload {}/{total}: {}", i + 1, w.name));
        let targets = [&plain_target, &pgshard_target];
        if matches!(w.kind, Kind::Query { .. } | Kind::Copy) && w4_load.is_none() {
            let loaded = load_w4(opts, progress, &plain_target, &pgshard_target, &cluster).await?;
            if loaded.error.is_none() {
                grant_client(opts, targets, &cluster, "test").await?;
            }
            w4_load = Some(loaded);
        }
        match w.kind {
            Kind::Query { sql, compare } => {
                let w4 = w4_load.as_ref().expect("loaded above");
                let timing = QueryTiming::w4(opts);
                results.push(
                    run_query_workload(timing, progress, w, (sql, compare), w4, targets, &mut seq)
                        .await,
                );
                continue;
            }
            Kind::Copy => {
                let w4 = w4_load.as_ref().expect("loaded above");
                results.push(
                    run_copy_workload(opts, progress, w, w4, targets, &cluster, &mut seq).await?,
                );
                continue;
            }
            Kind::Tpch(n) => {
                if tpch_load.is_none() {
                    tpch_load = Some(
                        tpch::load_both(opts, progress, &plain_target, &pgshard_target, &cluster)
                            .await?,
                    );
                }
                let load = tpch_load.as_ref().expect("loaded above").as_query_load();
                let sql = tpch::QUERIES[n - 1];
                results.push(
                    run_query_workload(
                        tpch::timing(opts),
                        progress,
                        w,
                        (sql, Compare::Rows),
                        &load,
                        targets,
                        &mut seq,
                    )
                    .await,
                );
                continue;
            }
            _ => {}
        }
        // What stops a throughput workload before its first run.
        let mut not_run: Option<(Status, String)> = None;
        let mut script_text = None;
        match w.kind {
            Kind::Script { script, .. } => {
                if matches!(script, Script::W2 { .. }) && w2_setup.is_none() {
                    let setup = setup_w2(progress, targets).await?;
                    if setup.error.is_none() {
                        grant_client(opts, targets, &cluster, "w2").await?;
                    }
                    w2_setup = Some(setup);
                }
                if let Script::W5(variant) = script {
                    if w5_setup.is_none() {
                        started.plain_standbys =
                            w5::plain_standbys(&plain_node, base, opts.workers);
                        let s = w5::setup(
                            opts,
                            progress,
                            targets,
                            &plain_node,
                            started.plain_standbys.clone(),
                        );
                        w5_setup = Some(s.await?);
                    }
                    let setup = w5_setup.as_ref().expect("set up above");
                    setup.apply(variant, progress).await?;
                    not_run = setup.error.clone();
                }
                let why;
                (script_text, why) =
                    write_script(opts, w, script, w2_setup.as_ref(), &pgshard_target.client).await;
                not_run = not_run.or(why);
            }
            Kind::Sysbench => {
                if w3_setup.is_none() {
                    let setup = setup_w3(opts, progress, targets).await?;
                    if setup.is_none() {
                        grant_client(opts, targets, &cluster, "sbtest1").await?;
                    }
                    w3_setup = Some(setup);
                }
                not_run = w3_setup.clone().flatten();
            }
            _ => {}
        }
        let mut runs: Vec<Run> = Vec::new();
        let mut status = Status::Ok;
        let mut reason = None;
        if let Some((s, r)) = not_run {
            progress.say(format!(
                "  {}: {r}",
                if s == Status::Skipped {
                    "skipped"
                } else {
                    "error"
                }
            ));
            status = s;
            reason = Some(r);
        }
        'repeats: for rep in (1..=opts.repeat).filter(|_| status == Status::Ok) {
            // pgshard first in odd repetitions, plain first in even ones: drift over
            // time (caches, autovacuum, other load) hits both alike. The first run of a
            // workload is always pgshard's: if it cannot run it, the workload is skipped.
            let order = if rep % 2 == 1 {
                [&pgshard_target, &plain_target]
            } else {
                [&plain_target, &pgshard_target]
            };
            for t in order {
                seq += 1;
                progress.say(format!(
                    "{} {}/{} {}: {}",
                    w.name,
                    rep,
                    opts.repeat,
                    t.target.name(),
                    match w.kind {
                        Kind::Sysbench => format!(
                            "sysbench oltp_insert --threads={} --time={}",
                            opts.clients, opts.duration
                        ),
                        _ => format!(
                            "pgbench {} -c {} -j {} -T {}",
                            w.pgbench_options().join(" "),
                            opts.clients,
                            opts.threads,
                            opts.duration
                        ),
                    }
                ));
                let run = run_once(opts, w, t, rep, seq).await?;
                match &run.error {
                    None => progress.say(format!(
                        "  {} TPS, latency avg {} ms, p95 {} ms{}",
                        report::thousands(run.tps.unwrap_or(0.0)),
                        run.latency_avg_ms.map_or("-".into(), |v| format!("{v:.3}")),
                        run.latency_p95_ms.map_or("-".into(), |v| format!("{v:.3}")),
                        run.pgshard_cpu_us_per_txn
                            .map_or(String::new(), |v| format!(", pgshard {v:.1} µs CPU/txn"))
                    )),
                    Some(e) => progress.say(format!("  failed: {e}")),
                }
                let failed = run.error.clone();
                runs.push(run);
                if let Some(e) = failed {
                    // A statement pgshard refuses as unsupported (0A000: "does not
                    // support") skips the workload; any other failure is an error.
                    status = match t.target {
                        Target::Pgshard if e.contains("not support") => Status::Skipped,
                        _ => Status::Error,
                    };
                    reason = Some(match t.target {
                        Target::Pgshard => format!("through pgshard: {e}"),
                        Target::Plain => format!("plain PostgreSQL: {e}"),
                    });
                    break 'repeats;
                }
            }
        }
        let plain = report::summarize(&runs, Target::Plain);
        let pgshard = report::summarize(&runs, Target::Pgshard);
        let ratio = match (&plain, &pgshard, status) {
            (Some(p), Some(s), Status::Ok) if p.tps_median > 0.0 => {
                Some(s.tps_median / p.tps_median)
            }
            _ => None,
        };
        results.push(WorkloadResult {
            name: w.name.into(),
            description: w.description.into(),
            kind: match w.kind {
                Kind::Sysbench => report::Kind::Sysbench,
                _ => report::Kind::Pgbench,
            },
            pgbench_args: match w.kind {
                Kind::Sysbench => sysbench_args(opts, None, "run"),
                // The plain server's (a workload may run pgbench's own script on pgshard).
                _ => pgbench_args(opts, w, Target::Plain)
                    .into_iter()
                    .chain(["--log".into(), format!("--sampling-rate={SAMPLING_RATE}")])
                    .collect(),
            },
            script: script_text,
            status,
            reason,
            plain: if status == Status::Ok { plain } else { None },
            pgshard: if status == Status::Ok { pgshard } else { None },
            ratio,
            ratio_per_repeat: report::ratios_per_repeat(&runs),
            reference: Reference {
                citus_ratio: w.reference.0,
                goal_ratio: w.reference.1,
            },
            runs,
            query: None,
        });
    }

    // The report.
    if let Some(l) = &w4_load {
        load.insert("w4".into(), serde_json::to_value(l)?);
    }
    if let Some(l) = &tpch_load {
        load.insert("tpch".into(), serde_json::to_value(l)?);
    }
    let tpch_summary = tpch::summary(&results);
    let table = report::table(&results, w4_load.as_ref());
    let interference = report::interference(&results);
    let own_two_phase = report::own_two_phase(&results, "w1-tpcb-simple", "w1-tpcb-vs-own-2pc");
    let tpcb_bound = report::free_coordinator_bound(&results, "w1-tpcb");
    let mut subtitle = String::new();
    if w1 {
        subtitle.push_str(&format!(
            "pgbench scale {}, {} clients, -j {}, {} s x {}, ",
            opts.scale, opts.clients, opts.threads, opts.duration, opts.repeat
        ));
    }
    if let Some(l) = &tpch_load {
        subtitle.push_str(&format!("TPC-H SF {}, ", l.scale));
    }
    if w4_load.is_some() {
        subtitle.push_str(&format!(
            "W4 {} rows, {QUERY_WARMUP}+{QUERY_TIMED} executions x {}, ",
            report::thousands(opts.w4_rows as f64),
            opts.repeat
        ));
    }
    subtitle.push_str(&format!(
        "{} workers, {SHARD_COUNT} shards, {}; {}",
        opts.workers,
        client::describe(
            opts.unix_sockets,
            opts.client_tls,
            opts.client_role.as_ref().map(|r| r.name.as_str())
        ),
        date
    ));
    let doc = json!({
        "pgshard_bench_format": 3,
        "date": date,
        "command": command,
        "pgshard": revision,
        "machine": machine,
        "postgresql": postgres,
        "options": {
            "scale": opts.scale,
            "clients": opts.clients,
            "threads": opts.threads,
            "duration_s": opts.duration,
            "repeat": opts.repeat,
            "w4_rows": opts.w4_rows,
            "w4_warmup_executions": QUERY_WARMUP,
            "w4_timed_executions": QUERY_TIMED,
            "tpch_scale": opts.tpch_scale,
            "tpch_repeat": opts.tpch_repeat,
            "workers": opts.workers,
            "shard_count": SHARD_COUNT,
            "latency_sampling_rate": SAMPLING_RATE,
            "sysbench_table_size": SYSBENCH_TABLE_SIZE,
            "client_tls": opts.client_tls,
            "coordinators": opts.coordinators,
            "client_role": opts.client_role.as_ref().map(|r| r.name.clone()),
            "client_transport": if opts.unix_sockets { "unix" } else { "tcp" },
            "ports": { "plain": plain_port, "pgshard": cluster.port,
                       "coordinator": cluster.coordinator_port, "workers": cluster.worker_ports },
        },
        "notes": [
            "tps: pgbench's figure without initial connection time; latency_avg_ms: pgbench's 'latency average'",
            "latency percentiles: nearest rank over pgbench's per-transaction log sampled at latency_sampling_rate",
            "pgbench runs with -n; before each run the bench does what pgbench would: vacuum pgbench_branches, vacuum pgbench_tellers, truncate pgbench_history",
            "pgshard_cpu_us_per_txn: utime+stime of the pgshard process over the run / transactions processed",
            "server_cpu_us_per_txn: CPU of every PostgreSQL process of the target (plain: one server; pgshard: coordinator node + workers), same denominator",
            "ratio: median pgshard TPS / median plain TPS; for query workloads (kind query) median plain time / median pgshard time; either way above 1 means pgshard was faster",
            "query workloads: per run (target, repetition) one connection, warm-up executions, then timed ones (client wall clock, query sent to last row received); the run's time is the median of the timed ones, a target's the median over its runs",
            "W4 load: plain = create table + insert ... select; pgshard = the same as a local table on the coordinator node + create_distributed_table (rows moved to the shards); then vacuum analyze (not counted) and a checkpoint on every server",
            "status: ok = measured on both targets; skipped = pgshard refused it as not supported (SQLSTATE 0A000, or pgbench/sysbench quoting pgshard's 'does not support'), with pgshard's message in reason; error = any other failure (failed or no transactions, different answers, a plain-server failure), never reported as measured",
            "w1-tpcb-1pc and the W2 workloads run our pgbench script (field script): SET citus.multi_shard_commit_protocol first in every transaction, on both targets (pgshard takes no startup options); W2's script comment says on how many shards its rows land",
            "W2: table w2 (id int) without primary key, distributed by id (shard_count shards); ids chosen from pg_dist_shard's ranges with hashint4; truncated before each run",
            "W3 (kind sysbench): sysbench oltp_insert prepare on both targets, then create_distributed_table('sbtest1','id') through pgshard; truncate sbtest1 before each run; tps from 'transactions: N (X per sec.)', latency avg and 95th percentile from sysbench, p50/p99 nearest rank over its --histogram; failed_transactions = ignored errors",
            "TPC-H (workloads tpch-qNN, kind query; load.tpch, tpch): tpchgen's rows at options.tpch_scale by COPY into both targets (through pgshard lineitem/orders co-located by order key, part/partsupp by part key, customer and supplier by their keys, nation and region reference tables), primary keys and an index on l_partkey on both, then vacuum analyze; per query and target one warm-up execution then 3 timed ones (1 when the warm-up took over 10 s), statement_timeout 300 s (a timeout fails the query), answers compared row by row in order; tpch.geometric_mean_ratio: geometric mean of plain time / pgshard time over the queries both answered",
            "w4-copy (kind copy): W4's rows exported from the plain server to a CSV file, then per run truncate test_copy + one psql \\copy test_copy from FILE timed by its wall clock (times_ms has the one COPY), row count checked; rows_per_s = rows / median time",
            "options.client_role: the measured clients (pgbench, sysbench, psql, W4's queries) log in as this LOGIN role made by the bench with only the workloads' privileges (null: as the superuser postgres); loading, setup and the vacuum/truncate before each run stay with postgres; options.client_tls: every connection to both targets uses sslmode=require (the plain server then has ssl = on with a self-signed certificate); clients: what a client connection of each target saw (current_user, TLS in psql's \\conninfo)",
            "W5 (workloads w5-*, seed 002): the login / logout scripts (-M extended) on user_info (scale x 100,000 users, distributed by userid through pgshard, the record tables co-located); 2 standbys per primary on both targets (plain server, coordinator node, workers), put before each workload in its configuration: none (stopped), async (synchronous_standby_names empty), sync-MODE (FIRST 1 (s1, s2), synchronous_commit = MODE); none and async with synchronous_commit = off; server CPU counts the primaries only",
            "pgbench_cpu_s: getrusage(RUSAGE_CHILDREN) around the run; machine_irq_s: interrupt + softirq time (/proc/stat), mostly loopback TCP; other_cpu_fraction: machine busy time not spent by the target, pgshard, pgbench or interrupts, over all CPU time of the run",
        ],
        "clients": clients,
        "load": load,
        "table": table,
        "interference": interference,
        "own_two_phase": own_two_phase,
        "free_coordinator_bound": tpcb_bound,
        "tpch": tpch_summary,
        "workloads": results,
    });
    let json_path = opts.out.join("bench.json");
    fs::write(&json_path, serde_json::to_string_pretty(&doc)? + "\n")
        .with_context(|| format!("writing {}", json_path.display()))?;
    let svg_path = opts.out.join("bench.svg");
    fs::write(&svg_path, report::svg(&results, &subtitle))
        .with_context(|| format!("writing {}", svg_path.display()))?;
    let mut md = format!(
        "{subtitle}\n\n{}",
        report::markdown_table(&results, w4_load.as_ref())
    );
    let tpch_notes = [
        tpch_load.as_ref().map(|l| l.line()),
        tpch_summary.as_ref().map(|s| s.text()),
    ];
    let notes = [&own_two_phase, &tpcb_bound, &interference]
        .into_iter()
        .chain(&tpch_notes);
    for note in notes.clone().flatten() {
        md.push_str(&format!("\n{note}\n"));
    }
    fs::write(opts.out.join("bench.md"), md)?;

    println!("{subtitle}");
    print!("{table}");
    for note in notes.flatten() {
        println!("{note}");
    }
    println!(
        "results: {}, chart: {}",
        json_path.display(),
        svg_path.display()
    );
    Ok(())
}

/// One target of the comparison.
struct TargetCtx {
    target: Target,
    /// The superuser `postgres`: loading, setup, and the vacuum and truncate before
    /// each run.
    admin: Env,
    /// The measured clients: the superuser, or with --client-role that role.
    client: Env,
    probe: cpu::Probe,
}

/// With --client-role, grants the role what the workloads need on `table`, on both
/// targets (client.rs).
async fn grant_client(
    opts: &Options,
    [plain, pgshard]: [&TargetCtx; 2],
    cluster: &ClusterInfo,
    table: &str,
) -> Result<()> {
    match &opts.client_role {
        Some(role) => {
            role.grant(table, &plain.admin, &pgshard.admin, &node_envs(cluster))
                .await
        }
        None => Ok(()),
    }
}

/// `CHECKPOINT` on every server of both targets.
async fn checkpoint_all(cluster: &ClusterInfo, plain: &Env) -> Result<()> {
    for env in node_envs(cluster).into_iter().chain([plain.clone()]) {
        pgbench::psql(&env, &["-c", "checkpoint"]).await?;
    }
    Ok(())
}

/// A connection (simple query protocol) with a target's libpq settings; TLS when its
/// PGSSLMODE is `require` (the server's certificate is not checked, as libpq's
/// `require`).
async fn connect(env: &Env) -> Result<tokio_postgres::Client> {
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let mut config = tokio_postgres::Config::new();
    config
        .host(get("PGHOST").unwrap_or("127.0.0.1"))
        .port(get("PGPORT").and_then(|p| p.parse().ok()).unwrap_or(5432))
        .user(get("PGUSER").unwrap_or("postgres"))
        .dbname(get("PGDATABASE").unwrap_or("postgres"))
        .application_name("pgshard bench")
        .connect_timeout(Duration::from_secs(30));
    if let Some(pw) = get("PGPASSWORD") {
        config.password(pw);
    }
    use tokio_postgres::config::SslMode;
    config.ssl_mode(match get("PGSSLMODE") {
        Some("require") => SslMode::Require,
        _ => SslMode::Disable,
    });
    // pgshard's own TLS client for tokio-postgres (outside `pgshard serve` it
    // encrypts without checking the certificate).
    let (client, connection) = config
        .connect(crate::backend::tls::ControlTls)
        .await
        .with_context(|| {
            format!(
                "connecting to {}:{}",
                get("PGHOST").unwrap_or("?"),
                get("PGPORT").unwrap_or("?")
            )
        })?;
    // Drive the connection, dropping the server's notices (create_distributed_table's
    // progress): awaited as a future, tokio-postgres would log every one of them.
    let mut connection = connection;
    tokio::spawn(async move {
        use futures_util::StreamExt;
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(_)) = messages.next().await {}
    });
    Ok(client)
}

/// A statement that failed: the server's message and SQLSTATE, or the client's error.
#[derive(Debug, Clone)]
struct SqlError {
    message: String,
    sqlstate: Option<String>,
}

impl SqlError {
    fn client(message: String) -> SqlError {
        SqlError {
            message,
            sqlstate: None,
        }
    }

    /// The message prefixed with (the start of) the statement.
    fn during(self, sql: &str) -> SqlError {
        let short: String = sql.chars().take(60).collect();
        let ellipsis = if short.len() < sql.len() { "..." } else { "" };
        SqlError {
            message: format!("{short}{ellipsis}: {}", self.message),
            sqlstate: self.sqlstate,
        }
    }
}

fn sql_error(e: &tokio_postgres::Error) -> SqlError {
    if let Some(db) = e.as_db_error() {
        return SqlError {
            message: format!("ERROR {}: {}", db.code().code(), db.message()),
            sqlstate: Some(db.code().code().to_string()),
        };
    }
    let mut message = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        message.push_str(&format!(": {s}"));
        source = s.source();
    }
    SqlError::client(message)
}

/// Rows of a query's answer, as text.
type Answer = Vec<Vec<Option<String>>>;

/// Runs `sql` over the simple query protocol; the rows of its answer.
async fn simple(
    client: &tokio_postgres::Client,
    sql: &str,
    timeout: Duration,
) -> Result<Answer, SqlError> {
    use tokio_postgres::SimpleQueryMessage;
    match tokio::time::timeout(timeout, client.simple_query(sql)).await {
        Err(_) => Err(SqlError::client(format!(
            "no answer after {} s",
            timeout.as_secs()
        ))),
        Ok(Err(e)) => Err(sql_error(&e)),
        Ok(Ok(messages)) => Ok(messages
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => {
                    Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                }
                _ => None,
            })
            .collect()),
    }
}

/// libpq environments of the cluster's PostgreSQL servers (coordinator node, workers).
fn node_envs(cluster: &ClusterInfo) -> Vec<Env> {
    let mut ports = vec![cluster.coordinator_port];
    ports.extend(&cluster.worker_ports);
    ports
        .into_iter()
        .map(|port| {
            let mut env = cluster.pg_env();
            env.retain(|(k, _)| k != "PGPORT");
            env.push(("PGPORT".into(), port.to_string()));
            env
        })
        .collect()
}

/// Versions, and the settings of the plain server and of a worker as PostgreSQL reports
/// them (everything set in a configuration file), to show they are the same.
async fn server_settings(opts: &Options, plain: &Env, cluster: &ClusterInfo) -> serde_json::Value {
    let query = "select name, current_setting(name) from pg_settings \
                 where source = 'configuration file' order by name";
    let read = |env: Env| async move {
        let text = pgbench::psql(&env, &["-F", "\t", "-c", query])
            .await
            .unwrap_or_default();
        text.lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>()
    };
    let plain_settings = read(plain.clone()).await;
    let worker_settings = read(node_envs(cluster)[1.min(cluster.worker_ports.len())].clone()).await;
    // Where they listen differs by design, and TLS for clients (--client-tls) is the
    // plain server's only: pgshard serves it in front of the workers.
    let local = ["port", "unix_socket_directories", "listen_addresses", "ssl"];
    let differences: Vec<String> = plain_settings
        .iter()
        .filter(|(k, _)| !local.contains(&k.as_str()))
        .filter(|kv| !worker_settings.contains(kv))
        .map(|(k, v)| format!("{k}={v}"))
        .chain(
            worker_settings
                .iter()
                .filter(|(k, _)| !local.contains(&k.as_str()))
                .filter(|(k, _)| !plain_settings.iter().any(|(pk, _)| pk == k))
                .map(|(k, v)| format!("worker only: {k}={v}")),
        )
        .collect();
    let version = pgbench::psql(plain, &["-c", "select version()"]).await.ok();
    let as_map = |v: &[(String, String)]| {
        v.iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect::<serde_json::Map<_, _>>()
    };
    let pgshard_toml = fs::read_to_string(opts.cluster_dir().join("pgshard.toml"))
        .ok()
        .and_then(|t| toml::from_str::<toml::Table>(&t).ok())
        .map(|mut t| {
            t.remove("password");
            serde_json::to_value(t).unwrap_or_default()
        });
    json!({
        "version": version,
        "binaries": machine::postgres_versions(),
        "plain_settings": as_map(&plain_settings),
        "worker_settings": as_map(&worker_settings),
        "plain_vs_worker_differences": differences,
        "settings_file": fs::read_to_string(opts.plain_dir().join("data").join("pgshard.conf")).ok(),
        "pgshard_config": pgshard_toml,
    })
}

fn plain_node(opts: &Options, port: u16) -> Node {
    let dir = opts.plain_dir();
    Node {
        name: "plain PostgreSQL".into(),
        data_dir: dir.join("data"),
        listen_host: "127.0.0.1".into(),
        port,
        socket_dir: node::socket_dir_for(&dir),
        log_file: dir.join("logs").join("postgres.log"),
    }
}

/// `n` consecutive ports free on 127.0.0.1, from `from` on.
fn free_ports(from: u16, n: u16) -> Result<u16> {
    let mut base = from.max(1024);
    while base as u32 + n as u32 <= 65535 {
        if (base..base + n).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return Ok(base);
        }
        base += n;
    }
    bail!("no {n} consecutive free ports from {from} on")
}

/// Stops and deletes what an earlier run in OUT left (the directories we own only).
async fn remove_previous(opts: &Options, progress: &Progress) -> Result<()> {
    let cluster = opts.cluster_dir();
    if cluster.exists() {
        if cluster.join("cluster.toml").exists() {
            progress.say(format!(
                "stopping and removing the earlier {}",
                cluster.display()
            ));
            let _quiet = StdoutToStderr::new();
            let _ = cluster_down(&cluster).await;
        } else if fs::read_dir(&cluster)?.next().is_some() {
            bail!(
                "{} exists and is not a pgshard bench cluster: choose another --out",
                cluster.display()
            );
        }
        remove_all(&cluster)?;
    }
    let plain = opts.plain_dir();
    if plain.exists() {
        let ours = plain.join("data").exists() || plain.join("logs").exists();
        if !ours && fs::read_dir(&plain)?.next().is_some() {
            bail!(
                "{} exists and is not a pgshard bench server: choose another --out",
                plain.display()
            );
        }
        let n = plain_node(opts, 0);
        if n.running_pid().is_some() {
            progress.say(format!("stopping the earlier {}", plain.display()));
        }
        tokio::task::spawn_blocking(move || n.stop()).await??;
        remove_all(&plain)?;
    }
    let runs = opts.runs_dir();
    if runs.exists() {
        remove_all(&runs)?;
    }
    Ok(())
}

fn remove_all(dir: &Path) -> Result<()> {
    fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))
}

/// Stops pgshard, the cluster and the plain server; unless --keep, deletes their data
/// directories (logs stay).
async fn stop_everything(opts: &Options, started: &Started) -> Result<()> {
    let mut errors = Vec::new();
    if started.cluster && opts.cluster_dir().join("cluster.toml").exists() {
        let _quiet = StdoutToStderr::new();
        if let Err(e) = cluster_down(&opts.cluster_dir()).await {
            errors.push(format!("cluster down: {e:#}"));
        }
    }
    let standbys = started.plain_standbys.clone();
    if let Err(e) = tokio::task::spawn_blocking(move || w5::stop_standbys(&standbys)).await? {
        errors.push(format!("stopping the plain PostgreSQL's standbys: {e:#}"));
    }
    if let Some(n) = &started.plain {
        let n = n.clone();
        match tokio::task::spawn_blocking(move || n.stop()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => errors.push(format!("stopping the plain PostgreSQL: {e:#}")),
            Err(e) => errors.push(format!("stopping the plain PostgreSQL: {e}")),
        }
    }
    if !opts.keep && errors.is_empty() {
        for dir in [opts.cluster_dir(), opts.plain_dir()] {
            for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = entry.file_name();
                if name != "logs" && entry.path().is_dir() {
                    let _ = fs::remove_dir_all(entry.path());
                }
            }
        }
        if let Some(n) = &started.plain {
            if !n.socket_dir.starts_with(&opts.out) {
                let _ = fs::remove_dir_all(&n.socket_dir);
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        bail!("{}", errors.join("; "))
    }
}
