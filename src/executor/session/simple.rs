//! The simple query protocol: a query string's statements planned and run in turn,
//! relayed statements on one node, COPY FROM STDIN relayed to a node.

use super::*;

impl Session {
    /// [`Self::simple_query`], run once more when its only answer so far is a worker's
    /// "relation ... does not exist" (42P01) for a shard table and the catalog has
    /// changed meanwhile: the shard was replaced under the statement
    /// (`alter_distributed_table` drops the old shards when it commits; a write waits
    /// for its lock there, then finds it gone). Outside a transaction block only, and
    /// only when nothing of the string reached the client or ran before it (the error
    /// was its first output, and the failed statement was rolled back whole), so the
    /// second run is what the client would do on its own, with the new shards.
    pub(super) async fn simple_query_retrying(&mut self, sql: &str) -> PgResult<()> {
        let idle = self.tx.state == TxnState::Idle;
        let (mark, flushes) = (self.out.len(), self.client_flushes);
        let version = self.shared.catalog.snapshot().version;
        self.simple_query(sql).await?;
        if !idle
            || self.tx.state != TxnState::Idle
            || self.client_flushes != flushes
            || !moved_shard_error(&self.out[mark.min(self.out.len())..])
        {
            return Ok(());
        }
        if let Err(e) = self.shared.catalog.try_reload().await {
            tracing::warn!("catalog reload failed: {e}");
            return Ok(());
        }
        if self.shared.catalog.snapshot().version == version {
            return Ok(());
        }
        tracing::debug!("statement run again after its shard was replaced: {sql}");
        self.out.truncate(mark);
        self.simple_query(sql).await
    }

