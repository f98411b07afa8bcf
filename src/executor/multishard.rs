//! Multi-shard execution (a child module of `session`, so it shares the session's
//! connections and transaction state): reads streamed from every shard, reads
//! combined on the coordinator node's PostgreSQL over the shards' rows, UPDATE and
//! DELETE on every shard.

use super::tasks::write_tasks;
use super::*;
use crate::planner::aggregate::{CombinePlan, CombineStage, PARTIALS_TABLE};
use crate::planner::multishard::ModifyPlan;

/// Types created by initdb: their binary form is the same on every node (user-defined
/// types' oids differ between nodes, so their rows travel as text).
const FIRST_NORMAL_OBJECT_ID: u32 = 16384;

/// A column of the coordinator's temporary table.
pub(super) struct PartialColumn {
    pub(super) name: String,
    pub(super) type_oid: u32,
    pub(super) type_name: String,
}

/// Shards grouped by the node holding them, in shard order.
pub(super) fn shards_by_node<'a>(
    catalog: &Catalog,
    table: &'a crate::catalog::DistTable,
) -> PgResult<Vec<(NodeAddr, Vec<&'a ShardInterval>)>> {
    let mut by_node: Vec<(NodeAddr, Vec<&ShardInterval>)> = Vec::new();
    for shard in &table.shards {
        let addr = placement_addr(catalog, shard)?;
        match by_node.iter_mut().find(|(a, _)| *a == addr) {
            Some((_, v)) => v.push(shard),
            None => by_node.push((addr, vec![shard])),
        }
    }
    Ok(by_node)
}

/// The shard ids of a node's shards.
pub(super) fn ids_of(shards: &[&ShardInterval]) -> Vec<ShardId> {
    shards.iter().map(|s| s.shard_id).collect()
}

