//! Running a recursively planned statement (`planner::recursive::RecursivePlan`): each
//! subplan's rows become an intermediate result, a temporary table on the client's own
//! coordinator-node connection (its role, settings and block) created with the
//! subtree's exact types (`CREATE TEMP TABLE ... AS <subtree> WITH NO DATA`, planned
//! over the shells, never run) and filled by COPY; then the outer statement runs over
//! them (on the coordinator node when it reads no distributed table any more). The
//! tables are dropped when the statement ends (in a failed block, its rollback removes
//! them). Each result is bounded by `citus.max_intermediate_result_size`.
//! Also [`Session::plan_rows`]: any read plan's rows for pgshard's own use (subplans,
//! the SELECT of an INSERT ... SELECT through the coordinator).

use super::via_coordinator::read_answer;
use super::*;
use crate::planner::recursive::{values, RecursivePlan, SubPlan};
use std::future::Future;
use std::pin::Pin;

/// Citus's error when an intermediate result grows past its bound.
pub(super) fn intermediate_result_too_large(limit_kb: i64) -> PgError {
    let mut e = PgError::new(
        sqlstate::PROGRAM_LIMIT_EXCEEDED,
        format!(
            "the intermediate result size exceeds citus.max_intermediate_result_size (currently {limit_kb} kB)"
        ),
    );
    e.detail = Some("Citus restricts the size of intermediate results of complex subqueries and CTEs to avoid accidentally pulling large result sets into once place.".into());
    e.hint = Some(
        "To run the current query, set citus.max_intermediate_result_size to a higher value or -1 to disable."
            .into(),
    );
    e
}

pub(super) type Run<'a> = Pin<Box<dyn Future<Output = PgResult<()>> + Send + 'a>>;

