//! Recursive planning (Citus's `recursive_planning.c`, written anew): a SELECT that no
//! earlier step could run as a whole is cut into *subplans*. Each non-recursive CTE,
//! each arm of a set operation and each uncorrelated subquery (FROM, IN / EXISTS /
//! scalar anywhere) that reads a distributed table is deparsed into a statement of its
//! own and planned by the whole ladder (router, multi-shard, combine, or recursive
//! again); at run time its rows become an *intermediate result*, the temporary table
//! `pg_temp.pgs_intermediate_<n>` on the client's own coordinator-node connection, and
//! the statement is planned again with that table in the subtree's place. Distributed
//! tables still referenced after that (correlated subqueries, joins pgshard refuses,
//! joins with local tables or intermediate results) are pulled whole as intermediate
//! results (`SELECT * FROM t`), after which the statement runs on the coordinator node.
//! Always exact; the cost is the rows moved (bounded by `citus.max_intermediate_result_size`).
//! An uncorrelated scalar or EXISTS subquery cut while the statement still reads
//! distributed tables becomes a *value* instead (`values.rs`): run once, put in the
//! statement as a typed constant, the statement planned again by the session.
//! The executor's half is `executor::session::subplans`.

use super::{Names, Plan};
use crate::catalog::Catalog;
use crate::error::{PgError, PgResult};
use crate::sql::parse::{full_relations, Statement};
use crate::sql::walk;
use pg_query::protobuf::{self, node::Node as N};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub mod values;
use values::ValueKind;

/// A statement run in parts: its subplans first, in order, each filling its
/// intermediate result, then the outer statement over them.
#[derive(Debug, Clone)]
pub struct RecursivePlan {
    pub subplans: Vec<SubPlan>,
    /// The statement with every subplan's subtree replaced by its table.
    pub outer: Statement,
    /// Its plan; when some subplans are values (`SubPlan::value`), the plan with NULLs
    /// in their place (the session plans the statement again with the values).
    pub outer_plan: Plan,
}

/// One subtree of the statement, run alone.
#[derive(Debug, Clone)]
pub struct SubPlan {
    /// `pg_temp.pgs_intermediate_<n>`, quoted as SQL.
    pub table: String,
    /// The subtree as a statement (deparsed); its parameters are the client's.
    pub stmt: Statement,
    pub plan: Plan,
    /// `CREATE TEMP TABLE <table> AS <stmt> WITH NO DATA`: the result's exact column
    /// names, types, typmods and collations (the coordinator node plans the subtree
    /// over the shells without running it).
    pub create_sql: String,
    /// Set when the outer statement gets this result as a value in place of its
    /// sublink (`recursive/values.rs`) rather than reading it as a table.
    pub value: Option<ValueKind>,
}

/// Names are unique per process: a subplan's own subplans use the same session.
static NEXT_RESULT: AtomicU64 = AtomicU64::new(1);

pub(super) fn next_table() -> String {
    format!(
        "pg_temp.pgs_intermediate_{}",
        NEXT_RESULT.fetch_add(1, Ordering::Relaxed)
    )
}

type PlanText<'a> = &'a dyn Fn(&str) -> PgResult<Plan>;

/// Plans `select` recursively, or None when it cannot be (the earlier refusal stands).
pub fn plan_recursive(
    select: &protobuf::SelectStmt,
    catalog: &Catalog,
    names: &Names,
    plan_text: PlanText<'_>,
) -> Option<Plan> {
    if select.into_clause.is_some() || !select.locking_clause.is_empty() {
        return None;
    }
    let mut cx = Cutter::new(catalog, names, plan_text, OuterRuns::OnCoordinator);
    if modifies(select) {
        // Modifying CTEs on distributed tables: not yet (the earlier refusal stands).
        return None;
    }
    let mut tree = N::SelectStmt(Box::new(select.clone()));
    cx.cut_ctes(&mut tree);
    if let N::SelectStmt(s) = &mut tree {
        cx.cut_set_arms(s);
    }
    cx.cut_subqueries(&mut tree);
    if cx.failed {
        return None;
    }
    if !cx.subplans.is_empty() {
        if let Some(plan) = cx.plan_with_values(&tree) {
            return Some(plan);
        }
        let outer = deparse_node(&tree).ok()?;
        match plan_text(&outer) {
            Ok(Plan::Unsupported(_)) | Err(_) => {}
            Ok(outer_plan) => {
                return Some(cx.finish(outer, outer_plan));
            }
        }
    }
    // What still reads distributed tables: the tables themselves, pulled whole.
    let before = cx.subplans.len();
    cx.pull_tables(&mut tree);
    if cx.failed || cx.subplans.len() == before {
        return None;
    }
    let outer = deparse_node(&tree).ok()?;
    match plan_text(&outer) {
        Ok(Plan::Unsupported(_)) | Err(_) => None,
        Ok(outer_plan) => Some(cx.finish(outer, outer_plan)),
    }
}

