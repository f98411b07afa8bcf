//! Nodes that answer nothing: the timeouts and keepalives of pgshard's node
//! connections, and the rule that tells a frozen node from a long statement.
//!
//! - Every TCP connection to a node has TCP keepalives (`node_keepalive_*`): a host
//!   that is gone or cut off is found by the kernel, and the read fails.
//! - Opening a connection (connect, startup, authentication) takes at most
//!   `node_connect_timeout_ms`.
//! - A statement waiting on a node that has sent nothing for `node_timeout_ms` does not
//!   fail for that alone: a query may legitimately run for minutes, and a stopped
//!   (SIGSTOP) or hung server still answers keepalives from its kernel. pgshard then
//!   asks the node for a new connection (`answers`: a startup packet and its first
//!   answer, within `node_timeout_ms`). A node that answers is busy, not frozen: the
//!   statement waits on. One that does not is declared unresponsive: the statement
//!   fails with 08006 naming the node and its connection is dropped. The verdict is
//!   remembered per node for a moment (`VERDICT_KEPT`), so that many waiting
//!   statements probe once.
//!
//! The settings are process-wide, set once by the listener at start-up (`configure`).

use super::conn::NodeAddr;
use crate::config::Config;
use crate::error::{sqlstate, PgError};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The node connections' timeouts and keepalives.
#[derive(Debug, Clone)]
pub struct NodeTimeouts {
    /// Opening a connection, up to its first ReadyForQuery.
    pub connect: Duration,
    /// Silence of a node with a statement waiting before it is probed (None: never,
    /// `node_timeout_ms = 0`).
    pub unresponsive: Option<Duration>,
    pub keepalive_idle: Duration,
    pub keepalive_interval: Duration,
    pub keepalive_count: u32,
    /// Who the probe's startup packet names (no password is sent).
    probe_user: String,
    probe_database: String,
}

impl Default for NodeTimeouts {
    fn default() -> Self {
        NodeTimeouts {
            connect: Duration::from_millis(crate::config::DEFAULT_NODE_CONNECT_TIMEOUT_MS),
            unresponsive: Some(Duration::from_millis(
                crate::config::DEFAULT_NODE_TIMEOUT_MS,
            )),
            keepalive_idle: Duration::from_secs(crate::config::DEFAULT_KEEPALIVE_IDLE_SECS),
            keepalive_interval: Duration::from_secs(crate::config::DEFAULT_KEEPALIVE_INTERVAL_SECS),
            keepalive_count: crate::config::DEFAULT_KEEPALIVE_COUNT,
            probe_user: "postgres".into(),
            probe_database: "postgres".into(),
        }
    }
}

static SETTINGS: OnceLock<NodeTimeouts> = OnceLock::new();

/// Sets the process's node timeouts from the config (first call wins).
pub fn configure(cfg: &Config) {
    let _ = SETTINGS.set(NodeTimeouts {
        connect: Duration::from_millis(cfg.node_connect_timeout_ms.max(1)),
        unresponsive: (cfg.node_timeout_ms > 0).then(|| Duration::from_millis(cfg.node_timeout_ms)),
        keepalive_idle: Duration::from_secs(cfg.node_keepalive_idle_secs.max(1)),
        keepalive_interval: Duration::from_secs(cfg.node_keepalive_interval_secs.max(1)),
        keepalive_count: cfg.node_keepalive_count.max(1),
        probe_user: cfg.user.clone(),
        probe_database: cfg.database.clone(),
    });
}

pub fn settings() -> &'static NodeTimeouts {
    SETTINGS.get_or_init(NodeTimeouts::default)
}

/// Turns on TCP keepalives on a node connection.
pub fn set_keepalive(tcp: &tokio::net::TcpStream) -> std::io::Result<()> {
    let s = settings();
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(s.keepalive_idle)
        .with_interval(s.keepalive_interval)
        .with_retries(s.keepalive_count);
    let sock = socket2::SockRef::from(tcp);
    sock.set_tcp_keepalive(&keepalive)?;
    // Data sent to a host that stopped acknowledging fails as soon as keepalives would.
    sock.set_tcp_user_timeout(Some(
        s.keepalive_idle + s.keepalive_interval * s.keepalive_count,
    ))
}

