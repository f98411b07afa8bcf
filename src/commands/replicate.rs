//! Reference tables on workers added later: `replicate_reference_tables
//! ([shard_transfer_mode])`, and `citus_add_node`, which runs the same copy inside its
//! own catalog transaction (the node and its reference placements commit together, as
//! `citus_add_node` of Citus activates a node before returning).
//!
//! For every reference table whose shard has no placement on an active primary
//! worker: on the table's first placement (lowest group: the one every write takes
//! first, `executor::session::reference_write`), `LOCK TABLE shard IN EXCLUSIVE MODE`
//! (reads go on, writes wait), then its rows are streamed into a new shard on each
//! missing worker; the `pg_dist_placement` rows commit with the copies (two-phase
//! commit anchored in the catalog transaction). The lock is released only after every
//! pgshard process has loaded the new placement, so a write that got past the first
//! placement sees it (the writers re-read the placements once they hold the first).
//! All three `shard_transfer_mode` values copy this way (`block_writes`).

use super::distribute::{prepare_workers, read_nodes, NodeInfo, ShardPlan};
use super::reference::{load_placements, table_def};
use super::twopc::{self, Participant};
use super::{db_err, Args, UtilityResult};
use crate::backend::control;
use crate::catalog::cache::{bump_version, CatalogCache};
use crate::catalog::shard_table_name;
use crate::error::{sqlstate, PgError};
use crate::sql::quote::quote_qualified;
use std::collections::HashMap;
use tokio_postgres::Client;

/// `replicate_reference_tables(shard_transfer_mode => 'auto')`.
pub(crate) async fn replicate_reference_tables(
    cache: &CatalogCache,
    args: &Args<'_>,
) -> Result<UtilityResult, PgError> {
    let mode = args.get(0).unwrap_or("auto");
    if !matches!(mode, "auto" | "force_logical" | "block_writes") {
        return Err(PgError::new(
            sqlstate::INVALID_TEXT_REPRESENTATION,
            format!("invalid input value for enum citus.shard_transfer_mode: \"{mode}\""),
        ));
    }
    let coord = super::begin_catalog_change(cache).await?;
    commit_with_copies(cache, coord, false).await?;
    Ok(UtilityResult::void(args.name))
}

/// A reference table's shard missing on some workers.
struct Missing {
    relid: u32,
    shard_id: i64,
    /// The group of its first placement, copied from.
    source: i32,
    targets: Vec<i32>,
}

