//! W3 of /work/shared/workloads.md through pgshard with the real `sysbench`:
//! `sysbench oltp_insert prepare` creates `sbtest1` (a local table on the coordinator
//! node, with its index) through pgshard, `create_distributed_table('sbtest1', 'id')`
//! spreads it over 32 shards, then `oltp_insert --threads=16 --time=20 run` must end with
//! zero errors, and `count(*)` through pgshard must grow by exactly the inserts sysbench
//! reports — and the shards on the workers must hold exactly that many.

mod common;

use common::{cluster, psql};
use std::process::Command;

const TABLE_SIZE: i64 = 1_000;

fn sysbench(env: &[(String, String)], command: &str) -> String {
    let get = |k: &str| {
        env.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let out = Command::new("sysbench")
        .args([
            "oltp_insert".to_string(),
            "--db-driver=pgsql".into(),
            format!("--pgsql-host={}", get("PGHOST")),
            format!("--pgsql-port={}", get("PGPORT")),
            format!("--pgsql-user={}", get("PGUSER")),
            format!("--pgsql-password={}", get("PGPASSWORD")),
            format!("--pgsql-db={}", get("PGDATABASE")),
            "--tables=1".into(),
            format!("--table-size={TABLE_SIZE}"),
            "--auto_inc=off".into(),
            "--threads=16".into(),
            "--time=20".into(),
            "--report-interval=0".into(),
            command.into(),
        ])
        .output()
        .expect("running sysbench");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "sysbench {command} failed:\n{text}");
    text
}

/// The first number after `label` on the line that contains it.
fn figure(text: &str, label: &str) -> i64 {
    let line = text
        .lines()
        .find(|l| l.contains(label))
        .unwrap_or_else(|| panic!("no '{label}' in sysbench's output:\n{text}"));
    let rest = &line[line.find(label).unwrap() + label.len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no number after '{label}' in: {line}"))
}

#[test]
fn oltp_insert_runs_without_errors_and_every_insert_is_there() {
    let c = cluster();
    let env = c.pg_env();
    psql(&env, &["-c", "DROP TABLE IF EXISTS sbtest1"]);
    sysbench(&env, "prepare");
    psql(
        &env,
        &[
            "-c",
            "SET citus.shard_count = 32",
            "-c",
            "SELECT create_distributed_table('sbtest1', 'id')",
        ],
    );
    let count = || -> i64 {
        psql(&env, &["-c", "SELECT count(*) FROM sbtest1"])
            .parse()
            .unwrap()
    };
    let before = count();
    let out = sysbench(&env, "run");
    let writes = figure(&out, "write:");
    let ignored = figure(&out, "ignored errors:");
    assert_eq!(ignored, 0, "sysbench ignored errors:\n{out}");
    assert!(writes > 0, "no inserts:\n{out}");
    let through_pgshard = count();
    assert_eq!(through_pgshard, before + writes, "sysbench output:\n{out}");
    // The same rows, counted on the workers' shards directly.
    let on_workers: i64 = c
        .worker_ports
        .iter()
        .map(|port| {
            let mut e = env.clone();
            for (k, v) in e.iter_mut() {
                if k == "PGPORT" {
                    *v = port.to_string();
                }
            }
            let tables = psql(
                &e,
                &[
                    "-c",
                    "SELECT string_agg(format('SELECT count(*) FROM %I', relname), ' UNION ALL ') \
                     FROM pg_class WHERE relname ~ '^sbtest1_[0-9]+$' AND relkind = 'r'",
                ],
            );
            let sum = format!("SELECT coalesce(sum(count), 0) FROM ({tables}) AS s");
            psql(&e, &["-c", &sum]).parse::<i64>().unwrap()
        })
        .sum();
    assert_eq!(on_workers, through_pgshard);
    psql(&env, &["-c", "DROP TABLE sbtest1"]);
}
