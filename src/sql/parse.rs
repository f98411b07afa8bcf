//! Parsing with PostgreSQL's own grammar (libpg_query) and the facts pgshard needs
//! from a statement: its text, its tree, and every table it names.

use crate::error::{sqlstate, PgError, PgResult};
use crate::sql::strings::{self, ScannerWarning, StringSettings};
use pg_query::protobuf::{self, node::Node as N, RawStmt};
use pg_query::{NodeRef, ParserOptions};

/// One statement of a query string.
#[derive(Debug, Clone)]
pub struct Statement {
    /// The statement's own text (a slice of the query string), in standard form.
    pub text: String,
    /// The parse tree; `None` for an empty statement.
    pub node: Option<N>,
    /// How `text` relates to what the client wrote.
    pub form: StringForm,
}

/// How a statement's text relates to the client's (see `sql::strings`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StringForm {
    /// The client's own text, which reads the same with any string settings.
    #[default]
    Client,
    /// The client wrote it with `standard_conforming_strings = off`: `text` is it in
    /// standard form, proven to give the same tree; `client_text` is as written (a
    /// statement on local tables runs as that); `warnings` are PostgreSQL's for it
    /// (`escape_string_warning`).
    Rewritten {
        client_text: String,
        warnings: Vec<ScannerWarning>,
    },
    /// It needs the session's string settings and pgshard could not rewrite it: only
    /// the coordinator node may read it, as written.
    SessionOnly,
    /// pgshard extended it to show Citus's settings and extension in `pg_settings`,
    /// `SHOW ALL` and `pg_extension` (`citus_settings::catalog`), or the rows of
    /// Citus's statistics views (`stats::views`): `text` is what runs, on the
    /// coordinator node too.
    CitusViews,
}

impl Statement {
    /// The text as the client wrote it.
    pub fn client_text(&self) -> &str {
        match &self.form {
            StringForm::Rewritten { client_text, .. } => client_text,
            _ => &self.text,
        }
    }
}

/// A table named in a statement, with where its name stands in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelRef {
    pub schema: Option<String>,
    pub name: String,
    /// Byte offset of the (possibly qualified) name in the statement text.
    pub location: usize,
    pub alias: Option<String>,
}

/// The String nodes of a name list (a ColumnRef's fields, a qualified name), in order;
/// other nodes (`*`) are skipped.
pub fn string_items(nodes: &[protobuf::Node]) -> Vec<&str> {
    nodes
        .iter()
        .filter_map(|n| match n.node.as_ref() {
            Some(N::String(s)) => Some(s.sval.as_str()),
            _ => None,
        })
        .collect()
}

/// Splits and parses a query string. A syntax error carries PostgreSQL's message.
pub fn parse(sql: &str) -> PgResult<Vec<Statement>> {
    parse_with(sql, StringSettings::default())
}

/// Splits and parses a client's query string as a session with these string settings
/// reads it. Statements whose text reads differently in standard form come back
/// rewritten into it (`StringForm::Rewritten`) or, failing that, `SessionOnly`.
pub fn parse_with(sql: &str, settings: StringSettings) -> PgResult<Vec<Statement>> {
    let options = if settings.matter_for(sql) {
        settings.parser_options()
    } else {
        ParserOptions::DEFAULT
    };
    let result = pg_query::parse(sql, options).map_err(|e| syntax_error(&e))?;
    let mut out = Vec::with_capacity(result.protobuf.stmts.len());
    for raw in result.protobuf.stmts {
        let (offset, stmt) = statement_of(sql, raw, options);
        out.push(if options == ParserOptions::DEFAULT {
            stmt
        } else {
            standard_form(sql, offset, stmt, settings)
        });
    }
    if out.is_empty() {
        out.push(Statement {
            text: String::new(),
            node: None,
            form: StringForm::Client,
        });
    }
    Ok(out)
}

