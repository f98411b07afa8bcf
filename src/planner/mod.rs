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
pub mod function_call;
pub mod insert;
pub mod insert_select;
pub mod insert_select_clauses;
pub mod join;
pub mod modify_recursive;
pub mod modifying_cte;
pub mod multishard;
pub mod names;
pub mod objects;
pub mod plan;
pub mod propagate;
mod pull_columns;
pub mod recursive;
mod reference_join;
pub mod repartition;
pub mod router;
pub mod security;
mod sequences;
pub mod session_command;
pub mod sql_prepare;
mod steps;
pub mod template;
pub mod update_from;
pub mod utility;
pub mod views;

use crate::catalog::{Catalog, DistTable};
use crate::error::{PgError, PgResult};
use crate::sql::parse::{relations, RelRef, Statement};
pub use names::Names;
use pg_query::protobuf;
use pg_query::protobuf::node::Node as N;
use std::sync::Arc;

pub use distvalue::ValueSource;
pub use multishard::{AggKind, MultiShardPlan, MultiShardShape};
pub use plan::{DefaultUse, Plan};
pub use router::{InsertRow, RouterPlan};
pub use session_command::{
    begin_with_modes, transaction_modes, SessionCommand, SettingScope, TxnCommand,
};
pub use template::ShardSqlTemplate;
pub use utility::{func_name, InlineCall, UtilityArg, UTILITY_NAME_HINTS};
use utility::{inline_utility_calls, utility_call};

#[cfg(test)]
mod tests;

/// What one step of the planning ladder makes of a statement.
pub enum Step {
    /// Not this step's kind of statement: the next step decides.
    NotMine,
    /// Planned. A refusal no later step could lift is planned too, as
    /// `Plan::Unsupported`.
    Planned(Plan),
    /// This step would refuse the statement, but a later one may still plan it
    /// (recursive planning of what cannot be pushed down as a whole): the refusal is
    /// reported only when no later step plans it, as Citus's distributed planner
    /// keeps its deferred errors.
    Deferred(PgError),
}

/// What every planning step sees: the statement and the session's view of the catalog.
pub struct PlanInput<'a> {
    pub stmt: &'a Statement,
    pub node: &'a N,
    pub catalog: &'a Catalog,
    /// Unqualified table names as the session's search_path resolves them.
    pub names: &'a Names,
    pub is_utility_function: &'a dyn Fn(&str) -> bool,
    refs: std::cell::OnceCell<References>,
}

/// The tables a statement references and which of them are distributed.
pub struct References {
    /// Every table reference (by RangeVar), the relation a CREATE makes excepted.
    pub rels: Vec<RelRef>,
    /// The distributed ones: (index in `rels`, table), in text order.
    pub dist: Vec<(usize, Arc<DistTable>)>,
}

impl PlanInput<'_> {
    /// The statement's table references, found once, by the first step needing them.
    pub fn references(&self) -> &References {
        self.refs.get_or_init(|| {
            let mut rels = relations(
                self.stmt,
                self.catalog.tables_by_name.keys().map(String::as_str),
            );
            // The relation a CREATE makes is not a reference: PostgreSQL creates it
            // in the path's first schema whatever an existing table of that name is.
            if let Some(at) = steps::created_relation(self.node) {
                rels.retain(|r| r.location != at);
            }
            let dist = rels
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    self.names
                        .resolve(self.catalog, r.schema.as_deref(), &r.name)
                        .map(|t| (i, t.clone()))
                })
                .collect();
            References { rels, dist }
        })
    }

    /// Plans a statement pgshard deparsed itself (a part of this one), in the same
    /// session view.
    pub fn plan_text(&self, sql: &str) -> PgResult<Plan> {
        plan_text(sql, self.catalog, self.names, self.is_utility_function)
    }
}

/// A step of the ladder.
pub type PlanStep = fn(&PlanInput) -> PgResult<Step>;

/// The planning ladder, cheapest first (docs/ARCHITECTURE.md "Planning ladder"):
/// each step plans the statement, declines it, or defers its refusal.
pub const LADDER: &[(&str, PlanStep)] = &[
    ("utility call", steps::utility_call),
    ("utility calls inside an expression", steps::inline_utility),
    ("role statement", steps::role),
    ("grant", steps::grant),
    ("no distributed table yet", steps::empty_catalog),
    ("call of a distributed function", steps::function_call),
    (
        "views over distributed tables: planned as their definitions",
        views::expand,
    ),
    ("object DDL", steps::objects),
    ("explain", steps::explain),
    ("drop of distributed tables or indexes", steps::drop),
    ("truncate / vacuum / analyze", steps::propagate),
    ("DDL on a distributed table", steps::ddl),
    ("create view over distributed tables", views::view_ddl),
    ("no distributed table referenced", steps::local),
    (
        "writes filling a column from a sequence: through the coordinator node",
        sequences::step,
    ),
    ("modifying CTEs", steps::modifying_ctes),
    (
        "create table as / select into from distributed tables",
        steps::create_as,
    ),
    (
        "create table (like / references a distributed table)",
        steps::create_like,
    ),
    ("SQL-level prepare", steps::sql_prepare),
    (
        "reference tables only: one placement",
        reference_join::reference_tables_only,
    ),
    ("co-located or reference join", steps::join),
    (
        "joins not on the distribution columns: broadcast or repartition",
        steps::repartition,
    ),
    (
        "insert into a local table from distributed tables",
        steps::insert_into_local,
    ),
    ("co-located insert ... select", steps::insert_select),
    (
        "insert ... select through the coordinator node",
        steps::insert_via_coordinator,
    ),
    (
        "update ... from / delete ... using co-located or reference tables",
        steps::update_from,
    ),
    (
        "one distributed table: router or multi-shard",
        steps::one_table,
    ),
    ("copy", steps::copy),
    ("declare cursor", steps::cursor),
    (
        "recursive planning: subplans into intermediate results",
        steps::recursive,
    ),
    (
        "update / delete over intermediate results shipped to the workers",
        steps::modify_recursive,
    ),
];

/// Plans one parsed statement against a catalog snapshot, its unqualified table
/// names resolved as `names` says (the session's search_path): session commands
/// first, then the ladder's steps in order.
pub fn plan(
    stmt: &Statement,
    catalog: &Catalog,
    names: &Names,
    is_utility_function: &dyn Fn(&str) -> bool,
) -> PgResult<Plan> {
    if let Some(c) = session_command::session_command(stmt.node.as_ref(), &stmt.text)? {
        return Ok(Plan::Session(c));
    }
    let Some(node) = &stmt.node else {
        return Ok(Plan::Session(SessionCommand::Empty));
    };
    let input = PlanInput {
        stmt,
        node,
        catalog,
        names,
        is_utility_function,
        refs: Default::default(),
    };
    let mut deferred: Option<PgError> = None;
    for (_, step) in LADDER {
        match step(&input)? {
            Step::NotMine => {}
            Step::Planned(p) => return Ok(p),
            Step::Deferred(e) => {
                deferred.get_or_insert(e);
            }
        }
    }
    Ok(Plan::Unsupported(deferred.unwrap_or_else(|| {
        let refs = input.references();
        let name = refs
            .dist
            .first()
            .map(|(_, t)| t.name.as_str())
            .unwrap_or("?");
        PgError::not_supported(format!(
            "pgshard does not support this statement on the distributed table \"{name}\" yet"
        ))
    })))
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
