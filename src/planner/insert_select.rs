//! `INSERT INTO a SELECT ... FROM b ...` between co-located distributed tables, where
//! the selected value for a's distribution column is b's distribution column: every row
//! stays on the shard index it came from, so the statement runs shard by shard
//! (`INSERT INTO a_i SELECT ... FROM b_i ...`) in one distributed transaction, with
//! its `ON CONFLICT (columns) DO NOTHING | DO UPDATE` and `RETURNING` as written (the
//! conflicting rows are on the same shard).
//! Other shapes run through the coordinator ([`plan_via_coordinator`]), and so does an
//! INSERT into a local table selecting from distributed ones ([`plan_into_local`]).

use super::distvalue::is_column;
use super::insert_select_clauses::{self as clauses, ViaOnConflict};
use super::multishard::plain_expression;
use super::Plan;
use crate::catalog::{DistTable, PartitionMethod};
use crate::error::{PgError, PgResult};
use crate::sql::parse::{qualified_name_span, RelRef};
use crate::sql::quote::{quote_ident, quote_qualified};
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self, SetOperation};
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    /// Shard `i` of table `k` (index into `tables`), with an alias when the text had none.
    Shard {
        table: usize,
        alias: Option<String>,
    },
}

/// INSERT ... SELECT that cannot run shard by shard. The SELECT runs first: on the
/// coordinator node when it reads no distributed table, else through pgshard's own
/// planner. PostgreSQL itself then turns its rows into the target's (assignment casts,
/// defaults, constraints): an INSERT into the table's empty shell on the coordinator
/// node, inside a savepoint rolled back at once, RETURNING the rows. Those rows are
/// copied into the shards.
#[derive(Debug)]
pub struct InsertViaCoordinatorPlan {
    pub table: Arc<DistTable>,
    /// The target columns as written (empty: the table's columns in order).
    pub columns: Vec<String>,
    pub source: ViaSource,
    /// The client's RETURNING, run by the shards' INSERTs.
    pub returning: Option<ViaReturning>,
    /// The client's alias of the target, if any (the shell's INSERT keeps it).
    pub alias: Option<String>,
    /// The client's ON CONFLICT, run by the shell's INSERT and by the shards'.
    pub on_conflict: Option<ViaOnConflict>,
}

/// A RETURNING list over the rows the shards insert.
#[derive(Debug)]
pub struct ViaReturning {
    /// What the target is called in the list: the client's alias, or the table's name
    /// (the shard's INSERT names its shard `AS` this).
    pub alias: String,
    /// The list, deparsed (`k, v * 2 AS w`).
    pub list: String,
}

#[derive(Debug)]
pub enum ViaSource {
    /// The whole statement runs on the coordinator node against the shell: its SELECT
    /// reads no distributed table.
    Coordinator { text: String },
    /// The SELECT alone (deparsed), planned and run by pgshard; its rows then reach the
    /// shell as typed VALUES.
    Distributed { select: String },
}

/// INSERT into a local table (on the coordinator node) of a SELECT reading distributed
/// tables: the SELECT runs through pgshard's planner, then the INSERT runs on the
/// coordinator node with its rows as typed VALUES in place of the SELECT, a chunk at
/// a time, its other clauses (column list, ON CONFLICT, RETURNING) as written.
#[derive(Debug)]
pub struct InsertIntoLocalPlan {
    /// The client's INSERT without its SELECT.
    pub insert: protobuf::InsertStmt,
    /// The SELECT alone (deparsed).
    pub select: String,
}

#[derive(Debug)]
pub struct InsertSelectPlan {
    /// Target first, then the source table (the same table allowed).
    pub tables: Vec<Arc<DistTable>>,
    pieces: Vec<Piece>,
    /// Functions called (the executor rules out user-defined aggregates).
    pub functions: Vec<String>,
    /// RETURNING rows come from every shard's INSERT.
    pub returning: bool,
}

