//! A pipelined connection to one node, shared by the sessions of one serving thread.
//!
//! Why: most of pgshard's CPU per routed query is the kernel waking the process at
//! the other end of each send (measured with perf, docs/ARCHITECTURE.md). A session
//! with its own pooled connection pays one send and one receive to the node per
//! query. Here every session that is ready at the same moment appends its complete
//! batch (Parse?, Bind, Describe?, Execute, Sync) to one buffer, and one writer task
//! sends them all with one write; one reader task splits the answers and hands each
//! session its own. PostgreSQL answers pipelined batches in order, each ending with
//! its own ReadyForQuery, and an error discards messages only up to its batch's
//! Sync, so the batches of different sessions cannot affect each other's results.
//!
//! Only autocommit reads go this way (the session decides, `executor::session`): they
//! leave nothing behind and wait on no row lock, so they cannot be part of a
//! distributed deadlock. The connection carries the sessions' settings (one per
//! settings fingerprint). A batch that runs long holds up the batches queued behind
//! it, so a connection whose oldest batch has waited longer than `STALL` takes no new
//! ones: sessions then use their own pooled connection.
//!
//! A lost connection (its backend ended, its node restarted) gives every waiting
//! session an error and nothing of its batch, so the session runs its read again on
//! its own connection (`executor::session::pipelined`); a node silent with a batch
//! waiting for `node_timeout_ms` is probed (`health`) and, when unresponsive, fails
//! the batches with that error instead.
//!
//! Cancelling: a CancelRequest reaches whatever the shared backend runs when it
//! arrives, so it is sent only once the batch to cancel is the one running; if that
//! batch ended meanwhile and the cancel hits the next one, that batch (a read, rolled
//! back by the error) is queued again, and its session never sees the error.

use super::conn::{BackendConn, NodeAddr, NodeStream};
use crate::error::{sqlstate, PgError, PgResult};
use crate::frontend::messages::{decode_frame, Frame};
use bytes::Bytes;
use bytes::BytesMut;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit};

/// A connection whose oldest queued batch is older than this takes no new batches.
const STALL: Duration = Duration::from_millis(10);
/// Most batches queued on one connection at once.
const MAX_QUEUED: usize = 64;
/// Most different settings fingerprints with a pipelined connection, per node and
/// serving thread (each holds one of the node's pool slots for good).
const MAX_PER_NODE: usize = 4;

/// The answer to one batch: its messages up to and including ReadyForQuery.
pub type Reply = oneshot::Receiver<PgResult<Vec<Frame>>>;

pub struct Mux {
    pub addr: NodeAddr,
    /// The backend's process id and secret key, for CancelRequest.
    backend_key: (i32, i32),
    state: Mutex<State>,
    wake_writer: Notify,
}

struct State {
    /// Batches not yet written.
    wbuf: BytesMut,
    /// Sessions waiting for answers, in the order their batches were queued.
    waiting: VecDeque<Waiter>,
    /// Backend statement ids prepared on this connection (or queued to be).
    prepared: HashSet<u64>,
    max_prepared: usize,
    broken: bool,
    next_batch: u64,
}

struct Waiter {
    batch: u64,
    reply: oneshot::Sender<PgResult<Vec<Frame>>>,
    /// The batch's messages, to queue it again after a cancel meant for another.
    request: Bytes,
    /// The batch starts with a Parse of this statement id.
    parse_id: Option<u64>,
    since: Instant,
    /// Its session asked to cancel it; and whether the CancelRequest went out.
    cancel: bool,
    cancel_sent: bool,
}

