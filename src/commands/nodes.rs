//! Worker membership: `citus_add_node` / `master_add_node`, `citus_remove_node` /
//! `master_remove_node`, `citus_get_active_worker_nodes` /
//! `master_get_active_worker_nodes`.
//!
//! Adding a node checks that pgshard can log into it with its configured credentials
//! and that it accepts two-phase commit (`max_prepared_transactions > 0`), then copies
//! every role and membership of the coordinator node onto it (`roles`). Like Citus,
//! adding an existing node returns its id, and a new node gets no shards of tables
//! distributed before (no automatic rebalance), but a placement of every reference
//! table, copied before the node is committed (`replicate`).
//!
//! `citus_set_coordinator_host(host, port, node_role, node_cluster)` registers the
//! coordinator node (group 0, no shards) in `pg_dist_node`, or moves its row.
//!
//! A standby is added as in Citus with `noderole => 'secondary'` and the group id of its
//! primary (0 for the coordinator node's): it gets no roles or objects (it replays its
//! primary's) and no shards, and nothing that routes reads it: the catalog snapshot,
//! `create_distributed_table`, the placement views and `citus_get_active_worker_nodes`
//! take primaries only.

use super::{begin_catalog_change, db_err, type_oid, Args, UtilityResult};
use crate::backend::control;
use crate::catalog::cache::{bump_version, CatalogCache};
use crate::error::{sqlstate, PgError};

fn node_port(args: &Args, i: usize) -> Result<u16, PgError> {
    let port = args.int(i, Some(5432))?.unwrap_or(5432);
    u16::try_from(port).ok().filter(|p| *p > 0).ok_or_else(|| {
        PgError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("invalid node port {port}"),
        )
    })
}

/// Checks that a prospective worker is reachable and supports 2PC.
pub async fn check_node(cache: &CatalogCache, host: &str, port: u16) -> Result<(), PgError> {
    let cfg = cache.config();
    let client = control::connect(cfg, host, port).await.map_err(|e| {
        let mut err = PgError::new(
            &e.code,
            format!(
                "cannot add node {host}:{port}: cannot connect to database \"{}\" as user \"{}\": {}",
                cfg.database, cfg.user, e.message
            ),
        );
        err.detail = e.detail.clone();
        err.hint = Some("pgshard logs into every node with the credentials of its configuration file".into());
        err
    })?;
    let row = client
        .query_one(
            "SELECT current_setting('max_prepared_transactions')::int",
            &[],
        )
        .await
        .map_err(db_err(&format!("cannot check node {host}:{port}")))?;
    let max_prepared: i32 = row.get(0);
    if max_prepared <= 0 {
        return Err(PgError::new(
            sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("cannot add node {host}:{port}: max_prepared_transactions is 0 there"),
        )
        .with_detail("pgshard commits changes that span workers with two-phase commit.")
        .with_hint("Set max_prepared_transactions (e.g. to max_connections) in that server's postgresql.conf and restart it."));
    }
    Ok(())
}

