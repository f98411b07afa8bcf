//! Loading a catalog snapshot from the coordinator node.
//!
//! One statement reads everything (so the snapshot is consistent): the catalog
//! version, the active primary workers, every distributed table joined with
//! `pg_class`/`pg_namespace`/`pg_attribute`, and every shard with its placement
//! groups. Each part comes back as JSON and is assembled by pure functions.

use super::{
    Catalog, DistColumn, DistTable, GroupId, Oid, PartitionMethod, ShardInterval, WorkerNode,
};
use crate::error::PgError;
use crate::sharding::ranges::ShardIndexer;
use serde::Deserialize;
use tokio_postgres::Client;

/// SQL resolving a type oid through any number of domains to its base type.
/// `{t}` is replaced by an expression yielding the type oid.
pub fn base_type_sql(type_expr: &str) -> String {
    format!(
        "(WITH RECURSIVE d(oid, typtype, typbasetype) AS (\
           SELECT t.oid, t.typtype, t.typbasetype FROM pg_catalog.pg_type t WHERE t.oid = {type_expr} \
           UNION ALL SELECT t.oid, t.typtype, t.typbasetype FROM d \
           JOIN pg_catalog.pg_type t ON t.oid = d.typbasetype WHERE d.typtype = 'd') \
         SELECT d.oid FROM d WHERE d.typtype <> 'd' LIMIT 1)"
    )
}

/// SQL giving the typmod a value of a column gets stored with: `atttypmod`, or for a
/// domain column (whose `atttypmod` is -1) the typmod of the innermost domain over the
/// base type, as PostgreSQL's `getBaseTypeAndTypmod` finds it. -1: none.
pub fn column_typmod_sql(type_expr: &str, typmod_expr: &str) -> String {
    format!(
        "(CASE WHEN {typmod_expr} <> -1 THEN {typmod_expr} ELSE coalesce((WITH RECURSIVE d(depth, typtype, typbasetype, typtypmod) AS (\
           SELECT 0, t.typtype, t.typbasetype, t.typtypmod FROM pg_catalog.pg_type t WHERE t.oid = {type_expr} \
           UNION ALL SELECT d.depth + 1, t.typtype, t.typbasetype, t.typtypmod FROM d \
           JOIN pg_catalog.pg_type t ON t.oid = d.typbasetype WHERE d.typtype = 'd') \
         SELECT d.typtypmod FROM d WHERE d.typtype = 'd' ORDER BY d.depth DESC LIMIT 1), -1) END)"
    )
}

/// SQL: whether the default `d` (a `pg_attrdef` row, maybe NULL) takes its values from
/// a sequence: it depends on one (`nextval('s')`, serial) or calls `nextval` at all.
pub fn default_uses_sequence_sql(d: &str) -> String {
    format!(
        "coalesce(EXISTS (SELECT 1 FROM pg_catalog.pg_depend dep \
           JOIN pg_catalog.pg_class s ON s.oid = dep.refobjid AND s.relkind = 'S' \
           WHERE dep.classid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass AND dep.objid = {d}.oid) \
          OR pg_catalog.pg_get_expr({d}.adbin, {d}.adrelid) ~* 'nextval\\s*\\(', false)"
    )
}

