//! The run-time strategy of a broadcast / repartition join (`decide`): which table
//! references move and how, from the nodes' row estimates and the columns' types;
//! then the synthetic tables of the moves, the statement renamed to them and its plan
//! over the catalog overlay.

use super::*;
use crate::catalog::{DistColumn, ShardInterval};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_MOVED: AtomicU64 = AtomicU64::new(1);

/// The strategy for the estimated rows `est` (per reference) and the columns' types.
/// For each hash reference as the *anchor* (it stays, with the references co-located
/// with it and joined on their distribution columns), each other one is broadcast
/// when small (`BROADCAST_MAX_ROWS`), repartitioned into the staying layout when it
/// joins a staying reference's distribution column with the same type, else both it
/// and the anchor are re-hashed into the anchor's layout (dual), else broadcast. The
/// cheapest in rows moved (a broadcast counts once per node) that plans wins. None
/// when none plans (the fallback runs).
pub fn decide(
    plan: &RepartitionPlan,
    est: &[f64],
    types: &dyn Fn(usize, &str) -> Option<ColumnType>,
    catalog: &Catalog,
    is_utility_function: &dyn Fn(&str) -> bool,
) -> Option<Decision> {
    let nodes = catalog.workers.len().max(1) as f64;
    let mut candidates: Vec<(f64, Assigned)> = Vec::new();
    for anchor in 0..plan.rels.len() {
        if plan.rels[anchor].table.method != PartitionMethod::Hash {
            continue;
        }
        for broadcast_small in [true, false] {
            // Nothing moved: the statement is the join step's, which refused it.
            if let Some(moves) =
                assign(plan, est, types, anchor, broadcast_small).filter(|m| !m.is_empty())
            {
                let cost: f64 = moves
                    .iter()
                    .map(|(i, how, _)| match how {
                        None => est[*i].min(f64::MAX / 4.0) * nodes,
                        Some(_) => est[*i].min(f64::MAX / 4.0),
                    })
                    .sum();
                candidates.push((cost, moves));
            }
        }
    }
    candidates.sort_by(|a, b| a.0.total_cmp(&b.0));
    candidates
        .into_iter()
        .find_map(|(_, moves)| build(plan, est, types, moves, catalog, is_utility_function))
}

/// Each moved reference and how it moves (column, type), before any table is made.
type Assigned = Vec<(usize, Option<(String, ColumnType)>, Option<usize>)>;

