//! Which catalog version each pgshard process has loaded, so that a catalog change
//! made through one process is in every other's snapshot when its statement returns
//! (several processes on one catalog: `cluster up --coordinators N`).
//!
//! Each process advertises the version it installed in the `application_name` of its
//! catalog-loading connection to the coordinator node (`pgshard <instance> catalog
//! <version>`): no table, nothing to clean up when a process dies. After a change of
//! its own, a process waits (at most [`WAIT_AT_MOST`]) until every live other process
//! (its liveness lock held, `transaction::recovery`) advertises that version or a later
//! one; they load it on the change's `NOTIFY`. With one process the wait is one query.

use crate::error::PgError;
use crate::transaction::{instance_id, lock_key, LIVENESS_LOCK_NS};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

/// The longest a change waits for the other processes (one that stays behind, e.g.
/// stopped, is logged and left to catch up).
const WAIT_AT_MOST: Duration = Duration::from_secs(5);
/// Between two looks at the other processes.
const POLL_EVERY: Duration = Duration::from_millis(5);

/// Advertises `version` as this process's loaded catalog on `client` (the loader).
pub async fn advertise(client: &Client, version: i64) -> Result<(), PgError> {
    client
        .execute(
            "SELECT pg_catalog.set_config('application_name', $1, false)",
            &[&format!("pgshard {} catalog {version}", instance_id())],
        )
        .await
        .map(|_| ())
        .map_err(|e| PgError::from_client_error("cannot advertise the catalog version", &e))
}

/// The live other processes (liveness-lock keys) and what each advertises.
const PROCESSES_SQL: &str = "SELECT l.objid::int8, \
     (SELECT pg_catalog.max(a.application_name) FROM pg_catalog.pg_stat_activity a \
      WHERE a.application_name LIKE 'pgshard % catalog %' \
      AND pg_catalog.split_part(a.application_name, ' ', 2) = \
          pg_catalog.lpad(pg_catalog.to_hex(l.objid::int8), 8, '0')) \
     FROM pg_catalog.pg_locks l WHERE l.locktype = 'advisory' AND l.classid::int8 = $1 \
     AND l.objsubid = 2 AND l.granted AND l.objid::int8 <> $2";

/// The advertised version of an `application_name`.
fn advertised(name: &str) -> Option<i64> {
    name.rsplit_once(" catalog ")?.1.parse().ok()
}

/// Waits until every live other process has loaded `version` (see the module comment).
pub async fn wait_for_others(client: &Client, version: i64) -> Result<(), PgError> {
    let own = lock_key(instance_id()).expect("instance ids are 8 hex digits") as u32 as i64;
    let ns = LIVENESS_LOCK_NS as u32 as i64;
    let started = Instant::now();
    loop {
        let rows = client
            .query(PROCESSES_SQL, &[&ns, &own])
            .await
            .map_err(|e| PgError::from_client_error("cannot read the pgshard processes", &e))?;
        let behind: HashMap<i64, Option<i64>> = rows
            .iter()
            .map(|r| {
                (
                    r.get::<_, i64>(0),
                    r.get::<_, Option<String>>(1)
                        .as_deref()
                        .and_then(advertised),
                )
            })
            .filter(|(_, v)| v.map_or(true, |v| v < version))
            .collect();
        if behind.is_empty() {
            return Ok(());
        }
        if started.elapsed() > WAIT_AT_MOST {
            tracing::warn!(
                "catalog version {version}: {} other pgshard process(es) have not loaded it \
                 after {WAIT_AT_MOST:?}; going on",
                behind.len()
            );
            return Ok(());
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_advertised_version() {
        assert_eq!(super::advertised("pgshard 0a1b2c3d catalog 42"), Some(42));
        assert_eq!(super::advertised("pgshard 0a1b2c3d decisions"), None);
    }
}