/// Where the statement left after cutting runs, which decides what must be cut from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OuterRuns {
    /// On the coordinator node: what reads distributed or reference tables is cut.
    OnCoordinator,
    /// On the workers, shard by shard or on every placement (an UPDATE / DELETE of a
    /// distributed or reference table, `modify_recursive`): what reads anything but
    /// reference tables and intermediate results is cut, every CTE, and uncorrelated
    /// subqueries calling functions (evaluated once, as PostgreSQL's initplans are).
    OnWorkers,
}

pub(super) struct Cutter<'a> {
    catalog: &'a Catalog,
    names: &'a Names,
    plan_text: PlanText<'a>,
    pub(super) subplans: Vec<SubPlan>,
    /// A subplan could not be planned: the statement is not planned recursively.
    pub(super) failed: bool,
    outer_runs: OuterRuns,
    /// Cut sublinks whose results could stand in the statement as values (their
    /// tables), and whether they read hash-distributed tables.
    value_candidates: Vec<(String, ValueKind, bool)>,
}

impl<'a> Cutter<'a> {
    pub(super) fn new(
        catalog: &'a Catalog,
        names: &'a Names,
        plan_text: PlanText<'a>,
        outer_runs: OuterRuns,
    ) -> Cutter<'a> {
        Cutter {
            catalog,
            names,
            plan_text,
            subplans: Vec::new(),
            failed: false,
            outer_runs,
            value_candidates: Vec::new(),
        }
    }

    fn finish(self, outer: String, outer_plan: Plan) -> Plan {
        Plan::Recursive(Arc::new(RecursivePlan {
            subplans: self.subplans,
            outer: statement_of(outer),
            outer_plan,
        }))
    }

    /// The statement left after cutting, when it still reads distributed tables and
    /// some cut sublink over hash-distributed tables can stand in it as a value
    /// (`recursive/values.rs`): planned with NULLs in their place, those subplans
    /// marked to be read as values; the session plans it again with the values.
    fn plan_with_values(&mut self, tree: &N) -> Option<Plan> {
        if self.outer_runs != OuterRuns::OnCoordinator
            || !self.value_candidates.iter().any(|(_, _, hash)| *hash)
            || !self.reads_distributed(tree)
        {
            return None;
        }
        let candidates: Vec<(String, ValueKind)> = self
            .value_candidates
            .iter()
            .map(|(t, k, _)| (t.clone(), k.clone()))
            .collect();
        let mut placeholder = tree.clone();
        values::substitute_tree(&mut placeholder, &values::placeholders(&candidates));
        let planned = match (self.plan_text)(&deparse_node(&placeholder).ok()?) {
            Ok(Plan::Unsupported(_)) | Err(_) => return None,
            Ok(plan) => plan,
        };
        for sub in self.subplans.iter_mut() {
            sub.value = candidates
                .iter()
                .find(|(t, _)| *t == sub.table)
                .map(|(_, k)| k.clone());
        }
        let outer = deparse_node(tree).ok()?;
        let subplans = std::mem::take(&mut self.subplans);
        Some(Plan::Recursive(Arc::new(RecursivePlan {
            subplans,
            outer: statement_of(outer),
            outer_plan: planned,
        })))
    }

    /// Whether a subtree names a distributed or reference table.
    fn reads_distributed(&self, node: &N) -> bool {
        full_relations(node).iter().any(|r| {
            self.names
                .resolve(self.catalog, r.schema.as_deref(), &r.name)
                .is_some()
        })
    }

    /// Whether a subtree names a hash-distributed table.
    fn reads_hash_distributed(&self, node: &N) -> bool {
        full_relations(node).iter().any(|r| {
            self.names
                .resolve(self.catalog, r.schema.as_deref(), &r.name)
                .is_some_and(|t| t.method != crate::catalog::PartitionMethod::Reference)
        })
    }

    /// Whether a table reference must become an intermediate result for the outer
    /// statement to run where it runs (`OuterRuns`). `ctes`: names of CTEs in scope.
    fn must_pull(&self, rv: &protobuf::RangeVar, ctes: &HashSet<String>) -> bool {
        let schema = (!rv.schemaname.is_empty()).then_some(rv.schemaname.as_str());
        let table = self.names.resolve(self.catalog, schema, &rv.relname);
        match self.outer_runs {
            OuterRuns::OnCoordinator => table.is_some(),
            OuterRuns::OnWorkers => match table {
                Some(t) => t.method != crate::catalog::PartitionMethod::Reference,
                None => {
                    !is_intermediate_result(rv) && !(schema.is_none() && ctes.contains(&rv.relname))
                }
            },
        }
    }

    /// Whether an uncorrelated subtree (CTE body, subquery) must run first, as a
    /// subplan, for the outer statement to run where it runs.
    fn must_cut(&self, node: &N) -> bool {
        match self.outer_runs {
            OuterRuns::OnCoordinator => self.reads_distributed(node),
            OuterRuns::OnWorkers => {
                let ctes = defined_ctes(node);
                let mut cut = false;
                for (n, _, _, _) in node.nodes() {
                    match n {
                        pg_query::NodeRef::RangeVar(rv) => cut |= self.must_pull(rv, &ctes),
                        pg_query::NodeRef::FuncCall(_) | pg_query::NodeRef::SqlvalueFunction(_) => {
                            cut = true
                        }
                        _ => {}
                    }
                }
                cut
            }
        }
    }

    /// Plans `sql` as a subplan; returns its table, or None (and marks the failure).
    fn subplan(&mut self, sql: String) -> Option<String> {
        match (self.plan_text)(&sql) {
            Ok(Plan::Unsupported(_)) | Err(_) => {
                self.failed = true;
                None
            }
            Ok(plan) => {
                let table = next_table();
                let node = pg_query::parse(&sql, 0).ok().and_then(|p| {
                    p.protobuf
                        .stmts
                        .into_iter()
                        .next()
                        .and_then(|s| s.stmt)
                        .and_then(|s| s.node)
                });
                let Some(create_sql) = node.as_ref().and_then(|n| create_as(&table, n).ok()) else {
                    self.failed = true;
                    return None;
                };
                self.subplans.push(SubPlan {
                    value: None,
                    create_sql,
                    table: table.clone(),
                    stmt: Statement {
                        text: sql,
                        node,
                        form: Default::default(),
                    },
                    plan,
                });
                Some(table)
            }
        }
    }

    /// Each non-recursive CTE reading distributed tables (any CTE when the statement
    /// runs on the workers) becomes an intermediate result; its references name that
    /// table instead and the CTE goes. `root`: a SELECT, UPDATE or DELETE.
    pub(super) fn cut_ctes(&mut self, root: &mut N) {
        let Some(with) = with_clause_mut(root).and_then(|w| w.as_mut()) else {
            return;
        };
        if with.recursive {
            return;
        }
        let mut ctes = std::mem::take(&mut with.ctes);
        let mut kept = Vec::new();
        let mut i = 0;
        while i < ctes.len() {
            let Some(N::CommonTableExpr(cte)) = ctes[i].node.clone() else {
                kept.push(ctes[i].clone());
                i += 1;
                continue;
            };
            let Some(body) = cte.ctequery.as_deref().and_then(|q| q.node.as_ref()) else {
                kept.push(ctes[i].clone());
                i += 1;
                continue;
            };
            let later_names: HashSet<String> = kept
                .iter()
                .chain(ctes[i + 1..].iter())
                .filter_map(|c| match &c.node {
                    Some(N::CommonTableExpr(c)) => Some(c.ctename.clone()),
                    _ => None,
                })
                .collect();
            let reads = match self.outer_runs {
                OuterRuns::OnCoordinator => self.reads_distributed(body),
                OuterRuns::OnWorkers => true,
            };
            let standalone = matches!(body, N::SelectStmt(_))
                && reads
                && !names_any(body, &later_names)
                && !correlated(body, self.catalog, self.names);
            if !standalone {
                kept.push(ctes[i].clone());
                i += 1;
                continue;
            }
            let sql = match cte_as_select(body, &cte.aliascolnames) {
                Ok(sql) => sql,
                Err(_) => {
                    self.failed = true;
                    return;
                }
            };
            let Some(table) = self.subplan(sql) else {
                return;
            };
            // Every later reference (later CTEs and the statement itself, whose WITH
            // list is empty meanwhile).
            for c in ctes[i + 1..].iter_mut() {
                rename_relation(c, &cte.ctename, &table);
            }
            rename_relation_node(root, &cte.ctename, &table);
            i += 1;
        }
        if let Some(w) = with_clause_mut(root) {
            if let Some(with) = w.as_mut() {
                with.ctes = kept;
            }
            if w.as_ref().is_some_and(|with| with.ctes.is_empty()) {
                *w = None;
            }
        }
    }

    /// Each arm of a set operation reading distributed tables becomes a result.
    fn cut_set_arms(&mut self, s: &mut protobuf::SelectStmt) {
        if s.op == protobuf::SetOperation::SetopNone as i32 || s.op == 0 {
            return;
        }
        for arm in [&mut s.larg, &mut s.rarg] {
            let Some(a) = arm.as_deref_mut() else {
                continue;
            };
            if a.op != protobuf::SetOperation::SetopNone as i32 && a.op != 0 {
                // A nested set operation: its own arms.
                self.cut_set_arms(a);
                continue;
            }
            let node = N::SelectStmt(Box::new(a.clone()));
            if !self.reads_distributed(&node) || correlated(&node, self.catalog, self.names) {
                continue;
            }
            let Ok(sql) = deparse_node(&node) else {
                self.failed = true;
                return;
            };
            let Some(table) = self.subplan(sql) else {
                return;
            };
            match select_from(&table) {
                Ok(N::SelectStmt(r)) => *a = *r,
                _ => self.failed = true,
            }
        }
    }

    /// Subqueries in FROM (not LATERAL) and sublinks that read distributed tables and
    /// stand alone, outermost first.
    pub(super) fn cut_subqueries(&mut self, root: &mut N) {
        let mut found: Vec<(usize, String, Option<(ValueKind, bool)>)> = Vec::new();
        let mut counter = 0usize;
        // First pass: which subqueries to cut (by visiting order), and their SQL.
        {
            let mut f = |n: &mut protobuf::Node, _: bool| -> bool {
                let (sub, kind) = match n.node.as_ref() {
                    Some(N::RangeSubselect(r)) if !r.lateral => (r.subquery.as_deref(), None),
                    Some(N::SubLink(l)) => (l.subselect.as_deref(), values::value_kind(l)),
                    _ => return false,
                };
                counter += 1;
                let Some(sub) = sub.and_then(|x| x.node.as_ref()) else {
                    return false;
                };
                if self.must_cut(sub) && !correlated(sub, self.catalog, self.names) {
                    let query = values::subplan_query(kind.as_ref(), sub);
                    if let Ok(sql) = deparse_node(&query) {
                        let kind = kind.map(|k| (k, self.reads_hash_distributed(sub)));
                        found.push((counter, sql, kind));
                        return true;
                    }
                }
                false
            };
            walk::statement(root, false, &mut f);
        }
        let mut tables = Vec::new();
        for (at, sql, kind) in found {
            match self.subplan(sql) {
                Some(t) => {
                    if let Some((kind, hash)) = kind {
                        self.value_candidates.push((t.clone(), kind, hash));
                    }
                    tables.push((at, t))
                }
                None => break,
            }
        }
        if !self.failed && !tables.is_empty() {
            let mut counter = 0usize;
            let mut f = |n: &mut protobuf::Node, _: bool| -> bool {
                let sub = match n.node.as_mut() {
                    Some(N::RangeSubselect(r)) if !r.lateral => &mut r.subquery,
                    Some(N::SubLink(l)) => &mut l.subselect,
                    _ => return false,
                };
                counter += 1;
                if let Some((_, t)) = tables.iter().find(|(at, _)| *at == counter) {
                    if let Ok(node) = select_from(t) {
                        *sub = Some(Box::new(protobuf::Node { node: Some(node) }));
                    }
                    return true;
                }
                false
            };
            walk::statement(root, false, &mut f);
        }
    }

    /// Every distributed table still named becomes `SELECT <the columns the statement
    /// names> FROM t`'s result (`pull_columns.rs`), under the name the statement knows
    /// it by. (The target of an UPDATE / DELETE is no expression: it stays.)
    pub(super) fn pull_tables(&mut self, root: &mut N) {
        let pushable = pushable_quals(root);
        let ctes = defined_ctes(root);
        let needed = super::pull_columns::NeededColumns::of(root);
        let mut f = |n: &mut protobuf::Node, _: bool| -> bool {
            let Some(N::RangeVar(rv)) = n.node.as_mut() else {
                return false;
            };
            if !self.must_pull(rv, &ctes) {
                return false;
            }
            let mut source = rv.clone();
            // The WHERE conjuncts on this table alone, kept in the outer statement too.
            let quals = pushable.get(&rv.location).filter(|q| !q.is_empty());
            if quals.is_none() {
                source.alias = None;
            }
            let where_clause = quals.map(|q| {
                Box::new(if q.len() == 1 {
                    q[0].clone()
                } else {
                    protobuf::Node {
                        node: Some(N::BoolExpr(Box::new(protobuf::BoolExpr {
                            boolop: protobuf::BoolExprType::AndExpr as i32,
                            args: q.clone(),
                            ..Default::default()
                        }))),
                    }
                })
            });
            let schema = (!rv.schemaname.is_empty()).then_some(rv.schemaname.as_str());
            let columns = self
                .names
                .resolve(self.catalog, schema, &rv.relname)
                .and_then(|t| needed.target_list(rv, t));
            let sql = match deparse_node(&N::SelectStmt(Box::new(protobuf::SelectStmt {
                target_list: columns.unwrap_or_else(|| vec![star()]),
                from_clause: vec![protobuf::Node {
                    node: Some(N::RangeVar(source)),
                }],
                where_clause,
                limit_option: protobuf::LimitOption::Default as i32,
                op: protobuf::SetOperation::SetopNone as i32,
                ..Default::default()
            }))) {
                Ok(sql) => sql,
                Err(_) => {
                    self.failed = true;
                    return true;
                }
            };
            let Some(table) = self.subplan(sql) else {
                return true;
            };
            let alias = rv.alias.clone().unwrap_or(protobuf::Alias {
                aliasname: rv.relname.clone(),
                colnames: Vec::new(),
            });
            *rv = temp_range_var(&table, Some(alias));
            true
        };
        walk::statement(root, false, &mut f);
    }
}

