//! Stable functions once per statement (`planner::evaluate`): before a statement on
//! distributed tables runs, the expressions PostgreSQL evaluates once (`now()`,
//! `current_user`, `current_setting('x')`, VOLATILE calls in INSERT VALUES rows) are
//! evaluated on the client's own coordinator-node connection — in its block when it
//! is in one, so the block's `now()` is the one `SELECT now()` shows it, with its
//! TimeZone, DateStyle and role — and the statement, their values in its tree as typed
//! constants, is deparsed and planned again. VOLATILE functions left for the shards
//! are refused where Citus refuses them: in an UPDATE's SET list, and anywhere in a
//! multi-shard UPDATE / DELETE (0A000).

use super::*;
use crate::planner::evaluate::{self, Volatility};
use pg_query::protobuf::node::Node as N;

/// Citus's refusal, word for word.
const VOLATILE_IN_UPDATE: &str =
    "functions used in UPDATE queries on distributed tables must not be VOLATILE";

impl Session {
    /// The statement with its once-per-statement expressions evaluated and its new
    /// plan; None when it has none (or its plan does not reach the shards), which
    /// costs one walk of the tree and, for statements calling functions, a cached
    /// `pg_proc` look-up.
    pub(super) async fn evaluate_once(
        &mut self,
        stmt: &Statement,
        plan: &Plan,
        catalog: &Catalog,
    ) -> PgResult<Option<(Statement, Plan)>> {
        if !reaches_shards(plan) {
            return Ok(None);
        }
        let Some(node) = &stmt.node else {
            return Ok(None);
        };
        let Some((names, _)) = evaluate::called_functions(node) else {
            return Ok(None);
        };
        let kinds = self.function_kinds(&names).await?;
        // A session that left state on its worker connections (`set_config` in a
        // distributed statement, a function's SET: `isolation.rs`) may have settings
        // there that its coordinator-node connection lacks: the shards read them.
        let settings_on_workers = self.is_pinned();
        let table: Vec<(String, Volatility)> = names
            .iter()
            .zip(kinds)
            .filter(|(n, _)| !(settings_on_workers && n.as_str() == "current_setting"))
            .filter_map(|(n, k)| {
                k.map(|k| {
                    (
                        n.clone(),
                        Volatility {
                            immutable: k.immutable,
                            volatile: k.volatile,
                            scalar: !k.aggregate && !k.set_returning,
                        },
                    )
                })
            })
            .collect();
        let lookup = |name: &str| table.iter().find(|(n, _)| n == name).map(|(_, k)| *k);
        let reference_write = match plan {
            Plan::ModifyRecursive(p) => &p.outer_plan,
            other => other,
        };
        if matches!(node, N::UpdateStmt(_))
            && !matches!(reference_write, Plan::ReferenceWrite { .. })
            && evaluate::calls_volatile(node, &lookup, true)
        {
            return Err(PgError::not_supported(VOLATILE_IN_UPDATE));
        }
        let exprs = evaluate::evaluable(node, &lookup);
        let (stmt, plan) = if exprs.is_empty() {
            (stmt.clone(), plan.clone())
        } else {
            let rows = self.home_rows(&evaluate::evaluation_query(&exprs)?).await?;
            let row = rows.into_iter().next().ok_or_else(|| {
                PgError::internal("evaluating the statement's functions gave no row")
            })?;
            let mut values = Vec::with_capacity(exprs.len());
            for pair in row.chunks(2) {
                let type_name = pair[0]
                    .as_deref()
                    .ok_or_else(|| PgError::internal("pg_typeof gave NULL"))?;
                values.push(evaluate::typed_constant(pair[1].as_deref(), type_name)?);
            }
            let tree = evaluate::replace(node, &lookup, values);
            let text = tree.deparse(Default::default()).map_err(|e| {
                PgError::internal(format!("deparsing the statement with its values: {e}"))
            })?;
            // Parsed again: the planner finds names by their positions in the text.
            let stmt = parse::parse(&text)?
                .into_iter()
                .next()
                .ok_or_else(|| PgError::internal(format!("no statement in {text}")))?;
            let plan = self.plan_statement(&stmt, catalog).await?;
            (stmt, plan)
        };
        if matches!(plan, Plan::MultiShardModify(_))
            && stmt
                .node
                .as_ref()
                .is_some_and(|n| evaluate::calls_volatile(n, &lookup, false))
        {
            return Err(PgError::not_supported(VOLATILE_IN_UPDATE));
        }
        Ok(Some((stmt, plan)))
    }

    /// Whether the statement has something [`Session::evaluate_once`] would evaluate
    /// (an SQL value function, a call of a function that is not immutable); an error
    /// looking the functions up counts as yes.
    pub(super) async fn evaluates_once(&mut self, node: &N) -> bool {
        let Some((names, value_function)) = evaluate::called_functions(node) else {
            return false;
        };
        if value_function {
            return true;
        }
        match self.function_kinds(&names).await {
            Ok(kinds) => kinds.iter().any(|k| !k.is_some_and(|k| k.immutable)),
            Err(_) => true,
        }
    }

    /// Whether a prepared statement evaluates functions at each Bind.
    pub(super) async fn prepared_evaluates(&mut self, stmt: &Statement, plan: &Plan) -> bool {
        match &stmt.node {
            Some(node) if reaches_shards(plan) => self.evaluates_once(node).await,
            _ => false,
        }
    }

    /// `sql`'s rows on the client's own coordinator-node connection: inside a block the
    /// block's (joined now if it was not yet), else its home connection with its
    /// settings.
    pub(super) async fn home_rows(&mut self, sql: &str) -> PgResult<Vec<Vec<Option<String>>>> {
        let coord = self.shared.coordinator.clone();
        if self.tx.state != TxnState::Idle || self.held_index(&coord).is_some() {
            let idx = self.bulk_conn(&coord, false).await?;
            return self.tx.held[idx].conn.simple_rows(sql).await;
        }
        let mut conn = self.home_with_settings().await?;
        let rows = conn.simple_rows(sql).await?;
        self.absorb_home_reports(&mut conn);
        Ok(rows)
    }
}

/// Whether the plan sends the statement (or part of it) to the shards.
fn reaches_shards(plan: &Plan) -> bool {
    matches!(
        plan,
        Plan::Router(_)
            | Plan::MultiShard(_)
            | Plan::MultiShardModify(_)
            | Plan::InsertRows(_)
            | Plan::InsertSelect(_)
            | Plan::InsertViaCoordinator(_)
            | Plan::InsertIntoLocal(_)
            | Plan::CreateTableAs(_)
            | Plan::ReferenceWrite { .. }
    ) || matches!(plan, Plan::ModifyRecursive(p) if !matches!(p.outer_plan, Plan::Local))
}
