//! The pgshard listener: accepts clients, runs the startup handshake (TLS on an
//! SSLRequest when `ssl` is on, GSS encryption refused; the authentication method from
//! the `hba` rules: SCRAM-SHA-256 against the coordinator node's roles, trust, or
//! refusal), handles CancelRequest, and then feeds each client's messages to its
//! executor session.

use super::auth::{self, ScramServer, ScramVerifier};
use super::client_stream::{self, ClientRead, ClientStream, ClientWrite, StdClientStream};
use super::hba::{self, Decision};
use super::messages::{self as msg, StartupPacket, MAX_MESSAGE_LEN};
use super::startup_options;
use crate::backend::conn::Secret;
use crate::backend::scram_keys::ClientKeys;
use crate::backend::Credentials;
use crate::catalog::cache::CatalogCache;
use crate::config::Config;
use crate::error::{sqlstate, PgError, PgResult};
use crate::executor::session::identity::open_home;
use crate::executor::shared::CancelTargets;
use crate::executor::{Session, Shared};
use crate::sql::quote::quote_literal;
use bytes::BytesMut;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The parser recurses deeply on nested expressions: big stacks for every thread
/// that plans statements.
const THREAD_STACK: usize = 32 * 1024 * 1024;

/// A client connection handed to a serving thread, with its client slot.
type Handoff = (StdClientStream, OwnedSemaphorePermit);

/// Runs the coordinator until the process ends: thread-per-core. Each thread runs a
/// single-threaded runtime with its own share of the backend pools; the listener
/// deals accepted clients round-robin. A session and its backend sockets never leave
/// their thread, so a routed query costs no cross-thread wake-ups (measured: about
/// a quarter of pgshard's CPU per routed query with one work-stealing runtime).
pub fn run(cfg: Config) -> anyhow::Result<()> {
    let threads = cfg.runtime_threads();
    let mut dealers = Vec::new();
    let mut serving = Vec::new();
    let mut shared_txs = Vec::new();
    for i in 1..threads {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Handoff>();
        let (stx, srx) = std::sync::mpsc::channel::<Arc<Shared>>();
        dealers.push(tx);
        shared_txs.push(stx);
        serving.push(
            std::thread::Builder::new()
                .name(format!("pgshard-{i}"))
                .stack_size(THREAD_STACK)
                .spawn(move || serve_thread(i, rx, srx))?,
        );
    }
    // Thread 0 (this one, with a big stack of its own) runs the listener, the
    // catalog cache and background work, and serves clients too.
    let main = std::thread::Builder::new()
        .name("pgshard-0".into())
        .stack_size(THREAD_STACK)
        .spawn(move || -> anyhow::Result<()> {
            crate::backend::pool::set_runtime_index(0);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let shared = start(cfg.clone()).await?;
                for stx in &shared_txs {
                    let _ = stx.send(shared.clone());
                }
                listen(shared, dealers).await
            })
        })?;
    let r = main
        .join()
        .map_err(|_| anyhow::anyhow!("the listener thread panicked"))?;
    // Serving threads end when the listener's dealers are gone.
    drop(serving);
    r
}

/// One serving thread: spawns the sessions of the clients dealt to it.
fn serve_thread(
    index: usize,
    mut clients: tokio::sync::mpsc::UnboundedReceiver<Handoff>,
    shared: std::sync::mpsc::Receiver<Arc<Shared>>,
) {
    crate::backend::pool::set_runtime_index(index);
    let Ok(shared) = shared.recv() else { return };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("serving thread {index} has no runtime: {e}");
            return;
        }
    };
    rt.block_on(async move {
        while let Some((stream, permit)) = clients.recv().await {
            match stream.into_tokio() {
                Ok(stream) => spawn_session(shared.clone(), stream, permit),
                Err(e) => tracing::warn!("cannot adopt a client socket: {e}"),
            }
        }
    });
}

