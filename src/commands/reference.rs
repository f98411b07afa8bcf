//! Reference tables: `create_reference_table(t)` (one shard, partmethod 'n', a
//! placement on every worker, its own co-location group) and writes to every
//! placement at once.
//!
//! Creation, all or nothing: catalog rows in the coordinator node's transaction; on
//! each worker, in its own transaction, the shard table, its rows (one
//! `COPY ... TO STDOUT` on the coordinator node streamed into every worker's
//! `COPY ... FROM STDIN`), constraints and indexes; then two-phase commit with the
//! shell emptied. Workers added later get a placement from `replicate.rs`.

use super::distribute::{
    create_shard_table_sql, prepare_workers, read_columns, read_constraints_and_indexes,
    read_nodes, shard_post_load_sql, ShardPlan, TableDef,
};
use super::privileges;
use super::twopc::{self, Participant};
use super::{abbreviate, begin_catalog_change, db_err, Args, UtilityResult};
use crate::catalog::cache::{bump_version, CatalogCache};
use crate::catalog::shard_table_name;
use crate::error::{sqlstate, PgError};
use crate::sql::quote::{quote_ident, quote_qualified};
use bytes::Bytes;
use futures_util::future::join_all;
use futures_util::{SinkExt, StreamExt};
use std::collections::HashMap;