/// A statement pgshard deparsed, parsed again.
pub(super) fn statement_of(text: String) -> Statement {
    Statement {
        node: pg_query::parse(&text, 0).ok().and_then(|p| {
            p.protobuf
                .stmts
                .into_iter()
                .next()
                .and_then(|s| s.stmt)
                .and_then(|s| s.node)
        }),
        text,
        form: Default::default(),
    }
}

/// The WITH clause of a SELECT, INSERT, UPDATE or DELETE.
fn with_clause_mut(n: &mut N) -> Option<&mut Option<protobuf::WithClause>> {
    match n {
        N::SelectStmt(s) => Some(&mut s.with_clause),
        N::InsertStmt(s) => Some(&mut s.with_clause),
        N::UpdateStmt(s) => Some(&mut s.with_clause),
        N::DeleteStmt(s) => Some(&mut s.with_clause),
        _ => None,
    }
}

/// Whether a table reference names an intermediate result (`pg_temp.pgs_intermediate_<n>`).
pub(super) fn is_intermediate_result(rv: &protobuf::RangeVar) -> bool {
    rv.schemaname == "pg_temp" && rv.relname.starts_with("pgs_intermediate_")
}

/// The top-level WHERE conjuncts that a pulled table's rows may be filtered by before
/// they move, by the location of the table's RangeVar: tables of the FROM list or of
/// inner joins only (a filter on the nullable side of an outer join would change which
/// rows get NULL-extended), no column aliases, conjuncts whose every column is
/// qualified by that table's name and that call no function and hold no subquery
/// (nothing volatile runs twice).
fn pushable_quals(root: &N) -> std::collections::HashMap<i32, Vec<protobuf::Node>> {
    let mut out = std::collections::HashMap::new();
    let (from_clause, where_clause) = match root {
        N::SelectStmt(s) => (&s.from_clause, &s.where_clause),
        N::UpdateStmt(u) => (&u.from_clause, &u.where_clause),
        N::DeleteStmt(d) => (&d.using_clause, &d.where_clause),
        _ => return out,
    };
    let mut tables: Vec<(String, i32)> = Vec::new();
    fn inner_tables(n: &protobuf::Node, out: &mut Vec<(String, i32)>) {
        match n.node.as_ref() {
            Some(N::RangeVar(rv)) => match &rv.alias {
                Some(a) if a.colnames.is_empty() => out.push((a.aliasname.clone(), rv.location)),
                Some(_) => {}
                None => out.push((rv.relname.clone(), rv.location)),
            },
            Some(N::JoinExpr(j)) if j.jointype == protobuf::JoinType::JoinInner as i32 => {
                for side in [&j.larg, &j.rarg].into_iter().flatten() {
                    inner_tables(side, out);
                }
            }
            _ => {}
        }
    }
    for f in from_clause {
        inner_tables(f, &mut tables);
    }
    let Some(w) = where_clause.as_deref() else {
        return out;
    };
    let conjuncts: Vec<&protobuf::Node> = match w.node.as_ref() {
        Some(N::BoolExpr(b)) if b.boolop == protobuf::BoolExprType::AndExpr as i32 => {
            b.args.iter().collect()
        }
        _ => vec![w],
    };
    for c in conjuncts {
        let Some(node) = c.node.as_ref() else {
            continue;
        };
        let mut qualifier: Option<String> = None;
        let mut ok = true;
        for (n, _, _, _) in node.nodes() {
            match n {
                pg_query::NodeRef::FuncCall(_)
                | pg_query::NodeRef::SubLink(_)
                | pg_query::NodeRef::SqlvalueFunction(_) => ok = false,
                pg_query::NodeRef::ColumnRef(r) => {
                    let fields: Vec<&str> = r
                        .fields
                        .iter()
                        .map(|f| match &f.node {
                            Some(N::String(s)) => s.sval.as_str(),
                            _ => "*",
                        })
                        .collect();
                    match fields.as_slice() {
                        [t, col] if *col != "*" => match &qualifier {
                            Some(q) if q != t => ok = false,
                            _ => qualifier = Some(t.to_string()),
                        },
                        _ => ok = false,
                    }
                }
                _ => {}
            }
        }
        let Some(q) = qualifier.filter(|_| ok) else {
            continue;
        };
        let mut matching = tables.iter().filter(|(name, _)| *name == q);
        if let (Some((_, at)), None) = (matching.next(), matching.next()) {
            out.entry(*at).or_insert_with(Vec::new).push(c.clone());
        }
    }
    out
}

