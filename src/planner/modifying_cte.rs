//! Modifying CTEs (`WITH x AS (DELETE ... RETURNING ...) SELECT ...`) over distributed,
//! reference and local tables, as Citus plans them (each modifying CTE a subplan whose
//! RETURNING rows become an intermediate result, then the rest over them), with
//! PostgreSQL's semantics kept: every part of the statement sees the statement's one
//! snapshot, so a table that a modifying CTE writes and another part reads is first
//! copied whole into an intermediate result (its *snapshot*), and that part reads the
//! copy; each modifying CTE runs exactly once, referenced or not.
//!
//! When every table is distributed in one co-location group and every part filters to
//! the same distribution value, the statement goes whole to that shard index's worker
//! (`route_whole`). Otherwise the plan is a list of steps run in order, in one transaction (the executor's half,
//! `executor::session::modifying_cte`, opens pgshard's own block outside a client's):
//! the snapshots, then each CTE in its order (a modifying one, and a read-only one that
//! a later modifying CTE reads, into intermediate results; other read-only CTEs stay in
//! the statement), then the statement itself over them, planned again by the ladder.
//! Refused with 0A000: `WITH RECURSIVE` beside a modifying CTE, two modifications of
//! one table in one statement (PostgreSQL leaves which wins unspecified), a CTE named
//! as a written table, a local table written beside a distributed or reference one
//! (the coordinator node cannot prepare a transaction that used temporary tables), and
//! any part no ladder step can run.

use super::recursive::{
    create_as, cte_as_select, deparse_node, names_any, next_table, rename_relation_node,
    temp_range_var, SubPlan,
};
use super::{Names, Plan};
use crate::catalog::Catalog;
use crate::error::{PgError, PgResult};
use crate::sql::parse::{full_relations, Statement};
use crate::sql::walk;
use pg_query::protobuf::{self, node::Node as N};
use std::collections::HashSet;
use std::sync::Arc;

/// A statement with modifying CTEs, run in steps.
#[derive(Debug, Clone)]
pub struct ModifyingCtePlan {
    /// Run in order before the statement, in its transaction.
    pub steps: Vec<CteStep>,
    /// The statement with every step's CTE replaced by its intermediate result.
    pub outer: Statement,
    pub outer_plan: Plan,
}

/// One step before the statement.
#[derive(Debug, Clone)]
pub enum CteStep {
    /// Rows into an intermediate result: a snapshot of a written table, a read-only
    /// CTE that a modifying one reads, a modifying CTE's RETURNING rows.
    Result(SubPlan),
    /// A modifying CTE without RETURNING: run, nothing kept.
    Run { stmt: Statement, plan: Plan },
}

type PlanText<'a> = &'a dyn Fn(&str) -> PgResult<Plan>;

fn refuse(message: impl Into<String>) -> Option<PgResult<Plan>> {
    Some(Ok(Plan::Unsupported(PgError::not_supported(message))))
}

/// The WITH clause of a top-level SELECT / INSERT / UPDATE / DELETE.
fn with_clause(n: &mut N) -> Option<&mut Option<protobuf::WithClause>> {
    match n {
        N::SelectStmt(s) => Some(&mut s.with_clause),
        N::InsertStmt(s) => Some(&mut s.with_clause),
        N::UpdateStmt(s) => Some(&mut s.with_clause),
        N::DeleteStmt(s) => Some(&mut s.with_clause),
        _ => None,
    }
}

/// The table a DML statement writes.
fn target(n: &N) -> Option<&protobuf::RangeVar> {
    match n {
        N::InsertStmt(s) => s.relation.as_ref(),
        N::UpdateStmt(s) => s.relation.as_ref(),
        N::DeleteStmt(s) => s.relation.as_ref(),
        _ => None,
    }
}

fn returning(n: &N) -> &[protobuf::Node] {
    let r = match n {
        N::InsertStmt(s) => s.returning_clause.as_ref(),
        N::UpdateStmt(s) => s.returning_clause.as_ref(),
        N::DeleteStmt(s) => s.returning_clause.as_ref(),
        _ => None,
    };
    r.map(|r| r.exprs.as_slice()).unwrap_or(&[])
}

/// A CTE's name and body.
fn cte(c: &protobuf::Node) -> Option<(&protobuf::CommonTableExpr, &N)> {
    match c.node.as_ref()? {
        N::CommonTableExpr(cte) => Some((cte, cte.ctequery.as_deref()?.node.as_ref()?)),
        _ => None,
    }
}

