//! Runs a Go module's tests (pgx) package by package with `go test -json` and records
//! every test's result. A package whose tests make no progress for the time limit (no
//! event at all: pgx's LISTEN tests wait for ever through pgshard today) is killed; the
//! tests running then are recorded as failed ("hung") and the package runs again without
//! their top-level tests, so one hang costs one time limit and the rest still runs.

use crate::report::{first_error_line, Results, Status, TestResult};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Every test of every package of the module in `dir`, named `PKG.TestName/sub` (PKG:
/// the package path inside the module, `pgx` for the module's root package).
pub fn run_module(go: &Path, dir: &Path, env: &[(String, String)], limit: Duration) -> Results {
    let out = Command::new(go)
        .args(["list", "-m"])
        .current_dir(dir)
        .envs(env.iter().cloned())
        .output()
        .expect("go list -m");
    let module = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let out = Command::new(go)
        .args(["list", "./..."])
        .current_dir(dir)
        .envs(env.iter().cloned())
        .output()
        .expect("go list ./...");
    assert!(out.status.success(), "go list: {}", String::from_utf8_lossy(&out.stderr));
    let mut results = Results::new();
    for package in String::from_utf8_lossy(&out.stdout).lines() {
        let short = match package.strip_prefix(&module) {
            Some("") => "pgx".to_string(),
            Some(rest) => rest.trim_start_matches('/').to_string(),
            None => package.to_string(),
        };
        let started = Instant::now();
        let before = results.len();
        run_package(go, dir, env, limit, package, &short, &mut results);
        eprintln!(
            "  {short}: {} tests in {:.0} s",
            results.len() - before,
            started.elapsed().as_secs_f64()
        );
    }
    results
}

/// What one `go test -json` run of a package left.
#[derive(Default)]
struct Run {
    /// Test -> output lines so far.
    output: BTreeMap<String, Vec<String>>,
    /// Tests running now (not paused, not finished).
    running: BTreeSet<String>,
    /// Output that belongs to no test (build errors, TestMain).
    package_output: Vec<String>,
    package_failed: bool,
}

fn run_package(
    go: &Path,
    dir: &Path,
    env: &[(String, String)],
    limit: Duration,
    package: &str,
    short: &str,
    results: &mut Results,
) {
    let mut skip: Vec<String> = vec![];
    loop {
        let mut cmd = Command::new(go);
        cmd.args(["test", "-json", "-count=1", "-p", "1", "-timeout", "60m"])
            .current_dir(dir)
            .envs(env.iter().cloned())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            // Its own process group, so that a kill reaches the test binary too.
            .process_group(0);
        if !skip.is_empty() {
            cmd.arg("-skip").arg(format!("^({})$", skip.join("|")));
        }
        cmd.arg(package);
        let mut child = cmd.spawn().expect("go test");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut run = Run::default();
        let mut hung = false;
        loop {
            match rx.recv_timeout(limit) {
                Ok(line) => record_event(&line, short, &mut run, results),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    hung = true;
                    break;
                }
            }
        }
        if hung {
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
        }
        let _ = child.wait();
        if !hung {
            if run.package_failed && !results.keys().any(|k| k.starts_with(&format!("{short}."))) {
                let error = first_error_line(run.package_output.iter().map(String::as_str));
                results.insert(format!("{short}.(package)"), TestResult::fail(error));
            }
            return;
        }
        // The innermost running tests are the ones that hang.
        let leaves: Vec<String> = run
            .running
            .iter()
            .filter(|t| !run.running.iter().any(|o| o.starts_with(&format!("{t}/"))))
            .cloned()
            .collect();
        let secs = limit.as_secs();
        if leaves.is_empty() {
            results.insert(
                format!("{short}.(package)"),
                TestResult::fail(format!("no progress for {secs} s outside any test (killed)")),
            );
            return;
        }
        for t in &leaves {
            let error = format!("hung: no progress for {secs} s (killed)");
            eprintln!("  {short}.{t}: {error}");
            results.insert(format!("{short}.{t}"), TestResult::fail(error));
            let top = t.split('/').next().unwrap().to_string();
            if !skip.contains(&top) {
                skip.push(top);
            }
        }
    }
}

/// Applies one `go test -json` event.
fn record_event(line: &str, short: &str, run: &mut Run, results: &mut Results) {
    let Ok(event) = serde_json::from_str::<Value>(line) else {
        run.package_output.push(line.to_string());
        return;
    };
    let action = event["Action"].as_str().unwrap_or("");
    let Some(test) = event["Test"].as_str() else {
        match action {
            "output" => run
                .package_output
                .push(event["Output"].as_str().unwrap_or("").to_string()),
            "fail" => run.package_failed = true,
            _ => {}
        }
        return;
    };
    let test = test.to_string();
    match action {
        "run" | "cont" => {
            run.running.insert(test);
        }
        "pause" => {
            run.running.remove(&test);
        }
        "output" => {
            let text = event["Output"].as_str().unwrap_or("");
            let lines = run.output.entry(test).or_default();
            if lines.len() < 200 {
                lines.push(text.to_string());
            }
        }
        "pass" | "fail" | "skip" => {
            run.running.remove(&test);
            let output = run.output.remove(&test).unwrap_or_default();
            let result = match action {
                "pass" => TestResult::pass(),
                "skip" => TestResult {
                    status: Status::Skip,
                    error: String::new(),
                },
                _ => TestResult::fail(failure_line(&output)),
            };
            results.insert(format!("{short}.{test}"), result);
        }
        _ => {}
    }
}

/// The first error line of a failed Go test's output (its `=== RUN` / `--- FAIL` headers
/// and subtests' own lines aside).
fn failure_line(output: &[String]) -> String {
    let lines = output
        .iter()
        .flat_map(|o| o.lines())
        .filter(|l| {
            let t = l.trim_start();
            !(t.starts_with("=== ") || t.starts_with("--- "))
        });
    first_error_line(lines)
}