/// Loads the catalog and opens the shared state.
async fn start(cfg: Config) -> anyhow::Result<Arc<Shared>> {
    let cfg = Arc::new(cfg);
    crate::backend::tls::configure(cfg.node_sslmode);
    crate::backend::health::configure(&cfg);
    for warning in hba::warnings(&cfg.hba, cfg.ssl) {
        tracing::warn!("{warning}");
    }
    // The coordinator node's address now: the configured one, or a standby promoted
    // while this process was down.
    crate::failover::coordinator::init(&cfg);
    crate::failover::coordinator::follow_at_start(&cfg).await;
    let catalog = CatalogCache::start(cfg.clone())
        .await
        .map_err(|e| anyhow::anyhow!("catalog: {e}"))?;
    check_workers(&catalog).await;
    let shared = Shared::new(cfg.clone(), catalog)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    start_transaction_services(&shared).await;
    crate::failover::monitor::start(shared.catalog.clone());
    if let Some(addr) = &cfg.metrics_listen {
        crate::metrics::endpoint::start(addr, &shared)
            .await
            .map_err(|e| anyhow::anyhow!("metrics_listen {addr}: {e}"))?;
    }
    Ok(shared)
}

/// Accepts clients and deals them to the serving threads (this one included).
async fn listen(
    shared: Arc<Shared>,
    dealers: Vec<tokio::sync::mpsc::UnboundedSender<Handoff>>,
) -> anyhow::Result<()> {
    let cfg = shared.cfg.clone();
    let listener = TcpListener::bind((cfg.listen_host.as_str(), cfg.listen_port)).await?;
    let unix = match &cfg.unix_socket_directory {
        Some(dir) => {
            let path = client_stream::socket_path(dir, cfg.listen_port);
            let l = client_stream::bind_unix(&path).map_err(|e| {
                anyhow::anyhow!("cannot listen on Unix socket {}: {e}", path.display())
            })?;
            tracing::info!("pgshard listening on Unix socket {}", path.display());
            Some(l)
        }
        None => None,
    };
    tracing::info!(
        "pgshard listening on {}:{} ({} serving threads)",
        cfg.listen_host,
        cfg.listen_port,
        dealers.len() + 1
    );
    let slots = Arc::new(Semaphore::new(cfg.max_client_connections));
    let mut next = 0usize;
    // SIGTERM or SIGINT ends pgshard; its socket file goes with it, as PostgreSQL's.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r.map(|(s, _)| ClientStream::Tcp(s)),
            r = accept_unix(unix.as_ref()) => r.map(|(s, _)| ClientStream::Unix(s)),
            _ = term.recv() => break,
            _ = int.recv() => break,
        };
        let stream = match accepted {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let permit = match slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                tokio::spawn(refuse_client(stream));
                continue;
            }
        };
        // Round-robin over this thread (0) and the dealers (1..).
        let turn = next;
        next = (next + 1) % (dealers.len() + 1);
        if turn == 0 {
            spawn_session(shared.clone(), stream, permit);
            continue;
        }
        let handoff = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot hand a client socket over: {e}");
                continue;
            }
        };
        if let Err(tokio::sync::mpsc::error::SendError((s, permit))) =
            dealers[turn - 1].send((handoff, permit))
        {
            // That thread is gone: serve the client here.
            if let Ok(stream) = s.into_tokio() {
                spawn_session(shared.clone(), stream, permit);
            }
        }
    }
    if let Some(dir) = &cfg.unix_socket_directory {
        let _ = std::fs::remove_file(client_stream::socket_path(dir, cfg.listen_port));
    }
    tracing::info!("pgshard stops (signal received)");
    Ok(())
}

/// A client from the Unix socket, if pgshard listens on one (else never).
async fn accept_unix(
    unix: Option<&tokio::net::UnixListener>,
) -> std::io::Result<(tokio::net::UnixStream, tokio::net::unix::SocketAddr)> {
    match unix {
        Some(u) => u.accept().await,
        None => std::future::pending().await,
    }
}