/// `SELECT <returning list> FROM <target> [, <FROM / USING items>]`: the shape of a
/// modifying statement's RETURNING rows (planned over the shells, never run).
fn returning_shape(n: &N) -> Option<N> {
    let (relation, more, with) = match n {
        N::InsertStmt(s) => (s.relation.clone()?, Vec::new(), s.with_clause.clone()),
        N::UpdateStmt(s) => (
            s.relation.clone()?,
            s.from_clause.clone(),
            s.with_clause.clone(),
        ),
        N::DeleteStmt(s) => (
            s.relation.clone()?,
            s.using_clause.clone(),
            s.with_clause.clone(),
        ),
        _ => return None,
    };
    let mut from_clause = vec![protobuf::Node {
        node: Some(N::RangeVar(relation)),
    }];
    from_clause.extend(more);
    Some(N::SelectStmt(Box::new(protobuf::SelectStmt {
        target_list: returning(n).to_vec(),
        from_clause,
        with_clause: with,
        limit_option: protobuf::LimitOption::Default as i32,
        op: protobuf::SetOperation::SetopNone as i32,
        ..Default::default()
    })))
}

fn parse_one(sql: &str) -> Option<N> {
    pg_query::parse(sql, 0)
        .ok()?
        .protobuf
        .stmts
        .into_iter()
        .next()?
        .stmt?
        .node
}

/// Plans `sql` (a part of the statement) into an intermediate result whose shape is
/// `shape` (`CREATE TEMP TABLE ... AS <shape> WITH NO DATA`).
fn result_step(sql: String, shape: &N, plan: Plan) -> PgResult<SubPlan> {
    let table = next_table();
    let create_sql = create_as(&table, shape)?;
    Ok(SubPlan {
        table,
        stmt: Statement {
            node: parse_one(&sql),
            text: sql,
            form: Default::default(),
        },
        plan,
        create_sql,
        value: None,
    })
}

/// What a part that cannot be planned makes of the statement.
fn part_refused(what: &str, e: PgError) -> Option<PgResult<Plan>> {
    if e.code == crate::error::sqlstate::FEATURE_NOT_SUPPORTED {
        refuse(format!("pgshard cannot run {what}: {}", e.message))
    } else {
        Some(Err(e))
    }
}

fn plan_part(sql: &str, plan_text: PlanText<'_>) -> Result<Plan, PgError> {
    match plan_text(sql)? {
        Plan::Unsupported(e) => Err(e),
        p => Ok(p),
    }
}

