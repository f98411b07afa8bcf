//! Running a statement with modifying CTEs (`planner::modifying_cte::ModifyingCtePlan`):
//! its steps in order (snapshots of written tables, CTEs into intermediate results or
//! run, `subplans.rs`'s `intermediate_result` for each result), then the statement
//! itself over them, all in one transaction: the client's block, the string's implicit
//! one, or pgshard's own block begun here (committed at the statement's end in the
//! simple protocol, at Sync in the extended one), so that a later failure (the
//! statement's own `1/0`) rolls back what the modifying CTEs did.

use super::*;
use crate::planner::modifying_cte::{CteStep, ModifyingCtePlan};

impl Session {
    /// `Plan::ModifyingCte`: the steps, then the statement, atomically.
    pub(super) async fn modifying_ctes(
        &mut self,
        plan: &ModifyingCtePlan,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let own = self.begin_own_block().await?;
        let done = self
            .modifying_cte_steps(plan, params, formats, describe, sink)
            .await;
        self.end_own_block(own, done.is_ok(), params.bind.is_some())
            .await?;
        done
    }

    async fn modifying_cte_steps(
        &mut self,
        plan: &ModifyingCtePlan,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let mut made: Vec<&str> = Vec::new();
        let mut done = Ok(());
        for step in &plan.steps {
            done = match step {
                CteStep::Result(sub) => self
                    .intermediate_result(sub, params, &mut made)
                    .await
                    .map(drop),
                CteStep::Run { stmt, plan } => {
                    let mut discarded = ResultSink::capturing();
                    self.plan_into(plan, stmt, params, &[], false, &mut discarded)
                        .await
                }
            };
            if done.is_err() {
                break;
            }
        }
        if done.is_ok() {
            done = self
                .plan_into(
                    &plan.outer_plan,
                    &plan.outer,
                    params,
                    formats,
                    describe,
                    sink,
                )
                .await;
        }
        if done.is_ok() {
            // After a failure the block's rollback removes them.
            self.drop_intermediate_results(&made).await;
        }
        done
    }
}
