//! The planner: decides for each statement where it runs. Cheapest first, each layer
//! declining to the next: transaction control and settings (pgshard itself) → Citus
//! functions (utility) → no distributed table (the coordinator node, unchanged) →
//! router (one shard) → multi-shard read → refusal with 0A000. Every decision is either
//! proven right for the statement's shape or refused.

pub mod aggregate;
pub mod copy;
pub mod create_as;
pub mod cursor;
pub mod ddl;
pub mod distvalue;
pub mod evaluate;
pub mod explain;
pub mod fastpath;
pub mod insert;
pub mod insert_select;
pub mod join;
pub mod multishard;
pub mod names;
pub mod objects;
pub mod propagate;
pub mod router;
pub mod security;
pub mod sql_prepare;
pub mod template;
pub mod update_from;

use crate::catalog::{Catalog, DistTable, PartitionMethod};
use crate::error::{sqlstate, PgError, PgResult};
use crate::sql::parse::{relations, RelRef, Statement};
pub use names::Names;
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self, TransactionStmtKind, VariableSetKind};
use std::sync::Arc;

pub use distvalue::ValueSource;
pub use multishard::{AggKind, MultiShardPlan, MultiShardShape};
pub use router::{InsertRow, RouterPlan};
pub use template::ShardSqlTemplate;

#[cfg(test)]
mod tests;

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

/// An argument of a Citus function call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UtilityArg {
    Const(Option<String>),
    Param(usize),
}

/// A Citus function call standing at `text[start..end]`.
#[derive(Debug, Clone)]
pub struct InlineCall {
    pub start: usize,
    pub end: usize,
    pub name: String,
    pub args: Vec<(Option<String>, UtilityArg)>,
    /// The call is the one function of a FROM item (`FROM f() [AS a]`): its whole
    /// result takes its place as a subquery, under the function's name when the item
    /// has no alias of its own (`Some(name)`), or under the item's alias (`Some("")`).
    pub from_item: Option<String>,
}

