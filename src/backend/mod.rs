//! Backend: connections from pgshard to PostgreSQL servers (workers and the
//! coordinator node). `control` opens tokio-postgres clients for catalog and DDL work;
//! `conn` and `pool` carry the data path as raw protocol messages; `health` their
//! timeouts, keepalives and the rule for a node that answers nothing; `silence` the
//! timer each connection keeps to notice that rule's silence cheaply.

pub mod conn;
pub mod control;
pub mod health;
pub mod mux;
pub mod pool;
pub mod scram_keys;
pub mod silence;
pub mod tls;

pub use conn::{BackendConn, Credentials, NodeAddr};
pub use pool::{NodePool, PooledConn, Pools};
