//! `statement_timeout` while the client pauses inside an extended-protocol batch.
//!
//! PostgreSQL starts a statement's timer at the first message after Sync (and again
//! after each completed Execute) and stops it at Sync, so a client that sends Parse
//! and waits before its Describe gets 57014 "canceling statement due to statement
//! timeout" once the timeout passes. pgshard sends a statement to the node with what
//! follows it (or describes it at once with a Sync of its own), so the node's timer
//! never sees the pause: pgshard keeps the same clock itself, from the session's
//! recorded `SET statement_timeout`, and fails the first message that arrives after
//! the timeout passed; the rest of the batch is skipped up to Sync, as PostgreSQL
//! skips it (tests/extended_protocol.rs compares the answers). Not followed: a
//! `statement_timeout` from the role's or database's defaults, `SET LOCAL`,
//! `set_config`.

use super::*;
use pg_query::protobuf::{a_const::Val, VariableSetKind};
use pg_query::NodeEnum as N;
use std::time::Instant;

/// The session's clock of PostgreSQL's statement timer between messages.
#[derive(Default)]
pub(super) struct BatchClock {
    /// The settings fingerprint `timeout_ms` was read for.
    fingerprint: Option<u64>,
    timeout_ms: u64,
    /// When the current timer started: the batch's first message, or the first one
    /// after a completed Execute.
    started: Option<Instant>,
}

impl Session {
    /// For an extended-protocol message just arrived: whether the statement
    /// timeout passed since the timer started (the message then fails with 57014).
    pub(super) fn timed_out_between_messages(&mut self) -> bool {
        let fp = self.settings_fp;
        let clock = &mut self.batch_clock;
        if clock.fingerprint != Some(fp) {
            clock.fingerprint = Some(fp);
            clock.timeout_ms = statement_timeout_ms(&self.settings);
        }
        if clock.timeout_ms == 0 {
            return false;
        }
        let now = Instant::now();
        let started = *clock.started.get_or_insert(now);
        now.duration_since(started).as_millis() as u64 > clock.timeout_ms
    }

    /// Sync, a simple Query or a completed Execute: PostgreSQL's timer stops.
    pub(super) fn stop_batch_clock(&mut self) {
        self.batch_clock.started = None;
    }
}

/// PostgreSQL's error of an expired statement timeout.
pub(super) fn statement_timeout_error() -> PgError {
    PgError::new(
        sqlstate::QUERY_CANCELED,
        "canceling statement due to statement timeout",
    )
}

/// `statement_timeout` in milliseconds as the session's recorded SET / RESET
/// statements leave it (the latest one wins; none: 0, no timeout).
fn statement_timeout_ms(settings: &[String]) -> u64 {
    settings
        .iter()
        .rev()
        .find_map(|t| timeout_set_by(t))
        .unwrap_or(0)
}

/// The value a `SET statement_timeout ...` / `RESET statement_timeout` statement gives
/// it, in milliseconds; None for a statement of another variable.
fn timeout_set_by(text: &str) -> Option<u64> {
    let tree = pg_query::parse(text, 0).ok()?;
    tree.protobuf.stmts.iter().rev().find_map(|s| {
        let N::VariableSetStmt(v) = s.stmt.as_ref()?.node.as_ref()? else {
            return None;
        };
        if !v.name.eq_ignore_ascii_case("statement_timeout") {
            return None;
        }
        if v.kind != VariableSetKind::VarSetValue as i32 {
            return Some(0);
        }
        let N::AConst(c) = v.args.first()?.node.as_ref()? else {
            return Some(0);
        };
        Some(match c.val.as_ref() {
            Some(Val::Ival(i)) => i.ival.max(0) as u64,
            Some(Val::Fval(f)) => f
                .fval
                .parse::<f64>()
                .map(|v| v.max(0.0) as u64)
                .unwrap_or(0),
            Some(Val::Sval(s)) => duration_ms(&s.sval).unwrap_or(0),
            _ => 0,
        })
    })
}

/// A time setting's text (`'100ms'`, `'1.5s'`, `'2min'`, `250`) in milliseconds, with
/// PostgreSQL's units.
fn duration_ms(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(t.len());
    let value: f64 = t[..split].parse().ok()?;
    let per_unit = match t[split..].trim() {
        "" | "ms" => 1.0,
        "us" => 0.001,
        "s" => 1_000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return None,
    };
    Some((value * per_unit).max(0.0).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statement_timeouts_read_as_postgresql_reads_them() {
        let s =
            |v: &[&str]| statement_timeout_ms(&v.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert_eq!(s(&[]), 0);
        assert_eq!(s(&["set statement_timeout = '100ms'"]), 100);
        assert_eq!(s(&["SET statement_timeout TO 250"]), 250);
        assert_eq!(s(&["SET \"statement_timeout\" TO '1.5s'"]), 1500);
        assert_eq!(
            s(&["SET statement_timeout = '2min'", "SET datestyle = 'ISO'"]),
            120_000
        );
        assert_eq!(
            s(&[
                "SET statement_timeout = '1s'",
                "set statement_timeout = default"
            ]),
            0
        );
        assert_eq!(
            s(&["SET statement_timeout = '1s'", "RESET statement_timeout"]),
            0
        );
        assert_eq!(s(&["SET lock_timeout = '1s'"]), 0);
    }
}
