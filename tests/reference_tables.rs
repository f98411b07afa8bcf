//! Reference tables through pgshard, compared with one plain PostgreSQL: COPY FROM
//! STDIN (text, CSV, binary) to every placement in one transaction, bad rows failing
//! with PostgreSQL's SQLSTATE and leaving nothing on any node, COPY inside blocks,
//! COPY TO STDOUT, TRUNCATE; a worker added later receiving every reference table
//! (`citus_add_node`, `replicate_reference_tables`) without losing concurrent writes;
//! `truncate_local_data_after_distributing_table`, `citus_set_coordinator_host` and
//! `citus_shards.shard_size`.

mod common;

use bytes::Bytes;
use common::{alloc_ports, cluster, outcome, plain_postgres, run_dir, scalar};
use common::{teardown_at_exit, Teardown};
use futures_util::{pin_mut, SinkExt, StreamExt};
use pgshard::cluster::node::{self, Node, Settings};
use tokio_postgres::Client;

/// The tests change the cluster's topology: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn exec(c: &Client, sql: &str) {
    c.batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
}

/// Each `;`-separated statement as a query string of its own (Citus functions that
/// write run alone).
async fn exec_each(c: &Client, sql: &str) {
    for stmt in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        exec(c, stmt).await;
    }
}

async fn copy_in(c: &Client, sql: &str, data: &[u8]) -> Result<u64, tokio_postgres::Error> {
    let sink = c.copy_in(sql).await?;
    pin_mut!(sink);
    for piece in data.chunks(7_919) {
        sink.send(Bytes::copy_from_slice(piece)).await?;
    }
    sink.as_mut().finish().await
}

async fn copy_out(c: &Client, sql: &str) -> Vec<u8> {
    let stream = c
        .copy_out(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    pin_mut!(stream);
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    out
}

fn code(r: Result<u64, tokio_postgres::Error>) -> String {
    match r {
        Ok(n) => format!("ok {n}"),
        Err(e) => format!(
            "error {}",
            e.code().map(|c| c.code().to_string()).unwrap_or_default()
        ),
    }
}

/// The reference table's rows (sorted text) on every placement, read on the nodes.
async fn placements(c: &Client, table: &str) -> Vec<(u16, Vec<String>)> {
    let shard: String = scalar(
        c,
        &format!("SELECT shardid FROM pg_dist_shard WHERE logicalrelid = '{table}'::regclass"),
    )
    .await;
    let ports = c
        .simple_query(&format!(
            "SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n ON n.groupid = p.groupid \
             WHERE p.shardid = {shard} AND n.noderole = 'primary' ORDER BY 1"
        ))
        .await
        .unwrap();
    let mut out = Vec::new();
    for m in ports {
        let tokio_postgres::SimpleQueryMessage::Row(r) = m else {
            continue;
        };
        let port: u16 = r.get(0).unwrap().parse().unwrap();
        let w = cluster().direct(port).await;
        let rows = w
            .simple_query(&format!("SELECT t::text FROM {table}_{shard} t ORDER BY 1"))
            .await
            .unwrap();
        let rows = rows
            .iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap().to_string()),
                _ => None,
            })
            .collect();
        out.push((port, rows));
    }
    out
}

/// Every placement holds `want` rows, the same ones as plain PostgreSQL's table.
async fn assert_placements_equal(pgs: &Client, plain: &Client, table: &str) {
    let want: Vec<String> = plain
        .simple_query(&format!("SELECT t::text FROM {table} t ORDER BY 1"))
        .await
        .unwrap()
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap().to_string()),
            _ => None,
        })
        .collect();
    let got = placements(pgs, table).await;
    assert!(got.len() >= 2, "{table}: {got:?}");
    for (port, rows) in got {
        assert_eq!(rows, want, "{table} on node {port}");
    }
}

const DEF: &str = "(k int PRIMARY KEY, v text, n numeric(6,1), d date)";

