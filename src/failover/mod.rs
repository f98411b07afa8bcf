//! Automatic failover of worker primaries and of the coordinator node (issue 21):
//! every pgshard process checks the health of every primary in `pg_dist_node` and of
//! the coordinator node (`monitor.rs`), and when a worker primary stays unreachable for
//! `failover_after_ms` while its group has a secondary, one process promotes the most
//! advanced standby and repoints the catalog (`promote.rs`); the coordinator node
//! fails over to a standby listed in the config (`coordinator.rs`).
//!
//! This file is the process-wide state the data path consults (`route`, `hold`): which
//! primaries can fail over (they have a secondary), which of them look down, and where
//! a retired primary's statements go now (its group's new primary). A statement for a
//! node that is down and can fail over waits (at most `failover_hold_ms`) until the
//! catalog names the group's new primary, then runs there; a statement planned on a
//! snapshot older than the failover is sent to the new primary too (the shards are the
//! same: the standby replayed them). A session's connections are looked up by the
//! address they lead to (`redirect`), so a transaction never holds two connections to
//! one server. While no node is down or retired, the data path pays one atomic load.

pub mod conninfo;
pub mod coordinator;
pub mod fence;
pub mod monitor;
pub mod promote;

use crate::backend::NodeAddr;
use crate::error::{sqlstate, PgError, PgResult};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// What the data path knows of failovers, refreshed by the monitor.
#[derive(Default)]
struct State {
    /// Primaries whose group has an active secondary (they can fail over).
    candidates: HashSet<NodeAddr>,
    /// The coordinator node's (configured) address while it can fail over.
    coordinator: Option<NodeAddr>,
    /// Primaries seen unreachable, since when (by a health check or a statement).
    down: HashMap<NodeAddr, Instant>,
    /// Retired primaries (inactive rows of a group) → the group's primary now.
    redirects: HashMap<NodeAddr, NodeAddr>,
    /// How long a statement waits for a failover.
    hold: Duration,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);
/// Set while a node is down or redirected: the data path's fast check.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Woken whenever the state changes (statements waiting in `hold`).
static CHANGED: Notify = Notify::const_new();
/// Wakes the monitor for a check now (a statement found a node unreachable).
static CHECK_NOW: Notify = Notify::const_new();

impl State {
    /// Whether `addr` is a primary that can fail over.
    fn fails_over(&self, addr: &NodeAddr) -> bool {
        self.candidates.contains(addr) || self.coordinator.as_ref() == Some(addr)
    }
}

fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> T {
    let mut guard = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let state = guard.get_or_insert_with(State::default);
    let out = f(state);
    ACTIVE.store(
        !state.redirects.is_empty() || !state.down.is_empty(),
        Ordering::Release,
    );
    out
}

/// Where a statement planned for `addr` goes, without waiting: `addr` itself, or the
/// new primary of a retired one. None: `addr` is down and failing over (`hold`).
pub fn route(addr: &NodeAddr) -> Option<NodeAddr> {
    if !ACTIVE.load(Ordering::Acquire) {
        return Some(addr.clone());
    }
    with_state(|s| {
        if let Some(to) = s.redirects.get(addr) {
            return Some(to.clone());
        }
        if s.fails_over(addr) && s.down.contains_key(addr) {
            return None;
        }
        Some(addr.clone())
    })
}

/// The new primary of a retired node, if `addr` is one (no waiting): a session's
/// connections are looked up by the address they lead to.
pub fn redirect(addr: &NodeAddr) -> Option<NodeAddr> {
    if !ACTIVE.load(Ordering::Acquire) {
        return None;
    }
    with_state(|s| s.redirects.get(addr).cloned())
}

/// Where a statement planned for `addr` runs: None for `addr` itself, else its group's
/// new primary, after waiting for the failover when `addr` is down (`hold`).
pub async fn target(addr: &NodeAddr) -> PgResult<Option<NodeAddr>> {
    if !ACTIVE.load(Ordering::Acquire) {
        return Ok(None);
    }
    match route(addr) {
        Some(to) if to == *addr => Ok(None),
        Some(to) => Ok(Some(to)),
        None => hold(addr).await.map(|to| (to != *addr).then_some(to)),
    }
}

