//! Distributed transactions across nodes: the identity of this pgshard process in
//! two-phase commit (gids and its liveness lock), the transactions it has in flight,
//! recovery of prepared transactions left behind by crashes (`recovery`), and the
//! detection of lock-wait cycles that span nodes (`deadlock`).
//!
//! Every gid pgshard prepares reads `pgshard_<instance>_<rest>`: `<instance>` is
//! the 8-hex-digit id of the process that prepared it. While that process lives it
//! holds a session-level advisory lock keyed by the id on the coordinator node, so
//! any pgshard process can tell a dead owner (lock free) from a live one.

pub mod deadlock;
pub mod decision;
pub mod distributed;
pub mod recovery;
pub mod two_phase_commit;

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

/// First key of the liveness advisory locks (`pg_advisory_lock(ns, instance)`): "pgsh".
pub const LIVENESS_LOCK_NS: i32 = 0x7067_7368;

/// The random id of this pgshard process.
pub fn instance_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| format!("{:08x}", rand::random::<u32>()))
}

/// The second key of an instance's liveness lock.
pub fn lock_key(instance: &str) -> Option<i32> {
    if instance.len() != 8 {
        return None;
    }
    u32::from_str_radix(instance, 16).ok().map(|v| v as i32)
}

/// The owner instance and the transaction prefix (the gid without its participant
/// number) of a pgshard gid; None for gids pgshard did not make.
pub fn parse_gid(gid: &str) -> Option<(&str, &str)> {
    let rest = gid.strip_prefix("pgshard_")?;
    let instance = rest.split('_').next()?;
    lock_key(instance)?;
    let (prefix, n) = gid.rsplit_once('_')?;
    n.parse::<u32>().ok()?;
    if prefix.len() <= "pgshard_".len() + instance.len() {
        return None;
    }
    Some((instance, prefix))
}

/// This process's liveness lock: a count raised whenever it is taken or lost, and the
/// server it is held on (None while not held).
struct Liveness {
    epoch: u64,
    on: Option<crate::backend::NodeAddr>,
}

static LIVENESS: Mutex<Liveness> = Mutex::new(Liveness { epoch: 0, on: None });

fn liveness() -> std::sync::MutexGuard<'static, Liveness> {
    LIVENESS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The liveness lock was taken on `on` (the coordinator node's server then).
pub(crate) fn liveness_taken(on: Option<crate::backend::NodeAddr>) {
    let mut l = liveness();
    l.epoch += 1;
    l.on = on;
}

/// The liveness lock's session ended.
pub(crate) fn liveness_lost() {
    let mut l = liveness();
    l.epoch += 1;
    l.on = None;
}

/// The liveness lock's count now: a transaction notes it before its first PREPARE.
pub fn liveness_epoch() -> u64 {
    liveness().epoch
}

/// Whether this process's liveness lock has been held on the coordinator node's
/// current server, without a break, since the count was `epoch`. A commit decision
/// may be written only then: other processes' recovery rolls back the prepared
/// transactions of a process whose lock it can take (after a failover of the
/// coordinator node or a restart of it, until this process takes its lock again), so
/// a decision written after such a gap could commit a transaction already rolled back
/// on some node.
pub fn liveness_holds(epoch: u64) -> bool {
    let l = liveness();
    let now = crate::failover::coordinator::current();
    l.epoch == epoch && l.on == now
}

/// Waits (at most `limit`) until the liveness lock is held on `on`.
pub async fn wait_liveness_on(on: &crate::backend::NodeAddr, limit: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if liveness().on.as_ref() == Some(on) {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Transactions of this process between their first PREPARE and the end of their
/// commit or abort, by gid prefix: recovery never touches them.
fn in_flight() -> &'static Mutex<HashSet<String>> {
    static SET: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    SET.get_or_init(|| Mutex::new(HashSet::new()))
}

/// Marks a transaction (gid prefix) in flight until dropped, with the liveness count
/// when it began (`liveness_holds`).
pub struct InFlight(String, u64);

impl InFlight {
    /// Registers `prefix`; register before the first PREPARE TRANSACTION.
    pub fn register(prefix: String) -> InFlight {
        let epoch = liveness_epoch();
        in_flight().lock().unwrap().insert(prefix.clone());
        InFlight(prefix, epoch)
    }

    /// The liveness count when the transaction began to commit.
    pub fn epoch(&self) -> u64 {
        self.1
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        in_flight().lock().unwrap().remove(&self.0);
    }
}

/// The prefixes in flight right now.
pub fn in_flight_snapshot() -> HashSet<String> {
    in_flight().lock().unwrap().clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gids_name_their_instance() {
        assert_eq!(
            parse_gid("pgshard_0a1b2c3d_123_7_1"),
            Some(("0a1b2c3d", "pgshard_0a1b2c3d_123_7"))
        );
        assert_eq!(
            parse_gid("pgshard_deadbeef_cdt_1f_00ab_12"),
            Some(("deadbeef", "pgshard_deadbeef_cdt_1f_00ab"))
        );
        assert_eq!(parse_gid("pgshard_cdt_1f_00ab_12"), None);
        assert_eq!(parse_gid("citus_0_1_2_3"), None);
        assert_eq!(parse_gid("pgshard_0a1b2c3d_1"), None);
        assert_eq!(parse_gid("pgshard_0a1b2c3d_x_y"), None);
        assert_eq!(lock_key("ffffffff"), Some(-1));
    }

    #[test]
    fn in_flight_lasts_as_long_as_its_guard() {
        let g = InFlight::register("pgshard_00000001_1_1".into());
        assert!(in_flight_snapshot().contains("pgshard_00000001_1_1"));
        drop(g);
        assert!(!in_flight_snapshot().contains("pgshard_00000001_1_1"));
    }
}
