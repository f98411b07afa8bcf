//! The columns a table pulled whole by recursive planning (`Cutter::pull_tables`) must
//! bring: only those the statement names, as Citus's recursive planning of a table reads
//! only its required attributes. A join of a reference table with a local table, or a
//! join pgshard cannot push down, then moves `SELECT k, v FROM t WHERE ...` instead of
//! every column.
//!
//! Conservative: any name a column reference of the statement ends with counts for
//! every table (a superset), and the table's every column is pulled when the statement
//! is not a SELECT, reads whole rows of it (`t.*`, `*`, `t` as a value, `f(t)`), joins
//! NATURAL-ly or renames the table's columns by position (`t AS x(a, b)`). The bare
//! `*` of `EXISTS (SELECT * FROM ...)` reads nothing (EXISTS looks only at whether a
//! row comes) unless the subquery groups, aggregates or is DISTINCT, where the `*`'s
//! columns decide what is valid.

use super::aggregate::column_refs_json;
use super::join::tree;
use crate::catalog::DistTable;
use pg_query::protobuf::{self, node::Node as N};
use pg_query::NodeRef;
use std::collections::HashSet;

/// What a statement reads of the tables it names.
pub(super) struct NeededColumns {
    /// Every table's whole rows (not a SELECT, a bare `*`, NATURAL joins).
    all: bool,
    /// Column names named anywhere (last part of each column reference, USING lists).
    names: HashSet<String>,
    /// Qualifiers of `q.*`.
    starred: HashSet<String>,
}

impl NeededColumns {
    pub(super) fn of(root: &N) -> NeededColumns {
        let mut needed = NeededColumns {
            all: !matches!(root, N::SelectStmt(_)),
            names: HashSet::new(),
            starred: HashSet::new(),
        };
        if needed.all {
            return needed;
        }
        let root = &without_exists_stars(root);
        for (fields, _) in column_refs_json(root) {
            match fields.as_slice() {
                [.., Some(name)] => {
                    needed.names.insert(name.clone());
                }
                [None] => needed.all = true,
                [.., Some(q), None] => {
                    needed.starred.insert(q.clone());
                }
                _ => needed.all = true,
            }
        }
        for (n, _, _, _) in root.nodes() {
            match n {
                NodeRef::JoinExpr(j) if j.is_natural => needed.all = true,
                NodeRef::RangeVar(rv)
                    if rv.alias.as_ref().is_some_and(|a| !a.colnames.is_empty()) =>
                {
                    needed.all = true
                }
                NodeRef::JoinExpr(j) => {
                    for u in &j.using_clause {
                        if let Some(N::String(s)) = u.node.as_ref() {
                            needed.names.insert(s.sval.clone());
                        }
                    }
                }
                _ => {}
            }
        }
        needed
    }

    /// The columns of `table` the statement needs, in the table's order, for a
    /// reference named `name` (its alias, else its relation name `relname`): None for
    /// whole rows.
    pub(super) fn columns_of(
        &self,
        name: &str,
        relname: &str,
        table: &DistTable,
    ) -> Option<Vec<String>> {
        let whole_rows = self.all
            || [name, relname]
                .iter()
                .any(|n| self.starred.contains(*n) || self.names.contains(*n));
        if whole_rows {
            return None;
        }
        Some(
            table
                .columns
                .iter()
                .filter(|c| self.names.contains(*c))
                .cloned()
                .collect(),
        )
    }

    /// The select list pulling `rv` (a reference to `table`): its needed columns in
    /// their order, or `*`.
    pub(super) fn target_list(
        &self,
        rv: &protobuf::RangeVar,
        table: &DistTable,
    ) -> Option<Vec<protobuf::Node>> {
        let name = rv
            .alias
            .as_ref()
            .map(|a| a.aliasname.as_str())
            .unwrap_or(rv.relname.as_str());
        if rv.alias.as_ref().is_some_and(|a| !a.colnames.is_empty()) {
            return None;
        }
        let mut columns = self.columns_of(name, &rv.relname, table)?;
        // No column named (`count(*)` over a join): one keeps the rows.
        if columns.is_empty() {
            columns.extend(table.columns.first().cloned());
        }
        Some(columns.iter().map(|c| column_target(c)).collect())
    }
}

fn column_target(name: &str) -> protobuf::Node {
    protobuf::Node {
        node: Some(N::ResTarget(Box::new(protobuf::ResTarget {
            val: Some(Box::new(protobuf::Node {
                node: Some(N::ColumnRef(protobuf::ColumnRef {
                    fields: vec![protobuf::Node {
                        node: Some(N::String(protobuf::String {
                            sval: name.to_string(),
                        })),
                    }],
                    location: -1,
                })),
            })),
            location: -1,
            ..Default::default()
        }))),
    }
}