async fn both_reference(pgs: &Client, plain: &Client, name: &str) {
    let create = format!("DROP TABLE IF EXISTS {name}; CREATE TABLE {name} {DEF}");
    exec(plain, &create).await;
    exec(pgs, &create).await;
    exec(pgs, &format!("SELECT create_reference_table('{name}')")).await;
}

/// COPY FROM STDIN in every format reaches every placement, with PostgreSQL's counts;
/// bad rows fail with PostgreSQL's SQLSTATE and leave nothing anywhere; COPY in a
/// block commits and rolls back with it; COPY TO STDOUT reads one placement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_into_reference_tables_matches_postgres() {
    let _serial = SERIAL.lock().await;
    let pgs = cluster().client().await;
    let plain = plain_postgres().client().await;
    both_reference(&pgs, &plain, "rc").await;

    let text: String = (1..=3000)
        .map(|i| {
            format!(
                "{i}\tv{i}\\ttab\t{}.5\t2024-01-{:02}\n",
                i % 1000,
                i % 28 + 1
            )
        })
        .collect::<String>()
        + "3001\t\\N\t\\N\t\\N\n";
    for c in [&pgs, &plain] {
        assert_eq!(
            code(copy_in(c, "COPY rc FROM STDIN", text.as_bytes()).await),
            "ok 3001"
        );
    }
    assert_placements_equal(&pgs, &plain, "rc").await;

    // CSV with a header and a column list; binary made by PostgreSQL itself.
    let csv = "k,v\n4001,\"a,b\"\n4002,\"q\"\"uote\"\n";
    let binary = copy_out(
        &plain,
        "COPY (SELECT i + 5000 AS k, 'b' || i AS v, i * 1.5 AS n, DATE '2020-02-02' + i AS d \
         FROM generate_series(1, 500) i) TO STDOUT (FORMAT binary)",
    )
    .await;
    for c in [&pgs, &plain] {
        assert_eq!(
            code(
                copy_in(
                    c,
                    "COPY rc (k, v) FROM STDIN (FORMAT csv, HEADER)",
                    csv.as_bytes()
                )
                .await
            ),
            "ok 2"
        );
        assert_eq!(
            code(copy_in(c, "COPY rc FROM STDIN (FORMAT binary)", &binary).await),
            "ok 500"
        );
    }
    assert_placements_equal(&pgs, &plain, "rc").await;

    // Bad rows: PostgreSQL's SQLSTATE, nothing written on any placement.
    for bad in [
        "9001\tok\t1\t2024-01-01\n9002\tx\tnot a number\t2024-01-01\n",
        "9003\tok\t1\t2024-01-01\n1\tduplicate\t1\t2024-01-01\n",
        "9004\tok\t12345678\t2024-01-01\n",
        "9005\ttoo\tfew\n",
        "9006\tok\t1\t2024-13-45\n",
    ] {
        let want = code(copy_in(&plain, "COPY rc FROM STDIN", bad.as_bytes()).await);
        let got = code(copy_in(&pgs, "COPY rc FROM STDIN", bad.as_bytes()).await);
        assert!(want.starts_with("error"), "{bad}: {want}");
        assert_eq!(got, want, "{bad}");
    }
    assert_placements_equal(&pgs, &plain, "rc").await;

    // Inside a block: ROLLBACK leaves nothing, COMMIT keeps the rows everywhere; a
    // failed COPY aborts the block as in PostgreSQL.
    let more: String = (10_001..=10_100)
        .map(|i| format!("{i}\tb{i}\t1\t2024-02-02\n"))
        .collect();
    for c in [&pgs, &plain] {
        exec(c, "BEGIN").await;
        assert_eq!(
            code(copy_in(c, "COPY rc FROM STDIN", more.as_bytes()).await),
            "ok 100"
        );
        assert_eq!(
            scalar(c, "SELECT count(*) FROM rc WHERE k > 10000").await,
            "100"
        );
        exec(c, "ROLLBACK").await;
    }
    assert_placements_equal(&pgs, &plain, "rc").await;
    for c in [&pgs, &plain] {
        exec(c, "BEGIN; INSERT INTO rc VALUES (20000, 'before', 1, NULL)").await;
        assert_eq!(
            code(copy_in(c, "COPY rc FROM STDIN", more.as_bytes()).await),
            "ok 100"
        );
        exec(c, "COMMIT").await;
        exec(c, "BEGIN").await;
        assert!(code(copy_in(c, "COPY rc FROM STDIN", b"x\n").await).starts_with("error 22P02"));
        assert_eq!(outcome(c, "SELECT 1").await, "error 25P02");
        exec(c, "ROLLBACK").await;
    }
    assert_placements_equal(&pgs, &plain, "rc").await;

    // COPY TO STDOUT: the table, some columns, a query, CSV with a header.
    for sql in [
        "COPY (SELECT * FROM rc ORDER BY k) TO STDOUT",
        "COPY (SELECT k, v FROM rc WHERE k % 7 = 0 ORDER BY k DESC) TO STDOUT (FORMAT csv, HEADER)",
        "COPY (SELECT * FROM rc ORDER BY k) TO STDOUT (FORMAT binary)",
    ] {
        assert_eq!(
            copy_out(&pgs, sql).await,
            copy_out(&plain, sql).await,
            "{sql}"
        );
    }
    let mut got: Vec<String> = String::from_utf8(copy_out(&pgs, "COPY rc (k, v) TO STDOUT").await)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let mut want: Vec<String> =
        String::from_utf8(copy_out(&plain, "COPY rc (k, v) TO STDOUT").await)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);

    // A column left to a non-immutable default would differ between placements.
    exec_each(
        &pgs,
        "DROP TABLE IF EXISTS rcd; CREATE TABLE rcd (k int, at timestamptz DEFAULT now()); \
         SELECT create_reference_table('rcd')",
    )
    .await;
    assert_eq!(
        code(copy_in(&pgs, "COPY rcd (k) FROM STDIN", b"1\n").await),
        "error 0A000"
    );
    // (A fresh connection: tokio-postgres leaves the refused COPY's one unusable.)
    let pgs = cluster().client().await;
    assert_eq!(
        code(copy_in(&pgs, "COPY rcd FROM STDIN", b"1\t2024-01-01 00:00:00+00\n").await),
        "ok 1"
    );

    // TRUNCATE empties every placement, in a block as PostgreSQL does.
    for sql in [
        "BEGIN",
        "TRUNCATE rc",
        "SELECT count(*) FROM rc",
        "ROLLBACK",
        "SELECT count(*) FROM rc",
    ] {
        assert_eq!(
            outcome(&pgs, sql).await,
            outcome(&plain, sql).await,
            "{sql}"
        );
    }
    assert_placements_equal(&pgs, &plain, "rc").await;
    for c in [&pgs, &plain] {
        exec(c, "TRUNCATE rc").await;
    }
    assert_placements_equal(&pgs, &plain, "rc").await;
    exec(&pgs, "DROP TABLE rc, rcd").await;
    exec(&plain, "DROP TABLE rc").await;
    common::assert_no_prepared_xacts().await;
}

