//! Generated queries checked by SQLancer-style oracles (issue 18): the same schema and data
//! in the shared pgshard test cluster and in one plain PostgreSQL, then thousands of
//! generated checks (`generate.rs`), each judged twice:
//!
//! - differentially: every query's rows (as a multiset) or SQLSTATE through pgshard equal
//!   the plain PostgreSQL's;
//! - by its own oracle on pgshard's answers alone (TLP: the partitions add up to the base;
//!   NoREC: the filtered count equals the per-row evaluation), which holds whatever the
//!   data, so it catches what a wrong oracle side could hide.
//!
//! `PGSHARD_TLP_SEED` replays a run, `PGSHARD_TLP_CHECKS` sets how many checks (default:
//! enough for 5,000 statements through pgshard), `PGSHARD_TLP_ONLY=<index>` runs one,
//! `PGSHARD_TLP_SHOW=<n>` prints more mismatches. A refusal (0A000 where PostgreSQL
//! answers) is counted apart and must stay under 10 % of the checks.

#[path = "../common/mod.rs"]
mod common;
mod generate;
mod schema;

use common::compare::{run, show, Outcome};
use common::{cluster, plain_postgres};
use generate::{generate, Check, Oracle};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::Mutex;
use tokio_postgres::Client;

const DEFAULT_SEED: u64 = 18_2026_1125;
const DEFAULT_CHECKS: usize = 1_600;
const MIN_STATEMENTS: usize = 5_000;
const DATA_SEED: u64 = 0x7119_da7a;
const LANES: usize = 4;
const MAX_REFUSED_SHARE: f64 = 0.10;
const SESSION_SETUP: &str = "set timezone to 'UTC'; set datestyle to 'ISO, YMD'";

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Creates and fills the schema on both sides.
async fn load() {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    shard
        .batch_execute("set citus.shard_count = 8")
        .await
        .unwrap();
    for (client, distributed) in [(&shard, true), (&plain, false)] {
        for step in schema::load_steps(DATA_SEED, distributed) {
            match step {
                schema::Load::Sql(sql) => {
                    if let Err(e) = client.batch_execute(&sql).await {
                        panic!(
                            "loading ({}): {sql}: {e:?}",
                            if distributed { "pgshard" } else { "plain" }
                        );
                    }
                }
                schema::Load::Copy { statement, data } => {
                    use futures_util::SinkExt;
                    let sink = client.copy_in::<_, bytes::Bytes>(&statement).await;
                    let sink = sink.unwrap_or_else(|e| panic!("{statement}: {e:?}"));
                    futures_util::pin_mut!(sink);
                    sink.send(bytes::Bytes::from(data)).await.unwrap();
                    sink.finish()
                        .await
                        .unwrap_or_else(|e| panic!("{statement}: {e:?}"));
                }
            }
        }
    }
}

/// What one check found.
enum Finding {
    Pass,
    Refused(String),
    Mismatch(String),
}

fn numeric_units(s: &Option<String>) -> i128 {
    // Sums of numeric(10,1), the domain numeric(8,2) and integers: exact in hundredths.
    let Some(s) = s else { return 0 };
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s.as_str()),
    };
    let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let frac = format!("{frac:0<2}");
    let v: i128 = whole.parse::<i128>().unwrap() * 100 + frac[..2].parse::<i128>().unwrap();
    if neg {
        -v
    } else {
        v
    }
}

fn count(s: &Option<String>) -> i64 {
    s.as_deref().unwrap_or("0").parse().unwrap()
}

/// The check's own oracle over pgshard's answers; None when it holds.
fn own_oracle(check: &Check, answers: &[Vec<Vec<Option<String>>>]) -> Option<String> {
    match check.oracle {
        Oracle::TlpRows => {
            let mut union: Vec<Vec<Option<String>>> =
                answers[1..].iter().flatten().cloned().collect();
            union.sort();
            (union != answers[0]).then(|| {
                format!(
                    "TLP: the base has {} rows, the partitions {}",
                    answers[0].len(),
                    union.len()
                )
            })
        }
        Oracle::TlpAggregate => {
            let row = |i: usize| &answers[i][0];
            let parts = 1..answers.len();
            let counts: i64 = parts.clone().map(|i| count(&row(i)[0])).sum();
            let counted: i64 = parts.clone().map(|i| count(&row(i)[1])).sum();
            let sums: i128 = parts.map(|i| numeric_units(&row(i)[2])).sum();
            let base = row(0);
            (counts != count(&base[0])
                || counted != count(&base[1])
                || sums != numeric_units(&base[2]))
            .then(|| format!("TLP aggregate: base {base:?}, partitions add up to count {counts}, count(c) {counted}, sum {sums}/100"))
        }
        Oracle::TlpGroupCounts => {
            let mut added: BTreeMap<Option<String>, i64> = BTreeMap::new();
            for part in &answers[1..] {
                for r in part {
                    *added.entry(r[0].clone()).or_default() += count(&r[1]);
                }
            }
            let base: BTreeMap<Option<String>, i64> = answers[0]
                .iter()
                .map(|r| (r[0].clone(), count(&r[1])))
                .collect();
            (base != added).then(|| format!("TLP groups: base {base:?}, partitions {added:?}"))
        }
        Oracle::NoRec => {
            let filtered = count(&answers[0][0][0]);
            let evaluated = answers[1]
                .iter()
                .filter(|r| r[0].as_deref() == Some("t"))
                .count() as i64;
            (filtered != evaluated).then(|| {
                format!("NoREC: count(*) WHERE p = {filtered}, rows with p true = {evaluated}")
            })
        }
    }
}

