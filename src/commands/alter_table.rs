//! `alter_distributed_table(table_name, distribution_column => NULL, shard_count =>
//! NULL, colocate_with => NULL, cascade_to_colocated => NULL)`, as Citus does it:
//! the table's rows are moved into new shards (another distribution column, shard
//! count or co-location group), in one distributed transaction.
//!
//! The table keeps its shell on the coordinator node (same oid, so its indexes,
//! constraints, defaults, owner, grants, policies and the views over it stay as they
//! are); only its shards and catalog rows are replaced. Steps, all or nothing:
//! 1. On the coordinator node, in one transaction holding the catalog lock and an
//!    ACCESS EXCLUSIVE lock on the shell (as `undistribute_table`): Citus's argument
//!    checks (`check_arguments`, pure), then the new placement as
//!    `create_distributed_table` picks it (`distribute::choose_placement`), new shard
//!    ids, and the catalog rows swapped (`pg_dist_partition` updated, old shard rows
//!    replaced, an emptied co-location group deleted).
//! 2. On every node holding old shards, one connection locks them (EXCLUSIVE: writes
//!    wait, reads go on) and streams their rows, each with the hash of the new
//!    distribution column computed by the worker, through pgshard into the new shards
//!    (`shard_load`: created, loaded, then constraints, indexes and ACLs added); then
//!    it drops the old shards.
//! 3. Two-phase commit (`twopc`) of every worker connection, anchored in the
//!    coordinator node's transaction.
//!
//! Progress: Citus's NOTICEs per step, and one log line with the shard counts, rows
//! and time. `cascade_to_colocated => true` is refused (0A000) when other tables are
//! co-located with the table.

use super::distribute::{
    allocate_shards, choose_placement, copy_out_sql_from, ensure_deterministic_collation,
    ensure_hashable, insert_colocation_group, insert_shard_rows, nodes_by_group, prepare_workers,
    read_columns, read_constraints_and_indexes, read_nodes, ColumnDef, TableDef,
};
use super::shard_load::{self, CopyError, Loading};
use super::shards::{
    by_node, delete_group_if_empty, delete_shard_rows, open_participants, read_placements,
};
use super::twopc::{self, Participant};
use super::{abbreviate, begin_catalog_change, db_err, Args, UtilityResult};
use crate::catalog::cache::{bump_version, CatalogCache};
use crate::catalog::{shard_table_name, Oid};
use crate::error::{sqlstate, PgError};
use crate::sql::quote::quote_qualified;
use std::collections::HashSet;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;
use tokio_postgres::Client;

/// Most shards Citus accepts.
const MAX_SHARD_COUNT: i64 = 64_000;

/// Citus raises its argument errors without a code: PostgreSQL's default, XX000.
fn citus_error(message: impl Into<String>) -> PgError {
    PgError::new(sqlstate::INTERNAL_ERROR, message)
}

/// The table named by `colocate_with`, as the checks see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// As the caller wrote it (Citus's messages quote it so).
    pub name: String,
    /// A hash-distributed table.
    pub distributed: bool,
    /// Already in the table's co-location group.
    pub colocated_with_table: bool,
    pub shard_count: i64,
    /// Type (with collation) of its distribution column.
    pub dist_type: (Oid, Oid),
}

/// What the call asks, with what the table is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub table: String,
    pub distribution_column: Option<String>,
    /// The new distribution column is the current one.
    pub same_column: bool,
    pub shard_count: Option<i64>,
    pub colocate_with: Option<String>,
    pub target: Option<Target>,
    pub cascade: Option<bool>,
    pub original_shard_count: i64,
    /// Type (with collation) of the current and of the new distribution column.
    pub original_type: (Oid, Oid),
    pub new_type: (Oid, Oid),
    /// Other tables in the table's co-location group.
    pub colocated_others: usize,
}

/// Where the new shards go, in `create_distributed_table`'s terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Colocate {
    /// The table's own group (only the distribution column changes, same type).
    Own,
    Default,
    None,
    /// The group of the `colocate_with` table.
    Table,
}

/// The checked request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub colocate: Colocate,
    pub shard_count: u32,
    /// Citus's NOTICEs for the parts of the call that change nothing.
    pub notices: Vec<String>,
}

