//! What a join statement says for its moves (`super::plan_repartition`): which
//! references the FROM items cover and which sit on an outer join's nullable side, the
//! column equalities usable to pair shards, each reference's own WHERE conjuncts and
//! the columns the statement reads of it.

use crate::catalog::DistTable;
use crate::sql::parse::RelRef;
use pg_query::protobuf::{self, node::Node as N, BoolExprType, JoinType};
use std::sync::Arc;

use super::ColumnEquality;

/// The references a FROM item covers; marks those on the nullable side of outer
/// joins, collects the USING equalities between its two sides and its ON clauses
/// (`ons`: their equalities are read with the level's scope, `on_equalities`).
pub(super) fn from_item(
    n: &protobuf::Node,
    refs: &[(RelRef, Arc<DistTable>)],
    nullable: &mut [bool],
    equalities: &mut Vec<ColumnEquality>,
    ons: &mut Vec<JoinOn>,
) -> Option<Vec<usize>> {
    match n.node.as_ref()? {
        N::RangeVar(rv) => {
            if rv.alias.as_ref().is_some_and(|a| !a.colnames.is_empty()) {
                return None;
            }
            let at = rv.location.max(0) as usize;
            refs.iter()
                .position(|(r, _)| r.location == at)
                .map(|i| vec![i])
        }
        N::JoinExpr(j) if !j.is_natural => {
            let left = from_item(j.larg.as_deref()?, refs, nullable, equalities, ons)?;
            let right = from_item(j.rarg.as_deref()?, refs, nullable, equalities, ons)?;
            let (null_left, null_right) =
                match JoinType::try_from(j.jointype).unwrap_or(JoinType::Undefined) {
                    JoinType::JoinInner => (false, false),
                    JoinType::JoinLeft => (false, true),
                    JoinType::JoinRight => (true, false),
                    JoinType::JoinFull => (true, true),
                    _ => return None,
                };
            // Before this join's own marks: the references of a side whose rows the
            // join keeps only when matched (the other side is not preserved), that no
            // outer join inside that side nulls.
            let filterable: Vec<usize> = [(&left, null_right), (&right, null_left)]
                .iter()
                .filter(|(_, other_nulls_it)| !*other_nulls_it)
                .flat_map(|(side, _)| side.iter().copied())
                .filter(|i| !nullable[*i])
                .collect();
            for (side, null) in [(&left, null_left), (&right, null_right)] {
                if null {
                    side.iter().for_each(|i| nullable[*i] = true);
                }
            }
            if let Some(q) = j.quals.as_deref() {
                ons.push(JoinOn {
                    left: left.clone(),
                    right: right.clone(),
                    quals: q.clone(),
                    filterable,
                });
            }
            for u in &j.using_clause {
                let Some(N::String(col)) = u.node.as_ref() else {
                    return None;
                };
                let having = |side: &[usize]| -> Option<usize> {
                    let found: Vec<usize> = side
                        .iter()
                        .copied()
                        .filter(|i| refs[*i].1.columns.contains(&col.sval))
                        .collect();
                    (found.len() == 1).then(|| found[0])
                };
                if let (Some(a), Some(b)) = (having(&left), having(&right)) {
                    equalities.push(ColumnEquality {
                        a: (a, col.sval.clone()),
                        b: (b, col.sval.clone()),
                    });
                }
            }
            Some(left.into_iter().chain(right).collect())
        }
        _ => None,
    }
}

/// An ON clause and the references of its two sides (its equalities are read once the
/// query level's references, its scope, are known).
pub(super) struct JoinOn {
    pub left: Vec<usize>,
    pub right: Vec<usize>,
    pub quals: protobuf::Node,
    /// The references whose rows a conjunct of the ON reading only them may filter
    /// before the join, the result the same: those of a side whose rows the join keeps
    /// only when matched (an inner join's both, a LEFT JOIN's right, a RIGHT JOIN's
    /// left, a FULL JOIN's none) that no outer join inside that side nulls. A LEFT
    /// JOIN's preserved side keeps its rows whatever the ON says; a reference an inner
    /// outer join nulls would be filtered before its NULL-extended rows are made.
    pub filterable: Vec<usize>,
}

/// The equalities of the ON clauses `ons` between their two sides.
pub(super) fn on_equalities(
    ons: &[JoinOn],
    refs: &[(RelRef, Arc<DistTable>)],
    scope: &[&[usize]],
) -> Vec<ColumnEquality> {
    let mut out = Vec::new();
    for JoinOn {
        left, right, quals, ..
    } in ons
    {
        let mut on = Vec::new();
        conjuncts(quals, &mut on);
        out.extend(
            on.iter()
                .filter_map(|c| equality(c, refs, scope))
                .filter(|e| {
                    (left.contains(&e.a.0) && right.contains(&e.b.0))
                        || (left.contains(&e.b.0) && right.contains(&e.a.0))
                }),
        );
    }
    out
}

/// `AND`ed conditions, flattened.
/// `c1 AND c2 AND ...` (the one conjunct alone; None: none).
pub(super) fn and_all(mut all: Vec<protobuf::Node>) -> Option<protobuf::Node> {
    match all.len() {
        0 => None,
        1 => all.pop(),
        _ => Some(protobuf::Node {
            node: Some(N::BoolExpr(Box::new(protobuf::BoolExpr {
                xpr: None,
                boolop: BoolExprType::AndExpr as i32,
                args: all,
                location: -1,
            }))),
        }),
    }
}

