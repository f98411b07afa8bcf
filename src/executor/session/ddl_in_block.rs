//! DDL on a distributed table inside the client's transaction block: the statement
//! runs on the shell table over the session's own connection to the coordinator node,
//! then on every shard over the session's connections to the workers, and commits or
//! rolls back with the block (2PC with the coordinator node among the participants).
//!
//! The block's later statements are planned with the catalog as it was, so only DDL
//! that changes nothing pgshard plans with runs here (`DdlPlan::not_in_block`); the
//! catalog version is raised in the block, and every pgshard reloads after the commit.
//! GRANT / REVOKE reaching shards and workers run here the same way, and so do role
//! statements (`role_in_block`).

use super::*;
use crate::catalog::cache::{CHANNEL, RAISE_VERSION_AS_CLIENT};
use crate::commands::ddl::{shard_context, work_per_node};
use crate::planner::ddl::{shard_statement, DdlPlan};
use crate::planner::security::{GrantPlan, RolePlan};
use std::collections::BTreeMap;

impl Session {
    pub(super) async fn ddl_in_block(&mut self, plan: &DdlPlan) -> PgResult<()> {
        let coord = self.shared.coordinator.clone();
        let idx = self.bulk_conn(&coord, true).await?;
        // PostgreSQL checks the client's own statement on the shell first.
        self.tx.held[idx].conn.simple(&plan.text).await?;
        let catalog = self.shared.catalog.snapshot();
        let per_node = work_per_node(&catalog, &plan.table, |id| shard_statement(plan, id, &[]))?;
        for ((_, host, port), stmts) in &per_node {
            let addr = NodeAddr {
                host: host.clone(),
                port: *port,
            };
            let n = self.bulk_conn(&addr, true).await?;
            for (shard_id, sql) in stmts.iter().filter(|(_, sql)| !sql.is_empty()) {
                // As outside blocks: the message names shard, node and statement.
                self.tx.held[n]
                    .conn
                    .simple(sql)
                    .await
                    .map_err(|e| e.in_context(&shard_context(*shard_id, host, *port, sql)))?;
            }
        }
        // Other pgshard processes see the version move once the block commits.
        self.tx.held[idx]
            .conn
            .simple(RAISE_VERSION_AS_CLIENT)
            .await?;
        self.tx.catalog_changed = true;
        Ok(())
    }

    /// GRANT / REVOKE / ALTER DEFAULT PRIVILEGES inside the client's block: the
    /// statement on the session's coordinator-node connection, then each node's shard
    /// statements and the statements for every worker (each in a savepoint, skipped
    /// where its object does not exist) on the session's worker connections, committed
    /// with the block. Grantees are expected on the workers already (role statements
    /// propagate outside blocks).
    pub(super) async fn grant_in_block(
        &mut self,
        plan: &GrantPlan,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let coord = self.shared.coordinator.clone();
        // The catalog lock until the block ends: no table is distributed meanwhile
        // (its shards would get the old ACL).
        let idx = self.bulk_conn(&coord, true).await?;
        self.tx.held[idx]
            .conn
            .simple(&format!(
                "SELECT pg_catalog.pg_advisory_xact_lock({})",
                crate::catalog::schema::CATALOG_LOCK_KEY
            ))
            .await?;
        self.simple_on_backend_into(&coord, &plan.text, true, Some(sink))
            .await?;
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
            let conn = &mut self.tx.held[n].conn;
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

    /// A role statement inside the client's block (`CREATE/ALTER/DROP ROLE`,
    /// `GRANT/REVOKE role`, `ALTER ROLE ... SET`, `REASSIGN OWNED`, `DROP OWNED`): the
    /// client's statement on its coordinator-node connection (PostgreSQL checks it as
    /// the client), then the same statement on every active worker over the session's
    /// connections there (logged in as the client: the same checks), committed or
    /// rolled back with the block, 2PC included. The roles stay equal on every node
    /// within the block, so its later statements (a GRANT to a role it created) work
    /// on the workers too. The one difference: a password given in clear is hashed by
    /// each node with its own salt, so after the commit the changed roles are copied
    /// from the coordinator node (`finish_transaction`); until then a worker refusing
    /// the role's login gets it copied then (`identity.rs`).
    pub(super) async fn role_in_block(
        &mut self,
        plan: &RolePlan,
        caller: &str,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let coord = self.shared.coordinator.clone();
        self.bulk_conn(&coord, true).await?;
        self.simple_on_backend_into(&coord, &plan.text, true, Some(sink))
            .await?;
        let catalog = self.shared.catalog.snapshot();
        for w in catalog.workers.iter().filter(|w| w.is_active) {
            let addr = NodeAddr {
                host: w.host.clone(),
                port: w.port,
            };
            let n = self.bulk_conn(&addr, true).await?;
            // Never the statement in the message: it may carry a password.
            self.tx.held[n]
                .conn
                .simple(&plan.text)
                .await
                .map_err(|e| e.in_context(&format!("{} on node {addr}", plan.tag)))?;
        }
        // DROP OWNED drops the role's shells (and, on the workers, its shards): the
        // coordinator node's sql_drop trigger deletes their catalog rows.
        if !plan.drop_owned.is_empty() {
            self.tx.catalog_changed = true;
        }
        self.tx
            .roles_to_sync
            .extend(plan.roles.iter().map(|r| r.resolve(caller)));
        if let Some((_, new)) = &plan.renamed {
            self.tx.roles_to_sync.push(new.clone());
        }
        Ok(())
    }
}
