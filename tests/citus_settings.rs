//! Citus's settings and extension surface through pgshard, with real clients (psql,
//! tokio-postgres): the seeds' `ALTER SYSTEM SET citus.*` and `CREATE EXTENSION citus`
//! verbatim; every `citus.*` setting known to SET / RESET / SHOW / `current_setting` /
//! `set_config` / `pg_settings` / `SHOW ALL`, transactional as a placeholder variable
//! is on one plain PostgreSQL; Citus's errors for bad values and unknown names; ALTER
//! SYSTEM / ROLE / DATABASE ... SET and startup `options`; `citus_version()`,
//! `pg_extension`; and `run_command_on_workers / _all_nodes / _shards / _placements`
//! with Citus's columns, run as the session's role.

mod common;

use common::{cluster, connect, outcome, plain_postgres};
use std::io::Write;
use std::process::{Command, Stdio};
use tokio_postgres::Client;

/// The first value of the first row of `sql` (simple protocol).
async fn value(c: &Client, sql: &str) -> Option<String> {
    common::simple_rows(c, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        .into_iter()
        .next()
        .and_then(|r| r.into_iter().next().flatten())
}

/// psql reading `script` from its standard input (`psql -f -`), as the seeds run it;
/// stdout and stderr together.
fn psql_stdin(script: &str) -> String {
    let mut child = Command::new("psql")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(cluster().pg_env())
        .args(["-X", "-v", "ON_ERROR_STOP=1", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running psql");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "psql failed: {text}");
    text
}

/// Seed 000's and 003's statements as written: `create extension citus;` then
/// `alter system set citus.multi_shard_commit_protocol='2pc'; select pg_reload_conf();`
/// piped into psql; a new session starts with what ALTER SYSTEM stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_statements_run_as_written() {
    let cl = cluster();
    let out = common::psql(&cl.pg_env(), &["-c", "create extension citus;"]);
    assert_eq!(out, "CREATE EXTENSION");
    psql_stdin(
        "alter system set citus.multi_shard_commit_protocol='2pc'; select pg_reload_conf();",
    );
    psql_stdin("alter system set citus.replication_model='streaming'; select pg_reload_conf();");
    let c = cl.client().await;
    assert_eq!(
        value(&c, "SHOW citus.multi_shard_commit_protocol")
            .await
            .as_deref(),
        Some("2pc")
    );
    // A setting no other test reads: ALTER SYSTEM's value is a new session's default,
    // RESET takes it back, a bad value is refused before the node stores it.
    psql_stdin("alter system set citus.log_remote_commands = true; select pg_reload_conf();");
    let c = cl.client().await;
    assert_eq!(
        value(&c, "SELECT current_setting('citus.log_remote_commands')")
            .await
            .as_deref(),
        Some("on")
    );
    assert_eq!(
        outcome(&c, "ALTER SYSTEM SET citus.log_remote_commands = 'maybe'").await,
        "error 22023"
    );
    assert_eq!(
        outcome(&c, "ALTER SYSTEM SET citus.no_such_setting = 1").await,
        "error 42602"
    );
    psql_stdin("alter system reset citus.log_remote_commands; select pg_reload_conf();");
    let c = cl.client().await;
    assert_eq!(
        value(&c, "SHOW citus.log_remote_commands").await.as_deref(),
        Some("off")
    );
    let auto = cl.direct(cl.coordinator_port).await;
    assert!(value(
        &auto,
        "SELECT string_agg(name, ',') FROM pg_file_settings WHERE name = 'citus.multi_shard_commit_protocol'"
    )
    .await
    .is_some());
}

/// Every setting of the issue and of Citus's documentation is known with its default,
/// to SHOW and current_setting alike (both 42704 before this change).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_setting_has_its_default() {
    let c = cluster().client().await;
    for (name, default) in [
        ("citus.shard_count", "32"),
        ("citus.shard_replication_factor", "1"),
        ("citus.multi_shard_commit_protocol", "2pc"),
        ("citus.enable_repartition_joins", "on"),
        ("citus.task_executor_type", "adaptive"),
        ("citus.next_shard_id", "0"),
        ("citus.multi_shard_modify_mode", "parallel"),
        ("citus.max_intermediate_result_size", "1GB"),
        ("citus.explain_all_tasks", "off"),
        ("citus.node_connection_timeout", "30s"),
    ] {
        assert_eq!(
            value(&c, &format!("SHOW {name}")).await.as_deref(),
            Some(default),
            "SHOW {name}"
        );
        assert_eq!(
            value(&c, &format!("SELECT current_setting('{name}')"))
                .await
                .as_deref(),
            Some(default),
            "current_setting {name}"
        );
        // The extended protocol too.
        let row = c
            .query_one("SELECT current_setting($1)", &[&name])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), default, "{name} extended");
    }
}

