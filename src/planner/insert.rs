//! Multi-row `INSERT INTO t VALUES (...), (...)` whose rows may land on several shards:
//! each VALUES row's text is spliced from the client's own SQL into one INSERT per
//! shard (prefix with the shard name + that shard's rows + the rest of the statement:
//! ON CONFLICT, RETURNING), all run in one distributed transaction by the executor.
//! Parameters keep their numbers: every shard statement is prepared with all the
//! statement's parameter types and receives all bound values.

use super::distvalue::{value_source, ValueSource, ValueUse};
use super::template::{Edit, ShardSqlTemplate};
use crate::catalog::{DistColumn, DistTable, Oid};
use crate::sharding::hash::oid;
use pg_query::protobuf::a_const::Val;
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self, AExprKind};
use std::sync::Arc;

/// How the distribution value of one VALUES row is found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowKey {
    /// A constant or parameter (see `ValueSource`).
    Source(ValueSource),
    /// Integer arithmetic over constants and integer parameters, folded exactly by pgshard.
    Fold(IntExpr),
    /// Any other expression: evaluated once on the coordinator node, and its value
    /// takes the expression's place in the shard statement (text span of the expression).
    Evaluate { start: usize, end: usize },
}

/// Integer arithmetic PostgreSQL evaluates with overflow checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IntExpr {
    Const(i64),
    Param(usize),
    Neg(Box<IntExpr>),
    Add(Box<IntExpr>, Box<IntExpr>),
    Sub(Box<IntExpr>, Box<IntExpr>),
}

#[derive(Debug)]
pub struct InsertRowsPlan {
    pub table: Arc<DistTable>,
    /// The statement up to the first row, with the shard name spliced in.
    pub prefix: ShardSqlTemplate,
    /// The whole statement (all rows on one shard).
    pub whole: ShardSqlTemplate,
    /// Text spans of the VALUES rows, parentheses included.
    pub rows: Vec<(usize, usize)>,
    pub keys: Vec<RowKey>,
    /// Everything after the last row (ON CONFLICT, RETURNING).
    pub suffix: String,
    pub text: String,
    /// Index of the distribution column among each row's items.
    pub key_position: usize,
}

impl InsertRowsPlan {
    /// The INSERT for one shard with the given rows (indexes), and replacement text
    /// for evaluated key expressions (row index, replacement).
    pub fn shard_sql(
        &self,
        shard_id: crate::catalog::ShardId,
        rows: &[usize],
        replace: &[(usize, String)],
    ) -> String {
        let mut out = self.prefix.for_shard(shard_id);
        for (n, &r) in rows.iter().enumerate() {
            if n > 0 {
                out.push_str(", ");
            }
            let (s, e) = self.rows[r];
            match (&self.keys[r], replace.iter().find(|(i, _)| *i == r)) {
                (RowKey::Evaluate { start, end }, Some((_, with))) => {
                    out.push_str(&self.text[s..*start]);
                    out.push_str(with);
                    out.push_str(&self.text[*end..e]);
                }
                _ => out.push_str(&self.text[s..e]),
            }
        }
        out.push_str(&self.suffix);
        out
    }
}

/// Skips a quoted string, comment or dollar-quoted body starting at `i`; returns the
/// index after it, or `i` when nothing starts there.
fn skip_quoted(b: &[u8], i: usize) -> usize {
    match b[i] {
        b'\'' | b'"' => {
            let q = b[i];
            let mut j = i + 1;
            while j < b.len() {
                if b[j] == q {
                    if b.get(j + 1) == Some(&q) {
                        j += 2;
                        continue;
                    }
                    return j + 1;
                }
                // E'..\'..' strings: a backslash escapes the quote.
                if b[j] == b'\\' && q == b'\'' && i > 0 && matches!(b[i - 1], b'e' | b'E') {
                    j += 2;
                    continue;
                }
                j += 1;
            }
            b.len()
        }
        b'-' if b.get(i + 1) == Some(&b'-') => {
            let mut j = i;
            while j < b.len() && b[j] != b'\n' {
                j += 1;
            }
            j
        }
        b'/' if b.get(i + 1) == Some(&b'*') => {
            let mut j = i + 2;
            let mut depth = 1;
            while j < b.len() && depth > 0 {
                if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                    depth -= 1;
                    j += 2;
                } else if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                    depth += 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            j
        }
        b'$' => {
            // $tag$ ... $tag$ (a parameter $1 is not a dollar quote).
            let mut j = i + 1;
            while j < b.len()
                && (b[j].is_ascii_alphabetic()
                    || b[j] == b'_'
                    || (j > i + 1 && b[j].is_ascii_digit()))
            {
                j += 1;
            }
            if j < b.len() && b[j] == b'$' && !(i + 1 < b.len() && b[i + 1].is_ascii_digit()) {
                let tag = &b[i..=j];
                let mut k = j + 1;
                while k + tag.len() <= b.len() {
                    if &b[k..k + tag.len()] == tag {
                        return k + tag.len();
                    }
                    k += 1;
                }
                return b.len();
            }
            i
        }
        _ => i,
    }
}

