//! Standbys with synchronous replication (`pgshard cluster up --standbys 2`, issue 21),
//! on real servers: writes through pgshard reach every node's standbys; `cluster
//! status` lists them with their `sync_state`; `pg_dist_node` holds them as secondaries
//! of their primary's group and routing uses primaries only; and the W5 sequence of
//! seed 002 — the synchronous standby stopped, the potential one becomes synchronous
//! and commits go on; both stopped, a `synchronous_commit = on` commit waits until a
//! standby returns while `synchronous_commit = local` commits go through.
//!
//! One test, in order (it stops and starts standbys), on a cluster of its own.

mod common;

use common::{alloc_ports, pgshard, run_dir, sqlstate_and_message, teardown_at_exit, Teardown};
use pgshard::cluster::node::Node;
use pgshard::cluster::{cluster_info, standby, ClusterInfo};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

const STANDBYS: usize = 2;

/// A server of the cluster: `sub` is its data directory's name (`worker1`, `worker1_s2`).
fn server(dir: &Path, info: &ClusterInfo, sub: &str, port: u16) -> Node {
    Node {
        name: sub.into(),
        data_dir: dir.join(sub),
        listen_host: "127.0.0.1".into(),
        port,
        socket_dir: info.socket_dir.clone(),
        log_file: dir.join("logs").join(format!("{sub}.log")),
    }
}

/// Every primary (coordinator node first) with its standbys.
fn groups(dir: &Path, info: &ClusterInfo) -> Vec<(Node, Vec<Node>)> {
    let mut primaries = vec![server(dir, info, "coordinator", info.coordinator_port)];
    for (i, &port) in info.worker_ports.iter().enumerate() {
        primaries.push(server(dir, info, &format!("worker{}", i + 1), port));
    }
    primaries
        .into_iter()
        .zip(&info.standby_ports)
        .map(|(p, ports)| {
            let standbys = ports
                .iter()
                .enumerate()
                .map(|(i, &port)| standby::standby_node(&p, i + 1, port))
                .collect();
            (p, standbys)
        })
        .collect()
}

async fn connect(info: &ClusterInfo, port: u16) -> Client {
    common::connect(&info.host, port, &info.user, &info.password, &info.database).await
}

/// `(application_name, sync_state)` of a primary's streaming standbys, sorted.
async fn sync_states(info: &ClusterInfo, primary: &Node) -> Vec<(String, String)> {
    let rows = standby::replication_rows(primary, &info.password)
        .await
        .expect("pg_stat_replication");
    rows.into_iter()
        .filter(|r| r.state == "streaming")
        .map(|r| (r.application_name, r.sync_state))
        .collect()
}

