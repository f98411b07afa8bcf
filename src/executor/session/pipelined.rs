//! Routed reads through the serving thread's pipelined connection (`backend::mux`).
//!
//! A client outside any transaction that sends a whole `Bind [Describe] Execute Sync`
//! batch for a prepared read routed to one shard (pgbench -S, the key lookups of most
//! applications), or a simple Query that is one routed read, needs no connection of
//! its own: its batch is queued on the thread's
//! shared connection to the node, behind those of the other sessions that were ready
//! at the same moment, and written with them in one send. Anything else, or a shared
//! connection that is busy, stalled or broken before the batch is queued, takes the
//! ordinary path, which also reports every error in the ordinary way.
//!
//! A batch left unanswered by a lost pipelined connection runs again on the ordinary
//! path (an autocommit read: safe to repeat), unless its node was found unresponsive.
//!
//! A CancelRequest reaches the batch through `mux::Mux::cancel`. A long batch holds
//! up only the batches queued behind it at that moment (`mux::STALL`).

use super::*;
use crate::backend::mux::{self, Lookup, Mux};
use crate::frontend::messages::peek_frame;

/// `Describe` of the unnamed portal, and `Execute` of it for all rows.
const DESCRIBE_UNNAMED: &[u8] = b"P\0";
const EXECUTE_UNNAMED_ALL: &[u8] = &[0, 0, 0, 0, 0];

/// How many bytes of the client's buffer complete a batch begun by a Bind of the
/// unnamed portal: `[Describe portal ""] Execute "" 0 Sync`, and whether the Describe
/// is there. None for any other shape (including one not fully received yet).
pub(super) fn rest_of_batch(buf: &[u8]) -> Option<(usize, bool)> {
    let (mut tag, mut body, mut len) = peek_frame(buf)?;
    let mut at = 0;
    let describe = tag == b'D';
    if describe {
        if body != DESCRIBE_UNNAMED {
            return None;
        }
        at += len;
        (tag, body, len) = peek_frame(&buf[at..])?;
    }
    if tag != b'E' || body != EXECUTE_UNNAMED_ALL {
        return None;
    }
    at += len;
    let (tag, _, len) = peek_frame(&buf[at..])?;
    (tag == b'S').then_some((at + len, describe))
}

impl Session {
    /// Runs the batch that `bind` begins through the pipelined connection, answering
    /// it up to ReadyForQuery (None). Some: nothing was done, the ordinary path takes
    /// the Bind.
    pub(super) async fn pipelined_read(&mut self, bind: BindMsg) -> PgResult<Option<BindMsg>> {
        if !self.may_pipeline() || !bind.portal.is_empty() {
            return Ok(Some(bind));
        }
        let Some((batch_len, describe)) = rest_of_batch(&self.reader.buf) else {
            return Ok(Some(bind));
        };
        let Ok(stmt) = self.current_statement(&bind.statement).await else {
            return Ok(Some(bind));
        };
        let Plan::Router(r) = &stmt.plan else {
            return Ok(Some(bind));
        };
        if !r.read_only || bind.params.len() != stmt.meta.param_types.len() {
            return Ok(Some(bind));
        }
        let catalog = self.shared.catalog.snapshot();
        let Ok(shard) = route_bound(r, &stmt.meta.param_types, &bind, &catalog) else {
            return Ok(Some(bind));
        };
        let Ok(addr) = placement_addr(&catalog, shard) else {
            return Ok(Some(bind));
        };
        let (id, sql) = self.shard_statement(&stmt, r, shard.shard_id, catalog.version as u64);
        self.activity_started(stmt.text.text.clone());
        if self.stat_track {
            self.count_prepared(&stmt, &bind);
        }
        let Some(mux) = self.mux_for(&addr).await else {
            return Ok(Some(bind));
        };
        let name = backend_name(id);
        let types = &stmt.meta.param_types;
        let queued = mux.submit(Some(id), |w, needs_parse| {
            if needs_parse {
                msg::write_parse(w, &name, &sql, types);
            }
            msg::write_bind(
                w,
                "",
                &name,
                &bind.param_formats,
                &bind.params,
                &bind.result_formats,
            );
            if describe {
                msg::write_describe(w, b'P', "");
            }
            msg::write_execute(w, "", 0);
            msg::write_sync(w);
        });
        let Some(queued) = queued else {
            return Ok(Some(bind));
        };
        let Some(answer) = self.answer_of(&addr, &mux, queued).await else {
            // The connection died before answering: the ordinary path runs the batch.
            return Ok(Some(bind));
        };
        bytes::Buf::advance(&mut self.reader.buf, batch_len);
        // Earlier messages of the batch answered by pgshard itself (ParseComplete).
        while let Some(Expect::Local(b)) = self.pending.pop_front() {
            self.out.extend_from_slice(&b);
        }
        self.forward_answer(&addr, answer);
        self.write_ready_for_query();
        self.flush_client().await?;
        Ok(None)
    }

    /// Runs a routed read sent with the simple protocol (`sql` already names the
    /// shard) through the pipelined connection, answering it up to, not including,
    /// ReadyForQuery. False: nothing was done.
    pub(super) async fn pipelined_simple_read(&mut self, addr: &NodeAddr, sql: &str) -> bool {
        if !self.may_pipeline() {
            return false;
        }
        let Some(mux) = self.mux_for(addr).await else {
            return false;
        };
        let Some(queued) = mux.submit(None, |w, _| msg::write_query(w, sql)) else {
            return false;
        };
        let Some(answer) = self.answer_of(addr, &mux, queued).await else {
            return false;
        };
        self.forward_answer(addr, answer);
        true
    }

