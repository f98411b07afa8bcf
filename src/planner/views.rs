//! Views over distributed tables, as Citus plans them: a query naming such a view is
//! planned as its definition. Each reference to a view whose definition reads
//! distributed tables (directly or through other views) is replaced on the parse tree
//! by a subquery of that definition (`pg_get_viewdef` as the session's own
//! coordinator-node connection prints it, found by `executor/session/views.rs`), under
//! the reference's alias or the view's name, with the view's column names as column
//! aliases; the statement is deparsed and the whole ladder plans it. A simple view
//! (`SELECT columns FROM one_table [WHERE ...]`) read as a plain FROM item is merged
//! into the query instead (`flatten`), so a view filtered on a tenant routes and a
//! plain selection runs on the shards like its table.
//!
//! View DDL (`CREATE [OR REPLACE] [TEMP] VIEW`, `ALTER VIEW`, `DROP VIEW`, `COMMENT ON
//! VIEW`) runs on the coordinator node as the client's own statement: the shells carry
//! the columns. Writes through views over distributed tables are refused (0A000).

use super::{Plan, PlanInput, Step};
use crate::catalog::Oid;
use crate::error::{sqlstate, PgError, PgResult};
use merge::{requalify, Merge, Merged, Outer, SimpleView};
use pg_query::protobuf::{self, node::Node as N};
use std::collections::HashMap;

mod merge;
#[cfg(test)]
mod tests;
use std::sync::Arc;

/// How deep views may nest before PostgreSQL's "infinite recursion" error.
const MAX_DEPTH: usize = 64;

/// A view as the session's coordinator-node connection sees it.
#[derive(Debug)]
pub struct ViewDef {
    pub oid: Oid,
    pub schema: String,
    pub name: String,
    /// `pg_get_viewdef(oid)`: names printed as the session's search_path needs them.
    pub definition: String,
    /// The view's column names, in order.
    pub columns: Vec<String>,
    /// Whether the session's role may SELECT from the view (table privilege).
    pub selectable: bool,
}

/// CREATE [OR REPLACE] VIEW over distributed tables: the coordinator node makes it,
/// as the client's statement (ALTER / DROP / COMMENT ON VIEW name no distributed
/// table and go there through the "no distributed table referenced" step).
pub(super) fn view_ddl(i: &PlanInput) -> PgResult<Step> {
    Ok(match i.node {
        N::ViewStmt(_) => Step::Planned(Plan::Local),
        _ => Step::NotMine,
    })
}

/// A statement reading views over distributed tables: planned as their definitions.
pub(super) fn expand(i: &PlanInput) -> PgResult<Step> {
    if !i.names.has_views() {
        return Ok(Step::NotMine);
    }
    let mut node = i.node.clone();
    let mut x = Expander {
        input: i,
        reads_distributed: HashMap::new(),
        expanded: 0,
    };
    let done = match &mut node {
        N::ExplainStmt(e) => x.inner_query(&mut e.query),
        N::CopyStmt(c) => x.inner_query(&mut c.query),
        N::DeclareCursorStmt(d) => x.inner_query(&mut d.query),
        N::PrepareStmt(p) => x.inner_query(&mut p.query),
        N::CreateTableAsStmt(c) => x.inner_query(&mut c.query),
        N::SelectStmt(_) | N::InsertStmt(_) | N::UpdateStmt(_) | N::DeleteStmt(_) => {
            x.statement(&mut node, &[], 0)
        }
        N::MergeStmt(m) => {
            let source = match m.source_relation.as_deref().and_then(|s| s.node.as_ref()) {
                Some(N::RangeVar(rv)) => Some(rv),
                _ => None,
            };
            m.relation
                .as_ref()
                .into_iter()
                .chain(source)
                .try_for_each(|rv| x.refuse_write(rv))
        }
        _ => return Ok(Step::NotMine),
    };
    if let Err(e) = done {
        return Ok(Step::Planned(Plan::Unsupported(e)));
    }
    if x.expanded == 0 {
        return Ok(Step::NotMine);
    }
    let sql = node
        .deparse(Default::default())
        .map_err(|e| PgError::internal(format!("cannot deparse a statement reading views: {e}")))?;
    Ok(Step::Planned(detached(i.plan_text(&sql)?)))
}