/// SET / SET LOCAL / RESET / savepoints / set_config of a citus setting behave as a
/// placeholder's on one plain PostgreSQL (once both hold a value).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_are_transactional_as_on_postgres() {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    let script = [
        "SET citus.shard_count = 8",
        "SHOW citus.shard_count",
        "SELECT current_setting('citus.shard_count')",
        "BEGIN",
        "SET LOCAL citus.shard_count = 9",
        "SELECT current_setting('citus.shard_count')",
        "SAVEPOINT a",
        "SET citus.shard_count = 10",
        "SHOW citus.shard_count",
        "ROLLBACK TO a",
        "SHOW citus.shard_count",
        "COMMIT",
        "SHOW citus.shard_count",
        "BEGIN",
        "SET citus.shard_count = 11",
        "ROLLBACK",
        "SHOW citus.shard_count",
        "SET citus.shard_count = 12; SELECT 1/0",
        "SHOW citus.shard_count",
        "SELECT set_config('citus.shard_count', '13', false)",
        "SHOW citus.shard_count",
        "BEGIN",
        "SELECT set_config('citus.shard_count', '14', true)",
        "SELECT current_setting('citus.shard_count')",
        "COMMIT",
        "SELECT current_setting('citus.shard_count')",
        "SET LOCAL citus.shard_count = 15",
        "SHOW citus.shard_count",
        "BEGIN",
        "SET LOCAL citus.shard_count = 16",
        "SET citus.shard_count = 16",
        "COMMIT",
        "SHOW citus.shard_count",
        "SET citus.shard_count = 16",
        "BEGIN",
        "SET citus.shard_count = 16",
        "SET LOCAL citus.shard_count = 17",
        "ROLLBACK",
        "SHOW citus.shard_count",
        "SELECT current_setting('citus.no_such_setting', true)",
        "SHOW citus.no_such_setting",
        "SELECT current_setting('citus.no_such_setting')",
    ];
    for sql in script {
        assert_eq!(
            outcome(&shard, sql).await,
            outcome(&plain, sql).await,
            "{sql}"
        );
    }
}

/// Citus's own behaviour where it differs from a bare placeholder: values are checked
/// (22023), the prefix is reserved (42602), configuration-file settings cannot be SET
/// (55P02), RESET returns to the default, and the settings pgshard acts on act.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_and_names_are_checked_as_citus_checks_them() {
    let c = cluster().client().await;
    for (sql, want) in [
        ("SET citus.shard_count = 'abc'", "error 22023"),
        ("SET citus.shard_count = 0", "error 22023"),
        ("SET citus.shard_count = 64001", "error 22023"),
        ("SET citus.explain_all_tasks = 'maybe'", "error 22023"),
        ("SET citus.task_executor_type = 'bogus'", "error 22023"),
        ("SET citus.no_such_setting = 1", "error 42602"),
        ("RESET citus.no_such_setting", "error 42602"),
        ("SET citus.max_shared_pool_size = 5", "error 55P02"),
        ("SET citus.explain_all_tasks = TRUE", "ok 0"),
        ("SHOW citus.explain_all_tasks", "(on) ok 0"),
        ("SET citus.max_intermediate_result_size = '64MB'", "ok 0"),
        ("SHOW citus.max_intermediate_result_size", "(64MB) ok 0"),
        ("SET citus.multi_shard_commit_protocol = '1PC'", "ok 0"),
        ("SHOW citus.multi_shard_commit_protocol", "(1pc) ok 0"),
        ("RESET citus.multi_shard_commit_protocol", "ok 0"),
        ("SHOW citus.multi_shard_commit_protocol", "(2pc) ok 0"),
        ("SET citus.shard_count = 5", "ok 0"),
        ("SET citus.shard_count TO DEFAULT", "ok 0"),
        ("SHOW citus.shard_count", "(32) ok 0"),
        ("SET citus.shard_count = 5", "ok 0"),
        ("RESET ALL", "ok 0"),
        ("SHOW citus.shard_count", "(32) ok 0"),
    ] {
        assert_eq!(outcome(&c, sql).await, want, "{sql}");
    }
    // The value a SET / set_config gives is the one create_distributed_table uses.
    for sql in [
        "DROP TABLE IF EXISTS cs_four, cs_six",
        "CREATE TABLE cs_four (k int)",
        "CREATE TABLE cs_six (k int)",
        "SET citus.shard_count = 4",
        "SELECT create_distributed_table('cs_four', 'k')",
        "SELECT set_config('citus.shard_count', '6', false)",
        "SELECT create_distributed_table('cs_six', 'k')",
    ] {
        c.batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    for (t, n) in [("cs_four", "4"), ("cs_six", "6")] {
        assert_eq!(
            value(
                &c,
                &format!("SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = '{t}'::regclass")
            )
            .await
            .as_deref(),
            Some(n)
        );
    }
    // set_config of a bad value is refused as SET refuses it.
    assert_eq!(
        outcome(&c, "SELECT set_config('citus.shard_count', 'many', false)").await,
        "error 22023"
    );
}

