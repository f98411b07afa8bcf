//! Who the bench's measured clients are and how they connect: `--client-role NAME`
//! (pgbench, sysbench and psql log into both targets as a LOGIN role of that name with
//! a password, not as the superuser) and `--client-tls` (they ask for
//! `sslmode=require`; the plain PostgreSQL then serves TLS with a certificate made as
//! `cluster up` makes pgshard's).
//!
//! The setup (loading, `create_distributed_table`, the vacuum and truncate before each
//! run) stays with the superuser `postgres`, the tables' owner, as an application's
//! schema is set up by its owner and then used by a role of its own: the role gets only
//! the privileges the workloads need ([`PRIVILEGES`]), granted on both targets once each
//! table exists.

use super::pgbench::{self, Env};
use crate::backend::NodeAddr;
use crate::cluster::{certificate, node};
use crate::config::Config;
use crate::sql::quote::{quote_ident, quote_literal};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::time::{Duration, Instant};

/// What the measured clients do to each table the workloads use, as a GRANT's
/// privilege list. pgbench reads `pgbench_branches` at start to learn the scale; the
/// other reads are the workloads' own (UPDATE ... WHERE needs SELECT too).
pub const PRIVILEGES: &[(&str, &str)] = &[
    ("pgbench_accounts", "SELECT, UPDATE"),
    ("pgbench_branches", "SELECT, UPDATE"),
    ("pgbench_tellers", "SELECT, UPDATE"),
    ("pgbench_history", "INSERT"),
    ("w2", "INSERT"),
    ("sbtest1", "INSERT"),
    ("test", "SELECT"),
    ("test_copy", "SELECT, INSERT"),
    // TPC-H (tpch/): read only.
    ("region", "SELECT"),
    ("nation", "SELECT"),
    ("supplier", "SELECT"),
    ("customer", "SELECT"),
    ("part", "SELECT"),
    ("partsupp", "SELECT"),
    ("orders", "SELECT"),
    ("lineitem", "SELECT"),
];

/// The statement granting the workloads' privileges on `table` to `role` (None: a
/// table no measured client touches).
pub fn grant_statement(table: &str, role: &str) -> Option<String> {
    let (_, privileges) = PRIVILEGES.iter().find(|(t, _)| *t == table)?;
    Some(format!(
        "GRANT {privileges} ON {} TO {}",
        quote_ident(table),
        quote_ident(role)
    ))
}

/// `env` with the libpq variable `name` set to `value` (replaced or added).
pub fn with_var(env: &Env, name: &str, value: &str) -> Env {
    let mut env: Env = env.iter().filter(|(k, _)| k != name).cloned().collect();
    env.push((name.to_string(), value.to_string()));
    env
}

/// libpq's `sslmode` for the bench's connections to a target.
pub fn sslmode(tls: bool) -> &'static str {
    if tls {
        "require"
    } else {
        "disable"
    }
}

/// The measured clients' environment: the superuser's `admin` environment (which
/// carries the sslmode) with the role's name and password.
pub fn client_env(admin: &Env, role: Option<&ClientRole>) -> Env {
    match role {
        None => admin.clone(),
        Some(r) => with_var(
            &with_var(admin, "PGUSER", &r.name),
            "PGPASSWORD",
            &r.password,
        ),
    }
}

/// How the clients connect, for the report's subtitle.
pub fn describe(unix_sockets: bool, tls: bool, role: Option<&str>) -> String {
    let transport = if unix_sockets {
        "Unix sockets"
    } else {
        "TCP (127.0.0.1)"
    };
    let tls = if tls { " with TLS" } else { "" };
    let who = match role {
        Some(r) => format!("as role {r} (not a superuser)"),
        None => "as superuser postgres".to_string(),
    };
    format!("clients over {transport}{tls}, {who}")
}

/// The clients' LOGIN role (`--client-role`): its name and a random password.
#[derive(Debug, Clone)]
pub struct ClientRole {
    pub name: String,
    pub password: String,
}

impl ClientRole {
    /// Checks the name: the bench creates the role, so it may not be the superuser the
    /// servers come with, and PostgreSQL would cut a longer name to 63 bytes.
    pub fn new(name: &str) -> Result<ClientRole> {
        if name.is_empty() || name.len() > 63 {
            bail!("--client-role: a role name of 1 to 63 bytes, not {name:?}");
        }
        if name == "postgres" || name.starts_with("pg_") {
            bail!(
                "--client-role {name}: the bench creates this role as a non-superuser; \
                 choose a name that is not postgres and does not start with pg_"
            );
        }
        Ok(ClientRole {
            name: name.to_string(),
            password: node::random_password(),
        })
    }

