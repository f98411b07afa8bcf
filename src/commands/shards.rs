//! Commands over the shards of an existing distributed table:
//! `get_shard_id_for_distribution_column`, `citus_relation_size` /
//! `citus_table_size` / `citus_total_relation_size`, `undistribute_table`,
//! `truncate_local_data_after_distributing_table`, and the
//! executor's helpers `drop_distributed_table` (DROP TABLE of a distributed table) and
//! `maintain_shards` (VACUUM / ANALYZE on every shard outside a block).
//!
//! Changes spanning workers commit with two-phase commit anchored in the coordinator
//! node (`twopc`), so a failure leaves nothing half-done.

use super::distribute::read_table_shards;
use super::twopc::{self, Participant};
use super::{abbreviate, begin_catalog_change, db_err, type_oid, Args, UtilityResult};
use crate::backend::control;
use crate::catalog::cache::{bump_version, CatalogCache};
use crate::catalog::load::base_type_sql;
use crate::catalog::{shard_table_name, GroupId, Oid};
use crate::config::Config;
use crate::error::{sqlstate, PgError};
use crate::planner::propagate::TableStatement;
use crate::sharding::hash::hash_sql_expression;
use crate::sharding::ranges::ShardIndexer;
use crate::sql::quote::{quote_ident, quote_qualified};
use bytes::{Bytes, BytesMut};
use futures_util::future::join_all;
use futures_util::{SinkExt, StreamExt};
use std::collections::BTreeMap;
use tokio::sync::mpsc::UnboundedSender;
use tokio_postgres::Client;

/// One shard placement with its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementRow {
    pub shard_id: i64,
    pub group: GroupId,
    pub host: String,
    pub port: u16,
}

/// Every placement of a table (by oid, even if its shell is gone), shard and
/// placement-id order. A placement whose group has no active node is an error.
pub(crate) async fn read_placements(
    client: &Client,
    relid: Oid,
) -> Result<Vec<PlacementRow>, PgError> {
    let rows = client
        .query(
            "SELECT s.shardid, pl.groupid, n.nodename, n.nodeport \
             FROM pg_catalog.pg_dist_shard s \
             JOIN pg_catalog.pg_dist_placement pl ON pl.shardid = s.shardid \
             LEFT JOIN pg_catalog.pg_dist_node n ON n.groupid = pl.groupid AND n.noderole = 'primary' AND n.isactive \
             WHERE s.logicalrelid = $1::oid::regclass ORDER BY s.shardid, pl.placementid",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot read the shard placements"))?;
    rows.iter()
        .map(|r| {
            let shard_id: i64 = r.get(0);
            let group: i32 = r.get(1);
            match (r.get::<_, Option<String>>(2), r.get::<_, Option<i32>>(3)) {
                (Some(host), Some(port)) => Ok(PlacementRow {
                    shard_id,
                    group,
                    host,
                    port: u16::try_from(port).map_err(|_| PgError::internal(format!("invalid node port {port}")))?,
                }),
                _ => Err(PgError::new(
                    sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
                    format!("placement of shard {shard_id} is in group {group}, which has no active node"),
                )),
            }
        })
        .collect()
}

/// Groups placements by node: (group, host, port) -> shard ids.
pub(crate) fn by_node(placements: &[PlacementRow]) -> BTreeMap<(GroupId, String, u16), Vec<i64>> {
    let mut map: BTreeMap<(GroupId, String, u16), Vec<i64>> = BTreeMap::new();
    for p in placements {
        map.entry((p.group, p.host.clone(), p.port))
            .or_default()
            .push(p.shard_id);
    }
    map
}

/// The partition method of a distributed table ('h', 'n'), or an error naming `arg`.
async fn partition_method(
    client: &Client,
    relid: Oid,
    arg: &str,
    what: &str,
) -> Result<String, PgError> {
    client
        .query_opt(
            "SELECT partmethod::text FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1::oid::regclass",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot read pg_dist_partition"))?
        .map(|r| r.get(0))
        .ok_or_else(|| {
            PgError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("cannot {what} because relation '{arg}' is not distributed"),
            )
        })
}

/// (schema, name) of a relation that exists.
pub(crate) async fn relation_name(
    client: &Client,
    relid: Oid,
) -> Result<Option<(String, String)>, PgError> {
    Ok(client
        .query_opt(
            "SELECT n.nspname::text, c.relname::text FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot read pg_class"))?
        .map(|r| (r.get(0), r.get(1))))
}

