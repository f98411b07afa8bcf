//! A pool of raw connections per node. Autocommit work of different clients shares
//! connections; a client inside a transaction block holds its own until it ends.
//! The pool size per node bounds the connections pgshard opens, however many
//! clients it serves. A node being failed over is waited out here
//! (`failover::route`/`hold`): new statements then run on its group's new primary.

use super::conn::{BackendConn, Credentials, NodeAddr};
use crate::error::{sqlstate, PgError, PgResult};
use crate::failover;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a client waits for a connection before getting an error.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(60);

pub struct NodePool {
    pub addr: NodeAddr,
    creds: Arc<Credentials>,
    idle: Mutex<Vec<BackendConn>>,
    /// Connections in use at once; shared by the pools of every role on one node
    /// and serving thread.
    slots: Arc<Semaphore>,
    application_name: String,
    /// A pool of one connection that must not be replaced (a session's own
    /// coordinator-node connection, see `NodePool::single`).
    single: bool,
}

/// A connection taken from a pool; it goes back when dropped if it is reusable.
pub struct PooledConn {
    conn: Option<BackendConn>,
    pool: Arc<NodePool>,
    /// The pool slot (None only once `detach`ed).
    permit: Option<OwnedSemaphorePermit>,
}

impl std::ops::Deref for PooledConn {
    type Target = BackendConn;
    fn deref(&self) -> &BackendConn {
        self.conn.as_ref().expect("connection present until drop")
    }
}

impl std::ops::DerefMut for PooledConn {
    fn deref_mut(&mut self) -> &mut BackendConn {
        self.conn.as_mut().expect("connection present until drop")
    }
}

impl Drop for PooledConn {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            // A connection to a failed-over node's new primary (`failover::route`) is
            // not pooled under the old node's address.
            if conn.addr != self.pool.addr {
                return;
            }
            // A client's own connection stays its own with notifications still
            // unread (a LISTENing client's flood): they go to the client next.
            if conn.is_reusable() || (self.pool.single && conn.is_idle_with_async_messages()) {
                self.pool.idle.lock().unwrap().push(conn);
            } else if conn.broken {
                // The node may have restarted: its other idle connections are likely
                // dead too, and would each fail a client's statement once.
                self.pool.idle.lock().unwrap().clear();
            }
        }
    }
}

impl PooledConn {
    /// Makes the connection go back to `pool` instead of the pool it came from (a
    /// session's own pool of the same node and slots, `Pools::own_pool`), for a
    /// connection that now carries the session's state.
    pub fn move_to(&mut self, pool: Arc<NodePool>) {
        debug_assert!(Arc::ptr_eq(&pool.slots, &self.pool.slots));
        self.pool = pool;
    }

    /// The connection with its pool slot, kept out of the pool for good (until both
    /// are dropped): for a connection `mux` shares between sessions.
    pub fn detach(mut self) -> (BackendConn, OwnedSemaphorePermit) {
        let conn = self.conn.take().expect("connection present until drop");
        // Drop runs with `conn` gone: nothing goes back to the idle list.
        let permit = self.permit.take().expect("slot present until drop");
        (conn, permit)
    }
}

impl NodePool {
    pub fn new(
        addr: NodeAddr,
        creds: Arc<Credentials>,
        size: usize,
        application_name: String,
    ) -> Arc<NodePool> {
        NodePool::sharing(
            addr,
            creds,
            Arc::new(Semaphore::new(size.max(1))),
            application_name,
        )
    }

    fn sharing(
        addr: NodeAddr,
        creds: Arc<Credentials>,
        slots: Arc<Semaphore>,
        application_name: String,
    ) -> Arc<NodePool> {
        Arc::new(NodePool {
            addr,
            creds,
            idle: Mutex::new(Vec::new()),
            slots,
            application_name,
            single: false,
        })
    }

    /// A pool holding just `conn`, never replaced once lost: the connection a client
    /// session owns for its whole life (its temporary tables, locks, LISTENs and
    /// settings live there, as on its own PostgreSQL backend). Taking it while it is
    /// taken is a bug (XX000), not a wait.
    pub fn single(conn: BackendConn, creds: Arc<Credentials>) -> Arc<NodePool> {
        Arc::new(NodePool {
            addr: conn.addr.clone(),
            creds,
            idle: Mutex::new(vec![conn]),
            slots: Arc::new(Semaphore::new(1)),
            application_name: String::new(),
            single: true,
        })
    }

