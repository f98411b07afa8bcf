//! EXPLAIN of distributed statements (a child module of `session`: it runs the
//! nodes' EXPLAINs inside the client's own transaction, as its role): the explained
//! plan is walked as the executor would run it — one shard (router), every shard with
//! pgshard's combine above (multi-shard reads), every shard (UPDATE/DELETE), subplans
//! then the outer statement (recursive plans, each subplan shown as Citus's
//! `Distributed Subplan`) — and each part is explained by the node that would run it.
//! The layout in each format is `planner::explain`'s.

use super::multishard::{ids_of, shards_by_node};
use super::*;
use crate::planner::explain::{self as layout, ExplainFormat, ExplainPlan, Explained, ShownTask};
use crate::planner::recursive::RecursivePlan;
use std::future::Future;
use std::pin::Pin;

type Explaining<'a> = Pin<Box<dyn Future<Output = PgResult<Explained>> + Send + 'a>>;

impl Session {
    /// Runs `sql` on `addr` inside the session's transaction and returns the first
    /// column of its rows (EXPLAIN output).
    async fn text_rows_on(
        &mut self,
        addr: &NodeAddr,
        sql: &str,
        write: bool,
    ) -> PgResult<Vec<String>> {
        let idx = self.join(addr, write).await?;
        self.drain_all().await?;
        let h = &mut self.tx.held[idx];
        h.in_batch = false;
        h.conn.simple_column(sql).await
    }

    /// A node's plan of `sql` (the EXPLAIN prefix put before it), in the layout of
    /// the client's format.
    async fn node_plan(
        &mut self,
        e: &ExplainPlan,
        addr: &NodeAddr,
        sql: &str,
        write: bool,
    ) -> PgResult<ShownTask> {
        let rows = self
            .text_rows_on(addr, &format!("{}{sql}", e.prefix), write)
            .await?;
        Ok(ShownTask {
            host: addr.host.clone(),
            port: addr.port,
            plan: Explained::from_node(e.format, rows)?,
        })
    }

    pub(super) async fn explain(
        &mut self,
        e: &ExplainPlan,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        if params.bind.is_some_and(|b| !b.params.is_empty()) {
            return Err(PgError::not_supported(
                "pgshard does not support EXPLAIN of distributed queries with parameters yet",
            ));
        }
        let mut plan_ids = 0;
        let block = self
            .explain_plan(e, &e.inner, &e.stmt, params, &mut plan_ids)
            .await?;
        if describe {
            sink.row_description(&[FieldDesc::computed(
                "QUERY PLAN",
                25,
                -1,
                result_format(formats, 0),
            )]);
        }
        for l in block.into_rows(e.format) {
            sink.data_row(&[Some(l.as_bytes())]);
        }
        sink.complete("EXPLAIN");
        Ok(())
    }