#[derive(Debug, Clone)]
pub enum Plan {
    /// Runs on the coordinator node as written.
    Local,
    Empty,
    Transaction(TxnCommand),
    /// Any other `SET` / `RESET` (`RESET ALL` too): run on the coordinator node, then,
    /// once it succeeded, applied to every node connection of the session the way its
    /// scope says (whichever protocol carried it).
    SessionSetting(SettingScope),
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
    ShowCitus {
        name: String,
    },
    /// A Citus function call: positional args (named ones placed by the executor).
    Utility {
        name: String,
        args: Vec<(Option<String>, UtilityArg)>,
    },
    /// Citus functions called inside a larger expression (`pg_size_pretty(citus_table_size('t'))`):
    /// each is computed first and its value put in its place, then the statement runs
    /// on the coordinator node.
    UtilityInline {
        calls: Vec<InlineCall>,
    },
    Router(Arc<RouterPlan>),
    MultiShard(Arc<MultiShardPlan>),
    /// A multi-row INSERT split per shard (or with keys computed at execution).
    InsertRows(Arc<insert::InsertRowsPlan>),
    /// INSERT ... SELECT between co-located tables, run shard by shard.
    InsertSelect(Arc<insert_select::InsertSelectPlan>),
    /// INSERT ... SELECT through the coordinator (`insert_select::plan_via_coordinator`).
    InsertViaCoordinator(Arc<insert_select::InsertViaCoordinatorPlan>),
    /// INSERT into a local table of a distributed SELECT (`insert_select::plan_into_local`).
    InsertIntoLocal(Arc<insert_select::InsertIntoLocalPlan>),
    /// CREATE TABLE AS / SELECT INTO reading distributed tables (`create_as`).
    CreateTableAs(Arc<create_as::CreateAsPlan>),
    /// SQL `PREPARE` of a statement on distributed tables (`sql_prepare`).
    SqlPrepare(Arc<sql_prepare::PreparePlan>),
    /// SQL `EXECUTE` of a statement pgshard holds (`sql_prepare`).
    SqlExecute(Arc<sql_prepare::ExecutePlan>),
    /// COPY FROM STDIN into a distributed table: rows routed by pgshard.
    CopyIn(Arc<copy::CopyInPlan>),
    /// COPY TO STDOUT from a distributed table or a selection on one.
    CopyOut(Arc<copy::CopyOutPlan>),
    /// UPDATE / DELETE on every shard of a table.
    MultiShardModify(Arc<multishard::ModifyPlan>),
    /// EXPLAIN of a statement on distributed tables.
    Explain(Arc<explain::ExplainPlan>),
    /// DROP TABLE naming distributed tables.
    DropTables {
        tables: Vec<Arc<DistTable>>,
    },
    /// CREATE INDEX / ALTER TABLE / RENAME on a distributed table: the shell and
    /// every shard (`commands::ddl`).
    Ddl(Arc<ddl::DdlPlan>),
    /// INSERT / UPDATE / DELETE on a reference table: every placement, atomically.
    ReferenceWrite {
        table: Arc<DistTable>,
        template: ShardSqlTemplate,
        tag: String,
        /// Every function the statement calls (`now` for SQL value functions such as
        /// CURRENT_TIMESTAMP): the executor refuses non-immutable ones, which could
        /// write different values on different placements.
        functions: Vec<String>,
        /// Which columns may get their default: the executor refuses the write when
        /// one of them has a default that is not immutable, for the same reason.
        defaults: DefaultUse,
    },
    /// A role statement: the coordinator node, then the roles it changes made equal
    /// on every worker (`commands::roles`).
    Role(Arc<security::RolePlan>),
    /// GRANT / REVOKE reaching shards or workers, ALTER DEFAULT PRIVILEGES
    /// (`commands::privileges`).
    Grant(Arc<security::GrantPlan>),
    /// DROP INDEX of indexes of distributed tables, each with its table.
    DropIndexes {
        stmt: protobuf::DropStmt,
        indexes: Vec<(Arc<DistTable>, String)>,
    },
    /// TRUNCATE / VACUUM / ANALYZE of distributed tables, statement applied to each shard.
    Propagate(Arc<propagate::PropagatePlan>),
    /// DECLARE CURSOR over distributed tables: rows kept on the coordinator node.
    DeclareCursor(Arc<cursor::DeclareCursorPlan>),
    Unsupported(PgError),
}

impl Plan {
    /// What PostgreSQL still runs in a failed block (25P02 otherwise): the statements
    /// that end it or roll back into it.
    pub fn ends_failed_block(&self) -> bool {
        matches!(
            self,
            Plan::Transaction(
                TxnCommand::Commit { .. }
                    | TxnCommand::Rollback { .. }
                    | TxnCommand::RollbackTo { .. }
            )
        ) || matches!(
            self,
            Plan::Transaction(TxnCommand::Other { kind, .. })
                if *kind == TransactionStmtKind::TransStmtPrepare as i32
        )
    }
}

/// Names of the Citus settings pgshard itself owns.
pub const CITUS_SETTINGS: &[&str] = &[
    "citus.shard_count",
    "citus.shard_replication_factor",
    "citus.multi_shard_commit_protocol",
    "citus.explain_all_tasks",
    "citus.max_adaptive_executor_pool_size",
    "citus.max_intermediate_result_size",
];

/// Which columns of the table a write may fill with their defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DefaultUse {
    /// None (DELETE, UPDATE without `DEFAULT`).
    Nothing,
    /// Every column but these (INSERT with a column list).
    AllExcept(Vec<String>),
    /// The columns after the first n (INSERT without a column list).
    AllAfter(usize),
    /// Any column (`DEFAULT` written somewhere).
    Any,
}

