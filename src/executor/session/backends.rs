//! The node connections a session holds: joining a node (in the client's block or
//! batch), the queue of answers owed to the client and its draining, node errors,
//! releasing connections at the end of a batch or block.

use super::*;

impl Session {
    pub(super) fn held_index(&self, addr: &NodeAddr) -> Option<usize> {
        // A retired primary's statements use its group's new primary (`failover`).
        if let Some(to) = crate::failover::redirect(addr) {
            return self.tx.held.iter().position(|h| h.conn.addr == to);
        }
        self.tx.held.iter().position(|h| h.conn.addr == *addr)
    }

    /// The connection to `addr` for this batch / block, joining it if needed: a new
    /// connection gets the session's settings and, inside a block, BEGIN.
    pub(super) async fn join(&mut self, addr: &NodeAddr, write: bool) -> PgResult<usize> {
        self.join_with(addr, write, false).await
    }

    /// `join`; with `extended`, the caller goes on with extended-protocol messages
    /// that the batch's Sync ends, and BEGIN is queued as one of them (`write_begin`).
    pub(super) async fn join_with(
        &mut self,
        addr: &NodeAddr,
        write: bool,
        extended: bool,
    ) -> PgResult<usize> {
        // A node being failed over: wait for, then use, its group's new primary.
        let redirected = crate::failover::target(addr).await?;
        let addr = redirected.as_ref().unwrap_or(addr);
        if self.tx.state == TxnState::Idle && write {
            // One Sync batch is one implicit transaction. Once it writes on a second
            // node it becomes a transaction block, committed (with 2PC) at Sync.
            let other_wrote = self
                .tx
                .held
                .iter()
                .any(|h| h.in_batch && h.wrote && h.conn.addr != *addr);
            if other_wrote {
                self.upgrade_to_implicit_block().await?;
            }
        }
        let idx = match self.held_index(addr) {
            Some(i) => i,
            None => {
                let conn = self.client_conn(addr).await?;
                self.running.lock().unwrap().push((
                    conn.addr.clone(),
                    conn.process_id,
                    conn.secret_key,
                ));
                self.tx.held.push(Held {
                    conn,
                    wrote: false,
                    in_batch: false,
                    dirty: false,
                    errored: false,
                });
                self.tx.held.len() - 1
            }
        };
        if !self.tx.held[idx].in_batch {
            // Before anything of this batch goes to the connection.
            let fp = self.settings_fp;
            let h = &mut self.tx.held[idx];
            h.in_batch = true;
            h.errored = false;
            if h.conn.settings_fingerprint != fp {
                let locals: &[(String, String)] = if h.conn.txn_status != b'I' {
                    &self.local_settings
                } else {
                    &[]
                };
                let sql = settings_replay_sql(&self.creds, &self.settings, locals);
                msg::write_query(&mut h.conn.wbuf, &sql);
                h.conn.settings_fingerprint = fp;
                h.dirty = true;
                self.pending.push_back(Expect::SimpleSilent(addr.clone()));
            }
            if h.conn.prepared.len() > MAX_PREPARED_PER_CONNECTION {
                // Only pgshard's own: the client's own coordinator connection holds
                // the client's prepared statements too.
                let sql = if *addr == self.shared.coordinator {
                    h.conn
                        .prepared
                        .iter()
                        .map(|id| format!("DEALLOCATE {}", quote_ident(&backend_name(*id))))
                        .collect::<Vec<_>>()
                        .join("; ")
                } else {
                    "DEALLOCATE ALL".to_string()
                };
                msg::write_query(&mut h.conn.wbuf, &sql);
                h.conn.prepared.clear();
                h.dirty = true;
                self.pending.push_back(Expect::SimpleSilent(addr.clone()));
            }
            if self.tx.state != TxnState::Idle && h.conn.txn_status == b'I' {
                if extended && self.savepoints.is_empty() && self.local_settings.is_empty() {
                    self.write_begin(idx);
                } else {
                    let begin_text = tagged_begin_text(&self.tx.begin_text, self.tx.txn_serial);
                    let begin = begin_sequence(&begin_text, &self.savepoints, &self.local_settings);
                    msg::write_query(&mut h.conn.wbuf, &begin);
                    h.dirty = true;
                    self.pending.push_back(Expect::SimpleSilent(addr.clone()));
                }
            }
        }
        // Drain whatever another backend still owes before this one gets work.
        let other_dirty = self
            .tx
            .held
            .iter()
            .enumerate()
            .any(|(i, h)| i != idx && h.dirty);
        if other_dirty || self.pending.iter().any(|e| matches!(e, Expect::One(a) | Expect::Execute(a) | Expect::ParseSilent(a) | Expect::OneSilent(a) if a != addr)) {
            self.drain_all().await?;
        }
        if write {
            self.tx.held[idx].wrote = true;
        }
        Ok(idx)
    }

