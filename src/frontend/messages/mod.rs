//! Wire formats of the PostgreSQL protocol v3 as small pure functions, apart from
//! all I/O (as rust-postgres' `postgres-protocol`): framing (`frame.rs`), the startup
//! packet (`startup.rs`), decoding of what clients send (`client.rs`), encoding of what
//! pgshard answers and decoding of the same messages from nodes (`server.rs`), and
//! encoding of what pgshard sends to nodes as their client (`to_node.rs`).

mod client;
mod frame;
mod server;
mod startup;
mod to_node;

pub use client::*;
pub use frame::*;
pub use server::*;
pub use startup::*;
pub use to_node::*;

use crate::error::{sqlstate, PgError, PgResult};
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Largest message pgshard accepts from a client (PostgreSQL's own limit for most
/// messages is 1 GB; a claimed size above this is refused before it is read).
pub const MAX_MESSAGE_LEN: usize = 256 * 1024 * 1024;
/// Largest startup packet (PostgreSQL: MAX_STARTUP_PACKET_LENGTH = 10000).
pub const MAX_STARTUP_LEN: usize = 10000;

pub const PROTOCOL_V3: i32 = 196608;
pub const SSL_REQUEST: i32 = 80877103;
pub const GSSENC_REQUEST: i32 = 80877104;
pub const CANCEL_REQUEST: i32 = 80877102;

#[cfg(test)]
mod tests;
