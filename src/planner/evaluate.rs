//! Expressions PostgreSQL evaluates once per statement, found on the parse tree so
//! that the session evaluates them on the client's own coordinator-node connection and
//! the shards get their values as typed constants (as Citus's coordinator evaluation):
//! SQL value functions (`now()`'s `CURRENT_TIMESTAMP`, `CURRENT_USER`, ...) and calls of
//! STABLE functions (`now()`, `statement_timestamp()`, `current_setting('x')`) whose
//! arguments are constants. VOLATILE calls with constant arguments are evaluated too
//! inside an INSERT's VALUES rows, once per occurrence, exactly as PostgreSQL evaluates
//! them there (`nextval('seq')` of the coordinator node's sequence, `random()`).
//!
//! The session asks [`called_functions`] first (the cheap check: a statement without
//! function calls pays nothing more), looks the names up in `pg_proc`, then
//! [`evaluable`] gives the expressions to evaluate and [`replace`] puts their values in
//! a copy of the tree, which is deparsed and planned again.

use crate::error::{PgError, PgResult};
use crate::sql::parse::first_tree;
use crate::sql::quote::quote_literal;
use crate::sql::walk::{expression as visit, statement as walk};
use pg_query::protobuf::{self, node::Node as N, AExprKind, SqlValueFunctionOp};

/// What the coordinator node's functions of one name are (all overloads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Volatility {
    /// Every overload is IMMUTABLE.
    pub immutable: bool,
    /// Some overload is VOLATILE.
    pub volatile: bool,
    /// A plain scalar function: no overload is an aggregate, a window function or
    /// set-returning, so one call gives one value.
    pub scalar: bool,
}

