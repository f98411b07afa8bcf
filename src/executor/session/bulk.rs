//! Bulk writes of distributed tables inside one client session, and what COPY
//! (`copy.rs`) and reference writes (`reference_write.rs`) share with them:
//! - multi-row INSERT: one INSERT per shard holding its rows, run in parallel;
//! - INSERT ... SELECT between co-located tables: one statement per shard index;
//! - pgshard's own transaction block for a statement that writes several nodes.

use super::*;
use crate::catalog::DistTable;
use crate::planner::distvalue::{hash_param, param_is_invalid};
use crate::planner::insert::{eval_int, InsertRowsPlan, RowKey};
use crate::planner::insert_select::InsertSelectPlan;
use crate::sharding::hash::{self, oid};

/// Rebuilds a server's ErrorResponse with `context` added to its CONTEXT field.
pub(super) fn error_with_context(raw: &[u8], context: &str) -> PgError {
    let mut fields: Vec<(u8, Vec<u8>)> = Vec::new();
    let mut rest = raw;
    while let Some((&t, tail)) = rest.split_first() {
        if t == 0 {
            break;
        }
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        fields.push((t, tail[..end].to_vec()));
        rest = tail.get(end + 1..).unwrap_or(&[]);
    }
    match fields.iter_mut().find(|(t, _)| *t == b'W') {
        Some((_, v)) => {
            v.push(b'\n');
            v.extend_from_slice(context.as_bytes());
        }
        None => fields.push((b'W', context.as_bytes().to_vec())),
    }
    let mut out = Vec::new();
    for (t, v) in fields {
        out.push(t);
        out.extend_from_slice(&v);
        out.push(0);
    }
    out.push(0);
    PgError::from_server_fields(Bytes::from(out))
}

/// The SQL name of a type pgshard routes by, for casts it generates.
fn type_sql_name(t: u32) -> Option<&'static str> {
    Some(match t {
        oid::INT2 => "pg_catalog.int2",
        oid::INT4 => "pg_catalog.int4",
        oid::INT8 => "pg_catalog.int8",
        oid::TEXT => "pg_catalog.text",
        oid::VARCHAR => "pg_catalog.varchar",
        oid::BPCHAR => "pg_catalog.bpchar",
        oid::UUID => "pg_catalog.uuid",
        oid::BOOL => "pg_catalog.bool",
        oid::NUMERIC => "pg_catalog.numeric",
        oid::DATE => "pg_catalog.date",
        oid::TIMESTAMP => "pg_catalog.timestamp",
        oid::TIMESTAMPTZ => "pg_catalog.timestamptz",
        oid::TIME => "pg_catalog.time",
        oid::TIMETZ => "pg_catalog.timetz",
        oid::INTERVAL => "pg_catalog.interval",
        oid::OID => "pg_catalog.oid",
        oid::NAME => "pg_catalog.name",
        oid::FLOAT4 => "pg_catalog.float4",
        oid::FLOAT8 => "pg_catalog.float8",
        _ => return None,
    })
}

/// Types whose binary form `hash::hash_binary_value_typmod` reads exactly (None from it
/// then means PostgreSQL refuses the value).
pub(super) fn binary_is_exact(t: u32) -> bool {
    matches!(
        t,
        oid::INT2
            | oid::INT4
            | oid::INT8
            | oid::OID
            | oid::TEXT
            | oid::VARCHAR
            | oid::BPCHAR
            | oid::NAME
            | oid::CHAR
            | oid::BOOL
            | oid::UUID
            | oid::DATE
            | oid::TIMESTAMP
            | oid::TIMESTAMPTZ
            | oid::NUMERIC
    )
}

fn int_width(t: u32) -> Option<u8> {
    match t {
        oid::INT2 => Some(2),
        oid::INT4 => Some(4),
        oid::INT8 => Some(8),
        _ => None,
    }
}

pub(super) fn null_key_error(table: &DistTable) -> PgError {
    PgError::new(
        sqlstate::NOT_NULL_VIOLATION,
        format!(
            "the partition column of table {}.{} cannot be NULL",
            table.schema, table.name
        ),
    )
}

impl Session {
    /// Opens pgshard's own transaction block when the session has none.
    pub(super) async fn begin_own_block(&mut self) -> PgResult<bool> {
        if self.tx.state != TxnState::Idle {
            return Ok(false);
        }
        self.upgrade_to_implicit_block().await?;
        Ok(true)
    }

    /// Ends pgshard's own block: at once in the simple protocol; at Sync in the
    /// extended protocol (the block then ends with the client's batch).
    pub(super) async fn end_own_block(
        &mut self,
        own: bool,
        ok: bool,
        extended: bool,
    ) -> PgResult<()> {
        if !own || extended {
            return Ok(());
        }
        self.tx.implicit_block = false;
        self.finish_transaction(ok).await
    }