/// `citus_add_node(nodename, nodeport, groupid => -1, noderole => 'primary', nodecluster => 'default')`.
pub(crate) async fn add_node(
    cache: &CatalogCache,
    args: &Args<'_>,
) -> Result<UtilityResult, PgError> {
    let host = args.required(0)?.to_string();
    let port = node_port(args, 1)?;
    let group = args.int(2, Some(-1))?.unwrap_or(-1);
    let role = args.get(3).unwrap_or("primary");
    let cluster = args.get(4).unwrap_or("default");
    let secondary = match role {
        "primary" => false,
        "secondary" => true,
        "unavailable" => {
            return Err(PgError::not_supported(
                "pgshard supports only primary and secondary nodes (noderole 'unavailable')",
            ))
        }
        _ => {
            return Err(PgError::new(
                sqlstate::INVALID_TEXT_REPRESENTATION,
                format!("invalid input value for enum noderole: \"{role}\""),
            ))
        }
    };
    if cluster != "default" {
        return Err(PgError::not_supported(
            "pgshard supports only the default node cluster",
        ));
    }
    let group = i32::try_from(group)
        .ok()
        .filter(|g| *g >= -1)
        .ok_or_else(|| {
            PgError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("invalid group id {group}"),
            )
        })?;
    let port_i32 = i32::from(port);
    if secondary && group == -1 {
        return Err(PgError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("cannot add secondary node {host}:{port} without the group id of its primary"),
        )
        .with_hint("Pass groupid => the groupid of its primary in pg_dist_node (0 for the coordinator node)."));
    }

    let coord = begin_catalog_change(cache).await?;
    let existing = coord
        .query_opt(
            "SELECT nodeid FROM pg_catalog.pg_dist_node WHERE nodename = $1 AND nodeport = $2",
            &[&host, &port_i32],
        )
        .await
        .map_err(db_err("cannot read pg_dist_node"))?;
    if let Some(row) = existing {
        let id: i32 = row.get(0);
        return Ok(UtilityResult::scalar(
            args.name,
            type_oid::INT4,
            Some(id.to_string()),
        ));
    }
    if secondary && group != 0 {
        let primaries: i64 = coord
            .query_one(
                "SELECT count(*) FROM pg_catalog.pg_dist_node WHERE groupid = $1 AND noderole = 'primary'",
                &[&group],
            )
            .await
            .map_err(db_err("cannot read pg_dist_node"))?
            .get(0);
        if primaries == 0 {
            return Err(PgError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!(
                    "cannot add secondary node {host}:{port}: group {group} has no primary node"
                ),
            ));
        }
    }
    check_node(cache, &host, port).await?;
    // Before any shard reaches a primary: shards are owned by and granted to these
    // roles. A secondary replays its primary's (and is read-only).
    if !secondary {
        super::roles::copy_all_roles(cache.config(), &coord, &host, port).await?;
    }
    // And the objects distributed tables depend on (types, collations, functions...).
    if group != 0 && !secondary {
        let deps = super::dependencies::recorded(&coord).await?;
        if !deps.is_empty() {
            let at = format!("{host}:{port}");
            let client = crate::backend::control::connect(cache.config(), &host, port).await?;
            client
                .batch_execute("BEGIN")
                .await
                .map_err(db_err(&format!("cannot begin on node {at}")))?;
            super::dependencies::create_on_worker(&client, &at, &deps).await?;
            client
                .batch_execute("COMMIT")
                .await
                .map_err(db_err(&format!(
                    "cannot create distributed objects on node {at}"
                )))?;
        }
    }
    let row = coord
        .query_one(
            "INSERT INTO pg_catalog.pg_dist_node (groupid, nodename, nodeport, hasmetadata, metadatasynced, noderole) \
             VALUES (CASE WHEN $3 = -1 THEN nextval('pg_catalog.pg_dist_groupid_seq')::int ELSE $3 END, \
                     $1, $2, $3 = 0, $3 = 0, $4) \
             RETURNING nodeid",
            &[&host, &port_i32, &group, &role],
        )
        .await
        .map_err(db_err("cannot add the node to pg_dist_node"))?;
    let id: i32 = row.get(0);
    if secondary || group == 0 {
        bump_version(&coord).await?;
        coord
            .batch_execute("COMMIT")
            .await
            .map_err(db_err("cannot commit the new node"))?;
        cache.reload().await;
    } else {
        // A new worker gets every reference table, committed with the node.
        super::replicate::commit_with_copies(cache, coord, true).await?;
    }
    Ok(UtilityResult::scalar(
        args.name,
        type_oid::INT4,
        Some(id.to_string()),
    ))
}

