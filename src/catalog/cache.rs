//! The per-process catalog cache shared by all sessions.
//!
//! `snapshot()` hands out the current `Arc<Catalog>` (a read-lock and a clone).
//! Changes made through any pgshard process bump `pgshard_catalog_version` and
//! `NOTIFY pgshard_catalog` inside their catalog transaction ([`bump_version`]); a
//! background task LISTENs on its own connection and reloads on every notification,
//! reconnecting when that connection drops, and also compares the stored version every
//! few seconds as a safety net against lost notifications.
//!
//! The same task follows the coordinator node's relations that carry a distributed
//! table's name (any schema, not temporary): every [`RELATIONS_POLL_INTERVAL`] it reads
//! a signature of them (OID, name, schema, the schema's ACL) and, when it changed
//! (another session created, renamed, moved or dropped one), raises
//! [`CatalogCache::relation_generation`], which drops every session's resolved table names.
//! It does the same for views (`catalog::views`), and keeps the list of the views that
//! read distributed tables ([`CatalogCache::distributed_views`]).

use super::{load, schema, seen, views, Catalog};
use crate::backend::control;
use crate::config::Config;
use crate::error::PgError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;
use tokio_postgres::{Client, GenericClient};

/// The NOTIFY channel announcing catalog changes.
pub const CHANNEL: &str = "pgshard_catalog";
/// Raises the catalog version, in the transaction that changes the catalog (alone where
/// NOTIFY cannot be part of it: a prepared transaction).
pub const RAISE_VERSION: &str =
    "UPDATE pg_catalog.pgshard_catalog_version SET version = version + 1";
/// `RAISE_VERSION` as any role may run it: DDL inside a client's block runs on the
/// client's own connections, as the client (a function of the catalog's owner).
pub const RAISE_VERSION_AS_CLIENT: &str = "SELECT pg_catalog.pgshard_raise_catalog_version()";
/// How often the background task compares the stored version with the snapshot's.
const VERSION_CHECK_INTERVAL: Duration = Duration::from_secs(3);
/// How often the background task reads the relations' signature: at most this long
/// after another session's DDL commits, a session may still use its old answer.
const RELATIONS_POLL_INTERVAL: Duration = Duration::from_millis(200);
/// The signature of every relation that is not temporary and carries one of the names
/// `$1`: what an unqualified name resolves to can only change with it (or with a
/// session's own path, role and temporary tables, which the session follows itself).
const RELATIONS_SIGNATURE: &str = "SELECT count(*)::int8, \
     coalesce(sum(pg_catalog.hashtext(c.oid::text || '/' || c.relname || '/' || n.nspname \
       || '/' || coalesce(n.nspacl::text, ''))::int8), 0)::int8 \
     FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
     WHERE c.relname = ANY($1::pg_catalog.name[]) AND c.relpersistence <> 't'";
/// Pause before reconnecting the listener after its connection failed.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

pub struct CatalogCache {
    config: Arc<Config>,
    current: RwLock<Arc<Catalog>>,
    /// The connection loads go through (reconnected on demand); the mutex also
    /// serialises reloads so that snapshots are installed in order.
    loader: tokio::sync::Mutex<Option<Client>>,
    /// Raised each time the signature of the relations named like distributed tables
    /// is seen to have changed (and when the listener reconnects).
    relations: AtomicU64,
    /// The views reading distributed tables (schema, name), as last listed.
    views: RwLock<Arc<Vec<(String, String)>>>,
    /// The connection that waits for the other pgshard processes after a change
    /// (`seen`): not the loader, which their changes' reloads need meanwhile.
    waiter: tokio::sync::Mutex<Option<Client>>,
}

