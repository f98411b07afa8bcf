//! Several pgshard processes on one catalog (`pgshard cluster up --coordinators N`,
//! issue 21 item 6), against real servers:
//! - the CLI starts, lists and stops N listeners, each serving every statement;
//! - catalog changes made through one process (create_distributed_table, ALTER, DROP,
//!   a new worker) are seen at once through another, statements it prepared before
//!   included (PostgreSQL as the oracle for what the prepared statements answer);
//! - a lock-wait cycle whose sessions are on two processes and two workers is broken:
//!   one gets 40P01 within the detection interval, the other commits;
//! - `kill -9` of a process whose transactions are prepared: the survivor's recovery
//!   commits the one whose decision record committed, rolls back the other, and leaves
//!   the live process's in-flight transaction alone.
//!
//! The tests share one 3-process cluster of this binary and take turns (`TURN`): the
//! recovery test locks the decision table and kills the third process.

mod common;

use common::{alloc_ports, connect, pgshard, run_dir, teardown_at_exit, Teardown};
use pgshard::cluster::ClusterInfo;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

const COORDINATORS: usize = 3;

/// One test at a time on the shared cluster.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Cluster {
    dir: PathBuf,
    info: ClusterInfo,
    /// `cluster up` output.
    up: String,
}

fn cluster() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| {
        let dir = run_dir().join("coords");
        teardown_at_exit(Teardown::Cluster(dir.clone()));
        // Its ports, the processes' after the nodes', and one more for a third worker.
        let port = alloc_ports(4 + COORDINATORS as u16).to_string();
        let out = pgshard(&[
            "cluster",
            "up",
            "--dir",
            dir.to_str().unwrap(),
            "--workers",
            "2",
            "--port",
            &port,
            "--coordinators",
            &COORDINATORS.to_string(),
            "--fast",
        ]);
        let info = pgshard::cluster::cluster_info(&dir).unwrap();
        // The processes' deadlock detectors see each other within a second (and tag
        // their transactions from then on).
        std::thread::sleep(Duration::from_millis(1500));
        Cluster {
            dir,
            info,
            up: String::from_utf8_lossy(&out.stdout).into_owned(),
        }
    })
}

impl Cluster {
    /// A connection through pgshard process `i` (0-based).
    async fn process(&self, i: usize) -> Client {
        let c = &self.info;
        connect(
            &c.host,
            c.pgshard_ports[i],
            &c.user,
            &c.password,
            &c.database,
        )
        .await
    }

    async fn direct(&self, port: u16) -> Client {
        let i = &self.info;
        connect(&i.host, port, &i.user, &i.password, &i.database).await
    }

