//! Subqueries co-located with the query around them (Citus's subquery pushdown): a
//! subquery in WHERE, ON, the select list, HAVING or ORDER BY (EXISTS, NOT EXISTS, IN,
//! NOT IN, ANY / ALL, scalar, ARRAY) runs inside each shard index's statement when the
//! rows it reads for one row of the outer query all lie in that shard index:
//! - *correlated*: each of its hash tables is tied to the outer query's hash tables by
//!   equalities of distribution columns among its own top-level `AND`ed WHERE
//!   conjuncts (or inner joins' ON); its rows for an outer row then carry that row's
//!   distribution value, so anything inside (aggregates, LIMIT, windows) is exact;
//! - *IN-linked*: `outer.dist IN (SELECT inner.dist ...)` (or `= ANY`), both columns
//!   of tables no outer join nulls (distribution columns are never NULL), and the
//!   subquery's rows are the union of its rows per shard index: no LIMIT / OFFSET, no
//!   window functions, no DISTINCT ON, aggregates only grouped by a distribution
//!   column of its own.
//!
//! Reference tables inside subqueries are on every node and join anything. Anything
//! else (an uncorrelated subquery over a hash table, a correlation on another column,
//! WITH or set operations inside) is not proven here: recursive planning takes it.
//! The proof reads only the `DistTable` of each table reference, never the catalog.

use super::tree::{is_aggregate, visit};
use super::{dist_column_ref, dist_equalities, find, from_item, link_outer_joins};
use crate::catalog::{DistTable, PartitionMethod};
use crate::sql::parse::RelRef;
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self, SubLinkType};
use std::sync::Arc;

/// The subqueries found in `roots` (not inside one another).
pub(in crate::planner) fn outermost_sublinks(roots: &[protobuf::Node]) -> Vec<protobuf::SubLink> {
    let mut out = Vec::new();
    for r in roots {
        let mut r = r.clone();
        crate::sql::walk::expression(&mut r, false, &mut |n, _| match n.node.as_ref() {
            Some(N::SubLink(s)) => {
                out.push((**s).clone());
                true
            }
            _ => false,
        });
    }
    out
}

/// Proves every subquery in `roots` co-located with the query level around it
/// (`levels`: the relations of each enclosing level, innermost first; `nullable`:
/// relations an outer join nulls). Returns the relations read inside them.
pub(super) fn prove(
    rels: &[(RelRef, Arc<DistTable>)],
    levels: &[&[usize]],
    nullable: &[bool],
    roots: &[protobuf::Node],
) -> Result<Vec<usize>, String> {
    let mut covered = Vec::new();
    for link in outermost_sublinks(roots) {
        covered.extend(prove_one(rels, levels, nullable, &link)?);
    }
    Ok(covered)
}

fn prove_one(
    rels: &[(RelRef, Arc<DistTable>)],
    levels: &[&[usize]],
    nullable: &[bool],
    link: &protobuf::SubLink,
) -> Result<Vec<usize>, String> {
    let Some(N::SelectStmt(sub)) = link.subselect.as_deref().and_then(|n| n.node.as_ref()) else {
        return Err("a subquery pgshard cannot read".into());
    };
    if sub.with_clause.is_some() || sub.op != protobuf::SetOperation::SetopNone as i32 {
        return Err("WITH or set operations inside a subquery".into());
    }
    let mut conds = Vec::new();
    let mut links = Vec::new();
    let mut inner_nullable = nullable.to_vec();
    let mut inner = Vec::new();
    for item in &sub.from_clause {
        inner.extend(from_item(
            item,
            rels,
            &mut conds,
            &mut links,
            &mut inner_nullable,
        )?);
    }
    conds.extend(sub.where_clause.as_deref().cloned());
    let mut scope: Vec<&[usize]> = vec![&inner];
    scope.extend_from_slice(levels);
    // One union-find node per relation of the subquery, one for the outer query.
    let outer_node = rels.len();
    let node = |i: usize| if inner.contains(&i) { i } else { outer_node };
    let mut parent: Vec<usize> = (0..=rels.len()).collect();
    for (a, b) in dist_equalities(&conds, rels, &scope) {
        let (ra, rb) = (find(&mut parent, node(a)), find(&mut parent, node(b)));
        parent[ra] = rb;
    }
    link_outer_joins(&links, rels, &mut parent, &scope, &node)?;
    let hash: Vec<usize> = inner
        .iter()
        .copied()
        .filter(|i| rels[*i].1.method == PartitionMethod::Hash)
        .collect();
    let tied = |parent: &mut Vec<usize>| {
        let root = find(parent, outer_node);
        hash.iter().all(|i| find(parent, *i) == root)
    };
    if !tied(&mut parent) {
        let Some(i) = in_link(rels, levels, nullable, &inner, &inner_nullable, link, sub) else {
            return Err(
                "a subquery not joined to the query around it on the distribution column".into(),
            );
        };
        let (ri, ro) = (find(&mut parent, i), find(&mut parent, outer_node));
        parent[ri] = ro;
        if !tied(&mut parent) {
            return Err(
                "a subquery not joined to the query around it on the distribution column".into(),
            );
        }
        decomposable(rels, &inner, &inner_nullable, sub)?;
    }
    // Subqueries inside this one, against its relations first.
    let mut roots: Vec<protobuf::Node> = sub.from_clause.clone();
    roots.extend(sub.where_clause.as_deref().cloned());
    roots.extend(sub.target_list.iter().cloned());
    roots.extend(sub.group_clause.iter().cloned());
    roots.extend(sub.having_clause.as_deref().cloned());
    roots.extend(sub.sort_clause.iter().cloned());
    let nested = prove(rels, &scope, &inner_nullable, &roots)?;
    inner.extend(nested);
    Ok(inner)
}

