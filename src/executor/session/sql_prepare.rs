//! SQL-level `PREPARE` / `EXECUTE` of statements on distributed tables
//! (`planner::sql_prepare`): PREPARE keeps the statement with the protocol-level ones
//! (one namespace, as in PostgreSQL); EXECUTE of a statement pgshard holds plans it
//! again with its arguments in place and runs it as a simple query would.

use super::*;
use crate::planner::sql_prepare::{self, ExecutePlan, PreparePlan};

impl Session {
    /// `EXECUTE name(...)` planned as the coordinator node's (`Plan::Local`) becomes
    /// pgshard's own when the session holds a statement of that name that does not
    /// run on the coordinator node; a `PREPARE` for the coordinator node of a name the
    /// session holds fails as in PostgreSQL (42P05).
    pub(super) fn sql_execute_plan(&self, stmt: &Statement, plan: Plan) -> Plan {
        match (&plan, stmt.node.as_ref()) {
            (Plan::Local, Some(pg_query::protobuf::node::Node::ExecuteStmt(e)))
                if self
                    .statements
                    .get(&e.name)
                    .is_some_and(|p| p.home_name.is_none()) =>
            {
                sql_prepare::plan_execute(e)
            }
            // One namespace: a PREPARE for the coordinator node may not reuse the name.
            (Plan::Local, Some(pg_query::protobuf::node::Node::PrepareStmt(p)))
                if self.statements.contains_key(&p.name) =>
            {
                Plan::Unsupported(PgError::new(
                    sqlstate::DUPLICATE_PREPARED_STATEMENT,
                    format!("prepared statement \"{}\" already exists", p.name),
                ))
            }
            _ => plan,
        }
    }

    pub(super) async fn sql_prepare(
        &mut self,
        plan: &PreparePlan,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        if self.statements.contains_key(&plan.name) {
            return Err(PgError::new(
                sqlstate::DUPLICATE_PREPARED_STATEMENT,
                format!("prepared statement \"{}\" already exists", plan.name),
            ));
        }
        let declared: Vec<u32> = match &plan.declared {
            Some(types) => self
                .describe_on_coordinator(types, &[])
                .await?
                .fields
                .unwrap_or_default()
                .iter()
                .map(|f| f.type_oid)
                .collect(),
            None => Vec::new(),
        };
        let prepared = self
            .prepare(&plan.name, plan.query.clone(), &declared)
            .await?;
        self.statements.insert(plan.name.clone(), prepared);
        sink.complete("PREPARE");
        Ok(())
    }

    pub(super) async fn sql_execute(
        &mut self,
        plan: &ExecutePlan,
        params: &BoundParams<'_>,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let p = self.current_statement(&plan.name).await?;
        let Some(node) = p.stmt.node.as_ref() else {
            return Err(PgError::internal("EXECUTE of an empty statement"));
        };
        let types = if p.meta.param_types.is_empty() {
            Vec::new()
        } else {
            let fields: Vec<FieldDesc> = p
                .meta
                .param_types
                .iter()
                .map(|oid| FieldDesc::computed("", *oid, -1, 0))
                .collect();
            self.type_names(&fields).await?
        };
        let sql = sql_prepare::with_arguments(node, &plan.args, &types)?;
        let mut stmts = parse::parse(&sql)?;
        let stmt = stmts.remove(0);
        let catalog = self.shared.catalog.snapshot();
        let inner = self.plan_statement(&stmt, &catalog).await?;
        if matches!(inner, Plan::SqlExecute(_) | Plan::SqlPrepare(_)) {
            return Err(PgError::not_supported("EXECUTE of EXECUTE"));
        }
        self.run_as_simple_query(&inner, &stmt, params, sink, false)
            .await
    }

    /// Runs the planned statement `stmt` of pgshard's own making as the simple
    /// protocol runs a client's (`simple_query`): on the coordinator node or one shard
    /// as written, anything else by its plan. Replies go to the client, or all into
    /// `sink` with `capture` (an error is then only returned).
    pub(super) async fn run_as_simple_query(
        &mut self,
        inner: &Plan,
        stmt: &Statement,
        params: &BoundParams<'_>,
        sink: &mut ResultSink,
        capture: bool,
    ) -> PgResult<()> {
        let catalog = self.shared.catalog.snapshot();
        let (addr, sql, write) = match inner {
            Plan::Local => (
                self.shared.coordinator.clone(),
                stmt.text.clone(),
                !is_read_only_local(stmt),
            ),
            Plan::Router(r) => {
                let shard = route_bound(r, &[], &BindMsg::default_empty(), &catalog)?;
                let addr = placement_addr(&catalog, shard)?;
                (addr, r.template.for_shard(shard.shard_id), !r.read_only)
            }
            _ => return Box::pin(self.run_plan(inner, stmt, params, &[], true, sink)).await,
        };
        let into = if capture { Some(sink) } else { None };
        self.simple_on_backend_into(&addr, &sql, write, into)
            .await
            .map(|_| ())
    }
}
