//! Roles, privileges and row-level security across the cluster, against real servers:
//! after each statement through pgshard, every worker (read directly) must hold the
//! same roles (password verifier included), memberships, shard owners, ACLs, default
//! privileges and policies as the coordinator node; Citus functions and DDL on
//! distributed tables refuse a non-owner with PostgreSQL's (or Citus's) 42501, the
//! plain PostgreSQL oracle saying the same for the same statement.
//!
//! The tests share one cluster and one of them adds a node, so they run one at a time.

mod common;

use common::{alloc_ports, cluster, connect, plain_postgres, run_dir, teardown_at_exit, Teardown};
use pgshard::cluster::node::{self, Node, Settings};
use tokio_postgres::{Client, SimpleQueryMessage};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

type Rows = Vec<Vec<Option<String>>>;

fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} {} {:?}", db.code().code(), db.message(), db.detail()),
        None => e.to_string(),
    }
}

async fn rows(c: &Client, sql: &str) -> Rows {
    c.simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", describe(&e)))
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

/// Runs `;`-separated statements one simple query each (none of the tests' texts has
/// a `;` inside a literal).
async fn run(c: &Client, sql: &str) {
    for one in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        c.batch_execute(one)
            .await
            .unwrap_or_else(|e| panic!("{one}: {}", describe(&e)));
    }
}

/// (SQLSTATE, message) of a statement that must fail.
async fn error(c: &Client, sql: &str) -> (String, String) {
    let e = c
        .batch_execute(sql)
        .await
        .expect_err(&format!("{sql} should fail"));
    let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e}"));
    (db.code().code().to_string(), db.message().to_string())
}

/// Ports of the workers in pg_dist_node (a node added by a test included).
async fn worker_ports(coord: &Client) -> Vec<u16> {
    rows(
        coord,
        "SELECT nodeport FROM pg_dist_node WHERE groupid <> 0 ORDER BY 1",
    )
    .await
    .iter()
    .map(|r| r[0].as_deref().unwrap().parse().unwrap())
    .collect()
}

/// Roles and memberships whose names start with `prefix`, as one server has them.
async fn roles_of(c: &Client, prefix: &str) -> (Rows, Rows) {
    let roles = rows(
        c,
        &format!(
            "SELECT rolname, rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolcanlogin, rolreplication, \
                    rolbypassrls, rolconnlimit, rolpassword, rolvaliduntil \
             FROM pg_authid WHERE rolname LIKE '{prefix}%' ORDER BY 1"
        ),
    )
    .await;
    let members = rows(
        c,
        &format!(
            "SELECT r.rolname, m.rolname, a.admin_option FROM pg_auth_members a \
             JOIN pg_authid r ON r.oid = a.roleid JOIN pg_authid m ON m.oid = a.member \
             WHERE r.rolname LIKE '{prefix}%' OR m.rolname LIKE '{prefix}%' ORDER BY 1, 2"
        ),
    )
    .await;
    (roles, members)
}

/// Every worker has the coordinator node's roles and memberships named `prefix...`.
async fn assert_roles_everywhere(prefix: &str, after: &str) {
    let cl = cluster();
    let coord = cl.direct(cl.coordinator_port).await;
    let want = roles_of(&coord, prefix).await;
    for port in worker_ports(&coord).await {
        let got = roles_of(&cl.direct(port).await, prefix).await;
        assert_eq!(
            got, want,
            "roles on the worker at port {port} after {after}"
        );
    }
}

/// Owner, ACL (default spelled out), column ACLs, row-level security and policies.
fn security_sql(relation: &str) -> String {
    format!(
        "SELECT pg_get_userbyid(c.relowner), coalesce(c.relacl, acldefault('r', c.relowner))::text, \
                c.relrowsecurity, c.relforcerowsecurity, \
                (SELECT string_agg(a.attname || ':' || a.attacl::text, ';' ORDER BY a.attnum) \
                 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attacl IS NOT NULL), \
                (SELECT string_agg(p.polname::text || '|' || p.polcmd::text || '|' || p.polpermissive::text || '|' || \
                        (SELECT string_agg(CASE WHEN r = 0 THEN 'public' ELSE pg_get_userbyid(r) END, ',' ORDER BY 1) \
                         FROM unnest(p.polroles) r) || '|' || coalesce(pg_get_expr(p.polqual, p.polrelid), '') \
                        || '|' || coalesce(pg_get_expr(p.polwithcheck, p.polrelid), ''), ';' ORDER BY p.polname) \
                 FROM pg_policy p WHERE p.polrelid = c.oid) \
         FROM pg_class c WHERE c.oid = '{relation}'::regclass"
    )
}