/// Whether the statement has a data-modifying CTE anywhere.
pub(super) fn modifies<T: serde::Serialize>(s: &T) -> bool {
    let value = serde_json::to_value(s).unwrap_or_default();
    fn walk(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(q) = m.get("ctequery") {
                    if let Some(node) = q.get("node") {
                        if node.get("InsertStmt").is_some()
                            || node.get("UpdateStmt").is_some()
                            || node.get("DeleteStmt").is_some()
                            || node.get("MergeStmt").is_some()
                        {
                            return true;
                        }
                    }
                }
                m.values().any(walk)
            }
            serde_json::Value::Array(a) => a.iter().any(walk),
            _ => false,
        }
    }
    walk(&value)
}

/// Whether the subtree names (unqualified) one of `ctes` without defining it itself.
pub(super) fn names_any(node: &N, ctes: &HashSet<String>) -> bool {
    if ctes.is_empty() {
        return false;
    }
    let inner = defined_ctes(node);
    full_relations(node)
        .iter()
        .any(|r| r.schema.is_none() && ctes.contains(&r.name) && !inner.contains(&r.name))
}

pub(super) fn defined_ctes(node: &N) -> HashSet<String> {
    let mut out = HashSet::new();
    for (n, _, _, _) in node.nodes() {
        if let pg_query::NodeRef::CommonTableExpr(c) = n {
            out.insert(c.ctename.clone());
        }
    }
    out
}