fn spawn_session(shared: Arc<Shared>, stream: ClientStream, permit: OwnedSemaphorePermit) {
    tokio::spawn(async move {
        let _permit = permit;
        if let Err(e) = handle_client(shared, stream).await {
            tracing::debug!("client ended: {e}");
        }
    });
}

async fn refuse_client(stream: ClientStream) {
    let (_rd, mut wr) = stream.into_split();
    let mut out = BytesMut::new();
    msg::write_error(
        &mut out,
        &PgError::fatal(
            sqlstate::TOO_MANY_CONNECTIONS,
            "sorry, too many clients already",
        ),
    );
    let _ = wr.write_all(&out).await;
}

/// The liveness lock first (so that no other process takes this one's transactions
/// for a dead one's), then recovery of prepared transactions (at once and
/// periodically) and distributed deadlock detection.
async fn start_transaction_services(shared: &Arc<Shared>) {
    use crate::transaction::{deadlock, recovery};
    use std::time::Duration;
    recovery::hold_liveness_lock(shared.catalog.clone()).await;
    let cfg = &shared.cfg;
    match recovery::recover(&shared.catalog).await {
        Ok(n) if n > 0 => tracing::info!("recovered {n} prepared transactions at start-up"),
        Ok(_) => {}
        Err(e) => tracing::warn!("recovery of prepared transactions at start-up: {e}"),
    }
    if cfg.recovery_interval_secs > 0 {
        let every = Duration::from_secs(cfg.recovery_interval_secs);
        let cache = shared.catalog.clone();
        tokio::spawn(async move {
            tokio::time::sleep(every).await;
            recovery::start_periodic(cache, every);
        });
    }
    if cfg.deadlock_detection_interval_ms > 0 {
        let weak = Arc::downgrade(shared);
        deadlock::start(
            cfg.clone(),
            Duration::from_millis(cfg.deadlock_detection_interval_ms),
            move || {
                let Some(shared) = weak.upgrade() else {
                    return Vec::new();
                };
                // A session is numbered by its cancel key: the same from call to call.
                let sessions: Vec<_> = shared
                    .cancel_keys
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|(&(pid, key), targets)| {
                        let id = ((pid as u32 as u64) << 32) | key as u32 as u64;
                        (id as usize, targets.backends.clone())
                    })
                    .collect();
                let mut held = Vec::new();
                for (id, running) in &sessions {
                    for (addr, pid, _) in running.lock().unwrap().iter() {
                        held.push((*id, addr.clone(), *pid));
                    }
                }
                held
            },
            {
                let catalog = shared.catalog.clone();
                move || {
                    catalog
                        .snapshot()
                        .workers
                        .iter()
                        .map(|w| crate::backend::NodeAddr {
                            host: w.host.clone(),
                            port: w.port,
                        })
                        .collect()
                }
            },
        );
    }
}

/// Warns about workers lacking what multi-shard transactions need.
async fn check_workers(catalog: &Arc<CatalogCache>) {
    let snapshot = catalog.snapshot();
    for w in &snapshot.workers {
        match crate::backend::control::connect(catalog.config(), &w.host, w.port).await {
            Ok(c) => {
                if let Ok(row) = c
                    .query_one(
                        "SELECT current_setting('max_prepared_transactions')::int",
                        &[],
                    )
                    .await
                {
                    let n: i32 = row.get(0);
                    if n == 0 {
                        tracing::warn!(
                            "worker {}:{} has max_prepared_transactions = 0: transactions writing on several workers will fail; set it (e.g. 200) and restart that server",
                            w.host,
                            w.port
                        );
                    }
                }
            }
            Err(e) => tracing::warn!("worker {}:{} is not reachable: {e}", w.host, w.port),
        }
    }
}

/// The read half of a client connection and what has arrived but is not handled yet.
pub struct ClientReader {
    rd: ClientRead,
    pub buf: BytesMut,
}

