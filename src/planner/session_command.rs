//! Session commands: what a statement does to the client's session itself rather
//! than to data (transaction control, SET / RESET / SHOW of any setting, DISCARD ALL,
//! DEALLOCATE). They are recognised before planning and never become a `Plan`: the
//! executor's `session/commands.rs` runs them.

use super::const_text;
use crate::error::{PgError, PgResult};
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self, TransactionStmtKind, VariableSetKind};

/// A statement that acts on the client's session itself.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionCommand {
    /// An empty query string (a driver's ping).
    Empty,
    Transaction(TxnCommand),
    /// Any other `SET` / `RESET` (`RESET ALL` too): run on the coordinator node, then,
    /// once it succeeded, applied to every node connection of the session the way its
    /// scope says (whichever protocol carried it).
    Setting(SettingScope),
    /// `DISCARD ALL`: run on the coordinator node, then the session's settings go
    /// back to its startup packet's and its prepared statements are dropped.
    DiscardAll,
    /// `DEALLOCATE name` (None: `ALL`). SQL and protocol-level prepared statements
    /// share one namespace in PostgreSQL; pgshard keeps the protocol-level ones.
    Deallocate {
        name: Option<String>,
    },
    /// `SET [LOCAL] citus.x = v` / `RESET citus.x` (value None).
    SetCitus {
        name: String,
        value: Option<String>,
        /// SET LOCAL: until the end of the transaction block.
        local: bool,
    },
    /// `ALTER SYSTEM`, `ALTER DATABASE ... SET` or `ALTER ROLE ... SET` of a
    /// `citus.*` setting (value None: RESET): the value checked by pgshard, the
    /// statement run on the coordinator node, then sessions start with it
    /// (`citus_settings::defaults`).
    StoreCitus {
        name: String,
        value: Option<String>,
    },
    /// `CREATE EXTENSION [IF NOT EXISTS] citus` / `ALTER EXTENSION citus UPDATE`:
    /// pgshard is the extension, always there; the command tag answers.
    CitusExtension {
        tag: &'static str,
    },
}

impl SessionCommand {
    /// What PostgreSQL still runs in a failed block (25P02 otherwise): the statements
    /// that end it or roll back into it.
    pub fn ends_failed_block(&self) -> bool {
        match self {
            SessionCommand::Transaction(
                TxnCommand::Commit { .. }
                | TxnCommand::Rollback { .. }
                | TxnCommand::RollbackTo { .. },
            ) => true,
            SessionCommand::Transaction(TxnCommand::Other { kind, .. }) => {
                *kind == TransactionStmtKind::TransStmtPrepare as i32
            }
            _ => false,
        }
    }
}

/// The session command a statement is, if it is one (`node` None: an empty query).
pub fn session_command(node: Option<&N>, text: &str) -> PgResult<Option<SessionCommand>> {
    let Some(node) = node else {
        return Ok(Some(SessionCommand::Empty));
    };
    Ok(Some(match node {
        N::TransactionStmt(t) => SessionCommand::Transaction(txn_command(t, text)),
        N::VariableSetStmt(v) if crate::citus_settings::is_citus_name(&v.name) => {
            SessionCommand::SetCitus {
                name: v.name.clone(),
                value: citus_value(v)?,
                local: v.is_local,
            }
        }
        N::AlterSystemStmt(a) => match citus_set(a.setstmt.as_ref())? {
            Some(c) => c,
            None => return Ok(None),
        },
        N::AlterDatabaseSetStmt(a) => match citus_set(a.setstmt.as_ref())? {
            Some(c) => c,
            None => return Ok(None),
        },
        N::AlterRoleSetStmt(a) => match citus_set(a.setstmt.as_ref())? {
            Some(c) => c,
            None => return Ok(None),
        },
        N::VariableSetStmt(v) => SessionCommand::Setting(setting_scope(v)),
        N::CreateExtensionStmt(c) if c.extname == "citus" => SessionCommand::CitusExtension {
            tag: "CREATE EXTENSION",
        },
        N::AlterExtensionStmt(a) if a.extname == "citus" => SessionCommand::CitusExtension {
            tag: "ALTER EXTENSION",
        },
        N::DropStmt(d)
            if d.remove_type == protobuf::ObjectType::ObjectExtension as i32
                && d.objects
                    .iter()
                    .any(|o| matches!(&o.node, Some(N::String(s)) if s.sval == "citus")) =>
        {
            return Err(PgError::not_supported(
                "pgshard cannot drop extension \"citus\": pgshard itself provides it",
            )
            .with_hint("Distributed tables go back to local tables with undistribute_table()."));
        }
        N::DiscardStmt(d) if d.target == protobuf::DiscardMode::DiscardAll as i32 => {
            SessionCommand::DiscardAll
        }
        N::DeallocateStmt(d) => SessionCommand::Deallocate {
            name: (!d.isall).then(|| d.name.clone()),
        },
        _ => return Ok(None),
    }))
}