impl Mux {
    /// Takes over a connection (and its pool slot) and starts its reader and writer.
    pub fn start(conn: BackendConn, permit: OwnedSemaphorePermit, max_prepared: usize) -> Arc<Mux> {
        let backend_key = (conn.process_id, conn.secret_key);
        let (addr, stream, rbuf, prepared) = conn.into_parts();
        let mux = Arc::new(Mux {
            addr,
            backend_key,
            state: Mutex::new(State {
                wbuf: BytesMut::with_capacity(8 * 1024),
                waiting: VecDeque::new(),
                prepared,
                max_prepared,
                broken: false,
                next_batch: 0,
            }),
            wake_writer: Notify::new(),
        });
        tracing::info!(
            "pipelined connection to node {} opened for routed reads",
            mux.addr
        );
        let (rd, wr) = tokio::io::split(stream);
        tokio::spawn(read_loop(mux.clone(), rd, rbuf, permit));
        tokio::spawn(write_loop(mux.clone(), wr));
        mux
    }

    /// Queues one batch, which `write` appends to the connection's buffer and which
    /// must end with Sync (or be one simple Query); for a batch using prepared
    /// statement `id`, `write` is told whether it still needs a Parse (it must then
    /// write one first). None when the connection takes no batch now (broken, stalled,
    /// full): the caller uses a connection of its own. The batch's number is for
    /// `cancel`.
    pub fn submit(
        &self,
        id: Option<u64>,
        write: impl FnOnce(&mut BytesMut, bool),
    ) -> Option<(Reply, u64)> {
        let mut s = self.state.lock().unwrap();
        if s.broken || s.waiting.len() >= MAX_QUEUED {
            return None;
        }
        let now = Instant::now();
        if s.waiting.front().is_some_and(|w| now - w.since > STALL) {
            return None;
        }
        let parse_id = id.filter(|id| !s.prepared.contains(id));
        if let Some(id) = parse_id {
            if s.prepared.len() >= s.max_prepared {
                return None;
            }
            s.prepared.insert(id);
        }
        let start = s.wbuf.len();
        write(&mut s.wbuf, parse_id.is_some());
        let request = Bytes::copy_from_slice(&s.wbuf[start..]);
        let (tx, rx) = oneshot::channel();
        s.next_batch += 1;
        let batch = s.next_batch;
        s.waiting.push_back(Waiter {
            batch,
            reply: tx,
            request,
            parse_id,
            since: now,
            cancel: false,
            cancel_sent: false,
        });
        drop(s);
        self.wake_writer.notify_one();
        Some((rx, batch))
    }

    /// Cancels batch `batch` if it has not been answered yet: now if it is the one
    /// running, else once it is.
    pub fn cancel(&self, batch: u64) {
        let mut s = self.state.lock().unwrap();
        if let Some(w) = s.waiting.iter_mut().find(|w| w.batch == batch) {
            w.cancel = true;
        }
        self.cancel_head(&mut s);
    }

    /// Sends a CancelRequest if the batch now running was asked to be cancelled.
    fn cancel_head(&self, s: &mut State) {
        if let Some(w) = s.waiting.front_mut() {
            if w.cancel && !w.cancel_sent {
                w.cancel_sent = true;
                let (addr, (pid, key)) = (self.addr.clone(), self.backend_key);
                tokio::spawn(async move { BackendConn::cancel(&addr, pid, key).await });
            }
        }
    }

    /// How long the oldest batch not answered yet has waited.
    fn oldest_wait(&self) -> Option<Duration> {
        let s = self.state.lock().unwrap();
        s.waiting.front().map(|w| w.since.elapsed())
    }

    fn is_broken(&self) -> bool {
        self.state.lock().unwrap().broken
    }

    /// The connection is unusable: every waiting session gets `e`.
    fn fail(&self, e: PgError) {
        let waiting = {
            let mut s = self.state.lock().unwrap();
            s.broken = true;
            s.wbuf.clear();
            std::mem::take(&mut s.waiting)
        };
        for w in waiting {
            let _ = w.reply.send(Err(e.clone()));
        }
        self.wake_writer.notify_one();
    }

