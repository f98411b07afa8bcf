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
//! Several pgshard processes on one catalog: each holds a liveness lock on the
//! coordinator node (`transaction::recovery`); a detector that sees another one there
//! makes this process tag each block's node transactions ([`TAG_SQL`] with BEGIN: a
//! shared transaction-level advisory lock keyed by the process's instance and the
//! block's serial, visible to all in `pg_locks`) and reads every node, not only those
//! its sessions hold. Backends with one tag form one member of the wait-for graph,
//! whichever process they belong to, so every process builds the same global graph and
//! picks the same victim; only the victim's own process cancels it (and its session
//! then reports 40P01). No state is shared beyond the nodes; detection is idempotent.
//! With one process nothing is tagged and only the nodes its sessions hold are read.

use super::LIVENESS_LOCK_NS;
use crate::backend::{control, NodeAddr};
use crate::config::Config;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Whether other live pgshard processes serve this cluster (as the detector last saw
/// on the coordinator node): node transactions are tagged then (see the module comment).
static SEVERAL_PROCESSES: AtomicBool = AtomicBool::new(false);

/// Whether blocks should tag their node transactions ([`TAG_SQL`]).
pub fn tags_transactions() -> bool {
    SEVERAL_PROCESSES.load(Ordering::Relaxed)
}

/// Tags a node transaction as one of this process's distributed transactions, for the
/// deadlock detectors of every pgshard process: a shared advisory lock held to its end,
/// keyed (instance, transaction serial). Parameters: [`tag_params`].
pub const TAG_SQL: &str = "SELECT pg_catalog.pg_advisory_xact_lock_shared($1::int4, $2::int4)";

/// The two keys of transaction `serial`'s tag, as text parameters of [`TAG_SQL`].
pub fn tag_params(serial: u64) -> [String; 2] {
    [own_key().to_string(), (serial as u32 as i32).to_string()]
}

/// [`TAG_SQL`] with its keys, for a simple-query string (numbers only: no client text).
pub fn tag_statement(serial: u64) -> String {
    let [instance, serial] = tag_params(serial);
    format!("SELECT pg_catalog.pg_advisory_xact_lock_shared({instance}, {serial})")
}

/// This process's key: the second key of its liveness lock.
fn own_key() -> i32 {
    super::lock_key(super::instance_id()).expect("instance ids are 8 hex digits")
}

/// Starts the detector. `sessions` lists what every session of this process holds;
/// `all_nodes` the cluster's nodes (read while other pgshard processes live).
pub fn start<F, N>(cfg: Arc<Config>, interval: Duration, sessions: F, all_nodes: N)
where
    F: Fn() -> SessionBackends + Send + Sync + 'static,
    N: Fn() -> Vec<NodeAddr> + Send + Sync + 'static,
{
    tokio::spawn(async move {
        let coordinator = NodeAddr {
            host: cfg.coordinator.host.clone(),
            port: cfg.coordinator.port,
        };
        let mut clients: HashMap<NodeAddr, Client> = HashMap::new();
        loop {
            tokio::time::sleep(interval).await;
            let live = match live_instances(&cfg, &mut clients, &coordinator).await {
                Ok(live) => live,
                Err(e) => {
                    tracing::debug!("deadlock detection: live pgshard processes: {e}");
                    HashSet::new()
                }
            };
            let several = live.iter().any(|&k| k != own_key() as u32);
            SEVERAL_PROCESSES.store(several, Ordering::Relaxed);
            let held = sessions();
            let mut nodes: Vec<NodeAddr> = held.iter().map(|(_, a, _)| a.clone()).collect();
            if several {
                // A cycle through this process's sessions may pass through nodes they
                // do not use: every node is read.
                if held.is_empty() {
                    continue;
                }
                nodes.extend(all_nodes());
                nodes.push(coordinator.clone());
            } else {
                // A distributed cycle needs sessions on two nodes at least.
                let mut per_session: HashMap<usize, usize> = HashMap::new();
                for (s, _, _) in &held {
                    *per_session.entry(*s).or_default() += 1;
                }
                if !per_session.values().any(|&n| n >= 2) {
                    continue;
                }
            }
            nodes.sort();
            nodes.dedup();
            if let Err(e) = detect_once(&cfg, &mut clients, &nodes, &held, &live, &sessions).await {
                tracing::debug!("deadlock detection: {e}");
            }
        }
    });
}

/// The liveness locks' second keys on the coordinator node: the live pgshard processes.
async fn live_instances(
    cfg: &Config,
    clients: &mut HashMap<NodeAddr, Client>,
    coordinator: &NodeAddr,
) -> Result<HashSet<u32>, String> {
    let c = client(cfg, clients, coordinator).await?;
    let rows = c
        .query(
            "SELECT objid::int8 FROM pg_catalog.pg_locks WHERE locktype = 'advisory' \
             AND classid::int8 = $1 AND objsubid = 2 AND granted",
            &[&(LIVENESS_LOCK_NS as u32 as i64)],
        )
        .await
        .map_err(|e| format!("{coordinator}: {e}"))?;
    Ok(rows.iter().map(|r| r.get::<_, i64>(0) as u32).collect())
}

/// The control connection to `addr`, (re)opened when needed.
pub(crate) async fn client<'a>(
    cfg: &Config,
    clients: &'a mut HashMap<NodeAddr, Client>,
    addr: &NodeAddr,
) -> Result<&'a Client, String> {
    if clients.get(addr).map_or(true, |c| c.is_closed()) {
        match control::connect(cfg, &addr.host, addr.port).await {
            Ok(c) => {
                clients.insert(addr.clone(), c);
            }
            Err(e) => {
                clients.remove(addr);
                return Err(format!("{addr}: {e}"));
            }
        }
    }
    Ok(&clients[addr])
}

