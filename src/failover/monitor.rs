//! The health checker of one pgshard process: reads the worker groups from
//! `pg_dist_node` (again whenever the catalog version moves, and every few seconds),
//! checks every primary that has a secondary on a connection of its own (connect +
//! `SELECT 1`, within twice `health_check_interval_ms`) every
//! `health_check_interval_ms`, or at once when a statement found one unreachable, and
//! starts the failover of a primary unreachable for `failover_after_ms`
//! (`promote::fail_over`; every process may start one, the catalog lock lets one act).
//! Primaries without a secondary are not checked: nothing changes for them. The
//! coordinator node is checked the same way while a standby of it is listed in the
//! config (as "group 0"), and failed over by `coordinator::fail_over`.

use super::{coordinator, promote, set_coordinator, set_health, set_topology, CHECK_NOW};
use crate::backend::{control, NodeAddr};
use crate::catalog::cache::CatalogCache;
use crate::config::Config;
use crate::error::PgError;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_postgres::{Client, GenericClient};

/// A row of `pg_dist_node` outside group 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub node_id: i32,
    pub addr: NodeAddr,
    pub primary: bool,
    pub active: bool,
}

/// A worker group: its primary and secondaries, active or retired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub id: i32,
    pub members: Vec<Member>,
}

impl Group {
    pub fn primary(&self) -> Option<&Member> {
        self.members.iter().find(|m| m.primary && m.active)
    }

    pub fn secondaries(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| !m.primary && m.active)
    }
}

const TOPOLOGY_SQL: &str = "SELECT nodeid, groupid, nodename, nodeport, noderole = 'primary', \
     isactive FROM pg_catalog.pg_dist_node WHERE groupid <> 0 ORDER BY groupid, nodeid";

/// Shortest time between two rounds of checks woken by statements.
const MIN_ROUND_GAP: Duration = Duration::from_millis(50);
/// How often the groups are read again even when the catalog version did not move.
const TOPOLOGY_REFRESH: Duration = Duration::from_secs(5);

/// The worker groups as rows of `TOPOLOGY_SQL` say (pure).
pub fn groups_of(rows: Vec<(i32, i32, String, u16, bool, bool)>) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (node_id, group, host, port, primary, active) in rows {
        let member = Member {
            node_id,
            addr: NodeAddr { host, port },
            primary,
            active,
        };
        match groups.iter_mut().find(|g| g.id == group) {
            Some(g) => g.members.push(member),
            None => groups.push(Group {
                id: group,
                members: vec![member],
            }),
        }
    }
    groups
}

/// Primaries that can fail over, and where the retired nodes' statements go (pure).
pub fn routes_of(groups: &[Group]) -> (HashSet<NodeAddr>, HashMap<NodeAddr, NodeAddr>) {
    let mut candidates = HashSet::new();
    let mut redirects = HashMap::new();
    for g in groups {
        let Some(primary) = g.primary() else { continue };
        if g.secondaries().next().is_some() {
            candidates.insert(primary.addr.clone());
        }
        for m in g
            .members
            .iter()
            .filter(|m| !m.active && m.addr != primary.addr)
        {
            redirects.insert(m.addr.clone(), primary.addr.clone());
        }
    }
    (candidates, redirects)
}

pub(super) async fn read_groups<C: GenericClient + Sync>(
    client: &C,
) -> Result<Vec<Group>, PgError> {
    let rows = client
        .query(TOPOLOGY_SQL, &[])
        .await
        .map_err(|e| PgError::from_client_error("cannot read pg_dist_node", &e))?;
    Ok(groups_of(
        rows.iter()
            .map(|r| {
                (
                    r.get(0),
                    r.get(1),
                    r.get(2),
                    u16::try_from(r.get::<_, i32>(3)).unwrap_or(0),
                    r.get(4),
                    r.get(5),
                )
            })
            .collect(),
    ))
}

/// Whether the node at `addr` answers `SELECT 1` within `limit`, on `client` when it is
/// still open, else on a new connection (returned for the next check).
pub(super) async fn check(
    cfg: &Config,
    client: Option<Client>,
    addr: &NodeAddr,
    limit: Duration,
) -> Option<Client> {
    let attempt = async {
        let c = match client {
            Some(c) if !c.is_closed() => c,
            _ => control::connect(cfg, &addr.host, addr.port).await.ok()?,
        };
        c.simple_query("SELECT 1").await.ok()?;
        Some(c)
    };
    tokio::time::timeout(limit, attempt).await.ok().flatten()
}

/// Starts the health checker of this process (nothing when `failover` is off).
pub fn start(cache: Arc<CatalogCache>) {
    if !cache.config().failover {
        return;
    }
    tokio::spawn(run(cache));
}

