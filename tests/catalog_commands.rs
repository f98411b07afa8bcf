//! Catalog and Citus commands against real PostgreSQL 15 servers: a coordinator
//! node and two workers started for this test binary, driven through
//! `pgshard::commands::call_utility` directly (not through the wire protocol).

mod common;

use common::{alloc_ports, connect, run_dir, teardown_at_exit, Teardown};
use pgshard::catalog::cache::CatalogCache;
use pgshard::cluster::node::{self, Node, Settings};
use pgshard::commands::{self, call_utility, CitusSettings, UtilityResult};
use pgshard::config::Config;
use pgshard::error::PgError;
use pgshard::planner::propagate::plan_propagate;
use pgshard::sharding::ranges::all_ranges;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio_postgres::Client;

struct Mini {
    coordinator: u16,
    workers: [u16; 2],
    password: String,
}

/// Three servers (coordinator node + 2 workers), stopped at exit.
fn mini() -> &'static Mini {
    static MINI: OnceLock<Mini> = OnceLock::new();
    MINI.get_or_init(|| {
        let password = node::random_password();
        let base = alloc_ports(3);
        for (i, name) in ["coordinator", "worker1", "worker2"].iter().enumerate() {
            // One directory per server: teardown empties a node's parent directory.
            let dir = run_dir().join(format!("mini-{name}"));
            std::fs::create_dir_all(&dir).unwrap();
            node::check_reachable(&dir).unwrap();
            node::server_dir(&dir.join("logs"), 0o755).unwrap();
            let socket_dir = node::socket_dir_for(&dir);
            node::server_dir(&socket_dir, 0o755).unwrap();
            let n = Node {
                name: name.to_string(),
                data_dir: dir.join("data"),
                listen_host: "127.0.0.1".into(),
                port: base + i as u16,
                socket_dir,
                log_file: dir.join("logs").join("postgres.log"),
            };
            teardown_at_exit(Teardown::Node(n.clone()));
            n.create(
                &password,
                Settings {
                    fast: true,
                    async_commit: false,
                    parallel_workers_per_gather: None,
                },
            )
            .expect("initdb");
            n.start().expect("start");
        }
        Mini {
            coordinator: base,
            workers: [base + 1, base + 2],
            password,
        }
    })
}

fn config(m: &Mini) -> Arc<Config> {
    let mut cfg: Config = toml::from_str(&format!(
        "listen_port = 1\ndatabase = \"postgres\"\nuser = \"postgres\"\npassword = \"{}\"\n\
         [coordinator]\nhost = \"127.0.0.1\"\nport = {}\n",
        m.password, m.coordinator
    ))
    .unwrap();
    cfg.citus.shard_count = 8;
    Arc::new(cfg)
}

async fn db(m: &Mini, port: u16) -> Client {
    connect("127.0.0.1", port, "postgres", &m.password, "postgres").await
}

const SETTINGS: CitusSettings = CitusSettings {
    shard_count: 4,
    shard_replication_factor: 1,
};

async fn call(
    cache: &CatalogCache,
    name: &str,
    args: &[Option<&str>],
) -> Result<UtilityResult, PgError> {
    call_with(cache, &SETTINGS, name, args).await.0
}

async fn call_with(
    cache: &CatalogCache,
    settings: &CitusSettings,
    name: &str,
    args: &[Option<&str>],
) -> (Result<UtilityResult, PgError>, Vec<String>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // Table arguments are read as `regclass` by the caller's session (here: a
    // connection with the default search_path), as pgshard's session does.
    let mut relids = vec![None; args.len()];
    let client = pgshard::backend::control::connect_coordinator(cache.config())
        .await
        .unwrap();
    for (i, a) in args.iter().enumerate() {
        let Some(v) = a.filter(|v| commands::is_table_arg(name, i, v)) else {
            continue;
        };
        match client
            .query_one("SELECT $1::text::regclass::oid", &[&v])
            .await
        {
            Ok(row) => relids[i] = Some(row.get::<_, u32>(0)),
            Err(e) => return (Err(PgError::from_client_error("regclass", &e)), Vec::new()),
        }
    }
    let args = args.iter().map(|a| a.map(str::to_string)).collect();
    let call = commands::UtilityCall { name, args, relids };
    let result = call_utility(cache, settings, call, tx, "postgres").await;
    let mut notices = Vec::new();
    while let Ok(n) = rx.try_recv() {
        notices.push(n);
    }
    (result, notices)
}

