//! Citus's `run_command_on_workers(command [, parallel])`,
//! `run_command_on_all_nodes(command [, parallel [, give_warning_for_connection_errors]])`,
//! `run_command_on_shards(table, command [, parallel])` and
//! `run_command_on_placements(table, command [, parallel])`.
//!
//! The command runs as the session's role (never pgshard's superuser) on a fresh
//! connection state: a connection of the role's pool reset first and closed after,
//! so nothing the command leaves (settings, an open transaction) reaches another
//! statement. For the shard forms each `%s` in the command is the shard's qualified
//! name. Each node's answer becomes a row as in Citus: `success` with the single value
//! the command returned (or its command tag), or `success = false` with the first
//! line of the node's error ("ERROR:  ...").

use super::*;
use crate::commands::UtilityResult;

/// Whether pgshard runs `name` here, as the session, rather than in `commands`.
pub fn is_run_command(name: &str) -> bool {
    matches!(
        name,
        "run_command_on_workers"
            | "run_command_on_all_nodes"
            | "run_command_on_shards"
            | "run_command_on_placements"
    )
}

/// Where one run goes, and what its row starts with.
struct Target {
    addr: NodeAddr,
    leading: Vec<Option<String>>,
    command: String,
}

impl Session {
    /// Runs `name(values)` (`relids`: its table argument resolved by the session).
    pub(super) async fn run_command_on(
        &mut self,
        name: &str,
        values: &[Option<String>],
        relids: &[Option<u32>],
    ) -> PgResult<UtilityResult> {
        let (command_at, table) = match name {
            "run_command_on_shards" | "run_command_on_placements" => (1, true),
            _ => (0, false),
        };
        let command = values.get(command_at).cloned().flatten().ok_or_else(|| {
            PgError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("{name}: the command must not be NULL"),
            )
        })?;
        let catalog = self.shared.catalog.snapshot();
        let node_of_group = |group| {
            catalog
                .workers
                .iter()
                .find(|w| w.group_id == group)
                .map(|w| NodeAddr {
                    host: w.host.clone(),
                    port: w.port,
                })
                .unwrap_or_else(|| self.shared.coordinator.clone())
        };
        let mut targets = Vec::new();
        if table {
            let relid = relids.first().copied().flatten().ok_or_else(|| {
                PgError::new(
                    sqlstate::UNDEFINED_TABLE,
                    format!(
                        "relation \"{}\" does not exist",
                        values.first().cloned().flatten().unwrap_or_default()
                    ),
                )
            })?;
            let t = catalog.tables_by_oid.get(&relid).ok_or_else(|| {
                PgError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!(
                        "relation {} is not a distributed table",
                        values.first().cloned().flatten().unwrap_or_default()
                    ),
                )
            })?;
            for shard in &t.shards {
                let shard_name = format!(
                    "{}.{}",
                    quote_ident(&t.schema),
                    quote_ident(&t.shard_name(shard.shard_id))
                );
                let command = command.replace("%s", &shard_name);
                let groups: &[_] = if name == "run_command_on_shards" {
                    &shard.placement_groups[..shard.placement_groups.len().min(1)]
                } else {
                    &shard.placement_groups
                };
                for &group in groups {
                    let addr = node_of_group(group);
                    let leading = if name == "run_command_on_shards" {
                        vec![Some(shard.shard_id.to_string())]
                    } else {
                        vec![
                            Some(addr.host.clone()),
                            Some(addr.port.to_string()),
                            Some(shard.shard_id.to_string()),
                        ]
                    };
                    targets.push(Target {
                        addr,
                        leading,
                        command: command.clone(),
                    });
                }
            }
        } else {
            if name == "run_command_on_all_nodes" {
                let ids = self
                    .home_rows(
                        "SELECT nodeid FROM pg_catalog.pg_dist_node WHERE groupid = 0 LIMIT 1",
                    )
                    .await
                    .unwrap_or_default();
                let id = ids
                    .into_iter()
                    .next()
                    .and_then(|r| r.into_iter().next().flatten());
                targets.push(Target {
                    addr: self.shared.coordinator.clone(),
                    leading: vec![Some(id.unwrap_or_else(|| "0".to_string()))],
                    command: command.clone(),
                });
            }
            for w in &catalog.workers {
                let addr = NodeAddr {
                    host: w.host.clone(),
                    port: w.port,
                };
                let leading = if name == "run_command_on_all_nodes" {
                    vec![Some(w.node_id.to_string())]
                } else {
                    vec![Some(w.host.clone()), Some(w.port.to_string())]
                };
                targets.push(Target {
                    addr,
                    leading,
                    command: command.clone(),
                });
            }
        }
        let mut rows = Vec::new();
        for t in targets {
            let (success, result) = self.run_command_as_client(&t.addr, &t.command).await;
            let mut row = t.leading;
            row.push(Some(if success { "t" } else { "f" }.to_string()));
            row.push(Some(result));
            rows.push(row);
        }
        Ok(UtilityResult {
            columns: commands::run_command_columns(name),
            rows,
        })
    }

    /// One command on one node as the session's role: Citus's (success, result).
    async fn run_command_as_client(&mut self, addr: &NodeAddr, command: &str) -> (bool, String) {
        let mut conn = match self.pooled_client_conn(addr).await {
            Ok(c) => c,
            Err(e) => return (false, format!("failed to connect to {addr}: {}", e.message)),
        };
        let reset = settings_replay_sql(&self.creds, &[], &[]);
        let outcome = match conn.simple(&reset).await {
            Ok(()) => conn.simple_last_result(command).await,
            Err(e) => Err(e),
        };
        // Whatever the command left on the connection goes with it.
        drop(conn.detach());
        match outcome {
            Err(e) => (
                false,
                format!("ERROR:  {}", e.message.lines().next().unwrap_or("")),
            ),
            Ok(r) => match r.columns {
                None => (true, r.tag),
                Some(n) if n != 1 => (false, "expected a single column in query target".into()),
                Some(_) if r.rows.len() > 1 => {
                    (false, "expected a single row in query result".into())
                }
                Some(_) => (
                    true,
                    r.rows
                        .into_iter()
                        .next()
                        .and_then(|row| row.into_iter().next().flatten())
                        .unwrap_or_default(),
                ),
            },
        }
    }
}