async fn run(cache: Arc<CatalogCache>) {
    let cfg = cache.config().clone();
    let interval = Duration::from_millis(cfg.health_check_interval_ms.max(10));
    let limit = interval * 2;
    let after = Duration::from_millis(cfg.failover_after_ms);
    let hold = Duration::from_millis(cfg.failover_hold_ms);
    let mut coordinator: Option<Client> = None;
    let mut groups: Vec<Group> = Vec::new();
    let mut read_at: Option<(Instant, i64)> = None;
    let mut checks: HashMap<NodeAddr, Client> = HashMap::new();
    // Groups whose failover this process is running, and when it last tried each.
    let running: Arc<Mutex<HashSet<i32>>> = Arc::default();
    let mut attempted: HashMap<i32, Instant> = HashMap::new();
    // The coordinator node: statements for it are held while it fails over.
    set_topology(HashSet::new(), HashMap::new(), hold);
    let coordinator_name = coordinator::configured();
    loop {
        let coordinator_target = coordinator_name
            .clone()
            .filter(|_| coordinator::can_fail_over());
        set_coordinator(coordinator_target.clone());
        let round = Instant::now();
        let version = cache.snapshot().version;
        let stale = read_at.map_or(true, |(at, v)| {
            v != version || at.elapsed() > TOPOLOGY_REFRESH
        });
        if stale {
            if coordinator.as_ref().map_or(true, |c| c.is_closed()) {
                coordinator = control::connect_coordinator(&cfg).await.ok();
            }
            if let Some(c) = &coordinator {
                match read_groups(c).await {
                    Ok(g) => {
                        groups = g;
                        let read_at_before = read_at.is_some();
                        read_at = Some((Instant::now(), version));
                        let (candidates, redirects) = routes_of(&groups);
                        if set_topology(candidates, redirects, hold) && read_at_before {
                            // A failover (by any process): this process's transactions
                            // prepared on the old primary are on the new one now.
                            crate::transaction::recovery::recover_soon(cache.clone());
                        }
                    }
                    Err(e) => {
                        tracing::debug!("failover monitor: {e}");
                        coordinator = None;
                    }
                }
            }
        }
        // Group 0 (never a worker group) stands for the coordinator node.
        let targets: Vec<(i32, NodeAddr)> = groups
            .iter()
            .filter(|g| g.secondaries().next().is_some())
            .filter_map(|g| g.primary().map(|p| (g.id, p.addr.clone())))
            .chain(coordinator_target.map(|a| (0, a)))
            .collect();
        checks.retain(|a, _| targets.iter().any(|(_, t)| t == a));
        let results = futures_util::future::join_all(targets.iter().map(|(_, addr)| {
            let client = checks.remove(addr);
            let cfg = &cfg;
            async move { (addr.clone(), check(cfg, client, addr, limit).await) }
        }))
        .await;
        for ((group, _), (addr, client)) in targets.iter().zip(results) {
            let up = client.is_some();
            if let Some(c) = client {
                checks.insert(addr.clone(), c);
            }
            let Some(since) = set_health(&addr, up) else {
                continue;
            };
            let tried_lately = attempted.get(group).is_some_and(|t| t.elapsed() < interval);
            if since.elapsed() < after || tried_lately || !running.lock().unwrap().insert(*group) {
                continue;
            }
            attempted.insert(*group, Instant::now());
            tracing::warn!(
                "failover: primary {} of group {group} unreachable for {} ms",
                if *group == 0 {
                    format!("{} (the coordinator node)", coordinator::physical(&addr))
                } else {
                    addr.to_string()
                },
                since.elapsed().as_millis()
            );
            let (cache, running, group) = (cache.clone(), running.clone(), *group);
            tokio::spawn(async move {
                let outcome = if group == 0 {
                    coordinator::fail_over(&cache).await
                } else {
                    promote::fail_over(&cache, group, &addr).await
                };
                match outcome {
                    Ok(outcome) => tracing::info!("failover of group {group}: {outcome}"),
                    Err(e) => tracing::warn!("failover of group {group} ({addr}) failed: {e}"),
                }
                running.lock().unwrap().remove(&group);
                CHECK_NOW.notify_one();
            });
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = CHECK_NOW.notified() => {
                // Many statements may ask at once: one round per MIN_ROUND_GAP at most.
                tokio::time::sleep(MIN_ROUND_GAP.saturating_sub(round.elapsed())).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> NodeAddr {
        NodeAddr {
            host: "/s".into(),
            port,
        }
    }

    #[test]
    fn primaries_with_a_secondary_can_fail_over_and_retired_ones_redirect() {
        let groups = groups_of(vec![
            (1, 1, "/s".into(), 10, true, true),
            (2, 2, "/s".into(), 20, true, true),
            (3, 1, "/s".into(), 11, false, true),
            (4, 3, "/s".into(), 30, false, false),
            (5, 3, "/s".into(), 31, true, true),
        ]);
        assert_eq!(groups.len(), 3);
        let (candidates, redirects) = routes_of(&groups);
        assert_eq!(candidates, HashSet::from([addr(10)]));
        assert_eq!(redirects, HashMap::from([(addr(30), addr(31))]));
    }
}
