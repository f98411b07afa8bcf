//! `CREATE TABLE x AS` / `SELECT ... INTO x` reading distributed tables
//! (`planner::create_as`): in one transaction (the session's block, or pgshard's own),
//! the table is created empty on the client's coordinator-node connection from the
//! SELECT over the shells, then filled by the INSERT-into-a-local-table path
//! (`via_coordinator.rs`: the SELECT through pgshard's planner, its rows as typed
//! VALUES). The client sees PostgreSQL's tag, `SELECT n`.

use super::via_coordinator::read_answer;
use super::*;
use crate::planner::create_as::CreateAsPlan;

impl Session {
    pub(super) async fn create_table_as(
        &mut self,
        plan: &CreateAsPlan,
        params: &BoundParams<'_>,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let extended = params.bind.is_some();
        let own = self.begin_own_block().await?;
        let done = self.create_and_fill(plan, params, sink).await;
        match done {
            Ok(count) => {
                self.end_own_block(own, true, extended).await?;
                match count {
                    Some(n) => sink.complete(&format!("SELECT {n}")),
                    None => sink.complete("CREATE TABLE AS"),
                }
                Ok(())
            }
            Err(e) => {
                self.end_own_block(own, false, extended).await.ok();
                Err(e)
            }
        }
    }

    /// Creates the table and fills it; None when `IF NOT EXISTS` found it there.
    async fn create_and_fill(
        &mut self,
        plan: &CreateAsPlan,
        params: &BoundParams<'_>,
        sink: &mut ResultSink,
    ) -> PgResult<Option<u64>> {
        let coord = self.shared.coordinator.clone();
        let idx = self.bulk_conn(&coord, true).await?;
        let conn = &mut self.tx.held[idx].conn;
        let no_bind = BindMsg::default_empty();
        msg::write_unnamed_run(&mut conn.wbuf, &plan.create, &[], &no_bind, &[], false);
        msg::write_sync(&mut conn.wbuf);
        conn.flush().await?;
        let mut existed = false;
        read_answer(conn, |tag, body| {
            if tag == b'N' {
                existed |= plan.if_not_exists
                    && PgError::from_server_fields(body.clone()).code == sqlstate::DUPLICATE_TABLE;
                sink.push_frame(tag, body);
            }
        })
        .await?;
        if existed {
            return Ok(None);
        }
        let mut rows = ResultSink::default();
        let count = self
            .insert_local_rows(&plan.fill, params, &[], false, &mut rows)
            .await?;
        Ok(Some(count))
    }
}
