//! Calls of the Citus functions pgshard runs itself (`commands::call_utility`):
//! a statement that is one such call, and calls nested inside a larger statement
//! whose values are computed first.

use super::const_text;
use super::Plan;
use crate::error::PgError;
use pg_query::protobuf;
use pg_query::protobuf::node::Node as N;

/// An argument of a Citus function call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UtilityArg {
    Const(Option<String>),
    Param(usize),
}

/// A Citus function call standing at `text[start..end]`.
#[derive(Debug, Clone)]
pub struct InlineCall {
    pub start: usize,
    pub end: usize,
    pub name: String,
    pub args: Vec<(Option<String>, UtilityArg)>,
    /// The call is the one function of a FROM item (`FROM f() [AS a]`): its whole
    /// result takes its place as a subquery, under the function's name when the item
    /// has no alias of its own (`Some(name)`), or under the item's alias (`Some("")`).
    pub from_item: Option<String>,
}

/// Every Citus function pgshard runs itself has one of these in its name: a statement
/// whose text has none calls none of them (a cheap test before walking its tree).
pub const UTILITY_NAME_HINTS: [&str; 9] = [
    "citus_",
    "master_",
    "distribut",
    "shard",
    "undistribute",
    "reference",
    "recover_prepared",
    "run_command_on",
    "metadata_sync",
];

/// `SELECT citus_function(args)` with nothing else in the statement.
/// Citus function calls nested in expressions, found only when the text names one.
pub(super) fn inline_utility_calls(
    node: &N,
    text: &str,
    is_utility_function: &dyn Fn(&str) -> bool,
) -> Option<Plan> {
    let lower = text.to_ascii_lowercase();
    if !UTILITY_NAME_HINTS.iter().any(|k| lower.contains(k)) {
        return None;
    }
    // Calls that are the one function of a FROM item, by location: whether the item
    // has an alias.
    let mut from_items: Vec<(i32, bool)> = Vec::new();
    for (n, _, _, _) in node.nodes() {
        let pg_query::NodeRef::RangeFunction(rf) = n else {
            continue;
        };
        if rf.ordinality || rf.is_rowsfrom || rf.functions.len() != 1 {
            continue;
        }
        let Some(N::List(l)) = rf.functions[0].node.as_ref() else {
            continue;
        };
        if let Some(N::FuncCall(fc)) = l.items.first().and_then(|f| f.node.as_ref()) {
            from_items.push((fc.location, rf.alias.is_some()));
        }
    }
    let mut calls = Vec::new();
    for (n, _, _, _) in node.nodes() {
        let pg_query::NodeRef::FuncCall(fc) = n else {
            continue;
        };
        let Some(name) = func_name(fc) else { continue };
        if !is_utility_function(&name) {
            continue;
        }
        let start = fc.location.max(0) as usize;
        let Some(end) = call_end(text, start) else {
            return Some(Plan::Unsupported(PgError::not_supported(format!(
                "pgshard could not read the call of {name}()"
            ))));
        };
        let mut args = Vec::new();
        for a in &fc.args {
            let (arg_name, value) = match a.node.as_ref() {
                Some(N::NamedArgExpr(na)) => (Some(na.name.clone()), na.arg.as_deref()),
                _ => (None, Some(a)),
            };
            match const_text(value) {
                Some(t) => args.push((arg_name, UtilityArg::Const(Some(t)))),
                None => {
                    return Some(Plan::Unsupported(PgError::not_supported(format!(
                        "arguments of {name}() inside an expression must be constants"
                    ))))
                }
            }
        }
        let from_item = from_items
            .iter()
            .find(|(l, _)| *l == fc.location)
            .map(|(_, has_alias)| {
                if *has_alias {
                    String::new()
                } else {
                    name.clone()
                }
            });
        calls.push(InlineCall {
            start,
            end,
            name,
            args,
            from_item,
        });
    }
    if calls.is_empty() {
        return None;
    }
    calls.sort_by_key(|c| c.start);
    if calls.windows(2).any(|w| w[1].start < w[0].end) {
        return Some(Plan::Unsupported(PgError::not_supported(
            "nested Citus function calls are not supported",
        )));
    }
    Some(Plan::UtilityInline { calls })
}

/// The end of a function call starting at `start`: just after its closing parenthesis,
/// skipping quoted strings and identifiers.
fn call_end(text: &str, start: usize) -> Option<usize> {
    let b = text.as_bytes();
    let mut i = start;
    let mut depth = 0usize;
    while i < b.len() {
        match b[i] {
            b'\'' | b'"' => {
                let q = b[i];
                i += 1;
                while i < b.len() {
                    if b[i] == q {
                        if b.get(i + 1) == Some(&q) {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
            }
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

pub(super) fn utility_call(
    s: &protobuf::SelectStmt,
    is_utility_function: &dyn Fn(&str) -> bool,
) -> Option<Plan> {
    if s.target_list.len() != 1 || !s.from_clause.is_empty() || s.where_clause.is_some() {
        return None;
    }
    let N::ResTarget(rt) = s.target_list[0].node.as_ref()? else {
        return None;
    };
    let N::FuncCall(fc) = rt.val.as_ref()?.node.as_ref()? else {
        return None;
    };
    let name = func_name(fc)?;
    if !is_utility_function(&name) {
        return None;
    }
    let mut args = Vec::new();
    for a in &fc.args {
        let (arg_name, value) = match a.node.as_ref()? {
            N::NamedArgExpr(na) => (Some(na.name.clone()), na.arg.as_deref()),
            _ => (None, Some(a)),
        };
        let arg = match value.and_then(|v| v.node.as_ref()) {
            Some(N::ParamRef(p)) => UtilityArg::Param(p.number as usize - 1),
            Some(N::AConst(c)) if c.isnull => UtilityArg::Const(None),
            Some(N::TypeCast(tc))
                if matches!(
                    tc.arg.as_ref().and_then(|x| x.node.as_ref()),
                    Some(N::ParamRef(_))
                ) =>
            {
                let Some(N::ParamRef(p)) = tc.arg.as_ref().and_then(|x| x.node.as_ref()) else {
                    return None;
                };
                UtilityArg::Param(p.number as usize - 1)
            }
            _ => match const_text(value) {
                Some(t) => UtilityArg::Const(Some(t)),
                None => {
                    return Some(Plan::Unsupported(PgError::not_supported(format!(
                        "arguments of {name}() must be constants or parameters"
                    ))))
                }
            },
        };
        args.push((arg_name, arg));
    }
    Some(Plan::Utility { name, args })
}

/// A function's unqualified lower-case name (`pg_catalog.count` → `count`).
pub fn func_name(fc: &protobuf::FuncCall) -> Option<String> {
    match fc.funcname.last()?.node.as_ref()? {
        N::String(s) => Some(s.sval.to_ascii_lowercase()),
        _ => None,
    }
}
