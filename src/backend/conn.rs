//! One raw protocol connection from pgshard to a PostgreSQL server (worker or
//! coordinator node). The data path forwards message bytes through it without
//! decoding rows; startup and SCRAM authentication use postgres-protocol.

use super::scram_keys::{ClientKeys, KeyClient};
use crate::error::{sqlstate, PgError, PgResult};
use crate::frontend::messages::{self, decode_frame, Frame};
use bytes::Buf;
use bytes::{BufMut, BytesMut};
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use postgres_protocol::message::frontend;
use std::collections::HashSet;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_util::either::Either;

/// Where a server listens: the key of its pool.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeAddr {
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl NodeAddr {
    /// A host that is an absolute path names a directory holding the server's Unix-domain
    /// socket, as in libpq (`host=/var/run/postgresql`).
    pub fn is_unix_socket(&self) -> bool {
        self.host.starts_with('/')
    }
}

/// The byte stream to a node: TCP, plain or TLS as `node_sslmode` says (Left, see
/// `super::tls`), or a Unix-domain socket (Right) for a node registered by its socket
/// directory (cheaper per message when the node runs on pgshard's own host).
/// Writers call `flush` after `write_all`: TLS may hold encrypted bytes back otherwise.
pub type NodeStream = Either<super::tls::NodeTcp, UnixStream>;

/// Opens the stream to `addr`: its socket file when the host is a directory; over TCP,
/// TLS is negotiated first when configured. The coordinator node's configured address
/// leads to the server serving it now (`failover::coordinator::physical`).
async fn connect_stream(addr: &NodeAddr) -> std::io::Result<NodeStream> {
    let now = crate::failover::coordinator::physical(addr);
    let addr = &*now;
    if addr.is_unix_socket() {
        let path = format!("{}/.s.PGSQL.{}", addr.host.trim_end_matches('/'), addr.port);
        Ok(Either::Right(UnixStream::connect(path).await?))
    } else {
        let s = TcpStream::connect((addr.host.as_str(), addr.port)).await?;
        // Small protocol messages must not wait for Nagle.
        s.set_nodelay(true)?;
        super::health::set_keepalive(&s)?;
        Ok(Either::Left(super::tls::negotiate(s, &addr.host).await?))
    }
}

/// The last result of a simple query string (`BackendConn::simple_last_result`).
#[derive(Debug, Clone, Default)]
pub struct LastResult {
    /// Its column count; None for a command that returns no rows.
    pub columns: Option<usize>,
    pub rows: Vec<Vec<Option<String>>>,
    pub tag: String,
}

/// Who a node connection logs in as, and how: pgshard's own role with its password
/// (catalog work, recovery, deadlock detection), or a client's role with the keys of
/// the client's own SCRAM login (`scram_keys`), so that the node checks every
/// privilege exactly as for that client.
#[derive(Clone)]
pub struct Credentials {
    pub user: String,
    pub database: String,
    pub secret: Secret,
}

#[derive(Clone)]
pub enum Secret {
    Password(String),
    ScramKeys(ClientKeys),
    /// Log in as pgshard's own role with this password, then `SET SESSION
    /// AUTHORIZATION` to `Credentials::user`: for clients pgshard trusts without a
    /// password (`auth = "trust"`), who can be anyone anyway.
    TrustedAs {
        own_user: String,
        password: String,
    },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match &self.secret {
            Secret::Password(_) => "password",
            Secret::ScramKeys(_) => "client's SCRAM keys",
            Secret::TrustedAs { .. } => "trusted",
        };
        write!(f, "{}@{} ({how})", self.user, self.database)
    }
}

impl Credentials {
    pub fn with_password(user: &str, password: &str, database: &str) -> Credentials {
        Credentials {
            user: user.to_string(),
            database: database.to_string(),
            secret: Secret::Password(password.to_string()),
        }
    }