pub(super) fn conjuncts(n: &protobuf::Node, out: &mut Vec<protobuf::Node>) {
    match n.node.as_ref() {
        Some(N::BoolExpr(b)) if b.boolop == BoolExprType::AndExpr as i32 => {
            for a in &b.args {
                conjuncts(a, out);
            }
        }
        _ => out.push(n.clone()),
    }
}

/// The String fields of a ColumnRef (None when it holds `*`).
fn column_fields(cr: &protobuf::ColumnRef) -> Option<Vec<&str>> {
    cr.fields
        .iter()
        .map(|f| match f.node.as_ref() {
            Some(N::String(s)) => Some(s.sval.as_str()),
            _ => None,
        })
        .collect()
}

/// Which reference and column a column reference names, when that is certain,
/// resolved as PostgreSQL scopes names: `scope` holds the references of each query
/// level, innermost first; a name found on a level once is that level's, found twice
/// it is ambiguous (None).
pub(super) fn resolve_column(
    cr: &protobuf::ColumnRef,
    refs: &[(RelRef, Arc<DistTable>)],
    scope: &[&[usize]],
) -> Option<(usize, String)> {
    let fields = column_fields(cr)?;
    let names_rel = |i: usize, q: &str| match &refs[i].0.alias {
        Some(a) => a == q,
        None => refs[i].0.name == q,
    };
    let col = *fields.last()?;
    for level in scope {
        let hits: Vec<usize> = match fields.as_slice() {
            [col] => level
                .iter()
                .copied()
                .filter(|i| refs[*i].1.columns.iter().any(|c| c == col))
                .collect(),
            [.., q, _] => level.iter().copied().filter(|i| names_rel(*i, q)).collect(),
            _ => return None,
        };
        match hits.as_slice() {
            [] => continue,
            [i] => {
                return refs[*i]
                    .1
                    .columns
                    .iter()
                    .any(|c| c == col)
                    .then(|| (*i, col.to_string()))
            }
            _ => return None,
        }
    }
    None
}

/// `x = y` between columns of two references.
pub(super) fn equality(
    c: &protobuf::Node,
    refs: &[(RelRef, Arc<DistTable>)],
    scope: &[&[usize]],
) -> Option<ColumnEquality> {
    let Some(N::AExpr(e)) = c.node.as_ref() else {
        return None;
    };
    let is_eq = e.kind == protobuf::AExprKind::AexprOp as i32
        && matches!(e.name.as_slice(), [n] if matches!(n.node.as_ref(), Some(N::String(s)) if s.sval == "="));
    if !is_eq {
        return None;
    }
    let side = |n: Option<&protobuf::Node>| match n?.node.as_ref()? {
        N::ColumnRef(cr) => resolve_column(cr, refs, scope),
        _ => None,
    };
    let a = side(e.lexpr.as_deref())?;
    let b = side(e.rexpr.as_deref())?;
    (a.0 != b.0).then_some(ColumnEquality { a, b })
}

/// Whether a conjunct reads only reference `i`'s columns and nothing evaluated
/// differently on a worker (parameters, functions, subqueries). Functions written in
/// SQL's own syntax (`substring(x FROM 1 FOR 2)`, `EXTRACT(year FROM d)`, `TRIM(x)`,
/// `position(a IN b)`, `x AT TIME ZONE z`) are PostgreSQL's built-ins in `pg_catalog`
/// whatever the search path, none VOLATILE: the same value on any node in the session's
/// settings (TPC-H Q22's country code filter).
pub(super) fn only_reads(
    c: &protobuf::Node,
    i: usize,
    refs: &[(RelRef, Arc<DistTable>)],
    scope: &[&[usize]],
) -> bool {
    let mut reads_it = false;
    let Some(node) = c.node.as_ref() else {
        return false;
    };
    for (n, _, _, _) in node.nodes() {
        match n {
            pg_query::NodeRef::ColumnRef(cr) => match resolve_column(cr, refs, scope) {
                Some((r, _)) if r == i => reads_it = true,
                _ => return false,
            },
            pg_query::NodeRef::FuncCall(f)
                if f.funcformat == protobuf::CoercionForm::CoerceSqlSyntax as i32 => {}
            pg_query::NodeRef::ParamRef(_)
            | pg_query::NodeRef::FuncCall(_)
            | pg_query::NodeRef::SqlvalueFunction(_)
            | pg_query::NodeRef::SubLink(_)
            | pg_query::NodeRef::SelectStmt(_) => return false,
            _ => {}
        }
    }
    reads_it
}

/// The columns each reference's moved table must carry: those the statement names
/// (`pull_columns::NeededColumns`, the one reading of a statement's columns; every
/// column for whole-row uses).
pub(super) fn needed_columns(node: &N, refs: &[(RelRef, Arc<DistTable>)]) -> Vec<Vec<String>> {
    let needed = super::super::pull_columns::NeededColumns::of(node);
    refs.iter()
        .map(|(r, t)| {
            let name = r.alias.as_deref().unwrap_or(&r.name);
            needed
                .columns_of(name, &r.name, t)
                .unwrap_or_else(|| t.columns.clone())
        })
        .collect()
}