    pub async fn acquire(self: &Arc<Self>) -> PgResult<PooledConn> {
        if self.single {
            let permit = self.slots.clone().try_acquire_owned().map_err(|_| {
                PgError::internal("the session's own coordinator connection is already in use")
            })?;
            let conn = self.idle.lock().unwrap().pop().ok_or_else(|| {
                PgError::fatal(
                    sqlstate::ADMIN_SHUTDOWN,
                    "terminating connection because its coordinator node backend is gone",
                )
            })?;
            return Ok(PooledConn {
                conn: Some(conn),
                pool: self.clone(),
                permit: Some(permit),
            });
        }
        // A node being failed over: wait for its group's new primary first.
        let redirected = failover::target(&self.addr).await?;
        let target = redirected.as_ref().unwrap_or(&self.addr);
        // A free slot is the common case: take it without arming a timer.
        let permit = match self.slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                match tokio::time::timeout(ACQUIRE_TIMEOUT, self.slots.clone().acquire_owned())
                    .await
                {
                    Ok(Ok(p)) => p,
                    _ => {
                        return Err(PgError::new(
                            sqlstate::TOO_MANY_CONNECTIONS,
                            format!("timed out waiting for a connection to node {}", self.addr),
                        ))
                    }
                }
            }
        };
        // An idle connection its server ended meanwhile would fail a statement; those
        // of a failed-over node must not serve at all.
        if redirected.is_some() {
            self.idle.lock().unwrap().clear();
        }
        let idle = loop {
            if redirected.is_some() {
                break None;
            }
            let next = self.idle.lock().unwrap().pop();
            match next {
                Some(mut c) => {
                    if !c.ended_while_idle() {
                        break Some(c);
                    }
                }
                None => break None,
            }
        };
        let conn = match idle {
            Some(c) => c,
            None => self.open(target).await?,
        };
        Ok(PooledConn {
            conn: Some(conn),
            pool: self.clone(),
            permit: Some(permit),
        })
    }

    /// A new connection to `target`; when the node is unreachable and can fail over,
    /// one to its group's primary once the failover is done (`failover::unreachable`).
    async fn open(&self, target: &NodeAddr) -> PgResult<BackendConn> {
        open_following(
            target,
            &self.creds,
            &[("application_name", &self.application_name)],
        )
        .await
        .map_err(statement_error)
    }

    /// A `single` pool whose connection was lost (closed as broken, not taken).
    pub fn is_lost(&self) -> bool {
        self.single && self.slots.available_permits() == 1 && self.idle.lock().unwrap().is_empty()
    }

    pub fn idle_count(&self) -> usize {
        self.idle.lock().unwrap().len()
    }
}

/// A new connection to `target` with startup `parameters`; when the node is
/// unreachable and can fail over, one to the node's new server once the failover is
/// done (`failover::unreachable`, waiting at most `failover_hold_ms`).
pub async fn open_following(
    target: &NodeAddr,
    creds: &Credentials,
    parameters: &[(&str, &str)],
) -> PgResult<BackendConn> {
    match BackendConn::connect_with_parameters(target, creds, parameters).await {
        Ok(c) => Ok(c),
        Err(e) if failover::may_fail_over(target, &e) => {
            let next = failover::unreachable(target)
                .await
                .map_err(|held| held.with_detail(e.message.clone()))?;
            BackendConn::connect_with_parameters(&next, creds, parameters).await
        }
        Err(e) => Err(e),
    }
}

/// A node's refusal of a new connection as the error of the client's statement: the
/// node's FATAL ("the database system is starting up", "too many clients") ends that
/// connection, not the client's.
fn statement_error(mut e: PgError) -> PgError {
    if e.is_fatal() {
        e.severity = "ERROR";
        e.raw = None;
    }
    e
}