/// Inside a block, a setting of an older Citus (task_executor_type) no longer aborts the
/// block: the block's writes commit. An unknown citus.* name aborts it, as on Citus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_setting_in_a_block_keeps_its_writes() {
    let c = cluster().client().await;
    c.batch_execute("DROP TABLE IF EXISTS cs_block; CREATE TABLE cs_block (k int)")
        .await
        .unwrap();
    for sql in [
        "BEGIN",
        "INSERT INTO cs_block VALUES (1)",
        "SET citus.task_executor_type = 'real-time'",
        "SET LOCAL citus.multi_shard_modify_mode = 'sequential'",
        "SHOW citus.multi_shard_modify_mode",
        "INSERT INTO cs_block VALUES (2)",
        "COMMIT",
    ] {
        assert!(!outcome(&c, sql).await.starts_with("error"), "{sql}");
    }
    assert_eq!(
        value(&c, "SELECT count(*) FROM cs_block").await.as_deref(),
        Some("2")
    );
    assert_eq!(
        value(&c, "SHOW citus.task_executor_type").await.as_deref(),
        Some("real-time")
    );
    assert_eq!(
        value(&c, "SHOW citus.multi_shard_modify_mode")
            .await
            .as_deref(),
        Some("parallel")
    );
    assert_eq!(outcome(&c, "BEGIN").await, "ok 0");
    assert_eq!(outcome(&c, "SET citus.bogus = 1").await, "error 42602");
    assert_eq!(outcome(&c, "SELECT 1").await, "error 25P02");
    assert_eq!(outcome(&c, "ROLLBACK").await, "ok 0");
}