fn load_sql() -> String {
    let base_type = base_type_sql("a.atttypid");
    let typmod = column_typmod_sql("a.atttypid", "a.atttypmod");
    let seq_default = default_uses_sequence_sql("xd");
    format!(
        r#"SELECT
 (SELECT version FROM pg_catalog.pgshard_catalog_version LIMIT 1),
 (SELECT coalesce(json_agg(json_build_object(
     'node_id', nodeid, 'group_id', groupid, 'host', nodename, 'port', nodeport,
     'is_active', isactive, 'should_have_shards', shouldhaveshards)), '[]')
  FROM pg_catalog.pg_dist_node
  WHERE noderole = 'primary' AND isactive AND groupid <> 0)::text,
 (SELECT coalesce(json_agg(json_build_object(
     'relid', p.logicalrelid::oid::int8, 'schema', n.nspname, 'name', c.relname,
     'method', p.partmethod::text, 'partkey', p.partkey, 'colocation_id', p.colocationid,
     'attnum', a.attnum, 'type_oid', ({base_type})::int8, 'collation', a.attcollation::int8,
     'typmod', {typmod}, 'type_sql', pg_catalog.format_type(a.atttypid, a.atttypmod),
     'columns', ARRAY(SELECT x.attname::text FROM pg_catalog.pg_attribute x
                      WHERE x.attrelid = p.logicalrelid AND x.attnum > 0 AND NOT x.attisdropped
                      ORDER BY x.attnum),
     'indexes', ARRAY(SELECT ic.relname::text FROM pg_catalog.pg_index i
                      JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
                      WHERE i.indrelid = p.logicalrelid),
     'sequence_columns', (SELECT coalesce(json_agg(json_build_object(
                          'name', x.attname, 'always', x.attidentity = 'a') ORDER BY x.attnum), '[]')
                      FROM pg_catalog.pg_attribute x
                      LEFT JOIN pg_catalog.pg_attrdef xd ON xd.adrelid = x.attrelid AND xd.adnum = x.attnum
                      WHERE x.attrelid = p.logicalrelid AND x.attnum > 0 AND NOT x.attisdropped
                        AND (x.attidentity <> '' OR {seq_default})))), '[]')
  FROM pg_catalog.pg_dist_partition p
  JOIN pg_catalog.pg_class c ON c.oid = p.logicalrelid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_catalog.pg_attribute a ON p.partmethod = 'h' AND a.attrelid = p.logicalrelid
       AND a.attname = p.partkey AND a.attnum > 0 AND NOT a.attisdropped)::text,
 (SELECT coalesce(json_agg(json_build_object(
     'relid', s.logicalrelid::oid::int8, 'shard_id', s.shardid,
     'min', s.shardminvalue, 'max', s.shardmaxvalue,
     'groups', (SELECT coalesce(json_agg(pl.groupid ORDER BY pl.placementid), '[]')
                FROM pg_catalog.pg_dist_placement pl
                WHERE pl.shardid = s.shardid AND pl.shardstate = 1))), '[]')
  FROM pg_catalog.pg_dist_shard s)::text,
 (SELECT coalesce(json_agg(json_build_object(
     'oid', p.oid::int8, 'schema', n.nspname, 'name', p.proname, 'nargs', p.pronargs,
     'dist_arg', o.distribution_argument_index, 'colocation_id', o.colocationid)), '[]')
  FROM pg_catalog.pg_dist_object o
  JOIN pg_catalog.pg_proc p ON o.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND p.oid = o.objid
  JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
  WHERE o.colocationid IS NOT NULL)::text"#
    )
}

/// A row of `pg_dist_node` as loaded.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct NodeRow {
    pub node_id: i32,
    pub group_id: i32,
    pub host: String,
    pub port: i32,
    pub is_active: bool,
    pub should_have_shards: bool,
}

/// A row of `pg_dist_partition` joined with the table's definition.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct TableRow {
    pub relid: Oid,
    pub schema: String,
    pub name: String,
    pub method: String,
    pub partkey: Option<String>,
    pub colocation_id: i32,
    pub attnum: Option<i16>,
    pub type_oid: Option<Oid>,
    pub collation: Option<Oid>,
    /// The typmod values are stored with (domains resolved; -1: none).
    #[serde(default)]
    pub typmod: Option<i32>,
    /// `format_type(atttypid, atttypmod)` of the column.
    #[serde(default)]
    pub type_sql: Option<String>,
    pub columns: Vec<String>,
    /// Names of the shell table's indexes (DROP INDEX planning).
    #[serde(default)]
    pub indexes: Vec<String>,
    /// Columns filled from a sequence (identity, or a default calling `nextval`).
    #[serde(default)]
    pub sequence_columns: Vec<crate::catalog::SequenceColumn>,
}

/// A row of `pg_dist_shard` with its active placements' groups.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct ShardRow {
    pub relid: Oid,
    pub shard_id: i64,
    pub min: Option<String>,
    pub max: Option<String>,
    pub groups: Vec<GroupId>,
}

fn parse_json<T: for<'de> Deserialize<'de>>(what: &str, text: &str) -> Result<Vec<T>, PgError> {
    serde_json::from_str(text)
        .map_err(|e| PgError::internal(format!("cannot read the {what} catalog: {e}")))
}

