//! A session's distributed transaction: the node connections it holds (for one
//! Sync batch in autocommit, for the whole block inside BEGIN ... COMMIT), which of
//! them wrote, the block's state, and its end: one-phase commit when at most one
//! node wrote, otherwise the one two-phase commit (`two_phase_commit.rs`).

use super::two_phase_commit as tpc;
use super::{decision, recovery, InFlight};
use crate::backend::{BackendConn, NodeAddr, PooledConn, Pools};
use crate::catalog::cache::CatalogCache;
use crate::error::{sqlstate, PgResult};
use crate::frontend::messages::Frame;
use crate::sql::quote::quote_literal;
use futures_util::future::join_all;
use std::sync::Arc;

/// Where the session's transaction block stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TxnState {
    #[default]
    Idle,
    InBlock,
    Failed,
}

/// A node connection the session holds.
pub struct Held {
    pub conn: PooledConn,
    /// Wrote in the current transaction block (or batch).
    pub wrote: bool,
    /// Touched by the current Sync batch (needs a Sync).
    pub in_batch: bool,
    /// Has unflushed messages.
    pub dirty: bool,
    /// Failed in the current batch: it answers nothing more until Sync.
    pub errored: bool,
}

/// The distributed transaction of one session.
#[derive(Default)]
pub struct DistributedTransaction {
    pub state: TxnState,
    pub begin_text: String,
    /// The backend statement id of `begin_text` (the text it was made for, the id).
    pub begin_statement: Option<(String, u64)>,
    /// A backend of this session was cancelled to break a distributed deadlock.
    pub deadlocked: bool,
    pub held: Vec<Held>,
    pub txn_serial: u64,
    /// The current transaction block was started by pgshard for a Sync batch that
    /// wrote on several nodes; it ends at that Sync.
    pub implicit_block: bool,
    /// The current transaction block is the implicit transaction of a simple query
    /// string of several statements (`implicit.rs`): it ends with the string, or at a
    /// COMMIT / ROLLBACK in it, and a BEGIN in it makes it the client's block.
    pub string_block: bool,
    /// DDL ran inside the current block: after its commit every pgshard reloads the
    /// catalog.
    pub catalog_changed: bool,
    /// Roles a role statement of the current block changed: copied to the workers
    /// once it commits.
    pub roles_to_sync: Vec<String>,
    /// Notices and notifications the nodes sent while the block ended (a deferred
    /// trigger's NOTICE at COMMIT): the client gets them before the block's end.
    pub end_messages: Vec<Frame>,
}

/// What ending a transaction needs from the process: the catalog (group ids,
/// recovery), where decisions are recorded, the coordinator node's pool.
pub struct CommitServices<'a> {
    pub catalog: &'a Arc<CatalogCache>,
    pub decisions: &'a decision::Target,
    pub pools: &'a Pools,
    pub coordinator: &'a NodeAddr,
    /// This pgshard process's instance id and the session's transaction serial: the
    /// transaction's gids are `pgshard_<instance>_<pid>_<serial>_<n>`.
    pub instance_id: &'a str,
    pub txn_serial: u64,
    /// Delete the decision records once committed (periodic recovery off; with it
    /// on, recovery deletes finished transactions' records in bulk, as Citus does).
    pub delete_records: bool,
}

/// Ends the transaction on the held connections: ROLLBACK; or COMMIT when at most
/// one node wrote or the session chose one-phase commit (readers first, then the
/// writers: the one writer's commit decides; each group all nodes at once); or the
/// two-phase commit. NOTICEs and notifications the nodes send meanwhile (a deferred
/// trigger's NOTICE at COMMIT) are added to `end_messages` for the client.
pub async fn end(
    held: &mut [Held],
    commit: bool,
    one_phase: bool,
    services: &CommitServices<'_>,
    end_messages: &mut Vec<Frame>,
) -> PgResult<()> {
    if !commit {
        for h in held.iter_mut() {
            if h.conn.txn_status != b'I' && !h.conn.broken {
                h.conn.simple("ROLLBACK").await.ok();
            }
        }
        return Ok(());
    }
    let writers = held.iter().filter(|h| h.wrote).count();
    if writers > 1 && !one_phase {
        let r = two_phase(held, services, end_messages).await;
        if r.is_ok() {
            crate::metrics::committed(crate::metrics::CommitProtocol::TwoPhase);
        }
        return r;
    }
    let mut result = Ok(());
    for wrote in [false, true] {
        let commits = held.iter_mut().filter(|h| h.wrote == wrote).map(|h| async {
            let mut kept = Vec::new();
            let r = h.conn.simple_keeping_messages("COMMIT", &mut kept).await;
            (r, kept)
        });
        for (r, kept) in join_all(commits).await {
            end_messages.extend(kept);
            if let Err(e) = r {
                result = result.and(Err(e));
            }
        }
    }
    if result.is_ok() && writers > 0 {
        crate::metrics::committed(crate::metrics::CommitProtocol::OnePhase);
    }
    result
}

