//! The results of a benchmark: raw runs, per-target summaries (medians and spread), the
//! terminal table and the SVG bar chart of the pgshard / plain PostgreSQL ratios.
//!
//! Two families of workloads: throughput (pgbench: W1, W2; sysbench: W3; ratio = pgshard
//! TPS / plain TPS) and times (W4's single queries and its COPY; ratio = plain time /
//! pgshard time). Either way a ratio above 1 means pgshard was faster.

use serde::Serialize;
use std::fmt::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    Plain,
    Pgshard,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Plain => "plain",
            Target::Pgshard => "pgshard",
        }
    }
}

/// CPU seconds of one PostgreSQL server during a run.
#[derive(Debug, Clone, Serialize)]
pub struct ServerCpu {
    pub name: String,
    pub cpu_s: f64,
}

/// One pgbench run against one target.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub target: Target,
    /// 1-based repetition.
    pub repeat: u32,
    /// 1-based position of this run among all runs of the benchmark.
    pub sequence: u32,
    pub ok: bool,
    pub error: Option<String>,
    pub exit_code: Option<i32>,
    pub tps: Option<f64>,
    pub transactions: Option<u64>,
    pub failed_transactions: Option<u64>,
    pub latency_avg_ms: Option<f64>,
    pub latency_p50_ms: Option<f64>,
    pub latency_p95_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
    /// Transactions in the sampled per-transaction log the percentiles come from.
    pub latency_samples: usize,
    pub initial_connection_ms: Option<f64>,
    pub wall_s: f64,
    /// pgshard's own process (pgshard target only).
    pub pgshard_cpu_s: Option<f64>,
    pub pgshard_cpu_us_per_txn: Option<f64>,
    /// Every PostgreSQL server of the target (plain: one; pgshard: coordinator node and
    /// workers).
    pub server_cpu: Vec<ServerCpu>,
    pub server_cpu_us_per_txn: Option<f64>,
    /// pgbench's own CPU time.
    pub pgbench_cpu_s: f64,
    /// The whole machine (includes pgbench and anything else running).
    pub machine_cpu_busy_s: f64,
    pub machine_cpu_total_s: f64,
    /// Interrupts and softirqs (mostly loopback TCP), charged to no process.
    pub machine_irq_s: f64,
    /// Busy time of the machine not spent by the target, pgbench or interrupts: other
    /// users of the machine, as a fraction of all CPU time of the run (0 = none).
    pub other_cpu_fraction: f64,
    pub loadavg_before: Option<String>,
    /// pgbench's full output.
    pub output_file: String,
}

/// Medians over the successful runs of one target.
#[derive(Debug, Clone, Serialize)]
pub struct TargetSummary {
    pub runs: usize,
    pub tps_median: f64,
    pub tps_min: f64,
    pub tps_max: f64,
    pub latency_avg_ms_median: Option<f64>,
    pub latency_p50_ms_median: Option<f64>,
    pub latency_p95_ms_median: Option<f64>,
    pub latency_p99_ms_median: Option<f64>,
    pub pgshard_cpu_us_per_txn_median: Option<f64>,
    pub server_cpu_us_per_txn_median: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Measured on both targets.
    Ok,
    /// pgshard cannot run it (yet): `reason` holds pgbench's message, or for a query
    /// pgshard's error (SQLSTATE 0A000, feature not supported).
    Skipped,
    /// The plain PostgreSQL failed (something is wrong with the setup), or a query
    /// failed through pgshard with another error, or the two targets' answers differ.
    Error,
}

/// What a workload measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// pgbench runs: throughput and latency (`plain`, `pgshard`, `runs`).
    Pgbench,
    /// sysbench runs: the same figures as pgbench's (`plain`, `pgshard`, `runs`).
    Sysbench,
    /// One query executed a few times: its time (`query`).
    Query,
    /// A COPY of a file into a table, once per run: its time and rows/s (`query`).
    Copy,
}

impl Kind {
    /// Measured as throughput (TPS; ratio pgshard / plain), else as a time (ratio
    /// plain / pgshard).
    pub fn throughput(self) -> bool {
        matches!(self, Kind::Pgbench | Kind::Sysbench)
    }
}

/// A query workload's executions against one target in one repetition, on one
/// connection: the warm-up executions, then the timed ones.
#[derive(Debug, Clone, Serialize)]
pub struct QueryRun {
    pub target: Target,
    /// 1-based repetition.
    pub repeat: u32,
    /// 1-based position of this run among all runs of the benchmark.
    pub sequence: u32,
    pub ok: bool,
    pub error: Option<String>,
    /// SQLSTATE of the error, when the server sent one.
    pub sqlstate: Option<String>,
    /// Wall-clock times on the client, query sent to last row received.
    pub warmup_ms: Vec<f64>,
    pub times_ms: Vec<f64>,
    /// Median of `times_ms`.
    pub median_ms: Option<f64>,
    /// The rows of the last execution, as text.
    pub answer: Vec<Vec<Option<String>>>,
    /// CPU of pgshard's process / of the target's PostgreSQL servers over the timed
    /// executions, per execution.
    pub pgshard_cpu_ms_per_query: Option<f64>,
    pub server_cpu_ms_per_query: Option<f64>,
}