/// Deletes a table's rows from `pg_dist_placement`, `pg_dist_shard`,
/// `pg_dist_partition`, and its co-location group if it was the last member.
async fn delete_table_catalog(coord: &Client, relid: Oid) -> Result<(), PgError> {
    delete_shard_rows(coord, relid).await?;
    let groups = coord
        .query(
            "DELETE FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1::oid::regclass RETURNING colocationid",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot delete from pg_dist_partition"))?;
    for g in groups {
        delete_group_if_empty(coord, g.get(0)).await?;
    }
    Ok(())
}

/// Deletes a table's rows from `pg_dist_placement` and `pg_dist_shard`.
pub(crate) async fn delete_shard_rows(coord: &Client, relid: Oid) -> Result<(), PgError> {
    coord
        .execute(
            "DELETE FROM pg_catalog.pg_dist_placement WHERE shardid IN \
               (SELECT shardid FROM pg_catalog.pg_dist_shard WHERE logicalrelid = $1::oid::regclass)",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot delete from pg_dist_placement"))?;
    coord
        .execute(
            "DELETE FROM pg_catalog.pg_dist_shard WHERE logicalrelid = $1::oid::regclass",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot delete from pg_dist_shard"))?;
    Ok(())
}

/// Deletes co-location group `group` if no table is in it any more.
pub(crate) async fn delete_group_if_empty(coord: &Client, group: i32) -> Result<(), PgError> {
    coord
        .execute(
            "DELETE FROM pg_catalog.pg_dist_colocation c WHERE c.colocationid = $1 \
             AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p WHERE p.colocationid = c.colocationid)",
            &[&group],
        )
        .await
        .map_err(db_err("cannot delete from pg_dist_colocation"))?;
    Ok(())
}

/// Opens one participant per node, inside `BEGIN`.
pub(crate) async fn open_participants(
    cfg: &Config,
    nodes: impl Iterator<Item = (GroupId, String, u16)>,
) -> Result<Vec<Participant>, PgError> {
    let opened = join_all(nodes.map(|(group, host, port)| async move {
        let client = control::connect(cfg, &host, port).await?;
        client
            .batch_execute("BEGIN")
            .await
            .map_err(db_err(&format!("cannot begin on node {host}:{port}")))?;
        Ok::<_, PgError>(Participant {
            host,
            port,
            group_id: group,
            client,
            gid: None,
        })
    }))
    .await;
    let mut participants = Vec::new();
    let mut error = None;
    for p in opened {
        match p {
            Ok(p) => participants.push(p),
            Err(e) => {
                error.get_or_insert(e);
            }
        }
    }
    match error {
        None => Ok(participants),
        Some(e) => {
            twopc::abort(&participants).await;
            Err(e)
        }
    }
}

/// `DROP TABLE` of distributed tables: one after another, a table referencing
/// another of the list (foreign key) first, as PostgreSQL drops them together.
pub async fn drop_distributed_tables(
    cache: &CatalogCache,
    relids: &[Oid],
    cascade: bool,
    caller: &str,
) -> Result<(), PgError> {
    let order = match relids.len() {
        0 | 1 => relids.to_vec(),
        _ => {
            let coord = crate::backend::control::connect_coordinator(cache.config()).await?;
            super::foreign_keys::drop_order(&coord, relids).await?
        }
    };
    for relid in order {
        drop_table(cache, relid, true, cascade, caller).await?;
    }
    Ok(())
}

/// Drops a distributed table's shards on the workers and deletes its catalog rows,
/// atomically (2PC). With `drop_shell`, the coordinator node's shell table is dropped
/// in the same transaction; without, the shell may already be gone (the names then
/// come from the cached catalog).
pub async fn drop_distributed_table(
    cache: &CatalogCache,
    relid: Oid,
    drop_shell: bool,
    caller: &str,
) -> Result<(), PgError> {
    drop_table(cache, relid, drop_shell, false, caller).await
}

/// [`drop_distributed_table`]; with `cascade`, `DROP ... CASCADE` on the shards and
/// the shell (other tables' foreign keys to it go too).
async fn drop_table(
    cache: &CatalogCache,
    relid: Oid,
    drop_shell: bool,
    cascade: bool,
    caller: &str,
) -> Result<(), PgError> {
    let behavior = if cascade { " CASCADE" } else { "" };
    let coord = begin_catalog_change(cache).await?;
    if drop_shell {
        super::privileges::ensure_owner(&coord, caller, relid).await?;
    }
    let exists = coord
        .query_opt(
            "SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1::oid::regclass",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot read pg_dist_partition"))?
        .is_some();
    if !exists {
        return Err(PgError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("relation with oid {relid} is not a distributed table"),
        ));
    }
    let (schema, name) = match relation_name(&coord, relid).await? {
        Some(n) => n,
        None => {
            let snapshot = cache.snapshot();
            let t = snapshot.tables_by_oid.get(&relid).ok_or_else(|| {
                PgError::internal(format!(
                    "cannot find the name of dropped distributed table {relid}"
                ))
            })?;
            (t.schema.clone(), t.name.clone())
        }
    };
    let placements = read_placements(&coord, relid).await?;
    delete_table_catalog(&coord, relid).await?;

    let nodes = by_node(&placements);
    let mut participants = open_participants(cache.config(), nodes.keys().cloned()).await?;
    let work = join_all(participants.iter().map(|p| {
        let shards = &nodes[&(p.group_id, p.host.clone(), p.port)];
        let names: Vec<String> = shards
            .iter()
            .map(|id| quote_qualified(&schema, &shard_table_name(&name, *id)))
            .collect();
        let sql = format!("DROP TABLE IF EXISTS {}{behavior}", names.join(", "));
        async move {
            p.client.batch_execute(&sql).await.map_err(|e| {
                PgError::from_client_error(
                    &format!("node {}, statement \"{}\"", p.node(), abbreviate(&sql)),
                    &e,
                )
            })
        }
    }))
    .await;
    if let Some(e) = work.into_iter().find_map(Result::err) {
        twopc::abort(&participants).await;
        return Err(e);
    }
    let shell = quote_qualified(&schema, &name);
    twopc::commit_distributed(&coord, &mut participants, "drop", || async {
        if drop_shell {
            coord
                .batch_execute(&format!("DROP TABLE IF EXISTS {shell}{behavior}"))
                .await
                .map_err(db_err(&format!("cannot drop {shell}")))?;
        }
        bump_version(&coord).await
    })
    .await?;
    cache.reload().await;
    Ok(())
}

/// Drops the shard placements listed in `pg_dist_cleanup` (tables dropped on the
/// coordinator node directly: its `sql_drop` trigger lists them, `catalog::guard`),
/// each with `DROP TABLE IF EXISTS` on its node, and deletes their records; under the
/// catalog lock. A name that is not one qualified table name is left alone. Returns
/// how many records were resolved.
pub async fn drop_orphaned_shards(cache: &CatalogCache) -> Result<usize, PgError> {
    let coord = begin_catalog_change(cache).await?;
    let rows = coord
        .query(
            "SELECT c.record_id, c.object_name, n.nodename::text, n.nodeport FROM pg_catalog.pg_dist_cleanup c \
             JOIN pg_catalog.pg_dist_node n ON n.groupid = c.node_group_id AND n.noderole = 'primary' \
             WHERE c.object_type = 1 ORDER BY c.record_id",
            &[],
        )
        .await
        .map_err(db_err("cannot read pg_dist_cleanup"))?;
    let mut done = 0;
    for r in rows {
        let (id, name, host, port): (i64, String, String, i32) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        // The name was written by the trigger with format('%I.%I'); checked again
        // here to be one table name before it goes into a statement.
        let sql = format!("DROP TABLE IF EXISTS {name}");
        let one_table = pg_query::parse(&sql, 0).ok().is_some_and(|p| {
            matches!(p.protobuf.stmts.as_slice(), [s] if matches!(
                s.stmt.as_ref().and_then(|n| n.node.as_ref()),
                Some(pg_query::protobuf::node::Node::DropStmt(d)) if d.objects.len() == 1
            ))
        });
        if !one_table {
            tracing::warn!(
                "pg_dist_cleanup record {id}: \"{name}\" is not a table name, left alone"
            );
            continue;
        }
        let worker = control::connect(cache.config(), &host, port as u16).await?;
        worker
            .batch_execute(&sql)
            .await
            .map_err(|e| PgError::from_client_error(&node_context(&host, port as u16, &sql), &e))?;
        coord
            .execute(
                "DELETE FROM pg_catalog.pg_dist_cleanup WHERE record_id = $1",
                &[&id],
            )
            .await
            .map_err(db_err("cannot delete from pg_dist_cleanup"))?;
        done += 1;
    }
    coord
        .batch_execute("COMMIT")
        .await
        .map_err(db_err("cannot commit the cleanup"))?;
    Ok(done)
}

/// VACUUM / ANALYZE outside a transaction block: on every node holding placements of
/// the table, one statement naming that node's shards, on a connection of its own (VACUUM
/// cannot run in a transaction); nodes in parallel. An error names the node and statement.
pub async fn maintain_shards(cache: &CatalogCache, stmt: &TableStatement) -> Result<(), PgError> {
    let snapshot = cache.snapshot();
    let mut work = Vec::new();
    for (node, shards) in snapshot.placements_by_node(&stmt.table)? {
        work.push((node.host.clone(), node.port, stmt.for_shards(&shards)?));
    }
    let cfg = cache.config();
    let results = join_all(work.iter().map(|(host, port, sql)| async move {
        let client = control::connect(cfg, host, *port).await?;
        client
            .batch_execute(sql)
            .await
            .map_err(|e| PgError::from_client_error(&node_context(host, *port, sql), &e))
    }))
    .await;
    results.into_iter().collect()
}

/// "node h:p, statement \"...\"": where a statement over several shards failed.
pub(crate) fn node_context(host: &str, port: u16, sql: &str) -> String {
    format!("node {host}:{port}, statement \"{}\"", abbreviate(sql))
}

/// `get_shard_id_for_distribution_column(table, value)`: the value is cast to the
/// column's type and hashed inside PostgreSQL (a query parameter, never SQL text).
pub(crate) async fn get_shard_id_for_distribution_column(
    cache: &CatalogCache,
    args: &Args<'_>,
) -> Result<UtilityResult, PgError> {
    let table_arg = args.required(0)?;
    let client = control::connect_coordinator(cache.config()).await?;
    let relid = args.relation(0, &client).await?;
    let method = partition_method(&client, relid, table_arg, "get the shard id").await?;
    let shards = read_table_shards(&client, relid).await?;
    let result = |id: i64| UtilityResult::scalar(args.name, type_oid::INT8, Some(id.to_string()));
    if method == "n" {
        return shards
            .first()
            .map(|s| result(s.shard_id))
            .ok_or_else(|| PgError::internal(format!("reference table {table_arg} has no shard")));
    }
    let value = args.get(1).ok_or_else(|| {
        PgError::new(
            "22004",
            "distribution value cannot be NULL for tables other than reference tables",
        )
    })?;
    let row = client
        .query_one(
            format!(
                "SELECT pg_catalog.format_type(a.atttypid, a.atttypmod), {} \
                 FROM pg_catalog.pg_dist_partition p JOIN pg_catalog.pg_attribute a \
                   ON a.attrelid = p.logicalrelid AND a.attname = p.partkey AND a.attnum > 0 AND NOT a.attisdropped \
                 WHERE p.logicalrelid = $1::oid::regclass",
                base_type_sql("a.atttypid")
            )
            .as_str(),
            &[&relid],
        )
        .await
        .map_err(db_err("cannot read the distribution column"))?;
    let type_sql: String = row.get(0);
    let base: Oid = row.get(1);
    let hash_sql = format!(
        "SELECT {}",
        hash_sql_expression(base, &format!("CAST($1::text AS {type_sql})"))
    );
    let hash: i32 = client
        .query_one(hash_sql.as_str(), &[&value])
        .await
        .map_err(|e| PgError::from_client_error("cannot hash the distribution value", &e))?
        .get(0);
    let intervals = super::distribute::ShardPlan::intervals(&shards);
    let shard = ShardIndexer::for_intervals(&intervals)
        .find(&intervals, hash)
        .ok_or_else(|| {
            PgError::internal(format!("no shard of {table_arg} covers hash value {hash}"))
        })?;
    Ok(result(shard.shard_id))
}

/// `citus_relation_size` / `citus_table_size` / `citus_total_relation_size`: the sum
/// over all shard placements of `pg_relation_size` / `pg_table_size` /
/// `pg_total_relation_size`, computed on the workers.
pub(crate) async fn relation_size(
    cache: &CatalogCache,
    name: &str,
    args: &Args<'_>,
) -> Result<UtilityResult, PgError> {
    let function = match name {
        "citus_relation_size" => "pg_relation_size",
        "citus_table_size" => "pg_table_size",
        _ => "pg_total_relation_size",
    };
    let table_arg = args.required(0)?;
    let cfg = cache.config();
    let client = control::connect_coordinator(cfg).await?;
    let relid = args.relation(0, &client).await?;
    partition_method(&client, relid, table_arg, "calculate the size").await?;
    let (schema, table) = relation_name(&client, relid).await?.ok_or_else(|| {
        PgError::new(
            sqlstate::UNDEFINED_TABLE,
            format!("relation \"{table_arg}\" does not exist"),
        )
    })?;
    let placements = read_placements(&client, relid).await?;
    let nodes = by_node(&placements);
    let sizes = join_all(nodes.iter().map(|((_, host, port), shards)| {
        let names: Vec<String> = shards
            .iter()
            .map(|id| quote_qualified(&schema, &shard_table_name(&table, *id)))
            .collect();
        let sql = format!(
            "SELECT coalesce(sum(pg_catalog.{function}(x::regclass)), 0)::int8 FROM unnest($1::text[]) AS x"
        );
        let context =
            format!("cannot compute the size of the shards of {schema}.{table} on node {host}:{port}");
        async move {
            let worker = control::connect(cfg, host, *port).await?;
            let row = worker
                .query_one(sql.as_str(), &[&names])
                .await
                .map_err(db_err(&context))?;
            Ok::<i64, PgError>(row.get(0))
        }
    }))
    .await;
    let mut total: i64 = 0;
    for s in sizes {
        total += s?;
    }
    Ok(UtilityResult::scalar(
        name,
        type_oid::INT8,
        Some(total.to_string()),
    ))
}

/// Bytes of a shard's rows sent to the coordinator node per COPY message.
const MOVE_CHUNK: usize = 256 * 1024;

/// `undistribute_table(table)`: moves the rows back into the coordinator node's table,
/// drops the shards and the catalog rows, atomically.
pub(crate) async fn undistribute_table(
    cache: &CatalogCache,
    args: &Args<'_>,
    notices: &UnboundedSender<String>,
    caller: &str,
) -> Result<UtilityResult, PgError> {
    let table_arg = args.required(0)?;
    if args
        .get(1)
        .is_some_and(|v| matches!(v, "t" | "true" | "on" | "1"))
    {
        return Err(PgError::not_supported(
            "cascade_via_foreign_keys is not supported by pgshard",
        ));
    }
    let coord = begin_catalog_change(cache).await?;
    let relid = args.relation(0, &coord).await?;
    super::privileges::ensure_owner(&coord, caller, relid).await?;
    partition_method(&coord, relid, table_arg, "undistribute the table").await?;
    super::foreign_keys::refuse_undistribute(&coord, relid, table_arg).await?;
    let (schema, name) = relation_name(&coord, relid).await?.ok_or_else(|| {
        PgError::new(
            sqlstate::UNDEFINED_TABLE,
            format!("relation \"{table_arg}\" does not exist"),
        )
    })?;
    let shell = quote_qualified(&schema, &name);
    coord
        .batch_execute(&format!("LOCK TABLE ONLY {shell} IN ACCESS EXCLUSIVE MODE"))
        .await
        .map_err(db_err(&format!("cannot lock {shell}")))?;
    coord
        .execute(crate::catalog::guard::UNGUARD_ONE_SQL, &[&relid])
        .await
        .map_err(db_err(&format!("cannot remove the guard of {shell}")))?;
    let columns: Vec<String> = coord
        .query(
            "SELECT attname::text FROM pg_catalog.pg_attribute WHERE attrelid = $1 AND attnum > 0 \
             AND NOT attisdropped AND attgenerated <> 's' ORDER BY attnum",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot read the table's columns"))?
        .iter()
        .map(|r| quote_ident(&r.get::<_, String>(0)))
        .collect();
    let columns = columns.join(", ");
    let placements = read_placements(&coord, relid).await?;
    let nodes = by_node(&placements);
    let mut participants = open_participants(cache.config(), nodes.keys().cloned()).await?;
    let _ = notices.send(format!("moving the data of {schema}.{name}"));

    let moved = async {
        // Every shard's rows once, from its first placement.
        let mut copied = std::collections::HashSet::new();
        for p in &participants {
            let shards = &nodes[&(p.group_id, p.host.clone(), p.port)];
            let names: Vec<String> = shards
                .iter()
                .map(|id| quote_qualified(&schema, &shard_table_name(&name, *id)))
                .collect();
            let lock = format!("LOCK TABLE {} IN EXCLUSIVE MODE", names.join(", "));
            p.client.batch_execute(&lock).await.map_err(|e| {
                PgError::from_client_error(
                    &format!("node {}, statement \"{}\"", p.node(), abbreviate(&lock)),
                    &e,
                )
            })?;
            for (id, shard) in shards.iter().zip(&names) {
                if copied.insert(*id) {
                    move_shard_rows(&p.client, &coord, shard, &shell, &columns, &p.node()).await?;
                }
            }
            let drop = format!("DROP TABLE {}", names.join(", "));
            p.client.batch_execute(&drop).await.map_err(|e| {
                PgError::from_client_error(
                    &format!("node {}, statement \"{}\"", p.node(), abbreviate(&drop)),
                    &e,
                )
            })?;
        }
        delete_table_catalog(&coord, relid).await
    }
    .await;
    if let Err(e) = moved {
        twopc::abort(&participants).await;
        return Err(e);
    }
    twopc::commit_distributed(&coord, &mut participants, "undist", || async {
        bump_version(&coord).await
    })
    .await?;
    cache.reload().await;
    Ok(UtilityResult::void(args.name))
}

/// Streams one shard's rows from a worker into the coordinator node's table.
async fn move_shard_rows(
    worker: &Client,
    coord: &Client,
    shard: &str,
    shell: &str,
    columns: &str,
    node: &str,
) -> Result<(), PgError> {
    let out_sql = format!("COPY {shard} ({columns}) TO STDOUT");
    let in_sql = format!("COPY {shell} ({columns}) FROM STDIN");
    let out_err = |e: tokio_postgres::Error| {
        PgError::from_client_error(
            &format!("node {node}, statement \"{}\"", abbreviate(&out_sql)),
            &e,
        )
    };
    let in_err = |e: tokio_postgres::Error| {
        PgError::from_client_error(
            &format!("coordinator node, statement \"{}\"", abbreviate(&in_sql)),
            &e,
        )
    };
    let stream = worker.copy_out(out_sql.as_str()).await.map_err(out_err)?;
    futures_util::pin_mut!(stream);
    let sink = coord
        .copy_in::<_, Bytes>(in_sql.as_str())
        .await
        .map_err(in_err)?;
    futures_util::pin_mut!(sink);
    let mut buf = BytesMut::new();
    while let Some(chunk) = stream.next().await {
        buf.extend_from_slice(&chunk.map_err(out_err)?);
        if buf.len() >= MOVE_CHUNK {
            sink.send(buf.split().freeze()).await.map_err(in_err)?;
        }
    }
    if !buf.is_empty() {
        sink.send(buf.freeze()).await.map_err(in_err)?;
    }
    sink.finish().await.map_err(in_err)?;
    Ok(())
}

/// `truncate_local_data_after_distributing_table(table)`: Citus empties the
/// coordinator's own copy of the rows left by `create_distributed_table`; pgshard
/// empties the shell when it distributes (and guards it), so after Citus's checks
/// (a Citus table, no local table's foreign key to it, TRUNCATE privilege) there is
/// nothing left to delete.
pub(crate) async fn truncate_local_data(
    cache: &CatalogCache,
    args: &Args<'_>,
    caller: &str,
) -> Result<UtilityResult, PgError> {
    let coord = control::connect_coordinator(cache.config()).await?;
    let relid = args.relation(0, &coord).await?;
    let row = coord
        .query_one(
            "SELECT c.relname::text, \
                    EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid = c.oid), \
                    (SELECT f.conrelid::regclass::text FROM pg_catalog.pg_constraint f \
                     WHERE f.contype = 'f' AND f.confrelid = c.oid AND NOT EXISTS \
                       (SELECT 1 FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid = f.conrelid) \
                     ORDER BY f.oid LIMIT 1), \
                    pg_catalog.has_table_privilege($2, c.oid, 'TRUNCATE') \
             FROM pg_catalog.pg_class c WHERE c.oid = $1",
            &[&relid, &caller],
        )
        .await
        .map_err(db_err("cannot read the table"))?;
    let name: String = row.get(0);
    if !row.get::<_, bool>(1) {
        return Err(PgError::new(
            sqlstate::INTERNAL_ERROR,
            "supplied parameter is not a distributed relation",
        )
        .with_detail("This UDF only truncates local records of distributed tables."));
    }
    if let Some(referencing) = row.get::<_, Option<String>>(2) {
        return Err(PgError::new(
            sqlstate::INTERNAL_ERROR,
            "cannot truncate a table referenced in a foreign key constraint by a local table",
        )
        .with_detail(format!("Table \"{referencing}\" references \"{name}\"")));
    }
    if !row.get::<_, bool>(3) {
        return Err(PgError::new(
            sqlstate::INSUFFICIENT_PRIVILEGE,
            format!("permission denied for table {name}"),
        ));
    }
    Ok(UtilityResult::void(args.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_placements_by_node() {
        let p = |shard_id, group, port| PlacementRow {
            shard_id,
            group,
            host: "h".into(),
            port,
        };
        let map = by_node(&[p(1, 1, 5), p(2, 2, 6), p(3, 1, 5), p(3, 2, 6)]);
        assert_eq!(map.len(), 2);
        assert_eq!(map[&(1, "h".to_string(), 5)], vec![1, 3]);
        assert_eq!(map[&(2, "h".to_string(), 6)], vec![2, 3]);
    }
}