/// A plan made from pgshard's own text: nothing of it may be matched against the
/// client's text (the simple protocol's shape cache reads positions from a router plan).
fn detached(plan: Plan) -> Plan {
    match plan {
        Plan::Router(r) => match Arc::try_unwrap(r) {
            Ok(mut r) => {
                r.relation_span = None;
                r.value_exprs.clear();
                Plan::Router(Arc::new(r))
            }
            Err(r) => Plan::Router(r),
        },
        other => other,
    }
}

struct Expander<'a, 'b> {
    input: &'a PlanInput<'b>,
    /// Whether a view (by OID) reads distributed tables, found once per statement.
    reads_distributed: HashMap<Oid, bool>,
    expanded: usize,
}

pub(super) fn string_node(s: &str) -> protobuf::Node {
    protobuf::Node {
        node: Some(N::String(protobuf::String {
            sval: s.to_string(),
        })),
    }
}

impl Expander<'_, '_> {
    fn inner_query(&mut self, q: &mut Option<Box<protobuf::Node>>) -> PgResult<()> {
        match q.as_deref_mut().and_then(|n| n.node.as_mut()) {
            Some(n) => self.statement(n, &[], 0),
            None => Ok(()),
        }
    }

    /// The view a reference names when it reads distributed tables (a CTE of that
    /// name in scope hides it).
    fn distributed_view(
        &mut self,
        rv: &protobuf::RangeVar,
        scope: &[String],
        depth: usize,
    ) -> PgResult<Option<Arc<ViewDef>>> {
        let schema = (!rv.schemaname.is_empty()).then_some(rv.schemaname.as_str());
        if schema.is_none() && scope.iter().any(|c| *c == rv.relname) {
            return Ok(None);
        }
        let Some(view) = self.input.names.view(schema, &rv.relname).cloned() else {
            return Ok(None);
        };
        Ok(self.reads(&view, depth)?.then_some(view))
    }

    /// Whether `view`'s definition reads a distributed table, directly or through
    /// other views.
    fn reads(&mut self, view: &ViewDef, depth: usize) -> PgResult<bool> {
        if let Some(r) = self.reads_distributed.get(&view.oid) {
            return Ok(*r);
        }
        if depth > MAX_DEPTH {
            return Err(recursion(view));
        }
        let stmt = crate::sql::parse::parse(&view.definition)?.remove(0);
        let catalog = self.input.catalog;
        let names = self.input.names;
        let rels =
            crate::sql::parse::relations(&stmt, catalog.tables_by_name.keys().map(String::as_str));
        let mut found = false;
        for r in rels {
            if names
                .resolve(catalog, r.schema.as_deref(), &r.name)
                .is_some()
            {
                found = true;
                break;
            }
            if let Some(inner) = names.view(r.schema.as_deref(), &r.name).cloned() {
                if inner.oid != view.oid && self.reads(&inner, depth + 1)? {
                    found = true;
                    break;
                }
            }
        }
        self.reads_distributed.insert(view.oid, found);
        Ok(found)
    }

    /// A write's target: a view over distributed tables is refused.
    fn refuse_write(&mut self, rv: &protobuf::RangeVar) -> PgResult<()> {
        match self.distributed_view(rv, &[], 0)? {
            Some(v) => Err(PgError::not_supported(format!(
                "pgshard does not support writes through the view \"{}\" over distributed tables yet: write to its tables instead",
                v.name
            ))),
            None => Ok(()),
        }
    }

