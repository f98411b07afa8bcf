//! TPC-H in `pgshard bench` (workloads `tpch-q01` ... `tpch-q22`, group `tpch`): the
//! eight tables at `--scale` SF loaded into both targets (`load.rs`: tpchgen's rows by
//! COPY; through pgshard `lineitem`/`orders` co-located by order key, `part`/`partsupp`
//! by part key, `customer` and `supplier` by their keys, `nation` and `region`
//! reference tables), then the 22 queries of the specification with its validation
//! substitution parameters (`queries/qNN.sql`), each one a query workload of the bench:
//! per target a warm-up execution then timed ones (one only when the warm-up took over
//! `ONE_TIMED_AFTER`), one at a time, answers compared row by row and in order, a
//! per-execution timeout (`QUERY_TIMEOUT`: statement_timeout on the servers, and the
//! client cancels a little later) that counts as failed. The summary is the geometric
//! mean of plain time / pgshard time over the queries both answered, with the
//! refused (0A000) and failed ones counted.

pub mod load;

use super::report::{QueryLoad, Status, WorkloadResult};
use super::{
    checkpoint_all, connect, vacuum_shards, Kind, Options, Progress, QueryTiming, TargetCtx,
    Workload, SHARD_COUNT, VACUUM_PREPARE,
};
use crate::cluster::ClusterInfo;
use crate::sql::quote::quote_ident;
use anyhow::{anyhow, Result};
use serde::Serialize;
use std::time::{Duration, Instant};

/// The 22 queries, Q1 first.
pub const QUERIES: [&str; 22] = [
    include_str!("queries/q01.sql"),
    include_str!("queries/q02.sql"),
    include_str!("queries/q03.sql"),
    include_str!("queries/q04.sql"),
    include_str!("queries/q05.sql"),
    include_str!("queries/q06.sql"),
    include_str!("queries/q07.sql"),
    include_str!("queries/q08.sql"),
    include_str!("queries/q09.sql"),
    include_str!("queries/q10.sql"),
    include_str!("queries/q11.sql"),
    include_str!("queries/q12.sql"),
    include_str!("queries/q13.sql"),
    include_str!("queries/q14.sql"),
    include_str!("queries/q15.sql"),
    include_str!("queries/q16.sql"),
    include_str!("queries/q17.sql"),
    include_str!("queries/q18.sql"),
    include_str!("queries/q19.sql"),
    include_str!("queries/q20.sql"),
    include_str!("queries/q21.sql"),
    include_str!("queries/q22.sql"),
];

/// Longest one execution of a query may take (then it counts as failed).
const QUERY_TIMEOUT: Duration = Duration::from_secs(300);
/// A warm-up longer than this leaves one timed execution.
const ONE_TIMED_AFTER: Duration = Duration::from_secs(10);
/// Timed executions per run otherwise.
const TIMED: u32 = 3;

const fn query(name: &'static str, description: &'static str, n: usize) -> Workload {
    Workload {
        name,
        description,
        kind: Kind::Tpch(n),
        // Issue 20's goals: a geometric mean of at least 0.8 and no query below 0.3
        // (the summary line); Citus's per-query ratios are not known.
        reference: (None, None),
    }
}

/// The queries as bench workloads (their names in the specification).
pub(super) const WORKLOADS: [Workload; 22] = [
    query("tpch-q01", "TPC-H Q1, pricing summary report", 1),
    query("tpch-q02", "TPC-H Q2, minimum cost supplier", 2),
    query("tpch-q03", "TPC-H Q3, shipping priority", 3),
    query("tpch-q04", "TPC-H Q4, order priority checking", 4),
    query("tpch-q05", "TPC-H Q5, local supplier volume", 5),
    query("tpch-q06", "TPC-H Q6, forecasting revenue change", 6),
    query("tpch-q07", "TPC-H Q7, volume shipping", 7),
    query("tpch-q08", "TPC-H Q8, national market share", 8),
    query("tpch-q09", "TPC-H Q9, product type profit measure", 9),
    query("tpch-q10", "TPC-H Q10, returned item reporting", 10),
    query("tpch-q11", "TPC-H Q11, important stock identification", 11),
    query(
        "tpch-q12",
        "TPC-H Q12, shipping modes and order priority",
        12,
    ),
    query("tpch-q13", "TPC-H Q13, customer distribution", 13),
    query("tpch-q14", "TPC-H Q14, promotion effect", 14),
    query(
        "tpch-q15",
        "TPC-H Q15, top supplier (the view as a CTE)",
        15,
    ),
    query("tpch-q16", "TPC-H Q16, parts/supplier relationship", 16),
    query("tpch-q17", "TPC-H Q17, small-quantity-order revenue", 17),
    query("tpch-q18", "TPC-H Q18, large volume customer", 18),
    query("tpch-q19", "TPC-H Q19, discounted revenue", 19),
    query("tpch-q20", "TPC-H Q20, potential part promotion", 20),
    query(
        "tpch-q21",
        "TPC-H Q21, suppliers who kept orders waiting",
        21,
    ),
    query("tpch-q22", "TPC-H Q22, global sales opportunity", 22),
];

