//! `citus_stat_statements`: calls of distributed statements counted per query shape
//! (pg_query's fingerprint and normalised text: constants as `$n`, as
//! pg_stat_statements shows them), user, database, executor and partition key (the
//! routed distribution value; NULL for statements over several shards).
//!
//! Counted only while the session's `citus.stat_statements_track` is `all` (Citus's
//! default is `none`): with it off the routed path pays one branch. A prepared
//! statement's shape is computed once, at its first counted execution
//! ([`PreparedText`]); the counters are a map cut in [`SHARDS`] mutexes by key hash, so
//! sessions on different threads rarely meet. At most `citus.stat_statements_max`
//! entries: a new one beyond it first evicts the least-called entry of its shard.
//! Each pgshard process counts its own statements.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A statement's shape: pg_stat_statements' `queryid` and `query`.
#[derive(Debug, PartialEq, Eq)]
pub struct Shape {
    pub queryid: i64,
    pub query: Arc<str>,
}

/// The shape of `text` (None when pg_query cannot read it).
pub fn shape_of(text: &str) -> Option<Arc<Shape>> {
    let fp = pg_query::fingerprint(text, 0, pg_query::FingerprintOptions::FULL_RELNAME).ok()?;
    let query = pg_query::normalize(text).unwrap_or_else(|_| text.to_string());
    Some(Arc::new(Shape {
        queryid: fp.value as i64,
        query: query.trim().into(),
    }))
}

/// A prepared statement's text (what `citus_stat_activity` shows while it runs) and
/// its shape, computed once, when first needed.
#[derive(Debug)]
pub struct PreparedText {
    pub text: Arc<str>,
    shape: OnceLock<Option<Arc<Shape>>>,
}

impl PreparedText {
    pub fn new(text: &str) -> Arc<PreparedText> {
        Arc::new(PreparedText {
            text: text.into(),
            shape: OnceLock::new(),
        })
    }

    pub fn shape(&self) -> Option<&Arc<Shape>> {
        self.shape.get_or_init(|| shape_of(&self.text)).as_ref()
    }
}

/// Citus's executor names (`citus_executor`).
pub const ADAPTIVE: &str = "adaptive";
pub const INSERT_SELECT: &str = "insert-select";

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    queryid: i64,
    user: Arc<str>,
    database: Arc<str>,
    executor: &'static str,
    partition_key: Option<String>,
}

struct Entry {
    query: Arc<str>,
    calls: u64,
}

/// How many mutexes the counters are cut in.
const SHARDS: usize = 16;

struct Counters {
    shards: [Mutex<HashMap<Key, Entry>>; SHARDS],
    entries: AtomicUsize,
    hasher: std::collections::hash_map::RandomState,
}

fn counters() -> &'static Counters {
    static C: OnceLock<Counters> = OnceLock::new();
    C.get_or_init(|| Counters {
        shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
        entries: AtomicUsize::new(0),
        hasher: Default::default(),
    })
}

/// Who runs a statement, as the counters key it.
#[derive(Debug, Clone)]
pub struct Runner {
    pub user: Arc<str>,
    pub database: Arc<str>,
    /// `citus.stat_statements_max`.
    pub max: usize,
}

/// One call of `shape`.
pub fn record(
    shape: &Shape,
    runner: &Runner,
    executor: &'static str,
    partition_key: Option<String>,
) {
    let c = counters();
    let key = Key {
        queryid: shape.queryid,
        user: runner.user.clone(),
        database: runner.database.clone(),
        executor,
        partition_key,
    };
    let shard = (c.hasher.hash_one(&key) as usize) % SHARDS;
    let mut map = c.shards[shard].lock().unwrap();
    if let Some(e) = map.get_mut(&key) {
        e.calls += 1;
        return;
    }
    if c.entries.load(Ordering::Relaxed) >= runner.max.max(1) {
        let least = map
            .iter()
            .min_by_key(|(_, e)| e.calls)
            .map(|(k, _)| k.clone());
        match least {
            Some(k) => {
                map.remove(&k);
                c.entries.fetch_sub(1, Ordering::Relaxed);
            }
            // Full with other shards' entries: this one is not kept.
            None => return,
        }
    }
    map.insert(
        key,
        Entry {
            query: shape.query.clone(),
            calls: 1,
        },
    );
    c.entries.fetch_add(1, Ordering::Relaxed);
}

/// One row of `citus_stat_statements`, names rather than oids (the view looks them up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub queryid: i64,
    pub user: String,
    pub database: String,
    pub query: String,
    pub executor: &'static str,
    pub partition_key: Option<String>,
    pub calls: u64,
}

/// Every counter now.
pub fn snapshot() -> Vec<Row> {
    let mut out = Vec::new();
    for shard in &counters().shards {
        for (k, e) in shard.lock().unwrap().iter() {
            out.push(Row {
                queryid: k.queryid,
                user: k.user.to_string(),
                database: k.database.to_string(),
                query: e.query.to_string(),
                executor: k.executor,
                partition_key: k.partition_key.clone(),
                calls: e.calls,
            });
        }
    }
    out
}

/// `citus_stat_statements_reset()`.
pub fn reset() {
    let c = counters();
    for shard in &c.shards {
        let mut map = shard.lock().unwrap();
        c.entries.fetch_sub(map.len(), Ordering::Relaxed);
        map.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_ignore_constants_but_not_tables() {
        let a = shape_of("SELECT v FROM st_12 WHERE k = 5").unwrap();
        let b = shape_of("select v from st_12 where k = 77").unwrap();
        let c = shape_of("SELECT v FROM st_34 WHERE k = 5").unwrap();
        assert_eq!(a.queryid, b.queryid);
        assert_ne!(a.queryid, c.queryid);
        assert_eq!(&*a.query, "SELECT v FROM st_12 WHERE k = $1");
        // A parameter is not a constant (pg_stat_statements tells them apart too).
        let p = PreparedText::new("SELECT v FROM st_12 WHERE k = $1");
        assert_eq!(
            &*p.shape().unwrap().query,
            "SELECT v FROM st_12 WHERE k = $1"
        );
    }
}
