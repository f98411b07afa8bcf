//! PostgreSQL's implicit transaction of a query string of several statements, for a
//! string of statements on local tables with transaction control among them
//! (`insert ...; commit; insert ...; select 1/0`, `select 1; begin; insert ...`).
//!
//! In PostgreSQL the statements of one Query message run as one implicit transaction:
//! a COMMIT or ROLLBACK among them ends it (with a WARNING) and the statements after it
//! start the next one; an error rolls back the current one; a BEGIN turns it into a
//! block that outlives the string. Such a string goes whole to the client's own
//! coordinator-node backend, so all of this is PostgreSQL's own; a block it leaves
//! open becomes the session's block. Strings that also open a block and use
//! savepoints in it, `AND CHAIN` and two-phase commands keep the statement-by-statement
//! path (pgshard would not know the block's savepoints or characteristics).

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
            Plan::Transaction(cmd) => {
                control = true;
                match cmd {
                    TxnCommand::Begin { text } => begin = Some(text.clone()),
                    TxnCommand::Commit { chain: false } | TxnCommand::Rollback { chain: false } => {}
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

impl Session {
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
            Some(i) => self.held[i].conn.txn_status,
            None => b'I',
        };
        if status != b'I' {
            self.start_block(begin.unwrap_or_else(|| "BEGIN".to_string()));
            if status == b'E' {
                self.txn = TxnState::Failed;
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
        Plan::Transaction(TxnCommand::Begin { text: text.into() })
    }

    #[test]
    fn strings_that_run_whole_on_the_coordinator_node() {
        let commit = || Plan::Transaction(TxnCommand::Commit { chain: false });
        let savepoint = || Plan::Transaction(TxnCommand::Savepoint { name: "sp".into() });
        assert_eq!(local_with_transaction_control(&[Plan::Local, commit(), Plan::Local]), Some(None));
        assert_eq!(
            local_with_transaction_control(&[Plan::Local, begin("BEGIN"), Plan::Local]),
            Some(Some("BEGIN".to_string()))
        );
        assert_eq!(local_with_transaction_control(&[Plan::Local, savepoint()]), Some(None));
        // Only local statements: the older path sends them whole already.
        assert_eq!(local_with_transaction_control(&[Plan::Local, Plan::Local]), None);
        assert_eq!(local_with_transaction_control(&[begin("BEGIN"), savepoint()]), None);
        let chain = Plan::Transaction(TxnCommand::Commit { chain: true });
        assert_eq!(local_with_transaction_control(&[Plan::Local, chain]), None);
        assert_eq!(local_with_transaction_control(&[Plan::Local, commit(), Plan::DiscardAll]), None);
    }
}
