//! TLS and authentication rules, end to end with the real psql (libpq over OpenSSL):
//! the certificate `cluster up` makes is trusted with `sslmode=verify-full`, a wrong
//! host name is refused by the client, `[[hba]]` rules give the same answers (and
//! PostgreSQL's texts) as a plain PostgreSQL with the same pg_hba.conf, and
//! `node_sslmode` encrypts pgshard's own connections to a node.

mod common;

use common::serve::Serve;
use common::{cluster, plain_postgres};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Runs psql with a connection string; Ok(stdout) or Err(stderr).
fn try_psql(conninfo: &str, password: Option<&str>, sql: &str) -> Result<String, String> {
    let mut cmd = Command::new("psql");
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("PGCONNECT_TIMEOUT", "20")
        .args([
            "-X",
            "-tA",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            conninfo,
            "-c",
            sql,
        ]);
    if let Some(p) = password {
        cmd.env("PGPASSWORD", p);
    }
    let out = cmd.output().expect("running psql");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The server's messages in a libpq error (one per connection attempt), without
/// libpq's "connection to server at ... failed:" prefixes that name host and port.
fn fatal_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.split_once("FATAL:").map(|(_, m)| m.trim().to_string()))
        .collect()
}

#[test]
fn verify_full_with_the_certificate_cluster_up_made() {
    let cl = cluster();
    let cert = cl.tls_root_cert.clone().expect("cluster up turns TLS on");
    assert_eq!(cert, cl.dir.join("server.crt"));
    let key = cl.dir.join("server.key");
    let mode = std::fs::metadata(&key).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "server.key mode");
    // A second `up` keeps the certificate and says how to trust it.
    let before = std::fs::read(&cert).unwrap();
    let out = common::cluster_up(&cl.dir, cl.port);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!(
            "sslrootcert={} sslmode=verify-full",
            cert.display()
        )),
        "{said}"
    );
    assert_eq!(
        std::fs::read(&cert).unwrap(),
        before,
        "certificate made once"
    );

    let base = format!(
        "port={} user={} dbname={} sslrootcert={}",
        cl.port,
        cl.user,
        cl.database,
        cert.display()
    );
    let pw = Some(cl.password.as_str());
    // The certificate names 127.0.0.1 and localhost; libpq checks them and encrypts.
    for host in ["127.0.0.1", "localhost"] {
        let info = try_psql(
            &format!("{base} host={host} sslmode=verify-full"),
            pw,
            "\\conninfo",
        )
        .unwrap_or_else(|e| panic!("verify-full to {host}: {e}"));
        assert!(info.contains("SSL connection (protocol: TLS"), "{info}");
        let rows = try_psql(
            &format!("{base} host={host} sslmode=verify-full"),
            pw,
            "select count(*) from pg_dist_node",
        )
        .unwrap();
        assert_eq!(rows, "2");
    }
    // The same server under a name the certificate does not carry: refused by libpq.
    let err = try_psql(
        &format!("{base} host=wrong.example hostaddr=127.0.0.1 sslmode=verify-full"),
        pw,
        "select 1",
    )
    .unwrap_err();
    assert!(
        err.contains("does not match host name \"wrong.example\""),
        "{err}"
    );
    // Without TLS (no hba rules require it) the connection goes on in clear.
    let info = try_psql(
        &format!("{base} host=127.0.0.1 sslmode=disable"),
        pw,
        "\\conninfo",
    )
    .unwrap();
    assert!(!info.contains("SSL"), "{info}");
    assert!(info.contains("You are connected"), "{info}");
}

/// One authentication rule, written both for pg_hba.conf and for pgshard's config.
struct Rule(
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
    &'static str,
);

const RULES: &[Rule] = &[
    Rule("host", "all", "blocked", Some("127.0.0.1/32"), "reject"),
    // An entry for another network never applies to a loopback client.
    Rule("host", "all", "app", Some("10.0.0.0/8"), "reject"),
    Rule("hostssl", "all", "app", Some("127.0.0.1/32"), "trust"),
    Rule(
        "hostnossl",
        "all",
        "postgres",
        Some("127.0.0.0/8"),
        "scram-sha-256",
    ),
    Rule(
        "host",
        "all",
        "blocked,app,postgres",
        Some("::1/128"),
        "scram-sha-256",
    ),
    Rule("local", "all", "postgres", None, "scram-sha-256"),
];

fn pg_hba_conf() -> String {
    RULES
        .iter()
        .map(|Rule(t, db, user, addr, method)| {
            format!("{t} {db} {user} {} {method}\n", addr.unwrap_or(""))
        })
        .collect()
}