impl Session {
    /// A multi-shard read: streamed from the shards, or combined on the coordinator node.
    pub(super) async fn multi_shard(
        &mut self,
        plan: &MultiShardPlan,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let user_aggregate = self.calls_aggregate(&plan.functions).await?;
        if let Some(c) = &plan.combine {
            if plan.shape == MultiShardShape::Combine || user_aggregate {
                // A user-defined aggregate is computed over raw rows, never per shard.
                let stage = match (&c.partial, user_aggregate) {
                    (Some(p), false) => p,
                    _ => &c.raw,
                };
                return self
                    .run_combine(plan, c, stage, params, formats, describe, sink)
                    .await;
            }
        }
        if user_aggregate || plan.shape == MultiShardShape::Combine {
            return Err(PgError::not_supported(
                "pgshard does not support user-defined aggregates in this query across shards yet",
            ));
        }
        let catalog = self.shared.catalog.snapshot();
        let table = &plan.table;
        let aggregate = matches!(plan.shape, MultiShardShape::Aggregate { .. });
        let shard_formats: Vec<i16> = if aggregate { vec![] } else { formats.to_vec() };
        let limit = match plan.limit {
            Bound::None => None,
            Bound::Const(n) => Some(n),
            Bound::Param(i) => params
                .text(i)?
                .map(|t| {
                    t.trim().parse::<i64>().map_err(|_| {
                        PgError::new(sqlstate::INVALID_TEXT_REPRESENTATION, "invalid LIMIT")
                    })
                })
                .transpose()?,
        };
        let by_node = shards_by_node(&catalog, table)?;
        let tasks: Vec<NodeTasks> = by_node
            .iter()
            .map(|(addr, shards)| NodeTasks {
                addr: addr.clone(),
                sql: plan.tasks(None, &ids_of(shards)),
            })
            .collect();
        let mut row_desc: Option<Bytes> = None;
        let mut partials: Vec<Vec<Option<Bytes>>> = Vec::new();
        let mut seen: u64 = 0;
        let mut sent: u64 = 0;
        let mut on_reply = |f: Frame, sink: &mut ResultSink| -> PgResult<()> {
            match f.tag {
                b'T' => row_desc = Some(f.body),
                b'D' if aggregate => partials.push(msg::decode_data_row(&f.body)?),
                b'D' => {
                    if combine::row_selected(seen, plan.offset, limit) {
                        if sent == 0 && describe {
                            if let Some(rd) = &row_desc {
                                sink.push_frame(b'T', rd.clone());
                            }
                        }
                        sink.push_frame(b'D', f.body);
                        sent += 1;
                    }
                    seen += 1;
                }
                _ => {}
            }
            Ok(())
        };
        self.run_tasks(
            &tasks,
            false,
            params,
            &shard_formats,
            Describe::FirstTask,
            sink,
            &mut on_reply,
        )
        .await?;
        match &plan.shape {
            MultiShardShape::Plain => {
                if sent == 0 && describe {
                    match &row_desc {
                        Some(rd) => sink.push_frame(b'T', rd.clone()),
                        None => {}
                    }
                }
                sink.complete(&format!("SELECT {sent}"));
                Ok(())
            }
            MultiShardShape::Combine => Err(PgError::internal("combine plan without stages")),
            MultiShardShape::Aggregate {
                aggs,
                names,
                collation_source,
            } => {
                let fields = msg::decode_row_description(row_desc.as_deref().unwrap_or(&[0, 0]))?;
                self.combine_aggregates(
                    aggs,
                    names,
                    collation_source.as_deref(),
                    &fields,
                    partials,
                    formats,
                    describe,
                    limit,
                    sink,
                )
                .await
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn combine_aggregates(
        &mut self,
        aggs: &[AggKind],
        names: &[String],
        collation_source: Option<&str>,
        partial_fields: &[FieldDesc],
        partials: Vec<Vec<Option<Bytes>>>,
        formats: &[i16],
        describe: bool,
        limit: Option<i64>,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        if aggs.iter().all(|a| *a == AggKind::Count) {
            let mut values = Vec::new();
            for i in 0..aggs.len() {
                let total = combine::add_counts(
                    partials.iter().map(|r| r.get(i).and_then(|v| v.as_deref())),
                )?;
                values.push(if result_format(formats, i) == 1 {
                    total.to_be_bytes().to_vec()
                } else {
                    total.to_string().into_bytes()
                });
            }
            if describe {
                let fields: Vec<FieldDesc> = names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| {
                        FieldDesc::computed(n, combine::INT8, 8, result_format(formats, i))
                    })
                    .collect();
                sink.row_description(&fields);
            }
            let rows = if limit == Some(0) { 0 } else { 1 };
            if rows == 1 {
                let refs: Vec<Option<&[u8]>> = values.iter().map(|v| Some(v.as_slice())).collect();
                sink.data_row(&refs);
            }
            sink.complete(&format!("SELECT {rows}"));
            return Ok(());
        }
        let types: Vec<u32> = partial_fields.iter().map(|f| f.type_oid).collect();
        let query = combine::combine_query(aggs, &types, names, partials.len(), collation_source);
        let mut param_types = Vec::new();
        let mut values = Vec::new();
        for row in &partials {
            for (i, v) in row.iter().enumerate() {
                param_types.push(types.get(i).copied().unwrap_or(0));
                values.push(v.clone());
            }
        }
        let coord = self.shared.coordinator.clone();
        let idx = self.join(&coord, false).await?;
        self.drain_all().await?;
        let h = &mut self.tx.held[idx];
        msg::write_parse(&mut h.conn.wbuf, "", &query, &param_types);
        msg::write_bind(&mut h.conn.wbuf, "", "", &[], &values, formats);
        if describe {
            msg::write_describe(&mut h.conn.wbuf, b'P', "");
        }
        msg::write_execute(&mut h.conn.wbuf, "", 0);
        msg::write_sync(&mut h.conn.wbuf);
        h.in_batch = false;
        h.conn.flush().await?;
        let mut err = None;
        loop {
            let f = self.tx.held[idx].conn.read().await?;
            match f.tag {
                b'Z' => break,
                b'E' => err = Some(PgError::from_server_fields(f.body)),
                b'T' | b'D' | b'C' | b'N' => sink.push_frame(f.tag, f.body),
                _ => {}
            }
        }
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Whether any of these functions is an aggregate or window function on the
    /// coordinator node (user-defined ones included).
    pub(super) async fn calls_aggregate(&mut self, names: &[String]) -> PgResult<bool> {
        let kinds = self.function_kinds(names).await?;
        Ok(kinds.iter().any(|k| k.is_some_and(|k| k.aggregate)))
    }

    /// What the coordinator node's functions of each name are (None: it has none);
    /// cached per process for `FUNCTION_KINDS_TTL`.
    pub(super) async fn function_kinds(
        &mut self,
        names: &[String],
    ) -> PgResult<Vec<Option<FunctionKind>>> {
        let unknown: Vec<String> = {
            let cache = self.shared.function_kinds.lock().unwrap();
            names
                .iter()
                .filter(|n| {
                    !cache
                        .get(*n)
                        .is_some_and(|(_, at)| at.elapsed() < FUNCTION_KINDS_TTL)
                })
                .cloned()
                .collect()
        };
        if !unknown.is_empty() {
            let list: Vec<String> = unknown.iter().map(|n| quote_literal(n)).collect();
            let sql = format!(
                "SELECT proname::text || ' ' || bool_or(oid >= 16384)::text || ' ' || \
                 bool_or(prokind IN ('a', 'w'))::text || ' ' || \
                 bool_and(provolatile = 'i')::text || ' ' || bool_or(provolatile = 'v')::text \
                 || ' ' || bool_or(proretset)::text FROM pg_catalog.pg_proc \
                 WHERE proname IN ({}) GROUP BY proname",
                list.join(", ")
            );
            let coord = self.shared.coordinator.clone();
            let mut conn = self.shared.pools.node(&coord).acquire().await?;
            // An error is returned, never cached.
            let rows = conn.simple_column(&sql).await?;
            let now = std::time::Instant::now();
            let mut cache = self.shared.function_kinds.lock().unwrap();
            for name in &unknown {
                cache.insert(name.clone(), (None, now));
            }
            for row in rows {
                let mut it = row.rsplitn(6, ' ');
                let (
                    Some(set_returning),
                    Some(volatile),
                    Some(immutable),
                    Some(aggregate),
                    Some(user_defined),
                    Some(name),
                ) = (
                    it.next(),
                    it.next(),
                    it.next(),
                    it.next(),
                    it.next(),
                    it.next(),
                )
                else {
                    continue;
                };
                let kind = FunctionKind {
                    aggregate: aggregate == "true",
                    immutable: immutable == "true",
                    user_defined: user_defined == "true",
                    volatile: volatile == "true",
                    set_returning: set_returning == "true",
                };
                cache.insert(name.to_string(), (Some(kind), now));
            }
        }
        let cache = self.shared.function_kinds.lock().unwrap();
        Ok(names
            .iter()
            .map(|n| cache.get(n).and_then(|(k, _)| *k))
            .collect())
    }

    /// A pooled connection to `addr` carrying this session's settings (outside the
    /// session's own transaction: pgshard's private work there).
    pub(crate) async fn private_conn(&self, addr: &NodeAddr) -> PgResult<PooledConn> {
        let mut conn = self.pooled_client_conn(addr).await?;
        if conn.settings_fingerprint != self.settings_fp {
            conn.simple(&super::settings_replay_sql(
                &self.creds,
                &self.settings,
                &[],
            ))
            .await?;
            conn.settings_fingerprint = self.settings_fp;
        }
        Ok(conn)
    }

    /// BEGIN and the temporary table of a stage's worker rows (exact types from the
    /// shell table). Returns its columns.
    pub(super) async fn create_partials_table(
        conn: &mut PooledConn,
        stage: &CombineStage,
        param_types: &[u32],
        block_locals: &[(String, String)],
    ) -> PgResult<Vec<PartialColumn>> {
        let shape = crate::planner::aggregate::shape_with_params(&stage.shape, param_types)
            .map_err(|what| {
                PgError::not_supported(format!("pgshard does not support {what} yet"))
            })?;
        // The combine runs beside the client's block: its SET LOCALs (a role, a time
        // zone) apply to the combine query as they do to the block's statements.
        let locals: String = block_locals
            .iter()
            .map(|(_, text)| format!("{text}; "))
            .collect();
        let sql = format!(
            "BEGIN; {locals}CREATE TEMP TABLE {PARTIALS_TABLE} ON COMMIT DROP AS {} WITH NO DATA; \
             SELECT attname, atttypid, format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute \
             WHERE attrelid = '{PARTIALS_TABLE}'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            shape
        );
        let rows = match conn.simple_rows(&sql).await {
            Ok(rows) => rows,
            Err(e) => {
                conn.simple("ROLLBACK").await.ok();
                return Err(e);
            }
        };
        let cols: Vec<PartialColumn> = rows
            .into_iter()
            .map(|mut row| {
                let mut text = |i: usize| row.get_mut(i).and_then(Option::take).unwrap_or_default();
                PartialColumn {
                    name: text(0),
                    type_oid: text(1).parse().unwrap_or(0),
                    type_name: text(2),
                }
            })
            .collect();
        if let Some(shell) = &stage.key_of {
            if let Err(e) = Self::copy_primary_key(conn, shell, &cols).await {
                conn.simple("ROLLBACK").await.ok();
                return Err(e);
            }
        }
        Ok(cols)
    }

    /// Gives the temporary table the shell table's primary key when it has all its
    /// columns (see `CombineStage::key_of`).
    async fn copy_primary_key(
        conn: &mut PooledConn,
        shell: &str,
        cols: &[PartialColumn],
    ) -> PgResult<()> {
        let sql = format!(
            "SELECT a.attname FROM pg_catalog.pg_index i              CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)              JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum              WHERE i.indrelid = {}::regclass AND i.indisprimary ORDER BY k.ord",
            quote_literal(shell)
        );
        let key = conn.simple_column(&sql).await?;
        if key.is_empty() || !key.iter().all(|k| cols.iter().any(|c| &c.name == k)) {
            return Ok(());
        }
        let list: Vec<String> = key.iter().map(|k| quote_ident(k)).collect();
        conn.simple(&format!(
            "ALTER TABLE {PARTIALS_TABLE} ADD PRIMARY KEY ({})",
            list.join(", ")
        ))
        .await
    }

    /// Runs a combine plan: the shards' rows are copied into a temporary table on the
    /// coordinator node, which answers the client's statement over it.
    #[allow(clippy::too_many_arguments)]
    async fn run_combine(
        &mut self,
        plan: &MultiShardPlan,
        cp: &CombinePlan,
        mut stage: &CombineStage,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let catalog = self.shared.catalog.snapshot();
        let coord = self.shared.coordinator.clone();
        let mut conn = self.private_conn(&coord).await?;
        let (cols, exprs) = loop {
            let cols =
                Self::create_partials_table(&mut conn, stage, params.types, &self.local_settings)
                    .await?;
            match combine::partial_expressions(&stage.partials, &|name| {
                cols.iter()
                    .find(|c| c.name == name)
                    .map(|c| (c.type_oid, c.type_name.clone()))
            }) {
                Some(exprs) => break (cols, exprs),
                None if !stage.raw_rows => {
                    // A partial type without an exact combine (avg of float4): raw rows.
                    conn.simple("ROLLBACK").await?;
                    stage = &cp.raw;
                }
                None => return Err(PgError::internal("raw rows need no partial combine")),
            }
        };
        let combine_sql = stage.combine_sql(&|i| exprs[i].clone());
        let r = self
            .fill_and_combine(
                &mut conn,
                plan,
                stage,
                &cols,
                &combine_sql,
                params,
                formats,
                describe,
                sink,
                &catalog,
            )
            .await;
        if r.is_err() {
            // Whatever state the COPY or the combine left: the server cleans up.
            conn.broken = true;
        }
        r
    }

    #[allow(clippy::too_many_arguments)]
    async fn fill_and_combine(
        &mut self,
        conn: &mut PooledConn,
        plan: &MultiShardPlan,
        stage: &CombineStage,
        cols: &[PartialColumn],
        combine_sql: &str,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
        catalog: &Catalog,
    ) -> PgResult<()> {
        let binary = cols.iter().all(|c| c.type_oid < FIRST_NORMAL_OBJECT_ID);
        conn.start_copy_in(&format!(
            "COPY {PARTIALS_TABLE} FROM STDIN{}",
            if binary { " (FORMAT binary)" } else { "" }
        ))
        .await?;
        if binary {
            msg::write_raw(&mut conn.wbuf, b'd', &combine::COPY_BINARY_HEADER);
        }
        // The shards' worker queries, pipelined per node.
        let by_node = shards_by_node(catalog, &plan.table)?;
        let empty = BindMsg::default_empty();
        let bind = params.bind.unwrap_or(&empty);
        let row_format: Vec<i16> = vec![if binary { 1 } else { 0 }];
        for (addr, shards) in &by_node {
            let idx = self.join(addr, false).await?;
            self.drain_all().await?;
            let h = &mut self.tx.held[idx];
            write_tasks(
                &mut h.conn.wbuf,
                &plan.tasks(Some(stage), &ids_of(shards)),
                params.types,
                bind,
                &row_format,
                &mut false,
            );
            msg::write_sync(&mut h.conn.wbuf);
            h.in_batch = false;
            h.conn.flush().await?;
        }
        let limit_kb = self.max_intermediate_kb;
        let mut bytes: u64 = 0;
        let mut err: Option<PgError> = None;
        for (addr, _) in &by_node {
            let idx = self.held_index(addr).expect("joined above");
            loop {
                let f = self.tx.held[idx].conn.read().await?;
                match f.tag {
                    b'Z' => break,
                    b'E' => {
                        if err.is_none() {
                            err = Some(PgError::from_server_fields(f.body));
                        }
                    }
                    b'D' if err.is_none() => {
                        bytes += f.body.len() as u64;
                        if limit_kb >= 0 && bytes > (limit_kb as u64) * 1024 {
                            let e = super::subplans::intermediate_result_too_large(limit_kb);
                            err = Some(e);
                            continue;
                        }
                        if binary {
                            msg::write_raw(&mut conn.wbuf, b'd', &f.body);
                        } else {
                            let mut line = BytesMut::new();
                            combine::copy_text_row(&f.body, &mut line)?;
                            msg::write_raw(&mut conn.wbuf, b'd', &line);
                        }
                        if conn.wbuf.len() >= 256 * 1024 {
                            conn.flush().await?;
                        }
                    }
                    b'N' => sink.push_frame(b'N', f.body),
                    _ => {}
                }
            }
        }
        if let Some(e) = err {
            return Err(e);
        }
        if binary {
            msg::write_raw(&mut conn.wbuf, b'd', &(-1i16).to_be_bytes());
        }
        msg::write_raw(&mut conn.wbuf, b'c', &[]);
        conn.flush().await?;
        conn.drain_to_ready().await?;
        // The client's statement over the rows, with its parameters and formats.
        msg::write_unnamed_run(
            &mut conn.wbuf,
            combine_sql,
            params.types,
            bind,
            formats,
            describe,
        );
        msg::write_sync(&mut conn.wbuf);
        msg::write_query(&mut conn.wbuf, "ROLLBACK");
        conn.flush().await?;
        let mut err = None;
        let mut ready = 0;
        while ready < 2 {
            let f = conn.read().await?;
            match f.tag {
                b'Z' => ready += 1,
                b'E' if err.is_none() => err = Some(PgError::from_server_fields(f.body)),
                b'T' | b'D' | b'C' | b'N' if ready == 0 && err.is_none() => {
                    sink.push_frame(f.tag, f.body);
                    if sink.should_spill() {
                        let frames: Vec<Frame> = sink.frames.drain(..).collect();
                        sink.spill(frames, &mut self.out);
                        self.flush_client().await?;
                    }
                }
                _ => {}
            }
        }
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    // ---- multi-shard UPDATE / DELETE ---------------------------------------

    /// UPDATE or DELETE on every shard. In autocommit on several nodes the statement
    /// is one transaction committed with 2PC; inside a block it joins the block.
    pub(super) async fn multi_shard_modify(
        &mut self,
        m: &ModifyPlan,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let catalog = self.shared.catalog.snapshot();
        let by_node = shards_by_node(&catalog, &m.table)?;
        // On several nodes outside a block, the statement is its own transaction.
        let own = by_node.len() > 1 && self.begin_own_block().await?;
        let r = self
            .modify_on_shards(m, &by_node, params, formats, describe, sink)
            .await;
        let ended = self
            .end_own_block(own, r.is_ok(), params.bind.is_some())
            .await;
        r?;
        ended
    }

    async fn modify_on_shards(
        &mut self,
        m: &ModifyPlan,
        by_node: &[(NodeAddr, Vec<&ShardInterval>)],
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let tasks: Vec<NodeTasks> = by_node
            .iter()
            .map(|(addr, shards)| NodeTasks {
                addr: addr.clone(),
                sql: shards
                    .iter()
                    .map(|s| m.template.for_shard(s.shard_id))
                    .collect(),
            })
            .collect();
        self.run_write_tasks(
            &tasks,
            m.returning,
            &m.verb,
            params,
            formats,
            describe,
            sink,
        )
        .await
    }
}
