//! The execution of a plan: each plan kind to the file that runs it, and Citus
//! utility calls.

use super::*;

impl Session {
    pub(super) async fn run_plan(
        &mut self,
        plan: &Plan,
        stmt: &Statement,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        match plan {
            Plan::Session(c) => self.session_command(c, stmt, sink).await,
            Plan::Unsupported(e) => Err(e.clone()),
            Plan::Utility { name, args } => self.utility(name, args, params, describe, sink).await,
            Plan::UtilityInline { calls } => {
                if params.bind.is_some() {
                    return Err(PgError::not_supported(
                        "Citus functions inside expressions are supported in simple queries only",
                    ));
                }
                let mut text = String::new();
                let mut at = 0;
                for c in calls {
                    let mut one = ResultSink::default();
                    self.utility(&c.name, &c.args, params, true, &mut one)
                        .await?;
                    if let Some(alias) = &c.from_item {
                        let columns: Vec<(String, u32)> = one
                            .frames
                            .iter()
                            .find(|f| f.tag == b'T')
                            .and_then(|f| msg::decode_row_description(&f.body).ok())
                            .map(|fs| fs.into_iter().map(|f| (f.name, f.type_oid)).collect())
                            .unwrap_or_default();
                        let rows: Vec<Vec<Option<String>>> = one
                            .frames
                            .iter()
                            .filter(|f| f.tag == b'D')
                            .filter_map(|f| msg::decode_data_row(&f.body).ok())
                            .map(|r| {
                                r.into_iter()
                                    .map(|v| v.map(|v| String::from_utf8_lossy(&v).into_owned()))
                                    .collect()
                            })
                            .collect();
                        text.push_str(&stmt.text[at..c.start]);
                        text.push_str(&commands::result_as_from_item(&columns, &rows, alias));
                        at = c.end;
                        continue;
                    }
                    let value = one.frames.iter().find(|f| f.tag == b'D').and_then(|f| {
                        msg::decode_data_row(&f.body)
                            .ok()
                            .and_then(|v| v.into_iter().next().flatten())
                    });
                    let type_oid = one
                        .frames
                        .iter()
                        .find(|f| f.tag == b'T')
                        .and_then(|f| msg::decode_row_description(&f.body).ok())
                        .and_then(|f| f.first().map(|x| x.type_oid))
                        .unwrap_or(25);
                    let type_name = match type_oid {
                        20 => "int8",
                        23 => "int4",
                        16 => "bool",
                        _ => "text",
                    };
                    text.push_str(&stmt.text[at..c.start]);
                    match value {
                        Some(v) => text.push_str(&format!(
                            "CAST({} AS {type_name})",
                            quote_literal(&String::from_utf8_lossy(&v))
                        )),
                        None => text.push_str(&format!("CAST(NULL AS {type_name})")),
                    }
                    at = c.end;
                }
                text.push_str(&stmt.text[at..]);
                let coord = self.shared.coordinator.clone();
                self.simple_on_backend(&coord, &text, false).await
            }
            Plan::MultiShard(m) => self.multi_shard(m, params, formats, describe, sink).await,
            Plan::InsertRows(p) => self.insert_rows(p, params, formats, describe, sink).await,
            Plan::InsertSelect(p) => self.insert_select(p, params, formats, describe, sink).await,
            Plan::InsertViaCoordinator(p) => {
                self.insert_via_coordinator(p, params, formats, describe, sink)
                    .await
            }
            Plan::InsertIntoLocal(p) => {
                self.insert_into_local(p, params, formats, describe, sink)
                    .await
            }
            Plan::CreateTableAs(p) => self.create_table_as(p, params, sink).await,
            Plan::SqlPrepare(p) => self.sql_prepare(p, sink).await,
            Plan::SqlExecute(p) => self.sql_execute(p, params, sink).await,
            Plan::FunctionCall(p) => self.function_call(p, params, formats, describe, sink).await,
            Plan::CopyIn(p) => self.copy_in(p, params.bind.is_some(), sink).await,
            Plan::CopyOut(p) => self.copy_out(p, sink).await,
            Plan::MultiShardModify(m) => {
                self.multi_shard_modify(m, params, formats, describe, sink)
                    .await
            }
            Plan::Explain(e) => self.explain(e, params, formats, describe, sink).await,
            Plan::DropTables { tables, cascade } => {
                if self.tx.string_block {
                    return Err(implicit::refused_in_string(
                        "DROP TABLE of a distributed table",
                    ));
                }
                if self.tx.state != TxnState::Idle {
                    return Err(PgError::not_supported("DROP TABLE of a distributed table inside a transaction block is not supported yet"));
                }
                // Shards, catalog rows and the shell go in one catalog transaction.
                let caller = self.caller().await?;
                let relids: Vec<_> = tables.iter().map(|t| t.relid).collect();
                commands::shards::drop_distributed_tables(
                    &self.shared.catalog,
                    &relids,
                    *cascade,
                    &caller,
                )
                .await?;
                self.shared.catalog.reload().await;
                sink.complete("DROP TABLE");
                Ok(())
            }
            Plan::Ddl(d) => {
                let caller = self.caller().await?;
                if self.tx.state != TxnState::Idle {
                    if let Some(why) = d.not_in_block() {
                        if self.tx.string_block {
                            return Err(if d.concurrent {
                                // PostgreSQL's own refusal in an implicit transaction.
                                PgError::new(sqlstate::ACTIVE_SQL_TRANSACTION, why)
                            } else {
                                implicit::refused_in_string(&format!(
                                    "{why} on a distributed table"
                                ))
                            });
                        }
                        return Err(PgError::not_supported(format!(
                            "pgshard does not support {why} on a distributed table inside a transaction block yet"
                        )));
                    }
                    self.ddl_in_block(&d.for_caller(&caller)).await?;
                    sink.complete(&d.tag);
                    return Ok(());
                }
                let search_path = self.search_path().await?;
                let caller = commands::ddl::Caller {
                    role: &caller,
                    search_path: &search_path,
                };
                commands::ddl::propagate_ddl(&self.shared.catalog, d, &caller).await?;
                sink.complete(&d.tag);
                Ok(())
            }
            Plan::ReferenceWrite {
                table,
                template,
                tag,
                functions,
                defaults,
                evaluate_once,
            } => {
                self.reference_write(
                    table,
                    template,
                    tag,
                    (functions, defaults, evaluate_once.as_deref()),
                    params,
                    formats,
                    describe,
                    sink,
                )
                .await
            }
            Plan::DropIndexes { stmt: d, indexes } => {
                if self.tx.string_block {
                    return Err(implicit::refused_in_string(
                        "DROP INDEX of a distributed table",
                    ));
                }
                if self.tx.state != TxnState::Idle {
                    return Err(PgError::not_supported("DROP INDEX of a distributed table inside a transaction block is not supported by pgshard yet"));
                }
                let caller = self.caller().await?;
                let search_path = self.search_path().await?;
                let caller = commands::ddl::Caller {
                    role: &caller,
                    search_path: &search_path,
                };
                commands::ddl::drop_indexes(&self.shared.catalog, d, &stmt.text, indexes, &caller)
                    .await?;
                self.shared.catalog.reload().await;
                sink.complete("DROP INDEX");
                Ok(())
            }
            Plan::Propagate(p) => self.maintenance(p, params.bind.is_some(), sink).await,
            // Role and privilege statements run in the session's block (pgshard's own
            // one in autocommit): on the client's own backend first, with its settings
            // (search_path, password_encryption) and NOTICEs, then on the workers; one
            // commit (2PC) for all.
            Plan::Role(p) => {
                let caller = self.caller().await?;
                let own = self.begin_own_block().await?;
                let done = self.role_in_block(p, &caller, sink).await;
                self.end_own_block(own, done.is_ok(), params.bind.is_some())
                    .await?;
                done
            }
            Plan::Grant(p) => {
                let caller = self.caller().await?;
                let p = p.for_caller(&caller)?;
                let own = self.begin_own_block().await?;
                let done = self.grant_in_block(&p, sink).await;
                if p.drops_tables && done.is_ok() {
                    self.tx.catalog_changed = true;
                }
                self.end_own_block(own, done.is_ok(), params.bind.is_some())
                    .await?;
                done
            }
            Plan::DeclareCursor(p) => self.declare_cursor(p, params, sink).await,
            Plan::Recursive(p) => self.recursive(p, params, formats, describe, sink).await,
            Plan::Repartition(p) => self.repartition(p, params, formats, describe, sink).await,
            Plan::ModifyRecursive(p) => {
                self.modify_recursive(p, params, formats, describe, sink)
                    .await
            }
            Plan::ModifyingCte(p) => {
                self.modifying_ctes(p, params, formats, describe, sink)
                    .await
            }
            Plan::Local | Plan::Router(_) => Err(PgError::internal("plan runs on a backend")),
        }
    }
    pub(super) async fn utility(
        &mut self,
        name: &str,
        args: &[(Option<String>, UtilityArg)],
        params: &BoundParams<'_>,
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let own = run_command::is_run_command(name);
        if self.tx.string_block && !commands::utility_reads_only(name) && !own {
            return Err(implicit::refused_in_string(&format!("{name}()")));
        }
        if self.tx.state != TxnState::Idle
            && !self.tx.string_block
            && !commands::utility_reads_only(name)
            && !own
        {
            return Err(PgError::not_supported(format!(
                "{name}() cannot run inside a transaction block in pgshard yet"
            )));
        }
        let arg_names = commands::utility_arg_names(name);
        let mut values: Vec<Option<String>> = Vec::new();
        let mut positional = 0;
        for (arg_name, arg) in args {
            let value = match arg {
                UtilityArg::Const(v) => v.clone(),
                UtilityArg::Param(i) => params.text(*i)?,
            };
            let pos = match arg_name {
                None => {
                    positional += 1;
                    positional - 1
                }
                Some(n) => arg_names.iter().position(|a| a == n).ok_or_else(|| {
                    PgError::new(
                        sqlstate::UNDEFINED_FUNCTION,
                        format!("function {name} has no argument named \"{n}\""),
                    )
                })?,
            };
            if values.len() <= pos {
                values.resize(pos + 1, None);
            }
            values[pos] = value;
        }
        // Table arguments are `regclass`: PostgreSQL reads them with the caller's path.
        let mut relids = vec![None; values.len()];
        for (i, v) in values.iter().enumerate() {
            if let Some(v) = v.as_deref().filter(|v| commands::is_table_arg(name, i, v)) {
                relids[i] = self.regclass(v).await?;
            }
        }
        let result = if own {
            // As the client's role, on its own node connections.
            self.run_command_on(name, &values, &relids).await
        } else {
            self.call_utility_task(name, values, relids).await
        };
        let result = result?;
        if describe {
            let fields: Vec<FieldDesc> = result
                .columns
                .iter()
                .map(|(n, t)| FieldDesc::computed(n, *t, -1, 0))
                .collect();
            sink.row_description(&fields);
        }
        for row in &result.rows {
            let vals: Vec<Option<&[u8]>> = row
                .iter()
                .map(|v| v.as_deref().map(str::as_bytes))
                .collect();
            sink.data_row(&vals);
        }
        sink.complete(&format!("SELECT {}", result.rows.len()));
        Ok(())
    }

    /// A utility call run by `commands` in a task of its own, its progress notices
    /// passed to the client as they come.
    async fn call_utility_task(
        &mut self,
        name: &str,
        values: Vec<Option<String>>,
        relids: Vec<Option<u32>>,
    ) -> PgResult<commands::UtilityResult> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let shared = self.shared.clone();
        let settings = self.citus;
        let call_name = name.to_string();
        let caller = self.caller().await?;
        let mut task = tokio::spawn(async move {
            let call = commands::UtilityCall {
                name: &call_name,
                args: values,
                relids,
            };
            commands::call_utility(&shared.catalog, &settings, call, tx, &caller).await
        });
        let result = loop {
            tokio::select! {
                r = &mut task => break r.map_err(|e| PgError::internal(format!("{name}() failed: {e}")))?,
                Some(n) = rx.recv() => {
                    msg::write_notice(&mut self.out, &n);
                    let _ = self.flush_client().await;
                }
            }
        };
        while let Ok(n) = rx.try_recv() {
            msg::write_notice(&mut self.out, &n);
        }
        result
    }

    // ---- transactions ----------------------------------------------------
}