    /// Tells credentials apart (pool keys): the user and which secret, never the
    /// secret itself.
    pub fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.user.hash(&mut h);
        self.database.hash(&mut h);
        match &self.secret {
            Secret::Password(_) => 0u8.hash(&mut h),
            Secret::ScramKeys(k) => k.fingerprint().hash(&mut h),
            Secret::TrustedAs { own_user, .. } => own_user.hash(&mut h),
        }
        h.finish()
    }

    /// The role the node is logged into.
    fn login_user(&self) -> &str {
        match &self.secret {
            Secret::TrustedAs { own_user, .. } => own_user,
            _ => &self.user,
        }
    }

    fn password(&self) -> Option<&str> {
        match &self.secret {
            Secret::Password(p) | Secret::TrustedAs { password: p, .. } => Some(p),
            Secret::ScramKeys(_) => None,
        }
    }
}

pub struct BackendConn {
    pub addr: NodeAddr,
    stream: NodeStream,
    rbuf: BytesMut,
    pub wbuf: BytesMut,
    pub process_id: i32,
    pub secret_key: i32,
    /// ParameterStatus values the server reported at startup.
    pub parameters: Vec<(String, String)>,
    /// Backend statement ids (see `executor::statements`) prepared on this connection.
    pub prepared: HashSet<u64>,
    /// Fingerprint of the session settings applied to this connection (0 = none).
    pub settings_fingerprint: u64,
    /// Transaction status of the last ReadyForQuery ('I', 'T' or 'E').
    pub txn_status: u8,
    /// Set when the connection's state is unknown (I/O error, abandoned mid-query).
    pub broken: bool,
    /// ParameterStatus reports received after startup, kept when Some (a client's
    /// own coordinator connection: its settings changed by `set_config`, functions or
    /// a transaction's end follow to the client and the other nodes).
    pub reports: Option<Vec<(String, String)>>,
    /// Of `reports`, those read by the methods here that answer no client
    /// (`simple`, `simple_rows`, `drain_to_ready`): the client has not seen them.
    pub unforwarded_reports: Vec<(String, String)>,
    /// On a client's own connection (`reports` is Some), the notifications read by
    /// those methods: the client gets them before its next ReadyForQuery.
    pub unforwarded_notifications: Vec<Frame>,
    /// Bytes of `wbuf` written but not yet flushed through the stream (TLS).
    unflushed: bool,
    /// The server closed its side: nothing more to read.
    read_closed: bool,
    /// Notices a silence of `node_timeout_ms` (`receive`); made at the first wait.
    silence: Option<super::silence::SilenceTimer>,
}

/// How much a write waiting on the server reads ahead of the caller: while the server
/// sends (NOTICEs per COPY row, debug messages during a huge Bind) and does not read,
/// pgshard reads what it sends so that neither side blocks for good. Past this, `flush`
/// returns with bytes still unsent and `read` sends them while the caller forwards what
/// arrived (memory stays bounded; the client's reading paces the server).
const READ_AHEAD_WHILE_WRITING: usize = 1024 * 1024;

impl BackendConn {
    pub async fn connect(
        addr: &NodeAddr,
        creds: &Credentials,
        application_name: &str,
    ) -> PgResult<BackendConn> {
        Self::connect_with_parameters(addr, creds, &[("application_name", application_name)]).await
    }

    /// `connect` with more startup-packet parameters (`options`, `DateStyle`...: a
    /// client's own, which become the connection's defaults, what RESET returns to).
    /// `client_encoding` is UTF8 unless one of them says otherwise.
    /// Opening takes at most `node_connect_timeout_ms` (`health`).
    pub async fn connect_with_parameters(
        addr: &NodeAddr,
        creds: &Credentials,
        parameters: &[(&str, &str)],
    ) -> PgResult<BackendConn> {
        let limit = super::health::settings().connect;
        tokio::time::timeout(limit, Self::open(addr, creds, parameters))
            .await
            .unwrap_or_else(|_| Err(super::health::connect_timeout_error(addr)))
    }

