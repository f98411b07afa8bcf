//! Merging a simple view into the query that reads it (`planner::views`): a view
//! `SELECT columns FROM one relation [WHERE ...]` read as an inner FROM item becomes
//! that relation under the reference's name, its WHERE added to the query's, when
//! nothing in the query could tell the difference (no column the view hides is named,
//! a `*` spelled out as the view's columns, no whole-row reference). So a view filtered
//! on a tenant routes and a plain selection runs on the shards like its table.

use super::string_node;
use pg_query::protobuf::{self, node::Node as N};
use std::collections::{HashMap, HashSet};

/// What a query says about merging a view of its FROM list into it.
pub(super) struct Outer {
    /// Every name its column references use (any part, subqueries included).
    pub(super) names: HashSet<String>,
    /// Qualifiers of `q.*` in its select list.
    pub(super) stars: HashSet<String>,
    /// A bare `*` in its select list.
    pub(super) bare_star: bool,
    /// Names used as whole-row references (`q` alone, `q.*` inside an expression).
    pub(super) whole_rows: HashSet<String>,
    /// One FROM item.
    pub(super) single: bool,
    /// No FOR UPDATE / SHARE.
    pub(super) lockless: bool,
}

pub(super) fn fields(c: &protobuf::ColumnRef) -> Vec<Option<&str>> {
    c.fields
        .iter()
        .map(|f| match f.node.as_ref() {
            Some(N::String(s)) => Some(s.sval.as_str()),
            _ => None,
        })
        .collect()
}

impl Outer {
    pub(super) fn of(s: &protobuf::SelectStmt) -> Outer {
        let mut o = Outer {
            names: HashSet::new(),
            stars: HashSet::new(),
            bare_star: false,
            whole_rows: HashSet::new(),
            single: s.from_clause.len() == 1
                && matches!(s.from_clause[0].node.as_ref(), Some(N::RangeVar(_))),
            lockless: s.locking_clause.is_empty(),
        };
        // The select list's own `*` / `q.*` entries.
        let mut top_stars: HashMap<String, usize> = HashMap::new();
        for t in &s.target_list {
            if let Some(N::ResTarget(rt)) = t.node.as_ref() {
                if let Some(N::ColumnRef(c)) = rt.val.as_deref().and_then(|v| v.node.as_ref()) {
                    match fields(c).as_slice() {
                        [None] => o.bare_star = true,
                        [Some(q), None] => {
                            o.stars.insert(q.to_string());
                            *top_stars.entry(q.to_string()).or_default() += 1;
                        }
                        _ => {}
                    }
                }
            }
        }
        let mut all_stars: HashMap<String, usize> = HashMap::new();
        let root = N::SelectStmt(Box::new(s.clone()));
        for (n, _, _, _) in root.nodes() {
            if let pg_query::NodeRef::ColumnRef(c) = n {
                let f = fields(c);
                for name in f.iter().flatten() {
                    o.names.insert(name.to_string());
                }
                match f.as_slice() {
                    [Some(q)] => {
                        o.whole_rows.insert(q.to_string());
                    }
                    [.., Some(q), None] => *all_stars.entry(q.to_string()).or_default() += 1,
                    _ => {}
                }
            }
        }
        // `q.*` anywhere but as a select-list entry is a whole row.
        for (q, n) in all_stars {
            if top_stars.get(&q).copied().unwrap_or(0) < n {
                o.whole_rows.insert(q);
            }
        }
        o
    }
}

/// Views merged into one query: their WHEREs, and the `*` entries to spell out.
#[derive(Default)]
pub(super) struct Merged {
    pub(super) quals: Vec<protobuf::Node>,
    pub(super) stars: Vec<(String, Vec<String>)>,
}

impl Merged {
    pub(super) fn apply(self, s: &mut protobuf::SelectStmt) {
        if !self.stars.is_empty() {
            let mut list = Vec::new();
            for t in std::mem::take(&mut s.target_list) {
                let star_of = match t.node.as_ref() {
                    Some(N::ResTarget(rt)) => match rt.val.as_deref().and_then(|v| v.node.as_ref())
                    {
                        Some(N::ColumnRef(c)) => match fields(c).as_slice() {
                            [None] => self.stars.first().map(|(a, _)| a.clone()),
                            [Some(q), None] => Some(q.to_string()),
                            _ => None,
                        },
                        _ => None,
                    },
                    _ => None,
                };
                match star_of.and_then(|a| self.stars.iter().find(|(x, _)| *x == a)) {
                    Some((alias, columns)) => {
                        for c in columns {
                            list.push(column_target(alias, c));
                        }
                    }
                    None => list.push(t),
                }
            }
            s.target_list = list;
        }
        if self.quals.is_empty() {
            return;
        }
        let mut args = self.quals;
        if let Some(w) = s.where_clause.take() {
            args.push(*w);
        }
        s.where_clause = Some(Box::new(protobuf::Node {
            node: Some(N::BoolExpr(Box::new(protobuf::BoolExpr {
                xpr: None,
                boolop: protobuf::BoolExprType::AndExpr as i32,
                args,
                location: -1,
            }))),
        }));
    }
}

