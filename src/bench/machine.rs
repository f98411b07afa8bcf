//! A description of the machine and software a benchmark ran on, for bench.json:
//! processors, memory, kernel, PostgreSQL and pgbench versions, the date, the exact
//! command and the pgshard source revision.

use serde_json::{json, Value};
use std::fs;
use std::process::Command;

/// stdout of a command, trimmed; None when it cannot run or fails.
fn output_of(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A value of /proc/meminfo in kB.
fn meminfo_kb(key: &str) -> Option<u64> {
    fs::read_to_string("/proc/meminfo")
        .ok()?
        .lines()
        .find(|l| l.starts_with(&format!("{key}:")))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The current UTC time, ISO 8601.
pub fn now_utc() -> String {
    output_of("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]).unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        format!("@{secs} (unix time)")
    })
}

/// The command line as typed (shell-quoted where needed).
pub fn command_line() -> String {
    std::env::args()
        .map(|a| {
            let plain = |c: char| c.is_ascii_alphanumeric() || "._:/@%+-,=".contains(c);
            if !a.is_empty() && a.chars().all(plain) {
                a
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn describe() -> Value {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string());
    let nproc = output_of("nproc", &[])
        .and_then(|s| s.parse::<u64>().ok())
        .or_else(|| {
            std::thread::available_parallelism()
                .ok()
                .map(|n| n.get() as u64)
        });
    let loadavg = fs::read_to_string("/proc/loadavg")
        .map(|s| s.trim().to_string())
        .ok();
    json!({
        "nproc": nproc,
        "cpu_model": cpu_model,
        "mem_total_kb": meminfo_kb("MemTotal"),
        "mem_available_kb": meminfo_kb("MemAvailable"),
        "kernel": fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_string()),
        "os": os_name(),
        "clk_tck": super::cpu::ticks_per_second(),
        "loadavg_at_start": loadavg,
    })
}

fn os_name() -> Option<String> {
    fs::read_to_string("/etc/os-release")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
}

/// The pgshard version and, when run from a checkout, its git revision.
pub fn pgshard_revision() -> Value {
    let dir = env!("CARGO_MANIFEST_DIR");
    let rev = output_of("git", &["-C", dir, "rev-parse", "--short", "HEAD"]);
    let dirty = output_of(
        "git",
        &["-C", dir, "status", "--porcelain", "--untracked-files=no"],
    )
    .map(|s| !s.is_empty());
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "git_revision": rev,
        "git_dirty": dirty,
    })
}

/// `postgres --version` and `pgbench --version`.
pub fn postgres_versions() -> Value {
    let postgres = crate::cluster::node::bin_dir()
        .ok()
        .and_then(|d| output_of(&d.join("postgres").to_string_lossy(), &["--version"]));
    json!({
        "postgres": postgres,
        "pgbench": output_of("pgbench", &["--version"]),
        "psql": output_of("psql", &["--version"]),
    })
}
