//! Results of one suite on both targets, compared: every test that passes on plain
//! PostgreSQL and fails (or does not run) through pgshard is a difference; the
//! known-differences file names those not fixed yet, with their reason. Prints the lists
//! and writes them under the suite's results directory for later reading.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

/// How one test ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Pass,
    Fail,
    Skip,
}

#[derive(Debug, Clone)]
pub struct TestResult {
    pub status: Status,
    /// The failure's first meaningful line (empty when it passed).
    pub error: String,
}

impl TestResult {
    pub fn pass() -> Self {
        TestResult {
            status: Status::Pass,
            error: String::new(),
        }
    }
    pub fn fail(error: impl Into<String>) -> Self {
        TestResult {
            status: Status::Fail,
            error: error.into(),
        }
    }
}

/// Test name -> result, in name order.
pub type Results = BTreeMap<String, TestResult>;

/// The known-differences file: `SUITE TEST REASON...` per line, `#` comments.
pub const KNOWN_DIFFERENCES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/driver_suites/known_differences.txt"
);

/// The entries of `suite` in the known-differences file: test -> reason.
pub fn known_differences(suite: &str) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(KNOWN_DIFFERENCES)
        .unwrap_or_else(|e| panic!("reading {KNOWN_DIFFERENCES}: {e}"));
    let mut known = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.splitn(3, char::is_whitespace);
        let (Some(s), Some(test)) = (fields.next(), fields.next()) else {
            panic!(
                "{KNOWN_DIFFERENCES}:{}: expected `SUITE TEST REASON`",
                n + 1
            );
        };
        if s == suite {
            let reason = fields.next().unwrap_or("").trim().to_string();
            known.insert(test.to_string(), reason);
        }
    }
    known
}

/// What the comparison found.
pub struct Comparison {
    /// Tests that pass on both.
    pub passed_both: usize,
    /// Pass on PostgreSQL, fail through pgshard, listed: (test, reason, error).
    pub known: Vec<(String, String, String)>,
    /// Pass on PostgreSQL, fail through pgshard, not listed: (test, error).
    pub unlisted: Vec<(String, String)>,
    /// Not listed, failed in the suite's run through pgshard and passed when run again
    /// alone (timing, or a collision with another test): (test, first error). Not counted
    /// as failed, but shown.
    pub passed_alone: Vec<(String, String)>,
    /// Listed, but passing through pgshard now (or not passing on PostgreSQL).
    pub stale: Vec<String>,
    /// Tests that fail on PostgreSQL too (not differences).
    pub fail_both: usize,
    /// Fail on PostgreSQL, pass through pgshard.
    pub only_pgshard: Vec<String>,
}

/// Compares the two targets' results of `suite` with its known differences; `alone` holds
/// the unlisted differences that passed when run again alone through pgshard.
pub fn compare(
    suite: &str,
    postgres: &Results,
    pgshard: &Results,
    alone: &BTreeSet<String>,
) -> Comparison {
    let known = known_differences(suite);
    let mut c = Comparison {
        passed_both: 0,
        known: vec![],
        unlisted: vec![],
        passed_alone: vec![],
        stale: vec![],
        fail_both: 0,
        only_pgshard: vec![],
    };
    let names: BTreeSet<&String> = postgres.keys().chain(pgshard.keys()).collect();
    for name in names {
        let on_pg = postgres.get(name).map(|r| r.status);
        let through = pgshard.get(name);
        match (on_pg, through.map(|r| r.status)) {
            (Some(Status::Pass), Some(Status::Pass)) => c.passed_both += 1,
            (Some(Status::Pass), _) => {
                let error = match through {
                    Some(r) if r.status == Status::Fail => r.error.clone(),
                    Some(_) => "skipped through pgshard".to_string(),
                    None => "did not run through pgshard".to_string(),
                };
                match known.get(name.as_str()) {
                    Some(reason) => c.known.push((name.clone(), reason.clone(), error)),
                    None => c.unlisted.push((name.clone(), error)),
                }
            }
            (Some(Status::Fail), Some(Status::Fail)) | (Some(Status::Fail), None) => {
                c.fail_both += 1
            }
            (Some(Status::Fail), Some(Status::Pass)) | (None, Some(Status::Pass)) => {
                c.only_pgshard.push(name.clone())
            }
            _ => {}
        }
    }
    // A Go test fails with its subtests: only the innermost ones count.
    let all: Vec<String> = c
        .known
        .iter()
        .map(|(t, _, _)| t.clone())
        .chain(c.unlisted.iter().map(|(t, _)| t.clone()))
        .collect();
    let is_parent = |t: &str| all.iter().any(|o| o.starts_with(&format!("{t}/")));
    c.known.retain(|(t, _, _)| !is_parent(t));
    c.unlisted.retain(|(t, _)| !is_parent(t));
    let (again, unlisted) = c.unlisted.into_iter().partition(|(t, _)| alone.contains(t));
    c.passed_alone = again;
    c.unlisted = unlisted;
    let differing: BTreeSet<&str> = all.iter().map(String::as_str).collect();
    c.stale = known
        .keys()
        .filter(|t| !differing.contains(t.as_str()))
        .cloned()
        .collect();
    c
}