    async fn open(
        addr: &NodeAddr,
        creds: &Credentials,
        parameters: &[(&str, &str)],
    ) -> PgResult<BackendConn> {
        let fail = |e: std::io::Error| {
            PgError::new(
                sqlstate::CONNECTION_FAILURE,
                format!(
                    "could not connect to node {}: {e}",
                    crate::failover::coordinator::physical(addr)
                ),
            )
        };
        let stream = connect_stream(addr).await.map_err(fail)?;
        let mut conn = BackendConn {
            addr: addr.clone(),
            stream,
            rbuf: BytesMut::with_capacity(16 * 1024),
            wbuf: BytesMut::with_capacity(8 * 1024),
            process_id: 0,
            secret_key: 0,
            parameters: Vec::new(),
            prepared: HashSet::new(),
            settings_fingerprint: 0,
            txn_status: b'I',
            broken: false,
            reports: None,
            unforwarded_reports: Vec::new(),
            unforwarded_notifications: Vec::new(),
            unflushed: false,
            read_closed: false,
            silence: None,
        };
        let mut params = vec![
            ("user", creds.login_user()),
            ("database", creds.database.as_str()),
        ];
        params.extend(parameters.iter().copied());
        if !parameters.iter().any(|(k, _)| *k == "client_encoding") {
            params.push(("client_encoding", "UTF8"));
        }
        frontend::startup_message(params.iter().copied(), &mut conn.wbuf)
            .map_err(|e| PgError::internal(format!("startup message: {e}")))?;
        conn.flush().await?;
        conn.authenticate(creds).await?;
        loop {
            let f = conn.read().await?;
            match f.tag {
                b'S' => {
                    let mut b: &[u8] = &f.body;
                    let k = messages::read_cstr(&mut b)?;
                    let v = messages::read_cstr(&mut b)?;
                    conn.parameters.push((k, v));
                }
                b'K' if f.body.len() >= 8 => {
                    conn.process_id = i32::from_be_bytes(f.body[0..4].try_into().unwrap());
                    conn.secret_key = i32::from_be_bytes(f.body[4..8].try_into().unwrap());
                }
                b'Z' => break,
                b'E' => return Err(conn.node_error(PgError::from_server_fields(f.body))),
                _ => {}
            }
        }
        if let Secret::TrustedAs { .. } = creds.secret {
            let sql = format!(
                "SET SESSION AUTHORIZATION {}",
                crate::sql::quote::quote_ident(&creds.user)
            );
            conn.simple(&sql).await.map_err(|e| conn.node_error(e))?;
        }
        Ok(conn)
    }

