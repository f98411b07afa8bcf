//! `create_distributed_table(table, column, distribution_type => 'hash',
//! colocate_with => 'default', shard_count => NULL)`, as Citus does it.
//!
//! Steps, all or nothing:
//! 1. On the coordinator node, in one transaction holding the catalog lock and an
//!    EXCLUSIVE lock on the table (reads go on, writes wait): read the definition,
//!    refuse what pgshard cannot distribute yet, pick the co-location group, shard
//!    ranges (Citus's) and placements (round robin over workers sorted by (host,
//!    port), or the placements of the co-located table), and insert the catalog rows.
//! 2. On the workers (`shard_load`), a few connections per worker, each in one
//!    transaction: create its shard tables (columns, defaults, collations), receive their rows, then add
//!    constraints (`<name>_<shardid>`) and indexes (rewritten with `pg_query`).
//! 3. Rows of the local table: one `COPY (SELECT hash, cols FROM ONLY t) TO STDOUT`
//!    on the coordinator node, the hash computed by PostgreSQL; pgshard splits the
//!    rows by shard and streams them with `COPY shard FROM STDIN`, all shards at once.
//! 4. Two-phase commit (`twopc`): workers PREPARE, the coordinator node empties the
//!    shell, bumps the catalog version and commits; then COMMIT PREPARED.

use super::foreign_keys::{self, ShardForeignKey, Side};
use super::privileges::{self, TableSecurity};
use super::shard_load;
use super::twopc;
use super::{
    abbreviate, begin_catalog_change, db_err, is_table_arg, Args, CitusSettings, UtilityResult,
};
use crate::backend::control;
use crate::catalog::cache::{bump_version, CatalogCache};
use crate::catalog::load::base_type_sql;
use crate::catalog::{shard_table_name, GroupId, Oid};
use crate::config::Config;
use crate::error::{sqlstate, PgError};
use crate::sharding::hash::{hash_function_sql, hash_sql_expression};
use crate::sharding::ranges::all_ranges;
use crate::sql::quote::{quote_ident, quote_literal, quote_qualified};
use std::collections::HashMap;
use tokio::sync::mpsc;
use tokio_postgres::Client;

/// PostgreSQL's longest identifier, in bytes.
const MAX_IDENTIFIER: usize = 63;
/// Most shards Citus accepts.
const MAX_SHARD_COUNT: i64 = 64_000;

/// Citus's SQLSTATE for "table ... is already distributed".
const INVALID_TABLE_DEFINITION: &str = sqlstate::INVALID_TABLE_DEFINITION;

/// A column of the table being distributed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnDef {
    pub attnum: i16,
    pub name: String,
    /// `format_type(atttypid, atttypmod)`.
    pub type_sql: String,
    pub type_oid: Oid,
    /// The type with domains resolved (what the hash is computed on).
    pub base_type: Oid,
    pub collation: Oid,
    /// `COLLATE` clause target when the column's collation is not its type's default.
    pub collation_sql: Option<String>,
    pub not_null: bool,
    /// `pg_get_expr` of the default or generation expression.
    pub default: Option<String>,
    pub generated: bool,
    pub identity: bool,
    pub uses_sequence: bool,
}

/// A table constraint (`pg_get_constraintdef`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConstraintDef {
    pub name: String,
    pub kind: String,
    pub definition: String,
}

/// An index not created by a constraint (`pg_get_indexdef`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDef {
    pub name: String,
    pub definition: String,
}

/// What a shard table is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDef {
    pub schema: String,
    pub name: String,
    pub unlogged: bool,
    pub columns: Vec<ColumnDef>,
    /// `pg_class.reloptions` entries (`name=value`).
    pub reloptions: Vec<String>,
    pub constraints: Vec<ConstraintDef>,
    pub indexes: Vec<IndexDef>,
    /// Owner, ACL, row-level security and policies, which every shard gets too.
    pub security: TableSecurity,
    /// Foreign keys, made on each shard after its constraints and indexes.
    pub foreign_keys: Vec<ShardForeignKey>,
}

/// One shard of the new table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardPlan {
    pub shard_id: i64,
    pub min: i32,
    pub max: i32,
    pub groups: Vec<GroupId>,
}

impl ShardPlan {
    /// The shards as the catalog will hold them (for routing rows by hash).
    pub fn intervals(shards: &[ShardPlan]) -> Vec<crate::catalog::ShardInterval> {
        shards
            .iter()
            .map(|s| crate::catalog::ShardInterval {
                shard_id: s.shard_id,
                min: s.min,
                max: s.max,
                placement_groups: s.groups.clone(),
            })
            .collect()
    }
}

/// Whether the table `qualified` holds rows of its own (`ONLY`: not its children's).
pub(crate) async fn has_local_rows(coord: &Client, qualified: &str) -> Result<bool, PgError> {
    Ok(coord
        .query_one(
            format!("SELECT EXISTS (SELECT 1 FROM ONLY {qualified})").as_str(),
            &[],
        )
        .await
        .map_err(db_err("cannot read the table"))?
        .get(0))
}

/// A worker as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeInfo {
    pub(crate) group: GroupId,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) should_have_shards: bool,
}

// ---------------------------------------------------------------------------
// Pure parts
// ---------------------------------------------------------------------------

/// 32-bit FNV-1a, for shortening names deterministically.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

