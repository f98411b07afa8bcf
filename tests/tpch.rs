//! TPC-H's 22 queries through pgshard against one plain PostgreSQL holding the same data
//! (issue 20, first "Done when"): tpchgen's rows at SF 0.01 loaded into both by the
//! bench's own loader (`pgshard::bench::tpch::load`: through pgshard `lineitem` and
//! `orders` co-located by order key, `part` and `partsupp` by part key, `customer`,
//! `supplier` by their keys, `nation` and `region` reference tables), then each query of
//! `pgshard bench tpch` (the specification's validation parameters) run on both: the
//! same rows, in the same order (every query's ORDER BY fixes the order of what it
//! returns at this scale; values as text, so numerics exactly as PostgreSQL prints
//! them), none refused.

mod common;

use common::compare::{self, judge, Outcome, Verdict};
use common::{cluster, plain_postgres};
use pgshard::bench::tpch::{load, QUERIES};
use std::time::Instant;

/// Loads in a few seconds (lineitem: about 60,000 rows).
const SCALE: f64 = 0.01;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_22_queries_answer_as_postgresql() {
    let started = Instant::now();
    let scale = std::env::var("PGSHARD_TPCH_SCALE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(SCALE);
    let pgshard = cluster().client().await;
    let plain = plain_postgres().client().await;
    for (client, side) in [(&plain, load::Side::Plain), (&pgshard, load::Side::Pgshard)] {
        let progress = |line: String| eprintln!("{side:?}: {line}");
        load::load(client, side, scale, &progress)
            .await
            .unwrap_or_else(|e| panic!("loading TPC-H into {side:?}: {e}"));
        load::analyze(client)
            .await
            .unwrap_or_else(|e| panic!("analyze on {side:?}: {e}"));
    }
    eprintln!("loaded both in {:.1} s", started.elapsed().as_secs_f64());

    let mut wrong = Vec::new();
    for (i, sql) in QUERIES.iter().enumerate() {
        let q = i + 1;
        let t = Instant::now();
        let want = compare::run(&plain, sql).await;
        let plain_ms = t.elapsed().as_secs_f64() * 1e3;
        let Outcome::Rows { rows, .. } = &want else {
            panic!(
                "Q{q} failed on the plain PostgreSQL: {}",
                compare::show(&want)
            );
        };
        let t = Instant::now();
        let got = compare::run(&pgshard, sql).await;
        let pgshard_ms = t.elapsed().as_secs_f64() * 1e3;
        let verdict = judge(&got, &want, true);
        eprintln!(
            "Q{q}: {} rows, plain {plain_ms:.0} ms, pgshard {pgshard_ms:.0} ms: {verdict:?}",
            rows.len()
        );
        match verdict {
            Verdict::Same => {}
            Verdict::Refused(m) => wrong.push(format!("Q{q} refused by pgshard: {m}")),
            Verdict::Differ => wrong.push(format!(
                "Q{q} differs:\n  pgshard: {}\n  plain:   {}",
                compare::show(&got),
                compare::show(&want)
            )),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of 22 TPC-H queries wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    eprintln!(
        "22 queries equal; {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
}
