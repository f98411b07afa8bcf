//! The one two-phase commit of pgshard, used by client sessions (their distributed
//! transactions) and by `commands/` (DDL, create_distributed_table, role changes)
//! alike: each participant is one node connection inside a transaction block; the
//! writers `PREPARE TRANSACTION` under `<prefix>_<n>`, the readers just commit; the
//! commit decision is made durable on the coordinator node (by the caller: group
//! commit of decision records for sessions, the catalog transaction for commands);
//! then every prepared participant gets `COMMIT PREPARED`. Before the decision any
//! failure rolls every participant back; after it, what fails is finished by
//! recovery (`transaction::recovery`), which commits the prepared transactions
//! that have a decision record and rolls back the others.
//!
//! The statements a participant runs are the same for every kind of connection
//! (`RemoteTransaction`): a raw protocol connection (`BackendConn`) or a
//! tokio-postgres client.

use crate::backend::BackendConn;
use crate::error::PgResult;
use crate::frontend::messages::Frame;
use crate::sql::quote::quote_literal;
use futures_util::future::join_all;
use std::future::Future;

/// A node connection inside a transaction block, as the commit protocol drives it.
pub trait RemoteTransaction: Send {
    /// `host:port`, for errors and logs.
    fn node(&self) -> String;
    /// Still inside a transaction block (a failed one included): it needs a ROLLBACK.
    fn in_block(&self) -> bool;
    /// Runs one statement of the protocol; the NOTICEs and notifications the node
    /// sends with it (a deferred trigger's NOTICE at COMMIT) are added to `kept`.
    fn run(
        &mut self,
        sql: &str,
        kept: &mut Vec<Frame>,
    ) -> impl Future<Output = PgResult<()>> + Send;
}

impl RemoteTransaction for BackendConn {
    fn node(&self) -> String {
        self.addr.to_string()
    }
    fn in_block(&self) -> bool {
        self.txn_status != b'I' && !self.broken
    }
    fn run(
        &mut self,
        sql: &str,
        kept: &mut Vec<Frame>,
    ) -> impl Future<Output = PgResult<()>> + Send {
        self.simple_keeping_messages(sql, kept)
    }
}

impl<T: RemoteTransaction> RemoteTransaction for &mut T {
    fn node(&self) -> String {
        (**self).node()
    }
    fn in_block(&self) -> bool {
        (**self).in_block()
    }
    fn run(
        &mut self,
        sql: &str,
        kept: &mut Vec<Frame>,
    ) -> impl Future<Output = PgResult<()>> + Send {
        (**self).run(sql, kept)
    }
}

/// One participant: its connection, its node's group id (for the decision record),
/// whether it wrote (readers are not prepared), and its gid once prepared.
pub struct Participant<C> {
    pub conn: C,
    pub group_id: i32,
    pub wrote: bool,
    pub gid: Option<String>,
}

impl<C: RemoteTransaction> Participant<C> {
    pub fn new(conn: C, group_id: i32, wrote: bool) -> Self {
        Participant {
            conn,
            group_id,
            wrote,
            gid: None,
        }
    }

    pub fn node(&self) -> String {
        self.conn.node()
    }
}

/// Phase one, every node at once: writers `PREPARE TRANSACTION '<prefix>_<n>'`,
/// readers `COMMIT`. The first error is returned; the participants prepared keep
/// their gid so that `abort` undoes them. Messages the nodes sent are added to `kept`.
pub async fn prepare<C: RemoteTransaction>(
    participants: &mut [Participant<C>],
    prefix: &str,
    kept: &mut Vec<Frame>,
) -> PgResult<()> {
    let outcomes = join_all(
        participants
            .iter_mut()
            .enumerate()
            .map(|(i, p)| async move {
                let mut messages = Vec::new();
                let outcome = if p.wrote {
                    let gid = format!("{prefix}_{i}");
                    let sql = format!("PREPARE TRANSACTION {}", quote_literal(&gid));
                    let r = p.conn.run(&sql, &mut messages).await;
                    if r.is_ok() {
                        p.gid = Some(gid);
                    }
                    r
                } else {
                    // A reader's commit cannot fail its transaction: its error is not the
                    // transaction's.
                    p.conn.run("COMMIT", &mut messages).await.ok();
                    Ok(())
                };
                (outcome, messages)
            }),
    )
    .await;
    let mut first = Ok(());
    for (outcome, messages) in outcomes {
        kept.extend(messages);
        if let Err(e) = outcome {
            if first.is_ok() {
                first = Err(e);
            }
        }
    }
    first
}

/// The decision records of the prepared participants: (group id, gid).
pub fn decision_rows<C>(participants: &[Participant<C>]) -> Vec<(i32, String)> {
    participants
        .iter()
        .filter_map(|p| Some((p.group_id, p.gid.clone()?)))
        .collect()
}

/// Undoes every participant, all at once: `ROLLBACK PREPARED` for the prepared
/// ones, `ROLLBACK` for those still in their block. Returns false when a prepared
/// one could not be rolled back (recovery must finish it).
pub async fn abort<C: RemoteTransaction>(participants: &mut [Participant<C>]) -> bool {
    let done = join_all(participants.iter_mut().map(|p| async move {
        let sql = match &p.gid {
            Some(gid) => format!("ROLLBACK PREPARED {}", quote_literal(gid)),
            None if p.conn.in_block() => "ROLLBACK".to_string(),
            None => return true,
        };
        match p.conn.run(&sql, &mut Vec::new()).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("{sql} on {} failed: {e}", p.conn.node());
                p.gid.is_none()
            }
        }
    }))
    .await;
    done.into_iter().all(|ok| ok)
}

/// Phase two, after the decision is durable: `COMMIT PREPARED` on every prepared
/// participant at once. Returns the gids committed; failures are logged and left
/// to recovery (their decision records stay).
pub async fn commit_prepared<C: RemoteTransaction>(
    participants: &mut [Participant<C>],
) -> Vec<String> {
    let done = join_all(participants.iter_mut().map(|p| async move {
        let gid = p.gid.clone()?;
        match p
            .conn
            .run(
                &format!("COMMIT PREPARED {}", quote_literal(&gid)),
                &mut Vec::new(),
            )
            .await
        {
            Ok(()) => Some(gid),
            Err(e) => {
                tracing::warn!(
                    "COMMIT PREPARED {gid} on {} failed (left for recovery): {e}",
                    p.conn.node()
                );
                None
            }
        }
    }))
    .await;
    done.into_iter().flatten().collect()
}