/// The value a `SET citus.x` gives (None: RESET / DEFAULT). A list is one string, as
/// PostgreSQL joins a list for a placeholder.
fn citus_value(v: &protobuf::VariableSetStmt) -> PgResult<Option<String>> {
    Ok(match VariableSetKind::try_from(v.kind) {
        Ok(VariableSetKind::VarSetValue) => {
            let mut parts = Vec::new();
            for a in &v.args {
                parts.push(const_text(Some(a)).ok_or_else(|| {
                    PgError::new(
                        crate::error::sqlstate::INVALID_PARAMETER_VALUE,
                        format!("invalid value for parameter \"{}\"", v.name),
                    )
                })?);
            }
            Some(parts.join(", "))
        }
        _ => None,
    })
}

/// `ALTER SYSTEM / DATABASE / ROLE`'s SET or RESET of a `citus.*` setting.
fn citus_set(set: Option<&protobuf::VariableSetStmt>) -> PgResult<Option<SessionCommand>> {
    let Some(v) = set.filter(|v| crate::citus_settings::is_citus_name(&v.name)) else {
        return Ok(None);
    };
    Ok(Some(SessionCommand::StoreCitus {
        name: v.name.clone(),
        value: citus_value(v)?,
    }))
}

/// Transaction control statements pgshard handles itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnCommand {
    /// BEGIN / START TRANSACTION; the text is replayed on every node the block uses.
    Begin {
        text: String,
    },
    /// COMMIT / END / ROLLBACK / ABORT; `AND CHAIN` begins a new block with the same
    /// characteristics once the old one ended.
    Commit {
        chain: bool,
    },
    Rollback {
        chain: bool,
    },
    /// SAVEPOINT / RELEASE [SAVEPOINT] / ROLLBACK TO [SAVEPOINT] with the savepoint name.
    Savepoint {
        name: String,
    },
    Release {
        name: String,
    },
    RollbackTo {
        name: String,
    },
    /// PREPARE TRANSACTION, COMMIT PREPARED, ROLLBACK PREPARED.
    Other {
        text: String,
        kind: i32,
        gid: String,
    },
}

/// How long a `SET` / `RESET` lasts, which decides where pgshard applies it.
#[derive(Debug, Clone, PartialEq)]
pub enum SettingScope {
    /// `SET`, `RESET`, `SET SESSION CHARACTERISTICS AS TRANSACTION ...`: the rest of
    /// the session (undone with the transaction block that made it). `variable` is
    /// None for `RESET ALL`.
    Session { variable: Option<String> },
    /// `SET LOCAL`: until the transaction block ends, on every node of the block.
    Local { variable: String },
    /// `SET TRANSACTION ...`: the block's modes, as BEGIN options
    /// (`ISOLATION LEVEL REPEATABLE READ`, `READ ONLY`, ...), on every node of the block.
    Transaction { modes: Vec<String> },
    /// `SET TRANSACTION SNAPSHOT`: names a snapshot of one server, the coordinator node.
    CoordinatorOnly,
}

