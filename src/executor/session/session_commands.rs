//! Session commands (`planner::SessionCommand`): transaction control, SET / RESET,
//! `citus.*` settings (`session/citus_settings.rs`), DISCARD ALL, DEALLOCATE. They change the client's session and its
//! distributed transaction, never plan anything, and answer as PostgreSQL does.

use super::*;

impl Session {
    /// Runs one session command.
    pub(super) async fn session_command(
        &mut self,
        cmd: &SessionCommand,
        stmt: &Statement,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        match cmd {
            SessionCommand::Empty => {
                // An empty query (a driver's ping) answers only while the client's
                // own backend lives.
                if let Some(e) = self.home_ended_now().await {
                    return Err(e);
                }
                let mut b = BytesMut::new();
                msg::write_empty_query(&mut b);
                sink.push_bytes(b);
                Ok(())
            }
            SessionCommand::Transaction(cmd) => self.transaction(cmd, sink).await,
            SessionCommand::Setting(scope) => self.session_setting(stmt, scope, sink).await,
            SessionCommand::DiscardAll => self.discard_all(stmt, sink).await,
            SessionCommand::Deallocate { name } => {
                self.deallocate(stmt, name.as_deref(), sink).await
            }
            SessionCommand::SetCitus { name, value, local } => {
                self.set_citus_statement(name, value.as_deref(), *local, sink)
                    .await
            }
            SessionCommand::StoreCitus { name, value } => {
                self.store_citus(stmt, name, value.as_deref(), sink).await
            }
            SessionCommand::CitusExtension { tag } => {
                sink.complete(tag);
                Ok(())
            }
        }
    }

    pub(super) async fn transaction(
        &mut self,
        cmd: &TxnCommand,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        if self.tx.string_block {
            if let Some(r) = self.control_in_string(cmd, sink).await {
                return r;
            }
        }
        match cmd {
            TxnCommand::Begin { text } => {
                if self.tx.state != TxnState::Idle {
                    sink.notice_warning("there is already a transaction in progress");
                } else {
                    self.start_block(text.clone());
                }
                sink.complete("BEGIN");
                Ok(())
            }
            TxnCommand::Rollback { chain } => {
                if self.tx.state == TxnState::Idle {
                    if *chain {
                        return self.outside_block_check("ROLLBACK AND CHAIN");
                    }
                    sink.notice_warning("there is no transaction in progress");
                    // In an implicit transaction it aborts what came before.
                    self.end_implicit_settings(true);
                }
                let begin = self.tx.begin_text.clone();
                self.finish_transaction(false).await?;
                if *chain {
                    self.start_block(begin);
                }
                sink.complete("ROLLBACK");
                Ok(())
            }
            TxnCommand::Commit { chain } => {
                let begin = self.tx.begin_text.clone();
                match self.tx.state {
                    TxnState::Idle if *chain => {
                        return self.outside_block_check("COMMIT AND CHAIN")
                    }
                    TxnState::Idle => {
                        sink.notice_warning("there is no transaction in progress");
                        self.end_implicit_settings(false);
                        sink.complete("COMMIT");
                        return Ok(());
                    }
                    TxnState::Failed => {
                        let r = self.finish_transaction(false).await;
                        self.end_messages_into(sink);
                        r?;
                        sink.complete("ROLLBACK");
                    }
                    TxnState::InBlock => {
                        let r = self.finish_transaction(true).await;
                        self.end_messages_into(sink);
                        r?;
                        sink.complete("COMMIT");
                    }
                }
                // AND CHAIN: a new block with the ended one's characteristics (its
                // BEGIN options and SET TRANSACTION modes), only once the end succeeded.
                if *chain {
                    self.start_block(begin);
                }
                Ok(())
            }
            TxnCommand::Savepoint { name } => {
                self.outside_block_check("SAVEPOINT")?;
                self.on_every_held(&format!("SAVEPOINT {}", quote_ident(name)))
                    .await?;
                let savepoint = self.savepoint(name);
                self.savepoints.push(savepoint);
                sink.complete("SAVEPOINT");
                Ok(())
            }
            TxnCommand::Release { name } => {
                self.outside_block_check("RELEASE SAVEPOINT")?;
                let at = self.savepoint_position(name)?;
                self.on_every_held(&format!("RELEASE SAVEPOINT {}", quote_ident(name)))
                    .await?;
                self.savepoints.truncate(at);
                sink.complete("RELEASE");
                Ok(())
            }
            TxnCommand::RollbackTo { name } => {
                self.names_after_block(false);
                self.outside_block_check("ROLLBACK TO SAVEPOINT")?;
                let at = self.savepoint_position(name)?;
                self.on_every_held(&format!("ROLLBACK TO SAVEPOINT {}", quote_ident(name)))
                    .await?;
                self.savepoints.truncate(at + 1);
                self.rollback_settings_to(at);
                self.tx.state = TxnState::InBlock;
                sink.complete("ROLLBACK");
                Ok(())
            }
            TxnCommand::Other { text, kind, gid } => {
                self.client_two_phase(text, *kind, gid, sink).await
            }
        }
    }

    /// What the nodes said while the block ended (`end_messages`), for the client
    /// before the block's CommandComplete or error, as PostgreSQL sends it.
    pub(super) fn end_messages_into(&mut self, sink: &mut ResultSink) {
        for f in self.take_end_messages() {
            sink.push_frame(f.tag, f.body);
        }
    }

    /// The notices of `end_messages`; its notifications wait for ReadyForQuery
    /// (PostgreSQL sends them once the transaction ended, after its CommandComplete).
    pub(super) fn take_end_messages(&mut self) -> Vec<Frame> {
        let (notifications, notices): (Vec<Frame>, Vec<Frame>) =
            std::mem::take(&mut self.tx.end_messages)
                .into_iter()
                .partition(|f| f.tag == b'A');
        self.pending_notifications.extend(notifications);
        notices
    }

    /// Opens the session's block: nodes join it with `begin_text` when first used.
    pub(super) fn start_block(&mut self, begin_text: String) {
        self.tx.state = TxnState::InBlock;
        // SETs earlier in the same implicit transaction are the block's.
        if let Some(s) = self.implicit_settings.take() {
            self.block_settings.get_or_insert(s);
        }
        self.tx.begin_text = begin_text;
        self.tx.txn_serial = self
            .shared
            .next_transaction
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// PostgreSQL's error for savepoint commands outside a block.
    pub(super) fn outside_block_check(&self, what: &str) -> PgResult<()> {
        if self.tx.state == TxnState::Idle {
            return Err(PgError::new(
                sqlstate::NO_ACTIVE_SQL_TRANSACTION,
                format!("{what} can only be used in transaction blocks"),
            ));
        }
        Ok(())
    }

    /// The newest active savepoint of that name.
    pub(super) fn savepoint_position(&self, name: &str) -> PgResult<usize> {
        self.savepoints
            .iter()
            .rposition(|s| s.name == name)
            .ok_or_else(|| PgError::new("3B001", format!("savepoint \"{name}\" does not exist")))
    }
}
