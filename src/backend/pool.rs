//! A pool of raw connections per node. Autocommit work of different clients shares
//! connections; a client inside a transaction block holds its own until it ends.
//! The pool size per node bounds the connections pgshard opens, however many
//! clients it serves.

use super::conn::{BackendConn, Credentials, NodeAddr};
use crate::error::{sqlstate, PgError, PgResult};
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
    slots: Arc<Semaphore>,
    application_name: String,
}

/// A connection taken from a pool; it goes back when dropped if it is reusable.
pub struct PooledConn {
    conn: Option<BackendConn>,
    pool: Arc<NodePool>,
    _permit: OwnedSemaphorePermit,
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
            if conn.is_reusable() {
                self.pool.idle.lock().unwrap().push(conn);
            } else if conn.broken {
                // The node may have restarted: its other idle connections are likely
                // dead too, and would each fail a client's statement once.
                self.pool.idle.lock().unwrap().clear();
            }
        }
    }
}

impl NodePool {
    pub fn new(
        addr: NodeAddr,
        creds: Arc<Credentials>,
        size: usize,
        application_name: String,
    ) -> Arc<NodePool> {
        Arc::new(NodePool {
            addr,
            creds,
            idle: Mutex::new(Vec::new()),
            slots: Arc::new(Semaphore::new(size.max(1))),
            application_name,
        })
    }

    pub async fn acquire(self: &Arc<Self>) -> PgResult<PooledConn> {
        let permit =
            match tokio::time::timeout(ACQUIRE_TIMEOUT, self.slots.clone().acquire_owned()).await {
                Ok(Ok(p)) => p,
                _ => {
                    return Err(PgError::new(
                        sqlstate::TOO_MANY_CONNECTIONS,
                        format!("timed out waiting for a connection to node {}", self.addr),
                    ))
                }
            };
        let idle = self.idle.lock().unwrap().pop();
        let conn = match idle {
            Some(c) => c,
            None => BackendConn::connect(&self.addr, &self.creds, &self.application_name).await?,
        };
        Ok(PooledConn {
            conn: Some(conn),
            pool: self.clone(),
            _permit: permit,
        })
    }

    pub fn idle_count(&self) -> usize {
        self.idle.lock().unwrap().len()
    }
}

/// Every node's pool, created on first use.
pub struct Pools {
    creds: Arc<Credentials>,
    size: usize,
    application_name: String,
    pools: Mutex<HashMap<NodeAddr, Arc<NodePool>>>,
}

impl Pools {
    pub fn new(creds: Credentials, size: usize, application_name: String) -> Pools {
        Pools {
            creds: Arc::new(creds),
            size,
            application_name,
            pools: Mutex::new(HashMap::new()),
        }
    }

    pub fn node(&self, addr: &NodeAddr) -> Arc<NodePool> {
        let mut pools = self.pools.lock().unwrap();
        if let Some(p) = pools.get(addr) {
            return p.clone();
        }
        let p = NodePool::new(
            addr.clone(),
            self.creds.clone(),
            self.size,
            self.application_name.clone(),
        );
        pools.insert(addr.clone(), p.clone());
        p
    }

    pub fn credentials(&self) -> &Credentials {
        &self.creds
    }
}