/// Whether a subquery refers to its enclosing query: a qualified column whose
/// qualifier is no name inside it, or an unqualified column that is none of its
/// distributed tables' columns when it reads only distributed tables. (An unqualified
/// column of an outer local table read inside beside a local table is taken as inner:
/// PostgreSQL would too if that table had it.)
fn correlated(node: &N, catalog: &Catalog, names: &Names) -> bool {
    let mut inner: HashSet<String> = HashSet::new();
    let mut only_distributed = true;
    let mut columns: HashSet<String> = HashSet::new();
    let mut refs: Vec<Vec<String>> = Vec::new();
    for (n, _, _, _) in node.nodes() {
        match n {
            pg_query::NodeRef::RangeVar(rv) => {
                // An alias hides the table's own name.
                match &rv.alias {
                    Some(a) => inner.insert(a.aliasname.clone()),
                    None => inner.insert(rv.relname.clone()),
                };
                let schema = (!rv.schemaname.is_empty()).then_some(rv.schemaname.as_str());
                match names.resolve(catalog, schema, &rv.relname) {
                    Some(t) => columns.extend(t.columns.iter().cloned()),
                    None => only_distributed = false,
                }
            }
            pg_query::NodeRef::RangeSubselect(r) => {
                only_distributed = false;
                if let Some(a) = &r.alias {
                    inner.insert(a.aliasname.clone());
                }
            }
            pg_query::NodeRef::RangeFunction(r) => {
                only_distributed = false;
                if let Some(a) = &r.alias {
                    inner.insert(a.aliasname.clone());
                }
            }
            pg_query::NodeRef::JoinExpr(j) => {
                if let Some(a) = &j.alias {
                    inner.insert(a.aliasname.clone());
                }
                if !j.using_clause.is_empty() || j.is_natural {
                    only_distributed = false;
                }
            }
            pg_query::NodeRef::CommonTableExpr(c) => {
                inner.insert(c.ctename.clone());
            }
            pg_query::NodeRef::ResTarget(t) if !t.name.is_empty() => {
                columns.insert(t.name.clone());
            }
            pg_query::NodeRef::ColumnRef(c) => {
                let fields: Vec<String> = c
                    .fields
                    .iter()
                    .map(|f| match &f.node {
                        Some(N::String(s)) => s.sval.clone(),
                        Some(N::AStar(_)) => "*".to_string(),
                        _ => String::new(),
                    })
                    .collect();
                refs.push(fields);
            }
            _ => {}
        }
    }
    refs.iter().any(|f| match f.as_slice() {
        [one] if one == "*" => false,
        [one] => only_distributed && !columns.contains(one) && !inner.contains(one),
        [.., table, _column] => !inner.contains(table),
        [] => false,
    })
}

