//! The steps of the planning ladder (`planner::LADDER`), one function each: every
//! step looks at the statement (`PlanInput`) and plans it, declines it
//! (`Step::NotMine`) or defers its refusal to the steps after it (`Step::Deferred`).

use super::*;
use crate::error::sqlstate;

/// A plan, or a refusal no later step may lift.
fn planned(p: PgResult<Plan>) -> PgResult<Step> {
    Ok(Step::Planned(p?))
}

/// A plan; a FEATURE_NOT_SUPPORTED refusal (planned or returned) is deferred to
/// the later steps.
fn planned_or_deferred(p: PgResult<Plan>) -> PgResult<Step> {
    Ok(match p {
        Ok(Plan::Unsupported(e)) | Err(e) if e.code == sqlstate::FEATURE_NOT_SUPPORTED => {
            Step::Deferred(e)
        }
        Err(e) => return Err(e),
        Ok(p) => Step::Planned(p),
    })
}

/// `SELECT citus_function(args)` and nothing else.
pub(super) fn utility_call(i: &PlanInput) -> PgResult<Step> {
    if let N::SelectStmt(s) = i.node {
        if let Some(u) = super::utility_call(s, i.is_utility_function) {
            return Ok(Step::Planned(u));
        }
    }
    Ok(Step::NotMine)
}

/// Citus functions called inside a larger statement.
pub(super) fn inline_utility(i: &PlanInput) -> PgResult<Step> {
    Ok(
        match inline_utility_calls(i.node, &i.stmt.text, i.is_utility_function) {
            Some(p) => Step::Planned(p),
            None => Step::NotMine,
        },
    )
}

/// Roles reach the workers even before any table is distributed.
pub(super) fn role(i: &PlanInput) -> PgResult<Step> {
    Ok(match security::plan_role(i.node, &i.stmt.text) {
        Some(p) => Step::Planned(Plan::Role(Arc::new(p))),
        None => Step::NotMine,
    })
}

/// GRANT / REVOKE / ALTER DEFAULT PRIVILEGES, policies.
pub(super) fn grant(i: &PlanInput) -> PgResult<Step> {
    Ok(
        match security::plan_grant(i.node, &i.stmt.text, i.catalog, i.names) {
            Some(Ok(p)) => Step::Planned(Plan::Grant(Arc::new(p))),
            Some(Err(e)) => Step::Planned(Plan::Unsupported(e)),
            None => Step::NotMine,
        },
    )
}

/// Nothing distributed yet: everything runs on the coordinator node.
pub(super) fn empty_catalog(i: &PlanInput) -> PgResult<Step> {
    Ok(match i.catalog.is_empty() {
        true => Step::Planned(Plan::Local),
        false => Step::NotMine,
    })
}

/// `SELECT f(...)` of a function distributed with `create_distributed_function`.
pub(super) fn function_call(i: &PlanInput) -> PgResult<Step> {
    Ok(match i.node {
        N::SelectStmt(s) => match super::function_call::plan_function_call(s, i.catalog) {
            Some(p) => Step::Planned(p),
            None => Step::NotMine,
        },
        _ => Step::NotMine,
    })
}

/// Types, domains, collations, functions and schemas: every worker too.
pub(super) fn objects(i: &PlanInput) -> PgResult<Step> {
    Ok(match objects::plan_objects(i.node, &i.stmt.text) {
        Some(p) => Step::Planned(Plan::Grant(Arc::new(p))),
        None => Step::NotMine,
    })
}

pub(super) fn explain(i: &PlanInput) -> PgResult<Step> {
    match i.node {
        N::ExplainStmt(e) => planned(plan_explain(e, i)),
        _ => Ok(Step::NotMine),
    }
}

/// DROP TABLE / DROP INDEX naming distributed tables or their indexes.
pub(super) fn drop(i: &PlanInput) -> PgResult<Step> {
    let N::DropStmt(d) = i.node else {
        return Ok(Step::NotMine);
    };
    if d.remove_type == protobuf::ObjectType::ObjectTable as i32 {
        return Ok(Step::Planned(plan_drop_tables(d, i.catalog, i.names)));
    }
    if d.remove_type == protobuf::ObjectType::ObjectIndex as i32 {
        match ddl::plan_drop_index(d, i.catalog) {
            Some(Ok(indexes)) => {
                return Ok(Step::Planned(Plan::DropIndexes {
                    stmt: d.clone(),
                    indexes,
                }))
            }
            Some(Err(e)) => return Ok(Step::Planned(Plan::Unsupported(e))),
            None => {}
        }
    }
    Ok(Step::NotMine)
}

