//! Executor: runs plans over pooled backend connections on behalf of one client
//! session, keeps its transaction state, and combines multi-shard results.
//!
//! - `shared`: process-wide state (catalog cache, pools, statement registry).
//! - `session`: one client's protocol state machine (simple and extended protocol).
//! - `combine`: merging partial results of multi-shard reads.

pub mod combine;
pub mod session;
pub mod shared;
pub mod statements;

pub use session::Session;
pub use shared::Shared;