    /// Queues the block's BEGIN on held connection `idx` as a prepared statement
    /// without Sync: it travels in the same write as the batch's first statement and
    /// is answered together with it. A simple-query BEGIN would be answered (and
    /// flushed, waking pgshard) on its own: one send and one wake-up more per node and
    /// transaction.
    pub(super) fn write_begin(&mut self, idx: usize) {
        let id = match &self.tx.begin_statement {
            Some((text, id)) if *text == self.tx.begin_text => *id,
            _ => {
                let id = self.shared.statements.id(&self.tx.begin_text, &[], 0);
                self.tx.begin_statement = Some((self.tx.begin_text.clone(), id));
                id
            }
        };
        let h = &mut self.tx.held[idx];
        let name = backend_name(id);
        if !h.conn.prepared.contains(&id) {
            msg::write_parse(&mut h.conn.wbuf, &name, &self.tx.begin_text, &[]);
            h.conn.prepared.insert(id);
            self.pending
                .push_back(Expect::ParseSilent(h.conn.addr.clone()));
        }
        msg::write_bind(&mut h.conn.wbuf, "", &name, &[], &[], &[]);
        msg::write_execute(&mut h.conn.wbuf, "", 0);
        // In a block from here on, as far as anything sent after it is concerned (the
        // batch's ReadyForQuery tells the truth).
        h.conn.txn_status = b'T';
        h.dirty = true;
        let addr = &h.conn.addr;
        self.pending.push_back(Expect::OneSilent(addr.clone()));
        self.pending.push_back(Expect::OneSilent(addr.clone()));
        if deadlock::tags_transactions() {
            self.write_transaction_tag(idx);
        }
    }

    /// Queues the block's tag for other pgshard processes' deadlock detectors
    /// (`deadlock::TAG_SQL`) after its BEGIN on held connection `idx`, like BEGIN
    /// without Sync.
    fn write_transaction_tag(&mut self, idx: usize) {
        let id = self.shared.statements.id(deadlock::TAG_SQL, &[], 0);
        let h = &mut self.tx.held[idx];
        let name = backend_name(id);
        if !h.conn.prepared.contains(&id) {
            msg::write_parse(&mut h.conn.wbuf, &name, deadlock::TAG_SQL, &[]);
            h.conn.prepared.insert(id);
            self.pending
                .push_back(Expect::ParseSilent(h.conn.addr.clone()));
        }
        let params: Vec<Option<Bytes>> = deadlock::tag_params(self.tx.txn_serial)
            .into_iter()
            .map(|p| Some(Bytes::from(p)))
            .collect();
        msg::write_bind(&mut h.conn.wbuf, "", &name, &[], &params, &[]);
        msg::write_execute(&mut h.conn.wbuf, "", 0);
        let addr = &h.conn.addr;
        self.pending.push_back(Expect::OneSilent(addr.clone()));
        self.pending.push_back(Expect::OneSilent(addr.clone()));
    }

    /// Turns the current autocommit batch into a transaction block of pgshard's own
    /// (committed, with 2PC where several nodes wrote, when the batch or statement ends).
    pub(super) async fn upgrade_to_implicit_block(&mut self) -> PgResult<()> {
        self.drain_all().await?;
        if self.batch_error {
            return Err(aborted_error());
        }
        self.tx.begin_text = "BEGIN".into();
        self.tx.txn_serial = self
            .shared
            .next_transaction
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let begin = tagged_begin_text(&self.tx.begin_text, self.tx.txn_serial);
        for h in self.tx.held.iter_mut().filter(|h| h.in_batch) {
            // BEGIN inside the implicit transaction turns it into a block.
            msg::write_query(&mut h.conn.wbuf, &begin);
            h.dirty = true;
            self.pending
                .push_back(Expect::SimpleSilent(h.conn.addr.clone()));
        }
        self.tx.state = TxnState::InBlock;
        self.tx.implicit_block = true;
        Ok(())
    }

