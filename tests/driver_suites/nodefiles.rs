//! Runs node-postgres's integration tests the way its Makefile does, one `node FILE` per
//! `test/integration/**/*-tests.js`, each under a time limit; a file passes when node
//! exits 0. The suite's runner stops a file at its first failing test and prints
//! `NAME FAILED!` and the error's stack on stdout.

use crate::report::{first_error_line, Results, TestResult};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Every integration test file of the `pg` package in `package_dir`, by path relative to
/// `test/integration`; each file's stdout and stderr go to `log_dir`.
pub fn run_files(
    package_dir: &Path,
    env: &[(String, String)],
    limit: Duration,
    log_dir: &Path,
) -> Results {
    let root = package_dir.join("test/integration");
    let mut files = vec![];
    collect(&root, &mut files);
    files.sort();
    let mut results = Results::new();
    for file in files {
        let name = file
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let started = Instant::now();
        let log = log_dir.join(name.replace('/', "_"));
        let result = run_file(package_dir, &file, env, limit, &log);
        eprintln!(
            "  {name}: {} in {:.1} s",
            if result.error.is_empty() {
                "ok"
            } else {
                "FAILED"
            },
            started.elapsed().as_secs_f64()
        );
        results.insert(name, result);
    }
    results
}

/// Runs one test file (`name` relative to `test/integration`, as `run_files` names it)
/// again, its output into `log_dir`.
pub fn run_one(
    package_dir: &Path,
    name: &str,
    env: &[(String, String)],
    limit: Duration,
    log_dir: &Path,
) -> TestResult {
    let file = package_dir.join("test/integration").join(name);
    run_file(
        package_dir,
        &file,
        env,
        limit,
        &log_dir.join(name.replace('/', "_")),
    )
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.to_string_lossy().ends_with("-tests.js") {
            files.push(path);
        }
    }
}

fn run_file(
    package_dir: &Path,
    file: &Path,
    env: &[(String, String)],
    limit: Duration,
    log: &Path,
) -> TestResult {
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    let out_path = log.with_extension("stdout");
    let err_path = log.with_extension("stderr");
    let mut child = Command::new("node")
        .arg(file)
        .current_dir(package_dir)
        .envs(env.iter().cloned())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .process_group(0)
        .spawn()
        .expect("node");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > limit {
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    match status {
        Some(s) if s.success() => TestResult::pass(),
        Some(s) => TestResult::fail(failure_line(&stdout, &stderr, &format!("exit {s}"))),
        None => TestResult::fail(format!(
            "hung: not finished after {} s (killed); last output: {}",
            limit.as_secs(),
            stdout
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
        )),
    }
}

/// `TEST NAME: first error line` from the runner's `FAILED!` report; else the first error
/// line after the last passed test's `✔` on stdout (an uncaught error or failed
/// assertion), with an assertion's `+ actual` / `- expected` lines; else stderr's, less
/// node's deprecation warnings.
fn failure_line(stdout: &str, stderr: &str, fallback: &str) -> String {
    if let Some(at) = stdout.find("FAILED!") {
        let name = stdout[..at].lines().last().unwrap_or("").trim();
        let error = first_error_line(stdout[at + "FAILED!".len()..].lines());
        return format!("{name}: {error}");
    }
    let tail = &stdout[stdout.rfind('✔').map_or(0, |i| i + '✔'.len_utf8())..];
    let lines: Vec<&str> = tail
        .lines()
        .filter(|l| !l.trim_start().starts_with("at "))
        .collect();
    let mut error = first_error_line(lines.iter().copied());
    let diff = |sign: &str| {
        lines
            .iter()
            .map(|l| l.trim())
            .find(|l| l.starts_with(sign) && !l.ends_with("expected"))
    };
    if let (Some(actual), Some(expected)) = (diff("+ "), diff("- ")) {
        error = format!("{error} {actual} {expected}");
    }
    if !error.is_empty() {
        return error;
    }
    let stderr = stderr
        .lines()
        .filter(|l| !(l.contains("DeprecationWarning") || l.starts_with("(Use `node")));
    let error = first_error_line(stderr);
    if error.is_empty() {
        fallback.to_string()
    } else {
        error
    }
}