/// Worker nodes sorted by (host, port), as every placement decision sees them.
pub fn build_workers(rows: Vec<NodeRow>) -> Result<Vec<WorkerNode>, PgError> {
    let mut workers = rows
        .into_iter()
        .map(|r| {
            let port = u16::try_from(r.port).map_err(|_| {
                PgError::internal(format!("node {} has invalid port {}", r.host, r.port))
            })?;
            Ok(WorkerNode {
                node_id: r.node_id,
                group_id: r.group_id,
                host: r.host,
                port,
                is_active: r.is_active,
                should_have_shards: r.should_have_shards,
            })
        })
        .collect::<Result<Vec<_>, PgError>>()?;
    workers.sort_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
    Ok(workers)
}

/// A shard bound stored as text; NULL (reference tables) means the whole range.
fn parse_bound(value: Option<&str>, default: i32, shard_id: i64) -> Result<i32, PgError> {
    match value {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse::<i32>()
            .map_err(|_| PgError::internal(format!("shard {shard_id} has an invalid bound {v:?}"))),
    }
}

/// Builds a table from its catalog row and its shard rows.
pub fn build_table(row: TableRow, shard_rows: Vec<ShardRow>) -> Result<DistTable, PgError> {
    let method = match row.method.as_str() {
        "h" => PartitionMethod::Hash,
        "n" => PartitionMethod::Reference,
        other => {
            return Err(PgError::internal(format!(
                "table {}.{} has unsupported partition method {other:?}",
                row.schema, row.name
            )))
        }
    };
    let dist_column = match (method, &row.partkey, row.attnum, row.type_oid) {
        (PartitionMethod::Hash, Some(name), Some(attnum), Some(type_oid)) => Some(DistColumn {
            name: name.clone(),
            attnum,
            type_oid,
            collation: row.collation.unwrap_or(0),
            typmod: row.typmod.unwrap_or(-1),
            type_sql: row.type_sql.clone().unwrap_or_default(),
        }),
        (PartitionMethod::Hash, key, _, _) => {
            tracing::warn!(
                "distribution column {:?} of {}.{} not found; the table cannot be routed",
                key,
                row.schema,
                row.name
            );
            None
        }
        _ => None,
    };
    let mut shards = shard_rows
        .into_iter()
        .map(|s| {
            Ok(ShardInterval {
                shard_id: s.shard_id,
                min: parse_bound(s.min.as_deref(), i32::MIN, s.shard_id)?,
                max: parse_bound(s.max.as_deref(), i32::MAX, s.shard_id)?,
                placement_groups: s.groups,
            })
        })
        .collect::<Result<Vec<_>, PgError>>()?;
    shards.sort_by_key(|s| (s.min, s.shard_id));
    let indexer = ShardIndexer::for_intervals(&shards);
    Ok(DistTable {
        relid: row.relid,
        schema: row.schema,
        name: row.name,
        method,
        dist_column,
        colocation_id: row.colocation_id,
        shards,
        columns: row.columns,
        indexes: row.indexes,
        sequence_columns: row.sequence_columns,
        indexer,
    })
}

/// Assembles a snapshot from loaded rows.
pub fn build_catalog(
    version: i64,
    nodes: Vec<NodeRow>,
    tables: Vec<TableRow>,
    shards: Vec<ShardRow>,
) -> Result<Catalog, PgError> {
    let mut by_rel: std::collections::HashMap<Oid, Vec<ShardRow>> =
        std::collections::HashMap::new();
    for s in shards {
        by_rel.entry(s.relid).or_default().push(s);
    }
    let mut catalog = Catalog {
        version,
        workers: build_workers(nodes)?,
        ..Catalog::default()
    };
    for t in tables {
        let shard_rows = by_rel.remove(&t.relid).unwrap_or_default();
        catalog.add_table(build_table(t, shard_rows)?);
    }
    Ok(catalog)
}