pub(super) fn star() -> protobuf::Node {
    protobuf::Node {
        node: Some(N::ResTarget(Box::new(protobuf::ResTarget {
            val: Some(Box::new(protobuf::Node {
                node: Some(N::ColumnRef(protobuf::ColumnRef {
                    fields: vec![protobuf::Node {
                        node: Some(N::AStar(protobuf::AStar {})),
                    }],
                    location: -1,
                })),
            })),
            location: -1,
            ..Default::default()
        }))),
    }
}

/// `pg_temp.pgs_intermediate_<n> [AS alias]` as a RangeVar.
pub(super) fn temp_range_var(table: &str, alias: Option<protobuf::Alias>) -> protobuf::RangeVar {
    let name = table.trim_start_matches("pg_temp.");
    protobuf::RangeVar {
        catalogname: String::new(),
        schemaname: "pg_temp".to_string(),
        relname: name.to_string(),
        inh: true,
        relpersistence: "p".to_string(),
        alias,
        location: -1,
    }
}

/// `SELECT * FROM <table>`.
pub(super) fn select_from(table: &str) -> PgResult<N> {
    Ok(N::SelectStmt(Box::new(protobuf::SelectStmt {
        target_list: vec![star()],
        from_clause: vec![protobuf::Node {
            node: Some(N::RangeVar(temp_range_var(table, None))),
        }],
        limit_option: protobuf::LimitOption::Default as i32,
        op: protobuf::SetOperation::SetopNone as i32,
        ..Default::default()
    })))
}

