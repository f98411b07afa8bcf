//! What each client session of this process is doing, for `citus_stat_activity` /
//! `citus_dist_stat_activity`: its current (or last) statement, its state, and when
//! the statement and its transaction began. One small record per session, updated
//! when a statement starts and when the session is ready for the next one (an
//! uncontended lock, no allocation for a prepared statement's text).

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// PostgreSQL's `pg_stat_activity.state` values a client session can be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Active,
    Idle,
    IdleInTransaction,
    IdleInFailedTransaction,
}

impl State {
    pub fn label(self) -> &'static str {
        match self {
            State::Active => "active",
            State::Idle => "idle",
            State::IdleInTransaction => "idle in transaction",
            State::IdleInFailedTransaction => "idle in transaction (aborted)",
        }
    }
}

/// One session's activity.
#[derive(Debug, Clone)]
pub struct Activity {
    pub query: Arc<str>,
    pub state: State,
    pub query_start: Option<SystemTime>,
    pub state_change: SystemTime,
    /// When its transaction block (or the implicit transaction of the running
    /// statement) began.
    pub xact_start: Option<SystemTime>,
}

impl Default for Activity {
    fn default() -> Activity {
        Activity {
            query: "".into(),
            state: State::Idle,
            query_start: None,
            state_change: SystemTime::now(),
            xact_start: None,
        }
    }
}

/// A session's activity, shared with the views that read it.
pub type SessionActivity = Arc<Mutex<Activity>>;

/// A statement (or a whole query string) starts.
pub fn started(a: &SessionActivity, query: Arc<str>) {
    let now = SystemTime::now();
    let mut a = a.lock().unwrap();
    a.query = query;
    a.state = State::Active;
    a.query_start = Some(now);
    a.state_change = now;
    if a.xact_start.is_none() {
        a.xact_start = Some(now);
    }
}

/// The session is ready for its next statement: `in_block` (and `failed`) tell its
/// transaction state.
pub fn ready(a: &SessionActivity, in_block: bool, failed: bool) {
    let mut a = a.lock().unwrap();
    let state = match (in_block, failed) {
        (_, true) => State::IdleInFailedTransaction,
        (true, false) => State::IdleInTransaction,
        (false, false) => State::Idle,
    };
    if a.state == state {
        return;
    }
    a.state = state;
    a.state_change = SystemTime::now();
    if state == State::Idle {
        a.xact_start = None;
    }
}