/// How each TPC-H query runs.
pub(super) fn timing(opts: &Options) -> QueryTiming {
    QueryTiming {
        repeat: opts.tpch_repeat,
        warmup: 1,
        timed: TIMED,
        timeout: QUERY_TIMEOUT,
        statement_timeout: true,
        one_timed_after: Some(ONE_TIMED_AFTER),
    }
}

/// Loading TPC-H into both targets.
#[derive(Debug, Clone, Serialize)]
pub(super) struct TpchLoad {
    pub scale: f64,
    pub plain: Option<load::LoadTimes>,
    /// VACUUM ANALYZE of every table (plain) / of every shard on the workers, not
    /// counted in the load.
    pub plain_vacuum_s: Option<f64>,
    pub pgshard: Option<load::LoadTimes>,
    pub pgshard_vacuum_s: Option<f64>,
    /// Why loading through pgshard failed.
    pub error: Option<String>,
    pub sqlstate: Option<String>,
}

impl TpchLoad {
    /// What the query workloads need to know of the load.
    pub fn as_query_load(&self) -> QueryLoad {
        let lineitem = self
            .plain
            .as_ref()
            .and_then(|l| l.tables.iter().find(|t| t.table == "lineitem"))
            .map_or(0, |t| t.rows);
        QueryLoad {
            rows: lineitem,
            error: self.error.clone(),
            sqlstate: self.sqlstate.clone(),
            ..Default::default()
        }
    }

    /// The load in one line.
    pub fn line(&self) -> String {
        let times = |l: &Option<load::LoadTimes>| {
            l.as_ref().map_or("-".into(), |l| {
                format!(
                    "{:.1} s (COPY {:.1} s, indexes {:.1} s)",
                    l.total_s(),
                    l.copy_s,
                    l.index_s
                )
            })
        };
        let secs = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1} s"));
        let mut s = format!(
            "TPC-H load at SF {}: plain {}; pgshard {}; then vacuum analyze: plain {}, \
             pgshard {}",
            self.scale,
            times(&self.plain),
            times(&self.pgshard),
            secs(self.plain_vacuum_s),
            secs(self.pgshard_vacuum_s)
        );
        if let Some(e) = &self.error {
            s.push_str(&format!("; pgshard failed: {e}"));
        }
        s
    }
}

/// Loads TPC-H at the options' scale into the plain PostgreSQL, then through pgshard
/// (SHARD_COUNT shards), then VACUUM ANALYZE on both (the plain tables in a session with
/// synchronous commit, as W4's; the shards on each worker) and a checkpoint on every
/// server. A failure on the plain server fails the bench; one through pgshard is
/// recorded and its query workloads report it.
pub(super) async fn load_both(
    opts: &Options,
    progress: &Progress,
    plain: &TargetCtx,
    pgshard: &TargetCtx,
    cluster: &ClusterInfo,
) -> Result<TpchLoad> {
    let say = |s: String| progress.say(s);
    let mut out = TpchLoad {
        scale: opts.tpch_scale,
        plain: None,
        plain_vacuum_s: None,
        pgshard: None,
        pgshard_vacuum_s: None,
        error: None,
        sqlstate: None,
    };

    progress.say(format!(
        "TPC-H: loading SF {} into the plain PostgreSQL",
        opts.tpch_scale
    ));
    let client = connect(&plain.admin).await?;
    let times = load::load(&client, load::Side::Plain, opts.tpch_scale, &say)
        .await
        .map_err(|e| anyhow!("TPC-H load on the plain PostgreSQL: {e}"))?;
    out.plain = Some(times);
    let t = Instant::now();
    for sql in VACUUM_PREPARE {
        client
            .batch_execute(sql)
            .await
            .map_err(|e| anyhow!("{sql} on the plain PostgreSQL: {e}"))?;
    }
    for table in &load::TABLES {
        let sql = format!("VACUUM ANALYZE {}", quote_ident(table.name));
        client
            .batch_execute(&sql)
            .await
            .map_err(|e| anyhow!("{sql} on the plain PostgreSQL: {e}"))?;
    }
    out.plain_vacuum_s = Some(t.elapsed().as_secs_f64());
    drop(client);

    progress.say(format!(
        "TPC-H: loading SF {} through pgshard ({SHARD_COUNT} shards)",
        opts.tpch_scale
    ));
    let loaded = async {
        let client = connect(&pgshard.admin).await.map_err(|e| load::LoadError {
            sqlstate: None,
            message: format!("{e:#}"),
        })?;
        let set = format!("SET citus.shard_count = {SHARD_COUNT}");
        client
            .batch_execute(&set)
            .await
            .map_err(|e| load::LoadError {
                sqlstate: e.code().map(|c| c.code().to_string()),
                message: format!("{set}: {e}"),
            })?;
        load::load(&client, load::Side::Pgshard, opts.tpch_scale, &say).await
    }
    .await;
    match loaded {
        Ok(times) => {
            out.pgshard = Some(times);
            let t = Instant::now();
            for table in &load::TABLES {
                vacuum_shards(cluster, table.name).await?;
            }
            out.pgshard_vacuum_s = Some(t.elapsed().as_secs_f64());
            for table in &load::TABLES {
                super::grant_client(opts, [plain, pgshard], cluster, table.name).await?;
            }
        }
        Err(e) => {
            progress.say(format!("  failed: {e}"));
            out.error = Some(e.message);
            out.sqlstate = e.sqlstate;
        }
    }
    progress.say("checkpoint on every server");
    checkpoint_all(cluster, &plain.admin).await?;
    progress.say(out.line());
    Ok(out)
}