fn truncate_bytes(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Name of a shard's copy of an object (constraint, index): `<name>_<shardid>`; when
/// that exceeds 63 bytes, the name is clipped and a hash of the full name keeps it
/// unique (as Citus does): `<clipped>_<hash>_<shardid>`.
pub fn shard_object_name(name: &str, shard_id: i64) -> String {
    let suffix = format!("_{shard_id}");
    if name.len() + suffix.len() <= MAX_IDENTIFIER {
        return format!("{name}{suffix}");
    }
    let hash = format!("_{:08x}", fnv1a(name.as_bytes()));
    let keep = MAX_IDENTIFIER - suffix.len() - hash.len();
    format!("{}{hash}{suffix}", truncate_bytes(name, keep))
}

/// The shard ranges of a new table and their placements: shard `i` on node
/// `(i + r) % n` for replica `r` (`groups` sorted by (host, port)).
pub fn round_robin_placements(
    shard_count: u32,
    groups: &[GroupId],
    replication: u32,
) -> Vec<Vec<GroupId>> {
    (0..shard_count as usize)
        .map(|i| {
            (0..replication as usize)
                .map(|r| groups[(i + r) % groups.len()])
                .collect()
        })
        .collect()
}

/// `WITH (...)` from reloptions, each value quoted as a literal.
pub fn reloptions_sql(options: &[String]) -> String {
    if options.is_empty() {
        return String::new();
    }
    let items: Vec<String> = options
        .iter()
        .map(|o| match o.split_once('=') {
            Some((k, v)) => format!("{} = {}", quote_ident(k), quote_literal(v)),
            None => quote_ident(o),
        })
        .collect();
    format!(" WITH ({})", items.join(", "))
}

/// `CREATE TABLE` of a shard: columns, collations, defaults, generated columns,
/// NOT NULL, storage options. Constraints and indexes come after the data.
pub fn create_shard_table_sql(def: &TableDef, shard_id: i64) -> String {
    let columns: Vec<String> = def
        .columns
        .iter()
        .map(|c| {
            let mut s = format!("{} {}", quote_ident(&c.name), c.type_sql);
            if let Some(coll) = &c.collation_sql {
                s.push_str(&format!(" COLLATE {coll}"));
            }
            match (&c.default, c.generated) {
                (Some(expr), true) => s.push_str(&format!(" GENERATED ALWAYS AS ({expr}) STORED")),
                // A sequence stays on the coordinator node, which fills the column
                // (the shell's INSERT): the shard's column has no default.
                (Some(_), false) if c.uses_sequence => {}
                (Some(expr), false) => s.push_str(&format!(" DEFAULT {expr}")),
                _ => {}
            }
            if c.not_null {
                s.push_str(" NOT NULL");
            }
            s
        })
        .collect();
    format!(
        "CREATE {}TABLE {} ({}){}",
        if def.unlogged { "UNLOGGED " } else { "" },
        quote_qualified(&def.schema, &shard_table_name(&def.name, shard_id)),
        columns.join(", "),
        reloptions_sql(&def.reloptions)
    )
}

/// `CREATE INDEX` of a table rewritten for a shard: same definition, the shard's
/// table and index names (parse and deparse, never text replacement).
pub fn rewrite_index_ddl(
    index_def: &str,
    schema: &str,
    shard_table: &str,
    shard_index: &str,
) -> Result<String, PgError> {
    let mut parsed = pg_query::parse(index_def, 0).map_err(|e| {
        PgError::internal(format!("cannot parse index definition {index_def:?}: {e}"))
    })?;
    let stmts = &mut parsed.protobuf.stmts;
    let node = match stmts.as_mut_slice() {
        [raw] => raw.stmt.as_mut().and_then(|n| n.node.as_mut()),
        _ => None,
    };
    match node {
        Some(pg_query::NodeEnum::IndexStmt(stmt)) => {
            stmt.idxname = shard_index.to_string();
            let relation = stmt.relation.as_mut().ok_or_else(|| {
                PgError::internal(format!("index definition without a table: {index_def}"))
            })?;
            relation.schemaname = schema.to_string();
            relation.relname = shard_table.to_string();
        }
        _ => {
            return Err(PgError::internal(format!(
                "not an index definition: {index_def}"
            )))
        }
    }
    parsed.protobuf.deparse(Default::default()).map_err(|e| {
        PgError::internal(format!(
            "cannot deparse index definition {index_def:?}: {e}"
        ))
    })
}

/// Statements that complete a loaded shard: constraints, indexes, then foreign keys.
pub fn shard_post_load_sql(def: &TableDef, shard_id: i64) -> Result<Vec<String>, PgError> {
    let shard = shard_table_name(&def.name, shard_id);
    let qualified = quote_qualified(&def.schema, &shard);
    let mut out = Vec::new();
    for c in &def.constraints {
        out.push(format!(
            "ALTER TABLE {qualified} ADD CONSTRAINT {} {}",
            quote_ident(&shard_object_name(&c.name, shard_id)),
            c.definition
        ));
    }
    for i in &def.indexes {
        out.push(rewrite_index_ddl(
            &i.definition,
            &def.schema,
            &shard,
            &shard_object_name(&i.name, shard_id),
        )?);
    }
    for fk in &def.foreign_keys {
        out.push(fk.shard_sql(&def.schema, &def.name, shard_id)?);
    }
    Ok(out)
}

/// The columns rows are copied with: every live column except generated ones.
pub fn copy_columns(def: &TableDef) -> Vec<&ColumnDef> {
    def.columns.iter().filter(|c| !c.generated).collect()
}

fn column_list(def: &TableDef, prefix: &str) -> String {
    copy_columns(def)
        .iter()
        .map(|c| format!("{prefix}{}", quote_ident(&c.name)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `COPY (SELECT <hash>, cols FROM ONLY t) TO STDOUT`: the first field is the
/// distribution hash computed by PostgreSQL (NULL when the value is NULL).
pub fn copy_out_sql(def: &TableDef, dist: &ColumnDef) -> String {
    copy_out_sql_from(def, dist, &quote_qualified(&def.schema, &def.name))
}

/// [`copy_out_sql`] reading `source` (a qualified, quoted table with `def`'s columns:
/// the table itself or one of its shards).
pub fn copy_out_sql_from(def: &TableDef, dist: &ColumnDef, source: &str) -> String {
    let col = format!("t.{}", quote_ident(&dist.name));
    format!(
        "COPY (SELECT CASE WHEN {col} IS NULL THEN NULL ELSE {} END, {} FROM ONLY {source} AS t) TO STDOUT",
        hash_sql_expression(dist.base_type, &col),
        column_list(def, "t."),
    )
}

/// `COPY shard (cols) FROM STDIN`.
pub fn copy_in_sql(def: &TableDef, shard_id: i64) -> String {
    format!(
        "COPY {} ({}) FROM STDIN",
        quote_qualified(&def.schema, &shard_table_name(&def.name, shard_id)),
        column_list(def, "")
    )
}

/// Splits a text-format COPY line into its leading hash field (None: NULL) and the
/// rest of the line (the row to store, newline included).
pub fn split_copy_line(line: &[u8]) -> Result<(Option<i32>, &[u8]), PgError> {
    let tab = line
        .iter()
        .position(|&b| b == b'\t')
        .ok_or_else(|| PgError::internal("malformed COPY row from the coordinator node"))?;
    let (head, rest) = (&line[..tab], &line[tab + 1..]);
    if head == b"\\N" {
        return Ok((None, rest));
    }
    let hash = std::str::from_utf8(head)
        .ok()
        .and_then(|s| s.parse::<i32>().ok())
        .ok_or_else(|| PgError::internal("malformed hash in COPY row from the coordinator node"))?;
    Ok((Some(hash), rest))
}

// ---------------------------------------------------------------------------
// Reading the definition
// ---------------------------------------------------------------------------

pub(crate) async fn read_columns(coord: &Client, relid: Oid) -> Result<Vec<ColumnDef>, PgError> {
    let sql = format!(
        "SELECT a.attnum, a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod), a.atttypid, \
                {base}, a.attcollation, \
                CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation \
                     THEN pg_catalog.quote_ident(cn.nspname) || '.' || pg_catalog.quote_ident(co.collname) END, \
                a.attnotnull, pg_catalog.pg_get_expr(d.adbin, d.adrelid), a.attgenerated = 's', \
                a.attidentity IN ('a', 'd'), \
                {uses_sequence} \
         FROM pg_catalog.pg_attribute a \
         JOIN pg_catalog.pg_type t ON t.oid = a.atttypid \
         LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
         LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation \
         LEFT JOIN pg_catalog.pg_namespace cn ON cn.oid = co.collnamespace \
         WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        base = base_type_sql("a.atttypid"),
        uses_sequence = crate::catalog::load::default_uses_sequence_sql("d"),
    );
    let rows = coord
        .query(sql.as_str(), &[&relid])
        .await
        .map_err(db_err("cannot read the table's columns"))?;
    Ok(rows
        .iter()
        .map(|r| ColumnDef {
            attnum: r.get(0),
            name: r.get(1),
            type_sql: r.get(2),
            type_oid: r.get(3),
            base_type: r.get::<_, Option<Oid>>(4).unwrap_or(r.get(3)),
            collation: r.get(5),
            collation_sql: r.get(6),
            not_null: r.get(7),
            default: r.get(8),
            generated: r.get(9),
            identity: r.get(10),
            uses_sequence: r.get(11),
        })
        .collect())
}

/// Constraints (foreign keys aside: `foreign_keys`) and indexes; checks unique
/// constraints on the way.
pub(crate) async fn read_constraints_and_indexes(
    coord: &Client,
    relid: Oid,
    table: &str,
    dist_attnum: Option<i16>,
) -> Result<(Vec<ConstraintDef>, Vec<IndexDef>), PgError> {
    let rows = coord
        .query(
            "SELECT conname::text, contype::text, pg_catalog.pg_get_constraintdef(oid), \
                    coalesce(conkey, '{}')::int2[] \
             FROM pg_catalog.pg_constraint \
             WHERE conrelid = $1 AND contype IN ('p', 'u', 'c', 'x') \
             ORDER BY CASE contype WHEN 'p' THEN 0 WHEN 'u' THEN 1 WHEN 'x' THEN 2 ELSE 3 END, oid",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot read the table's constraints"))?;
    let mut constraints = Vec::new();
    for r in &rows {
        let kind: String = r.get(1);
        let name: String = r.get(0);
        let keys: Vec<i16> = r.get(3);
        if kind == "x" && dist_attnum.is_some_and(|d| !keys.contains(&d)) {
            return Err(unique_without_dist_column(table));
        }
        constraints.push(ConstraintDef {
            name,
            kind,
            definition: r.get(2),
        });
    }
    let rows = coord
        .query(
            "SELECT ic.relname::text, pg_catalog.pg_get_indexdef(i.indexrelid), i.indisunique, \
                    i.indnkeyatts::int4, i.indkey::int2[], \
                    EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k WHERE k.conindid = i.indexrelid \
                            AND k.conrelid = i.indrelid AND k.contype IN ('p', 'u', 'x')) \
             FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid \
             WHERE i.indrelid = $1 ORDER BY i.indexrelid",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot read the table's indexes"))?;
    let mut indexes = Vec::new();
    for r in &rows {
        let unique: bool = r.get(2);
        let nkeys: i32 = r.get(3);
        let keys: Vec<i16> = r.get(4);
        if unique
            && dist_attnum
                .is_some_and(|d| !keys.iter().take(nkeys.max(0) as usize).any(|k| *k == d))
        {
            return Err(unique_without_dist_column(table));
        }
        if !r.get::<_, bool>(5) {
            indexes.push(IndexDef {
                name: r.get(0),
                definition: r.get(1),
            });
        }
    }
    Ok((constraints, indexes))
}

fn unique_without_dist_column(table: &str) -> PgError {
    PgError::not_supported(format!("cannot create constraint on \"{table}\"")).with_detail(
        "Distributed relations cannot have UNIQUE, EXCLUDE, or PRIMARY KEY constraints that do not \
         include the partition column (with an equality operator if EXCLUDE).",
    )
}

pub(crate) async fn read_nodes(coord: &Client) -> Result<Vec<NodeInfo>, PgError> {
    let rows = coord
        .query(
            "SELECT groupid, nodename, nodeport, shouldhaveshards FROM pg_catalog.pg_dist_node \
             WHERE isactive AND noderole = 'primary' AND groupid <> 0 ORDER BY nodename COLLATE \"C\", nodeport",
            &[],
        )
        .await
        .map_err(db_err("cannot read pg_dist_node"))?;
    rows.iter()
        .map(|r| {
            let port: i32 = r.get(2);
            Ok(NodeInfo {
                group: r.get(0),
                host: r.get(1),
                port: u16::try_from(port)
                    .map_err(|_| PgError::internal(format!("invalid node port {port}")))?,
                should_have_shards: r.get(3),
            })
        })
        .collect()
}

/// Shards of an existing table with their placement groups, sorted by min.
pub(crate) async fn read_table_shards(
    coord: &Client,
    relid: Oid,
) -> Result<Vec<ShardPlan>, PgError> {
    let rows = coord
        .query(
            // A reference table's one shard has no bounds: it covers every hash.
            "SELECT s.shardid, coalesce(s.shardminvalue::int4, -2147483648), \
                    coalesce(s.shardmaxvalue::int4, 2147483647), \
                    ARRAY(SELECT p.groupid FROM pg_catalog.pg_dist_placement p \
                          WHERE p.shardid = s.shardid AND p.shardstate = 1 ORDER BY p.placementid) \
             FROM pg_catalog.pg_dist_shard s WHERE s.logicalrelid = $1::oid::regclass \
             ORDER BY 2, s.shardid",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot read pg_dist_shard"))?;
    Ok(rows
        .iter()
        .map(|r| ShardPlan {
            shard_id: r.get(0),
            min: r.get(1),
            max: r.get(2),
            groups: r.get(3),
        })
        .collect())
}

// ---------------------------------------------------------------------------
// The command
// ---------------------------------------------------------------------------

/// Where the new table's shards go.
pub(crate) struct Placement {
    pub(crate) colocation_id: i32,
    pub(crate) new_group: bool,
    /// (min, max, groups) per shard index.
    pub(crate) shards: Vec<(i32, i32, Vec<GroupId>)>,
}

pub(crate) async fn create_distributed_table(
    cache: &CatalogCache,
    settings: &CitusSettings,
    args: &Args<'_>,
    notices: &mpsc::UnboundedSender<String>,
    caller: &str,
) -> Result<UtilityResult, PgError> {
    let column = args.required(1)?.to_string();
    let method = args.get(2).unwrap_or("hash").to_ascii_lowercase();
    if method != "hash" {
        return Err(PgError::not_supported(format!(
            "distribution_type '{method}' is not supported by pgshard: only 'hash'"
        )));
    }
    let colocate_with = args.get(3).unwrap_or("default").to_string();
    let explicit_count = args.int(4, None)?;
    if let Some(n) = explicit_count {
        if !(1..=MAX_SHARD_COUNT).contains(&n) {
            return Err(PgError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("{n} is outside the valid range for parameter \"shard_count\" (1 .. {MAX_SHARD_COUNT})"),
            ));
        }
    }
    let colocate_mode = colocate_with.to_ascii_lowercase();
    if explicit_count.is_some() && colocate_mode != "default" && colocate_mode != "none" {
        return Err(PgError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            "Cannot use colocate_with with a table and shard_count at the same time",
        ));
    }
    let replication = settings.shard_replication_factor.max(1);
    let default_count = explicit_count
        .map(|n| n as u32)
        .unwrap_or(settings.shard_count);
    if default_count == 0 || default_count as i64 > MAX_SHARD_COUNT {
        return Err(PgError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("citus.shard_count {default_count} is outside the valid range (1 .. {MAX_SHARD_COUNT})"),
        ));
    }

    let coord = begin_catalog_change(cache).await?;
    let relid = args.relation(0, &coord).await?;
    let colocate_relid = match is_table_arg(args.name, 3, &colocate_with) {
        true => Some(args.relation(3, &coord).await?),
        false => None,
    };
    privileges::ensure_owner(&coord, caller, relid).await?;

    // The table itself.
    let row = coord
        .query_one(
            "SELECT n.nspname::text, c.relname::text, c.relkind::text, c.relpersistence::text, c.relispartition, \
                    coalesce(c.reloptions, '{}')::text[], \
                    EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i WHERE i.inhrelid = c.oid OR i.inhparent = c.oid), \
                    EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid = c.oid) \
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot read the table"))?;
    let schema: String = row.get(0);
    let name: String = row.get(1);
    let relkind: String = row.get(2);
    let persistence: String = row.get(3);
    let qualified = quote_qualified(&schema, &name);
    if row.get::<_, bool>(7) {
        return Err(PgError::new(
            INVALID_TABLE_DEFINITION,
            format!("table \"{name}\" is already distributed"),
        ));
    }
    match relkind.as_str() {
        "r" => {}
        "p" => {
            return Err(PgError::not_supported(format!(
                "cannot distribute partitioned table \"{name}\": not supported by pgshard yet"
            )))
        }
        _ => {
            return Err(PgError::new(
                sqlstate::WRONG_OBJECT_TYPE,
                format!("cannot distribute relation \"{name}\""),
            )
            .with_detail("Distributed relations must be regular tables."))
        }
    }
    if row.get::<_, bool>(4) || row.get::<_, bool>(6) {
        return Err(PgError::not_supported(format!(
            "cannot distribute table \"{name}\": partitions and inheritance are not supported by pgshard yet"
        )));
    }
    if persistence == "t" {
        return Err(PgError::not_supported(format!(
            "cannot distribute temporary table \"{name}\""
        )));
    }
    coord
        .batch_execute(&format!("LOCK TABLE ONLY {qualified} IN EXCLUSIVE MODE"))
        .await
        .map_err(db_err(&format!("cannot lock table {qualified}")))?;

    let columns = read_columns(&coord, relid).await?;
    let dist = columns
        .iter()
        .find(|c| c.name == column)
        .cloned()
        .ok_or_else(|| {
            PgError::new(
                sqlstate::UNDEFINED_COLUMN,
                format!("column \"{column}\" of relation \"{name}\" does not exist"),
            )
        })?;
    ensure_hashable(&coord, &dist).await?;
    ensure_deterministic_collation(&coord, &dist).await?;
    let (constraints, indexes) =
        read_constraints_and_indexes(&coord, relid, &name, Some(dist.attnum)).await?;
    let def = TableDef {
        schema: schema.clone(),
        name: name.clone(),
        unlogged: persistence == "u",
        columns,
        reloptions: row.get(5),
        constraints,
        indexes,
        security: privileges::read_table_security(&coord, relid).await?,
        foreign_keys: Vec::new(),
    };
    let mut def = def;

    // Co-location, ranges and placements.
    let nodes = read_nodes(&coord).await?;
    let placement = choose_placement(
        &coord,
        &colocate_with,
        colocate_relid,
        explicit_count.is_some(),
        default_count,
        replication,
        &dist,
        &nodes,
    )
    .await?;
    let shards = allocate_shards(&coord, &name, &placement).await?;
    insert_catalog_rows(&coord, relid, &dist, &placement, replication, &shards).await?;
    // Its foreign keys, checked with the co-location group it joined (a new group
    // matches no other table).
    let referencing = Side::Hash {
        dist_attnum: dist.attnum,
        colocation_id: if placement.new_group {
            -1
        } else {
            placement.colocation_id
        },
    };
    let own: Vec<(i64, i32)> = shards.iter().map(|s| (s.shard_id, s.min)).collect();
    def.foreign_keys =
        foreign_keys::resolve(&coord, relid, referencing, replication > 1, &own, &[]).await?;

    let has_rows = has_local_rows(&coord, &qualified).await?;

    // Worker side.
    let node_by_group = nodes_by_group(&nodes, &shards)?;
    let deps = super::dependencies::read(&coord, relid).await?;
    super::dependencies::record(&coord, &deps).await?;
    prepare_workers(cache.config(), &coord, &def, &deps, &shards, &node_by_group).await?;
    let slots = shard_load::plan_slots(&def, &shards, &node_by_group)?;
    let loading = shard_load::Loading::start(cache.config(), slots, shards.len());
    let fed = if has_rows {
        let _ = notices.send("Copying data from local table...".to_string());
        let table = format!("{schema}.{name}");
        let sql = copy_out_sql(&def, &dist);
        shard_load::copy_local_rows(&loading, &coord, &sql, &shards, &table, &dist.name, notices)
            .await
    } else {
        Ok(())
    };
    let mut participants = loading.finish(fed).await?;

    twopc::commit_distributed(&coord, &mut participants, "cdt", || async {
        if has_rows {
            coord
                .batch_execute(&format!("TRUNCATE ONLY {qualified}"))
                .await
                .map_err(db_err(&format!("cannot empty the local table {qualified}")))?;
        }
        coord
            .execute(crate::catalog::guard::GUARD_ONE_SQL, &[&relid])
            .await
            .map_err(db_err(&format!("cannot guard the shell {qualified}")))?;
        bump_version(&coord).await
    })
    .await?;
    cache.reload().await;
    Ok(UtilityResult::void(args.name))
}

/// The active workers by group, checked to hold every placement of `shards`.
pub(crate) fn nodes_by_group<'a>(
    nodes: &'a [NodeInfo],
    shards: &[ShardPlan],
) -> Result<HashMap<GroupId, &'a NodeInfo>, PgError> {
    let node_by_group: HashMap<GroupId, &NodeInfo> = nodes.iter().map(|n| (n.group, n)).collect();
    for s in shards {
        for g in &s.groups {
            if !node_by_group.contains_key(g) {
                return Err(PgError::new(
                    sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
                    format!(
                        "shard {} would be placed in group {g}, which has no active worker node",
                        s.shard_id
                    ),
                ));
            }
        }
    }
    Ok(node_by_group)
}

/// Shard ids for `placement`'s shards (from `pg_dist_shardid_seq`, ascending), checked
/// to give shard table names PostgreSQL keeps whole.
pub(crate) async fn allocate_shards(
    coord: &Client,
    name: &str,
    placement: &Placement,
) -> Result<Vec<ShardPlan>, PgError> {
    let mut ids: Vec<i64> = coord
        .query(
            "SELECT nextval('pg_catalog.pg_dist_shardid_seq') FROM generate_series(1, $1)",
            &[&(placement.shards.len() as i32)],
        )
        .await
        .map_err(db_err("cannot allocate shard ids"))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    ids.sort_unstable();
    let longest = shard_table_name(name, *ids.last().expect("at least one shard"));
    if longest.len() > MAX_IDENTIFIER {
        return Err(PgError::not_supported(format!(
            "cannot distribute table \"{name}\": its shard names (\"{longest}\") would exceed {MAX_IDENTIFIER} bytes"
        ))
        .with_hint("Rename the table to a shorter name first."));
    }
    Ok(placement
        .shards
        .iter()
        .zip(&ids)
        .map(|((min, max, groups), id)| ShardPlan {
            shard_id: *id,
            min: *min,
            max: *max,
            groups: groups.clone(),
        })
        .collect())
}

/// Refuses a distribution column with a nondeterministic collation, as Citus does: equal
/// values ('ABC' and 'abc' under a case-insensitive collation) would hash apart.
pub(crate) async fn ensure_deterministic_collation(
    coord: &Client,
    dist: &ColumnDef,
) -> Result<(), PgError> {
    if dist.collation == 0 {
        return Ok(());
    }
    let deterministic: bool = coord
        .query_one(
            "SELECT coalesce((SELECT collisdeterministic FROM pg_catalog.pg_collation WHERE oid = $1), true)",
            &[&dist.collation],
        )
        .await
        .map_err(db_err("cannot read the column's collation"))?
        .get(0);
    if deterministic {
        Ok(())
    } else {
        Err(PgError::not_supported(
            "Hash distributed partition columns may not use a non deterministic collation",
        ))
    }
}

/// Refuses a distribution column whose type has no hash function.
pub(crate) async fn ensure_hashable(coord: &Client, dist: &ColumnDef) -> Result<(), PgError> {
    if hash_function_sql(dist.base_type).is_some() {
        return Ok(());
    }
    let probe = format!(
        "SELECT {}",
        hash_sql_expression(dist.base_type, &format!("NULL::{}", dist.type_sql))
    );
    coord
        .batch_execute("SAVEPOINT pgshard_hash_probe")
        .await
        .map_err(db_err("savepoint"))?;
    match coord.batch_execute(&probe).await {
        Ok(()) => coord
            .batch_execute("RELEASE SAVEPOINT pgshard_hash_probe")
            .await
            .map_err(db_err("savepoint")),
        Err(_) => {
            coord
                .batch_execute("ROLLBACK TO SAVEPOINT pgshard_hash_probe")
                .await
                .map_err(db_err("savepoint"))?;
            Err(PgError::not_supported(format!("could not identify a hash function for type {}", dist.type_sql))
                .with_detail("Partition column types must have a hash function defined to use hash partitioning."))
        }
    }
}

/// Picks the co-location group, the ranges and the placements.
pub(crate) async fn choose_placement(
    coord: &Client,
    colocate_with: &str,
    colocate_relid: Option<u32>,
    explicit_count: bool,
    shard_count: u32,
    replication: u32,
    dist: &ColumnDef,
    nodes: &[NodeInfo],
) -> Result<Placement, PgError> {
    let mode = colocate_with.to_ascii_lowercase();
    let repl = replication as i32;
    let existing_group: Option<i32> = match mode.as_str() {
        "none" => None,
        "default" => coord
            .query_opt(
                "SELECT colocationid FROM pg_catalog.pg_dist_colocation \
                 WHERE shardcount = $1 AND replicationfactor = $2 AND distributioncolumntype = $3 \
                   AND distributioncolumncollation = $4 ORDER BY colocationid LIMIT 1",
                &[
                    &(shard_count as i32),
                    &repl,
                    &dist.base_type,
                    &dist.collation,
                ],
            )
            .await
            .map_err(db_err("cannot read pg_dist_colocation"))?
            .map(|r| r.get(0)),
        _ => {
            let other = colocate_relid.ok_or_else(|| {
                PgError::internal(format!("colocate_with {colocate_with} was not resolved"))
            })?;
            let row = coord
                .query_opt(
                    "SELECT p.partmethod::text, p.colocationid, c.shardcount, c.replicationfactor, \
                            c.distributioncolumntype, c.distributioncolumncollation \
                     FROM pg_catalog.pg_dist_partition p \
                     LEFT JOIN pg_catalog.pg_dist_colocation c ON c.colocationid = p.colocationid \
                     WHERE p.logicalrelid = $1::oid::regclass",
                    &[&other],
                )
                .await
                .map_err(db_err("cannot read pg_dist_partition"))?;
            let row = row
                .filter(|r| r.get::<_, String>(0) == "h")
                .ok_or_else(|| {
                    PgError::new(
                        sqlstate::INVALID_PARAMETER_VALUE,
                        format!("relation {colocate_with} should be a hash distributed table"),
                    )
                })?;
            let group: i32 = row.get(1);
            let their_type: Option<Oid> = row.get(4);
            let their_collation: Option<Oid> = row.get(5);
            let their_repl: Option<i32> = row.get(3);
            if their_type != Some(dist.base_type) || their_collation != Some(dist.collation) {
                return Err(PgError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!("cannot colocate tables {colocate_with} and the new table"),
                )
                .with_detail("Distribution column types don't match."));
            }
            if their_repl != Some(repl) {
                return Err(PgError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!("cannot colocate tables {colocate_with} and the new table"),
                )
                .with_detail(format!(
                    "Replication factors don't match ({} vs citus.shard_replication_factor {repl}).",
                    their_repl.unwrap_or(0)
                )));
            }
            Some(group)
        }
    };
    let _ = explicit_count;

    if let Some(group) = existing_group {
        // Same ranges and placements as a table of the group.
        let member: Option<Oid> = coord
            .query_opt(
                "SELECT logicalrelid::oid FROM pg_catalog.pg_dist_partition WHERE colocationid = $1 \
                 ORDER BY logicalrelid::oid LIMIT 1",
                &[&group],
            )
            .await
            .map_err(db_err("cannot read pg_dist_partition"))?
            .map(|r| r.get(0));
        if let Some(member) = member {
            let existing = read_table_shards(coord, member).await?;
            if !existing.is_empty() {
                if existing
                    .iter()
                    .any(|s| s.groups.len() != replication as usize)
                {
                    return Err(PgError::new(
                        sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
                        "cannot colocate with a table whose shards do not all have their placements",
                    ));
                }
                return Ok(Placement {
                    colocation_id: group,
                    new_group: false,
                    shards: existing
                        .into_iter()
                        .map(|s| (s.min, s.max, s.groups))
                        .collect(),
                });
            }
        }
        // An empty group: fresh ranges, round robin.
        let shard_count = if mode == "default" || mode == "none" {
            shard_count
        } else {
            coord
                .query_one(
                    "SELECT shardcount FROM pg_catalog.pg_dist_colocation WHERE colocationid = $1",
                    &[&group],
                )
                .await
                .map_err(db_err("cannot read pg_dist_colocation"))?
                .get::<_, i32>(0) as u32
        };
        return Ok(Placement {
            colocation_id: group,
            new_group: false,
            shards: fresh_shards(shard_count, replication, nodes)?,
        });
    }
    Ok(Placement {
        colocation_id: 0,
        new_group: true,
        shards: fresh_shards(shard_count, replication, nodes)?,
    })
}

