//! String constants under the session's string settings (`standard_conforming_strings`,
//! `backslash_quote`, `escape_string_warning`, as PostgreSQL's scanner reads them).
//!
//! pgshard plans and rewrites statements in *standard form*: the text as it reads with
//! `standard_conforming_strings = on`. A session that turned it off writes `'a\'b'` for
//! `a'b`; pgshard's parser reads such text with the session's settings (libpg_query's
//! options), and `to_standard` then gives each plain string constant holding a
//! backslash the `E` prefix (`E'a\'b'`), which reads the same whatever the settings
//! say. The caller proves the rewrite by parsing it again (`sql::parse`: the same tree).
//! `nonstandard_warnings` are the WARNINGs PostgreSQL's scanner gives for those
//! constants (`escape_string_warning`), for statements pgshard runs in standard form.

use crate::error::sqlstate;
use pg_query::protobuf::{self, node::Node as N};
use pg_query::ParserOptions;

/// The settings that decide how string constants read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StringSettings {
    pub standard_conforming: bool,
    /// `\'` is allowed in escape strings: `backslash_quote = on`, or `safe_encoding`
    /// (the default) with a client encoding that is not client-only.
    pub backslash_quote: bool,
    pub escape_warning: bool,
}

impl Default for StringSettings {
    fn default() -> Self {
        StringSettings {
            standard_conforming: true,
            backslash_quote: true,
            escape_warning: true,
        }
    }
}

impl StringSettings {
    /// libpg_query's options for these settings.
    pub fn parser_options(&self) -> ParserOptions {
        let mut o = ParserOptions::DEFAULT;
        if !self.standard_conforming {
            o |= ParserOptions::DISABLE_STANDARD_CONFORMING_STRINGS;
        }
        if !self.backslash_quote {
            o |= ParserOptions::DISABLE_BACKSLASH_QUOTE;
        }
        if !self.escape_warning {
            o |= ParserOptions::DISABLE_ESCAPE_STRING_WARNING;
        }
        o
    }

    /// Whether `text` may read differently under these settings than in standard form:
    /// only a backslash can make it so.
    pub fn matter_for(&self, text: &str) -> bool {
        (!self.standard_conforming || !self.backslash_quote) && text.contains('\\')
    }

    /// The settings after the session's setting statements, in order: `SET` / `RESET` /
    /// `SET ... TO DEFAULT` and `SELECT pg_catalog.set_config('name', 'value', ...)`
    /// (how startup options are kept). `base` is the value before the first of them;
    /// a RESET goes back to the value after the first `startup` statements (the
    /// startup packet's), as PostgreSQL's reset value.
    pub fn after<'a>(
        base: StringSettings,
        statements: impl Iterator<Item = &'a str>,
        startup: usize,
    ) -> StringSettings {
        let mut now = Tracked::from(base);
        let mut reset = now.clone();
        for (i, text) in statements.enumerate() {
            if i == startup {
                reset = now.clone();
            }
            let lower = text.to_ascii_lowercase();
            if !TRACKED.iter().any(|name| lower.contains(name)) && !lower.contains("names") {
                continue;
            }
            for (name, value) in settings_of(text) {
                now.set(&name, value.as_deref(), &reset);
            }
        }
        now.settings()
    }
}

/// The settings followed, by their names in `pg_settings`.
const TRACKED: [&str; 4] = [
    "standard_conforming_strings",
    "backslash_quote",
    "escape_string_warning",
    "client_encoding",
];

#[derive(Clone)]
struct Tracked {
    standard_conforming: bool,
    escape_warning: bool,
    /// `Some(allowed)` for on/off; None for safe_encoding.
    backslash_quote: Option<bool>,
    client_only_encoding: bool,
}

impl From<StringSettings> for Tracked {
    fn from(s: StringSettings) -> Self {
        Tracked {
            standard_conforming: s.standard_conforming,
            escape_warning: s.escape_warning,
            backslash_quote: (!s.backslash_quote).then_some(false),
            client_only_encoding: false,
        }
    }
}