/// The index after the parenthesis matching the one at `open`.
fn matching_paren(b: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = open;
    while i < b.len() {
        let j = skip_quoted(b, i);
        if j != i {
            i = j;
            continue;
        }
        match b[i] {
            b'(' => depth += 1,
            b')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

fn skip_blank(b: &[u8], mut i: usize) -> usize {
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let j = if i < b.len() && (b[i] == b'-' || b[i] == b'/') {
            skip_quoted(b, i)
        } else {
            i
        };
        if j == i {
            return i;
        }
        i = j;
    }
}

/// The spans of `n` VALUES rows, the first starting at the `(` before `first_item`.
pub fn row_spans(text: &str, first_item: usize, n: usize) -> Option<Vec<(usize, usize)>> {
    let b = text.as_bytes();
    let mut open = first_item.checked_sub(1)?;
    while b.get(open)?.is_ascii_whitespace() {
        open = open.checked_sub(1)?;
    }
    if b[open] != b'(' {
        return None;
    }
    let mut spans = Vec::with_capacity(n);
    let mut at = open;
    for k in 0..n {
        if b.get(at) != Some(&b'(') {
            return None;
        }
        let end = matching_paren(b, at)?;
        spans.push((at, end));
        if k + 1 < n {
            let comma = skip_blank(b, end);
            if b.get(comma) != Some(&b',') {
                return None;
            }
            at = skip_blank(b, comma + 1);
        }
    }
    Some(spans)
}

/// The spans of the top-level comma-separated items inside a row span `(a, b, ...)`.
pub fn item_spans(text: &str, row: (usize, usize)) -> Vec<(usize, usize)> {
    let b = text.as_bytes();
    let (start, end) = (row.0 + 1, row.1 - 1);
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut item_start = start;
    let mut i = start;
    while i < end {
        let j = skip_quoted(b, i);
        if j != i {
            i = j;
            continue;
        }
        match b[i] {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => {
                out.push(trim_span(b, item_start, i));
                item_start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(trim_span(b, item_start, end));
    out
}

fn trim_span(b: &[u8], mut s: usize, mut e: usize) -> (usize, usize) {
    while s < e && b[s].is_ascii_whitespace() {
        s += 1;
    }
    while e > s && b[e - 1].is_ascii_whitespace() {
        e -= 1;
    }
    (s, e)
}

/// Integer arithmetic over literals and parameters, as a foldable expression.
pub fn int_expr(node: &protobuf::Node) -> Option<IntExpr> {
    match node.node.as_ref()? {
        N::AConst(c) => match c.val.as_ref()? {
            Val::Ival(i) => Some(IntExpr::Const(i.ival as i64)),
            // Integer literals beyond int4 reach the grammar as "float" (numeric) text.
            Val::Fval(f) if f.fval.bytes().all(|b| b.is_ascii_digit()) => {
                f.fval.parse().ok().map(IntExpr::Const)
            }
            _ => None,
        },
        N::ParamRef(p) if p.number >= 1 => Some(IntExpr::Param(p.number as usize - 1)),
        N::AExpr(e) if e.kind == AExprKind::AexprOp as i32 => {
            let op = match e.name.as_slice() {
                [n] => match n.node.as_ref()? {
                    N::String(s) => s.sval.clone(),
                    _ => return None,
                },
                _ => return None,
            };
            let r = int_expr(e.rexpr.as_deref()?)?;
            match (e.lexpr.as_deref(), op.as_str()) {
                (None, "-") => Some(IntExpr::Neg(Box::new(r))),
                (None, "+") => Some(r),
                (Some(l), "+") => Some(IntExpr::Add(Box::new(int_expr(l)?), Box::new(r))),
                (Some(l), "-") => Some(IntExpr::Sub(Box::new(int_expr(l)?), Box::new(r))),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Width in bytes of the integer types PostgreSQL gives a value: literals are int4 when
/// they fit, else int8.
fn width_of(t: Oid) -> Option<u8> {
    match t {
        oid::INT2 => Some(2),
        oid::INT4 => Some(4),
        oid::INT8 => Some(8),
        _ => None,
    }
}

fn fits(width: u8, v: i128) -> bool {
    match width {
        2 => i16::try_from(v).is_ok(),
        4 => i32::try_from(v).is_ok(),
        _ => i64::try_from(v).is_ok(),
    }
}

/// Why an integer expression has no value: PostgreSQL's error (SQLSTATE 22003).
pub fn out_of_range(width: u8) -> crate::error::PgError {
    crate::error::PgError::new(
        "22003",
        match width {
            2 => "smallint out of range",
            4 => "integer out of range",
            _ => "bigint out of range",
        },
    )
}

/// Evaluates an integer expression as PostgreSQL does (result width = the wider
/// operand; int2 + int2 stays int2); `param` gives (width, value) of a parameter.
/// Returns (width, value), or PostgreSQL's overflow error.
pub fn eval_int(
    e: &IntExpr,
    param: &dyn Fn(usize) -> Option<(u8, i64)>,
) -> Result<Option<(u8, i64)>, crate::error::PgError> {
    Ok(Some(match e {
        IntExpr::Const(v) => (if i32::try_from(*v).is_ok() { 4 } else { 8 }, *v),
        IntExpr::Param(i) => match param(*i) {
            Some(p) => p,
            None => return Ok(None),
        },
        IntExpr::Neg(x) => {
            let Some((w, v)) = eval_int(x, param)? else {
                return Ok(None);
            };
            let r = -(v as i128);
            if !fits(w, r) {
                return Err(out_of_range(w));
            }
            (w, r as i64)
        }
        IntExpr::Add(a, b) | IntExpr::Sub(a, b) => {
            let (Some((wa, va)), Some((wb, vb))) = (eval_int(a, param)?, eval_int(b, param)?)
            else {
                return Ok(None);
            };
            let w = wa.max(wb);
            let r = if matches!(e, IntExpr::Add(..)) {
                va as i128 + vb as i128
            } else {
                va as i128 - vb as i128
            };
            if !fits(w, r) {
                return Err(out_of_range(w));
            }
            (w, r as i64)
        }
    }))
}

/// The key of one VALUES item for the distribution column.
pub fn row_key(item: &protobuf::Node, span: (usize, usize), col: &DistColumn) -> RowKey {
    if let Some(v) = value_source(item, col, ValueUse::Store) {
        return RowKey::Source(v);
    }
    if width_of(col.type_oid).is_some() {
        if let Some(e) = int_expr(item) {
            return RowKey::Fold(e);
        }
    }
    RowKey::Evaluate {
        start: span.0,
        end: span.1,
    }
}

/// Builds the plan; None when the text could not be cut into rows.
pub fn plan_rows(
    text: &str,
    table: Arc<DistTable>,
    edit: Edit,
    values_lists: &[protobuf::Node],
    position: usize,
) -> Option<InsertRowsPlan> {
    let col = table.dist_column.clone()?;
    let mut first_item = None;
    let mut items_of_rows = Vec::new();
    for row in values_lists {
        let Some(N::List(items)) = row.node.as_ref() else {
            return None;
        };
        items_of_rows.push(items.items.clone());
    }
    for it in items_of_rows.first()?.iter() {
        let loc = node_location(it)?;
        first_item = Some(first_item.map_or(loc, |f: usize| f.min(loc)));
    }
    let rows = row_spans(text, first_item?, values_lists.len())?;
    let mut keys = Vec::new();
    for (r, items) in rows.iter().zip(items_of_rows.iter()) {
        let spans = item_spans(text, *r);
        if spans.len() != items.len() {
            return None;
        }
        let item = items.get(position)?;
        keys.push(row_key(item, spans[position], &col));
    }
    if edit.end > rows[0].0 {
        return None;
    }
    let prefix = ShardSqlTemplate::new(&text[..rows[0].0], &table, vec![edit.clone()]);
    let whole = ShardSqlTemplate::new(text, &table, vec![edit]);
    let suffix = text[rows.last()?.1..].to_string();
    Some(InsertRowsPlan {
        table,
        prefix,
        whole,
        rows,
        keys,
        suffix,
        text: text.to_string(),
        key_position: position,
    })
}

/// The location of an expression node, where pg_query records one.
fn node_location(n: &protobuf::Node) -> Option<usize> {
    let l = match n.node.as_ref()? {
        N::AConst(c) => c.location,
        N::ParamRef(p) => p.location,
        N::AExpr(e) => {
            // An operator's location is the operator itself: use its left operand.
            return match e.lexpr.as_deref() {
                Some(l) => node_location(l),
                None => Some(e.location.max(0) as usize),
            };
        }
        N::TypeCast(t) => {
            return t
                .arg
                .as_deref()
                .and_then(node_location)
                .map(|a| a.min(t.location.max(0) as usize))
        }
        N::FuncCall(f) => f.location,
        N::ColumnRef(c) => c.location,
        N::SetToDefault(d) => d.location,
        N::BoolExpr(b) => {
            return b.args.first().and_then(node_location);
        }
        N::SubLink(s) => s.location,
        N::AArrayExpr(a) => a.location,
        N::RowExpr(r) => r.location,
        N::CaseExpr(c) => c.location,
        N::CoalesceExpr(c) => c.location,
        N::NullTest(t) => return t.arg.as_deref().and_then(node_location),
        _ => return None,
    };
    (l >= 0).then_some(l as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_items() {
        let t = "insert into t values ($1), ($2+1) ,( '(,)' , f(1,2)) on conflict do nothing";
        let first = t.find("$1").unwrap();
        let spans = row_spans(t, first, 3).unwrap();
        let texts: Vec<&str> = spans.iter().map(|(s, e)| &t[*s..*e]).collect();
        assert_eq!(texts, vec!["($1)", "($2+1)", "( '(,)' , f(1,2))"]);
        let items: Vec<&str> = item_spans(t, spans[2])
            .iter()
            .map(|(s, e)| &t[*s..*e])
            .collect();
        assert_eq!(items, vec!["'(,)'", "f(1,2)"]);
        assert!(row_spans(t, first, 4).is_none());
    }

    fn fold(
        sql_expr: &str,
        params: &[(u8, i64)],
    ) -> Result<Option<(u8, i64)>, crate::error::PgError> {
        let stmts = crate::sql::parse::parse(&format!("select {sql_expr}")).unwrap();
        let Some(N::SelectStmt(s)) = &stmts[0].node else {
            panic!()
        };
        let Some(N::ResTarget(rt)) = s.target_list[0].node.as_ref() else {
            panic!()
        };
        let e = int_expr(rt.val.as_deref().unwrap()).unwrap();
        eval_int(&e, &|i| params.get(i).copied())
    }

    #[test]
    fn integer_folding_matches_postgres() {
        assert_eq!(fold("2+3", &[]).unwrap(), Some((4, 5)));
        assert_eq!(fold("-(3)", &[]).unwrap(), Some((4, -3)));
        assert_eq!(fold("+7", &[]).unwrap(), Some((4, 7)));
        assert_eq!(fold("$1+8", &[(4, 10)]).unwrap(), Some((4, 18)));
        assert_eq!(
            fold("$1+1", &[(4, i32::MAX as i64)]).unwrap_err().code,
            "22003"
        );
        assert_eq!(
            fold("$1+1", &[(8, i32::MAX as i64)]).unwrap(),
            Some((8, i32::MAX as i64 + 1))
        );
        assert_eq!(fold("2147483647+1", &[]).unwrap_err().code, "22003");
        assert_eq!(fold("3000000000-1", &[]).unwrap(), Some((8, 2999999999)));
        assert_eq!(
            fold("$1+$2", &[(2, 32767), (2, 1)]).unwrap_err().message,
            "smallint out of range"
        );
    }
}