/// Citus's checks of the arguments, in Citus's order, then what pgshard does not do.
pub fn check_arguments(r: &Request) -> Result<Decision, PgError> {
    let is_table = |c: &str| !matches!(c.to_ascii_lowercase().as_str(), "default" | "none");
    if r.distribution_column.is_none()
        && r.shard_count.is_none()
        && r.colocate_with.is_none()
        && r.cascade != Some(true)
    {
        return Err(citus_error(
            "you have to specify at least one of the distribution_column, shard_count or colocate_with parameters",
        ));
    }
    let same_column = r.distribution_column.is_some() && r.same_column;
    let mut shard_count = r.shard_count;
    let same_count = shard_count.is_some_and(|n| n == r.original_shard_count);
    let mut same_colocation = false;
    if let (Some(with), Some(t)) = (&r.colocate_with, &r.target) {
        if is_table(with) {
            same_colocation = t.colocated_with_table;
            if !t.distributed {
                return Err(citus_error(format!(
                    "cannot colocate with {with} because it is not a distributed table"
                )));
            }
        }
    }
    if shard_count == Some(0) {
        return Err(citus_error("shard_count cannot be 0").with_hint(
            "if you no longer want this to be a distributed table you can try undistribute_table() function",
        ));
    }
    if let Some(n) = shard_count.filter(|n| !(1..=MAX_SHARD_COUNT).contains(n)) {
        return Err(PgError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("{n} is outside the valid range for parameter \"shard_count\" (1 .. {MAX_SHARD_COUNT})"),
        ));
    }
    if r.cascade == Some(true) && r.distribution_column.is_some() {
        return Err(citus_error(
            "distribution_column cannot be cascaded to colocated tables",
        ));
    }
    if r.cascade == Some(true) && shard_count.is_none() && r.colocate_with.is_none() {
        return Err(citus_error(
            "shard_count or colocate_with is necessary for cascading to colocated tables",
        ));
    }
    if (r.distribution_column.is_none() || same_column)
        && (shard_count.is_none() || same_count)
        && (r.colocate_with.is_none() || same_colocation)
    {
        return Err(
            citus_error("this call doesn't change any properties of the table")
                .with_hint("check citus_tables view to see current properties of the table"),
        );
    }
    if r.cascade == Some(true)
        && r.colocate_with
            .as_deref()
            .is_some_and(|c| c.eq_ignore_ascii_case("none"))
    {
        return Err(citus_error(
            "colocate_with := 'none' cannot be cascaded to colocated tables",
        ));
    }
    if r.colocated_others > 0 && shard_count.is_some() && !same_count && r.cascade.is_none() {
        return Err(citus_error("cascade_to_colocated parameter is necessary")
            .with_detail("this table is colocated with some other tables")
            .with_hint(
                "cascade_to_colocated := false will break the current colocation, \
                 cascade_to_colocated := true will change the shard count of colocated tables too.",
            ));
    }
    let mut colocate = match r.colocate_with.as_deref().map(str::to_ascii_lowercase) {
        None => None,
        Some(c) if c == "default" => Some(Colocate::Default),
        Some(c) if c == "none" => Some(Colocate::None),
        Some(_) => Some(Colocate::Table),
    };
    if let (Some(Colocate::Table), Some(t), Some(with)) = (&colocate, &r.target, &r.colocate_with) {
        if shard_count.is_some_and(|n| n != t.shard_count) {
            return Err(citus_error(
                "shard_count cannot be different than the shard count of the table in colocate_with",
            )
            .with_hint("if no shard_count is specified shard count will be same with colocate_with table's"));
        }
        if t.shard_count != r.original_shard_count {
            shard_count = Some(t.shard_count);
        }
        if let Some(column) = &r.distribution_column {
            if t.dist_type != r.new_type {
                return Err(citus_error(format!(
                    "cannot colocate with {with} and change distribution column to {column} because data type of \
                     column {column} is different then the distribution column of the {with}"
                )));
            }
        } else if t.dist_type != r.original_type {
            return Err(citus_error(format!(
                "cannot colocate with {with} because data type of its distribution column is different than {}",
                r.table
            )));
        }
    }
    let mut notices = Vec::new();
    if same_column {
        notices.push(format!(
            "table is already distributed by {}",
            r.distribution_column.as_deref().unwrap_or_default()
        ));
    }
    if same_count {
        notices.push(format!(
            "shard count of the table is already {}",
            r.shard_count.unwrap_or_default()
        ));
    }
    if same_colocation {
        notices.push(format!(
            "table is already colocated with {}",
            r.colocate_with.as_deref().unwrap_or_default()
        ));
    }
    if r.cascade == Some(true) && r.colocated_others > 0 {
        return Err(PgError::not_supported(
            "cascade_to_colocated => true is not supported by pgshard",
        )
        .with_hint(
            "Alter each co-located table with colocate_with => this table, or pass cascade_to_colocated => false.",
        ));
    }
    // As Citus's CreateDistributedTableLike: the own group when only the column
    // changes (same type), else the default group of the new shard count.
    if colocate.is_none() {
        colocate = Some(if r.original_type == r.new_type && shard_count.is_none() {
            Colocate::Own
        } else {
            Colocate::Default
        });
    }
    Ok(Decision {
        colocate: colocate.unwrap_or(Colocate::Default),
        shard_count: shard_count.unwrap_or(r.original_shard_count) as u32,
        notices,
    })
}

