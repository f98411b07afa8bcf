//! Failover of the coordinator node (issue 21). Its catalog is what failed, so no
//! catalog lock can pick the process that acts; the rule needs none:
//!
//! - The coordinator node's standbys are listed in every process's config
//!   (`coordinator_standbys`, written by `cluster up`), in order of preference.
//! - A process that finds the coordinator node unreachable for `failover_after_ms`
//!   (the health checker, `monitor.rs`) asks every listed standby for
//!   `pg_is_in_recovery()`, its timeline and its WAL position (`choose`): one already
//!   out of recovery is the coordinator node now (the highest timeline wins, then the
//!   first listed); else the most advanced one is promoted (ties to the first listed:
//!   the synchronous one, which holds every acknowledged commit). Every process
//!   computes the same choice from the same standbys, so two that decide at once
//!   promote the same server: a session-level advisory lock taken on that standby lets
//!   one call `pg_promote`, the other waits until it is out of recovery.
//! - This process then follows it: `current()` names it, and every connection to the
//!   coordinator node is opened there (`physical`, consulted by `backend::conn`'s
//!   stream, `backend::control` and the health probe: the one place that knows the
//!   coordinator node's address now). Everything else keeps the configured address as
//!   the coordinator node's name (`Shared::coordinator`), so pools, a session's held
//!   connections and the catalog cache need no change of their own.
//! - The old primary is fenced (`fence.rs`); this process's liveness lock is taken on
//!   the new server before statements held meanwhile go on (2PC decisions written
//!   before that are refused, see `transaction::liveness_holds`); the coordinator
//!   node's rows of `pg_dist_node` (group 0) are repointed on the new server; the
//!   remaining standbys follow it (`promote::follow`); prepared-transaction recovery
//!   runs.
//!
//! A process started while the configured coordinator node is down follows a standby
//! already promoted (`follow_at_start`).

use super::{fence, monitor, promote};
use crate::backend::{control, NodeAddr};
use crate::catalog::cache::{self, CatalogCache};
use crate::config::Config;
use crate::error::{sqlstate, PgError};
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio_postgres::Client;

/// Where the coordinator node is: its configured address (its name everywhere in
/// pgshard), the server that serves it now, and its standbys.
struct Place {
    configured: NodeAddr,
    current: NodeAddr,
    standbys: Vec<NodeAddr>,
}

static PLACE: RwLock<Option<Place>> = RwLock::new(None);
/// Set once the coordinator node is served elsewhere than configured: `physical`'s
/// fast check.
static MOVED: AtomicBool = AtomicBool::new(false);

/// Longest wait for `pg_promote`, and for another process's promotion.
const PROMOTE_TIMEOUT_SECS: i32 = 60;
/// Longest wait for this process's liveness lock on the new server before held
/// statements go on anyway.
const LIVENESS_WAIT: Duration = Duration::from_secs(5);

fn addr_of(s: &crate::config::ServerAddr) -> NodeAddr {
    NodeAddr {
        host: s.host.clone(),
        port: s.port,
    }
}

/// Records the configured coordinator node and its standbys (at start-up).
pub fn init(cfg: &Config) {
    let configured = addr_of(&cfg.coordinator);
    *PLACE.write().unwrap_or_else(|e| e.into_inner()) = Some(Place {
        current: configured.clone(),
        configured,
        standbys: cfg.coordinator_standbys.iter().map(addr_of).collect(),
    });
    MOVED.store(false, Ordering::Release);
}

fn with_place<T>(f: impl FnOnce(&Place) -> T) -> Option<T> {
    PLACE
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(f)
}

/// The coordinator node's configured address (its name in pgshard).
pub fn configured() -> Option<NodeAddr> {
    with_place(|p| p.configured.clone())
}

/// The server that serves the coordinator node now.
pub fn current() -> Option<NodeAddr> {
    with_place(|p| p.current.clone())
}

