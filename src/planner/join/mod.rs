//! Joins pushed down to the shards. A SELECT joining distributed tables runs shard by
//! shard when that is provably the same as running it on one server:
//! - every hash-distributed table is in one co-location group and all of them are
//!   linked by equalities between their distribution columns (top-level `AND`ed in
//!   WHERE or an inner join's ON, or `USING` the column), so matching rows share a
//!   shard index; reference tables (one shard on every worker) join anything;
//! - an outer join keeps its rows only on a side holding a hash table, and two hash
//!   tables across an outer join are linked by an equality in that join's ON.
//! With a distribution value fixed the whole query is routed to one shard index;
//! otherwise it runs per shard index. Anything else is refused with the reason.

mod combine;
mod sublinks;
pub(super) use sublinks::outermost_sublinks;
pub(super) mod tree;

use super::distvalue::{find_equality, ValueSource};
use super::multishard::{self, Joined};
use super::router::RouterPlan;
use super::template::{Edit, RelTarget, ShardMap, ShardSqlTemplate};
use super::Plan;
use crate::catalog::{DistTable, PartitionMethod};
use crate::error::{PgError, PgResult};
use crate::sql::parse::RelRef;
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self, BoolExprType, JoinType};
use std::sync::Arc;

fn refuse(reason: &str) -> PgResult<Plan> {
    Ok(Plan::Unsupported(PgError::not_supported(format!(
        "pgshard cannot push down this join: {reason}"
    ))))
}

/// A FROM item: the relation indexes it covers.
fn from_item(
    n: &protobuf::Node,
    rels: &[(RelRef, Arc<DistTable>)],
    conds: &mut Vec<protobuf::Node>,
    links_in_on: &mut Vec<JoinLink>,
    nullable: &mut Vec<bool>,
) -> Result<Vec<usize>, String> {
    match n.node.as_ref() {
        Some(N::RangeVar(rv)) => rels
            .iter()
            .position(|(r, _)| r.location == rv.location.max(0) as usize)
            .map(|i| vec![i])
            .ok_or_else(|| "a table pgshard could not place".to_string()),
        Some(N::JoinExpr(j)) => {
            if j.is_natural {
                return Err("NATURAL joins are not supported".into());
            }
            let left = from_item(
                j.larg.as_deref().ok_or("bad join")?,
                rels,
                conds,
                links_in_on,
                nullable,
            )?;
            let right = from_item(
                j.rarg.as_deref().ok_or("bad join")?,
                rels,
                conds,
                links_in_on,
                nullable,
            )?;
            let using: Vec<String> = j
                .using_clause
                .iter()
                .filter_map(|u| match u.node.as_ref() {
                    Some(N::String(s)) => Some(s.sval.clone()),
                    _ => None,
                })
                .collect();
            let kind = JoinType::try_from(j.jointype).unwrap_or(JoinType::Undefined);
            let has_hash = |side: &[usize]| {
                side.iter()
                    .any(|i| rels[*i].1.method == PartitionMethod::Hash)
            };
            let (keeps_left, keeps_right) = match kind {
                JoinType::JoinInner => (false, false),
                JoinType::JoinLeft => (true, false),
                JoinType::JoinRight => (false, true),
                JoinType::JoinFull => (true, true),
                _ => return Err("this join type is not supported".into()),
            };
            if (keeps_left && !has_hash(&left) && has_hash(&right))
                || (keeps_right && !has_hash(&right) && has_hash(&left))
            {
                return Err(
                    "an outer join keeping the rows of a reference table joined to a distributed table"
                        .into(),
                );
            }
            for &i in left.iter().filter(|_| keeps_right) {
                nullable[i] = true;
            }
            for &i in right.iter().filter(|_| keeps_left) {
                nullable[i] = true;
            }
            if kind == JoinType::JoinInner {
                if let Some(q) = &j.quals {
                    conds.push((**q).clone());
                }
                links_in_on.push((left.clone(), right.clone(), None, using));
            } else {
                links_in_on.push((
                    left.clone(),
                    right.clone(),
                    j.quals.as_deref().cloned(),
                    using,
                ));
            }
            Ok(left.into_iter().chain(right).collect())
        }
        _ => Err("subqueries or functions in FROM are not supported in joins".into()),
    }
}

