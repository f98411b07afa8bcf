//! The task executor: runs a list of tasks (node, SQL, the statement's parameters)
//! over the connections the session's distributed transaction leases for them. Every
//! node gets its tasks as one pipelined batch (Parse/Bind/Execute per task, one
//! Sync), all nodes at once; then each node's replies are read up to its
//! ReadyForQuery and handed to the caller, which decides how results merge
//! (streamed rows, added counts, partial aggregates). An error of one node is
//! returned once every node is ready again, as PostgreSQL reports the first error
//! of a statement, its context naming the node and the statement.

use super::bulk::error_with_context;
use super::*;
use crate::planner::multishard::LARGE_STATEMENT_BYTES;

/// The tasks of one node, run in order in one batch.
pub(super) struct NodeTasks {
    pub addr: NodeAddr,
    pub sql: Vec<String>,
}

impl NodeTasks {
    /// The statements for `addr` in `tasks`, added empty when it has none yet.
    pub(super) fn of<'a>(tasks: &'a mut Vec<NodeTasks>, addr: &NodeAddr) -> &'a mut Vec<String> {
        let at = match tasks.iter().position(|t| t.addr == *addr) {
            Some(i) => i,
            None => {
                tasks.push(NodeTasks {
                    addr: addr.clone(),
                    sql: Vec::new(),
                });
                tasks.len() - 1
            }
        };
        &mut tasks[at].sql
    }
}

/// How the batch describes its results: a RowDescription for the first task only
/// (the columns of every task are the same) or for none.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Describe {
    FirstTask,
    None,
}

impl Session {
    /// Runs the write `tasks` of one UPDATE / DELETE (`verb`): their RETURNING rows
    /// (when `returning`) to `sink`, described by the first task, and the command tag
    /// with the rows all tasks report.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn run_write_tasks(
        &mut self,
        tasks: &[NodeTasks],
        returning: bool,
        verb: &str,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let describe = match describe && returning {
            true => Describe::FirstTask,
            false => Describe::None,
        };
        let mut on_reply = |f: Frame, sink: &mut ResultSink| -> PgResult<()> {
            if matches!(f.tag, b'T' | b'D') {
                sink.push_frame(f.tag, f.body);
            }
            Ok(())
        };
        let total = self
            .run_tasks(tasks, true, params, formats, describe, sink, &mut on_reply)
            .await?;
        sink.complete(&format!("{verb} {total}"));
        Ok(())
    }

    /// Runs pgshard's own statements `tasks` (no parameters, nothing returned: DDL,
    /// ANALYZE, DROP of intermediate tables) as writes of the session's transaction.
    pub(super) async fn run_tasks_quietly(&mut self, tasks: &[NodeTasks]) -> PgResult<()> {
        if tasks.is_empty() {
            return Ok(());
        }
        self.run_own_tasks(tasks, &mut |_, _| Ok(())).await
    }

    /// Runs pgshard's own statements `tasks` (no parameters), each reply but errors and
    /// ReadyForQuery to `on_reply` (a semijoin's keys: their DataRows).
    pub(super) async fn run_own_tasks(
        &mut self,
        tasks: &[NodeTasks],
        on_reply: &mut (dyn FnMut(Frame, &mut ResultSink) -> PgResult<()> + Send),
    ) -> PgResult<()> {
        let params = BoundParams {
            types: &[],
            bind: None,
        };
        let mut ignored = ResultSink::default();
        self.run_tasks(
            tasks,
            false,
            &params,
            &[],
            Describe::None,
            &mut ignored,
            on_reply,
        )
        .await
        .map(drop)
    }

    /// Runs `tasks` (`write`: they modify data: the nodes join the transaction as
    /// writers). Every reply but errors and ReadyForQuery goes to `on_reply` (NOTICEs
    /// straight to the client) until the first error; rows the sink holds beyond its
    /// spill size go to the client as they come. Returns the rows the tasks' command
    /// tags report (`INSERT 0 n`, `UPDATE n`, `SELECT n`).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn run_tasks(
        &mut self,
        tasks: &[NodeTasks],
        write: bool,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: Describe,
        sink: &mut ResultSink,
        on_reply: &mut (dyn FnMut(Frame, &mut ResultSink) -> PgResult<()> + Send),
    ) -> PgResult<u64> {
        let empty = BindMsg::default_empty();
        let bind = params.bind.unwrap_or(&empty);
        let mut first = describe == Describe::FirstTask;
        // Per node: which task each statement written is (None: a statement around a
        // large task).
        let mut nodes = Vec::with_capacity(tasks.len());
        for t in tasks {
            let idx = self.bulk_conn(&t.addr, write).await?;
            let h = &mut self.tx.held[idx];
            let written = write_tasks(
                &mut h.conn.wbuf,
                &t.sql,
                params.types,
                bind,
                formats,
                &mut first,
            );
            msg::write_sync(&mut h.conn.wbuf);
            h.in_batch = false;
            h.conn.flush().await?;
            nodes.push((idx, written));
        }
        // Read every node's answers (they ran in parallel meanwhile).
        let mut err: Option<PgError> = None;
        let mut total = 0u64;
        for (t, (idx, written)) in tasks.iter().zip(nodes) {
            // The statement answering: the node runs them in order.
            let mut at = 0;
            loop {
                let f = self.tx.held[idx].conn.read().await?;
                match f.tag {
                    b'Z' => break,
                    b'E' => {
                        if err.is_none() {
                            let sql = match written.get(at) {
                                Some(Some(task)) => t.sql[*task].as_str(),
                                _ => "(the setting of jit around a large statement)",
                            };
                            err = Some(error_with_context(
                                &f.body,
                                &format!("while executing on node {}: {}", t.addr, abridged(sql)),
                            ));
                        }
                    }
                    b'C' => {
                        let task = written.get(at).copied().flatten();
                        at += 1;
                        if task.is_some() {
                            total += msg::command_rows(&f.body);
                            if err.is_none() {
                                on_reply(f, sink)?;
                            }
                        }
                    }
                    b'N' => sink.push_frame(b'N', f.body),
                    _ if err.is_none() => {
                        on_reply(f, sink)?;
                        if sink.should_spill() {
                            let frames: Vec<Frame> = sink.frames.drain(..).collect();
                            sink.spill(frames, &mut self.out);
                            self.flush_client().await?;
                        }
                    }
                    _ => {}
                }
            }
        }
        match err {
            Some(e) => Err(e),
            None => Ok(total),
        }
    }
}