/// TRUNCATE / VACUUM / ANALYZE of distributed tables.
pub(super) fn propagate(i: &PlanInput) -> PgResult<Step> {
    Ok(
        match propagate::plan_propagate(i.node, &i.stmt.text, i.catalog, i.names) {
            Some(Ok(p)) => Step::Planned(Plan::Propagate(Arc::new(p))),
            Some(Err(e)) => Step::Planned(Plan::Unsupported(e)),
            None => Step::NotMine,
        },
    )
}

/// CREATE INDEX / ALTER TABLE / RENAME on a distributed table.
pub(super) fn ddl(i: &PlanInput) -> PgResult<Step> {
    Ok(
        match ddl::plan_ddl(i.node, &i.stmt.text, i.catalog, i.names) {
            Some(Ok(p)) => Step::Planned(Plan::Ddl(Arc::new(p))),
            Some(Err(e)) => Step::Planned(Plan::Unsupported(e)),
            None => Step::NotMine,
        },
    )
}

/// No distributed table referenced: the coordinator node runs it unchanged, unless
/// it names one in a list of names (COMMENT ON, DROP TRIGGER ...), which would run
/// on its shell only.
pub(super) fn local(i: &PlanInput) -> PgResult<Step> {
    if !i.references().dist.is_empty() {
        return Ok(Step::NotMine);
    }
    if let Some(t) = object_list_tables(i.node)
        .iter()
        .find_map(|(schema, name)| i.names.resolve(i.catalog, schema.as_deref(), name))
    {
        return Ok(Step::Planned(Plan::Unsupported(PgError::not_supported(format!(
            "pgshard does not support this statement when it involves the distributed table \"{}\" yet",
            t.name
        )))));
    }
    Ok(Step::Planned(Plan::Local))
}

/// CREATE TABLE AS / SELECT INTO reading distributed tables: a local table made
/// from the query over the shells, filled with the distributed query's rows.
pub(super) fn create_as(i: &PlanInput) -> PgResult<Step> {
    match create_as::applies(i.node) {
        true => planned(create_as::plan_create_as(i.node, &i.stmt.text)),
        false => Ok(Step::NotMine),
    }
}

/// CREATE TABLE naming distributed tables only as LIKE sources or foreign key
/// targets: the coordinator node makes it from (or referencing) the shell.
pub(super) fn create_like(i: &PlanInput) -> PgResult<Step> {
    let N::CreateStmt(c) = i.node else {
        return Ok(Step::NotMine);
    };
    let refs = i.references();
    let dist: Vec<(&RelRef, Arc<DistTable>)> = refs
        .dist
        .iter()
        .map(|(r, t)| (&refs.rels[*r], t.clone()))
        .collect();
    Ok(match create_as::only_like_sources(c, &dist) {
        true => Step::Planned(Plan::Local),
        false => Step::NotMine,
    })
}

/// SQL-level PREPARE of a statement on distributed tables.
pub(super) fn sql_prepare(i: &PlanInput) -> PgResult<Step> {
    match i.node {
        N::PrepareStmt(p) => planned(sql_prepare::plan_prepare(p)),
        _ => Ok(Step::NotMine),
    }
}

/// UPDATE ... FROM / DELETE ... USING between co-located tables joined on their
/// distribution columns, or with reference tables.
pub(super) fn update_from(i: &PlanInput) -> PgResult<Step> {
    if !matches!(i.node, N::UpdateStmt(_) | N::DeleteStmt(_)) || !update_from::applies(i.node) {
        return Ok(Step::NotMine);
    }
    let refs = i.references();
    let pairs: Vec<(RelRef, Arc<DistTable>)> = refs
        .dist
        .iter()
        .map(|(r, t)| (refs.rels[*r].clone(), t.clone()))
        .collect();
    planned_or_deferred(update_from::plan_update_from(
        i.node,
        &i.stmt.text,
        &pairs,
        refs.rels.len(),
    ))
}

/// A SELECT joining distributed tables only: co-located or with reference tables.
pub(super) fn join(i: &PlanInput) -> PgResult<Step> {
    let refs = i.references();
    match i.node {
        N::SelectStmt(s) if refs.rels.len() > 1 && refs.dist.len() == refs.rels.len() => {
            let pairs: Vec<(RelRef, Arc<DistTable>)> = refs
                .dist
                .iter()
                .map(|(r, t)| (refs.rels[*r].clone(), t.clone()))
                .collect();
            planned_or_deferred(join::plan_join(s, &i.stmt.text, &pairs))
        }
        _ => Ok(Step::NotMine),
    }
}