/// Plans one parsed statement against a catalog snapshot, its unqualified table
/// names resolved as `names` says (the session's search_path).
pub fn plan(
    stmt: &Statement,
    catalog: &Catalog,
    names: &Names,
    is_utility_function: &dyn Fn(&str) -> bool,
) -> PgResult<Plan> {
    let Some(node) = &stmt.node else {
        return Ok(Plan::Empty);
    };
    match node {
        N::TransactionStmt(t) => return Ok(Plan::Transaction(txn_command(t, &stmt.text))),
        N::VariableSetStmt(v) if v.name.starts_with("citus.") => {
            let value = match VariableSetKind::try_from(v.kind) {
                Ok(VariableSetKind::VarSetValue) => {
                    Some(const_text(v.args.first()).ok_or_else(|| {
                        PgError::new(
                            crate::error::sqlstate::INVALID_PARAMETER_VALUE,
                            format!("invalid value for {}", v.name),
                        )
                    })?)
                }
                _ => None,
            };
            return Ok(Plan::SetCitus {
                name: v.name.clone(),
                value,
                local: v.is_local,
            });
        }
        N::VariableSetStmt(v) => return Ok(Plan::SessionSetting(setting_scope(v))),
        N::DiscardStmt(d) if d.target == protobuf::DiscardMode::DiscardAll as i32 => {
            return Ok(Plan::DiscardAll)
        }
        N::DeallocateStmt(d) => {
            return Ok(Plan::Deallocate {
                name: (!d.isall).then(|| d.name.clone()),
            })
        }
        N::VariableShowStmt(v) if v.name.starts_with("citus.") => {
            return Ok(Plan::ShowCitus {
                name: v.name.clone(),
            })
        }
        N::SelectStmt(s) => {
            if let Some(u) = utility_call(s, is_utility_function) {
                return Ok(u);
            }
        }
        _ => {}
    }
    if let Some(p) = inline_utility_calls(node, &stmt.text, is_utility_function) {
        return Ok(p);
    }
    // Roles and privileges reach the workers even before any table is distributed.
    if let Some(p) = security::plan_role(node, &stmt.text) {
        return Ok(Plan::Role(Arc::new(p)));
    }
    match security::plan_grant(node, &stmt.text, catalog, names) {
        Some(Ok(p)) => return Ok(Plan::Grant(Arc::new(p))),
        Some(Err(e)) => return Ok(Plan::Unsupported(e)),
        None => {}
    }
    if catalog.is_empty() {
        return Ok(Plan::Local);
    }
    // Types, domains, collations, functions and schemas: every worker too.
    if let Some(p) = objects::plan_objects(node, &stmt.text) {
        return Ok(Plan::Grant(Arc::new(p)));
    }
    if let N::ExplainStmt(e) = node {
        return plan_explain(e, stmt, catalog, names, is_utility_function);
    }
    if let N::DropStmt(d) = node {
        if d.remove_type == protobuf::ObjectType::ObjectTable as i32 {
            return Ok(plan_drop_tables(d, catalog, names));
        }
        if d.remove_type == protobuf::ObjectType::ObjectIndex as i32 {
            match ddl::plan_drop_index(d, catalog) {
                Some(Ok(indexes)) => {
                    return Ok(Plan::DropIndexes {
                        stmt: d.clone(),
                        indexes,
                    })
                }
                Some(Err(e)) => return Ok(Plan::Unsupported(e)),
                None => {}
            }
        }
    }
    match propagate::plan_propagate(node, &stmt.text, catalog, names) {
        Some(Ok(p)) => return Ok(Plan::Propagate(Arc::new(p))),
        Some(Err(e)) => return Ok(Plan::Unsupported(e)),
        None => {}
    }
    match ddl::plan_ddl(node, &stmt.text, catalog, names) {
        Some(Ok(p)) => return Ok(Plan::Ddl(Arc::new(p))),
        Some(Err(e)) => return Ok(Plan::Unsupported(e)),
        None => {}
    }
    let mut rels = relations(stmt, catalog.tables_by_name.keys().map(String::as_str));
    // The relation a CREATE makes is not a reference: PostgreSQL creates it in the
    // path's first schema whatever an existing table of that name is.
    if let Some(at) = created_relation(node) {
        rels.retain(|r| r.location != at);
    }
    let dist: Vec<(&RelRef, Arc<DistTable>)> = rels
        .iter()
        .filter_map(|r| {
            names
                .resolve(catalog, r.schema.as_deref(), &r.name)
                .map(|t| (r, t.clone()))
        })
        .collect();
    if dist.is_empty() {
        // Statements naming tables by lists of names (COMMENT ON, DROP TRIGGER ...):
        // one naming a distributed table is refused, not run on its shell.
        if let Some(t) = object_list_tables(node)
            .iter()
            .find_map(|(schema, name)| names.resolve(catalog, schema.as_deref(), name))
        {
            return Ok(Plan::Unsupported(PgError::not_supported(format!(
                "pgshard does not support this statement when it involves the distributed table \"{}\" yet",
                t.name
            ))));
        }
        return Ok(Plan::Local);
    }
    match node {
        _ if create_as::applies(node) => create_as::plan_create_as(node, &stmt.text),
        N::CreateStmt(c) if create_as::only_like_sources(c, &dist) => Ok(Plan::Local),
        N::PrepareStmt(p) => sql_prepare::plan_prepare(p),
        N::SelectStmt(s) if rels.len() > 1 && dist.len() == rels.len() => {
            let pairs: Vec<(RelRef, Arc<DistTable>)> = dist
                .iter()
                .map(|(r, t)| ((*r).clone(), t.clone()))
                .collect();
            join::plan_join(s, &stmt.text, &pairs)
        }
        N::InsertStmt(i)
            if rels.len() > 1
                && matches!(
                    i.select_stmt.as_deref().and_then(|x| x.node.as_ref()),
                    Some(N::SelectStmt(s)) if s.values_lists.is_empty()
                ) =>
        {
            // The target first, then the source.
            let target_at = i.relation.as_ref().map(|r| r.location.max(0) as usize);
            let mut dist = dist;
            dist.sort_by_key(|(r, _)| Some(r.location) != target_at);
            if Some(dist[0].0.location) != target_at {
                // The target is a local table.
                return insert_select::plan_into_local(i);
            }
            match insert_select::plan_insert_select(i, &stmt.text, &dist, rels.len())? {
                Plan::Unsupported(e) if e.code == sqlstate::FEATURE_NOT_SUPPORTED => {
                    // Not shard by shard: through the coordinator.
                    let table = dist[0].1.clone();
                    if table.method == PartitionMethod::Reference {
                        return Ok(Plan::Unsupported(e));
                    }
                    insert_select::plan_via_coordinator(i, &stmt.text, table, dist.len() > 1)
                }
                p => Ok(p),
            }
        }
        N::UpdateStmt(_) | N::DeleteStmt(_) if update_from::applies(node) => {
            let pairs: Vec<(RelRef, Arc<DistTable>)> = dist
                .iter()
                .map(|(r, t)| ((*r).clone(), t.clone()))
                .collect();
            update_from::plan_update_from(node, &stmt.text, &pairs, rels.len())
        }
        N::SelectStmt(_) | N::InsertStmt(_) | N::UpdateStmt(_) | N::DeleteStmt(_) => {
            if rels.len() != 1 || dist.len() != 1 {
                return Ok(Plan::Unsupported(PgError::not_supported(format!(
                    "pgshard does not support statements that combine the distributed table \"{}\" with other tables or subqueries yet",
                    dist[0].1.name
                ))));
            }
            let (rel, table) = (dist[0].0, dist[0].1.clone());
            router::plan_dml(node, &stmt.text, rel, table)
        }
        N::CopyStmt(c) => {
            if c.query.is_none() && (rels.len() != 1 || dist.len() != 1) {
                return Ok(Plan::Unsupported(PgError::not_supported(
                    "pgshard could not resolve the table of this COPY",
                )));
            }
            let plan_query = |q: &str| plan_text(q, catalog, names, is_utility_function);
            copy::plan_copy(c, &stmt.text, dist[0].1.clone(), &plan_query)
        }
        N::DeclareCursorStmt(d) => cursor::plan_declare(d, &|q: &str| {
            plan_text(q, catalog, names, is_utility_function)
        }),
        _ => Ok(Plan::Unsupported(PgError::not_supported(format!(
            "pgshard does not support this statement on the distributed table \"{}\" yet",
            dist[0].1.name
        )))),
    }
}

