//! A client's own two-phase commit: `PREPARE TRANSACTION`, `COMMIT PREPARED`,
//! `ROLLBACK PREPARED`.
//!
//! A block that ran only on the coordinator node (local tables; nothing of it on a
//! worker) is one PostgreSQL transaction of the client's own backend there, so its
//! `PREPARE TRANSACTION` runs there as written and PostgreSQL decides (a block that
//! used temporary objects is refused by it, 0A000, and rolled back). Either way the
//! block ends, as in PostgreSQL: prepared, or rolled back on a failure. A block that
//! ran on workers is refused (0A000) and rolled back on every node, as PostgreSQL ends a
//! block whose PREPARE TRANSACTION failed: pgshard would have to hand one client gid to
//! several nodes' transactions, which its own 2PC and recovery do not track.
//! `COMMIT PREPARED` / `ROLLBACK PREPARED` run on the client's own backend (inside a
//! block PostgreSQL refuses them there, 25001). Gids of pgshard's own form
//! (`pgshard_...`) are refused: they belong to pgshard's recovery.

use super::*;
use pg_query::protobuf::TransactionStmtKind;

/// The prefix of the gids pgshard's own 2PC uses (`two_phase_commit`, recovery).
const OWN_GID_PREFIX: &str = "pgshard_";

impl Session {
    pub(super) async fn client_two_phase(
        &mut self,
        text: &str,
        kind: i32,
        gid: &str,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let coord = self.shared.coordinator.clone();
        let prepare = kind == TransactionStmtKind::TransStmtPrepare as i32;
        if gid.starts_with(OWN_GID_PREFIX) {
            if prepare && self.tx.state != TxnState::Idle {
                self.finish_transaction(false).await.ok();
            }
            return Err(PgError::not_supported(format!(
                "transaction identifiers beginning with \"{OWN_GID_PREFIX}\" are pgshard's own \
                 two-phase commits"
            )));
        }
        if !prepare {
            // COMMIT PREPARED / ROLLBACK PREPARED: PostgreSQL's on the client's backend.
            self.simple_on_backend_into(&coord, text, true, Some(sink))
                .await?;
            return Ok(());
        }
        match self.tx.state {
            // PostgreSQL's own warning and answer ("there is no transaction in progress").
            TxnState::Idle => {
                self.simple_on_backend_into(&coord, text, false, Some(sink))
                    .await?;
                Ok(())
            }
            // PREPARE TRANSACTION of a failed block rolls it back, as COMMIT does.
            TxnState::Failed => {
                self.finish_transaction(false).await?;
                sink.complete("ROLLBACK");
                Ok(())
            }
            TxnState::InBlock => {
                if let Some(worker) = self.tx.held.iter().find(|h| h.conn.addr != coord) {
                    let node = worker.conn.addr.clone();
                    self.finish_transaction(false).await.ok();
                    return Err(PgError::not_supported(format!(
                        "pgshard cannot PREPARE TRANSACTION a block that ran on a worker (node \
                         {node}): only a block of the coordinator node's own tables can be \
                         prepared; the block was rolled back"
                    )));
                }
                let r = self
                    .simple_on_backend_into(&coord, text, true, Some(sink))
                    .await;
                // The backend's block is over either way (prepared, or rolled back by
                // the failure): the session's block ends with it, its SETs kept only
                // when it was prepared (PostgreSQL treats them as at COMMIT).
                let home = self.held_index(&coord).map(|i| self.tx.held.remove(i));
                let ended = self.finish_transaction(r.is_ok()).await;
                if let Some(mut home) = home {
                    self.absorb_home_reports(&mut home.conn);
                    home.conn.settings_fingerprint = STALE_SETTINGS;
                }
                r.map(|_| ()).and(ended)
            }
        }
    }
}