/// A join the join step could not pair shard by shard: some references moved first
/// (`planner/repartition.rs`), recursive planning's plan kept as its fallback.
pub(super) fn repartition(i: &PlanInput) -> PgResult<Step> {
    let refs = i.references();
    let N::SelectStmt(s) = i.node else {
        return Ok(Step::NotMine);
    };
    if refs.rels.len() < 2 || refs.dist.len() != refs.rels.len() {
        return Ok(Step::NotMine);
    }
    let pairs: Vec<(RelRef, Arc<DistTable>)> = refs
        .dist
        .iter()
        .map(|(r, t)| (refs.rels[*r].clone(), t.clone()))
        .collect();
    if pairs
        .iter()
        .any(|(_, t)| t.schema == repartition::MOVED_SCHEMA)
    {
        return Ok(Step::NotMine);
    }
    let fallback = match recursive(i)? {
        // Uncorrelated subqueries over distributed tables run once, their values in
        // the statement (planned again by the session, this step included), rather
        // than each shard computing them over broadcast tables.
        Step::Planned(Plan::Recursive(r)) if r.subplans.iter().any(|s| s.value.is_some()) => {
            return Ok(Step::Planned(Plan::Recursive(r)));
        }
        Step::Planned(p) => Some(p),
        _ => None,
    };
    Ok(
        match repartition::plan_repartition(
            s,
            i.stmt,
            &pairs,
            i.names,
            i.catalog,
            fallback,
            i.is_utility_function,
        ) {
            Some(p) => Step::Planned(p),
            None => Step::NotMine,
        },
    )
}

/// An INSERT ... SELECT over several tables (not VALUES): its target and the
/// distributed tables, target first (None when the target is not distributed).
fn insert_select_parts<'a>(
    i: &'a PlanInput,
) -> Option<(&'a protobuf::InsertStmt, Vec<(&'a RelRef, Arc<DistTable>)>)> {
    let N::InsertStmt(ins) = i.node else {
        return None;
    };
    let refs = i.references();
    let is_select = matches!(
        ins.select_stmt.as_deref().and_then(|x| x.node.as_ref()),
        Some(N::SelectStmt(s)) if s.values_lists.is_empty()
    );
    if refs.rels.len() < 2 || !is_select {
        return None;
    }
    let target_at = ins.relation.as_ref().map(|r| r.location.max(0) as usize);
    let mut dist: Vec<(&RelRef, Arc<DistTable>)> = refs
        .dist
        .iter()
        .map(|(r, t)| (&refs.rels[*r], t.clone()))
        .collect();
    dist.sort_by_key(|(r, _)| Some(r.location) != target_at);
    Some((ins, dist))
}

/// INSERT into a local table of rows read from distributed tables.
pub(super) fn insert_into_local(i: &PlanInput) -> PgResult<Step> {
    match insert_select_parts(i) {
        Some((ins, dist)) if Some(dist[0].0.location) != target_location(ins) => {
            planned(insert_select::plan_into_local(ins))
        }
        _ => Ok(Step::NotMine),
    }
}

fn target_location(ins: &protobuf::InsertStmt) -> Option<usize> {
    ins.relation.as_ref().map(|r| r.location.max(0) as usize)
}

/// INSERT ... SELECT between co-located tables, shard by shard.
pub(super) fn insert_select(i: &PlanInput) -> PgResult<Step> {
    match insert_select_parts(i) {
        Some((ins, dist)) => planned_or_deferred(insert_select::plan_insert_select(
            ins,
            &i.stmt.text,
            &dist,
            i.references().rels.len(),
        )),
        None => Ok(Step::NotMine),
    }
}

/// Any other INSERT ... SELECT into a hash-distributed or reference table: the rows
/// through the coordinator node.
pub(super) fn insert_via_coordinator(i: &PlanInput) -> PgResult<Step> {
    match insert_select_parts(i) {
        Some((ins, dist)) if Some(dist[0].0.location) == target_location(ins) => {
            planned(insert_select::plan_via_coordinator(
                ins,
                &i.stmt.text,
                dist[0].1.clone(),
                dist.len() > 1,
            ))
        }
        _ => Ok(Step::NotMine),
    }
}

