//! Real drivers' own test suites, and PostgreSQL's regression suite, run against one plain
//! PostgreSQL 15 and through a fresh pgshard cluster in the same run: every test that
//! passes on PostgreSQL and fails through pgshard is a difference, and fails this test
//! unless `known_differences.txt` (beside this file) names it with its reason.
//!
//! The tests are `#[ignore]`d (they need Go, Node.js and copies of the suites):
//! `scripts/driver-suites.sh` and `scripts/pg-regress.sh` install and copy what they need
//! and run one of them per process, so that each suite gets fresh servers:
//! - `pgx`: jackc/pgx v5, `go test -json` per package (gotest.rs);
//! - `node_postgres`: node-postgres's `packages/pg`, one `node FILE` per integration test
//!   file (nodefiles.rs);
//! - `pg_regress`: `pg_regress --use-existing` with `parallel_schedule` directly on a fresh
//!   cluster's coordinator node, then through pgshard on another fresh cluster
//!   (pg_regress.rs).
//!
//! Each prints its lists and a closing `SUITE: N passed, M failed` line (N: tests passing
//! on both targets, M: unlisted differences) and writes them to
//! `$DRIVER_SUITES_WORK/results/SUITE/` (report.txt, postgres.tsv, pgshard.tsv).

#[path = "../common/mod.rs"]
mod common;
mod gotest;
mod nodefiles;
mod pg_regress;
mod report;

use common::{cluster, plain_postgres};
use report::{Results, Status, TestResult};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A setting from the calling script.
fn setting(name: &str) -> PathBuf {
    std::env::var_os(name)
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("{name} is not set: run scripts/driver-suites.sh"))
}

/// The time a test (pgx) or a test file (node-postgres) may go without progress.
fn time_limit() -> Duration {
    let secs = std::env::var("DRIVER_SUITES_TIME_LIMIT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    Duration::from_secs(secs)
}

/// A target of a run: its name and libpq environment.
struct Target {
    name: &'static str,
    env: Vec<(String, String)>,
    /// pgshard's or the server's Unix-socket directory.
    socket_dir: PathBuf,
}

fn targets() -> [Target; 2] {
    let plain = plain_postgres();
    let cl = cluster();
    [
        Target {
            name: "postgres",
            env: plain.pg_env(),
            socket_dir: plain.node.socket_dir.clone(),
        },
        Target {
            name: "pgshard",
            env: cl.pg_env(),
            socket_dir: cl.socket_dir.clone(),
        },
    ]
}

fn env_value<'a>(env: &'a [(String, String)], key: &str) -> &'a str {
    env.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap()
}