    async fn authenticate(&mut self, creds: &Credentials) -> PgResult<()> {
        let mut scram: Option<ScramSha256> = None;
        let mut key_client: Option<KeyClient> = None;
        let no_password = || {
            PgError::new(
                sqlstate::INVALID_PASSWORD,
                format!("password authentication failed for user \"{}\"", creds.user),
            )
        };
        loop {
            let f = self.read().await?;
            if f.tag == b'E' {
                return Err(self.node_error(PgError::from_server_fields(f.body)));
            }
            if f.tag != b'R' || f.body.len() < 4 {
                return Err(self.protocol_error("expected authentication request"));
            }
            let code = i32::from_be_bytes(f.body[0..4].try_into().unwrap());
            let data = &f.body[4..];
            match code {
                0 => return Ok(()),
                3 => {
                    let password = creds.password().ok_or_else(no_password)?;
                    frontend::password_message(password.as_bytes(), &mut self.wbuf)
                        .map_err(|e| PgError::internal(e.to_string()))?;
                    self.flush().await?;
                }
                5 => {
                    let password = creds.password().ok_or_else(no_password)?;
                    let salt: [u8; 4] = data
                        .get(0..4)
                        .and_then(|s| s.try_into().ok())
                        .ok_or_else(|| self.protocol_error("md5 salt"))?;
                    let hashed = postgres_protocol::authentication::md5_hash(
                        creds.login_user().as_bytes(),
                        password.as_bytes(),
                        salt,
                    );
                    frontend::password_message(hashed.as_bytes(), &mut self.wbuf)
                        .map_err(|e| PgError::internal(e.to_string()))?;
                    self.flush().await?;
                }
                10 => {
                    let offers_scram = data.split(|&b| b == 0).any(|m| m == b"SCRAM-SHA-256");
                    if !offers_scram {
                        return Err(self.protocol_error("server offers no SCRAM-SHA-256"));
                    }
                    let first = match &creds.secret {
                        Secret::ScramKeys(keys) => {
                            let c = KeyClient::new(keys.clone());
                            let first = c.first_message();
                            key_client = Some(c);
                            first
                        }
                        _ => {
                            let password = creds.password().ok_or_else(no_password)?;
                            let s = ScramSha256::new(
                                password.as_bytes(),
                                ChannelBinding::unsupported(),
                            );
                            let first = s.message().to_vec();
                            scram = Some(s);
                            first
                        }
                    };
                    frontend::sasl_initial_response("SCRAM-SHA-256", &first, &mut self.wbuf)
                        .map_err(|e| PgError::internal(e.to_string()))?;
                    self.flush().await?;
                }
                11 => {
                    let answer = if let Some(c) = key_client.as_mut() {
                        c.final_message(data).map_err(|e| match e {
                            super::scram_keys::KeyClientError::OtherVerifier => {
                                self.node_error(no_password())
                            }
                            e => self.protocol_error(&format!("SCRAM: {e}")),
                        })?
                    } else {
                        let s = scram
                            .as_mut()
                            .ok_or_else(|| self.protocol_error("unexpected SASL continue"))?;
                        s.update(data)
                            .map_err(|e| self.protocol_error(&format!("SCRAM: {e}")))?;
                        s.message().to_vec()
                    };
                    frontend::sasl_response(&answer, &mut self.wbuf)
                        .map_err(|e| PgError::internal(e.to_string()))?;
                    self.flush().await?;
                }
                12 => {
                    if let Some(c) = key_client.take() {
                        c.check_server_final(data)
                            .map_err(|e| self.protocol_error(&format!("SCRAM: {e}")))?;
                    } else {
                        let mut s = scram
                            .take()
                            .ok_or_else(|| self.protocol_error("unexpected SASL final"))?;
                        s.finish(data)
                            .map_err(|e| self.protocol_error(&format!("SCRAM: {e}")))?;
                    }
                }
                other => {
                    return Err(
                        self.protocol_error(&format!("unsupported authentication method {other}"))
                    )
                }
            }
        }
    }

    fn protocol_error(&self, what: &str) -> PgError {
        PgError::new(
            sqlstate::CONNECTION_FAILURE,
            format!("node {}: {what}", self.addr),
        )
    }

    /// Adds the node to an error raised while talking to it.
    fn node_error(&self, mut e: PgError) -> PgError {
        e.raw = None;
        e.message = format!("{} (node {})", e.message, self.addr);
        e
    }