/// The TPC-H queries' figures together.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Summary {
    pub queries: usize,
    /// Answered by both, with equal rows.
    pub measured: usize,
    /// Geometric mean of plain time / pgshard time over the measured queries.
    pub geometric_mean_ratio: Option<f64>,
    pub min_ratio: Option<(String, f64)>,
    /// Refused by pgshard (0A000).
    pub refused: Vec<String>,
    /// Failed (an error, a timeout, or answers that differ).
    pub failed: Vec<String>,
    /// Of the failed ones, those whose answers differ.
    pub mismatched: Vec<String>,
}

/// The summary of the TPC-H workloads among `results` (None: none ran).
pub(super) fn summary(results: &[WorkloadResult]) -> Option<Summary> {
    let tpch: Vec<&WorkloadResult> = results
        .iter()
        .filter(|w| w.name.starts_with("tpch-"))
        .collect();
    if tpch.is_empty() {
        return None;
    }
    let ratios: Vec<(String, f64)> = tpch
        .iter()
        .filter(|w| w.status == Status::Ok)
        .filter_map(|w| Some((w.name.clone(), w.ratio.filter(|r| *r > 0.0)?)))
        .collect();
    let geometric_mean_ratio = (!ratios.is_empty())
        .then(|| (ratios.iter().map(|(_, r)| r.ln()).sum::<f64>() / ratios.len() as f64).exp());
    let min_ratio = ratios.iter().min_by(|a, b| a.1.total_cmp(&b.1)).cloned();
    let names = |f: &dyn Fn(&WorkloadResult) -> bool| {
        tpch.iter()
            .filter(|w| f(w))
            .map(|w| w.name.clone())
            .collect::<Vec<_>>()
    };
    Some(Summary {
        queries: tpch.len(),
        measured: ratios.len(),
        geometric_mean_ratio,
        min_ratio,
        refused: names(&|w| w.status == Status::Skipped),
        failed: names(&|w| w.status == Status::Error),
        mismatched: names(&|w| {
            w.query
                .as_ref()
                .is_some_and(|q| q.answers_equal == Some(false))
        }),
    })
}

impl Summary {
    /// The summary in a few lines; a mismatch loudly.
    pub fn text(&self) -> String {
        let mut s = format!(
            "TPC-H: {} of {} queries measured; geometric mean of plain time / pgshard time {} \
             (issue 20's goal: at least 0.8, no query below 0.3){}",
            self.measured,
            self.queries,
            self.geometric_mean_ratio
                .map_or("-".into(), |g| format!("{g:.4}")),
            self.min_ratio
                .as_ref()
                .map_or(String::new(), |(n, r)| format!("; lowest {n} {r:.4}"))
        );
        if !self.refused.is_empty() {
            s.push_str(&format!(
                "\nTPC-H refused by pgshard: {}",
                self.refused.join(", ")
            ));
        }
        if !self.failed.is_empty() {
            s.push_str(&format!("\nTPC-H failed: {}", self.failed.join(", ")));
        }
        if !self.mismatched.is_empty() {
            s.push_str(&format!(
                "\n*** TPC-H WRONG ANSWERS through pgshard (rows differ from PostgreSQL's): {} ***",
                self.mismatched.join(", ")
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_query_is_one_select_with_the_validation_parameters() {
        for (i, sql) in QUERIES.iter().enumerate() {
            let statements = crate::sql::parse::parse(sql).expect("parses");
            assert_eq!(statements.len(), 1, "Q{}", i + 1);
            assert!(!sql.contains(':'), "Q{}: a placeholder left: {sql}", i + 1);
            assert_eq!(WORKLOADS[i].name, format!("tpch-q{:02}", i + 1));
        }
    }
}
