//! Configuration of a pgshard coordinator process (`pgshard serve --config FILE`).
//!
//! The same file is written by `pgshard cluster up` for a local cluster, and by hand
//! for production, where the PostgreSQL servers already exist anywhere.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Where a PostgreSQL server is and how pgshard logs into it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ServerAddr {
    pub host: String,
    pub port: u16,
}

/// How clients authenticate to the pgshard listener.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum AuthMethod {
    /// SCRAM-SHA-256 checked against the coordinator node's `pg_authid` (the default).
    #[default]
    ScramSha256,
    /// No password at all: only when configured explicitly.
    Trust,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    /// Address the pgshard listener binds to.
    #[serde(default = "default_listen_host")]
    pub listen_host: String,
    pub listen_port: u16,
    /// Directory of a Unix-domain socket the listener also accepts clients on, named
    /// as PostgreSQL names its own (`.s.PGSQL.<listen_port>`), so that `psql -h DIR`
    /// works; the same authentication applies. None: TCP only.
    #[serde(default)]
    pub unix_socket_directory: Option<std::path::PathBuf>,
    #[serde(default)]
    pub auth: AuthMethod,
    /// The coordinator node's PostgreSQL: catalog and every non-distributed table.
    pub coordinator: ServerAddr,
    /// Database served (the same name on the coordinator node and the workers).
    pub database: String,
    /// The role pgshard itself uses on every node (a superuser).
    pub user: String,
    pub password: String,
    /// Most connections pgshard opens to one node (per pgshard process).
    #[serde(default = "default_pool_size")]
    pub max_connections_per_node: usize,
    /// Most client connections accepted at once.
    #[serde(default = "default_max_clients")]
    pub max_client_connections: usize,
    /// Threads serving clients, each with its own single-threaded runtime and its
    /// own share of the connection pools; default: one per core.
    #[serde(default)]
    pub worker_threads: Option<usize>,
    /// Defaults of the `citus.*` settings, overridable per session with SET.
    #[serde(default)]
    pub citus: CitusDefaults,
    /// Seconds between runs of prepared-transaction recovery (0 = start-up and
    /// `recover_prepared_transactions()` only).
    #[serde(default = "default_recovery_interval")]
    pub recovery_interval_secs: u64,
    /// Milliseconds between distributed deadlock checks (0 = off).
    #[serde(default = "default_deadlock_interval")]
    pub deadlock_detection_interval_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CitusDefaults {
    #[serde(default = "default_shard_count")]
    pub shard_count: u32,
    #[serde(default = "default_replication_factor")]
    pub shard_replication_factor: u32,
    #[serde(default = "default_commit_protocol")]
    pub multi_shard_commit_protocol: String,
}

impl Default for CitusDefaults {
    fn default() -> Self {
        CitusDefaults {
            shard_count: default_shard_count(),
            shard_replication_factor: default_replication_factor(),
            multi_shard_commit_protocol: default_commit_protocol(),
        }
    }
}

fn default_listen_host() -> String {
    "127.0.0.1".into()
}
fn default_pool_size() -> usize {
    32
}
fn default_max_clients() -> usize {
    2000
}
fn default_recovery_interval() -> u64 {
    30
}
fn default_deadlock_interval() -> u64 {
    1000
}
fn default_shard_count() -> u32 {
    32
}
fn default_replication_factor() -> u32 {
    1
}
fn default_commit_protocol() -> String {
    "2pc".into()
}

impl Config {
    /// How many client-serving threads (runtimes) the process runs.
    pub fn runtime_threads(&self) -> usize {
        self.worker_threads
            .unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(2)
            })
            .max(1)
    }

    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read config {}: {e}", path.display()))?;
        let cfg: Config = toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("invalid config {}: {e}", path.display()))?;
        Ok(cfg)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("config serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_minimal_config_with_defaults() {
        let cfg: Config = toml::from_str(
            r#"
            listen_port = 6432
            database = "postgres"
            user = "pgshard"
            password = "x"
            [coordinator]
            host = "10.0.0.1"
            port = 5432
            "#,
        )
        .unwrap();
        assert_eq!(cfg.auth, AuthMethod::ScramSha256);
        assert_eq!(cfg.citus.shard_count, 32);
        assert_eq!(cfg.max_connections_per_node, 32);
        let again: Config = toml::from_str(&cfg.to_toml()).unwrap();
        assert_eq!(again.coordinator, cfg.coordinator);
    }
}
