//! Where a session's `citus.*` settings start, in PostgreSQL's order of sources:
//! the built-in default, pgshard's configuration (`[citus]`), the coordinator node's
//! configuration files (`postgresql.conf`, `ALTER SYSTEM`), `ALTER DATABASE ... SET`,
//! `ALTER ROLE ... SET`, `ALTER ROLE ... IN DATABASE ... SET`, then the client's
//! startup `options`. The node's files and `pg_db_role_setting` are read when pgshard
//! starts and again after each `ALTER SYSTEM` / `ALTER DATABASE` / `ALTER ROLE` of a
//! `citus.*` setting run through this pgshard process; a session takes the values
//! when it starts (PostgreSQL: ALTER SYSTEM after `pg_reload_conf()`).

use super::{find, SETTINGS};
use crate::backend::conn::BackendConn;
use crate::config::Config;
use crate::error::{PgError, PgResult};
use std::sync::RwLock;

/// One `pg_db_role_setting` entry's `citus.*` values.
#[derive(Debug, Clone)]
struct DbRoleValues {
    database: Option<String>,
    role: Option<String>,
    values: Vec<(&'static str, String)>,
}

/// The process-wide starting values.
#[derive(Debug)]
pub struct Defaults {
    /// Built-in defaults with pgshard's configuration applied, in `SETTINGS` order.
    configured: Vec<String>,
    /// The coordinator node's configuration files, over `configured`.
    files: RwLock<Vec<(&'static str, String)>>,
    db_role: RwLock<Vec<DbRoleValues>>,
    /// An ALTER ... SET of a `citus.*` setting committed since the last `load`: the
    /// next session to start reads them again (`reload_if_stale`).
    stale: std::sync::atomic::AtomicBool,
}

impl Defaults {
    /// The defaults of pgshard's configuration (a bad value there is an error).
    pub fn new(cfg: &Config) -> Result<Defaults, PgError> {
        let mut configured: Vec<String> = SETTINGS.iter().map(|s| s.default.to_string()).collect();
        let mut set = |name: &str, value: &str| -> Result<(), PgError> {
            let full = if super::is_citus_name(name) {
                name.to_string()
            } else {
                format!("citus.{name}")
            };
            let i = SETTINGS
                .iter()
                .position(|s| s.name.eq_ignore_ascii_case(&full))
                .ok_or_else(|| super::unknown_for_set(&full))?;
            configured[i] = SETTINGS[i].check(value)?;
            Ok(())
        };
        set("shard_count", &cfg.citus.shard_count.to_string())?;
        set(
            "shard_replication_factor",
            &cfg.citus.shard_replication_factor.to_string(),
        )?;
        set(
            "multi_shard_commit_protocol",
            &cfg.citus.multi_shard_commit_protocol,
        )?;
        set(
            "max_adaptive_executor_pool_size",
            &cfg.max_connections_per_node.max(1).to_string(),
        )?;
        for (name, value) in &cfg.citus.settings {
            set(name, value)?;
        }
        Ok(Defaults {
            configured,
            files: RwLock::new(Vec::new()),
            db_role: RwLock::new(Vec::new()),
            stale: Default::default(),
        })
    }

    /// Reads the coordinator node's configuration files and per-database / per-role
    /// settings (`conn`: a superuser's). A value the node holds that pgshard would
    /// refuse is skipped with a warning.
    pub async fn load(&self, conn: &mut BackendConn) -> PgResult<()> {
        // pg_file_settings lists postgresql.conf then postgresql.auto.conf: the last
        // entry of a name is the one in force.
        let files = conn
            .simple_rows(
                "SELECT name, setting FROM pg_catalog.pg_file_settings \
                 WHERE name LIKE 'citus.%' AND error IS NULL ORDER BY seqno",
            )
            .await;
        let mut file_values: Vec<(&'static str, String)> = Vec::new();
        match files {
            Ok(rows) => {
                for row in rows {
                    if let [Some(name), Some(value)] = row.as_slice() {
                        if let Some(v) = checked(name, value) {
                            file_values.retain(|(n, _)| *n != v.0);
                            file_values.push(v);
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!("cannot read the coordinator node's citus.* file settings: {e}")
            }
        }
        let rows = conn
            .simple_rows(
                "SELECT d.datname, r.rolname, c FROM pg_catalog.pg_db_role_setting s \
                 LEFT JOIN pg_catalog.pg_database d ON d.oid = s.setdatabase \
                 LEFT JOIN pg_catalog.pg_roles r ON r.oid = s.setrole, \
                 LATERAL pg_catalog.unnest(s.setconfig) c \
                 WHERE c LIKE 'citus.%'",
            )
            .await?;
        let mut db_role: Vec<DbRoleValues> = Vec::new();
        for row in rows {
            let [database, role, Some(entry)] = row.as_slice() else {
                continue;
            };
            let Some((name, value)) = entry.split_once('=') else {
                continue;
            };
            let Some(v) = checked(name, value) else {
                continue;
            };
            match db_role
                .iter_mut()
                .find(|e| e.database == *database && e.role == *role)
            {
                Some(e) => e.values.push(v),
                None => db_role.push(DbRoleValues {
                    database: database.clone(),
                    role: role.clone(),
                    values: vec![v],
                }),
            }
        }
        *self.files.write().unwrap() = file_values;
        *self.db_role.write().unwrap() = db_role;
        Ok(())
    }

    /// A transaction block that stored `citus.*` settings committed: sessions starting
    /// from now read them again.
    pub fn mark_stale(&self) {
        self.stale.store(true, std::sync::atomic::Ordering::Release);
    }

    pub fn is_stale(&self) -> bool {
        self.stale.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Reads the node's values again if a block stored some since (`mark_stale`).
    pub async fn reload_if_stale(&self, conn: &mut BackendConn) -> PgResult<()> {
        if self.stale.swap(false, std::sync::atomic::Ordering::AcqRel) {
            if let Err(e) = self.load(conn).await {
                self.mark_stale();
                return Err(e);
            }
        }
        Ok(())
    }

    /// The values a session of `role` in `database` starts with, in `SETTINGS` order,
    /// before the client's own `options`.
    pub fn session_start(&self, database: &str, role: &str) -> Vec<String> {
        let mut values = self.configured.clone();
        let mut apply = |name: &str, value: &str| {
            if let Some(i) = SETTINGS.iter().position(|s| s.name == name) {
                values[i] = value.to_string();
            }
        };
        for (name, value) in self.files.read().unwrap().iter() {
            apply(name, value);
        }
        let db_role = self.db_role.read().unwrap();
        // PostgreSQL's order: every role in every database (ALTER ROLE ALL), database,
        // role, then role in database.
        for want in [(false, false), (true, false), (false, true), (true, true)] {
            for e in db_role.iter() {
                let matches = e.database.is_some() == want.0
                    && e.role.is_some() == want.1
                    && e.database.as_deref().map_or(true, |d| d == database)
                    && e.role.as_deref().map_or(true, |r| r == role);
                if matches {
                    for (name, value) in &e.values {
                        apply(name, value);
                    }
                }
            }
        }
        values
    }
}

/// A node's `citus.*` entry as pgshard's setting and value, if pgshard takes it.
fn checked(name: &str, value: &str) -> Option<(&'static str, String)> {
    let Some(setting) = find(name) else {
        tracing::warn!("the coordinator node sets unknown setting {name}: ignored");
        return None;
    };
    match setting.check(value) {
        Ok(v) => Some((setting.name, v)),
        Err(e) => {
            tracing::warn!("the coordinator node's {name}: {}: ignored", e.message);
            None
        }
    }
}