pub(crate) async fn create_reference_table(
    cache: &CatalogCache,
    args: &Args<'_>,
    caller: &str,
) -> Result<UtilityResult, PgError> {
    let coord = begin_catalog_change(cache).await?;
    let relid = args.relation(0, &coord).await?;
    privileges::ensure_owner(&coord, caller, relid).await?;
    let row = coord
        .query_one(
            "SELECT n.nspname::text, c.relname::text, c.relkind::text, c.relpersistence::text, \
                    coalesce(c.reloptions, '{}')::text[], \
                    EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i WHERE i.inhrelid = c.oid OR i.inhparent = c.oid), \
                    EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid = c.oid) \
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot read the table"))?;
    let (schema, name): (String, String) = (row.get(0), row.get(1));
    let relkind: String = row.get(2);
    let persistence: String = row.get(3);
    if row.get::<_, bool>(6) {
        return Err(PgError::new(
            "42P16",
            format!("table \"{name}\" is already distributed"),
        ));
    }
    if relkind != "r" || row.get::<_, bool>(5) || persistence == "t" {
        return Err(PgError::not_supported(format!(
            "cannot create reference table \"{name}\": only regular, non-temporary tables without inheritance are supported by pgshard"
        )));
    }
    let qualified = quote_qualified(&schema, &name);
    coord
        .batch_execute(&format!("LOCK TABLE ONLY {qualified} IN EXCLUSIVE MODE"))
        .await
        .map_err(db_err(&format!("cannot lock table {qualified}")))?;
    let mut def = table_def(&coord, relid).await?;
    let nodes = read_nodes(&coord).await?;
    if nodes.is_empty() {
        return Err(PgError::new(
            sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
            "cannot create a reference table: there are no active worker nodes",
        ));
    }
    let shard_id: i64 = coord
        .query_one("SELECT nextval('pg_catalog.pg_dist_shardid_seq')", &[])
        .await
        .map_err(db_err("cannot allocate a shard id"))?
        .get(0);
    let shard = ShardPlan {
        shard_id,
        min: i32::MIN,
        max: i32::MAX,
        groups: nodes.iter().map(|n| n.group).collect(),
    };
    let colocation_id: i32 = coord
        .query_one(
            "INSERT INTO pg_catalog.pg_dist_colocation (colocationid, shardcount, replicationfactor, \
               distributioncolumntype, distributioncolumncollation) \
             VALUES (nextval('pg_catalog.pg_dist_colocationid_seq'), 1, $1, 0, 0) RETURNING colocationid",
            &[&(nodes.len() as i32)],
        )
        .await
        .map_err(db_err("cannot insert into pg_dist_colocation"))?
        .get(0);
    coord
        .execute(
            "INSERT INTO pg_catalog.pg_dist_partition (logicalrelid, partmethod, partkey, colocationid, repmodel, autoconverted) \
             VALUES ($1::oid::regclass, 'n', NULL, $2, 't', false)",
            &[&relid, &colocation_id],
        )
        .await
        .map_err(db_err("cannot insert into pg_dist_partition"))?;
    coord
        .execute(
            "INSERT INTO pg_catalog.pg_dist_shard (logicalrelid, shardid, shardstorage, shardminvalue, shardmaxvalue) \
             VALUES ($1::oid::regclass, $2, 't', NULL, NULL)",
            &[&relid, &shard_id],
        )
        .await
        .map_err(db_err("cannot insert into pg_dist_shard"))?;
    coord
        .execute(
            "INSERT INTO pg_catalog.pg_dist_placement (placementid, shardid, shardstate, shardlength, groupid) \
             SELECT nextval('pg_catalog.pg_dist_placement_placementid_seq'), $1, 1, 0, g FROM unnest($2::int4[]) g",
            &[&shard_id, &shard.groups],
        )
        .await
        .map_err(db_err("cannot insert into pg_dist_placement"))?;
    // Foreign keys to other reference tables (Citus refuses any other).
    def.foreign_keys = super::foreign_keys::resolve(
        &coord,
        relid,
        super::foreign_keys::Side::Reference,
        false,
        &[(shard_id, i32::MIN)],
        &[],
    )
    .await?;
    // A shell referenced by a local table's foreign key cannot be truncated: only
    // one with rows is (PostgreSQL then refuses, as it would).
    let has_rows = super::distribute::has_local_rows(&coord, &qualified).await?;

    let node_by_group: HashMap<_, _> = nodes.iter().map(|n| (n.group, n)).collect();
    let deps = super::dependencies::read(&coord, relid).await?;
    super::dependencies::record(&coord, &deps).await?;
    prepare_workers(
        cache.config(),
        &coord,
        &def,
        &deps,
        std::slice::from_ref(&shard),
        &node_by_group,
    )
    .await?;
    let mut participants = super::shards::open_participants(
        cache.config(),
        nodes.iter().map(|n| (n.group, n.host.clone(), n.port)),
    )
    .await?;
    let shell = quote_qualified(&def.schema, &def.name);
    let all: Vec<&Participant> = participants.iter().collect();
    let result = load_placements(&coord, &shell, &all, &def, shard_id).await;
    if let Err(e) = result {
        twopc::abort(&participants).await;
        return Err(e);
    }
    twopc::commit_distributed(&coord, &mut participants, "ref", || async {
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

/// What a reference table's shard is built from, read on the coordinator node.
pub(super) async fn table_def(
    coord: &tokio_postgres::Client,
    relid: u32,
) -> Result<TableDef, PgError> {
    let row = coord
        .query_one(
            "SELECT n.nspname::text, c.relname::text, c.relpersistence::text, \
                    coalesce(c.reloptions, '{}')::text[] \
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.oid = $1",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot read the table"))?;
    let name: String = row.get(1);
    let columns = read_columns(coord, relid).await?;
    let (constraints, indexes) = read_constraints_and_indexes(coord, relid, &name, None).await?;
    Ok(TableDef {
        schema: row.get(0),
        name,
        unlogged: row.get::<_, String>(2) == "u",
        columns,
        reloptions: row.get(3),
        constraints,
        indexes,
        security: privileges::read_table_security(coord, relid).await?,
        foreign_keys: Vec::new(),
    })
}

/// Creates the shard on every participant and streams the rows of `source_table`
/// (read on `source`: the shell on the coordinator node, or a placement) to all.
pub(super) async fn load_placements(
    source: &tokio_postgres::Client,
    source_table: &str,
    participants: &[&Participant],
    def: &TableDef,
    shard_id: i64,
) -> Result<(), PgError> {
    let create = create_shard_table_sql(def, shard_id);
    let post = shard_post_load_sql(def, shard_id)?;
    let cols: Vec<String> = def
        .columns
        .iter()
        .filter(|c| !c.generated)
        .map(|c| quote_ident(&c.name))
        .collect();
    let shard = quote_qualified(&def.schema, &shard_table_name(&def.name, shard_id));
    let in_sql = format!("COPY {shard} ({}) FROM STDIN", cols.join(", "));
    let out_sql = format!(
        "COPY (SELECT {} FROM ONLY {source_table}) TO STDOUT",
        cols.join(", "),
    );
    let ctx = |p: &&Participant, sql: &str| {
        format!(
            "shard {shard_id} on node {}, statement \"{}\"",
            p.node(),
            abbreviate(sql)
        )
    };
    for p in participants {
        p.client
            .batch_execute(&create)
            .await
            .map_err(|e| PgError::from_client_error(&ctx(p, &create), &e))?;
    }
    let mut sinks = Vec::new();
    for p in participants {
        let sink = p
            .client
            .copy_in::<_, Bytes>(in_sql.as_str())
            .await
            .map_err(|e| PgError::from_client_error(&ctx(p, &in_sql), &e))?;
        sinks.push(Box::pin(sink));
    }
    let stream = source
        .copy_out(out_sql.as_str())
        .await
        .map_err(db_err("cannot read the table's rows"))?;
    let mut stream = Box::pin(stream);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(db_err("cannot read the table's rows"))?;
        let sent = join_all(sinks.iter_mut().map(|s| s.send(chunk.clone()))).await;
        for (r, p) in sent.into_iter().zip(participants) {
            r.map_err(|e| PgError::from_client_error(&ctx(p, &in_sql), &e))?;
        }
    }
    for (s, p) in sinks.iter_mut().zip(participants) {
        s.as_mut()
            .finish()
            .await
            .map_err(|e| PgError::from_client_error(&ctx(p, &in_sql), &e))?;
    }
    for p in participants {
        for sql in &post {
            p.client
                .batch_execute(sql)
                .await
                .map_err(|e| PgError::from_client_error(&ctx(p, sql), &e))?;
        }
        privileges::secure_shard(&p.client, &def.security, &shard)
            .await
            .map_err(|(sql, e)| PgError::from_client_error(&ctx(p, &sql), &e))?;
    }
    Ok(())
}