    /// Sends what is buffered (with Flush) and reads every expected reply in order.
    pub(super) async fn drain_all(&mut self) -> PgResult<()> {
        for h in self.tx.held.iter_mut() {
            if h.dirty {
                msg::write_flush(&mut h.conn.wbuf);
                h.dirty = false;
                h.conn.flush().await?;
            }
        }
        self.drain_pending().await
    }

    pub(super) async fn drain_pending(&mut self) -> PgResult<()> {
        while let Some(item) = self.pending.pop_front() {
            let (addr, kind) = match item {
                Expect::Local(b) => {
                    if !self.batch_error {
                        self.out.extend_from_slice(&b);
                    }
                    continue;
                }
                Expect::ParseSilent(a) => (a, 0),
                Expect::One(a) => (a, 1),
                Expect::Execute(a) => (a, 2),
                Expect::SimpleSilent(a) => (a, 3),
                Expect::OneSilent(a) => (a, 4),
            };
            let Some(idx) = self.held_index(&addr) else {
                continue;
            };
            if self.tx.held[idx].errored {
                continue;
            }
            loop {
                let f = self.tx.held[idx].conn.read().await?;
                match f.tag {
                    b'E' => {
                        if kind == 3 {
                            // pgshard's own statement failed: the client sees it, the
                            // connection answers nothing more until the ReadyForQuery.
                            self.tx.held[idx].conn.drain_to_ready().await.ok();
                        } else {
                            self.tx.held[idx].errored = true;
                        }
                        if !self.batch_error {
                            self.forward_backend_error(idx, f.body);
                        }
                        self.fail();
                        self.skipping = true;
                        break;
                    }
                    // After an error the client hears nothing more until ReadyForQuery.
                    _ if self.batch_error && kind != 3 => {
                        if matches!(
                            (kind, f.tag),
                            (0, b'1') | (1, _) | (2, b'C' | b'I' | b's') | (4, b'2' | b'C')
                        ) {
                            break;
                        }
                    }
                    // pgshard's own Parse of a statement the client's Parse was
                    // answered for already: its notices (string-literal warnings)
                    // reached the client then.
                    b'N' if kind == 0 => {}
                    b'N' | b'A' | b'S' if kind != 3 => {
                        msg::write_raw(&mut self.out, f.tag, &f.body);
                        if self.out.len() >= CLIENT_FLUSH_AT {
                            self.flush_client().await?;
                        }
                    }
                    b'A' if kind == 3 => msg::write_raw(&mut self.out, f.tag, &f.body),
                    b'Z' if kind == 3 => break,
                    _ if kind == 3 => {}
                    b'1' if kind == 0 => break,
                    b'2' | b'C' if kind == 4 => break,
                    _ if kind == 1 => {
                        msg::write_raw(&mut self.out, f.tag, &f.body);
                        break;
                    }
                    b'C' | b'I' | b's' if kind == 2 => {
                        msg::write_raw(&mut self.out, f.tag, &f.body);
                        break;
                    }
                    b'G' if kind == 2 => {
                        // COPY FROM STDIN through the extended protocol.
                        msg::write_raw(&mut self.out, f.tag, &f.body);
                        self.flush_client().await?;
                        self.relay_copy_in(idx, true).await?;
                    }
                    _ if kind == 2 => {
                        msg::write_raw(&mut self.out, f.tag, &f.body);
                        if self.out.len() >= CLIENT_FLUSH_AT {
                            self.flush_client().await?;
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Ends the batch: Sync to every connection it touched, and in autocommit the
    /// connections go back to their pools. True when something in the batch failed.
    pub(super) async fn end_batch(&mut self) -> bool {
        let mut result = Ok(());
        for h in self.tx.held.iter_mut() {
            if h.in_batch {
                msg::write_sync(&mut h.conn.wbuf);
                h.dirty = false;
                if let Err(e) = h.conn.flush().await {
                    result = Err(e);
                }
            }
        }
        if result.is_ok() {
            result = self.drain_pending().await;
        }
        self.pending.clear();
        for i in 0..self.tx.held.len() {
            if self.tx.held[i].in_batch {
                self.tx.held[i].in_batch = false;
                if self.tx.held[i].conn.broken {
                    // Lost, or ended by a FATAL the client heard already.
                    continue;
                }
                if let Err(e) = self.tx.held[i].conn.drain_to_ready().await {
                    // A lost connection, or an error of the implicit transaction's
                    // commit at Sync (a deferred constraint): the client hears it,
                    // unless it heard an error of the batch already.
                    if result.is_ok()
                        && (e.code == sqlstate::CONNECTION_FAILURE || !self.batch_error)
                    {
                        result = Err(e);
                    }
                }
            }
        }
        let failed = result.is_err() || self.batch_error;
        if let Err(e) = result {
            if !self.batch_error {
                self.write_client_error(&e);
            }
            self.fail();
        }
        if let Some(i) = self.held_index(&self.shared.coordinator) {
            self.absorb_held_reports(i);
        }
        if self.tx.state == TxnState::Idle {
            self.release_all();
        }
        self.batch_error = false;
        failed
    }

    /// A backend's ErrorResponse as the client should see it: forwarded unchanged,
    /// except a cancellation by the distributed deadlock detector, which becomes 40P01.
    pub(super) fn backend_error(&mut self, idx: usize, body: Bytes) -> PgError {
        let e = PgError::from_server_fields(body);
        if e.code == sqlstate::QUERY_CANCELED {
            let conn = &self.tx.held[idx].conn;
            if let Some(text) = deadlock::take_victim(&conn.addr, conn.process_id) {
                self.tx.deadlocked = true;
                return PgError::new(deadlock::DEADLOCK_DETECTED, text);
            }
        }
        let conn = &self.tx.held[idx].conn;
        if conn.addr == self.shared.coordinator {
            // The client's own backend: its words are the client's, FATAL included
            // (the session ends with it).
            return e;
        }
        going_away(e, &conn.addr)
    }

    pub(super) fn forward_backend_error(&mut self, idx: usize, body: Bytes) {
        let e = self.backend_error(idx, body);
        self.write_client_error(&e);
    }

    /// Writes an error for the client. A FATAL ends the client's connection: nothing
    /// written after it reaches the client (`flush_client`), as nothing follows a
    /// FATAL of PostgreSQL's.
    pub(crate) fn write_client_error(&mut self, e: &PgError) {
        crate::metrics::error(&e.code);
        msg::write_error(&mut self.out, e);
        if e.is_fatal() && self.client_ends_at.is_none() {
            self.client_ends_at = Some(self.out.len());
        }
    }

    /// Whether the client was sent a FATAL: its connection is to be closed.
    pub fn client_ended(&self) -> bool {
        self.client_ends_at.is_some()
    }

    /// After a distributed deadlock the victim's transaction releases its locks at
    /// once, as PostgreSQL's victim does (the block stays failed until ROLLBACK):
    /// every node of the block rolls back now, unless savepoints may still be rolled
    /// back to.
    pub(super) async fn release_deadlock_victim(&mut self) {
        if !std::mem::take(&mut self.tx.deadlocked) || !self.savepoints.is_empty() {
            return;
        }
        for h in self.tx.held.iter_mut() {
            if h.conn.txn_status != b'I' && !h.conn.broken {
                h.conn.simple("ROLLBACK").await.ok();
            }
        }
    }

    /// Runs one of pgshard's transaction statements (savepoints) on every node the
    /// block uses.
    pub(super) async fn on_every_held(&mut self, sql: &str) -> PgResult<()> {
        self.on_every_held_but(usize::MAX, sql).await
    }

    /// Runs `sql` on every connection of the block except the held one at `skip`.
    pub(super) async fn on_every_held_but(&mut self, skip: usize, sql: &str) -> PgResult<()> {
        self.drain_all().await?;
        for (i, h) in self.tx.held.iter_mut().enumerate() {
            if i != skip && h.conn.txn_status != b'I' {
                h.conn
                    .simple(sql)
                    .await
                    .map_err(|e| with_node(e, &h.conn.addr))?;
            }
        }
        Ok(())
    }

    pub(super) fn release_all(&mut self) {
        // A transaction's end may change reported settings (SET LOCAL, set_config
        // with is_local): the other nodes follow the client's own backend.
        if let Some(i) = self.held_index(&self.shared.coordinator) {
            self.absorb_held_reports(i);
        }
        self.tx.held.clear();
        self.running.lock().unwrap().clear();
        self.portals.clear();
        self.names_after_block(true);
    }

    // ---- planning --------------------------------------------------------
}

/// A block's BEGIN for a simple-query string, with its tag while other pgshard
/// processes serve the cluster (`deadlock::tags_transactions`); borrowed otherwise.
fn tagged_begin_text(begin_text: &str, txn_serial: u64) -> std::borrow::Cow<'_, str> {
    if deadlock::tags_transactions() {
        format!("{begin_text}; {}", deadlock::tag_statement(txn_serial)).into()
    } else {
        begin_text.into()
    }
}