/// Medians over the successful query runs of one target.
#[derive(Debug, Clone, Serialize)]
pub struct QuerySummary {
    pub runs: usize,
    /// Median of the runs' medians, and their min-max.
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub pgshard_cpu_ms_per_query_median: Option<f64>,
    pub server_cpu_ms_per_query_median: Option<f64>,
    /// COPY workloads: rows copied per second at the median time.
    pub rows_per_s: Option<f64>,
}

/// The figures of a query workload.
#[derive(Debug, Clone, Serialize)]
pub struct QueryFigures {
    pub sql: String,
    /// Rows in the queried table.
    pub table_rows: u64,
    /// Executions per run: untimed first, then timed.
    pub warmup: u32,
    pub timed: u32,
    pub plain: Option<QuerySummary>,
    pub pgshard: Option<QuerySummary>,
    /// Whether both targets gave the same answer in every repetition both answered
    /// (None: no repetition had both).
    pub answers_equal: Option<bool>,
    /// The plain server's answer.
    pub answer: Option<Vec<Vec<Option<String>>>>,
    pub runs: Vec<QueryRun>,
}

/// Loading W4's table `test` on both targets (seconds).
#[derive(Debug, Clone, Default, Serialize)]
pub struct QueryLoad {
    pub rows: u64,
    /// `create table` + `insert ... select` on the plain server.
    pub plain_s: Option<f64>,
    /// The same through pgshard, as a local table on the coordinator node.
    pub pgshard_insert_s: Option<f64>,
    /// `create_distributed_table('test', 'id')` through pgshard: the rows moved to the
    /// shards.
    pub pgshard_distribute_s: Option<f64>,
    /// `pgshard_insert_s + pgshard_distribute_s`.
    pub pgshard_s: Option<f64>,
    /// `vacuum analyze` of the table (plain) / of its shards (on the workers), after
    /// the load and not counted in it.
    pub plain_vacuum_s: Option<f64>,
    pub pgshard_vacuum_s: Option<f64>,
    /// (pages, all-visible pages) of the table / of its shards after that vacuum: scans
    /// check each row's visibility on pages not all-visible, so both should be whole.
    pub plain_all_visible: Option<(u64, u64)>,
    pub pgshard_all_visible: Option<(u64, u64)>,
    /// Why loading through pgshard failed.
    pub error: Option<String>,
    pub sqlstate: Option<String>,
}

