//! The extended query protocol: Parse, Bind, Describe, Execute, Close, Sync, and the
//! descriptions of statements pgshard plans itself.

use super::*;

impl Session {
    /// Describes a statement on the coordinator node (its shell tables make this exact),
    /// on the client's own connection there: inside its block, it sees the block's
    /// uncommitted DDL, as PostgreSQL's Parse would.
    pub(super) async fn describe_on_coordinator(
        &mut self,
        sql: &str,
        types: &[u32],
    ) -> PgResult<StatementMeta> {
        self.describe_named_on_coordinator("", sql, types).await
    }

    /// Parses `sql` as statement `name` on the client's own coordinator-node
    /// connection and describes it.
    pub(super) async fn describe_named_on_coordinator(
        &mut self,
        name: &str,
        sql: &str,
        types: &[u32],
    ) -> PgResult<StatementMeta> {
        let coord = self.shared.coordinator.clone();
        if let Some(i) = self.held_index(&coord) {
            self.drain_all().await?;
            // A statement of the batch failed meanwhile: the node skips to Sync and
            // would answer nothing (the client is told once, already).
            if self.batch_error {
                return Err(aborted_error());
            }
            let in_batch = self.tx.held[i].in_batch;
            let r = describe_on(&mut self.tx.held[i].conn, name, sql, types, in_batch).await;
            self.absorb_held_reports(i);
            if in_batch && r.is_err() {
                self.tx.held[i].errored = true;
            }
            return r;
        }
        let mut conn = self.home_with_settings().await?;
        let meta = describe_on(&mut conn, name, sql, types, false).await;
        self.absorb_home_reports(&mut conn);
        meta
    }

    pub(super) fn meta_without_backend(plan: &Plan, declared: &[u32]) -> StatementMeta {
        let mut n_params = declared.len();
        if let Plan::Utility { args, .. } = plan {
            for (_, a) in args {
                if let UtilityArg::Param(i) = a {
                    n_params = n_params.max(i + 1);
                }
            }
        }
        let mut param_types = declared.to_vec();
        param_types.resize(n_params, 25);
        for t in param_types.iter_mut() {
            if *t == 0 {
                *t = 25;
            }
        }
        let fields = match plan {
            Plan::Utility { name, .. } => Some(
                commands::result_columns(name)
                    .iter()
                    .map(|(n, t)| FieldDesc::computed(n, *t, -1, 0))
                    .collect(),
            ),
            _ => None,
        };
        StatementMeta {
            param_types,
            fields,
        }
    }

    // ---- extended protocol -----------------------------------------------

    pub(super) async fn parse_message(&mut self, p: msg::ParseMsg) -> PgResult<()> {
        if !p.name.is_empty() && self.statements.contains_key(&p.name) {
            return Err(PgError::new(
                sqlstate::DUPLICATE_PREPARED_STATEMENT,
                format!("prepared statement \"{}\" already exists", p.name),
            ));
        }
        let prepared = self.prepare(&p.name, p.query, &p.param_types).await?;
        let mut b = BytesMut::new();
        for w in Self::string_warnings(&prepared.stmt, false) {
            client_text::write_warning(&mut b, w);
        }
        self.statements.insert(p.name, prepared);
        msg::write_parse_complete(&mut b);
        self.pending.push_back(Expect::Local(b.freeze()));
        Ok(())
    }