/// `citus_remove_node(nodename, nodeport)`: refused while a primary holds placements
/// (a secondary holds none of its own) other than reference tables' copies held
/// elsewhere too; those placements are removed with the node.
pub(crate) async fn remove_node(
    cache: &CatalogCache,
    args: &Args<'_>,
) -> Result<UtilityResult, PgError> {
    let host = args.required(0)?.to_string();
    let port = i32::from(node_port(args, 1)?);
    let coord = begin_catalog_change(cache).await?;
    let row = coord
        .query_opt(
            "SELECT n.nodeid, n.groupid, \
                    (SELECT count(*) FROM pg_catalog.pg_dist_placement p \
                     JOIN pg_catalog.pg_dist_shard s ON s.shardid = p.shardid \
                     JOIN pg_catalog.pg_dist_partition t ON t.logicalrelid = s.logicalrelid \
                     WHERE p.groupid = n.groupid AND n.noderole = 'primary' AND (t.partmethod <> 'n' \
                       OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_placement o \
                                      WHERE o.shardid = p.shardid AND o.groupid <> p.groupid))) \
             FROM pg_catalog.pg_dist_node n WHERE n.nodename = $1 AND n.nodeport = $2",
            &[&host, &port],
        )
        .await
        .map_err(db_err("cannot read pg_dist_node"))?
        .ok_or_else(|| {
            PgError::new(
                sqlstate::UNDEFINED_OBJECT,
                format!("node at \"{host}:{port}\" does not exist"),
            )
        })?;
    let node_id: i32 = row.get(0);
    let placements: i64 = row.get(2);
    if placements > 0 {
        return Err(PgError::new(
            sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "cannot remove node {host}:{port}: it still holds {placements} shard placements"
            ),
        )
        .with_hint("Move its shards to other nodes or drop the distributed tables first."));
    }
    // Its reference table placements go with it (as in Citus: the tables stay on the
    // node, replaced if it is added again).
    let group: i32 = row.get(1);
    coord
        .execute(
            "DELETE FROM pg_catalog.pg_dist_placement p USING pg_catalog.pg_dist_shard s, \
               pg_catalog.pg_dist_partition t \
             WHERE p.groupid = $1 AND s.shardid = p.shardid AND t.logicalrelid = s.logicalrelid \
               AND t.partmethod = 'n' AND EXISTS (SELECT 1 FROM pg_catalog.pg_dist_node n \
                 WHERE n.nodeid = $2 AND n.noderole = 'primary')",
            &[&group, &node_id],
        )
        .await
        .map_err(db_err(
            "cannot remove the node's reference table placements",
        ))?;
    coord
        .execute(
            "DELETE FROM pg_catalog.pg_dist_node WHERE nodeid = $1",
            &[&node_id],
        )
        .await
        .map_err(db_err("cannot remove the node from pg_dist_node"))?;
    bump_version(&coord).await?;
    coord
        .batch_execute("COMMIT")
        .await
        .map_err(db_err("cannot commit the node removal"))?;
    cache.reload().await;
    Ok(UtilityResult::void(args.name))
}

/// `start_metadata_sync_to_node(nodename, nodeport)` / `stop_metadata_sync_to_node(...)`
/// (Citus MX, seed 003): mark a primary's `hasmetadata` / `metadatasynced` as Citus does.
/// No worker needs the catalog in pgshard: every pgshard process reads it from the
/// coordinator node, and more entry points are more pgshard processes (`cluster up
/// --coordinators N`), which a NOTICE says.
pub(crate) async fn metadata_sync(
    cache: &CatalogCache,
    args: &Args<'_>,
    start: bool,
    notices: &tokio::sync::mpsc::UnboundedSender<String>,
) -> Result<UtilityResult, PgError> {
    let host = args.required(0)?.to_string();
    let port = i32::from(node_port(args, 1)?);
    let coord = begin_catalog_change(cache).await?;
    let updated = coord
        .execute(
            "UPDATE pg_catalog.pg_dist_node SET hasmetadata = $3, metadatasynced = $3 \
             WHERE nodename = $1 AND nodeport = $2 AND noderole = 'primary'",
            &[&host, &port, &start],
        )
        .await
        .map_err(db_err("cannot update pg_dist_node"))?;
    if updated == 0 {
        return Err(PgError::new(
            sqlstate::UNDEFINED_OBJECT,
            format!("node at \"{host}:{port}\" does not exist"),
        ));
    }
    bump_version(&coord).await?;
    coord
        .batch_execute("COMMIT")
        .await
        .map_err(db_err("cannot commit the change of pg_dist_node"))?;
    cache.reload().await;
    if start {
        let _ = notices.send(
            "pgshard keeps the metadata on the coordinator node for every pgshard process; \
             to serve clients from more entry points, run more pgshard processes \
             (pgshard cluster up --coordinators N)"
                .to_string(),
        );
    }
    Ok(UtilityResult::void(args.name))
}

