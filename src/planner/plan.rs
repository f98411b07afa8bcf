//! The plan of one statement: what the executor runs for it. Session commands
//! (`session_command.rs`) are not plans.

use super::*;
use crate::catalog::DistTable;
use crate::error::PgError;
use pg_query::protobuf;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub enum Plan {
    /// Runs on the coordinator node as written.
    Local,
    /// Transaction control, settings, DISCARD ALL, DEALLOCATE: the session itself
    /// (`session_command.rs`), run by the executor's `session/commands.rs`.
    Session(SessionCommand),
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
    /// COPY FROM STDIN into a distributed table: rows routed by pgshard.
    CopyIn(Arc<copy::CopyInPlan>),
    /// COPY TO STDOUT from a distributed table or a selection on one.
    CopyOut(Arc<copy::CopyOutPlan>),
    /// UPDATE / DELETE on every shard of a table.
    MultiShardModify(Arc<multishard::ModifyPlan>),
    /// A call of a distributed function: its statements run by pgshard.
    FunctionCall(Arc<function_call::FunctionCallPlan>),
    /// EXPLAIN of a statement on distributed tables.
    Explain(Arc<explain::ExplainPlan>),
    /// DROP TABLE naming distributed tables.
    DropTables {
        tables: Vec<Arc<DistTable>>,
        /// `DROP TABLE ... CASCADE`: dependent objects go too (foreign keys of
        /// other tables, on the shells and on the shards).
        cascade: bool,
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
        /// An INSERT's plan through the coordinator, which computes the rows once and
        /// copies them to every placement: what the executor runs instead of refusing
        /// when a function or default is not immutable.
        evaluate_once: Option<Arc<insert_select::InsertViaCoordinatorPlan>>,
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
    /// CREATE TABLE AS / SELECT INTO reading distributed tables (`create_as`).
    CreateTableAs(Arc<create_as::CreateAsPlan>),
    /// SQL `PREPARE` of a statement on distributed tables (`sql_prepare`).
    SqlPrepare(Arc<sql_prepare::PreparePlan>),
    /// SQL `EXECUTE` of a statement pgshard holds (`sql_prepare`).
    SqlExecute(Arc<sql_prepare::ExecutePlan>),
    /// A SELECT run in parts: subplans into intermediate results first
    /// (`recursive::plan_recursive`).
    Recursive(Arc<recursive::RecursivePlan>),
    /// A join not on the distribution columns: some table references moved to the
    /// workers first (broadcast or repartitioned, decided at run time), then a
    /// co-located join (`repartition::plan_repartition`).
    Repartition(Arc<repartition::RepartitionPlan>),
    /// An UPDATE / DELETE run in parts: subplans into intermediate results, shipped to
    /// the nodes the statement runs on (`modify_recursive::plan_modify_recursive`).
    ModifyRecursive(Arc<modify_recursive::ModifyRecursivePlan>),
    /// A statement with modifying CTEs: snapshots, CTEs, then the statement
    /// (`modifying_cte::plan_modifying_ctes`), in one transaction.
    ModifyingCte(Arc<modifying_cte::ModifyingCtePlan>),
    Unsupported(PgError),
}

impl Plan {
    /// What PostgreSQL still runs in a failed block (25P02 otherwise): the statements
    /// that end it or roll back into it.
    pub fn ends_failed_block(&self) -> bool {
        matches!(self, Plan::Session(c) if c.ends_failed_block())
    }
}

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