fn count(results: &Results, status: Status) -> usize {
    results.values().filter(|r| r.status == status).count()
}

/// The report of `suite` as text; its last line is `SUITE: N passed, M failed` (N: pass on
/// both, M: unlisted differences that failed again when run alone).
pub fn render(suite: &str, postgres: &Results, pgshard: &Results, c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "== {suite}: {} tests; PostgreSQL: {} pass, {} fail, {} skip; pgshard: {} pass, {} fail, {} skip",
        postgres.len().max(pgshard.len()),
        count(postgres, Status::Pass),
        count(postgres, Status::Fail),
        count(postgres, Status::Skip),
        count(pgshard, Status::Pass),
        count(pgshard, Status::Fail),
        count(pgshard, Status::Skip),
    );
    let _ = writeln!(
        out,
        "{suite}: {} fail on PostgreSQL too (not differences); {} pass only through pgshard",
        c.fail_both,
        c.only_pgshard.len()
    );
    let _ = writeln!(
        out,
        "-- {suite}: {} known differences (pass on PostgreSQL, fail through pgshard; listed in tests/driver_suites/known_differences.txt)",
        c.known.len()
    );
    let mut by_cause: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, reason, _) in &c.known {
        *by_cause
            .entry(reason.split_whitespace().next().unwrap_or(""))
            .or_default() += 1;
    }
    let mut by_cause: Vec<(&str, usize)> = by_cause.into_iter().collect();
    by_cause.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    if !by_cause.is_empty() {
        let causes: Vec<String> = by_cause.iter().map(|(r, n)| format!("{r} {n}")).collect();
        let _ = writeln!(out, "   by cause: {}", causes.join(", "));
    }
    for (test, reason, error) in &c.known {
        let _ = writeln!(out, "  {test}  [{reason}]\n      {}", short(error));
    }
    let _ = writeln!(
        out,
        "-- {suite}: {} NEW differences (pass on PostgreSQL, fail through pgshard; not listed)",
        c.unlisted.len()
    );
    for (test, error) in &c.unlisted {
        let _ = writeln!(out, "  {test}\n      {}", short(error));
    }
    if !c.passed_alone.is_empty() {
        let _ = writeln!(
            out,
            "-- {suite}: {} unlisted differences that passed when run again alone through pgshard (not counted; flaky?)",
            c.passed_alone.len()
        );
        for (test, error) in &c.passed_alone {
            let _ = writeln!(out, "  {test}\n      first run: {}", short(error));
        }
    }
    if !c.stale.is_empty() {
        let _ = writeln!(
            out,
            "-- {suite}: {} listed tests that no longer differ (remove them from the list)",
            c.stale.len()
        );
        for test in &c.stale {
            let _ = writeln!(out, "  {test}");
        }
    }
    let _ = writeln!(
        out,
        "{suite}: {} passed, {} failed",
        c.passed_both,
        c.unlisted.len()
    );
    out
}

/// One line of at most 240 characters.
fn short(error: &str) -> String {
    let line = error.lines().next().unwrap_or("").trim();
    if line.chars().count() > 240 {
        format!("{}...", line.chars().take(240).collect::<String>())
    } else {
        line.to_string()
    }
}

/// Writes one target's results as `STATUS<TAB>TEST<TAB>ERROR` lines.
pub fn write_results(path: &Path, results: &Results) {
    let mut text = String::new();
    for (name, r) in results {
        let status = match r.status {
            Status::Pass => "pass",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        };
        let _ = writeln!(text, "{status}\t{name}\t{}", short(&r.error));
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// The first line that says what went wrong in a failure's output: the line after
/// testify's `Error:` label, else the first line naming an error, else the first line.
pub fn first_error_line<'a>(lines: impl IntoIterator<Item = &'a str>) -> String {
    let lines: Vec<&str> = lines
        .into_iter()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    for (i, l) in lines.iter().enumerate() {
        if let Some(rest) = l.strip_prefix("Error:") {
            let rest = rest.trim();
            let next = lines.get(i + 1).copied().unwrap_or("");
            return if next.is_empty() || next.contains(':') && next.ends_with(':') {
                rest.to_string()
            } else {
                format!("{rest} {next}")
            };
        }
    }
    let named = lines.iter().find(|l| {
        let lower = l.to_ascii_lowercase();
        lower.contains("error") || lower.contains("assert") || lower.contains("sqlstate")
    });
    named
        .or(lines.first())
        .map(|l| l.to_string())
        .unwrap_or_default()
}
