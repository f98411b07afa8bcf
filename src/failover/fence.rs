//! Fencing a failed-over primary: it must never serve again as a primary.
//!
//! The rule, whatever pgshard can reach: the catalog row of a retired primary is
//! `noderole = 'secondary'` and `isactive = false`, so no pgshard process routes to it
//! (statements planned before the change are sent to the group's new primary, see
//! `failover::route`), and no failover picks it as a standby. Bringing it back is an
//! operator's rebuild (`pg_rewind` or a new base backup) and `citus_add_node`.
//!
//! When the node is local (registered by its Unix-socket directory, as `cluster up`
//! registers nodes), pgshard can also reach its data directory: PostgreSQL's socket
//! lock file (`.s.PGSQL.<port>.lock`) names the postmaster's pid and data directory.
//! pgshard writes `standby.signal` and a `pgshard.fenced` note there (a restart comes up
//! read-only, in recovery, never as a primary) and kills the postmaster if it still
//! runs (a frozen one included).

use crate::backend::NodeAddr;
use std::path::PathBuf;

/// What the lock file of a local server's socket says: its postmaster's pid and data
/// directory (the file's first two lines).
fn lock_file(addr: &NodeAddr) -> Option<(i32, PathBuf)> {
    if !addr.is_unix_socket() {
        return None;
    }
    let path = format!(
        "{}/.s.PGSQL.{}.lock",
        addr.host.trim_end_matches('/'),
        addr.port
    );
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    let pid = lines.next()?.trim().parse().ok()?;
    let dir = PathBuf::from(lines.next()?.trim());
    Some((pid, dir))
}

/// Whether `pid` runs a PostgreSQL server from `dir` (pids are reused).
fn is_postmaster_of(pid: i32, dir: &std::path::Path) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|cmd| {
            let cmd = String::from_utf8_lossy(&cmd);
            cmd.contains("postgres") && cmd.contains(&*dir.to_string_lossy())
        })
        .unwrap_or(false)
}

/// Fences the retired primary at `addr` where pgshard can reach its data directory;
/// logs what it did. The catalog already keeps every pgshard process away from it.
pub fn fence(addr: &NodeAddr) {
    let Some((pid, dir)) = lock_file(addr) else {
        tracing::warn!(
            "failover: node {addr} is retired in pg_dist_node (inactive); its data directory \
             is out of pgshard's reach: make sure it never restarts as a primary"
        );
        return;
    };
    let note = "This server was a primary that pgshard failed over: it must not serve again \
                as a primary. standby.signal keeps it in recovery; rebuild it as a standby \
                (pg_rewind or a new base backup) before using it.\n";
    let marked = std::fs::write(dir.join("standby.signal"), "").is_ok()
        && std::fs::write(dir.join("pgshard.fenced"), note).is_ok();
    let killed = is_postmaster_of(pid, &dir) && unsafe { libc::kill(pid, libc::SIGKILL) } == 0;
    tracing::warn!(
        "failover: fenced old primary {addr} (data directory {}): {}{}",
        dir.display(),
        if marked {
            "standby.signal and pgshard.fenced written"
        } else {
            "could not write standby.signal"
        },
        if killed {
            format!(", its postmaster (pid {pid}) killed")
        } else {
            String::new()
        }
    );
}