/// `citus_get_active_worker_nodes()`: rows `(node_name text, node_port int8)`.
pub(crate) async fn active_worker_nodes(cache: &CatalogCache) -> Result<UtilityResult, PgError> {
    let client = control::connect_coordinator(cache.config()).await?;
    let rows = client
        .query(
            "SELECT nodename, nodeport::int8 FROM pg_catalog.pg_dist_node \
             WHERE isactive AND noderole = 'primary' AND groupid <> 0 ORDER BY nodename COLLATE \"C\", nodeport",
            &[],
        )
        .await
        .map_err(db_err("cannot read pg_dist_node"))?;
    Ok(UtilityResult {
        columns: vec![
            ("node_name".into(), type_oid::TEXT),
            ("node_port".into(), type_oid::INT8),
        ],
        rows: rows
            .iter()
            .map(|r| {
                vec![
                    Some(r.get::<_, String>(0)),
                    Some(r.get::<_, i64>(1).to_string()),
                ]
            })
            .collect(),
    })
}

/// `citus_set_coordinator_host(host, port => current_setting('port'), node_role =>
/// 'primary', node_cluster => 'default')`: the coordinator node's `pg_dist_node` row
/// (group 0, `shouldhaveshards` false), added or given the new host and port.
pub(crate) async fn set_coordinator_host(
    cache: &CatalogCache,
    args: &Args<'_>,
) -> Result<UtilityResult, PgError> {
    let host = args.required(0)?.to_string();
    match args.get(2).unwrap_or("primary") {
        "primary" => {}
        "secondary" | "unavailable" => {
            return Err(PgError::not_supported(
                "pgshard registers the coordinator node only as a primary (add its standbys with citus_add_node(..., groupid => 0, noderole => 'secondary'))",
            ))
        }
        role => {
            return Err(PgError::new(
                sqlstate::INVALID_TEXT_REPRESENTATION,
                format!("invalid input value for enum noderole: \"{role}\""),
            ))
        }
    }
    if args.get(3).is_some_and(|c| c != "default") {
        return Err(PgError::not_supported(
            "pgshard supports only the default node cluster",
        ));
    }
    let coord = begin_catalog_change(cache).await?;
    let port: i32 = match args.get(1) {
        Some(_) => i32::from(node_port(args, 1)?),
        None => coord
            .query_one("SELECT pg_catalog.current_setting('port')::int", &[])
            .await
            .map_err(db_err("cannot read the coordinator node's port"))?
            .get(0),
    };
    let existing = coord
        .query_opt(
            "SELECT nodeid FROM pg_catalog.pg_dist_node WHERE groupid = 0 AND noderole = 'primary'",
            &[],
        )
        .await
        .map_err(db_err("cannot read pg_dist_node"))?;
    match existing {
        Some(row) => {
            let id: i32 = row.get(0);
            coord
                .execute(
                    "UPDATE pg_catalog.pg_dist_node SET nodename = $1, nodeport = $2 WHERE nodeid = $3",
                    &[&host, &port, &id],
                )
                .await
                .map_err(db_err("cannot update the coordinator node in pg_dist_node"))?;
        }
        None => {
            coord
                .execute(
                    "INSERT INTO pg_catalog.pg_dist_node (groupid, nodename, nodeport, hasmetadata, \
                       metadatasynced, noderole, shouldhaveshards) \
                     VALUES (0, $1, $2, true, true, 'primary', false)",
                    &[&host, &port],
                )
                .await
                .map_err(db_err("cannot add the coordinator node to pg_dist_node"))?;
        }
    }
    bump_version(&coord).await?;
    coord
        .batch_execute("COMMIT")
        .await
        .map_err(db_err("cannot commit the coordinator node's row"))?;
    cache.reload().await;
    Ok(UtilityResult::void(args.name))
}