    /// `CREATE ROLE name LOGIN PASSWORD '...'` on the plain server and through pgshard
    /// (it lands on the coordinator node, where pgshard keeps roles), then a copy of the
    /// role on every other node of the cluster. pgshard copies a role to a worker
    /// itself when the worker refuses the role's first login there
    /// (`commands::role_sync`); the bench copies it ahead, with that same function, so
    /// that its GRANTs directly on the shards ([`ClientRole::grant`]) find it.
    pub async fn create(
        &self,
        plain: &Env,
        pgshard: &Env,
        cluster_config: &Path,
        other_nodes: &[NodeAddr],
    ) -> Result<()> {
        let create = format!(
            "CREATE ROLE {} LOGIN PASSWORD {}",
            quote_ident(&self.name),
            quote_literal(&self.password)
        );
        // The statement carries the password: errors are reported without it.
        let hide = |e: anyhow::Error| {
            anyhow::anyhow!("{}", format!("{e:#}").replace(&self.password, "(password)"))
        };
        pgbench::psql(plain, &["-c", &create])
            .await
            .map_err(hide)
            .context("creating the client role on the plain PostgreSQL")?;
        pgbench::psql(pgshard, &["-c", &create])
            .await
            .map_err(hide)
            .context("creating the client role through pgshard")?;
        let cfg = Config::load(cluster_config)?;
        for node in other_nodes {
            crate::commands::roles::sync_role_on_node(&cfg, &node.host, node.port, &self.name)
                .await
                .map_err(|e| anyhow::anyhow!("{}", e.message))
                .with_context(|| format!("copying the client role to node {node}"))?;
        }
        Ok(())
    }

    /// Grants the workloads' privileges on `table` ([`PRIVILEGES`]) to the role: on the
    /// plain server, through pgshard, and directly on every shard of `table` on every
    /// node (`node_envs`: the cluster's servers as superuser, the coordinator node
    /// first): pgshard does not propagate GRANT on a distributed table to its shards
    /// yet, and a shard query runs as the client's role on the worker. Where pgshard
    /// refuses the GRANT on a distributed table as not supported (0A000), the
    /// coordinator node's table gets it directly as well.
    pub async fn grant(
        &self,
        table: &str,
        plain: &Env,
        pgshard: &Env,
        node_envs: &[Env],
    ) -> Result<()> {
        let Some(grant) = grant_statement(table, &self.name) else {
            return Ok(());
        };
        pgbench::psql(plain, &["-c", &grant])
            .await
            .with_context(|| format!("{grant} on the plain PostgreSQL"))?;
        if let Err(e) = pgbench::psql(pgshard, &["-c", &grant]).await {
            let refused = format!("{e:#}").contains("not support");
            match node_envs.first() {
                Some(coordinator) if refused => pgbench::psql(coordinator, &["-c", &grant])
                    .await
                    .with_context(|| format!("{grant} on the coordinator node"))
                    .map(|_| ())?,
                _ => return Err(e).with_context(|| format!("{grant} through pgshard")),
            }
        }
        let (_, privileges) = PRIVILEGES
            .iter()
            .find(|(t, _)| *t == table)
            .expect("grant_statement found it");
        for env in node_envs {
            let shards = super::shard_tables(env, table).await?;
            if shards.is_empty() {
                continue;
            }
            let on_shards = format!(
                "GRANT {privileges} ON {shards} TO {}",
                quote_ident(&self.name)
            );
            pgbench::psql(env, &["-c", &on_shards])
                .await
                .with_context(|| format!("granting {privileges} on the shards of {table}"))?;
        }
        Ok(())
    }
}