thread_local! {
    /// Which of the process's single-threaded runtimes this thread runs (0 when the
    /// process has one runtime).
    static RUNTIME_INDEX: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Marks the current thread as running runtime `i`: its sessions use pool share `i`.
pub fn set_runtime_index(i: usize) {
    RUNTIME_INDEX.with(|c| c.set(i));
}

/// Every node's pool, created on first use: one share per runtime thread, because a
/// connection's socket is registered with the runtime that opened it and waking a
/// task on another thread costs more than the routed query itself.
pub struct Pools {
    creds: Arc<Credentials>,
    /// Connections per node and runtime; all shares together stay within the
    /// configured size per node.
    share_size: usize,
    application_name: String,
    /// Per (node, runtime, credentials' fingerprint): each role has its own idle
    /// connections, logged in as that role.
    pools: Mutex<HashMap<(NodeAddr, usize, u64), Arc<NodePool>>>,
    /// Per (node, runtime): the slots all roles' pools share.
    slots: Mutex<HashMap<(NodeAddr, usize), Arc<Semaphore>>>,
}

/// The part of `size` connections each of `runtimes` runtimes may open (at least 1).
pub fn share_size(size: usize, runtimes: usize) -> usize {
    (size / runtimes.max(1)).max(1)
}

impl Pools {
    pub fn new(
        creds: Credentials,
        size: usize,
        runtimes: usize,
        application_name: String,
    ) -> Pools {
        Pools {
            creds: Arc::new(creds),
            share_size: share_size(size, runtimes),
            application_name,
            pools: Mutex::new(HashMap::new()),
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// The pool of `addr` for the runtime running the caller, logged in as pgshard's
    /// own role: catalog work only, never a client's statement.
    pub fn node(&self, addr: &NodeAddr) -> Arc<NodePool> {
        let creds = self.creds.clone();
        self.node_as(addr, &creds)
    }

    /// The pool of `addr` for the runtime running the caller whose connections log
    /// in with `creds` (a client's role).
    pub fn node_as(&self, addr: &NodeAddr, creds: &Arc<Credentials>) -> Arc<NodePool> {
        let runtime = RUNTIME_INDEX.with(|c| c.get());
        let who = creds.fingerprint();
        let mut pools = self.pools.lock().unwrap();
        // Look up by reference first: no key clone on the hot path.
        if let Some((_, p)) = pools
            .iter()
            .find(|((a, r, w), _)| *r == runtime && *w == who && a == addr)
        {
            return p.clone();
        }
        let slots = self
            .slots
            .lock()
            .unwrap()
            .entry((addr.clone(), runtime))
            .or_insert_with(|| Arc::new(Semaphore::new(self.share_size.max(1))))
            .clone();
        let p = NodePool::sharing(
            addr.clone(),
            creds.clone(),
            slots,
            self.application_name.clone(),
        );
        pools.insert((addr.clone(), runtime, who), p.clone());
        p
    }

    /// A pool of `addr` for one session alone, logged in with `creds`: it shares the
    /// node's slots with the role's pool (`node_as`) but keeps its own idle
    /// connections, which nobody else takes and which close when the session drops
    /// the pool. For a session whose statements may have left state on a connection
    /// (`executor::session::isolation`).
    pub fn own_pool(&self, addr: &NodeAddr, creds: &Arc<Credentials>) -> Arc<NodePool> {
        let shared = self.node_as(addr, creds);
        NodePool::sharing(
            addr.clone(),
            creds.clone(),
            shared.slots.clone(),
            self.application_name.clone(),
        )
    }

    /// The application_name of pgshard's node connections.
    pub fn application_name(&self) -> &str {
        &self.application_name
    }

    pub fn credentials(&self) -> &Credentials {
        &self.creds
    }

    /// Per node: its pooled connections in use and idle now, over every runtime and
    /// role (sessions' own pools' idle connections are not counted), by node name.
    pub fn usage(&self) -> Vec<(NodeAddr, usize, usize)> {
        let mut by_node: std::collections::BTreeMap<String, (NodeAddr, usize, usize)> =
            Default::default();
        for ((addr, _), slots) in self.slots.lock().unwrap().iter() {
            let e = by_node
                .entry(addr.to_string())
                .or_insert_with(|| (addr.clone(), 0, 0));
            e.1 += self.share_size.max(1) - slots.available_permits().min(self.share_size.max(1));
        }
        for ((addr, _, _), pool) in self.pools.lock().unwrap().iter() {
            if let Some(e) = by_node.get_mut(&addr.to_string()) {
                e.2 += pool.idle_count();
            }
        }
        by_node.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::share_size;

    #[test]
    fn shares_stay_within_the_node_limit() {
        assert_eq!(share_size(32, 1), 32);
        assert_eq!(share_size(32, 2), 16);
        assert_eq!(share_size(32, 3), 10);
        assert_eq!(share_size(1, 4), 1);
        assert_eq!(share_size(8, 0), 8);
    }
}
