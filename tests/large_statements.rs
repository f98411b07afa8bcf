//! Huge statements on a distributed table answer exactly in bounded memory.
//!
//! A 20,000-term OR chain (on the distribution column and on another column) and a
//! 100,000-element IN list (also as `= ANY(ARRAY[...])` and `= ANY('{...}')`) over a
//! table of 200,000 rows in 32 shards on 2 workers: the rows must equal one plain
//! PostgreSQL's, and while each statement runs the peak memory (VmHWM) of pgshard and
//! of every backend of the workers must stay under 500 MB. A node's task used to be
//! the `UNION ALL` of its 16 shards' statements, each with the whole WHERE clause,
//! planned and JIT-compiled at once: 4.8 GB for the OR chain. The plain PostgreSQL
//! runs with `jit = off`: with JIT it spends minutes in LLVM on such an expression
//! itself (the answer is the same either way).

mod common;

use common::{cluster, plain_postgres};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio_postgres::{Client, SimpleQueryMessage};

const LIMIT_KB: u64 = 500 * 1024;

const SETUP: &str = "
DROP TABLE IF EXISTS big;
CREATE TABLE big (k int PRIMARY KEY, v int, w text);
INSERT INTO big SELECT i, i % 1000, md5(i::text) FROM generate_series(1, 200000) AS s(i);
";

/// Serializes the tests (one huge statement at a time on the 2 shared cores, each
/// memory measurement its own) and creates the table once.
static ONE_AT_A_TIME: tokio::sync::Mutex<bool> = tokio::sync::Mutex::const_new(false);

async fn clients() -> (Client, Client) {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    plain.batch_execute("SET jit = off").await.unwrap();
    (shard, plain)
}

async fn setup(shard: &Client, plain: &Client) {
    plain.batch_execute(SETUP).await.unwrap();
    shard.batch_execute(SETUP).await.unwrap();
    for sql in [
        "SET citus.shard_count = 32",
        "SELECT create_distributed_table('big', 'k')",
        "ANALYZE big",
    ] {
        shard.batch_execute(sql).await.unwrap();
    }
    plain.batch_execute("ANALYZE big").await.unwrap();
}

fn vm_hwm_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn pid_in(file: &Path) -> u32 {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
    text.lines().next().unwrap().trim().parse().unwrap()
}

/// The processes whose parent is `parent` (a worker's backends and parallel workers).
fn children(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold blanks and parentheses.
        let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
        if after.split_whitespace().nth(1).and_then(|p| p.parse().ok()) == Some(parent) {
            out.push(pid);
        }
    }
    out
}

/// Peak memory while a statement runs: the highest VmHWM of any worker's backend
/// (sampled every 20 ms, so parallel workers that live longer than that count too),
/// and pgshard's own VmHWM.
struct Peaks {
    stop: Arc<AtomicBool>,
    sampler: std::thread::JoinHandle<u64>,
    pgshard: u32,
}

impl Peaks {
    fn start() -> Peaks {
        let dir = &cluster().dir;
        let postmasters: Vec<u32> = ["worker1", "worker2"]
            .iter()
            .map(|w| pid_in(&dir.join(w).join("postmaster.pid")))
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let sampler = std::thread::spawn(move || {
            let mut peak = 0;
            loop {
                for pm in &postmasters {
                    for pid in children(*pm) {
                        peak = peak.max(vm_hwm_kb(pid).unwrap_or(0));
                    }
                }
                if flag.load(Ordering::Relaxed) {
                    return peak;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        });
        Peaks {
            stop,
            sampler,
            pgshard: pid_in(&dir.join("pgshard.pid")),
        }
    }

    /// (worker backends' peak, pgshard's peak) in kB.
    fn finish(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let workers = self.sampler.join().unwrap();
        (workers, vm_hwm_kb(self.pgshard).unwrap())
    }
}

async fn rows(c: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    let mut out = Vec::new();
    let msgs = c
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{}...: {e:?}", &sql[..200.min(sql.len())]));
    for m in msgs {
        if let SimpleQueryMessage::Row(r) = m {
            out.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect());
        }
    }
    out
}

/// Runs each statement on pgshard (memory watched) and on the plain PostgreSQL.
async fn same_answer_in_bounded_memory(what: &str, statements: &[String]) {
    let mut done = ONE_AT_A_TIME.lock().await;
    let (shard, plain) = clients().await;
    if !*done {
        setup(&shard, &plain).await;
        *done = true;
    }
    for sql in statements {
        let peaks = Peaks::start();
        let started = std::time::Instant::now();
        let got = rows(&shard, sql).await;
        let took = started.elapsed();
        let (workers_kb, pgshard_kb) = peaks.finish();
        let want = rows(&plain, sql).await;
        eprintln!(
            "{what} ({} bytes): {took:?}, worker backends' peak {} MB, pgshard's {} MB",
            sql.len(),
            workers_kb / 1024,
            pgshard_kb / 1024
        );
        assert_eq!(got, want, "{what}: {}...", &sql[..200]);
        assert!(!want.is_empty());
        assert!(
            workers_kb < LIMIT_KB,
            "{what}: a worker backend reached {workers_kb} kB"
        );
        assert!(
            pgshard_kb < LIMIT_KB,
            "{what}: pgshard reached {pgshard_kb} kB"
        );
    }
}

fn or_chain(column: &str, terms: usize, step: usize) -> String {
    (1..=terms)
        .map(|i| format!("{column} = {}", i * step))
        .collect::<Vec<_>>()
        .join(" OR ")
}

fn list(elements: usize) -> String {
    (1..=elements)
        .map(|i| (i * 2).to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn or_chain_on_the_distribution_column() {
    let chain = or_chain("k", 20_000, 7);
    same_answer_in_bounded_memory(
        "20,000-term OR chain on k",
        &[format!("SELECT count(*), sum(v) FROM big WHERE {chain}")],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn or_chain_on_another_column() {
    let chain = or_chain("v", 20_000, 1);
    same_answer_in_bounded_memory(
        "20,000-term OR chain on v",
        &[
            format!("SELECT count(*) FROM big WHERE {chain}"),
            // Grouped: the combine step on the coordinator node, shards' rows read
            // under the same WHERE.
            format!("SELECT v % 3, count(*) FROM big WHERE {chain} GROUP BY 1 ORDER BY 1"),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_list_of_100000_elements() {
    let l = list(100_000);
    same_answer_in_bounded_memory(
        "100,000-element IN list",
        &[
            format!("SELECT count(*) FROM big WHERE k IN ({l})"),
            format!("SELECT count(*), max(w) FROM big WHERE k = ANY(ARRAY[{l}])"),
            format!("SELECT count(*) FROM big WHERE k = ANY('{{{l}}}')"),
        ],
    )
    .await;
}
