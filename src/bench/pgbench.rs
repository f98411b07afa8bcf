//! Running the real `pgbench` and `psql` and reading what they print.
//!
//! Throughput and average latency come from pgbench's own summary (`tps = ...
//! (without initial connection time)`, `latency average = ... ms`). Latency percentiles
//! come from its per-transaction log (`--log --sampling-rate`), whose third column is
//! the latency in microseconds (`failed` / `skipped` for transactions that did not
//! complete).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;

/// libpq environment of one target.
pub type Env = Vec<(String, String)>;

/// A command with only our libpq settings: inherited PG* variables (PGSERVICE,
/// PGOPTIONS, ...) could change what is measured. No TLS unless `env` sets PGSSLMODE
/// (--client-tls: `require`).
pub fn command(program: &str, env: &Env) -> Command {
    let mut cmd = Command::new(program);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("PG") {
            cmd.env_remove(&k);
        }
    }
    cmd.env("PGSSLMODE", "disable")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("PGCONNECT_TIMEOUT", "30")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// What one command printed.
#[derive(Debug, Clone)]
pub struct Output {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
}

impl Output {
    pub fn success(&self) -> bool {
        self.code == Some(0) && !self.timed_out
    }

    /// Both streams, for the log files.
    pub fn text(&self) -> String {
        format!(
            "exit code: {}{}\n--- stdout ---\n{}\n--- stderr ---\n{}\n",
            self.code.map_or("none (killed)".into(), |c| c.to_string()),
            if self.timed_out { " (timed out)" } else { "" },
            self.stdout,
            self.stderr
        )
    }

    /// Why it failed, in pgbench's or psql's words: its first error lines.
    pub fn error_reason(&self) -> String {
        if self.timed_out {
            return "timed out (killed)".into();
        }
        let errors: Vec<&str> = self
            .stderr
            .lines()
            .filter(|l| {
                let l = l.to_ascii_lowercase();
                (l.contains("error") || l.contains("fatal"))
                    && !l.contains("run was aborted; the above results are incomplete")
            })
            .map(str::trim)
            .collect();
        let reason = match errors.first() {
            Some(first) => {
                let first = first.strip_prefix("pgbench: error: ").unwrap_or(first);
                let more = errors.len() - 1;
                if more > 0 {
                    format!("{first} (and {more} more error lines)")
                } else {
                    first.to_string()
                }
            }
            None => self
                .stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no message")
                .trim()
                .to_string(),
        };
        format!(
            "{reason} [exit code {}]",
            self.code.map_or("none".into(), |c| c.to_string())
        )
    }
}

/// Runs `cmd` to its end, killing it after `timeout`.
pub async fn run(mut cmd: Command, timeout: Option<Duration>) -> Result<Output> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let program = format!("{:?}", cmd.as_std().get_program());
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {program} (is it installed and on PATH?)"))?;
    let wait = child.wait_with_output();
    let (out, timed_out) = match timeout {
        Some(t) => match tokio::time::timeout(t, wait).await {
            Ok(out) => (Some(out?), false),
            // Dropping the future drops the child: kill_on_drop.
            Err(_) => (None, true),
        },
        None => (Some(wait.await?), false),
    };
    Ok(match out {
        Some(out) => Output {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            timed_out,
        },
        None => Output {
            code: None,
            stdout: String::new(),
            stderr: String::new(),
            timed_out,
        },
    })
}

/// Runs psql with `-X -v ON_ERROR_STOP=1 -tA`; fails with its message.
pub async fn psql(env: &Env, args: &[&str]) -> Result<String> {
    let mut cmd = command("psql", env);
    cmd.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-tA"])
        .args(args);
    let out = run(cmd, Some(Duration::from_secs(3600))).await?;
    if !out.success() {
        bail!("psql {} failed: {}", args.join(" "), out.error_reason());
    }
    Ok(out.stdout.trim().to_string())
}

/// pgbench's summary of one run.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub transactions: Option<u64>,
    pub failed: Option<u64>,
    pub latency_avg_ms: Option<f64>,
    pub initial_connection_ms: Option<f64>,
    pub tps: Option<f64>,
}

