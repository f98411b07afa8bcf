//! The failover of one worker group, by exactly one pgshard process however many run:
//!
//! 1. a catalog transaction on the coordinator node takes
//!    `pg_try_advisory_xact_lock(FAILOVER_LOCK_NS, group)` (another process holding it
//!    is failing the group over: this one lets it) and locks the group's rows;
//! 2. the primary must still be the one found down, and still not answer;
//! 3. the most advanced active secondary is chosen (one already promoted by an earlier
//!    attempt first, then the highest WAL position received or replayed, then the
//!    first registered: `s1`, the synchronous one) and promoted
//!    (`pg_promote(wait => true)`), and the old primary fenced (`fence.rs`);
//! 4. in the same catalog transaction, the promoted node becomes the group's primary
//!    (`noderole = 'primary'`, same nodeid and groupid; placements are by group) and
//!    the old one an inactive secondary; the catalog version is raised and NOTIFYed,
//!    so every process reloads;
//! 5. the remaining secondaries follow the new primary (`ALTER SYSTEM SET
//!    primary_conninfo / primary_slot_name` + reload, a slot of their name on the new
//!    primary), which then names them in `synchronous_standby_names` once they stream.
//!
//! Every step is idempotent: a process that dies half-way leaves a state the next
//! attempt (of any process) finishes.

use super::monitor::{self, Group, Member};
use super::{conninfo, fence};
use crate::backend::{control, NodeAddr};
use crate::catalog::cache::{self, CatalogCache};
use crate::cluster::standby;
use crate::config::Config;
use crate::error::PgError;
use crate::sql::quote::quote_literal;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

/// Advisory-lock namespace of failovers ('pgfa'); the key is the group id.
pub const FAILOVER_LOCK_NS: i32 = 0x7067_6661;
/// Longest wait for `pg_promote` and for a reconfigured standby to stream.
const PROMOTE_TIMEOUT_SECS: i32 = 60;
const FOLLOW_TIMEOUT: Duration = Duration::from_secs(20);

fn err(context: &str, e: tokio_postgres::Error) -> PgError {
    PgError::from_client_error(context, &e)
}

/// Fails group `group` over from `old`, or finds there is nothing to do; says which.
pub async fn fail_over(
    cache: &Arc<CatalogCache>,
    group: i32,
    old: &NodeAddr,
) -> Result<String, PgError> {
    let cfg = cache.config().clone();
    let started = Instant::now();
    let mut coordinator = control::connect_coordinator(&cfg).await?;
    let tx = coordinator
        .transaction()
        .await
        .map_err(|e| err("cannot begin the failover's catalog transaction", e))?;
    let locked: bool = tx
        .query_one(
            "SELECT pg_catalog.pg_try_advisory_xact_lock($1, $2)",
            &[&FAILOVER_LOCK_NS, &group],
        )
        .await
        .map_err(|e| err("cannot take the failover lock", e))?
        .get(0);
    if !locked {
        return Ok("another pgshard process is failing it over".into());
    }
    tx.execute(
        "SELECT 1 FROM pg_catalog.pg_dist_node WHERE groupid = $1 FOR UPDATE",
        &[&group],
    )
    .await
    .map_err(|e| err("cannot lock the group's pg_dist_node rows", e))?;
    let groups = monitor::read_groups(&tx).await?;
    let Some(current) = groups.into_iter().find(|g| g.id == group) else {
        return Ok("the group is gone from pg_dist_node".into());
    };
    let Some(old_member) = current.primary().filter(|p| p.addr == *old).cloned() else {
        return Ok(format!(
            "{old} is no longer its primary (failed over already)"
        ));
    };
    let recheck = Duration::from_millis(cfg.health_check_interval_ms.max(10) * 2);
    if monitor::check(&cfg, None, old, recheck).await.is_some() {
        return Ok(format!("{old} answers again: no failover"));
    }
    let (chosen, client, in_recovery) = choose(&cfg, &current).await?;
    if in_recovery {
        tracing::warn!(
            "failover: promoting {} (pg_promote) to replace primary {old} of group {group}",
            chosen.addr
        );
        let promoted: bool = client
            .query_one(
                "SELECT pg_catalog.pg_promote(true, $1)",
                &[&PROMOTE_TIMEOUT_SECS],
            )
            .await
            .map_err(|e| err(&format!("pg_promote on {} failed", chosen.addr), e))?
            .get(0);
        if !promoted {
            return Err(PgError::internal(format!(
                "pg_promote on {} did not finish within {PROMOTE_TIMEOUT_SECS} s",
                chosen.addr
            )));
        }
    } else {
        tracing::warn!(
            "failover: {} was promoted already (an earlier attempt): making it primary of group {group}",
            chosen.addr
        );
    }
    fence::fence(old);
    tx.execute(
        "UPDATE pg_catalog.pg_dist_node SET noderole = 'secondary', isactive = false \
         WHERE nodeid = $1",
        &[&old_member.node_id],
    )
    .await
    .map_err(|e| err("cannot retire the old primary in pg_dist_node", e))?;
    tx.execute(
        "UPDATE pg_catalog.pg_dist_node SET noderole = 'primary', isactive = true \
         WHERE nodeid = $1",
        &[&chosen.node_id],
    )
    .await
    .map_err(|e| err("cannot make the promoted node primary in pg_dist_node", e))?;
    cache::bump_version(&tx).await?;
    tx.commit()
        .await
        .map_err(|e| err("cannot commit the failover's catalog change", e))?;
    tracing::warn!(
        "failover: group {group} primary is now {} (was {old}), {} ms after the failover began",
        chosen.addr,
        started.elapsed().as_millis()
    );
    cache.reload().await;
    super::monitor_changed();
    crate::transaction::recovery::recover_soon(cache.clone());
    let others: Vec<Member> = current
        .secondaries()
        .filter(|m| m.node_id != chosen.node_id)
        .cloned()
        .collect();
    follow(&cfg, &client, &chosen.addr, &others).await;
    Ok(format!("{} promoted in place of {old}", chosen.addr))
}

