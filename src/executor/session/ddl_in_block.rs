//! DDL on a distributed table inside the client's transaction block: the statement
//! runs on the shell table over the session's own connection to the coordinator node,
//! then on every shard over the session's connections to the workers, and commits or
//! rolls back with the block (2PC with the coordinator node among the participants).
//!
//! The block's later statements are planned with the catalog as it was, so only DDL
//! that changes nothing pgshard plans with runs here (`DdlPlan::not_in_block`); the
//! catalog version is raised in the block, and every pgshard reloads after the commit.
//! GRANT / REVOKE reaching shards and workers run here the same way.

use super::*;
use crate::catalog::cache::{CHANNEL, RAISE_VERSION_AS_CLIENT};
use crate::commands::ddl::{shard_context, work_per_node};
use crate::planner::ddl::{shard_statement, DdlPlan};
use crate::planner::security::GrantPlan;
use std::collections::BTreeMap;

impl Session {
    pub(super) async fn ddl_in_block(&mut self, plan: &DdlPlan) -> PgResult<()> {
        let coord = self.shared.coordinator.clone();
        let idx = self.bulk_conn(&coord, true).await?;
        // PostgreSQL checks the client's own statement on the shell first.
        self.held[idx].conn.simple(&plan.text).await?;
        let catalog = self.shared.catalog.snapshot();
        let per_node = work_per_node(&catalog, &plan.table, |id| shard_statement(plan, id, &[]))?;
        for ((_, host, port), stmts) in &per_node {
            let addr = NodeAddr {
                host: host.clone(),
                port: *port,
            };
            let n = self.bulk_conn(&addr, true).await?;
            for (shard_id, sql) in stmts {
                // As outside blocks: the message names shard, node and statement.
                self.held[n]
                    .conn
                    .simple(sql)
                    .await
                    .map_err(|e| e.in_context(&shard_context(*shard_id, host, *port, sql)))?;
            }
        }
        // Other pgshard processes see the version move once the block commits.
        self.held[idx].conn.simple(RAISE_VERSION_AS_CLIENT).await?;
        self.catalog_changed = true;
        Ok(())
    }

    /// GRANT / REVOKE / ALTER DEFAULT PRIVILEGES inside the client's block: the
    /// statement on the session's coordinator-node connection, then each node's shard
    /// statements and the statements for every worker (each in a savepoint, skipped
    /// where its object does not exist) on the session's worker connections, committed
    /// with the block. Grantees are expected on the workers already (role statements
    /// propagate outside blocks).
    pub(super) async fn grant_in_block(&mut self, plan: &GrantPlan) -> PgResult<()> {
        let coord = self.shared.coordinator.clone();
        let idx = self.bulk_conn(&coord, true).await?;
        self.held[idx].conn.simple(&plan.text).await?;
        let catalog = self.shared.catalog.snapshot();
        let mut per_node: BTreeMap<(String, u16), Vec<String>> = BTreeMap::new();
        for table in &plan.tables {
            let table = catalog.current(table);
            for (node, shards) in catalog.placements_by_node(&table)? {
                per_node
                    .entry((node.host.clone(), node.port))
                    .or_default()
                    .push(plan.shard_statement(&table, &shards)?);
            }
        }
        if !plan.worker_statements.is_empty() {
            for w in catalog.workers.iter().filter(|w| w.is_active) {
                per_node.entry((w.host.clone(), w.port)).or_default();
            }
        }
        for ((host, port), stmts) in &per_node {
            let addr = NodeAddr {
                host: host.clone(),
                port: *port,
            };
            let n = self.bulk_conn(&addr, true).await?;
            let context = |sql: &str| crate::commands::shards::node_context(host, *port, sql);
            let conn = &mut self.held[n].conn;
            for sql in stmts {
                conn.simple(sql)
                    .await
                    .map_err(|e| e.in_context(&context(sql)))?;
            }
            for sql in &plan.worker_statements {
                conn.simple("SAVEPOINT pgshard_grant").await?;
                match conn.simple(sql).await {
                    Ok(()) => {}
                    Err(e) if crate::commands::privileges::is_missing_object(&e.code) => {
                        conn.simple("ROLLBACK TO SAVEPOINT pgshard_grant").await?;
                    }
                    Err(e) => return Err(e.in_context(&context(sql))),
                }
                conn.simple("RELEASE SAVEPOINT pgshard_grant").await?;
            }
        }
        Ok(())
    }

    /// After a committed block that changed the catalog: reload it here and tell the
    /// other pgshard processes (NOTIFY cannot be part of a prepared transaction).
    pub(super) async fn announce_catalog_change(&mut self) {
        let coord = self.shared.coordinator.clone();
        if let Ok(mut conn) = self.shared.pools.node(&coord).acquire().await {
            if let Err(e) = conn.simple(&format!("NOTIFY {CHANNEL}")).await {
                tracing::warn!("cannot notify other pgshard processes of a catalog change: {e}");
            }
        }
        self.shared.catalog.reload().await;
    }
}