/// pg_settings and SHOW ALL have a row per citus setting, with PostgreSQL's columns
/// and the session's value; pg_extension shows citus; citus_version() is Citus's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_views_show_citus() {
    let c = cluster().client().await;
    let n: i64 = value(
        &c,
        "SELECT count(*) FROM pg_settings WHERE name LIKE 'citus.%'",
    )
    .await
    .unwrap()
    .parse()
    .unwrap();
    assert_eq!(n as usize, pgshard::citus_settings::SETTINGS.len());
    let row = common::simple_rows(
        &c,
        "SELECT name, setting, unit, vartype, context, boot_val, reset_val, source, min_val \
         FROM pg_catalog.pg_settings s WHERE s.name = 'citus.max_intermediate_result_size'",
    )
    .await
    .unwrap();
    let s = |v: &str| Some(v.to_string());
    assert_eq!(
        row,
        vec![vec![
            s("citus.max_intermediate_result_size"),
            s("1048576"),
            s("kB"),
            s("integer"),
            s("user"),
            s("1048576"),
            s("1048576"),
            s("default"),
            s("-1"),
        ]]
    );
    c.batch_execute("SET citus.shard_count = 8").await.unwrap();
    // Extended protocol, a join with pg_settings and an enum's values.
    let rows = c
        .query(
            "SELECT p.setting, p.source, e.enumvals FROM pg_settings p \
             JOIN pg_settings e ON e.name = 'citus.multi_shard_commit_protocol' \
             WHERE p.name = $1",
            &[&"citus.shard_count"],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, String>(0), "8");
    assert_eq!(rows[0].get::<_, String>(1), "session");
    assert_eq!(rows[0].get::<_, Vec<String>>(2), vec!["1pc", "2pc"]);
    // SHOW ALL lists them among PostgreSQL's own, in name order.
    let all = common::simple_rows(&c, "SHOW ALL").await.unwrap();
    assert!(all
        .iter()
        .any(|r| r[0].as_deref() == Some("citus.shard_count") && r[1].as_deref() == Some("8")));
    assert!(all.iter().any(|r| r[0].as_deref() == Some("work_mem")));
    // pg_extension and psql's \dx.
    assert_eq!(
        outcome(
            &c,
            "SELECT extname, extversion FROM pg_extension WHERE extname = 'citus'"
        )
        .await,
        "(citus,12.1-1) ok 1"
    );
    let dx = common::psql(&cluster().pg_env(), &["-c", "\\dx citus"]);
    assert!(dx.starts_with("citus|12.1-1|pg_catalog"), "{dx}");
    let v = value(&c, "SELECT citus_version()").await.unwrap();
    assert!(
        v.starts_with("Citus 12.1.") && v.contains(" on ") && v.contains("pgshard"),
        "{v}"
    );
    assert_eq!(outcome(&c, "CREATE EXTENSION citus").await, "ok 0");
    assert_eq!(
        outcome(&c, "CREATE EXTENSION IF NOT EXISTS citus").await,
        "ok 0"
    );
    assert_eq!(outcome(&c, "DROP EXTENSION citus").await, "error 0A000");
}

/// ALTER ROLE / ALTER DATABASE ... SET citus.* and the startup packet's options are a
/// new session's starting values, RESET returns to them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_database_and_options_give_starting_values() {
    let cl = cluster();
    let admin = cl.client().await;
    admin
        .batch_execute(
            "DROP ROLE IF EXISTS cs_role; CREATE ROLE cs_role LOGIN PASSWORD 'cs_pw'; \
             ALTER ROLE cs_role SET citus.shard_count = 5",
        )
        .await
        .unwrap();
    assert_eq!(
        outcome(&admin, "ALTER ROLE cs_role SET citus.shard_count = 0").await,
        "error 22023"
    );
    let user = connect(&cl.host, cl.port, "cs_role", "cs_pw", &cl.database).await;
    assert_eq!(
        value(&user, "SHOW citus.shard_count").await.as_deref(),
        Some("5")
    );
    user.batch_execute("SET citus.shard_count = 7; RESET citus.shard_count")
        .await
        .unwrap();
    assert_eq!(
        value(&user, "SHOW citus.shard_count").await.as_deref(),
        Some("5")
    );
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} SET citus.log_multi_join_order = on",
            cl.database
        ))
        .await
        .unwrap();
    let fresh = cl.client().await;
    assert_eq!(
        value(&fresh, "SHOW citus.log_multi_join_order")
            .await
            .as_deref(),
        Some("on")
    );
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} RESET citus.log_multi_join_order",
            cl.database
        ))
        .await
        .unwrap();
    let fresh = cl.client().await;
    assert_eq!(
        value(&fresh, "SHOW citus.log_multi_join_order")
            .await
            .as_deref(),
        Some("off")
    );
    let opts = cl
        .client_with_options("-c citus.shard_count=3 -c citus.explain_all_tasks=yes")
        .await;
    assert_eq!(
        value(&opts, "SHOW citus.shard_count").await.as_deref(),
        Some("3")
    );
    assert_eq!(
        value(&opts, "SELECT current_setting('citus.explain_all_tasks')")
            .await
            .as_deref(),
        Some("on")
    );
    opts.batch_execute("SET citus.shard_count = 9; RESET ALL")
        .await
        .unwrap();
    assert_eq!(
        value(&opts, "SHOW citus.shard_count").await.as_deref(),
        Some("3")
    );
    drop(user);
    admin
        .batch_execute("ALTER ROLE cs_role RESET citus.shard_count")
        .await
        .unwrap();
}

