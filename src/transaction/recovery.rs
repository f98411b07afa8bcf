//! Recovery of prepared transactions pgshard left on nodes (crash of pgshard, of a
//! worker, or of the coordinator node): a prepared gid whose decision record
//! (`pg_dist_transaction`) is committed gets `COMMIT PREPARED`, one without gets
//! `ROLLBACK PREPARED`, and records no longer needed are deleted.
//!
//! Whose transactions: those of dead pgshard processes (their liveness lock can be
//! taken) and this process's own that are not in flight. Live other processes are
//! left alone: they recover their own. Runs at start-up, every
//! `recovery_interval_secs`, and on `SELECT recover_prepared_transactions()`.
//!
//! Order matters against transactions committing concurrently:
//! 1. decision records R0 are read first: a record in R0 whose gid is not prepared in
//!    step 2 on a reachable node belongs to a finished transaction, so it may go;
//! 2. prepared gids are listed on every node;
//! 3. the in-flight set and liveness of other owners are read after the listing, and
//! 4. the decision records R1 after those: an owner that ended before step 3 had
//!    its decision committed before, so R1 sees it;
//! 5. prepared gids are listed again, and only those in both listings are resolved:
//!    an own transaction that ended between steps 2 and 3 is gone by then.

use super::{in_flight_snapshot, instance_id, lock_key, parse_gid, LIVENESS_LOCK_NS};
use crate::backend::control;
use crate::catalog::cache::CatalogCache;
use crate::error::PgError;
use crate::sql::quote::quote_literal;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::Client;

/// One recovery at a time in this process.
static RUNNING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What recovery does with a prepared transaction (pure decision, see module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Commit,
    Rollback,
    Skip,
}

/// Decides for one prepared gid: `owner_dead` says whether its owning process is
/// gone, `own_in_flight` whether it is ours and still committing or aborting.
pub fn decide(is_own: bool, owner_dead: bool, own_in_flight: bool, recorded: bool) -> Action {
    let resolvable = if is_own { !own_in_flight } else { owner_dead };
    match (resolvable, recorded) {
        (false, _) => Action::Skip,
        (true, true) => Action::Commit,
        (true, false) => Action::Rollback,
    }
}

