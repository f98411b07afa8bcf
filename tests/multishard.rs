//! Multi-shard statements answer exactly as one PostgreSQL does.
//!
//! The same table and rows live in the shared pgshard cluster (distributed, 32
//! shards over 2 workers) and in a plain PostgreSQL; every query below runs on both
//! and the rows (text form) must be equal, in order where ORDER BY fixes one:
//! two-phase aggregation with GROUP BY / HAVING / ORDER BY / LIMIT, count(DISTINCT),
//! string_agg and array_agg with ORDER BY, variance families, avg over int, numeric
//! and float8, bool_and/or, DISTINCT [ON], NULLS FIRST/LAST, text with non-ASCII and
//! mixed case, parameters of the extended protocol. Multi-shard UPDATE/DELETE row
//! counts, RETURNING and atomicity (a failure on one shard leaves every shard
//! unchanged), EXPLAIN in Citus's shape, and W4 at small scale.

mod common;

use common::{cluster, plain_postgres};
use tokio_postgres::{Client, SimpleQueryMessage};

type Rows = Vec<Vec<Option<String>>>;

async fn rows(c: &Client, sql: &str) -> Result<Rows, tokio_postgres::Error> {
    let mut out = Vec::new();
    for m in c.simple_query(sql).await? {
        if let SimpleQueryMessage::Row(r) = m {
            out.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect());
        }
    }
    Ok(out)
}

const SETUP: &str = "
CREATE TABLE items (id int PRIMARY KEY, g int, n numeric(12,3), f float8, t text, b bool, r real);
INSERT INTO items
SELECT i,
       CASE WHEN i % 11 = 0 THEN NULL ELSE i % 7 END,
       CASE WHEN i % 13 = 0 THEN NULL ELSE (i * 37 % 1000) / 8.0 END,
       CASE WHEN i % 17 = 0 THEN NULL ELSE (i % 50) / 4.0 END,
       CASE WHEN i % 19 = 0 THEN NULL
            ELSE (ARRAY['apple','Apple','éclair','Zebra','zèbre','banana','Ω-omega','b'])[1 + i % 8] || (i % 5)::text END,
       CASE WHEN i % 23 = 0 THEN NULL ELSE i % 3 <> 0 END,
       (i % 9) / 2.0
FROM generate_series(1, 3000) AS s(i);
";

const W4_SETUP: &str = "
CREATE TABLE test (id int PRIMARY KEY, c1 int, c2 int, c3 int, info text, crt_time timestamp);
INSERT INTO test
SELECT i, (i * 7919) % 101, i % 100, (i * 31) % 100, md5(i::text), timestamp '2024-01-01' + i * interval '1 minute'
FROM generate_series(1, 20000) AS s(i);
";

/// Both servers with the same data; the cluster's table distributed by id.
async fn setup(table: &str, sql: &str) -> (Client, Client) {
    let c = cluster();
    let shard = c.client().await;
    let plain = plain_postgres().client().await;
    let drop = format!("DROP TABLE IF EXISTS {table}");
    shard.batch_execute(&drop).await.unwrap();
    plain.batch_execute(&drop).await.unwrap();
    shard.batch_execute(sql).await.unwrap();
    plain.batch_execute(sql).await.unwrap();
    shard
        .batch_execute(&format!(
            "SET citus.shard_count = 32; COMMIT; SELECT create_distributed_table('{table}', 'id')"
        ))
        .await
        .unwrap();
    (shard, plain)
}