    fn pid_of(&self, i: usize) -> u32 {
        let file = if i == 0 {
            "pgshard.pid".to_string()
        } else {
            format!("pgshard-{}.pid", i + 1)
        };
        std::fs::read_to_string(self.dir.join(file))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

/// The one value of a simple-protocol query, as an integer.
async fn scalar(c: &Client, sql: &str) -> i64 {
    let rows = common::simple_rows(c, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    rows[0][0].as_deref().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_up_starts_lists_and_serves_every_process() {
    let _turn = TURN.lock().await;
    let cl = cluster();
    assert_eq!(cl.info.pgshard_ports.len(), COORDINATORS, "{}", cl.up);
    for p in &cl.info.pgshard_ports {
        assert!(cl.up.contains(&p.to_string()), "{p} in: {}", cl.up);
    }
    let status = String::from_utf8_lossy(
        &pgshard(&["cluster", "status", "--dir", cl.dir.to_str().unwrap()]).stdout,
    )
    .into_owned();
    for (i, p) in cl.info.pgshard_ports.iter().enumerate() {
        let name = if i == 0 {
            "pgshard".to_string()
        } else {
            format!("pgshard-{}", i + 1)
        };
        let line = status
            .lines()
            .find(|l| {
                l.split_whitespace().next() == Some(name.as_str()) && l.contains(&format!(":{p} "))
            })
            .unwrap_or_else(|| panic!("no {name} in:\n{status}"));
        assert!(line.contains(" up "), "{line}");
    }
    // Each process serves every statement: DDL, distribution, writes, reads.
    for i in 0..COORDINATORS {
        let c = cl.process(i).await;
        let t = format!("every_{i}");
        c.batch_execute(&format!("CREATE TABLE {t} (id int PRIMARY KEY, v int)"))
            .await
            .unwrap();
        c.batch_execute(&format!("SELECT create_distributed_table('{t}', 'id')"))
            .await
            .unwrap();
        c.batch_execute(&format!(
            "INSERT INTO {t} SELECT g, g FROM generate_series(1, 100) g"
        ))
        .await
        .unwrap();
        for j in 0..COORDINATORS {
            let other = cl.process(j).await;
            assert_eq!(
                scalar(&other, &format!("SELECT sum(v)::int8 FROM {t}")).await,
                5050
            );
        }
    }
}

/// What a statement answers: its rows' first column as text, or its SQLSTATE.
async fn outcome(
    c: &Client,
    st: &tokio_postgres::Statement,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> String {
    match c.query(st, params).await {
        Ok(rows) => format!(
            "ok {:?}",
            rows.iter().map(|r| r.get::<_, i64>(0)).collect::<Vec<_>>()
        ),
        Err(e) => format!("error {}", common::sqlstate_and_message(&e).0),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_changes_through_one_process_are_seen_at_once_by_another() {
    let _turn = TURN.lock().await;
    let cl = cluster();
    let a = cl.process(0).await;
    let b = cl.process(1).await;
    let plain = common::plain_postgres().client().await;
    a.batch_execute("CREATE TABLE cat (id int PRIMARY KEY, v int)")
        .await
        .unwrap();
    plain
        .batch_execute("CREATE TABLE cat (id int PRIMARY KEY, v int)")
        .await
        .unwrap();
    // Prepared through B while `cat` is a local table.
    let b_insert = b.prepare("INSERT INTO cat VALUES ($1, $2)").await.unwrap();
    let b_count = b
        .prepare("SELECT count(*) FROM cat WHERE id <= $1")
        .await
        .unwrap();
    let p_count = plain
        .prepare("SELECT count(*) FROM cat WHERE id <= $1")
        .await
        .unwrap();
    a.batch_execute("SELECT create_distributed_table('cat', 'id')")
        .await
        .unwrap();
    // At once through B: its prepared INSERT writes to the shards.
    for k in 1..=20i32 {
        b.execute(&b_insert, &[&k, &k]).await.unwrap();
        plain
            .execute("INSERT INTO cat VALUES ($1, $2)", &[&k, &k])
            .await
            .unwrap();
    }
    assert_eq!(scalar(&a, "SELECT count(*) FROM cat").await, 20);
    let mut on_workers = 0;
    for &w in &cl.info.worker_ports {
        let d = cl.direct(w).await;
        for r in d
            .query(
                "SELECT relname::text FROM pg_class WHERE relname LIKE 'cat\\_%' AND relkind = 'r'",
                &[],
            )
            .await
            .unwrap()
        {
            let shard: String = r.get(0);
            on_workers += scalar(&d, &format!("SELECT count(*) FROM {shard}")).await;
        }
    }
    assert_eq!(on_workers, 20, "B's prepared INSERT went to the shards");
    assert_eq!(
        outcome(&b, &b_count, &[&10i32]).await,
        outcome(&plain, &p_count, &[&10i32]).await
    );

    // ALTER through A, the new column at once through B.
    a.batch_execute("ALTER TABLE cat ADD COLUMN w int DEFAULT 7")
        .await
        .unwrap();
    assert_eq!(scalar(&b, "SELECT sum(w)::int8 FROM cat").await, 140);
    assert_eq!(
        outcome(&b, &b_count, &[&10i32]).await,
        outcome(&plain, &p_count, &[&10i32]).await
    );

    // A reference table made through A, joined through B at once.
    a.batch_execute("CREATE TABLE cat_ref (id int PRIMARY KEY, name text)")
        .await
        .unwrap();
    a.batch_execute("SELECT create_reference_table('cat_ref')")
        .await
        .unwrap();
    b.batch_execute("INSERT INTO cat_ref SELECT g, 'n' || g FROM generate_series(1, 5) g")
        .await
        .unwrap();
    assert_eq!(
        scalar(
            &b,
            "SELECT count(*) FROM cat JOIN cat_ref USING (id) WHERE cat_ref.name LIKE 'n%'"
        )
        .await,
        5
    );

    // DROP through A: B's prepared statement fails as PostgreSQL's does.
    a.batch_execute("DROP TABLE cat").await.unwrap();
    plain.batch_execute("DROP TABLE cat").await.unwrap();
    let (pb, pp) = (
        outcome(&b, &b_count, &[&10i32]).await,
        outcome(&plain, &p_count, &[&10i32]).await,
    );
    assert_eq!(pb, pp);
    assert!(pp.starts_with("error"), "{pp}");
    // A new table of the same name, distributed through A, served by B.
    a.batch_execute("CREATE TABLE cat (id int PRIMARY KEY, v int)")
        .await
        .unwrap();
    a.batch_execute("SELECT create_distributed_table('cat', 'id')")
        .await
        .unwrap();
    b.batch_execute("INSERT INTO cat VALUES (1, 1), (2, 2)")
        .await
        .unwrap();
    assert_eq!(scalar(&a, "SELECT count(*) FROM cat").await, 2);

    // Again and again: each table distributed through A is written through B's open
    // session the moment A's statement returns.
    for i in 0..10 {
        let t = format!("cat_again_{i}");
        a.batch_execute(&format!("CREATE TABLE {t} (id int PRIMARY KEY)"))
            .await
            .unwrap();
        a.batch_execute(&format!("SELECT create_distributed_table('{t}', 'id')"))
            .await
            .unwrap();
        b.batch_execute(&format!("INSERT INTO {t} SELECT generate_series(1, 10)"))
            .await
            .unwrap_or_else(|e| panic!("{t} through B at once: {e:?}"));
        a.batch_execute(&format!("DROP TABLE {t}")).await.unwrap();
        let gone = b
            .batch_execute(&format!("SELECT * FROM {t}"))
            .await
            .unwrap_err();
        assert_eq!(common::sqlstate_and_message(&gone).0, "42P01", "{t}");
    }

    // A worker added (registered through the first process by `cluster up`): the next
    // table distributed through B (in a colocation group of its own) places shards on
    // it at once.
    let dir = cl.dir.to_str().unwrap().to_string();
    let out = tokio::task::spawn_blocking(move || {
        pgshard(&["cluster", "up", "--dir", &dir, "--workers", "3", "--fast"])
    })
    .await
    .unwrap();
    let info = pgshard::cluster::cluster_info(&cl.dir).unwrap();
    let new_port = info.worker_ports[2];
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("registered worker 3"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    b.batch_execute("CREATE TABLE cat_new (id int PRIMARY KEY)")
        .await
        .unwrap();
    b.batch_execute("SELECT create_distributed_table('cat_new', 'id', colocate_with => 'none')")
        .await
        .unwrap();
    let on_new = scalar(
        &b,
        &format!(
            "SELECT count(*) FROM pg_dist_shard_placement p JOIN pg_dist_shard s USING (shardid) \
             WHERE s.logicalrelid = 'cat_new'::regclass AND p.nodeport = {new_port}"
        ),
    )
    .await;
    assert!(on_new > 0, "no shard of cat_new on the new worker");
    b.batch_execute("INSERT INTO cat_new SELECT generate_series(1, 50)")
        .await
        .unwrap();
    assert_eq!(scalar(&a, "SELECT count(*) FROM cat_new").await, 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_across_processes_is_broken() {
    let _turn = TURN.lock().await;
    let cl = cluster();
    let setup = cl.process(0).await;
    setup
        .batch_execute("CREATE TABLE dlx (id int PRIMARY KEY, v int)")
        .await
        .unwrap();
    setup
        .batch_execute("SELECT create_distributed_table('dlx', 'id')")
        .await
        .unwrap();
    let (ka, kb) = common::keys_on_two_workers_from(&setup, "dlx", 0).await;
    setup
        .batch_execute(&format!("INSERT INTO dlx VALUES ({ka}, 0), ({kb}, 0)"))
        .await
        .unwrap();
    // One session through each process, updating the two workers' rows in opposite
    // orders.
    let s1 = cl.process(0).await;
    let s2 = cl.process(1).await;
    s1.batch_execute(&format!("BEGIN; UPDATE dlx SET v = 1 WHERE id = {ka}"))
        .await
        .unwrap();
    s2.batch_execute(&format!("BEGIN; UPDATE dlx SET v = 2 WHERE id = {kb}"))
        .await
        .unwrap();
    let t = Instant::now();
    let sql1 = format!("UPDATE dlx SET v = 1 WHERE id = {kb}");
    let sql2 = format!("UPDATE dlx SET v = 2 WHERE id = {ka}");
    let both = async {
        tokio::join!(s1.batch_execute(&sql1), async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            s2.batch_execute(&sql2).await
        })
    };
    let (r1, r2) = tokio::time::timeout(Duration::from_secs(15), both)
        .await
        .expect("the cycle across two pgshard processes was not broken within 15 s");
    let elapsed = t.elapsed();
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    let (victim, survivor, survivor_v, r_victim) = match (&r1, &r2) {
        (Err(_), Ok(())) => (&s1, &s2, 2, r1),
        (Ok(()), Err(_)) => (&s2, &s1, 1, r2),
        _ => panic!("exactly one session must fail: {r1:?} / {r2:?}"),
    };
    let e = r_victim.unwrap_err();
    let (code, message) = common::sqlstate_and_message(&e);
    assert_eq!(code, "40P01", "{message}");
    assert!(message.contains("distributed deadlock"), "{message}");
    // The youngest transaction gives way, as in Citus: s2 began after s1.
    assert_eq!(
        survivor_v, 1,
        "s1 is the older transaction: s2 must be the victim"
    );
    victim.batch_execute("ROLLBACK").await.unwrap();
    survivor.batch_execute("COMMIT").await.unwrap();
    let v: Vec<i32> = setup
        .query("SELECT v FROM dlx ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(v, [survivor_v, survivor_v]);
}

/// Prepared gids of pgshard on each worker.
async fn prepared_on_workers(cl: &Cluster) -> Vec<String> {
    let mut all = Vec::new();
    for &w in &cl.info.worker_ports {
        let d = cl.direct(w).await;
        for r in d
            .query(
                "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'pgshard%' ORDER BY gid",
                &[],
            )
            .await
            .unwrap()
        {
            all.push(r.get::<_, String>(0));
        }
    }
    all
}

/// Waits until `n` gids starting with `prefix` are prepared on the workers.
async fn wait_prepared(cl: &Cluster, prefix: &str, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let gids: Vec<String> = prepared_on_workers(cl)
            .await
            .into_iter()
            .filter(|g| g.starts_with(prefix))
            .collect();
        if gids.len() >= n {
            return gids;
        }
        assert!(Instant::now() < deadline, "only {gids:?} prepared");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The instance prefix `pgshard_<instance>_` of a gid.
fn instance_of(gid: &str) -> String {
    let rest = gid.strip_prefix("pgshard_").unwrap();
    format!("pgshard_{}_", rest.split('_').next().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_after_kill_9_resolves_the_dead_process_and_spares_the_live_one() {
    let _turn = TURN.lock().await;
    let cl = cluster();
    let victim_process = COORDINATORS - 1;
    let setup = cl.process(0).await;
    setup
        .batch_execute("CREATE TABLE rec (id int PRIMARY KEY, v int)")
        .await
        .unwrap();
    setup
        .batch_execute("SELECT create_distributed_table('rec', 'id')")
        .await
        .unwrap();
    let (k1, k2) = common::keys_on_two_workers_from(&setup, "rec", 0).await;
    let (k3, k4) = common::keys_on_two_workers_from(&setup, "rec", 200).await;
    let (l1, l2) = common::keys_on_two_workers_from(&setup, "rec", 400).await;
    setup
        .batch_execute("INSERT INTO rec SELECT g, 0 FROM generate_series(1, 800) g")
        .await
        .unwrap();
    let coordinator = cl.direct(cl.info.coordinator_port).await;
    // Holding the decision table makes every 2PC wait after PREPARE TRANSACTION.
    coordinator
        .batch_execute("BEGIN; LOCK TABLE pg_dist_transaction IN EXCLUSIVE MODE")
        .await
        .unwrap();

    // Two transactions of the process to be killed, prepared on both workers.
    let mut doomed = Vec::new();
    for (x, y) in [(k1, k2), (k3, k4)] {
        let c = cl.process(victim_process).await;
        doomed.push(tokio::spawn(async move {
            c.batch_execute(&format!(
                "BEGIN; UPDATE rec SET v = 1 WHERE id = {x}; UPDATE rec SET v = 1 WHERE id = {y}; COMMIT"
            ))
            .await
        }));
    }
    let dead_gids = wait_prepared(cl, "pgshard_", 4).await;
    let dead_instance = instance_of(&dead_gids[0]);
    assert!(dead_gids.iter().all(|g| g.starts_with(&dead_instance)));
    unsafe { libc::kill(cl.pid_of(victim_process) as i32, libc::SIGKILL) };
    for d in doomed {
        assert!(d.await.unwrap().is_err(), "the killed process answered");
    }
    // The dead process's decision inserts still wait on the coordinator node (the
    // server has not noticed the lost client yet): ended, so that neither commits.
    let inst = dead_instance
        .trim_start_matches("pgshard_")
        .trim_end_matches('_');
    let ended = scalar(
        &coordinator,
        &format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = 'pgshard {inst} decisions'"
        ),
    )
    .await;
    assert!(ended >= 1, "no decision writer of {inst}");
    coordinator.batch_execute("COMMIT").await.unwrap();
    // The first transaction's decision was committed before the crash: one record per
    // participant (its gid with the participant's node group).
    let first_txn = {
        let (prefix, _) = dead_gids[0].rsplit_once('_').unwrap();
        prefix.to_string()
    };
    let first_gids: Vec<&String> = dead_gids
        .iter()
        .filter(|g| g.rsplit_once('_').unwrap().0 == first_txn)
        .collect();
    assert_eq!(first_gids.len(), 2, "{dead_gids:?}");
    for &w in &cl.info.worker_ports {
        let d = cl.direct(w).await;
        let here: Vec<String> = d
            .query("SELECT gid FROM pg_prepared_xacts", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        for g in first_gids.iter().filter(|g| here.contains(g)) {
            coordinator
                .execute(
                    "INSERT INTO pg_dist_transaction (groupid, gid) SELECT groupid, $1 \
                     FROM pg_dist_node WHERE nodeport = $2",
                    &[g, &(w as i32)],
                )
                .await
                .unwrap();
        }
    }

    let first_has_k1 = prepared_txn_of(cl, &setup, "rec", k1)
        .await
        .starts_with(&first_txn);

    // A transaction of a live process, in flight (waiting for its decision).
    coordinator
        .batch_execute("BEGIN; LOCK TABLE pg_dist_transaction IN EXCLUSIVE MODE")
        .await
        .unwrap();
    let live = cl.process(1).await;
    let live_txn = tokio::spawn(async move {
        live.batch_execute(&format!(
            "BEGIN; UPDATE rec SET v = 2 WHERE id = {l1}; UPDATE rec SET v = 2 WHERE id = {l2}; COMMIT"
        ))
        .await
    });
    let all = wait_prepared(cl, "pgshard_", 6).await;
    let live_gids: Vec<String> = all
        .iter()
        .filter(|g| !g.starts_with(&dead_instance))
        .cloned()
        .collect();
    assert_eq!(live_gids.len(), 2, "{all:?}");

    // The survivor's recovery: the dead process's transactions are resolved, the live
    // one's are not touched (recovery then waits to delete the used decision records
    // until the table is free).
    let survivor = cl.process(0).await;
    let recovery = tokio::spawn(async move {
        common::simple_rows(&survivor, "SELECT recover_prepared_transactions()")
            .await
            .map(|r| r[0][0].as_deref().unwrap().parse::<i64>().unwrap())
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = prepared_on_workers(cl).await;
        if !now.iter().any(|g| g.starts_with(&dead_instance)) {
            for g in &live_gids {
                assert!(now.contains(g), "live process's {g} was touched: {now:?}");
            }
            break;
        }
        assert!(Instant::now() < deadline, "not recovered: {now:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    coordinator.batch_execute("COMMIT").await.unwrap();
    live_txn.await.unwrap().unwrap();
    let resolved = tokio::time::timeout(Duration::from_secs(20), recovery)
        .await
        .expect("recovery finished")
        .unwrap()
        .unwrap();
    assert!(resolved >= 4, "resolved {resolved}");

    let v = |k: i32| {
        let setup = &setup;
        async move { scalar(setup, &format!("SELECT v::int8 FROM rec WHERE id = {k}")).await }
    };
    // Committed where the decision record committed, rolled back otherwise.
    let (first_keys, second_keys) = if first_has_k1 {
        ((k1, k2), (k3, k4))
    } else {
        ((k3, k4), (k1, k2))
    };
    assert_eq!((v(first_keys.0).await, v(first_keys.1).await), (1, 1));
    assert_eq!((v(second_keys.0).await, v(second_keys.1).await), (0, 0));
    assert_eq!((v(l1).await, v(l2).await), (2, 2));
    assert!(prepared_on_workers(cl).await.is_empty());

    // `cluster up` starts the killed process again.
    let dir = cl.dir.to_str().unwrap().to_string();
    let out = tokio::task::spawn_blocking(move || pgshard(&["cluster", "up", "--dir", &dir]))
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.contains(&format!("started pgshard-{COORDINATORS}")),
        "{out}"
    );
    let again = cl.process(victim_process).await;
    assert_eq!(
        scalar(&again, "SELECT count(*) FROM rec WHERE v = 1").await,
        2
    );
}

/// The gid of the prepared transaction that updated `key`'s row (its xmax), on the
/// worker holding it.
async fn prepared_txn_of(cl: &Cluster, c: &Client, table: &str, key: i32) -> String {
    let shard = scalar(
        c,
        &format!("SELECT get_shard_id_for_distribution_column('{table}', {key})"),
    )
    .await;
    let port = scalar(
        c,
        &format!("SELECT nodeport::int8 FROM pg_dist_shard_placement WHERE shardid = {shard}"),
    )
    .await;
    let d = cl.direct(port as u16).await;
    d.query_one(
        &format!(
            "SELECT p.gid FROM {table}_{shard} t JOIN pg_prepared_xacts p \
             ON p.transaction::text = t.xmax::text WHERE t.id = {key}"
        ),
        &[],
    )
    .await
    .unwrap()
    .get(0)
}