impl Tracked {
    /// One setting changed (`None`: reset). A value PostgreSQL refuses never gets here
    /// (the coordinator node refused the statement), so anything unknown is ignored.
    fn set(&mut self, name: &str, value: Option<&str>, reset: &Tracked) {
        match name {
            "standard_conforming_strings" => {
                self.standard_conforming = match value {
                    None => reset.standard_conforming,
                    Some(v) => parse_bool(v).unwrap_or(self.standard_conforming),
                }
            }
            "escape_string_warning" => {
                self.escape_warning = match value {
                    None => reset.escape_warning,
                    Some(v) => parse_bool(v).unwrap_or(self.escape_warning),
                }
            }
            "backslash_quote" => {
                self.backslash_quote = match value {
                    None => reset.backslash_quote,
                    Some(v) if v.eq_ignore_ascii_case("safe_encoding") => None,
                    Some(v) => match v.to_ascii_lowercase().as_str() {
                        "on" | "true" | "yes" | "1" => Some(true),
                        "off" | "false" | "no" | "0" => Some(false),
                        _ => self.backslash_quote,
                    },
                }
            }
            "client_encoding" => {
                self.client_only_encoding = match value {
                    None => reset.client_only_encoding,
                    Some(v) => is_client_only_encoding(v),
                }
            }
            _ => {}
        }
    }

    fn settings(&self) -> StringSettings {
        StringSettings {
            standard_conforming: self.standard_conforming,
            escape_warning: self.escape_warning,
            backslash_quote: self.backslash_quote.unwrap_or(!self.client_only_encoding),
        }
    }
}

/// PostgreSQL's boolean input for settings (`parse_bool`: unique prefixes of true,
/// false, yes, no; on, off; 1, 0; any case).
fn parse_bool(v: &str) -> Option<bool> {
    let v = v.trim().to_ascii_lowercase();
    let prefix_of = |word: &str, min: usize| v.len() >= min && word.starts_with(v.as_str());
    if prefix_of("true", 1) || prefix_of("yes", 1) || v == "on" || v == "1" {
        Some(true)
    } else if prefix_of("false", 1) || prefix_of("no", 1) || prefix_of("off", 2) || v == "0" {
        Some(false)
    } else {
        None
    }
}

/// Client-only encodings, where a backslash can be the second byte of a character
/// (PostgreSQL's PG_ENCODING_IS_CLIENT_ONLY), by the names PostgreSQL accepts.
fn is_client_only_encoding(name: &str) -> bool {
    let n: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect();
    matches!(
        n.as_str(),
        "sjis"
            | "shiftjis"
            | "mskanji"
            | "win932"
            | "windows932"
            | "big5"
            | "win950"
            | "windows950"
            | "gbk"
            | "win936"
            | "windows936"
            | "uhc"
            | "win949"
            | "windows949"
            | "gb18030"
            | "johab"
            | "shiftjis2004"
    )
}