/// The secondary to promote, with a connection to it and whether it is still in
/// recovery (not promoted yet).
async fn choose(cfg: &Config, group: &Group) -> Result<(Member, Client, bool), PgError> {
    const POSITION: &str = "SELECT pg_catalog.pg_is_in_recovery(), \
         pg_catalog.pg_wal_lsn_diff(CASE WHEN pg_catalog.pg_is_in_recovery() THEN \
           greatest(coalesce(pg_catalog.pg_last_wal_receive_lsn(), '0/0'), \
                    coalesce(pg_catalog.pg_last_wal_replay_lsn(), '0/0')) \
           ELSE pg_catalog.pg_current_wal_lsn() END, '0/0')::int8";
    let mut best: Option<(Member, Client, bool, i64)> = None;
    for m in group.secondaries() {
        let client = match control::connect(cfg, &m.addr.host, m.addr.port).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("failover: standby {} unreachable: {e}", m.addr);
                continue;
            }
        };
        let row = match client.query_one(POSITION, &[]).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(
                    "failover: standby {} did not say its WAL position: {e}",
                    m.addr
                );
                continue;
            }
        };
        let (in_recovery, lsn): (bool, i64) = (row.get(0), row.get(1));
        tracing::info!(
            "failover: standby {} at WAL byte {lsn}{}",
            m.addr,
            if in_recovery { "" } else { " (promoted)" }
        );
        // Promoted first, then the furthest; the first registered wins ties.
        let better = match &best {
            None => true,
            Some((_, _, best_rec, best_lsn)) => {
                (!in_recovery && *best_rec) || (in_recovery == *best_rec && lsn > *best_lsn)
            }
        };
        if better {
            best = Some((m.clone(), client, in_recovery, lsn));
        }
    }
    best.map(|(m, c, r, _)| (m, c, r)).ok_or_else(|| {
        PgError::new(
            crate::error::sqlstate::CONNECTION_FAILURE,
            format!(
                "no standby of group {} answers: nothing to promote",
                group.id
            ),
        )
    })
}

/// Points the remaining secondaries at the new primary and names those that stream in
/// its `synchronous_standby_names`. Failures are logged: the group serves anyway.
pub(super) async fn follow(cfg: &Config, primary: &Client, new: &NodeAddr, others: &[Member]) {
    let mut names = Vec::new();
    for m in others {
        match repoint(cfg, primary, new, m).await {
            Ok(name) => names.push(name),
            Err(e) => tracing::warn!("failover: standby {} cannot follow {new}: {e}", m.addr),
        }
    }
    let deadline = Instant::now() + FOLLOW_TIMEOUT;
    let mut streaming = Vec::new();
    while Instant::now() < deadline {
        streaming = primary
            .query(
                "SELECT application_name FROM pg_catalog.pg_stat_replication \
                 WHERE state = 'streaming' ORDER BY application_name",
                &[],
            )
            .await
            .map(|rows| rows.iter().map(|r| r.get::<_, String>(0)).collect())
            .unwrap_or_default();
        if names.iter().all(|n| streaming.contains(n)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let sync: Vec<String> = names
        .into_iter()
        .filter(|n| streaming.contains(n))
        .collect();
    let sql = format!(
        "ALTER SYSTEM SET synchronous_standby_names = {}",
        quote_literal(&standby::synchronous_standby_names(&sync))
    );
    match primary.batch_execute(&sql).await {
        Ok(()) => {
            let _ = primary
                .batch_execute("SELECT pg_catalog.pg_reload_conf()")
                .await;
            tracing::info!(
                "failover: new primary {new} has synchronous standbys ({})",
                sync.join(", ")
            );
        }
        Err(e) => tracing::warn!("failover: cannot set synchronous_standby_names on {new}: {e}"),
    }
}

/// Makes standby `m` replicate from `new` through a slot of its own there; returns its
/// `application_name`.
async fn repoint(
    cfg: &Config,
    primary: &Client,
    new: &NodeAddr,
    m: &Member,
) -> Result<String, PgError> {
    let client = control::connect(cfg, &m.addr.host, m.addr.port).await?;
    let current: String = client
        .query_one("SELECT pg_catalog.current_setting('primary_conninfo')", &[])
        .await
        .map_err(|e| err("cannot read primary_conninfo", e))?
        .get(0);
    let name = conninfo::get(&current, "application_name")
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("node{}", m.node_id));
    let slot = standby::slot_name(&name);
    primary
        .execute(
            "SELECT pg_catalog.pg_create_physical_replication_slot($1, true) \
             WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots WHERE slot_name = $1)",
            &[&slot],
        )
        .await
        .map_err(|e| err(&format!("cannot create slot {slot} on {new}"), e))?;
    let port = new.port.to_string();
    let target = conninfo::with(&conninfo::with(&current, "host", &new.host), "port", &port);
    let target = conninfo::with(&target, "application_name", &name);
    client
        .batch_execute(&format!(
            "ALTER SYSTEM SET primary_conninfo = {}; ALTER SYSTEM SET primary_slot_name = {}",
            quote_literal(&target),
            quote_literal(&slot)
        ))
        .await
        .map_err(|e| err("cannot set primary_conninfo", e))?;
    client
        .batch_execute("SELECT pg_catalog.pg_reload_conf()")
        .await
        .map_err(|e| err("cannot reload", e))?;
    tracing::info!("failover: standby {} ({name}) now follows {new}", m.addr);
    Ok(name)
}