fn fresh_shards(
    shard_count: u32,
    replication: u32,
    nodes: &[NodeInfo],
) -> Result<Vec<(i32, i32, Vec<GroupId>)>, PgError> {
    let groups: Vec<GroupId> = nodes
        .iter()
        .filter(|n| n.should_have_shards)
        .map(|n| n.group)
        .collect();
    if groups.is_empty() {
        return Err(PgError::new(
            sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
            "cannot create a distributed table: there are no active worker nodes to place shards on",
        )
        .with_hint("Add workers with SELECT citus_add_node('host', port)."));
    }
    if replication as usize > groups.len() {
        return Err(PgError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!(
                "replication_factor ({replication}) exceeds number of worker nodes ({})",
                groups.len()
            ),
        )
        .with_hint("Add more worker nodes or try again with a lower replication factor."));
    }
    Ok(all_ranges(shard_count)
        .into_iter()
        .zip(round_robin_placements(shard_count, &groups, replication))
        .map(|((min, max), g)| (min, max, g))
        .collect())
}

async fn insert_catalog_rows(
    coord: &Client,
    relid: Oid,
    dist: &ColumnDef,
    placement: &Placement,
    replication: u32,
    shards: &[ShardPlan],
) -> Result<(), PgError> {
    let colocation_id = if placement.new_group {
        insert_colocation_group(coord, shards.len(), replication, dist).await?
    } else {
        placement.colocation_id
    };
    let repmodel = if replication > 1 { "c" } else { "s" };
    coord
        .execute(
            "INSERT INTO pg_catalog.pg_dist_partition (logicalrelid, partmethod, partkey, colocationid, repmodel, autoconverted) \
             VALUES ($1::oid::regclass, 'h', $2, $3, $4::text::\"char\", false)",
            &[&relid, &dist.name, &colocation_id, &repmodel],
        )
        .await
        .map_err(db_err("cannot insert into pg_dist_partition"))?;
    insert_shard_rows(coord, relid, shards).await
}

