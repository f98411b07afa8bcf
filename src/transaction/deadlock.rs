//! Distributed deadlock detection: a cycle of lock waits spanning nodes, which no
//! single PostgreSQL can see. Every second (while some session holds connections to
//! two nodes or more) each node is asked which backends wait on a lock and for whom
//! (`pg_blocking_pids`); backends map back to pgshard sessions, and a cycle among
//! sessions whose edges lie on more than one node is broken: the youngest
//! transaction's waiting backend is cancelled, and the session reports 40P01 naming
//! the cycle instead of the cancellation (see [`take_victim`]).
//!
//! A cycle is acted on only once confirmed: seen again a moment later with every wait
//! still there, between the same transactions (each backend's `xact_start` unchanged)
//! of the same sessions. The first look reads the nodes one after another while
//! sessions keep committing and reusing pooled connections, so its waits may belong
//! to different transactions of a session (under TPC-B with 16 clients such phantom
//! cycles cancelled valid transactions); a real distributed deadlock stays put.
//!
//! Scope: the sessions of this pgshard process. Cycles through sessions of several
//! pgshard processes serving one cluster are not detected.

use crate::backend::{control, NodeAddr};
use crate::config::Config;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio_postgres::Client;

/// The deadlock error PostgreSQL uses.
pub const DEADLOCK_DETECTED: &str = "40P01";

/// Backends cancelled to break a cycle -> the message their session reports.
fn victims() -> &'static Mutex<HashMap<(NodeAddr, i32), String>> {
    static V: OnceLock<Mutex<HashMap<(NodeAddr, i32), String>>> = OnceLock::new();
    V.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Called on a backend's 57014 (query cancelled): the deadlock message when the
/// detector cancelled it.
pub fn take_victim(addr: &NodeAddr, pid: i32) -> Option<String> {
    victims().lock().unwrap().remove(&(addr.clone(), pid))
}

/// The backends each session holds now, as (session, node, backend pid); a session's
/// number must stay the same from one call to the next.
pub type SessionBackends = Vec<(usize, NodeAddr, i32)>;

/// A lock wait seen on one node: `waiter` waits for `blocker` (session indices).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub waiter: usize,
    pub blocker: usize,
    pub node: usize,
}

/// A cycle among sessions whose waits lie on more than one node (a cycle on one node
/// is PostgreSQL's own to break). Returns the waits of the cycle, in order.
pub fn find_cycle(waits: &[Wait]) -> Option<Vec<Wait>> {
    let mut out: HashMap<usize, Vec<&Wait>> = HashMap::new();
    for w in waits {
        if w.waiter != w.blocker {
            out.entry(w.waiter).or_default().push(w);
        }
    }
    let mut starts: Vec<usize> = out.keys().copied().collect();
    starts.sort_unstable();
    for &start in &starts {
        // Depth-first search for a path back to `start`.
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        let mut path: Vec<&Wait> = Vec::new();
        let mut seen = vec![start];
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            let edges = out.get(&node).map(|v| v.as_slice()).unwrap_or(&[]);
            if *next >= edges.len() {
                stack.pop();
                path.pop();
                continue;
            }
            let e = edges[*next];
            *next += 1;
            if e.blocker == start {
                let mut cycle: Vec<Wait> = path.iter().map(|w| (*w).clone()).collect();
                cycle.push(e.clone());
                if cycle.iter().any(|w| w.node != cycle[0].node) {
                    return Some(cycle);
                }
                continue;
            }
            if seen.contains(&e.blocker) {
                continue;
            }
            seen.push(e.blocker);
            path.push(e);
            stack.push((e.blocker, 0));
        }
    }
    None
}

/// Starts the detector. `sessions` lists what every session of this process holds.
pub fn start<F>(cfg: Arc<Config>, interval: Duration, sessions: F)
where
    F: Fn() -> SessionBackends + Send + Sync + 'static,
{
    tokio::spawn(async move {
        let mut clients: HashMap<NodeAddr, Client> = HashMap::new();
        loop {
            tokio::time::sleep(interval).await;
            let held = sessions();
            // A distributed cycle needs sessions on two nodes at least.
            let mut per_session: HashMap<usize, usize> = HashMap::new();
            for (s, _, _) in &held {
                *per_session.entry(*s).or_default() += 1;
            }
            if !per_session.values().any(|&n| n >= 2) {
                continue;
            }
            if let Err(e) = detect_once(&cfg, &mut clients, &held, &sessions).await {
                tracing::debug!("deadlock detection: {e}");
            }
        }
    });
}