/// Runs a check on both sides and judges it.
async fn judge(shard: &Client, plain: &Client, check: &Check) -> (Finding, usize) {
    let mut statements = 0;
    let setup = if check.set_local {
        format!("begin; set local search_path to {}", check.search_path)
    } else {
        format!("set search_path to {}", check.search_path)
    };
    for c in [shard, plain] {
        c.batch_execute(&setup).await.expect("search_path setup");
    }
    statements += 1;
    let mut answers = Vec::new();
    let mut finding = Finding::Pass;
    for q in &check.queries {
        let (got, want) = (run(shard, q).await.sorted(), run(plain, q).await.sorted());
        statements += 1;
        if got == want {
            if let Outcome::Rows { rows, .. } = got {
                answers.push(rows);
            }
            continue;
        }
        finding = match (&got, &want) {
            (Outcome::Error { code, message }, Outcome::Rows { .. }) if code == "0A000" => {
                Finding::Refused(message.clone())
            }
            (Outcome::Error { code: a, .. }, Outcome::Error { code: b, .. }) if a == b => {
                continue;
            }
            _ => Finding::Mismatch(format!(
                "query: {q}\n  pgshard: {}\n  plain:   {}",
                show(&got),
                show(&want)
            )),
        };
        break;
    }
    if check.set_local {
        for c in [shard, plain] {
            c.batch_execute("rollback").await.expect("ending the block");
        }
        statements += 1;
    }
    if matches!(finding, Finding::Pass) && answers.len() == check.queries.len() {
        if let Some(m) = own_oracle(check, &answers) {
            finding = Finding::Mismatch(m);
        }
    }
    (finding, statements)
}

#[derive(Default)]
struct Tally {
    checks: usize,
    statements: usize,
    refused: BTreeMap<String, usize>,
    mismatches: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_checks_hold_and_match_postgres() {
    load().await;
    let seed = env_usize("PGSHARD_TLP_SEED").map_or(DEFAULT_SEED, |s| s as u64);
    let checks = env_usize("PGSHARD_TLP_CHECKS").unwrap_or(DEFAULT_CHECKS);
    let only = env_usize("PGSHARD_TLP_ONLY");
    let tally = Arc::new(Mutex::new(Tally::default()));
    let mut lanes = Vec::new();
    for lane in 0..LANES {
        let tally = tally.clone();
        lanes.push(tokio::spawn(async move {
            let shard = cluster().client().await;
            let plain = plain_postgres().client().await;
            for c in [&shard, &plain] {
                c.batch_execute(SESSION_SETUP).await.unwrap();
            }
            for index in (lane..checks).step_by(LANES) {
                if only.is_some_and(|o| o != index) {
                    continue;
                }
                let check = generate(seed, index);
                let (finding, statements) = judge(&shard, &plain, &check).await;
                let mut t = tally.lock().await;
                t.checks += 1;
                t.statements += statements;
                match finding {
                    Finding::Pass => {}
                    Finding::Refused(reason) => *t.refused.entry(reason).or_default() += 1,
                    Finding::Mismatch(m) => t.mismatches.push(format!(
                        "check {index} ({:?}, search_path {}{}):\n  {m}\n  queries: {:#?}",
                        check.oracle,
                        check.search_path,
                        if check.set_local { " by SET LOCAL" } else { "" },
                        check.queries
                    )),
                }
            }
        }));
    }
    for l in lanes {
        l.await.unwrap();
    }
    let t = tally.lock().await;
    let refused: usize = t.refused.values().sum();
    eprintln!(
        "seed {seed}: {} checks, {} statements through pgshard, {} mismatches, {refused} refused",
        t.checks,
        t.statements,
        t.mismatches.len()
    );
    for (reason, n) in &t.refused {
        eprintln!("  refused {n}: {reason}");
    }
    let show = env_usize("PGSHARD_TLP_SHOW").unwrap_or(5);
    for m in t.mismatches.iter().take(show) {
        eprintln!("{m}");
    }
    assert!(
        t.mismatches.is_empty(),
        "{} mismatches (seed {seed})",
        t.mismatches.len()
    );
    assert!(
        (refused as f64) < MAX_REFUSED_SHARE * t.checks as f64,
        "{refused} of {} checks refused",
        t.checks
    );
    if only.is_none() && checks >= DEFAULT_CHECKS {
        assert!(
            t.statements >= MIN_STATEMENTS,
            "only {} statements",
            t.statements
        );
    }
}