impl ClientReader {
    pub async fn fill(&mut self) -> PgResult<bool> {
        self.buf.reserve(8192);
        match self.rd.read_buf(&mut self.buf).await {
            Ok(0) => Ok(false),
            Ok(_) => Ok(true),
            Err(e) => Err(PgError::new(sqlstate::CONNECTION_FAILURE, e.to_string())),
        }
    }

    /// Whether a complete message is buffered already.
    pub fn has_frame(&self) -> bool {
        self.buf.len() >= 5
            && self.buf.len() >= 1 + u32::from_be_bytes(self.buf[1..5].try_into().unwrap()) as usize
    }

    /// The next complete message, or None at end of stream.
    pub async fn frame(&mut self) -> PgResult<Option<msg::Frame>> {
        loop {
            if let Some(f) = msg::decode_frame(&mut self.buf, MAX_MESSAGE_LEN)? {
                return Ok(Some(f));
            }
            if !self.fill().await? {
                return Ok(None);
            }
        }
    }
}

async fn send(stream: &mut ClientWrite, out: &mut BytesMut) -> PgResult<()> {
    let r = match stream.write_all(out).await {
        Ok(()) => stream.flush().await,
        Err(e) => Err(e),
    };
    out.clear();
    r.map_err(|e| PgError::new(sqlstate::CONNECTION_FAILURE, e.to_string()))
}

async fn fatal(wr: &mut ClientWrite, e: PgError) -> PgResult<()> {
    let mut out = BytesMut::new();
    msg::write_error(
        &mut out,
        &PgError {
            severity: "FATAL",
            raw: None,
            ..e.clone()
        },
    );
    let _ = send(wr, &mut out).await;
    Err(e)
}