/// A statement read with `standard_conforming_strings = off`, in standard form.
fn standard_form(sql: &str, offset: usize, stmt: Statement, settings: StringSettings) -> Statement {
    if settings.standard_conforming || !stmt.text.contains('\\') {
        // Only `backslash_quote` differs: a text it refuses did not parse.
        return stmt;
    }
    let Some(standard) = strings::to_standard(&stmt.text) else {
        return Statement {
            form: StringForm::SessionOnly,
            ..stmt
        };
    };
    if standard == stmt.text {
        return stmt;
    }
    let same = match (
        first_tree_with(&standard, ParserOptions::DEFAULT),
        &stmt.node,
    ) {
        (Some(tree), Some(node)) => {
            let mut a = serde_json::to_value(&tree.node).unwrap_or_default();
            let mut b = serde_json::to_value(node).unwrap_or_default();
            strip_locations(&mut a);
            strip_locations(&mut b);
            (a == b && !a.is_null()).then_some(tree)
        }
        _ => None,
    };
    let Some(tree) = same else {
        return Statement {
            form: StringForm::SessionOnly,
            ..stmt
        };
    };
    let warnings = if settings.escape_warning {
        strings::nonstandard_warnings(sql, offset, &stmt.text)
    } else {
        Vec::new()
    };
    Statement {
        text: standard,
        node: tree.node,
        form: StringForm::Rewritten {
            client_text: stmt.text,
            warnings,
        },
    }
}

/// Removes every `location` field of a tree's serde form (text positions, which a
/// rewrite of the text moves).
pub fn strip_locations(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            map.remove("location");
            map.values_mut().for_each(strip_locations);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_locations),
        _ => {}
    }
}

/// One statement of `sql` and where its text starts in it.
fn statement_of(sql: &str, raw: RawStmt, options: ParserOptions) -> (usize, Statement) {
    let start = raw.stmt_location.max(0) as usize;
    let end = if raw.stmt_len == 0 {
        sql.len()
    } else {
        (start + raw.stmt_len as usize).min(sql.len())
    };
    let slice = sql.get(start..end).unwrap_or(sql).trim_start_matches(';');
    let offset = (slice.as_ptr() as usize).saturating_sub(sql.as_ptr() as usize);
    let text = slice.to_string();
    // Locations in the tree are relative to the whole string: re-parse the slice alone
    // when the string held several statements, so locations match `text`.
    let node = raw.stmt.and_then(|n| n.node);
    let form = StringForm::Client;
    if start == 0 && text.len() == sql.len() {
        return (offset, Statement { text, node, form });
    }
    let node = match first_tree_with(&text, options) {
        Some(tree) => tree.node,
        None => node,
    };
    (offset, Statement { text, node, form })
}

fn first_tree_with(sql: &str, options: ParserOptions) -> Option<Box<protobuf::Node>> {
    pg_query::parse(sql, options)
        .ok()?
        .protobuf
        .stmts
        .into_iter()
        .next()
        .and_then(|s| s.stmt)
}

/// The tree of the first statement of `sql`, for text already known to parse: SQL that
/// pgshard generated to splice into a client's statement, or one statement cut out of a
/// parsed query string. A failure is pgshard's own bug, so the error is internal (XX000);
/// `what` names the text in it.
pub fn first_tree(sql: &str, what: &str) -> PgResult<Box<protobuf::Node>> {
    pg_query::parse(sql, 0)
        .map_err(|e| PgError::internal(format!("{what}: {e}")))?
        .protobuf
        .stmts
        .into_iter()
        .next()
        .and_then(|s| s.stmt)
        .ok_or_else(|| PgError::internal(format!("{what}: no statement")))
}

fn syntax_error(e: &pg_query::Error) -> PgError {
    let msg = match e {
        pg_query::Error::Parse(m) => m.clone(),
        other => other.to_string(),
    };
    PgError::new(sqlstate::SYNTAX_ERROR, msg)
}