/// The moves for one anchor: (reference, repartition column or broadcast, the
/// reference whose layout it takes (the anchor)).
fn assign(
    plan: &RepartitionPlan,
    est: &[f64],
    types: &dyn Fn(usize, &str) -> Option<ColumnType>,
    anchor: usize,
    broadcast_small: bool,
) -> Option<Assigned> {
    let rels = &plan.rels;
    let base = &rels[anchor].table;
    let dist = |i: usize| rels[i].table.dist_column.as_ref().map(|c| c.name.clone());
    // Staying references and the column their layout is hashed on.
    let mut keyed: HashMap<usize, String> = HashMap::new();
    keyed.insert(anchor, dist(anchor)?);
    let equal = |x: usize, xc: &str, y: usize, yc: &str| {
        plan.equalities.iter().any(|e| {
            (e.a.0 == x && e.a.1 == xc && e.b.0 == y && e.b.1 == yc)
                || (e.b.0 == x && e.b.1 == xc && e.a.0 == y && e.a.1 == yc)
        })
    };
    let hash: Vec<usize> = (0..rels.len())
        .filter(|i| rels[*i].table.method == PartitionMethod::Hash && *i != anchor)
        .collect();
    // Co-located references joined on their distribution columns stay.
    loop {
        let before = keyed.len();
        for &i in &hash {
            let t = &rels[i].table;
            if keyed.contains_key(&i)
                || t.colocation_id != base.colocation_id
                || t.shards.len() != base.shards.len()
            {
                continue;
            }
            let d = dist(i)?;
            let joins = keyed.iter().any(|(k, kc)| {
                rels[*k].table.colocation_id == base.colocation_id
                    && equal(i, &d, *k, kc)
                    && Some(kc.clone()) == dist(*k)
            });
            if joins {
                keyed.insert(i, d);
            }
        }
        if keyed.len() == before {
            break;
        }
    }
    let mut moves: Assigned = Vec::new();
    let mut anchor_moved = false;
    let mut pending: Vec<usize> = hash
        .into_iter()
        .filter(|i| !keyed.contains_key(i))
        .collect();
    let hashable_same = |x: usize, xc: &str, y: usize, yc: &str| -> Option<ColumnType> {
        let (tx, ty) = (types(x, xc)?, types(y, yc)?);
        (tx.hashable && ty.hashable && tx.type_oid == ty.type_oid).then_some(tx)
    };
    while !pending.is_empty() {
        let mut progressed = false;
        for &i in pending.clone().iter() {
            if broadcast_small && est[i] <= BROADCAST_MAX_ROWS {
                moves.push((i, None, None));
            } else {
                // Single repartition into a staying reference's layout.
                let onto = plan.equalities.iter().find_map(|e| {
                    let (mine, other) = match (e.a.0 == i, e.b.0 == i) {
                        (true, _) => (&e.a, &e.b),
                        (_, true) => (&e.b, &e.a),
                        _ => return None,
                    };
                    let key = keyed.get(&other.0)?;
                    if *key != other.1 {
                        return None;
                    }
                    let t = hashable_same(i, &mine.1, other.0, key)?;
                    Some((mine.1.clone(), t))
                });
                match onto {
                    Some((col, t)) => {
                        keyed.insert(i, col.clone());
                        moves.push((i, Some((col, t)), Some(anchor)));
                    }
                    None => continue,
                }
            }
            pending.retain(|p| *p != i);
            progressed = true;
        }
        if progressed {
            continue;
        }
        // Dual repartition: the anchor alone re-hashed on its side of an equality.
        if keyed.len() == 1 && !anchor_moved {
            let dual = pending.iter().find_map(|&i| {
                plan.equalities.iter().find_map(|e| {
                    let (mine, other) = match (e.a.0 == i, e.b.0 == i) {
                        (true, _) => (&e.a, &e.b),
                        (_, true) => (&e.b, &e.a),
                        _ => return None,
                    };
                    (other.0 == anchor)
                        .then(|| hashable_same(i, &mine.1, anchor, &other.1))
                        .flatten()
                        .map(|t| (i, mine.1.clone(), other.1.clone(), t))
                })
            });
            if let Some((i, col, anchor_col, t)) = dual {
                anchor_moved = true;
                keyed.insert(anchor, anchor_col.clone());
                moves.push((anchor, Some((anchor_col, t.clone())), Some(anchor)));
                keyed.insert(i, col.clone());
                moves.push((i, Some((col, t)), Some(anchor)));
                pending.retain(|p| *p != i);
                continue;
            }
        }
        // What joins nothing staying: broadcast, whatever its size.
        let i = pending.remove(0);
        moves.push((i, None, None));
    }
    Some(moves)
}