/// The figures of workloads.md for this machine, to put beside ours.
#[derive(Debug, Clone, Serialize)]
pub struct Reference {
    /// Citus 12.1 / one PostgreSQL, measured on this machine (workloads.md).
    pub citus_ratio: Option<f64>,
    /// pgshard's goal for the ratio.
    pub goal_ratio: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct WorkloadResult {
    pub name: String,
    pub description: String,
    pub kind: Kind,
    /// pgbench workloads: pgbench's arguments; sysbench workloads: sysbench's (the
    /// password left out); empty for queries.
    pub pgbench_args: Vec<String>,
    /// The pgbench script of workloads that run one of ours (`-f`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    pub status: Status,
    pub reason: Option<String>,
    /// pgbench workloads only.
    pub plain: Option<TargetSummary>,
    pub pgshard: Option<TargetSummary>,
    /// Above 1: pgshard faster. pgbench: median pgshard TPS / median plain TPS;
    /// queries: median plain time / median pgshard time.
    pub ratio: Option<f64>,
    /// The same ratio for each repetition that has both targets.
    pub ratio_per_repeat: Vec<f64>,
    pub reference: Reference,
    /// pgbench runs (empty for queries).
    pub runs: Vec<Run>,
    /// Query workloads only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query: Option<QueryFigures>,
}

pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn median_of(runs: &[&Run], f: impl Fn(&Run) -> Option<f64>) -> Option<f64> {
    median(&runs.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
}

pub fn summarize(runs: &[Run], target: Target) -> Option<TargetSummary> {
    let ok: Vec<&Run> = runs
        .iter()
        .filter(|r| r.target == target && r.ok && r.tps.is_some())
        .collect();
    let tps: Vec<f64> = ok.iter().filter_map(|r| r.tps).collect();
    Some(TargetSummary {
        runs: ok.len(),
        tps_median: median(&tps)?,
        tps_min: tps.iter().copied().fold(f64::INFINITY, f64::min),
        tps_max: tps.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        latency_avg_ms_median: median_of(&ok, |r| r.latency_avg_ms),
        latency_p50_ms_median: median_of(&ok, |r| r.latency_p50_ms),
        latency_p95_ms_median: median_of(&ok, |r| r.latency_p95_ms),
        latency_p99_ms_median: median_of(&ok, |r| r.latency_p99_ms),
        pgshard_cpu_us_per_txn_median: median_of(&ok, |r| r.pgshard_cpu_us_per_txn),
        server_cpu_us_per_txn_median: median_of(&ok, |r| r.server_cpu_us_per_txn),
    })
}

/// pgshard / plain of each repetition where both succeeded.
pub fn ratios_per_repeat(runs: &[Run]) -> Vec<f64> {
    let mut reps: Vec<u32> = runs.iter().map(|r| r.repeat).collect();
    reps.dedup();
    reps.into_iter()
        .filter_map(|rep| {
            let tps = |t: Target| {
                runs.iter()
                    .find(|r| r.repeat == rep && r.target == t && r.ok)
                    .and_then(|r| r.tps)
            };
            Some(tps(Target::Pgshard)? / tps(Target::Plain)?)
        })
        .collect()
}

/// Medians over the successful query runs of one target.
pub fn summarize_queries(runs: &[QueryRun], target: Target) -> Option<QuerySummary> {
    let ok: Vec<&QueryRun> = runs
        .iter()
        .filter(|r| r.target == target && r.ok && r.median_ms.is_some())
        .collect();
    let ms: Vec<f64> = ok.iter().filter_map(|r| r.median_ms).collect();
    let med = |f: &dyn Fn(&QueryRun) -> Option<f64>| {
        median(&ok.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
    };
    Some(QuerySummary {
        runs: ok.len(),
        median_ms: median(&ms)?,
        min_ms: ms.iter().copied().fold(f64::INFINITY, f64::min),
        max_ms: ms.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        pgshard_cpu_ms_per_query_median: med(&|r| r.pgshard_cpu_ms_per_query),
        server_cpu_ms_per_query_median: med(&|r| r.server_cpu_ms_per_query),
        rows_per_s: None,
    })
}

/// plain time / pgshard time of each repetition where both succeeded.
pub fn query_ratios_per_repeat(runs: &[QueryRun]) -> Vec<f64> {
    let mut reps: Vec<u32> = runs.iter().map(|r| r.repeat).collect();
    reps.dedup();
    reps.into_iter()
        .filter_map(|rep| {
            let ms = |t: Target| {
                runs.iter()
                    .find(|r| r.repeat == rep && r.target == t && r.ok)
                    .and_then(|r| r.median_ms)
                    .filter(|&v| v > 0.0)
            };
            Some(ms(Target::Plain)? / ms(Target::Pgshard)?)
        })
        .collect()
}

/// How busy other users kept the machine during the runs: a sentence, or None when the
/// runs had the machine to themselves (under 5 % at most).
pub fn interference(results: &[WorkloadResult]) -> Option<String> {
    let f: Vec<f64> = results
        .iter()
        .flat_map(|w| &w.runs)
        .map(|r| r.other_cpu_fraction)
        .collect();
    let max = f.iter().copied().fold(0.0, f64::max);
    (max >= 0.05).then(|| {
        format!(
            "note: other processes on this machine used {:.0}% of its CPU during the median \
             run (at most {:.0}%): the figures are disturbed",
            median(&f).unwrap_or(0.0) * 100.0,
            max * 100.0
        )
    })
}

/// What two-phase commit costs one PostgreSQL here: the plain server's TPC-B with its
/// own PREPARE TRANSACTION + COMMIT PREPARED (`own_2pc`) against its plain TPC-B in the
/// same mode (`one_phase`), beside pgshard's 2PC against the latter. None unless both
/// workloads were measured.
pub fn own_two_phase(results: &[WorkloadResult], one_phase: &str, own_2pc: &str) -> Option<String> {
    let find = |name: &str| results.iter().find(|w| w.name == name);
    let one = find(one_phase)?;
    let own = find(own_2pc)?;
    let plain_one = one.plain.as_ref()?.tps_median;
    let plain_own = own.plain.as_ref()?.tps_median;
    let pgshard = own.pgshard.as_ref()?.tps_median;
    (plain_one > 0.0).then(|| {
        format!(
            "2PC on one PostgreSQL ({own_2pc}): its TPC-B committed with PREPARE \
             TRANSACTION + COMMIT PREPARED runs {} TPS, {:.2} of the same server's TPC-B with \
             COMMIT ({one_phase}: {} TPS); pgshard with 2PC across workers: {} TPS, {:.2}",
            thousands(plain_own),
            plain_own / plain_one,
            thousands(plain_one),
            thousands(pgshard),
            pgshard / plain_one
        )
    })
}

/// The most a coordinator could reach on this machine in `workload`, if it used no CPU
/// at all: per repetition, what the rest of the machine (the servers, pgbench,
/// interrupts) spent per pgshard transaction, against every core kept busy; over the
/// plain server's TPS of the same repetition. This bounds the ratio a faster pgshard
/// could give when the machine is the limit. None unless both targets were measured.
pub fn free_coordinator_bound(results: &[WorkloadResult], workload: &str) -> Option<String> {
    let w = results.iter().find(|w| w.name == workload)?;
    let run = |rep: u32, t: Target| {
        w.runs
            .iter()
            .find(|r| r.repeat == rep && r.target == t && r.ok)
    };
    let mut bounds = Vec::new();
    let mut rest_us = Vec::new();
    for rep in 1..=w.runs.iter().map(|r| r.repeat).max()? {
        let (Some(p), Some(plain)) = (run(rep, Target::Pgshard), run(rep, Target::Plain)) else {
            continue;
        };
        let txns = p.transactions? as f64;
        let rest_s = p.machine_cpu_busy_s - p.pgshard_cpu_s?;
        if txns <= 0.0 || rest_s <= 0.0 || p.wall_s <= 0.0 {
            continue;
        }
        let rest = rest_s / txns;
        let cores = p.machine_cpu_total_s / p.wall_s;
        bounds.push(cores / rest / plain.tps?);
        rest_us.push(rest * 1e6);
    }
    let bound = median(&bounds)?;
    Some(format!(
        "{workload} with a coordinator using no CPU: the servers, pgbench and interrupts \
         used {:.0} µs of machine time per transaction, so with every core busy at most \
         {:.2} of plain PostgreSQL's TPS (median over {} repetitions; pgshard measured {:.2})",
        median(&rest_us)?,
        bound,
        bounds.len(),
        w.ratio.unwrap_or(0.0)
    ))
}

/// 12345.6 -> "12,346".
pub fn thousands(v: f64) -> String {
    let s = format!("{:.0}", v.max(0.0));
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.decimals$}"))
}

/// "skipped" / "error".
fn status_word(status: Status) -> &'static str {
    if status == Status::Skipped {
        "skipped"
    } else {
        "error"
    }
}

/// Aligned columns (text columns left, figures right); a row of two cells is a workload
/// that was not measured: its name, then the reason on the rest of the line.
fn render(header: &[&str], rows: &[Vec<String>], text_columns: usize) -> String {
    let cols = header.len();
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows.iter().filter(|r| r.len() == cols) {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let line = |cells: &[String]| -> String {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = width[i].saturating_sub(c.chars().count());
            if i < text_columns {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
            s.push_str("  ");
        }
        s.trim_end().to_string()
    };
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    let mut out = line(&header);
    out.push('\n');
    for r in rows {
        if r.len() == cols {
            out.push_str(&line(r));
        } else {
            out.push_str(&r[0]);
            out.push_str(&" ".repeat(width[0].saturating_sub(r[0].chars().count()) + 2));
            out.push_str(&r[1]);
        }
        out.push('\n');
    }
    out
}

/// W4's load times in one line.
pub fn load_line(load: &QueryLoad) -> String {
    let secs = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1} s"));
    let mut s = format!(
        "W4 load of {} rows: plain {}; pgshard {} (local insert {} + create_distributed_table {})",
        thousands(load.rows as f64),
        secs(load.plain_s),
        secs(load.pgshard_s),
        secs(load.pgshard_insert_s),
        secs(load.pgshard_distribute_s)
    );
    let visible = |v: Option<(u64, u64)>| match v {
        Some((pages, all)) if pages > 0 => format!("{:.0} %", all as f64 * 100.0 / pages as f64),
        _ => "-".into(),
    };
    s.push_str(&format!(
        "; pages all-visible after vacuum: plain {}, pgshard's shards {}",
        visible(load.plain_all_visible),
        visible(load.pgshard_all_visible)
    ));
    if let Some(e) = &load.error {
        s.push_str(&format!("; through pgshard failed: {e}"));
    }
    s
}

const QUERY_RATIO_HEADER: &str = "plain time / pgshard time (>1: pgshard faster)";

/// The terminal table: one line per workload and target; pgbench workloads first, then
/// the query workloads in a table of their own, followed by W4's load times.
pub fn table(results: &[WorkloadResult], load: Option<&QueryLoad>) -> String {
    let header = [
        "workload",
        "target",
        "TPS median",
        "spread (min-max)",
        "lat avg ms",
        "p50 ms",
        "p95 ms",
        "pgshard/plain",
        "pgshard µs CPU/txn",
        "servers µs CPU/txn",
    ];
    let mut rows: Vec<Vec<String>> = vec![];
    let mut query_rows: Vec<Vec<String>> = vec![];
    for w in results {
        let rows = if w.kind.throughput() {
            &mut rows
        } else {
            &mut query_rows
        };
        if w.status != Status::Ok {
            rows.push(vec![
                w.name.clone(),
                format!(
                    "{}: {}",
                    status_word(w.status),
                    w.reason.as_deref().unwrap_or("no reason recorded")
                ),
            ]);
            continue;
        }
        if let Some(q) = &w.query {
            for (target, s) in [(Target::Plain, &q.plain), (Target::Pgshard, &q.pgshard)] {
                let Some(s) = s else { continue };
                let first = target == Target::Plain;
                rows.push(vec![
                    if first { w.name.clone() } else { String::new() },
                    target.name().into(),
                    format!("{:.1}", s.median_ms),
                    format!("{:.1}-{:.1}", s.min_ms, s.max_ms),
                    s.rows_per_s.map_or(String::new(), thousands),
                    if first {
                        String::new()
                    } else {
                        opt(w.ratio, 2)
                    },
                    opt(s.pgshard_cpu_ms_per_query_median, 1),
                    opt(s.server_cpu_ms_per_query_median, 1),
                ]);
            }
            continue;
        }
        for (target, s) in [(Target::Plain, &w.plain), (Target::Pgshard, &w.pgshard)] {
            let Some(s) = s else { continue };
            let first = target == Target::Plain;
            rows.push(vec![
                if first { w.name.clone() } else { String::new() },
                target.name().into(),
                thousands(s.tps_median),
                format!("{}-{}", thousands(s.tps_min), thousands(s.tps_max)),
                opt(s.latency_avg_ms_median, 3),
                opt(s.latency_p50_ms_median, 3),
                opt(s.latency_p95_ms_median, 3),
                if first {
                    String::new()
                } else {
                    opt(w.ratio, 2)
                },
                opt(s.pgshard_cpu_us_per_txn_median, 1),
                opt(s.server_cpu_us_per_txn_median, 1),
            ]);
        }
    }
    let mut out = String::new();
    if !rows.is_empty() {
        out.push_str(&render(&header, &rows, 2));
    }
    if !query_rows.is_empty() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&render(
            &[
                "workload",
                "target",
                "median ms",
                "spread (min-max) ms",
                "rows/s",
                QUERY_RATIO_HEADER,
                "pgshard ms CPU/query",
                "servers ms CPU/query",
            ],
            &query_rows,
            2,
        ));
    }
    if let Some(load) = load {
        out.push_str(&load_line(load));
        out.push('\n');
    }
    out
}

