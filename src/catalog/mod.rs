//! The distributed-table catalog: Citus's `pg_dist_*` tables kept in the coordinator
//! node's PostgreSQL, and the in-memory snapshot every planner decision reads.
//!
//! A snapshot is immutable (`Arc<Catalog>`); a change made through any pgshard process
//! bumps `pgshard_catalog_version` and NOTIFYs `pgshard_catalog`, and every process
//! reloads (see `cache.rs`).

pub mod cache;
pub mod guard;
pub mod load;
pub mod schema;
pub mod seen;
pub mod views;

use crate::sharding::ranges::ShardIndexer;
use std::collections::HashMap;
use std::sync::Arc;

pub type NodeId = i32;
pub type GroupId = i32;
pub type ShardId = i64;
pub type Oid = u32;

/// A row of `pg_dist_node`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerNode {
    pub node_id: NodeId,
    pub group_id: GroupId,
    pub host: String,
    pub port: u16,
    pub is_active: bool,
    pub should_have_shards: bool,
}

/// `pg_dist_partition.partmethod`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionMethod {
    /// 'h': hash-distributed on a column.
    Hash,
    /// 'n': reference table, one shard replicated on every node.
    Reference,
}

/// The distribution column of a hash-distributed table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistColumn {
    pub name: String,
    /// 1-based position among the table's attributes (`pg_attribute.attnum`).
    pub attnum: i16,
    /// The base type (domains resolved): what the hash is computed on.
    pub type_oid: Oid,
    pub collation: Oid,
    /// The typmod values are stored with (`numeric(10,1)`, `varchar(3)`,
    /// `timestamp(0)`; a domain's own), -1 for none: an INSERT or COPY coerces the value
    /// to it before storing, so routing a written value hashes the coerced value.
    pub typmod: i32,
    /// The column's declared type as SQL (`format_type(atttypid, atttypmod)`, a domain
    /// by its name): `CAST(x AS type_sql)` coerces as storing does.
    pub type_sql: String,
}

/// A column of a distributed or reference table whose values come from a sequence
/// of the coordinator node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct SequenceColumn {
    pub name: String,
    /// `GENERATED ALWAYS AS IDENTITY`: a value may be given only with `OVERRIDING
    /// SYSTEM VALUE`, an UPDATE may set it only to DEFAULT.
    pub always: bool,
}

/// One shard: a hash range of a table and the groups (nodes) holding a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardInterval {
    pub shard_id: ShardId,
    pub min: i32,
    pub max: i32,
    /// Group ids of the placements (`pg_dist_placement.groupid`), in placement-id order.
    pub placement_groups: Vec<GroupId>,
}

/// A distributed (or reference) table as the planner sees it.
#[derive(Debug, Clone)]
pub struct DistTable {
    pub relid: Oid,
    pub schema: String,
    pub name: String,
    pub method: PartitionMethod,
    pub dist_column: Option<DistColumn>,
    pub colocation_id: i32,
    /// Shards sorted by `min`.
    pub shards: Vec<ShardInterval>,
    /// The table's live column names in attnum order (dropped columns left out).
    pub columns: Vec<String>,
    /// The shell table's index names (in the table's schema).
    pub indexes: Vec<String>,
    /// Columns whose values come from a sequence (serial, identity, a default calling
    /// `nextval`): the sequence lives on the coordinator node only, so a write filling
    /// one goes through the shell there (see "Sequences" in docs/ARCHITECTURE.md).
    pub sequence_columns: Vec<SequenceColumn>,
    pub indexer: ShardIndexer,
}

impl DistTable {
    /// The shard table's name on the workers: `<table>_<shardid>`.
    pub fn shard_name(&self, shard_id: ShardId) -> String {
        shard_table_name(&self.name, shard_id)
    }

    /// The shard whose range holds `hash`.
    pub fn shard_for_hash(&self, hash: i32) -> Option<&ShardInterval> {
        self.indexer.find(&self.shards, hash)
    }
}

pub fn shard_table_name(table: &str, shard_id: ShardId) -> String {
    format!("{table}_{shard_id}")
}

/// A consistent snapshot of the whole catalog.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub version: i64,
    /// Active worker nodes, sorted by (host, port).
    pub workers: Vec<WorkerNode>,
    pub tables_by_oid: HashMap<Oid, Arc<DistTable>>,
    /// Table name -> every distributed table of that name (across schemas).
    pub tables_by_name: HashMap<String, Vec<Arc<DistTable>>>,
    /// Functions distributed with `create_distributed_function`.
    pub functions: Vec<DistFunction>,
}

/// A function distributed with `create_distributed_function` (a `pg_dist_object` row
/// with a colocation group): pgshard runs its calls itself.
#[derive(Debug, Clone, serde::Deserialize, PartialEq, Eq)]
pub struct DistFunction {
    pub oid: Oid,
    pub schema: String,
    pub name: String,
    pub nargs: i32,
    /// The distribution argument (0-based), if any.
    pub dist_arg: Option<i32>,
    pub colocation_id: i32,
}

impl Catalog {
    pub fn is_empty(&self) -> bool {
        self.tables_by_oid.is_empty()
    }

    /// The distributed table `schema.name`. Unqualified names are the session's to
    /// resolve (`planner::names`).
    pub fn qualified(&self, schema: &str, name: &str) -> Option<&Arc<DistTable>> {
        self.tables_by_name
            .get(name)?
            .iter()
            .find(|t| t.schema == schema)
    }

    /// `table` as this catalog has it (a plan may hold an older copy).
    pub fn current(&self, table: &Arc<DistTable>) -> Arc<DistTable> {
        self.tables_by_oid
            .get(&table.relid)
            .cloned()
            .unwrap_or_else(|| table.clone())
    }

    pub fn node_for_group(&self, group: GroupId) -> Option<&WorkerNode> {
        self.workers.iter().find(|w| w.group_id == group)
    }

    /// The active node of placement group `group` of shard `shard_id`, or the error
    /// naming both when the group has none.
    pub fn placement_node(
        &self,
        shard_id: ShardId,
        group: GroupId,
    ) -> Result<&WorkerNode, crate::error::PgError> {
        self.node_for_group(group).ok_or_else(|| {
            crate::error::PgError::new(
                crate::error::sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!(
                    "placement of shard {shard_id} is in group {group}, which has no active node"
                ),
            )
        })
    }

    /// Every placement of `table`'s shards grouped by the node holding it (each node
    /// once, in first-shard order; a reference table's one shard on every node).
    pub fn placements_by_node(
        &self,
        table: &DistTable,
    ) -> Result<Vec<(&WorkerNode, Vec<ShardId>)>, crate::error::PgError> {
        let mut out: Vec<(&WorkerNode, Vec<ShardId>)> = Vec::new();
        for shard in &table.shards {
            for g in &shard.placement_groups {
                let node = self.placement_node(shard.shard_id, *g)?;
                match out.iter_mut().find(|(n, _)| n.node_id == node.node_id) {
                    Some((_, ids)) => ids.push(shard.shard_id),
                    None => out.push((node, vec![shard.shard_id])),
                }
            }
        }
        Ok(out)
    }

    pub fn add_table(&mut self, table: DistTable) {
        let table = Arc::new(table);
        self.tables_by_oid.insert(table.relid, table.clone());
        self.tables_by_name
            .entry(table.name.clone())
            .or_default()
            .push(table);
    }
}
