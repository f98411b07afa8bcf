//! Where the top-level clauses of a SELECT stand in its text (target list, FROM,
//! WHERE, GROUP BY, HAVING, ORDER BY, LIMIT, ...), and where a function call ends.
//! The parse tree says what a clause holds; these spans let the planner build shard
//! and combine queries from the client's own text, so every expression stays exactly
//! as written. A small tokenizer skips strings, quoted names, comments and
//! parentheses, so keywords inside them never count.

/// One token of SQL text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    pub start: usize,
    pub end: usize,
    /// Parenthesis depth at the token (opening parenthesis: depth outside it).
    pub depth: usize,
    pub kind: TokenKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    Word,
    Open,
    Close,
    /// Strings, quoted names, numbers, parameters, operators.
    Other,
}

/// Tokens of `text` from `from` on; None when a string or comment is unterminated.
pub fn tokens(text: &str, from: usize) -> Option<Vec<Token>> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = from;
    let mut depth = 0usize;
    let is_ident_start = |c: u8| c.is_ascii_alphabetic() || c == b'_' || c >= 0x80;
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80;
    while i < b.len() {
        let c = b[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'-' && b.get(i + 1) == Some(&b'-') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut nest = 1;
            i += 2;
            while nest > 0 {
                if i + 1 >= b.len() {
                    return None;
                }
                if b[i] == b'/' && b[i + 1] == b'*' {
                    nest += 1;
                    i += 2;
                } else if b[i] == b'*' && b[i + 1] == b'/' {
                    nest -= 1;
                    i += 2;
                } else {
                    i += 1;
                }
            }
            continue;
        }
        let kind = if c == b'\'' {
            // E'...' strings take backslash escapes.
            let escapes = out.last().is_some_and(|t: &Token| {
                t.end == i
                    && t.kind == TokenKind::Word
                    && text[t.start..t.end].eq_ignore_ascii_case("e")
            });
            i = string_end(b, i, b'\'', escapes)?;
            TokenKind::Other
        } else if c == b'"' {
            i = string_end(b, i, b'"', false)?;
            TokenKind::Other
        } else if c == b'$' {
            let mut j = i + 1;
            if b.get(j).is_some_and(|d| d.is_ascii_digit()) {
                while j < b.len() && b[j].is_ascii_digit() {
                    j += 1;
                }
                i = j;
            } else {
                while j < b.len() && b[j] != b'$' && is_ident(b[j]) {
                    j += 1;
                }
                if b.get(j) != Some(&b'$') {
                    return None;
                }
                let tag = &text[i..=j];
                let close = text[j + 1..].find(tag)?;
                i = j + 1 + close + tag.len();
            }
            TokenKind::Other
        } else if is_ident_start(c) {
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            TokenKind::Word
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_') {
                i += 1;
            }
            TokenKind::Other
        } else if c == b'(' || c == b'[' {
            i += 1;
            out.push(Token {
                start,
                end: i,
                depth,
                kind: TokenKind::Open,
            });
            depth += 1;
            continue;
        } else if c == b')' || c == b']' {
            i += 1;
            depth = depth.saturating_sub(1);
            out.push(Token {
                start,
                end: i,
                depth,
                kind: TokenKind::Close,
            });
            continue;
        } else {
            i += 1;
            TokenKind::Other
        };
        out.push(Token {
            start,
            end: i,
            depth,
            kind,
        });
    }
    Some(out)
}

/// The end of a quoted string or name opened at `start` by `quote` (a doubled quote is
/// one character; with `escapes`, a backslash escapes the next byte); None when
/// unterminated.
pub(crate) fn string_end(b: &[u8], start: usize, quote: u8, escapes: bool) -> Option<usize> {
    let mut i = start + 1;
    while i < b.len() {
        if escapes && b[i] == b'\\' {
            i += 2;
            continue;
        }
        if b[i] == quote {
            if b.get(i + 1) == Some(&quote) {
                i += 2;
                continue;
            }
            return Some(i + 1);
        }
        i += 1;
    }
    None
}

/// A clause: its keyword's start, where its body starts, and its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clause {
    pub keyword: usize,
    pub body: usize,
    pub end: usize,
}

/// The top-level clauses of a simple SELECT.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SelectClauses {
    /// The target list (after SELECT and any DISTINCT [ON (...)]).
    pub target: (usize, usize),
    pub from: Option<Clause>,
    pub where_: Option<Clause>,
    pub group: Option<Clause>,
    pub having: Option<Clause>,
    pub window: Option<Clause>,
    pub order: Option<Clause>,
    pub limit: Option<Clause>,
    pub offset: Option<Clause>,
    pub fetch: Option<Clause>,
    pub locking: Option<Clause>,
    /// End of the statement (before a trailing semicolon).
    pub end: usize,
}

fn word_is(text: &str, t: &Token, w: &str) -> bool {
    t.kind == TokenKind::Word && text[t.start..t.end].eq_ignore_ascii_case(w)
}