/// A new co-location group for tables distributed by `dist`'s type; its id.
pub(crate) async fn insert_colocation_group(
    coord: &Client,
    shard_count: usize,
    replication: u32,
    dist: &ColumnDef,
) -> Result<i32, PgError> {
    Ok(coord
        .query_one(
            "INSERT INTO pg_catalog.pg_dist_colocation (colocationid, shardcount, replicationfactor, \
               distributioncolumntype, distributioncolumncollation) \
             VALUES (nextval('pg_catalog.pg_dist_colocationid_seq'), $1, $2, $3, $4) RETURNING colocationid",
            &[&(shard_count as i32), &(replication as i32), &dist.base_type, &dist.collation],
        )
        .await
        .map_err(db_err("cannot insert into pg_dist_colocation"))?
        .get(0))
}

/// The `pg_dist_shard` and `pg_dist_placement` rows of `shards` of table `relid`.
pub(crate) async fn insert_shard_rows(
    coord: &Client,
    relid: Oid,
    shards: &[ShardPlan],
) -> Result<(), PgError> {
    let ids: Vec<i64> = shards.iter().map(|s| s.shard_id).collect();
    let mins: Vec<String> = shards.iter().map(|s| s.min.to_string()).collect();
    let maxs: Vec<String> = shards.iter().map(|s| s.max.to_string()).collect();
    coord
        .execute(
            "INSERT INTO pg_catalog.pg_dist_shard (logicalrelid, shardid, shardstorage, shardminvalue, shardmaxvalue) \
             SELECT $1::oid::regclass, u.s, 't', u.mn, u.mx FROM unnest($2::int8[], $3::text[], $4::text[]) AS u(s, mn, mx)",
            &[&relid, &ids, &mins, &maxs],
        )
        .await
        .map_err(db_err("cannot insert into pg_dist_shard"))?;
    let (p_shards, p_groups): (Vec<i64>, Vec<i32>) = shards
        .iter()
        .flat_map(|s| s.groups.iter().map(move |g| (s.shard_id, *g)))
        .unzip();
    coord
        .execute(
            "INSERT INTO pg_catalog.pg_dist_placement (placementid, shardid, shardstate, shardlength, groupid) \
             SELECT nextval('pg_catalog.pg_dist_placement_placementid_seq'), u.s, 1, 0, u.g \
             FROM unnest($1::int8[], $2::int4[]) AS u(s, g)",
            &[&p_shards, &p_groups],
        )
        .await
        .map_err(db_err("cannot insert into pg_dist_placement"))?;
    Ok(())
}