/// Turns TLS on in the plain PostgreSQL `plain` (for `--client-tls`): a self-signed
/// certificate made as `cluster up` makes pgshard's (`cluster::certificate`), written
/// into its data directory under PostgreSQL's default names (`server.crt`,
/// `server.key`) and given to the server's OS account, then `ALTER SYSTEM SET ssl = on`
/// and a reload; waits until a `sslmode=require` connection succeeds.
pub async fn serve_tls(plain: &node::Node, admin: &Env) -> Result<()> {
    let dir = plain.data_dir.clone();
    tokio::task::spawn_blocking(move || -> Result<()> {
        certificate::ensure(&dir, "127.0.0.1", "plain PostgreSQL (pgshard bench)")?;
        if let Some(a) = node::server_account()? {
            let (cert, key) = certificate::files(&dir);
            for f in [cert, key] {
                std::os::unix::fs::chown(&f, Some(a.uid), Some(a.gid))
                    .with_context(|| format!("chown {} to postgres", f.display()))?;
            }
        }
        Ok(())
    })
    .await??;
    pgbench::psql(
        admin,
        &[
            "-c",
            "ALTER SYSTEM SET ssl = on",
            "-c",
            "SELECT pg_reload_conf()",
        ],
    )
    .await
    .context("turning TLS on in the plain PostgreSQL")?;
    let tls = with_var(admin, "PGSSLMODE", "require");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match pgbench::psql(&tls, &["-c", "select 1"]).await {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(e).context("the plain PostgreSQL does not accept TLS after reload")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// What a measured client's connection is: the user it runs as and whether it is
/// encrypted, as psql sees them (`current_user`, `\conninfo`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Seen {
    pub current_user: String,
    pub tls: bool,
}

/// Connects with the clients' environment and reads [`Seen`]; fails unless it is what
/// the options asked for (a bench as the superuser or in clear when a role or TLS was
/// asked must not be reported as measured).
pub async fn check(env: &Env, role: Option<&ClientRole>, tls: bool) -> Result<Seen> {
    let out = pgbench::psql(env, &["-c", "select current_user", "-c", "\\conninfo"]).await?;
    let seen = Seen {
        current_user: out.lines().next().unwrap_or("").trim().to_string(),
        tls: out.contains("SSL connection"),
    };
    let want_user = role.map_or("postgres", |r| r.name.as_str());
    if seen.current_user != want_user || seen.tls != tls {
        bail!(
            "a client connection runs as {:?} {} TLS, where {want_user:?} {} TLS was asked",
            seen.current_user,
            if seen.tls { "with" } else { "without" },
            if tls { "with" } else { "without" },
        );
    }
    Ok(seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Env {
        [
            ("PGHOST", "127.0.0.1"),
            ("PGUSER", "postgres"),
            ("PGPASSWORD", "secret"),
            ("PGSSLMODE", "require"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn get<'a>(env: &'a Env, k: &str) -> Vec<&'a str> {
        env.iter()
            .filter(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    #[test]
    fn the_client_env_swaps_the_user_and_keeps_the_rest() {
        let role = ClientRole {
            name: "app".into(),
            password: "pw".into(),
        };
        let c = client_env(&env(), Some(&role));
        assert_eq!(get(&c, "PGUSER"), ["app"]);
        assert_eq!(get(&c, "PGPASSWORD"), ["pw"]);
        assert_eq!(get(&c, "PGSSLMODE"), ["require"]);
        assert_eq!(get(&c, "PGHOST"), ["127.0.0.1"]);
        assert_eq!(client_env(&env(), None), env());
        assert_eq!(
            get(&with_var(&env(), "PGSSLMODE", "disable"), "PGSSLMODE"),
            ["disable"]
        );
    }

    #[test]
    fn grants_are_quoted_and_only_for_the_workloads_tables() {
        assert_eq!(
            grant_statement("pgbench_accounts", "app").as_deref(),
            Some("GRANT SELECT, UPDATE ON \"pgbench_accounts\" TO \"app\"")
        );
        assert_eq!(
            grant_statement("test_copy", "Bench \"x\"").as_deref(),
            Some("GRANT SELECT, INSERT ON \"test_copy\" TO \"Bench \"\"x\"\"\"")
        );
        assert_eq!(grant_statement("pg_authid", "app"), None);
    }

    #[test]
    fn role_names_the_bench_may_create() {
        assert!(ClientRole::new("bench_client").is_ok());
        assert!(ClientRole::new("postgres").is_err());
        assert!(ClientRole::new("pg_monitor").is_err());
        assert!(ClientRole::new("").is_err());
        assert!(ClientRole::new(&"r".repeat(64)).is_err());
        let r = ClientRole::new("app").unwrap();
        assert_eq!(r.password.len(), 24);
    }

    #[test]
    fn the_subtitle_says_how_clients_connect() {
        assert_eq!(
            describe(false, false, None),
            "clients over TCP (127.0.0.1), as superuser postgres"
        );
        assert_eq!(
            describe(false, true, Some("app")),
            "clients over TCP (127.0.0.1) with TLS, as role app (not a superuser)"
        );
        assert_eq!(
            describe(true, false, Some("app")),
            "clients over Unix sockets, as role app (not a superuser)"
        );
    }
}