    /// The explained block of `plan` (the plan of `stmt`). Boxed: recursive plans
    /// explain their subplans and outer statement here.
    fn explain_plan<'a>(
        &'a mut self,
        e: &'a ExplainPlan,
        plan: &'a Plan,
        stmt: &'a Statement,
        params: &'a BoundParams<'a>,
        plan_ids: &'a mut u64,
    ) -> Explaining<'a> {
        Box::pin(async move {
            let catalog = self.shared.catalog.snapshot();
            let all_tasks = self.explain_all_tasks;
            let dbname = self.shared.cfg.database.clone();
            match plan {
                Plan::Router(r) => {
                    let shard = route_bound(r, &[], &BindMsg::default_empty(), &catalog)?;
                    let addr = placement_addr(&catalog, shard)?;
                    let sql = r.template.for_shard(shard.shard_id);
                    let task = self
                        .node_plan(e, &addr, &sql, e.analyze && !r.read_only)
                        .await?;
                    Ok(layout::custom_scan(
                        e.format,
                        1,
                        vec![task],
                        Vec::new(),
                        &dbname,
                        true,
                        e.costs,
                        0,
                    ))
                }
                Plan::MultiShard(m) => self.explain_multi_shard(e, m, &catalog, all_tasks).await,
                Plan::MultiShardModify(m) => {
                    if e.analyze {
                        return Err(PgError::not_supported(
                            "pgshard does not support EXPLAIN ANALYZE of multi-shard UPDATE/DELETE yet",
                        ));
                    }
                    let tasks = m
                        .table
                        .shards
                        .iter()
                        .map(|s| (s.shard_id, m.template.for_shard(s.shard_id)))
                        .collect::<Vec<_>>();
                    self.explain_tasks(e, &m.table, &tasks, &catalog, all_tasks, 0)
                        .await
                }
                // A part of a recursive plan that runs on the coordinator node (over
                // intermediate results): one task there.
                Plan::Local => {
                    let coord = self.shared.coordinator.clone();
                    let write = e.analyze && !is_read_only_local(stmt);
                    let task = self.node_plan(e, &coord, &stmt.text, write).await?;
                    Ok(layout::custom_scan(
                        e.format,
                        1,
                        vec![task],
                        Vec::new(),
                        &dbname,
                        true,
                        e.costs,
                        0,
                    ))
                }
                Plan::Recursive(r) => self.explain_recursive(e, r, params, plan_ids).await,
                Plan::Repartition(r) => self.explain_repartition(e, r, params, plan_ids).await,
                Plan::Unsupported(err) => Err(err.clone()),
                _ => Err(PgError::not_supported(
                    "pgshard does not support EXPLAIN of this statement",
                )),
            }
        })
    }

    /// Each subplan explained, then its intermediate result made (empty, or filled
    /// under ANALYZE, which runs the subplan a second time), then the outer statement
    /// explained over them with the subplans under its Custom Scan.
    async fn explain_recursive(
        &mut self,
        e: &ExplainPlan,
        r: &RecursivePlan,
        params: &BoundParams<'_>,
        plan_ids: &mut u64,
    ) -> PgResult<Explained> {
        if e.analyze && !r.subplans.iter().all(|s| reads_only(&s.plan, &s.stmt)) {
            return Err(PgError::not_supported(
                "pgshard does not support EXPLAIN ANALYZE of statements whose subplans write",
            ));
        }
        *plan_ids += 1;
        let plan_id = *plan_ids;
        let mut made: Vec<&str> = Vec::new();
        let mut subplans = Vec::new();
        let mut outcome = Ok(());
        for sub in &r.subplans {
            let explained = self
                .explain_plan(e, &sub.plan, &sub.stmt, params, plan_ids)
                .await;
            let made_now = match explained {
                Ok(block) => {
                    subplans.push(block);
                    // A value in the outer statement is computed (it reads only):
                    // the outer statement is explained with it.
                    if e.analyze || sub.value.is_some() {
                        self.intermediate_result(sub, params, &mut made)
                            .await
                            .map(drop)
                    } else {
                        self.create_intermediate_table(sub, params, &mut made).await
                    }
                }
                Err(err) => Err(err),
            };
            if let Err(err) = made_now {
                outcome = Err(err);
                break;
            }
        }
        let outer = match outcome {
            Ok(()) => match self.outer_with_values(r).await {
                Ok(None) => {
                    self.explain_plan(e, &r.outer_plan, &r.outer, params, plan_ids)
                        .await
                }
                Ok(Some((stmt, outer_plan))) => {
                    self.explain_plan(e, &outer_plan, &stmt, params, plan_ids)
                        .await
                }
                Err(err) => Err(err),
            },
            Err(err) => Err(err),
        };
        self.drop_intermediate_results(&made).await;
        Ok(layout::with_subplans(outer?, subplans, plan_id))
    }

    /// A broadcast / repartition join: the strategy decided as running it would, each
    /// move shown as a `Distributed Subplan` (its kind, table, column and estimated
    /// rows), the moved tables made (empty; filled under ANALYZE) in a block of the
    /// session's, the renamed statement explained over them, the tables dropped.
    async fn explain_repartition(
        &mut self,
        e: &ExplainPlan,
        r: &crate::planner::repartition::RepartitionPlan,
        params: &BoundParams<'_>,
        plan_ids: &mut u64,
    ) -> PgResult<Explained> {
        use crate::planner::repartition::MoveKind;
        if !self.enable_repartition_joins {
            return self
                .explain_plan(e, &r.fallback, &r.stmt, params, plan_ids)
                .await;
        }
        let own = self.begin_own_block().await?;
        let mut made = Vec::new();
        let explained = async {
            let Some((mut d, types)) = self.repartition_strategy(r).await? else {
                return self
                    .explain_plan(e, &r.fallback, &r.stmt, params, plan_ids)
                    .await;
            };
            *plan_ids += 1;
            let plan_id = *plan_ids;
            let mut subplans = Vec::new();
            for m in &d.moves {
                let table = &r.rels[m.rel].table.name;
                let (kind, what) = match &m.kind {
                    MoveKind::Broadcast => ("Broadcast", table.clone()),
                    MoveKind::Repartition { column, .. } => {
                        ("Repartition", format!("{table} on {column}"))
                    }
                };
                // A semijoin-reduced move: its rows filtered by another reference's keys.
                let semijoin = m.semijoin.as_ref().map(|sj| {
                    format!(
                        "{} = ANY (keys of {}.{})",
                        sj.column,
                        sj.source_alias(),
                        sj.source_column
                    )
                });
                let mut line = format!("{kind} {what} (~{} rows)", m.rows.round() as u64);
                if let Some(sj) = &semijoin {
                    line.push_str(&format!(" where {sj}"));
                }
                subplans.push(match e.format {
                    ExplainFormat::Text => Explained::Text(vec![line]),
                    _ => {
                        let mut node = serde_json::json!({
                            "Node Type": kind,
                            "Relation Name": table,
                            "Plan Rows": m.rows.round() as u64,
                        });
                        if let Some(sj) = semijoin {
                            node["Semijoin Filter"] = serde_json::Value::String(sj);
                        }
                        Explained::Tree(node)
                    }
                });
                if e.analyze {
                    self.run_move(r, m, &types, &mut made).await?;
                } else {
                    self.make_destinations(m, &types, &mut made).await?;
                }
            }
            if e.analyze {
                self.index_and_analyze_moved(r, &d.moves, &made).await?;
            }
            // A staying reference filtered by another's keys (read either way).
            for f in &d.staying {
                let sj = &f.semijoin;
                let line = format!(
                    "Filter {}.{} = ANY (keys of {}.{})",
                    r.rels[f.rel].alias(),
                    sj.column,
                    sj.source_alias(),
                    sj.source_column
                );
                subplans.push(match e.format {
                    ExplainFormat::Text => Explained::Text(vec![line]),
                    _ => Explained::Tree(serde_json::json!({
                        "Node Type": "Semijoin Filter",
                        "Relation Name": r.rels[f.rel].table.name,
                        "Filter": line,
                    })),
                });
            }
            self.filter_staying(r, &mut d).await?;
            let outer = self
                .explain_plan(e, &d.outer_plan, &d.outer, params, plan_ids)
                .await?;
            Ok(layout::with_subplans(outer, subplans, plan_id))
        }
        .await;
        let made: Vec<(NodeAddr, &str)> =
            made.iter().map(|(a, t)| (a.clone(), t.as_str())).collect();
        let dropped = match explained.is_ok() {
            true => self.drop_shipped(&made).await,
            false => Ok(()),
        };
        let ended = self
            .end_own_block(
                own,
                explained.is_ok() && dropped.is_ok(),
                params.bind.is_some(),
            )
            .await;
        let explained = explained?;
        dropped.and(ended)?;
        Ok(explained)
    }

    /// The Custom Scan block of `tasks` (shard id, shard SQL): the first task or all.
    async fn explain_tasks(
        &mut self,
        e: &ExplainPlan,
        table: &crate::catalog::DistTable,
        tasks: &[(ShardId, String)],
        catalog: &Catalog,
        all_tasks: bool,
        rows: u64,
    ) -> PgResult<Explained> {
        let shown = if all_tasks {
            tasks.len()
        } else {
            1.min(tasks.len())
        };
        let mut explained = Vec::new();
        for (shard_id, sql) in tasks.iter().take(shown) {
            let shard = table
                .shards
                .iter()
                .find(|s| s.shard_id == *shard_id)
                .ok_or_else(|| PgError::internal("shard vanished"))?;
            let addr = placement_addr(catalog, shard)?;
            explained.push(self.node_plan(e, &addr, sql, false).await?);
        }
        Ok(layout::custom_scan(
            e.format,
            tasks.len(),
            explained,
            Vec::new(),
            &self.shared.cfg.database,
            all_tasks,
            e.costs,
            rows,
        ))
    }

    async fn explain_multi_shard(
        &mut self,
        e: &ExplainPlan,
        m: &MultiShardPlan,
        catalog: &Catalog,
        all_tasks: bool,
    ) -> PgResult<Explained> {
        let user_aggregate = self.calls_aggregate(&m.functions).await?;
        let stage = match (&m.combine, &m.shape) {
            (Some(c), MultiShardShape::Combine) => Some(match (&c.partial, user_aggregate) {
                (Some(p), false) => p,
                _ => &c.raw,
            }),
            (Some(c), _) if user_aggregate => Some(&c.raw),
            _ => None,
        };
        // The same tasks as the execution runs: per node or per shard.
        let mut tasks: Vec<(ShardId, String)> = Vec::new();
        for (_, shards) in shards_by_node(catalog, &m.table)? {
            let ids = ids_of(&shards);
            let sqls = m.tasks(stage, &ids);
            if sqls.len() == ids.len() {
                tasks.extend(ids.into_iter().zip(sqls));
            } else {
                tasks.extend(sqls.into_iter().map(|sql| (ids[0], sql)));
            }
        }
        // Citus shows the tasks in shard order.
        if !m.node_tasks {
            tasks.sort_by_key(|(id, _)| *id);
        }
        let scan = self
            .explain_tasks(e, &m.table, &tasks, catalog, all_tasks, 100000)
            .await?;
        let Some(stage) = stage else {
            return Ok(match &m.shape {
                MultiShardShape::Aggregate { .. } => layout::under("Aggregate", e.costs, scan),
                _ if m.limit != Bound::None || m.offset > 0 => {
                    layout::under("Limit", e.costs, scan)
                }
                _ => scan,
            });
        };
        // The coordinator's own plan of the combine, over the (empty) temporary table.
        let coord = self.shared.coordinator.clone();
        let mut conn = self.private_conn(&coord).await?;
        let cols = Self::create_partials_table(&mut conn, stage, &[], &self.local_settings).await?;
        let exprs = combine::partial_expressions(&stage.partials, &|name| {
            cols.iter()
                .find(|c| c.name == name)
                .map(|c| (c.type_oid, c.type_name.clone()))
        });
        let Some(exprs) = exprs else {
            conn.simple("ROLLBACK").await.ok();
            return Ok(scan);
        };
        let combine_sql = stage.combine_sql(&|i| exprs[i].clone());
        let explain_sql = format!(
            "EXPLAIN (COSTS {}{}) {combine_sql}",
            if e.costs { "on" } else { "off" },
            if e.format == ExplainFormat::Text {
                ""
            } else {
                ", FORMAT JSON"
            }
        );
        let coordinator_rows = conn.simple_column(&explain_sql).await;
        conn.simple("ROLLBACK").await.ok();
        let coordinator = Explained::from_node(e.format, coordinator_rows?)?;
        Ok(layout::splice_scan(coordinator, scan))
    }
}

/// Whether running `plan` (of `stmt`) only reads: EXPLAIN ANALYZE may run it twice.
fn reads_only(plan: &Plan, stmt: &Statement) -> bool {
    match plan {
        Plan::Router(r) => r.read_only,
        Plan::MultiShard(_) => true,
        Plan::Local => is_read_only_local(stmt),
        Plan::Recursive(r) => {
            r.subplans.iter().all(|s| reads_only(&s.plan, &s.stmt))
                && reads_only(&r.outer_plan, &r.outer)
        }
        Plan::Repartition(_) => true,
        _ => false,
    }
}