/// A CTE's body as a statement, its column aliases applied
/// (`SELECT * FROM (<body>) AS pgs_cte(a, b)`).
pub(super) fn cte_as_select(body: &N, aliascolnames: &[protobuf::Node]) -> PgResult<String> {
    if aliascolnames.is_empty() {
        return deparse_node(body);
    }
    let sub = protobuf::RangeSubselect {
        lateral: false,
        subquery: Some(Box::new(protobuf::Node {
            node: Some(body.clone()),
        })),
        alias: Some(protobuf::Alias {
            aliasname: "pgs_cte".to_string(),
            colnames: aliascolnames.to_vec(),
        }),
    };
    deparse_node(&N::SelectStmt(Box::new(protobuf::SelectStmt {
        target_list: vec![star()],
        from_clause: vec![protobuf::Node {
            node: Some(N::RangeSubselect(Box::new(sub))),
        }],
        limit_option: protobuf::LimitOption::Default as i32,
        op: protobuf::SetOperation::SetopNone as i32,
        ..Default::default()
    })))
}

/// References to CTE `name` (unqualified RangeVars) renamed to the intermediate result,
/// under the name the statement used.
fn rename_relation(n: &mut protobuf::Node, name: &str, table: &str) {
    if let Some(node) = n.node.as_mut() {
        rename_relation_node(node, name, table);
    }
}

