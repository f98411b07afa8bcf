//! INSERT ... SELECT into a distributed table that cannot run shard by shard
//! (`planner::insert_select::InsertViaCoordinatorPlan`), inside one client session:
//! 1. the SELECT's rows: the whole statement on the coordinator node when it reads only
//!    local tables, or the SELECT through pgshard's own planner when it reads
//!    distributed ones;
//! 2. PostgreSQL turns them into the target's rows (assignment casts, defaults, CHECK
//!    and NOT NULL constraints, with the user's table named in errors): an INSERT into
//!    the table's empty shell on the coordinator node, `RETURNING` the rows, inside a
//!    savepoint rolled back at once, so the shell stays empty;
//! 3. the rows are copied into the shards as by `COPY FROM STDIN` (`bulk.rs`), in the
//!    session's block or pgshard's own, committed with 2PC where several nodes wrote.

use super::bulk::{
    copy_state, encoding_is_ascii_safe, encoding_is_utf8, null_key_error, text_hashable, CopyState,
};
use super::*;
use crate::planner::insert_select::{InsertViaCoordinatorPlan, ViaSource};
use crate::sql::copy_format::{self as cf, CopyOptions, KeySpec};
use crate::sql::quote::quote_qualified;

/// Rows of a distributed SELECT sent to the shell in one INSERT.
const ROWS_PER_INSERT: usize = 500;
/// COPY text gathered before it is routed to the shards.
const ROUTE_BYTES: usize = 256 * 1024;
/// The savepoint around the shell INSERT (rolled back: the shell stays empty).
const SAVEPOINT: &str = "pgshard_insert_select";

/// The target's rows on their way to the shards: COPY text not routed yet.
struct Router {
    st: CopyState,
    opts: CopyOptions,
    key: KeySpec,
    utf8: bool,
    pending: BytesMut,
    rows: u64,
}

impl Session {
    pub(super) async fn insert_via_coordinator(
        &mut self,
        plan: &InsertViaCoordinatorPlan,
        params: &BoundParams<'_>,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let catalog = self.shared.catalog.snapshot();
        let table = catalog.current(&plan.table);
        let col = table.dist_column.clone().expect("planned with a column");
        if !text_hashable(col.type_oid) {
            return Err(PgError::not_supported(format!(
                "pgshard cannot route INSERT ... SELECT rows by a distribution column of type {} yet",
                col.type_oid
            )));
        }
        // Every column the shards take (generated ones are computed there).
        let columns = self.copy_columns(&table).await?;
        let Some(index) = columns.iter().position(|c| *c == col.name) else {
            return Err(null_key_error(&table));
        };
        // Rows travel as COPY text in the session's encoding, escaped byte by byte.
        let enc = self.client_encoding();
        if !encoding_is_ascii_safe(&enc) {
            return Err(PgError::not_supported(format!(
                "pgshard does not support INSERT ... SELECT through the coordinator in encoding {enc}"
            )));
        }
        let opts = CopyOptions::from_defelems(&[])?;
        let st = copy_state(
            &table,
            &columns,
            &opts.shard_options(false),
            false,
            &catalog,
        )?;
        let mut router = Router {
            st,
            key: KeySpec {
                index,
                force_null: false,
                force_not_null: false,
            },
            opts,
            utf8: encoding_is_utf8(&enc),
            pending: BytesMut::new(),
            rows: 0,
        };
        let returning: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
        let returning = format!("\nRETURNING {}", returning.join(", "));
        let extended = params.bind.is_some();
        let own = self.begin_own_block().await?;
        let r = match &plan.source {
            ViaSource::Coordinator { text } => {
                let sql = format!("{text}{returning}");
                self.shell_insert(&sql, params, &mut router).await
            }
            ViaSource::Distributed { select } => {
                self.insert_distributed_rows(plan, select, &returning, params, &mut router)
                    .await
            }
        };
        let r = match r {
            Ok(()) => self.route_pending(&mut router, true).await,
            Err(e) => Err(e),
        };
        let r = self.finish_copy(&mut router.st, r.err()).await;
        match r {
            Ok(()) => {
                self.end_own_block(own, true, extended).await?;
                sink.complete(&format!("INSERT 0 {}", router.st.copied));
                Ok(())
            }
            Err(e) => {
                self.end_own_block(own, false, extended).await.ok();
                Err(e)
            }
        }
    }