/// The lock waits between this process's sessions now, as the detector's wait-for
/// graph has them (one reading of `nodes`, no confirmation): (waiting session,
/// blocking session), sessions as `held` numbers them. For `citus_lock_waits`.
pub async fn session_waits(
    cfg: &Config,
    clients: &mut HashMap<NodeAddr, Client>,
    nodes: &[NodeAddr],
    held: &SessionBackends,
) -> Vec<(usize, usize)> {
    let read = read_nodes(cfg, clients, nodes).await;
    let graph = Graph::build(nodes, &read, held, &HashSet::new());
    // A member's session, through any backend of it that a session holds.
    let owner = owners(nodes, held);
    let mut session_of: HashMap<usize, usize> = HashMap::new();
    for (key, (member, _)) in &graph.backends {
        if let Some(&s) = owner.get(key) {
            session_of.insert(*member, s);
        }
    }
    let mut out: Vec<(usize, usize)> = graph
        .waits
        .iter()
        .filter_map(|(w, _, _)| Some((*session_of.get(&w.waiter)?, *session_of.get(&w.blocker)?)))
        .filter(|(w, b)| w != b)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Each backend in a transaction on one node: its start, the backends it waits for
/// (when waiting on a lock) and its transaction-level shared advisory locks of two
/// keys (the candidate tags, `(classid << 32) | objid`).
const WAITS_SQL: &str = "WITH tags AS (SELECT pid, \
     pg_catalog.array_agg((classid::int8 << 32) | objid::int8) AS tags \
     FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND objsubid = 2 \
     AND mode = 'ShareLock' AND granted GROUP BY pid) \
     SELECT a.pid, extract(epoch FROM a.xact_start)::float8, \
     CASE WHEN a.wait_event_type = 'Lock' THEN pg_catalog.pg_blocking_pids(a.pid) END, t.tags \
     FROM pg_catalog.pg_stat_activity a LEFT JOIN tags t ON t.pid = a.pid \
     WHERE a.xact_start IS NOT NULL";

/// How long a cycle must last before it is broken (see the module comment).
const CONFIRM_AFTER: Duration = Duration::from_millis(100);

/// One backend in a transaction, as [`WAITS_SQL`] reads it.
struct BackendRow {
    pid: i32,
    start: f64,
    blockers: Vec<i32>,
    tags: Vec<i64>,
}

/// The backends in a transaction on each of `nodes` (empty for a node that cannot be
/// read), one node after another.
async fn read_nodes(
    cfg: &Config,
    clients: &mut HashMap<NodeAddr, Client>,
    nodes: &[NodeAddr],
) -> Vec<Vec<BackendRow>> {
    let mut out = Vec::new();
    for addr in nodes {
        let rows = match client(cfg, clients, addr).await {
            Ok(c) => c
                .query(WAITS_SQL, &[])
                .await
                .map_err(|e| format!("{addr}: {e}")),
            Err(e) => Err(e),
        };
        let rows = rows.unwrap_or_else(|e| {
            tracing::debug!("deadlock detection skips {e}");
            Vec::new()
        });
        out.push(
            rows.iter()
                .filter_map(|r| {
                    Some(BackendRow {
                        pid: r.get(0),
                        start: r.get::<_, Option<f64>>(1)?,
                        blockers: r.get::<_, Option<Vec<i32>>>(2).unwrap_or_default(),
                        tags: r.get::<_, Option<Vec<i64>>>(3).unwrap_or_default(),
                    })
                })
                .collect(),
        );
    }
    out
}

/// A distributed transaction as the detector tells them apart.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Member {
    /// Tagged by a live pgshard process: `(instance key << 32) | serial`. The same in
    /// every process's view, so that all of them find the same cycle and victim.
    Tagged(u64),
    /// An untagged transaction of one of this process's sessions.
    Own(usize),
    /// Any other backend: a transaction of one node.
    Backend(NodeAddr, i32),
}