    /// Plans and describes a statement the client prepares as `name` ("" = unnamed).
    pub(super) async fn prepare(
        &mut self,
        name: &str,
        sql: String,
        declared: &[u32],
    ) -> PgResult<Arc<Prepared>> {
        let mut stmts = self.parse_client(&sql).await?;
        if stmts.len() > 1 {
            return Err(PgError::new(
                sqlstate::SYNTAX_ERROR,
                "cannot insert multiple commands into a prepared statement",
            ));
        }
        let stmt = stmts.remove(0);
        let text = crate::stats::statements::PreparedText::new(&sql);
        // A statement pgshard extended (Citus's rows in pg_settings) runs as extended.
        let sql = if stmt.form == crate::sql::parse::StringForm::CitusViews {
            stmt.text.clone()
        } else {
            sql
        };
        let catalog = self.shared.catalog.snapshot();
        let plan = self.plan_statement(&stmt, &catalog).await?;
        let names_epoch = self.names_epoch(&catalog);
        if self.tx.state == TxnState::Failed && !plan.ends_failed_block() {
            return Err(aborted_error());
        }
        if let Plan::Unsupported(e) = &plan {
            return Err(e.clone());
        }
        self.isolate_if_stateful(&stmt, &plan).await?;
        let mut home_name = None;
        let meta = match &plan {
            // One reading Citus's statistics views is rewritten at each Bind (fresh
            // rows), so it is not prepared on the home connection.
            Plan::Local if !name.is_empty() && !reads_live_views(&stmt, &text) => {
                let meta = self.prepare_on_home(name, &sql, declared).await?;
                home_name = Some(name.to_string());
                meta
            }
            p if prepared::described_on_coordinator(p) => {
                self.describe_on_coordinator(&sql, declared).await?
            }
            _ => Self::meta_without_backend(&plan, declared),
        };
        let evaluates = self.prepared_evaluates(&stmt, &plan).await;
        Ok(Arc::new(Prepared {
            sql,
            text,
            stmt,
            plan,
            catalog_version: catalog.version,
            names_epoch,
            meta,
            home_name,
            shard_sql: Mutex::new(HashMap::new()),
            evaluates,
            evaluated: false,
        }))
    }

    /// The statement, re-planned if the catalog changed since it was prepared.
    pub(super) async fn current_statement(&mut self, name: &str) -> PgResult<Arc<Prepared>> {
        let Some(p) = self.statements.get(name).cloned() else {
            return Err(PgError::new(
                sqlstate::INVALID_SQL_STATEMENT_NAME,
                format!("prepared statement \"{name}\" does not exist"),
            ));
        };
        let catalog = self.shared.catalog.snapshot();
        if catalog.version == p.catalog_version && self.names_epoch(&catalog) == p.names_epoch {
            return Ok(p);
        }
        let plan = self.plan_statement(&p.stmt, &catalog).await?;
        let names_epoch = self.names_epoch(&catalog);
        self.isolate_if_stateful(&p.stmt, &plan).await?;
        // As PostgreSQL's plan cache: a statement whose result shape the DDL changed
        // fails until the client prepares it again (0A000).
        self.check_result_shape(&p, &plan).await?;
        let evaluates = self.prepared_evaluates(&p.stmt, &plan).await;
        let fresh = Arc::new(Prepared {
            sql: p.sql.clone(),
            text: p.text.clone(),
            stmt: p.stmt.clone(),
            plan,
            catalog_version: catalog.version,
            names_epoch,
            meta: p.meta.clone(),
            home_name: p.home_name.clone(),
            shard_sql: Mutex::new(HashMap::new()),
            evaluates,
            evaluated: false,
        });
        self.statements.insert(name.to_string(), fresh.clone());
        Ok(fresh)
    }