/// Copies every reference table to the active primary workers that lack it, inside
/// `coord`'s open catalog transaction (catalog lock held), then commits that
/// transaction with the copies and reloads the catalog in every pgshard process.
/// `changed`: the transaction already changed the catalog (a new node), so it
/// commits (and bumps the catalog version) even when nothing is copied. Returns the
/// number of placements made.
pub(crate) async fn commit_with_copies(
    cache: &CatalogCache,
    coord: Client,
    changed: bool,
) -> Result<usize, PgError> {
    let nodes = read_nodes(&coord).await?;
    let rows = coord
        .query(
            "SELECT p.logicalrelid::oid, s.shardid, \
                    coalesce(array_agg(pl.groupid ORDER BY pl.groupid) \
                             FILTER (WHERE pl.groupid IS NOT NULL), '{}')::int4[] \
             FROM pg_catalog.pg_dist_partition p \
             JOIN pg_catalog.pg_dist_shard s ON s.logicalrelid = p.logicalrelid \
             LEFT JOIN pg_catalog.pg_dist_placement pl ON pl.shardid = s.shardid \
             WHERE p.partmethod = 'n' GROUP BY 1, 2 ORDER BY 2",
            &[],
        )
        .await
        .map_err(db_err("cannot read the reference tables' placements"))?;
    let mut missing = Vec::new();
    for r in &rows {
        let groups: Vec<i32> = r.get(2);
        let shard_id: i64 = r.get(1);
        let targets: Vec<i32> = nodes
            .iter()
            .map(|n| n.group)
            .filter(|g| !groups.contains(g))
            .collect();
        if targets.is_empty() {
            continue;
        }
        let Some(&source) = groups.first() else {
            return Err(PgError::new(
                sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!("cannot replicate reference table shard {shard_id}: it has no placement"),
            ));
        };
        missing.push(Missing {
            relid: r.get(0),
            shard_id,
            source,
            targets,
        });
    }
    if missing.is_empty() {
        if changed {
            bump_version(&coord).await?;
            coord
                .batch_execute("COMMIT")
                .await
                .map_err(db_err("cannot commit the catalog change"))?;
            cache.reload().await;
        }
        return Ok(0);
    }
    let by_group: HashMap<i32, &NodeInfo> = nodes.iter().map(|n| (n.group, n)).collect();
    let mut targets: Vec<i32> = missing
        .iter()
        .flat_map(|m| m.targets.iter().copied())
        .collect();
    targets.sort_unstable();
    targets.dedup();
    let mut participants = super::shards::open_participants(
        cache.config(),
        targets.iter().map(|g| {
            let n = by_group[g];
            (n.group, n.host.clone(), n.port)
        }),
    )
    .await?;
    // Source connections by group, each holding its shards' locks until the end.
    let mut sources: HashMap<i32, Client> = HashMap::new();
    let result = copy_all(
        cache,
        &coord,
        &missing,
        &by_group,
        &participants,
        &mut sources,
    )
    .await;
    if let Err(e) = result {
        twopc::abort(&participants).await;
        return Err(e);
    }
    let (shards, groups): (Vec<i64>, Vec<i32>) = missing
        .iter()
        .flat_map(|m| m.targets.iter().map(|g| (m.shard_id, *g)))
        .unzip();
    let made = shards.len();
    twopc::commit_distributed(&coord, &mut participants, "repref", || async {
        coord
            .execute(
                "INSERT INTO pg_catalog.pg_dist_placement (placementid, shardid, shardstate, shardlength, groupid) \
                 SELECT nextval('pg_catalog.pg_dist_placement_placementid_seq'), s, 1, 0, g \
                 FROM unnest($1::int8[], $2::int4[]) AS u(s, g)",
                &[&shards, &groups],
            )
            .await
            .map_err(db_err("cannot insert into pg_dist_placement"))?;
        bump_version(&coord).await
    })
    .await?;
    // Every process has the new placements before writes go on.
    cache.reload().await;
    for (_, source) in sources {
        let _ = source.batch_execute("COMMIT").await;
    }
    Ok(made)
}

/// Each missing shard: its first placement locked, its rows streamed to the targets.
async fn copy_all(
    cache: &CatalogCache,
    coord: &Client,
    missing: &[Missing],
    by_group: &HashMap<i32, &NodeInfo>,
    participants: &[Participant],
    sources: &mut HashMap<i32, Client>,
) -> Result<(), PgError> {
    for m in missing {
        let source_node = by_group.get(&m.source).ok_or_else(|| {
            PgError::new(
                sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!(
                    "cannot replicate reference table shard {}: its first placement is in group {}, \
                     which has no active node",
                    m.shard_id, m.source
                ),
            )
        })?;
        let at = format!("{}:{}", source_node.host, source_node.port);
        if !sources.contains_key(&m.source) {
            let client =
                control::connect(cache.config(), &source_node.host, source_node.port).await?;
            client
                .batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED")
                .await
                .map_err(db_err(&format!("cannot begin on node {at}")))?;
            sources.insert(m.source, client);
        }
        let source = &sources[&m.source];
        let def = table_def(coord, m.relid).await?;
        let shard = quote_qualified(&def.schema, &shard_table_name(&def.name, m.shard_id));
        source
            .batch_execute(&format!("LOCK TABLE {shard} IN EXCLUSIVE MODE"))
            .await
            .map_err(db_err(&format!(
                "cannot lock shard {} on node {at}",
                m.shard_id
            )))?;
        let deps = super::dependencies::read(coord, m.relid).await?;
        let plan = ShardPlan {
            shard_id: m.shard_id,
            min: i32::MIN,
            max: i32::MAX,
            groups: m.targets.clone(),
        };
        prepare_workers(
            cache.config(),
            coord,
            &def,
            &deps,
            std::slice::from_ref(&plan),
            by_group,
        )
        .await?;
        let to: Vec<&Participant> = participants
            .iter()
            .filter(|p| m.targets.contains(&p.group_id))
            .collect();
        // A node removed and added again still has its old copy (Citus replaces it).
        for p in &to {
            p.client
                .batch_execute(&format!("DROP TABLE IF EXISTS {shard}"))
                .await
                .map_err(db_err(&format!(
                    "cannot drop the old copy of shard {} on node {}",
                    m.shard_id,
                    p.node()
                )))?;
        }
        load_placements(source, &shard, &to, &def, m.shard_id).await?;
    }
    Ok(())
}