    pub(super) async fn simple_query(&mut self, sql: &str) -> PgResult<()> {
        let catalog = self.shared.catalog.snapshot();
        self.activity_started(sql.into());
        // Statements differing from an earlier one only in constants reuse its plan
        // (not while statements are counted: their shapes and keys come from the plan).
        let scanned =
            if self.tx.state != TxnState::Failed && !self.stat_track && !self.strings_matter(sql) {
                fastpath::scan(sql)
            } else {
                None
            };
        if let Some(sc) = &scanned {
            let version = (catalog.version, self.names_epoch(&catalog));
            if let Some(fast) = self.shapes.lookup(version, sc, sql) {
                crate::metrics::statement(match fast {
                    FastPlan::Local { .. } => crate::metrics::StatementKind::Local,
                    FastPlan::Router { .. } => crate::metrics::StatementKind::Router,
                });
                let r = match fast {
                    FastPlan::Local { write } => {
                        let coord = self.shared.coordinator.clone();
                        self.simple_on_backend(&coord, sql, write).await
                    }
                    FastPlan::Router {
                        table,
                        hash,
                        shard_sql,
                        read_only,
                    } => match table.shard_for_hash(hash) {
                        Some(shard) => match placement_addr(&catalog, shard) {
                            Ok(addr)
                                if read_only
                                    && self
                                        .pipelined_simple_read(&addr, &shard_sql(shard.shard_id))
                                        .await =>
                            {
                                Ok(())
                            }
                            Ok(addr) => {
                                self.simple_on_backend(
                                    &addr,
                                    &shard_sql(shard.shard_id),
                                    !read_only,
                                )
                                .await
                            }
                            Err(e) => Err(e),
                        },
                        None => Err(PgError::internal(format!(
                            "no shard of \"{}\" covers hash {hash}",
                            table.name
                        ))),
                    },
                };
                self.finish_simple(r).await;
                return Ok(());
            }
        }
        let stmts = match self.parse_client(sql).await {
            Ok(s) => s,
            Err(e) => {
                self.write_client_error(&e);
                self.fail();
                self.batch_error = false;
                return Ok(());
            }
        };
        let mut plans = Vec::with_capacity(stmts.len());
        let mut planned_names = self.names_epoch(&catalog);
        for s in &stmts {
            match self.plan_statement(s, &catalog).await {
                Ok(p) => plans.push(p),
                Err(e) => {
                    self.write_client_error(&e);
                    self.fail();
                    self.batch_error = false;
                    return Ok(());
                }
            }
        }
        for (stmt, plan) in stmts.iter().zip(&plans) {
            for w in Self::string_warnings(stmt, matches!(plan, Plan::Local)) {
                client_text::write_warning(&mut self.out, w);
            }
        }
        for (stmt, plan) in stmts.iter().zip(&plans) {
            if self.stat_track {
                self.count_statement(stmt, plan);
            }
            crate::metrics::statement(crate::metrics::StatementKind::of(plan));
        }
        let mut stateful = false;
        for (stmt, plan) in stmts.iter().zip(&plans) {
            match self.isolate_if_stateful(stmt, plan).await {
                Ok(s) => stateful |= s,
                Err(e) => {
                    self.write_client_error(&e);
                    self.fail();
                    self.batch_error = false;
                    return Ok(());
                }
            }
        }
        // A shape that may leave session state is checked again each time it runs, and
        // a `set_config` on the coordinator node is followed each time.
        let sets_config = stmts
            .iter()
            .any(|s| !isolation::set_config_calls(&s.text).is_empty());
        // Statements pgshard extended run as extended, never as the client's string.
        let extended = stmts
            .iter()
            .any(|s| s.form == crate::sql::parse::StringForm::CitusViews);
        if let (Some(sc), [stmt], [plan], false) = (
            scanned,
            stmts.as_slice(),
            plans.as_slice(),
            stateful || sets_config || extended,
        ) {
            if let (Some(node), false) = (&stmt.node, planner::names::may_change_names(stmt)) {
                // A routed statement whose functions are evaluated on the coordinator
                // node is planned each time (a shape would send them to the shard).
                if matches!(plan, Plan::Local) || !self.evaluates_once(node).await {
                    let version = (catalog.version, planned_names);
                    self.shapes
                        .remember(version, sc, node, plan, !is_read_only_local(stmt));
                }
            }
        }
        if stmts.len() > 1
            && plans.iter().all(|p| matches!(p, Plan::Local))
            && self.tx.state != TxnState::Failed
            && !sets_config
            && !extended
        {
            // Only the coordinator node: the string goes there whole, keeping
            // PostgreSQL's own multi-statement semantics.
            let coord = self.shared.coordinator.clone();
            let r = self
                .simple_on_backend(&coord, sql, !stmts.iter().all(is_read_only_local))
                .await;
            for stmt in &stmts {
                self.note_names_change(stmt);
            }
            self.finish_simple(r).await;
            return Ok(());
        }
        if stmts.len() > 1
            && self.tx.state == TxnState::Idle
            && self.tx.held.is_empty()
            && !extended
        {
            if let Some(begin) = implicit::local_with_transaction_control(&plans) {
                let r = self.local_with_transaction_control(sql, begin).await;
                for stmt in &stmts {
                    self.note_names_change(stmt);
                }
                return r;
            }
        }
        let planned_with = catalog.version;
        let mut catalog = catalog;
        // Several statements run as one implicit transaction in PostgreSQL.
        self.implicit_txn = stmts.len() > 1;
        let mut failed = false;
        for (i, stmt) in stmts.iter().enumerate() {
            // A statement before this one may have changed the catalog (e.g.
            // create_distributed_table): this one and the rest are planned again.
            let replanned;
            let current = (i > 0).then(|| self.shared.catalog.snapshot());
            // ... and likewise after one that may have changed what names stand for
            // (`set search_path = s2; select * from t`).
            let current = current
                .filter(|c| c.version != planned_with || self.names_epoch(c) != planned_names);
            let plan = if let Some(current) = current {
                catalog = current;
                let planned = match self.plan_statement(stmt, &catalog).await {
                    Ok(p) => self.isolate_if_stateful(stmt, &p).await.map(|_| p),
                    Err(e) => Err(e),
                };
                planned_names = self.names_epoch(&catalog);
                match planned {
                    Ok(p) => {
                        replanned = p;
                        &replanned
                    }
                    Err(e) => {
                        self.write_client_error(&e);
                        self.fail();
                        self.batch_error = false;
                        failed = true;
                        break;
                    }
                }
            } else {
                &plans[i]
            };
            if self.tx.state == TxnState::Failed && !plan.ends_failed_block() {
                let e = aborted_error();
                self.write_client_error(&e);
                failed = true;
                break;
            }
            if stmts.len() > 1
                && self.tx.state == TxnState::Idle
                && !matches!(plan, Plan::Session(SessionCommand::Transaction(_)))
                && !(implicit::needs_own_transaction(plan)
                    && implicit::alone_in_implicit_transaction(&plans[i + 1..]))
            {
                self.begin_string_block();
            }
            // Stable functions evaluated once, here, and their values sent to the shards.
            let evaluated = match self.evaluate_once(stmt, plan, &catalog).await {
                Ok(e) => e,
                Err(e) => {
                    self.finish_simple(Err(e)).await;
                    failed = true;
                    break;
                }
            };
            let (stmt, plan) = match &evaluated {
                Some((s, p)) => (s, p),
                None => (stmt, plan),
            };
            let mut sink = ResultSink::default();
            let params = BoundParams {
                types: &[],
                bind: None,
            };
            self.note_names_change(stmt);
            let r = match plan {
                Plan::Local => {
                    // A query string of one statement goes as the client wrote it
                    // (comments and `;` too): PostgreSQL keeps it whole as the
                    // statement's text (pg_prepared_statements, pg_cursors,
                    // pg_stat_activity).
                    let text = if stmts.len() == 1 && !extended {
                        sql
                    } else {
                        stmt.client_text()
                    };
                    let coord = self.shared.coordinator.clone();
                    let r = self
                        .simple_on_backend(&coord, text, !is_read_only_local(stmt))
                        .await;
                    if r.is_ok() && !self.batch_error {
                        self.follow_set_config(stmt).await
                    } else {
                        r
                    }
                }
                Plan::Router(r) => match route_bound(r, &[], &BindMsg::default_empty(), &catalog) {
                    Ok(shard) => match placement_addr(&catalog, shard) {
                        Ok(addr) => {
                            let sql = r.template.for_shard(shard.shard_id);
                            self.simple_on_backend(&addr, &sql, !r.read_only).await
                        }
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e),
                },
                _ => {
                    self.run_plan(plan, stmt, &params, &[], true, &mut sink)
                        .await
                }
            };
            for f in sink.frames.drain(..) {
                msg::write_raw(&mut self.out, f.tag, &f.body);
            }
            failed = r.is_err() || self.batch_error;
            self.finish_simple(r).await;
            if failed {
                break;
            }
        }
        if self.tx.string_block {
            failed = self.end_string_block(failed).await;
        }
        self.end_implicit_settings(failed);
        self.implicit_txn = false;
        Ok(())
    }