    pub(super) async fn bind_message(&mut self, bind: BindMsg) -> PgResult<()> {
        let stmt = self.current_statement(&bind.statement).await?;
        self.note_names_change(&stmt.stmt);
        if bind.params.len() != stmt.meta.param_types.len() {
            return Err(PgError::new(
                sqlstate::PROTOCOL_VIOLATION,
                format!(
                    "bind message supplies {} parameters, but prepared statement \"{}\" requires {}",
                    bind.params.len(),
                    bind.statement,
                    stmt.meta.param_types.len()
                ),
            ));
        }
        if !bind.portal.is_empty() && self.portals.contains_key(&bind.portal) {
            return Err(PgError::new(
                sqlstate::INVALID_CURSOR_NAME,
                format!("portal \"{}\" already exists", bind.portal),
            ));
        }
        if self.tx.state == TxnState::Failed && !stmt.plan.ends_failed_block() {
            return Err(aborted_error());
        }
        let catalog = self.shared.catalog.snapshot();
        let stmt = match stmt.evaluates {
            true => match self.evaluate_once(&stmt.stmt, &stmt.plan, &catalog).await? {
                Some((s, plan)) => Arc::new(Prepared {
                    sql: s.text.clone(),
                    text: stmt.text.clone(),
                    stmt: s,
                    plan,
                    catalog_version: stmt.catalog_version,
                    names_epoch: stmt.names_epoch,
                    meta: stmt.meta.clone(),
                    home_name: None,
                    shard_sql: Mutex::new(HashMap::new()),
                    evaluates: false,
                    evaluated: true,
                }),
                None => stmt,
            },
            false => stmt,
        };
        let target = match &stmt.plan {
            Plan::Local => {
                let coord = self.shared.coordinator.clone();
                let write = !is_read_only_local(&stmt.stmt);
                let fresh = if stmt.home_name.is_none() && reads_live_views(&stmt.stmt, &stmt.text)
                {
                    self.activity_started(stmt.text.text.clone());
                    self.parse_client(&stmt.text.text)
                        .await?
                        .pop()
                        .map(|s| s.text)
                } else {
                    None
                };
                let target = match &stmt.home_name {
                    Some(name) => BackendStatement::Home(name),
                    None => BackendStatement::Unnamed(fresh.as_deref().unwrap_or(&stmt.sql)),
                };
                self.bind_on_backend(&coord, target, &stmt.meta.param_types, &bind, write)
                    .await?;
                PortalTarget::Backend(coord)
            }
            Plan::Router(r) => {
                let hashed = self
                    .hash_params_on_coordinator(r, &stmt.meta.param_types, &bind)
                    .await?;
                let shard = route_bound_with(r, &stmt.meta.param_types, &bind, &hashed)?;
                let addr = placement_addr(&catalog, shard)?;
                let (id, sql) = if stmt.evaluated {
                    (0, r.template.for_shard(shard.shard_id).into())
                } else {
                    self.shard_statement(&stmt, r, shard.shard_id, catalog.version as u64)
                };
                let target = if stmt.evaluated {
                    BackendStatement::Unnamed(&sql)
                } else {
                    BackendStatement::Shared(id, &sql)
                };
                self.bind_on_backend(&addr, target, &stmt.meta.param_types, &bind, !r.read_only)
                    .await?;
                PortalTarget::Backend(addr)
            }
            _ => {
                let mut b = BytesMut::new();
                msg::write_bind_complete(&mut b);
                self.pending.push_back(Expect::Local(b.freeze()));
                PortalTarget::Virtual
            }
        };
        self.portals
            .insert(bind.portal.clone(), Portal { stmt, bind, target });
        Ok(())
    }

    pub(super) fn shard_statement(
        &self,
        stmt: &Prepared,
        r: &RouterPlan,
        shard: ShardId,
        catalog_version: u64,
    ) -> (u64, Arc<str>) {
        let mut cache = stmt.shard_sql.lock().unwrap();
        if let Some(v) = cache.get(&shard) {
            return v.clone();
        }
        let sql: Arc<str> = r.template.for_shard(shard).into();
        let id = self
            .shared
            .statements
            .id(&sql, &stmt.meta.param_types, catalog_version);
        cache.insert(shard, (id, sql.clone()));
        (id, sql)
    }

    pub(super) async fn bind_on_backend(
        &mut self,
        addr: &NodeAddr,
        statement: BackendStatement<'_>,
        types: &[u32],
        bind: &BindMsg,
        write: bool,
    ) -> PgResult<()> {
        let idx = self.join_with(addr, write, true).await?;
        let h = &mut self.tx.held[idx];
        let name = match statement {
            // Prepared there under the client's name at its Parse: PostgreSQL's own
            // plan cache (and its 0A000 after DDL changing the result type).
            BackendStatement::Home(name) => name.to_string(),
            // The unnamed one, parsed at each Bind: nothing of pgshard's shows in
            // the client's pg_prepared_statements, and a plan never outlives the
            // client's DDL.
            BackendStatement::Unnamed(sql) => {
                msg::write_parse(&mut h.conn.wbuf, "", sql, types);
                self.pending.push_back(Expect::ParseSilent(addr.clone()));
                String::new()
            }
            BackendStatement::Shared(id, sql) => {
                if !h.conn.prepared.contains(&id) {
                    msg::write_parse(&mut h.conn.wbuf, &backend_name(id), sql, types);
                    h.conn.prepared.insert(id);
                    self.pending.push_back(Expect::ParseSilent(addr.clone()));
                }
                backend_name(id)
            }
        };
        msg::write_bind(
            &mut h.conn.wbuf,
            &bind.portal,
            &name,
            &bind.param_formats,
            &bind.params,
            &bind.result_formats,
        );
        h.dirty = true;
        self.pending.push_back(Expect::One(addr.clone()));
        Ok(())
    }