/// The synthetic tables, the renamed statement and its plan.
fn build(
    plan: &RepartitionPlan,
    est: &[f64],
    types: &dyn Fn(usize, &str) -> Option<ColumnType>,
    assigned: Assigned,
    catalog: &Catalog,
    is_utility_function: &dyn Fn(&str) -> bool,
) -> Option<Decision> {
    let mut overlay = catalog.clone();
    let mut tree = plan.stmt.node.clone()?;
    // A moved reference's own conjuncts hold for every row moved (applied where they
    // are read): TRUE in the statement, and the columns only they read stay behind.
    for (i, _, _) in &assigned {
        drop_applied(&mut tree, &plan.rels[*i]);
    }
    let still_read = crate::planner::pull_columns::NeededColumns::of(&tree);
    let mut moves = Vec::new();
    for (k, (i, how, layout)) in assigned.into_iter().enumerate() {
        let rel = &plan.rels[i];
        let name = format!(
            "pgs_move_{}_{}",
            std::process::id(),
            NEXT_MOVED.fetch_add(1, Ordering::Relaxed)
        );
        let mut columns = match still_read.columns_of(rel.alias(), &rel.rel.name, &rel.table) {
            Some(read) => rel
                .needed
                .iter()
                .filter(|c| read.contains(c))
                .cloned()
                .collect(),
            None => rel.needed.clone(),
        };
        let (method, dist_column, colocation_id, shards, kind) = match (how, layout) {
            (Some((col, t)), Some(l)) => {
                if !columns.contains(&col) {
                    columns.push(col.clone());
                }
                let base = &plan.rels[l].table;
                let attnum = columns.iter().position(|c| *c == col)? as i16 + 1;
                (
                    PartitionMethod::Hash,
                    Some(DistColumn {
                        name: col.clone(),
                        attnum,
                        type_oid: t.type_oid,
                        collation: 0,
                        typmod: -1,
                        type_sql: t.definition.clone(),
                    }),
                    base.colocation_id,
                    base.shards.clone(),
                    MoveKind::Repartition {
                        column: col,
                        type_oid: t.type_oid,
                    },
                )
            }
            _ => {
                if columns.is_empty() {
                    // `count(*)` reads no column: keep the rows, by one column.
                    columns.push(rel.table.columns.first()?.clone());
                }
                (
                    PartitionMethod::Reference,
                    None,
                    i32::MIN,
                    vec![ShardInterval {
                        shard_id: 1,
                        min: i32::MIN,
                        max: i32::MAX,
                        placement_groups: catalog.workers.iter().map(|w| w.group_id).collect(),
                    }],
                    MoveKind::Broadcast,
                )
            }
        };
        if columns.is_empty() {
            columns.push(rel.table.columns.first()?.clone());
        }
        let table = Arc::new(DistTable {
            relid: u32::MAX - k as u32,
            schema: MOVED_SCHEMA.to_string(),
            name,
            method,
            dist_column,
            colocation_id,
            indexer: crate::sharding::ranges::ShardIndexer::for_intervals(&shards),
            shards,
            columns,
            indexes: Vec::new(),
            sequence_columns: Vec::new(),
        });
        overlay.add_table((*table).clone());
        rename(&mut tree, rel, &table)?;
        moves.push(Move {
            rel: i,
            kind,
            table,
            rows: est[i],
            source_relid: rel.table.relid,
            semijoin: semijoin_for(plan, est, types, i),
        });
    }
    // A moved anchor (dual repartition) takes the colocation of its layout: the
    // staying references co-located with it then no longer pair, which `assign`
    // excludes (dual only when the anchor stays alone).
    let (outer, outer_plan) = plan_renamed(plan, &tree, &overlay, &moves, is_utility_function)?;
    let moved: Vec<usize> = moves.iter().map(|m| m.rel).collect();
    Some(Decision {
        staying: super::staying::staying_filters(plan, est, types, &moved),
        moves,
        outer,
        outer_plan,
        renamed: tree,
        overlay,
    })
}

impl Decision {
    /// The renamed statement with the staying references' filters by their keys read
    /// (`keys[k]` those of `self.staying[k]`; None: that one unfiltered), planned again;
    /// None when nothing is filtered or the filtered statement does not plan.
    pub fn with_staying_keys(
        &self,
        plan: &RepartitionPlan,
        keys: &[Option<Vec<bytes::Bytes>>],
        is_utility_function: &dyn Fn(&str) -> bool,
    ) -> Option<(Statement, Plan)> {
        let filters: Vec<(&super::staying::StayingFilter, &[bytes::Bytes])> = self
            .staying
            .iter()
            .zip(keys)
            .filter_map(|(f, k)| Some((f, k.as_deref()?)))
            .collect();
        if filters.is_empty() {
            return None;
        }
        let tree = super::staying::with_filters(&self.renamed, plan, &filters)?;
        plan_renamed(plan, &tree, &self.overlay, &self.moves, is_utility_function)
    }
}

