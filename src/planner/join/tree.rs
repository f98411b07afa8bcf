//! Parse-tree pieces for the combine of joins (`combine.rs`) and the subquery proof
//! (`sublinks.rs`): nodes built from scratch, expression keys, a walk over read parts.

use super::super::func_name;
use super::super::multishard::KNOWN_AGGREGATES;
use pg_query::protobuf;
use pg_query::protobuf::node::Node as N;

pub(in crate::planner) fn string_node(s: &str) -> protobuf::Node {
    protobuf::Node {
        node: Some(N::String(protobuf::String {
            sval: s.to_string(),
        })),
    }
}

pub(in crate::planner) fn column(names: &[&str]) -> protobuf::Node {
    protobuf::Node {
        node: Some(N::ColumnRef(protobuf::ColumnRef {
            fields: names.iter().map(|n| string_node(n)).collect(),
            location: -1,
        })),
    }
}

pub(in crate::planner) fn target(val: protobuf::Node, name: &str) -> protobuf::Node {
    protobuf::Node {
        node: Some(N::ResTarget(Box::new(protobuf::ResTarget {
            name: name.to_string(),
            val: Some(Box::new(val)),
            location: -1,
            ..Default::default()
        }))),
    }
}

pub(in crate::planner) fn int_const(i: i32) -> protobuf::Node {
    protobuf::Node {
        node: Some(N::AConst(protobuf::AConst {
            isnull: false,
            val: Some(protobuf::a_const::Val::Ival(protobuf::Integer { ival: i })),
            location: -1,
        })),
    }
}

/// A string constant (`'...'`, deparsed with its quotes doubled).
pub(in crate::planner) fn str_const(s: &str) -> protobuf::Node {
    protobuf::Node {
        node: Some(N::AConst(protobuf::AConst {
            isnull: false,
            val: Some(protobuf::a_const::Val::Sval(protobuf::String {
                sval: s.to_string(),
            })),
            location: -1,
        })),
    }
}

pub(in crate::planner) fn bool_const(b: bool) -> protobuf::Node {
    protobuf::Node {
        node: Some(N::AConst(protobuf::AConst {
            isnull: false,
            val: Some(protobuf::a_const::Val::Boolval(protobuf::Boolean {
                boolval: b,
            })),
            location: -1,
        })),
    }
}

pub(super) fn partials_table() -> protobuf::Node {
    protobuf::Node {
        node: Some(N::RangeVar(protobuf::RangeVar {
            schemaname: "pg_temp".into(),
            relname: "pgs_partials".into(),
            inh: true,
            relpersistence: "p".into(),
            location: -1,
            ..Default::default()
        })),
    }
}

/// A node's shape without text positions: equal keys, equal expressions.
pub(super) fn expr_key(n: &protobuf::Node) -> String {
    let mut v = serde_json::to_value(n).unwrap_or_default();
    crate::sql::parse::strip_locations(&mut v);
    v.to_string()
}

pub(super) fn deparse(s: &protobuf::SelectStmt) -> Result<String, String> {
    N::SelectStmt(Box::new(s.clone()))
        .deparse(Default::default())
        .map_err(|e| format!("a statement pgshard could not rewrite ({e})"))
}

/// Whether a call is an aggregate (as the single-table combine counts them).
pub(super) fn is_aggregate(fc: &protobuf::FuncCall) -> bool {
    fc.over.is_none()
        && (func_name(fc).is_some_and(|n| KNOWN_AGGREGATES.contains(&n.as_str()))
            || fc.agg_star
            || fc.agg_distinct
            || fc.agg_filter.is_some()
            || !fc.agg_order.is_empty()
            || fc.agg_within_group)
}

/// Calls `f(node, inside_aggregate)` on every expression node below `n`, outermost
/// first, windows' PARTITION BY / ORDER BY included, never inside a subquery (the
/// SubLink itself is shown); `f` returning true stops the descent below that node.
pub(super) fn visit(
    n: &mut protobuf::Node,
    inside: bool,
    f: &mut dyn FnMut(&mut protobuf::Node, bool) -> bool,
) {
    crate::sql::walk::expression(n, false, &mut |x, _| {
        if matches!(x.node, Some(N::SubLink(_))) {
            f(x, inside);
            return true;
        }
        if f(x, inside) {
            return true;
        }
        if let Some(N::FuncCall(fc)) = x.node.as_mut() {
            if let Some(w) = fc.over.as_deref_mut() {
                for y in w
                    .partition_clause
                    .iter_mut()
                    .chain(w.order_clause.iter_mut())
                {
                    visit(y, inside, f);
                }
            }
            if !inside && is_aggregate(fc) {
                for y in fc.args.iter_mut().chain(fc.agg_order.iter_mut()) {
                    visit(y, true, f);
                }
                if let Some(y) = fc.agg_filter.as_deref_mut() {
                    visit(y, true, f);
                }
                return true;
            }
        }
        false
    });
}

/// [`visit`] over the parts of a SELECT the combine reads: target list, GROUP BY,
/// HAVING, ORDER BY (`sort`: whether to include it), DISTINCT ON, WINDOW.
pub(super) fn visit_read_parts(
    s: &mut protobuf::SelectStmt,
    sort: bool,
    f: &mut dyn FnMut(&mut protobuf::Node, bool) -> bool,
) {
    for x in s
        .target_list
        .iter_mut()
        .chain(s.group_clause.iter_mut())
        .chain(s.distinct_clause.iter_mut())
    {
        visit(x, false, f);
    }
    if let Some(h) = s.having_clause.as_deref_mut() {
        visit(h, false, f);
    }
    if sort {
        for x in s.sort_clause.iter_mut() {
            visit(x, false, f);
        }
    }
    for w in s.window_clause.iter_mut() {
        if let Some(N::WindowDef(d)) = w.node.as_mut() {
            for y in d
                .partition_clause
                .iter_mut()
                .chain(d.order_clause.iter_mut())
            {
                visit(y, false, f);
            }
        }
    }
}
