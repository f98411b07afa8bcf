//! Router planning: statements on one distributed table whose distribution column is
//! fixed to one value run whole on the one shard that holds it.

use super::distvalue::{constant_location, find_equality, value_source, ValueSource, ValueUse};
use super::multishard;
use super::template::EditWith;
use super::template::{Edit, ShardSqlTemplate};
use super::Plan;
use crate::catalog::{DistTable, PartitionMethod};
use crate::error::{sqlstate, PgError, PgResult};
use crate::sql::parse::RelRef;
use pg_query::protobuf::node::Node as N;
use std::sync::Arc;

/// The distribution value of one row of an INSERT.
pub type InsertRow = ValueSource;

#[derive(Debug)]
pub struct RouterPlan {
    pub table: Arc<DistTable>,
    pub template: ShardSqlTemplate,
    /// Where the shard comes from: one value (SELECT/UPDATE/DELETE) or one per
    /// inserted row, all of which must land on the same shard.
    pub values: Vec<ValueSource>,
    pub is_insert: bool,
    /// Whether the statement only reads (routing inside a transaction does not need 2PC).
    pub read_only: bool,
    /// The value expressions behind `values` with their constants' text positions
    /// (for the simple-protocol shape cache), where known.
    pub value_exprs: Vec<(pg_query::protobuf::Node, usize)>,
    /// Text span of the table reference, and whether the shard name gets an alias.
    pub relation_span: Option<(usize, usize)>,
    pub add_alias: bool,
}

fn unsupported(msg: String) -> PgResult<Plan> {
    Ok(Plan::Unsupported(PgError::not_supported(msg)))
}

pub fn plan_dml(node: &N, text: &str, rel: &RelRef, table: Arc<DistTable>) -> PgResult<Plan> {
    if table.method == PartitionMethod::Reference {
        return plan_reference(node, text, rel, table);
    }
    let Some(col) = table.dist_column.clone() else {
        return unsupported(format!(
            "table \"{}\" has no distribution column",
            table.name
        ));
    };
    let alias = rel.alias.clone();
    let tname = table.name.clone();
    let names_table = move |q: &str| match &alias {
        Some(a) => q == a,
        None => q == tname,
    };
    let edit = Edit::relation(text, rel)?;
    match node {
        N::SelectStmt(s) => {
            if s.with_clause.is_some() {
                return unsupported(
                    "pgshard does not support WITH queries on distributed tables yet".into(),
                );
            }
            // The WHERE names the table's columns only when the table is a FROM item
            // of this query, not inside a subquery of it (whose output columns may
            // carry the column's name and other values: a view's definition).
            let direct = in_top_from(&s.from_clause, rel.location);
            match find_equality(s.where_clause.as_deref(), &col, &names_table) {
                Some((v, expr))
                    if direct && s.op == pg_query::protobuf::SetOperation::SetopNone as i32 =>
                {
                    let read_only = s.locking_clause.is_empty() && s.into_clause.is_none();
                    Ok(routed(text, table, edit, v, expr, read_only))
                }
                _ => multishard::plan_select(s, text, rel, edit, table),
            }
        }
        N::UpdateStmt(u) => {
            if u.with_clause.is_some() || !u.from_clause.is_empty() {
                return unsupported(
                    "pgshard does not support UPDATE with WITH or FROM on distributed tables yet"
                        .into(),
                );
            }
            for t in &u.target_list {
                if let Some(N::ResTarget(rt)) = t.node.as_ref() {
                    if rt.name == col.name {
                        return Ok(Plan::Unsupported(PgError::new(
                            sqlstate::FEATURE_NOT_SUPPORTED,
                            format!("modifying the partition value of rows is not allowed (column \"{}\")", col.name),
                        )));
                    }
                }
            }
            match find_equality(u.where_clause.as_deref(), &col, &names_table) {
                Some((v, expr)) => Ok(routed(text, table, edit, v, expr, false)),
                None => Ok(modify_all(
                    text,
                    table,
                    edit,
                    "UPDATE",
                    u.returning_clause
                        .as_ref()
                        .is_some_and(|r| !r.exprs.is_empty()),
                )),
            }
        }
        N::DeleteStmt(d) => {
            if d.with_clause.is_some() || !d.using_clause.is_empty() {
                return unsupported(
                    "pgshard does not support DELETE with WITH or USING on distributed tables yet"
                        .into(),
                );
            }
            match find_equality(d.where_clause.as_deref(), &col, &names_table) {
                Some((v, expr)) => Ok(routed(text, table, edit, v, expr, false)),
                None => Ok(modify_all(
                    text,
                    table,
                    edit,
                    "DELETE",
                    d.returning_clause
                        .as_ref()
                        .is_some_and(|r| !r.exprs.is_empty()),
                )),
            }
        }
        N::InsertStmt(i) => plan_insert(i, text, table, edit),
        _ => {
            unsupported("pgshard does not support this statement on distributed tables yet".into())
        }
    }
}