impl InsertSelectPlan {
    /// The statement for shard index `i` of every table.
    pub fn for_index(&self, i: usize) -> String {
        let mut out = String::new();
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Shard { table, alias } => {
                    let t = &self.tables[*table];
                    out.push_str(&quote_qualified(
                        &t.schema,
                        &t.shard_name(t.shards[i].shard_id),
                    ));
                    if let Some(a) = alias {
                        out.push_str(" AS ");
                        out.push_str(&quote_ident(a));
                    }
                }
            }
        }
        out
    }
}

fn refuse(why: &str) -> PgResult<Plan> {
    Ok(Plan::Unsupported(PgError::not_supported(format!(
        "pgshard does not support this INSERT ... SELECT on distributed tables yet: {why}"
    ))))
}

/// Plans an INSERT ... SELECT into the hash-distributed `table` through the
/// coordinator; `reads_distributed`: its SELECT reads some distributed table.
pub fn plan_via_coordinator(
    i: &protobuf::InsertStmt,
    text: &str,
    table: Arc<DistTable>,
    reads_distributed: bool,
) -> PgResult<Plan> {
    let refuse = |why: &str| -> PgResult<Plan> {
        Ok(Plan::Unsupported(PgError::not_supported(format!(
            "pgshard does not support this INSERT ... SELECT into the distributed table \"{}\" yet: {why}",
            table.name
        ))))
    };
    if !matches!(
        table.method,
        PartitionMethod::Hash | PartitionMethod::Reference
    ) {
        return refuse(
            "only hash-distributed and reference tables are filled through the coordinator",
        );
    }
    let with_moved = match clauses::with_moved_into_select(i) {
        Ok(moved) => moved,
        Err(why) => return refuse(why),
    };
    let i = &with_moved;
    if let Some(why) = on_conflict_refusal(i.on_conflict_clause.as_deref(), &table) {
        return refuse(why);
    }
    let on_conflict = match clauses::on_conflict(i) {
        Ok(oc) => oc,
        Err(why) => return refuse(why),
    };
    let returning = match i.returning_clause.as_ref().filter(|r| !r.exprs.is_empty()) {
        Some(r) => match returning_list(&r.exprs) {
            Some(list) => Some(ViaReturning {
                alias: i
                    .relation
                    .as_ref()
                    .and_then(|r| r.alias.as_ref())
                    .map(|a| a.aliasname.clone())
                    .unwrap_or_else(|| table.name.clone()),
                list,
            }),
            None => return refuse("pgshard could not isolate the RETURNING list"),
        },
        None => None,
    };
    let mut columns = Vec::new();
    for c in &i.cols {
        match c.node.as_ref() {
            Some(N::ResTarget(rt)) if rt.indirection.is_empty() => columns.push(rt.name.clone()),
            _ => return refuse("subscripts or fields in the column list"),
        }
    }
    let Some(select @ N::SelectStmt(s)) = i.select_stmt.as_deref().and_then(|x| x.node.as_ref())
    else {
        return refuse("unexpected shape");
    };
    let source = if reads_distributed {
        if !s.values_lists.is_empty() {
            return refuse("VALUES reading distributed tables");
        }
        match select.deparse(Default::default()) {
            Ok(select) => ViaSource::Distributed { select },
            Err(_) => return refuse("pgshard could not isolate the SELECT"),
        }
    } else if returning.is_some() {
        // The shell's INSERT returns the target's rows itself, not the client's list.
        let mut without = i.clone();
        without.returning_clause = None;
        match N::InsertStmt(Box::new(without)).deparse(Default::default()) {
            Ok(text) => ViaSource::Coordinator { text },
            Err(_) => return refuse("pgshard could not isolate the RETURNING list"),
        }
    } else {
        ViaSource::Coordinator {
            text: text.to_string(),
        }
    };
    Ok(Plan::InsertViaCoordinator(Arc::new(
        InsertViaCoordinatorPlan {
            table,
            columns,
            source,
            returning,
            alias: i
                .relation
                .as_ref()
                .and_then(|r| r.alias.as_ref())
                .map(|a| a.aliasname.clone()),
            on_conflict,
        },
    )))
}