/// Where a connection to `addr` goes: the coordinator node's current server when
/// `addr` is its configured address, else `addr` itself.
pub fn physical(addr: &NodeAddr) -> Cow<'_, NodeAddr> {
    if !MOVED.load(Ordering::Acquire) {
        return Cow::Borrowed(addr);
    }
    match with_place(|p| (p.configured == *addr).then(|| p.current.clone())).flatten() {
        Some(now) => Cow::Owned(now),
        None => Cow::Borrowed(addr),
    }
}

/// `physical` for a host and port (control connections).
pub fn physical_host_port(host: &str, port: u16) -> (String, u16) {
    let addr = NodeAddr {
        host: host.to_string(),
        port,
    };
    let now = physical(&addr).into_owned();
    (now.host, now.port)
}

/// The listed standbys other than the current server: what a failover may choose.
fn standbys_besides_current() -> Vec<NodeAddr> {
    with_place(|p| {
        p.standbys
            .iter()
            .filter(|s| **s != p.current && **s != p.configured)
            .cloned()
            .collect()
    })
    .unwrap_or_default()
}

/// Whether the coordinator node can fail over (a listed standby is left).
pub fn can_fail_over() -> bool {
    !standbys_besides_current().is_empty()
}

fn set_current(now: &NodeAddr) {
    let mut guard = PLACE.write().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = guard.as_mut() {
        p.current = now.clone();
        MOVED.store(p.current != p.configured, Ordering::Release);
    }
}

/// What a standby said about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Survey {
    pub addr: NodeAddr,
    pub in_recovery: bool,
    pub timeline: i32,
    /// WAL position: received or replayed in recovery, written once promoted.
    pub lsn: i64,
}

/// The standby to follow (index into `surveys`, in listed order) and whether it must
/// be promoted first (pure): one out of recovery on the highest timeline, else the
/// one furthest in WAL; the first listed wins ties.
pub fn choose(surveys: &[Survey]) -> Option<(usize, bool)> {
    let promoted = surveys
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.in_recovery)
        .fold(None::<(usize, i32)>, |best, (i, s)| match best {
            Some((_, t)) if t >= s.timeline => best,
            _ => Some((i, s.timeline)),
        });
    if let Some((i, _)) = promoted {
        return Some((i, false));
    }
    surveys
        .iter()
        .enumerate()
        .fold(None::<(usize, i64)>, |best, (i, s)| match best {
            Some((_, l)) if l >= s.lsn => best,
            _ => Some((i, s.lsn)),
        })
        .map(|(i, _)| (i, true))
}

const SURVEY_SQL: &str = "SELECT pg_catalog.pg_is_in_recovery(), \
     CASE WHEN pg_catalog.pg_is_in_recovery() \
       THEN (pg_catalog.pg_control_checkpoint()).timeline_id \
       ELSE ('x' || pg_catalog.substr(pg_catalog.pg_walfile_name( \
              pg_catalog.pg_current_wal_lsn()), 1, 8))::bit(32)::int4 END, \
     pg_catalog.pg_wal_lsn_diff(CASE WHEN pg_catalog.pg_is_in_recovery() THEN \
       greatest(coalesce(pg_catalog.pg_last_wal_receive_lsn(), '0/0'), \
                coalesce(pg_catalog.pg_last_wal_replay_lsn(), '0/0')) \
       ELSE pg_catalog.pg_current_wal_lsn() END, '0/0')::int8";

/// Asks each of `standbys` what it is, within `limit` each; those that answer.
async fn survey_all(cfg: &Config, standbys: &[NodeAddr], limit: Duration) -> Vec<(Survey, Client)> {
    let mut out = Vec::new();
    for addr in standbys {
        let ask = async {
            let client = control::connect(cfg, &addr.host, addr.port).await?;
            let row = client
                .query_one(SURVEY_SQL, &[])
                .await
                .map_err(|e| PgError::from_client_error("cannot ask the standby", &e))?;
            let survey = Survey {
                addr: addr.clone(),
                in_recovery: row.get(0),
                timeline: row.get(1),
                lsn: row.get(2),
            };
            Ok::<_, PgError>((survey, client))
        };
        match tokio::time::timeout(limit, ask).await {
            Ok(Ok((s, c))) => {
                tracing::info!(
                    "coordinator failover: standby {} {} on timeline {} at WAL byte {}",
                    s.addr,
                    if s.in_recovery {
                        "in recovery"
                    } else {
                        "promoted"
                    },
                    s.timeline,
                    s.lsn
                );
                out.push((s, c));
            }
            Ok(Err(e)) => tracing::warn!("coordinator failover: standby {addr}: {e}"),
            Err(_) => tracing::warn!("coordinator failover: standby {addr} did not answer"),
        }
    }
    out
}