/// Waits (up to 20 s) until every primary's streaming standbys are `expected`.
async fn expect_sync_states(
    info: &ClusterInfo,
    groups: &[(Node, Vec<Node>)],
    expected: &[(&str, &str)],
) {
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    for (primary, _) in groups {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let seen = sync_states(info, primary).await;
            if seen == expected {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "pg_stat_replication of {}: {seen:?}, expected {expected:?}",
                primary.name
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Waits (up to 20 s) until `sql` answers `want` on the server at `port`.
async fn eventually(info: &ClusterInfo, port: u16, sql: &str, want: &str) {
    let c = connect(info, port).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = common::scalar(&c, sql).await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{sql} on port {port}: {got:?}, expected {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn stop(node: &Node) {
    assert!(
        node.stop().expect("pg_ctl stop"),
        "{} was not running",
        node.name
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standbys_replicate_and_synchronous_commits_wait_for_one() {
    let dir = run_dir().join("cluster");
    teardown_at_exit(Teardown::Cluster(dir.clone()));
    // pgshard, the coordinator node, 2 workers and 2 standbys each.
    let base = alloc_ports(4 + 3 * STANDBYS as u16);
    let (d, port) = (dir.to_str().unwrap(), base.to_string());
    let standbys = STANDBYS.to_string();
    pgshard(&[
        "cluster",
        "up",
        "--dir",
        d,
        "--workers",
        "2",
        "--port",
        &port,
        "--fast",
        "--standbys",
        &standbys,
    ]);
    let info = cluster_info(&dir).expect("cluster info");
    let groups = groups(&dir, &info);
    assert_eq!(groups.len(), 3);
    assert!(groups.iter().all(|(_, s)| s.len() == STANDBYS));

    // cluster status: every standby, streaming, s1 synchronous and s2 potential.
    let status = String::from_utf8(pgshard(&["cluster", "status", "--dir", d]).stdout).unwrap();
    for (_, standbys) in &groups {
        for sb in standbys {
            let line = status
                .lines()
                .find(|l| l.contains(&format!(":{} ", sb.port)))
                .unwrap_or_else(|| panic!("no line for {} in:\n{status}", sb.name));
            let want = if sb.data_dir.to_string_lossy().ends_with("_s1") {
                "streaming sync,"
            } else {
                "streaming potential,"
            };
            assert!(line.contains(want) && line.contains(" up "), "{line}");
        }
    }
    expect_sync_states(&info, &groups, &[("s1", "sync"), ("s2", "potential")]).await;

    let client = connect(&info, info.port).await;
    // pg_dist_node: the secondaries in their primary's group; routing reads primaries.
    let nodes = common::scalar(
        &client,
        "SELECT string_agg(format('%s:%s:%s', groupid, nodeport, noderole), ' ' ORDER BY nodeport) \
         FROM pg_dist_node",
    )
    .await;
    let worker_group = |port: u16| -> String {
        nodes
            .split(' ')
            .find_map(|n| {
                let parts: Vec<&str> = n.split(':').collect();
                (parts[1] == port.to_string() && parts[2] == "primary")
                    .then(|| parts[0].to_string())
            })
            .unwrap_or_else(|| panic!("worker {port} not in {nodes}"))
    };
    let mut expected = Vec::new();
    for (i, (primary, standbys)) in groups.iter().enumerate() {
        let group = if i == 0 {
            "0".to_string()
        } else {
            worker_group(primary.port)
        };
        if i > 0 {
            expected.push((primary.port, format!("{group}:{}:primary", primary.port)));
        }
        for sb in standbys {
            expected.push((sb.port, format!("{group}:{}:secondary", sb.port)));
        }
    }
    expected.sort();
    let expected: Vec<String> = expected.into_iter().map(|(_, s)| s).collect();
    assert_eq!(nodes, expected.join(" "), "pg_dist_node");
    let active = common::scalar(
        &client,
        "SELECT string_agg(node_port::text, ',' ORDER BY node_port) FROM citus_get_active_worker_nodes()",
    )
    .await;
    let workers: Vec<String> = info.worker_ports.iter().map(|p| p.to_string()).collect();
    assert_eq!(active, workers.join(","), "citus_get_active_worker_nodes()");

    // citus_add_node of secondaries: Citus's arguments; an existing node returns its id.
    let s1 = &groups[1].1[0];
    let again = format!(
        "SELECT citus_add_node({}, {}, groupid => {}, noderole => 'secondary')",
        pgshard::sql::quote::quote_literal(&info.node_host),
        s1.port,
        worker_group(groups[1].0.port)
    );
    let id = common::scalar(&client, &again).await;
    assert!(id.parse::<i32>().is_ok(), "{id}");
    for (sql, code) in [
        (
            "SELECT citus_add_node('127.0.0.1', 1, noderole => 'secondary')",
            "22023",
        ),
        (
            "SELECT citus_add_node('127.0.0.1', 1, groupid => 999, noderole => 'secondary')",
            "22023",
        ),
        (
            "SELECT citus_add_node('127.0.0.1', 1, noderole => 'tertiary')",
            "22P02",
        ),
    ] {
        let e = client.simple_query(sql).await.expect_err(sql);
        assert_eq!(sqlstate_and_message(&e).0, code, "{sql}: {e:?}");
    }

    // A distributed table made now: shards on the primaries only; writes through
    // pgshard (which would fail on a read-only standby) reach every standby.
    for sql in [
        "CREATE TABLE logins (userid int, at timestamp DEFAULT now())",
        "SELECT create_distributed_table('logins', 'userid')",
        "CREATE TABLE local_log (n int)",
        "INSERT INTO logins (userid) SELECT g FROM generate_series(1, 100) g",
        "INSERT INTO local_log VALUES (1)",
    ] {
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let placed = common::scalar(
        &client,
        "SELECT string_agg(DISTINCT nodeport::text, ',') FROM citus_shards WHERE table_name = 'logins'::regclass",
    )
    .await;
    assert_eq!(placed, workers.join(","), "placements of logins");
    assert_eq!(
        common::scalar(&client, "SELECT count(*) FROM logins").await,
        "100"
    );
    let shard_counts = "SELECT coalesce(sum(n), 0)::text FROM (SELECT (xpath('/row/c/text()', \
         query_to_xml(format('SELECT count(*) AS c FROM %I', relname), false, true, '')))[1]::text::int AS n \
         FROM pg_class WHERE relname LIKE 'logins\\_%' AND relkind = 'r') s";
    let mut on_workers = 0;
    for (primary, standbys) in &groups[1..] {
        let n: i32 = common::scalar(&connect(&info, primary.port).await, shard_counts)
            .await
            .parse()
            .unwrap();
        on_workers += n;
        for sb in standbys {
            eventually(&info, sb.port, shard_counts, &n.to_string()).await;
        }
    }
    assert_eq!(on_workers, 100);
    for sb in &groups[0].1 {
        eventually(&info, sb.port, "SELECT count(*) FROM local_log", "1").await;
    }

    // W5: the synchronous standby stops; the potential one becomes synchronous, and
    // synchronous commits go on.
    for (_, standbys) in &groups {
        stop(&standbys[0]);
    }
    expect_sync_states(&info, &groups, &[("s2", "sync")]).await;
    tokio::time::timeout(
        Duration::from_secs(20),
        client.batch_execute(
            "INSERT INTO logins (userid) SELECT g FROM generate_series(101, 200) g; \
             INSERT INTO local_log VALUES (2)",
        ),
    )
    .await
    .expect("commits with s2 synchronous")
    .expect("writes with s2 synchronous");

    // Both stopped: a synchronous commit waits...
    for (_, standbys) in &groups {
        stop(&standbys[1]);
    }
    let key = 7;
    let shard_port: u16 = common::scalar(
        &client,
        &format!(
            "SELECT nodeport FROM citus_shards WHERE shardid = \
             get_shard_id_for_distribution_column('logins', {key})"
        ),
    )
    .await
    .parse()
    .unwrap();
    let waiting = {
        let c = connect(&info, info.port).await;
        tokio::spawn(async move {
            c.batch_execute(&format!("INSERT INTO logins (userid) VALUES ({key})"))
                .await
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !waiting.is_finished(),
        "a synchronous commit returned with no standby: {:?}",
        waiting.await
    );
    // ... while commits with synchronous_commit = local go through: on a worker (one
    // statement, a block), on the coordinator node. (A commit across nodes still waits:
    // its 2PC decision record is committed with synchronous_commit = on.)
    let local = connect(&info, info.port).await;
    for sql in [
        "SET synchronous_commit = local",
        "INSERT INTO logins (userid) VALUES (201)",
        "INSERT INTO local_log VALUES (3)",
        "BEGIN",
        "INSERT INTO logins (userid) VALUES (202)",
        "COMMIT",
    ] {
        tokio::time::timeout(Duration::from_secs(20), local.batch_execute(sql))
            .await
            .unwrap_or_else(|_| {
                panic!("{sql} waited for a standby under synchronous_commit = local")
            })
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    assert!(
        !waiting.is_finished(),
        "the synchronous commit returned early"
    );

    // A standby of the worker holding the key comes back: the waiting commit completes.
    let (_, worker_standbys) = groups
        .iter()
        .find(|(p, _)| p.port == shard_port)
        .expect("the key's worker");
    worker_standbys[0].start().expect("start s1");
    tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the synchronous commit completes once a standby is back")
        .expect("task")
        .expect("insert");

    // Everything back: every standby has every row.
    for (_, standbys) in &groups {
        for sb in standbys {
            sb.start().expect("start standby");
        }
    }
    expect_sync_states(&info, &groups, &[("s1", "sync"), ("s2", "potential")]).await;
    assert_eq!(
        common::scalar(&client, "SELECT count(*) FROM logins").await,
        "203"
    );
    for (primary, standbys) in &groups[1..] {
        let n = common::scalar(&connect(&info, primary.port).await, shard_counts).await;
        for sb in standbys {
            eventually(&info, sb.port, shard_counts, &n).await;
        }
    }
    for sb in &groups[0].1 {
        eventually(&info, sb.port, "SELECT count(*) FROM local_log", "3").await;
    }

    // down stops the standbys too; up starts them again.
    pgshard(&["cluster", "down", "--dir", d]);
    for (_, standbys) in &groups {
        for sb in standbys {
            assert!(
                sb.running_pid().is_none(),
                "{} still runs after down",
                sb.name
            );
        }
    }
    pgshard(&["cluster", "up", "--dir", d, "--port", &port, "--fast"]);
    expect_sync_states(&info, &groups, &[("s1", "sync"), ("s2", "potential")]).await;
    let client = connect(&info, info.port).await;
    assert_eq!(
        common::scalar(&client, "SELECT count(*) FROM logins").await,
        "203"
    );
}
