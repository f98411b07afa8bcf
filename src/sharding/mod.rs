//! Shard mapping identical to Citus: PostgreSQL's hash functions per type, and the
//! int32 hash space cut into equal ranges.

pub mod hash;
pub mod ranges;
