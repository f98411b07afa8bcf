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
    links_in_on: &mut Vec<(Vec<usize>, Vec<usize>, Option<protobuf::Node>, Vec<String>)>,
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
            )?;
            let right = from_item(
                j.rarg.as_deref().ok_or("bad join")?,
                rels,
                conds,
                links_in_on,
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

/// The relation a column reference names, if it is a distribution column.
fn dist_column_ref(n: &protobuf::Node, rels: &[(RelRef, Arc<DistTable>)]) -> Option<usize> {
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
    let is_dist = |i: usize, col: &str| {
        rels[i].1.method == PartitionMethod::Hash
            && rels[i]
                .1
                .dist_column
                .as_ref()
                .is_some_and(|c| c.name == col)
    };
    match parts.as_slice() {
        [q, col] => {
            let i = rels.iter().position(|(r, t)| match &r.alias {
                Some(a) => a == q,
                None => t.name == *q,
            })?;
            is_dist(i, col).then_some(i)
        }
        [col] => {
            // Unqualified: only unambiguous when one relation has such a column.
            let having: Vec<usize> = (0..rels.len())
                .filter(|i| rels[*i].1.columns.iter().any(|c| c == col))
                .collect();
            match having.as_slice() {
                [i] if is_dist(*i, col) => Some(*i),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Equalities between two distribution columns among the conjuncts: (rel a, rel b).
fn dist_equalities(
    conds: &[protobuf::Node],
    rels: &[(RelRef, Arc<DistTable>)],
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
                let l = dist_column_ref(e.lexpr.as_deref()?, rels)?;
                let r = dist_column_ref(e.rexpr.as_deref()?, rels)?;
                (l != r).then_some((l, r))
            }
            _ => None,
        })
        .collect()
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
    let paired = match pair_shards(
        text,
        rels,
        &s.from_clause,
        None,
        s.where_clause.as_deref(),
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
        None => multishard::plan_select_joined(s, text, ptable, paired.joined),
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
    let mut conds = Vec::new();
    let mut links = Vec::new();
    let mut covered: Vec<usize> = first.into_iter().collect();
    for item in from_items {
        match from_item(item, rels, &mut conds, &mut links) {
            Ok(c) => covered.extend(c),
            Err(reason) => return Ok(Err(reason)),
        }
    }
    covered.sort_unstable();
    covered.dedup();
    if covered.len() != rels.len() {
        return Ok(Err("distributed tables in subqueries".into()));
    }
    if let Some(w) = where_clause {
        conds.push(w.clone());
    }
    let hash: Vec<usize> = (0..rels.len())
        .filter(|i| rels[*i].1.method == PartitionMethod::Hash)
        .collect();
    let first = match first {
        Some(f) if rels[f].1.method == PartitionMethod::Hash => f,
        _ => match hash.first() {
            Some(&f) => f,
            None => {
                return Ok(Err(
                    "joins of reference tables only are not supported yet".into()
                ))
            }
        },
    };
    let mut parent: Vec<usize> = (0..rels.len()).collect();
    for (a, b) in dist_equalities(&conds, rels) {
        let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
        parent[ra] = rb;
    }
    // Outer joins: USING the distribution column links both sides; two sides with
    // hash tables must be linked by the join's own ON clause.
    for (left, right, on, using) in &links {
        let linked_by_using = |l: &[usize], r: &[usize]| {
            using.iter().any(|col| {
                let side_has = |side: &[usize]| {
                    side.iter().any(|i| {
                        rels[*i].1.method == PartitionMethod::Hash
                            && rels[*i]
                                .1
                                .dist_column
                                .as_ref()
                                .is_some_and(|c| &c.name == col)
                    })
                };
                side_has(l) && side_has(r)
            })
        };
        if linked_by_using(left, right) {
            for &l in left
                .iter()
                .filter(|i| rels[**i].1.method == PartitionMethod::Hash)
            {
                for &r in right
                    .iter()
                    .filter(|i| rels[**i].1.method == PartitionMethod::Hash)
                {
                    let (rl, rr) = (find(&mut parent, l), find(&mut parent, r));
                    parent[rl] = rr;
                }
            }
        }
        if let Some(on) = on {
            for (a, b) in dist_equalities(std::slice::from_ref(on), rels) {
                let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
                parent[ra] = rb;
            }
            let has_hash = |side: &[usize]| {
                side.iter()
                    .any(|i| rels[*i].1.method == PartitionMethod::Hash)
            };
            if has_hash(left) && has_hash(right) && !linked_by_using(left, right) {
                let eqs = dist_equalities(std::slice::from_ref(on), rels);
                if !eqs.iter().any(|(a, b)| {
                    (left.contains(a) && right.contains(b))
                        || (left.contains(b) && right.contains(a))
                }) {
                    return Ok(Err("an outer join between distributed tables must have an equality of their distribution columns in its ON clause".into()));
                }
            }
        }
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
        hash.iter().find_map(|&i| {
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
    for (slot, &i) in order.iter().enumerate() {
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
    }))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::catalog::{Catalog, DistColumn, ShardInterval};
    use crate::sharding::ranges::ShardIndexer;

    /// `sql` planned over `a`, `b` (co-located), `c` (another group) and reference `r`.
    pub(crate) fn plan_over_abcr(sql: &str) -> crate::planner::Plan {
        let stmts = crate::sql::parse::parse(sql).unwrap();
        let mut c = Catalog::default();
        c.add_table(table(1, "a", PartitionMethod::Hash, 1, 100));
        c.add_table(table(2, "b", PartitionMethod::Hash, 1, 200));
        c.add_table(table(3, "c", PartitionMethod::Hash, 2, 300));
        c.add_table(table(4, "r", PartitionMethod::Reference, 3, 400));
        crate::planner::plan(
            &stmts[0],
            &c,
            &crate::planner::Names::on_path(&c, &["public"]),
            &|_| false,
        )
        .unwrap()
    }

    /// A table for planner tests: hash-distributed on `k` (two shards on groups 1
    /// and 2) or a reference table on both.
    pub(crate) fn table(
        relid: u32,
        name: &str,
        method: PartitionMethod,
        coloc: i32,
        first_id: i64,
    ) -> DistTable {
        let shards: Vec<ShardInterval> = if method == PartitionMethod::Reference {
            vec![ShardInterval {
                shard_id: first_id,
                min: i32::MIN,
                max: i32::MAX,
                placement_groups: vec![1, 2],
            }]
        } else {
            crate::sharding::ranges::all_ranges(2)
                .into_iter()
                .enumerate()
                .map(|(i, (min, max))| ShardInterval {
                    shard_id: first_id + i as i64,
                    min,
                    max,
                    placement_groups: vec![1 + i as i32],
                })
                .collect()
        };
        DistTable {
            relid,
            schema: "public".into(),
            name: name.into(),
            method,
            dist_column: (method == PartitionMethod::Hash).then(|| DistColumn {
                name: "k".into(),
                attnum: 1,
                type_oid: 23,
                collation: 0,
                typmod: -1,
                type_sql: "integer".into(),
            }),
            colocation_id: coloc,
            indexer: ShardIndexer::for_intervals(&shards),
            shards,
            columns: vec!["k".into(), "v".into(), format!("{name}_only")],
            indexes: vec![],
        }
    }

    fn catalog() -> Catalog {
        let mut c = Catalog::default();
        c.add_table(table(1, "a", PartitionMethod::Hash, 1, 100));
        c.add_table(table(2, "b", PartitionMethod::Hash, 1, 200));
        c.add_table(table(3, "c", PartitionMethod::Hash, 2, 300));
        c.add_table(table(4, "r", PartitionMethod::Reference, 3, 400));
        c
    }

    fn plan(sql: &str) -> Plan {
        let stmts = crate::sql::parse::parse(sql).unwrap();
        let c = catalog();
        super::super::plan(
            &stmts[0],
            &c,
            &crate::planner::Names::on_path(&c, &["public"]),
            &|_| false,
        )
        .unwrap()
    }

    fn shard_sql(p: &Plan) -> String {
        match p {
            Plan::Router(r) => r.template.for_shard(r.table.shards[1].shard_id),
            Plan::MultiShard(m) => m.template.for_shard(m.table.shards[1].shard_id),
            other => panic!("not pushed down: {other:?}"),
        }
    }

    /// The join step refuses it: refused, or planned in parts by the recursive step.
    fn refused(sql: &str) -> bool {
        matches!(plan(sql), Plan::Unsupported(e) if e.code == "0A000")
            || matches!(plan(sql), Plan::Recursive(_) | Plan::Repartition(_))
    }

    #[test]
    fn colocated_joins_pair_shards() {
        let p = plan("SELECT a.v, b.v FROM a JOIN b ON a.k = b.k");
        assert!(matches!(p, Plan::MultiShard(_)));
        assert_eq!(
            shard_sql(&p),
            r#"SELECT a.v, b.v FROM "public"."a_101" AS "a" JOIN "public"."b_201" AS "b" ON a.k = b.k"#
        );
        let p = plan("SELECT * FROM a x, b y WHERE y.k = x.k AND x.k = 5");
        assert!(matches!(p, Plan::Router(_)));
        let p = plan("SELECT * FROM a LEFT JOIN b USING (k)");
        assert!(matches!(p, Plan::MultiShard(_)));
        assert!(plan("SELECT * FROM a LEFT JOIN b ON a.k = b.k AND b.v > 1").is_multi_or_router());
    }

    #[test]
    fn reference_joins_splice_the_one_shard() {
        let p = plan("SELECT * FROM a JOIN r ON a.v = r.v WHERE a.k = 3");
        assert!(matches!(p, Plan::Router(_)));
        assert!(
            shard_sql(&p).contains(r#""public"."r_400" AS "r""#),
            "{}",
            shard_sql(&p)
        );
        assert!(plan("SELECT * FROM a LEFT JOIN r ON a.v = r.v").is_multi_or_router());
    }

    #[test]
    fn refuses_unprovable_joins() {
        assert!(refused("SELECT * FROM a JOIN b ON a.v = b.v"));
        assert!(refused("SELECT * FROM a JOIN c ON a.k = c.k"));
        assert!(refused("SELECT * FROM a JOIN b ON a.k = b.k OR a.v = 1"));
        assert!(refused("SELECT * FROM r LEFT JOIN a ON a.v = r.v"));
        assert!(refused(
            "SELECT * FROM a LEFT JOIN b ON a.v = b.v WHERE a.k = b.k"
        ));
        assert!(refused(
            "SELECT * FROM a, (SELECT * FROM b) s WHERE a.k = s.k"
        ));
        assert!(refused(
            "SELECT * FROM a JOIN b ON a.k = b.k JOIN c ON c.k = b.k"
        ));
    }

    impl Plan {
        fn is_multi_or_router(&self) -> bool {
            matches!(self, Plan::MultiShard(_) | Plan::Router(_))
        }
    }
}