/// Every placement of `schema.table` has the shell's security; returns the shell's.
async fn assert_shards_like_table(schema: &str, table: &str, after: &str) -> Rows {
    let cl = cluster();
    let coord = cl.direct(cl.coordinator_port).await;
    let want = rows(&coord, &security_sql(&format!("{schema}.{table}"))).await;
    let placements = rows(
        &coord,
        &format!(
            "SELECT s.shardid, n.nodeport FROM pg_dist_shard s \
             JOIN pg_dist_placement p ON p.shardid = s.shardid \
             JOIN pg_dist_node n ON n.groupid = p.groupid \
             WHERE s.logicalrelid = '{schema}.{table}'::regclass ORDER BY 1, 2"
        ),
    )
    .await;
    assert!(!placements.is_empty(), "{schema}.{table} has no shards");
    for p in placements {
        let (shard, port) = (p[0].as_deref().unwrap(), p[1].as_deref().unwrap());
        let worker = cl.direct(port.parse().unwrap()).await;
        let got = rows(&worker, &security_sql(&format!("{schema}.{table}_{shard}"))).await;
        assert_eq!(
            got, want,
            "shard {shard} of {table} on the worker at port {port} after {after}"
        );
    }
    want
}

/// Default privileges of roles or schemas named `prefix...` on one server.
async fn default_acls(c: &Client, prefix: &str) -> Rows {
    rows(
        c,
        &format!(
            "SELECT pg_get_userbyid(d.defaclrole), coalesce(n.nspname, ''), d.defaclobjtype, d.defaclacl::text \
             FROM pg_default_acl d LEFT JOIN pg_namespace n ON n.oid = d.defaclnamespace \
             WHERE pg_get_userbyid(d.defaclrole) LIKE '{prefix}%' OR n.nspname LIKE '{prefix}%' ORDER BY 1, 2, 3"
        ),
    )
    .await
}

async fn schema_acl(c: &Client, schema: &str) -> Rows {
    rows(
        c,
        &format!(
            "SELECT pg_get_userbyid(nspowner), coalesce(nspacl, acldefault('n', nspowner))::text \
             FROM pg_namespace WHERE nspname = '{schema}'"
        ),
    )
    .await
}

