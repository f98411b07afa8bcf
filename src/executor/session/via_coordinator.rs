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
//!    When row-level security applies to the client on the table, PostgreSQL refuses
//!    COPY FROM: the rows then reach the shards as multi-row INSERTs of typed VALUES
//!    instead (the shards check the policies again, as the client).
//!
//! Also INSERT into a local table of a SELECT reading distributed tables
//! (`InsertIntoLocalPlan`): the SELECT through pgshard, then the client's INSERT on the
//! coordinator node over the rows as typed VALUES.

use super::bulk::null_key_error;
use super::copy::{copy_state, encoding_is_ascii_safe, encoding_is_utf8, CopyState};
use super::via_coordinator_rows::InsertRows;
use super::*;
use crate::backend::BackendConn;
use crate::catalog::{DistTable, PartitionMethod};
use crate::planner::insert_select::{InsertIntoLocalPlan, InsertViaCoordinatorPlan, ViaSource};
use crate::sql::copy_format::{self as cf, CopyOptions, KeySpec};
use crate::sql::quote::quote_qualified;

/// Rows of a distributed SELECT sent to the shell in one INSERT.
pub(super) const ROWS_PER_INSERT: usize = 500;
/// COPY text gathered before it is routed to the shards.
const ROUTE_BYTES: usize = 256 * 1024;
/// The savepoint around the shell INSERT (rolled back: the shell stays empty).
const SAVEPOINT: &str = "pgshard_insert_select";
/// The setting that lets this INSERT through the shell's write guard
/// (`catalog::guard`); undone with the savepoint.
use crate::catalog::guard::SHELL_WRITE;

/// The target's rows on their way to the shards: COPY text not routed yet.
pub(super) struct Router {
    st: CopyState,
    opts: CopyOptions,
    pub(super) key: KeySpec,
    pub(super) utf8: bool,
    pending: BytesMut,
    rows: u64,
    /// The rows go as INSERTs, not COPY (`via_coordinator_rows.rs`).
    pub(super) inserts: Option<InsertRows>,
}