/// The lock waits and transaction starts of the listed backends on one node.
const WAITS_SQL: &str = "SELECT pid, extract(epoch FROM xact_start)::float8, \
     CASE WHEN wait_event_type = 'Lock' THEN pg_catalog.pg_blocking_pids(pid) END \
     FROM pg_catalog.pg_stat_activity WHERE xact_start IS NOT NULL";

/// How long a cycle must last before it is broken (see the module comment).
const CONFIRM_AFTER: Duration = Duration::from_millis(100);

/// (node, backend pid) -> the session holding it.
fn owners(nodes: &[NodeAddr], held: &SessionBackends) -> HashMap<(usize, i32), usize> {
    held.iter()
        .filter_map(|(s, a, pid)| Some(((nodes.iter().position(|x| x == a)?, *pid), *s)))
        .collect()
}

/// Whether every wait of `cycle` (with its backend pids) still holds between the same
/// transactions of the same sessions as when it was first seen (`first_start`:
/// (node, pid) -> xact_start then).
async fn still_there(
    clients: &HashMap<NodeAddr, Client>,
    nodes: &[NodeAddr],
    cycle: &[(Wait, i32, i32)],
    first_start: &HashMap<(usize, i32), f64>,
    held_now: &SessionBackends,
) -> bool {
    let owner = owners(nodes, held_now);
    let mut by_node: HashMap<usize, Vec<&(Wait, i32, i32)>> = HashMap::new();
    for e in cycle {
        let (w, wp, bp) = e;
        if owner.get(&(w.node, *wp)) != Some(&w.waiter)
            || owner.get(&(w.node, *bp)) != Some(&w.blocker)
        {
            return false;
        }
        by_node.entry(w.node).or_default().push(e);
    }
    for (n, edges) in by_node {
        let Some(c) = clients.get(&nodes[n]) else {
            return false;
        };
        let Ok(rows) = c.query(WAITS_SQL, &[]).await else {
            return false;
        };
        let mut start: HashMap<i32, f64> = HashMap::new();
        let mut blockers: HashMap<i32, Vec<i32>> = HashMap::new();
        for r in rows {
            let pid: i32 = r.get(0);
            if let Some(s) = r.get::<_, Option<f64>>(1) {
                start.insert(pid, s);
            }
            if let Some(b) = r.get::<_, Option<Vec<i32>>>(2) {
                blockers.insert(pid, b);
            }
        }
        for (_, wp, bp) in edges {
            let same_txn = |pid: &i32| {
                start.get(pid).is_some() && start.get(pid) == first_start.get(&(n, *pid))
            };
            if !same_txn(wp) || !same_txn(bp) {
                return false;
            }
            if !blockers.get(wp).is_some_and(|b| b.contains(bp)) {
                return false;
            }
        }
    }
    true
}