/// Every table reference in a statement. The fast walker of pg_query covers the
/// common statement shapes; when the text mentions one of `watched` (the distributed
/// tables' names) more often than that walker found it, the full serialised tree is
/// searched instead, so no reference to a distributed table is missed.
pub fn relations<'a>(stmt: &Statement, watched: impl Iterator<Item = &'a str>) -> Vec<RelRef> {
    let Some(node) = &stmt.node else {
        return Vec::new();
    };
    let fast = fast_relations(node);
    for name in watched {
        let mentioned = count_mentions(&stmt.text, name);
        if mentioned > 0
            && mentioned
                > fast
                    .iter()
                    .filter(|r| r.name.eq_ignore_ascii_case(name))
                    .count()
        {
            return full_relations(node);
        }
    }
    fast
}

fn fast_relations(node: &N) -> Vec<RelRef> {
    let mut out = Vec::new();
    for (n, _, _, _) in node.nodes() {
        if let NodeRef::RangeVar(rv) = n {
            out.push(rel_ref(rv));
        }
    }
    out
}

fn rel_ref(rv: &protobuf::RangeVar) -> RelRef {
    RelRef {
        schema: if rv.schemaname.is_empty() {
            None
        } else {
            Some(rv.schemaname.clone())
        },
        name: rv.relname.clone(),
        location: rv.location.max(0) as usize,
        alias: rv.alias.as_ref().map(|a| a.aliasname.clone()),
    }
}

/// Walks the whole tree through its serde form, finding every RangeVar-shaped object.
pub fn full_relations(node: &N) -> Vec<RelRef> {
    let value = serde_json::to_value(node).unwrap_or(serde_json::Value::Null);
    let mut out = Vec::new();
    walk_json(&value, &mut out);
    out.sort_by_key(|r| r.location);
    out
}

fn walk_json(v: &serde_json::Value, out: &mut Vec<RelRef>) {
    match v {
        serde_json::Value::Object(map) => {
            if map.contains_key("relname") && map.contains_key("relpersistence") {
                let s = |k: &str| {
                    map.get(k)
                        .and_then(|x| x.as_str())
                        .unwrap_or("")
                        .to_string()
                };
                let schema = s("schemaname");
                let alias = map
                    .get("alias")
                    .and_then(|a| a.get("aliasname"))
                    .and_then(|a| a.as_str())
                    .map(str::to_string);
                out.push(RelRef {
                    schema: if schema.is_empty() {
                        None
                    } else {
                        Some(schema)
                    },
                    name: s("relname"),
                    location: map
                        .get("location")
                        .and_then(|l| l.as_i64())
                        .unwrap_or(0)
                        .max(0) as usize,
                    alias,
                });
            }
            for child in map.values() {
                walk_json(child, out);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|i| walk_json(i, out)),
        _ => {}
    }
}

/// Every function a statement calls, by its unqualified lower-case name, once each
/// (sorted), found through the full serialised tree (pg_query's fast walker skips
/// VALUES lists and RETURNING). SQL value functions (CURRENT_TIMESTAMP, CURRENT_USER,
/// ...) count as `now`: none of them is immutable.
pub fn function_calls(node: &N) -> Vec<String> {
    calls_and_defaults(node).0
}

/// [`function_calls`], and whether the `DEFAULT` keyword stands anywhere in the
/// statement (VALUES, SET), from one walk of the tree.
pub fn calls_and_defaults(node: &N) -> (Vec<String>, bool) {
    let value = serde_json::to_value(node).unwrap_or(serde_json::Value::Null);
    let mut out = Vec::new();
    let mut default = false;
    walk_functions(&value, &mut out, &mut default);
    out.sort();
    (out, default)
}

fn walk_functions(v: &serde_json::Value, out: &mut Vec<String>, default: &mut bool) {
    match v {
        serde_json::Value::Object(map) => {
            let mut found = None;
            if let Some(f) = map.get("FuncCall") {
                found = f
                    .get("funcname")
                    .and_then(|n| n.as_array())
                    .and_then(|n| n.last())
                    .and_then(|n| n.pointer("/node/String/sval"))
                    .and_then(|n| n.as_str())
                    .map(str::to_ascii_lowercase);
            } else if map.contains_key("SqlvalueFunction") {
                found = Some("now".to_string());
            } else if map.contains_key("SetToDefault") {
                *default = true;
            }
            if let Some(name) = found {
                if !out.contains(&name) {
                    out.push(name);
                }
            }
            for child in map.values() {
                walk_functions(child, out, default);
            }
        }
        serde_json::Value::Array(items) => {
            items.iter().for_each(|i| walk_functions(i, out, default))
        }
        _ => {}
    }
}

/// How often `name` occurs in `text` as a whole identifier, ignoring case.
pub fn count_mentions(text: &str, name: &str) -> usize {
    if name.is_empty() {
        return 0;
    }
    let hay = text.as_bytes();
    let needle = name.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80;
    let mut count = 0;
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        if hay[i..i + needle.len()].eq_ignore_ascii_case(needle)
            && (i == 0 || !is_ident(hay[i - 1]))
            && hay.get(i + needle.len()).map_or(true, |&b| !is_ident(b))
        {
            count += 1;
            i += needle.len();
        } else {
            i += 1;
        }
    }
    count
}