fn setting_scope(v: &protobuf::VariableSetStmt) -> SettingScope {
    match v.name.as_str() {
        "TRANSACTION" => SettingScope::Transaction {
            modes: transaction_modes(&v.args),
        },
        "TRANSACTION SNAPSHOT" => SettingScope::CoordinatorOnly,
        name if v.is_local => SettingScope::Local {
            variable: name.to_string(),
        },
        _ if v.kind == VariableSetKind::VarResetAll as i32 => {
            SettingScope::Session { variable: None }
        }
        name => SettingScope::Session {
            variable: Some(name.to_string()),
        },
    }
}

/// Transaction modes (the DefElems of `SET TRANSACTION` or `BEGIN`) as BEGIN options.
pub fn transaction_modes(options: &[protobuf::Node]) -> Vec<String> {
    let mut modes = Vec::new();
    for o in options {
        let Some(N::DefElem(d)) = &o.node else {
            continue;
        };
        let on = || const_text(d.arg.as_deref()).is_some_and(|v| v != "0" && v != "false");
        modes.push(match d.defname.as_str() {
            "transaction_isolation" => match const_text(d.arg.as_deref()) {
                Some(level) => format!("ISOLATION LEVEL {}", level.to_ascii_uppercase()),
                None => continue,
            },
            "transaction_read_only" if on() => "READ ONLY".to_string(),
            "transaction_read_only" => "READ WRITE".to_string(),
            "transaction_deferrable" if on() => "DEFERRABLE".to_string(),
            "transaction_deferrable" => "NOT DEFERRABLE".to_string(),
            _ => continue,
        });
    }
    modes
}

/// The BEGIN that starts the block on a node joining it after `SET TRANSACTION`
/// gave `extra` modes: the block's own BEGIN modes, then those (a later mode of the
/// same kind wins, in BEGIN as in SET TRANSACTION).
pub fn begin_with_modes(begin_text: &str, extra: &[String]) -> String {
    let mut modes = match pg_query::parse(begin_text, 0).ok().and_then(|p| {
        let stmt = p.protobuf.stmts.into_iter().next()?.stmt?.node?;
        match stmt {
            N::TransactionStmt(t) => Some(transaction_modes(&t.options)),
            _ => None,
        }
    }) {
        Some(m) => m,
        None => Vec::new(),
    };
    modes.extend(extra.iter().cloned());
    if modes.is_empty() {
        "BEGIN".to_string()
    } else {
        format!("BEGIN {}", modes.join(", "))
    }
}

fn txn_command(t: &protobuf::TransactionStmt, text: &str) -> TxnCommand {
    match TransactionStmtKind::try_from(t.kind) {
        Ok(TransactionStmtKind::TransStmtBegin) | Ok(TransactionStmtKind::TransStmtStart) => {
            TxnCommand::Begin {
                text: text.trim().to_string(),
            }
        }
        Ok(TransactionStmtKind::TransStmtCommit) => TxnCommand::Commit { chain: t.chain },
        Ok(TransactionStmtKind::TransStmtRollback) => TxnCommand::Rollback { chain: t.chain },
        Ok(TransactionStmtKind::TransStmtSavepoint) => TxnCommand::Savepoint {
            name: t.savepoint_name.clone(),
        },
        Ok(TransactionStmtKind::TransStmtRelease) => TxnCommand::Release {
            name: t.savepoint_name.clone(),
        },
        Ok(TransactionStmtKind::TransStmtRollbackTo) => TxnCommand::RollbackTo {
            name: t.savepoint_name.clone(),
        },
        _ => TxnCommand::Other {
            text: text.trim().to_string(),
            kind: t.kind,
            gid: t.gid.clone(),
        },
    }
}