/// Finds the clauses of a `SELECT ...` text. None for other shapes (set operations,
/// WITH, VALUES, parenthesised selects).
pub fn select_clauses(text: &str) -> Option<SelectClauses> {
    let toks = tokens(text, 0)?;
    let mut end = text.len();
    let mut toks: &[Token] = &toks;
    while let Some(last) = toks.last() {
        if last.kind == TokenKind::Other && &text[last.start..last.end] == ";" {
            end = last.start;
            toks = &toks[..toks.len() - 1];
        } else {
            break;
        }
    }
    let first = toks.first()?;
    if !word_is(text, first, "select") {
        return None;
    }
    let mut k = 1;
    // SELECT ALL | DISTINCT [ON (...)]
    if toks.get(k).is_some_and(|t| word_is(text, t, "all")) {
        k += 1;
    } else if toks.get(k).is_some_and(|t| word_is(text, t, "distinct")) {
        k += 1;
        if toks.get(k).is_some_and(|t| word_is(text, t, "on")) {
            k += 1;
            if toks.get(k)?.kind != TokenKind::Open {
                return None;
            }
            let close = toks[k + 1..]
                .iter()
                .position(|t| t.kind == TokenKind::Close && t.depth == 0)?;
            k += close + 2;
        }
    }
    let target_start = toks.get(k).map_or(end, |t| t.start);
    // Clause keywords in the order SQL allows them.
    const ORDER: &[&str] = &[
        "from", "where", "group", "having", "window", "order", "limit", "offset", "fetch", "for",
    ];
    let mut found: Vec<(usize, usize, usize)> = Vec::new(); // (which, keyword start, body start)
    let mut next_allowed = 0;
    for j in k..toks.len() {
        let t = &toks[j];
        if t.depth != 0 || t.kind != TokenKind::Word {
            continue;
        }
        let prev = j.checked_sub(1).map(|p| &toks[p]);
        if prev.is_some_and(|p| word_is(text, p, "as")) {
            continue; // a column label
        }
        let w = text[t.start..t.end].to_ascii_lowercase();
        if matches!(w.as_str(), "union" | "intersect" | "except" | "into") {
            return None;
        }
        let Some(which) = ORDER.iter().position(|o| *o == w) else {
            continue;
        };
        if which < next_allowed {
            // LIMIT after OFFSET is allowed in PostgreSQL; other repeats are nested words.
            if !(w == "limit" && found.iter().all(|f| ORDER[f.0] != "limit")) {
                continue;
            }
        }
        let next = toks.get(j + 1);
        let body = match w.as_str() {
            "from" if prev.is_some_and(|p| word_is(text, p, "distinct")) => continue,
            "group" if prev.is_some_and(|p| word_is(text, p, "within")) => continue,
            "group" | "order" => {
                if !next.is_some_and(|n| word_is(text, n, "by")) {
                    continue;
                }
                next.unwrap().end
            }
            "for" => {
                if !next.is_some_and(|n| {
                    ["update", "share", "no", "key"]
                        .iter()
                        .any(|x| word_is(text, n, x))
                }) {
                    continue;
                }
                t.start
            }
            _ => t.end,
        };
        found.push((which, t.start, body));
        next_allowed = which + 1;
    }
    let mut c = SelectClauses {
        end,
        ..Default::default()
    };
    for (n, &(which, kw, body)) in found.iter().enumerate() {
        let clause_end = found.get(n + 1).map_or(end, |f| f.1);
        let clause = Some(Clause {
            keyword: kw,
            body,
            end: clause_end,
        });
        match ORDER[which] {
            "from" => c.from = clause,
            "where" => c.where_ = clause,
            "group" => c.group = clause,
            "having" => c.having = clause,
            "window" => c.window = clause,
            "order" => c.order = clause,
            "limit" => c.limit = clause,
            "offset" => c.offset = clause,
            "fetch" => c.fetch = clause,
            _ => c.locking = clause,
        }
    }
    c.target = (target_start, c.from.map_or(end, |f| f.keyword));
    Some(c)
}

/// The end of an aggregate or function call whose name starts at `start`: just after
/// its closing parenthesis, and after a following `FILTER (...)` or
/// `WITHIN GROUP (...)`. None when the text there is not a call.
pub fn call_end(text: &str, start: usize) -> Option<usize> {
    let toks = tokens(text, start)?;
    let mut k = 0;
    // Name, possibly qualified.
    while k < toks.len() && toks[k].kind != TokenKind::Open {
        k += 1;
    }
    let close = |from: usize| -> Option<usize> {
        let d = toks.get(from)?.depth;
        toks[from + 1..]
            .iter()
            .position(|t| t.kind == TokenKind::Close && t.depth == d)
            .map(|p| from + 1 + p)
    };
    let mut last = close(k)?;
    loop {
        let next = toks.get(last + 1);
        if next.is_some_and(|t| word_is(text, t, "filter"))
            && toks
                .get(last + 2)
                .is_some_and(|t| t.kind == TokenKind::Open)
        {
            last = close(last + 2)?;
        } else if next.is_some_and(|t| word_is(text, t, "within"))
            && toks
                .get(last + 2)
                .is_some_and(|t| word_is(text, t, "group"))
            && toks
                .get(last + 3)
                .is_some_and(|t| t.kind == TokenKind::Open)
        {
            last = close(last + 3)?;
        } else {
            break;
        }
    }
    Some(toks[last].end)
}

