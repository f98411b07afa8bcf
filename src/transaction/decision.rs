//! Group commit of two-phase-commit decision records: the `pg_dist_transaction` rows
//! of concurrently committing sessions are written by one coordinator-node
//! transaction, so 16 clients cost a few durable coordinator commits (and fsyncs)
//! instead of 16.
//!
//! One writer task per serving thread (sessions never leave their thread, so handing
//! a record to the writer wakes no other thread). It owns a dedicated coordinator
//! connection with `synchronous_commit = on`: its autocommit INSERT returns only once
//! the records are flushed. While one batch is being written, new records queue; the
//! next batch takes them all. Every session of a batch gets the batch's outcome, and
//! only then goes on to `COMMIT PREPARED`: a record is durable before any
//! participant of its transaction commits.
//!
//! The INSERT is a statement prepared once per writer connection, bound with two
//! arrays (group ids, gids): the coordinator node parses and plans nothing per batch
//! (parsing and planning a new INSERT text was over half of its CPU per record).

use crate::backend::{BackendConn, Credentials, NodeAddr};
use crate::error::{sqlstate, PgError, PgResult};
use crate::frontend::messages as msg;
use bytes::Bytes;
use std::cell::RefCell;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Most transactions' records in one coordinator transaction (keeps the bound
/// arrays bounded; a full queue simply takes several batches).
const MAX_BATCH: usize = 256;

/// The writer's prepared statement: one row per element of the two arrays.
const INSERT_NAME: &str = "pgshard_decision";
const INSERT_SQL: &str = "INSERT INTO pg_catalog.pg_dist_transaction (groupid, gid) \
     SELECT * FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.int4[]), \
     pg_catalog.unnest($2::pg_catalog.text[]))";
/// int4[] and text[].
const INSERT_TYPES: [u32; 2] = [1007, 1009];

/// One committing transaction's records: (group id, gid) per prepared participant,
/// and the liveness count when it began to commit (`transaction::liveness_holds`).
struct Request {
    rows: Vec<(i32, String)>,
    epoch: u64,
    done: oneshot::Sender<PgResult<()>>,
}

/// Where the writer connects.
#[derive(Clone)]
pub struct Target {
    pub coordinator: NodeAddr,
    pub creds: Arc<Credentials>,
    pub application_name: String,
}

thread_local! {
    static WRITER: RefCell<Option<mpsc::UnboundedSender<Request>>> = const { RefCell::new(None) };
}

/// Makes `rows` durable in `pg_dist_transaction` on the coordinator node, together
/// with whatever other sessions of this thread are recording at the same time.
///
/// Ok: the records are committed and flushed. An error with SQLSTATE 08006 means the
/// outcome is unknown (the connection was lost around the commit); any other error
/// means nothing was recorded: 40001 when this process's liveness lock was not held
/// on the coordinator node's server throughout since `epoch` (the transaction's
/// prepared parts may have been rolled back by another process's recovery meanwhile).
pub async fn record(target: &Target, rows: Vec<(i32, String)>, epoch: u64) -> PgResult<()> {
    let (done, outcome) = oneshot::channel();
    let mut request = Request { rows, epoch, done };
    for _ in 0..2 {
        let sender = WRITER.with(|w| {
            let mut w = w.borrow_mut();
            match &*w {
                Some(s) if !s.is_closed() => s.clone(),
                _ => {
                    let (tx, rx) = mpsc::unbounded_channel();
                    tokio::spawn(run_writer(target.clone(), rx));
                    *w = Some(tx.clone());
                    tx
                }
            }
        });
        match sender.send(request) {
            Ok(()) => {
                // A writer that vanished mid-batch may or may not have committed it.
                return outcome.await.unwrap_or_else(|_| {
                    Err(PgError::new(
                        sqlstate::CONNECTION_FAILURE,
                        "the writer of commit decisions stopped",
                    ))
                });
            }
            Err(mpsc::error::SendError(r)) => request = r,
        }
    }
    Err(PgError::internal(
        "cannot start the writer of commit decisions",
    ))
}

