//! Joins not on the distribution columns, as Citus's broadcast and repartition joins:
//! a SELECT joining hash-distributed tables that the join step cannot pair shard by
//! shard (not co-located, or not joined on their distribution columns) runs with some
//! of its table references *moved* first, then as a co-located join.
//!
//! - **Broadcast**: a small table reference (its needed columns, its own WHERE
//!   conjuncts applied) is copied whole to every node of the join, where the statement
//!   reads it as a reference table.
//! - **Repartition**: a table reference is re-hashed on its join column into
//!   per-shard tables laid out as the shards of the table it joins (same hash ranges,
//!   same placements, the type's own hash function, as pgshard's distribution
//!   hashing): *single repartition*. When neither side joins on its distribution
//!   column both are re-hashed into the larger one's layout (*dual repartition*).
//!
//! Each moved reference becomes a synthetic `DistTable` (hash, or reference-like) in a
//! per-statement overlay of the catalog whose shards are the moved tables
//! (`pgshard_intermediate.pgs_move_<pid>_<n>_<shardid>`, unlogged, made in the
//! statement's transaction: `executor::session::shipped_results`); the statement's
//! references are renamed to them and the whole ladder plans the result (the join
//! step pairs the shards). The strategy needs the nodes' row estimates and the
//! columns' types, so the planner keeps what the statement says (`RepartitionPlan`)
//! and the executor decides at run time ([`decide`]); recursive planning's plan is
//! kept as the fallback (`citus.enable_repartition_joins = off`, or no strategy).
//! The executor's half is `executor::session::repartition`.

use super::recursive::{deparse_node, statement_of};
use super::{Names, Plan};
use crate::catalog::{Catalog, DistTable, Oid, PartitionMethod};
use crate::error::{PgError, PgResult};
use crate::sql::parse::{RelRef, Statement};
use crate::sql::quote::quote_ident;
use pg_query::protobuf::{self, node::Node as N};
use std::sync::Arc;

/// A table reference estimated at most this many rows (after its own WHERE
/// conjuncts) is broadcast; a larger one is repartitioned.
pub const BROADCAST_MAX_ROWS: f64 = 10_000.0;

/// The schema of the moved tables on the workers (the shipped results' schema).
pub use super::modify_recursive::SHIPPED_SCHEMA as MOVED_SCHEMA;

/// A join pgshard runs with some table references moved first (decided at run time).
#[derive(Debug, Clone)]
pub struct RepartitionPlan {
    /// The client's statement.
    pub stmt: Statement,
    /// Every table reference, in text order (all distributed or reference tables).
    pub rels: Vec<JoinRel>,
    /// Equalities between columns of two different references usable to pair shards.
    pub equalities: Vec<ColumnEquality>,
    /// The session's names the statement was planned with (the renamed statement is
    /// planned with them again).
    pub names: Names,
    /// Recursive planning's plan of the statement.
    pub fallback: Box<Plan>,
    /// Per reference, the semijoins that may reduce its move (`semijoin.rs`).
    pub semijoins: Vec<Vec<Semijoin>>,
}

/// One table reference of the join.
#[derive(Debug, Clone)]
pub struct JoinRel {
    pub rel: RelRef,
    pub table: Arc<DistTable>,
    /// The columns the statement reads of it, in the table's order.
    pub needed: Vec<String>,
    /// Its own top-level WHERE conjuncts (only this reference's columns, no parameter,
    /// function call or subquery), applied where its rows are read when it moves.
    pub own_conjuncts: Vec<protobuf::Node>,
    /// Other references of the same table under the same name that one move serves
    /// with it (`merged_references`): renamed with it.
    pub also: Vec<RelRef>,
    /// Its columns that a correlated subquery compares with each row of the query
    /// around it (`l_partkey` of TPC-H Q17's inner `lineitem`): a moved table is
    /// probed by them once per outer row, so they are worth an index there.
    pub probed: Vec<String>,
}