    /// Sends what is buffered in `wbuf`, reading what the server sends meanwhile (see
    /// `READ_AHEAD_WHILE_WRITING`): returns once everything is sent, or once that much
    /// has been read ahead with the rest still unsent; `read` then sends the rest.
    /// When the server reads as fast as pgshard writes, this is a plain write.
    pub async fn flush(&mut self) -> PgResult<()> {
        if self.wbuf.is_empty() && !self.unflushed {
            return Ok(());
        }
        let r = std::future::poll_fn(|cx| loop {
            match self.poll_send(cx) {
                Poll::Ready(r) => return Poll::Ready(r),
                Poll::Pending => {}
            }
            // Stop reading ahead only with a whole message to hand over, so that
            // callers forwarding what arrived always make progress.
            if self.read_closed
                || (self.rbuf.len() >= READ_AHEAD_WHILE_WRITING && self.buffered_tag().is_some())
            {
                return Poll::Ready(Ok(()));
            }
            match self.poll_receive(cx) {
                Poll::Ready(Ok(())) => continue,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        })
        .await;
        r.map_err(|e| {
            self.wbuf.clear();
            self.io_error(e)
        })
    }

    /// Whether bytes of `wbuf` are still to be sent (a `flush` that read ahead).
    pub fn has_unsent(&self) -> bool {
        !self.wbuf.is_empty() || self.unflushed
    }

    /// Writes `wbuf` (then flushes the stream) as far as the socket takes it.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while !self.wbuf.is_empty() {
            match Pin::new(&mut self.stream).poll_write(cx, &self.wbuf) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()))
                }
                Poll::Ready(Ok(n)) => {
                    self.wbuf.advance(n);
                    self.unflushed = true;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        if self.unflushed {
            match Pin::new(&mut self.stream).poll_flush(cx) {
                Poll::Ready(Ok(())) => self.unflushed = false,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Reads what the server sent into `rbuf` (end of stream: `read_closed`).
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let mut chunk = [0u8; 16 * 1024];
        let mut rb = ReadBuf::new(&mut chunk);
        match Pin::new(&mut self.stream).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) => {
                if rb.filled().is_empty() {
                    self.read_closed = true;
                } else {
                    self.rbuf.extend_from_slice(rb.filled());
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Waits until the server sends something (or closes), sending what `wbuf` still
    /// holds meanwhile. Cancel-safe: for `select!` against the client's next message.
    /// A server silent for `node_timeout_ms` is probed (`health::answers`): the wait
    /// goes on while it answers new connections (a long statement), else it fails
    /// with 08006 and the connection is broken.
    pub async fn receive(&mut self) -> PgResult<()> {
        let Some(limit) = super::health::settings().unresponsive else {
            return self.receive_unlimited().await;
        };
        let mut since = std::time::Instant::now();
        loop {
            let mut timer = self
                .silence
                .take()
                .unwrap_or_else(|| super::silence::SilenceTimer::new(limit));
            let received = tokio::select! {
                biased;
                r = self.receive_unlimited() => Some(r),
                _ = timer.elapsed(since) => None,
            };
            self.silence = Some(timer);
            if let Some(r) = received {
                return r;
            }
            since = std::time::Instant::now();
            if !super::health::answers(&self.addr).await {
                self.broken = true;
                return Err(super::health::unresponsive_error(&self.addr));
            }
        }
    }

    async fn receive_unlimited(&mut self) -> PgResult<()> {
        if self.read_closed {
            return Err(self.closed_error());
        }
        if !self.has_unsent() {
            if self.rbuf.capacity() - self.rbuf.len() < 4096 {
                self.rbuf.reserve(16 * 1024);
            }
            return match self.stream.read_buf(&mut self.rbuf).await {
                Ok(0) => {
                    self.read_closed = true;
                    Err(self.closed_error())
                }
                Ok(_) => Ok(()),
                Err(e) => Err(self.io_error(e)),
            };
        }
        let r = std::future::poll_fn(|cx| {
            if self.has_unsent() {
                if let Poll::Ready(Err(_)) = self.poll_send(cx) {
                    // The server went away: what it sent before (a FATAL) is still to
                    // be read; the unsent rest is dropped.
                    self.broken = true;
                    self.wbuf.clear();
                    self.unflushed = false;
                }
            }
            self.poll_receive(cx)
        })
        .await;
        match r {
            Ok(()) if self.read_closed => Err(self.closed_error()),
            Ok(()) => Ok(()),
            Err(e) => Err(self.io_error(e)),
        }
    }

    fn closed_error(&mut self) -> PgError {
        self.broken = true;
        PgError::new(
            sqlstate::CONNECTION_FAILURE,
            format!("connection to node {} closed unexpectedly", self.addr),
        )
    }

    /// The type of the next message when it has arrived whole (no I/O).
    pub fn buffered_tag(&self) -> Option<u8> {
        let len = u32::from_be_bytes(self.rbuf.get(1..5)?.try_into().ok()?) as usize;
        (self.rbuf.len() > len).then(|| self.rbuf[0])
    }

    fn io_error(&mut self, e: std::io::Error) -> PgError {
        self.broken = true;
        PgError::new(
            sqlstate::CONNECTION_FAILURE,
            format!("connection to node {} lost: {e}", self.addr),
        )
    }

    /// Reads one message.
    pub async fn read(&mut self) -> PgResult<Frame> {
        loop {
            match decode_frame(&mut self.rbuf, usize::MAX >> 1) {
                Ok(Some(f)) => {
                    match f.tag {
                        b'Z' => self.txn_status = f.body.first().copied().unwrap_or(b'I'),
                        b'S' => {
                            if let Some(reports) = &mut self.reports {
                                let mut b: &[u8] = &f.body;
                                if let (Ok(k), Ok(v)) =
                                    (messages::read_cstr(&mut b), messages::read_cstr(&mut b))
                                {
                                    reports.push((k, v));
                                }
                            }
                        }
                        // The server closes the connection after a FATAL or PANIC:
                        // nothing more comes, not even ReadyForQuery.
                        b'E' if ends_connection(&f.body) => self.broken = true,
                        _ => {}
                    }
                    return Ok(f);
                }
                Ok(None) => {}
                Err(e) => {
                    self.broken = true;
                    return Err(e);
                }
            }
            self.receive().await?;
        }
    }

    /// Sends `COPY ... FROM STDIN` (`sql`) and waits until the server is ready for the
    /// data (CopyInResponse); on an error it reads to ReadyForQuery and returns it.
    pub async fn start_copy_in(&mut self, sql: &str) -> PgResult<()> {
        messages::write_query(&mut self.wbuf, sql);
        self.flush().await?;
        loop {
            let f = self.read().await?;
            match f.tag {
                b'G' => return Ok(()),
                b'E' => {
                    let e = PgError::from_server_fields(f.body);
                    self.drain_to_ready().await.ok();
                    return Err(e);
                }
                _ => {}
            }
        }
    }

    /// Runs one simple query whose results nobody needs, returning its first error.
    pub async fn simple(&mut self, sql: &str) -> PgResult<()> {
        messages::write_query(&mut self.wbuf, sql);
        self.flush().await?;
        self.drain_to_ready().await
    }

    /// Runs a simple query and returns the first column of its rows as text (NULLs
    /// skipped), or the first error once the connection is ready again.
    pub async fn simple_column(&mut self, sql: &str) -> PgResult<Vec<String>> {
        Ok(self
            .simple_rows(sql)
            .await?
            .into_iter()
            .filter_map(|row| row.into_iter().next().flatten())
            .collect())
    }

    /// Runs a simple query and returns its rows as text (NULL: None), or the first
    /// error once the connection is ready again.
    pub async fn simple_rows(&mut self, sql: &str) -> PgResult<Vec<Vec<Option<String>>>> {
        messages::write_query(&mut self.wbuf, sql);
        self.flush().await?;
        let mut rows = Vec::new();
        let mut first_err = None;
        loop {
            let f = self.read().await?;
            match f.tag {
                b'D' => rows.push(
                    messages::decode_data_row(&f.body)?
                        .into_iter()
                        .map(|v| v.map(|b| String::from_utf8_lossy(&b).into_owned()))
                        .collect(),
                ),
                b'E' if self.broken => return Err(PgError::from_server_fields(f.body)),
                b'E' if first_err.is_none() => {
                    first_err = Some(PgError::from_server_fields(f.body))
                }
                b'Z' => return first_err.map_or(Ok(rows), Err),
                b'S' => self.keep_unforwarded(),
                b'A' => self.keep_notification(f),
                _ => {}
            }
        }
    }

    /// Runs a simple query as libpq's `PQexec` sees it: the last result of the string
    /// (its column count, None for a command without rows; its rows; its command
    /// tag), or the first error once the connection is ready again.
    pub async fn simple_last_result(&mut self, sql: &str) -> PgResult<LastResult> {
        messages::write_query(&mut self.wbuf, sql);
        self.flush().await?;
        let mut last = LastResult::default();
        let mut fresh = true;
        let mut first_err = None;
        loop {
            let f = self.read().await?;
            if fresh && matches!(f.tag, b'T' | b'C' | b'I') {
                last = LastResult::default();
                fresh = false;
            }
            match f.tag {
                b'T' => last.columns = Some(u16::from_be_bytes([f.body[0], f.body[1]]) as usize),
                b'D' => last.rows.push(
                    messages::decode_data_row(&f.body)?
                        .into_iter()
                        .map(|v| v.map(|b| String::from_utf8_lossy(&b).into_owned()))
                        .collect(),
                ),
                b'C' | b'I' => {
                    last.tag =
                        String::from_utf8_lossy(f.body.strip_suffix(&[0]).unwrap_or(&f.body))
                            .into_owned();
                    fresh = true;
                }
                b'E' if self.broken => return Err(PgError::from_server_fields(f.body)),
                b'E' if first_err.is_none() => {
                    first_err = Some(PgError::from_server_fields(f.body))
                }
                b'Z' => return first_err.map_or(Ok(last), Err),
                b'S' => self.keep_unforwarded(),
                b'A' => self.keep_notification(f),
                _ => {}
            }
        }
    }

    /// Reads until ReadyForQuery, returning the first error seen.
    pub async fn drain_to_ready(&mut self) -> PgResult<()> {
        self.drain_keeping_messages(None).await
    }

    /// Runs one simple query whose results nobody needs, like `simple`; the notices
    /// and notifications the server sends meanwhile (a deferred trigger's NOTICE at
    /// COMMIT) are added to `kept`, in order, for the client.
    pub async fn simple_keeping_messages(
        &mut self,
        sql: &str,
        kept: &mut Vec<Frame>,
    ) -> PgResult<()> {
        messages::write_query(&mut self.wbuf, sql);
        self.flush().await?;
        self.drain_keeping_messages(Some(kept)).await
    }

    /// `drain_to_ready`, keeping NoticeResponse and NotificationResponse in `kept`.
    /// A FATAL ends the wait at once (the server closes the connection after it).
    async fn drain_keeping_messages(&mut self, mut kept: Option<&mut Vec<Frame>>) -> PgResult<()> {
        let mut first_err = None;
        loop {
            let f = self.read().await?;
            match f.tag {
                b'Z' => return first_err.map_or(Ok(()), Err),
                b'E' if self.broken => return Err(PgError::from_server_fields(f.body)),
                b'E' if first_err.is_none() => {
                    first_err = Some(PgError::from_server_fields(f.body))
                }
                b'S' => self.keep_unforwarded(),
                b'N' | b'A' => match kept.as_deref_mut() {
                    Some(kept) => kept.push(f),
                    None if f.tag == b'A' => self.keep_notification(f),
                    None => {}
                },
                _ => {}
            }
        }
    }

    /// A notification read where no client is answered: kept for the client when
    /// this is a client's own connection.
    pub fn keep_notification(&mut self, f: Frame) {
        if self.reports.is_some() {
            self.unforwarded_notifications.push(f);
        }
    }

    /// The report just read (the last of `reports`) reaches no client here.
    fn keep_unforwarded(&mut self) {
        if let Some(last) = self.reports.as_ref().and_then(|r| r.last()) {
            self.unforwarded_reports.push(last.clone());
        }
    }

    /// The connection taken apart for `mux`: address, stream, unread bytes, and the
    /// statements prepared on it.
    pub fn into_parts(self) -> (NodeAddr, NodeStream, BytesMut, HashSet<u64>) {
        (self.addr, self.stream, self.rbuf, self.prepared)
    }

    /// Whether an idle connection was ended by its server meanwhile (terminated,
    /// restarted): it has sent something (a FATAL) or closed. Never waits.
    pub fn ended_while_idle(&mut self) -> bool {
        use futures_util::FutureExt;
        match self.stream.read_buf(&mut self.rbuf).now_or_never() {
            None => false,
            Some(_) => {
                self.broken = true;
                true
            }
        }
    }

    /// Whether the connection, idle, holds only what a server sends on its own
    /// (notifications, notices, parameter changes) still unread: nothing owed to a
    /// statement, nothing unsent. A client's own connection so stays its own while
    /// notifications flood in.
    pub fn is_idle_with_async_messages(&self) -> bool {
        if self.broken || self.txn_status != b'I' || !self.wbuf.is_empty() {
            return false;
        }
        let mut at = 0;
        while at < self.rbuf.len() {
            if !matches!(self.rbuf[at], b'A' | b'N' | b'S') {
                return false;
            }
            let Some(len) = self.rbuf.get(at + 1..at + 5) else {
                return true;
            };
            at += 1 + u32::from_be_bytes(len.try_into().unwrap()) as usize;
        }
        true
    }

    /// The error that ended an idle connection by now, without waiting: the FATAL its
    /// server sent (terminated, shut down), or the connection closed. None while it
    /// lives; what else it sent meanwhile stays unread.
    pub fn ended_now(&mut self) -> Option<PgError> {
        use futures_util::FutureExt;
        match self.stream.read_buf(&mut self.rbuf).now_or_never() {
            Some(Ok(0)) => {
                self.broken = true;
                return Some(PgError::new(
                    sqlstate::CONNECTION_FAILURE,
                    format!("connection to node {} closed unexpectedly", self.addr),
                ));
            }
            Some(Err(e)) => return Some(self.io_error(e)),
            _ => {}
        }
        let mut at = 0;
        while let Some(len) = self.rbuf.get(at + 1..at + 5) {
            let end = at + 1 + u32::from_be_bytes(len.try_into().unwrap()) as usize;
            let Some(body) = self.rbuf.get(at + 5..end) else {
                break;
            };
            if self.rbuf[at] == b'E' && ends_connection(body) {
                self.broken = true;
                return Some(PgError::from_server_fields(bytes::Bytes::copy_from_slice(
                    body,
                )));
            }
            at = end;
        }
        None
    }

    /// Usable by another client: not broken and outside any transaction.
    pub fn is_reusable(&self) -> bool {
        !self.broken && self.txn_status == b'I' && !self.has_unsent() && self.rbuf.is_empty()
    }

    /// Sends a CancelRequest for whatever this connection's backend is running.
    pub async fn cancel(addr: &NodeAddr, process_id: i32, secret_key: i32) {
        let limit = super::health::settings().connect;
        if let Ok(Ok(mut s)) = tokio::time::timeout(limit, connect_stream(addr)).await {
            let mut buf = BytesMut::new();
            buf.put_i32(16);
            buf.put_i32(messages::CANCEL_REQUEST);
            buf.put_i32(process_id);
            buf.put_i32(secret_key);
            let _ = s.write_all(&buf).await;
            let _ = s.flush().await;
            let _ = tokio::time::timeout(limit, s.read(&mut [0u8; 1])).await;
        }
    }
}

/// Whether an ErrorResponse body has severity FATAL or PANIC: the server closes the
/// connection after sending it.
pub fn ends_connection(body: &[u8]) -> bool {
    let mut rest = body;
    while let Some((&field, tail)) = rest.split_first() {
        if field == 0 {
            break;
        }
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        if field == b'V' {
            return matches!(&tail[..end], b"FATAL" | b"PANIC");
        }
        rest = tail.get(end + 1..).unwrap_or(&[]);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::ends_connection;

    fn error_body(severity: &str, code: &str) -> Vec<u8> {
        let mut b = Vec::new();
        for (field, value) in [
            (b'S', severity),
            (b'V', severity),
            (b'C', code),
            (b'M', "m"),
        ] {
            b.push(field);
            b.extend_from_slice(value.as_bytes());
            b.push(0);
        }
        b.push(0);
        b
    }

    #[test]
    fn only_fatal_and_panic_end_the_connection() {
        assert!(ends_connection(&error_body("FATAL", "57P01")));
        assert!(ends_connection(&error_body("PANIC", "XX000")));
        // An ordinary error of a connection class is the statement's.
        assert!(!ends_connection(&error_body("ERROR", "08006")));
        assert!(!ends_connection(&error_body("ERROR", "57P01")));
        assert!(!ends_connection(b"\0"));
    }
}