impl Session {
    pub(super) async fn insert_via_coordinator(
        &mut self,
        plan: &InsertViaCoordinatorPlan,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let catalog = self.shared.catalog.snapshot();
        let table = catalog.current(&plan.table);
        let reference = table.method == PartitionMethod::Reference;
        // Every column the shards take (generated ones are computed there).
        let columns = self.copy_columns(&table).await?;
        let index = match &table.dist_column {
            Some(col) => match columns.iter().position(|c| *c == col.name) {
                Some(index) => index,
                None => return Err(null_key_error(&table)),
            },
            None => 0,
        };
        if let (true, Some(oc)) = (reference, &plan.on_conflict) {
            let kinds = self.function_kinds(&oc.functions).await?;
            if let Some((name, _)) = oc
                .functions
                .iter()
                .zip(&kinds)
                .find(|(_, k)| !k.is_some_and(|k| k.immutable))
            {
                return Err(PgError::not_supported(format!(
                    "pgshard does not support calling the non-immutable function {name}() in \
                     ON CONFLICT of a write to the reference table \"{}\": each placement would \
                     compute its own value",
                    table.name
                )));
            }
        }
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
            inserts: None,
        };
        // COPY has no ON CONFLICT nor RETURNING, PostgreSQL refuses it under row-level
        // security, and a reference table gets the same statement on every placement.
        if reference
            || plan.on_conflict.is_some()
            || plan.returning.is_some()
            || self.row_security_active(&table).await?
        {
            let mut tail = String::new();
            if let Some(oc) = &plan.on_conflict {
                tail.push_str(&oc.clause);
            }
            if let Some(r) = &plan.returning {
                tail.push_str(" RETURNING ");
                tail.push_str(&r.list);
            }
            router.inserts = Some(InsertRows {
                table: table.clone(),
                columns: columns
                    .iter()
                    .map(|c| quote_ident(c))
                    .collect::<Vec<_>>()
                    .join(", "),
                types: self.column_types(&table).await?,
                rows: Vec::new(),
                held: 0,
                inserted: 0,
                alias: plan.alias.clone().unwrap_or_else(|| table.name.clone()),
                tail,
                whole: plan.on_conflict.as_ref().is_some_and(|oc| oc.do_update),
                returning: plan.returning.is_some(),
                formats: formats.to_vec(),
                describe,
                returned: ResultSink::capturing(),
            });
        }
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
                let inserted = match router.inserts.as_mut() {
                    Some(i) => {
                        for f in std::mem::take(&mut i.returned.frames) {
                            sink.push_frame(f.tag, f.body);
                        }
                        i.inserted
                    }
                    None => 0,
                };
                sink.complete(&format!("INSERT 0 {}", router.st.copied + inserted));
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
        if r.inserts.is_some() {
            return self.insert_pending(r, eof).await;
        }
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
        self.tx.held[idx]
            .conn
            .simple(&format!(
                "SAVEPOINT {SAVEPOINT}; SET LOCAL {SHELL_WRITE} = on"
            ))
            .await?;
        let empty = BindMsg::default_empty();
        let bind = params.bind.unwrap_or(&empty);
        {
            let conn = &mut self.tx.held[idx].conn;
            msg::write_unnamed_run(&mut conn.wbuf, sql, params.types, bind, &[], false);
            msg::write_sync(&mut conn.wbuf);
            conn.flush().await?;
        }
        let mut failure: Option<PgError> = None;
        loop {
            let f = self.tx.held[idx].conn.read().await?;
            match f.tag {
                b'D' if failure.is_none() && router.inserts.is_some() => {
                    let row = msg::decode_data_row(&f.body)?;
                    let limit_kb = self.max_intermediate_kb;
                    if let Some(i) = router.inserts.as_mut() {
                        if let Err(e) = i.hold(row, limit_kb) {
                            failure = Some(e);
                        }
                    }
                }
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
        self.tx.held[idx]
            .conn
            .simple(&format!(
                "ROLLBACK TO SAVEPOINT {SAVEPOINT}; RELEASE SAVEPOINT {SAVEPOINT}"
            ))
            .await?;
        match failure {
            Some(e) => Err(e),
            // Rows held for INSERTs go now, the coordinator's answer read.
            None if router.inserts.is_some() => self.insert_pending(router, false).await,
            None => Ok(()),
        }
    }

    /// Whether row-level security applies to the client on `table` (PostgreSQL's own
    /// `row_security_active`, on the client's connection to the coordinator node,
    /// whose shell carries the table's policies and flags).
    async fn row_security_active(&mut self, table: &DistTable) -> PgResult<bool> {
        let coord = self.shared.coordinator.clone();
        let idx = self.bulk_conn(&coord, false).await?;
        let active = self.tx.held[idx]
            .conn
            .simple_column(&format!(
                "SELECT pg_catalog.row_security_active({}::pg_catalog.oid)",
                table.relid
            ))
            .await?;
        Ok(active.first().is_some_and(|v| v == "t"))
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
        if fields.is_empty() {
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
        let alias = match &plan.alias {
            Some(a) => format!(" AS {}", quote_ident(a)),
            None => String::new(),
        };
        let head = format!(
            "INSERT INTO {}{alias}{target} SELECT * FROM (VALUES ",
            quote_qualified(&table.schema, &table.name)
        );
        // The client's ON CONFLICT runs on the shell too; with DO UPDATE over all the
        // rows in one statement, as one PostgreSQL would (21000 on a key given twice).
        let (on_conflict, chunk) = match &plan.on_conflict {
            Some(oc) if oc.do_update => (oc.clause.as_str(), rows.len().max(1)),
            Some(oc) => (oc.clause.as_str(), ROWS_PER_INSERT),
            None => ("", ROWS_PER_INSERT),
        };
        let no_params = BoundParams {
            types: &[],
            bind: None,
        };
        if rows.is_empty() {
            // No row, but PostgreSQL checks the INSERT all the same (privileges on
            // the table, as the client): one typed row, filtered out.
            let mut sql = head.clone();
            write_typed_rows(&mut sql, &[vec![None; fields.len()]], &types);
            sql.push_str(") AS pgshard_rows WHERE false");
            sql.push_str(on_conflict);
            sql.push_str(returning);
            return self.shell_insert(&sql, &no_params, router).await;
        }
        for chunk in rows.chunks(chunk) {
            let mut sql = head.clone();
            write_typed_rows(&mut sql, chunk, &types);
            sql.push_str(") AS pgshard_rows");
            sql.push_str(on_conflict);
            sql.push_str(returning);
            self.shell_insert(&sql, &no_params, router).await?;
        }
        Ok(())
    }

    /// Runs a SELECT reading distributed tables through pgshard's planner (in the
    /// session's block), returning its columns and rows in text format.
    pub(super) async fn distributed_select(
        &mut self,
        select: &str,
        params: &BoundParams<'_>,
    ) -> PgResult<(Vec<FieldDesc>, Vec<Vec<Option<Bytes>>>)> {
        let mut stmts = parse::parse(select)?;
        let stmt = stmts.remove(0);
        let catalog = self.shared.catalog.snapshot();
        let plan = self.plan_statement(&stmt, &catalog).await?;
        let mut frames = ResultSink::capturing();
        self.plan_into(&plan, &stmt, params, &[], true, &mut frames)
            .await?;
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

    /// INSERT into a local table of a SELECT reading distributed tables: the SELECT
    /// through pgshard, then the client's INSERT on the coordinator node with the rows
    /// as typed VALUES in place of its SELECT, a chunk at a time, in the session's
    /// block or pgshard's own (all chunks or none).
    pub(super) async fn insert_into_local(
        &mut self,
        plan: &InsertIntoLocalPlan,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let extended = params.bind.is_some();
        let own = self.begin_own_block().await?;
        match self
            .insert_local_rows(plan, params, formats, describe, sink)
            .await
        {
            Ok(count) => {
                self.end_own_block(own, true, extended).await?;
                sink.complete(&format!("INSERT 0 {count}"));
                Ok(())
            }
            Err(e) => {
                self.end_own_block(own, false, extended).await.ok();
                Err(e)
            }
        }
    }

    /// The chunks of [`Session::insert_into_local`]; returns the rows inserted.
    pub(super) async fn insert_local_rows(
        &mut self,
        plan: &InsertIntoLocalPlan,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<u64> {
        let (fields, rows) = self.distributed_select(&plan.select, params).await?;
        if fields.is_empty() {
            return Err(PgError::not_supported(
                "pgshard does not support an INSERT ... SELECT of no columns into a local table yet",
            ));
        }
        let types = self.type_names(&fields).await?;
        // No rows: the INSERT still runs once, over a typed row filtered out, so that
        // RETURNING describes its columns and statement triggers fire, as with an
        // empty SELECT.
        let none = vec![None; fields.len()];
        let chunks: Vec<&[Vec<Option<Bytes>>]> = if rows.is_empty() {
            vec![std::slice::from_ref(&none)]
        } else {
            rows.chunks(ROWS_PER_INSERT).collect()
        };
        let coord = self.shared.coordinator.clone();
        let no_bind = BindMsg::default_empty();
        let mut count = 0u64;
        for (n, chunk) in chunks.into_iter().enumerate() {
            let mut values = String::from("SELECT * FROM (VALUES ");
            write_typed_rows(&mut values, chunk, &types);
            values.push_str(") AS pgshard_rows");
            if rows.is_empty() {
                values.push_str(" WHERE false");
            }
            let sql = insert_with_select(&plan.insert, &values)?;
            let idx = self.bulk_conn(&coord, true).await?;
            let conn = &mut self.tx.held[idx].conn;
            // The columns of RETURNING are described once, before the first chunk's rows.
            msg::write_unnamed_run(
                &mut conn.wbuf,
                &sql,
                &[],
                &no_bind,
                formats,
                describe && n == 0,
            );
            msg::write_sync(&mut conn.wbuf);
            conn.flush().await?;
            read_answer(conn, |tag, body| match tag {
                b'T' | b'D' | b'N' => sink.push_frame(tag, body),
                b'C' => count += msg::command_rows(&body),
                _ => {}
            })
            .await?;
        }
        Ok(count)
    }

    /// SQL names of the columns' types (with their modifiers), as PostgreSQL writes them.
    pub(super) async fn type_names(&mut self, fields: &[FieldDesc]) -> PgResult<Vec<String>> {
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

/// Rows as `(CAST('v' AS type), NULL, ...), (...)`: every value a quoted literal cast to
/// its column's exact type, so PostgreSQL reads back exactly what the SELECT returned.
pub(super) fn write_typed_rows(sql: &mut String, rows: &[Vec<Option<Bytes>>], types: &[String]) {
    for (r, row) in rows.iter().enumerate() {
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
}

/// The client's INSERT (without its SELECT) over `select` instead, as SQL text.
fn insert_with_select(insert: &pg_query::protobuf::InsertStmt, select: &str) -> PgResult<String> {
    use pg_query::protobuf::node::Node as N;
    let node = crate::sql::parse::first_tree(select, "rows")?;
    let mut insert = insert.clone();
    insert.select_stmt = Some(node);
    N::InsertStmt(Box::new(insert))
        .deparse(Default::default())
        .map_err(|e| PgError::internal(format!("INSERT over the rows: {e}")))
}

/// Reads a node's answer up to ReadyForQuery, handing each message before the first
/// error to `take`; the first error, if any, once the connection is ready again.
pub(super) async fn read_answer(
    conn: &mut BackendConn,
    mut take: impl FnMut(u8, Bytes),
) -> PgResult<()> {
    let mut failure = None;
    loop {
        let f = conn.read().await?;
        match f.tag {
            b'Z' => break,
            b'E' => {
                failure.get_or_insert(PgError::from_server_fields(f.body));
            }
            tag if failure.is_none() => take(tag, f.body),
            _ => {}
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_rows_quote_every_value_and_cast_it() {
        let mut sql = String::new();
        let rows = vec![
            vec![Some(Bytes::from_static(b"1")), None],
            vec![
                Some(Bytes::from_static(b"it's")),
                Some(Bytes::from_static(b"2")),
            ],
        ];
        write_typed_rows(&mut sql, &rows, &["integer".into(), "numeric(10,2)".into()]);
        assert_eq!(
            sql,
            "(CAST('1' AS integer), CAST(NULL AS numeric(10,2))), (CAST('it''s' AS integer), CAST('2' AS numeric(10,2)))"
        );
    }

    #[test]
    fn the_insert_keeps_its_clauses_over_the_new_rows() {
        let parsed = pg_query::parse(
            "INSERT INTO t (a, b) SELECT x, y FROM d ON CONFLICT (a) DO UPDATE SET b = excluded.b RETURNING a",
            0,
        )
        .unwrap();
        let node = parsed.protobuf.stmts[0].stmt.as_ref().unwrap().node.clone();
        let Some(pg_query::protobuf::node::Node::InsertStmt(mut i)) = node else {
            panic!("not an INSERT")
        };
        i.select_stmt = None;
        let sql = insert_with_select(&i, "SELECT * FROM (VALUES (1, 2)) AS pgshard_rows").unwrap();
        assert_eq!(
            sql,
            "INSERT INTO t (a, b) SELECT * FROM (VALUES (1, 2)) pgshard_rows ON CONFLICT (a) DO UPDATE SET b = excluded.b RETURNING a"
        );
    }
}