/// Plans a statement pgshard deparsed itself (a part of the client's statement).
fn plan_text(
    sql: &str,
    catalog: &Catalog,
    names: &Names,
    is_utility_function: &dyn Fn(&str) -> bool,
) -> PgResult<Plan> {
    let mut stmts = crate::sql::parse::parse(sql)?;
    plan(&stmts.remove(0), catalog, names, is_utility_function)
}

/// EXPLAIN: the explained statement is planned; where it runs on the coordinator node
/// the EXPLAIN goes there unchanged, otherwise pgshard explains it in Citus's shape.
fn plan_explain(
    e: &protobuf::ExplainStmt,
    stmt: &Statement,
    catalog: &Catalog,
    names: &Names,
    is_utility_function: &dyn Fn(&str) -> bool,
) -> PgResult<Plan> {
    let Some((inner, prefix, analyze, costs)) = explain::split_explain(e, &stmt.text)? else {
        return Ok(Plan::Local);
    };
    let inner_plan = plan(&inner, catalog, names, is_utility_function)?;
    match inner_plan {
        Plan::Local => Ok(Plan::Local),
        Plan::Router(_) | Plan::MultiShard(_) | Plan::MultiShardModify(_) => {
            Ok(Plan::Explain(Arc::new(explain::ExplainPlan {
                inner: inner_plan,
                prefix,
                analyze,
                costs,
            })))
        }
        Plan::Unsupported(e) => Ok(Plan::Unsupported(e)),
        _ => Ok(Plan::Unsupported(PgError::not_supported(
            "pgshard does not support EXPLAIN of this statement",
        ))),
    }
}