impl JoinRel {
    /// The name the statement's columns qualify it with.
    pub fn alias(&self) -> &str {
        self.rel.alias.as_deref().unwrap_or(&self.rel.name)
    }
}

/// `rels[a.0].a.1 = rels[b.0].b.1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnEquality {
    pub a: (usize, String),
    pub b: (usize, String),
}

/// What the executor knows of a column at run time.
#[derive(Debug, Clone)]
pub struct ColumnType {
    /// The base type (domains resolved): the hash function's input.
    pub type_oid: Oid,
    /// `format_type(atttypid, atttypmod)` plus a non-default collation.
    pub definition: String,
    /// Equal values hash equally: a hashable type and a deterministic collation.
    pub hashable: bool,
    /// Its array type (0: none): the declared type of a semijoin's keys parameter.
    pub array_oid: Oid,
    /// The first column of one of the table's indexes (a filter by keys can probe it).
    pub indexed: bool,
}

/// How one reference moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoveKind {
    Broadcast,
    /// Re-hashed on `column` into the layout of the synthetic table's shards.
    Repartition {
        column: String,
        type_oid: Oid,
    },
}

/// One moved table reference.
#[derive(Debug, Clone)]
pub struct Move {
    /// Index into `RepartitionPlan::rels`.
    pub rel: usize,
    pub kind: MoveKind,
    /// The synthetic table the moved rows fill (its shards are tables on the nodes).
    pub table: Arc<DistTable>,
    /// The estimated rows moved.
    pub rows: f64,
    /// The moved table's relid (its columns' types are looked up by it).
    pub source_relid: Oid,
    /// The keys its source rows are filtered by, when some reference's are few.
    pub semijoin: Option<Semijoin>,
}

/// The run-time strategy: moves, then the renamed statement and its plan.
#[derive(Debug, Clone)]
pub struct Decision {
    pub moves: Vec<Move>,
    pub outer: Statement,
    pub outer_plan: Plan,
    /// The staying references filtered by other references' keys once read
    /// (`staying.rs`; `Decision::with_staying_keys`).
    pub staying: Vec<StayingFilter>,
    /// The renamed statement's tree and the catalog overlay it was planned over.
    renamed: protobuf::node::Node,
    overlay: Catalog,
}

mod levels;
mod statement;
use statement::needed_columns;

mod implied;
mod semijoin;
mod staying;
mod strategy;
pub use semijoin::{
    keys_array, Semijoin, SEMIJOIN_MAX_KEYS, SEMIJOIN_MAX_KEY_BYTES, SEMIJOIN_PARAMETER_MAX_KEYS,
};
pub use staying::{StayingFilter, STAYING_FILTER_MAX_KEYS};
pub use strategy::decide;

/// Plans the statement for a run-time strategy, or None when it is no join of
/// distributed tables this could run (the statement's FROM items are table
/// references and joins of them only, every reference distributed or reference).
pub fn plan_repartition(
    s: &protobuf::SelectStmt,
    stmt: &Statement,
    refs: &[(RelRef, Arc<DistTable>)],
    names: &Names,
    catalog: &Catalog,
    fallback: Option<Plan>,
    is_utility_function: &dyn Fn(&str) -> bool,
) -> Option<Plan> {
    if s.with_clause.is_some()
        || s.op != protobuf::SetOperation::SetopNone as i32
        || s.into_clause.is_some()
        || !s.locking_clause.is_empty()
        || refs
            .iter()
            .filter(|(_, t)| t.method == PartitionMethod::Hash)
            .count()
            < 2
    {
        return None;
    }
    // The statement and the subqueries in it, every reference covered once.
    let shape = levels::shape(s, refs)?;
    let mut covered = shape.covered.clone();
    covered.sort_unstable();
    covered.dedup();
    if covered.len() != refs.len() || shape.covered.len() != refs.len() {
        return None;
    }
    let needed = needed_columns(stmt.node.as_ref()?, refs);
    let (rels, equalities) = merged_references(refs, &shape, &needed);
    let semijoins = semijoin::semijoins(s, refs, &rels);
    let plan = RepartitionPlan {
        semijoins,
        stmt: stmt.clone(),
        rels,
        equalities,
        names: names.clone(),
        fallback: Box::new(fallback.unwrap_or_else(|| {
            Plan::Unsupported(PgError::not_supported(
                "pgshard cannot run this join with citus.enable_repartition_joins off",
            ))
        })),
    };
    // Some strategy must plan whatever the estimates (types assumed compatible).
    let any_type = |_: usize, _: &str| {
        Some(ColumnType {
            type_oid: 0,
            definition: String::new(),
            hashable: true,
            array_oid: 0,
            indexed: false,
        })
    };
    let big = vec![f64::MAX; plan.rels.len()];
    let small = vec![0.0; plan.rels.len()];
    let plans = [&big, &small]
        .iter()
        .any(|est| decide(&plan, est, &any_type, catalog, is_utility_function).is_some());
    plans.then(|| Plan::Repartition(Arc::new(plan)))
}

