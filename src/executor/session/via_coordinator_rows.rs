//! The target's rows of an INSERT ... SELECT through the coordinator
//! (`via_coordinator.rs`) sent as INSERT statements of typed VALUES instead of COPY:
//! when the client wrote `ON CONFLICT` or `RETURNING` (COPY has neither), when
//! row-level security applies (PostgreSQL refuses COPY FROM), and always into a
//! reference table (the same statement on every placement).
//!
//! Each shard's statement is `INSERT INTO shard AS <alias> (columns) SELECT * FROM
//! (VALUES (CAST(... AS type), ...)) AS pgshard_rows <ON CONFLICT> <RETURNING>`, the
//! client's clauses as written. With `ON CONFLICT ... DO UPDATE` every row of a shard
//! goes in one statement, sent once the shell has produced them all, so PostgreSQL's
//! "ON CONFLICT DO UPDATE command cannot affect row a second time" (21000) fires on
//! the shard exactly as in one PostgreSQL; those rows are held in pgshard until then.
//! Otherwise (DO NOTHING, plain RETURNING) the rows go [`ROWS_PER_INSERT`] a statement
//! after each of the shell's statements (a later statement skips a row an earlier one
//! inserted just as one statement would). Rows held and not sent yet are bounded by
//! `citus.max_intermediate_result_size` (Citus's 54000 past it).
//!
//! A reference table's statements run on its placements one after the other in group
//! order (as `bulk.rs::reference_write`); the count and RETURNING rows are the first
//! placement's. Since the shell computed every default and cast once, the placements
//! get the same rows; functions in ON CONFLICT must be immutable there.

use super::subplans::intermediate_result_too_large;
use super::via_coordinator::{write_typed_rows, Router, ROWS_PER_INSERT};
use super::*;
use crate::catalog::{DistTable, PartitionMethod};
use crate::sharding::hash;
use crate::sql::quote::quote_qualified;

/// The target's rows waiting to be sent as multi-row INSERTs.
pub(super) struct InsertRows {
    pub(super) table: Arc<DistTable>,
    /// The quoted columns and their SQL types (`format_type`), in the shell's order.
    pub(super) columns: String,
    pub(super) types: Vec<String>,
    pub(super) rows: Vec<Vec<Option<Bytes>>>,
    /// Bytes of the values held in `rows`.
    pub(super) held: usize,
    /// Rows the shards reported inserted.
    pub(super) inserted: u64,
    /// ` AS name`: the client's alias of the target, or its name.
    pub(super) alias: String,
    /// The client's ` ON CONFLICT ...` and ` RETURNING ...`, as they run on a shard.
    pub(super) tail: String,
    /// Every row of a shard in one statement (ON CONFLICT DO UPDATE).
    pub(super) whole: bool,
    /// The client wrote RETURNING.
    pub(super) returning: bool,
    /// The RETURNING rows' formats, and whether their RowDescription is still to send.
    pub(super) formats: Vec<i16>,
    pub(super) describe: bool,
    /// RETURNING rows, for the client once every row is in.
    pub(super) returned: ResultSink,
}

impl InsertRows {
    /// Holds one row the shell returned; past `limit_kb` of rows not sent yet, Citus's
    /// intermediate result error.
    pub(super) fn hold(&mut self, row: Vec<Option<Bytes>>, limit_kb: i64) -> PgResult<()> {
        self.held += row
            .iter()
            .map(|v| v.as_ref().map_or(1, |b| b.len()))
            .sum::<usize>();
        self.rows.push(row);
        if limit_kb >= 0 && self.held as u64 > limit_kb as u64 * 1024 {
            return Err(intermediate_result_too_large(limit_kb));
        }
        Ok(())
    }

    /// One statement into `shard` over `rows` (none: a typed row filtered out, so
    /// that RETURNING is described).
    fn statement(&self, shard: ShardId, rows: &[Vec<Option<Bytes>>]) -> String {
        let target = quote_qualified(&self.table.schema, &self.table.shard_name(shard));
        let mut sql = format!(
            "INSERT INTO {target} AS {} ({}) SELECT * FROM (VALUES ",
            quote_ident(&self.alias),
            self.columns
        );
        if rows.is_empty() {
            write_typed_rows(&mut sql, &[vec![None; self.types.len()]], &self.types);
            sql.push_str(") AS pgshard_rows WHERE false");
        } else {
            write_typed_rows(&mut sql, rows, &self.types);
            sql.push_str(") AS pgshard_rows");
        }
        sql.push_str(&self.tail);
        sql
    }
}

impl Session {
    /// The SQL types of the columns [`Session::copy_columns`] lists, in its order.
    pub(super) async fn column_types(&mut self, table: &DistTable) -> PgResult<Vec<String>> {
        let coord = self.shared.coordinator.clone();
        let mut conn = self.shared.pools.node(&coord).acquire().await?;
        let sql = format!(
            "SELECT pg_catalog.format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute \
             WHERE attrelid = {} AND attnum > 0 AND NOT attisdropped AND attgenerated = '' \
             ORDER BY attnum",
            table.relid
        );
        conn.simple_column(&sql).await
    }

