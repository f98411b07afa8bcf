//! Uncorrelated subqueries run once and passed to the shards as values (Citus's
//! recursive planning of a subquery whose result the distributed query then reads):
//! when recursive planning cut a scalar subquery (`x > (SELECT avg(..) FROM t)`) or an
//! `EXISTS (SELECT ...)` over hash-distributed tables into a subplan and the statement
//! left still reads distributed tables, the subplan's result is put in the statement as
//! a typed constant (`CAST('4.5' AS numeric)`, `true`) instead of each shard computing
//! the subquery over broadcast tables, or the statement's tables being pulled onto the
//! coordinator node. The value is read from the subplan's intermediate result by
//! PostgreSQL itself ([`value_query`]), so a scalar subquery of no rows is NULL and one
//! of two rows fails with PostgreSQL's 21000; an EXISTS subplan stops at its first row.
//! The statement is then planned again with the values (`executor/session/subplans.rs`):
//! a repartition, co-located or multi-shard plan computes the rest. Sets (`IN`, `ANY`)
//! are not made values: their size is known only once they ran, and a large set in every
//! shard's statement costs more than the broadcast or repartition that handles them.

use super::{deparse_node, is_intermediate_result, SubPlan};
use crate::error::{PgError, PgResult};
use crate::sql::parse::{self, Statement};
use crate::sql::quote::quote_literal;
use crate::sql::walk;
use pg_query::protobuf::{self, node::Node as N, SubLinkType};

/// How a subplan's result stands in the statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueKind {
    /// `(SELECT one column ...)`: its one value, NULL on no row, 21000 on more.
    Scalar,
    /// `EXISTS (SELECT ...)`: true or false.
    Exists,
}

/// What a sublink's subquery can be replaced by once it has run, if anything.
pub(super) fn value_kind(l: &protobuf::SubLink) -> Option<ValueKind> {
    let single_column = || match l.subselect.as_deref().and_then(|s| s.node.as_ref()) {
        Some(N::SelectStmt(s)) => one_column(s),
        _ => false,
    };
    match SubLinkType::try_from(l.sub_link_type).ok()? {
        SubLinkType::ExprSublink if single_column() => Some(ValueKind::Scalar),
        SubLinkType::ExistsSublink => Some(ValueKind::Exists),
        _ => None,
    }
}

/// Whether a SELECT (or set operation) gives one column: its (leftmost) target list is
/// one expression that is not `*`.
fn one_column(s: &protobuf::SelectStmt) -> bool {
    if let Some(l) = s.larg.as_deref() {
        return one_column(l);
    }
    match s.target_list.as_slice() {
        [t] => match t.node.as_ref() {
            Some(N::ResTarget(r)) => !matches!(
                r.val.as_deref().and_then(|v| v.node.as_ref()),
                Some(N::ColumnRef(c)) if c.fields.iter().any(|f| matches!(f.node, Some(N::AStar(_))))
            ),
            _ => false,
        },
        _ => false,
    }
}

/// The subquery as its subplan runs it: an EXISTS needs one row at most.
pub(super) fn subplan_query(kind: Option<&ValueKind>, sub: &N) -> N {
    let mut sub = sub.clone();
    if kind == Some(&ValueKind::Exists) {
        if let N::SelectStmt(s) = &mut sub {
            if s.limit_count.is_none() && s.limit_offset.is_none() && s.locking_clause.is_empty() {
                s.limit_count = Some(Box::new(integer(1)));
                s.limit_option = protobuf::LimitOption::Count as i32;
            }
        }
    }
    sub
}

fn integer(v: i32) -> protobuf::Node {
    protobuf::Node {
        node: Some(N::AConst(protobuf::AConst {
            isnull: false,
            location: -1,
            val: Some(protobuf::a_const::Val::Ival(protobuf::Integer { ival: v })),
        })),
    }
}