async fn same(shard: &Client, plain: &Client, sql: &str, ordered: bool) {
    let mut a = rows(shard, sql)
        .await
        .unwrap_or_else(|e| panic!("pgshard: {sql}: {e:?}"));
    let mut b = rows(plain, sql)
        .await
        .unwrap_or_else(|e| panic!("plain: {sql}: {e:?}"));
    if !ordered {
        a.sort();
        b.sort();
    }
    assert_eq!(a, b, "{sql}");
    assert!(
        !b.is_empty() || sql.contains("id < 0"),
        "{sql} returned nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_shard_statements_match_plain_postgres() {
    let (shard, plain) = setup("items", SETUP).await;
    let ordered = [
        "SELECT g, count(*) FROM items GROUP BY g ORDER BY g NULLS FIRST",
        "SELECT g, count(*), count(t), sum(id), avg(id), min(t), max(t), sum(n), avg(n), avg(f), sum(f), \
         bool_and(b), bool_or(b), min(n), max(f) FROM items GROUP BY g ORDER BY g",
        "SELECT g, avg(r), sum(r), count(DISTINCT t), count(DISTINCT b) FROM items GROUP BY g ORDER BY g DESC NULLS LAST",
        "SELECT g, string_agg(t, ',' ORDER BY t, id) FROM items WHERE id < 200 GROUP BY g ORDER BY g",
        "SELECT array_agg(id ORDER BY id DESC) FROM items WHERE id < 40",
        // Float accumulation depends on row order (as in one PostgreSQL): compared rounded.
        "SELECT g, round(stddev(f)::numeric, 9), variance(n), stddev_pop(id), round(var_samp(f)::numeric, 9) FROM items GROUP BY g ORDER BY g",
        "SELECT g, sum(id) * 100 / count(*), max(n) - min(n) AS spread FROM items GROUP BY g ORDER BY 2 DESC, 1",
        "SELECT g, sum(n) FROM items GROUP BY g HAVING count(*) > 300 AND sum(n) IS NOT NULL ORDER BY sum(n) DESC",
        "SELECT g AS grp, count(*) AS cnt FROM items GROUP BY grp ORDER BY cnt DESC, grp LIMIT 3 OFFSET 1",
        "SELECT t, id FROM items ORDER BY t, id LIMIT 25",
        "SELECT t COLLATE \"C\", id FROM items ORDER BY 1, 2 DESC LIMIT 25",
        "SELECT n, id FROM items ORDER BY n NULLS FIRST, id LIMIT 30",
        "SELECT n, id FROM items ORDER BY n DESC NULLS LAST, id LIMIT 10 OFFSET 5",
        "SELECT id, t FROM items ORDER BY id DESC LIMIT 5 OFFSET 3",
        "SELECT DISTINCT g FROM items ORDER BY g",
        "SELECT DISTINCT ON (g) g, id, t FROM items ORDER BY g, id DESC",
        "SELECT id % 7 AS m, count(*), sum(f) FROM items GROUP BY id % 7 ORDER BY 1",
        "SELECT upper(t), count(*) FROM items GROUP BY upper(t) ORDER BY 1 NULLS FIRST",
        "SELECT count(*), avg(f), max(t), min(id), sum(n) FROM items",
        "SELECT count(*), sum(n), avg(n), max(t) FROM items WHERE id < 0",
        "SELECT g, avg(id) FILTER (WHERE b), count(*) FILTER (WHERE t LIKE 'a%') FROM items GROUP BY g ORDER BY g",
        "SELECT id, rank() OVER (ORDER BY n NULLS LAST, id) FROM items ORDER BY id LIMIT 10",
        "SELECT g, percentile_cont(0.5) WITHIN GROUP (ORDER BY f) FROM items GROUP BY g ORDER BY g",
        "SELECT b, count(*) FROM items GROUP BY 1 ORDER BY 1",
        "SELECT g, count(*) FROM items GROUP BY g HAVING g > 2 ORDER BY g",
        // Columns functionally dependent on the primary key.
        "SELECT id, t, count(*) FROM items WHERE id < 50 GROUP BY id ORDER BY t, id",
        // Inside a block the shards' reads see the block's own writes.
        "BEGIN; INSERT INTO items (id, g, t) VALUES (5001, 2, 'Zz new'); \
         INSERT INTO items (id, g, t) VALUES (5002, 2, 'zz newer'); \
         SELECT g, count(*), max(t) FROM items GROUP BY g ORDER BY g; ROLLBACK",
        "SELECT * FROM items ORDER BY id LIMIT 3",
        "SELECT items.t, count(*) FROM items GROUP BY items.t ORDER BY 2 DESC, 1 LIMIT 5",
        "SELECT x.g, max(x.n), count(*) AS c FROM items x WHERE x.id > 7 GROUP BY x.g ORDER BY c, 1",
        "SELECT g, json_agg(id ORDER BY id) FROM items WHERE id < 30 GROUP BY g ORDER BY g",
        "SELECT min(t COLLATE \"C\"), max(t), min(DISTINCT g) FROM items",
        "SELECT g, count(*) FROM items GROUP BY g ORDER BY g LIMIT ALL",
        "SELECT sum(id)::float8 / 3, avg(id)::int, count(*)::text FROM items",
        // Aggregates without GROUP BY run shard by shard in a node's task (the UNION
        // ALL of each shard's statement): the client's text ends in many ways.
        "SELECT count(*), sum(n), min(t), max(f) FROM items WHERE g = 3 ;  ",
        "SELECT count(*), min(id) AS lo, max(t) FROM items x WHERE x.b -- a comment",
        "SELECT count(*), sum(r) FROM items LIMIT 1 /* limit */;",
        "SELECT count(t), max(n) FROM items WHERE t LIKE 'z%' OR id > 2900",
        "SELECT avg(n), count(*) + 1, bool_or(b) FROM items WHERE id % 3 = 1",
        "SELECT count(*) FROM items WHERE id < 0",
    ];
    for q in ordered {
        same(&shard, &plain, q, true).await;
    }
    same(
        &shard,
        &plain,
        "SELECT g, count(*) FROM items GROUP BY g",
        false,
    )
    .await;
    same(
        &shard,
        &plain,
        "SELECT g, count(*) FROM items WHERE id < 0 GROUP BY g",
        false,
    )
    .await;

    // Parameters of the extended protocol in WHERE, HAVING and LIMIT.
    let q = "SELECT g, count(*), sum(n)::text FROM items WHERE id > $1 GROUP BY g HAVING count(*) > $2 ORDER BY g";
    let a = shard.query(q, &[&100i32, &3i64]).await.unwrap();
    let b = plain.query(q, &[&100i32, &3i64]).await.unwrap();
    let show = |r: &[tokio_postgres::Row]| -> Vec<String> {
        r.iter()
            .map(|r| {
                format!(
                    "{:?} {} {:?}",
                    r.get::<_, Option<i32>>(0),
                    r.get::<_, i64>(1),
                    r.get::<_, Option<String>>(2).is_some()
                )
            })
            .collect()
    };
    assert_eq!(show(&a), show(&b));
    let q = "SELECT count(*), sum(id), max(t) FROM items WHERE id > $1 AND t <> $2";
    let show = |r: Vec<tokio_postgres::Row>| -> Vec<String> {
        r.iter()
            .map(|r| {
                format!(
                    "{} {:?} {:?}",
                    r.get::<_, i64>(0),
                    r.get::<_, Option<i64>>(1),
                    r.get::<_, Option<String>>(2)
                )
            })
            .collect()
    };
    for (lo, t) in [(100i32, "b1"), (2990, "apple2"), (5000, "x")] {
        assert_eq!(
            show(shard.query(q, &[&lo, &t]).await.unwrap()),
            show(plain.query(q, &[&lo, &t]).await.unwrap()),
            "{q} with {lo}, {t}"
        );
    }
    let q = "SELECT id FROM items WHERE t <> $1 ORDER BY id DESC LIMIT $2";
    let a: Vec<i32> = shard
        .query(q, &[&"b1", &4i64])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let b: Vec<i32> = plain
        .query(q, &[&"b1", &4i64])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(a, b);

    // A parameter inside an aggregate's FILTER.
    let q = "SELECT g, count(*) FILTER (WHERE t <> $1), sum(id) FILTER (WHERE id > $2) FROM items GROUP BY g ORDER BY g LIMIT 4 OFFSET $3";
    let args: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&"b1", &5i32, &1i64];
    let show = |r: Vec<tokio_postgres::Row>| -> Vec<String> {
        r.iter()
            .map(|r| {
                format!(
                    "{:?} {} {:?}",
                    r.get::<_, Option<i32>>(0),
                    r.get::<_, i64>(1),
                    r.get::<_, Option<i64>>(2)
                )
            })
            .collect()
    };
    assert_eq!(
        show(shard.query(q, &args).await.unwrap()),
        show(plain.query(q, &args).await.unwrap())
    );
    // Output column names are PostgreSQL's, in the simple protocol too.
    for q in [
        "SELECT count(*), every(b), avg(id)::int, sum(n) * 2, max(t) AS m FROM items GROUP BY g",
        "SELECT count(*) FROM items HAVING count(*) > 10",
    ] {
        let names = |m: Vec<SimpleQueryMessage>| -> Vec<String> {
            m.iter()
                .find_map(|x| match x {
                    SimpleQueryMessage::Row(r) => {
                        Some(r.columns().iter().map(|c| c.name().to_string()).collect())
                    }
                    _ => None,
                })
                .unwrap()
        };
        assert_eq!(
            names(shard.simple_query(q).await.unwrap()),
            names(plain.simple_query(q).await.unwrap()),
            "{q}"
        );
    }

    // Set operations are planned in parts (tests/recursive_planning.rs).
    same(
        &shard,
        &plain,
        "SELECT id FROM items WHERE id < 20 UNION SELECT id FROM items WHERE id < 10 ORDER BY 1",
        true,
    )
    .await;
    // Shapes pgshard refuses rather than answering wrongly.
    for q in ["SELECT * FROM items FOR UPDATE"] {
        let e = shard.simple_query(q).await.unwrap_err();
        assert_eq!(e.code().unwrap().code(), "0A000", "{q}");
    }
    // The session stays usable.
    same(&shard, &plain, "SELECT count(*) FROM items", true).await;

    // The intermediate result limit stops raw pulls that are too big.
    shard
        .batch_execute("SET citus.max_intermediate_result_size = '1kB'")
        .await
        .unwrap();
    let e = shard
        .simple_query("SELECT DISTINCT t FROM items ORDER BY t")
        .await
        .unwrap_err();
    assert_eq!(e.code().unwrap().code(), "54000");
    shard
        .batch_execute("RESET citus.max_intermediate_result_size")
        .await
        .unwrap();

    // ---- multi-shard UPDATE / DELETE ----
    let (a, b) = (
        shard
            .execute("UPDATE items SET n = n + 1 WHERE g = 3", &[])
            .await
            .unwrap(),
        plain
            .execute("UPDATE items SET n = n + 1 WHERE g = 3", &[])
            .await
            .unwrap(),
    );
    assert_eq!(a, b);
    assert!(a > 100);
    same(
        &shard,
        &plain,
        "SELECT g, sum(n), count(*) FROM items GROUP BY g ORDER BY g",
        true,
    )
    .await;
    let q = "DELETE FROM items WHERE id % 10 = 0 RETURNING id, t";
    same(&shard, &plain, q, false).await;
    same(&shard, &plain, "SELECT count(*), sum(id) FROM items", true).await;
    // Atomic: a failure on one shard leaves every shard unchanged.
    let q = "UPDATE items SET f = 1 / (id - 1501)";
    assert!(shard.simple_query(q).await.is_err());
    let q = "UPDATE items SET f = f + 1 WHERE id <> 1501 OR 1 / (id - 1501) > 0";
    assert!(shard.execute(q, &[]).await.is_err());
    same(&shard, &plain, "SELECT sum(f), count(f) FROM items", true).await;
    // Inside a block it joins the block.
    shard
        .batch_execute(
            "BEGIN; UPDATE items SET b = NOT b; DELETE FROM items WHERE id < 100; ROLLBACK;",
        )
        .await
        .unwrap();
    same(
        &shard,
        &plain,
        "SELECT b, count(*) FROM items WHERE id < 200 GROUP BY b ORDER BY b",
        true,
    )
    .await;
    shard
        .batch_execute("BEGIN; DELETE FROM items WHERE id > 2990; COMMIT;")
        .await
        .unwrap();
    plain
        .batch_execute("DELETE FROM items WHERE id > 2990")
        .await
        .unwrap();
    same(&shard, &plain, "SELECT count(*), max(id) FROM items", true).await;
    let e = shard
        .simple_query("UPDATE items SET id = id + 1")
        .await
        .unwrap_err();
    assert_eq!(e.code().unwrap().code(), "0A000");
}