async fn handle_client(shared: Arc<Shared>, stream: ClientStream) -> PgResult<()> {
    let _counted = crate::metrics::client_connected();
    // --- TLS and authentication (frontend::tls, frontend::hba) ---
    let peer = stream
        .peer_ip()
        .map_err(|e| PgError::new(sqlstate::CONNECTION_FAILURE, e.to_string()))?;
    let mut encrypted = false;
    // --- end TLS and authentication ---
    let (rd, mut wr) = stream.into_split();
    let mut reader = ClientReader {
        rd,
        buf: BytesMut::with_capacity(8192),
    };
    // Startup: an SSLRequest over TCP is answered 'S' and TLS begins when `ssl` is on,
    // 'N' otherwise (the client goes on in clear); GSSENCRequest is always 'N'.
    let params = loop {
        let packet = loop {
            // Read before decoding consumes the packet: how to word a refusal.
            let major = msg::requested_major(&reader.buf);
            match msg::decode_startup(&mut reader.buf) {
                Ok(Some(p)) => break p,
                Ok(None) => {
                    if !reader.fill().await? {
                        return Ok(());
                    }
                }
                Err(e) => {
                    tracing::warn!(client = %client_address(peer), "refused startup packet: {}", e.message);
                    // As PostgreSQL: a bad length is only logged, other refusals are
                    // FATAL errors the client gets.
                    if e.severity == msg::LOG_ONLY {
                        return Err(e);
                    }
                    let mut out = BytesMut::new();
                    let e = PgError {
                        severity: "FATAL",
                        raw: None,
                        ..e
                    };
                    msg::write_startup_error(&mut out, &e, major);
                    let _ = send(&mut wr, &mut out).await;
                    return Err(e);
                }
            }
        };
        match packet {
            // --- TLS and authentication ---
            StartupPacket::SslRequest if peer.is_some() && !encrypted => {
                let Some(acceptor) = &shared.client_tls else {
                    send(&mut wr, &mut BytesMut::from(&b"N"[..])).await?;
                    continue;
                };
                // Bytes sent before the handshake would be taken as encrypted ones
                // (CVE-2021-23214): PostgreSQL's refusal.
                if !reader.buf.is_empty() {
                    return fatal(
                        &mut wr,
                        PgError::fatal(
                            sqlstate::PROTOCOL_VIOLATION,
                            "received unencrypted data after SSL request",
                        ),
                    )
                    .await;
                }
                send(&mut wr, &mut BytesMut::from(&b"S"[..])).await?;
                (reader.rd, wr) =
                    super::tls::upgrade(acceptor, reader.rd, wr)
                        .await
                        .map_err(|e| {
                            PgError::new(
                                sqlstate::CONNECTION_FAILURE,
                                format!("could not accept SSL connection: {e}"),
                            )
                        })?;
                encrypted = true;
            }
            StartupPacket::SslRequest | StartupPacket::GssEncRequest => {
                send(&mut wr, &mut BytesMut::from(&b"N"[..])).await?;
            }
            // --- end TLS and authentication ---
            StartupPacket::Cancel {
                process_id,
                secret_key,
            } => {
                cancel(&shared, process_id, secret_key).await;
                return Ok(());
            }
            StartupPacket::Startup {
                mut params,
                minor,
                protocol_options,
            } => {
                // As PostgreSQL 15: a newer 3.x or unknown `_pq_.` options get
                // NegotiateProtocolVersion, and the session goes on in 3.0.
                if minor > 0 || !protocol_options.is_empty() {
                    let mut out = BytesMut::new();
                    msg::write_negotiate_protocol_version(&mut out, &protocol_options);
                    send(&mut wr, &mut out).await?;
                }
                for (name, value) in params.iter_mut() {
                    if name == "user" || name == "database" {
                        *value = msg::startup_name(value);
                    }
                }
                break params;
            }
        }
    };
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let Some(user) = get("user") else {
        return fatal(
            &mut wr,
            PgError::new(
                sqlstate::INVALID_AUTHORIZATION,
                "no PostgreSQL user name specified in startup packet",
            ),
        )
        .await;
    };
    let database = get("database").unwrap_or_else(|| user.clone());
    // --- TLS and authentication: the first matching hba rule decides, then the
    // database is checked, as PostgreSQL does (ClientAuthentication, then InitPostgres).
    let connection = hba::Connection {
        address: peer,
        encrypted,
        database: &database,
        user: &user,
    };
    // The secret pgshard logs into the nodes with as this client: the keys of its
    // SCRAM login, or (trusted) pgshard's own role switched to the client's.
    let secret = match hba::decide(&shared.cfg.hba, shared.cfg.auth, &connection) {
        Decision::ScramSha256 => {
            match authenticate(&shared, &user, peer, &mut reader, &mut wr).await {
                Ok(keys) => Secret::ScramKeys(keys),
                Err(e) => return fatal(&mut wr, e).await,
            }
        }
        Decision::Trust => Secret::TrustedAs {
            own_user: shared.cfg.user.clone(),
            password: shared.cfg.password.clone(),
        },
        Decision::Refuse(e) => {
            tracing::info!("{}", e.message);
            return fatal(&mut wr, e).await;
        }
    };
    // --- end TLS and authentication ---
    if database != shared.cfg.database {
        return fatal(
            &mut wr,
            PgError::new("3D000", format!("database \"{database}\" does not exist")),
        )
        .await;
    }
    let mut out = BytesMut::new();
    let creds = Arc::new(Credentials {
        user: user.clone(),
        database: database.clone(),
        secret,
    });
    // The client's own backend on the coordinator node, as the client: its pid and
    // key are the client's BackendKeyData, its reports the client's.
    // PostgreSQL applies `options` after authentication and fails the connection on a
    // bad one, before ReadyForQuery.
    let option_settings = match startup_options::settings(&get("options").unwrap_or_default()) {
        Ok(settings) => settings,
        Err(e) => return fatal(&mut wr, e).await,
    };
    let (identity, home) = match open_home(&shared, creds, &params, &option_settings).await {
        Ok(x) => x,
        Err(e) => return fatal(&mut wr, e).await,
    };
    msg::write_auth_ok(&mut out);
    for (k, v) in &shared.server_params {
        let client_value = get(k).filter(|_| {
            matches!(
                k.as_str(),
                "client_encoding" | "DateStyle" | "TimeZone" | "IntervalStyle"
            )
        });
        msg::write_parameter_status(&mut out, k, client_value.as_deref().unwrap_or(v));
    }
    for (k, v) in &home.parameters {
        if matches!(
            k.as_str(),
            "application_name" | "session_authorization" | "is_superuser"
        ) {
            msg::write_parameter_status(&mut out, k, v);
        }
    }
    let (pid, key) = (home.process_id, home.secret_key);
    shared
        .cancel_keys
        .lock()
        .unwrap()
        .insert((pid, key), CancelTargets::default());
    // BackendKeyData and ReadyForQuery follow the statuses of `options` settings.
    let mut ready = BytesMut::new();
    msg::write_backend_key_data(&mut ready, pid, key);
    msg::write_ready_for_query(&mut ready, b'I');
    let targets = shared
        .cancel_keys
        .lock()
        .unwrap()
        .get(&(pid, key))
        .cloned()
        .unwrap();
    let mut session = Session::new(shared.clone(), identity, wr, reader, &params, targets);
    let reported = match session.apply_startup_options(&option_settings).await {
        Ok(reported) => reported,
        Err(e) => {
            shared.cancel_keys.lock().unwrap().remove(&(pid, key));
            msg::write_error(
                &mut session.out,
                &PgError {
                    severity: "FATAL",
                    raw: None,
                    ..e.clone()
                },
            );
            let _ = session.flush_client().await;
            session.close();
            return Err(e);
        }
    };
    // A later ParameterStatus of the same name replaces the earlier one for the client.
    for (name, value) in &reported {
        msg::write_parameter_status(&mut out, name, value);
    }
    out.extend_from_slice(&ready);
    session.out.extend_from_slice(&out);
    let result = match session.flush_client().await {
        Ok(()) => client_loop(&mut session).await,
        Err(e) => Err(e),
    };
    session.close();
    shared.cancel_keys.lock().unwrap().remove(&(pid, key));
    result
}