    /// Hands one complete answer to the session that queued the oldest batch.
    fn deliver(&self, frames: Vec<Frame>) {
        let mut s = self.state.lock().unwrap();
        let Some(mut w) = s.waiting.pop_front() else {
            // Nobody asked (a notice between batches): nothing to deliver it to.
            return;
        };
        let parsed = frames.first().map(|f| f.tag) == Some(b'1');
        if let Some(id) = w.parse_id {
            if !parsed {
                s.prepared.remove(&id);
            }
        }
        if !w.cancel && frames.iter().any(is_query_canceled) {
            // Hit by a cancel meant for the batch before it: queued again, without
            // its Parse if that went through.
            if parsed && w.parse_id.is_some() {
                if let Some((_, _, len)) = crate::frontend::messages::peek_frame(&w.request) {
                    w.request = w.request.slice(len..);
                }
                w.parse_id = None;
            } else if let Some(id) = w.parse_id {
                s.prepared.insert(id);
            }
            let request = w.request.clone();
            s.wbuf.extend_from_slice(&request);
            w.since = Instant::now();
            s.waiting.push_back(w);
            self.cancel_head(&mut s);
            drop(s);
            self.wake_writer.notify_one();
            return;
        }
        self.cancel_head(&mut s);
        // Every batch is one implicit transaction; one left open would leak into the
        // next session's batch.
        let idle = frames
            .last()
            .is_some_and(|z| z.tag == b'Z' && z.body.first() == Some(&b'I'));
        drop(s);
        let _ = w.reply.send(Ok(frames));
        if !idle {
            self.fail(PgError::new(
                sqlstate::CONNECTION_FAILURE,
                format!(
                    "pipelined connection to node {} left a transaction open",
                    self.addr
                ),
            ));
        }
    }
}

/// Splits the answers off the connection and delivers them, batch by batch.
async fn read_loop(
    mux: Arc<Mux>,
    mut rd: ReadHalf<NodeStream>,
    mut rbuf: BytesMut,
    _slot: OwnedSemaphorePermit,
) {
    let mut frames = Vec::new();
    let limit = super::health::settings().unresponsive;
    let mut silence = limit.map(super::silence::SilenceTimer::new);
    let mut last_read = Instant::now();
    loop {
        loop {
            match decode_frame(&mut rbuf, usize::MAX >> 1) {
                Ok(Some(f)) => {
                    let end = f.tag == b'Z';
                    frames.push(f);
                    if end {
                        mux.deliver(std::mem::take(&mut frames));
                    }
                }
                Ok(None) => break,
                Err(e) => return mux.fail(e),
            }
        }
        if mux.is_broken() {
            return;
        }
        if rbuf.capacity() - rbuf.len() < 4096 {
            rbuf.reserve(16 * 1024);
        }
        let read = match (limit, silence.as_mut()) {
            (Some(limit), Some(timer)) => tokio::select! {
                biased;
                read = rd.read_buf(&mut rbuf) => read,
                _ = timer.elapsed(last_read) => {
                    // Silent for `node_timeout_ms`: unresponsive if a batch waits on it
                    // and the node answers no new connection either (`health`).
                    if mux.oldest_wait().is_some_and(|w| w >= limit)
                        && !super::health::answers(&mux.addr).await
                    {
                        return mux.fail(super::health::unresponsive_error(&mux.addr));
                    }
                    last_read = Instant::now();
                    continue;
                }
            },
            _ => rd.read_buf(&mut rbuf).await,
        };
        last_read = Instant::now();
        match read {
            Ok(n) if n > 0 => {}
            Ok(_) => return mux.fail(lost(&mux.addr, "closed unexpectedly")),
            Err(e) => return mux.fail(lost(&mux.addr, &e.to_string())),
        }
    }
}

/// Writes whatever batches were queued since its last write, in one go.
async fn write_loop(mux: Arc<Mux>, mut wr: WriteHalf<NodeStream>) {
    let mut buf = BytesMut::with_capacity(8 * 1024);
    loop {
        mux.wake_writer.notified().await;
        // Once more round the runtime's I/O poll first: sessions whose clients' queries
        // arrived meanwhile queue theirs too, and go out in the same write.
        tokio::task::yield_now().await;
        {
            let mut s = mux.state.lock().unwrap();
            if s.broken {
                return;
            }
            std::mem::swap(&mut buf, &mut s.wbuf);
        }
        if buf.is_empty() {
            continue;
        }
        // flush: a TLS stream may hold encrypted bytes back otherwise.
        let written = match wr.write_all(&buf).await {
            Ok(()) => wr.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            return mux.fail(lost(&mux.addr, &e.to_string()));
        }
        buf.clear();
    }
}