/// A fresh PostgreSQL with the cluster's superuser password.
fn new_worker(name: &str) -> Node {
    let cl = cluster();
    let dir = run_dir().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    node::check_reachable(&dir).unwrap();
    node::server_dir(&dir.join("logs"), 0o755).unwrap();
    let socket_dir = node::socket_dir_for(&dir);
    node::server_dir(&socket_dir, 0o755).unwrap();
    let n = Node {
        name: name.into(),
        data_dir: dir.join("data"),
        listen_host: "127.0.0.1".into(),
        port: alloc_ports(1),
        socket_dir,
        log_file: dir.join("logs").join("postgres.log"),
    };
    teardown_at_exit(Teardown::Node(n.clone()));
    n.create(
        &cl.password,
        Settings {
            fast: true,
            async_commit: false,
            parallel_workers_per_gather: None,
        },
    )
    .expect("initdb");
    n.start().expect("start");
    n
}

/// `citus_add_node` copies every reference table to the new worker while writes go
/// on (none lost); joins of shards on that worker with the reference table are then
/// exact; `replicate_reference_tables` restores a missing placement; removing the
/// node removes its reference placements.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_worker_receives_every_reference_table() {
    let _serial = SERIAL.lock().await;
    let cl = cluster();
    let pgs = cl.client().await;
    let plain = plain_postgres().client().await;
    let setup = "DROP TABLE IF EXISTS nw_ref, nw_ref2, nw_dist; \
                 CREATE TABLE nw_ref (k int PRIMARY KEY, name text); \
                 CREATE TABLE nw_ref2 (k int, tag text); \
                 CREATE TABLE nw_dist (id int, ref int, amount int); \
                 INSERT INTO nw_ref SELECT i, 'name ' || i FROM generate_series(1, 200) i; \
                 INSERT INTO nw_ref2 VALUES (1, 'one'), (2, 'two')";
    exec(&plain, setup).await;
    exec(&pgs, setup).await;
    exec_each(
        &pgs,
        "SELECT create_reference_table('nw_ref'); SELECT create_reference_table('nw_ref2')",
    )
    .await;

    // Writes to the reference table while the node is added: none may be lost.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let writer = tokio::spawn(async move {
        let c = cluster().client().await;
        let mut i = 1000;
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
            c.batch_execute(&format!("INSERT INTO nw_ref VALUES ({i}, 'during {i}')"))
                .await
                .unwrap();
            i += 1;
        }
        i
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let n = new_worker("ref-new-worker");
    exec(
        &pgs,
        &format!("SELECT citus_add_node('127.0.0.1', {})", n.port),
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let last = writer.await.unwrap();
    assert!(last > 1010, "the writer wrote {} rows", last - 1000);
    exec(
        &plain,
        &format!(
            "INSERT INTO nw_ref SELECT i, 'during ' || i FROM generate_series(1000, {}) i",
            last - 1
        ),
    )
    .await;
    for t in ["nw_ref", "nw_ref2"] {
        let on = placements(&pgs, t).await;
        assert_eq!(on.len(), 3, "{t}: {on:?}");
        assert!(on.iter().any(|(p, _)| *p == n.port), "{t}: {on:?}");
        assert_placements_equal(&pgs, &plain, t).await;
    }

    // Writes after: every placement, the new one included (INSERT, COPY, UPDATE).
    for c in [&pgs, &plain] {
        exec(
            c,
            "INSERT INTO nw_ref VALUES (5000, 'after'); UPDATE nw_ref2 SET tag = tag || '!'",
        )
        .await;
        assert_eq!(
            code(copy_in(c, "COPY nw_ref FROM STDIN", b"5001\tcopied\n5002\tcopied\n").await),
            "ok 2"
        );
    }
    assert_placements_equal(&pgs, &plain, "nw_ref").await;
    assert_placements_equal(&pgs, &plain, "nw_ref2").await;

    // A table distributed now has shards on the new worker: its joins with the
    // reference table read the new placement.
    let fill = "INSERT INTO nw_dist SELECT i, i % 250 + 1, i FROM generate_series(1, 3000) i";
    exec(&plain, fill).await;
    exec_each(
        &pgs,
        &format!(
            "SET citus.shard_count = 6; SELECT create_distributed_table('nw_dist', 'id'); {fill}"
        ),
    )
    .await;
    let on_new = scalar(
        &pgs,
        &format!(
            "SELECT count(*) FROM pg_dist_placement p JOIN pg_dist_node n ON n.groupid = p.groupid \
             JOIN pg_dist_shard s ON s.shardid = p.shardid \
             WHERE s.logicalrelid = 'nw_dist'::regclass AND n.nodeport = {}",
            n.port
        ),
    )
    .await;
    assert_eq!(on_new, "2");
    for sql in [
        "SELECT r.name, sum(d.amount) FROM nw_dist d JOIN nw_ref r ON r.k = d.ref GROUP BY r.name ORDER BY 1",
        "SELECT count(*) FROM nw_dist d LEFT JOIN nw_ref r ON r.k = d.ref WHERE r.k IS NULL",
        "SELECT d.id, r.name, r2.tag FROM nw_dist d JOIN nw_ref r ON r.k = d.ref \
         JOIN nw_ref2 r2 ON r2.k = d.ref WHERE d.id < 600 ORDER BY 1",
    ] {
        assert_eq!(outcome(&pgs, sql).await, outcome(&plain, sql).await, "{sql}");
    }

    // replicate_reference_tables: nothing to do, then a missing placement restored
    // (the node's old copy replaced).
    let coord = cl.direct(cl.coordinator_port).await;
    assert_eq!(
        outcome(&pgs, "SELECT replicate_reference_tables()").await,
        "() ok 1"
    );
    assert_eq!(
        outcome(&pgs, "SELECT replicate_reference_tables('bogus')").await,
        "error 22P02"
    );
    exec(
        &coord,
        &format!(
            "DELETE FROM pg_dist_placement p USING pg_dist_node n, pg_dist_shard s \
             WHERE n.groupid = p.groupid AND n.nodeport = {} AND s.shardid = p.shardid \
             AND s.logicalrelid = 'nw_ref'::regclass; \
             SELECT pg_catalog.pgshard_raise_catalog_version(); NOTIFY pgshard_catalog",
            n.port
        ),
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(placements(&pgs, "nw_ref").await.len(), 2);
    exec(
        &pgs,
        "SELECT replicate_reference_tables(shard_transfer_mode => 'block_writes')",
    )
    .await;
    assert_eq!(placements(&pgs, "nw_ref").await.len(), 3);
    assert_placements_equal(&pgs, &plain, "nw_ref").await;

    // The node goes with its reference placements (its distributed shards first).
    exec(&pgs, "DROP TABLE nw_dist").await;
    exec(&plain, "DROP TABLE nw_dist").await;
    exec(
        &pgs,
        &format!("SELECT citus_remove_node('127.0.0.1', {})", n.port),
    )
    .await;
    for t in ["nw_ref", "nw_ref2"] {
        assert_eq!(placements(&pgs, t).await.len(), 2, "{t}");
    }
    exec(&pgs, "INSERT INTO nw_ref VALUES (6000, 'removed')").await;
    exec(&plain, "INSERT INTO nw_ref VALUES (6000, 'removed')").await;
    assert_placements_equal(&pgs, &plain, "nw_ref").await;
    exec(&pgs, "DROP TABLE nw_ref, nw_ref2").await;
    exec(&plain, "DROP TABLE nw_ref, nw_ref2").await;
    common::assert_no_prepared_xacts().await;
}

/// `truncate_local_data_after_distributing_table`, `citus_set_coordinator_host` and
/// `citus_shards.shard_size`, with Citus's errors and columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_utilities_behave_as_citus() {
    let _serial = SERIAL.lock().await;
    let cl = cluster();
    let pgs = cl.client().await;
    exec_each(
        &pgs,
        "DROP TABLE IF EXISTS ut_d, ut_r, ut_local; CREATE TABLE ut_d (k int, v text); \
         INSERT INTO ut_d SELECT i, repeat('x', 100) FROM generate_series(1, 2000) i; \
         CREATE TABLE ut_r (k int PRIMARY KEY); CREATE TABLE ut_local (k int); \
         SET citus.shard_count = 4; SELECT create_distributed_table('ut_d', 'k'); \
         SELECT create_reference_table('ut_r'); INSERT INTO ut_r SELECT generate_series(1, 10)",
    )
    .await;

    // truncate_local_data_after_distributing_table: the shell holds nothing already.
    for (sql, want) in [
        (
            "SELECT truncate_local_data_after_distributing_table('ut_d')",
            "() ok 1",
        ),
        (
            "SELECT truncate_local_data_after_distributing_table(function_name => 'ut_r')",
            "() ok 1",
        ),
        (
            "SELECT truncate_local_data_after_distributing_table('ut_local')",
            "error XX000",
        ),
        (
            "SELECT truncate_local_data_after_distributing_table('ut_nope')",
            "error 42P01",
        ),
        ("SELECT count(*) FROM ut_d", "(2000) ok 1"),
    ] {
        assert_eq!(outcome(&pgs, sql).await, want, "{sql}");
    }
    let e = pgs
        .simple_query("SELECT truncate_local_data_after_distributing_table('ut_local')")
        .await
        .unwrap_err();
    assert!(
        e.as_db_error()
            .unwrap()
            .message()
            .contains("supplied parameter is not a distributed relation"),
        "{e:?}"
    );

    // citus_set_coordinator_host: the group-0 row, added then moved.
    let coord_row =
        "SELECT nodename || ':' || nodeport || ':' || shouldhaveshards || ':' || noderole \
                     FROM pg_dist_node WHERE groupid = 0";
    exec(&pgs, "SELECT citus_set_coordinator_host('localhost')").await;
    assert_eq!(
        scalar(&pgs, coord_row).await,
        format!("localhost:{}:false:primary", cl.coordinator_port)
    );
    exec(
        &pgs,
        &format!(
            "SELECT citus_set_coordinator_host('127.0.0.1', {})",
            cl.coordinator_port
        ),
    )
    .await;
    assert_eq!(
        scalar(&pgs, coord_row).await,
        format!("127.0.0.1:{}:false:primary", cl.coordinator_port)
    );
    assert_eq!(
        outcome(
            &pgs,
            "SELECT citus_set_coordinator_host('x', 1, 'nonsense')"
        )
        .await,
        "error 22P02"
    );
    assert_eq!(
        scalar(&pgs, "SELECT count(*) FROM citus_get_active_worker_nodes()").await,
        cl.worker_ports.len().to_string()
    );
    assert_eq!(scalar(&pgs, "SELECT count(*) FROM ut_d").await, "2000");

    // citus_shards.shard_size: each placement's pg_total_relation_size, read on the
    // node (simple and extended protocol); the view read directly says NULL.
    let shard_rows = "SELECT shardid, nodeport, shard_size FROM citus_shards \
                      WHERE table_name IN ('ut_d'::regclass, 'ut_r'::regclass) ORDER BY 1, 2";
    let mut want = Vec::new();
    for m in pgs
        .simple_query(
            "SELECT shardid, nodeport, shard_name FROM citus_shards \
             WHERE table_name IN ('ut_d'::regclass, 'ut_r'::regclass) ORDER BY 1, 2",
        )
        .await
        .unwrap()
    {
        let tokio_postgres::SimpleQueryMessage::Row(r) = m else {
            continue;
        };
        let port: u16 = r.get(1).unwrap().parse().unwrap();
        let w = cl.direct(port).await;
        let size = scalar(
            &w,
            &format!("SELECT pg_total_relation_size('{}')", r.get(2).unwrap()),
        )
        .await;
        want.push(format!("({},{},{size})", r.get(0).unwrap(), port));
    }
    assert_eq!(want.len(), 4 + 2, "{want:?}");
    let got = outcome(&pgs, shard_rows).await;
    assert_eq!(got, format!("{} ok 6", want.join(" ")));
    let extended: Vec<String> = pgs
        .query(
            "SELECT shardid, nodeport, shard_size FROM pg_catalog.citus_shards AS s \
             WHERE s.table_name = $1::text::regclass ORDER BY 1, 2",
            &[&"ut_d"],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "({},{},{})",
                r.get::<_, i64>(0),
                r.get::<_, i32>(1),
                r.get::<_, i64>(2)
            )
        })
        .collect();
    assert_eq!(extended, want[..4].to_vec());
    assert_eq!(
        scalar(
            &pgs,
            "SELECT count(*) FROM citus_shards WHERE shard_size > 0 AND table_name = 'ut_d'::regclass"
        )
        .await,
        "4"
    );
    let coord = cl.direct(cl.coordinator_port).await;
    assert_eq!(
        scalar(&coord, "SELECT count(shard_size) FROM citus_shards").await,
        "0"
    );

    exec_each(&pgs, "DROP TABLE ut_d, ut_r; DROP TABLE ut_local").await;
    exec(
        &coord,
        "DELETE FROM pg_dist_node WHERE groupid = 0 AND noderole = 'primary'",
    )
    .await;
}