/// The names (last part, as written) of the functions the statement calls anywhere
/// this walker reaches, and whether it has an SQL value function; None when it has
/// neither, so nothing is to be evaluated.
pub fn called_functions(node: &N) -> Option<(Vec<String>, bool)> {
    let mut names = Vec::new();
    let mut value_function = false;
    let mut tree = node.clone();
    walk(&mut tree, false, &mut |n, _| {
        match &n.node {
            Some(N::FuncCall(f)) => {
                if let Some(name) = function_name(f) {
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
            }
            Some(N::SqlvalueFunction(_)) => value_function = true,
            _ => {}
        }
        false
    });
    (!names.is_empty() || value_function).then_some((names, value_function))
}

/// Whether the statement calls a VOLATILE function that stays in it (one the shards
/// would evaluate): with `only_set`, in an UPDATE's SET list only.
pub fn calls_volatile(
    node: &N,
    kinds: &dyn Fn(&str) -> Option<Volatility>,
    only_set: bool,
) -> bool {
    let mut found = false;
    let mut check = |n: &mut protobuf::Node, _: bool| {
        if let Some(N::FuncCall(f)) = &n.node {
            if function_name(f)
                .and_then(|name| kinds(&name))
                .is_some_and(|k| k.volatile)
            {
                found = true;
            }
        }
        false
    };
    let mut tree = node.clone();
    match (&mut tree, only_set) {
        (N::UpdateStmt(u), true) => {
            for t in u.target_list.iter_mut() {
                visit(t, false, &mut check);
            }
        }
        (_, true) => {}
        (t, false) => walk(t, false, &mut check),
    }
    found
}

/// The expressions to evaluate once, in the order [`replace`] expects their values.
pub fn evaluable(node: &N, kinds: &dyn Fn(&str) -> Option<Volatility>) -> Vec<protobuf::Node> {
    let mut out = Vec::new();
    let mut tree = node.clone();
    walk(&mut tree, false, &mut |n, volatile_ok| {
        if classify(n, volatile_ok, kinds) == Class::Evaluate {
            out.push(n.clone());
            return true;
        }
        false
    });
    out
}

/// The statement with the expressions [`evaluable`] found replaced by `values`
/// (`CAST(literal AS type)` nodes, [`typed_constant`]); an unnamed output column keeps
/// the name PostgreSQL gives it.
pub fn replace(
    node: &N,
    kinds: &dyn Fn(&str) -> Option<Volatility>,
    values: Vec<protobuf::Node>,
) -> N {
    let mut values = values.into_iter();
    let mut tree = node.clone();
    walk(&mut tree, false, &mut |n, volatile_ok| {
        if let Some(N::ResTarget(t)) = &mut n.node {
            if t.name.is_empty() {
                if let Some(v) = &t.val {
                    if classify(v, volatile_ok, kinds) == Class::Evaluate {
                        t.name = column_name(v).unwrap_or_else(|| "?column?".to_string());
                    }
                }
            }
            return false;
        }
        if classify(n, volatile_ok, kinds) == Class::Evaluate {
            if let Some(v) = values.next() {
                *n = v;
            }
            return true;
        }
        false
    });
    tree
}

/// The query evaluating `exprs` on the coordinator node: per expression its type
/// (`pg_typeof`) and its value as text that reads the same under any DateStyle and
/// TimeZone (date/time types in ISO 8601 with their offset, through `to_json`).
pub fn evaluation_query(exprs: &[protobuf::Node]) -> PgResult<String> {
    let targets = exprs
        .iter()
        .enumerate()
        .map(|(i, e)| protobuf::Node {
            node: Some(N::ResTarget(Box::new(protobuf::ResTarget {
                name: format!("x{i}"),
                val: Some(Box::new(e.clone())),
                ..Default::default()
            }))),
        })
        .collect();
    let inner = N::SelectStmt(Box::new(protobuf::SelectStmt {
        target_list: targets,
        limit_option: protobuf::LimitOption::Default as i32,
        op: protobuf::SetOperation::SetopNone as i32,
        ..Default::default()
    }))
    .deparse(Default::default())
    .map_err(|e| PgError::internal(format!("deparsing the expressions to evaluate: {e}")))?;
    let columns: Vec<String> = (0..exprs.len())
        .map(|i| {
            format!(
                "pg_catalog.pg_typeof(x{i})::pg_catalog.text, \
                 CASE WHEN pg_catalog.pg_typeof(x{i}) IN ('pg_catalog.timestamptz'::pg_catalog.regtype, \
                 'pg_catalog.timestamp'::pg_catalog.regtype, 'pg_catalog.date'::pg_catalog.regtype, \
                 'pg_catalog.time'::pg_catalog.regtype, 'pg_catalog.timetz'::pg_catalog.regtype) \
                 THEN pg_catalog.to_json(x{i}) OPERATOR(pg_catalog.#>>) '{{}}' \
                 ELSE x{i}::pg_catalog.text END"
            )
        })
        .collect();
    Ok(format!(
        "SELECT {} FROM ({inner} OFFSET 0) pgshard_once",
        columns.join(", ")
    ))
}

/// `CAST(literal AS type)` (`CAST(NULL AS type)`) as a tree; `type_name` is
/// PostgreSQL's own `regtype` output.
pub fn typed_constant(value: Option<&str>, type_name: &str) -> PgResult<protobuf::Node> {
    let literal = value.map_or_else(|| "NULL".to_string(), quote_literal);
    let sql = format!("SELECT CAST({literal} AS {type_name})");
    let tree = first_tree(&sql, "a value evaluated on the coordinator node")?;
    if let Some(N::SelectStmt(s)) = tree.node {
        if let Some(protobuf::Node {
            node: Some(N::ResTarget(t)),
        }) = s.target_list.into_iter().next()
        {
            if let Some(v) = t.val {
                return Ok(*v);
            }
        }
    }
    Err(PgError::internal(format!("no constant in {sql}")))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Reads columns, parameters or something pgshard does not evaluate.
    No,
    /// Constant already on every node (literals, immutable functions of them).
    Immutable,
    /// Constant within the statement, but only once it is evaluated in one place.
    Evaluate,
}

fn classify(
    n: &protobuf::Node,
    volatile_ok: bool,
    kinds: &dyn Fn(&str) -> Option<Volatility>,
) -> Class {
    let both = |a: Class, b: Class| match (a, b) {
        (Class::No, _) | (_, Class::No) => Class::No,
        (Class::Evaluate, _) | (_, Class::Evaluate) => Class::Evaluate,
        _ => Class::Immutable,
    };
    match &n.node {
        Some(N::AConst(_)) => Class::Immutable,
        Some(N::TypeCast(c)) => c
            .arg
            .as_deref()
            .map_or(Class::No, |a| classify(a, volatile_ok, kinds)),
        Some(N::SqlvalueFunction(_)) => Class::Evaluate,
        Some(N::AExpr(e)) if e.kind == AExprKind::AexprOp as i32 => {
            let l = e
                .lexpr
                .as_deref()
                .map_or(Class::Immutable, |a| classify(a, volatile_ok, kinds));
            let r = e
                .rexpr
                .as_deref()
                .map_or(Class::No, |a| classify(a, volatile_ok, kinds));
            both(l, r)
        }
        Some(N::FuncCall(f)) => {
            if f.agg_star
                || f.agg_distinct
                || f.agg_within_group
                || !f.agg_order.is_empty()
                || f.agg_filter.is_some()
                || f.over.is_some()
            {
                return Class::No;
            }
            let Some(kind) = function_name(f).and_then(|name| kinds(&name)) else {
                return Class::No;
            };
            if !kind.scalar || (kind.volatile && !volatile_ok) {
                return Class::No;
            }
            let own = if kind.immutable {
                Class::Immutable
            } else {
                Class::Evaluate
            };
            f.args.iter().fold(own, |acc, a| {
                let a = match &a.node {
                    Some(N::NamedArgExpr(na)) => na.arg.as_deref(),
                    _ => Some(a),
                };
                both(
                    acc,
                    a.map_or(Class::No, |a| classify(a, volatile_ok, kinds)),
                )
            })
        }
        _ => Class::No,
    }
}

/// A function call's name (its last part), as PostgreSQL folded it.
fn function_name(f: &protobuf::FuncCall) -> Option<String> {
    match f.funcname.last().and_then(|n| n.node.as_ref()) {
        Some(N::String(s)) => Some(s.sval.clone()),
        _ => None,
    }
}

/// The output column name PostgreSQL gives an expression (FigureColname), where the
/// replacing constant would be named otherwise.
fn column_name(n: &protobuf::Node) -> Option<String> {
    match &n.node {
        Some(N::FuncCall(f)) => function_name(f),
        Some(N::SqlvalueFunction(v)) => Some(
            match SqlValueFunctionOp::try_from(v.op).unwrap_or(SqlValueFunctionOp::SvfopUser) {
                SqlValueFunctionOp::SvfopCurrentDate => "current_date",
                SqlValueFunctionOp::SvfopCurrentTime | SqlValueFunctionOp::SvfopCurrentTimeN => {
                    "current_time"
                }
                SqlValueFunctionOp::SvfopCurrentTimestamp
                | SqlValueFunctionOp::SvfopCurrentTimestampN => "current_timestamp",
                SqlValueFunctionOp::SvfopLocaltime | SqlValueFunctionOp::SvfopLocaltimeN => {
                    "localtime"
                }
                SqlValueFunctionOp::SvfopLocaltimestamp
                | SqlValueFunctionOp::SvfopLocaltimestampN => "localtimestamp",
                SqlValueFunctionOp::SvfopCurrentRole => "current_role",
                SqlValueFunctionOp::SvfopCurrentUser => "current_user",
                SqlValueFunctionOp::SvfopSessionUser => "session_user",
                SqlValueFunctionOp::SvfopCurrentCatalog => "current_catalog",
                SqlValueFunctionOp::SvfopCurrentSchema => "current_schema",
                _ => "user",
            }
            .to_string(),
        ),
        Some(N::TypeCast(c)) => {
            let inner = c.arg.as_deref().and_then(|a| match &a.node {
                Some(N::FuncCall(_)) | Some(N::SqlvalueFunction(_)) => column_name(a),
                _ => None,
            });
            inner.or_else(|| {
                let t = c.type_name.as_ref()?;
                match t.names.last().and_then(|n| n.node.as_ref()) {
                    Some(N::String(s)) => Some(s.sval.clone()),
                    _ => None,
                }
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(name: &str) -> Option<Volatility> {
        let (immutable, volatile) = match name {
            "now" | "current_setting" | "statement_timestamp" => (false, false),
            "random" | "nextval" => (false, true),
            "abs" | "lower" => (true, false),
            _ => return None,
        };
        Some(Volatility {
            immutable,
            volatile,
            scalar: true,
        })
    }

    fn tree(sql: &str) -> N {
        first_tree(sql, "test").unwrap().node.unwrap()
    }

    fn rewritten(sql: &str) -> String {
        let t = tree(sql);
        let found = evaluable(&t, &kinds);
        let values = found
            .iter()
            .enumerate()
            .map(|(i, _)| typed_constant(Some(&format!("v{i}")), "text").unwrap())
            .collect();
        replace(&t, &kinds, values)
            .deparse(Default::default())
            .unwrap()
    }

    #[test]
    fn stable_calls_with_constant_arguments_become_constants() {
        assert_eq!(
            rewritten("UPDATE ts SET ts = now() WHERE k > abs(-1)"),
            "UPDATE ts SET ts = 'v0'::text WHERE k > abs(-1)"
        );
        assert_eq!(
            rewritten("SELECT count(*), current_user, now() - interval '1 day' FROM ts WHERE ts < now()"),
            "SELECT count(*), 'v0'::text AS \"current_user\", 'v1'::text AS \"?column?\" FROM ts WHERE ts < 'v2'::text"
        );
    }

    #[test]
    fn columns_and_volatile_calls_outside_values_stay() {
        assert_eq!(
            rewritten("UPDATE ts SET x = random(), y = lower(name) WHERE ts < current_setting('a')::timestamptz"),
            "UPDATE ts SET x = random(), y = lower(name) WHERE ts < 'v0'::text"
        );
        assert!(calls_volatile(
            &tree("UPDATE ts SET x = random()"),
            &kinds,
            true
        ));
        assert!(!calls_volatile(
            &tree("UPDATE ts SET x = 1 WHERE random() < 0.5"),
            &kinds,
            true
        ));
    }

    #[test]
    fn values_rows_evaluate_volatile_calls_once_each() {
        assert_eq!(
            rewritten("INSERT INTO ts VALUES (nextval('s'), now()), (nextval('s'), 1)"),
            "INSERT INTO ts VALUES ('v0'::text, 'v1'::text), ('v2'::text, 1)"
        );
    }

    #[test]
    fn statements_without_calls_are_left_alone() {
        assert!(called_functions(&tree("SELECT abalance FROM a WHERE aid = $1")).is_none());
        assert!(called_functions(&tree("SELECT 1 FROM a WHERE ts = current_date")).is_some());
    }
}