impl Session {
    /// `Plan::Recursive`: subplans into intermediate results, then the outer statement.
    pub(super) fn recursive<'a>(
        &'a mut self,
        plan: &'a RecursivePlan,
        params: &'a BoundParams<'a>,
        formats: &'a [i16],
        describe: bool,
        sink: &'a mut ResultSink,
    ) -> Run<'a> {
        Box::pin(async move {
            let mut made: Vec<&str> = Vec::new();
            let mut done = Ok(());
            for sub in &plan.subplans {
                if let Err(e) = self
                    .intermediate_result(sub, params, &mut made)
                    .await
                    .map(drop)
                {
                    done = Err(e);
                    break;
                }
            }
            if done.is_ok() {
                done = match self.outer_with_values(plan).await {
                    Ok(None) => {
                        self.plan_into(
                            &plan.outer_plan,
                            &plan.outer,
                            params,
                            formats,
                            describe,
                            sink,
                        )
                        .await
                    }
                    Ok(Some((stmt, outer_plan))) => {
                        self.plan_into(&outer_plan, &stmt, params, formats, describe, sink)
                            .await
                    }
                    Err(e) => Err(e),
                };
            }
            self.drop_intermediate_results(&made).await;
            done
        })
    }

    /// The outer statement with its value subplans' results in place of their sublinks
    /// (`planner::recursive::values`), read from the intermediate results (PostgreSQL's
    /// own scalar-subquery semantics: NULL on no row, 21000 on two), and its new plan;
    /// None when it has no value subplans.
    pub(super) async fn outer_with_values(
        &mut self,
        plan: &RecursivePlan,
    ) -> PgResult<Option<(Statement, Plan)>> {
        if plan.subplans.iter().all(|s| s.value.is_none()) {
            return Ok(None);
        }
        let coord = self.shared.coordinator.clone();
        let mut found = Vec::new();
        for sub in &plan.subplans {
            let Some(kind) = &sub.value else {
                continue;
            };
            let idx = self.bulk_conn(&coord, false).await?;
            let rows = self.tx.held[idx]
                .conn
                .simple_rows(&values::value_query(sub, kind))
                .await?;
            let row = rows
                .first()
                .ok_or_else(|| PgError::internal("a subplan's value: no row"))?;
            found.push(values::Value::from_row(sub, row)?);
        }
        let stmt = values::substitute(&plan.outer, &found)?;
        let catalog = self.shared.catalog.snapshot();
        let outer_plan = self.plan_statement(&stmt, &catalog).await?;
        Ok(Some((stmt, outer_plan)))
    }

    /// Drops the intermediate results `made` (in a failed block this fails too; its
    /// rollback removes them).
    pub(super) async fn drop_intermediate_results(&mut self, made: &[&str]) {
        if made.is_empty() {
            return;
        }
        let sql = format!("DROP TABLE IF EXISTS {}", made.join(", "));
        let coord = self.shared.coordinator.clone();
        if let Ok(idx) = self.bulk_conn(&coord, false).await {
            let conn = &mut self.tx.held[idx].conn;
            msg::write_query(&mut conn.wbuf, &sql);
            if conn.flush().await.is_ok() {
                read_answer(conn, |_, _| {}).await.ok();
            }
        }
    }

    /// One subplan: its table created (exact types), its rows run and copied in.
    /// Returns the rows (DataRows) for results shipped further.
    pub(super) async fn intermediate_result<'a>(
        &mut self,
        sub: &'a SubPlan,
        params: &BoundParams<'_>,
        made: &mut Vec<&'a str>,
    ) -> PgResult<Vec<Frame>> {
        self.create_intermediate_table(sub, params, made).await?;
        let coord = self.shared.coordinator.clone();
        let mut rows = ResultSink::capturing();
        self.plan_into(&sub.plan, &sub.stmt, params, &[], false, &mut rows)
            .await?;
        let limit_kb = self.max_intermediate_kb;
        let rows: Vec<Frame> = rows.frames.into_iter().filter(|f| f.tag == b'D').collect();
        let bytes: u64 = rows.iter().map(|f| f.body.len() as u64).sum();
        if limit_kb >= 0 && bytes > (limit_kb as u64) * 1024 {
            return Err(intermediate_result_too_large(limit_kb));
        }
        let idx = self.bulk_conn(&coord, false).await?;
        self.fill_intermediate_result(idx, &format!("COPY {} FROM STDIN", sub.table), &rows)
            .await?;
        Ok(rows)
    }

    /// Copies `rows` (DataRows in text format) into a table on held connection `idx`:
    /// `copy_sql` is the `COPY ... FROM STDIN` (maybe after the table's CREATE).
    pub(super) async fn fill_intermediate_result(
        &mut self,
        idx: usize,
        copy_sql: &str,
        rows: &[Frame],
    ) -> PgResult<()> {
        let conn = &mut self.tx.held[idx].conn;
        conn.start_copy_in(copy_sql).await?;
        let mut line = BytesMut::new();
        for f in rows {
            line.clear();
            crate::executor::combine::copy_text_row(&f.body, &mut line)?;
            msg::write_raw(&mut conn.wbuf, b'd', &line);
            if conn.wbuf.len() >= 256 * 1024 {
                conn.flush().await?;
            }
        }
        msg::write_raw(&mut conn.wbuf, b'c', &[]);
        conn.flush().await?;
        read_answer(conn, |_, _| {}).await
    }

    /// A subplan's table, created empty with the subtree's exact types (EXPLAIN makes
    /// them so to explain the statement over them).
    pub(super) async fn create_intermediate_table<'a>(
        &mut self,
        sub: &'a SubPlan,
        params: &BoundParams<'_>,
        made: &mut Vec<&'a str>,
    ) -> PgResult<()> {
        let coord = self.shared.coordinator.clone();
        let empty = BindMsg::default_empty();
        let bind = params.bind.unwrap_or(&empty);
        let idx = self.bulk_conn(&coord, false).await?;
        let conn = &mut self.tx.held[idx].conn;
        msg::write_unnamed_run(
            &mut conn.wbuf,
            &sub.create_sql,
            params.types,
            bind,
            &[],
            false,
        );
        msg::write_sync(&mut conn.wbuf);
        conn.flush().await?;
        read_answer(conn, |_, _| {}).await?;
        made.push(&sub.table);
        Ok(())
    }

    /// Runs a plan of pgshard's own (a subplan, an outer statement, a SELECT feeding an
    /// INSERT) into `sink`, wherever it runs: the client's own coordinator-node
    /// connection, one shard, or any plan `run_plan` knows.
    /// Boxed: plans run here may come back here (recursive plans, an INSERT ...
    /// SELECT's SELECT).
    pub(super) fn plan_into<'a>(
        &'a mut self,
        plan: &'a Plan,
        stmt: &'a Statement,
        params: &'a BoundParams<'a>,
        formats: &'a [i16],
        describe: bool,
        sink: &'a mut ResultSink,
    ) -> Run<'a> {
        Box::pin(self.plan_into_inner(plan, stmt, params, formats, describe, sink))
    }

    async fn plan_into_inner(
        &mut self,
        plan: &Plan,
        stmt: &Statement,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let empty = BindMsg::default_empty();
        let bind = params.bind.unwrap_or(&empty);
        let (addr, sql, write) = match plan {
            Plan::Unsupported(e) => return Err(e.clone()),
            Plan::Local => (
                self.shared.coordinator.clone(),
                stmt.text.clone(),
                !is_read_only_local(stmt),
            ),
            Plan::Router(r) if r.read_only => {
                let catalog = self.shared.catalog.snapshot();
                let shard = route_bound(r, params.types, bind, &catalog)?;
                let addr = placement_addr(&catalog, shard)?;
                (addr, r.template.for_shard(shard.shard_id), false)
            }
            // A routed write (a modifying CTE's) inside the statement's block.
            Plan::Router(r) if self.tx.state == TxnState::InBlock => {
                let catalog = self.shared.catalog.snapshot();
                let shard = route_bound(r, params.types, bind, &catalog)?;
                let addr = placement_addr(&catalog, shard)?;
                (addr, r.template.for_shard(shard.shard_id), true)
            }
            Plan::Router(_) => {
                return Err(PgError::not_supported(
                    "pgshard does not support a write as part of this statement yet",
                ))
            }
            Plan::Recursive(p) => {
                return self.recursive(p, params, formats, describe, sink).await;
            }
            other => {
                return self
                    .run_plan(other, stmt, params, formats, describe, sink)
                    .await;
            }
        };
        let idx = self.bulk_conn(&addr, write).await?;
        let conn = &mut self.tx.held[idx].conn;
        msg::write_unnamed_run(&mut conn.wbuf, &sql, params.types, bind, formats, describe);
        msg::write_sync(&mut conn.wbuf);
        conn.flush().await?;
        read_answer(conn, |tag, body| {
            if matches!(tag, b'T' | b'D' | b'C' | b'N') {
                sink.push_frame(tag, body);
            }
        })
        .await
    }
}