/// Runs `sql` statement by statement with psql against `env`; a statement that fails is
/// printed (the suite's own tests then show what it costs), not fatal.
fn setup_sql(target: &Target, statements: &[&str]) {
    for sql in statements {
        let out = Command::new("psql")
            .envs(target.env.iter().cloned())
            .args(["-X", "-q", "-c", sql])
            .output()
            .expect("running psql");
        if !out.status.success() {
            eprintln!(
                "  set-up on {}: `{sql}` failed: {}",
                target.name,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
}

/// Compares, prints and records; fails on an unlisted difference. `alone`: the unlisted
/// differences that passed when run again alone through pgshard.
fn finish(suite: &str, postgres: &Results, pgshard: &Results, alone: &BTreeSet<String>) {
    let dir = setting("DRIVER_SUITES_WORK").join("results").join(suite);
    std::fs::create_dir_all(&dir).unwrap();
    report::write_results(&dir.join("postgres.tsv"), postgres);
    report::write_results(&dir.join("pgshard.tsv"), pgshard);
    let comparison = report::compare(suite, postgres, pgshard, alone);
    let text = report::render(suite, postgres, pgshard, &comparison);
    std::fs::write(dir.join("report.txt"), &text).unwrap();
    println!("\n{text}(also in {})", dir.join("report.txt").display());
    assert!(
        comparison.unlisted.is_empty(),
        "{} tests pass on PostgreSQL and fail through pgshard without being listed in {}",
        comparison.unlisted.len(),
        report::KNOWN_DIFFERENCES
    );
}

/// Runs `suite` on each target in turn (one at a time: the machine is small); then each
/// difference not in the known list runs once more alone through pgshard (`run_one`),
/// and counts only if it fails again: tests of a suite can collide on shared state or
/// timing, which one run alone tells apart from a difference.
fn run_both(
    suite: &str,
    mut run: impl FnMut(&Target) -> Results,
    mut run_one: impl FnMut(&Target, &str) -> Option<TestResult>,
) {
    // The logs of an earlier run would mislead.
    let logs = setting("DRIVER_SUITES_WORK")
        .join("results")
        .join(suite)
        .join("logs");
    let _ = std::fs::remove_dir_all(&logs);
    let [postgres, pgshard] = targets();
    let mut results = vec![];
    for target in [&postgres, &pgshard] {
        eprintln!("{suite} on {} ...", target.name);
        let started = Instant::now();
        results.push(run(target));
        eprintln!(
            "{suite} on {}: {:.0} s",
            target.name,
            started.elapsed().as_secs_f64()
        );
    }
    let first = report::compare(suite, &results[0], &results[1], &BTreeSet::new());
    let mut alone = BTreeSet::new();
    for (test, _) in &first.unlisted {
        let again = run_one(&pgshard, test);
        let passed = again.as_ref().is_some_and(|r| r.status == Status::Pass);
        eprintln!(
            "{suite}: {test} (not listed) run again alone through pgshard: {}",
            match &again {
                Some(_) if passed => "passed".to_string(),
                Some(r) => format!("failed again: {}", r.error.lines().next().unwrap_or("")),
                None => "no result".to_string(),
            }
        );
        if passed {
            alone.insert(test.clone());
        }
    }
    finish(suite, &results[0], &results[1], &alone);
}

/// pgx's test environment for `target`: its connection strings (pgx reads them from the
/// environment).
fn pgx_env(target: &Target) -> Vec<(String, String)> {
    let e = &target.env;
    let conn = |host: &str| {
        format!(
            "host={host} port={} user={} password={} dbname={}",
            env_value(e, "PGPORT"),
            env_value(e, "PGUSER"),
            env_value(e, "PGPASSWORD"),
            env_value(e, "PGDATABASE")
        )
    };
    vec![
        ("GOTOOLCHAIN".to_string(), "local".to_string()),
        (
            "PGX_TEST_DATABASE".to_string(),
            conn(env_value(e, "PGHOST")),
        ),
        (
            "PGX_TEST_TCP_CONN_STRING".to_string(),
            conn(env_value(e, "PGHOST")),
        ),
        (
            "PGX_TEST_UNIX_SOCKET_CONN_STRING".to_string(),
            conn(&target.socket_dir.to_string_lossy()),
        ),
    ]
}

#[test]
#[ignore = "run by scripts/driver-suites.sh"]
fn pgx() {
    let go = setting("DRIVER_SUITES_GO");
    let dir = setting("DRIVER_SUITES_WORK").join("pgx");
    let logs = setting("DRIVER_SUITES_WORK").join("results/pgx/logs");
    run_both(
        "pgx",
        |target| {
            // pgx's testsetup/postgresql_setup.sql, less the roles of the TLS and password
            // tests whose connection strings stay unset (those tests skip).
            setup_sql(
                target,
                &[
                    "CREATE EXTENSION IF NOT EXISTS hstore",
                    "CREATE EXTENSION IF NOT EXISTS ltree",
                    "CREATE DOMAIN uint64 AS numeric(20,0)",
                    r#"CREATE USER " tricky, ' } "" \\ test user " SUPERUSER PASSWORD 'secret'"#,
                ],
            );
            let logs = logs.join(target.name);
            gotest::run_module(&go, &dir, &pgx_env(target), time_limit(), &logs)
        },
        |target, test| {
            let logs = logs.join(format!("{}-alone", target.name));
            gotest::run_one(&go, &dir, &pgx_env(target), time_limit(), test, &logs)
        },
    );
}

#[test]
#[ignore = "run by scripts/driver-suites.sh"]
fn node_postgres() {
    let package = setting("DRIVER_SUITES_WORK").join("node-postgres/pg");
    let logs = setting("DRIVER_SUITES_WORK").join("results/node-postgres/logs");
    run_both(
        "node-postgres",
        |target| nodefiles::run_files(&package, &target.env, time_limit(), &logs.join(target.name)),
        |target, test| {
            let logs = logs.join(format!("{}-alone", target.name));
            Some(nodefiles::run_one(
                &package,
                test,
                &target.env,
                time_limit(),
                &logs,
            ))
        },
    );
}

#[test]
#[ignore = "run by scripts/pg-regress.sh"]
fn pg_regress() {
    let inputs = pg_regress::Inputs {
        pg_regress: &setting("PG_REGRESS"),
        input_dir: &setting("PG_REGRESS_INPUT_DIR"),
        dl_path: &setting("PG_REGRESS_DLPATH"),
    };
    // Directly on the coordinator node of a fresh cluster of its own.
    let direct_dir = common::run_dir().join("direct");
    common::teardown_at_exit(common::Teardown::Cluster(direct_dir.clone()));
    common::cluster_up(&direct_dir, common::alloc_ports(4));
    let direct = pgshard::cluster::cluster_info(&direct_dir).expect("cluster info");
    let mut direct_env = direct.pg_env();
    for (k, v) in direct_env.iter_mut() {
        if k == "PGPORT" {
            *v = direct.coordinator_port.to_string();
        }
    }
    let out = |name: &str| -> PathBuf { common::run_dir().join(format!("regress-{name}")) };
    eprintln!("pg_regress directly on a coordinator node ...");
    // A backstop: a hung test's psql is killed after 5 minutes (pg_regress.rs), and a
    // parallel group of up to 20 tests takes about a minute on 2 cores.
    let limit = Duration::from_secs(900);
    let on_node = pg_regress::run(&inputs, &direct_env, &out("coordinator"), limit);
    eprintln!("pg_regress through pgshard ...");
    let through = pg_regress::run(&inputs, &cluster().pg_env(), &out("pgshard"), limit);
    for (name, dir) in [
        ("coordinator", out("coordinator")),
        ("pgshard", out("pgshard")),
    ] {
        keep_diffs(&dir, name);
    }
    // No test runs again alone: a regression test reads the objects of those before it.
    finish("pg_regress", &on_node, &through, &BTreeSet::new());
}

/// Copies pg_regress's diffs into the results directory (the run directory is deleted at
/// exit).
fn keep_diffs(out_dir: &Path, name: &str) {
    let dir = setting("DRIVER_SUITES_WORK").join("results/pg_regress");
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["regression.diffs", "pg_regress.out"] {
        let _ = std::fs::copy(out_dir.join(file), dir.join(format!("{name}-{file}")));
    }
}