/// A RETURNING list's targets deparsed on their own (`SELECT <list>` without `SELECT`).
fn returning_list(targets: &[protobuf::Node]) -> Option<String> {
    let select = protobuf::SelectStmt {
        target_list: targets.to_vec(),
        limit_option: protobuf::LimitOption::Default as i32,
        op: protobuf::SetOperation::SetopNone as i32,
        ..Default::default()
    };
    let text = N::SelectStmt(Box::new(select))
        .deparse(Default::default())
        .ok()?;
    text.strip_prefix("SELECT ").map(str::to_string)
}

/// Plans an INSERT into a local table whose SELECT reads distributed tables.
pub fn plan_into_local(i: &protobuf::InsertStmt) -> PgResult<Plan> {
    let refuse = |why: &str| -> PgResult<Plan> {
        Ok(Plan::Unsupported(PgError::not_supported(format!(
            "pgshard does not support this INSERT into a local table selecting from a distributed table yet: {why}"
        ))))
    };
    let with_moved = match clauses::with_moved_into_select(i) {
        Ok(moved) => moved,
        Err(why) => return refuse(why),
    };
    let i = &with_moved;
    // Parameters go to the SELECT; the INSERT's other clauses run without them.
    let outside = serde_json::to_string(&(&i.on_conflict_clause, &i.returning_clause, &i.cols))
        .map_err(|e| PgError::internal(format!("INSERT clauses: {e}")))?;
    if outside.contains("\"ParamRef\"") {
        return refuse("parameters outside the SELECT");
    }
    let Some(select @ N::SelectStmt(_)) = i.select_stmt.as_deref().and_then(|x| x.node.as_ref())
    else {
        return refuse("unexpected shape");
    };
    let Ok(select) = select.deparse(Default::default()) else {
        return refuse("pgshard could not isolate the SELECT");
    };
    let mut insert = i.clone();
    insert.select_stmt = None;
    Ok(Plan::InsertIntoLocal(Arc::new(InsertIntoLocalPlan {
        insert,
        select,
    })))
}

