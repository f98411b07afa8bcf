//! PostgreSQL's implicit transaction of a simple query string of several statements
//! (`insert ...; insert ...; select 1/0` commits nothing; `insert ...; commit; insert
//! ...; select 1/0` keeps the first insert).
//!
//! In PostgreSQL the statements of one Query message run as one implicit transaction:
//! a COMMIT or ROLLBACK among them ends it (with a WARNING) and the statements after it
//! start the next one; an error rolls back the current one; a BEGIN turns it into a
//! block that outlives the string; SAVEPOINT and `AND CHAIN` are refused (25P01).
//!
//! Two paths:
//! - a string of only local statements and transaction control goes whole to the
//!   client's own coordinator-node backend, so all of this is PostgreSQL's own; a block
//!   it leaves open becomes the session's block. Strings that also open a block and use
//!   savepoints in it, `AND CHAIN` and two-phase commands keep the statement-by-statement
//!   path (pgshard would not know the block's savepoints or characteristics);
//! - any other string runs statement by statement inside a transaction block of the
//!   session's own (`Session::string_block`), begun before its first statement that is
//!   not transaction control: nodes join it as they join a client's block, and it
//!   commits at the string's end (2PC where several nodes wrote) or rolls back at its
//!   first error. Statements pgshard cannot run inside a block (`create_distributed_table`,
//!   DROP TABLE of a distributed table, ...) are refused there with 0A000 rather than
//!   committed on their own; PostgreSQL's own refusals inside a block (VACUUM, CREATE
//!   DATABASE: 25001) come from the nodes, as in PostgreSQL's implicit transaction.
//!   Such a statement alone in its implicit transaction (first after the string's start or a
//!   COMMIT, and followed by a COMMIT or the string's end) runs as a single-statement
//!   string does, so those refusals do not apply to it.
//!   Single-statement strings never take this path.

use super::*;

/// For a string of `plans` run from outside a block: `Some(text of its last BEGIN, if
/// any)` when it is only local statements and transaction control with at least one
/// of the latter, so that it can run whole on the coordinator node.
pub(super) fn local_with_transaction_control(plans: &[Plan]) -> Option<Option<String>> {
    let mut begin = None;
    let mut control = false;
    let mut savepoints = false;
    for plan in plans {
        match plan {
            Plan::Local => {}
            Plan::Session(SessionCommand::Transaction(cmd)) => {
                control = true;
                match cmd {
                    TxnCommand::Begin { text } => begin = Some(text.clone()),
                    TxnCommand::Commit { chain: false } | TxnCommand::Rollback { chain: false } => {
                    }
                    TxnCommand::Savepoint { .. }
                    | TxnCommand::Release { .. }
                    | TxnCommand::RollbackTo { .. } => savepoints = true,
                    _ => return None,
                }
            }
            _ => return None,
        }
    }
    (control && !(savepoints && begin.is_some())).then_some(begin)
}

/// Whether pgshard runs `plan` only outside a transaction block, where PostgreSQL
/// would run it inside one (Citus functions that write, DROP TABLE / DROP INDEX of a
/// distributed table, DDL `ddl_in_block` does not cover).
pub(super) fn needs_own_transaction(plan: &Plan) -> bool {
    match plan {
        Plan::Utility { name, .. } => !commands::utility_reads_only(name),
        Plan::UtilityInline { calls } => {
            calls.iter().any(|c| !commands::utility_reads_only(&c.name))
        }
        Plan::DropTables { .. } | Plan::DropIndexes { .. } => true,
        // CREATE INDEX CONCURRENTLY: PostgreSQL refuses it in any multi-statement string.
        Plan::Ddl(d) => !d.concurrent && d.not_in_block().is_some(),
        _ => false,
    }
}

/// Whether a statement that begins an implicit transaction is also its only one: the
/// string ends after it, or a COMMIT follows (`rest`: the plans after it). It then runs
/// as a query string of its own would, with nothing else to commit or undo with it, so
/// `create table t ...; commit; select create_distributed_table('t', 'k'); commit; ...`
/// works.
pub(super) fn alone_in_implicit_transaction(rest: &[Plan]) -> bool {
    matches!(
        rest.first(),
        None | Some(Plan::Session(SessionCommand::Transaction(
            TxnCommand::Commit { chain: false }
        )))
    )
}

/// The refusal of a statement pgshard cannot run inside a transaction block, in the
/// implicit transaction of a query string of several statements.
pub(super) fn refused_in_string(what: &str) -> PgError {
    PgError::not_supported(format!(
        "pgshard cannot run {what} inside a query string of several statements, which \
         runs as one transaction: send it as a query string of its own, or end the \
         transaction before it and after it with COMMIT"
    ))
}

impl Session {
    /// Before a statement of a multi-statement string outside any block: the string's
    /// implicit transaction begins (nodes join it with BEGIN when first used).
    pub(super) fn begin_string_block(&mut self) {
        self.start_block("BEGIN".to_string());
        self.tx.string_block = true;
    }

    /// At the end of the string: its implicit transaction commits, or rolls back after
    /// an error. Returns whether it failed (the commit included).
    pub(super) async fn end_string_block(&mut self, failed: bool) -> bool {
        self.tx.string_block = false;
        if failed || self.tx.state == TxnState::Failed {
            let _ = self.finish_transaction(false).await;
            self.take_end_messages();
            return true;
        }
        let r = self.finish_transaction(true).await;
        for f in self.take_end_messages() {
            msg::write_raw(&mut self.out, f.tag, &f.body);
        }
        match r {
            Ok(()) => false,
            Err(e) => {
                self.write_client_error(&e);
                true
            }
        }
    }

