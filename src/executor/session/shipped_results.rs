//! Running an UPDATE / DELETE planned in parts (`planner::modify_recursive`): its
//! subplans into intermediate results on the coordinator node (`subplans.rs`, the one
//! mechanism: exact types, COPY fill, `citus.max_intermediate_result_size`), then each
//! result the outer statement reads *shipped* to every node it runs on, then the outer
//! statement (shard by shard, on one shard, on every placement of a reference table,
//! or on the coordinator node for a local target).
//!
//! On a worker a shipped result is `pgshard_intermediate.pgs_intermediate_<pid>_<n>`,
//! an unlogged table with the columns of the coordinator node's result (names, types
//! with typmods, collations, read back from its catalog), created and filled by one
//! `CREATE ...; COPY ... FROM STDIN` on the session's own connection to that node. Not
//! a temporary table: PostgreSQL refuses to PREPARE a transaction that touched one, and
//! a write on several nodes ends with 2PC. So the results live in a transaction block
//! (pgshard's own in autocommit, committed or rolled back with the statement; the
//! client's otherwise), are dropped when the statement succeeds, and go with the
//! block's rollback when it fails: no other session ever sees them. The schema is
//! made on a node's first use, with `CREATE` granted to every role (the tables are
//! their session's own and never committed).

use super::subplans::Run;
use super::tasks::NodeTasks;
use super::*;
use crate::planner::modify_recursive::{ModifyRecursivePlan, SHIPPED_SCHEMA};
use std::collections::HashSet;
use std::sync::Mutex as StdMutex;

/// The nodes where pgshard made the shipped results' schema (this process).
static SCHEMA_MADE: StdMutex<Option<HashSet<NodeAddr>>> = StdMutex::new(None);