    /// The held connection to `addr` for a bulk operation, BEGIN (if any) answered.
    pub(super) async fn bulk_conn(&mut self, addr: &NodeAddr, write: bool) -> PgResult<usize> {
        let idx = self.join(addr, write).await?;
        self.drain_all().await?;
        if self.batch_error {
            return Err(aborted_error());
        }
        Ok(idx)
    }

    // ---- multi-row INSERT ----------------------------------------------------

    /// The hash of each row's distribution value, and the text replacing the key
    /// expressions evaluated on the coordinator node.
    async fn insert_row_hashes(
        &mut self,
        plan: &InsertRowsPlan,
        params: &BoundParams<'_>,
    ) -> PgResult<(Vec<i32>, Vec<(usize, String)>)> {
        let table = &plan.table;
        let col = table
            .dist_column
            .clone()
            .expect("insert plans have a column");
        let empty = BindMsg::default_empty();
        let bind = params.bind.unwrap_or(&empty);
        let mut hashes = vec![0i32; plan.keys.len()];
        let mut evaluate: Vec<(usize, usize, usize)> = Vec::new();
        for (r, k) in plan.keys.iter().enumerate() {
            hashes[r] = match k {
                RowKey::Source(ValueSource::Hash(h)) => *h,
                RowKey::Source(ValueSource::Null) => return Err(null_key_error(table)),
                RowKey::Source(ValueSource::Invalid) => i32::MIN,
                RowKey::Source(ValueSource::Param(i)) => {
                    let Some(Some(bytes)) = bind.params.get(*i) else {
                        return Err(null_key_error(table));
                    };
                    let ptype = params.types.get(*i).copied().unwrap_or(0);
                    match hash_param(
                        col.type_oid,
                        col.typmod,
                        ptype,
                        bind.param_format(*i),
                        bytes,
                    ) {
                        Some(h) => h,
                        None if param_is_invalid(col.type_oid, ptype) => i32::MIN,
                        // Another type (a domain, time, interval...): PostgreSQL hashes it.
                        None => {
                            let bytes = bytes.clone();
                            self.hash_stored_on_coordinator(
                                &col,
                                &bytes,
                                bind.param_format(*i) == 1,
                                ptype,
                                true,
                            )
                            .await?
                            .unwrap_or(i32::MIN)
                        }
                    }
                }
                RowKey::Fold(e) => {
                    let param = |i: usize| -> Option<(u8, i64)> {
                        let w = int_width(params.types.get(i).copied()?)?;
                        let bytes = bind.params.get(i)?.as_ref()?;
                        let v = if bind.param_format(i) == 0 {
                            std::str::from_utf8(bytes).ok()?.trim().parse().ok()?
                        } else {
                            match bytes.len() {
                                2 => i16::from_be_bytes(bytes[..].try_into().ok()?) as i64,
                                4 => i32::from_be_bytes(bytes[..].try_into().ok()?) as i64,
                                8 => i64::from_be_bytes(bytes[..].try_into().ok()?),
                                _ => return None,
                            }
                        };
                        Some((w, v))
                    };
                    match eval_int(e, &param)? {
                        Some((_, v)) => {
                            let w = int_width(col.type_oid).expect("folded for integer columns");
                            match hash::hash_text_value(col.type_oid, &v.to_string()) {
                                Some(h) => h,
                                None => return Err(crate::planner::insert::out_of_range(w)),
                            }
                        }
                        None => {
                            // Not foldable with these values (NULL, other types): evaluate.
                            let items =
                                crate::planner::insert::item_spans(&plan.text, plan.rows[r]);
                            let (s, e) = items[plan.key_position];
                            evaluate.push((r, s, e));
                            0
                        }
                    }
                }
                RowKey::Evaluate { start, end } => {
                    evaluate.push((r, *start, *end));
                    0
                }
            };
        }
        let mut replace = Vec::new();
        if evaluate.is_empty() {
            return Ok((hashes, replace));
        }
        // The value as the bare type is what the shard's INSERT receives (it coerces it to
        // the column itself, errors included); the hash is PostgreSQL's own of the value
        // coerced to the column's type, typmod and domain (`OFFSET 0`: each expression
        // is evaluated once, volatile ones included).
        let tname = match (type_sql_name(col.type_oid), col.typmod) {
            (Some(t), _) => t.to_string(),
            (None, -1) if !col.type_sql.is_empty() => col.type_sql.clone(),
            _ => {
                return Err(PgError::not_supported(format!(
                    "pgshard cannot compute expressions for the distribution column \"{}\" of this type",
                    col.name
                )))
            }
        };
        let exprs: Vec<String> = evaluate
            .iter()
            .enumerate()
            .map(|(i, (_, s, e))| format!("CAST(({}) AS {tname}) AS v{i}", &plan.text[*s..*e]))
            .collect();
        let outputs: Vec<String> = (0..evaluate.len())
            .map(|i| {
                format!(
                    "v{i}::text, {}",
                    hash::hash_sql_expression(
                        col.type_oid,
                        &format!("CAST(v{i} AS {})", col.type_sql)
                    )
                )
            })
            .collect();
        let sql = format!(
            "SELECT {} FROM (SELECT {} OFFSET 0) AS pgshard_keys",
            outputs.join(", "),
            exprs.join(", ")
        );
        let values = self.evaluate_on_coordinator(&sql, params).await?;
        for (k, (r, _, _)) in evaluate.iter().enumerate() {
            let (Some(Some(v)), Some(Some(h))) = (values.get(2 * k), values.get(2 * k + 1)) else {
                return Err(null_key_error(table));
            };
            hashes[*r] = h.parse::<i32>().map_err(|_| {
                PgError::internal(format!("unexpected hash {h:?} from the coordinator node"))
            })?;
            replace.push((*r, format!("CAST({} AS {tname})", quote_literal(v))));
        }
        Ok((hashes, replace))
    }