pub(super) fn rename_relation_node(node: &mut N, name: &str, table: &str) {
    let mut f = |n: &mut protobuf::Node, _: bool| -> bool {
        match n.node.as_mut() {
            Some(N::RangeVar(rv)) if rv.schemaname.is_empty() && rv.relname == name => {
                let alias = rv.alias.clone().unwrap_or(protobuf::Alias {
                    aliasname: name.to_string(),
                    colnames: Vec::new(),
                });
                *rv = temp_range_var(table, Some(alias));
                true
            }
            // A CTE of the same name inside hides this one.
            Some(N::CommonTableExpr(c)) if c.ctename == name => true,
            _ => false,
        }
    };
    match node {
        N::CommonTableExpr(c) => {
            if let Some(q) = c.ctequery.as_deref_mut().and_then(|x| x.node.as_mut()) {
                walk::statement(q, false, &mut f);
            }
        }
        other => walk::statement(other, false, &mut f),
    }
}

/// `CREATE TEMP TABLE <table> AS <query> WITH NO DATA`, on the tree.
pub(super) fn create_as(table: &str, query: &N) -> PgResult<String> {
    let template = format!("CREATE TEMP TABLE {table} AS SELECT 1 WITH NO DATA");
    let mut tree = crate::sql::parse::first_tree(&template, "intermediate result")?;
    match tree.node.as_mut() {
        Some(N::CreateTableAsStmt(c)) => {
            c.query = Some(Box::new(protobuf::Node {
                node: Some(query.clone()),
            }));
        }
        _ => return Err(PgError::internal("intermediate result: no CREATE TABLE AS")),
    }
    deparse_node(tree.node.as_ref().expect("set above"))
}

pub(super) fn deparse_node(n: &N) -> PgResult<String> {
    n.deparse(Default::default())
        .map_err(|e| PgError::internal(format!("cannot deparse a subquery: {e}")))
}
