//! No session state crosses from one client to another through shared node
//! connections.
//!
//! Worker connections (and pgshard's private coordinator-node connections for combine
//! steps) are pooled per node and role, and pipelined connections (`backend::mux`)
//! are shared by a thread's sessions of one role: clients take turns on them. Their
//! settings are brought to each session's before use, but a function called in a
//! statement can leave other state on a connection: `set_config(.., false)`, session
//! advisory locks, a sequence's `currval`, a dblink connection, anything a user
//! function does (SET, temporary tables, LISTEN, PREPARE inside PL/pgSQL...). On
//! PostgreSQL that state belongs to the session that made it.
//!
//! So before a statement that reaches node connections other than the client's home
//! connection runs, its text is checked (`calls_in`): a call of a built-in function
//! that keeps session state (`leaves_session_state`) or of any function PostgreSQL
//! does not ship (`pg_proc` oid at or above FirstNormalObjectId, looked up by name:
//! a user function's body is opaque to pgshard, whatever its volatility) *pins* the
//! session: from then on it uses pools of its own (`Pools::own_pool`) on every node,
//! sharing the node's slots but never handing a connection to another session, and
//! it no longer uses pipelined connections. Its connections close when the session
//! ends (PostgreSQL then drops their locks, temporary tables and settings) or at its
//! `DISCARD ALL`. Sessions that never call such a function, nearly all of them,
//! keep sharing connections at no extra cost: the check is a scan of the text for
//! `name(`, made once per prepared statement, or per simple query that has a `(`.
//!
//! Not covered: functions reached without a call in the text (a user-defined
//! operator, cast or type input function, a trigger on a shard).

use super::*;

/// A token of a statement's text, as far as finding function calls needs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A name: lower-cased, or as written when double-quoted.
    Word(String),
    Punct(u8),
    /// A plain string constant, its value.
    Str(String),
    /// A constant, parameter or anything else.
    Other,
}

fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

/// The end of a quoted string or name opened at `at` (the text's end if unterminated).
fn quoted_end(b: &[u8], at: usize, quote: u8, backslash: bool) -> usize {
    crate::sql::clauses::string_end(b, at, quote, backslash).unwrap_or(b.len())
}

/// The statement's tokens, comments and whitespace left out.
fn tokens(text: &str) -> Vec<Token> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'-' && b.get(i + 1) == Some(&b'-') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == b'\'' {
            let end = quoted_end(b, i, b'\'', false);
            let inner = &text[i + 1..end.saturating_sub(1).max(i + 1)];
            out.push(Token::Str(inner.replace("''", "'")));
            i = end;
        } else if c == b'"' {
            let end = quoted_end(b, i, b'"', false);
            let inner = &text[i + 1..end.saturating_sub(1).max(i + 1)];
            out.push(Token::Word(inner.replace("\"\"", "\"")));
            i = end;
        } else if c == b'$' {
            let mut j = i + 1;
            while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                j += 1;
            }
            if b.get(j) == Some(&b'$') && !b[i + 1..j].first().is_some_and(u8::is_ascii_digit) {
                // A dollar-quoted string: up to the same tag.
                let tag = &text[i..=j];
                i = text[j + 1..]
                    .find(tag)
                    .map(|at| j + 1 + at + tag.len())
                    .unwrap_or(b.len());
            } else {
                // A parameter ($1).
                i = j.max(i + 1);
            }
            out.push(Token::Other);
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_') {
                i += 1;
            }
            out.push(Token::Other);
        } else if is_ident_byte(c) {
            let start = i;
            while i < b.len() && is_ident_byte(b[i]) {
                i += 1;
            }
            let word = &text[start..i];
            if b.get(i) == Some(&b'\'') && word.eq_ignore_ascii_case("e") {
                i = quoted_end(b, i, b'\'', true);
                out.push(Token::Other);
            } else {
                out.push(Token::Word(word.to_ascii_lowercase()));
            }
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

/// Words followed by `(` that are never function names.
const NOT_CALLS: &[&str] = &[
    "all", "and", "any", "array", "as", "between", "by", "exists", "filter", "from", "in", "is",
    "not", "on", "or", "over", "row", "select", "some", "using", "values", "when", "where", "with",
    "within", "then", "else", "conflict", "lateral", "join",
];

/// Whether a call of built-in function `name` (its arguments' tokens, split at their
/// top-level commas) can leave state in the session that runs it.
fn leaves_session_state(name: &str, args: &[Vec<Token>]) -> bool {
    match name {
        // set_config(name, value, is_local): state unless is_local is plainly true.
        "set_config" => args.get(2).map(|a| a.as_slice()) != Some(&[Token::Word("true".into())]),
        // A sequence's value for currval/lastval.
        "nextval" | "setval" => true,
        "pg_replication_origin_session_setup" => true,
        // Session-level advisory locks, and unlocks that on a shared connection would
        // release another session's.
        n if n.starts_with("pg_advisory") || n.starts_with("pg_try_advisory") => {
            !n.contains("_xact_")
        }
        n => n.starts_with("dblink"),
    }
}

/// The function calls of a statement's text: the names called (without schema) and
/// whether one of them is known to leave session state.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Calls {
    pub names: Vec<String>,
    pub leave_state: bool,
}