/// The settings a setting statement changes, with their values (None: reset).
fn settings_of(text: &str) -> Vec<(String, Option<String>)> {
    let Ok(parsed) = pg_query::parse(text, 0) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for raw in parsed.protobuf.stmts {
        match raw.stmt.and_then(|s| s.node) {
            Some(N::VariableSetStmt(v)) => {
                use protobuf::VariableSetKind as K;
                let name = v.name.to_ascii_lowercase();
                match K::try_from(v.kind) {
                    Ok(K::VarSetValue) => {
                        if let Some(value) = v.args.first().and_then(const_value) {
                            out.push((name, Some(value)));
                        }
                    }
                    Ok(K::VarSetDefault) | Ok(K::VarReset) => out.push((name, None)),
                    _ => {}
                }
            }
            Some(N::SelectStmt(s)) => {
                for target in &s.target_list {
                    let Some(N::ResTarget(rt)) = &target.node else {
                        continue;
                    };
                    let Some(N::FuncCall(f)) = rt.val.as_ref().and_then(|v| v.node.as_ref()) else {
                        continue;
                    };
                    let fname = crate::sql::parse::string_items(&f.funcname);
                    if fname.last().map(|n| n.to_ascii_lowercase()).as_deref() != Some("set_config")
                    {
                        continue;
                    }
                    if let (Some(name), Some(value)) = (
                        f.args.first().and_then(const_value),
                        f.args.get(1).and_then(const_value),
                    ) {
                        out.push((name.to_ascii_lowercase(), Some(value)));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn const_value(n: &protobuf::Node) -> Option<String> {
    use protobuf::a_const::Val;
    let Some(N::AConst(c)) = &n.node else {
        return None;
    };
    match c.val.as_ref()? {
        Val::Sval(s) => Some(s.sval.clone()),
        Val::Ival(i) => Some(i.ival.to_string()),
        Val::Fval(f) => Some(f.fval.clone()),
        Val::Boolval(b) => Some(if b.boolval { "on" } else { "off" }.to_string()),
        Val::Bsval(_) => None,
    }
}

/// A plain string constant holding a backslash, as the scanner reads it with
/// `standard_conforming_strings = off`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PlainConstant {
    /// Byte offset of its opening quote.
    quote: usize,
    /// What stands right before the quote.
    before: Before,
    /// The character after its first backslash: what PostgreSQL's warning names.
    first_escape: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Before {
    /// Not a word: `'...'`.
    Nothing,
    /// A word (`date'...'`, `1'...'`): a space must keep the prefix apart.
    Word,
    /// `N'...'`: national character.
    National,
}

/// How a string's body is read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Body {
    /// Backslash escapes (E'...', and plain constants with the setting off).
    Escapes,
    /// No escapes (B'...', X'...', U&'...').
    Literal,
}

fn is_word_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

/// The plain string constants of `text` holding a backslash, read with
/// `standard_conforming_strings = off`; None when a string, quoted name or comment is
/// unterminated (the parser then refused the text anyway).
fn plain_constants(text: &str) -> Option<Vec<PlainConstant>> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'-' && b.get(i + 1) == Some(&b'-') {
            while i < b.len() && b[i] != b'\n' && b[i] != b'\r' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i = comment_end(b, i)?;
        } else if c == b'"' {
            i = quoted_name_end(b, i)?;
        } else if c == b'$' {
            i = match dollar_tag(b, i) {
                Some(tag) => dollar_body_end(b, i, tag)?,
                // A parameter `$1`.
                None => word_end(b, i + 1),
            };
        } else if c == b'\'' {
            let (end, first) = string_end(b, i, Body::Escapes)?;
            if let Some(first_escape) = first {
                out.push(PlainConstant {
                    quote: i,
                    before: Before::Nothing,
                    first_escape,
                });
            }
            i = end;
        } else if is_word_char(c) {
            let start = i;
            i = word_end(b, i);
            let word = &text[start..i];
            if word.eq_ignore_ascii_case("u") && b.get(i) == Some(&b'&') {
                match b.get(i + 1) {
                    Some(b'\'') => i = string_end(b, i + 1, Body::Literal)?.0,
                    Some(b'"') => i = quoted_name_end(b, i + 1)?,
                    _ => {}
                }
                continue;
            }
            if b.get(i) != Some(&b'\'') {
                continue;
            }
            let (body, before) = if word.eq_ignore_ascii_case("e") {
                (Body::Escapes, None)
            } else if ["b", "x"].iter().any(|p| word.eq_ignore_ascii_case(p)) {
                (Body::Literal, None)
            } else if word.eq_ignore_ascii_case("n") {
                (Body::Escapes, Some(Before::National))
            } else {
                (Body::Escapes, Some(Before::Word))
            };
            let (end, first) = string_end(b, i, body)?;
            if let (Some(before), Some(first_escape)) = (before, first) {
                out.push(PlainConstant {
                    quote: i,
                    before,
                    first_escape,
                });
            }
            i = end;
        } else {
            i += 1;
        }
    }
    Some(out)
}

fn word_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && is_word_char(b[i]) {
        i += 1;
    }
    i
}

fn comment_end(b: &[u8], start: usize) -> Option<usize> {
    let mut nest = 0;
    let mut i = start;
    loop {
        if i + 1 >= b.len() {
            return None;
        }
        if b[i] == b'/' && b[i + 1] == b'*' {
            nest += 1;
            i += 2;
        } else if b[i] == b'*' && b[i + 1] == b'/' {
            nest -= 1;
            i += 2;
            if nest == 0 {
                return Some(i);
            }
        } else {
            i += 1;
        }
    }
}

fn quoted_name_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    loop {
        match b.get(i)? {
            b'"' if b.get(i + 1) == Some(&b'"') => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
}

/// The tag of a dollar quote starting at `start` (`$$`, `$tag$`), with its dollars.
fn dollar_tag(b: &[u8], start: usize) -> Option<&[u8]> {
    let mut i = start + 1;
    if i < b.len() && (b[i].is_ascii_alphabetic() || b[i] == b'_' || b[i] >= 0x80) {
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] >= 0x80) {
            i += 1;
        }
    }
    (b.get(i) == Some(&b'$')).then(|| &b[start..=i])
}

fn dollar_body_end(b: &[u8], start: usize, tag: &[u8]) -> Option<usize> {
    let body = start + tag.len();
    b[body..]
        .windows(tag.len())
        .position(|w| w == tag)
        .map(|p| body + p + tag.len())
}

/// The end of the string whose opening quote is at `quote` (continuations on later
/// lines included, as the scanner joins them), and the character after its first
/// backslash when its body takes escapes.
fn string_end(b: &[u8], quote: usize, body: Body) -> Option<(usize, Option<u8>)> {
    let mut first = None;
    let mut i = quote + 1;
    loop {
        let c = *b.get(i)?;
        if c == b'\\' && body == Body::Escapes {
            first.get_or_insert(*b.get(i + 1)?);
            i += 2;
        } else if c == b'\'' && b.get(i + 1) == Some(&b'\'') && body == Body::Escapes {
            i += 2;
        } else if c == b'\'' {
            match continuation(b, i + 1) {
                Some(next) => i = next,
                None => return Some((i + 1, first)),
            }
        } else {
            i += 1;
        }
    }
}

/// After a closing quote at `from - 1`: whitespace holding a newline, then a quote,
/// continues the same constant; returns the position after that quote.
fn continuation(b: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    let mut newline = false;
    loop {
        match b.get(i) {
            Some(b' ' | b'\t' | b'\x0c' | b'\x0b') => i += 1,
            Some(b'\n' | b'\r') => {
                newline = true;
                i += 1;
            }
            Some(b'-') if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' && b[i] != b'\r' {
                    i += 1;
                }
            }
            Some(b'\'') if newline => return Some(i + 1),
            _ => return None,
        }
    }
}