/// Reads pgbench 15's summary lines.
pub fn parse_summary(stdout: &str) -> Summary {
    let mut s = Summary::default();
    let number = |text: &str| -> Option<f64> {
        text.trim()
            .split(|c: char| c.is_whitespace() || c == '/')
            .next()?
            .parse()
            .ok()
    };
    for line in stdout.lines() {
        let line = line.trim();
        if let Some(v) = line.strip_prefix("number of transactions actually processed:") {
            s.transactions = number(v).map(|n| n as u64);
        } else if let Some(v) = line.strip_prefix("number of failed transactions:") {
            s.failed = number(v).map(|n| n as u64);
        } else if let Some(v) = line.strip_prefix("latency average =") {
            s.latency_avg_ms = number(v);
        } else if let Some(v) = line.strip_prefix("initial connection time =") {
            s.initial_connection_ms = number(v);
        } else if let Some(v) = line.strip_prefix("tps =") {
            if line.contains("without initial connection time") || s.tps.is_none() {
                s.tps = number(v);
            }
        }
    }
    s
}

/// Latency percentiles from the per-transaction logs.
#[derive(Debug, Clone, Default)]
pub struct Percentiles {
    pub samples: usize,
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// The log files pgbench wrote for `prefix`: `prefix.PID` and `prefix.PID.N` (one per
/// thread).
pub fn log_files(prefix: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (prefix.parent(), prefix.file_name()) else {
        return vec![];
    };
    let start = format!("{}.", name.to_string_lossy());
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&start))
        .map(|e| e.path())
        .collect();
    files.sort();
    files
}

/// Reads the latencies of every log file of `prefix`.
pub fn percentiles(prefix: &Path) -> Percentiles {
    let mut us: Vec<f64> = Vec::new();
    for file in log_files(prefix) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        us.extend(
            text.lines()
                .filter_map(|l| l.split_whitespace().nth(2)?.parse::<f64>().ok()),
        );
    }
    percentiles_of(us)
}

pub fn percentiles_of(mut us: Vec<f64>) -> Percentiles {
    us.sort_by(|a, b| a.total_cmp(b));
    // Nearest rank.
    let rank = |p: f64| -> Option<f64> {
        if us.is_empty() {
            return None;
        }
        let i = ((p / 100.0) * us.len() as f64).ceil() as usize;
        Some(us[i.clamp(1, us.len()) - 1] / 1000.0)
    };
    Percentiles {
        samples: us.len(),
        p50_ms: rank(50.0),
        p95_ms: rank(95.0),
        p99_ms: rank(99.0),
    }
}

/// While alive, whatever the process prints on stdout goes to stderr: `cluster_up` and
/// `cluster_down` report progress with println!, and stdout is for the table.
pub struct StdoutToStderr {
    saved: i32,
}

impl StdoutToStderr {
    pub fn new() -> Self {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let saved = unsafe { libc::dup(1) };
        if saved >= 0 {
            unsafe { libc::dup2(2, 1) };
        }
        StdoutToStderr { saved }
    }
}

impl Drop for StdoutToStderr {
    fn drop(&mut self) {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        if self.saved >= 0 {
            unsafe {
                libc::dup2(self.saved, 1);
                libc::close(self.saved);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: <builtin: select only>
scaling factor: 1
query mode: prepared
number of clients: 4
number of threads: 2
maximum number of tries: 1
duration: 3 s
number of transactions actually processed: 29697
number of failed transactions: 0 (0.000%)
latency average = 0.397 ms
initial connection time = 50.579 ms
tps = 10066.104038 (without initial connection time)
";

    #[test]
    fn parses_the_summary() {
        let s = parse_summary(OUT);
        assert_eq!(s.transactions, Some(29697));
        assert_eq!(s.failed, Some(0));
        assert_eq!(s.latency_avg_ms, Some(0.397));
        assert_eq!(s.initial_connection_ms, Some(50.579));
        assert_eq!(s.tps, Some(10066.104038));
    }

    #[test]
    fn nearest_rank_percentiles() {
        let p = percentiles_of((1..=100).map(|i| i as f64 * 1000.0).collect());
        assert_eq!(p.samples, 100);
        assert_eq!(p.p50_ms, Some(50.0));
        assert_eq!(p.p95_ms, Some(95.0));
        assert_eq!(p.p99_ms, Some(99.0));
        assert_eq!(percentiles_of(vec![]).p95_ms, None);
    }

    #[test]
    fn error_reason_is_pgbench_first_error() {
        let out = Output {
            code: Some(2),
            stdout: String::new(),
            stderr: "starting vacuum...end.\npgbench: error: client 2 script 0 aborted in \
                     command 10 query 0: ERROR:  boom\npgbench: error: Run was aborted; the \
                     above results are incomplete.\n"
                .into(),
            timed_out: false,
        };
        assert_eq!(
            out.error_reason(),
            "client 2 script 0 aborted in command 10 query 0: ERROR:  boom [exit code 2]"
        );
    }
}
