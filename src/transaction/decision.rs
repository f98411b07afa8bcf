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

use crate::backend::{BackendConn, Credentials, NodeAddr};
use crate::error::{sqlstate, PgError, PgResult};
use crate::sql::quote::quote_literal;
use std::cell::RefCell;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Most transactions' records in one coordinator transaction (keeps the statement
/// text bounded; a full queue simply takes several batches).
const MAX_BATCH: usize = 256;

/// One committing transaction's records: (group id, gid) per prepared participant.
struct Request {
    rows: Vec<(i32, String)>,
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
/// means nothing was recorded.
pub async fn record(target: &Target, rows: Vec<(i32, String)>) -> PgResult<()> {
    let (done, outcome) = oneshot::channel();
    let mut request = Request { rows, done };
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
        let rows = batch.iter().flat_map(|r| r.rows.iter());
        let outcome = write(&target, &mut conn, &insert_statement(rows)).await;
        for r in batch.drain(..) {
            let _ = r.done.send(outcome.clone());
        }
    }
}

async fn write(target: &Target, conn: &mut Option<BackendConn>, sql: &str) -> PgResult<()> {
    if conn.as_ref().is_none_or(|c| c.broken) {
        let mut c =
            BackendConn::connect(&target.coordinator, &target.creds, &target.application_name)
                .await?;
        // Durable whatever the coordinator node's own synchronous_commit: a lost
        // record would make recovery roll back participants whose siblings committed.
        c.simple("SET synchronous_commit TO on").await?;
        *conn = Some(c);
    }
    let c = conn.as_mut().expect("connected above");
    let r = c.simple(sql).await;
    if c.txn_status != b'I' {
        // Never expected of an autocommit INSERT; start afresh rather than guess.
        c.broken = true;
    }
    r
}

/// One multi-row INSERT of the decision records.
fn insert_statement<'a>(rows: impl Iterator<Item = &'a (i32, String)>) -> String {
    let mut sql = String::from("INSERT INTO pg_catalog.pg_dist_transaction (groupid, gid) VALUES ");
    for (i, (group, gid)) in rows.enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!("({group}, {})", quote_literal(gid)));
    }
    sql
}

#[cfg(test)]
mod tests {
    use super::insert_statement;

    #[test]
    fn one_insert_holds_every_record() {
        let rows = [
            (1, "pgshard_0000000a_1_2_0".to_string()),
            (2, "g'x".to_string()),
        ];
        assert_eq!(
            insert_statement(rows.iter()),
            "INSERT INTO pg_catalog.pg_dist_transaction (groupid, gid) VALUES \
             (1, 'pgshard_0000000a_1_2_0'), (2, 'g''x')"
        );
    }
}