/// Two-phase commit of the held connections (readers just commit).
async fn two_phase(
    held: &mut [Held],
    services: &CommitServices<'_>,
    end_messages: &mut Vec<Frame>,
) -> PgResult<()> {
    let catalog = services.catalog.snapshot();
    let prefix = format!(
        "pgshard_{}_{}_{}",
        services.instance_id,
        std::process::id(),
        services.txn_serial
    );
    // Recovery leaves the transaction alone until this function returns.
    let in_flight = InFlight::register(prefix.clone());
    let group_of = |addr: &NodeAddr| {
        catalog
            .workers
            .iter()
            .find(|w| w.host == addr.host && w.port == addr.port)
            .map(|w| w.group_id)
            .unwrap_or(0)
    };
    let mut participants: Vec<tpc::Participant<&mut BackendConn>> = held
        .iter_mut()
        .map(|h| {
            let group = group_of(&h.conn.addr);
            tpc::Participant::new(&mut *h.conn, group, h.wrote)
        })
        .collect();
    // 1. Prepare every participant, all nodes at once (readers just commit);
    // deferred triggers fire here: their notices are the client's.
    let prepared = tpc::prepare(&mut participants, &prefix, end_messages).await;
    if let Err(e) = prepared {
        if e.code == sqlstate::CONNECTION_FAILURE {
            // A node lost mid-PREPARE may still have prepared: recovery rolls it back.
            recovery::recover_soon(services.catalog.clone());
        }
        if !tpc::abort(&mut participants).await {
            recovery::recover_soon(services.catalog.clone());
        }
        return Err(e);
    }
    // 2. The commit decision, durable in the coordinator node's catalog: the
    // commit point, flushed whatever the coordinator node's synchronous_commit
    // before any COMMIT PREPARED, written together with the records of other
    // sessions committing at the same time.
    let rows = tpc::decision_rows(&participants);
    let decided = decision::record(services.decisions, rows, in_flight.epoch()).await;
    if let Err(e) = decided {
        if e.code == sqlstate::CONNECTION_FAILURE {
            // The record may or may not be committed: recovery decides the same for
            // every participant once the coordinator node answers again.
            recovery::recover_soon(services.catalog.clone());
            return Err(e.with_detail(
                "The commit decision could not be confirmed; the transaction is committed \
                     on every node or on none, as recover_prepared_transactions() finds.",
            ));
        }
        if !tpc::abort(&mut participants).await {
            recovery::recover_soon(services.catalog.clone());
        }
        return Err(e);
    }
    // 3. Commit everywhere, all nodes at once; a failure here is finished by
    // recovery later (decision records stay for what is not committed yet).
    let prepared = participants.iter().filter(|p| p.gid.is_some()).count();
    let committed = tpc::commit_prepared(&mut participants).await;
    if committed.len() < prepared {
        recovery::recover_soon(services.catalog.clone());
    }
    let gids: Vec<String> = committed.iter().map(|g| quote_literal(g)).collect();
    // With periodic recovery on, it deletes the records of finished transactions in
    // bulk (as Citus does): one coordinator commit, and its fsync, fewer per
    // transaction.
    if gids.is_empty() || !services.delete_records {
        return Ok(());
    }
    if let Ok(mut c) = services.pools.node(services.coordinator).acquire().await {
        c.simple(&format!(
            "DELETE FROM pg_catalog.pg_dist_transaction WHERE gid IN ({})",
            gids.join(", ")
        ))
        .await
        .ok();
    }
    Ok(())
}