fn md_reason(w: &WorkloadResult) -> String {
    w.reason
        .as_deref()
        .unwrap_or("")
        .replace('|', "\\|")
        .replace('\n', " ")
}

/// The same table in Markdown, for docs/BENCHMARKS.md.
pub fn markdown_table(results: &[WorkloadResult], load: Option<&QueryLoad>) -> String {
    let mut out = String::new();
    if results.iter().any(|w| w.kind.throughput()) {
        out.push_str(
            "| workload | target | TPS median | spread (min-max) | latency avg ms | p50 ms | p95 ms \
             | pgshard / plain | pgshard µs CPU/txn | servers µs CPU/txn |\n\
             |---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
    }
    for w in results.iter().filter(|w| w.kind.throughput()) {
        if w.status != Status::Ok {
            let _ = writeln!(
                out,
                "| {} | {}: {} | | | | | | | | |",
                w.name,
                status_word(w.status),
                md_reason(w)
            );
            continue;
        }
        for (target, s) in [(Target::Plain, &w.plain), (Target::Pgshard, &w.pgshard)] {
            let Some(s) = s else { continue };
            let first = target == Target::Plain;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {}-{} | {} | {} | {} | {} | {} | {} |",
                if first { w.name.as_str() } else { "" },
                target.name(),
                thousands(s.tps_median),
                thousands(s.tps_min),
                thousands(s.tps_max),
                opt(s.latency_avg_ms_median, 3),
                opt(s.latency_p50_ms_median, 3),
                opt(s.latency_p95_ms_median, 3),
                if first {
                    String::new()
                } else {
                    format!("**{}**", opt(w.ratio, 2))
                },
                opt(s.pgshard_cpu_us_per_txn_median, 1),
                opt(s.server_cpu_us_per_txn_median, 1),
            );
        }
    }
    if results.iter().any(|w| !w.kind.throughput()) {
        if !out.is_empty() {
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "| workload | target | median ms | spread (min-max) ms | rows/s | {QUERY_RATIO_HEADER} \
             | pgshard ms CPU/query | servers ms CPU/query |\n\
             |---|---|---:|---:|---:|---:|---:|---:|"
        );
    }
    for w in results.iter().filter(|w| !w.kind.throughput()) {
        let q = w.query.as_ref().filter(|_| w.status == Status::Ok);
        let Some(q) = q else {
            let _ = writeln!(
                out,
                "| {} | {}: {} | | | | | | |",
                w.name,
                status_word(w.status),
                md_reason(w)
            );
            continue;
        };
        for (target, s) in [(Target::Plain, &q.plain), (Target::Pgshard, &q.pgshard)] {
            let Some(s) = s else { continue };
            let first = target == Target::Plain;
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} | {:.1}-{:.1} | {} | {} | {} | {} |",
                if first { w.name.as_str() } else { "" },
                target.name(),
                s.median_ms,
                s.min_ms,
                s.max_ms,
                s.rows_per_s.map_or(String::new(), thousands),
                if first {
                    String::new()
                } else {
                    format!("**{}**", opt(w.ratio, 2))
                },
                opt(s.pgshard_cpu_ms_per_query_median, 1),
                opt(s.server_cpu_ms_per_query_median, 1),
            );
        }
    }
    if let Some(load) = load {
        let _ = writeln!(out, "\n{}", load_line(load));
    }
    out
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A bar chart of pgshard / plain per workload, with the min-max of the per-repetition
/// ratios as a whisker, Citus's ratio on this machine as a grey bar beside it and
/// pgshard's goal as a dashed line. Every measured workload has a
/// `<rect class="bar" data-workload="NAME" ...>`.
pub fn svg(results: &[WorkloadResult], subtitle: &str) -> String {
    let n = results.len().max(1) as f64;
    let (left, right, top, bottom) = (70.0, 30.0, 70.0, 90.0);
    let group = 170.0;
    let queries = results.iter().any(|w| !w.kind.throughput());
    // Room for the title.
    let width = (left + right + group * n).max(if queries { 820.0 } else { 640.0 });
    let height = 400.0;
    let plot_h = height - top - bottom;
    let plot_w = width - left - right;
    let group = plot_w / n;

    let mut ymax: f64 = 1.0;
    for w in results {
        let mut vals = vec![w.ratio, w.reference.citus_ratio, w.reference.goal_ratio];
        vals.extend(w.ratio_per_repeat.iter().map(|&r| Some(r)));
        for v in vals.into_iter().flatten() {
            ymax = ymax.max(v);
        }
    }
    let ymax = ((ymax * 1.1) / 0.2).ceil() * 0.2;
    let y = |v: f64| top + plot_h * (1.0 - (v / ymax).clamp(0.0, 1.0));
    let title = if queries {
        "pgshard vs one PostgreSQL: TPS ratio; queries: plain time / pgshard time (higher is better)"
    } else {
        "pgshard / one PostgreSQL, TPS ratio (higher is better)"
    };

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r##"<rect x="0" y="0" width="{width:.0}" height="{height:.0}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="24" text-anchor="middle" font-size="16" font-weight="bold">{title}</text>"#,
        width / 2.0
    );
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="44" text-anchor="middle" fill="#555555">{}</text>"##,
        width / 2.0,
        xml(subtitle)
    );
    // Grid and y axis.
    let mut v = 0.0;
    while v <= ymax + 1e-9 {
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#e0e0e0"/>"##,
            width - right
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{v:.1}</text>"#,
            left - 6.0,
            yy + 4.0
        );
        v += 0.2;
    }
    let _ = writeln!(
        s,
        r##"<line x1="{left}" y1="{top}" x2="{left}" y2="{:.1}" stroke="#333333"/>"##,
        top + plot_h
    );
    let _ = writeln!(
        s,
        r##"<line x1="{left}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333333"/>"##,
        top + plot_h,
        width - right,
        top + plot_h
    );
    // One PostgreSQL = 1.0.
    let _ = writeln!(
        s,
        r##"<line x1="{left}" y1="{y1:.1}" x2="{:.1}" y2="{y1:.1}" stroke="#333333" stroke-dasharray="2,3"/>"##,
        width - right,
        y1 = y(1.0)
    );
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#333333">one PostgreSQL = 1.0</text>"##,
        width - right - 4.0,
        y(1.0) - 4.0
    );

    for (i, w) in results.iter().enumerate() {
        let cx = left + group * (i as f64 + 0.5);
        let bw = (group * 0.28).min(50.0);
        let name = xml(&w.name);
        let _ = writeln!(
            s,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-weight="bold">{name}</text>"#,
            top + plot_h + 20.0
        );
        if let Some(g) = w.reference.goal_ratio {
            let _ = writeln!(
                s,
                r##"<line class="goal" x1="{:.1}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#2e7d32" stroke-width="2" stroke-dasharray="6,4"/>"##,
                cx - group * 0.42,
                cx + group * 0.42,
                yy = y(g)
            );
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" font-size="10" fill="#2e7d32">goal {g:.1}</text>"##,
                cx + 4.0 + bw,
                y(g) - 4.0
            );
        }
        if let Some(c) = w.reference.citus_ratio {
            let _ = writeln!(
                s,
                r##"<rect class="ref" data-workload="{name}" x="{:.1}" y="{:.1}" width="{bw:.1}" height="{:.1}" fill="#b0b0b0"><title>Citus 12.1 / PostgreSQL on this machine: {c:.2}</title></rect>"##,
                cx + 3.0,
                y(c),
                top + plot_h - y(c)
            );
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#555555">{c:.2}</text>"##,
                cx + 3.0 + bw / 2.0,
                y(c) - 4.0
            );
        }
        match (w.status, w.ratio) {
            (Status::Ok, Some(r)) => {
                let x = cx - 3.0 - bw;
                let what = if w.kind.throughput() {
                    "pgshard TPS / PostgreSQL TPS"
                } else {
                    "PostgreSQL time / pgshard time"
                };
                let _ = writeln!(
                    s,
                    r##"<rect class="bar" data-workload="{name}" x="{x:.1}" y="{:.1}" width="{bw:.1}" height="{:.1}" fill="#1f77b4"><title>{what}: {r:.3}</title></rect>"##,
                    y(r),
                    top + plot_h - y(r)
                );
                let (lo, hi) = w
                    .ratio_per_repeat
                    .iter()
                    .fold((r, r), |(lo, hi), &v| (lo.min(v), hi.max(v)));
                if hi > lo {
                    let mx = x + bw / 2.0;
                    let _ = writeln!(
                        s,
                        r##"<path class="spread" d="M{mx:.1} {:.1}V{:.1}M{:.1} {:.1}h10M{:.1} {:.1}h10" stroke="#0b3c61" fill="none"/>"##,
                        y(hi),
                        y(lo),
                        mx - 5.0,
                        y(hi),
                        mx - 5.0,
                        y(lo)
                    );
                }
                let _ = writeln!(
                    s,
                    r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-weight="bold" fill="#0b3c61">{r:.2}</text>"##,
                    x + bw / 2.0,
                    y(hi) - 6.0
                );
            }
            _ => {
                let what = if w.status == Status::Error {
                    "error"
                } else {
                    "skipped"
                };
                let _ = writeln!(
                    s,
                    r##"<text class="skipped" data-workload="{name}" x="{:.1}" y="{:.1}" text-anchor="middle" fill="#c62828">{what}<title>{}</title></text>"##,
                    cx - 3.0 - bw / 2.0,
                    top + plot_h - 8.0,
                    xml(w.reason.as_deref().unwrap_or(""))
                );
            }
        }
    }
    // Legend, one row.
    let ly = height - 24.0;
    let _ = writeln!(
        s,
        r##"<rect x="{left}" y="{:.1}" width="14" height="14" fill="#1f77b4"/><text x="{:.1}" y="{ly:.1}">pgshard median (whisker: min-max)</text>"##,
        ly - 11.0,
        left + 20.0
    );
    let lx = left + 250.0;
    let _ = writeln!(
        s,
        r##"<rect x="{lx:.1}" y="{:.1}" width="14" height="14" fill="#b0b0b0"/><text x="{:.1}" y="{ly:.1}">Citus 12.1, this machine</text>"##,
        ly - 11.0,
        lx + 20.0
    );
    let lx = lx + 185.0;
    let _ = writeln!(
        s,
        r##"<line x1="{lx:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#2e7d32" stroke-width="2" stroke-dasharray="6,4"/><text x="{:.1}" y="{ly:.1}">pgshard goal</text>"##,
        ly - 4.0,
        lx + 18.0,
        ly - 4.0,
        lx + 24.0
    );
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(name: &str, status: Status, ratio: Option<f64>) -> WorkloadResult {
        WorkloadResult {
            name: name.into(),
            description: String::new(),
            kind: Kind::Pgbench,
            pgbench_args: vec![],
            script: None,
            status,
            reason: (status != Status::Ok).then(|| "ERROR: <boom> & more".into()),
            plain: None,
            pgshard: None,
            ratio,
            ratio_per_repeat: ratio.map_or(vec![], |r| vec![r * 0.9, r, r * 1.1]),
            reference: Reference {
                citus_ratio: Some(0.15),
                goal_ratio: Some(0.8),
            },
            runs: vec![],
            query: None,
        }
    }

    #[test]
    fn svg_has_a_bar_per_measured_workload() {
        let svg = svg(
            &[
                result("w1-a", Status::Ok, Some(0.5)),
                result("w1-b", Status::Skipped, None),
            ],
            "scale 1 <quick>",
        );
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains(r#"<rect class="bar" data-workload="w1-a""#));
        assert!(svg.contains(r#"class="skipped" data-workload="w1-b""#));
        assert!(svg.contains("scale 1 &lt;quick&gt;"));
        assert!(svg.contains("ERROR: &lt;boom&gt; &amp; more"));
        assert!(!svg.contains("<boom>"));
    }

    /// A target measured at `median` TPS and nothing else.
    fn tps(median: f64) -> Option<TargetSummary> {
        Some(TargetSummary {
            runs: 1,
            tps_median: median,
            tps_min: median,
            tps_max: median,
            latency_avg_ms_median: None,
            latency_p50_ms_median: None,
            latency_p95_ms_median: None,
            latency_p99_ms_median: None,
            pgshard_cpu_us_per_txn_median: None,
            server_cpu_us_per_txn_median: None,
        })
    }

    #[test]
    fn own_two_phase_compares_with_the_servers_one_phase_tpcb() {
        let mut one = result("one", Status::Ok, Some(0.3));
        one.plain = tps(4000.0);
        one.pgshard = tps(1200.0);
        let mut own = result("own", Status::Ok, Some(1.2));
        own.plain = tps(1000.0);
        own.pgshard = tps(1200.0);
        let note = own_two_phase(&[one.clone(), own.clone()], "one", "own").unwrap();
        assert!(note.contains("runs 1,000 TPS, 0.25 of"), "{note}");
        assert!(note.contains("(one: 4,000 TPS)"), "{note}");
        assert!(note.contains("1,200 TPS, 0.30"), "{note}");
        // Not measured: no note.
        own.plain = None;
        assert_eq!(own_two_phase(&[one.clone(), own], "one", "own"), None);
        assert_eq!(own_two_phase(&[one], "one", "own"), None);
    }

    #[test]
    fn free_coordinator_bound_leaves_out_pgshards_cpu() {
        let mut w = result("w1-tpcb", Status::Ok, Some(0.25));
        let run = |target, tps: f64, pgshard: Option<f64>| Run {
            target,
            repeat: 1,
            sequence: 1,
            ok: true,
            error: None,
            exit_code: Some(0),
            tps: Some(tps),
            transactions: Some((tps * 10.0) as u64),
            failed_transactions: Some(0),
            latency_avg_ms: None,
            latency_p50_ms: None,
            latency_p95_ms: None,
            latency_p99_ms: None,
            latency_samples: 0,
            initial_connection_ms: None,
            wall_s: 10.0,
            pgshard_cpu_s: pgshard,
            pgshard_cpu_us_per_txn: None,
            server_cpu: vec![],
            server_cpu_us_per_txn: None,
            pgbench_cpu_s: 0.0,
            machine_cpu_busy_s: 18.0,
            machine_cpu_total_s: 20.0,
            machine_irq_s: 0.0,
            other_cpu_fraction: 0.0,
            loadavg_before: None,
            output_file: String::new(),
        };
        // 10,000 pgshard transactions; 18 s busy of which 8 s pgshard: 1,000 µs of the
        // rest per transaction, 2 cores: at most 2,000 TPS, against plain's 4,000.
        w.runs = vec![
            run(Target::Pgshard, 1000.0, Some(8.0)),
            run(Target::Plain, 4000.0, None),
        ];
        let note = free_coordinator_bound(&[w.clone()], "w1-tpcb").unwrap();
        assert!(note.contains("used 1000 µs"), "{note}");
        assert!(note.contains("at most 0.50 of"), "{note}");
        assert!(note.contains("pgshard measured 0.25"), "{note}");
        w.runs.pop();
        assert_eq!(free_coordinator_bound(&[w], "w1-tpcb"), None);
    }

    fn query_run(target: Target, repeat: u32, ms: f64) -> QueryRun {
        QueryRun {
            target,
            repeat,
            sequence: repeat,
            ok: true,
            error: None,
            sqlstate: None,
            warmup_ms: vec![ms * 2.0],
            times_ms: vec![ms, ms * 1.2, ms * 0.9],
            median_ms: Some(ms),
            answer: vec![vec![Some("7".into())]],
            pgshard_cpu_ms_per_query: None,
            server_cpu_ms_per_query: Some(1.0),
        }
    }

    #[test]
    fn query_workloads_have_their_own_table() {
        let runs = vec![
            query_run(Target::Pgshard, 1, 400.0),
            query_run(Target::Plain, 1, 200.0),
            query_run(Target::Plain, 2, 300.0),
            query_run(Target::Pgshard, 2, 300.0),
        ];
        assert_eq!(query_ratios_per_repeat(&runs), vec![0.5, 1.0]);
        let plain = summarize_queries(&runs, Target::Plain).unwrap();
        assert_eq!(
            (plain.median_ms, plain.min_ms, plain.max_ms),
            (250.0, 200.0, 300.0)
        );
        let mut count = result("w4-count", Status::Ok, Some(250.0 / 350.0));
        count.kind = Kind::Query;
        count.query = Some(QueryFigures {
            sql: "select count(*) from test".into(),
            table_rows: 7,
            warmup: 1,
            timed: 3,
            plain: Some(plain),
            pgshard: summarize_queries(&runs, Target::Pgshard),
            answers_equal: Some(true),
            answer: Some(vec![vec![Some("7".into())]]),
            runs,
        });
        let mut groupby = result("w4-groupby", Status::Skipped, None);
        groupby.kind = Kind::Query;
        let load = QueryLoad {
            rows: 1_000_000,
            plain_s: Some(1.0),
            pgshard_insert_s: Some(1.0),
            pgshard_distribute_s: Some(2.0),
            pgshard_s: Some(3.0),
            ..Default::default()
        };
        let mut w1 = result("w1-a", Status::Ok, Some(0.5));
        w1.plain = tps(2000.0);
        w1.pgshard = tps(1000.0);
        let results = [w1, count, groupby];
        let t = table(&results, Some(&load));
        assert!(
            t.starts_with("workload  target") && t.contains("TPS median"),
            "{t}"
        );
        assert!(t.contains(QUERY_RATIO_HEADER), "{t}");
        assert!(t.contains("w4-count  plain"), "{t}");
        assert!(t.contains("0.71"), "{t}");
        assert!(
            t.contains("w4-groupby  skipped: ERROR: <boom> & more"),
            "{t}"
        );
        assert!(
            t.contains("W4 load of 1,000,000 rows: plain 1.0 s; pgshard 3.0 s (local insert 1.0 s"),
            "{t}"
        );
        let md = markdown_table(&results, Some(&load));
        assert!(
            md.contains("| w4-count | plain | 250.0 | 200.0-300.0 |  |"),
            "{md}"
        );
        assert!(md.contains("| **0.71** |"), "{md}");
        assert!(
            md.contains("| w4-groupby | skipped: ERROR: <boom> & more |"),
            "{md}"
        );
        let only_queries = table(&results[1..], None);
        assert!(!only_queries.contains("TPS median"), "{only_queries}");
    }

    #[test]
    fn medians_and_thousands() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(thousands(1234567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1000.0), "1,000");
    }
}
