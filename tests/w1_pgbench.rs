//! W1 of /work/shared/workloads.md end to end through pgshard with the real `pgbench`
//! and `psql` binaries, at scale 10 with 32 shards:
//!
//! - `pgbench -i -s 10` through pgshard, then `SET citus.shard_count = 32` and the four
//!   `create_distributed_table` calls of W1 in one psql session;
//! - row counts through pgshard (1,000,000 / 10 / 100 / 0) equal those of a plain
//!   PostgreSQL loaded with `pgbench -i -s 10` directly (the oracle), and the data really
//!   sits in 32 shards per table on the two workers (`pg_dist_node`, `pg_dist_shard`);
//! - routed lookups by `aid` and aggregates over ranges of `aid` agree with the oracle,
//!   also after the same updates were applied on both sides;
//! - `pgbench -S -c 16 -j 2 -T 20` with `-M prepared` and with `-M simple` finish with
//!   no failed transaction and a positive TPS.

mod common;

use common::{cluster, plain_postgres, psql};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::process::Command;
use std::sync::OnceLock;
use tokio_postgres::Client;

const SCALE: i64 = 10;
const ACCOUNTS: i64 = 100_000 * SCALE;

/// Runs the real pgbench with a libpq environment; panics with its output on failure.
fn pgbench(env: &[(String, String)], args: &[&str]) -> String {
    let out = Command::new("pgbench")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .args(args)
        .output()
        .expect("running pgbench");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "pgbench {} failed ({}):\n{text}",
        args.join(" "),
        out.status
    );
    text
}

/// Loads W1 once per test binary: pgbench tables through pgshard, distributed with 32
/// shards in one psql session, and the same pgbench load into the plain PostgreSQL.
fn loaded() {
    static LOADED: OnceLock<()> = OnceLock::new();
    LOADED.get_or_init(|| {
        let env = cluster().pg_env();
        let scale = SCALE.to_string();
        pgbench(&env, &["-i", "-s", &scale]);
        let out = psql(
            &env,
            &[
                "-c",
                "SET citus.shard_count = 32",
                "-c",
                "SELECT create_distributed_table('pgbench_accounts','aid')",
                "-c",
                "SELECT create_distributed_table('pgbench_branches','bid')",
                "-c",
                "SELECT create_distributed_table('pgbench_tellers','tid')",
                "-c",
                "SELECT create_distributed_table('pgbench_history','aid')",
            ],
        );
        assert!(out.starts_with("SET"), "psql output:\n{out}");
        pgbench(&plain_postgres().pg_env(), &["-i", "-s", &scale]);
    });
}

async fn count(c: &Client, table: &str) -> i64 {
    c.query_one(&format!("select count(*) from {table}"), &[])
        .await
        .unwrap_or_else(|e| panic!("count of {table}: {e}"))
        .get(0)
}

#[tokio::test]
async fn row_counts_match_the_oracle() {
    loaded();
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    for (table, expected) in [
        ("pgbench_accounts", ACCOUNTS),
        ("pgbench_branches", SCALE),
        ("pgbench_tellers", 10 * SCALE),
        ("pgbench_history", 0),
    ] {
        assert_eq!(count(&shard, table).await, expected, "{table} via pgshard");
        assert_eq!(
            count(&plain, table).await,
            expected,
            "{table} in the oracle"
        );
    }
    // The same counts from the real psql through pgshard.
    let out = psql(
        &cluster().pg_env(),
        &["-c", "select count(*) from pgbench_accounts"],
    );
    assert_eq!(out, ACCOUNTS.to_string());
}

