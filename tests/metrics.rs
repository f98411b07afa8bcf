//! The Prometheus metrics endpoint (`metrics_listen`), read with the real `curl` while
//! the real `pgbench` runs through pgshard: the statement counters, the round-trip
//! histogram and the clients gauge move during the run; an error shows under its
//! SQLSTATE, a transaction writing two workers under the two-phase commits, and every
//! node's pool under its name.

mod common;

use common::serve::Serve;
use common::{alloc_ports, cluster};
use std::process::Command;
use std::time::Duration;

fn scrape(port: u16) -> String {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            &format!("http://127.0.0.1:{port}/metrics"),
        ])
        .output()
        .expect("running curl");
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The value of the sample named exactly `series` (name and labels), 0 when absent.
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_move_during_a_pgbench_run() {
    let cl = cluster();
    let metrics_port = alloc_ports(1);
    let serve = Serve::start_with_toml(
        "metrics",
        |_| {},
        &format!("metrics_listen = \"127.0.0.1:{metrics_port}\""),
    )
    .unwrap();
    let c = common::connect(&cl.host, serve.port, &cl.user, &cl.password, &cl.database).await;
    for sql in [
        "DROP TABLE IF EXISTS metrics_t",
        "CREATE TABLE metrics_t (k int PRIMARY KEY, v int)",
        "SELECT create_distributed_table('metrics_t', 'k')",
        "INSERT INTO metrics_t SELECT g, 0 FROM generate_series(1, 1000) g",
    ] {
        c.batch_execute(sql).await.unwrap();
    }
    let before = scrape(metrics_port);
    assert!(before.ends_with("# EOF\n"), "{before}");
    let routed = r#"pgshard_statements_total{kind="router"}"#;
    let trips = "pgshard_round_trip_seconds_count";

    // pgbench through pgshard; scraped while it runs.
    let script = common::run_dir().join("metrics_select.sql");
    std::fs::write(
        &script,
        "\\set k random(1, 1000)\nSELECT v FROM metrics_t WHERE k = :k;\n",
    )
    .unwrap();
    let mut env = cl.pg_env();
    env.retain(|(k, _)| k != "PGPORT");
    env.push(("PGPORT".into(), serve.port.to_string()));
    let bench = Command::new("pgbench")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .args(["-n", "-c", "4", "-T", "4", "-M", "prepared", "-f"])
        .arg(&script)
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = scrape(metrics_port);
    let bench = bench.wait_with_output().unwrap();
    assert!(bench.status.success());
    let after = scrape(metrics_port);
    assert!(value(&during, "pgshard_clients") >= 4.0, "{during}");
    assert!(value(&during, routed) > value(&before, routed), "{during}");
    assert!(
        value(&after, routed) > value(&during, routed) + 10.0,
        "{after}"
    );
    assert!(value(&after, trips) > value(&during, trips), "{after}");
    assert!(
        value(&after, "pgshard_client_connections_total")
            >= value(&before, "pgshard_client_connections_total") + 4.0
    );

    // An error under its SQLSTATE; a write of both workers under two-phase commits.
    let missing = r#"pgshard_errors_total{sqlstate="42P01"}"#;
    let two_phase = r#"pgshard_commits_total{protocol="two_phase"}"#;
    assert!(c
        .simple_query("SELECT * FROM metrics_no_such_table")
        .await
        .is_err());
    c.batch_execute("BEGIN; UPDATE metrics_t SET v = v + 1; COMMIT;")
        .await
        .unwrap();
    let last = scrape(metrics_port);
    assert_eq!(
        value(&last, missing),
        value(&after, missing) + 1.0,
        "{last}"
    );
    assert_eq!(
        value(&last, two_phase),
        value(&after, two_phase) + 1.0,
        "{last}"
    );
    for w in &cl.worker_ports {
        let series = format!(
            "pgshard_node_connections_idle{{node=\"{}:{}\"}}",
            cl.node_host, w
        );
        assert!(last.contains(&series), "no pool line {series} in\n{last}");
    }
    c.batch_execute("DROP TABLE metrics_t").await.unwrap();
}
