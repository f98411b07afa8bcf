//! The standbys of a local cluster (`cluster up --standbys N [--sync MODE]`): their
//! ports in the layout, their creation and start after the primaries, the primaries'
//! synchronous replication settings, their lines in `cluster status`, and their
//! registration in `pg_dist_node` as secondaries of their primary's group.
//!
//! Every node (the coordinator node and each worker) gets the same number of standbys;
//! `up` never removes any, as with workers. Node-level mechanics are in `standby.rs`.

use super::node::{Node, Settings};
use super::standby::{self, Replication, ReplicationMode, SyncCommit};
use super::{status_line, Cluster};
use anyhow::{Context, Result};
use std::path::Path;
use std::time::Duration;

/// How long `up` waits for new or restarted standbys to stream.
const STREAMING_TIMEOUT: Duration = Duration::from_secs(120);

impl Cluster {
    /// Every node (coordinator node first, then the workers) with its standbys.
    pub(super) fn groups(&self) -> Vec<(Node, Vec<Node>)> {
        self.nodes()
            .into_iter()
            .enumerate()
            .map(|(i, primary)| {
                let ports = self
                    .layout
                    .standby_ports
                    .get(i)
                    .cloned()
                    .unwrap_or_default();
                let standbys = ports
                    .iter()
                    .enumerate()
                    .map(|(j, &port)| standby::standby_node(&primary, j + 1, port))
                    .collect();
                (primary, standbys)
            })
            .collect()
    }

    /// Every standby of every node.
    pub(super) fn standby_nodes(&self) -> Vec<Node> {
        self.groups().into_iter().flat_map(|(_, s)| s).collect()
    }

    /// The port after every port the layout uses.
    pub(super) fn next_port(&self) -> u16 {
        let l = &self.layout;
        [l.port, l.coordinator_port]
            .into_iter()
            .chain(l.worker_ports.iter().copied())
            .chain(l.standby_ports.iter().flatten().copied())
            .chain(l.pgshard_ports.iter().copied())
            .max()
            .unwrap_or(l.port)
            + 1
    }

    /// Gives every node at least `n` standby ports (new ones after all others).
    pub(super) fn allocate_standby_ports(&mut self, n: usize) {
        let nodes = self.nodes().len();
        if n == 0 && self.layout.standby_ports.iter().all(|p| p.is_empty()) {
            return;
        }
        self.layout.standby_ports.resize(nodes, vec![]);
        for i in 0..nodes {
            while self.layout.standby_ports[i].len() < n {
                let port = self.next_port();
                self.layout.standby_ports[i].push(port);
            }
        }
    }

    /// `synchronous_commit` of the primaries: as chosen with `--sync`, else `on`
    /// where there are standbys (PostgreSQL's default).
    fn synchronous_commit(&self, has_standbys: bool) -> Option<SyncCommit> {
        let chosen = self
            .layout
            .synchronous_commit
            .as_deref()
            .and_then(SyncCommit::parse);
        chosen.or(has_standbys.then_some(SyncCommit::On))
    }
}