async fn client_loop(session: &mut Session) -> PgResult<()> {
    loop {
        if session.home_lost() {
            // Its own backend on the coordinator node is gone (pg_terminate_backend,
            // a crash): the client's connection ends, as PostgreSQL's would.
            let e = PgError::fatal(
                sqlstate::ADMIN_SHUTDOWN,
                "terminating connection because its backend on the coordinator node ended",
            );
            session.write_client_error(&e);
            let _ = session.flush_client().await;
            return Err(e);
        }
        let frame = match session.next_client_frame().await {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(()),
            Err(e) => {
                session.write_client_error(&e);
                let _ = session.flush_client().await;
                return Err(e);
            }
        };
        if !session.handle(frame).await? {
            return Ok(());
        }
        if session.client_ended() {
            // The client was sent its own backend's FATAL: its connection ends here.
            let _ = session.flush_client().await;
            return Ok(());
        }
        // Answers go out once every message already received is handled.
        if session.reader.buf.len() < 5 {
            session.flush_client().await?;
        }
    }
}

async fn cancel(shared: &Shared, process_id: i32, secret_key: i32) {
    let targets = shared
        .cancel_keys
        .lock()
        .unwrap()
        .get(&(process_id, secret_key))
        .cloned();
    if let Some(t) = targets {
        if let Some((mux, batch)) = t.pipelined.lock().unwrap().clone() {
            mux.cancel(batch);
        }
        let backends = t.backends.lock().unwrap().clone();
        for (addr, pid, key) in backends {
            crate::backend::BackendConn::cancel(&addr, pid, key).await;
        }
    }
}