pub(super) fn calls_in(text: &str) -> Calls {
    let mut calls = Calls::default();
    if !text.contains('(') {
        return calls;
    }
    let toks = tokens(text);
    for k in 0..toks.len().saturating_sub(1) {
        let (Token::Word(name), Token::Punct(b'(')) = (&toks[k], &toks[k + 1]) else {
            continue;
        };
        // `INSERT INTO t (cols)`, `AS t (cols)`, `FROM f() t (cols)`: not calls.
        let not_a_call = match k.checked_sub(1).map(|p| &toks[p]) {
            Some(Token::Word(w)) => matches!(w.as_str(), "into" | "as" | "table" | "only"),
            Some(Token::Punct(b')')) => true,
            _ => false,
        };
        if not_a_call || NOT_CALLS.contains(&name.as_str()) {
            continue;
        }
        if leaves_session_state(name, &arguments(&toks[k + 2..])) {
            calls.leave_state = true;
        }
        if !calls.names.contains(name) {
            calls.names.push(name.clone());
        }
    }
    calls
}

/// The top-level arguments of a call whose tokens after `(` are `rest`.
fn arguments(rest: &[Token]) -> Vec<Vec<Token>> {
    let mut args = vec![Vec::new()];
    let mut depth = 0usize;
    for t in rest {
        match t {
            Token::Punct(b'(' | b'[') => depth += 1,
            Token::Punct(b')' | b']') if depth == 0 => break,
            Token::Punct(b')' | b']') => depth -= 1,
            Token::Punct(b',') if depth == 0 => {
                args.push(Vec::new());
                continue;
            }
            _ => {}
        }
        args.last_mut()
            .expect("one argument at least")
            .push(t.clone());
    }
    args
}

/// The `set_config(name, value, is_local)` calls of a statement's text whose name is
/// a string constant and `is_local` the constant true or false: (name, is_local).
pub(super) fn set_config_calls(text: &str) -> Vec<(String, bool)> {
    if !text.contains("set_config") && !text.to_ascii_lowercase().contains("set_config") {
        return Vec::new();
    }
    let toks = tokens(text);
    let mut out = Vec::new();
    for k in 0..toks.len().saturating_sub(1) {
        if toks[k] != Token::Word("set_config".into()) || toks[k + 1] != Token::Punct(b'(') {
            continue;
        }
        let args = arguments(&toks[k + 2..]);
        let (Some([Token::Str(name)]), Some([Token::Word(local)])) = (
            args.first().map(Vec::as_slice),
            args.get(2).map(Vec::as_slice),
        ) else {
            continue;
        };
        if local == "true" || local == "false" {
            out.push((name.clone(), local == "true"));
        }
    }
    out
}

/// Whether a plan runs the client's text on connections other than its home
/// connection (worker connections, combine steps, pipelined reads).
fn reaches_shared_connections(plan: &Plan) -> bool {
    !matches!(
        plan,
        Plan::Session(_)
            | Plan::Unsupported(_)
            | Plan::Local
            | Plan::Utility { .. }
            | Plan::UtilityInline { .. }
            | Plan::Role(_)
            | Plan::Grant(_)
            | Plan::Ddl(_)
            | Plan::DropTables { .. }
            | Plan::DropIndexes { .. }
            | Plan::Propagate(_)
    )
}

/// Whether a statement creates, replaces or removes functions (what
/// `Shared::function_kinds` caches).
fn changes_functions(stmt: &Statement) -> bool {
    use pg_query::NodeEnum as N;
    match &stmt.node {
        Some(N::CreateFunctionStmt(_))
        | Some(N::AlterFunctionStmt(_))
        | Some(N::CreateExtensionStmt(_))
        | Some(N::AlterExtensionStmt(_))
        | Some(N::AlterExtensionContentsStmt(_)) => true,
        Some(N::RenameStmt(r)) => matches!(
            r.rename_type(),
            pg_query::protobuf::ObjectType::ObjectFunction
                | pg_query::protobuf::ObjectType::ObjectProcedure
                | pg_query::protobuf::ObjectType::ObjectRoutine
        ),
        Some(N::AlterObjectSchemaStmt(r)) => matches!(
            r.object_type(),
            pg_query::protobuf::ObjectType::ObjectFunction
                | pg_query::protobuf::ObjectType::ObjectProcedure
                | pg_query::protobuf::ObjectType::ObjectRoutine
        ),
        Some(N::DropStmt(d)) => matches!(
            d.remove_type(),
            pg_query::protobuf::ObjectType::ObjectFunction
                | pg_query::protobuf::ObjectType::ObjectProcedure
                | pg_query::protobuf::ObjectType::ObjectRoutine
                | pg_query::protobuf::ObjectType::ObjectExtension
        ),
        _ => false,
    }
}