/// Plans an INSERT ... SELECT whose table references are all distributed (`dist`).
pub fn plan_insert_select(
    i: &protobuf::InsertStmt,
    text: &str,
    dist: &[(&RelRef, Arc<DistTable>)],
    all_refs: usize,
) -> PgResult<Plan> {
    if dist.len() != 2 || all_refs != 2 {
        return refuse(
            "only INSERT INTO a SELECT ... FROM b with one co-located source table is pushed down",
        );
    }
    let (target_ref, target) = (dist[0].0, dist[0].1.clone());
    let (source_ref, source) = (dist[1].0, dist[1].1.clone());
    if target.method != PartitionMethod::Hash || source.method != PartitionMethod::Hash {
        return refuse("reference tables");
    }
    if target.colocation_id != source.colocation_id || target.shards.len() != source.shards.len() {
        return refuse("the tables are not co-located");
    }
    if i.with_clause.is_some() {
        return refuse("WITH");
    }
    if let Some(why) = on_conflict_refusal(i.on_conflict_clause.as_deref(), &target) {
        return refuse(why);
    }
    let Some(N::SelectStmt(s)) = i.select_stmt.as_deref().and_then(|x| x.node.as_ref()) else {
        return refuse("unexpected shape");
    };
    if s.op != SetOperation::SetopNone as i32
        || s.with_clause.is_some()
        || !s.distinct_clause.is_empty()
        || !s.group_clause.is_empty()
        || s.having_clause.is_some()
        || !s.window_clause.is_empty()
        || s.limit_count.is_some()
        || s.limit_offset.is_some()
        || !s.locking_clause.is_empty()
        || s.from_clause.len() != 1
    {
        return refuse("only plain selections of one table (no GROUP BY, DISTINCT, LIMIT, set operations) are pushed down");
    }
    let (Some(tcol), Some(scol)) = (target.dist_column.clone(), source.dist_column.clone()) else {
        return refuse("no distribution column");
    };
    let position = if i.cols.is_empty() {
        target.columns.iter().position(|c| *c == tcol.name)
    } else {
        i.cols
            .iter()
            .position(|c| matches!(c.node.as_ref(), Some(N::ResTarget(rt)) if rt.name == tcol.name))
    };
    let Some(position) = position else {
        return refuse("the distribution column gets no value");
    };
    let alias = source_ref.alias.clone();
    let sname = source.name.clone();
    let names_source = move |q: &str| match &alias {
        Some(a) => q == a,
        None => q == sname,
    };
    let key_ok = s
        .target_list
        .get(position)
        .and_then(|t| match t.node.as_ref() {
            Some(N::ResTarget(rt)) => rt.val.as_deref(),
            _ => None,
        });
    if !key_ok.is_some_and(|v| is_column(v, &scol, &names_source)) || tcol.type_oid != scol.type_oid
    {
        return refuse(
            "the distribution column must be filled with the source table's distribution column",
        );
    }
    // The target stores the source's value coerced to its own typmod (numeric(10,2)
    // into numeric(10,1) rounds): shard by shard only when that cannot change it.
    if tcol.typmod != -1 && tcol.typmod != scol.typmod {
        return refuse("the distribution columns have different type modifiers");
    }
    let mut functions = Vec::new();
    for t in &s.target_list {
        let Some(N::ResTarget(rt)) = t.node.as_ref() else {
            return refuse("unexpected target");
        };
        if !rt
            .val
            .as_deref()
            .is_some_and(|v| plain_expression(v, &mut functions))
        {
            return refuse("aggregates, window functions or subqueries in the select list");
        }
    }
    if let Some(w) = s.where_clause.as_deref() {
        if !plain_expression(w, &mut functions) {
            return refuse("subqueries in WHERE");
        }
    }
    if !matches!(s.from_clause[0].node.as_ref(), Some(N::RangeVar(_))) {
        return refuse("joins");
    }
    // Splice both table references.
    let mut spans = Vec::new();
    for (k, r) in [target_ref, source_ref].into_iter().enumerate() {
        let Some((start, end)) = qualified_name_span(text, r.location) else {
            return refuse("could not locate a table name");
        };
        let name = if k == 0 { &target.name } else { &source.name };
        spans.push((start, end, k, r.alias.is_none().then(|| name.clone())));
    }
    spans.sort_by_key(|x| x.0);
    let mut pieces = Vec::new();
    let mut at = 0;
    for (start, end, table, alias) in spans {
        pieces.push(Piece::Text(text[at..start].to_string()));
        pieces.push(Piece::Shard { table, alias });
        at = end;
    }
    pieces.push(Piece::Text(text[at..].to_string()));
    Ok(Plan::InsertSelect(Arc::new(InsertSelectPlan {
        tables: vec![target, source],
        pieces,
        functions,
        returning: i
            .returning_clause
            .as_ref()
            .is_some_and(|r| !r.exprs.is_empty()),
    })))
}

/// Why an ON CONFLICT clause cannot run shard by shard, if it cannot: a constraint
/// named (the shards' constraints carry the shard id in their names), or a DO UPDATE
/// that sets the distribution column (the row would belong to another shard).
fn on_conflict_refusal(
    on_conflict: Option<&protobuf::OnConflictClause>,
    target: &DistTable,
) -> Option<&'static str> {
    let oc = on_conflict?;
    if oc.infer.as_ref().is_some_and(|inf| !inf.conname.is_empty()) {
        return Some("ON CONFLICT ON CONSTRAINT (name the conflict's columns instead)");
    }
    let col = target.dist_column.as_ref()?;
    let sets_key = oc
        .target_list
        .iter()
        .any(|t| matches!(t.node.as_ref(), Some(N::ResTarget(rt)) if rt.name == col.name));
    sets_key.then_some("ON CONFLICT DO UPDATE setting the distribution column")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_returning_list_is_deparsed_on_its_own() {
        let parsed = pg_query::parse(
            "INSERT INTO t AS d SELECT * FROM s RETURNING d.k, v * 2 AS w, 'it''s'",
            0,
        )
        .unwrap();
        let node = parsed.protobuf.stmts[0].stmt.as_ref().unwrap().node.clone();
        let Some(N::InsertStmt(i)) = node else {
            panic!("not an INSERT")
        };
        let list = returning_list(&i.returning_clause.unwrap().exprs).unwrap();
        assert_eq!(list, "d.k, v * 2 AS w, 'it''s'");
    }
}
