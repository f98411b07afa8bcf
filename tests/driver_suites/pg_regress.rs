//! Runs PostgreSQL 15's regression suite (`pg_regress --use-existing` with
//! `parallel_schedule`, at the schedule's own parallelism) against one server and reads
//! which tests passed; a failed test's first differing line comes from
//! `regression.diffs`. scripts/pg-regress.sh prepares the inputs (see
//! ../shared/pg-regress.md).

use crate::report::{Results, Status, TestResult};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Where scripts/pg-regress.sh put what pg_regress needs.
pub struct Inputs<'a> {
    /// `pg_regress` itself.
    pub pg_regress: &'a Path,
    /// `src/test/regress` of the source package (sql/, expected/, parallel_schedule).
    pub input_dir: &'a Path,
    /// Holds `regress.so` (and links to `autoinc.so`, `refint.so`).
    pub dl_path: &'a Path,
}

/// Runs the suite with `env` (PGHOST...) writing into `out_dir`, which the server's OS user
/// must be able to reach (the tablespace test creates a directory there).
/// A test's psql that runs longer than `TEST_LIMIT` is killed (pg_regress then counts the
/// test as failed and goes on); a parallel group that makes no progress for `limit` ends
/// the run, and the tests it did not report are missing from the results.
pub fn run(inputs: &Inputs, env: &[(String, String)], out_dir: &Path, limit: Duration) -> Results {
    std::fs::create_dir_all(out_dir).unwrap();
    let started = Instant::now();
    let mut child = Command::new(inputs.pg_regress)
        .arg("--use-existing")
        .arg("--dbname=postgres")
        .arg("--bindir=/usr/lib/postgresql/15/bin")
        .arg(format!("--inputdir={}", inputs.input_dir.display()))
        .arg(format!("--outputdir={}", out_dir.display()))
        .arg(format!("--dlpath={}", inputs.dl_path.display()))
        .arg(format!(
            "--schedule={}",
            inputs.input_dir.join("parallel_schedule").display()
        ))
        .envs(env.iter().cloned())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn()
        .expect("running pg_regress");
    // pg_regress reports a parallel group when all of it ended: a group that does not
    // end within the limit (a hung test) stops the run; what was reported counts.
    let lines = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(lines).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut stdout = String::new();
    let mut stopped = false;
    let mut last_progress = Instant::now();
    let mut killed: BTreeMap<String, String> = BTreeMap::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(line) => {
                stdout.push_str(&line);
                stdout.push('\n');
                last_progress = Instant::now();
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                for test in kill_slow_tests(child.id() as i32, TEST_LIMIT) {
                    let error = format!("killed after {} s (hung)", TEST_LIMIT.as_secs());
                    eprintln!("  pg_regress: {test} {error}");
                    killed.insert(test, error);
                }
                if last_progress.elapsed() > limit {
                    stopped = true;
                    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                    break;
                }
            }
        }
    }
    let status = child.wait().unwrap();
    std::fs::write(out_dir.join("pg_regress.out"), stdout.as_bytes()).unwrap();
    eprintln!(
        "  pg_regress: {:.0} s, {}",
        started.elapsed().as_secs_f64(),
        if stopped {
            format!("killed after {} s without progress", limit.as_secs())
        } else {
            format!("exit {status}")
        }
    );
    let diffs = std::fs::read_to_string(out_dir.join("regression.diffs")).unwrap_or_default();
    let mut first_diffs = first_diff_lines(&diffs);
    first_diffs.extend(killed);
    let mut results = parse(&stdout);
    for (test, r) in results.iter_mut() {
        if r.status == Status::Fail {
            r.error = first_diffs
                .get(test)
                .cloned()
                .unwrap_or_else(|| "FAILED (no diff)".to_string());
        }
    }
    assert!(!results.is_empty(), "pg_regress ran no test:\n{stdout}");
    results
}

/// The longest a test of the schedule takes on this machine is about 30 s.
const TEST_LIMIT: Duration = Duration::from_secs(300);

/// Kills the psql processes of pg_regress's process group `pgid` that have run longer
/// than `limit`; returns their tests (from the `sql/NAME.sql` on their stdin).
fn kill_slow_tests(pgid: i32, limit: Duration) -> Vec<String> {
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let mut killed = vec![];
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the command's closing parenthesis: state ppid pgrp ... starttime (22nd).
        let Some((comm, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let (Some(pgrp), Some(start)) = (fields.get(2), fields.get(19)) else {
            continue;
        };
        if !comm.ends_with("(psql") || pgrp.parse::<i32>() != Ok(pgid) {
            continue;
        }
        let age = uptime - start.parse::<f64>().unwrap_or(uptime * ticks) / ticks;
        if age < limit.as_secs_f64() {
            continue;
        }
        let input = std::fs::read_link(entry.path().join("fd/0")).unwrap_or_default();
        unsafe { libc::kill(pid, libc::SIGKILL) };
        if let Some(test) = input.file_stem() {
            killed.push(test.to_string_lossy().into_owned());
        }
    }
    killed
}

/// The tests of pg_regress's report: lines like `     boolean   ... ok   25 ms`,
/// `test tablespace  ... FAILED`, `     stats  ... failed (ignored)`.
fn parse(stdout: &str) -> Results {
    let mut results = Results::new();
    for line in stdout.lines() {
        let Some((head, tail)) = line.split_once(" ... ") else {
            continue;
        };
        let name = head.trim().trim_start_matches("test ").trim();
        if name.is_empty() || name.contains(' ') {
            continue;
        }
        let tail = tail.trim_start();
        let result = if tail.starts_with("ok") || tail.starts_with("failed (ignored)") {
            TestResult::pass()
        } else if tail.starts_with("FAILED") || tail.starts_with("failed") {
            TestResult::fail("")
        } else {
            continue;
        };
        results.insert(name.to_string(), result);
    }
    results
}

/// Test -> first line its result added (`+...`: the error it got), else the first line
/// it lost (`-...`).
fn first_diff_lines(diffs: &str) -> BTreeMap<String, String> {
    let mut added: BTreeMap<String, String> = BTreeMap::new();
    let mut removed: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in diffs.lines() {
        if let Some(rest) = line.strip_prefix("diff ") {
            // diff -U3 .../expected/NAME.out .../results/NAME.out
            current = rest
                .split_whitespace()
                .last()
                .and_then(|p| Path::new(p).file_stem())
                .map(|s| s.to_string_lossy().into_owned());
            continue;
        }
        let Some(test) = &current else { continue };
        if line.starts_with("---") || line.starts_with("+++") {
            continue;
        }
        let map = match line.chars().next() {
            Some('+') => &mut added,
            Some('-') => &mut removed,
            _ => continue,
        };
        map.entry(test.clone()).or_insert_with(|| line.to_string());
    }
    removed.extend(added);
    removed
}