/// Whether the table reference at `location` is a FROM item of the query itself (in
/// its list or its joins), not inside a subquery.
fn in_top_from(from: &[pg_query::protobuf::Node], location: usize) -> bool {
    from.iter().any(|f| match f.node.as_ref() {
        Some(N::RangeVar(rv)) => rv.location.max(0) as usize == location,
        Some(N::JoinExpr(j)) => [j.larg.as_deref(), j.rarg.as_deref()]
            .into_iter()
            .flatten()
            .any(|side| in_top_from(std::slice::from_ref(side), location)),
        _ => false,
    })
}

fn modify_all(
    text: &str,
    table: Arc<DistTable>,
    edit: Edit,
    verb: &'static str,
    returning: bool,
) -> Plan {
    Plan::MultiShardModify(Arc::new(multishard::ModifyPlan {
        template: ShardSqlTemplate::new(text, &table, vec![edit]),
        table,
        verb,
        returning,
    }))
}

fn routed(
    text: &str,
    table: Arc<DistTable>,
    edit: Edit,
    v: ValueSource,
    expr: &pg_query::protobuf::Node,
    read_only: bool,
) -> Plan {
    let value_exprs = constant_location(expr)
        .map(|l| vec![(expr.clone(), l)])
        .unwrap_or_default();
    let add_alias = matches!(
        edit.with,
        EditWith::Relation {
            add_alias: true,
            ..
        }
    );
    Plan::Router(Arc::new(RouterPlan {
        relation_span: Some((edit.start, edit.end)),
        add_alias,
        template: ShardSqlTemplate::new(text, &table, vec![edit]),
        table,
        values: vec![v],
        is_insert: false,
        read_only,
        value_exprs,
    }))
}

fn plan_insert(
    i: &pg_query::protobuf::InsertStmt,
    text: &str,
    table: Arc<DistTable>,
    edit: Edit,
) -> PgResult<Plan> {
    let col = table.dist_column.clone().expect("hash table has a column");
    if i.with_clause.is_some() {
        return unsupported(
            "pgshard does not support INSERT with WITH on distributed tables yet".into(),
        );
    }
    // Position of the distribution column among the inserted columns.
    let position = if i.cols.is_empty() {
        table.columns.iter().position(|c| *c == col.name)
    } else {
        i.cols
            .iter()
            .position(|c| matches!(c.node.as_ref(), Some(N::ResTarget(rt)) if rt.name == col.name))
    };
    let no_value = || {
        Ok(Plan::Unsupported(PgError::new(
            sqlstate::NOT_NULL_VIOLATION,
            format!(
                "cannot perform an INSERT without a partition column value (column \"{}\")",
                col.name
            ),
        )))
    };
    let Some(select) = i.select_stmt.as_deref().and_then(|s| s.node.as_ref()) else {
        return no_value();
    };
    let N::SelectStmt(sel) = select else {
        return unsupported("pgshard does not support this INSERT form yet".into());
    };
    if sel.values_lists.is_empty() {
        // INSERT ... SELECT reading no table, or only local ones.
        return super::insert_select::plan_via_coordinator(i, text, table, false);
    }
    let Some(position) = position else {
        return no_value();
    };
    if let Some(oc) = i.on_conflict_clause.as_deref() {
        for t in &oc.target_list {
            if let Some(N::ResTarget(rt)) = t.node.as_ref() {
                if rt.name == col.name {
                    return unsupported(format!(
                        "modifying the partition value of rows is not allowed (column \"{}\")",
                        col.name
                    ));
                }
            }
        }
    }
    let mut values = Vec::with_capacity(sel.values_lists.len());
    let mut value_exprs = Vec::new();
    let mut needs_split = false;
    for row in &sel.values_lists {
        let Some(N::List(items)) = row.node.as_ref() else {
            return unsupported("unexpected VALUES shape".into());
        };
        let Some(item) = items.items.get(position) else {
            return no_value();
        };
        if matches!(item.node.as_ref(), Some(N::SetToDefault(_))) {
            return no_value();
        }
        match value_source(item, &col, ValueUse::Store) {
            Some(ValueSource::Null) => {
                return Ok(Plan::Unsupported(PgError::new(
                    sqlstate::NOT_NULL_VIOLATION,
                    format!(
                        "cannot perform an INSERT with NULL in the partition column \"{}\"",
                        col.name
                    ),
                )))
            }
            Some(v) => {
                if let Some(l) = constant_location(item) {
                    value_exprs.push((item.clone(), l));
                }
                values.push(v)
            }
            None => needs_split = true,
        }
    }
    if !needs_split && values.len() > 1 {
        // Constants all on one shard stay a router plan; anything else is split at execution.
        let mut shards = values.iter().map(|v| match v {
            ValueSource::Hash(h) => table.shard_for_hash(*h).map(|s| s.shard_id),
            _ => None,
        });
        let first = shards.next().flatten();
        needs_split = first.is_none() || shards.any(|s| s != first);
    }
    if needs_split {
        // Each shard sees only some rows: PostgreSQL's check across all rows is made here.
        let lengths = sel.values_lists.iter().map(|r| match r.node.as_ref() {
            Some(N::List(l)) => l.items.len(),
            _ => 0,
        });
        if lengths.clone().min() != lengths.max() {
            return Ok(Plan::Unsupported(PgError::new(
                sqlstate::SYNTAX_ERROR,
                "VALUES lists must all be the same length",
            )));
        }
        // Rows on several shards, or keys that are expressions: one INSERT per shard.
        return match super::insert::plan_rows(text, table.clone(), edit, &sel.values_lists, position) {
            Some(p) => Ok(Plan::InsertRows(Arc::new(p))),
            None => unsupported(format!(
                "pgshard could not split the VALUES rows of this INSERT into the distributed table \"{}\"",
                table.name
            )),
        };
    }
    let add_alias = matches!(
        edit.with,
        EditWith::Relation {
            add_alias: true,
            ..
        }
    );
    // The shape cache reproduces single-row inserts only.
    let value_exprs = if values.len() == 1 {
        value_exprs
    } else {
        Vec::new()
    };
    Ok(Plan::Router(Arc::new(RouterPlan {
        relation_span: Some((edit.start, edit.end)),
        add_alias,
        template: ShardSqlTemplate::new(text, &table, vec![edit]),
        table,
        values,
        is_insert: true,
        read_only: false,
        value_exprs,
    })))
}

