//! pgshard: a distributed PostgreSQL coordinator. Clients speak the PostgreSQL wire
//! protocol to it; it plans each statement against the Citus-compatible catalog and
//! executes it on real PostgreSQL servers (workers holding shards, and the coordinator
//! node holding the catalog and every non-distributed table).
//!
//! Layers, data flowing one way: `frontend` → `sql` → `planner` → `executor` → `backend`;
//! `catalog`, `sharding`, `commands`, `cluster` and `failover` beside them.

pub mod backend;
pub mod bench;
pub mod catalog;
pub mod citus_settings;
pub mod cluster;
pub mod commands;
pub mod config;
pub mod error;
pub mod executor;
pub mod failover;
pub mod frontend;
pub mod metrics;
pub mod planner;
pub mod sharding;
pub mod sql;
pub mod stats;
pub mod transaction;