/// `text` (read with `standard_conforming_strings = off`) in standard form: each plain
/// string constant holding a backslash gets the `E` prefix (`N'...'` becomes
/// `NCHAR E'...'`); the same text when it has none. None when it cannot be scanned.
pub fn to_standard(text: &str) -> Option<String> {
    let constants = plain_constants(text)?;
    let mut out = String::with_capacity(text.len() + 2 * constants.len());
    let mut at = 0;
    for c in &constants {
        match c.before {
            Before::Nothing => {
                out.push_str(&text[at..c.quote]);
                out.push('E');
            }
            Before::Word => {
                out.push_str(&text[at..c.quote]);
                out.push_str(" E");
            }
            Before::National => {
                out.push_str(&text[at..c.quote - 1]);
                out.push_str("NCHAR E");
            }
        }
        at = c.quote;
    }
    out.push_str(&text[at..]);
    Some(out)
}

/// A WARNING as PostgreSQL's scanner gives it: SQLSTATE, message, hint, and position
/// (1-based, in characters of the query string).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannerWarning {
    pub code: &'static str,
    pub message: &'static str,
    pub hint: &'static str,
    pub position: usize,
}

/// PostgreSQL's WARNINGs for `query` read with `standard_conforming_strings = off` and
/// `escape_string_warning = on`: one per plain string constant holding a backslash,
/// naming its first escape, at its opening quote. `offset` is where `query` stands
/// in the client's query string (bytes), so positions count from its start.
pub fn nonstandard_warnings(whole: &str, offset: usize, query: &str) -> Vec<ScannerWarning> {
    let Some(constants) = plain_constants(query) else {
        return Vec::new();
    };
    constants
        .iter()
        .map(|c| {
            let (message, hint) = match c.first_escape {
                b'\'' => (
                    "nonstandard use of \\' in a string literal",
                    "Use '' to write quotes in strings, or use the escape string syntax (E'...').",
                ),
                b'\\' => (
                    "nonstandard use of \\\\ in a string literal",
                    "Use the escape string syntax for backslashes, e.g., E'\\\\'.",
                ),
                _ => (
                    "nonstandard use of escape in a string literal",
                    "Use the escape string syntax for escapes, e.g., E'\\r\\n'.",
                ),
            };
            let at = offset + c.quote;
            ScannerWarning {
                code: sqlstate::NONSTANDARD_USE_OF_ESCAPE_CHARACTER,
                message,
                hint,
                position: whole.get(..at).map_or(at, |s| s.chars().count()) + 1,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn off() -> StringSettings {
        StringSettings {
            standard_conforming: false,
            ..Default::default()
        }
    }

    #[test]
    fn plain_constants_get_the_e_prefix_and_nothing_else() {
        assert_eq!(
            to_standard(r"SELECT 'a\\b\'cd'").as_deref(),
            Some(r"SELECT E'a\\b\'cd'")
        );
        assert_eq!(
            to_standard("select date'2020\\-01-01', N'a\\b', 1'x\\y'").as_deref(),
            Some("select date E'2020\\-01-01', NCHAR E'a\\b', 1 E'x\\y'")
        );
        // Already standard, or never escaped: untouched.
        for same in [
            r"select E'a\'b', 'plain', B'01', $$a\'$$, $1",
            "select \"we\\'ird\", $x$ ' \\ $x$ /* ' \\ */ -- ' \\\n, 'q'",
        ] {
            assert_eq!(to_standard(same).as_deref(), Some(same));
        }
        // A continuation on the next line is the same constant.
        assert_eq!(
            to_standard("select 'a'\n  'b\\'c' , 'd\\\\'").as_deref(),
            Some("select E'a'\n  'b\\'c' , E'd\\\\'")
        );
        // Unterminated: nothing.
        assert_eq!(to_standard("select 'a\\'"), None);
    }

    #[test]
    fn rewritten_text_has_the_tree_the_session_reads() {
        for sql in [
            r"SELECT 'a\\b\'cd'",
            "select date'2020-01-0\\1', N'a\\b', 'x'\n'y\\\\z' as c",
            "insert into t values (1, 'it\\'s'), (2, '\\x41\\101\\n')",
            r"select * from t where v like 'a\_%' escape '\\' and k = 1",
        ] {
            let session = pg_query::parse(sql, off().parser_options())
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            let standard = to_standard(sql).unwrap();
            let again = pg_query::parse(&standard, 0).unwrap();
            let strip = |v: &mut serde_json::Value| crate::sql::parse::strip_locations(v);
            let mut a = serde_json::to_value(&session.protobuf.stmts[0].stmt).unwrap();
            let mut b = serde_json::to_value(&again.protobuf.stmts[0].stmt).unwrap();
            strip(&mut a);
            strip(&mut b);
            assert_eq!(a, b, "{sql} -> {standard}");
        }
    }

    #[test]
    fn settings_follow_the_session_statements() {
        let d = StringSettings::default();
        let after = |stmts: &[&str], startup: usize| {
            StringSettings::after(d, stmts.iter().copied(), startup)
        };
        assert_eq!(after(&["SET standard_conforming_strings = off"], 0), off());
        assert_eq!(
            after(&["SET standard_conforming_strings TO 'of'"], 0),
            off()
        );
        assert_eq!(
            after(
                &[
                    "SELECT pg_catalog.set_config('standard_conforming_strings', 'off', false)",
                    "SET standard_conforming_strings = on",
                    "RESET standard_conforming_strings",
                ],
                1
            ),
            off()
        );
        assert_eq!(
            after(
                &[
                    "SET standard_conforming_strings = off",
                    "SET search_path = a"
                ],
                0
            )
            .parser_options(),
            ParserOptions::DISABLE_STANDARD_CONFORMING_STRINGS
        );
        assert!(!after(&["SET backslash_quote = off"], 0).backslash_quote);
        assert!(after(&["SET backslash_quote = safe_encoding"], 0).backslash_quote);
        assert!(!after(&["SET client_encoding = 'SJIS'"], 0).backslash_quote);
        assert!(
            after(
                &["SET client_encoding = 'SJIS'", "SET backslash_quote = on"],
                0
            )
            .backslash_quote
        );
        assert!(!after(&["SET escape_string_warning = false"], 0).escape_warning);
        assert_eq!(after(&["SET work_mem = '1MB'"], 0), d);
        assert!(!d.matter_for(r"select 'a\b'"));
        assert!(off().matter_for(r"select 'a\b'"));
        assert!(!off().matter_for("select 'ab'"));
    }

    #[test]
    fn warnings_name_the_first_escape_at_the_quote() {
        let sql = "select 1; select 'é\\nb', 'c\\'d', E'\\x', '\\\\'";
        let offset = 10;
        let w = nonstandard_warnings(sql, offset, &sql[offset..]);
        assert_eq!(w.len(), 3);
        assert_eq!(
            w[0].message,
            "nonstandard use of escape in a string literal"
        );
        assert_eq!(w[0].position, 18);
        assert_eq!(w[1].message, "nonstandard use of \\' in a string literal");
        assert_eq!(w[1].position, 26);
        assert_eq!(w[2].message, "nonstandard use of \\\\ in a string literal");
        assert_eq!(w[0].code, "22P06");
    }
}