async fn detect_once<F>(
    cfg: &Config,
    clients: &mut HashMap<NodeAddr, Client>,
    held: &SessionBackends,
    sessions: &F,
) -> Result<(), String>
where
    F: Fn() -> SessionBackends + Sync,
{
    let mut nodes: Vec<NodeAddr> = held.iter().map(|(_, a, _)| a.clone()).collect();
    nodes.sort();
    nodes.dedup();
    let owner = owners(&nodes, held);
    let mut waits = Vec::new();
    // (node, pid) -> xact_start, to confirm a cycle later.
    let mut first_start: HashMap<(usize, i32), f64> = HashMap::new();
    // Transaction start per session: the earliest of its backends'.
    let mut started: HashMap<usize, f64> = HashMap::new();
    for (n, addr) in nodes.iter().enumerate() {
        if clients.get(addr).map_or(true, |c| c.is_closed()) {
            match control::connect(cfg, &addr.host, addr.port).await {
                Ok(c) => {
                    clients.insert(addr.clone(), c);
                }
                Err(e) => {
                    clients.remove(addr);
                    tracing::debug!("deadlock detection skips {addr}: {e}");
                    continue;
                }
            }
        }
        let c = &clients[addr];
        let rows = c
            .query(WAITS_SQL, &[])
            .await
            .map_err(|e| format!("{addr}: {e}"))?;
        for r in rows {
            let pid: i32 = r.get(0);
            let Some(&s) = owner.get(&(n, pid)) else {
                continue;
            };
            if let Some(start) = r.get::<_, Option<f64>>(1) {
                first_start.insert((n, pid), start);
                let e = started.entry(s).or_insert(start);
                *e = e.min(start);
            }
            let blockers: Option<Vec<i32>> = r.get(2);
            for b in blockers.unwrap_or_default() {
                if let Some(&bs) = owner.get(&(n, b)) {
                    waits.push((
                        Wait {
                            waiter: s,
                            blocker: bs,
                            node: n,
                        },
                        pid,
                        b,
                    ));
                }
            }
        }
    }
    let plain: Vec<Wait> = waits.iter().map(|(w, _, _)| w.clone()).collect();
    let Some(cycle) = find_cycle(&plain) else {
        return Ok(());
    };
    let cycle_pids: Vec<(Wait, i32, i32)> = cycle
        .iter()
        .map(|w| {
            waits
                .iter()
                .find(|(x, _, _)| x == w)
                .expect("from waits")
                .clone()
        })
        .collect();
    tokio::time::sleep(CONFIRM_AFTER).await;
    if !still_there(clients, &nodes, &cycle_pids, &first_start, &sessions()).await {
        tracing::debug!("a lock-wait cycle across nodes did not last: not a deadlock");
        return Ok(());
    }
    // The youngest transaction of the cycle gives way.
    let victim = cycle
        .iter()
        .map(|w| w.waiter)
        .max_by(|a, b| {
            let (sa, sb) = (started.get(a), started.get(b));
            sa.partial_cmp(&sb).unwrap_or(std::cmp::Ordering::Equal)
        })
        .expect("a cycle has members");
    let describe: Vec<String> = cycle
        .iter()
        .map(|w| {
            let (_, wp, bp) = waits.iter().find(|(x, _, _)| x == w).expect("from waits");
            format!(
                "process {wp} waits for process {bp} on node {}",
                nodes[w.node]
            )
        })
        .collect();
    let text = format!(
        "canceling the transaction since it was involved in a distributed deadlock: {}",
        describe.join("; ")
    );
    tracing::info!("{text}");
    for (w, wp, _) in waits.iter().filter(|(w, _, _)| w.waiter == victim) {
        if !cycle.contains(w) {
            continue;
        }
        let addr = nodes[w.node].clone();
        victims()
            .lock()
            .unwrap()
            .insert((addr.clone(), *wp), text.clone());
        if let Some(c) = clients.get(&addr) {
            let _ = c
                .execute("SELECT pg_catalog.pg_cancel_backend($1)", &[wp])
                .await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(waiter: usize, blocker: usize, node: usize) -> Wait {
        Wait {
            waiter,
            blocker,
            node,
        }
    }

    #[test]
    fn finds_cycles_across_nodes_only() {
        assert_eq!(find_cycle(&[]), None);
        assert_eq!(find_cycle(&[w(1, 2, 0)]), None);
        // On one node: PostgreSQL's business.
        assert_eq!(find_cycle(&[w(1, 2, 0), w(2, 1, 0)]), None);
        let c = find_cycle(&[w(1, 2, 0), w(2, 1, 1)]).unwrap();
        assert_eq!(c, vec![w(1, 2, 0), w(2, 1, 1)]);
        // Three sessions, a dead end on the way.
        let c = find_cycle(&[w(1, 4, 0), w(1, 2, 0), w(2, 3, 1), w(3, 1, 1)]).unwrap();
        assert_eq!(c, vec![w(1, 2, 0), w(2, 3, 1), w(3, 1, 1)]);
        // Waiting chains without a cycle.
        assert_eq!(find_cycle(&[w(1, 2, 0), w(2, 3, 1), w(3, 4, 0)]), None);
    }
}