    fn statement(&mut self, n: &mut N, scope: &[String], depth: usize) -> PgResult<()> {
        match n {
            N::SelectStmt(s) => self.select(s, scope, depth),
            N::InsertStmt(ins) => {
                let scope = self.with(&mut ins.with_clause, scope, depth)?;
                if let Some(rv) = &ins.relation {
                    self.refuse_write(rv)?;
                }
                if let Some(src) = ins.select_stmt.as_deref_mut().and_then(|x| x.node.as_mut()) {
                    self.statement(src, &scope, depth)?;
                }
                if let Some(c) = ins.on_conflict_clause.as_deref_mut() {
                    self.exprs(&mut c.target_list, &scope, depth)?;
                    self.opt_expr(&mut c.where_clause, &scope, depth)?;
                }
                if let Some(r) = &mut ins.returning_clause {
                    self.exprs(&mut r.exprs, &scope, depth)?;
                }
                Ok(())
            }
            N::UpdateStmt(u) => {
                let scope = self.with(&mut u.with_clause, scope, depth)?;
                if let Some(rv) = &u.relation {
                    self.refuse_write(rv)?;
                }
                self.exprs(&mut u.target_list, &scope, depth)?;
                for f in u.from_clause.iter_mut() {
                    self.from_item(f, &scope, depth, None)?;
                }
                self.opt_expr(&mut u.where_clause, &scope, depth)?;
                if let Some(r) = &mut u.returning_clause {
                    self.exprs(&mut r.exprs, &scope, depth)?;
                }
                Ok(())
            }
            N::DeleteStmt(d) => {
                let scope = self.with(&mut d.with_clause, scope, depth)?;
                if let Some(rv) = &d.relation {
                    self.refuse_write(rv)?;
                }
                for f in d.using_clause.iter_mut() {
                    self.from_item(f, &scope, depth, None)?;
                }
                self.opt_expr(&mut d.where_clause, &scope, depth)?;
                if let Some(r) = &mut d.returning_clause {
                    self.exprs(&mut r.exprs, &scope, depth)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// A WITH clause's CTEs walked; the scope of what follows it (CTE names hide views).
    fn with(
        &mut self,
        w: &mut Option<protobuf::WithClause>,
        scope: &[String],
        depth: usize,
    ) -> PgResult<Vec<String>> {
        let mut scope = scope.to_vec();
        let Some(w) = w else {
            return Ok(scope);
        };
        let names: Vec<String> = w
            .ctes
            .iter()
            .filter_map(|c| match c.node.as_ref() {
                Some(N::CommonTableExpr(c)) => Some(c.ctename.clone()),
                _ => None,
            })
            .collect();
        if w.recursive {
            scope.extend(names.iter().cloned());
        }
        for c in w.ctes.iter_mut() {
            if let Some(N::CommonTableExpr(c)) = c.node.as_mut() {
                if let Some(q) = c.ctequery.as_deref_mut().and_then(|x| x.node.as_mut()) {
                    self.statement(q, &scope, depth)?;
                }
                if !w.recursive {
                    scope.push(c.ctename.clone());
                }
            }
        }
        Ok(scope)
    }

    fn select(
        &mut self,
        s: &mut protobuf::SelectStmt,
        scope: &[String],
        depth: usize,
    ) -> PgResult<()> {
        let scope = self.with(&mut s.with_clause, scope, depth)?;
        let outer = Outer::of(s);
        let mut merged = Merged::default();
        for f in s.from_clause.iter_mut() {
            let merge = outer.lockless.then_some(Merge {
                outer: &outer,
                merged: &mut merged,
            });
            self.from_item(f, &scope, depth, merge)?;
        }
        merged.apply(s);
        for list in [
            &mut s.target_list,
            &mut s.group_clause,
            &mut s.sort_clause,
            &mut s.distinct_clause,
            &mut s.values_lists,
        ] {
            self.exprs(list, &scope, depth)?;
        }
        for x in [
            &mut s.where_clause,
            &mut s.having_clause,
            &mut s.limit_count,
            &mut s.limit_offset,
        ] {
            self.opt_expr(x, &scope, depth)?;
        }
        for side in [&mut s.larg, &mut s.rarg] {
            if let Some(side) = side.as_deref_mut() {
                self.select(side, &scope, depth)?;
            }
        }
        Ok(())
    }

    /// A FROM item walked; a view over distributed tables replaced by its base table
    /// (merged, when `merge` allows: an inner FROM item of a query) or its definition.
    fn from_item(
        &mut self,
        f: &mut protobuf::Node,
        scope: &[String],
        depth: usize,
        mut merge: Option<Merge>,
    ) -> PgResult<()> {
        let replacement = match f.node.as_mut() {
            Some(N::RangeVar(rv)) => match self.distributed_view(rv, scope, depth)? {
                Some(view) => {
                    check_privilege(&view, depth)?;
                    match merge.as_mut().and_then(|m| self.merged_base(rv, &view, m)) {
                        Some(base) => {
                            self.expanded += 1;
                            let mut node = protobuf::Node {
                                node: Some(N::RangeVar(base)),
                            };
                            // The base may be a view over distributed tables too.
                            self.from_item(&mut node, &[], depth + 1, merge)?;
                            node.node
                        }
                        None => Some(self.as_subquery(rv, &view, depth)?),
                    }
                }
                None => None,
            },
            Some(N::JoinExpr(j)) => {
                let inner = j.jointype == protobuf::JoinType::JoinInner as i32;
                for side in [&mut j.larg, &mut j.rarg] {
                    if let Some(side) = side.as_deref_mut() {
                        let m = match (&mut merge, inner) {
                            (Some(m), true) => Some(m.again()),
                            _ => None,
                        };
                        self.from_item(side, scope, depth, m)?;
                    }
                }
                self.opt_expr(&mut j.quals, scope, depth)?;
                None
            }
            Some(N::RangeSubselect(r)) => {
                if let Some(q) = r.subquery.as_deref_mut().and_then(|x| x.node.as_mut()) {
                    self.statement(q, scope, depth)?;
                }
                None
            }
            Some(N::RangeFunction(r)) => {
                self.exprs(&mut r.functions, scope, depth)?;
                None
            }
            _ => None,
        };
        if let Some(r) = replacement {
            f.node = Some(r);
        }
        Ok(())
    }

    /// A simple view (`SELECT columns FROM one relation [WHERE ...]`, no renamed
    /// column) merged into the query around it: its relation under the reference's
    /// name, its WHERE added to the query's. None when the view or the query does not
    /// allow it (a column of the relation the view hides is named in the query, a `*`
    /// over several FROM items, a whole-row reference, column aliases).
    fn merged_base(
        &mut self,
        rv: &protobuf::RangeVar,
        view: &ViewDef,
        m: &mut Merge,
    ) -> Option<protobuf::RangeVar> {
        if rv.alias.as_ref().is_some_and(|a| !a.colnames.is_empty()) {
            return None;
        }
        let alias = rv
            .alias
            .as_ref()
            .map_or(rv.relname.clone(), |a| a.aliasname.clone());
        let simple = SimpleView::of(&view.definition)?;
        if simple.columns != view.columns || m.outer.whole_rows.contains(&alias) {
            return None;
        }
        let base_schema =
            (!simple.base.schemaname.is_empty()).then_some(simple.base.schemaname.as_str());
        let base_columns: Vec<String> =
            match self
                .input
                .names
                .resolve(self.input.catalog, base_schema, &simple.base.relname)
            {
                Some(t) => t.columns.clone(),
                None => self
                    .input
                    .names
                    .view(base_schema, &simple.base.relname)?
                    .columns
                    .clone(),
            };
        if base_columns
            .iter()
            .any(|c| !view.columns.contains(c) && m.outer.names.contains(c))
        {
            return None;
        }
        let stars = m.outer.stars.contains(&alias) || m.outer.bare_star;
        if stars && !m.outer.single {
            return None;
        }
        if stars {
            m.merged.stars.push((alias.clone(), view.columns.clone()));
        }
        if let Some(mut pred) = simple.pred {
            requalify(&mut pred, &simple.refname, &simple.base, &alias);
            m.merged.quals.push(pred);
        }
        let mut base = simple.base;
        base.alias = Some(protobuf::Alias {
            aliasname: alias,
            colnames: Vec::new(),
        });
        Some(base)
    }

    /// The view's definition as a subquery under the reference's alias (or the view's
    /// name), its column names as column aliases; views inside it expanded too.
    fn as_subquery(
        &mut self,
        rv: &protobuf::RangeVar,
        view: &ViewDef,
        depth: usize,
    ) -> PgResult<N> {
        if depth > MAX_DEPTH {
            return Err(recursion(view));
        }
        let mut def = crate::sql::parse::first_tree(&view.definition, "view definition")?;
        let Some(body) = def.node.as_mut() else {
            return Err(PgError::internal(format!(
                "the definition of view \"{}\" is empty",
                view.name
            )));
        };
        self.statement(body, &[], depth + 1)?;
        self.expanded += 1;
        let mut alias = rv.alias.clone().unwrap_or(protobuf::Alias {
            aliasname: rv.relname.clone(),
            colnames: Vec::new(),
        });
        if alias.colnames.is_empty() {
            alias.colnames = view.columns.iter().map(|c| string_node(c)).collect();
        }
        Ok(N::RangeSubselect(Box::new(protobuf::RangeSubselect {
            lateral: false,
            subquery: Some(def),
            alias: Some(alias),
        })))
    }

    fn opt_expr(
        &mut self,
        x: &mut Option<Box<protobuf::Node>>,
        scope: &[String],
        depth: usize,
    ) -> PgResult<()> {
        match x.as_deref_mut() {
            Some(x) => self.expr(x, scope, depth),
            None => Ok(()),
        }
    }

    fn exprs(&mut self, xs: &mut [protobuf::Node], scope: &[String], depth: usize) -> PgResult<()> {
        for x in xs {
            self.expr(x, scope, depth)?;
        }
        Ok(())
    }

    /// The subqueries of an expression (SubLinks) walked.
    fn expr(&mut self, x: &mut protobuf::Node, scope: &[String], depth: usize) -> PgResult<()> {
        let mut result = Ok(());
        crate::sql::walk::expression(x, false, &mut |n, _| {
            let Some(N::SubLink(s)) = n.node.as_mut() else {
                return false;
            };
            if result.is_err() {
                return true;
            }
            if let Some(t) = s.testexpr.as_deref_mut() {
                result = self.expr(t, scope, depth);
            }
            if let (Ok(()), Some(q)) = (
                &result,
                s.subselect.as_deref_mut().and_then(|q| q.node.as_mut()),
            ) {
                result = self.statement(q, scope, depth);
            }
            true
        });
        result
    }
}

/// PostgreSQL checks the caller's privilege on the view it names; the views inside
/// are checked as the outer view's owner (pgshard: not at all, the tables they read are
/// read with the caller's privileges).
fn check_privilege(view: &ViewDef, depth: usize) -> PgResult<()> {
    if depth == 0 && !view.selectable {
        return Err(PgError::new(
            sqlstate::INSUFFICIENT_PRIVILEGE,
            format!("permission denied for view {}", view.name),
        ));
    }
    Ok(())
}

fn recursion(view: &ViewDef) -> PgError {
    PgError::new(
        sqlstate::INVALID_OBJECT_DEFINITION,
        format!(
            "infinite recursion detected in rules for relation \"{}\"",
            view.name
        ),
    )
}