/// Creates the missing standbys (a base backup of their running primary), starts those
/// not running, writes each primary's replication settings and waits until every
/// standby streams. Nothing to do for a cluster without standbys or `--sync`.
pub(super) fn ensure_standbys(
    cluster: &Cluster,
    settings: &(dyn Fn(&Node) -> Settings + Sync),
) -> Result<()> {
    let password = &cluster.layout.password;
    let groups = cluster.groups();
    std::thread::scope(|s| {
        let handles: Vec<_> = groups
            .iter()
            .map(|(primary, standbys)| {
                s.spawn(move || -> Result<()> {
                    for (i, sb) in standbys.iter().enumerate() {
                        if !sb.exists() {
                            println!(
                                "creating {} (pg_basebackup of the {}) ...",
                                sb.name, primary.name
                            );
                            sb.create_standby(
                                primary,
                                &standby::standby_name(i + 1),
                                password,
                                settings(primary),
                            )?;
                        }
                        let addr = format!("{}:{}", sb.listen_host, sb.port);
                        match sb.running_pid() {
                            Some(pid) => {
                                println!("{} already running on {addr} (pid {pid})", sb.name)
                            }
                            None => println!("started {} on {addr} (pid {})", sb.name, sb.start()?),
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("standby thread"))
            .collect::<Result<()>>()
    })?;
    let runtime = tokio::runtime::Handle::current();
    for (primary, standbys) in &groups {
        let names: Vec<String> = (1..=standbys.len()).map(standby::standby_name).collect();
        let Some(sync) = cluster.synchronous_commit(!standbys.is_empty()) else {
            continue;
        };
        primary.write_replication(&Replication {
            synchronous_standbys: names.clone(),
            synchronous_commit: Some(sync),
        })?;
        runtime
            .block_on(standby::wait_streaming(
                primary,
                password,
                &names,
                STREAMING_TIMEOUT,
            ))
            .context("waiting for the standbys")?;
    }
    Ok(())
}

/// `cluster status` lines of a node's standbys, with what the primary's
/// `pg_stat_replication` says of each (state, sync_state, replay lag).
pub(super) fn status_lines(cluster: &Cluster, primary: &Node, standbys: &[Node]) -> String {
    if standbys.is_empty() {
        return String::new();
    }
    let rows = match primary.running_pid() {
        Some(_) => tokio::runtime::Handle::current()
            .block_on(standby::replication_rows(primary, &cluster.layout.password))
            .map_err(|e| format!("{e:#}")),
        None => Err("primary down".to_string()),
    };
    let mut out = String::new();
    for (i, sb) in standbys.iter().enumerate() {
        let name = standby::standby_name(i + 1);
        let pid = sb.running_pid();
        let line = status_line(
            &format!("  standby {name}"),
            &format!("{}:{}", sb.listen_host, sb.port),
            pid,
            pid.is_some(),
            &sb.data_dir,
        );
        let replication = match &rows {
            Err(e) => format!("replication unknown: {e}"),
            Ok(rows) => match rows.iter().find(|r| r.application_name == name) {
                None => "not connected to its primary".to_string(),
                Some(r) => format!(
                    "{} {}, replay lag {} bytes{}",
                    r.state,
                    r.sync_state,
                    r.replay_lag_bytes.map_or("?".into(), |b| b.to_string()),
                    r.replay_lag
                        .as_deref()
                        .map_or(String::new(), |t| format!(" / {t}"))
                ),
            },
        };
        out.push_str(&format!("{}  [{replication}]\n", line.trim_end()));
    }
    out
}

/// Registers every standby `pg_dist_node` does not list, through pgshard, as a
/// secondary of its primary's group (0 for the coordinator node's).
pub(super) async fn register_standbys(
    cluster: &Cluster,
    client: &tokio_postgres::Client,
) -> Result<()> {
    let groups = cluster.groups();
    if groups.iter().all(|(_, s)| s.is_empty()) {
        return Ok(());
    }
    let node_host = cluster.node_host();
    let mut listed: Vec<(i32, String, u16)> = Vec::new();
    for msg in client
        .simple_query("SELECT groupid, nodename, nodeport FROM pg_dist_node")
        .await
        .context("listing pg_dist_node")?
    {
        if let tokio_postgres::SimpleQueryMessage::Row(row) = msg {
            listed.push((
                row.get(0).unwrap_or_default().parse().unwrap_or(-1),
                row.get(1).unwrap_or_default().to_string(),
                row.get(2).unwrap_or_default().parse().unwrap_or(0),
            ));
        }
    }
    for (i, (primary, standbys)) in groups.iter().enumerate() {
        let group = if i == 0 {
            0
        } else {
            match listed.iter().find(|(_, h, p)| {
                *p == primary.port && (*h == node_host || *h == cluster.connect_host())
            }) {
                Some((g, _, _)) => *g,
                None => anyhow::bail!("the {} is not in pg_dist_node", primary.name),
            }
        };
        for sb in standbys {
            if listed
                .iter()
                .any(|(_, h, p)| *h == node_host && *p == sb.port)
            {
                continue;
            }
            let sql = format!(
                "SELECT citus_add_node({}, {}, groupid => {group}, noderole => 'secondary')",
                crate::sql::quote::quote_literal(&node_host),
                sb.port
            );
            client
                .simple_query(&sql)
                .await
                .with_context(|| format!("{sql} failed"))?;
            println!(
                "registered {} ({node_host}:{}) as a secondary",
                sb.name, sb.port
            );
        }
    }
    Ok(())
}

/// Puts every node's standbys of the cluster in `dir` in `mode` (`standby::apply_mode`;
/// `pgshard bench w5` between its configurations). Not recorded in the layout: the
/// next `up` writes the settings it chose again.
pub async fn set_replication_mode(dir: &Path, mode: ReplicationMode) -> Result<()> {
    let cluster = Cluster::load(dir)?;
    tokio::task::spawn_blocking(move || {
        for (primary, standbys) in cluster.groups() {
            standby::apply_mode(&primary, &standbys, &cluster.layout.password, mode)?;
        }
        Ok(())
    })
    .await?
}