/// One `JoinRel` per reference, except that references of the same table under the
/// same name (a table read by the statement and by a correlated subquery of it, as
/// `lineitem` in TPC-H Q17) joined by the same equalities to the same other
/// references are one: whatever the strategy does with one it does with the other, so
/// one move serves both (its columns the union, its filter the conjuncts both have).
/// The equalities re-indexed accordingly.
fn merged_references(
    refs: &[(RelRef, Arc<DistTable>)],
    shape: &levels::Shape,
    needed: &[Vec<String>],
) -> (Vec<JoinRel>, Vec<ColumnEquality>) {
    // Each reference's equalities to others: (own column, other reference, its column).
    let signature = |i: usize| -> Vec<(String, usize, String)> {
        let mut sig: Vec<(String, usize, String)> = shape
            .equalities
            .iter()
            .filter_map(|e| match (e.a.0 == i, e.b.0 == i) {
                (true, _) => Some((e.a.1.clone(), e.b.0, e.b.1.clone())),
                (_, true) => Some((e.b.1.clone(), e.a.0, e.a.1.clone())),
                _ => None,
            })
            .collect();
        sig.sort();
        sig.dedup();
        sig
    };
    // `group[i]`: the index of the merged reference reference `i` belongs to.
    let mut group: Vec<usize> = Vec::with_capacity(refs.len());
    let mut firsts: Vec<usize> = Vec::new();
    for i in 0..refs.len() {
        let same = firsts.iter().position(|&f| {
            refs[f].1.relid == refs[i].1.relid
                && qualifier(&refs[f].0) == qualifier(&refs[i].0)
                && signature(f) == signature(i)
                && !signature(i).iter().any(|(_, o, _)| *o == f)
        });
        match same {
            Some(g) => group.push(g),
            None => {
                group.push(firsts.len());
                firsts.push(i);
            }
        }
    }
    let text_of = |c: &protobuf::Node| -> Option<String> {
        let probe = protobuf::SelectStmt {
            where_clause: Some(Box::new(c.clone())),
            ..Default::default()
        };
        deparse_node(&N::SelectStmt(Box::new(probe))).ok()
    };
    let rels: Vec<JoinRel> = firsts
        .iter()
        .enumerate()
        .map(|(g, &f)| {
            let members: Vec<usize> = (0..refs.len()).filter(|i| group[*i] == g).collect();
            let (r, t) = &refs[f];
            let own_conjuncts = shape.own[f]
                .iter()
                .filter(|c| {
                    let text = text_of(*c);
                    text.is_some()
                        && members[1..]
                            .iter()
                            .all(|m| shape.own[*m].iter().any(|o| text_of(o) == text))
                })
                .cloned()
                .collect();
            JoinRel {
                rel: r.clone(),
                table: t.clone(),
                needed: t
                    .columns
                    .iter()
                    .filter(|c| members.iter().any(|m| needed[*m].contains(*c)))
                    .cloned()
                    .collect(),
                own_conjuncts,
                also: members[1..].iter().map(|m| refs[*m].0.clone()).collect(),
                probed: t
                    .columns
                    .iter()
                    .filter(|c| members.iter().any(|m| shape.probed[*m].contains(*c)))
                    .cloned()
                    .collect(),
            }
        })
        .collect();
    let mut equalities: Vec<ColumnEquality> = Vec::new();
    for e in &shape.equalities {
        let e = ColumnEquality {
            a: (group[e.a.0], e.a.1.clone()),
            b: (group[e.b.0], e.b.1.clone()),
        };
        if e.a.0 != e.b.0 && !equalities.contains(&e) {
            equalities.push(e);
        }
    }
    (rels, equalities)
}