/// The query (on the connection holding the subplan's intermediate result) giving the
/// value's type as `format_type` writes it, its text (NULL for NULL) and the name PostgreSQL gives an output column that is just the
/// sublink (the subquery's column, `exists`).
pub fn value_query(sub: &SubPlan, kind: &ValueKind) -> String {
    let table = &sub.table;
    let column = |what: &str| {
        format!(
            "(SELECT {what} FROM pg_catalog.pg_attribute a \
             WHERE a.attrelid = {}::pg_catalog.regclass AND a.attnum = 1)",
            quote_literal(table)
        )
    };
    let type_of = column("pg_catalog.format_type(a.atttypid, a.atttypmod)");
    let name = column("a.attname::pg_catalog.text");
    // Dates and times as ISO 8601 (read the same under any DateStyle), as
    // `planner::evaluate` writes the values it evaluates.
    let text =
        "CASE WHEN pg_catalog.pg_typeof(r.v) IN ('pg_catalog.timestamptz'::pg_catalog.regtype, \
         'pg_catalog.timestamp'::pg_catalog.regtype, 'pg_catalog.date'::pg_catalog.regtype, \
         'pg_catalog.time'::pg_catalog.regtype, 'pg_catalog.timetz'::pg_catalog.regtype) \
         THEN pg_catalog.to_json(r.v) OPERATOR(pg_catalog.#>>) '{}' ELSE r.v::pg_catalog.text END";
    match kind {
        ValueKind::Scalar => {
            format!("SELECT {type_of}, (SELECT {text} FROM {table} AS r(v)), {name}")
        }
        ValueKind::Exists => {
            format!("SELECT 'boolean', (EXISTS (SELECT FROM {table}))::pg_catalog.text, 'exists'")
        }
    }
}

/// A value read by [`value_query`] as the constant that replaces the sublink.
#[derive(Debug, Clone)]
pub struct Value {
    pub table: String,
    /// The typed constant (`CAST('..' AS type)`).
    pub constant: protobuf::Node,
    /// The name of an output column that is just the sublink (empty: none).
    pub column_name: String,
}

impl Value {
    /// From [`value_query`]'s row.
    pub fn from_row(sub: &SubPlan, row: &[Option<String>]) -> PgResult<Value> {
        let [type_name, text, column_name] = row else {
            return Err(PgError::internal("a subplan's value: not three columns"));
        };
        let type_name = type_name
            .as_deref()
            .ok_or_else(|| PgError::internal(format!("no type for {}", sub.table)))?;
        Ok(Value {
            table: sub.table.clone(),
            constant: crate::planner::evaluate::typed_constant(text.as_deref(), type_name)?,
            column_name: column_name.clone().unwrap_or_default(),
        })
    }
}

/// Which intermediate result a sublink reads when it is `(SELECT * FROM <result>)`.
fn sublink_table(l: &protobuf::SubLink) -> Option<String> {
    let Some(N::SelectStmt(s)) = l.subselect.as_deref().and_then(|s| s.node.as_ref()) else {
        return None;
    };
    match s.from_clause.as_slice() {
        [f] => match f.node.as_ref() {
            Some(N::RangeVar(rv)) if is_intermediate_result(rv) => {
                Some(format!("pg_temp.{}", rv.relname))
            }
            _ => None,
        },
        _ => None,
    }
}

/// The statement's sublinks over the given results replaced by their values (or
/// [`placeholders`]).
pub(super) fn substitute_tree(root: &mut N, values: &[Value]) {
    let mut f = |n: &mut protobuf::Node, _: bool| -> bool {
        // An output column that is just the sublink keeps PostgreSQL's name for it.
        if let Some(N::ResTarget(t)) = n.node.as_mut() {
            if let Some(N::SubLink(l)) = t.val.as_deref().and_then(|v| v.node.as_ref()) {
                let value =
                    sublink_table(l).and_then(|table| values.iter().find(|v| v.table == table));
                if let Some(v) = value.filter(|v| t.name.is_empty() && !v.column_name.is_empty()) {
                    t.name = v.column_name.clone();
                }
            }
            return false;
        }
        let Some(N::SubLink(l)) = n.node.as_ref() else {
            return false;
        };
        let Some(table) = sublink_table(l) else {
            return false;
        };
        let Some(v) = values.iter().find(|v| v.table == table) else {
            return false;
        };
        *n = v.constant.clone();
        true
    };
    walk::statement(root, false, &mut f);
}

/// The outer statement with `values` in place of its sublinks, deparsed and parsed
/// again (the planner finds names by their positions in the text).
pub fn substitute(outer: &Statement, values: &[Value]) -> PgResult<Statement> {
    let mut tree = outer
        .node
        .clone()
        .ok_or_else(|| PgError::internal("a recursive plan's outer statement has no tree"))?;
    substitute_tree(&mut tree, values);
    let text = deparse_node(&tree)?;
    parse::parse(&text)?
        .into_iter()
        .next()
        .ok_or_else(|| PgError::internal(format!("no statement in {text}")))
}

/// A NULL standing for every value while the statement is planned without them.
pub(super) fn placeholders(subplans: &[(String, ValueKind)]) -> Vec<Value> {
    subplans
        .iter()
        .map(|(table, _)| Value {
            table: table.clone(),
            constant: protobuf::Node {
                node: Some(N::AConst(protobuf::AConst {
                    isnull: true,
                    location: -1,
                    val: None,
                })),
            },
            column_name: String::new(),
        })
        .collect()
}
