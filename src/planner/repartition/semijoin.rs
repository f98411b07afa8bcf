//! Semijoin-reduced moves: which keys a moved reference's source rows may be filtered
//! by (`Semijoin`), proven from the statement's shape. A moved table `T` whose every
//! reference the move serves reads only rows matching, by an equality chain, some
//! reference `S` with selective own conjuncts, needs only the rows whose key is among
//! `S`'s filtered keys: the executor reads those keys first (one bounded query over
//! `S`'s shards) and adds `T.k IN (<the keys>)` to `T`'s source reads, the keys a
//! parameter or, many, a table on `T`'s nodes (TPC-H Q17: the 6 M
//! `lineitem` rows cut to those of ~200 parts).
//!
//! A row of a reference *matters* when it can change the statement's result: it is in
//! a joined row of its query level that passes that level's WHERE, evaluated for an
//! outer row that matters. The chain's links, each "a row of `A` that matters has
//! `A.a = B.b` for a row of `B` that matters":
//! - a top-level `A.a = B.b` conjunct of a level's WHERE or of an ON clause, `A` and
//!   `B` both of that level and on no outer join's nullable side (both directions; an
//!   ON between two such references is an inner join's);
//! - the same with `B` a reference of an enclosing level (correlated: from `A` to `B`
//!   only: the outer row's own rows need no inner match);
//! - a top-level `A.a IN (SELECT B.b FROM ...)` conjunct of `A`'s level, `B` of the
//!   subquery's own level, not nullable there (from `A` to `B` only).
//!
//! A row of `S` that matters passes its own conjuncts (top-level WHERE conditions on
//! it alone), so the keys of `S`'s rows passing them hold every key a row of `T` that
//! matters can have. NULL keys never match an equality: dropped on both sides. Not
//! reduced: a reference on an outer join's nullable side, nor by one (an outer
//! join's preserved side keeps its unmatched rows), NOT EXISTS / NOT IN / scalar
//! subqueries (no link from the outer level inwards), OR'ed conditions.

use super::levels::{in_link, level_sublinks, top_level_link_locations};
use super::statement::{and_all, conjuncts, equality, from_item, on_equalities, only_reads};
use super::{ColumnType, JoinRel};
use crate::catalog::DistTable;
use crate::sql::parse::RelRef;
use bytes::{Bytes, BytesMut};
use pg_query::protobuf::{self, node::Node as N};
use std::collections::HashSet;
use std::sync::Arc;

/// More distinct keys than this and a reduction is given up (the move reads all).
pub const SEMIJOIN_MAX_KEYS: usize = 100_000;
/// Up to this many keys are a parameter of the reduced reads (`= ANY ($1)`: the node
/// estimates it key by key, 40 ms a shard for 40,000 keys); more go into a table.
pub const SEMIJOIN_PARAMETER_MAX_KEYS: usize = 5_000;
/// Nor when the keys' text takes more than this many bytes.
pub const SEMIJOIN_MAX_KEY_BYTES: usize = 4 << 20;

/// A filter of a moved reference's source rows by another reference's keys.
#[derive(Debug, Clone)]
pub struct Semijoin {
    /// The moved reference's column filtered.
    pub column: String,
    /// The reference whose keys filter it (its index in `RepartitionPlan::rels`, for
    /// its row estimate).
    pub source: usize,
    /// That reference as the statement names it, and its table.
    pub source_rel: RelRef,
    pub source_table: Arc<DistTable>,
    /// Its column holding the keys.
    pub source_column: String,
    /// Its own conjuncts (non-empty: what makes its keys few).
    pub source_conjuncts: Vec<protobuf::Node>,
}

impl Semijoin {
    /// The name the source's conjuncts qualify it with.
    pub fn source_alias(&self) -> &str {
        self.source_rel
            .alias
            .as_deref()
            .unwrap_or(&self.source_rel.name)
    }

    /// Whether the keys' text read back as the moved column's type compares as the
    /// equality does: one base type, hashable (a deterministic collation).
    pub fn types_fit(moved: Option<ColumnType>, source: Option<ColumnType>) -> bool {
        matches!((moved, source), (Some(m), Some(s))
            if m.hashable && s.hashable && m.type_oid == s.type_oid)
    }
}