fn hba_toml() -> String {
    RULES
        .iter()
        .map(|Rule(t, db, user, addr, method)| {
            let addr = addr.map_or(String::new(), |a| format!("address = \"{a}\"\n"));
            format!("[[hba]]\ntype = \"{t}\"\ndatabase = \"{db}\"\nuser = \"{user}\"\n{addr}method = \"{method}\"\n")
        })
        .collect()
}

/// Copies the cluster's certificate and key into a server's data directory (as
/// server.crt/server.key, owned by the server's user) and turns its TLS on.
async fn enable_server_tls(data_dir: &Path, client: &tokio_postgres::Client) {
    let cl = cluster();
    let owner = std::fs::metadata(data_dir).unwrap();
    for name in ["server.crt", "server.key"] {
        let to = data_dir.join(name);
        std::fs::copy(cl.dir.join(name), &to).unwrap();
        std::os::unix::fs::chown(&to, Some(owner.uid()), Some(owner.gid())).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    for sql in ["ALTER SYSTEM SET ssl = on", "SELECT pg_reload_conf()"] {
        client.batch_execute(sql).await.unwrap();
    }
    // The reload is asynchronous: wait until new connections see it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let on: String = client.query_one("SHOW ssl", &[]).await.unwrap().get(0);
        if on == "on" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "ssl stays off in {}",
            data_dir.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const ROLES: &str = "CREATE ROLE app LOGIN PASSWORD 'app-pw'; \
                     CREATE ROLE blocked LOGIN PASSWORD 'blocked-pw'";

#[tokio::test]
async fn hba_rules_answer_as_postgresql() {
    let cl = cluster();
    let plain = plain_postgres();
    // The roles, on the coordinator node (whose pg_authid pgshard checks) and on the
    // plain PostgreSQL.
    cl.direct(cl.coordinator_port)
        .await
        .batch_execute(ROLES)
        .await
        .unwrap();
    let oracle = plain.client().await;
    oracle.batch_execute(ROLES).await.unwrap();
    enable_server_tls(&plain.node.data_dir, &oracle).await;
    std::fs::write(plain.node.data_dir.join("pg_hba.conf"), pg_hba_conf()).unwrap();
    oracle
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let hba = hba_toml();
    let serve = Serve::start("hba", |cfg| {
        #[derive(serde::Deserialize)]
        struct List {
            hba: Vec<pgshard::frontend::hba::HbaRule>,
        }
        cfg.hba = toml::from_str::<List>(&hba).unwrap().hba;
    })
    .unwrap_or_else(|log| panic!("pgshard with hba rules did not start:\n{log}"));

    let pw = cl.password.as_str();
    // (user, password, sslmode, expected outcome through both servers)
    let cases: &[(&str, Option<&str>, &str, Result<(), &str>)] = &[
        ("blocked", Some("blocked-pw"), "require", Err("pg_hba.conf rejects connection for host \"127.0.0.1\", user \"blocked\", database \"postgres\", SSL encryption")),
        ("blocked", Some("blocked-pw"), "disable", Err("pg_hba.conf rejects connection for host \"127.0.0.1\", user \"blocked\", database \"postgres\", no encryption")),
        ("app", None, "require", Ok(())),
        ("app", None, "disable", Err("no pg_hba.conf entry for host \"127.0.0.1\", user \"app\", database \"postgres\", no encryption")),
        ("postgres", Some(pw), "disable", Ok(())),
        ("postgres", Some(pw), "require", Err("no pg_hba.conf entry for host \"127.0.0.1\", user \"postgres\", database \"postgres\", SSL encryption")),
        ("postgres", Some("wrong"), "disable", Err("password authentication failed for user \"postgres\"")),
        ("nobody", None, "require", Err("no pg_hba.conf entry for host \"127.0.0.1\", user \"nobody\", database \"postgres\", SSL encryption")),
        // prefer: the TLS attempt is refused, libpq tries again in clear and is refused too.
        ("nobody", None, "prefer", Err("no pg_hba.conf entry for host \"127.0.0.1\", user \"nobody\", database \"postgres\", SSL encryption")),
    ];
    for (user, password, sslmode, want) in cases {
        let conn = |port: u16| {
            format!("host=127.0.0.1 port={port} user={user} dbname=postgres sslmode={sslmode}")
        };
        // The plain server's password for postgres is its own.
        let plain_password = if *user == "postgres" && *password == Some(pw) {
            Some(plain.password.as_str())
        } else {
            *password
        };
        // Who the session runs as on the nodes is not this test's subject.
        let through = try_psql(&conn(serve.port), *password, "select 'in'");
        let direct = try_psql(&conn(plain.port), plain_password, "select 'in'");
        let case = format!("{user} sslmode={sslmode}");
        match want {
            Ok(()) => {
                assert_eq!(through.as_deref(), Ok("in"), "{case} through pgshard");
                assert_eq!(direct.as_deref(), Ok("in"), "{case} on PostgreSQL");
            }
            Err(text) => {
                let (through, direct) = (
                    fatal_lines(&through.unwrap_err()),
                    fatal_lines(&direct.unwrap_err()),
                );
                assert_eq!(through.first().map(String::as_str), Some(*text), "{case}");
                assert_eq!(
                    through, direct,
                    "{case}: pgshard's messages vs PostgreSQL's"
                );
            }
        }
    }
    // The Unix socket is `local`: only postgres has an entry there.
    let local = |dir: &Path, port: u16, user: &str, password: &str| {
        try_psql(
            &format!(
                "host={} port={port} user={user} dbname=postgres",
                dir.display()
            ),
            Some(password),
            "select 'in'",
        )
    };
    assert_eq!(
        local(&serve.socket_dir, serve.port, "postgres", pw).as_deref(),
        Ok("in")
    );
    let through = fatal_lines(&local(&serve.socket_dir, serve.port, "app", "app-pw").unwrap_err());
    let direct =
        fatal_lines(&local(&plain.node.socket_dir, plain.port, "app", "app-pw").unwrap_err());
    assert_eq!(
        through,
        ["no pg_hba.conf entry for host \"[local]\", user \"app\", database \"postgres\", no encryption"]
    );
    assert_eq!(through, direct);

    // SQLSTATE 28000, as PostgreSQL's (tokio-postgres without TLS).
    let mut c = tokio_postgres::Config::new();
    c.host("127.0.0.1")
        .port(serve.port)
        .user("app")
        .dbname("postgres");
    let err = c
        .connect(tokio_postgres::NoTls)
        .await
        .err()
        .expect("refused");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::INVALID_AUTHORIZATION_SPECIFICATION),
        "{err}"
    );
}