#[tokio::test]
async fn data_sits_in_32_shards_on_the_two_workers() {
    loaded();
    let c = cluster();
    let shard = c.client().await;

    let out = psql(
        &c.pg_env(),
        &[
            "-c",
            "select nodename, nodeport from pg_dist_node order by nodeport",
        ],
    );
    let expected: Vec<String> = c
        .worker_ports
        .iter()
        .map(|p| format!("{}|{p}", c.node_host))
        .collect();
    assert_eq!(out.lines().collect::<Vec<_>>(), expected, "pg_dist_node");
    assert_eq!(c.worker_ports.len(), 2);

    // SET citus.shard_count in the same psql session took effect for every table.
    for table in [
        "pgbench_accounts",
        "pgbench_branches",
        "pgbench_tellers",
        "pgbench_history",
    ] {
        let rows = shard
            .query(
                "select shardid from pg_dist_shard where logicalrelid::text = $1",
                &[&table],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), 32, "shards of {table}");
    }

    // The accounts are on the workers, spread over both, and not left on the
    // coordinator node's local table.
    let mut on_workers = 0i64;
    for &port in &c.worker_ports {
        let w = c.direct(port).await;
        let tables: Vec<String> = w
            .query(
                "select relname::text from pg_class where relkind = 'r' \
                 and relname ~ '^pgbench_accounts_[0-9]+$'",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(tables.len() >= 8, "worker {port} has shards {tables:?}");
        let mut here = 0i64;
        for t in &tables {
            here += count(&w, t).await;
        }
        assert!(here > ACCOUNTS / 4, "worker {port} holds only {here} rows");
        on_workers += here;
    }
    assert_eq!(on_workers, ACCOUNTS, "accounts over all shards");
    let node = c.direct(c.coordinator_port).await;
    let local: i64 = node
        .query_one(
            "select count(*) from pg_class where relname = 'pgbench_accounts' and relkind = 'r' \
             and relnamespace = 'public'::regnamespace",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    if local == 1 {
        assert_eq!(
            count(&node, "only pgbench_accounts").await,
            0,
            "rows left in the coordinator node's local pgbench_accounts"
        );
    }
}

/// (count, sum(abalance), min(aid), max(aid)) over aid in [lo, hi].
async fn range_stats(c: &Client, lo: i32, hi: i32) -> (i64, Option<i64>, Option<i32>, Option<i32>) {
    let row = c
        .query_one(
            "select count(*), sum(abalance), min(aid), max(aid) from pgbench_accounts \
             where aid between $1 and $2",
            &[&lo, &hi],
        )
        .await
        .unwrap_or_else(|e| panic!("range {lo}..{hi}: {e}"));
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

async fn whole_table_stats(c: &Client) -> (i64, Option<i64>, Option<i32>, Option<i32>) {
    let row = c
        .query_one(
            "select count(*), sum(abalance), min(aid), max(aid) from pgbench_accounts",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

#[tokio::test]
async fn lookups_and_aggregates_match_the_oracle() {
    loaded();
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    let seed: u64 = rand::random();
    eprintln!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);

    // The same balance changes on both sides, so that sums are not all zero (no other
    // test of this binary writes to pgbench_accounts).
    let update = "update pgbench_accounts set abalance = abalance + $2 where aid = $1";
    let (su, pu) = (
        shard.prepare(update).await.unwrap(),
        plain.prepare(update).await.unwrap(),
    );
    for _ in 0..100 {
        let aid: i32 = rng.gen_range(1..=ACCOUNTS as i32);
        let delta: i32 = rng.gen_range(-5000..=5000);
        assert_eq!(
            shard.execute(&su, &[&aid, &delta]).await.unwrap(),
            1,
            "update aid {aid} via pgshard"
        );
        assert_eq!(plain.execute(&pu, &[&aid, &delta]).await.unwrap(), 1);
    }

    // 200 routed lookups through one prepared statement on each side.
    let lookup = "select abalance, bid from pgbench_accounts where aid = $1";
    let (sl, pl) = (
        shard.prepare(lookup).await.unwrap(),
        plain.prepare(lookup).await.unwrap(),
    );
    for _ in 0..200 {
        let aid: i32 = rng.gen_range(1..=ACCOUNTS as i32);
        let got: Vec<(i32, i32)> = shard
            .query(&sl, &[&aid])
            .await
            .unwrap_or_else(|e| panic!("lookup {aid}: {e}"))
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let want: Vec<(i32, i32)> = plain
            .query(&pl, &[&aid])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert_eq!(want.len(), 1);
        assert_eq!(got, want, "aid {aid}");
    }
    // A key that does not exist: no row on either side.
    let missing = ACCOUNTS as i32 + 7;
    assert!(shard.query(&sl, &[&missing]).await.unwrap().is_empty());

    // Aggregates over ranges of aid (crossing many shards) and over the whole table.
    let mut ranges = vec![
        (1, 1),
        (1, 1000),
        (999_001, 1_000_000),
        (1, ACCOUNTS as i32),
        (2_000_000, 3_000_000),
    ];
    for _ in 0..5 {
        let lo: i32 = rng.gen_range(1..=ACCOUNTS as i32);
        let hi = lo.saturating_add(rng.gen_range(0..200_000));
        ranges.push((lo, hi));
    }
    for (lo, hi) in ranges {
        let got = range_stats(&shard, lo, hi).await;
        let want = range_stats(&plain, lo, hi).await;
        assert_eq!(got, want, "aid between {lo} and {hi}");
    }
    let got = whole_table_stats(&shard).await;
    assert_eq!(got, whole_table_stats(&plain).await, "whole table");
    assert_eq!(got.0, ACCOUNTS);
    assert_eq!((got.2, got.3), (Some(1), Some(ACCOUNTS as i32)));
}

/// A pgbench summary line `name = number` or `name: number`.
fn summary_number(out: &str, name: &str) -> f64 {
    let line = out
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no `{name}` in pgbench output:\n{out}"));
    line[name.len()..]
        .trim_start_matches([' ', '=', ':'])
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unreadable `{line}`"))
}

#[test]
fn pgbench_select_only_prepared_and_simple() {
    loaded();
    let env = cluster().pg_env();
    for mode in ["prepared", "simple"] {
        let out = pgbench(&env, &["-M", mode, "-S", "-c", "16", "-j", "2", "-T", "20"]);
        eprintln!("-M {mode}:\n{out}");
        assert!(
            out.contains(&format!("query mode: {mode}")),
            "mode in:\n{out}"
        );
        assert!(
            out.lines()
                .any(|l| l.starts_with("number of failed transactions: 0 ")),
            "-M {mode} had failed transactions:\n{out}"
        );
        assert_eq!(summary_number(&out, "number of failed transactions"), 0.0);
        let done = summary_number(&out, "number of transactions actually processed");
        assert!(done > 0.0, "-M {mode}: no transaction processed");
        let tps = summary_number(&out, "tps");
        assert!(tps > 0.0, "-M {mode}: tps {tps}");
    }
}