/// The renamed statement (`tree`) and its plan over the catalog `overlay` holding the
/// moved tables.
fn plan_renamed(
    plan: &RepartitionPlan,
    tree: &N,
    overlay: &Catalog,
    moves: &[Move],
    is_utility_function: &dyn Fn(&str) -> bool,
) -> Option<(Statement, Plan)> {
    let text = deparse_node(tree).ok()?;
    let outer = statement_of(text);
    let mut outer_plan =
        crate::planner::plan(&outer, overlay, &plan.names, is_utility_function).ok()?;
    // The combine step's coordinator-side queries (the collation source, each combine
    // stage's worker query typed over the shells) read the FROM clause on the
    // coordinator node's shells: the original tables there (their columns are the
    // moved ones' types).
    if let Plan::MultiShard(m) = &mut outer_plan {
        if let Some(m) = Arc::get_mut(m) {
            let mut by_length: Vec<&Move> = moves.iter().collect();
            by_length.sort_by_key(|m| std::cmp::Reverse(m.table.name.len()));
            let to_shells = |q: &mut String| {
                for mv in &by_length {
                    let t = &plan.rels[mv.rel].table;
                    let original = format!("{}.{}", quote_ident(&t.schema), quote_ident(&t.name));
                    // Written bare (deparsed) or always quoted (`ShardSqlTemplate::for_shells`).
                    for moved in [
                        format!("\"{MOVED_SCHEMA}\".\"{}\"", mv.table.name),
                        format!("{MOVED_SCHEMA}.{}", mv.table.name),
                    ] {
                        *q = q.replace(&moved, &original);
                    }
                }
            };
            if let crate::planner::MultiShardShape::Aggregate {
                collation_source: Some(q),
                ..
            } = &mut m.shape
            {
                to_shells(q);
            }
            if let Some(c) = m.combine.as_mut().and_then(Arc::get_mut) {
                if let Some(stage) = c.partial.as_mut() {
                    to_shells(&mut stage.shape);
                }
                to_shells(&mut c.raw.shape);
            }
        }
    }
    match outer_plan {
        Plan::Router(_) | Plan::MultiShard(_) => Some((outer, outer_plan)),
        _ => None,
    }
}

/// The semijoin reducing reference `i`'s move: of those the statement allows
/// (`semijoin.rs`), the one whose source is estimated fewest rows, when fewer than
/// `i`'s and not over the cap of keys, its columns of one hashable type.
fn semijoin_for(
    plan: &RepartitionPlan,
    est: &[f64],
    types: &dyn Fn(usize, &str) -> Option<ColumnType>,
    i: usize,
) -> Option<Semijoin> {
    plan.semijoins
        .get(i)?
        .iter()
        .filter(|sj| {
            sj.source != i
                && est[sj.source] < est[i]
                && est[sj.source] <= SEMIJOIN_MAX_KEYS as f64
                && Semijoin::types_fit(types(i, &sj.column), types(sj.source, &sj.source_column))
        })
        .min_by(|a, b| est[a.source].total_cmp(&est[b.source]))
        .cloned()
}

/// Replaces reference `rel`'s own conjuncts in the statement (the nodes themselves,
/// found by equality: their text positions make each unique) by TRUE.
fn drop_applied(tree: &mut N, rel: &JoinRel) {
    if rel.own_conjuncts.is_empty() {
        return;
    }
    crate::sql::walk::statement(tree, false, &mut |n, _| {
        if !rel.own_conjuncts.contains(n) {
            return false;
        }
        *n = crate::planner::join::tree::bool_const(true);
        true
    });
}

/// Renames the reference `rel` (and the references merged with it, found by their
/// text positions anywhere in the statement, subqueries included) to `table`, keeping
/// the name the statement qualifies it with as its alias.
fn rename(tree: &mut N, rel: &JoinRel, table: &DistTable) -> Option<()> {
    let at: Vec<i32> = std::iter::once(&rel.rel)
        .chain(&rel.also)
        .map(|r| r.location as i32)
        .collect();
    let alias = rel.alias().to_string();
    let mut renamed = 0;
    crate::sql::walk::statement(tree, false, &mut |n, _| {
        if let Some(N::RangeVar(rv)) = n.node.as_mut() {
            if at.contains(&rv.location) {
                rv.schemaname = table.schema.clone();
                rv.relname = table.name.clone();
                if rv.alias.is_none() {
                    rv.alias = Some(protobuf::Alias {
                        aliasname: alias.clone(),
                        colnames: Vec::new(),
                    });
                }
                renamed += 1;
            }
        }
        false
    });
    (renamed == at.len()).then_some(())
}