/// run_command_on_*: Citus's columns, one row per node / shard / placement, errors as
/// rows, `%s` the shard's name, and the command runs as the session's role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_command_on_nodes_and_shards() {
    let cl = cluster();
    let c = cl.client().await;
    let workers = cl.worker_ports.len();
    let rows = common::simple_rows(
        &c,
        "SELECT nodeport, success, result FROM run_command_on_workers('select 40 + 2') ORDER BY 1",
    )
    .await
    .unwrap();
    let mut ports: Vec<u16> = cl.worker_ports.clone();
    ports.sort();
    let want: Vec<Vec<Option<String>>> = ports
        .iter()
        .map(|p| vec![Some(p.to_string()), Some("t".into()), Some("42".into())])
        .collect();
    assert_eq!(rows, want);
    let rows = common::simple_rows(
        &c,
        "SELECT * FROM run_command_on_workers('select nonsense')",
    )
    .await
    .unwrap();
    assert_eq!(rows.len(), workers);
    for r in &rows {
        assert_eq!(r[2].as_deref(), Some("f"));
        assert_eq!(
            r[3].as_deref(),
            Some("ERROR:  column \"nonsense\" does not exist")
        );
    }
    let tags = common::simple_rows(
        &c,
        "SELECT result FROM run_command_on_workers('SET work_mem = ''8MB''')",
    )
    .await
    .unwrap();
    assert!(
        tags.iter().all(|r| r[0].as_deref() == Some("SET")),
        "{tags:?}"
    );
    let multi = common::simple_rows(
        &c,
        "SELECT result FROM run_command_on_workers('select 1, 2')",
    )
    .await
    .unwrap();
    assert_eq!(
        multi[0][0].as_deref(),
        Some("expected a single column in query target")
    );
    assert_eq!(
        value(
            &c,
            "SELECT count(*) FROM run_command_on_all_nodes('select 1')"
        )
        .await,
        Some((workers + 1).to_string())
    );
    // Shards and placements: %s is each shard's name.
    for sql in [
        "DROP TABLE IF EXISTS cs_run",
        "CREATE TABLE cs_run (k int)",
        "SET citus.shard_count = 4",
        "SELECT create_distributed_table('cs_run', 'k')",
        "RESET citus.shard_count",
        "INSERT INTO cs_run SELECT generate_series(1, 100)",
    ] {
        c.batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let shards = common::simple_rows(
        &c,
        "SELECT shardid, success, result FROM run_command_on_shards('cs_run', 'select count(*) from %s') ORDER BY 1",
    )
    .await
    .unwrap();
    assert_eq!(shards.len(), 4);
    let total: i64 = shards
        .iter()
        .map(|r| {
            assert_eq!(r[1].as_deref(), Some("t"));
            r[2].as_deref().unwrap().parse::<i64>().unwrap()
        })
        .sum();
    assert_eq!(total, 100);
    let placements = common::simple_rows(
        &c,
        "SELECT p.nodename, p.nodeport, p.shardid, p.success FROM \
         run_command_on_placements('cs_run', 'select 1 from %s limit 0') p ORDER BY 3",
    )
    .await
    .unwrap();
    assert_eq!(placements.len(), 4);
    assert!(placements.iter().all(|r| r[3].as_deref() == Some("t")));
    // As the session's role: not pgshard's superuser, and its privileges apply.
    c.batch_execute("DROP ROLE IF EXISTS cs_runner; CREATE ROLE cs_runner LOGIN PASSWORD 'run_pw'")
        .await
        .unwrap();
    let user = connect(&cl.host, cl.port, "cs_runner", "run_pw", &cl.database).await;
    let who = common::simple_rows(
        &user,
        "SELECT result FROM run_command_on_workers('select current_user || '','' || (select rolsuper from pg_roles where rolname = current_user)')",
    )
    .await
    .unwrap();
    assert!(
        who.iter()
            .all(|r| r[0].as_deref() == Some("cs_runner,false")),
        "{who:?}"
    );
    let denied = common::simple_rows(
        &user,
        "SELECT success, result FROM run_command_on_shards('cs_run', 'select count(*) from %s')",
    )
    .await
    .unwrap();
    assert!(
        denied.iter().all(|r| r[0].as_deref() == Some("f")
            && r[1].as_deref().unwrap().contains("permission denied")),
        "{denied:?}"
    );
}