/// A statement on one reference table: reads go to one placement (a router plan on
/// its only shard), writes to every placement.
fn plan_reference(node: &N, text: &str, rel: &RelRef, table: Arc<DistTable>) -> PgResult<Plan> {
    let edit = Edit::relation(text, rel)?;
    let template = ShardSqlTemplate::new(text, &table, vec![edit]);
    let tag = match node {
        N::SelectStmt(s) => {
            if s.with_clause.is_some() {
                return unsupported(
                    "pgshard does not support WITH queries on reference tables yet".into(),
                );
            }
            let read_only = s.locking_clause.is_empty() && s.into_clause.is_none();
            return Ok(Plan::Router(Arc::new(RouterPlan {
                template,
                table,
                values: vec![ValueSource::Hash(0)],
                is_insert: false,
                read_only,
                value_exprs: Vec::new(),
                relation_span: None,
                add_alias: false,
            })));
        }
        N::InsertStmt(i) if i.with_clause.is_none() => "INSERT",
        N::UpdateStmt(u) if u.with_clause.is_none() && u.from_clause.is_empty() => "UPDATE",
        N::DeleteStmt(d) if d.with_clause.is_none() && d.using_clause.is_empty() => "DELETE",
        _ => {
            return unsupported(format!(
                "pgshard does not support this statement on the reference table \"{}\" yet",
                table.name
            ))
        }
    };
    let (functions, default_keyword) = crate::sql::parse::calls_and_defaults(node);
    let evaluate_once = match node {
        N::InsertStmt(i) => {
            match super::insert_select::plan_via_coordinator(i, text, table.clone(), false)? {
                Plan::InsertViaCoordinator(p) => Some(p),
                _ => None,
            }
        }
        _ => None,
    };
    Ok(Plan::ReferenceWrite {
        table,
        template,
        tag: tag.to_string(),
        functions,
        defaults: default_use(node, default_keyword),
        evaluate_once,
    })
}

/// Which columns a write may fill with their defaults; `keyword`: the DEFAULT keyword
/// stands somewhere in it (VALUES, SET, nested), so any column may.
pub(super) fn default_use(node: &N, keyword: bool) -> super::DefaultUse {
    use super::DefaultUse;
    match node {
        _ if keyword => DefaultUse::Any,
        N::InsertStmt(i) if !i.cols.is_empty() => DefaultUse::AllExcept(
            i.cols
                .iter()
                .filter_map(|c| match c.node.as_ref() {
                    Some(N::ResTarget(rt)) => Some(rt.name.clone()),
                    _ => None,
                })
                .collect(),
        ),
        N::InsertStmt(i) => match i.select_stmt.as_deref().and_then(|s| s.node.as_ref()) {
            Some(N::SelectStmt(s)) => match s.values_lists.first().and_then(|l| l.node.as_ref()) {
                Some(N::List(l)) => DefaultUse::AllAfter(l.items.len()),
                None if s.values_lists.is_empty() && !s.target_list.is_empty() => {
                    DefaultUse::AllAfter(s.target_list.len())
                }
                _ => DefaultUse::Any,
            },
            // DEFAULT VALUES.
            None => DefaultUse::AllAfter(0),
            _ => DefaultUse::Any,
        },
        _ => DefaultUse::Nothing,
    }
}