/// A connection through pgshard as `user`.
async fn client_as(user: &str, password: &str) -> Client {
    let cl = cluster();
    connect(&cl.host, cl.port, user, password, &cl.database).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_are_copied_to_every_worker() {
    let _serial = SERIAL.lock().await;
    let cl = cluster();
    let c = cl.client().await;
    for (sql, what) in [
        (
            "CREATE ROLE rl_app LOGIN PASSWORD 'rl secret 1' CONNECTION LIMIT 7 VALID UNTIL '2099-01-01 00:00:00+00'",
            "CREATE ROLE",
        ),
        ("CREATE ROLE rl_group NOLOGIN", "CREATE ROLE NOLOGIN"),
        ("CREATE USER \"rl_Odd \"\"name\" IN ROLE rl_group", "CREATE USER IN ROLE"),
        ("GRANT rl_group TO rl_app WITH ADMIN OPTION", "GRANT role"),
        ("ALTER ROLE rl_app CREATEDB PASSWORD 'rl secret 2'", "ALTER ROLE"),
        ("ALTER ROLE rl_group RENAME TO rl_grp", "RENAME"),
        ("REVOKE ADMIN OPTION FOR rl_grp FROM rl_app", "REVOKE ADMIN OPTION"),
        ("REVOKE rl_grp FROM rl_app", "REVOKE role"),
        ("ALTER GROUP rl_grp ADD USER rl_app", "ALTER GROUP ADD USER"),
        ("DROP ROLE \"rl_Odd \"\"name\"", "DROP ROLE"),
    ] {
        run(&c, sql).await;
        assert_roles_everywhere("rl_", what).await;
    }
    let coord = cl.direct(cl.coordinator_port).await;
    let (roles, members) = roles_of(&coord, "rl_").await;
    assert_eq!(roles.len(), 2, "{roles:?}");
    assert!(roles[0][9]
        .as_deref()
        .unwrap()
        .starts_with("SCRAM-SHA-256$"));
    assert_eq!(members.len(), 1);

    c.execute("ALTER ROLE rl_app NOCREATEDB", &[])
        .await
        .unwrap();
    assert_roles_everywhere("rl_", "an extended-protocol ALTER ROLE").await;
    // The verifier is the coordinator node's: the password opens every worker, and
    // pgshard itself.
    for port in worker_ports(&coord).await {
        let w = connect(&cl.host, port, "rl_app", "rl secret 2", &cl.database).await;
        assert_eq!(
            rows(&w, "SELECT current_user").await[0][0].as_deref(),
            Some("rl_app")
        );
    }
    client_as("rl_app", "rl secret 2").await;

    // A role statement the caller may not make fails as in PostgreSQL, nowhere applied.
    let app = client_as("rl_app", "rl secret 2").await;
    let (code, message) = error(&app, "CREATE ROLE rl_nope").await;
    assert_eq!(code, "42501");
    assert_eq!(message, "permission denied to create role");
    assert_roles_everywhere("rl_", "a refused CREATE ROLE").await;

    // sync_role repairs a worker that lost or changed its copy.
    let ports = worker_ports(&coord).await;
    let w0 = cl.direct(ports[0]).await;
    run(&w0, "DROP ROLE rl_app").await;
    run(
        &cl.direct(ports[1]).await,
        "ALTER ROLE rl_grp LOGIN CONNECTION LIMIT 3",
    )
    .await;
    let cfg = config();
    let cache = pgshard::catalog::cache::CatalogCache::start(cfg.clone())
        .await
        .unwrap();
    pgshard::commands::roles::sync_role(&cache, "rl_app")
        .await
        .unwrap();
    pgshard::commands::roles::sync_role_on_node(&cfg, &cl.host, ports[1], "rl_grp")
        .await
        .unwrap();
    assert_roles_everywhere("rl_", "sync_role").await;

    run(&c, "DROP ROLE rl_app, rl_grp").await;
    assert_roles_everywhere("rl_", "DROP ROLE").await;
    assert!(roles_of(&coord, "rl_").await.0.is_empty());
    common::assert_no_prepared_xacts().await;
}

/// pgshard's configuration for the shared cluster (for calling its functions directly).
fn config() -> std::sync::Arc<pgshard::config::Config> {
    let cl = cluster();
    let cfg: pgshard::config::Config = toml::from_str(&format!(
        "listen_port = 1\ndatabase = \"{}\"\nuser = \"{}\"\npassword = \"{}\"\n\
         [coordinator]\nhost = \"{}\"\nport = {}\n",
        cl.database, cl.user, cl.password, cl.host, cl.coordinator_port
    ))
    .unwrap();
    std::sync::Arc::new(cfg)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_privileges_and_policies_reach_every_shard() {
    let _serial = SERIAL.lock().await;
    let cl = cluster();
    let c = cl.client().await;
    run(
        &c,
        "CREATE ROLE tp_owner LOGIN PASSWORD 'tp'; CREATE ROLE tp_reader; CREATE ROLE tp_granter; \
         CREATE TABLE tp_t (k int, v text, w int); ALTER TABLE tp_t OWNER TO tp_owner; \
         GRANT SELECT, UPDATE (v) ON tp_t TO tp_reader; GRANT SELECT ON tp_t TO tp_granter WITH GRANT OPTION; \
         ALTER TABLE tp_t ENABLE ROW LEVEL SECURITY; \
         CREATE POLICY tp_mine ON tp_t FOR SELECT TO tp_reader, PUBLIC USING (v = current_user); \
         CREATE TABLE tp_r (k int, v text); ALTER TABLE tp_r OWNER TO tp_granter; \
         REVOKE ALL ON tp_r FROM tp_granter; GRANT INSERT ON tp_r TO PUBLIC; \
         ALTER TABLE tp_r FORCE ROW LEVEL SECURITY; \
         CREATE POLICY tp_w ON tp_r AS RESTRICTIVE FOR INSERT WITH CHECK (k > 0)",
    )
    .await;
    // A grant by a role other than the owner, with its grantor kept on the shards.
    let coord = cl.direct(cl.coordinator_port).await;
    run(
        &coord,
        "SET ROLE tp_granter; GRANT SELECT ON tp_t TO tp_owner; RESET ROLE",
    )
    .await;
    run(&c, "SELECT create_distributed_table('tp_t', 'k')").await;
    run(&c, "SELECT create_reference_table('tp_r')").await;
    let first = assert_shards_like_table("public", "tp_t", "create_distributed_table").await;
    assert!(
        first[0][1]
            .as_deref()
            .unwrap()
            .contains("tp_owner=r/tp_granter"),
        "{first:?}"
    );
    assert!(
        first[0][4]
            .as_deref()
            .unwrap()
            .contains("tp_reader=w/tp_owner"),
        "{first:?}"
    );
    assert!(
        first[0][5]
            .as_deref()
            .unwrap()
            .starts_with("tp_mine|r|true|public|(v = CURRENT_USER)"),
        "{first:?}"
    );
    assert_shards_like_table("public", "tp_r", "create_reference_table").await;

    for (sql, table) in [
        (
            "GRANT INSERT, DELETE ON tp_t TO tp_reader WITH GRANT OPTION",
            "tp_t",
        ),
        ("REVOKE SELECT ON tp_t FROM tp_reader", "tp_t"),
        ("GRANT SELECT (k) ON TABLE tp_t, tp_r TO tp_reader", "tp_t"),
        ("GRANT SELECT (k) ON TABLE tp_t, tp_r TO tp_reader", "tp_r"),
        ("REVOKE ALL ON tp_r FROM PUBLIC", "tp_r"),
        (
            "GRANT ALL ON ALL TABLES IN SCHEMA public TO tp_granter",
            "tp_t",
        ),
        (
            "GRANT ALL ON ALL TABLES IN SCHEMA public TO tp_granter",
            "tp_r",
        ),
        ("ALTER TABLE tp_t FORCE ROW LEVEL SECURITY", "tp_t"),
        (
            "CREATE POLICY tp_all ON tp_t USING (w > 0) WITH CHECK (w < 100)",
            "tp_t",
        ),
        (
            "ALTER POLICY tp_all ON tp_t TO tp_reader USING (w > 1)",
            "tp_t",
        ),
        ("ALTER POLICY tp_all ON tp_t RENAME TO tp_renamed", "tp_t"),
        ("DROP POLICY tp_renamed ON tp_t", "tp_t"),
        (
            "ALTER TABLE tp_t NO FORCE ROW LEVEL SECURITY, DISABLE ROW LEVEL SECURITY",
            "tp_t",
        ),
        ("ALTER TABLE tp_t OWNER TO tp_reader", "tp_t"),
        ("ALTER TABLE tp_r OWNER TO CURRENT_USER", "tp_r"),
    ] {
        run(&c, sql).await;
        assert_shards_like_table("public", table, sql).await;
    }
    // The extended protocol (Parse/Bind/Execute) takes the same path.
    c.execute("REVOKE DELETE ON tp_t FROM tp_reader", &[])
        .await
        .unwrap();
    assert_shards_like_table("public", "tp_t", "an extended-protocol REVOKE").await;
    // Inside a block: with the block, rolled back or committed.
    run(&c, "BEGIN; GRANT TRUNCATE ON tp_t TO tp_granter; ROLLBACK").await;
    let before = assert_shards_like_table("public", "tp_t", "a rolled back GRANT").await;
    assert!(
        !before[0][1].as_deref().unwrap().contains("tp_granter=D"),
        "{before:?}"
    );
    run(&c, "BEGIN; REVOKE UPDATE ON tp_t FROM tp_granter; CREATE POLICY tp_b ON tp_t USING (true); COMMIT").await;
    assert_shards_like_table("public", "tp_t", "GRANT and CREATE POLICY in a block").await;

    // has_table_privilege on a shard answers as on its table.
    let shard = rows(&coord, "SELECT s.shardid, n.nodeport FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid) \
                              JOIN pg_dist_node n ON n.groupid = p.groupid WHERE s.logicalrelid = 'tp_t'::regclass LIMIT 1").await;
    let (id, port) = (
        shard[0][0].as_deref().unwrap(),
        shard[0][1].as_deref().unwrap(),
    );
    let worker = cl.direct(port.parse().unwrap()).await;
    for privilege in ["SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE"] {
        let on_shell = rows(
            &coord,
            &format!("SELECT has_table_privilege('tp_granter', 'tp_t', '{privilege}')"),
        )
        .await;
        let on_shard = rows(
            &worker,
            &format!("SELECT has_table_privilege('tp_granter', 'tp_t_{id}', '{privilege}')"),
        )
        .await;
        assert_eq!(on_shard, on_shell, "{privilege}");
    }

    // Schemas made on the workers get their owner and ACL; grants on them follow.
    run(
        &c,
        "CREATE SCHEMA tp_s AUTHORIZATION tp_owner; GRANT USAGE ON SCHEMA tp_s TO tp_reader; \
         CREATE TABLE tp_s.t2 (k int); ALTER TABLE tp_s.t2 OWNER TO tp_owner; COMMIT; \
         SELECT create_distributed_table('tp_s.t2', 'k')",
    )
    .await;
    let want = schema_acl(&coord, "tp_s").await;
    for port in worker_ports(&coord).await {
        assert_eq!(
            schema_acl(&cl.direct(port).await, "tp_s").await,
            want,
            "port {port}"
        );
    }
    assert_shards_like_table("tp_s", "t2", "create_distributed_table in a schema").await;
    for sql in [
        "GRANT CREATE ON SCHEMA tp_s, public TO tp_reader",
        "REVOKE USAGE ON SCHEMA tp_s FROM tp_reader",
        "GRANT USAGE ON SCHEMA tp_s TO tp_granter WITH GRANT OPTION",
        "ALTER DEFAULT PRIVILEGES FOR ROLE tp_owner IN SCHEMA tp_s GRANT SELECT ON TABLES TO tp_reader",
        "ALTER DEFAULT PRIVILEGES FOR ROLE tp_owner REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC",
        "REVOKE CREATE ON SCHEMA public FROM tp_reader",
    ] {
        run(&c, sql).await;
        let want = (schema_acl(&coord, "tp_s").await, default_acls(&coord, "tp_").await);
        for port in worker_ports(&coord).await {
            let w = cl.direct(port).await;
            let got = (schema_acl(&w, "tp_s").await, default_acls(&w, "tp_").await);
            assert_eq!(got, want, "port {port} after {sql}");
        }
    }
    assert_eq!(default_acls(&coord, "tp_").await.len(), 2);
    // Grants on objects a worker lacks are skipped there.
    run(&c, "CREATE SEQUENCE tp_seq; GRANT USAGE ON SEQUENCE tp_seq TO tp_reader; GRANT EXECUTE ON FUNCTION pg_catalog.now() TO tp_reader").await;
    assert!(rows(
        &coord,
        "SELECT relacl::text FROM pg_class WHERE relname = 'tp_seq'"
    )
    .await[0][0]
        .as_deref()
        .unwrap()
        .contains("tp_reader=U"));

    run(
        &c,
        "DROP TABLE tp_t; COMMIT; DROP TABLE tp_r; COMMIT; DROP TABLE tp_s.t2; COMMIT; DROP SEQUENCE tp_seq; \
         ALTER DEFAULT PRIVILEGES FOR ROLE tp_owner IN SCHEMA tp_s REVOKE SELECT ON TABLES FROM tp_reader; \
         ALTER DEFAULT PRIVILEGES FOR ROLE tp_owner GRANT EXECUTE ON FUNCTIONS TO PUBLIC; \
         REVOKE ALL ON SCHEMA tp_s FROM tp_granter CASCADE; DROP SCHEMA tp_s",
    )
    .await;
    for port in worker_ports(&coord).await {
        run(&cl.direct(port).await, "DROP SCHEMA IF EXISTS tp_s").await;
    }
    run(
        &c,
        "REVOKE EXECUTE ON FUNCTION pg_catalog.now() FROM tp_reader; \
         REVOKE ALL ON ALL TABLES IN SCHEMA public FROM tp_granter; DROP ROLE tp_owner, tp_reader, tp_granter",
    )
    .await;
    assert_roles_everywhere("tp_", "DROP ROLE").await;
    common::assert_no_prepared_xacts().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_owners_get_postgres_errors() {
    let _serial = SERIAL.lock().await;
    let cl = cluster();
    let plain = plain_postgres().client().await;
    let c = cl.client().await;
    let setup = "CREATE ROLE no_app LOGIN PASSWORD 'no pw'; \
                 CREATE TABLE no_t (k int, v int); CREATE TABLE no_local (k int); CREATE TABLE no_ref (k int)";
    run(&c, setup).await;
    run(&plain, setup).await;
    run(
        &c,
        "SELECT create_distributed_table('no_t', 'k'); COMMIT; SELECT create_reference_table('no_ref')",
    )
    .await;
    let app = client_as("no_app", "no pw").await;
    let plain_app = {
        let p = plain_postgres();
        connect(&p.host, p.port, "no_app", "no pw", &p.database).await
    };

    // Citus's functions: ownership, superuser (Citus's wording).
    for (sql, message) in [
        (
            "SELECT create_distributed_table('no_local', 'k')",
            "must be owner of table no_local",
        ),
        (
            "SELECT create_reference_table('no_local')",
            "must be owner of table no_local",
        ),
        (
            "SELECT undistribute_table('no_t')",
            "must be owner of table no_t",
        ),
        (
            "SELECT citus_add_node('127.0.0.1', 1)",
            "permission denied for function citus_add_node",
        ),
        (
            "SELECT master_add_node('127.0.0.1', 1)",
            "permission denied for function master_add_node",
        ),
        (
            "SELECT citus_remove_node('127.0.0.1', 1)",
            "permission denied for function citus_remove_node",
        ),
        (
            "SELECT recover_prepared_transactions()",
            "permission denied for function recover_prepared_transactions",
        ),
    ] {
        assert_eq!(
            error(&app, sql).await,
            ("42501".to_string(), message.to_string()),
            "{sql}"
        );
    }
    // DDL on distributed and reference tables: as PostgreSQL answers on one server.
    for sql in [
        "ALTER TABLE no_t ADD COLUMN z int",
        "CREATE INDEX no_i ON no_t (v)",
        "ALTER TABLE no_t OWNER TO no_app",
        "ALTER TABLE no_ref ENABLE ROW LEVEL SECURITY",
        "CREATE POLICY no_p ON no_t USING (true)",
        "ALTER TABLE no_t RENAME TO no_u",
        "DROP TABLE no_t",
        "DROP TABLE no_ref",
    ] {
        let want = error(&plain_app, sql).await;
        assert_eq!(want.0, "42501", "{sql}");
        assert_eq!(error(&app, sql).await, want, "{sql}");
    }
    // A GRANT without any privilege fails; with privileges but no grant option it
    // grants nothing (PostgreSQL warns), on no shard either.
    let sql = "GRANT SELECT ON no_t TO no_app";
    assert_eq!(error(&app, sql).await, error(&plain_app, sql).await);
    run(&c, "GRANT SELECT ON no_t TO no_app").await;
    let before = assert_shards_like_table("public", "no_t", "GRANT").await;
    run(&app, "GRANT SELECT ON no_t TO PUBLIC").await;
    assert_eq!(
        assert_shards_like_table("public", "no_t", "a GRANT without grant option").await,
        before
    );
    // Everyone reads the catalog (Citus grants SELECT to PUBLIC); nobody else writes it.
    let coord_app = connect(
        &cl.host,
        cl.coordinator_port,
        "no_app",
        "no pw",
        &cl.database,
    )
    .await;
    rows(
        &coord_app,
        "SELECT count(*) FROM pg_dist_node, pg_dist_partition, pg_dist_shard, pg_dist_placement",
    )
    .await;
    assert_eq!(
        error(&coord_app, "DELETE FROM pg_dist_node").await,
        (
            "42501".to_string(),
            "permission denied for table pg_dist_node".to_string()
        )
    );

    // Once it owns the table, the same role may.
    run(&c, "ALTER TABLE no_t OWNER TO no_app").await;
    run(&plain, "ALTER TABLE no_t OWNER TO no_app").await;
    assert_shards_like_table("public", "no_t", "OWNER TO").await;
    run(
        &app,
        "ALTER TABLE no_t ADD COLUMN z int; GRANT SELECT ON no_t TO PUBLIC",
    )
    .await;
    // An index needs CREATE on the schema besides ownership (PostgreSQL 15's public).
    let sql = "CREATE INDEX no_i ON no_t (v)";
    assert_eq!(error(&app, sql).await, error(&plain_app, sql).await);
    assert_shards_like_table("public", "no_t", "the owner's GRANT").await;
    run(&app, "DROP TABLE no_t").await;
    run(
        &c,
        "DROP TABLE no_local; COMMIT; DROP TABLE no_ref; COMMIT; DROP ROLE no_app",
    )
    .await;
    run(
        &plain,
        "DROP TABLE no_t, no_local, no_ref; DROP ROLE no_app",
    )
    .await;
    common::assert_no_prepared_xacts().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_made_before_a_new_node_hold_on_its_shards() {
    let _serial = SERIAL.lock().await;
    let cl = cluster();
    let c = cl.client().await;
    run(
        &c,
        "CREATE ROLE nn_reader LOGIN PASSWORD 'nn pw'; CREATE ROLE nn_group; GRANT nn_group TO nn_reader; \
         CREATE TABLE nn_t (k int, v text); GRANT SELECT ON nn_t TO nn_reader; \
         ALTER TABLE nn_t ENABLE ROW LEVEL SECURITY; CREATE POLICY nn_p ON nn_t TO nn_group USING (v = current_user)",
    )
    .await;
    // A fresh server, pgshard's superuser password as on the other nodes.
    let dir = run_dir().join("new-worker");
    std::fs::create_dir_all(&dir).unwrap();
    node::check_reachable(&dir).unwrap();
    node::server_dir(&dir.join("logs"), 0o755).unwrap();
    let socket_dir = node::socket_dir_for(&dir);
    node::server_dir(&socket_dir, 0o755).unwrap();
    let n = Node {
        name: "new worker".into(),
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
    run(
        &c,
        &format!("SELECT citus_add_node('127.0.0.1', {})", n.port),
    )
    .await;
    assert_roles_everywhere("nn_", "citus_add_node").await;
    run(
        &c,
        "SET citus.shard_count = 6; COMMIT; SELECT create_distributed_table('nn_t', 'k')",
    )
    .await;
    let coord = cl.direct(cl.coordinator_port).await;
    let on_new = rows(
        &coord,
        &format!(
            "SELECT count(*) FROM pg_dist_placement p JOIN pg_dist_node n ON n.groupid = p.groupid \
             JOIN pg_dist_shard s ON s.shardid = p.shardid WHERE s.logicalrelid = 'nn_t'::regclass AND n.nodeport = {}",
            n.port
        ),
    )
    .await;
    assert_eq!(on_new[0][0].as_deref(), Some("2"));
    let sec = assert_shards_like_table(
        "public",
        "nn_t",
        "create_distributed_table after citus_add_node",
    )
    .await;
    assert!(
        sec[0][1].as_deref().unwrap().contains("nn_reader=r/"),
        "{sec:?}"
    );
    // The role logs into the new node with its password.
    let w = connect("127.0.0.1", n.port, "nn_reader", "nn pw", &cl.database).await;
    assert_eq!(
        rows(&w, "SELECT current_user").await[0][0].as_deref(),
        Some("nn_reader")
    );

    run(&c, "DROP TABLE nn_t").await;
    run(
        &c,
        &format!("SELECT citus_remove_node('127.0.0.1', {})", n.port),
    )
    .await;
    run(&c, "DROP ROLE nn_reader, nn_group").await;
    common::assert_no_prepared_xacts().await;
}

/// Per-role settings of roles named `prefix...` on one server (database-specific or
/// not), sorted.
async fn role_settings(c: &Client, prefix: &str) -> Rows {
    rows(
        c,
        &format!(
            "SELECT r.rolname, s.setdatabase <> 0, s.setconfig::text FROM pg_db_role_setting s \
             JOIN pg_roles r ON r.oid = s.setrole WHERE r.rolname LIKE '{prefix}%' ORDER BY 1, 2"
        ),
    )
    .await
}

/// `ALTER ROLE ... SET`, `REASSIGN OWNED` and `DROP OWNED` reach every node; role
/// statements inside a block run on every node in the block and commit or roll back
/// with it, as on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_settings_owned_objects_and_role_statements_in_blocks() {
    let _serial = SERIAL.lock().await;
    let cl = cluster();
    let c = cl.client().await;
    let db = cl.database.clone();
    let setup = format!(
        "CREATE ROLE ro_a LOGIN PASSWORD 'ro pw a'; CREATE ROLE ro_b; \
         ALTER ROLE ro_a SET work_mem = '3MB'; ALTER ROLE ro_a IN DATABASE \"{db}\" SET app.tenant = '7'; \
         CREATE TABLE ro_t (k int, v int); ALTER TABLE ro_t OWNER TO ro_a"
    );
    run(&c, &setup).await;
    run(&c, "SELECT create_distributed_table('ro_t', 'k'); COMMIT; INSERT INTO ro_t VALUES (1, 1), (2, 2)").await;
    let coord = cl.direct(cl.coordinator_port).await;
    let want = role_settings(&coord, "ro_").await;
    assert_eq!(want.len(), 2, "{want:?}");
    for port in worker_ports(&coord).await {
        assert_eq!(
            role_settings(&cl.direct(port).await, "ro_").await,
            want,
            "worker {port}"
        );
    }
    // The role's defaults apply on the workers' connections too.
    let a = client_as("ro_a", "ro pw a").await;
    assert_eq!(
        rows(&a, "SELECT current_setting('app.tenant'), current_setting('work_mem') FROM ro_t WHERE k = 2").await,
        vec![vec![Some("7".into()), Some("3MB".into())]]
    );
    drop(a);
    run(
        &c,
        "ALTER ROLE ro_a RESET work_mem; REASSIGN OWNED BY ro_a TO ro_b",
    )
    .await;
    assert_eq!(
        role_settings(&cl.direct(worker_ports(&coord).await[0]).await, "ro_").await,
        role_settings(&coord, "ro_").await
    );
    let sec = assert_shards_like_table("public", "ro_t", "REASSIGN OWNED").await;
    assert_eq!(sec[0][0].as_deref(), Some("ro_b"));
    // (DROP OWNED of a distributed table's owner drops its shards and catalog rows:
    // tests/dependencies.rs.)
    run(
        &c,
        "GRANT SELECT, UPDATE ON ro_t TO ro_a; DROP OWNED BY ro_a",
    )
    .await;
    assert_shards_like_table("public", "ro_t", "DROP OWNED").await;

    // Inside blocks.
    run(
        &c,
        "BEGIN; CREATE ROLE ro_c LOGIN PASSWORD 'ro pw c'; GRANT SELECT ON ro_t TO ro_c; \
             ALTER ROLE ro_c SET app.tenant = '9'; GRANT ro_b TO ro_c; COMMIT",
    )
    .await;
    assert_roles_everywhere("ro_", "CREATE ROLE in a block").await;
    assert_shards_like_table("public", "ro_t", "GRANT in a block").await;
    let c_client = client_as("ro_c", "ro pw c").await;
    assert_eq!(
        rows(
            &c_client,
            "SELECT count(*), current_setting('app.tenant') FROM ro_t WHERE k = 1"
        )
        .await,
        vec![vec![Some("1".into()), Some("9".into())]]
    );
    run(
        &c,
        "BEGIN; CREATE ROLE ro_gone; ALTER ROLE ro_c NOLOGIN; ROLLBACK",
    )
    .await;
    assert_roles_everywhere("ro_", "ROLLBACK of role statements").await;
    assert!(
        rows(&coord, "SELECT 1 FROM pg_roles WHERE rolname = 'ro_gone'")
            .await
            .is_empty()
    );
    // PostgreSQL's own checks and errors, in the block as outside.
    run(&c, "BEGIN").await;
    assert_eq!(error(&c, "CREATE ROLE ro_c").await.0, "42710");
    run(&c, "ROLLBACK").await;
    run(
        &c,
        "DROP TABLE ro_t; COMMIT; DROP ROLE ro_c; DROP ROLE ro_a; DROP ROLE ro_b",
    )
    .await;
    assert_roles_everywhere("ro_", "DROP ROLE").await;
}

/// psql's whole output (stdout, then stderr: the NOTICEs and errors) of `script`.
fn psql_output(env: &[(String, String)], script: &str) -> String {
    let out = std::process::Command::new("psql")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .args(["-X", "-q", "-c", script])
        .output()
        .expect("running psql");
    format!(
        "{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Role and privilege statements run on the client's own backend, in its session: its
/// NOTICEs reach the client, its settings apply (`password_encryption`, `search_path`
/// finding a function to GRANT on), PostgreSQL's own `pg_*` roles are never copied
/// (pg_regress `create_role`, `drop_if_exists`, `password`, `rowsecurity`,
/// `privileges`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_statements_run_in_the_clients_session() {
    let _serial = SERIAL.lock().await;
    let cl = cluster();
    let plain = plain_postgres();
    let script = "SET client_min_messages = notice; \
        DROP ROLE IF EXISTS rsess_md5, rsess_nosuch; \
        CREATE ROLE rsess_sysid SYSID 12345; \
        SET password_encryption = 'md5'; \
        CREATE ROLE rsess_md5 PASSWORD 'secret'; \
        SELECT rolname, left(rolpassword, 3) FROM pg_authid WHERE rolname = 'rsess_md5'; \
        ALTER ROLE rsess_md5 RENAME TO rsess_md5_new; \
        ALTER ROLE rsess_md5_new RENAME TO rsess_md5; \
        ALTER GROUP rsess_sysid ADD USER rsess_md5; \
        ALTER GROUP rsess_sysid ADD USER rsess_md5; \
        DROP SCHEMA IF EXISTS rsess_s CASCADE; CREATE SCHEMA rsess_s; SET search_path = rsess_s; \
        CREATE FUNCTION rsess_f(int) RETURNS int LANGUAGE sql AS 'SELECT $1'; \
        GRANT EXECUTE ON FUNCTION rsess_f(int) TO rsess_md5; \
        ALTER DEFAULT PRIVILEGES FOR ROLE pg_signal_backend REVOKE USAGE ON TYPES FROM pg_signal_backend; \
        ALTER DEFAULT PRIVILEGES FOR ROLE pg_signal_backend GRANT USAGE ON TYPES TO pg_signal_backend; \
        RESET search_path; DROP SCHEMA rsess_s CASCADE; \
        DROP ROLE rsess_md5, rsess_sysid";
    let through = pgshard::cluster::pg_env(&cl.host, cl.port, &cl.user, &cl.password, &cl.database);
    let got = psql_output(&through, script);
    let want = psql_output(&plain.pg_env(), script);
    assert_eq!(got, want);
    assert!(want.contains("SYSID can no longer be specified"), "{want}");
    assert!(want.contains("md5"), "{want}");
}