/// The writer: takes every queued request, writes their rows in one durable
/// transaction, answers each, repeats.
async fn run_writer(target: Target, mut requests: mpsc::UnboundedReceiver<Request>) {
    let mut conn: Option<BackendConn> = None;
    let mut batch = Vec::new();
    while let Some(first) = requests.recv().await {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match requests.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        // After a failover or restart of the coordinator node, before this process
        // holds its liveness lock there again: nothing is recorded.
        let (holding, refused): (Vec<Request>, Vec<Request>) = batch
            .drain(..)
            .partition(|r| super::liveness_holds(r.epoch));
        for r in refused {
            let _ = r.done.send(Err(PgError::new(
                sqlstate::SERIALIZATION_FAILURE,
                "the coordinator node changed (failover or restart) while the transaction \
                 was committing: it was rolled back",
            )
            .with_hint("Retry the transaction.")));
        }
        batch = holding;
        if batch.is_empty() {
            continue;
        }
        let rows = batch.iter().flat_map(|r| r.rows.iter());
        let outcome = write(&target, &mut conn, array_params(rows)).await;
        for r in batch.drain(..) {
            let _ = r.done.send(outcome.clone());
        }
    }
}

async fn write(
    target: &Target,
    conn: &mut Option<BackendConn>,
    params: [Bytes; 2],
) -> PgResult<()> {
    if conn.as_ref().is_none_or(|c| c.broken) {
        let mut c =
            BackendConn::connect(&target.coordinator, &target.creds, &target.application_name)
                .await?;
        // Durable whatever the coordinator node's own synchronous_commit: a lost
        // record would make recovery roll back participants whose siblings committed.
        c.simple("SET synchronous_commit TO on").await?;
        msg::write_parse(&mut c.wbuf, INSERT_NAME, INSERT_SQL, &INSERT_TYPES);
        msg::write_sync(&mut c.wbuf);
        c.flush().await?;
        c.drain_to_ready().await?;
        *conn = Some(c);
    }
    let c = conn.as_mut().expect("connected above");
    let [groups, gids] = params;
    msg::write_bind(
        &mut c.wbuf,
        "",
        INSERT_NAME,
        &[],
        &[Some(groups), Some(gids)],
        &[],
    );
    msg::write_execute(&mut c.wbuf, "", 0);
    msg::write_sync(&mut c.wbuf);
    let r = match c.flush().await {
        Ok(()) => c.drain_to_ready().await,
        Err(e) => Err(e),
    };
    if c.txn_status != b'I' {
        // Never expected of an autocommit INSERT; start afresh rather than guess.
        c.broken = true;
    }
    r
}

/// The INSERT's two parameters in text form: the group ids as an int4[] literal,
/// the gids as a text[] literal (every element quoted).
fn array_params<'a>(rows: impl Iterator<Item = &'a (i32, String)>) -> [Bytes; 2] {
    let mut groups = String::from("{");
    let mut gids = String::from("{");
    for (i, (group, gid)) in rows.enumerate() {
        if i > 0 {
            groups.push(',');
            gids.push(',');
        }
        groups.push_str(&group.to_string());
        gids.push('"');
        for ch in gid.chars() {
            if ch == '"' || ch == '\\' {
                gids.push('\\');
            }
            gids.push(ch);
        }
        gids.push('"');
    }
    groups.push('}');
    gids.push('}');
    [Bytes::from(groups), Bytes::from(gids)]
}

#[cfg(test)]
mod tests {
    use super::array_params;

    #[test]
    fn records_bind_as_two_arrays() {
        let rows = [
            (1, "pgshard_0000000a_1_2_0".to_string()),
            (-2, r#"g'x"y\z"#.to_string()),
        ];
        let [groups, gids] = array_params(rows.iter());
        assert_eq!(&groups[..], b"{1,-2}");
        assert_eq!(&gids[..], br#"{"pgshard_0000000a_1_2_0","g'x\"y\\z"}"#);
    }
}