impl Session {
    /// Before `stmt` runs as `plan`: pins the session to connections of its own if the
    /// statement may leave session state on a shared connection. True if it may.
    pub(super) async fn isolate_if_stateful(
        &mut self,
        stmt: &Statement,
        plan: &Plan,
    ) -> PgResult<bool> {
        if changes_functions(stmt) {
            self.shared.function_kinds.lock().unwrap().clear();
        }
        if !reaches_shared_connections(plan) {
            return Ok(false);
        }
        let calls = calls_in(&stmt.text);
        if calls.names.is_empty() {
            return Ok(false);
        }
        if self.is_pinned() {
            return Ok(true);
        }
        let stateful = calls.leave_state
            || self
                .function_kinds(&calls.names)
                .await?
                .iter()
                .any(|k| k.is_some_and(|k| k.user_defined));
        if stateful {
            self.pin_to_own_connections();
        }
        Ok(stateful)
    }

    /// Whether the session uses node connections of its own only.
    pub(super) fn is_pinned(&self) -> bool {
        self.own_pools.lock().unwrap().is_some()
    }

    /// From now on, every pooled connection the session takes is its own; those it
    /// holds now (inside a block) stay its own when released.
    fn pin_to_own_connections(&mut self) {
        let mut own = HashMap::new();
        for h in self.tx.held.iter_mut() {
            if h.conn.addr == self.shared.coordinator {
                // The home connection: the session's alone already.
                continue;
            }
            let pool = own
                .entry(h.conn.addr.clone())
                .or_insert_with(|| self.shared.pools.own_pool(&h.conn.addr, &self.creds))
                .clone();
            h.conn.move_to(pool);
        }
        tracing::debug!(
            "session of role {} pinned to node connections of its own",
            self.creds.user
        );
        *self.own_pools.lock().unwrap() = Some(own);
    }

    /// The session's own pool of `addr`, if it is pinned.
    pub(super) fn own_pool(&self, addr: &NodeAddr) -> Option<Arc<NodePool>> {
        let mut own = self.own_pools.lock().unwrap();
        let own = own.as_mut()?;
        Some(
            own.entry(addr.clone())
                .or_insert_with(|| self.shared.pools.own_pool(addr, &self.creds))
                .clone(),
        )
    }

    /// `DISCARD ALL` outside a block: the session's own connections close (their
    /// state goes with them, as DISCARD ALL drops it on PostgreSQL) and it shares
    /// connections again.
    pub(super) fn unpin(&mut self) {
        *self.own_pools.lock().unwrap() = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str) -> Vec<String> {
        calls_in(text).names
    }

    #[test]
    fn calls_are_found_outside_literals_and_comments() {
        assert_eq!(names("SELECT v FROM d WHERE k = 1"), Vec::<String>::new());
        assert_eq!(
            names("select f(k), \"My F\" (v), s.g(1) from d where k = 1"),
            vec!["f", "My F", "g"]
        );
        assert_eq!(
            names("SELECT 'f(1)', $$g(2)$$, $q$h(3)$q$, E'\\'i(4)' /* j(5) */ -- k(6)\n FROM d"),
            Vec::<String>::new()
        );
        assert_eq!(
            names("INSERT INTO t (a, b) VALUES (1, lower('x')) ON CONFLICT (a) DO NOTHING"),
            vec!["lower"]
        );
        assert_eq!(
            names("SELECT * FROM generate_series(1, 3) AS g(x) JOIN d USING (k) WHERE k IN (1)"),
            vec!["generate_series"]
        );
    }

    #[test]
    fn set_config_calls_with_constant_names() {
        assert_eq!(
            set_config_calls(
                "SELECT set_config('app.tenant', 't''1', false), SET_CONFIG('a.b', $1, TRUE)"
            ),
            vec![("app.tenant".to_string(), false), ("a.b".to_string(), true)]
        );
        assert!(set_config_calls("SELECT set_config(name, 'x', false) FROM t").is_empty());
        assert!(set_config_calls("SELECT set_config('a.b', 'x', $2)").is_empty());
        assert!(set_config_calls("SELECT 'set_config(''a.b'', ''x'', false)'").is_empty());
    }

    #[test]
    fn session_state_of_built_in_functions() {
        let state = |t: &str| calls_in(t).leave_state;
        assert!(state(
            "select set_config('x.y', '1', false) from d where k = 1"
        ));
        assert!(state("select set_config('x.y', '1', $1) from d"));
        assert!(state("select set_config('x.y', '1', is_local) from d"));
        assert!(!state("select set_config('x.y', f('a', 'b'), true) from d"));
        assert!(!state("select set_config('x.y', '1', TRUE) from d"));
        assert!(state("select pg_advisory_lock(1) from d"));
        assert!(state("select pg_try_advisory_lock_shared(1, 2) from d"));
        assert!(state("select pg_advisory_unlock_all() from d"));
        assert!(!state("select pg_advisory_xact_lock(1) from d"));
        assert!(!state("select pg_try_advisory_xact_lock(1) from d"));
        assert!(state("select nextval('s') from d"));
        assert!(state("select * from dblink('c', 'select 1') as t(a int)"));
        assert!(!state(
            "select lower(v), current_setting('x.y', true) from d"
        ));
    }
}