/// What the shards of `def` need on their workers before they are made, committed at
/// once (leftovers of a failure are harmless): the roles their owner, ACL and policies
/// name (copied from the coordinator node if missing), their schema, created with
/// its owner and ACL on the coordinator node if the worker lacks it, and the objects
/// the table depends on (`dependencies`: types, collations, functions, extensions).
pub(crate) async fn prepare_workers(
    cfg: &Config,
    coord: &Client,
    def: &TableDef,
    deps: &[super::dependencies::Dependency],
    shards: &[ShardPlan],
    nodes: &HashMap<GroupId, &NodeInfo>,
) -> Result<(), PgError> {
    let mut groups: Vec<GroupId> = shards
        .iter()
        .flat_map(|s| s.groups.iter().copied())
        .collect();
    groups.sort_unstable();
    groups.dedup();
    let schema = def.schema.as_str();
    let schema_acl = privileges::read_schema_acl(coord, schema).await?;
    let mut roles = def.security.roles();
    roles.extend(deps.iter().filter_map(|d| d.owner.clone()));
    roles.sort();
    roles.dedup();
    let results = futures_util::future::join_all(groups.iter().map(|g| {
        let node = nodes[g];
        let (schema_acl, roles) = (&schema_acl, &roles);
        async move {
            let at = format!("{}:{}", node.host, node.port);
            let client = control::connect(cfg, &node.host, node.port).await?;
            super::roles::sync_roles_on(coord, &client, &at, Some(roles), None).await?;
            let exists = client
                .query_opt(
                    "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1",
                    &[&schema],
                )
                .await
                .map_err(db_err(&format!("cannot read schemas on node {at}")))?
                .is_some();
            if !exists {
                let context = |sql: &str| format!("node {at}, statement \"{}\"", abbreviate(sql));
                let create = format!("BEGIN; CREATE SCHEMA IF NOT EXISTS {}", quote_ident(schema));
                client
                    .batch_execute(&create)
                    .await
                    .map_err(|e| PgError::from_client_error(&context(&create), &e))?;
                privileges::secure_schema(&client, schema_acl, schema)
                    .await
                    .map_err(|(sql, e)| PgError::from_client_error(&context(&sql), &e))?;
                client
                    .batch_execute("COMMIT")
                    .await
                    .map_err(db_err(&format!(
                        "cannot create schema {schema} on node {at}"
                    )))?;
            }
            if !deps.is_empty() {
                client
                    .batch_execute("BEGIN")
                    .await
                    .map_err(db_err(&format!("cannot begin on node {at}")))?;
                super::dependencies::create_on_worker(&client, &at, deps).await?;
                client
                    .batch_execute("COMMIT")
                    .await
                    .map_err(db_err(&format!(
                        "cannot create the table's dependencies on node {at}"
                    )))?;
            }
            Ok::<(), PgError>(())
        }
    }))
    .await;
    results.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(attnum: i16, name: &str, type_sql: &str) -> ColumnDef {
        ColumnDef {
            attnum,
            name: name.into(),
            type_sql: type_sql.into(),
            type_oid: 23,
            base_type: 23,
            collation: 0,
            collation_sql: None,
            not_null: false,
            default: None,
            generated: false,
            identity: false,
            uses_sequence: false,
        }
    }

    fn def() -> TableDef {
        let mut id = col(1, "id", "integer");
        id.not_null = true;
        let mut name = col(2, "Name", "text");
        name.collation_sql = Some("pg_catalog.\"C\"".into());
        name.default = Some("'x'::text".into());
        let mut twice = col(3, "twice", "integer");
        twice.generated = true;
        twice.default = Some("(id * 2)".into());
        TableDef {
            schema: "my schema".into(),
            name: "items".into(),
            unlogged: false,
            columns: vec![id, name, twice],
            reloptions: vec!["fillfactor=90".into()],
            constraints: vec![
                ConstraintDef { name: "items_pkey".into(), kind: "p".into(), definition: "PRIMARY KEY (id)".into() },
                ConstraintDef { name: "pos".into(), kind: "c".into(), definition: "CHECK ((id > 0))".into() },
            ],
            indexes: vec![IndexDef {
                name: "items_lower".into(),
                definition: "CREATE INDEX items_lower ON \"my schema\".items USING btree (lower(\"Name\")) WHERE (id > 5)"
                    .into(),
            }],
            security: Default::default(),
            foreign_keys: Vec::new(),
        }
    }

    #[test]
    fn shard_object_names_fit() {
        assert_eq!(shard_object_name("items_pkey", 102008), "items_pkey_102008");
        let long = "a".repeat(70);
        let n = shard_object_name(&long, 102008);
        assert!(n.len() <= 63 && n.ends_with("_102008"), "{n}");
        assert_ne!(n, shard_object_name(&format!("{long}b"), 102008));
        let multibyte = "é".repeat(40);
        assert!(shard_object_name(&multibyte, 1).len() <= 63);
    }

    #[test]
    fn round_robin_like_citus() {
        assert_eq!(
            round_robin_placements(4, &[1, 2], 1),
            vec![vec![1], vec![2], vec![1], vec![2]]
        );
        assert_eq!(
            round_robin_placements(3, &[1, 2, 3], 2),
            vec![vec![1, 2], vec![2, 3], vec![3, 1]]
        );
    }

    #[test]
    fn builds_shard_ddl() {
        let d = def();
        assert_eq!(
            create_shard_table_sql(&d, 102008),
            "CREATE TABLE \"my schema\".\"items_102008\" (\"id\" integer NOT NULL, \
             \"Name\" text COLLATE pg_catalog.\"C\" DEFAULT 'x'::text, \
             \"twice\" integer GENERATED ALWAYS AS ((id * 2)) STORED) WITH (\"fillfactor\" = '90')"
        );
        let post = shard_post_load_sql(&d, 102008).unwrap();
        assert_eq!(post[0], "ALTER TABLE \"my schema\".\"items_102008\" ADD CONSTRAINT \"items_pkey_102008\" PRIMARY KEY (id)");
        assert_eq!(post[1], "ALTER TABLE \"my schema\".\"items_102008\" ADD CONSTRAINT \"pos_102008\" CHECK ((id > 0))");
        assert!(
            post[2].starts_with("CREATE INDEX items_lower_102008 ON \"my schema\".items_102008"),
            "{}",
            post[2]
        );
        assert!(
            post[2].contains("lower(\"Name\")") && post[2].contains("WHERE id > 5"),
            "{}",
            post[2]
        );
        assert_eq!(
            copy_in_sql(&d, 7),
            "COPY \"my schema\".\"items_7\" (\"id\", \"Name\") FROM STDIN"
        );
        let out = copy_out_sql(&d, &d.columns[0]);
        assert!(out.contains("hashint4(t.\"id\")"), "{out}");
        assert!(
            out.contains("FROM ONLY \"my schema\".\"items\" AS t"),
            "{out}"
        );
    }

    #[test]
    fn index_rewrite_handles_hostile_names() {
        let sql = rewrite_index_ddl(
            "CREATE UNIQUE INDEX \"x\"\"y\" ON public.\"T; drop\" USING btree (a) INCLUDE (b)",
            "public",
            "T; drop_5",
            "x\"y_5",
        )
        .unwrap();
        assert!(sql.contains("\"x\"\"y_5\""), "{sql}");
        assert!(sql.contains("\"T; drop_5\""), "{sql}");
        assert!(sql.starts_with("CREATE UNIQUE INDEX"), "{sql}");
        assert!(rewrite_index_ddl("SELECT 1", "public", "t", "i").is_err());
    }

    #[test]
    fn splits_copy_lines() {
        assert_eq!(
            split_copy_line(b"-5\t1\tabc\n").unwrap(),
            (Some(-5), &b"1\tabc\n"[..])
        );
        assert_eq!(
            split_copy_line(b"\\N\t\\N\tx\n").unwrap(),
            (None, &b"\\N\tx\n"[..])
        );
        assert!(split_copy_line(b"abc\tx\n").is_err());
        assert!(split_copy_line(b"12\n").is_err());
    }

    #[test]
    fn shard_columns_have_no_sequence_defaults() {
        let mut d = def();
        d.columns[0].uses_sequence = true;
        d.columns[0].default = Some("nextval('items_id_seq'::regclass)".into());
        let sql = create_shard_table_sql(&d, 7);
        assert!(sql.contains("(\"id\" integer NOT NULL, "), "{sql}");
        assert!(!sql.contains("nextval"), "{sql}");
    }

    #[test]
    fn quotes_reloptions() {
        assert_eq!(reloptions_sql(&[]), "");
        assert_eq!(
            reloptions_sql(&["fillfactor=70".into(), "autovacuum_enabled=false".into()]),
            " WITH (\"fillfactor\" = '70', \"autovacuum_enabled\" = 'false')"
        );
    }
}