/// DROP TABLE names its tables as lists of strings, not RangeVars.
fn plan_drop_tables(d: &protobuf::DropStmt, catalog: &Catalog, names: &Names) -> Plan {
    let mut tables: Vec<Arc<DistTable>> = Vec::new();
    let mut local = 0;
    for o in &d.objects {
        let Some(N::List(l)) = o.node.as_ref() else {
            continue;
        };
        let parts = crate::sql::parse::string_items(&l.items);
        let found = match parts.as_slice() {
            [name] => names.resolve(catalog, None, name),
            [schema, name] => names.resolve(catalog, Some(schema), name),
            [_, schema, name] => names.resolve(catalog, Some(schema), name),
            _ => None,
        };
        match found {
            Some(t) if !tables.iter().any(|x| x.relid == t.relid) => tables.push(t.clone()),
            Some(_) => {}
            None => local += 1,
        }
    }
    if tables.is_empty() {
        return Plan::Local;
    }
    if local > 0 {
        return Plan::Unsupported(PgError::not_supported(
            "DROP TABLE mixing distributed and local tables is not supported yet: drop them separately",
        ));
    }
    Plan::DropTables { tables }
}

/// Where the relation a CREATE statement makes is named (its RangeVar's location).
fn created_relation(node: &N) -> Option<usize> {
    let rv = match node {
        N::CreateStmt(c) => c.relation.as_ref()?,
        N::CreateTableAsStmt(c) => c.into.as_ref()?.rel.as_ref()?,
        N::ViewStmt(v) => v.view.as_ref()?,
        N::CreateSeqStmt(c) => c.sequence.as_ref()?,
        N::CreateForeignTableStmt(c) => c.base_stmt.as_ref()?.relation.as_ref()?,
        N::SelectStmt(s) => s.into_clause.as_ref()?.rel.as_ref()?,
        _ => return None,
    };
    Some(rv.location.max(0) as usize)
}