/// A statement as an error's context shows it: its first 500 bytes.
fn abridged(sql: &str) -> String {
    const MAX: usize = 500;
    if sql.len() <= MAX {
        return sql.to_string();
    }
    let mut end = MAX;
    while !sql.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} ...", &sql[..end])
}

/// Statements around a large task: JIT off for it alone (`LARGE_STATEMENT_BYTES`).
/// Each returns no row (the call is a one-time filter) and is never described, so the
/// node answers them with ParseComplete, BindComplete and CommandComplete only, which
/// the readers skip. `set_config(.., true)` ends with the node's transaction: at the
/// batch's Sync in autocommit; inside a block the last statement puts back what the
/// session had (kept in the placeholder `pgshard.jit_before`).
const JIT_OFF: [&str; 2] = [
    "SELECT WHERE pg_catalog.set_config('pgshard.jit_before', pg_catalog.current_setting('jit'), true) IS NULL",
    "SELECT WHERE pg_catalog.set_config('jit', 'off', true) IS NULL",
];
const JIT_RESTORE: &str =
    "SELECT WHERE pg_catalog.set_config('jit', pg_catalog.current_setting('pgshard.jit_before'), true) IS NULL";

/// Writes one node's tasks into its batch (before the Sync), each as an unnamed
/// Parse/Bind/Execute; `describe`: whether the next task is described (cleared after
/// the first). A task larger than `LARGE_STATEMENT_BYTES` runs without JIT. Returns,
/// for each statement written in order, the task it is (None: a JIT setting).
pub(super) fn write_tasks(
    buf: &mut BytesMut,
    tasks: &[String],
    param_types: &[u32],
    bind: &BindMsg,
    formats: &[i16],
    describe: &mut bool,
) -> Vec<Option<usize>> {
    let empty = BindMsg::default_empty();
    let mut written = Vec::with_capacity(tasks.len());
    for (i, sql) in tasks.iter().enumerate() {
        let large = sql.len() > LARGE_STATEMENT_BYTES;
        if large {
            for s in JIT_OFF {
                msg::write_unnamed_run(buf, s, &[], &empty, &[], false);
                written.push(None);
            }
        }
        msg::write_unnamed_run(buf, sql, param_types, bind, formats, *describe);
        written.push(Some(i));
        *describe = false;
        if large {
            msg::write_unnamed_run(buf, JIT_RESTORE, &[], &empty, &[], false);
            written.push(None);
        }
    }
    written
}
