//! Runs PostgreSQL 15's regression suite (`pg_regress --use-existing` with
//! `parallel_schedule`, at the schedule's own parallelism) against one server and reads
//! which tests passed; a failed test's first differing line comes from
//! `regression.diffs`. scripts/pg-regress.sh prepares the inputs (see
//! ../shared/pg-regress.md).

use crate::report::{Results, Status, TestResult};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

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
pub fn run(inputs: &Inputs, env: &[(String, String)], out_dir: &Path) -> Results {
    std::fs::create_dir_all(out_dir).unwrap();
    let started = Instant::now();
    let out = Command::new(inputs.pg_regress)
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
        .output()
        .expect("running pg_regress");
    let stdout = String::from_utf8_lossy(&out.stdout);
    std::fs::write(out_dir.join("pg_regress.out"), stdout.as_bytes()).unwrap();
    eprintln!(
        "  pg_regress: {:.0} s, exit {}",
        started.elapsed().as_secs_f64(),
        out.status
    );
    let diffs = std::fs::read_to_string(out_dir.join("regression.diffs")).unwrap_or_default();
    let first_diffs = first_diff_lines(&diffs);
    let mut results = parse(&stdout);
    for (test, r) in results.iter_mut() {
        if r.status == Status::Fail {
            r.error = first_diffs
                .get(test)
                .cloned()
                .unwrap_or_else(|| "FAILED (no diff)".to_string());
        }
    }
    assert!(
        !results.is_empty(),
        "pg_regress ran no test:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    results
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