impl Member {
    /// Whether this process is the one to cancel it.
    fn is_own(&self) -> bool {
        match self {
            Member::Tagged(t) => (t >> 32) as u32 == own_key() as u32,
            Member::Own(_) => true,
            Member::Backend(..) => false,
        }
    }
}

/// The wait-for graph of one reading of the nodes.
struct Graph {
    /// Sorted: a member's index is its place (the same order in every process).
    members: Vec<Member>,
    /// (node, pid) -> (member index, xact_start).
    backends: HashMap<(usize, i32), (usize, f64)>,
    /// Each wait with its waiting and blocking pids.
    waits: Vec<(Wait, i32, i32)>,
    /// Each member's transaction start: the earliest of its backends'.
    started: Vec<f64>,
}

impl Graph {
    fn build(
        nodes: &[NodeAddr],
        read: &[Vec<BackendRow>],
        held: &SessionBackends,
        live: &HashSet<u32>,
    ) -> Graph {
        let owner = owners(nodes, held);
        let live_tag = |r: &BackendRow| {
            r.tags.iter().map(|&t| t as u64).find(|t| {
                live.contains(&((t >> 32) as u32)) || (t >> 32) as u32 == own_key() as u32
            })
        };
        // A session of this process is one member even where some backend of it
        // carries no tag.
        let mut own_tag: HashMap<usize, u64> = HashMap::new();
        for (n, rows) in read.iter().enumerate() {
            for r in rows {
                if let (Some(&s), Some(t)) = (owner.get(&(n, r.pid)), live_tag(r)) {
                    own_tag.entry(s).or_insert(t);
                }
            }
        }
        let mut member_of: HashMap<(usize, i32), (Member, f64)> = HashMap::new();
        for (n, rows) in read.iter().enumerate() {
            for r in rows {
                let m = if let Some(&s) = owner.get(&(n, r.pid)) {
                    own_tag
                        .get(&s)
                        .map_or(Member::Own(s), |&t| Member::Tagged(t))
                } else if let Some(t) = live_tag(r) {
                    Member::Tagged(t)
                } else {
                    Member::Backend(nodes[n].clone(), r.pid)
                };
                member_of.insert((n, r.pid), (m, r.start));
            }
        }
        let mut members: Vec<Member> = member_of.values().map(|(m, _)| m.clone()).collect();
        members.sort();
        members.dedup();
        let index = |m: &Member| members.binary_search(m).expect("listed");
        let mut started = vec![f64::INFINITY; members.len()];
        let mut backends = HashMap::new();
        for (key, (m, start)) in &member_of {
            let i = index(m);
            started[i] = started[i].min(*start);
            backends.insert(*key, (i, *start));
        }
        let mut waits = Vec::new();
        for (n, rows) in read.iter().enumerate() {
            for r in rows {
                for &b in &r.blockers {
                    if let (Some(&(w, _)), Some(&(bl, _))) =
                        (backends.get(&(n, r.pid)), backends.get(&(n, b)))
                    {
                        let wait = Wait {
                            waiter: w,
                            blocker: bl,
                            node: n,
                        };
                        waits.push((wait, r.pid, b));
                    }
                }
            }
        }
        Graph {
            members,
            backends,
            waits,
            started,
        }
    }
}