/// How long a probe's verdict stands for the statements that ask after it: "answers"
/// for half the timeout (a node frozen just after answering is found within one more
/// timeout), "answers nothing" for the whole timeout.
fn verdict_kept(alive: bool) -> Duration {
    let t = settings().unresponsive.unwrap_or_default();
    if alive {
        t / 2
    } else {
        t
    }
}

static VERDICTS: Mutex<Option<HashMap<NodeAddr, (Instant, bool)>>> = Mutex::new(None);

/// Whether the node at `addr` answers a new connection within `node_timeout_ms` (a
/// verdict of the last moment is reused). Called by a statement that has waited that
/// long on the node without a byte.
pub async fn answers(addr: &NodeAddr) -> bool {
    if let Some(alive) = recent_verdict(addr) {
        return alive;
    }
    let s = settings();
    let Some(limit) = s.unresponsive else {
        return true;
    };
    let alive = tokio::time::timeout(limit, probe(addr, s))
        .await
        .unwrap_or(false);
    if !alive {
        tracing::warn!(
            "node {addr} answered nothing for {} ms, and no new connection either: unresponsive",
            limit.as_millis()
        );
    }
    VERDICTS
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .insert(addr.clone(), (Instant::now(), alive));
    alive
}

/// The node was found unresponsive a moment ago: what is waiting on it need not wait.
pub fn known_unresponsive(addr: &NodeAddr) -> bool {
    recent_verdict(addr) == Some(false)
}

fn recent_verdict(addr: &NodeAddr) -> Option<bool> {
    let verdicts = VERDICTS.lock().unwrap();
    let (at, alive) = verdicts.as_ref()?.get(addr)?;
    (at.elapsed() < verdict_kept(*alive)).then_some(*alive)
}

/// A startup packet to the node and its first answer (an authentication request, or
/// an error such as "too many connections": the server is running either way). The
/// connection is closed before authenticating, which PostgreSQL does not log.
async fn probe(addr: &NodeAddr, s: &NodeTimeouts) -> bool {
    let now = crate::failover::coordinator::physical(addr);
    let addr = &*now;
    let mut startup = bytes::BytesMut::new();
    let params = [
        ("user", s.probe_user.as_str()),
        ("database", s.probe_database.as_str()),
        ("application_name", "pgshard health probe"),
    ];
    if postgres_protocol::message::frontend::startup_message(params, &mut startup).is_err() {
        return false;
    }
    let mut answer = [0u8; 1];
    if addr.is_unix_socket() {
        let path = format!("{}/.s.PGSQL.{}", addr.host.trim_end_matches('/'), addr.port);
        let Ok(mut s) = tokio::net::UnixStream::connect(path).await else {
            return false;
        };
        s.write_all(&startup).await.is_ok() && matches!(s.read(&mut answer).await, Ok(1))
    } else {
        let Ok(mut s) = tokio::net::TcpStream::connect((addr.host.as_str(), addr.port)).await
        else {
            return false;
        };
        s.write_all(&startup).await.is_ok() && matches!(s.read(&mut answer).await, Ok(1))
    }
}

/// The error of a statement whose node was declared unresponsive.
pub fn unresponsive_error(addr: &NodeAddr) -> PgError {
    let ms = settings().unresponsive.unwrap_or_default().as_millis();
    let mut e = PgError::new(
        sqlstate::CONNECTION_FAILURE,
        format!("node {addr} is not responding: nothing received for {ms} ms and no new connection answered"),
    );
    e.hint = Some("node_timeout_ms in pgshard's configuration sets this limit".into());
    e
}

/// The error of a connection that could not be opened in time.
pub fn connect_timeout_error(addr: &NodeAddr) -> PgError {
    PgError::new(
        sqlstate::CONNECTION_FAILURE,
        format!(
            "could not connect to node {addr}: timeout after {} ms (node_connect_timeout_ms)",
            settings().connect.as_millis()
        ),
    )
}