    pub(super) async fn describe_message(&mut self, kind: u8, name: &str) -> PgResult<()> {
        if kind == b'S' {
            let stmt = self.current_statement(name).await?;
            let mut b = BytesMut::new();
            msg::write_parameter_description(&mut b, &stmt.meta.param_types);
            match &stmt.meta.fields {
                Some(f) => msg::write_row_description(&mut b, f),
                None => msg::write_no_data(&mut b),
            }
            self.pending.push_back(Expect::Local(b.freeze()));
            return Ok(());
        }
        let target = match self.portals.get(name) {
            Some(portal) => portal.target.clone(),
            // A cursor DECLAREd in the block is a portal of the block's coordinator
            // connection (drivers describe it by name before they FETCH).
            None if self.held_index(&self.shared.coordinator).is_some() => {
                PortalTarget::Backend(self.shared.coordinator.clone())
            }
            None => {
                return Err(PgError::new(
                    sqlstate::INVALID_CURSOR_NAME,
                    format!("portal \"{name}\" does not exist"),
                ))
            }
        };
        match target {
            PortalTarget::Backend(addr) => {
                let idx = self.join(&addr, false).await?;
                let h = &mut self.tx.held[idx];
                msg::write_describe(&mut h.conn.wbuf, b'P', name);
                h.dirty = true;
                self.pending.push_back(Expect::One(addr));
            }
            PortalTarget::Virtual => {
                let portal = &self.portals[name];
                let fields = portal.stmt.meta.fields.clone();
                let formats = portal.bind.result_formats.clone();
                let mut b = BytesMut::new();
                match fields {
                    Some(mut f) => {
                        for (i, fd) in f.iter_mut().enumerate() {
                            fd.format = result_format(&formats, i);
                        }
                        msg::write_row_description(&mut b, &f);
                    }
                    None => msg::write_no_data(&mut b),
                }
                self.pending.push_back(Expect::Local(b.freeze()));
            }
        }
        Ok(())
    }

    pub(super) async fn execute_message(&mut self, name: &str, max_rows: i32) -> PgResult<()> {
        let Some(portal) = self.portals.get_mut(name) else {
            return Err(PgError::new(
                sqlstate::INVALID_CURSOR_NAME,
                format!("portal \"{name}\" does not exist"),
            ));
        };
        crate::metrics::statement(crate::metrics::StatementKind::of(&portal.stmt.plan));
        crate::stats::activity::started(&self.activity, portal.stmt.text.text.clone());
        if self.stat_track {
            let (stmt, bind) = (portal.stmt.clone(), portal.bind.clone());
            self.count_prepared(&stmt, &bind);
        }
        let Some(portal) = self.portals.get_mut(name) else {
            return Err(PgError::internal("portal lost"));
        };
        match &mut portal.target {
            PortalTarget::Backend(addr) => {
                let addr = addr.clone();
                if matches!(portal.stmt.plan, Plan::Local)
                    && !isolation::set_config_calls(&portal.stmt.stmt.text).is_empty()
                {
                    self.set_config_to_follow.push(portal.stmt.stmt.clone());
                }
                let copies_in = is_copy_from_stdin(&portal.stmt.stmt);
                let idx = self.join(&addr, false).await?;
                let h = &mut self.tx.held[idx];
                msg::write_execute(&mut h.conn.wbuf, name, max_rows);
                h.dirty = true;
                self.pending.push_back(Expect::Execute(addr));
                if copies_in {
                    // The client's COPY data follows this Execute (a Sync it sent before
                    // the data is ignored, as PostgreSQL ignores it): relayed now.
                    self.drain_all().await?;
                }
                Ok(())
            }
            PortalTarget::Virtual => {
                self.drain_all().await?;
                let frames = self.run_virtual(name, false).await?;
                for f in frames {
                    msg::write_raw(&mut self.out, f.tag, &f.body);
                }
                Ok(())
            }
        }
    }

    pub(super) async fn close_message(&mut self, kind: u8, name: &str) -> PgResult<()> {
        if kind == b'S' {
            let removed = self.statements.remove(name);
            if removed.is_some_and(|p| p.home_name.is_some()) {
                return self.close_on_home(name).await;
            }
        } else if let Some(p) = self.portals.remove(name) {
            if let PortalTarget::Backend(addr) = p.target {
                if let Some(idx) = self.held_index(&addr) {
                    if self.tx.held[idx].in_batch {
                        let idx = self.join(&addr, false).await?;
                        let h = &mut self.tx.held[idx];
                        msg::write_close(&mut h.conn.wbuf, b'P', name);
                        h.dirty = true;
                        self.pending.push_back(Expect::One(addr));
                        return Ok(());
                    }
                }
            }
        }
        let mut b = BytesMut::new();
        msg::write_close_complete(&mut b);
        self.pending.push_back(Expect::Local(b.freeze()));
        Ok(())
    }