/// Routes the whole statement to one shard index when every table it names (CTE names
/// aside) is a hash-distributed table of one co-location group, and every query level
/// (each SELECT, and each UPDATE / DELETE with its FROM / USING items) filters each of
/// the tables in its FROM by the same distribution value (a top-level `AND`ed
/// `col = constant | $n`): every row any part reads or writes then lives on that shard
/// index, and its worker runs the statement as PostgreSQL would. INSERTs into
/// distributed tables, reference and local tables take the general path.
fn route_whole(
    node: &N,
    text: &str,
    catalog: &Catalog,
    names: &Names,
    cte_names: &HashSet<String>,
) -> Option<Plan> {
    use super::distvalue::{find_equality, ValueSource};
    use super::template::{Edit, RelTarget, ShardMap, ShardSqlTemplate};
    use crate::catalog::PartitionMethod;
    let resolve = |rv: &protobuf::RangeVar| {
        let schema = (!rv.schemaname.is_empty()).then_some(rv.schemaname.as_str());
        names.resolve(catalog, schema, &rv.relname)
    };
    // Every table reference: a CTE's name, or a hash table (a table named as a CTE
    // is not routed: which one a reference means is left to the general path).
    let mut rels = Vec::new();
    for r in full_relations(node) {
        let table = names.resolve(catalog, r.schema.as_deref(), &r.name);
        match (r.schema.is_none() && cte_names.contains(&r.name), table) {
            (true, None) => {}
            (false, Some(t)) if t.method == PartitionMethod::Hash => rels.push((r, t.clone())),
            _ => return None,
        }
    }
    let first = rels.first()?.1.clone();
    if rels.iter().any(|(_, t)| {
        t.colocation_id != first.colocation_id || t.shards.len() != first.shards.len()
    }) {
        return None;
    }
    // Each level's tables and WHERE.
    fn from_tables<'a>(items: &'a [protobuf::Node], out: &mut Vec<&'a protobuf::RangeVar>) {
        for item in items {
            match item.node.as_ref() {
                Some(N::RangeVar(rv)) => out.push(rv),
                Some(N::JoinExpr(j)) => {
                    for side in [&j.larg, &j.rarg].into_iter().flatten() {
                        from_tables(std::slice::from_ref(side.as_ref()), out);
                    }
                }
                _ => {}
            }
        }
    }
    let mut value: Option<ValueSource> = None;
    let mut checked: HashSet<i32> = HashSet::new();
    let mut check_level = |tables: Vec<&protobuf::RangeVar>,
                           where_clause: Option<&protobuf::Node>| {
        for rv in tables {
            let Some(t) = resolve(rv) else {
                continue;
            };
            let col = t.dist_column.as_ref()?;
            let names_table = |q: &str| match &rv.alias {
                Some(a) => q == a.aliasname,
                None => q == rv.relname,
            };
            let (v, _) = find_equality(where_clause, col, &names_table)?;
            if !matches!(v, ValueSource::Hash(_) | ValueSource::Param(_)) {
                return None;
            }
            if *value.get_or_insert(v) != v {
                return None;
            }
            checked.insert(rv.location);
        }
        Some(())
    };
    let mut levels = vec![node.clone()];
    for (n, _, _, _) in node.nodes() {
        match n {
            pg_query::NodeRef::SelectStmt(s) => levels.push(N::SelectStmt(Box::new(s.clone()))),
            pg_query::NodeRef::UpdateStmt(s) => levels.push(N::UpdateStmt(Box::new(s.clone()))),
            pg_query::NodeRef::DeleteStmt(s) => levels.push(N::DeleteStmt(Box::new(s.clone()))),
            pg_query::NodeRef::InsertStmt(s) => levels.push(N::InsertStmt(Box::new(s.clone()))),
            _ => {}
        }
    }
    for level in &levels {
        let mut tables = Vec::new();
        let where_clause = match level {
            N::SelectStmt(s) => {
                from_tables(&s.from_clause, &mut tables);
                s.where_clause.as_deref()
            }
            N::UpdateStmt(s) => {
                tables.extend(s.relation.as_ref());
                from_tables(&s.from_clause, &mut tables);
                s.where_clause.as_deref()
            }
            N::DeleteStmt(s) => {
                tables.extend(s.relation.as_ref());
                from_tables(&s.using_clause, &mut tables);
                s.where_clause.as_deref()
            }
            N::InsertStmt(s) => match s.relation.as_ref().and_then(resolve) {
                Some(_) => return None,
                None => continue,
            },
            _ => continue,
        };
        check_level(tables, where_clause)?;
    }
    let all: HashSet<i32> = rels.iter().map(|(r, _)| r.location as i32).collect();
    if checked != all || rels.iter().any(|(r, _)| r.location == 0) {
        return None;
    }
    // The template: each reference spliced with its table's shard of the same index.
    let mut targets: Vec<RelTarget> = Vec::new();
    let mut edits = Vec::new();
    for (r, t) in &rels {
        let slot = match targets
            .iter()
            .position(|x| x.schema == t.schema && x.table == t.name)
        {
            Some(i) => i,
            None => {
                let map = if targets.is_empty() {
                    ShardMap::Same
                } else {
                    let mut m = std::collections::HashMap::new();
                    for (a, b) in first.shards.iter().zip(&t.shards) {
                        if a.min != b.min || a.max != b.max {
                            return None;
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
                targets.len() - 1
            }
        };
        edits.push(Edit::relation_of(text, r, slot).ok()?);
    }
    Some(Plan::Router(Arc::new(super::RouterPlan {
        template: ShardSqlTemplate::with_relations(text, targets, edits),
        table: first,
        values: vec![value?],
        is_insert: false,
        read_only: false,
        value_exprs: Vec::new(),
        relation_span: None,
        add_alias: false,
    })))
}

/// Plans a statement with modifying CTEs; None when it has none at its top level.
pub fn plan_modifying_ctes(
    node: &N,
    text: &str,
    catalog: &Catalog,
    names: &Names,
    plan_text: PlanText<'_>,
) -> Option<PgResult<Plan>> {
    let mut tree = node.clone();
    let with = with_clause(&mut tree)?.take()?;
    let ctes = with.ctes;
    let modifying: Vec<usize> = (0..ctes.len())
        .filter(|&i| cte(&ctes[i]).is_some_and(|(_, b)| target(b).is_some()))
        .collect();
    if modifying.is_empty() {
        return None;
    }
    if with.recursive {
        return refuse("pgshard does not support WITH RECURSIVE beside a modifying CTE yet");
    }
    // The tables written, by name (two tables of one name in different schemas count
    // as one: a refusal or a snapshot too many, never a wrong answer).
    let mut written: Vec<(String, usize)> = Vec::new();
    for &i in &modifying {
        let (_, body) = cte(&ctes[i]).expect("modifying");
        let rel = target(body).expect("modifying");
        if written.iter().any(|(n, _)| *n == rel.relname) {
            return refuse(format!(
                "pgshard does not support two modifying CTEs writing the table \"{}\"",
                rel.relname
            ));
        }
        written.push((rel.relname.clone(), i));
    }
    if let Some(rel) = target(&tree) {
        if written.iter().any(|(n, _)| *n == rel.relname) {
            return refuse(format!(
                "pgshard does not support a modifying CTE writing the table \"{}\" that the statement writes too",
                rel.relname
            ));
        }
    }
    // A local table written beside a distributed or reference one: the coordinator
    // node would take part in the two-phase commit, and PostgreSQL cannot prepare a
    // transaction that used temporary tables (the intermediate results).
    let targets = modifying
        .iter()
        .filter_map(|&i| cte(&ctes[i]).and_then(|(_, b)| target(b)))
        .chain(target(&tree));
    let (mut local, mut distributed) = (None, None);
    for rel in targets {
        let schema = (!rel.schemaname.is_empty()).then_some(rel.schemaname.as_str());
        match names.resolve(catalog, schema, &rel.relname) {
            Some(t) => distributed = Some(t.name.clone()),
            None => local = Some(rel.relname.clone()),
        }
    }
    if let (Some(l), Some(d)) = (local, distributed) {
        return refuse(format!(
            "pgshard does not support writing the local table \"{l}\" and the distributed \
             or reference table \"{d}\" in one statement with modifying CTEs yet"
        ));
    }
    let cte_names: HashSet<String> = ctes
        .iter()
        .filter_map(|c| cte(c).map(|(c, _)| c.ctename.clone()))
        .collect();
    if let Some((n, _)) = written.iter().find(|(n, _)| cte_names.contains(n)) {
        return refuse(format!(
            "pgshard does not support a CTE named as the table \"{n}\" that a modifying CTE writes"
        ));
    }

    // One shard group: the whole statement to its worker.
    if let Some(routed) = route_whole(node, text, catalog, names, &cte_names) {
        return Some(Ok(routed));
    }

    let mut steps: Vec<CteStep> = Vec::new();
    let mut ctes = ctes;

    // 1. Snapshots: every read of a written table outside the CTE writing it reads a
    //    copy taken before any modification.
    let mut snapshots: Vec<((String, String), String)> = Vec::new();
    let mut failed: Option<PgError> = None;
    {
        let mut replace = |n: &mut N, skip: Option<usize>| {
            let mut f = |x: &mut protobuf::Node, _: bool| -> bool {
                let Some(N::RangeVar(rv)) = x.node.as_mut() else {
                    return false;
                };
                let Some(_) = written
                    .iter()
                    .find(|(name, i)| *name == rv.relname && Some(*i) != skip)
                else {
                    return false;
                };
                let key = (rv.schemaname.clone(), rv.relname.clone());
                let table = match snapshots.iter().find(|(k, _)| *k == key) {
                    Some((_, t)) => t.clone(),
                    None => {
                        let source = protobuf::RangeVar {
                            alias: None,
                            location: -1,
                            ..rv.clone()
                        };
                        let select = N::SelectStmt(Box::new(protobuf::SelectStmt {
                            target_list: vec![super::recursive::star()],
                            from_clause: vec![protobuf::Node {
                                node: Some(N::RangeVar(source)),
                            }],
                            limit_option: protobuf::LimitOption::Default as i32,
                            op: protobuf::SetOperation::SetopNone as i32,
                            ..Default::default()
                        }));
                        let made = deparse_node(&select).and_then(|sql| {
                            let plan = plan_part(&sql, plan_text)?;
                            result_step(sql, &select, plan)
                        });
                        match made {
                            Ok(sub) => {
                                let t = sub.table.clone();
                                steps.push(CteStep::Result(sub));
                                snapshots.push((key, t.clone()));
                                t
                            }
                            Err(e) => {
                                failed.get_or_insert(e);
                                return true;
                            }
                        }
                    }
                };
                let alias = rv.alias.clone().unwrap_or(protobuf::Alias {
                    aliasname: rv.relname.clone(),
                    colnames: Vec::new(),
                });
                *rv = temp_range_var(&table, Some(alias));
                true
            };
            walk::statement(n, false, &mut f);
        };
        for (i, c) in ctes.iter_mut().enumerate() {
            if let Some(N::CommonTableExpr(cte)) = c.node.as_mut() {
                if let Some(body) = cte.ctequery.as_deref_mut().and_then(|q| q.node.as_mut()) {
                    replace(body, Some(i));
                }
            }
        }
        replace(&mut tree, None);
    }
    if let Some(e) = failed {
        return part_refused("a snapshot of a table a modifying CTE writes", e);
    }
    // Every read of a written table must now be of its snapshot (the walk above knows
    // the statement shapes; anything it does not reach is refused, never misread).
    for (name, writer) in &written {
        let outside = ctes
            .iter()
            .enumerate()
            .filter(|(i, _)| i != writer)
            .filter_map(|(_, c)| cte(c).map(|(_, b)| b))
            .chain(std::iter::once(&tree))
            .flat_map(full_relations)
            .filter(|r| r.name == *name)
            .count();
        if outside > 0 {
            return refuse(format!(
                "pgshard does not support this read of the table \"{name}\" that a modifying CTE writes"
            ));
        }
    }

    // 2. Which read-only CTEs a modifying one reads (directly or through others).
    let mut needed: HashSet<String> = HashSet::new();
    for i in (0..ctes.len()).rev() {
        let Some((c, body)) = cte(&ctes[i]) else {
            continue;
        };
        if target(body).is_none() && !needed.contains(&c.ctename) {
            continue;
        }
        for r in full_relations(body) {
            if r.schema.is_none() && cte_names.contains(&r.name) {
                needed.insert(r.name);
            }
        }
    }

    // 3. The CTEs in order.
    let mut kept: Vec<protobuf::Node> = Vec::new();
    let mut i = 0;
    while i < ctes.len() {
        let Some((c, body)) = cte(&ctes[i]).map(|(c, b)| (c.clone(), b.clone())) else {
            kept.push(ctes[i].clone());
            i += 1;
            continue;
        };
        let is_modifying = target(&body).is_some();
        if !is_modifying && !needed.contains(&c.ctename) {
            kept.push(ctes[i].clone());
            i += 1;
            continue;
        }
        let what = format!("the CTE \"{}\"", c.ctename);
        let sql = match deparse_node(&body) {
            Ok(s) => s,
            Err(e) => return part_refused(&what, e),
        };
        let plan = match plan_part(&sql, plan_text) {
            Ok(p) => p,
            Err(e) => return part_refused(&what, e),
        };
        let later: HashSet<String> = [c.ctename.clone()].into();
        if is_modifying && returning(&body).is_empty() {
            let referenced = ctes[i + 1..]
                .iter()
                .filter_map(|c| cte(c).map(|(_, b)| b))
                .chain(std::iter::once(&tree))
                .any(|b| names_any(b, &later));
            if referenced {
                return Some(Err(PgError::not_supported(format!(
                    "WITH query \"{}\" does not have a RETURNING clause",
                    c.ctename
                ))));
            }
            steps.push(CteStep::Run {
                stmt: Statement {
                    node: parse_one(&sql),
                    text: sql,
                    form: Default::default(),
                },
                plan,
            });
            i += 1;
            continue;
        }
        let shape = if is_modifying {
            returning_shape(&body)
        } else {
            Some(body.clone())
        };
        let shape = shape
            .ok_or_else(|| PgError::internal("no shape"))
            .and_then(|s| cte_as_select(&s, &c.aliascolnames))
            .and_then(|s| parse_one(&s).ok_or_else(|| PgError::internal("cannot parse a CTE")));
        let sub = match shape.and_then(|shape| result_step(sql, &shape, plan)) {
            Ok(s) => s,
            Err(e) => return part_refused(&what, e),
        };
        let table = sub.table.clone();
        steps.push(CteStep::Result(sub));
        for later in ctes[i + 1..].iter_mut() {
            if let Some(n) = later.node.as_mut() {
                rename_relation_node(n, &c.ctename, &table);
            }
        }
        rename_relation_node(&mut tree, &c.ctename, &table);
        i += 1;
    }

    // 4. The statement itself, over the intermediate results.
    if !kept.is_empty() {
        *with_clause(&mut tree).expect("top-level statement") = Some(protobuf::WithClause {
            ctes: kept,
            recursive: false,
            location: -1,
        });
    }
    let outer_sql = match deparse_node(&tree) {
        Ok(s) => s,
        Err(e) => return part_refused("the statement after its modifying CTEs", e),
    };
    let outer_plan = match plan_part(&outer_sql, plan_text) {
        Ok(p) => p,
        Err(e) => return part_refused("the statement after its modifying CTEs", e),
    };
    Some(Ok(Plan::ModifyingCte(Arc::new(ModifyingCtePlan {
        steps,
        outer: Statement {
            node: parse_one(&outer_sql),
            text: outer_sql,
            form: Default::default(),
        },
        outer_plan,
    }))))
}
