//! Runs a Go module's tests (pgx) package by package with `go test -json` and records
//! every test's result. A package whose tests make no progress for the time limit (no
//! event at all: pgx's LISTEN tests wait for ever through pgshard today) is killed; each
//! top-level test running then runs again alone (tests running beside a hung one look
//! the same), a test that hangs there too is recorded as failed ("hung"), and the
//! package runs again without them and the tests already finished: one hang costs about
//! two time limits and the rest still runs.

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
/// the package path inside the module, `pgx` for the module's root package). A failed
/// test's whole output goes to `log_dir/PKG.TestName_sub.log`.
pub fn run_module(
    go: &Path,
    dir: &Path,
    env: &[(String, String)],
    limit: Duration,
    log_dir: &Path,
) -> Results {
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
    assert!(
        out.status.success(),
        "go list: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut results = Results::new();
    for package in String::from_utf8_lossy(&out.stdout).lines() {
        let short = match package.strip_prefix(&module) {
            Some("") => "pgx".to_string(),
            Some(rest) => rest.trim_start_matches('/').to_string(),
            None => package.to_string(),
        };
        let started = Instant::now();
        let before = results.len();
        let pkg = Package {
            go,
            dir,
            env,
            limit,
            path: package,
            short: &short,
            log_dir,
        };
        run_package(&pkg, &mut results);
        eprintln!(
            "  {short}: {} tests in {:.0} s",
            results.len() - before,
            started.elapsed().as_secs_f64()
        );
    }
    results
}

/// Runs one test (`PKG.TestName` or `PKG.TestName/sub`, as `run_module` names them)
/// alone, its package's other tests and the test's other subtests left out; `None` when
/// it reported no result (hung, or no such test).
pub fn run_one(
    go: &Path,
    dir: &Path,
    env: &[(String, String)],
    limit: Duration,
    name: &str,
    log_dir: &Path,
) -> Option<TestResult> {
    let (short, test) = name.split_once('.')?;
    let path = if short == "pgx" {
        ".".to_string()
    } else {
        format!("./{short}")
    };
    let pkg = Package {
        go,
        dir,
        env,
        limit,
        path: &path,
        short,
        log_dir,
    };
    let mut results = Results::new();
    go_test(&pkg, Filter::Only(test), &mut results);
    results.remove(name)
}

/// `go test -run`'s pattern for exactly `test` (`Top/sub`: one pattern per level).
fn run_pattern(test: &str) -> String {
    test.split('/')
        .map(|level| {
            let quoted: String = level
                .chars()
                .flat_map(|c| {
                    let special = "\\.+*?()|[]{}^$".contains(c);
                    special.then_some('\\').into_iter().chain([c])
                })
                .collect();
            format!("^{quoted}$")
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// What one `go test -json` run of a package left.
#[derive(Default)]
struct Run {
    /// Test -> output lines so far.
    output: BTreeMap<String, Vec<String>>,
    /// Tests running now (not paused, not finished).
    running: BTreeSet<String>,
    /// Tests started and not finished (running or paused).
    unfinished: BTreeSet<String>,
    /// Output that belongs to no test (build errors, TestMain).
    package_output: Vec<String>,
    package_failed: bool,
}

/// Where to run a package's `go test`, with what.
struct Package<'a> {
    go: &'a Path,
    dir: &'a Path,
    env: &'a [(String, String)],
    limit: Duration,
    /// Its import path, and its name in test names.
    path: &'a str,
    short: &'a str,
    /// Where a failed test's output goes.
    log_dir: &'a Path,
}

/// Which tests of the package one run takes.
enum Filter<'a> {
    /// All but these top-level tests.
    Skip(&'a [String]),
    /// This test alone: a top-level test, or `Top/sub` (its subtest alone).
    Only(&'a str),
}

/// How a run ended: by itself, or killed after no progress, with the tests then running
/// that had no subtest left to wait for (a parent waits for its paused parallel
/// subtests while only two run at a time).
enum Ended {
    Finished,
    Hung(Vec<String>),
}

fn run_package(pkg: &Package, results: &mut Results) {
    let short = pkg.short;
    let secs = pkg.limit.as_secs();
    let hung =
        |what: &str| TestResult::fail(format!("no result for {secs} s (hung or slow) {what}"));
    let mut skip: Vec<String> = vec![];
    loop {
        let Ended::Hung(running) = go_test(pkg, Filter::Skip(&skip), results) else {
            return;
        };
        if running.is_empty() {
            results.insert(
                format!("{short}.(package)"),
                hung("outside any test (killed)"),
            );
            return;
        }
        // Tests running in parallel with a hung one look the same: each candidate runs
        // again alone, where only a test that hangs makes no progress.
        let mut tops: Vec<String> = running
            .iter()
            .map(|t| t.split('/').next().unwrap().to_string())
            .collect();
        tops.dedup();
        for top in &tops {
            if let Ended::Hung(running) = go_test(pkg, Filter::Only(top), results) {
                let running = if running.is_empty() {
                    vec![top.clone()]
                } else {
                    running
                };
                for t in running {
                    eprintln!("  {short}.{t}: hung (killed after {secs} s without progress)");
                    results.insert(format!("{short}.{t}"), hung("(killed)"));
                }
            }
        }
        // The next run leaves out those and the tests already finished.
        let prefix = format!("{short}.");
        let finished = results
            .keys()
            .filter_map(|k| k.strip_prefix(&prefix))
            .filter(|t| !t.contains('/'))
            .map(str::to_string);
        for top in finished.chain(tops).collect::<Vec<_>>() {
            if !skip.contains(&top) {
                skip.push(top);
            }
        }
    }
}

/// One `go test -json` run of the package, recording results as they come.
fn go_test(pkg: &Package, filter: Filter, results: &mut Results) -> Ended {
    let mut cmd = Command::new(pkg.go);
    cmd.args(["test", "-json", "-count=1", "-p", "1", "-timeout", "60m"])
        .current_dir(pkg.dir)
        .envs(pkg.env.iter().cloned())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        // Its own process group, so that a kill reaches the test binary too.
        .process_group(0);
    match filter {
        Filter::Skip([]) => {}
        Filter::Skip(skip) => {
            cmd.arg("-skip").arg(format!("^({})$", skip.join("|")));
        }
        Filter::Only(test) => {
            cmd.arg("-run").arg(run_pattern(test));
        }
    }
    cmd.arg(pkg.path);
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
        match rx.recv_timeout(pkg.limit) {
            Ok(line) => record_event(&line, pkg, &mut run, results),
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
    if hung {
        return Ended::Hung(
            run.running
                .iter()
                .filter(|t| {
                    !run.unfinished
                        .iter()
                        .any(|o| o.starts_with(&format!("{t}/")))
                })
                .cloned()
                .collect(),
        );
    }
    let prefix = format!("{}.", pkg.short);
    if run.package_failed && !results.keys().any(|k| k.starts_with(&prefix)) {
        let error = first_error_line(run.package_output.iter().map(String::as_str));
        results.insert(format!("{}.(package)", pkg.short), TestResult::fail(error));
    }
    Ended::Finished
}

/// Applies one `go test -json` event.
fn record_event(line: &str, pkg: &Package, run: &mut Run, results: &mut Results) {
    let short = pkg.short;
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
            run.unfinished.insert(test.clone());
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
            run.unfinished.remove(&test);
            let output = run.output.remove(&test).unwrap_or_default();
            let result = match action {
                "pass" => TestResult::pass(),
                "skip" => TestResult {
                    status: Status::Skip,
                    error: String::new(),
                },
                _ => {
                    let log = pkg
                        .log_dir
                        .join(format!("{short}.{}.log", test.replace('/', "_")));
                    let _ = std::fs::create_dir_all(pkg.log_dir);
                    let _ = std::fs::write(log, output.concat());
                    TestResult::fail(failure_line(&output))
                }
            };
            results.insert(format!("{short}.{test}"), result);
        }
        _ => {}
    }
}

/// The first error line of a failed Go test's output (its `=== RUN` / `--- FAIL` headers
/// and subtests' own lines aside).
fn failure_line(output: &[String]) -> String {
    let lines = output.iter().flat_map(|o| o.lines()).filter(|l| {
        let t = l.trim_start();
        !(t.starts_with("=== ") || t.starts_with("--- "))
    });
    first_error_line(lines)
}

#[cfg(test)]
mod tests {
    use super::run_pattern;

    #[test]
    fn run_pattern_takes_exactly_one_test() {
        assert_eq!(run_pattern("TestExec"), "^TestExec$");
        assert_eq!(
            run_pattern("TestExec/cache_describe"),
            "^TestExec$/^cache_describe$"
        );
        assert_eq!(run_pattern("TestX/a.b(c)"), r"^TestX$/^a\.b\(c\)$");
    }
}