fn scalar(r: &UtilityResult) -> String {
    r.rows[0][0].clone().unwrap()
}

async fn count(c: &Client, sql: &str) -> i64 {
    c.query_one(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

/// Shard tables named like `prefix%` on a worker.
async fn shard_tables(c: &Client, prefix: &str) -> Vec<String> {
    c.query(
        "SELECT relname::text FROM pg_class WHERE relkind = 'r' AND relname LIKE $1 || '\\_%' ORDER BY 1",
        &[&prefix],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

async fn prepared_xacts(c: &Client) -> i64 {
    count(c, "SELECT count(*) FROM pg_prepared_xacts").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_and_distribution_end_to_end() {
    let m = mini();
    let cfg = config(m);
    let coord = db(m, m.coordinator).await;
    let w = [db(m, m.workers[0]).await, db(m, m.workers[1]).await];

    // ensure_schema is idempotent and safe concurrently.
    let c2 = db(m, m.coordinator).await;
    let c3 = db(m, m.coordinator).await;
    let (a, b, c) = tokio::join!(
        pgshard::catalog::schema::ensure_schema(&coord),
        pgshard::catalog::schema::ensure_schema(&c2),
        pgshard::catalog::schema::ensure_schema(&c3)
    );
    a.unwrap();
    b.unwrap();
    c.unwrap();
    assert_eq!(
        count(&coord, "SELECT count(*) FROM pgshard_catalog_version").await,
        1
    );

    let cache = CatalogCache::start(cfg.clone()).await.expect("cache");
    let other_process = CatalogCache::start(cfg.clone())
        .await
        .expect("second cache");
    assert!(cache.snapshot().workers.is_empty());

    // No workers yet: a clear error, nothing left behind.
    coord
        .batch_execute("CREATE TABLE early (id int PRIMARY KEY); INSERT INTO early VALUES (1), (2)")
        .await
        .unwrap();
    let e = call(
        &cache,
        "create_distributed_table",
        &[Some("early"), Some("id")],
    )
    .await
    .unwrap_err();
    assert!(e.message.contains("no active worker nodes"), "{e}");
    assert_eq!(
        count(&coord, "SELECT count(*) FROM pg_dist_partition").await,
        0
    );
    assert_eq!(count(&coord, "SELECT count(*) FROM early").await, 2);

    // Nodes.
    let w1 = m.workers[0].to_string();
    let w2 = m.workers[1].to_string();
    let id1 = scalar(
        &call(&cache, "citus_add_node", &[Some("127.0.0.1"), Some(&w1)])
            .await
            .unwrap(),
    );
    let id2 = scalar(
        &call(&cache, "master_add_node", &[Some("127.0.0.1"), Some(&w2)])
            .await
            .unwrap(),
    );
    assert_eq!((id1.as_str(), id2.as_str()), ("1", "2"));
    let again = call(&cache, "citus_add_node", &[Some("127.0.0.1"), Some(&w1)])
        .await
        .unwrap();
    assert_eq!(again.columns, vec![("citus_add_node".to_string(), 23)]);
    assert_eq!(scalar(&again), "1");
    let unreachable = alloc_ports(1).to_string();
    let e = call(
        &cache,
        "citus_add_node",
        &[Some("127.0.0.1"), Some(&unreachable)],
    )
    .await
    .unwrap_err();
    assert!(
        e.message.contains(&format!("127.0.0.1:{unreachable}")),
        "{e}"
    );
    let active = call(&cache, "citus_get_active_worker_nodes", &[])
        .await
        .unwrap();
    assert_eq!(
        active.columns,
        vec![("node_name".to_string(), 25), ("node_port".to_string(), 20)]
    );
    assert_eq!(
        active.rows,
        vec![
            vec![Some("127.0.0.1".to_string()), Some(w1.clone())],
            vec![Some("127.0.0.1".to_string()), Some(w2.clone())]
        ]
    );
    assert_eq!(cache.snapshot().workers.len(), 2);
    let groups: Vec<i32> = cache
        .snapshot()
        .workers
        .iter()
        .map(|w| w.group_id)
        .collect();
    assert_eq!(groups, vec![1, 2]);

    // A table with rows, an index, a unique constraint including the key, a check.
    coord
        .batch_execute(
            "CREATE TABLE items (id int4 NOT NULL, name text DEFAULT 'none', price numeric(10,2) CHECK (price >= 0), \
               qty int, CONSTRAINT items_id_name_key UNIQUE (id, name), PRIMARY KEY (id)) WITH (fillfactor = 90); \
             CREATE INDEX items_lower_name ON items (lower(name)) WHERE qty > 0; \
             INSERT INTO items SELECT g, 'item ' || g, g * 1.5, g % 7 FROM generate_series(1, 250000) g;",
        )
        .await
        .unwrap();
    let (r, notices) = call_with(
        &cache,
        &SETTINGS,
        "create_distributed_table",
        &[Some("items"), Some("id"), None, None, Some("8")],
    )
    .await;
    let r = r.expect("create_distributed_table");
    assert_eq!(r, UtilityResult::void("create_distributed_table"));
    assert_eq!(r.columns[0].1, 2278);
    assert_eq!(notices[0], "Copying data from local table...");
    assert!(
        notices.iter().any(|n| n.starts_with("Copied 100000 rows")),
        "{notices:?}"
    );
    assert!(
        notices
            .last()
            .unwrap()
            .starts_with("Copied 250000 rows from local table public.items"),
        "{notices:?}"
    );

    // Catalog rows.
    let row = coord
        .query_one(
            "SELECT partmethod::text, partkey, colocationid, repmodel::text FROM pg_dist_partition \
             WHERE logicalrelid = 'items'::regclass",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "h");
    assert_eq!(row.get::<_, String>(1), "id");
    assert_eq!(row.get::<_, String>(3), "s");
    let items_group: i32 = row.get(2);
    let co = coord
        .query_one(
            "SELECT shardcount, replicationfactor, distributioncolumntype::int8 FROM pg_dist_colocation \
             WHERE colocationid = $1",
            &[&items_group],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            co.get::<_, i32>(0),
            co.get::<_, i32>(1),
            co.get::<_, i64>(2)
        ),
        (8, 1, 23)
    );
    let shards = coord
        .query(
            "SELECT s.shardid, s.shardminvalue, s.shardmaxvalue, s.shardstorage::text, p.groupid, p.shardstate \
             FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid) \
             WHERE s.logicalrelid = 'items'::regclass ORDER BY s.shardid",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(shards.len(), 8);
    let ranges = all_ranges(8);
    for (i, s) in shards.iter().enumerate() {
        assert_eq!(s.get::<_, i64>(0), 102008 + i as i64);
        assert_eq!(s.get::<_, String>(1), ranges[i].0.to_string());
        assert_eq!(s.get::<_, String>(2), ranges[i].1.to_string());
        assert_eq!(s.get::<_, String>(3), "t");
        assert_eq!(s.get::<_, i32>(4), 1 + (i as i32 % 2), "round robin");
        assert_eq!(s.get::<_, i32>(5), 1);
    }
    assert_eq!(
        count(&coord, "SELECT count(*) FROM pg_dist_transaction").await,
        0
    );
    assert_eq!(
        count(
            &coord,
            "SELECT count(*) FROM citus_shards WHERE table_name = 'items'::regclass"
        )
        .await,
        8
    );
    assert_eq!(
        count(&coord, "SELECT count(*) FROM pg_dist_shard_placement").await,
        8
    );
    assert_eq!(
        count(
            &coord,
            "SELECT shard_count FROM citus_tables WHERE table_name = 'items'::regclass"
        )
        .await,
        8
    );

    // Shard tables on the right workers, with constraints and the index.
    for (i, (min, max)) in ranges.iter().enumerate() {
        let id = 102008 + i as i64;
        let (mine, theirs) = (&w[i % 2], &w[(i + 1) % 2]);
        let shard = format!("items_{id}");
        assert_eq!(
            count(
                mine,
                &format!("SELECT count(*) FROM pg_class WHERE relname = '{shard}'")
            )
            .await,
            1
        );
        assert_eq!(
            count(
                theirs,
                &format!("SELECT count(*) FROM pg_class WHERE relname = '{shard}'")
            )
            .await,
            0
        );
        let cons: Vec<String> = mine
            .query(
                &format!("SELECT conname::text FROM pg_constraint WHERE conrelid = 'public.{shard}'::regclass ORDER BY 1"),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(
            cons,
            vec![
                format!("items_id_name_key_{id}"),
                format!("items_pkey_{id}"),
                format!("items_price_check_{id}")
            ]
        );
        let indexdef: String = mine
            .query_one(
                &format!("SELECT pg_get_indexdef('public.items_lower_name_{id}'::regclass)"),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(
            indexdef.contains(&format!(
                "ON public.{shard} USING btree (lower(name)) WHERE (qty > 0)"
            )),
            "{indexdef}"
        );
        let reloptions: String = mine
            .query_one(&format!("SELECT array_to_string(reloptions, ',') FROM pg_class WHERE relname = '{shard}'"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(reloptions, "fillfactor=90");
        // Every row is in the shard whose range holds hashint4(id).
        let misplaced = count(
            mine,
            &format!("SELECT count(*) FROM {shard} WHERE hashint4(id) NOT BETWEEN {min} AND {max}"),
        )
        .await;
        assert_eq!(misplaced, 0, "{shard}");
        assert!(count(mine, &format!("SELECT count(*) FROM {shard}")).await > 20000);
    }
    let mut total = 0;
    let mut price_sum = 0.0;
    for c in &w {
        for t in shard_tables(c, "items").await {
            total += count(c, &format!("SELECT count(*) FROM {t}")).await;
            let s: f64 = c
                .query_one(&format!("SELECT sum(price)::float8 FROM {t}"), &[])
                .await
                .unwrap()
                .get(0);
            price_sum += s;
        }
    }
    assert_eq!(total, 250000);
    assert_eq!(price_sum, (1..=250000).map(|g| g as f64 * 1.5).sum::<f64>());
    assert_eq!(
        count(&coord, "SELECT count(*) FROM ONLY items").await,
        0,
        "the shell is empty"
    );
    for c in &w {
        assert_eq!(prepared_xacts(c).await, 0);
    }

    // Snapshots, here at once and in the other process via NOTIFY.
    let snap = cache.snapshot();
    let t = snap
        .qualified("public", "items")
        .expect("items in the snapshot");
    assert_eq!(t.shards.len(), 8);
    assert_eq!(t.columns, vec!["id", "name", "price", "qty"]);
    assert_eq!(t.dist_column.as_ref().unwrap().type_oid, 23);
    assert_eq!(t.shards[3].placement_groups, vec![2]);
    let mut seen = false;
    for _ in 0..50 {
        if other_process
            .snapshot()
            .qualified("public", "items")
            .is_some()
        {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen, "the other cache reloaded after NOTIFY");

    // get_shard_id_for_distribution_column agrees with where the row is.
    for key in ["42", "1", "249999", "-7"] {
        let r = call(
            &cache,
            "get_shard_id_for_distribution_column",
            &[Some("items"), Some(key)],
        )
        .await
        .unwrap();
        assert_eq!(
            r.columns,
            vec![("get_shard_id_for_distribution_column".to_string(), 20)]
        );
        let id: i64 = scalar(&r).parse().unwrap();
        let hash: i32 = coord
            .query_one("SELECT hashint4($1::text::int4)", &[&key])
            .await
            .unwrap()
            .get(0);
        assert_eq!(t.shard_for_hash(hash).unwrap().shard_id, id);
        if key != "-7" {
            let holder = &w[((id - 102008) % 2) as usize];
            let n = count(
                holder,
                &format!("SELECT count(*) FROM items_{id} WHERE id = {key}"),
            )
            .await;
            assert_eq!(n, 1, "row {key} in shard {id}");
        }
    }
    let e = call(
        &cache,
        "get_shard_id_for_distribution_column",
        &[Some("items"), Some("x'); drop table items; --")],
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "22P02");
    let e = call(
        &cache,
        "get_shard_id_for_distribution_column",
        &[Some("early"), Some("1")],
    )
    .await
    .unwrap_err();
    assert!(e.message.contains("not distributed"), "{e}");

    // Sizes.
    let size = |name: &'static str| {
        let cache = cache.clone();
        async move {
            scalar(&call(&cache, name, &[Some("items")]).await.unwrap())
                .parse::<i64>()
                .unwrap()
        }
    };
    let (rel, table, total_size) = (
        size("citus_relation_size").await,
        size("citus_table_size").await,
        size("citus_total_relation_size").await,
    );
    assert!(
        rel > 8 * 8192 && table >= rel && total_size > table,
        "{rel} {table} {total_size}"
    );

    // Refusals.
    let e = call(
        &cache,
        "create_distributed_table",
        &[Some("items"), Some("id")],
    )
    .await
    .unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.message.as_str()),
        ("42P16", "table \"items\" is already distributed")
    );
    let e = call(
        &cache,
        "create_distributed_table",
        &[Some("nosuch"), Some("id")],
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "42P01");
    coord
        .batch_execute(
            "CREATE TABLE ser (id serial PRIMARY KEY, v text); \
             CREATE TABLE uniq (id int, v text UNIQUE); \
             CREATE TABLE fk (id int PRIMARY KEY, item int REFERENCES early (id)); \
             CREATE TYPE mood AS ENUM ('sad', 'happy'); \
             CREATE TABLE moods (id int, m mood); INSERT INTO moods VALUES (1, 'sad'), (2, 'happy'); \
             CREATE TABLE pointy (id int, p point);",
        )
        .await
        .unwrap();
    let e = call(
        &cache,
        "create_distributed_table",
        &[Some("early"), Some("nope")],
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "42703");
    // A serial column: its sequence stays on the coordinator node (tests/sequences.rs).
    call(
        &cache,
        "create_distributed_table",
        &[Some("ser"), Some("id")],
    )
    .await
    .unwrap();
    let e = call(
        &cache,
        "create_distributed_table",
        &[Some("uniq"), Some("id")],
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "0A000");
    assert!(e.detail.unwrap().contains("partition column"));
    let e = call(
        &cache,
        "create_distributed_table",
        &[Some("fk"), Some("id")],
    )
    .await
    .unwrap_err();
    // The referenced table is local: Citus's error (tests/foreign_keys.rs).
    assert_eq!(e.code, "42P16");
    let e = call(
        &cache,
        "create_distributed_table",
        &[Some("pointy"), Some("p")],
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "0A000");
    assert!(e.message.contains("hash function"), "{e}");
    let e = call(
        &cache,
        "create_distributed_table",
        &[Some("early"), Some("id"), Some("append")],
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "0A000");

    // Failures leave nothing behind: a NULL key ...
    coord
        .batch_execute("CREATE TABLE bad (id int, v text); INSERT INTO bad SELECT g, 'x' FROM generate_series(1, 5000) g; INSERT INTO bad VALUES (NULL, 'null key')")
        .await
        .unwrap();
    let (e, _) = call_with(
        &cache,
        &SETTINGS,
        "create_distributed_table",
        &[Some("bad"), Some("id")],
    )
    .await;
    let e = e.unwrap_err();
    assert_eq!(e.code, "23502", "{e}");
    assert!(e.message.contains("public.bad"), "{e}");
    // ... and a shard that cannot be created on a worker (a table of its name is there).
    let next: i64 = coord
        .query_one(
            "SELECT last_value + CASE WHEN is_called THEN 1 ELSE 0 END FROM pg_dist_shardid_seq",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let squatters: Vec<String> = (next..next + 64).map(|id| format!("moods_{id}")).collect();
    for c in &w {
        for t in &squatters {
            c.batch_execute(&format!("CREATE TABLE {t} (x int)"))
                .await
                .unwrap();
        }
    }
    let e = call(
        &cache,
        "create_distributed_table",
        &[Some("moods"), Some("id")],
    )
    .await
    .unwrap_err();
    assert!(e.message.contains("on node 127.0.0.1:"), "{e}");
    assert!(e.message.contains("moods_"), "{e}");
    for c in &w {
        for t in &squatters {
            c.batch_execute(&format!("DROP TABLE {t}")).await.unwrap();
        }
    }
    for table in ["bad", "moods"] {
        assert_eq!(
            count(&coord, &format!("SELECT count(*) FROM pg_dist_partition WHERE logicalrelid = '{table}'::regclass")).await,
            0
        );
        for c in &w {
            assert!(
                shard_tables(c, table).await.is_empty(),
                "{table} shards left"
            );
        }
    }
    assert_eq!(count(&coord, "SELECT count(*) FROM ONLY bad").await, 5001);
    // early's and ser's shards.
    assert_eq!(
        count(&coord, "SELECT count(*) FROM pg_dist_shard").await,
        12
    );
    assert_eq!(
        count(&coord, "SELECT count(*) FROM pg_dist_placement").await,
        12
    );
    assert_eq!(
        count(&coord, "SELECT count(*) FROM pg_dist_colocation").await,
        2
    );
    assert_eq!(
        count(&coord, "SELECT count(*) FROM pg_dist_transaction").await,
        0
    );
    for c in &w {
        assert_eq!(prepared_xacts(c).await, 0);
    }

    // Co-location: default joins the group of items (same count and type) ...
    coord
        .batch_execute(
            "CREATE TABLE orders (id int, item_id int, note text); \
             INSERT INTO orders SELECT g, g % 100, 'n' FROM generate_series(1, 1000) g; \
             CREATE TABLE loose (id int); CREATE TABLE buddy (id int, d date);",
        )
        .await
        .unwrap();
    let eight = CitusSettings {
        shard_count: 8,
        shard_replication_factor: 1,
    };
    call_with(
        &cache,
        &eight,
        "create_distributed_table",
        &[Some("orders"), Some("id")],
    )
    .await
    .0
    .unwrap();
    // ... 'none' makes a new group, a table name joins that table's group.
    call_with(
        &cache,
        &eight,
        "create_distributed_table",
        &[Some("loose"), Some("id"), None, Some("none")],
    )
    .await
    .0
    .unwrap();
    let e = call(
        &cache,
        "create_distributed_table",
        &[Some("buddy"), Some("d"), None, Some("orders")],
    )
    .await
    .unwrap_err();
    assert!(e.message.contains("cannot colocate"), "{e}");
    call(
        &cache,
        "create_distributed_table",
        &[Some("buddy"), Some("id"), None, Some("loose")],
    )
    .await
    .unwrap();
    let groups: Vec<(String, i32)> = coord
        .query(
            "SELECT logicalrelid::text, colocationid FROM pg_dist_partition ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let group_of = |t: &str| groups.iter().find(|(n, _)| n == t).unwrap().1;
    assert_eq!(group_of("orders"), group_of("items"));
    assert_ne!(group_of("loose"), group_of("items"));
    assert_eq!(group_of("buddy"), group_of("loose"));
    let same_placement = count(
        &coord,
        "SELECT count(*) FROM (SELECT shardminvalue, groupid FROM pg_dist_shard JOIN pg_dist_placement USING (shardid) \
           WHERE logicalrelid = 'items'::regclass \
         EXCEPT SELECT shardminvalue, groupid FROM pg_dist_shard JOIN pg_dist_placement USING (shardid) \
           WHERE logicalrelid = 'orders'::regclass) x",
    )
    .await;
    assert_eq!(same_placement, 0);

    // maintain_shards: ANALYZE outside a transaction, one statement per node naming
    // its shards; an error names the node and the statement.
    cache.reload().await;
    let table_statement = |sql: &str| {
        let stmt = pgshard::sql::parse::parse(sql).unwrap().remove(0);
        let catalog = cache.snapshot();
        let names = pgshard::planner::Names::on_path(&catalog, &["public"]);
        let plan = plan_propagate(stmt.node.as_ref().unwrap(), sql, &catalog, &names);
        plan.unwrap().unwrap().tables.remove(0)
    };
    commands::maintain_shards(&cache, &table_statement("ANALYZE orders"))
        .await
        .unwrap();
    for c in &w {
        for t in shard_tables(c, "orders").await {
            let analyzed = count(
                c,
                &format!(
                    "SELECT count(*) FROM pg_stat_user_tables \
                     WHERE relid = '{t}'::regclass AND last_analyze IS NOT NULL"
                ),
            )
            .await;
            assert_eq!(analyzed, 1, "{t}");
        }
    }
    let e = commands::maintain_shards(&cache, &table_statement("ANALYZE orders (nosuchcolumn)"))
        .await
        .unwrap_err();
    assert!(
        e.message.contains("node ") && e.message.contains("ANALYZE public.orders_1020"),
        "{e}"
    );

    // undistribute_table brings the rows back.
    coord
        .batch_execute("DROP TABLE fk; INSERT INTO early SELECT g FROM generate_series(3, 500) g")
        .await
        .unwrap();
    call(
        &cache,
        "create_distributed_table",
        &[Some("early"), Some("id")],
    )
    .await
    .unwrap();
    assert_eq!(count(&coord, "SELECT count(*) FROM ONLY early").await, 0);
    call(&cache, "undistribute_table", &[Some("early")])
        .await
        .unwrap();
    assert_eq!(count(&coord, "SELECT count(*) FROM early").await, 500);
    assert_eq!(
        count(
            &coord,
            "SELECT count(*) FROM pg_dist_partition WHERE logicalrelid = 'early'::regclass"
        )
        .await,
        0
    );
    for c in &w {
        assert!(shard_tables(c, "early").await.is_empty());
    }

    // drop_distributed_table removes shards, catalog rows and (on request) the shell.
    let loose_oid: u32 = coord
        .query_one("SELECT 'loose'::regclass::oid", &[])
        .await
        .unwrap()
        .get(0);
    commands::drop_distributed_table(&cache, loose_oid, true, "postgres")
        .await
        .unwrap();
    assert_eq!(
        count(
            &coord,
            "SELECT count(*) FROM pg_class WHERE relname = 'loose'"
        )
        .await,
        0
    );
    for c in &w {
        assert!(shard_tables(c, "loose").await.is_empty());
    }
    assert!(cache.snapshot().qualified("public", "loose").is_none());
    assert!(cache.snapshot().qualified("public", "buddy").is_some());

    // A node holding placements cannot be removed; an empty one can.
    let e = call(&cache, "citus_remove_node", &[Some("127.0.0.1"), Some(&w2)])
        .await
        .unwrap_err();
    assert!(e.message.contains("placements"), "{e}");
    let e = call(&cache, "citus_remove_node", &[Some("127.0.0.1"), Some("1")])
        .await
        .unwrap_err();
    assert!(e.message.contains("does not exist"), "{e}");
    assert_eq!(count(&coord, "SELECT count(*) FROM pg_dist_node").await, 2);

    // Version bookkeeping: every change bumped the version; the listener keeps up.
    let version = count(&coord, "SELECT version FROM pgshard_catalog_version").await;
    assert_eq!(cache.snapshot().version, version);
    for _ in 0..50 {
        if other_process.snapshot().version == version {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(other_process.snapshot().version, version);
}

/// Timing of the local-data copy on a pgbench_accounts-like table (run by hand:
/// `PGSHARD_CDT_ROWS=1000000 cargo test --release --test catalog_commands -- --ignored --nocapture`).
/// Prints the time of create_distributed_table next to the same copy and index build
/// done by one PostgreSQL (`CREATE TABLE AS` + primary key) on the coordinator node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn distribute_timing() {
    let rows: i64 = std::env::var("PGSHARD_CDT_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let m = mini();
    let cache = CatalogCache::start(config(m)).await.unwrap();
    for p in m.workers {
        call(
            &cache,
            "citus_add_node",
            &[Some("127.0.0.1"), Some(&p.to_string())],
        )
        .await
        .unwrap();
    }
    let coord = db(m, m.coordinator).await;
    coord
        .batch_execute(&format!(
            "CREATE TABLE acc (aid int NOT NULL, bid int, abalance int, filler char(84)) WITH (fillfactor = 100); \
             INSERT INTO acc SELECT g, (g - 1) / 100000 + 1, 0, '' FROM generate_series(1, {rows}) g; \
             ALTER TABLE acc ADD PRIMARY KEY (aid);"
        ))
        .await
        .unwrap();
    coord.batch_execute("VACUUM ANALYZE acc").await.unwrap();
    let started = std::time::Instant::now();
    coord
        .batch_execute("CREATE TABLE acc_copy AS SELECT * FROM acc; ALTER TABLE acc_copy ADD PRIMARY KEY (aid)")
        .await
        .unwrap();
    let baseline = started.elapsed();
    coord.batch_execute("DROP TABLE acc_copy").await.unwrap();
    let settings = CitusSettings {
        shard_count: 32,
        shard_replication_factor: 1,
    };
    let started = std::time::Instant::now();
    let (r, notices) = call_with(
        &cache,
        &settings,
        "create_distributed_table",
        &[Some("acc"), Some("aid")],
    )
    .await;
    r.unwrap();
    let took = started.elapsed();
    println!("{notices:?}");
    println!(
        "{rows} rows: create_distributed_table {:.2} s ({:.0} rows/s); one PostgreSQL copy+pkey {:.2} s",
        took.as_secs_f64(),
        rows as f64 / took.as_secs_f64(),
        baseline.as_secs_f64()
    );
}