/// The byte span of the (possibly qualified, possibly quoted) name at `at`.
pub fn qualified_name_span(text: &str, at: usize) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    let mut i = at;
    loop {
        i = ident_end(b, i)?;
        let mut j = i;
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        if j < b.len() && b[j] == b'.' {
            j += 1;
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            i = j;
        } else {
            return Some((at, i));
        }
    }
}

fn ident_end(b: &[u8], start: usize) -> Option<usize> {
    let first = *b.get(start)?;
    if first == b'"' {
        let mut i = start + 1;
        while i < b.len() {
            if b[i] == b'"' {
                if b.get(i + 1) == Some(&b'"') {
                    i += 2;
                    continue;
                }
                return Some(i + 1);
            }
            i += 1;
        }
        None
    } else if first.is_ascii_alphabetic() || first == b'_' || first >= 0x80 {
        let mut i = start + 1;
        while i < b.len()
            && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$' || b[i] >= 0x80)
        {
            i += 1;
        }
        Some(i)
    } else {
        None
    }
}

/// The end of a numeric constant token starting at `at`.
pub fn number_span(text: &str, at: usize) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    let mut i = at;
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
        i += 1;
    }
    if i == at {
        None
    } else {
        Some((at, i))
    }
}

/// The parse tree of the first statement of `sql`, for unit tests of the steps that
/// take one statement's node.
#[cfg(test)]
pub fn first_statement_for_tests(sql: &str) -> pg_query::protobuf::node::Node {
    pg_query::parse(sql, 0).unwrap().protobuf.stmts[0]
        .stmt
        .as_ref()
        .unwrap()
        .node
        .clone()
        .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rels(sql: &str) -> Vec<RelRef> {
        let s = parse(sql).unwrap().remove(0);
        relations(&s, ["pgbench_accounts", "t", "T"].into_iter())
    }

    #[test]
    fn finds_tables_and_their_text_positions() {
        let sql = "SELECT abalance FROM pgbench_accounts WHERE aid = $1";
        let r = rels(sql);
        assert_eq!(r.len(), 1);
        assert_eq!(&sql[r[0].location..r[0].location + 16], "pgbench_accounts");
        let sql = "update public.\"T\" x set a = 1";
        let r = rels(sql);
        assert_eq!(r[0].schema.as_deref(), Some("public"));
        assert_eq!(r[0].name, "T");
        assert_eq!(r[0].alias.as_deref(), Some("x"));
        let (s, e) = qualified_name_span(sql, r[0].location).unwrap();
        assert_eq!(&sql[s..e], "public.\"T\"");
        let sql = "delete from only t where k = 1";
        let r = rels(sql);
        assert_eq!(&sql[r[0].location..r[0].location + 1], "t");
    }

    #[test]
    fn function_calls_are_found_everywhere() {
        let calls = |sql: &str| {
            let s = parse(sql).unwrap().remove(0);
            function_calls(s.node.as_ref().unwrap())
        };
        assert_eq!(
            calls("INSERT INTO t VALUES (1, now()::text), (2, pg_catalog.Upper('x')) RETURNING random()"),
            vec!["now", "random", "upper"]
        );
        assert_eq!(
            calls("UPDATE t SET a = CURRENT_TIMESTAMP WHERE b IN (SELECT abs(c) FROM u)"),
            vec!["abs", "now"]
        );
        assert!(calls("DELETE FROM t WHERE a = 1").is_empty());
        let defaults = |sql: &str| {
            let s = parse(sql).unwrap().remove(0);
            calls_and_defaults(s.node.as_ref().unwrap()).1
        };
        assert!(defaults("INSERT INTO t VALUES (1, DEFAULT)"));
        assert!(defaults("UPDATE t SET a = DEFAULT"));
        assert!(!defaults("INSERT INTO t VALUES (1, 'DEFAULT')"));
    }

    #[test]
    fn full_walk_finds_tables_the_fast_walker_may_skip() {
        let s = parse("create view v as select * from t join u using (k)")
            .unwrap()
            .remove(0);
        let names: Vec<String> = full_relations(s.node.as_ref().unwrap())
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert!(
            names.contains(&"t".to_string())
                && names.contains(&"u".to_string())
                && names.contains(&"v".to_string())
        );
    }

    #[test]
    fn splits_statements_with_their_own_locations() {
        let stmts = parse("select 1; update t set a = 2 where k = 3;").unwrap();
        assert_eq!(stmts.len(), 2);
        assert_eq!(stmts[1].text.trim(), "update t set a = 2 where k = 3");
        let r = relations(&stmts[1], ["t"].into_iter());
        assert_eq!(&stmts[1].text[r[0].location..r[0].location + 1], "t");
    }

    #[test]
    fn mentions_are_whole_identifiers() {
        assert_eq!(
            count_mentions("select * from t_1 join t on x.t = 1", "t"),
            2
        );
        assert_eq!(
            count_mentions("pgbench_accounts_pkey", "pgbench_accounts"),
            0
        );
        assert_eq!(count_mentions("FROM \"Test\"", "test"), 1);
    }

    #[test]
    fn nonstandard_strings_are_planned_in_standard_form() {
        let off = StringSettings {
            standard_conforming: false,
            ..StringSettings::default()
        };
        let sql = r"select 1; SELECT 'a\\b\'cd' FROM t WHERE k = 1";
        // With the setting on, the same text does not parse.
        assert!(parse(sql).is_err());
        let stmts = parse_with(sql, off).unwrap();
        assert_eq!(stmts[0].form, StringForm::Client);
        assert_eq!(stmts[1].text, r"SELECT E'a\\b\'cd' FROM t WHERE k = 1");
        assert_eq!(
            stmts[1].client_text(),
            r"SELECT 'a\\b\'cd' FROM t WHERE k = 1"
        );
        let StringForm::Rewritten { warnings, .. } = &stmts[1].form else {
            panic!("{:?}", stmts[1].form);
        };
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].position, 18);
        // Locations are the standard text's.
        let r = relations(&stmts[1], ["t"].into_iter());
        assert_eq!(&stmts[1].text[r[0].location..r[0].location + 1], "t");
        // No backslash: nothing to rewrite.
        let plain = parse_with("select 'a''b' from t", off).unwrap();
        assert_eq!(plain[0].form, StringForm::Client);
        // A backslash in an escape string reads the same either way.
        let e = parse_with(r"select E'a\'b' from t", off).unwrap();
        assert_eq!(e[0].form, StringForm::Client);
        // backslash_quote = off refuses \' as PostgreSQL does.
        let no_bq = StringSettings {
            backslash_quote: false,
            ..StringSettings::default()
        };
        assert!(parse_with(r"select E'a\'b'", no_bq).is_err());
        assert!(parse_with(r"select E'a\'b'", StringSettings::default()).is_ok());
    }

    #[test]
    fn syntax_errors_have_sqlstate() {
        assert_eq!(parse("selec 1").unwrap_err().code, "42601");
    }
}