    pub(super) async fn finish_simple(&mut self, r: PgResult<()>) {
        if let Err(e) = r {
            if !self.batch_error {
                self.write_client_error(&e);
            }
            self.fail();
        }
        self.release_deadlock_victim().await;
        self.batch_error = false;
        for h in self.tx.held.iter_mut() {
            h.in_batch = false;
        }
        if self.tx.state == TxnState::Idle {
            self.release_all();
        }
    }

    /// Runs SQL on one backend with the simple protocol, forwarding its replies.
    pub(super) async fn simple_on_backend(
        &mut self,
        addr: &NodeAddr,
        sql: &str,
        write: bool,
    ) -> PgResult<()> {
        self.simple_on_backend_into(addr, sql, write, None)
            .await
            .map(|_| ())
    }

    /// Runs SQL on one backend with the simple protocol. Its replies go to the client,
    /// or into `sink` when one is given (an error is then only returned). Returns the
    /// backend's index in `held`.
    pub(super) async fn simple_on_backend_into(
        &mut self,
        addr: &NodeAddr,
        sql: &str,
        write: bool,
        mut sink: Option<&mut ResultSink>,
    ) -> PgResult<usize> {
        let idx = self.join(addr, write).await?;
        self.drain_all().await?;
        let h = &mut self.tx.held[idx];
        msg::write_query(&mut h.conn.wbuf, sql);
        h.conn.flush().await?;
        let mut err = None;
        loop {
            let f = self.tx.held[idx].conn.read().await?;
            match (f.tag, sink.as_deref_mut()) {
                (b'Z', _) => break,
                (b'E', to_sink) => {
                    let e = self.backend_error(idx, f.body);
                    if to_sink.is_none() {
                        self.write_client_error(&e);
                    }
                    err = Some(e);
                    if self.tx.held[idx].conn.broken {
                        // A FATAL: the connection closes, no ReadyForQuery follows.
                        break;
                    }
                }
                (_, Some(to_sink)) => to_sink.push_frame(f.tag, f.body),
                (b'G', None) => {
                    // COPY FROM STDIN: the client's data streams through to this backend.
                    msg::write_raw(&mut self.out, f.tag, &f.body);
                    self.flush_client().await?;
                    self.relay_copy_in(idx, false).await?;
                }
                (_, None) => {
                    msg::write_raw(&mut self.out, f.tag, &f.body);
                    if self.out.len() >= CLIENT_FLUSH_AT {
                        self.flush_client().await?;
                    }
                }
            }
        }
        self.tx.held[idx].in_batch = false;
        self.absorb_held_reports(idx);
        if let Some(e) = err {
            self.fail();
            self.batch_error = sink.is_none();
            return Err(e);
        }
        Ok(idx)
    }