/// The tables a statement names by lists of names rather than RangeVars (schema if
/// written, name): DROP of tables and of their triggers, rules and policies,
/// COMMENT ON / SECURITY LABEL ON tables and their columns, constraints, triggers.
fn object_list_tables(node: &N) -> Vec<(Option<String>, String)> {
    use protobuf::ObjectType as O;
    // How many trailing items name something inside the table.
    let inner_items = |objtype: i32| -> Option<usize> {
        let t = O::try_from(objtype).ok()?;
        match t {
            O::ObjectTable | O::ObjectView | O::ObjectMatview | O::ObjectForeignTable => Some(0),
            O::ObjectColumn
            | O::ObjectTabconstraint
            | O::ObjectTrigger
            | O::ObjectRule
            | O::ObjectPolicy => Some(1),
            _ => None,
        }
    };
    let name_of = |o: &protobuf::Node, inner: usize| -> Option<(Option<String>, String)> {
        let Some(N::List(l)) = o.node.as_ref() else {
            return None;
        };
        let parts = crate::sql::parse::string_items(&l.items);
        let parts = parts.get(..parts.len().checked_sub(inner)?)?;
        match parts {
            [name] => Some((None, name.to_string())),
            [.., schema, name] => Some((Some(schema.to_string()), name.to_string())),
            [] => None,
        }
    };
    match node {
        N::DropStmt(d) => match inner_items(d.remove_type) {
            Some(inner) => d.objects.iter().filter_map(|o| name_of(o, inner)).collect(),
            None => Vec::new(),
        },
        N::CommentStmt(c) => match (inner_items(c.objtype), c.object.as_deref()) {
            (Some(inner), Some(o)) => name_of(o, inner).into_iter().collect(),
            _ => Vec::new(),
        },
        N::SecLabelStmt(c) => match (inner_items(c.objtype), c.object.as_deref()) {
            (Some(inner), Some(o)) => name_of(o, inner).into_iter().collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
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

/// The text of a constant (SET values, function arguments).
pub fn const_text(node: Option<&protobuf::Node>) -> Option<String> {
    use pg_query::protobuf::a_const::Val;
    match node?.node.as_ref()? {
        N::AConst(c) => match c.val.as_ref()? {
            Val::Ival(i) => Some(i.ival.to_string()),
            Val::Fval(f) => Some(f.fval.clone()),
            Val::Sval(s) => Some(s.sval.clone()),
            Val::Boolval(b) => Some(if b.boolval {
                "true".into()
            } else {
                "false".into()
            }),
            Val::Bsval(b) => Some(b.bsval.clone()),
        },
        N::TypeCast(tc) => const_text(tc.arg.as_deref()),
        N::String(s) => Some(s.sval.clone()),
        _ => None,
    }
}

/// Every Citus function pgshard runs itself has one of these in its name: a statement
/// whose text has none calls none of them (a cheap test before walking its tree).
pub(crate) const UTILITY_NAME_HINTS: [&str; 7] = [
    "citus_",
    "master_",
    "distribut",
    "shard",
    "undistribute",
    "reference",
    "recover_prepared",
];

/// `SELECT citus_function(args)` with nothing else in the statement.
/// Citus function calls nested in expressions, found only when the text names one.
fn inline_utility_calls(
    node: &N,
    text: &str,
    is_utility_function: &dyn Fn(&str) -> bool,
) -> Option<Plan> {
    let lower = text.to_ascii_lowercase();
    if !UTILITY_NAME_HINTS.iter().any(|k| lower.contains(k)) {
        return None;
    }
    // Calls that are the one function of a FROM item, by location: whether the item
    // has an alias.
    let mut from_items: Vec<(i32, bool)> = Vec::new();
    for (n, _, _, _) in node.nodes() {
        let pg_query::NodeRef::RangeFunction(rf) = n else {
            continue;
        };
        if rf.ordinality || rf.is_rowsfrom || rf.functions.len() != 1 {
            continue;
        }
        let Some(N::List(l)) = rf.functions[0].node.as_ref() else {
            continue;
        };
        if let Some(N::FuncCall(fc)) = l.items.first().and_then(|f| f.node.as_ref()) {
            from_items.push((fc.location, rf.alias.is_some()));
        }
    }
    let mut calls = Vec::new();
    for (n, _, _, _) in node.nodes() {
        let pg_query::NodeRef::FuncCall(fc) = n else {
            continue;
        };
        let Some(name) = func_name(fc) else { continue };
        if !is_utility_function(&name) {
            continue;
        }
        let start = fc.location.max(0) as usize;
        let Some(end) = call_end(text, start) else {
            return Some(Plan::Unsupported(PgError::not_supported(format!(
                "pgshard could not read the call of {name}()"
            ))));
        };
        let mut args = Vec::new();
        for a in &fc.args {
            let (arg_name, value) = match a.node.as_ref() {
                Some(N::NamedArgExpr(na)) => (Some(na.name.clone()), na.arg.as_deref()),
                _ => (None, Some(a)),
            };
            match const_text(value) {
                Some(t) => args.push((arg_name, UtilityArg::Const(Some(t)))),
                None => {
                    return Some(Plan::Unsupported(PgError::not_supported(format!(
                        "arguments of {name}() inside an expression must be constants"
                    ))))
                }
            }
        }
        let from_item = from_items
            .iter()
            .find(|(l, _)| *l == fc.location)
            .map(|(_, has_alias)| {
                if *has_alias {
                    String::new()
                } else {
                    name.clone()
                }
            });
        calls.push(InlineCall {
            start,
            end,
            name,
            args,
            from_item,
        });
    }
    if calls.is_empty() {
        return None;
    }
    calls.sort_by_key(|c| c.start);
    if calls.windows(2).any(|w| w[1].start < w[0].end) {
        return Some(Plan::Unsupported(PgError::not_supported(
            "nested Citus function calls are not supported",
        )));
    }
    Some(Plan::UtilityInline { calls })
}

/// The end of a function call starting at `start`: just after its closing parenthesis,
/// skipping quoted strings and identifiers.
fn call_end(text: &str, start: usize) -> Option<usize> {
    let b = text.as_bytes();
    let mut i = start;
    let mut depth = 0usize;
    while i < b.len() {
        match b[i] {
            b'\'' | b'"' => {
                let q = b[i];
                i += 1;
                while i < b.len() {
                    if b[i] == q {
                        if b.get(i + 1) == Some(&q) {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
            }
            b'(' => depth += 1,
            b')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

fn utility_call(
    s: &protobuf::SelectStmt,
    is_utility_function: &dyn Fn(&str) -> bool,
) -> Option<Plan> {
    if s.target_list.len() != 1 || !s.from_clause.is_empty() || s.where_clause.is_some() {
        return None;
    }
    let N::ResTarget(rt) = s.target_list[0].node.as_ref()? else {
        return None;
    };
    let N::FuncCall(fc) = rt.val.as_ref()?.node.as_ref()? else {
        return None;
    };
    let name = func_name(fc)?;
    if !is_utility_function(&name) {
        return None;
    }
    let mut args = Vec::new();
    for a in &fc.args {
        let (arg_name, value) = match a.node.as_ref()? {
            N::NamedArgExpr(na) => (Some(na.name.clone()), na.arg.as_deref()),
            _ => (None, Some(a)),
        };
        let arg = match value.and_then(|v| v.node.as_ref()) {
            Some(N::ParamRef(p)) => UtilityArg::Param(p.number as usize - 1),
            Some(N::AConst(c)) if c.isnull => UtilityArg::Const(None),
            Some(N::TypeCast(tc))
                if matches!(
                    tc.arg.as_ref().and_then(|x| x.node.as_ref()),
                    Some(N::ParamRef(_))
                ) =>
            {
                let Some(N::ParamRef(p)) = tc.arg.as_ref().and_then(|x| x.node.as_ref()) else {
                    return None;
                };
                UtilityArg::Param(p.number as usize - 1)
            }
            _ => match const_text(value) {
                Some(t) => UtilityArg::Const(Some(t)),
                None => {
                    return Some(Plan::Unsupported(PgError::not_supported(format!(
                        "arguments of {name}() must be constants or parameters"
                    ))))
                }
            },
        };
        args.push((arg_name, arg));
    }
    Some(Plan::Utility { name, args })
}

/// A function's unqualified lower-case name (`pg_catalog.count` → `count`).
pub fn func_name(fc: &protobuf::FuncCall) -> Option<String> {
    match fc.funcname.last()?.node.as_ref()? {
        N::String(s) => Some(s.sval.to_ascii_lowercase()),
        _ => None,
    }
}