/// SELECT / INSERT / UPDATE / DELETE on one distributed table: routed to one shard
/// or run on all of them.
pub(super) fn one_table(i: &PlanInput) -> PgResult<Step> {
    if !matches!(
        i.node,
        N::SelectStmt(_) | N::InsertStmt(_) | N::UpdateStmt(_) | N::DeleteStmt(_)
    ) {
        return Ok(Step::NotMine);
    }
    let refs = i.references();
    if refs.rels.len() != 1 || refs.dist.len() != 1 {
        return Ok(Step::Deferred(PgError::not_supported(format!(
            "pgshard does not support statements that combine the distributed table \"{}\" with other tables or subqueries yet",
            refs.dist[0].1.name
        ))));
    }
    let table = refs.dist[0].1.clone();
    planned_or_deferred(router::plan_dml(i.node, &i.stmt.text, &refs.rels[0], table))
}

/// COPY to or from a distributed table, COPY (query) TO.
pub(super) fn copy(i: &PlanInput) -> PgResult<Step> {
    let N::CopyStmt(c) = i.node else {
        return Ok(Step::NotMine);
    };
    let refs = i.references();
    if c.query.is_none() && (refs.rels.len() != 1 || refs.dist.len() != 1) {
        return Ok(Step::Planned(Plan::Unsupported(PgError::not_supported(
            "pgshard could not resolve the table of this COPY",
        ))));
    }
    let plan_query = |q: &str| i.plan_text(q);
    planned(copy::plan_copy(
        c,
        &i.stmt.text,
        refs.dist[0].1.clone(),
        &plan_query,
    ))
}

/// A SELECT no earlier step could run as a whole (they deferred their refusals):
/// planned in parts, its CTEs, subqueries and set-operation arms (or, failing that,
/// its distributed tables) run first into intermediate results
/// (`planner/recursive.rs`). Declines when it cannot: the deferred refusal stands.
pub(super) fn recursive(i: &PlanInput) -> PgResult<Step> {
    let N::SelectStmt(s) = i.node else {
        return Ok(Step::NotMine);
    };
    let plan_query = |q: &str| i.plan_text(q);
    Ok(
        match recursive::plan_recursive(s, i.catalog, i.names, &plan_query) {
            Some(p) => Step::Planned(p),
            None => Step::NotMine,
        },
    )
}

/// An UPDATE / DELETE no earlier step could run as a whole: the parts its target's
/// nodes cannot read run first into intermediate results, shipped to those nodes
/// (`planner/modify_recursive.rs`). Declines when it cannot: the deferred refusal
/// stands.
pub(super) fn modify_recursive(i: &PlanInput) -> PgResult<Step> {
    if !matches!(i.node, N::UpdateStmt(_) | N::DeleteStmt(_)) || i.references().dist.is_empty() {
        return Ok(Step::NotMine);
    }
    let plan_query = |q: &str| i.plan_text(q);
    Ok(
        match modify_recursive::plan_modify_recursive(i.node, i.catalog, i.names, &plan_query) {
            Some(p) => Step::Planned(p),
            None => Step::NotMine,
        },
    )
}

/// A statement with modifying CTEs (`modifying_cte.rs`).
pub(super) fn modifying_ctes(i: &PlanInput) -> PgResult<Step> {
    let plan_query = |q: &str| i.plan_text(q);
    match modifying_cte::plan_modifying_ctes(i.node, &i.stmt.text, i.catalog, i.names, &plan_query)
    {
        Some(p) => planned(p),
        None => Ok(Step::NotMine),
    }
}

/// DECLARE CURSOR over distributed tables.
pub(super) fn cursor(i: &PlanInput) -> PgResult<Step> {
    match i.node {
        N::DeclareCursorStmt(d) => planned(cursor::plan_declare(d, &|q: &str| i.plan_text(q))),
        _ => Ok(Step::NotMine),
    }
}

/// EXPLAIN: the explained statement is planned; where it runs on the coordinator node
/// the EXPLAIN goes there unchanged, otherwise pgshard explains it in Citus's shape.
fn plan_explain(e: &protobuf::ExplainStmt, i: &PlanInput) -> PgResult<Plan> {
    let Some((inner, prefix, format, analyze, costs)) = explain::split_explain(e, &i.stmt.text)?
    else {
        return Ok(Plan::Local);
    };
    let inner_plan = plan(&inner, i.catalog, i.names, i.is_utility_function)?;
    match inner_plan {
        Plan::Local => Ok(Plan::Local),
        Plan::Router(_)
        | Plan::MultiShard(_)
        | Plan::MultiShardModify(_)
        | Plan::Recursive(_)
        | Plan::Repartition(_) => Ok(Plan::Explain(Arc::new(explain::ExplainPlan {
            inner: inner_plan,
            stmt: inner,
            prefix,
            format,
            analyze,
            costs,
        }))),
        Plan::Unsupported(e) => Ok(Plan::Unsupported(e)),
        _ => Ok(Plan::Unsupported(PgError::not_supported(
            "pgshard does not support EXPLAIN of this statement",
        ))),
    }
}

