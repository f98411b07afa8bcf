//! CPU time of the processes under test, read from /proc (Linux).
//!
//! - pgshard: utime + stime of its process (fields 14 and 15 of `/proc/PID/stat`: every
//!   thread, in clock ticks).
//! - A PostgreSQL server: utime + stime of every live process whose working directory is
//!   the data directory (the postmaster chdirs there and its children inherit it), plus
//!   the postmaster's cutime + cstime (fields 16 and 17), which hold the time of the
//!   backends that already exited and were reaped. A backend that exits between the two
//!   reads is missed rather than counted twice.
//! - The whole machine: busy and total time from the first line of `/proc/stat`, to see
//!   how much of it went elsewhere (interrupts and softirqs, mostly the loopback TCP
//!   traffic, are counted apart); pgbench's own time comes from
//!   `getrusage(RUSAGE_CHILDREN)`, so the rest is other users of the machine.

use std::fs;
use std::path::{Path, PathBuf};

/// Clock ticks per second (`getconf CLK_TCK`).
pub fn ticks_per_second() -> u64 {
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// The fields of `/proc/PID/stat` after the command name, which may hold spaces and
/// parentheses: `fields[0]` is field 3 (state), so field N is `fields[N - 3]`.
fn stat_fields(pid: u32) -> Option<Vec<u64>> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    Some(
        rest.split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect(),
    )
}

fn field(fields: &[u64], n: usize) -> u64 {
    fields.get(n - 3).copied().unwrap_or(0)
}

/// utime + stime of one process, in ticks.
pub fn process_ticks(pid: u32) -> Option<u64> {
    let f = stat_fields(pid)?;
    Some(field(&f, 14) + field(&f, 15))
}

/// CPU ticks of one PostgreSQL server (see the module comment); 0 when it is down.
pub fn server_ticks(data_dir: &Path) -> u64 {
    let Ok(dir) = fs::canonicalize(data_dir) else {
        return 0;
    };
    let postmaster: Option<u32> = fs::read_to_string(dir.join("postmaster.pid"))
        .ok()
        .and_then(|t| t.lines().next()?.trim().parse().ok());
    let mut ticks = postmaster
        .and_then(stat_fields)
        .map_or(0, |f| field(&f, 16) + field(&f, 17));
    let Ok(entries) = fs::read_dir("/proc") else {
        return ticks;
    };
    for pid in entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
        if fs::read_link(format!("/proc/{pid}/cwd")).ok().as_deref() == Some(dir.as_path()) {
            ticks += process_ticks(pid).unwrap_or(0);
        }
    }
    ticks
}

/// (busy, total, irq + softirq) ticks of the whole machine since boot.
pub fn machine_ticks() -> (u64, u64, u64) {
    let text = fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return (0, 0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let total: u64 = v.iter().take(8).sum();
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    (total.saturating_sub(at(3) + at(4)), total, at(5) + at(6))
}

/// CPU seconds of this process's children that ended and were waited for (pgbench):
/// `getrusage(RUSAGE_CHILDREN)`.
pub fn children_cpu_s() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// What one target's processes are, for snapshots.
#[derive(Debug, Clone)]
pub struct Probe {
    /// The pgshard process, if the target is pgshard.
    pub pgshard_pid: Option<u32>,
    /// (name, data directory) of each PostgreSQL server of the target.
    pub servers: Vec<(String, PathBuf)>,
}

/// CPU ticks at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub pgshard: Option<u64>,
    pub servers: Vec<u64>,
    pub machine_busy: u64,
    pub machine_total: u64,
    pub machine_irq: u64,
    pub children_s: f64,
}

impl Probe {
    pub fn snapshot(&self) -> Snapshot {
        let (machine_busy, machine_total, machine_irq) = machine_ticks();
        Snapshot {
            pgshard: self.pgshard_pid.and_then(process_ticks),
            servers: self.servers.iter().map(|(_, d)| server_ticks(d)).collect(),
            machine_busy,
            machine_total,
            machine_irq,
            children_s: children_cpu_s(),
        }
    }
}

/// CPU seconds spent between two snapshots.
#[derive(Debug, Clone)]
pub struct Usage {
    pub pgshard_s: Option<f64>,
    /// (server name, seconds).
    pub servers_s: Vec<(String, f64)>,
    pub machine_busy_s: f64,
    pub machine_total_s: f64,
    /// Interrupt and softirq time: mostly the loopback TCP traffic of the run, which no
    /// process is charged for.
    pub machine_irq_s: f64,
    /// pgbench (the children waited for in between).
    pub client_s: f64,
}

pub fn usage(probe: &Probe, before: &Snapshot, after: &Snapshot) -> Usage {
    let hz = ticks_per_second() as f64;
    let secs = |a: u64, b: u64| b.saturating_sub(a) as f64 / hz;
    Usage {
        pgshard_s: match (before.pgshard, after.pgshard) {
            (Some(a), Some(b)) => Some(secs(a, b)),
            _ => None,
        },
        servers_s: probe
            .servers
            .iter()
            .zip(before.servers.iter().zip(&after.servers))
            .map(|((name, _), (&a, &b))| (name.clone(), secs(a, b)))
            .collect(),
        machine_busy_s: secs(before.machine_busy, after.machine_busy),
        machine_total_s: secs(before.machine_total, after.machine_total),
        machine_irq_s: secs(before.machine_irq, after.machine_irq),
        client_s: (after.children_s - before.children_s).max(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_our_own_cpu_time() {
        let me = std::process::id();
        // Burn a little CPU so that at least one tick is accounted.
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed().as_millis() < 50 {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        assert!(process_ticks(me).is_some());
        let (busy, total, irq) = machine_ticks();
        assert!(total >= busy && busy >= irq && total > 0);
        assert!(ticks_per_second() > 0);
    }
}