impl CatalogCache {
    /// Creates the catalog schema if needed, loads it, and starts the listener task.
    pub async fn start(config: Arc<Config>) -> Result<Arc<CatalogCache>, PgError> {
        let client = control::connect_coordinator(&config).await?;
        schema::ensure_schema(&client).await?;
        let catalog = load::load(&client).await?;
        let views = views::distributed_views(&client).await?;
        if let Err(e) = seen::advertise(&client, catalog.version).await {
            tracing::warn!("{e}");
        }
        let cache = Arc::new(CatalogCache {
            config,
            current: RwLock::new(Arc::new(catalog)),
            loader: tokio::sync::Mutex::new(Some(client)),
            relations: AtomicU64::new(0),
            views: RwLock::new(Arc::new(views)),
            waiter: tokio::sync::Mutex::new(None),
        });
        tokio::spawn(listen_loop(Arc::downgrade(&cache)));
        Ok(cache)
    }

    /// A cache holding a fixed catalog, without any connection or listener (for
    /// tests of code that only reads snapshots). `reload` fails on it.
    pub fn fixed(config: Arc<Config>, catalog: Catalog) -> Arc<CatalogCache> {
        Arc::new(CatalogCache {
            config,
            current: RwLock::new(Arc::new(catalog)),
            loader: tokio::sync::Mutex::new(None),
            relations: AtomicU64::new(0),
            views: RwLock::new(Arc::new(Vec::new())),
            waiter: tokio::sync::Mutex::new(None),
        })
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Catalog> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How many times relations were created, renamed, moved or dropped on the
    /// coordinator node, as far as this process heard.
    pub fn relation_generation(&self) -> u64 {
        self.relations.load(Ordering::Relaxed)
    }

    /// The views reading distributed tables (schema, name), as last listed: the
    /// names a session looks up as views.
    pub fn distributed_views(&self) -> Arc<Vec<(String, String)>> {
        self.views.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn relations_changed(&self) {
        self.relations.fetch_add(1, Ordering::Relaxed);
    }

    pub fn config(&self) -> &Arc<Config> {
        &self.config
    }

    /// Reloads the catalog after a change made through this process, and waits
    /// (bounded) until every other live pgshard process has loaded it too (`seen`); a
    /// failure is logged and the old snapshot kept.
    pub async fn reload(&self) {
        self.reload_quietly().await;
        let version = self.snapshot().version;
        let mut waiter = self.waiter.lock().await;
        if waiter.as_ref().map_or(true, |c| c.is_closed()) {
            match control::connect_coordinator(&self.config).await {
                Ok(c) => *waiter = Some(c),
                Err(e) => {
                    tracing::warn!("cannot wait for the other pgshard processes: {e}");
                    return;
                }
            }
        }
        let client = waiter.as_ref().expect("connected above");
        if let Err(e) = seen::wait_for_others(client, version).await {
            tracing::warn!("{e}");
            *waiter = None;
        }
    }

    /// Reloads the catalog now (on another process's change); a failure is logged and
    /// the old snapshot kept.
    async fn reload_quietly(&self) {
        if let Err(e) = self.try_reload().await {
            tracing::warn!("catalog reload failed: {e}");
        }
    }

    /// Reloads the catalog now, reporting failure.
    pub async fn try_reload(&self) -> Result<(), PgError> {
        let mut loader = self.loader.lock().await;
        if loader.as_ref().map_or(true, |c| c.is_closed()) {
            *loader = Some(control::connect_coordinator(&self.config).await?);
        }
        let client = loader.as_ref().expect("connected above");
        match load::load(client).await {
            Ok(catalog) => {
                let version = catalog.version;
                self.install(catalog);
                if let Err(e) = seen::advertise(client, version).await {
                    tracing::debug!("{e}");
                }
                Ok(())
            }
            Err(e) => {
                // Start from a fresh connection next time.
                *loader = None;
                Err(e)
            }
        }
    }

    fn install(&self, catalog: Catalog) {
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        *current = Arc::new(catalog);
    }
}

/// Records a catalog change: call inside the transaction that changes the catalog.
/// Every pgshard process reloads once that transaction commits.
pub async fn bump_version<C: GenericClient + Sync>(client: &C) -> Result<(), PgError> {
    client
        .batch_execute(&format!("{RAISE_VERSION}; NOTIFY {CHANNEL}"))
        .await
        .map_err(|e| PgError::from_client_error("cannot bump the catalog version", &e))
}

/// Reads the views' signature; lists the views over distributed tables again when it
/// or the catalog version changed (a changed signature also drops the sessions' names).
async fn follow_views(
    c: &CatalogCache,
    client: &Client,
    seen: &mut Option<((i64, i64), i64)>,
) -> Result<(), PgError> {
    let row = client
        .query_one(views::VIEWS_SIGNATURE, &[])
        .await
        .map_err(|e| PgError::from_client_error("cannot read the views' signature", &e))?;
    let signature: (i64, i64) = (row.get(0), row.get(1));
    let version = c.snapshot().version;
    if seen.is_some_and(|s| s == (signature, version)) {
        return Ok(());
    }
    let list = views::distributed_views(client).await?;
    *c.views.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(list);
    if seen.is_some_and(|(s, _)| s != signature) {
        c.relations_changed();
    }
    *seen = Some((signature, version));
    Ok(())
}

/// The listener: LISTEN, reload on each notification (coalescing bursts), compare
/// versions periodically, reconnect on failure; ends when the cache is dropped.
async fn listen_loop(cache: Weak<CatalogCache>) {
    loop {
        let Some(config) = cache.upgrade().map(|c| c.config.clone()) else {
            return;
        };
        let host = config.coordinator.host.clone();
        let port = config.coordinator.port;
        let (client, mut notifications) =
            match control::connect_with_notifications(&config, &host, port).await {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!("catalog listener cannot connect: {e}");
                    tokio::time::sleep(RECONNECT_DELAY).await;
                    continue;
                }
            };
        if let Err(e) = client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
            tracing::warn!("catalog listener cannot LISTEN: {e}");
            tokio::time::sleep(RECONNECT_DELAY).await;
            continue;
        }
        // Changes may have happened while no listener was connected.
        match cache.upgrade() {
            Some(c) => {
                c.relations_changed();
                c.reload_quietly().await
            }
            None => return,
        }
        let mut tick = tokio::time::interval(VERSION_CHECK_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut relations_tick = tokio::time::interval(RELATIONS_POLL_INTERVAL);
        relations_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut relations_seen: Option<(i64, i64)> = None;
        // The views' signature and the catalog version their list was made under.
        let mut views_seen: Option<((i64, i64), i64)> = None;
        loop {
            tokio::select! {
                n = notifications.recv() => {
                    if n.is_none() {
                        tracing::warn!("catalog listener connection lost; reconnecting");
                        break;
                    }
                    while notifications.try_recv().is_ok() {}
                    match cache.upgrade() {
                        Some(c) => c.reload_quietly().await,
                        None => return,
                    }
                }
                _ = relations_tick.tick() => {
                    let Some(c) = cache.upgrade() else { return };
                    let names: Vec<String> = c.snapshot().tables_by_name.keys().cloned().collect();
                    match client.query_one(RELATIONS_SIGNATURE, &[&names]).await {
                        Ok(row) => {
                            let value: (i64, i64) = (row.get(0), row.get(1));
                            if relations_seen.is_some_and(|seen| seen != value) {
                                c.relations_changed();
                            }
                            relations_seen = Some(value);
                        }
                        Err(e) => {
                            tracing::warn!("relation DDL check failed: {e}; reconnecting");
                            break;
                        }
                    }
                    if let Err(e) = follow_views(&c, &client, &mut views_seen).await {
                        tracing::warn!("view DDL check failed: {e}; reconnecting");
                        break;
                    }
                }
                _ = tick.tick() => {
                    let Some(c) = cache.upgrade() else { return };
                    let stored = client
                        .query_opt("SELECT version FROM pg_catalog.pgshard_catalog_version LIMIT 1", &[])
                        .await;
                    match stored {
                        Ok(row) => {
                            let version: i64 = row.map(|r| r.get(0)).unwrap_or(0);
                            if version != c.snapshot().version {
                                c.reload_quietly().await;
                            }
                        }
                        Err(e) => {
                            tracing::warn!("catalog version check failed: {e}; reconnecting");
                            break;
                        }
                    }
                }
            }
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}