/// Reads the whole catalog from the coordinator node in one statement.
pub async fn load(client: &Client) -> Result<Catalog, PgError> {
    let row = client
        .query_one(load_sql().as_str(), &[])
        .await
        .map_err(|e| PgError::from_client_error("cannot load the pgshard catalog", &e))?;
    let version: Option<i64> = row.get(0);
    let nodes: String = row.get(1);
    let tables: String = row.get(2);
    let shards: String = row.get(3);
    let functions: String = row.get(4);
    let mut catalog = build_catalog(
        version.unwrap_or(0),
        parse_json("node", &nodes)?,
        parse_json("table", &tables)?,
        parse_json("shard", &shards)?,
    )?;
    catalog.functions = parse_json("function", &functions)?;
    Ok(catalog)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sharding::ranges::all_ranges;

    fn table_row(relid: Oid, name: &str) -> TableRow {
        TableRow {
            relid,
            schema: "public".into(),
            name: name.into(),
            method: "h".into(),
            partkey: Some("id".into()),
            colocation_id: 1,
            attnum: Some(1),
            type_oid: Some(23),
            collation: Some(0),
            typmod: None,
            type_sql: None,
            columns: vec!["id".into(), "v".into()],
            indexes: vec![],
            sequence_columns: vec![],
        }
    }

    #[test]
    fn parses_json_rows() {
        let nodes: Vec<NodeRow> = parse_json(
            "node",
            r#"[{"node_id":2,"group_id":2,"host":"b","port":5432,"is_active":true,"should_have_shards":true},
               {"node_id":1,"group_id":1,"host":"a","port":5433,"is_active":true,"should_have_shards":false}]"#,
        )
        .unwrap();
        let workers = build_workers(nodes).unwrap();
        assert_eq!(workers[0].host, "a");
        assert_eq!(workers[0].port, 5433);
        assert!(!workers[0].should_have_shards);
        assert_eq!(workers[1].node_id, 2);
        let tables: Vec<TableRow> = parse_json(
            "table",
            r#"[{"relid":16384,"schema":"public","name":"t","method":"h","partkey":"id","colocation_id":3,
                 "attnum":1,"type_oid":23,"collation":0,"columns":["id","v"]}]"#,
        )
        .unwrap();
        assert_eq!(
            tables[0],
            TableRow {
                colocation_id: 3,
                relid: 16384,
                name: "t".into(),
                ..table_row(16384, "t")
            }
        );
        let shards: Vec<ShardRow> = parse_json(
            "shard",
            r#"[{"relid":16384,"shard_id":102008,"min":null,"max":null,"groups":[]}]"#,
        )
        .unwrap();
        assert_eq!(shards[0].min, None);
    }

    #[test]
    fn builds_sorted_shards_with_uniform_indexer() {
        let ranges = all_ranges(4);
        // Rows in scrambled order.
        let shards: Vec<ShardRow> = [2usize, 0, 3, 1]
            .iter()
            .map(|&i| ShardRow {
                relid: 10,
                shard_id: 102008 + i as i64,
                min: Some(ranges[i].0.to_string()),
                max: Some(ranges[i].1.to_string()),
                groups: vec![1 + (i as i32 % 2)],
            })
            .collect();
        let cat = build_catalog(
            7,
            vec![],
            vec![table_row(10, "t"), table_row(11, "u")],
            shards,
        )
        .unwrap();
        assert_eq!(cat.version, 7);
        let t = cat.qualified("public", "t").unwrap();
        assert_eq!(
            t.shards.iter().map(|s| s.shard_id).collect::<Vec<_>>(),
            vec![102008, 102009, 102010, 102011]
        );
        assert_eq!(t.indexer, ShardIndexer::Uniform { shard_count: 4 });
        assert_eq!(t.shard_for_hash(i32::MAX).unwrap().shard_id, 102011);
        assert_eq!(t.shards[1].placement_groups, vec![2]);
        assert_eq!(t.dist_column.as_ref().unwrap().type_oid, 23);
        // A table without shards still loads (search indexer, finds nothing).
        let u = cat.qualified("public", "u").unwrap();
        assert!(u.shards.is_empty());
        assert!(u.shard_for_hash(0).is_none());
    }

    #[test]
    fn reference_and_broken_rows() {
        let mut r = table_row(5, "r");
        r.method = "n".into();
        r.partkey = None;
        r.attnum = None;
        let shard = ShardRow {
            relid: 5,
            shard_id: 1,
            min: None,
            max: None,
            groups: vec![1, 2],
        };
        let t = build_table(r, vec![shard]).unwrap();
        assert_eq!(t.method, PartitionMethod::Reference);
        assert_eq!((t.shards[0].min, t.shards[0].max), (i32::MIN, i32::MAX));
        assert!(t.dist_column.is_none());

        let mut bad = table_row(6, "b");
        bad.method = "a".into();
        assert!(build_table(bad, vec![]).is_err());
        let shard = ShardRow {
            relid: 6,
            shard_id: 1,
            min: Some("x".into()),
            max: None,
            groups: vec![],
        };
        assert!(build_table(table_row(6, "b"), vec![shard]).is_err());
    }
}