/// `root` with the bare `*` select list of each EXISTS subquery that neither groups,
/// aggregates nor is DISTINCT replaced by a constant (the subquery's rows are only
/// counted; TPC-H Q21's and Q22's `EXISTS (SELECT * FROM lineitem ...)`).
fn without_exists_stars(root: &N) -> N {
    let mut copy = root.clone();
    crate::sql::walk::statement(&mut copy, false, &mut |n, _| {
        let Some(N::SubLink(link)) = n.node.as_mut() else {
            return false;
        };
        if link.sub_link_type != protobuf::SubLinkType::ExistsSublink as i32 {
            return false;
        }
        if let Some(N::SelectStmt(sub)) =
            link.subselect.as_deref_mut().and_then(|x| x.node.as_mut())
        {
            if is_bare_star(&sub.target_list)
                && sub.group_clause.is_empty()
                && sub.having_clause.is_none()
                && sub.distinct_clause.is_empty()
                && sub.window_clause.is_empty()
            {
                sub.target_list = vec![tree::target(tree::int_const(1), "")];
            }
        }
        false
    });
    copy
}

/// A select list of one bare `*`.
fn is_bare_star(targets: &[protobuf::Node]) -> bool {
    let [t] = targets else {
        return false;
    };
    let Some(N::ResTarget(rt)) = t.node.as_ref() else {
        return false;
    };
    let Some(N::ColumnRef(cr)) = rt.val.as_deref().and_then(|v| v.node.as_ref()) else {
        return false;
    };
    matches!(cr.fields.as_slice(), [f] if matches!(f.node, Some(N::AStar(_))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::PartitionMethod;
    use crate::planner::join::tests::table;

    fn pulled(sql: &str, relname: &str) -> Option<Vec<String>> {
        let tree = crate::sql::parse::parse(sql)
            .unwrap()
            .remove(0)
            .node
            .unwrap();
        let needed = NeededColumns::of(&tree);
        let rv = tree
            .nodes()
            .into_iter()
            .find_map(|(n, _, _, _)| match n {
                NodeRef::RangeVar(rv) if rv.relname == relname => Some(rv.clone()),
                _ => None,
            })
            .unwrap();
        // Columns k, v, r_only.
        let t = table(4, "r", PartitionMethod::Reference, 3, 400);
        needed.target_list(&rv, &t).map(|list| {
            list.iter()
                .map(|n| match n.node.as_ref() {
                    Some(N::ResTarget(rt)) => match rt.val.as_ref().unwrap().node.as_ref() {
                        Some(N::ColumnRef(c)) => match c.fields[0].node.as_ref() {
                            Some(N::String(s)) => s.sval.clone(),
                            _ => unreachable!(),
                        },
                        _ => unreachable!(),
                    },
                    _ => unreachable!(),
                })
                .collect()
        })
    }

    #[test]
    fn only_the_named_columns_are_pulled() {
        let cols = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            pulled(
                "SELECT l.a, sum(x.v) FROM l JOIN r x ON x.k = l.a GROUP BY 1",
                "r"
            ),
            cols(&["k", "v"])
        );
        assert_eq!(
            pulled("SELECT count(*) FROM l JOIN r USING (k)", "r"),
            cols(&["k"])
        );
        assert_eq!(pulled("SELECT count(*) FROM l, r", "r"), cols(&["k"]));
        assert_eq!(
            pulled("SELECT l.* FROM l JOIN r ON r.v = l.v", "r"),
            cols(&["v"])
        );
        // EXISTS only asks whether a row comes: its `*` reads nothing.
        assert_eq!(
            pulled(
                "SELECT l.a FROM l WHERE NOT EXISTS (SELECT * FROM r WHERE r.k = l.a)",
                "r"
            ),
            cols(&["k"])
        );
    }

    #[test]
    fn whole_rows_pull_every_column() {
        for sql in [
            "SELECT * FROM l JOIN r ON r.v = l.v",
            "SELECT r.* FROM l JOIN r ON r.v = l.v",
            "SELECT row_to_json(x) FROM l JOIN r x ON x.v = l.v",
            "SELECT l.a FROM l NATURAL JOIN r",
            "SELECT y.a FROM l JOIN r y(a, b) ON y.a = l.a",
            "SELECT count(r) FROM l JOIN r ON r.v = l.v",
            // The `*` decides what the grouped subquery may select.
            "SELECT l.a FROM l WHERE EXISTS (SELECT * FROM r WHERE r.k = l.a GROUP BY r.k)",
            "SELECT l.a FROM l WHERE EXISTS (SELECT DISTINCT * FROM r WHERE r.k = l.a)",
        ] {
            assert_eq!(pulled(sql, "r"), None, "{sql}");
        }
    }
}
