//! EXPLAIN in every format PostgreSQL has, in Citus's shape: JSON (valid, with the
//! Custom Scan's `Distributed Query` / `Job` / `Tasks` / `Remote Plan` holding the
//! worker's own plan of the shard), YAML and XML (the same tree; XML well formed), the
//! coordinator's combine plan above the Custom Scan, and recursive plans showing each
//! subplan as a `Distributed Subplan` (TEXT) or under `Subplans` (structured), with
//! ANALYZE running them and leaving no intermediate result behind. An unknown format
//! fails as on PostgreSQL.

mod common;

use common::{cluster, plain_postgres, sqlstate_and_message};
use serde_json::Value;
use tokio_postgres::{Client, SimpleQueryMessage};

async fn plan(c: &Client, sql: &str) -> String {
    let mut lines = Vec::new();
    for m in c
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    {
        if let SimpleQueryMessage::Row(r) = m {
            lines.push(r.get(0).unwrap_or_default().to_string());
        }
    }
    lines.join("\n")
}

/// `<p>_items` (distributed by id, 4 shards) and `<p>_kinds` (reference): each test
/// its own, as the tests run at once.
async fn setup(p: &str) -> Client {
    let c = cluster().client().await;
    for sql in [
        format!("DROP TABLE IF EXISTS {p}_items, {p}_kinds"),
        format!("CREATE TABLE {p}_items (id int, kind int, qty int)"),
        format!("CREATE TABLE {p}_kinds (kind int PRIMARY KEY, label text)"),
        "SET citus.shard_count = 4".to_string(),
        format!("SELECT create_distributed_table('{p}_items', 'id')"),
        format!("SELECT create_reference_table('{p}_kinds')"),
        format!("INSERT INTO {p}_items SELECT i, i % 5, i % 7 FROM generate_series(1, 200) i"),
        format!("INSERT INTO {p}_kinds VALUES (0, 'zero'), (1, 'one'), (2, 'two')"),
    ] {
        c.batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    c
}

/// The first node of `node`'s tree (itself included) whose `key` is `value`.
fn find<'a>(node: &'a Value, key: &str, value: &str) -> Option<&'a Value> {
    if node.get(key).and_then(Value::as_str) == Some(value) {
        return Some(node);
    }
    match node {
        Value::Object(m) => m.values().find_map(|v| find(v, key, value)),
        Value::Array(items) => items.iter().find_map(|v| find(v, key, value)),
        _ => None,
    }
}