/// An ErrorResponse saying "canceling statement due to user request" (57014).
fn is_query_canceled(f: &Frame) -> bool {
    if f.tag != b'E' {
        return false;
    }
    let mut rest = &f.body[..];
    while let Some((&field, tail)) = rest.split_first() {
        if field == 0 {
            break;
        }
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        if field == b'C' {
            return &tail[..end] == b"57014";
        }
        rest = tail.get(end + 1..).unwrap_or(&[]);
    }
    false
}

fn lost(addr: &NodeAddr, why: &str) -> PgError {
    PgError::new(
        sqlstate::CONNECTION_FAILURE,
        format!("connection to node {addr} lost: {why}"),
    )
}

/// A serving thread's pipelined connection to a node for one settings fingerprint.
pub enum Lookup {
    Ready(Arc<Mux>),
    /// None yet: the caller may open one (`open`); it is marked as being opened.
    Open,
    /// Being opened by another session, or the per-node limit is reached.
    Unavailable,
}

enum Slot {
    Opening,
    Ready(Arc<Mux>),
}

thread_local! {
    /// Sessions never leave their serving thread, and neither do these connections.
    /// Per node, at most `MAX_PER_NODE` (settings fingerprint, connection) pairs.
    static MUXES: RefCell<HashMap<NodeAddr, Vec<(u64, Slot)>>> = RefCell::new(HashMap::new());
}

/// The thread's pipelined connection to `addr` for settings fingerprint `fp`.
pub fn lookup(addr: &NodeAddr, fp: u64) -> Lookup {
    MUXES.with(|m| {
        let mut m = m.borrow_mut();
        // Looked up by reference first: the common case allocates nothing.
        let slots = match m.get_mut(addr) {
            Some(slots) => slots,
            None => m.entry(addr.clone()).or_default(),
        };
        slots.retain(|(_, slot)| !matches!(slot, Slot::Ready(mux) if mux.is_broken()));
        match slots.iter().find(|(f, _)| *f == fp) {
            Some((_, Slot::Ready(mux))) => Lookup::Ready(mux.clone()),
            Some((_, Slot::Opening)) => Lookup::Unavailable,
            None if slots.len() >= MAX_PER_NODE => Lookup::Unavailable,
            None => {
                slots.push((fp, Slot::Opening));
                Lookup::Open
            }
        }
    })
}

/// Ends an `Open` from `lookup`: the new connection, or None if it could not be opened.
pub fn opened(addr: &NodeAddr, fp: u64, mux: Option<Arc<Mux>>) {
    MUXES.with(|m| {
        let mut m = m.borrow_mut();
        let Some(slots) = m.get_mut(addr) else { return };
        let Some(at) = slots.iter().position(|(f, _)| *f == fp) else {
            return;
        };
        match mux {
            Some(mux) => slots[at].1 = Slot::Ready(mux),
            None => {
                slots.remove(at);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(fields: &[(u8, &str)]) -> Frame {
        let mut body = Vec::new();
        for (f, v) in fields {
            body.push(*f);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        Frame {
            tag: b'E',
            body: Bytes::from(body),
        }
    }

    #[test]
    fn only_a_cancel_error_counts_as_one() {
        let cancel = error(&[
            (b'S', "ERROR"),
            (b'C', "57014"),
            (b'M', "canceling statement due to user request"),
        ]);
        assert!(is_query_canceled(&cancel));
        let other = error(&[(b'S', "ERROR"), (b'M', "x C57014"), (b'C', "22012")]);
        assert!(!is_query_canceled(&other));
        let row = Frame {
            tag: b'D',
            body: Bytes::from_static(b"C57014\0"),
        };
        assert!(!is_query_canceled(&row));
    }
}