/// Fails the coordinator node over from the server serving it now, or finds there is
/// nothing to do; says which.
pub async fn fail_over(cache: &Arc<CatalogCache>) -> Result<String, PgError> {
    let cfg = cache.config().clone();
    let started = Instant::now();
    let (Some(name), Some(old)) = (configured(), current()) else {
        return Ok("no coordinator node configured".into());
    };
    let limit = Duration::from_millis(cfg.health_check_interval_ms.max(10) * 2);
    if monitor::check(&cfg, None, &name, limit).await.is_some() {
        return Ok(format!("{old} answers again: no failover"));
    }
    let candidates = standbys_besides_current();
    let mut surveyed = survey_all(&cfg, &candidates, limit.max(Duration::from_secs(2))).await;
    let surveys: Vec<Survey> = surveyed.iter().map(|(s, _)| s.clone()).collect();
    let Some((index, promote)) = choose(&surveys) else {
        return Err(PgError::new(
            sqlstate::CONNECTION_FAILURE,
            format!(
                "the coordinator node {old} is unreachable and none of its standbys answers: \
                 nothing to promote"
            ),
        ));
    };
    let (chosen, client) = surveyed.swap_remove(index);
    let new = chosen.addr;
    let promoted_here = if promote {
        promote_once(&client, &new, &old).await?
    } else {
        tracing::warn!(
            "coordinator failover: {new} was promoted already (timeline {}): following it",
            chosen.timeline
        );
        false
    };
    if promoted_here {
        // Its configuration came from the old primary, synchronous standbys included:
        // no commit there may wait for one until the others follow it (below).
        let reset = "ALTER SYSTEM SET synchronous_standby_names = ''; \
                     SELECT pg_catalog.pg_reload_conf()";
        if let Err(e) = client.batch_execute(reset).await {
            tracing::warn!(
                "coordinator failover: cannot reset synchronous_standby_names on {new}: {e}"
            );
        }
    }
    fence::fence(&old);
    set_current(&new);
    // 2PC decisions go to the new server only once this process's liveness lock is
    // held there (other processes' recovery must see this one alive).
    if !crate::transaction::wait_liveness_on(&new, LIVENESS_WAIT).await {
        tracing::warn!(
            "coordinator failover: the liveness lock is not held on {new} yet; \
             two-phase commits wait for it"
        );
    }
    super::set_coordinator(can_fail_over().then(|| name.clone()));
    super::set_health(&name, true);
    tracing::warn!(
        "coordinator failover: the coordinator node is now {new} (was {old}), {} ms after \
         the failover began",
        started.elapsed().as_millis()
    );
    if let Err(e) = repoint_catalog(&cfg, &old, &new).await {
        tracing::warn!("coordinator failover: pg_dist_node on {new} not repointed: {e}");
    }
    cache.reload().await;
    super::monitor_changed();
    crate::transaction::recovery::recover_soon(cache.clone());
    if promoted_here {
        let others: Vec<monitor::Member> = standbys_besides_current()
            .into_iter()
            .map(|addr| monitor::Member {
                node_id: 0,
                addr,
                primary: false,
                active: true,
            })
            .collect();
        promote::follow(&cfg, &client, &new, &others).await;
    }
    Ok(format!(
        "the coordinator node is {new} in place of {old}{}",
        if promoted_here {
            " (promoted by this process)"
        } else {
            ""
        }
    ))
}

/// Whether the standby `new` (`client`'s server) is still in recovery.
async fn in_recovery(client: &Client, new: &NodeAddr) -> Result<bool, PgError> {
    Ok(client
        .query_one("SELECT pg_catalog.pg_is_in_recovery()", &[])
        .await
        .map_err(|e| {
            PgError::from_client_error(
                &format!("cannot read pg_is_in_recovery() on standby {new}"),
                &e,
            )
        })?
        .get(0))
}