    /// Transaction control inside the string's implicit transaction, as PostgreSQL
    /// treats it there; `None` for the commands that run as in a block (two-phase).
    pub(super) async fn control_in_string(
        &mut self,
        cmd: &TxnCommand,
        sink: &mut ResultSink,
    ) -> Option<PgResult<()>> {
        let outside = |what: &str| {
            PgError::new(
                sqlstate::NO_ACTIVE_SQL_TRANSACTION,
                format!("{what} can only be used in transaction blocks"),
            )
        };
        Some(match cmd {
            TxnCommand::Begin { text } => {
                // The implicit transaction becomes the client's block, earlier
                // statements included. Nodes that joined already began with plain BEGIN.
                self.tx.string_block = false;
                if self.tx.held.is_empty() {
                    self.tx.begin_text = text.clone();
                }
                sink.complete("BEGIN");
                Ok(())
            }
            TxnCommand::Commit { chain: true } => Err(outside("COMMIT AND CHAIN")),
            TxnCommand::Rollback { chain: true } => Err(outside("ROLLBACK AND CHAIN")),
            TxnCommand::Commit { chain: false } => {
                sink.notice_warning("there is no transaction in progress");
                self.tx.string_block = false;
                let r = self.finish_transaction(true).await;
                self.end_messages_into(sink);
                r.map(|()| sink.complete("COMMIT"))
            }
            TxnCommand::Rollback { chain: false } => {
                sink.notice_warning("there is no transaction in progress");
                self.tx.string_block = false;
                let r = self.finish_transaction(false).await;
                self.take_end_messages();
                r.map(|()| sink.complete("ROLLBACK"))
            }
            TxnCommand::Savepoint { .. } => Err(outside("SAVEPOINT")),
            TxnCommand::Release { .. } => Err(outside("RELEASE SAVEPOINT")),
            TxnCommand::RollbackTo { .. } => Err(outside("ROLLBACK TO SAVEPOINT")),
            TxnCommand::Other { .. } => return None,
        })
    }

    /// Runs such a string on the client's own coordinator-node backend; a block it
    /// leaves open (its last BEGIN's) is the session's from here on.
    pub(super) async fn local_with_transaction_control(
        &mut self,
        sql: &str,
        begin: Option<String>,
    ) -> PgResult<()> {
        let coord = self.shared.coordinator.clone();
        let r = self.simple_on_backend(&coord, sql, true).await;
        let status = match self.held_index(&coord) {
            Some(i) => self.tx.held[i].conn.txn_status,
            None => b'I',
        };
        if status != b'I' {
            self.start_block(begin.unwrap_or_else(|| "BEGIN".to_string()));
            if status == b'E' {
                self.tx.state = TxnState::Failed;
            }
        }
        self.finish_simple(r).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn begin(text: &str) -> Plan {
        Plan::Session(SessionCommand::Transaction(TxnCommand::Begin {
            text: text.into(),
        }))
    }

    #[test]
    fn a_statement_alone_in_its_implicit_transaction() {
        let commit = Plan::Session(SessionCommand::Transaction(TxnCommand::Commit {
            chain: false,
        }));
        let rollback = Plan::Session(SessionCommand::Transaction(TxnCommand::Rollback {
            chain: false,
        }));
        let chain = Plan::Session(SessionCommand::Transaction(TxnCommand::Commit {
            chain: true,
        }));
        assert!(alone_in_implicit_transaction(&[]));
        assert!(alone_in_implicit_transaction(&[commit, Plan::Local]));
        // A ROLLBACK after it would have to undo it.
        assert!(!alone_in_implicit_transaction(&[rollback]));
        assert!(!alone_in_implicit_transaction(&[chain]));
        assert!(!alone_in_implicit_transaction(&[Plan::Local]));
        assert!(!needs_own_transaction(&Plan::Local));
    }

    #[test]
    fn strings_that_run_whole_on_the_coordinator_node() {
        let commit = || {
            Plan::Session(SessionCommand::Transaction(TxnCommand::Commit {
                chain: false,
            }))
        };
        let savepoint = || {
            Plan::Session(SessionCommand::Transaction(TxnCommand::Savepoint {
                name: "sp".into(),
            }))
        };
        assert_eq!(
            local_with_transaction_control(&[Plan::Local, commit(), Plan::Local]),
            Some(None)
        );
        assert_eq!(
            local_with_transaction_control(&[Plan::Local, begin("BEGIN"), Plan::Local]),
            Some(Some("BEGIN".to_string()))
        );
        assert_eq!(
            local_with_transaction_control(&[Plan::Local, savepoint()]),
            Some(None)
        );
        // Only local statements: the older path sends them whole already.
        assert_eq!(
            local_with_transaction_control(&[Plan::Local, Plan::Local]),
            None
        );
        assert_eq!(
            local_with_transaction_control(&[begin("BEGIN"), savepoint()]),
            None
        );
        let chain = Plan::Session(SessionCommand::Transaction(TxnCommand::Commit {
            chain: true,
        }));
        assert_eq!(local_with_transaction_control(&[Plan::Local, chain]), None);
        assert_eq!(
            local_with_transaction_control(&[
                Plan::Local,
                commit(),
                Plan::Session(SessionCommand::DiscardAll)
            ]),
            None
        );
    }
}