/// Every element opened in `xml` is closed, in order.
fn well_formed(xml: &str) -> bool {
    let mut open: Vec<String> = Vec::new();
    let mut rest = xml;
    while let Some(at) = rest.find('<') {
        let Some(end) = rest[at..].find('>') else {
            return false;
        };
        let tag = &rest[at + 1..at + end];
        rest = &rest[at + end + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            if open.pop().as_deref() != Some(name) {
                return false;
            }
        } else if !tag.ends_with('/') {
            open.push(
                tag.split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
    }
    open.is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_formats_carry_the_distributed_plan() {
    let c = setup("xp").await;

    // A router query: one task, the worker's JSON plan of the shard inside.
    let doc: Value = serde_json::from_str(
        &plan(
            &c,
            "EXPLAIN (FORMAT JSON) SELECT * FROM xp_items WHERE id = 7",
        )
        .await,
    )
    .expect("valid JSON");
    let scan = &doc[0]["Plan"];
    assert_eq!(scan["Node Type"], "Custom Scan", "{doc:#}");
    assert_eq!(scan["Custom Plan Provider"], "Citus Adaptive", "{doc:#}");
    let job = &scan["Distributed Query"]["Job"];
    assert_eq!(job["Task Count"], 1, "{doc:#}");
    assert_eq!(job["Tasks Shown"], "All", "{doc:#}");
    let task = &job["Tasks"][0];
    assert!(
        task["Node"].as_str().unwrap().starts_with("host="),
        "{doc:#}"
    );
    let remote = &task["Remote Plan"][0][0]["Plan"];
    assert!(
        remote["Relation Name"]
            .as_str()
            .unwrap()
            .starts_with("xp_items_"),
        "{doc:#}"
    );
    assert!(scan.get("Startup Cost").is_some(), "{doc:#}");

    // Grouped multi-shard: the coordinator's combine plan above the Custom Scan.
    let doc: Value = serde_json::from_str(
        &plan(
            &c,
            "EXPLAIN (FORMAT JSON, COSTS OFF) SELECT kind, count(*) FROM xp_items GROUP BY kind ORDER BY 2 DESC",
        )
        .await,
    )
    .expect("valid JSON");
    let top = &doc[0]["Plan"];
    assert_ne!(top["Node Type"], "Custom Scan", "{doc:#}");
    let scan = find(top, "Node Type", "Custom Scan").expect("a Custom Scan");
    assert_eq!(scan["Parent Relationship"], "Outer", "{doc:#}");
    assert_eq!(
        scan["Distributed Query"]["Job"]["Tasks Shown"], "One of 2",
        "{doc:#}"
    );
    assert!(scan.get("Startup Cost").is_none(), "{doc:#}");
    assert!(
        find(top, "Relation Name", "pgs_partials").is_none(),
        "{doc:#}"
    );

    // ANALYZE: the worker's actual rows.
    let doc: Value = serde_json::from_str(
        &plan(
            &c,
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM xp_items WHERE id = 7",
        )
        .await,
    )
    .expect("valid JSON");
    let remote = &doc[0]["Plan"]["Distributed Query"]["Job"]["Tasks"][0]["Remote Plan"][0][0];
    assert_eq!(remote["Plan"]["Actual Rows"], 1, "{doc:#}");

    // YAML and XML: the same tree.
    let yaml = plan(
        &c,
        "EXPLAIN (FORMAT YAML, COSTS OFF) SELECT count(*) FROM xp_items",
    )
    .await;
    assert!(yaml.starts_with("- Plan: \n"), "{yaml}");
    for key in [
        "Distributed Query: ",
        "Job: ",
        "Task Count: 2",
        "Remote Plan: ",
        "- Plan: ",
    ] {
        assert!(yaml.contains(key), "{key}: {yaml}");
    }
    let xml = plan(
        &c,
        "EXPLAIN (FORMAT XML, COSTS OFF) SELECT count(*) FROM xp_items",
    )
    .await;
    eprintln!("{yaml}\n{xml}");
    assert!(
        xml.starts_with("<explain xmlns=\"http://www.postgresql.org/2009/explain\">"),
        "{xml}"
    );
    assert!(well_formed(&xml), "{xml}");
    for tag in [
        "<Distributed-Query>",
        "<Task-Count>2</Task-Count>",
        "<Remote-Plan>",
        "<Tasks>",
    ] {
        assert!(xml.contains(tag), "{tag}: {xml}");
    }
    // One row, as PostgreSQL sends a structured plan.
    let r = c
        .query("EXPLAIN (FORMAT JSON) SELECT * FROM xp_items", &[])
        .await
        .unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].columns()[0].name(), "QUERY PLAN");

    // An unknown format: PostgreSQL's error.
    let plain = plain_postgres().client().await;
    plain
        .batch_execute(
            "DROP TABLE IF EXISTS xp_items; CREATE TABLE xp_items (id int, kind int, qty int)",
        )
        .await
        .unwrap();
    let sql = "EXPLAIN (FORMAT CSV) SELECT * FROM xp_items";
    let want = sqlstate_and_message(&plain.simple_query(sql).await.unwrap_err());
    let got = sqlstate_and_message(&c.simple_query(sql).await.unwrap_err());
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recursive_plans_show_their_subplans() {
    let c = setup("xr").await;
    let q = "WITH top AS (SELECT kind, sum(qty) AS s FROM xr_items GROUP BY kind ORDER BY s DESC LIMIT 3) \
             SELECT k.label, t.s FROM top t JOIN xr_kinds k USING (kind) ORDER BY 1";
    let text = plan(&c, &format!("EXPLAIN (COSTS OFF) {q}")).await;
    eprintln!("{text}");
    assert!(text.starts_with("Custom Scan (Citus Adaptive)"), "{text}");
    assert!(text.contains("\n  ->  Distributed Subplan 1_1\n"), "{text}");
    assert!(text.contains("Task Count: 1"), "{text}");
    assert!(text.contains("pgs_intermediate_"), "{text}");

    let doc: Value =
        serde_json::from_str(&plan(&c, &format!("EXPLAIN (FORMAT JSON, COSTS OFF) {q}")).await)
            .expect("valid JSON");
    let query = &doc[0]["Plan"]["Distributed Query"];
    let keys: Vec<&String> = query.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["Subplans", "Job"], "{doc:#}");
    let sub = &query["Subplans"][0]["Plan"];
    assert!(find(sub, "Node Type", "Custom Scan").is_some(), "{doc:#}");

    // ANALYZE runs the subplans and the outer statement; nothing is left behind.
    let text = plan(&c, &format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {q}")).await;
    assert!(text.contains("Distributed Subplan 1_1"), "{text}");
    assert!(text.contains("actual rows="), "{text}");
    let left = plan(
        &c,
        "SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema() \
         AND relname LIKE 'pgs_intermediate%'",
    )
    .await;
    assert_eq!(left, "0");
}