/// The name the statement's columns qualify a reference with.
fn qualifier(r: &RelRef) -> &str {
    r.alias.as_deref().unwrap_or(&r.name)
}

/// `COPY (<source_select>) TO STDOUT` for one shard of a moved reference (a move
/// reduced by a semijoin filters by its keys: `KeysFilter`).
pub fn source_copy(plan: &RepartitionPlan, m: &Move, shard_id: i64) -> PgResult<String> {
    let select = source_select(
        plan,
        m.rel,
        &m.table.columns,
        move_hash(m),
        &[shard_id],
        None,
    )?;
    Ok(format!("COPY ({select}) TO STDOUT"))
}

/// The hash column of a repartition move and its type.
pub fn move_hash(m: &Move) -> Option<(&str, Oid)> {
    match &m.kind {
        MoveKind::Repartition { column, type_oid } => Some((column.as_str(), *type_oid)),
        MoveKind::Broadcast => None,
    }
}

/// How a semijoin's keys filter a moved reference's source rows.
pub enum KeysFilter<'a> {
    /// A few keys, read first, an array parameter: `<column> IN (SELECT
    /// pg_catalog.unnest($1))` when the Parse declares its type (`declared`), else
    /// `<column> = ANY ($1)` (a per-key estimate each, a shard at a time).
    Param { column: &'a str, declared: bool },
    /// `<column> IN (<query>)`: the keys' own query over a shard on the same node (a
    /// reference table's: the row estimate), or the table of the keys read first
    /// (`executor::session::repartition`'s `ship_keys`).
    Query(&'a str, String),
}

/// `SELECT <columns>[, <hash of the column>] FROM <shard> AS <alias> WHERE <own
/// conjuncts and implied filters (`implied.rs`)>[ AND <the keys' filter>]`: a moved
/// reference's rows on its shards `shard_ids` (the hash last), `reduced` the filter
/// of a semijoin's keys. Several shards (all on one node) are read as one `UNION ALL`
/// of their columns under the alias: the keys parsed and hashed once.
pub fn source_select(
    plan: &RepartitionPlan,
    rel: usize,
    columns: &[String],
    hash: Option<(&str, Oid)>,
    shard_ids: &[i64],
    reduced: Option<KeysFilter>,
) -> PgResult<String> {
    let r = &plan.rels[rel];
    let alias = quote_ident(r.alias());
    let mut cols: Vec<String> = columns
        .iter()
        .map(|c| format!("{alias}.{}", quote_ident(c)))
        .collect();
    if let Some((column, type_oid)) = hash {
        let arg = format!("{alias}.{}", quote_ident(column));
        cols.push(crate::sharding::hash::hash_sql_expression(type_oid, &arg));
    }
    if cols.is_empty() {
        cols.push("1".into());
    }
    let shard = |id: &i64| {
        format!(
            "{}.{}",
            quote_ident(&r.table.schema),
            quote_ident(&r.table.shard_name(*id))
        )
    };
    let from = match shard_ids {
        [one] => shard(one),
        _ => {
            let all: Vec<String> = r.table.columns.iter().map(|c| quote_ident(c)).collect();
            let all = all.join(", ");
            let branches: Vec<String> = shard_ids
                .iter()
                .map(|id| format!("SELECT {all} FROM {}", shard(id)))
                .collect();
            format!("({})", branches.join(" UNION ALL "))
        }
    };
    let skeleton = format!(
        "SELECT {} FROM {from} AS {alias}{}",
        cols.join(", "),
        match reduced {
            Some(KeysFilter::Param {
                column,
                declared: true,
            }) => format!(
                " WHERE {alias}.{} IN (SELECT pg_catalog.unnest($1))",
                quote_ident(column)
            ),
            Some(KeysFilter::Param { column, .. }) => {
                format!(" WHERE {alias}.{} = ANY ($1)", quote_ident(column))
            }
            Some(KeysFilter::Query(c, keys)) => {
                format!(" WHERE {alias}.{} IN ({keys})", quote_ident(c))
            }
            None => String::new(),
        }
    );
    let mut filters = r.own_conjuncts.clone();
    filters.extend(implied::implied_conjuncts(plan, rel));
    with_filters(&skeleton, filters)
}

/// `SELECT DISTINCT <alias>.<column> FROM <shard> AS <alias> WHERE <column> IS NOT
/// NULL AND <own conjuncts> LIMIT <cap + 1>`: a semijoin's keys on one shard of its
/// source.
pub fn semijoin_key_select(sj: &Semijoin, shard_id: i64) -> PgResult<String> {
    let alias = quote_ident(sj.source_alias());
    let column = format!("{alias}.{}", quote_ident(&sj.source_column));
    let skeleton = format!(
        "SELECT DISTINCT {column} FROM {}.{} AS {alias} WHERE {column} IS NOT NULL LIMIT {}",
        quote_ident(&sj.source_table.schema),
        quote_ident(&sj.source_table.shard_name(shard_id)),
        SEMIJOIN_MAX_KEYS + 1
    );
    with_filters(&skeleton, sj.source_conjuncts.clone())
}

/// `skeleton` (one SELECT) with `filters` ANDed to its WHERE, deparsed.
fn with_filters(skeleton: &str, mut filters: Vec<protobuf::Node>) -> PgResult<String> {
    let mut parsed = crate::sql::parse::parse(skeleton)?;
    let mut node = parsed
        .remove(0)
        .node
        .ok_or_else(|| PgError::internal("empty move query"))?;
    if let N::SelectStmt(s) = &mut node {
        if let Some(w) = s.where_clause.take() {
            filters.insert(0, *w);
        }
        s.where_clause = statement::and_all(filters).map(Box::new);
    }
    deparse_node(&node)
}

/// What the row estimate of reference `rel` explains: its needed columns on its
/// first shard, its own conjuncts and implied filters applied (times its shard count).
/// When a reference table's filtered keys reduce its move (`semijoin_for` then always
/// takes it: a reference table is estimated no rows), the estimate has them too, as
/// `<column> IN (<the keys' query>)` over the reference table's shard on the same node:
/// TPC-H Q11's 10,000 suppliers are the 400 of GERMANY's key, small enough to broadcast.
pub fn estimate_query(plan: &RepartitionPlan, rel: usize) -> PgResult<Option<String>> {
    let r = &plan.rels[rel];
    let Some(first) = r.table.shards.first() else {
        return Ok(None);
    };
    let by_reference = plan.semijoins.get(rel).and_then(|s| {
        s.iter().find_map(|sj| match sj.source_table.method {
            PartitionMethod::Reference => sj.source_table.shards.first().map(|sh| (sj, sh)),
            _ => None,
        })
    });
    let reduced = match by_reference {
        Some((sj, shard)) => Some(KeysFilter::Query(
            &sj.column,
            semijoin_key_select(sj, shard.shard_id)?,
        )),
        None => None,
    };
    source_select(plan, rel, &r.needed, None, &[first.shard_id], reduced).map(Some)
}

#[cfg(test)]
mod tests;