    /// The hash PostgreSQL computes for a stored distribution value given in COPY text
    /// or binary form (cast to the column's type, typmod and domain as storing does).
    /// None: PostgreSQL refuses the value (any one shard then reports its own error).
    pub(super) async fn hash_on_coordinator(
        &mut self,
        col: &crate::catalog::DistColumn,
        value: &[u8],
        binary: bool,
    ) -> PgResult<Option<i32>> {
        let value_type = if binary { col.type_oid } else { oid::TEXT };
        self.hash_stored_on_coordinator(col, value, binary, value_type, true)
            .await
    }

    /// As `hash_on_coordinator`, for a value of type `value_type` (a bound parameter:
    /// a domain, a type pgshard does not read). `store: false`: the value is compared,
    /// not stored, and `value_type` is the column's base type: hashed as it is.
    pub(super) async fn hash_stored_on_coordinator(
        &mut self,
        col: &crate::catalog::DistColumn,
        value: &[u8],
        binary: bool,
        value_type: u32,
        store: bool,
    ) -> PgResult<Option<i32>> {
        let arg = if store {
            format!("CAST($1 AS {})", col.type_sql)
        } else {
            "$1".to_string()
        };
        let sql = format!("SELECT {}", hash::hash_sql_expression(col.type_oid, &arg));
        let types = [value_type];
        let bind = BindMsg {
            portal: String::new(),
            statement: String::new(),
            param_formats: vec![i16::from(binary)],
            params: vec![Some(Bytes::copy_from_slice(value))],
            result_formats: vec![],
        };
        let params = BoundParams {
            types: &types,
            bind: Some(&bind),
        };
        match self.evaluate_on_coordinator(&sql, &params).await {
            Ok(row) => Ok(row
                .first()
                .cloned()
                .flatten()
                .and_then(|h| h.parse::<i32>().ok())),
            // Data exceptions and constraint violations (a domain's CHECK): the value.
            Err(e) if e.code.starts_with("22") || e.code.starts_with("23") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Runs one row-returning statement on the coordinator node with the statement's
    /// parameters bound, returning the first row's values as text.
    async fn evaluate_on_coordinator(
        &mut self,
        sql: &str,
        params: &BoundParams<'_>,
    ) -> PgResult<Vec<Option<String>>> {
        let coord = self.shared.coordinator.clone();
        let mut conn = self.private_conn(&coord).await?;
        let empty = BindMsg::default_empty();
        let bind = params.bind.unwrap_or(&empty);
        msg::write_unnamed_run(&mut conn.wbuf, sql, params.types, bind, &[], false);
        msg::write_sync(&mut conn.wbuf);
        conn.flush().await?;
        let mut row = Vec::new();
        let mut err = None;
        loop {
            let f = conn.read().await?;
            match f.tag {
                b'D' => {
                    row = msg::decode_data_row(&f.body)?
                        .into_iter()
                        .map(|v| v.map(|b| String::from_utf8_lossy(&b).into_owned()))
                        .collect()
                }
                b'E' => err = Some(PgError::from_server_fields(f.body)),
                b'Z' => break,
                _ => {}
            }
        }
        match err {
            Some(e) => Err(e),
            None => Ok(row),
        }
    }

    pub(super) async fn insert_rows(
        &mut self,
        plan: &InsertRowsPlan,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let catalog = self.shared.catalog.snapshot();
        let table = &plan.table;
        let (hashes, replace) = self.insert_row_hashes(plan, params).await?;
        // Rows per shard, in the order the shards first appear.
        let mut groups: Vec<(&ShardInterval, Vec<usize>)> = Vec::new();
        for (r, h) in hashes.iter().enumerate() {
            let s = table.shard_for_hash(*h).ok_or_else(|| {
                PgError::internal(format!("no shard of \"{}\" covers hash {h}", table.name))
            })?;
            match groups.iter_mut().find(|(g, _)| g.shard_id == s.shard_id) {
                Some((_, rows)) => rows.push(r),
                None => groups.push((s, vec![r])),
            }
        }
        let mut by_node: Vec<(NodeAddr, Vec<String>)> = Vec::new();
        for (s, rows) in &groups {
            let sql = if groups.len() == 1 && replace.is_empty() {
                plan.whole.for_shard(s.shard_id)
            } else {
                plan.shard_sql(s.shard_id, rows, &replace)
            };
            let addr = placement_addr(&catalog, s)?;
            match by_node.iter_mut().find(|(a, _)| *a == addr) {
                Some((_, v)) => v.push(sql),
                None => by_node.push((addr, vec![sql])),
            }
        }
        let extended = params.bind.is_some();
        let own = if by_node.len() > 1 {
            self.begin_own_block().await?
        } else {
            false
        };
        let r = self
            .insert_on_nodes(&by_node, params, formats, describe, sink)
            .await;
        match r {
            Ok(total) => {
                self.end_own_block(own, true, extended).await?;
                sink.complete(&format!("INSERT 0 {total}"));
                Ok(())
            }
            Err(e) => {
                self.end_own_block(own, false, extended).await.ok();
                Err(e)
            }
        }
    }

    /// INSERT ... SELECT between co-located tables: one statement per shard index.
    pub(super) async fn insert_select(
        &mut self,
        plan: &InsertSelectPlan,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        if self.calls_aggregate(&plan.functions).await? {
            return Err(PgError::not_supported(
                "pgshard does not support INSERT ... SELECT with aggregate or window functions across shards yet",
            ));
        }
        let catalog = self.shared.catalog.snapshot();
        let (target, source) = (&plan.tables[0], &plan.tables[1]);
        let mut by_node: Vec<(NodeAddr, Vec<String>)> = Vec::new();
        for i in 0..target.shards.len() {
            let addr = placement_addr(&catalog, &target.shards[i])?;
            if placement_addr(&catalog, &source.shards[i])? != addr {
                return Err(PgError::not_supported(format!(
                    "shards {} and {} of co-located tables are on different nodes",
                    target.shards[i].shard_id, source.shards[i].shard_id
                )));
            }
            let sql = plan.for_index(i);
            match by_node.iter_mut().find(|(a, _)| *a == addr) {
                Some((_, v)) => v.push(sql),
                None => by_node.push((addr, vec![sql])),
            }
        }
        let extended = params.bind.is_some();
        let own = if by_node.len() > 1 {
            self.begin_own_block().await?
        } else {
            false
        };
        let r = self
            .insert_on_nodes(&by_node, params, formats, describe && plan.returning, sink)
            .await;
        match r {
            Ok(total) => {
                self.end_own_block(own, true, extended).await?;
                sink.complete(&format!("INSERT 0 {total}"));
                Ok(())
            }
            Err(e) => {
                self.end_own_block(own, false, extended).await.ok();
                Err(e)
            }
        }
    }

    /// Runs each node's statements pipelined on the session's connection to it (all
    /// nodes at once, `tasks.rs`), RETURNING rows into `sink`; returns the rows the
    /// statements report. Errors name the node and statement.
    pub(super) async fn insert_on_nodes(
        &mut self,
        by_node: &[(NodeAddr, Vec<String>)],
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<u64> {
        let tasks: Vec<NodeTasks> = by_node
            .iter()
            .map(|(addr, sql)| NodeTasks {
                addr: addr.clone(),
                sql: sql.clone(),
            })
            .collect();
        let describe = match describe {
            true => Describe::FirstTask,
            false => Describe::None,
        };
        let mut on_reply = |f: Frame, sink: &mut ResultSink| -> PgResult<()> {
            if matches!(f.tag, b'T' | b'D') {
                sink.push_frame(f.tag, f.body);
            }
            Ok(())
        };
        self.run_tasks(&tasks, true, params, formats, describe, sink, &mut on_reply)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::error_with_context;

    #[test]
    fn context_is_added_to_server_errors() {
        let raw = b"SERROR\0C22P02\0Minvalid input\0WCOPY t_1, line 3\0\0";
        let e = error_with_context(raw, "while copying into shard t_1 on node h:1");
        assert_eq!(e.code, "22P02");
        let text = String::from_utf8_lossy(e.raw.as_ref().unwrap()).into_owned();
        assert!(text.contains("WCOPY t_1, line 3\nwhile copying into shard t_1 on node h:1\0"));
        let e = error_with_context(b"SERROR\0C23505\0Mdup\0\0", "ctx");
        assert!(String::from_utf8_lossy(e.raw.as_ref().unwrap()).contains("Wctx\0"));
    }
}
