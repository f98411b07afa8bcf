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
    /// Spelled as in pg_hba.conf; `scram-sha256`, written by earlier versions, is read too.
    #[default]
    #[serde(rename = "scram-sha-256", alias = "scram-sha256")]
    ScramSha256,
    /// No password at all: only when configured explicitly.
    Trust,
}

/// TLS towards the nodes, as libpq's `sslmode` of the same names. `require` encrypts
/// without checking the node's certificate (libpq's `require` does not check it either).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum NodeSslMode {
    /// Plain connections (the default).
    #[default]
    Disable,
    /// TLS when the node offers it, plain otherwise.
    Prefer,
    /// TLS or no connection.
    Require,
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
    /// How clients authenticate when `hba` is empty: every connection alike.
    #[serde(default)]
    pub auth: AuthMethod,
    /// Authentication rules as PostgreSQL's pg_hba.conf (`[[hba]]` entries, first match
    /// wins, no match refused; see `frontend::hba`). Empty: `auth` everywhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hba: Vec<crate::frontend::hba::HbaRule>,
    /// TLS for clients over TCP: SSLRequest is answered 'S' (never on the Unix socket,
    /// as PostgreSQL). Requiring it is an `hba` list of `hostssl` entries.
    #[serde(default)]
    pub ssl: bool,
    /// PEM certificate (chain) and private key of the listener; relative paths are
    /// taken from the config file's directory. Both are needed when `ssl` is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl_cert_file: Option<std::path::PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl_key_file: Option<std::path::PathBuf>,
    /// TLS on pgshard's own TCP connections to the nodes (Unix sockets stay plain).
    #[serde(default)]
    pub node_sslmode: NodeSslMode,
    /// The coordinator node's PostgreSQL: catalog and every non-distributed table.
    pub coordinator: ServerAddr,
    /// Streaming standbys of the coordinator node, in order of preference (the
    /// synchronous one first; `cluster up --standbys N` writes them). When the
    /// coordinator node stays unreachable for `failover_after_ms`, pgshard follows the
    /// one already promoted, or promotes one (`failover/coordinator.rs`). Empty: the
    /// coordinator node does not fail over.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub coordinator_standbys: Vec<ServerAddr>,
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
    /// Milliseconds a statement waits on a node that sends nothing before pgshard
    /// checks the node with a new connection; when that gets no answer within the same
    /// time either, the node is unresponsive and the statement fails (08006). A node
    /// that answers is running a long statement, which is left to run
    /// (`backend::health`). 0: never (a statement waits on a silent node for good).
    #[serde(default = "default_node_timeout")]
    pub node_timeout_ms: u64,
    /// `host:port` of the Prometheus metrics endpoint (`GET /metrics`, `metrics`);
    /// None: no endpoint.
    #[serde(default)]
    pub metrics_listen: Option<String>,
    /// Most milliseconds opening a node connection may take (connect, startup,
    /// authentication).
    #[serde(default = "default_node_connect_timeout")]
    pub node_connect_timeout_ms: u64,
    /// TCP keepalives of node connections: seconds idle before the first probe,
    /// seconds between probes, probes unanswered before the connection is dead.
    #[serde(default = "default_keepalive_idle")]
    pub node_keepalive_idle_secs: u64,
    #[serde(default = "default_keepalive_interval")]
    pub node_keepalive_interval_secs: u64,
    #[serde(default = "default_keepalive_count")]
    pub node_keepalive_count: u32,
    /// Automatic failover of worker primaries that have a standby (`noderole =
    /// 'secondary'` in their group): health checks, promotion, queries held meanwhile
    /// (`failover/`). Nothing happens for groups without a secondary.
    #[serde(default = "default_failover")]
    pub failover: bool,
    /// Milliseconds between health checks of every primary (connect + `SELECT 1`);
    /// a check answered later than twice this fails.
    #[serde(default = "default_health_check_interval")]
    pub health_check_interval_ms: u64,
    /// Milliseconds a primary must stay unreachable before its standby is promoted.
    #[serde(default = "default_failover_after")]
    pub failover_after_ms: u64,
    /// Most milliseconds a new statement for a node being failed over waits for the
    /// new primary before failing (08006).
    #[serde(default = "default_failover_hold")]
    pub failover_hold_ms: u64,
}

pub const DEFAULT_NODE_TIMEOUT_MS: u64 = 10_000;
pub const DEFAULT_NODE_CONNECT_TIMEOUT_MS: u64 = 10_000;
pub const DEFAULT_KEEPALIVE_IDLE_SECS: u64 = 10;
pub const DEFAULT_KEEPALIVE_INTERVAL_SECS: u64 = 5;
pub const DEFAULT_KEEPALIVE_COUNT: u32 = 3;