/// Promotes `new` unless another process does (its advisory lock on `new`) or did;
/// true when this process called `pg_promote`.
async fn promote_once(client: &Client, new: &NodeAddr, old: &NodeAddr) -> Result<bool, PgError> {
    let err = |what: &str, e: tokio_postgres::Error| {
        PgError::from_client_error(&format!("{what} on standby {new}"), &e)
    };
    let locked = client
        .query_one(
            "SELECT pg_catalog.pg_try_advisory_lock($1, 0)",
            &[&promote::FAILOVER_LOCK_NS],
        )
        .await
        .map(|r| r.get::<_, bool>(0))
        .map_err(|e| err("cannot take the promotion lock", e))?;
    let deadline = Instant::now() + Duration::from_secs(PROMOTE_TIMEOUT_SECS as u64);
    if !locked {
        tracing::info!("coordinator failover: another pgshard process is promoting {new}");
        loop {
            if !in_recovery(client, new).await? {
                return Ok(false);
            }
            if Instant::now() > deadline {
                return Err(PgError::new(
                    sqlstate::CONNECTION_FAILURE,
                    format!("standby {new} was not promoted within {PROMOTE_TIMEOUT_SECS} s"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    if !in_recovery(client, new).await? {
        return Ok(false);
    }
    tracing::warn!(
        "coordinator failover: promoting {new} (pg_promote) to replace the coordinator node {old}"
    );
    let promoted: bool = client
        .query_one(
            "SELECT pg_catalog.pg_promote(true, $1)",
            &[&PROMOTE_TIMEOUT_SECS],
        )
        .await
        .map_err(|e| err("pg_promote failed", e))?
        .get(0);
    if !promoted {
        return Err(PgError::new(
            sqlstate::CONNECTION_FAILURE,
            format!("pg_promote on {new} did not finish within {PROMOTE_TIMEOUT_SECS} s"),
        ));
    }
    Ok(true)
}

/// The coordinator node's rows of `pg_dist_node` (group 0) on the new server, in one
/// transaction (idempotent: the second process finds nothing to change): a registered
/// primary row of the old server becomes an inactive secondary and the promoted
/// standby's row the primary (or the old row names the promoted server when it has
/// none); without a primary row, the promoted server's secondary row goes (it is no
/// standby any more). Workers' rows are left alone.
async fn repoint_catalog(cfg: &Config, old: &NodeAddr, new: &NodeAddr) -> Result<(), PgError> {
    let err = |what: &str, e: tokio_postgres::Error| PgError::from_client_error(what, &e);
    let mut client = control::connect_coordinator(cfg).await?;
    let tx = client
        .transaction()
        .await
        .map_err(|e| err("cannot begin", e))?;
    let rows = tx
        .query(
            "SELECT nodeid, nodename, nodeport, noderole = 'primary' AND isactive \
             FROM pg_catalog.pg_dist_node WHERE groupid = 0 ORDER BY nodeid FOR UPDATE",
            &[],
        )
        .await
        .map_err(|e| err("cannot read group 0 of pg_dist_node", e))?;
    let is = |r: &tokio_postgres::Row, a: &NodeAddr| {
        r.get::<_, String>(1) == a.host && r.get::<_, i32>(2) == i32::from(a.port)
    };
    let old_primary = rows.iter().find(|r| r.get::<_, bool>(3) && is(r, old));
    let new_row = rows.iter().find(|r| is(r, new));
    let has_primary = rows.iter().any(|r| r.get::<_, bool>(3));
    let mut changed = 0;
    let run = |sql: &'static str, id: i32| {
        let tx = &tx;
        async move {
            tx.execute(sql, &[&id])
                .await
                .map_err(|e| err("cannot change pg_dist_node", e))
        }
    };
    match (old_primary, new_row) {
        (Some(o), Some(n)) => {
            changed += run(
                "UPDATE pg_catalog.pg_dist_node SET noderole = 'secondary', isactive = false \
                 WHERE nodeid = $1",
                o.get(0),
            )
            .await?;
            changed += run(
                "UPDATE pg_catalog.pg_dist_node SET noderole = 'primary', isactive = true \
                 WHERE nodeid = $1",
                n.get(0),
            )
            .await?;
        }
        (Some(o), None) => {
            let id: i32 = o.get(0);
            changed += tx
                .execute(
                    "UPDATE pg_catalog.pg_dist_node SET nodename = $2, nodeport = $3 \
                     WHERE nodeid = $1",
                    &[&id, &new.host, &i32::from(new.port)],
                )
                .await
                .map_err(|e| err("cannot change pg_dist_node", e))?;
        }
        (None, Some(n)) if !has_primary => {
            changed += run(
                "DELETE FROM pg_catalog.pg_dist_node WHERE nodeid = $1",
                n.get(0),
            )
            .await?;
        }
        _ => {}
    }
    if changed > 0 {
        cache::bump_version(&tx).await?;
    }
    tx.commit().await.map_err(|e| err("cannot commit", e))?;
    if changed > 0 {
        tracing::info!("coordinator failover: pg_dist_node group 0 names {new} now");
    }
    Ok(())
}

/// At start-up, when the configured coordinator node does not answer: follows a
/// listed standby already promoted (a failover made while this process was down).
pub async fn follow_at_start(cfg: &Config) {
    let Some(name) = configured() else { return };
    if cfg.coordinator_standbys.is_empty() {
        return;
    }
    let limit = Duration::from_millis(cfg.node_connect_timeout_ms.clamp(100, 5_000));
    if monitor::check(cfg, None, &name, limit).await.is_some() {
        return;
    }
    let surveyed = survey_all(cfg, &standbys_besides_current(), limit).await;
    let surveys: Vec<Survey> = surveyed.iter().map(|(s, _)| s.clone()).collect();
    if let Some((i, false)) = choose(&surveys) {
        tracing::warn!(
            "the coordinator node {name} does not answer: following its standby {}, promoted \
             already (timeline {})",
            surveys[i].addr,
            surveys[i].timeline
        );
        set_current(&surveys[i].addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(port: u16, in_recovery: bool, timeline: i32, lsn: i64) -> Survey {
        Survey {
            addr: NodeAddr {
                host: "/s".into(),
                port,
            },
            in_recovery,
            timeline,
            lsn,
        }
    }

    #[test]
    fn every_process_chooses_the_same_standby() {
        // Promoted already: the highest timeline, whatever the WAL positions.
        let list = [s(1, true, 1, 900), s(2, false, 2, 10), s(3, false, 3, 5)];
        assert_eq!(choose(&list), Some((2, false)));
        let list = [s(1, false, 2, 9), s(2, false, 2, 10)];
        assert_eq!(choose(&list), Some((0, false)));
        // None promoted: the furthest, ties to the first listed (the synchronous one).
        let list = [s(1, true, 1, 100), s(2, true, 1, 100), s(3, true, 1, 99)];
        assert_eq!(choose(&list), Some((0, true)));
        let list = [s(1, true, 1, 100), s(2, true, 1, 101)];
        assert_eq!(choose(&list), Some((1, true)));
        assert_eq!(choose(&[]), None);
    }

    #[test]
    fn only_the_configured_address_moves() {
        let configured = NodeAddr {
            host: "/c".into(),
            port: 5,
        };
        let worker = NodeAddr {
            host: "/c".into(),
            port: 6,
        };
        *PLACE.write().unwrap() = Some(Place {
            configured: configured.clone(),
            current: configured.clone(),
            standbys: vec![worker.clone()],
        });
        assert!(can_fail_over());
        assert_eq!(*physical(&configured), configured);
        let standby = NodeAddr {
            host: "/c".into(),
            port: 7,
        };
        set_current(&standby);
        assert_eq!(*physical(&configured), standby);
        assert_eq!(*physical(&worker), worker);
        assert_eq!(physical_host_port("/c", 5), ("/c".to_string(), 7));
        *PLACE.write().unwrap() = None;
        MOVED.store(false, Ordering::Release);
    }
}