#[tokio::test]
async fn node_sslmode_encrypts_pgshards_node_connections() {
    let cl = cluster();
    // The coordinator node over TCP (the cluster's config names its socket directory,
    // where TLS never applies).
    let over_tcp = |mode: pgshard::config::NodeSslMode| {
        move |cfg: &mut pgshard::config::Config| {
            cfg.coordinator.host = "127.0.0.1".into();
            cfg.node_sslmode = mode;
        }
    };
    use pgshard::config::NodeSslMode::{Disable, Prefer, Require};
    // The node has no TLS yet: require cannot start, prefer goes on in clear.
    let log = Serve::start("node-require-no-tls", over_tcp(Require))
        .err()
        .expect("node_sslmode = require against a node without TLS");
    assert!(log.contains("server does not support TLS"), "{log}");
    // What pgshard's own connection to the coordinator node says about itself: the
    // statement reaches the node unchanged on that connection.
    let ssl_of_pgshards_connection = |port: u16| {
        try_psql(
            &format!(
                "host=127.0.0.1 port={port} user={} dbname={} sslmode=disable",
                cl.user, cl.database
            ),
            Some(&cl.password),
            "select ssl from pg_stat_ssl where pid = pg_backend_pid()",
        )
        .unwrap()
    };
    let prefer = Serve::start("node-prefer-no-tls", over_tcp(Prefer)).unwrap();
    assert_eq!(ssl_of_pgshards_connection(prefer.port), "f");
    drop(prefer);

    let coordinator = cl.direct(cl.coordinator_port).await;
    enable_server_tls(&cl.dir.join("coordinator"), &coordinator).await;
    for (mode, want) in [(Require, "t"), (Prefer, "t"), (Disable, "f")] {
        let started: std::time::SystemTime = coordinator
            .query_one("SELECT now()", &[])
            .await
            .unwrap()
            .get(0);
        let serve = Serve::start(&format!("node-{mode:?}"), over_tcp(mode))
            .unwrap_or_else(|log| panic!("node_sslmode {mode:?}:\n{log}"));
        assert_eq!(ssl_of_pgshards_connection(serve.port), want, "{mode:?}");
        // Its catalog connections (tokio-postgres) follow the same mode.
        let control: Vec<bool> = coordinator
            .query(
                "SELECT s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
                 WHERE a.application_name = 'pgshard control' AND a.client_addr IS NOT NULL \
                 AND a.backend_start >= $1",
                &[&started],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(
            !control.is_empty(),
            "{mode:?}: no control connection over TCP"
        );
        assert!(
            control.iter().all(|&ssl| ssl == (want == "t")),
            "{mode:?}: control connections' ssl {control:?}"
        );
        // Routed work on the workers (over their sockets) is unaffected.
        let n = try_psql(
            &format!(
                "host=127.0.0.1 port={} user={} dbname={} sslmode=disable",
                serve.port, cl.user, cl.database
            ),
            Some(&cl.password),
            "select count(*) from pg_dist_node",
        )
        .unwrap();
        assert_eq!(n, "2");
    }
}