/// A boolean argument as PostgreSQL reads one.
fn parse_bool(v: &str) -> Result<bool, PgError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "t" | "true" | "on" | "1" | "yes" | "y" => Ok(true),
        "f" | "false" | "off" | "0" | "no" | "n" => Ok(false),
        _ => Err(PgError::new(
            sqlstate::INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for type boolean: \"{v}\""),
        )),
    }
}

/// The table as the command starts from it.
struct Current {
    schema: String,
    name: String,
    /// `schema.name` as PostgreSQL's `quote_ident` writes it (Citus's messages).
    display: String,
    unlogged: bool,
    reloptions: Vec<String>,
    partmethod: Option<String>,
    partkey: Option<String>,
    colocation_id: i32,
    replication: i32,
    shard_count: i64,
}

async fn read_current(coord: &Client, relid: Oid) -> Result<Current, PgError> {
    let r = coord
        .query_one(
            "SELECT n.nspname::text, c.relname::text, \
                    pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname), \
                    c.relpersistence = 'u', coalesce(c.reloptions, '{}')::text[], \
                    p.partmethod::text, p.partkey, coalesce(p.colocationid, 0), \
                    coalesce(g.replicationfactor, 1), \
                    (SELECT count(*) FROM pg_catalog.pg_dist_shard s WHERE s.logicalrelid = c.oid) \
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             LEFT JOIN pg_catalog.pg_dist_partition p ON p.logicalrelid = c.oid \
             LEFT JOIN pg_catalog.pg_dist_colocation g ON g.colocationid = p.colocationid \
             WHERE c.oid = $1",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot read the table"))?;
    Ok(Current {
        schema: r.get(0),
        name: r.get(1),
        display: r.get(2),
        unlogged: r.get(3),
        reloptions: r.get(4),
        partmethod: r.get(5),
        partkey: r.get(6),
        colocation_id: r.get(7),
        replication: r.get(8),
        shard_count: r.get(9),
    })
}

/// The distribution column's type and collation of a hash-distributed table, and its
/// co-location group and shard count; None when the table is not hash-distributed.
async fn read_target(
    coord: &Client,
    relid: Oid,
) -> Result<Option<(i32, i64, (Oid, Oid))>, PgError> {
    let current = read_current(coord, relid).await?;
    let (Some("h"), Some(key)) = (current.partmethod.as_deref(), &current.partkey) else {
        return Ok(None);
    };
    let columns = read_columns(coord, relid).await?;
    let dist = columns.iter().find(|c| &c.name == key).ok_or_else(|| {
        PgError::internal(format!(
            "distribution column {key} of {} not found",
            current.display
        ))
    })?;
    Ok(Some((
        current.colocation_id,
        current.shard_count,
        (dist.base_type, dist.collation),
    )))
}

pub(crate) async fn alter_distributed_table(
    cache: &CatalogCache,
    args: &Args<'_>,
    notices: &UnboundedSender<String>,
    caller: &str,
) -> Result<UtilityResult, PgError> {
    let started = Instant::now();
    let cascade = args.get(4).map(parse_bool).transpose()?;
    let shard_count = args.int(2, None)?;
    let coord = begin_catalog_change(cache).await?;
    let relid = args.relation(0, &coord).await?;
    super::privileges::ensure_owner(&coord, caller, relid).await?;
    let current = read_current(&coord, relid).await?;
    let partkey = match (current.partmethod.as_deref(), &current.partkey) {
        (Some("h"), Some(key)) => key.clone(),
        _ => {
            return Err(citus_error(
                "cannot alter table because the table is not distributed",
            ))
        }
    };
    let shell = quote_qualified(&current.schema, &current.name);
    coord
        .batch_execute(&format!("LOCK TABLE ONLY {shell} IN ACCESS EXCLUSIVE MODE"))
        .await
        .map_err(db_err(&format!("cannot lock {shell}")))?;

    let columns = read_columns(&coord, relid).await?;
    if columns.iter().any(|c| c.identity) {
        return Err(citus_error(format!(
            "cannot complete command because relation {} has identity column",
            current.display
        ))
        .with_hint("Drop the identity columns and re-try the command"));
    }
    let find = |name: &str| columns.iter().find(|c| c.name == name).cloned();
    let old_dist = find(&partkey).ok_or_else(|| {
        PgError::internal(format!(
            "distribution column {partkey} of {} not found",
            current.display
        ))
    })?;
    let new_column = args.get(1).map(str::to_string);
    let new_dist: ColumnDef = match &new_column {
        None => old_dist.clone(),
        Some(c) => find(c).ok_or_else(|| {
            PgError::new(
                sqlstate::UNDEFINED_COLUMN,
                format!(
                    "column \"{c}\" of relation \"{}\" does not exist",
                    current.name
                ),
            )
        })?,
    };
    let colocated: Vec<Oid> = coord
        .query(
            "SELECT logicalrelid::oid FROM pg_catalog.pg_dist_partition WHERE colocationid = $1 ORDER BY 1",
            &[&current.colocation_id],
        )
        .await
        .map_err(db_err("cannot read pg_dist_partition"))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let colocate_with = args.get(3).map(str::to_string);
    let (target, target_relid) = match colocate_with.as_deref() {
        Some(with) if super::is_table_arg(args.name, 3, with) => {
            let other = args.relation(3, &coord).await?;
            let t = read_target(&coord, other).await?;
            let target = Target {
                name: with.to_string(),
                distributed: t.is_some(),
                colocated_with_table: colocated.contains(&other),
                shard_count: t.map(|t| t.1).unwrap_or(0),
                dist_type: t.map(|t| t.2).unwrap_or((0, 0)),
            };
            (Some(target), Some(other))
        }
        _ => (None, None),
    };
    let request = Request {
        table: current.name.clone(),
        distribution_column: new_column.clone(),
        same_column: new_dist.attnum == old_dist.attnum,
        shard_count,
        colocate_with: colocate_with.clone(),
        target,
        cascade,
        original_shard_count: current.shard_count,
        original_type: (old_dist.base_type, old_dist.collation),
        new_type: (new_dist.base_type, new_dist.collation),
        colocated_others: colocated.iter().filter(|o| **o != relid).count(),
    };
    let decision = check_arguments(&request)?;
    for n in &decision.notices {
        let _ = notices.send(n.clone());
    }
    ensure_hashable(&coord, &new_dist).await?;
    ensure_deterministic_collation(&coord, &new_dist).await?;
    // Foreign keys are made per shard pair; rebuilding them for the new shards (and
    // those of the tables referencing this one) is not done yet.
    if super::foreign_keys::in_any_key(&coord, relid).await? {
        return Err(PgError::not_supported(format!(
            "pgshard does not support alter_distributed_table on \"{}\" yet: it has or is \
             referenced by foreign keys",
            current.name
        ))
        .with_hint("Drop the foreign keys, alter the table, then add them again."));
    }
    let (constraints, indexes) =
        read_constraints_and_indexes(&coord, relid, &current.name, Some(new_dist.attnum)).await?;
    let def = TableDef {
        schema: current.schema.clone(),
        name: current.name.clone(),
        unlogged: current.unlogged,
        columns: columns.clone(),
        reloptions: current.reloptions.clone(),
        constraints,
        indexes,
        security: super::privileges::read_table_security(&coord, relid).await?,
        foreign_keys: Vec::new(),
    };

    // The new shards: placement as create_distributed_table picks it.
    let own_name = current.display.clone();
    let (mode, colocate_relid) = match decision.colocate {
        Colocate::Own => (own_name.as_str(), Some(relid)),
        Colocate::Default => ("default", None),
        Colocate::None => ("none", None),
        Colocate::Table => (colocate_with.as_deref().unwrap_or_default(), target_relid),
    };
    let replication = current.replication.max(1) as u32;
    let nodes = read_nodes(&coord).await?;
    let placement = choose_placement(
        &coord,
        mode,
        colocate_relid,
        true,
        decision.shard_count,
        replication,
        &new_dist,
        &nodes,
    )
    .await?;
    let shards = allocate_shards(&coord, &current.name, &placement).await?;
    let node_by_group = nodes_by_group(&nodes, &shards)?;
    let old_placements = read_placements(&coord, relid).await?;

    // The catalog swap, committed with the rest.
    let group = if placement.new_group {
        insert_colocation_group(&coord, shards.len(), replication, &new_dist).await?
    } else {
        placement.colocation_id
    };
    delete_shard_rows(&coord, relid).await?;
    coord
        .execute(
            "UPDATE pg_catalog.pg_dist_partition SET partkey = $2, colocationid = $3 \
             WHERE logicalrelid = $1::oid::regclass",
            &[&relid, &new_dist.name, &group],
        )
        .await
        .map_err(db_err("cannot update pg_dist_partition"))?;
    insert_shard_rows(&coord, relid, &shards).await?;
    if group != current.colocation_id {
        delete_group_if_empty(&coord, current.colocation_id).await?;
    }
    let deps = super::dependencies::read(&coord, relid).await?;
    super::dependencies::record(&coord, &deps).await?;
    prepare_workers(cache.config(), &coord, &def, &deps, &shards, &node_by_group).await?;

    // The old shards: locked (writes wait) on one connection per node.
    let old_nodes = by_node(&old_placements);
    let old = open_participants(cache.config(), old_nodes.keys().cloned()).await?;
    let shard_names = |p: &Participant| -> Vec<(i64, String)> {
        old_nodes[&(p.group_id, p.host.clone(), p.port)]
            .iter()
            .map(|id| {
                (
                    *id,
                    quote_qualified(&def.schema, &shard_table_name(&def.name, *id)),
                )
            })
            .collect()
    };
    for p in &old {
        let names: Vec<String> = shard_names(p).into_iter().map(|(_, n)| n).collect();
        if let Err(e) = run_on(
            p,
            &format!("LOCK TABLE {} IN EXCLUSIVE MODE", names.join(", ")),
        )
        .await
        {
            twopc::abort(&old).await;
            return Err(e);
        }
    }

    let _ = notices.send(format!("creating a new table for {}", current.display));
    let slots = match shard_load::plan_slots(&def, &shards, &node_by_group) {
        Ok(s) => s,
        Err(e) => {
            twopc::abort(&old).await;
            return Err(e);
        }
    };
    let loading = Loading::start(cache.config(), slots, shards.len());
    let _ = notices.send(format!("moving the data of {}", current.display));
    let mut rows = 0;
    let fed = move_rows(
        &loading,
        &old,
        &shard_names,
        &def,
        &new_dist,
        &shards,
        notices,
        &mut rows,
    )
    .await;
    let new = match loading.finish(fed).await {
        Ok(p) => p,
        Err(e) => {
            twopc::abort(&old).await;
            return Err(e);
        }
    };
    let _ = notices.send(format!("dropping the old {}", current.display));
    let mut participants: Vec<Participant> = old;
    for p in &participants {
        let names: Vec<String> = shard_names(p).into_iter().map(|(_, n)| n).collect();
        if let Err(e) = run_on(p, &format!("DROP TABLE {}", names.join(", "))).await {
            twopc::abort(&participants).await;
            twopc::abort(&new).await;
            return Err(e);
        }
    }
    participants.extend(new);
    let _ = notices.send(format!("renaming the new table to {}", current.display));
    twopc::commit_distributed(&coord, &mut participants, "adt", || async {
        bump_version(&coord).await
    })
    .await?;
    cache.reload().await;
    tracing::info!(
        "alter_distributed_table {}: {} shards by {} -> {} shards by {} (co-location group {} -> {}), {rows} rows moved in {:.1} s",
        current.display,
        current.shard_count,
        old_dist.name,
        shards.len(),
        new_dist.name,
        current.colocation_id,
        group,
        started.elapsed().as_secs_f64()
    );
    Ok(UtilityResult::void(args.name))
}

/// Runs `sql` on an old-shard connection; errors name the node and statement.
async fn run_on(p: &Participant, sql: &str) -> Result<(), PgError> {
    p.client.batch_execute(sql).await.map_err(|e| {
        PgError::from_client_error(
            &format!("node {}, statement \"{}\"", p.node(), abbreviate(sql)),
            &e,
        )
    })
}

/// Streams every old shard's rows once (from its first placement), each with the hash
/// of the new distribution column, into the new shards.
#[allow(clippy::too_many_arguments)]
async fn move_rows(
    loading: &Loading,
    old: &[Participant],
    shard_names: &(dyn Fn(&Participant) -> Vec<(i64, String)> + Sync),
    def: &TableDef,
    dist: &ColumnDef,
    shards: &[super::distribute::ShardPlan],
    notices: &UnboundedSender<String>,
    rows: &mut u64,
) -> Result<(), CopyError> {
    let table = format!("{}.{}", def.schema, def.name);
    let mut router = loading.router(shards, &table, &dist.name);
    let mut copied = HashSet::new();
    for p in old {
        for (id, source) in shard_names(p) {
            if copied.insert(id) {
                let sql = copy_out_sql_from(def, dist, &source);
                let what = format!("shard {source} on node {}", p.node());
                router.route_copy(&p.client, &sql, &what, notices).await?;
            }
        }
    }
    router.flush_all().await?;
    *rows = router.rows();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request {
            table: "t".into(),
            distribution_column: None,
            same_column: false,
            shard_count: None,
            colocate_with: None,
            target: None,
            cascade: None,
            original_shard_count: 32,
            original_type: (23, 0),
            new_type: (23, 0),
            colocated_others: 0,
        }
    }

    fn message(r: &Request) -> String {
        check_arguments(r).unwrap_err().message
    }

    #[test]
    fn refuses_what_citus_refuses() {
        let r = request();
        assert!(message(&r).starts_with("you have to specify at least one"));
        let r = Request {
            shard_count: Some(32),
            ..request()
        };
        assert_eq!(
            message(&r),
            "this call doesn't change any properties of the table"
        );
        let r = Request {
            shard_count: Some(0),
            ..request()
        };
        assert_eq!(message(&r), "shard_count cannot be 0");
        let r = Request {
            shard_count: Some(8),
            colocated_others: 1,
            ..request()
        };
        let e = check_arguments(&r).unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.message.as_str()),
            ("XX000", "cascade_to_colocated parameter is necessary")
        );
        let r = Request {
            distribution_column: Some("b".into()),
            cascade: Some(true),
            ..request()
        };
        assert_eq!(
            message(&r),
            "distribution_column cannot be cascaded to colocated tables"
        );
        let r = Request {
            shard_count: Some(8),
            colocated_others: 2,
            cascade: Some(true),
            ..request()
        };
        assert_eq!(check_arguments(&r).unwrap_err().code, "0A000");
    }

    #[test]
    fn picks_the_group_as_citus() {
        // Only the column changes, same type: the table's own group.
        let r = Request {
            distribution_column: Some("b".into()),
            ..request()
        };
        let d = check_arguments(&r).unwrap();
        assert_eq!((d.colocate, d.shard_count), (Colocate::Own, 32));
        // Another type: the default group.
        let r = Request {
            distribution_column: Some("b".into()),
            new_type: (25, 100),
            ..request()
        };
        assert_eq!(check_arguments(&r).unwrap().colocate, Colocate::Default);
        // A shard count: the default group of that count.
        let r = Request {
            shard_count: Some(8),
            ..request()
        };
        let d = check_arguments(&r).unwrap();
        assert_eq!((d.colocate, d.shard_count), (Colocate::Default, 8));
        // A table: its shard count, and a NOTICE for what does not change.
        let target = Target {
            name: "u".into(),
            distributed: true,
            colocated_with_table: false,
            shard_count: 4,
            dist_type: (23, 0),
        };
        let r = Request {
            colocate_with: Some("u".into()),
            target: Some(target.clone()),
            distribution_column: Some("a".into()),
            same_column: true,
            ..request()
        };
        let d = check_arguments(&r).unwrap();
        assert_eq!((d.colocate, d.shard_count), (Colocate::Table, 4));
        assert_eq!(d.notices, vec!["table is already distributed by a"]);
        let r = Request {
            colocate_with: Some("u".into()),
            target: Some(Target {
                dist_type: (25, 100),
                ..target
            }),
            ..request()
        };
        assert_eq!(
            message(&r),
            "cannot colocate with u because data type of its distribution column is different than t"
        );
    }

    #[test]
    fn reads_booleans() {
        assert!(parse_bool("true").unwrap());
        assert!(!parse_bool(" f ").unwrap());
        assert_eq!(parse_bool("maybe").unwrap_err().code, "22P02");
    }
}
