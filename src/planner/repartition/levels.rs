//! The query levels of a statement whose references may move (`super::plan_repartition`):
//! the statement itself and every subquery in it (EXISTS, NOT EXISTS, IN, NOT IN, ANY /
//! ALL, scalar, ARRAY; in WHERE, ON, the select list, GROUP BY, HAVING, ORDER BY), each
//! level's FROM references (tables and joins of tables only), which of them an outer
//! join of their level nulls, the column equalities usable to pair shards (top-level
//! `AND`ed conditions of each level's WHERE and inner joins' ON, correlated ones
//! included, and the link of a top-level `x IN (SELECT y ...)`), and each reference's
//! own conjuncts (its level's top-level WHERE conditions reading only it, when no outer
//! join nulls it, and the top-level conditions reading only it of the ON clauses that
//! may filter it before their join: `statement::JoinOn::filterable`). Column
//! references resolve as PostgreSQL scopes them: the innermost level first.
//!
//! The equalities are only hints for the strategy: whatever moves, the renamed
//! statement is proven co-located by the join step (`join::sublinks` for subqueries)
//! before it runs. The own conjuncts filter a reference's rows where they are read for
//! a move; the statement still applies them.

use super::statement::{conjuncts, equality, from_item, on_equalities, only_reads, resolve_column};
use super::ColumnEquality;
use crate::catalog::DistTable;
use crate::planner::join::outermost_sublinks;
use crate::sql::parse::RelRef;
use pg_query::protobuf::{self, node::Node as N, SubLinkType};
use std::sync::Arc;

/// What the statement's levels say about its references (indexes into `refs`).
#[derive(Debug, Default)]
pub(super) struct Shape {
    /// Every reference the levels' FROM items cover, each once.
    pub covered: Vec<usize>,
    /// On the nullable side of an outer join of its level.
    pub nullable: Vec<bool>,
    pub equalities: Vec<ColumnEquality>,
    /// Each reference's own conjuncts (WHERE's none when nullable; ON's where the join
    /// allows).
    pub own: Vec<Vec<protobuf::Node>>,
    /// Each reference's columns a correlated equality of its level compares with a
    /// column of an enclosing level (looked up once per outer row).
    pub probed: Vec<Vec<String>>,
}

/// The shape of `s` and the subqueries in it, or None when some level is not a plain
/// SELECT over tables and joins of tables (WITH, set operations, VALUES, a subquery or
/// function in FROM, NATURAL joins, column aliases on a table).
pub(super) fn shape(s: &protobuf::SelectStmt, refs: &[(RelRef, Arc<DistTable>)]) -> Option<Shape> {
    let mut out = Shape {
        nullable: vec![false; refs.len()],
        own: vec![Vec::new(); refs.len()],
        probed: vec![Vec::new(); refs.len()],
        ..Shape::default()
    };
    level(s, &[], refs, &mut out)?;
    Some(out)
}