fn plan_text(r: &Rows) -> String {
    r.iter()
        .map(|l| l[0].clone().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_the_distributed_plan() {
    let shard = cluster().client().await;
    shard
        .batch_execute(
            "DROP TABLE IF EXISTS ex; CREATE TABLE ex (id int, c1 int); \
             SET citus.shard_count = 8; COMMIT; SELECT create_distributed_table('ex', 'id'); COMMIT; \
             INSERT INTO ex VALUES (1, 2), (2, 3), (3, 3);",
        )
        .await
        .unwrap();
    let p = plan_text(
        &rows(&shard, "explain select * from ex limit 1")
            .await
            .unwrap(),
    );
    // One task per worker node, over the UNION ALL of its 4 shards.
    assert!(p.contains("Custom Scan (Citus Adaptive)"), "{p}");
    assert!(
        p.contains("Task Count: 2") && p.contains("Tasks Shown: One of 2"),
        "{p}"
    );
    assert!(p.contains("Node: host=") && p.contains("->  Limit"), "{p}");
    assert!(
        p.contains("Append") && p.matches("Seq Scan on ex_").count() == 4,
        "{p}"
    );
    // System columns differ per shard: one task per shard.
    let p = plan_text(
        &rows(&shard, "explain select ctid from ex limit 1")
            .await
            .unwrap(),
    );
    assert!(
        p.contains("Task Count: 8") && p.contains("Tasks Shown: One of 8"),
        "{p}"
    );
    let p = plan_text(
        &rows(&shard, "explain select * from ex where id=1")
            .await
            .unwrap(),
    );
    assert!(p.starts_with("Custom Scan (Citus Adaptive)"), "{p}");
    assert!(
        p.contains("Task Count: 1") && p.contains("Seq Scan on ex_"),
        "{p}"
    );
    let p = plan_text(
        &rows(&shard, "explain select count(*) from ex group by c1")
            .await
            .unwrap(),
    );
    assert!(p.contains("Aggregate") && p.contains("Group Key"), "{p}");
    assert!(p.contains("  ->  Custom Scan (Citus Adaptive)"), "{p}");
    // Grouped partials: one aggregate over the union of the node's shards.
    let task = p.split("->  Task").nth(1).unwrap_or_default();
    assert!(task.contains("Append"), "{p}");
    assert_eq!(task.matches("Aggregate").count(), 1, "{p}");
    // Aggregates without GROUP BY: one per shard under the node's task, each right
    // over its shard's scan, counted in pgshard (count) or combined on the
    // coordinator node (avg).
    for q in [
        "explain (costs off) select count(*) from ex",
        "explain (costs off) select avg(c1), max(id) from ex where c1 > 0",
    ] {
        let p = plan_text(&rows(&shard, q).await.unwrap());
        let task = p.split("->  Task").nth(1).unwrap_or_default();
        assert!(p.contains("Task Count: 2"), "{q}: {p}");
        assert_eq!(task.matches("Aggregate").count(), 4, "{q}: {p}");
        assert_eq!(task.matches("Seq Scan on ex_").count(), 4, "{q}: {p}");
        let lines: Vec<&str> = task.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if l.contains("Seq Scan on ex_") {
                assert!(lines[i - 1].contains("Aggregate"), "{q}: {p}");
            }
        }
    }
    let p = plan_text(
        &rows(
            &shard,
            "SET citus.explain_all_tasks = on; explain (costs off) select c1 from ex",
        )
        .await
        .unwrap(),
    );
    assert_eq!(p.matches("->  Task").count(), 2, "{p}");
    assert_eq!(p.matches("Seq Scan on ex_").count(), 8, "{p}");
    assert!(!p.contains("cost="), "{p}");
    let p = plan_text(
        &rows(&shard, "explain analyze select * from ex")
            .await
            .unwrap(),
    );
    assert!(p.contains("actual"), "{p}");
    // The extended protocol gets the same single "QUERY PLAN" column.
    let r = shard.query("explain select * from ex", &[]).await.unwrap();
    assert_eq!(r[0].columns()[0].name(), "QUERY PLAN");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w4_small_matches_plain_postgres() {
    let (shard, plain) = setup("test", W4_SETUP).await;
    same(&shard, &plain, "select count(*) from test", true).await;
    let all = rows(&plain, "select c1, count(*) from test group by c1")
        .await
        .unwrap();
    let top = rows(
        &shard,
        "select c1,count(*) from test group by c1 order by count(*) desc limit 10",
    )
    .await
    .unwrap();
    let plain_top = rows(
        &plain,
        "select c1,count(*) from test group by c1 order by count(*) desc limit 10",
    )
    .await
    .unwrap();
    // Ties in count make the chosen groups PostgreSQL's choice: same counts, real pairs.
    let counts = |r: &Rows| r.iter().map(|x| x[1].clone()).collect::<Vec<_>>();
    assert_eq!(counts(&top), counts(&plain_top));
    for pair in &top {
        assert!(all.contains(pair), "{pair:?}");
    }
    same(
        &shard,
        &plain,
        "select c1, count(*), avg(c2), max(info), min(crt_time) from test group by c1 order by count(*) desc, c1 limit 10",
        true,
    )
    .await;
    same(&shard, &plain, "select * from test where id = 77", true).await;
    same(
        &shard,
        &plain,
        "select * from test order by crt_time desc limit 3",
        true,
    )
    .await;
}
