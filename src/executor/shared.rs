//! State shared by every session of one pgshard process. Nothing here outlives the
//! process except through the catalog, so several pgshard processes can serve one
//! cluster side by side.

use super::statements::StatementRegistry;
use crate::backend::{Credentials, NodeAddr, Pools};
use crate::catalog::cache::CatalogCache;
use crate::config::Config;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Backends a session is using right now, for CancelRequest.
pub type RunningBackends = Arc<Mutex<Vec<(NodeAddr, i32, i32)>>>;

/// The session's batch queued on a pipelined connection right now, if any.
pub type PipelinedBatch = Arc<Mutex<Option<(Arc<crate::backend::mux::Mux>, u64)>>>;

/// What a CancelRequest with a session's key reaches.
#[derive(Clone, Default)]
pub struct CancelTargets {
    pub backends: RunningBackends,
    pub pipelined: PipelinedBatch,
    /// What the session is doing, for `citus_stat_activity` (`stats::activity`).
    pub activity: crate::stats::activity::SessionActivity,
}

pub struct Shared {
    pub cfg: Arc<Config>,
    pub catalog: Arc<CatalogCache>,
    pub pools: Pools,
    pub coordinator: NodeAddr,
    pub statements: StatementRegistry,
    /// (process id, secret key) given to a client -> what its session runs on: the
    /// process's registry of client sessions.
    pub cancel_keys: Mutex<HashMap<(i32, i32), CancelTargets>>,
    /// ParameterStatus values reported to clients at startup (the coordinator node's).
    pub server_params: Vec<(String, String)>,
    /// Function name -> what the coordinator node's functions of that name are (None:
    /// it has none) and when that was read: entries older than `FUNCTION_KINDS_TTL`
    /// are read again, and function DDL through pgshard clears them all.
    pub function_kinds: Mutex<HashMap<String, (Option<FunctionKind>, std::time::Instant)>>,
    /// Random id of this pgshard process, part of its 2PC transaction names.
    pub instance_id: String,
    /// Numbers this process's distributed transactions (unique within the process).
    pub next_transaction: std::sync::atomic::AtomicU64,
    /// Where 2PC decision records are written (group commit, `transaction::decision`).
    pub decisions: crate::transaction::decision::Target,
    /// TLS for clients (`ssl = true`), from the config's certificate and key.
    pub client_tls: Option<crate::frontend::tls::TlsAcceptor>,
    /// Where sessions' `citus.*` settings start (`citus_settings::defaults`).
    pub citus_defaults: crate::citus_settings::defaults::Defaults,
}

/// What the functions of one name are, over all their overloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionKind {
    /// Some overload is an aggregate or window function.
    pub aggregate: bool,
    /// Every overload is IMMUTABLE (gives the same result on every node).
    pub immutable: bool,
    /// Some overload is not built into PostgreSQL (its oid is at or above
    /// FirstNormalObjectId): its body is opaque to pgshard.
    pub user_defined: bool,
    /// Some overload is VOLATILE.
    pub volatile: bool,
    /// Some overload returns a set.
    pub set_returning: bool,
}

/// How long `Shared::function_kinds` trusts what it read (functions created or
/// replaced outside pgshard are seen after this long at most).
pub const FUNCTION_KINDS_TTL: std::time::Duration = std::time::Duration::from_secs(5);

impl Shared {
    pub async fn new(
        cfg: Arc<Config>,
        catalog: Arc<CatalogCache>,
    ) -> Result<Arc<Shared>, crate::error::PgError> {
        let client_tls = match (cfg.ssl, &cfg.ssl_cert_file, &cfg.ssl_key_file) {
            (true, Some(cert), Some(key)) => Some(
                crate::frontend::tls::acceptor(cert, key)
                    .map_err(crate::error::PgError::internal)?,
            ),
            _ => None,
        };
        let creds = Credentials::with_password(&cfg.user, &cfg.password, &cfg.database);
        let instance_id = crate::transaction::instance_id().to_string();
        let pools = Pools::new(
            creds,
            cfg.max_connections_per_node,
            cfg.runtime_threads(),
            format!("pgshard {instance_id}"),
        );
        let coordinator = NodeAddr {
            host: cfg.coordinator.host.clone(),
            port: cfg.coordinator.port,
        };
        let citus_defaults = crate::citus_settings::defaults::Defaults::new(&cfg)?;
        let mut conn = pools.node(&coordinator).acquire().await?;
        citus_defaults.load(&mut conn).await?;
        let server_params = conn
            .parameters
            .iter()
            .filter(|(k, _)| {
                k != "application_name" && k != "session_authorization" && k != "is_superuser"
            })
            .cloned()
            .collect();
        drop(conn);
        let decisions = crate::transaction::decision::Target {
            coordinator: coordinator.clone(),
            creds: Arc::new(pools.credentials().clone()),
            application_name: format!("pgshard {instance_id} decisions"),
        };
        Ok(Arc::new(Shared {
            cfg,
            catalog,
            pools,
            coordinator,
            statements: StatementRegistry::default(),
            cancel_keys: Mutex::new(HashMap::new()),
            server_params,
            function_kinds: Mutex::new(HashMap::new()),
            instance_id,
            next_transaction: std::sync::atomic::AtomicU64::new(1),
            decisions,
            client_tls,
            citus_defaults,
        }))
    }
}