/// DROP TABLE names its tables as lists of strings, not RangeVars.
fn plan_drop_tables(d: &protobuf::DropStmt, catalog: &Catalog, names: &Names) -> Plan {
    let mut tables: Vec<Arc<DistTable>> = Vec::new();
    let mut local = 0;
    for o in &d.objects {
        let Some(N::List(l)) = o.node.as_ref() else {
            continue;
        };
        let parts = crate::sql::parse::string_items(&l.items);
        let found = match parts.as_slice() {
            [name] => names.resolve(catalog, None, name),
            [schema, name] => names.resolve(catalog, Some(schema), name),
            [_, schema, name] => names.resolve(catalog, Some(schema), name),
            _ => None,
        };
        match found {
            Some(t) if !tables.iter().any(|x| x.relid == t.relid) => tables.push(t.clone()),
            Some(_) => {}
            None => local += 1,
        }
    }
    if tables.is_empty() {
        return Plan::Local;
    }
    if local > 0 {
        return Plan::Unsupported(PgError::not_supported(
            "DROP TABLE mixing distributed and local tables is not supported yet: drop them separately",
        ));
    }
    Plan::DropTables {
        tables,
        cascade: d.behavior == protobuf::DropBehavior::DropCascade as i32,
    }
}

/// Where the relation a CREATE statement makes is named (its RangeVar's location).
pub(super) fn created_relation(node: &N) -> Option<usize> {
    let rv = match node {
        N::CreateStmt(c) => c.relation.as_ref()?,
        N::CreateTableAsStmt(c) => c.into.as_ref()?.rel.as_ref()?,
        N::ViewStmt(v) => v.view.as_ref()?,
        N::CreateSeqStmt(c) => c.sequence.as_ref()?,
        N::CreateForeignTableStmt(c) => c.base_stmt.as_ref()?.relation.as_ref()?,
        N::SelectStmt(s) => s.into_clause.as_ref()?.rel.as_ref()?,
        _ => return None,
    };
    Some(rv.location.max(0) as usize)
}

/// The tables a statement names by lists of names rather than RangeVars (schema if
/// written, name): DROP of tables and of their triggers, rules and policies,
/// COMMENT ON / SECURITY LABEL ON tables and their columns, constraints, triggers.
fn object_list_tables(node: &N) -> Vec<(Option<String>, String)> {
    use protobuf::ObjectType as O;
    // How many trailing items name something inside the table.
    let inner_items = |objtype: i32| -> Option<usize> {
        let t = O::try_from(objtype).ok()?;
        match t {
            O::ObjectTable | O::ObjectView | O::ObjectMatview | O::ObjectForeignTable => Some(0),
            O::ObjectColumn
            | O::ObjectTabconstraint
            | O::ObjectTrigger
            | O::ObjectRule
            | O::ObjectPolicy => Some(1),
            _ => None,
        }
    };
    let name_of = |o: &protobuf::Node, inner: usize| -> Option<(Option<String>, String)> {
        let Some(N::List(l)) = o.node.as_ref() else {
            return None;
        };
        let parts = crate::sql::parse::string_items(&l.items);
        let parts = parts.get(..parts.len().checked_sub(inner)?)?;
        match parts {
            [name] => Some((None, name.to_string())),
            [.., schema, name] => Some((Some(schema.to_string()), name.to_string())),
            [] => None,
        }
    };
    match node {
        N::DropStmt(d) => match inner_items(d.remove_type) {
            Some(inner) => d.objects.iter().filter_map(|o| name_of(o, inner)).collect(),
            None => Vec::new(),
        },
        N::CommentStmt(c) => match (inner_items(c.objtype), c.object.as_deref()) {
            (Some(inner), Some(o)) => name_of(o, inner).into_iter().collect(),
            _ => Vec::new(),
        },
        N::SecLabelStmt(c) => match (inner_items(c.objtype), c.object.as_deref()) {
            (Some(inner), Some(o)) => name_of(o, inner).into_iter().collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}