/// (node, backend pid) -> the session holding it.
fn owners(nodes: &[NodeAddr], held: &SessionBackends) -> HashMap<(usize, i32), usize> {
    held.iter()
        .filter_map(|(s, a, pid)| Some(((nodes.iter().position(|x| x == a)?, *pid), *s)))
        .collect()
}

/// Whether every wait of `cycle` (with its backend pids, from `first`) still holds in
/// `now` between the same transactions of the same members.
fn still_there(first: &Graph, now: &Graph, cycle: &[(Wait, i32, i32)]) -> bool {
    let same =
        |n: usize, pid: i32| match (first.backends.get(&(n, pid)), now.backends.get(&(n, pid))) {
            (Some(&(m1, s1)), Some(&(m2, s2))) => s1 == s2 && first.members[m1] == now.members[m2],
            _ => false,
        };
    cycle.iter().all(|(w, wp, bp)| {
        same(w.node, *wp)
            && same(w.node, *bp)
            && now
                .waits
                .iter()
                .any(|(x, xwp, xbp)| x.node == w.node && xwp == wp && xbp == bp)
    })
}

async fn detect_once<F>(
    cfg: &Config,
    clients: &mut HashMap<NodeAddr, Client>,
    nodes: &[NodeAddr],
    held: &SessionBackends,
    live: &HashSet<u32>,
    sessions: &F,
) -> Result<(), String>
where
    F: Fn() -> SessionBackends + Sync,
{
    let first = Graph::build(nodes, &read_nodes(cfg, clients, nodes).await, held, live);
    let plain: Vec<Wait> = first.waits.iter().map(|(w, _, _)| w.clone()).collect();
    let Some(cycle) = find_cycle(&plain) else {
        return Ok(());
    };
    let cycle: Vec<(Wait, i32, i32)> = cycle
        .iter()
        .map(|w| {
            first
                .waits
                .iter()
                .find(|(x, _, _)| x == w)
                .expect("from waits")
                .clone()
        })
        .collect();
    tokio::time::sleep(CONFIRM_AFTER).await;
    let now = Graph::build(
        nodes,
        &read_nodes(cfg, clients, nodes).await,
        &sessions(),
        live,
    );
    if !still_there(&first, &now, &cycle) {
        tracing::debug!("a lock-wait cycle across nodes did not last: not a deadlock");
        return Ok(());
    }
    // The youngest transaction of the cycle gives way (ties: the greater member, the
    // same in every process).
    let victim = cycle
        .iter()
        .map(|(w, _, _)| w.waiter)
        .max_by(|&a, &b| {
            first.started[a]
                .partial_cmp(&first.started[b])
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| first.members[a].cmp(&first.members[b]))
        })
        .expect("a cycle has members");
    let describe: Vec<String> = cycle
        .iter()
        .map(|(w, wp, bp)| {
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
    if !first.members[victim].is_own() {
        // Its own pgshard process breaks the cycle (it sees the same one).
        tracing::debug!("left to the victim's pgshard process: {text}");
        return Ok(());
    }
    let owner = owners(nodes, held);
    tracing::info!("{text}");
    for (w, wp, _) in cycle.iter().filter(|(w, _, _)| w.waiter == victim) {
        if !owner.contains_key(&(w.node, *wp)) {
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