/// `AND`ed conditions, flattened.
fn conjuncts(n: &protobuf::Node, out: &mut Vec<protobuf::Node>) {
    match n.node.as_ref() {
        Some(N::BoolExpr(b)) if b.boolop == BoolExprType::AndExpr as i32 => {
            for a in &b.args {
                conjuncts(a, out);
            }
        }
        _ => out.push(n.clone()),
    }
}

/// The relation and column a column reference names, resolved as PostgreSQL scopes
/// names: `scope` holds the relations of each query level, innermost first; a name
/// found on a level (once) is that level's, found twice it is ambiguous (None).
fn column_rel(
    n: &protobuf::Node,
    rels: &[(RelRef, Arc<DistTable>)],
    scope: &[&[usize]],
) -> Option<(usize, String)> {
    let Some(N::ColumnRef(cr)) = n.node.as_ref() else {
        return None;
    };
    let parts: Vec<&str> = cr
        .fields
        .iter()
        .map(|f| match f.node.as_ref() {
            Some(N::String(s)) => Some(s.sval.as_str()),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    for level in scope {
        let hits: Vec<usize> = match parts.as_slice() {
            [q, _] => level
                .iter()
                .copied()
                .filter(|i| {
                    let (r, t) = &rels[*i];
                    match &r.alias {
                        Some(a) => a == q,
                        None => t.name == *q,
                    }
                })
                .collect(),
            [col] => level
                .iter()
                .copied()
                .filter(|i| rels[*i].1.columns.iter().any(|c| c == col))
                .collect(),
            _ => return None,
        };
        match hits.as_slice() {
            [] => continue,
            [i] => {
                let col = parts.last()?;
                return rels[*i]
                    .1
                    .columns
                    .iter()
                    .any(|c| c == col)
                    .then(|| (*i, col.to_string()));
            }
            _ => return None,
        }
    }
    None
}

/// The relation a column reference names, if it is a hash table's distribution column.
fn dist_column_ref(
    n: &protobuf::Node,
    rels: &[(RelRef, Arc<DistTable>)],
    scope: &[&[usize]],
) -> Option<usize> {
    let (i, col) = column_rel(n, rels, scope)?;
    let t = &rels[i].1;
    (t.method == PartitionMethod::Hash && t.dist_column.as_ref().is_some_and(|c| c.name == col))
        .then_some(i)
}

/// Equalities between two distribution columns among the conjuncts: (rel a, rel b).
fn dist_equalities(
    conds: &[protobuf::Node],
    rels: &[(RelRef, Arc<DistTable>)],
    scope: &[&[usize]],
) -> Vec<(usize, usize)> {
    let mut flat = Vec::new();
    for c in conds {
        conjuncts(c, &mut flat);
    }
    flat.iter()
        .filter_map(|c| match c.node.as_ref() {
            Some(N::AExpr(e))
                if e.kind == protobuf::AExprKind::AexprOp as i32
                    && matches!(e.name.as_slice(), [n] if matches!(n.node.as_ref(), Some(N::String(s)) if s.sval == "=")) =>
            {
                let l = dist_column_ref(e.lexpr.as_deref()?, rels, scope)?;
                let r = dist_column_ref(e.rexpr.as_deref()?, rels, scope)?;
                (l != r).then_some((l, r))
            }
            _ => None,
        })
        .collect()
}

/// An outer join's sides: (left relations, right relations, ON unless inner, USING).
type JoinLink = (Vec<usize>, Vec<usize>, Option<protobuf::Node>, Vec<String>);

/// Outer joins: USING the distribution column links both sides; two sides with hash
/// tables must be linked by the join's own ON clause. `node` maps a relation to its
/// union-find node.
fn link_outer_joins(
    links: &[JoinLink],
    rels: &[(RelRef, Arc<DistTable>)],
    parent: &mut [usize],
    scope: &[&[usize]],
    node: &dyn Fn(usize) -> usize,
) -> Result<(), String> {
    let is_hash = |i: &usize| rels[*i].1.method == PartitionMethod::Hash;
    let union = |parent: &mut [usize], a: usize, b: usize| {
        let (ra, rb) = (find(parent, node(a)), find(parent, node(b)));
        parent[ra] = rb;
    };
    for (left, right, on, using) in links {
        let linked_by_using = using.iter().any(|col| {
            let side_has = |side: &[usize]| {
                side.iter().any(|i| {
                    is_hash(i)
                        && rels[*i]
                            .1
                            .dist_column
                            .as_ref()
                            .is_some_and(|c| &c.name == col)
                })
            };
            side_has(left) && side_has(right)
        });
        if linked_by_using {
            for &l in left.iter().filter(|i| is_hash(i)) {
                for &r in right.iter().filter(|i| is_hash(i)) {
                    union(parent, l, r);
                }
            }
        }
        if let Some(on) = on {
            let eqs = dist_equalities(std::slice::from_ref(on), rels, scope);
            for &(a, b) in &eqs {
                union(parent, a, b);
            }
            let has_hash = |side: &[usize]| side.iter().any(is_hash);
            if has_hash(left)
                && has_hash(right)
                && !linked_by_using
                && !eqs.iter().any(|(a, b)| {
                    (left.contains(a) && right.contains(b))
                        || (left.contains(b) && right.contains(a))
                })
            {
                return Err("an outer join between distributed tables must have an equality of their distribution columns in its ON clause".into());
            }
        }
    }
    Ok(())
}

fn find(parent: &mut [usize], i: usize) -> usize {
    if parent[i] != i {
        let root = find(parent, parent[i]);
        parent[i] = root;
    }
    parent[i]
}

/// Plans a SELECT over several distributed (hash or reference) tables, `rels` in
/// text order, every one of them distributed.
pub fn plan_join(
    s: &protobuf::SelectStmt,
    text: &str,
    rels: &[(RelRef, Arc<DistTable>)],
) -> PgResult<Plan> {
    if s.with_clause.is_some() || s.op != protobuf::SetOperation::SetopNone as i32 {
        return refuse("WITH or set operations");
    }
    let route = s.locking_clause.is_empty() && s.into_clause.is_none();
    let mut other_parts: Vec<protobuf::Node> = s.target_list.clone();
    other_parts.extend(s.group_clause.iter().cloned());
    other_parts.extend(s.having_clause.as_deref().cloned());
    other_parts.extend(s.sort_clause.iter().cloned());
    let paired = match pair_shards_with(
        text,
        rels,
        &s.from_clause,
        None,
        s.where_clause.as_deref(),
        &other_parts,
        route,
    )? {
        Ok(p) => p,
        Err(reason) => return refuse(&reason),
    };
    let ptable = rels[paired.primary].1.clone();
    match paired.fixed {
        Some(value) => Ok(Plan::Router(Arc::new(RouterPlan {
            template: ShardSqlTemplate::with_relations(
                text,
                paired.joined.targets,
                paired.joined.edits,
            ),
            table: ptable,
            values: vec![value],
            is_insert: false,
            read_only: true,
            // The simple-protocol shape cache handles one relation only.
            value_exprs: Vec::new(),
            relation_span: None,
            add_alias: false,
        }))),
        None => {
            let scope = combine::JoinScope {
                rels,
                outer: paired.outer,
                nullable: paired.nullable,
                slots: paired.slots,
                targets: paired.joined.targets.clone(),
            };
            let template = ShardSqlTemplate::with_relations(
                text,
                paired.joined.targets.clone(),
                paired.joined.edits.clone(),
            );
            match multishard::plan_select_joined(s, text, ptable.clone(), paired.joined)? {
                Plan::Unsupported(_) => {}
                planned => return Ok(planned),
            }
            let functions = multishard::combine_functions(s);
            match combine::plan(s, &scope, !functions.is_empty()) {
                Ok(c) => Ok(Plan::MultiShard(Arc::new(multishard::MultiShardPlan {
                    table: ptable,
                    template,
                    shape: multishard::MultiShardShape::Combine,
                    limit: multishard::Bound::None,
                    offset: 0,
                    functions,
                    combine: Some(Arc::new(c)),
                    node_tasks: false,
                }))),
                Err(reason) => refuse(&reason),
            }
        }
    }
}

/// Relations proven to pair shard by shard (see the module comment).
pub struct Paired {
    /// The relation whose shards the tasks iterate over (`rels` index): the one whose
    /// distribution value is fixed, else `first` or the first hash table.
    pub primary: usize,
    /// The fixed distribution value of the primary, when routed.
    pub fixed: Option<ValueSource>,
    /// Every relation's edit and target, the primary first.
    pub joined: Joined,
    /// The relations of the FROM items (and `first`).
    pub outer: Vec<usize>,
    /// Relations on the nullable side of an outer join.
    pub nullable: Vec<bool>,
    /// Each relation's slot in `joined` (the primary's is 0).
    pub slots: Vec<usize>,
}

/// Proves that `rels` (every table reference of the statement, all distributed) pair
/// shard by shard: the FROM items `from_items` (plus `first`, a relation inner-joined
/// to them outside of FROM, as the target of `UPDATE ... FROM` / `DELETE ... USING`),
/// joined by `where_clause` and their ON clauses. `route`: look for a fixed
/// distribution value. `Ok(Err(reason))` when they do not pair.
pub fn pair_shards(
    text: &str,
    rels: &[(RelRef, Arc<DistTable>)],
    from_items: &[protobuf::Node],
    first: Option<usize>,
    where_clause: Option<&protobuf::Node>,
    route: bool,
) -> PgResult<Result<Paired, String>> {
    pair_shards_with(text, rels, from_items, first, where_clause, &[], route)
}

/// [`pair_shards`], subqueries in `other_parts` (and in WHERE and ON) included: each
/// must be co-located with the query around it (`sublinks.rs`).
pub fn pair_shards_with(
    text: &str,
    rels: &[(RelRef, Arc<DistTable>)],
    from_items: &[protobuf::Node],
    first: Option<usize>,
    where_clause: Option<&protobuf::Node>,
    other_parts: &[protobuf::Node],
    route: bool,
) -> PgResult<Result<Paired, String>> {
    let mut conds = Vec::new();
    let mut links = Vec::new();
    let mut covered: Vec<usize> = first.into_iter().collect();
    let mut nullable = vec![false; rels.len()];
    for item in from_items {
        match from_item(item, rels, &mut conds, &mut links, &mut nullable) {
            Ok(c) => covered.extend(c),
            Err(reason) => return Ok(Err(reason)),
        }
    }
    covered.sort_unstable();
    covered.dedup();
    let outer = covered.clone();
    if let Some(w) = where_clause {
        conds.push(w.clone());
    }
    let hash: Vec<usize> = (0..rels.len())
        .filter(|i| rels[*i].1.method == PartitionMethod::Hash)
        .collect();
    let first = match first {
        Some(f) if rels[f].1.method == PartitionMethod::Hash => f,
        _ => match hash.iter().find(|i| outer.contains(i)) {
            Some(&f) => f,
            None => {
                return Ok(Err(
                    "joins of reference tables only are not supported yet".into()
                ))
            }
        },
    };
    let scope: &[&[usize]] = &[&outer];
    let mut parent: Vec<usize> = (0..rels.len()).collect();
    for (a, b) in dist_equalities(&conds, rels, scope) {
        let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
        parent[ra] = rb;
    }
    if let Err(reason) = link_outer_joins(&links, rels, &mut parent, scope, &|i| i) {
        return Ok(Err(reason));
    }
    // Subqueries: each co-located with the query around it.
    let mut roots: Vec<protobuf::Node> = from_items.to_vec();
    roots.extend(where_clause.cloned());
    roots.extend(other_parts.iter().cloned());
    match sublinks::prove(rels, &[&outer], &nullable, &roots) {
        Ok(inner) => {
            let root = find(&mut parent, first);
            for i in inner {
                if rels[i].1.method == PartitionMethod::Hash {
                    let ri = find(&mut parent, i);
                    parent[ri] = root;
                }
                covered.push(i);
            }
        }
        Err(reason) => return Ok(Err(reason)),
    }
    covered.sort_unstable();
    covered.dedup();
    if covered.len() != rels.len() {
        return Ok(Err("distributed tables in subqueries".into()));
    }
    let root = find(&mut parent, first);
    let base = &rels[first].1;
    for &i in &hash {
        let t = &rels[i].1;
        if t.colocation_id != base.colocation_id || t.shards.len() != base.shards.len() {
            return Ok(Err(format!(
                "\"{}\" and \"{}\" are not co-located",
                base.name, t.name
            )));
        }
        if find(&mut parent, i) != root {
            return Ok(Err(format!(
                "\"{}\" and \"{}\" are not joined on their distribution columns",
                base.name, t.name
            )));
        }
    }
    // The routed table: a hash table whose distribution column is fixed, if any.
    let fixed = if route {
        hash.iter().filter(|i| outer.contains(i)).find_map(|&i| {
            let (r, t) = &rels[i];
            let col = t.dist_column.as_ref()?;
            let names = |q: &str| match &r.alias {
                Some(a) => q == a,
                None => q == t.name,
            };
            find_equality(where_clause, col, &names).map(|(v, _)| (i, v))
        })
    } else {
        None
    };
    let primary = fixed.as_ref().map(|(i, _)| *i).unwrap_or(first);
    let ptable = rels[primary].1.clone();
    // Relation order in the template: the primary first.
    let mut order: Vec<usize> = vec![primary];
    order.extend((0..rels.len()).filter(|i| *i != primary));
    let mut targets = Vec::new();
    let mut edits = Vec::new();
    let mut slots = vec![0; rels.len()];
    for (slot, &i) in order.iter().enumerate() {
        slots[i] = slot;
        let (r, t) = &rels[i];
        let map = if i == primary {
            ShardMap::Same
        } else if t.method == PartitionMethod::Reference {
            match t.shards.as_slice() {
                [one] => ShardMap::Fixed(one.shard_id),
                _ => {
                    return Ok(Err(format!(
                        "reference table \"{}\" has no single shard",
                        t.name
                    )))
                }
            }
        } else {
            // Co-located: same ranges, shards sorted by range.
            let mut m = std::collections::HashMap::new();
            for (a, b) in ptable.shards.iter().zip(&t.shards) {
                if a.min != b.min || a.max != b.max {
                    return Ok(Err(format!(
                        "the shard ranges of \"{}\" and \"{}\" differ",
                        ptable.name, t.name
                    )));
                }
                m.insert(a.shard_id, b.shard_id);
            }
            ShardMap::ByPrimary(m)
        };
        targets.push(RelTarget {
            schema: t.schema.clone(),
            table: t.name.clone(),
            map,
        });
        edits.push(Edit::relation_of(text, r, slot)?);
    }
    Ok(Ok(Paired {
        primary,
        fixed: fixed.map(|(_, v)| v),
        joined: Joined { edits, targets },
        outer,
        nullable,
        slots,
    }))
}

#[cfg(test)]
pub(crate) mod tests;