/// Whether a failed connection to `addr` may be waited out: `addr` is a primary that
/// can fail over, and the error says the node is unreachable (not a refused login).
pub fn may_fail_over(addr: &NodeAddr, e: &PgError) -> bool {
    let unreachable = e.code == sqlstate::CONNECTION_FAILURE
        || e.code == sqlstate::CONNECTION_EXCEPTION
        || e.code == sqlstate::CANNOT_CONNECT_NOW;
    unreachable && with_state(|s| s.fails_over(addr) || s.redirects.contains_key(addr))
}

/// A statement could not reach `addr`: the monitor checks it now, and the statement
/// waits as `hold` does.
pub async fn unreachable(addr: &NodeAddr) -> PgResult<NodeAddr> {
    with_state(|s| {
        s.down.entry(addr.clone()).or_insert_with(Instant::now);
    });
    CHECK_NOW.notify_one();
    hold(addr).await
}

/// Waits until `addr` is up again or its group has a new primary (returned), at most
/// `failover_hold_ms`; then 08006 naming the node.
pub async fn hold(addr: &NodeAddr) -> PgResult<NodeAddr> {
    let started = Instant::now();
    let limit = with_state(|s| s.hold);
    loop {
        let changed = CHANGED.notified();
        if let Some(to) = route(addr) {
            if started.elapsed() > Duration::from_millis(100) {
                tracing::info!(
                    "statement for node {addr} held {} ms during its failover, now runs on {to}",
                    started.elapsed().as_millis()
                );
            }
            return Ok(to);
        }
        let left = limit.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(PgError::new(
                sqlstate::CONNECTION_FAILURE,
                format!(
                    "node {addr} is unreachable and its failover did not finish within {} ms",
                    limit.as_millis()
                ),
            )
            .with_hint("failover_hold_ms in pgshard's configuration sets this limit"));
        }
        // The monitor looks again now (another process may have promoted a standby:
        // its catalog change is read on the monitor's next round), and this statement
        // re-reads the state at least every 50 ms.
        CHECK_NOW.notify_one();
        let _ = tokio::time::timeout(left.min(Duration::from_millis(50)), changed).await;
    }
}

/// The monitor's view of the catalog: candidates and redirects replace the old ones.
/// True when a node was retired since the last call (a failover happened).
fn set_topology(
    candidates: HashSet<NodeAddr>,
    redirects: HashMap<NodeAddr, NodeAddr>,
    hold: Duration,
) -> bool {
    let (changed, retired) = with_state(|s| {
        let retired = redirects.keys().any(|a| !s.redirects.contains_key(a));
        let changed = s.candidates != candidates || s.redirects != redirects;
        s.candidates = candidates;
        s.redirects = redirects;
        s.hold = hold;
        // A node no longer a primary that can fail over is not waited on as "down".
        let State {
            down,
            candidates,
            coordinator,
            ..
        } = s;
        down.retain(|a, _| candidates.contains(a) || coordinator.as_ref() == Some(a));
        (changed, retired)
    });
    if changed {
        CHANGED.notify_waiters();
    }
    retired
}

/// The coordinator node's address while it can fail over (a listed standby is left),
/// else None: its statements are then not held when it is down.
fn set_coordinator(addr: Option<NodeAddr>) {
    let changed = with_state(|s| {
        if s.coordinator == addr {
            return false;
        }
        if let Some(old) = s.coordinator.take() {
            s.down.remove(&old);
        }
        s.coordinator = addr;
        true
    });
    if changed {
        CHANGED.notify_waiters();
    }
}

/// Asks the monitor to read the catalog and check the primaries now.
fn monitor_changed() {
    CHECK_NOW.notify_one();
}

/// The monitor's health verdict on a primary.
fn set_health(addr: &NodeAddr, up: bool) -> Option<Instant> {
    let (since, changed) = with_state(|s| {
        if up {
            (None, s.down.remove(addr).is_some())
        } else {
            let was = s.down.contains_key(addr);
            (
                Some(*s.down.entry(addr.clone()).or_insert_with(Instant::now)),
                !was,
            )
        }
    });
    if changed {
        CHANGED.notify_waiters();
    }
    since
}