/// The end of each entry of a target list spanning `span` (entries split at
/// top-level commas), just after its last token.
pub fn target_entry_ends(text: &str, span: (usize, usize)) -> Option<Vec<usize>> {
    let toks = tokens(&text[..span.1], span.0)?;
    let mut ends = Vec::new();
    let mut last_end = None;
    for t in &toks {
        if t.depth == 0 && t.kind == TokenKind::Other && &text[t.start..t.end] == "," {
            ends.push(last_end?);
        } else {
            last_end = Some(t.end);
        }
    }
    ends.push(last_end?);
    Some(ends)
}

/// The start of the opening parenthesis of the call starting at `start`.
pub fn call_open_paren(text: &str, start: usize) -> Option<usize> {
    tokens(text, start)?
        .into_iter()
        .find(|t| t.kind == TokenKind::Open)
        .map(|t| t.start)
}

/// The statement inside `EXPLAIN [ANALYZE] [VERBOSE] [(options)] statement`: where it starts.
pub fn explained_statement_start(text: &str) -> Option<usize> {
    let toks = tokens(text, 0)?;
    if !toks.first().is_some_and(|t| word_is(text, t, "explain")) {
        return None;
    }
    let mut k = 1;
    if toks.get(k)?.kind == TokenKind::Open {
        let close = toks[k + 1..]
            .iter()
            .position(|t| t.kind == TokenKind::Close && t.depth == 0)?;
        k += close + 2;
    } else {
        while toks.get(k).is_some_and(|t| {
            ["analyze", "analyse", "verbose"]
                .iter()
                .any(|w| word_is(text, t, w))
        }) {
            k += 1;
        }
    }
    toks.get(k).map(|t| t.start)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(text: &str, c: Option<Clause>) -> &str {
        let c = c.unwrap();
        text[c.body..c.end].trim()
    }

    #[test]
    fn finds_top_level_clauses() {
        let q = "SELECT DISTINCT ON (a) a, b IS DISTINCT FROM c, extract(year from d) AS limit FROM t x WHERE a = 'where' AND (select 1 from u) > 0 GROUP BY a HAVING count(*) > 1 ORDER BY a DESC LIMIT $1 OFFSET 2;";
        let c = select_clauses(q).unwrap();
        assert_eq!(
            &q[c.target.0..c.target.1].trim(),
            &"a, b IS DISTINCT FROM c, extract(year from d) AS limit"
        );
        assert_eq!(body(q, c.from), "t x");
        assert_eq!(body(q, c.where_), "a = 'where' AND (select 1 from u) > 0");
        assert_eq!(body(q, c.group), "a");
        assert_eq!(body(q, c.having), "count(*) > 1");
        assert_eq!(body(q, c.order), "a DESC");
        assert_eq!(body(q, c.limit), "$1");
        assert_eq!(body(q, c.offset), "2");
        assert_eq!(c.end, q.len() - 1);
    }

    #[test]
    fn skips_strings_comments_and_within_group() {
        let q = "select percentile_cont(0.5) within group (order by x), E'it\\'s from' -- from\n from /* where */ t order by 1";
        let c = select_clauses(q).unwrap();
        assert!(body(q, c.from).ends_with(" t"));
        assert!(c.where_.is_none() && c.group.is_none());
        assert_eq!(body(q, c.order), "1");
        assert!(select_clauses("select 1 union select 2").is_none());
        assert!(select_clauses("with x as (select 1) select * from x").is_none());
    }

    #[test]
    fn target_entries() {
        let q = "select a, f(b, c) AS x , 'y,z' from t";
        let c = select_clauses(q).unwrap();
        let ends: Vec<&str> = target_entry_ends(q, c.target)
            .unwrap()
            .into_iter()
            .map(|e| &q[..e])
            .collect();
        assert_eq!(
            ends,
            vec![
                "select a",
                "select a, f(b, c) AS x",
                "select a, f(b, c) AS x , 'y,z'"
            ]
        );
    }

    #[test]
    fn call_spans_include_filter() {
        let q = "select sum(x) filter (where y > 0) + count(*), avg ( \"a)\" )";
        assert_eq!(
            &q[7..call_end(q, 7).unwrap()],
            "sum(x) filter (where y > 0)"
        );
        let at = q.find("count").unwrap();
        assert_eq!(&q[at..call_end(q, at).unwrap()], "count(*)");
        let at = q.find("avg").unwrap();
        assert_eq!(&q[at..call_end(q, at).unwrap()], "avg ( \"a)\" )");
        assert_eq!(call_open_paren(q, at), Some(at + 4));
    }

    #[test]
    fn explain_inner_statement() {
        let q = "EXPLAIN (analyze, costs off) select 1";
        assert_eq!(&q[explained_statement_start(q).unwrap()..], "select 1");
        let q = "explain analyze verbose select 1";
        assert_eq!(&q[explained_statement_start(q).unwrap()..], "select 1");
        let q = "explain select 1";
        assert_eq!(&q[explained_statement_start(q).unwrap()..], "select 1");
    }
}