fn default_node_timeout() -> u64 {
    DEFAULT_NODE_TIMEOUT_MS
}
fn default_node_connect_timeout() -> u64 {
    DEFAULT_NODE_CONNECT_TIMEOUT_MS
}
fn default_keepalive_idle() -> u64 {
    DEFAULT_KEEPALIVE_IDLE_SECS
}
fn default_keepalive_interval() -> u64 {
    DEFAULT_KEEPALIVE_INTERVAL_SECS
}
fn default_keepalive_count() -> u32 {
    DEFAULT_KEEPALIVE_COUNT
}
fn default_failover() -> bool {
    true
}
fn default_health_check_interval() -> u64 {
    500
}
fn default_failover_after() -> u64 {
    2_000
}
fn default_failover_hold() -> u64 {
    10_000
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CitusDefaults {
    #[serde(default = "default_shard_count")]
    pub shard_count: u32,
    #[serde(default = "default_replication_factor")]
    pub shard_replication_factor: u32,
    #[serde(default = "default_commit_protocol")]
    pub multi_shard_commit_protocol: String,
    /// Defaults of any other `citus.*` setting (`citus_settings::SETTINGS`), by name
    /// with or without the `citus.` prefix, as the setting's value is written in SET.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub settings: std::collections::BTreeMap<String, String>,
}

impl Default for CitusDefaults {
    fn default() -> Self {
        CitusDefaults {
            shard_count: default_shard_count(),
            shard_replication_factor: default_replication_factor(),
            multi_shard_commit_protocol: default_commit_protocol(),
            settings: Default::default(),
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
        let mut cfg: Config = toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("invalid config {}: {e}", path.display()))?;
        cfg.check()
            .map_err(|e| anyhow::anyhow!("invalid config {}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        for file in [&mut cfg.ssl_cert_file, &mut cfg.ssl_key_file]
            .into_iter()
            .flatten()
        {
            if file.is_relative() {
                *file = base.join(&*file);
            }
        }
        Ok(cfg)
    }

    /// What the types cannot say: TLS files when `ssl` is on, addresses of hba entries.
    pub fn check(&self) -> Result<(), String> {
        if self.ssl && (self.ssl_cert_file.is_none() || self.ssl_key_file.is_none()) {
            return Err("ssl = true needs ssl_cert_file and ssl_key_file".into());
        }
        for (i, rule) in self.hba.iter().enumerate() {
            rule.check()
                .map_err(|e| format!("hba entry {}: {e}", i + 1))?;
        }
        Ok(())
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
        assert!(cfg.to_toml().contains("auth = \"scram-sha-256\""));
        // The spelling earlier versions wrote into pgshard.toml still reads.
        let old = cfg.to_toml().replace("scram-sha-256", "scram-sha256");
        assert_eq!(
            toml::from_str::<Config>(&old).unwrap().auth,
            AuthMethod::ScramSha256
        );
        assert!(cfg.hba.is_empty() && !cfg.ssl);
        assert_eq!(cfg.node_sslmode, NodeSslMode::Disable);
        assert_eq!(cfg.citus.shard_count, 32);
        assert_eq!(cfg.max_connections_per_node, 32);
        assert_eq!(cfg.node_timeout_ms, 10_000);
        assert!(cfg.failover);
        assert_eq!(
            (
                cfg.health_check_interval_ms,
                cfg.failover_after_ms,
                cfg.failover_hold_ms
            ),
            (500, 2_000, 10_000)
        );
        assert_eq!(cfg.node_keepalive_count, 3);
        assert!(cfg.coordinator_standbys.is_empty());
        let again: Config = toml::from_str(&cfg.to_toml()).unwrap();
        assert_eq!(again.coordinator, cfg.coordinator);
    }

    #[test]
    fn tls_and_hba_settings_round_trip_and_are_checked() {
        let text = r#"
            listen_port = 6432
            database = "postgres"
            user = "pgshard"
            password = "x"
            ssl = true
            ssl_cert_file = "server.crt"
            ssl_key_file = "/etc/pgshard/server.key"
            node_sslmode = "require"
            [coordinator]
            host = "10.0.0.1"
            port = 5432
            [[hba]]
            type = "hostssl"
            database = "all"
            user = "all"
            address = "0.0.0.0/0"
            method = "scram-sha-256"
        "#;
        let dir = std::env::temp_dir().join(format!("pgshard-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pgshard.toml");
        std::fs::write(&file, text).unwrap();
        let cfg = Config::load(&file).unwrap();
        assert_eq!(
            cfg.ssl_cert_file.as_deref(),
            Some(dir.join("server.crt").as_path())
        );
        assert_eq!(
            cfg.ssl_key_file.as_deref(),
            Some(Path::new("/etc/pgshard/server.key"))
        );
        assert_eq!(cfg.node_sslmode, NodeSslMode::Require);
        let again: Config = toml::from_str(&cfg.to_toml()).unwrap();
        assert_eq!(again.hba, cfg.hba);
        // ssl without its files, and a host entry without an address, are refused.
        std::fs::write(&file, text.replace("ssl_cert_file = \"server.crt\"", "")).unwrap();
        assert!(Config::load(&file)
            .unwrap_err()
            .to_string()
            .contains("ssl_cert_file"));
        std::fs::write(&file, text.replace("address = \"0.0.0.0/0\"", "")).unwrap();
        assert!(Config::load(&file)
            .unwrap_err()
            .to_string()
            .contains("hba entry 1"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
