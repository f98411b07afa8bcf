//! TRUNCATE / VACUUM / ANALYZE / LOCK of distributed tables. TRUNCATE (and ANALYZE and
//! LOCK inside a block) runs on the session's own node connections, so it is part of
//! the session's transaction: inside the client's block it commits or rolls back with
//! it (2PC where several nodes wrote), in autocommit it is a transaction of pgshard's
//! own. VACUUM, and ANALYZE outside a block, run on each node on their own
//! (`commands::maintain_shards`). LOCK outside a block is PostgreSQL's error.

use super::*;
use crate::commands::shards::node_context;
use crate::planner::propagate::{MaintenanceKind, PropagatePlan};

impl Session {
    pub(super) async fn maintenance(
        &mut self,
        plan: &PropagatePlan,
        extended: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let in_block = self.tx.state != TxnState::Idle;
        match plan.kind {
            MaintenanceKind::Vacuum if in_block => {
                return Err(PgError::new(
                    sqlstate::ACTIVE_SQL_TRANSACTION,
                    "VACUUM cannot run inside a transaction block",
                ))
            }
            MaintenanceKind::Lock if !in_block => self.outside_block_check("LOCK TABLE")?,
            MaintenanceKind::Vacuum | MaintenanceKind::Analyze if !in_block => {
                for t in &plan.tables {
                    commands::maintain_shards(&self.shared.catalog, t).await?;
                }
            }
            _ => {
                let own = self.begin_own_block().await?;
                let r = self.maintenance_in_block(plan).await;
                self.end_own_block(own, r.is_ok(), extended).await?;
                r?;
            }
        }
        sink.complete(plan.kind.tag());
        Ok(())
    }

    /// One statement per table and node, naming the node's shards, on the block's
    /// connection to that node. LOCK first locks the shells on the coordinator node,
    /// then every table's shards node by node in placement order (the same order in
    /// every session, as PostgreSQL locks a statement's tables in the order named).
    async fn maintenance_in_block(&mut self, plan: &PropagatePlan) -> PgResult<()> {
        let catalog = self.shared.catalog.snapshot();
        if let Some(sql) = &plan.coordinator_sql {
            let coord = self.shared.coordinator.clone();
            let idx = self.bulk_conn(&coord, false).await?;
            self.tx.held[idx].conn.simple(sql).await?;
        }
        for t in &plan.tables {
            let table = catalog.current(&t.table);
            for (node, shards) in catalog.placements_by_node(&table)? {
                let sql = t.for_shards(&shards)?;
                let addr = NodeAddr {
                    host: node.host.clone(),
                    port: node.port,
                };
                let idx = self.bulk_conn(&addr, plan.kind.writes()).await?;
                self.tx.held[idx]
                    .conn
                    .simple(&sql)
                    .await
                    .map_err(|e| e.in_context(&node_context(&node.host, node.port, &sql)))?;
            }
        }
        Ok(())
    }
}
