//! DECLARE CURSOR over distributed tables (`planner::cursor`): the query's rows,
//! gathered through pgshard's planner in the session's block, go with their position
//! into a temporary table (`ON COMMIT DROP`) on the block's coordinator-node
//! connection, and PostgreSQL's own cursor is declared over it there. FETCH, MOVE and
//! CLOSE name no distributed table, so they run on that same connection as written.
//!
//! The coordinator connection joins the block as a reader: temporary objects cannot
//! take part in PREPARE TRANSACTION. A block that also writes local tables while it
//! writes on two other nodes therefore fails at COMMIT (PostgreSQL's 0A000, "cannot
//! PREPARE a transaction that has operated on temporary objects") and is rolled back
//! on every node.

use super::via_coordinator::{write_typed_rows, ROWS_PER_INSERT};
use super::*;
use crate::planner::cursor::{materialized_query, DeclareCursorPlan};

impl Session {
    pub(super) async fn declare_cursor(
        &mut self,
        plan: &DeclareCursorPlan,
        params: &BoundParams<'_>,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        self.outside_block_check("DECLARE CURSOR")?;
        let (fields, rows) = self.distributed_select(&plan.select, params).await?;
        if fields.is_empty() {
            return Err(PgError::not_supported(
                "pgshard does not support a cursor of no columns over distributed tables",
            ));
        }
        let mut types = vec!["pg_catalog.int8".to_string()];
        types.extend(self.type_names(&fields).await?);
        self.cursor_tables += 1;
        let name = format!("pgshard_cursor_{}", self.cursor_tables);
        let table = quote_ident(&name);
        let columns: Vec<String> = types
            .iter()
            .enumerate()
            .map(|(i, t)| match i {
                0 => format!("pgshard_ord {t}"),
                _ => format!("c{i} {t}"),
            })
            .collect();
        let coord = self.shared.coordinator.clone();
        let idx = self.bulk_conn(&coord, false).await?;
        let conn = &mut self.tx.held[idx].conn;
        conn.simple(&format!(
            "CREATE TEMPORARY TABLE {table} ({}) ON COMMIT DROP",
            columns.join(", ")
        ))
        .await?;
        for (n, chunk) in rows.chunks(ROWS_PER_INSERT).enumerate() {
            let numbered: Vec<Vec<Option<Bytes>>> = chunk
                .iter()
                .enumerate()
                .map(|(i, row)| {
                    let ord = Bytes::from((n * ROWS_PER_INSERT + i).to_string());
                    std::iter::once(Some(ord))
                        .chain(row.iter().cloned())
                        .collect()
                })
                .collect();
            let mut sql = format!("INSERT INTO pg_temp.{table} VALUES ");
            write_typed_rows(&mut sql, &numbered, &types);
            conn.simple(&sql).await?;
        }
        let names: Vec<String> = fields.iter().map(|f| f.name.clone()).collect();
        let declare = plan.declare_over(&materialized_query(&name, &names))?;
        self.tx.held[idx].conn.simple(&declare).await?;
        sink.complete("DECLARE CURSOR");
        Ok(())
    }
}
