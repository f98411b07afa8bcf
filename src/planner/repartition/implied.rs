//! Filters a moved reference's source rows get from the statement's WHERE beyond its
//! own conjuncts: a top-level OR whose every branch holds conditions on that
//! reference alone implies the OR, over the branches, of those conditions (TPC-H
//! Q19: each branch tests `part` and `lineitem`, so `part`'s moved rows are those of
//! some branch's `p_brand`, `p_container`, `p_size`). A row failing the implied
//! filter makes no branch true, whatever it is joined with, so dropping it where it
//! is read changes no result. Only for references on no outer join's nullable side
//! and only when every FROM item is a plain table reference or join of them (the
//! WHERE then filters the joined rows, as the own conjuncts do).

use super::statement::{conjuncts, from_item, only_reads};
use super::RepartitionPlan;
use crate::catalog::DistTable;
use crate::sql::parse::RelRef;
use pg_query::protobuf::{self, node::Node as N, BoolExprType};
use std::sync::Arc;

/// The conditions on reference `rel` alone that the statement's top-level WHERE
/// implies and that are not already among its own conjuncts (empty when none).
pub fn implied_conjuncts(plan: &RepartitionPlan, rel: usize) -> Vec<protobuf::Node> {
    let Some(N::SelectStmt(s)) = plan.stmt.node.as_ref() else {
        return Vec::new();
    };
    let Some(w) = s.where_clause.as_deref() else {
        return Vec::new();
    };
    let refs: Vec<(RelRef, Arc<DistTable>)> = plan
        .rels
        .iter()
        .map(|r| (r.rel.clone(), r.table.clone()))
        .collect();
    // One move serving references inside subqueries too (`also`) must keep the rows
    // they read.
    if !plan.rels[rel].also.is_empty() {
        return Vec::new();
    }
    let mut nullable = vec![false; refs.len()];
    let (mut ignored, mut ons) = (Vec::new(), Vec::new());
    let mut covered = Vec::new();
    for item in &s.from_clause {
        match from_item(item, &refs, &mut nullable, &mut ignored, &mut ons) {
            Some(c) => covered.extend(c),
            None => return Vec::new(),
        }
    }
    if !covered.contains(&rel) || nullable[rel] {
        return Vec::new();
    }
    // The top level's references resolve the WHERE's columns.
    let scope: [&[usize]; 1] = [&covered];
    let mut top = Vec::new();
    conjuncts(w, &mut top);
    top.iter()
        .filter(|c| is_or(c) && !only_reads(c, rel, &refs, &scope))
        .filter_map(|c| implied(c, rel, &refs, &scope))
        .collect()
}

fn is_or(n: &protobuf::Node) -> bool {
    matches!(n.node.as_ref(), Some(N::BoolExpr(b)) if b.boolop == BoolExprType::OrExpr as i32)
}

/// A condition on `rel` alone that `c` being true implies: `c` itself when it reads
/// only `rel`; for an AND the AND of what its arguments imply (None when none
/// implies anything); for an OR the OR of what every argument implies (None when one
/// implies nothing).
fn implied(
    c: &protobuf::Node,
    rel: usize,
    refs: &[(RelRef, Arc<DistTable>)],
    scope: &[&[usize]],
) -> Option<protobuf::Node> {
    if only_reads(c, rel, refs, scope) {
        return Some(c.clone());
    }
    let N::BoolExpr(b) = c.node.as_ref()? else {
        return None;
    };
    let op = BoolExprType::try_from(b.boolop).ok()?;
    let args: Vec<protobuf::Node> = match op {
        BoolExprType::AndExpr => {
            let mut parts = Vec::new();
            conjuncts(c, &mut parts);
            parts
                .iter()
                .filter_map(|a| implied(a, rel, refs, scope))
                .collect()
        }
        BoolExprType::OrExpr => b
            .args
            .iter()
            .map(|a| implied(a, rel, refs, scope))
            .collect::<Option<Vec<_>>>()?,
        _ => return None,
    };
    match args.len() {
        0 => None,
        1 => args.into_iter().next(),
        _ => Some(protobuf::Node {
            node: Some(N::BoolExpr(Box::new(protobuf::BoolExpr {
                xpr: None,
                boolop: op as i32,
                args,
                location: -1,
            }))),
        }),
    }
}
