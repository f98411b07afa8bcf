//! Semijoin filters of the references that *stay* (the co-located side a join's moves
//! go to): a staying reference whose rows matter only when they join, by an equality
//! chain, a reference with selective own conjuncts and few keys (`semijoin.rs` proves
//! which) is filtered by those keys in the statement itself, `<alias>.<column> = ANY
//! ('{<keys>}')` ANDed to the WHERE of its query level. Each shard's planner then sees
//! how few of its rows join: TPC-H Q8's `lineitem` shards, joined to the 1,451 parts of
//! one type, are read through the `l_partkey` index instead of hashed whole (32
//! shards of 190,000 rows; plain PostgreSQL probes the index over one table).
//!
//! The keys are read at run time (`executor::session::repartition`), after the
//! strategy: the statement is renamed and planned without the filters first
//! (`Decision`), then again with them. The filter is exact: a row it removes has no
//! key a row that matters can have (`semijoin.rs`), and a NULL key matches nothing.

use super::semijoin::keys_array;
use super::statement::and_all;
use super::{ColumnType, RepartitionPlan, Semijoin};
use crate::planner::join::tree::{column, str_const, string_node};
use bytes::Bytes;
use pg_query::protobuf::{self, node::Node as N};

/// At most this many keys filter a staying reference: they are a constant in every
/// shard's statement, which each shard's planner estimates key by key (about 1 µs a
/// key, per shard).
pub const STAYING_FILTER_MAX_KEYS: usize = 2_500;

/// A staying reference is filtered only when estimated at least this many times more
/// rows than the keys' source (else the filter costs more than it saves).
const STAYING_FILTER_MIN_RATIO: f64 = 10.0;

/// A staying reference's filter by another reference's keys.
#[derive(Debug, Clone)]
pub struct StayingFilter {
    /// The staying reference (index into `RepartitionPlan::rels`).
    pub rel: usize,
    pub semijoin: Semijoin,
}

/// The filters of the hash references that do not move (`moved` the references that
/// do): for each, of the semijoins the statement allows, the one whose source is
/// estimated fewest rows, when few enough to be the keys, of the same hashable type,
/// the source moved (a staying or reference table's rows are on the shard's node, its
/// statistics known to the shard's planner: TPC-H Q2's partsupp by its co-located
/// parts' keys took 0.67 s to 0.81-1.0 s) and the filtered column the first of an
/// index (the filter's use: Q20's supplier filtered by one nation key, 0.84 s to 1.1 s).
pub(super) fn staying_filters(
    plan: &RepartitionPlan,
    est: &[f64],
    types: &dyn Fn(usize, &str) -> Option<ColumnType>,
    moved: &[usize],
) -> Vec<StayingFilter> {
    (0..plan.rels.len())
        .filter(|i| {
            !moved.contains(i)
                && plan.rels[*i].table.method == crate::catalog::PartitionMethod::Hash
        })
        .filter_map(|i| {
            let semijoin = plan
                .semijoins
                .get(i)?
                .iter()
                .filter(|sj| {
                    sj.source != i
                        && moved.contains(&sj.source)
                        && types(i, &sj.column).is_some_and(|t| t.indexed)
                        && est[sj.source] <= STAYING_FILTER_MAX_KEYS as f64
                        && est[sj.source] * STAYING_FILTER_MIN_RATIO <= est[i]
                        && Semijoin::types_fit(
                            types(i, &sj.column),
                            types(sj.source, &sj.source_column),
                        )
                })
                .min_by(|a, b| est[a.source].total_cmp(&est[b.source]))?
                .clone();
            Some(StayingFilter { rel: i, semijoin })
        })
        .collect()
}

/// `tree` with each filter's `<alias>.<column> = ANY ('{<keys>}')` ANDed to the WHERE
/// of every query level whose FROM holds one of the reference's occurrences; None when
/// some occurrence is not found as a level's FROM item, or a key is not UTF-8 text.
pub fn with_filters(
    tree: &N,
    plan: &RepartitionPlan,
    filters: &[(&StayingFilter, &[Bytes])],
) -> Option<N> {
    let mut tree = tree.clone();
    for (f, keys) in filters {
        let rel = &plan.rels[f.rel];
        let array = String::from_utf8(keys_array(keys).to_vec()).ok()?;
        let condition = protobuf::Node {
            node: Some(N::AExpr(Box::new(protobuf::AExpr {
                kind: protobuf::AExprKind::AexprOpAny as i32,
                name: vec![string_node("=")],
                lexpr: Some(Box::new(column(&[rel.alias(), &f.semijoin.column]))),
                rexpr: Some(Box::new(str_const(&array))),
                location: -1,
                ..Default::default()
            }))),
        };
        let at: Vec<i32> = std::iter::once(&rel.rel)
            .chain(&rel.also)
            .map(|r| r.location as i32)
            .collect();
        let mut found = 0;
        add_to_levels(&mut tree, &at, &condition, &mut found);
        if found != at.len() {
            return None;
        }
    }
    Some(tree)
}

/// ANDs `condition` to the WHERE of each level of `n` (subqueries included) whose FROM
/// holds a table reference at one of `at`, counting them in `found`.
fn add_to_levels(n: &mut N, at: &[i32], condition: &protobuf::Node, found: &mut usize) {
    let N::SelectStmt(s) = n else {
        return;
    };
    let here: usize = s.from_clause.iter().map(|f| holds(f, at)).sum();
    if here > 0 {
        *found += here;
        let mut all: Vec<protobuf::Node> = s.where_clause.take().map(|w| *w).into_iter().collect();
        all.push(condition.clone());
        s.where_clause = and_all(all).map(Box::new);
    }
    // The subqueries: their own levels.
    crate::sql::walk::statement(n, false, &mut |x, _| match x.node.as_mut() {
        Some(N::SubLink(l)) => {
            if let Some(sub) = l.subselect.as_deref_mut().and_then(|x| x.node.as_mut()) {
                add_to_levels(sub, at, condition, found);
            }
            true
        }
        Some(N::RangeSubselect(r)) => {
            if let Some(sub) = r.subquery.as_deref_mut().and_then(|x| x.node.as_mut()) {
                add_to_levels(sub, at, condition, found);
            }
            true
        }
        _ => false,
    });
}

/// How many table references at `at` a FROM item holds (joins descended, not
/// subqueries: their own levels).
fn holds(n: &protobuf::Node, at: &[i32]) -> usize {
    match n.node.as_ref() {
        Some(N::RangeVar(rv)) => usize::from(at.contains(&rv.location)),
        Some(N::JoinExpr(j)) => {
            j.larg.as_deref().map_or(0, |x| holds(x, at))
                + j.rarg.as_deref().map_or(0, |x| holds(x, at))
        }
        _ => 0,
    }
}