    /// SQL `DEALLOCATE`: drops a statement the client prepared with Parse, as
    /// PostgreSQL does (one namespace for both kinds). Others are SQL-level statements
    /// of local tables, prepared on the coordinator node: it goes there, and so does
    /// `DEALLOCATE ALL` (which keeps the unnamed statement, as in PostgreSQL).
    pub(super) async fn deallocate(
        &mut self,
        stmt: &Statement,
        name: Option<&str>,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        match name.map(|n| (n, self.statements.remove(n))) {
            // Prepared on the client's own coordinator connection too: it goes
            // there (below).
            Some((_, Some(p))) if p.home_name.is_some() => {}
            Some((_, Some(_))) => {
                sink.complete("DEALLOCATE");
                return Ok(());
            }
            Some((n, None)) if is_backend_name(n) => {
                return Err(PgError::new(
                    sqlstate::INVALID_SQL_STATEMENT_NAME,
                    format!("prepared statement \"{n}\" does not exist"),
                ))
            }
            Some(_) => {}
            None => self.statements.retain(|name, _| name.is_empty()),
        }
        let coord = self.shared.coordinator.clone();
        let idx = self
            .simple_on_backend_into(&coord, &stmt.text, false, Some(sink))
            .await?;
        if name.is_none() {
            // pgshard's own statements on that connection went too.
            self.tx.held[idx].conn.prepared.clear();
        }
        Ok(())
    }

    pub(super) async fn sync_message(&mut self) {
        let follow = std::mem::take(&mut self.set_config_to_follow);
        self.sync_batch().await;
        // `set_config` calls of the batch, now that they ran on the coordinator node.
        if self.tx.state != TxnState::Failed {
            for stmt in &follow {
                if let Err(e) = self.follow_set_config(stmt).await {
                    self.write_client_error(&e);
                    break;
                }
            }
        }
    }

    pub(super) async fn sync_batch(&mut self) {
        if self.tx.implicit_block {
            // A batch that wrote on several nodes: committed as a whole, or not at all.
            self.tx.implicit_block = false;
            if let Err(e) = self.drain_all().await {
                self.on_extended_result(Err(e)).await;
            }
            let mut failed = self.batch_error;
            if !failed {
                let r = self.finish_transaction(true).await;
                for f in self.take_end_messages() {
                    msg::write_raw(&mut self.out, f.tag, &f.body);
                }
                if let Err(e) = r {
                    self.write_client_error(&e);
                    failed = true;
                }
            } else {
                self.end_batch().await;
                let _ = self.finish_transaction(false).await;
            }
            self.end_implicit_settings(failed);
            self.implicit_txn = false;
            self.tx.state = TxnState::Idle;
            self.batch_error = false;
            self.pending.clear();
            self.skipping = false;
            self.portals.clear();
            return;
        }
        let failed = self.end_batch().await;
        self.end_implicit_settings(failed);
        self.implicit_txn = false;
        self.release_deadlock_victim().await;
        self.skipping = false;
        // Portals live until their transaction ends: at Sync in autocommit, with
        // COMMIT/ROLLBACK inside a block.
        if self.tx.state == TxnState::Idle {
            self.portals.clear();
        }
    }

    /// Runs a virtual portal (pgshard's own plans). With `describe`, the frames
    /// start with the RowDescription.
    pub(super) async fn run_virtual(&mut self, name: &str, describe: bool) -> PgResult<Vec<Frame>> {
        let portal = self.portals.get(name).expect("portal checked");
        let stmt = portal.stmt.clone();
        let bind = portal.bind.clone();
        let mut out = ResultSink::default();
        let params = BoundParams {
            types: &stmt.meta.param_types,
            bind: Some(&bind),
        };
        let formats = bind.result_formats.clone();
        self.run_plan(
            &stmt.plan, &stmt.stmt, &params, &formats, describe, &mut out,
        )
        .await?;
        Ok(out.frames)
    }

    // ---- simple protocol -------------------------------------------------
}

/// Whether a prepared statement reads Citus's statistics views (`stats::views`): its
/// rows are gathered again at each Bind.
fn reads_live_views(stmt: &Statement, text: &crate::stats::statements::PreparedText) -> bool {
    stmt.form == crate::sql::parse::StringForm::CitusViews
        && crate::stats::views::mentioned(&text.text)
}