/// `{"k1","k2"}`: an array literal of the keys, every element quoted, backslash and
/// quote escaped (the text of a parameter, never spliced into SQL).
pub fn keys_array(keys: &[Bytes]) -> Bytes {
    let mut array = BytesMut::with_capacity(keys.iter().map(|k| k.len() + 3).sum::<usize>() + 2);
    array.extend_from_slice(b"{");
    for (i, k) in keys.iter().enumerate() {
        if i > 0 {
            array.extend_from_slice(b",");
        }
        array.extend_from_slice(b"\"");
        for &c in k.iter() {
            if c == b'"' || c == b'\\' {
                array.extend_from_slice(b"\\");
            }
            array.extend_from_slice(&[c]);
        }
        array.extend_from_slice(b"\"");
    }
    array.extend_from_slice(b"}");
    array.freeze()
}

type Col = (usize, String);

/// What the walk over the levels learns, by original reference index.
struct Walk<'a> {
    refs: &'a [(RelRef, Arc<DistTable>)],
    nullable: Vec<bool>,
    own: Vec<Vec<protobuf::Node>>,
    /// Directed links: a row of `.0`'s reference that matters has `.0 = .1` for a row
    /// of `.1`'s reference that matters.
    links: Vec<(Col, Col)>,
}

/// For each of `rels` (the merged references), the semijoins that may reduce its move
/// (empty when none; every one valid for every reference the move serves).
pub(super) fn semijoins(
    s: &protobuf::SelectStmt,
    refs: &[(RelRef, Arc<DistTable>)],
    rels: &[JoinRel],
) -> Vec<Vec<Semijoin>> {
    let mut w = Walk {
        refs,
        nullable: vec![false; refs.len()],
        own: vec![Vec::new(); refs.len()],
        links: Vec::new(),
    };
    if w.level(s, &[]).is_none() {
        return vec![Vec::new(); rels.len()];
    }
    w.derive_reference_conjuncts();
    // The merged reference each original one belongs to.
    let group_of = |i: usize| {
        let at = refs[i].0.location;
        rels.iter()
            .position(|r| r.rel.location == at || r.also.iter().any(|a| a.location == at))
    };
    rels.iter()
        .enumerate()
        .map(|(g, _)| {
            let members: Vec<usize> = (0..refs.len())
                .filter(|i| group_of(*i) == Some(g))
                .collect();
            let mut common: Option<HashSet<(String, usize, String)>> = None;
            for &m in &members {
                let reach = w.reachable(m, &members);
                common = Some(match common {
                    None => reach,
                    Some(c) => c.intersection(&reach).cloned().collect(),
                });
            }
            let mut found: Vec<(String, usize, String)> =
                common.unwrap_or_default().into_iter().collect();
            found.sort();
            found
                .into_iter()
                .filter_map(|(column, src, source_column)| {
                    Some(Semijoin {
                        column,
                        source: group_of(src)?,
                        source_rel: refs[src].0.clone(),
                        source_table: refs[src].1.clone(),
                        source_column,
                        source_conjuncts: w.own[src].clone(),
                    })
                })
                .collect()
        })
        .collect()
}