    /// Relays CopyData from the client to a backend until CopyDone or CopyFail. What
    /// the backend sends meanwhile (NOTICEs raised per row) reaches the client at once,
    /// and writes to the backend never wait without reading it (both sides' buffers
    /// full would hang for good). An ErrorResponse ends the relay at once: the caller
    /// forwards it and ReadyForQuery, as PostgreSQL sends them without waiting for the
    /// rest of the data, and the client's remaining COPY messages are ignored.
    /// `extended`: the COPY came through the extended protocol, where the node holds
    /// its CommandComplete until a Flush (or the client's Sync, which pgshard reads later).
    pub(super) async fn relay_copy_in(&mut self, idx: usize, extended: bool) -> PgResult<()> {
        loop {
            while let Some(tag) = self.tx.held[idx].conn.buffered_tag() {
                if !matches!(tag, b'N' | b'A' | b'S') {
                    return Ok(());
                }
                let f = self.tx.held[idx].conn.read().await?;
                msg::write_raw(&mut self.out, f.tag, &f.body);
            }
            if !self.out.is_empty() {
                self.flush_client().await?;
            }
            let conn = &mut self.tx.held[idx].conn;
            // Small messages are batched while the client's next one is already here.
            if !conn.wbuf.is_empty()
                && (conn.wbuf.len() >= CLIENT_FLUSH_AT || !self.reader.has_frame())
            {
                conn.flush().await?;
                if conn.buffered_tag().is_some() {
                    continue;
                }
            }
            let f = if self.reader.has_frame() {
                self.reader.frame().await?
            } else {
                let reader = &mut self.reader;
                tokio::select! {
                    r = conn.receive() => {
                        r?;
                        continue;
                    }
                    f = reader.frame() => f?,
                }
            };
            let Some(f) = f else {
                let h = &mut self.tx.held[idx];
                msg::write_raw(&mut h.conn.wbuf, b'f', b"client connection lost\0");
                h.conn.flush().await?;
                return Err(PgError::new(
                    sqlstate::CONNECTION_FAILURE,
                    "client connection lost during COPY",
                ));
            };
            let h = &mut self.tx.held[idx];
            match f.tag {
                b'd' => msg::write_raw(&mut h.conn.wbuf, b'd', &f.body),
                b'c' | b'f' => {
                    msg::write_raw(&mut h.conn.wbuf, f.tag, &f.body);
                    if extended {
                        msg::write_flush(&mut h.conn.wbuf);
                    }
                    h.conn.flush().await?;
                    return Ok(());
                }
                b'H' | b'S' => {}
                other => {
                    let m = format!("unexpected message type 0x{other:02x} during COPY from stdin");
                    let mut body = Vec::new();
                    body.extend_from_slice(m.as_bytes());
                    body.push(0);
                    msg::write_raw(&mut h.conn.wbuf, b'f', &body);
                    h.conn.flush().await?;
                    return Ok(());
                }
            }
        }
    }
}

/// Whether `out` is exactly one ErrorResponse saying a shard table
/// (`relation "<schema>.<table>_<shardid>" does not exist`, 42P01) is missing.
fn moved_shard_error(out: &[u8]) -> bool {
    let [b'E', l0, l1, l2, l3, body @ ..] = out else {
        return false;
    };
    if u32::from_be_bytes([*l0, *l1, *l2, *l3]) as usize != body.len() + 4 {
        return false;
    }
    let e = PgError::from_server_fields(Bytes::copy_from_slice(body));
    if e.code != sqlstate::UNDEFINED_TABLE {
        return false;
    }
    let Some(name) = e
        .message
        .strip_prefix("relation \"")
        .and_then(|m| m.strip_suffix("\" does not exist"))
    else {
        return false;
    };
    name.rsplit_once('_').is_some_and(|(table, id)| {
        !table.is_empty() && !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_a_missing_shard() {
        let frame = |code: &str, message: &str| {
            let mut out = BytesMut::new();
            msg::write_error(&mut out, &PgError::new(code, message));
            out
        };
        assert!(moved_shard_error(&frame(
            "42P01",
            "relation \"public.t_102008\" does not exist"
        )));
        assert!(!moved_shard_error(&frame(
            "42P01",
            "relation \"t\" does not exist"
        )));
        assert!(!moved_shard_error(&frame(
            "42P01",
            "relation \"t_x\" does not exist"
        )));
        assert!(!moved_shard_error(&frame(
            "23505",
            "relation \"t_1\" does not exist"
        )));
        let mut two = frame("42P01", "relation \"public.t_1\" does not exist");
        two.extend_from_slice(&frame("42P01", "relation \"public.t_1\" does not exist"));
        assert!(!moved_shard_error(&two));
        assert!(!moved_shard_error(b""));
    }
}