impl Session {
    /// `Plan::ModifyRecursive`: subplans, shipping, the outer statement, cleanup.
    pub(super) fn modify_recursive<'a>(
        &'a mut self,
        plan: &'a ModifyRecursivePlan,
        params: &'a BoundParams<'a>,
        formats: &'a [i16],
        describe: bool,
        sink: &'a mut ResultSink,
    ) -> Run<'a> {
        Box::pin(async move {
            let extended = params.bind.is_some();
            let own = match plan.shipped.is_empty() {
                true => false,
                false => self.begin_own_block().await?,
            };
            let mut made: Vec<&str> = Vec::new();
            let mut shipped_to: Vec<(NodeAddr, &str)> = Vec::new();
            let mut done = self
                .modify_in_parts(
                    plan,
                    params,
                    formats,
                    describe,
                    sink,
                    &mut made,
                    &mut shipped_to,
                )
                .await;
            if done.is_ok() {
                done = self.drop_shipped(&shipped_to).await;
            }
            self.drop_intermediate_results(&made).await;
            let ended = self.end_own_block(own, done.is_ok(), extended).await;
            done.and(ended)
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn modify_in_parts<'a>(
        &mut self,
        plan: &'a ModifyRecursivePlan,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
        made: &mut Vec<&'a str>,
        shipped_to: &mut Vec<(NodeAddr, &'a str)>,
    ) -> PgResult<()> {
        let mut rows = Vec::with_capacity(plan.subplans.len());
        for sub in &plan.subplans {
            rows.push(self.intermediate_result(sub, params, made).await?);
        }
        let nodes = self.outer_nodes(&plan.outer_plan, params)?;
        for s in &plan.shipped {
            let sub = &plan.subplans[s.subplan];
            let columns = self.result_columns(&sub.table).await?;
            let fill = format!(
                "CREATE UNLOGGED TABLE {} ({columns}); COPY {} FROM STDIN",
                s.table, s.table
            );
            for addr in &nodes {
                self.ensure_shipped_schema(addr).await?;
                let idx = self.bulk_conn(addr, false).await?;
                shipped_to.push((addr.clone(), &s.table));
                self.fill_intermediate_result(idx, &fill, &rows[s.subplan])
                    .await
                    .map_err(|e| shipping_error(e, addr, &fill))?;
            }
        }
        drop(rows);
        match &plan.outer_plan {
            Plan::Router(r) => {
                let catalog = self.shared.catalog.snapshot();
                let empty = BindMsg::default_empty();
                let shard = route_bound(r, params.types, params.bind.unwrap_or(&empty), &catalog)?;
                let tasks = [NodeTasks {
                    addr: placement_addr(&catalog, shard)?,
                    sql: vec![r.template.for_shard(shard.shard_id)],
                }];
                self.run_write_tasks(
                    &tasks,
                    plan.returning,
                    &plan.verb,
                    params,
                    formats,
                    describe,
                    sink,
                )
                .await
            }
            other => {
                self.plan_into(other, &plan.outer, params, formats, describe, sink)
                    .await
            }
        }
    }

    /// The nodes the outer statement runs on (none for the coordinator node's own).
    fn outer_nodes(&self, outer: &Plan, params: &BoundParams<'_>) -> PgResult<Vec<NodeAddr>> {
        let catalog = self.shared.catalog.snapshot();
        Ok(match outer {
            Plan::Router(r) => {
                let empty = BindMsg::default_empty();
                let shard = route_bound(r, params.types, params.bind.unwrap_or(&empty), &catalog)?;
                vec![placement_addr(&catalog, shard)?]
            }
            Plan::MultiShardModify(m) => {
                multishard::shards_by_node(&catalog, &catalog.current(&m.table))?
                    .into_iter()
                    .map(|(addr, _)| addr)
                    .collect()
            }
            Plan::ReferenceWrite { table, .. } => {
                reference_write::reference_nodes(&catalog, table)?
            }
            _ => Vec::new(),
        })
    }

    /// The column definitions of an intermediate result on the coordinator node, as
    /// `CREATE TABLE` takes them: names, types with typmods, non-default collations.
    async fn result_columns(&mut self, table: &str) -> PgResult<String> {
        let sql = format!(
            "SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname) || ' ' || \
             pg_catalog.format_type(a.atttypid, a.atttypmod) || \
             CASE WHEN a.attcollation <> t.typcollation \
             THEN ' COLLATE ' || a.attcollation::pg_catalog.regcollation::pg_catalog.text \
             ELSE '' END, ', ' ORDER BY a.attnum) \
             FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid \
             WHERE a.attrelid = {}::pg_catalog.regclass AND a.attnum > 0 AND NOT a.attisdropped",
            quote_literal(table)
        );
        let coord = self.shared.coordinator.clone();
        let idx = self.bulk_conn(&coord, false).await?;
        let columns = self.tx.held[idx].conn.simple_column(&sql).await?;
        Ok(columns.into_iter().next().unwrap_or_default())
    }

    /// Makes the shipped results' schema on `addr` once per process (as pgshard's own
    /// control role: the session's role may not create schemas).
    pub(super) async fn ensure_shipped_schema(&mut self, addr: &NodeAddr) -> PgResult<()> {
        let made = |addr: &NodeAddr| {
            SCHEMA_MADE
                .lock()
                .unwrap()
                .as_ref()
                .is_some_and(|s| s.contains(addr))
        };
        if made(addr) {
            return Ok(());
        }
        let client =
            crate::backend::control::connect(&self.shared.cfg, &addr.host, addr.port).await?;
        let schema = quote_ident(SHIPPED_SCHEMA);
        let sql = format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}; GRANT USAGE, CREATE ON SCHEMA {schema} TO PUBLIC"
        );
        // Two processes making it at once: one of them fails, then finds it made.
        let mut result = client.batch_execute(&sql).await;
        if result.is_err() {
            result = client.batch_execute(&sql).await;
        }
        result.map_err(|e| {
            PgError::from_client_error(&format!("node {addr}, statement \"{sql}\""), &e)
        })?;
        SCHEMA_MADE
            .lock()
            .unwrap()
            .get_or_insert_with(HashSet::new)
            .insert(addr.clone());
        Ok(())
    }

    /// Drops the shipped results, each node's in one statement, all nodes at once.
    pub(super) async fn drop_shipped(&mut self, shipped_to: &[(NodeAddr, &str)]) -> PgResult<()> {
        let mut tasks: Vec<NodeTasks> = Vec::new();
        for (addr, table) in shipped_to {
            match tasks.iter_mut().find(|t| t.addr == *addr) {
                Some(t) => t.sql[0].push_str(&format!(", {table}")),
                None => tasks.push(NodeTasks {
                    addr: addr.clone(),
                    sql: vec![format!("DROP TABLE {table}")],
                }),
            }
        }
        self.run_tasks_quietly(&tasks).await
    }
}

/// A node's error while a result was shipped to it, naming the node and statement. A
/// schema gone (a node made anew) is made again by the next statement.
pub(super) fn shipping_error(mut e: PgError, addr: &NodeAddr, sql: &str) -> PgError {
    if e.code == sqlstate::INVALID_SCHEMA_NAME {
        if let Some(made) = SCHEMA_MADE.lock().unwrap().as_mut() {
            made.remove(addr);
        }
    }
    if e.code != sqlstate::CONNECTION_FAILURE {
        e.raw = None;
        e.message = format!(
            "{} (node {addr}, while shipping an intermediate result: {sql})",
            e.message
        );
    }
    e
}