    /// Routes the complete rows gathered so far (all of them at `eof`).
    async fn route_pending(&mut self, r: &mut Router, eof: bool) -> PgResult<()> {
        let (mut header, mut binary_header, mut ended) = (false, false, false);
        self.route_rows(
            &mut r.st,
            &mut r.pending,
            &r.opts,
            r.key,
            r.utf8,
            eof,
            &mut header,
            &mut binary_header,
            &mut ended,
            &mut r.rows,
        )
        .await?;
        match r.st.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Runs one INSERT ... RETURNING into the shell on the session's connection to the
    /// coordinator node, inside a savepoint rolled back afterwards, routing the rows it
    /// returns as they come.
    async fn shell_insert(
        &mut self,
        sql: &str,
        params: &BoundParams<'_>,
        router: &mut Router,
    ) -> PgResult<()> {
        let coord = self.shared.coordinator.clone();
        let idx = self.bulk_conn(&coord, false).await?;
        self.held[idx]
            .conn
            .simple(&format!("SAVEPOINT {SAVEPOINT}"))
            .await?;
        let empty = BindMsg::default_empty();
        let bind = params.bind.unwrap_or(&empty);
        {
            let conn = &mut self.held[idx].conn;
            msg::write_unnamed_run(&mut conn.wbuf, sql, params.types, bind, &[], false);
            msg::write_sync(&mut conn.wbuf);
            conn.flush().await?;
        }
        let mut failure: Option<PgError> = None;
        loop {
            let f = self.held[idx].conn.read().await?;
            match f.tag {
                b'D' if failure.is_none() => {
                    let row = msg::decode_data_row(&f.body)?;
                    let values: Vec<Option<&[u8]>> = row.iter().map(|v| v.as_deref()).collect();
                    cf::write_text_row(&values, &mut router.pending);
                    if router.pending.len() >= ROUTE_BYTES {
                        // The coordinator's answer keeps coming on its own connection.
                        if let Err(e) = self.route_pending(router, false).await {
                            failure = Some(e);
                        }
                    }
                }
                b'E' => {
                    failure.get_or_insert(PgError::from_server_fields(f.body));
                }
                b'Z' => break,
                _ => {}
            }
        }
        // The shell stays empty whatever happened.
        self.held[idx]
            .conn
            .simple(&format!(
                "ROLLBACK TO SAVEPOINT {SAVEPOINT}; RELEASE SAVEPOINT {SAVEPOINT}"
            ))
            .await?;
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The SELECT through pgshard, then its rows into the shell as typed VALUES, a
    /// chunk at a time.
    async fn insert_distributed_rows(
        &mut self,
        plan: &InsertViaCoordinatorPlan,
        select: &str,
        returning: &str,
        params: &BoundParams<'_>,
        router: &mut Router,
    ) -> PgResult<()> {
        let (fields, rows) = self.distributed_select(select, params).await?;
        if rows.is_empty() {
            return Ok(());
        }
        let types = self.type_names(&fields).await?;
        let table = &plan.table;
        let target = if plan.columns.is_empty() {
            String::new()
        } else {
            let cols: Vec<String> = plan.columns.iter().map(|c| quote_ident(c)).collect();
            format!(" ({})", cols.join(", "))
        };
        let head = format!(
            "INSERT INTO {}{target} SELECT * FROM (VALUES ",
            quote_qualified(&table.schema, &table.name)
        );
        let no_params = BoundParams {
            types: &[],
            bind: None,
        };
        for chunk in rows.chunks(ROWS_PER_INSERT) {
            let mut sql = head.clone();
            for (r, row) in chunk.iter().enumerate() {
                sql.push_str(if r == 0 { "(" } else { ", (" });
                for (i, v) in row.iter().enumerate() {
                    if i > 0 {
                        sql.push_str(", ");
                    }
                    let literal = match v {
                        Some(v) => quote_literal(&String::from_utf8_lossy(v)),
                        None => "NULL".to_string(),
                    };
                    sql.push_str(&format!("CAST({literal} AS {})", types[i]));
                }
                sql.push(')');
            }
            sql.push_str(") AS pgshard_rows");
            sql.push_str(returning);
            self.shell_insert(&sql, &no_params, router).await?;
        }
        Ok(())
    }

    /// Runs a SELECT reading distributed tables through pgshard's planner (in the
    /// session's block), returning its columns and rows in text format.
    async fn distributed_select(
        &mut self,
        select: &str,
        params: &BoundParams<'_>,
    ) -> PgResult<(Vec<FieldDesc>, Vec<Vec<Option<Bytes>>>)> {
        let mut stmts = parse::parse(select)?;
        let stmt = stmts.remove(0);
        let catalog = self.shared.catalog.snapshot();
        let plan = self.plan_statement(&stmt, &catalog)?;
        let mut frames = ResultSink::capturing();
        match &plan {
            Plan::Unsupported(e) => return Err(e.clone()),
            Plan::MultiShard(m) => {
                self.multi_shard(m, params, &[], true, &mut frames).await?;
            }
            Plan::Router(r) if r.read_only => {
                let empty = BindMsg::default_empty();
                let bind = params.bind.unwrap_or(&empty);
                let shard = route_bound(r, params.types, bind, &catalog)?;
                let addr = placement_addr(&catalog, shard)?;
                let sql = r.template.for_shard(shard.shard_id);
                let idx = self.bulk_conn(&addr, false).await?;
                let conn = &mut self.held[idx].conn;
                msg::write_unnamed_run(&mut conn.wbuf, &sql, params.types, bind, &[], true);
                msg::write_sync(&mut conn.wbuf);
                conn.flush().await?;
                let mut err = None;
                loop {
                    let f = conn.read().await?;
                    match f.tag {
                        b'T' | b'D' => frames.push_frame(f.tag, f.body),
                        b'E' => {
                            err.get_or_insert(PgError::from_server_fields(f.body));
                        }
                        b'Z' => break,
                        _ => {}
                    }
                }
                if let Some(e) = err {
                    return Err(e);
                }
            }
            _ => {
                return Err(PgError::not_supported(
                    "pgshard does not support this SELECT in an INSERT ... SELECT into a distributed table yet",
                ))
            }
        }
        let mut fields = Vec::new();
        let mut rows = Vec::new();
        for f in &frames.frames {
            match f.tag {
                b'T' => fields = msg::decode_row_description(&f.body)?,
                b'D' => rows.push(msg::decode_data_row(&f.body)?),
                _ => {}
            }
        }
        Ok((fields, rows))
    }

    /// SQL names of the columns' types (with their modifiers), as PostgreSQL writes them.
    async fn type_names(&mut self, fields: &[FieldDesc]) -> PgResult<Vec<String>> {
        let pairs: Vec<String> = fields
            .iter()
            .map(|f| format!("({}::oid, {}::int4)", f.type_oid, f.type_mod))
            .collect();
        let sql = format!(
            "SELECT pg_catalog.format_type(t, m) FROM (VALUES {}) AS x(t, m)",
            pairs.join(", ")
        );
        let coord = self.shared.coordinator.clone();
        let mut conn = self.shared.pools.node(&coord).acquire().await?;
        let names = conn.simple_column(&sql).await?;
        if names.len() != fields.len() || names.iter().any(|n| n == "record" || n == "unknown") {
            return Err(PgError::not_supported(
                "pgshard cannot carry values of this type from an INSERT ... SELECT's SELECT yet",
            ));
        }
        Ok(names)
    }
}