/// Holds this process's liveness lock for its whole life, on a dedicated coordinator
/// connection; reconnects and takes it again when that connection is lost (a
/// coordinator restart) or the coordinator node moved to another server (a failover:
/// `failover::coordinator::current`), checked every 100 ms. Returns once the lock is
/// held the first time (or after a few failed attempts, so that pgshard can still
/// start while the coordinator node is down). Where it is held is what
/// `transaction::liveness_holds` checks.
pub async fn hold_liveness_lock(cache: Arc<CatalogCache>) {
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        let key = lock_key(instance_id()).expect("instance ids are 8 hex digits");
        loop {
            let at = crate::failover::coordinator::current();
            match control::connect_coordinator(cache.config()).await {
                Ok(client) => {
                    let taken = client
                        .execute(
                            "SELECT pg_catalog.pg_advisory_lock($1, $2)",
                            &[&LIVENESS_LOCK_NS, &key],
                        )
                        .await;
                    match taken {
                        Ok(_) => {
                            super::liveness_taken(at.clone());
                            if let Some(tx) = ready.take() {
                                let _ = tx.send(());
                            }
                            // Keep the session; notice when it ends or the coordinator
                            // node moves.
                            let mut round = 0u32;
                            loop {
                                tokio::time::sleep(Duration::from_millis(100)).await;
                                if crate::failover::coordinator::current() != at {
                                    break;
                                }
                                round += 1;
                                if round % 10 == 0 && client.simple_query("SELECT 1").await.is_err()
                                {
                                    break;
                                }
                            }
                            super::liveness_lost();
                            tracing::warn!("liveness lock connection lost; taking the lock again");
                            if crate::failover::coordinator::current() != at {
                                continue;
                            }
                        }
                        Err(e) => tracing::warn!("cannot take the liveness lock: {e}"),
                    }
                }
                Err(e) => tracing::debug!("liveness lock: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let _ = tokio::time::timeout(Duration::from_secs(10), ready_rx).await;
}

/// Runs recovery every `interval` in the background (the first run at once).
pub fn start_periodic(cache: Arc<CatalogCache>, interval: Duration) {
    tokio::spawn(async move {
        loop {
            match recover(&cache).await {
                Ok(0) => {}
                Ok(n) => tracing::info!("recovered {n} prepared transactions"),
                Err(e) => tracing::debug!("recovery of prepared transactions: {e}"),
            }
            // Shards of tables dropped on the coordinator node directly.
            match crate::commands::shards::drop_orphaned_shards(&cache).await {
                Ok(0) => {}
                Ok(n) => tracing::info!("dropped {n} orphaned shard placements"),
                Err(e) => tracing::debug!("dropping orphaned shards: {e}"),
            }
            tokio::time::sleep(interval).await;
        }
    });
}

/// Schedules a recovery in the background soon (coalesced), retried every second for
/// a minute until it succeeds: called when a commit left prepared transactions
/// behind, which hold their locks until resolved.
pub fn recover_soon(cache: Arc<CatalogCache>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static SCHEDULED: AtomicBool = AtomicBool::new(false);
    if SCHEDULED.swap(true, Ordering::AcqRel) {
        return;
    }
    tokio::spawn(async move {
        for _ in 0..60 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            SCHEDULED.store(false, Ordering::Release);
            match recover(&cache).await {
                Ok(n) => {
                    if n > 0 {
                        tracing::info!("recovered {n} prepared transactions");
                    }
                    return;
                }
                Err(e) => tracing::debug!("recovery of prepared transactions: {e}"),
            }
            if SCHEDULED.swap(true, Ordering::AcqRel) {
                return; // another request took over
            }
        }
        SCHEDULED.store(false, Ordering::Release);
    });
}

async fn decision_records(coord: &Client) -> Result<HashSet<(i32, String)>, PgError> {
    let rows = coord
        .query(
            "SELECT groupid, gid FROM pg_catalog.pg_dist_transaction WHERE gid LIKE 'pgshard\\_%'",
            &[],
        )
        .await
        .map_err(|e| PgError::from_client_error("cannot read pg_dist_transaction", &e))?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// The gids of pgshard's prepared transactions in the node's database.
async fn list_prepared(c: &Client) -> Result<Vec<String>, tokio_postgres::Error> {
    let rows = c
        .query(
            "SELECT gid FROM pg_catalog.pg_prepared_xacts \
             WHERE gid LIKE 'pgshard\\_%' AND database = pg_catalog.current_database()",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// One pass of recovery; returns how many prepared transactions it resolved.
pub async fn recover(cache: &CatalogCache) -> Result<i64, PgError> {
    let _one = RUNNING.lock().await;
    let cfg = cache.config().clone();
    // A fresh session: the liveness locks it takes end with it.
    let coord = control::connect_coordinator(&cfg).await?;
    let r0 = decision_records(&coord).await?;
    // Every node that may hold prepared transactions: the coordinator node (group 0) and the workers.
    let catalog = cache.snapshot();
    let mut nodes: Vec<(i32, String, u16)> =
        vec![(0, cfg.coordinator.host.clone(), cfg.coordinator.port)];
    for w in &catalog.workers {
        nodes.push((w.group_id, w.host.clone(), w.port));
    }
    let mut reachable: HashSet<i32> = HashSet::new();
    let mut prepared: Vec<(usize, String)> = Vec::new();
    let mut clients: HashMap<usize, Client> = HashMap::new();
    for (i, (group, host, port)) in nodes.iter().enumerate() {
        let client = if *group == 0 {
            None
        } else {
            match control::connect(&cfg, host, *port).await {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::debug!("recovery skips node {host}:{port}: {e}");
                    continue;
                }
            }
        };
        let c = client.as_ref().unwrap_or(&coord);
        match list_prepared(c).await {
            Ok(gids) => {
                reachable.insert(*group);
                prepared.extend(gids.into_iter().map(|g| (i, g)));
            }
            Err(e) => {
                tracing::debug!("recovery cannot list prepared transactions on {host}:{port}: {e}");
                continue;
            }
        }
        if let Some(c) = client {
            clients.insert(i, c);
        }
    }
    // Liveness of the owners, then the in-flight set, then the decisions (see module docs).
    let own = instance_id();
    let mut dead: HashMap<String, bool> = HashMap::new();
    for (_, gid) in &prepared {
        let Some((instance, _)) = parse_gid(gid) else {
            continue;
        };
        if instance == own || dead.contains_key(instance) {
            continue;
        }
        let key = lock_key(instance).expect("parse_gid checks the instance");
        let free: bool = coord
            .query_one(
                "SELECT pg_catalog.pg_try_advisory_lock($1, $2)",
                &[&LIVENESS_LOCK_NS, &key],
            )
            .await
            .map_err(|e| PgError::from_client_error("cannot test a liveness lock", &e))?
            .get(0);
        dead.insert(instance.to_string(), free);
    }
    let flying = in_flight_snapshot();
    let r1: HashSet<String> = decision_records(&coord)
        .await?
        .into_iter()
        .map(|(_, g)| g)
        .collect();
    // Listed again: an own transaction that finished between the first listing and the
    // in-flight snapshot is gone now (acting on it would only fail, with an ERROR in
    // the node's log); one still prepared here can no longer change under us.
    let mut listed_again: HashSet<(usize, String)> = HashSet::new();
    for i in prepared.iter().map(|(i, _)| *i).collect::<HashSet<_>>() {
        let c = clients.get(&i).unwrap_or(&coord);
        if let Ok(gids) = list_prepared(c).await {
            listed_again.extend(gids.into_iter().map(|g| (i, g)));
        }
    }
    let mut resolved = 0i64;
    let mut committed: Vec<String> = Vec::new();
    for (i, gid) in prepared.iter().filter(|p| listed_again.contains(*p)) {
        let Some((instance, prefix)) = parse_gid(gid) else {
            continue;
        };
        let is_own = instance == own;
        let action = decide(
            is_own,
            dead.get(instance).copied().unwrap_or(false),
            flying.contains(prefix),
            r1.contains(gid),
        );
        let sql = match action {
            Action::Skip => continue,
            Action::Commit => format!("COMMIT PREPARED {}", quote_literal(gid)),
            Action::Rollback => format!("ROLLBACK PREPARED {}", quote_literal(gid)),
        };
        let c = clients.get(i).unwrap_or(&coord);
        let (_, host, port) = &nodes[*i];
        match c.batch_execute(&sql).await {
            Ok(()) => {
                tracing::info!("recovery: {sql} on {host}:{port}");
                resolved += 1;
                if action == Action::Commit {
                    committed.push(gid.clone());
                }
            }
            // Finished meanwhile by its owner: nothing to do.
            Err(e) => tracing::debug!("recovery: {sql} on {host}:{port}: {e}"),
        }
    }
    // Records of transactions no longer prepared on a reachable node are done with.
    let still: HashSet<&String> = prepared.iter().map(|(_, g)| g).collect();
    let mut done: Vec<String> = r0
        .into_iter()
        .filter(|(group, gid)| reachable.contains(group) && !still.contains(gid))
        .map(|(_, gid)| gid)
        .collect();
    done.extend(committed);
    if !done.is_empty() {
        coord
            .execute(
                "DELETE FROM pg_catalog.pg_dist_transaction WHERE gid = ANY($1)",
                &[&done],
            )
            .await
            .map_err(|e| PgError::from_client_error("cannot clean up pg_dist_transaction", &e))?;
    }
    crate::metrics::recovered(resolved.max(0) as u64);
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions() {
        // Own, not in flight: the record decides.
        assert_eq!(decide(true, false, false, true), Action::Commit);
        assert_eq!(decide(true, false, false, false), Action::Rollback);
        // Own in flight: never touched (between PREPARE and its decision record).
        assert_eq!(decide(true, false, true, false), Action::Skip);
        assert_eq!(decide(true, false, true, true), Action::Skip);
        // Another live process's: left to it.
        assert_eq!(decide(false, false, false, false), Action::Skip);
        assert_eq!(decide(false, false, false, true), Action::Skip);
        // A dead process's: the record decides.
        assert_eq!(decide(false, true, false, true), Action::Commit);
        assert_eq!(decide(false, true, false, false), Action::Rollback);
    }
}