/// Where a merge may happen (an inner FROM item of the query `outer`).
pub(super) struct Merge<'o, 'm> {
    pub(super) outer: &'o Outer,
    pub(super) merged: &'m mut Merged,
}

impl Merge<'_, '_> {
    pub(super) fn again(&mut self) -> Merge<'_, '_> {
        Merge {
            outer: self.outer,
            merged: self.merged,
        }
    }
}

/// `alias.column` as a select-list entry.
pub(super) fn column_target(alias: &str, column: &str) -> protobuf::Node {
    protobuf::Node {
        node: Some(N::ResTarget(Box::new(protobuf::ResTarget {
            val: Some(Box::new(protobuf::Node {
                node: Some(N::ColumnRef(protobuf::ColumnRef {
                    fields: vec![string_node(alias), string_node(column)],
                    location: -1,
                })),
            })),
            location: -1,
            ..Default::default()
        }))),
    }
}

/// A view `SELECT c1, c2 FROM relation [alias] [WHERE pred]`: plain columns of its one
/// relation under their own names, no subquery in the WHERE.
pub(super) struct SimpleView {
    pub(super) base: protobuf::RangeVar,
    /// The name its columns are qualified with (the alias, or the relation's name).
    pub(super) refname: String,
    pub(super) columns: Vec<String>,
    pub(super) pred: Option<protobuf::Node>,
}

impl SimpleView {
    pub(super) fn of(definition: &str) -> Option<SimpleView> {
        let tree = crate::sql::parse::first_tree(definition, "view definition").ok()?;
        let Some(N::SelectStmt(s)) = tree.node else {
            return None;
        };
        let plain = s.op == protobuf::SetOperation::SetopNone as i32
            && s.with_clause.is_none()
            && s.distinct_clause.is_empty()
            && s.group_clause.is_empty()
            && s.having_clause.is_none()
            && s.window_clause.is_empty()
            && s.sort_clause.is_empty()
            && s.limit_count.is_none()
            && s.limit_offset.is_none()
            && s.locking_clause.is_empty()
            && s.into_clause.is_none()
            && s.values_lists.is_empty()
            && s.from_clause.len() == 1;
        if !plain {
            return None;
        }
        let Some(N::RangeVar(base)) = s.from_clause[0].node.clone() else {
            return None;
        };
        let refname = base
            .alias
            .as_ref()
            .map_or(base.relname.clone(), |a| a.aliasname.clone());
        let mut columns = Vec::new();
        for t in &s.target_list {
            let Some(N::ResTarget(rt)) = t.node.as_ref() else {
                return None;
            };
            let Some(N::ColumnRef(c)) = rt.val.as_deref().and_then(|v| v.node.as_ref()) else {
                return None;
            };
            let column = match fields(c).as_slice() {
                [Some(col)] => col.to_string(),
                [Some(q), Some(col)] if *q == refname => col.to_string(),
                _ => return None,
            };
            if !rt.name.is_empty() && rt.name != column {
                return None;
            }
            columns.push(column);
        }
        let pred = s.where_clause.map(|w| *w);
        if let Some(p) = &pred {
            let root = N::SelectStmt(Box::new(protobuf::SelectStmt {
                where_clause: Some(Box::new(p.clone())),
                ..Default::default()
            }));
            let subquery = root
                .nodes()
                .into_iter()
                .any(|(n, _, _, _)| matches!(n, pg_query::NodeRef::SubLink(_)));
            if subquery {
                return None;
            }
        }
        Some(SimpleView {
            base,
            refname,
            columns,
            pred,
        })
    }
}

/// The view's WHERE as part of the outer query: its columns qualified with the name
/// the base relation has there.
pub(super) fn requalify(
    pred: &mut protobuf::Node,
    refname: &str,
    base: &protobuf::RangeVar,
    alias: &str,
) {
    crate::sql::walk::expression(pred, false, &mut |n, _| {
        if let Some(N::ColumnRef(c)) = n.node.as_mut() {
            let f: Vec<Option<String>> = fields(c).iter().map(|x| x.map(str::to_string)).collect();
            let column = match f.as_slice() {
                [Some(col)] => Some(col.clone()),
                [Some(q), Some(col)] if q == refname => Some(col.clone()),
                [Some(s), Some(t), Some(col)] if *s == base.schemaname && *t == base.relname => {
                    Some(col.clone())
                }
                _ => None,
            };
            if let Some(col) = column {
                c.fields = vec![string_node(alias), string_node(&col)];
            }
        }
        false
    });
}