/// `outer.dist IN (SELECT inner.dist ...)`: the subquery's relation whose distribution
/// column it selects, when the outer side is a distribution column too and no outer
/// join nulls either.
fn in_link(
    rels: &[(RelRef, Arc<DistTable>)],
    levels: &[&[usize]],
    nullable: &[bool],
    inner: &[usize],
    inner_nullable: &[bool],
    link: &protobuf::SubLink,
    sub: &protobuf::SelectStmt,
) -> Option<usize> {
    if link.sub_link_type != SubLinkType::AnySublink as i32 {
        return None;
    }
    let equality = match crate::sql::parse::string_items(&link.oper_name).as_slice() {
        [] => true,
        [op] => *op == "=",
        _ => false,
    };
    if !equality {
        return None;
    }
    let o = dist_column_ref(link.testexpr.as_deref()?, rels, levels)?;
    if nullable[o] {
        return None;
    }
    let [t] = sub.target_list.as_slice() else {
        return None;
    };
    let Some(N::ResTarget(rt)) = t.node.as_ref() else {
        return None;
    };
    let i = dist_column_ref(rt.val.as_deref()?, rels, &[inner])?;
    (!inner_nullable[i]).then_some(i)
}

/// Whether an IN-linked subquery's rows are the union of its rows per shard index.
fn decomposable(
    rels: &[(RelRef, Arc<DistTable>)],
    inner: &[usize],
    inner_nullable: &[bool],
    sub: &protobuf::SelectStmt,
) -> Result<(), String> {
    if sub.limit_count.is_some() || sub.limit_offset.is_some() {
        return Err("LIMIT or OFFSET in a subquery".into());
    }
    if sub.distinct_clause.iter().any(|d| d.node.is_some()) {
        return Err("DISTINCT ON in a subquery".into());
    }
    let mut probe = sub.clone();
    let mut aggregates = false;
    let mut windows = false;
    let mut parts: Vec<&mut protobuf::Node> = probe.target_list.iter_mut().collect();
    parts.extend(probe.having_clause.as_deref_mut());
    parts.extend(probe.sort_clause.iter_mut());
    for p in parts {
        visit(p, false, &mut |n, inside| {
            if let Some(N::FuncCall(fc)) = n.node.as_ref() {
                windows |= fc.over.is_some();
                aggregates |= !inside && is_aggregate(fc);
            }
            false
        });
    }
    if windows || !sub.window_clause.is_empty() {
        return Err("window functions in a subquery".into());
    }
    if aggregates || !sub.group_clause.is_empty() || sub.having_clause.is_some() {
        let by_dist = sub
            .group_clause
            .iter()
            .any(|g| dist_column_ref(g, rels, &[inner]).is_some_and(|i| !inner_nullable[i]));
        if !by_dist {
            return Err("a subquery grouped by other than the distribution column".into());
        }
    }
    Ok(())
}