/// The stored SCRAM verifier of a role, read from the coordinator node.
async fn verifier_of(shared: &Shared, user: &str) -> Option<ScramVerifier> {
    let sql = format!(
        "SELECT rolpassword FROM pg_catalog.pg_authid WHERE rolname = {} AND rolcanlogin AND (rolvaliduntil IS NULL OR rolvaliduntil > now())",
        quote_literal(user)
    );
    // A pooled connection may be stale (the coordinator node restarted): the failed
    // one is discarded, with its pool's other idle ones, and a fresh one asked again.
    for _ in 0..2 {
        if let Ok(found) = stored_password(shared, &sql).await {
            return found.and_then(|s| ScramVerifier::parse(&s));
        }
    }
    None
}

/// The role's stored password, or Err when the coordinator node did not answer.
async fn stored_password(shared: &Shared, sql: &str) -> PgResult<Option<String>> {
    let mut conn = shared.pools.node(&shared.coordinator).acquire().await?;
    Ok(conn.simple_column(sql).await?.into_iter().next())
}

/// The client's address for the log: its IP address, or `[local]` on the Unix socket.
fn client_address(peer: Option<std::net::IpAddr>) -> String {
    peer.map_or_else(|| "[local]".to_string(), |ip| ip.to_string())
}

/// SCRAM-SHA-256 of `user` against the role's verifier on the coordinator node; on
/// success, the keys that let pgshard log into the nodes as this client. A failure
/// is logged with the user and the client's address (never anything of the
/// password). An unknown user costs what a known one does: one stored-verifier
/// lookup and a handful of HMACs, no key derivation (the client does that), and
/// nothing is kept per attempt.
async fn authenticate(
    shared: &Shared,
    user: &str,
    peer: Option<std::net::IpAddr>,
    reader: &mut ClientReader,
    wr: &mut ClientWrite,
) -> PgResult<ClientKeys> {
    let r = scram_exchange(shared, user, reader, wr).await;
    if let Err(e) = &r {
        tracing::warn!(
            user = ?user,
            client = %client_address(peer),
            sqlstate = %e.code,
            message = ?e.message,
            "authentication failed"
        );
    }
    r
}

async fn scram_exchange(
    shared: &Shared,
    user: &str,
    reader: &mut ClientReader,
    wr: &mut ClientWrite,
) -> PgResult<ClientKeys> {
    let failed = || {
        PgError::fatal(
            sqlstate::INVALID_PASSWORD,
            format!("password authentication failed for user \"{user}\""),
        )
    };
    let verifier = verifier_of(shared, user)
        .await
        .unwrap_or_else(|| auth::mock_verifier(user));
    let mut server = ScramServer::new(verifier);
    let mut out = BytesMut::new();
    msg::write_auth(&mut out, &auth::sasl_mechanisms_body());
    send(wr, &mut out).await?;
    let map = |e: auth::AuthError| {
        if e.sqlstate() == "28P01" {
            failed()
        } else {
            PgError::fatal(e.sqlstate(), e.to_string())
        }
    };
    let f = sasl_response(reader, failed).await?;
    let (mechanism, data) = auth::parse_sasl_initial_response(&f.body).map_err(map)?;
    auth::check_mechanism(&mechanism).map_err(map)?;
    let server_first = server.client_first(&data).map_err(map)?;
    msg::write_auth(&mut out, &auth::sasl_continue_body(&server_first));
    send(wr, &mut out).await?;
    let f = sasl_response(reader, failed).await?;
    let server_final = server.client_final(&f.body).map_err(map)?;
    msg::write_auth(&mut out, &auth::sasl_final_body(&server_final));
    send(wr, &mut out).await?;
    server
        .client_keys()
        .ok_or_else(|| PgError::internal("SCRAM keys missing after a successful exchange"))
}

/// The client's next SASL message ('p').
async fn sasl_response(
    reader: &mut ClientReader,
    failed: impl Fn() -> PgError,
) -> PgResult<msg::Frame> {
    let Some(f) = reader.frame().await? else {
        return Err(failed());
    };
    if f.tag != b'p' {
        return Err(PgError::fatal(
            sqlstate::PROTOCOL_VIOLATION,
            "expected SASL response",
        ));
    }
    Ok(f)
}