/// One query level: its references, then the subqueries in it against them.
fn level(
    s: &protobuf::SelectStmt,
    outer: &[Vec<usize>],
    refs: &[(RelRef, Arc<DistTable>)],
    out: &mut Shape,
) -> Option<Vec<usize>> {
    if s.with_clause.is_some()
        || (s.op != protobuf::SetOperation::SetopNone as i32 && s.op != 0)
        || !s.values_lists.is_empty()
    {
        return None;
    }
    let mut here = Vec::new();
    let mut ons = Vec::new();
    for item in &s.from_clause {
        here.extend(from_item(
            item,
            refs,
            &mut out.nullable,
            &mut out.equalities,
            &mut ons,
        )?);
    }
    let mut scope: Vec<Vec<usize>> = vec![here.clone()];
    scope.extend(outer.iter().cloned());
    let scope_refs: Vec<&[usize]> = scope.iter().map(|l| l.as_slice()).collect();
    out.equalities
        .extend(on_equalities(&ons, refs, &scope_refs));
    let mut where_conjuncts = Vec::new();
    if let Some(w) = s.where_clause.as_deref() {
        conjuncts(w, &mut where_conjuncts);
    }
    for e in where_conjuncts
        .iter()
        .filter_map(|c| equality(c, refs, &scope_refs))
    {
        for (mine, other) in [(&e.a, &e.b), (&e.b, &e.a)] {
            if here.contains(&mine.0)
                && !here.contains(&other.0)
                && !out.probed[mine.0].contains(&mine.1)
            {
                out.probed[mine.0].push(mine.1.clone());
            }
        }
        out.equalities.push(e);
    }
    for &i in &here {
        if !out.nullable[i] {
            out.own[i] = where_conjuncts
                .iter()
                .filter(|c| only_reads(c, i, refs, &scope_refs))
                .cloned()
                .collect();
        }
    }
    // An ON's conjuncts reading only a reference it may filter (`JoinOn::filterable`:
    // TPC-H Q13's `o_comment NOT LIKE ...` on a LEFT JOIN's `orders`).
    for on in &ons {
        let mut on_conjuncts = Vec::new();
        conjuncts(&on.quals, &mut on_conjuncts);
        for &i in &on.filterable {
            out.own[i].extend(
                on_conjuncts
                    .iter()
                    .filter(|c| only_reads(c, i, refs, &scope_refs))
                    .cloned(),
            );
        }
    }
    out.covered.extend(here.iter().copied());
    // The subqueries of this level (not those inside them: their own levels).
    let top_level_links = top_level_link_locations(&where_conjuncts);
    for link in level_sublinks(s) {
        let Some(N::SelectStmt(sub)) = link.subselect.as_deref().and_then(|n| n.node.as_ref())
        else {
            return None;
        };
        let inner = level(sub, &scope, refs, out)?;
        if top_level_links.contains(&link.location) {
            out.equalities
                .extend(in_link(&link, sub, &inner, &scope_refs, refs));
        }
    }
    Some(here)
}

/// Where the subqueries that are whole conjuncts of a WHERE stand (their `location`).
pub(super) fn top_level_link_locations(conjuncts: &[protobuf::Node]) -> Vec<i32> {
    conjuncts
        .iter()
        .filter_map(|c| match c.node.as_ref() {
            Some(N::SubLink(l)) => Some(l.location),
            _ => None,
        })
        .collect()
}

/// The subqueries of one query level: in its FROM, WHERE, select list, GROUP BY,
/// HAVING and ORDER BY, not those inside them (their own levels).
pub(super) fn level_sublinks(s: &protobuf::SelectStmt) -> Vec<protobuf::SubLink> {
    let mut roots: Vec<protobuf::Node> = s.from_clause.clone();
    roots.extend(s.where_clause.as_deref().cloned());
    roots.extend(s.target_list.iter().cloned());
    roots.extend(s.group_clause.iter().cloned());
    roots.extend(s.having_clause.as_deref().cloned());
    roots.extend(s.sort_clause.iter().cloned());
    outermost_sublinks(&roots)
}

/// `x IN (SELECT y ...)` (or `x = ANY (...)`): the equality of the two columns.
pub(super) fn in_link(
    link: &protobuf::SubLink,
    sub: &protobuf::SelectStmt,
    inner: &[usize],
    scope: &[&[usize]],
    refs: &[(RelRef, Arc<DistTable>)],
) -> Option<ColumnEquality> {
    if link.sub_link_type != SubLinkType::AnySublink as i32 {
        return None;
    }
    let equality_op = match crate::sql::parse::string_items(&link.oper_name).as_slice() {
        [] => true,
        [op] => *op == "=",
        _ => false,
    };
    if !equality_op {
        return None;
    }
    let Some(N::ColumnRef(outer_col)) = link.testexpr.as_deref().and_then(|n| n.node.as_ref())
    else {
        return None;
    };
    let a = resolve_column(outer_col, refs, scope)?;
    let [t] = sub.target_list.as_slice() else {
        return None;
    };
    let Some(N::ResTarget(rt)) = t.node.as_ref() else {
        return None;
    };
    let Some(N::ColumnRef(inner_col)) = rt.val.as_deref().and_then(|n| n.node.as_ref()) else {
        return None;
    };
    let mut inner_scope: Vec<&[usize]> = vec![inner];
    inner_scope.extend_from_slice(scope);
    let b = resolve_column(inner_col, refs, &inner_scope)?;
    (a.0 != b.0).then_some(ColumnEquality { a, b })
}