    /// Sends the rows held for INSERTs (all of them at `eof`; before it, nothing when
    /// every row of a shard must go in one statement).
    pub(super) async fn insert_pending(&mut self, r: &mut Router, eof: bool) -> PgResult<()> {
        let key = r.key.index;
        let utf8 = r.utf8;
        let Some(ins) = r.inserts.as_mut() else {
            return Ok(());
        };
        if ins.whole && !eof {
            return Ok(());
        }
        // No row at all: RETURNING is still described, once.
        let describe_empty = eof && ins.rows.is_empty() && ins.describe && ins.returning;
        if ins.rows.is_empty() && !describe_empty {
            return Ok(());
        }
        let rows = std::mem::take(&mut ins.rows);
        ins.held = 0;
        let catalog = self.shared.catalog.snapshot();
        let by_node = shard_statements(ins, &rows, key, utf8, &catalog)?;
        let mut returned = std::mem::replace(&mut ins.returned, ResultSink::capturing());
        let (formats, describe) = (ins.formats.clone(), ins.describe && ins.returning);
        let count = if ins.table.method == PartitionMethod::Reference {
            // Placement by placement; the first one's rows and count.
            let mut count = Ok(0);
            for (n, one) in by_node.into_iter().enumerate() {
                let one = [one];
                let r = if n == 0 {
                    self.insert_on_nodes(&one, &no_params(), &formats, describe, &mut returned)
                        .await
                } else {
                    let mut ignored = ResultSink::default();
                    self.insert_on_nodes(&one, &no_params(), &formats, false, &mut ignored)
                        .await
                };
                match r {
                    Ok(rows) if n == 0 => count = Ok(rows),
                    Ok(_) => {}
                    Err(e) => {
                        count = Err(e);
                        break;
                    }
                }
            }
            count
        } else {
            self.insert_on_nodes(&by_node, &no_params(), &formats, describe, &mut returned)
                .await
        };
        let ins = r.inserts.as_mut().expect("held above");
        ins.returned = returned;
        ins.inserted += count?;
        ins.describe = false;
        Ok(())
    }
}

/// Each node's statements for `rows`: a hash table's per shard (in the order the
/// shards first appear), a reference table's on every placement in group order.
fn shard_statements(
    ins: &InsertRows,
    rows: &[Vec<Option<Bytes>>],
    key: usize,
    utf8: bool,
    catalog: &Catalog,
) -> PgResult<Vec<(NodeAddr, Vec<String>)>> {
    let table = &ins.table;
    let chunk = if ins.whole {
        rows.len().max(1)
    } else {
        ROWS_PER_INSERT
    };
    let statements = |shard: ShardId, members: &[usize]| -> Vec<String> {
        if members.is_empty() {
            return vec![ins.statement(shard, &[])];
        }
        members
            .chunks(chunk)
            .map(|c| {
                let c: Vec<Vec<Option<Bytes>>> = c.iter().map(|&n| rows[n].clone()).collect();
                ins.statement(shard, &c)
            })
            .collect()
    };
    if table.method == PartitionMethod::Reference {
        let shard = table.shards.first().ok_or_else(|| {
            PgError::internal(format!("reference table \"{}\" has no shard", table.name))
        })?;
        let all: Vec<usize> = (0..rows.len()).collect();
        let sql = statements(shard.shard_id, &all);
        let mut groups = shard.placement_groups.clone();
        groups.sort_unstable();
        let mut by_node = Vec::new();
        for g in groups {
            let n = catalog.placement_node(shard.shard_id, g)?;
            let addr = NodeAddr {
                host: n.host.clone(),
                port: n.port,
            };
            by_node.push((addr, sql.clone()));
        }
        return Ok(by_node);
    }
    let col = table.dist_column.as_ref().expect("planned with a column");
    let mut groups: Vec<(&ShardInterval, Vec<usize>)> = Vec::new();
    for (n, row) in rows.iter().enumerate() {
        let Some(Some(value)) = row.get(key) else {
            return Err(super::bulk::null_key_error(table));
        };
        if !utf8 && !value.is_ascii() {
            return Err(PgError::not_supported(
                "pgshard routes INSERT ... SELECT rows as INSERTs with non-ASCII values only in UTF8",
            ));
        }
        let h = std::str::from_utf8(value)
            .ok()
            .and_then(|v| hash::hash_text_value(col.type_oid, v))
            .ok_or_else(|| {
                PgError::not_supported(format!(
                    "pgshard cannot compute the shard of the value \"{}\"",
                    String::from_utf8_lossy(value)
                ))
            })?;
        let shard = table
            .shard_for_hash(h)
            .ok_or_else(|| PgError::internal(format!("no shard covers hash {h}")))?;
        match groups
            .iter_mut()
            .find(|(g, _)| g.shard_id == shard.shard_id)
        {
            Some((_, v)) => v.push(n),
            None => groups.push((shard, vec![n])),
        }
    }
    if rows.is_empty() {
        if let Some(first) = table.shards.first() {
            groups.push((first, Vec::new()));
        }
    }
    let mut by_node: Vec<(NodeAddr, Vec<String>)> = Vec::new();
    for (shard, members) in &groups {
        let addr = placement_addr(catalog, shard)?;
        let sql = statements(shard.shard_id, members);
        match by_node.iter_mut().find(|(a, _)| *a == addr) {
            Some((_, v)) => v.extend(sql),
            None => by_node.push((addr, sql)),
        }
    }
    Ok(by_node)
}

/// The shards' statements carry their values as literals: no parameters.
fn no_params() -> BoundParams<'static> {
    BoundParams {
        types: &[],
        bind: None,
    }
}