impl Walk<'_> {
    /// One query level: its references, its links, then its subqueries' levels.
    fn level(&mut self, s: &protobuf::SelectStmt, outer: &[Vec<usize>]) -> Option<Vec<usize>> {
        let refs = self.refs;
        let mut here = Vec::new();
        let (mut ignored, mut ons) = (Vec::new(), Vec::new());
        for item in &s.from_clause {
            here.extend(from_item(
                item,
                refs,
                &mut self.nullable,
                &mut ignored,
                &mut ons,
            )?);
        }
        let mut scope: Vec<Vec<usize>> = vec![here.clone()];
        scope.extend(outer.iter().cloned());
        let scope_refs: Vec<&[usize]> = scope.iter().map(|l| l.as_slice()).collect();
        let mut top = Vec::new();
        if let Some(w) = s.where_clause.as_deref() {
            conjuncts(w, &mut top);
        }
        let firm = |i: usize, nullable: &[bool]| !nullable[i];
        // An ON equality between two references no outer join nulls is an inner
        // join's, holding in every joined row as WHERE's do.
        let on = on_equalities(&ons, refs, &scope_refs);
        for e in on
            .into_iter()
            .chain(top.iter().filter_map(|c| equality(c, refs, &scope_refs)))
        {
            let (a_here, b_here) = (here.contains(&e.a.0), here.contains(&e.b.0));
            if !firm(e.a.0, &self.nullable) || !firm(e.b.0, &self.nullable) {
                continue;
            }
            if a_here {
                self.links.push((e.a.clone(), e.b.clone()));
            }
            if b_here {
                self.links.push((e.b.clone(), e.a.clone()));
            }
        }
        for &i in &here {
            if !self.nullable[i] {
                self.own[i] = top
                    .iter()
                    .filter(|c| only_reads(c, i, refs, &scope_refs))
                    .cloned()
                    .collect();
            }
        }
        let top_links = top_level_link_locations(&top);
        for link in level_sublinks(s) {
            let Some(N::SelectStmt(sub)) = link.subselect.as_deref().and_then(|n| n.node.as_ref())
            else {
                return None;
            };
            let inner = self.level(sub, &scope)?;
            if top_links.contains(&link.location) {
                if let Some(e) = in_link(&link, sub, &inner, &scope_refs, refs) {
                    let (a, b) = (e.a, e.b);
                    if here.contains(&a.0)
                        && inner.contains(&b.0)
                        && !self.nullable[a.0]
                        && !self.nullable[b.0]
                    {
                        self.links.push((a, b));
                    }
                }
            }
        }
        Some(here)
    }

    /// A reference table's rows that matter match, by a link, a row of another
    /// reference table that passes its own conjuncts: `<a>.<x> IN (SELECT <b>.<y> FROM
    /// <b's shard> AS <b> WHERE <b's own conjuncts>)` is a conjunct of the first one's,
    /// so that its keys are few too (TPC-H Q5's and Q8's nations of one region:
    /// `customer` moves for 5 nation keys, 30,000 of its 150,000 rows). One hop, from
    /// the conjuncts written; a reference table's one shard is on every node.
    fn derive_reference_conjuncts(&mut self) {
        let reference =
            |i: usize| self.refs[i].1.method == crate::catalog::PartitionMethod::Reference;
        let mut derived: Vec<(usize, protobuf::Node)> = Vec::new();
        for (a, b) in &self.links {
            if a.0 == b.0 || !reference(a.0) || !reference(b.0) || self.own[b.0].is_empty() {
                continue;
            }
            if let Some(c) = in_reference(
                &self.refs[a.0].0,
                &a.1,
                &self.refs[b.0],
                &b.1,
                &self.own[b.0],
            ) {
                derived.push((a.0, c));
            }
        }
        for (i, c) in derived {
            self.own[i].push(c);
        }
    }

    /// Every (own column, source reference, its column) a link chain leads to from a
    /// column of reference `from`, the source having own conjuncts and not being one of
    /// `members` (the references the same move serves).
    fn reachable(&self, from: usize, members: &[usize]) -> HashSet<(String, usize, String)> {
        let mut out = HashSet::new();
        let starts: Vec<String> = self
            .links
            .iter()
            .filter(|(a, _)| a.0 == from)
            .map(|(a, _)| a.1.clone())
            .collect();
        for start in starts {
            let mut seen: HashSet<Col> = HashSet::new();
            let mut todo: Vec<Col> = vec![(from, start.clone())];
            while let Some(at) = todo.pop() {
                if !seen.insert(at.clone()) {
                    continue;
                }
                if !members.contains(&at.0) && !self.own[at.0].is_empty() {
                    out.insert((start.clone(), at.0, at.1.clone()));
                }
                todo.extend(
                    self.links
                        .iter()
                        .filter(|(a, _)| *a == at)
                        .map(|(_, b)| b.clone()),
                );
            }
        }
        out
    }
}

/// `<a>.<x> IN (SELECT <b>.<y> FROM <b's shard> AS <b> WHERE <b's conjuncts>)` as a
/// parse tree (None: `b` has no shard).
fn in_reference(
    a: &RelRef,
    x: &str,
    (b, b_table): &(RelRef, Arc<DistTable>),
    y: &str,
    conjuncts: &[protobuf::Node],
) -> Option<protobuf::Node> {
    use crate::sql::quote::quote_ident;
    let qualifier = |r: &RelRef| quote_ident(r.alias.as_deref().unwrap_or(&r.name));
    let shard = b_table.shards.first()?;
    let text = format!(
        "SELECT 1 WHERE {}.{} IN (SELECT {}.{} FROM {}.{} AS {})",
        qualifier(a),
        quote_ident(x),
        qualifier(b),
        quote_ident(y),
        quote_ident(&b_table.schema),
        quote_ident(&b_table.shard_name(shard.shard_id)),
        qualifier(b)
    );
    let mut parsed = crate::sql::parse::parse(&text).ok()?;
    let Some(N::SelectStmt(mut outer)) = parsed.pop()?.node else {
        return None;
    };
    let mut link = *outer.where_clause.take()?;
    let Some(N::SubLink(l)) = link.node.as_mut() else {
        return None;
    };
    let Some(N::SelectStmt(inner)) = l.subselect.as_deref_mut()?.node.as_mut() else {
        return None;
    };
    inner.where_clause = Some(Box::new(and_all(conjuncts.to_vec())?));
    Some(link)
}