    /// Outside any transaction, with nothing of the session's still under way, and
    /// never for a session pinned to connections of its own (`isolation.rs`).
    fn may_pipeline(&self) -> bool {
        self.tx.state == TxnState::Idle
            && !self.tx.implicit_block
            && !self.batch_error
            && self.tx.held.is_empty()
            && self.pending.iter().all(|e| matches!(e, Expect::Local(_)))
            && !self.is_pinned()
    }

    /// The thread's pipelined connection to `addr` for this session's settings, opened
    /// if there is none yet; None if it cannot take batches now.
    async fn mux_for(&mut self, addr: &NodeAddr) -> Option<Arc<Mux>> {
        let key = self.mux_key();
        match mux::lookup(addr, key) {
            Lookup::Ready(m) => Some(m),
            Lookup::Unavailable => None,
            Lookup::Open => {
                let m = self.open_mux(addr).await;
                mux::opened(addr, key, m.clone());
                m
            }
        }
    }

    /// The node's answer to a queued batch. None when the connection was lost
    /// before the batch was answered (ended by its server, or its node restarted):
    /// the batch is an autocommit read, nothing of its answer reached the client, so
    /// the caller runs it again on a connection of its own. Not when the node was
    /// found unresponsive (`backend::health`): that error is the answer.
    async fn answer_of(
        &mut self,
        addr: &NodeAddr,
        mux: &Arc<Mux>,
        (reply, batch): (mux::Reply, u64),
    ) -> Option<PgResult<Vec<Frame>>> {
        *self.pipelined.lock().unwrap() = Some((mux.clone(), batch));
        let answer = reply.await;
        *self.pipelined.lock().unwrap() = None;
        match answer {
            Ok(Ok(frames)) => Some(Ok(frames)),
            Ok(Err(_)) | Err(_) if !crate::backend::health::known_unresponsive(addr) => {
                tracing::debug!("pipelined connection to node {addr} lost: batch run again");
                None
            }
            Ok(Err(e)) => Some(Err(e)),
            Err(_) => Some(Err(PgError::new(
                sqlstate::CONNECTION_FAILURE,
                format!("connection to node {addr} lost"),
            ))),
        }
    }

    /// Copies a node's answer to the client, without pgshard's own ParseComplete and
    /// the ReadyForQuery (the caller writes the session's own).
    fn forward_answer(&mut self, addr: &NodeAddr, answer: PgResult<Vec<Frame>>) {
        match answer {
            Ok(frames) => {
                for f in frames {
                    match f.tag {
                        b'1' | b'Z' => {}
                        b'E' => {
                            let e = going_away(PgError::from_server_fields(f.body), addr);
                            self.write_client_error(&e);
                        }
                        _ => msg::write_raw(&mut self.out, f.tag, &f.body),
                    }
                }
            }
            Err(e) => self.write_client_error(&e),
        }
    }

    /// A pipelined connection to `addr` carrying this session's settings.
    async fn open_mux(&mut self, addr: &NodeAddr) -> Option<Arc<Mux>> {
        let conn = self.private_conn(addr).await.ok()?;
        if !conn.is_reusable() {
            return None;
        }
        let (conn, slot) = conn.detach();
        Some(Mux::start(conn, slot, MAX_PREPARED_PER_CONNECTION))
    }
}

#[cfg(test)]
mod tests {
    use super::rest_of_batch;
    use crate::frontend::messages as msg;
    use bytes::BytesMut;

    #[test]
    fn a_batch_is_describe_execute_sync_of_the_unnamed_portal() {
        let mut b = BytesMut::new();
        msg::write_describe(&mut b, b'P', "");
        msg::write_execute(&mut b, "", 0);
        msg::write_sync(&mut b);
        assert_eq!(rest_of_batch(&b), Some((b.len(), true)));
        // More messages after the Sync belong to the next batch.
        msg::write_sync(&mut b);
        assert_eq!(rest_of_batch(&b), Some((b.len() - 5, true)));

        let mut b = BytesMut::new();
        msg::write_execute(&mut b, "", 0);
        msg::write_sync(&mut b);
        assert_eq!(rest_of_batch(&b), Some((b.len(), false)));
        // Not arrived yet: the Sync is missing.
        assert_eq!(rest_of_batch(&b[..b.len() - 1]), None);
    }

    #[test]
    fn other_shapes_take_the_ordinary_path() {
        // A row limit (a portal that may be suspended).
        let mut b = BytesMut::new();
        msg::write_execute(&mut b, "", 10);
        msg::write_sync(&mut b);
        assert_eq!(rest_of_batch(&b), None);
        // A named portal.
        let mut b = BytesMut::new();
        msg::write_execute(&mut b, "p1", 0);
        msg::write_sync(&mut b);
        assert_eq!(rest_of_batch(&b), None);
        // A Flush instead of Sync, or a second Execute.
        let mut b = BytesMut::new();
        msg::write_execute(&mut b, "", 0);
        msg::write_flush(&mut b);
        assert_eq!(rest_of_batch(&b), None);
        let mut b = BytesMut::new();
        msg::write_describe(&mut b, b'S', "");
        msg::write_execute(&mut b, "", 0);
        msg::write_sync(&mut b);
        assert_eq!(rest_of_batch(&b), None);
    }
}
