//! A mutable walk over the expressions of a parse tree (pg_query's own walker skips
//! VALUES lists and RETURNING and cannot replace nodes): DML and SELECT statements, the
//! expressions in them, and the expression parts of DDL (column defaults, CHECK
//! constraints, index elements). Used to evaluate stable functions once
//! (`planner::evaluate`) and to rename table references in shard DDL (`planner::ddl`).

use pg_query::protobuf::{self, node::Node as N};

/// Calls `f` on every expression node of the statement this walker knows (DML,
/// SELECT and the expressions in them), outermost first; `f` returning true stops the
/// descent below that node. The flag is true inside an INSERT's VALUES rows.
pub fn statement(
    n: &mut N,
    volatile_ok: bool,
    f: &mut dyn FnMut(&mut protobuf::Node, bool) -> bool,
) {
    let each = |list: &mut Vec<protobuf::Node>,
                ok: bool,
                f: &mut dyn FnMut(&mut protobuf::Node, bool) -> bool| {
        for x in list.iter_mut() {
            expression(x, ok, f);
        }
    };
    fn one(
        x: &mut Option<Box<protobuf::Node>>,
        ok: bool,
        f: &mut dyn FnMut(&mut protobuf::Node, bool) -> bool,
    ) {
        if let Some(x) = x.as_deref_mut() {
            expression(x, ok, f);
        }
    }
    fn with(
        w: &mut Option<protobuf::WithClause>,
        f: &mut dyn FnMut(&mut protobuf::Node, bool) -> bool,
    ) {
        if let Some(w) = w {
            for c in w.ctes.iter_mut() {
                expression(c, false, f);
            }
        }
    }
    fn returning(
        r: &mut Option<protobuf::ReturningClause>,
        f: &mut dyn FnMut(&mut protobuf::Node, bool) -> bool,
    ) {
        if let Some(r) = r {
            for x in r.exprs.iter_mut() {
                expression(x, false, f);
            }
        }
    }
    match n {
        N::SelectStmt(s) => select(s, volatile_ok, f),
        N::InsertStmt(i) => {
            with(&mut i.with_clause, f);
            if let Some(src) = i.select_stmt.as_deref_mut() {
                // The source's own VALUES rows are evaluated once each, as written.
                if let Some(N::SelectStmt(s)) = &mut src.node {
                    select(s, true, f);
                }
            }
            if let Some(c) = i.on_conflict_clause.as_deref_mut() {
                each(&mut c.target_list, false, f);
                one(&mut c.where_clause, false, f);
            }
            returning(&mut i.returning_clause, f);
        }
        N::UpdateStmt(u) => {
            with(&mut u.with_clause, f);
            each(&mut u.target_list, false, f);
            each(&mut u.from_clause, false, f);
            one(&mut u.where_clause, false, f);
            returning(&mut u.returning_clause, f);
        }
        N::DeleteStmt(d) => {
            with(&mut d.with_clause, f);
            each(&mut d.using_clause, false, f);
            one(&mut d.where_clause, false, f);
            returning(&mut d.returning_clause, f);
        }
        _ => {}
    }
}

fn select(
    s: &mut protobuf::SelectStmt,
    values_ok: bool,
    f: &mut dyn FnMut(&mut protobuf::Node, bool) -> bool,
) {
    if let Some(w) = &mut s.with_clause {
        for c in w.ctes.iter_mut() {
            expression(c, false, f);
        }
    }
    for list in [
        &mut s.target_list,
        &mut s.from_clause,
        &mut s.group_clause,
        &mut s.sort_clause,
        &mut s.distinct_clause,
    ] {
        for x in list.iter_mut() {
            expression(x, false, f);
        }
    }
    for x in s.values_lists.iter_mut() {
        expression(x, values_ok, f);
    }
    for x in [
        &mut s.where_clause,
        &mut s.having_clause,
        &mut s.limit_count,
        &mut s.limit_offset,
    ] {
        if let Some(x) = x.as_deref_mut() {
            expression(x, false, f);
        }
    }
    for side in [&mut s.larg, &mut s.rarg] {
        if let Some(side) = side.as_deref_mut() {
            select(side, false, f);
        }
    }
}

/// [`statement`] for one expression node: `f` first, then the node's children.
pub fn expression(
    n: &mut protobuf::Node,
    ok: bool,
    f: &mut dyn FnMut(&mut protobuf::Node, bool) -> bool,
) {
    if f(n, ok) {
        return;
    }
    let Some(node) = n.node.as_mut() else {
        return;
    };
    fn opt(
        x: &mut Option<Box<protobuf::Node>>,
        ok: bool,
        f: &mut dyn FnMut(&mut protobuf::Node, bool) -> bool,
    ) {
        if let Some(x) = x.as_deref_mut() {
            expression(x, ok, f);
        }
    }
    fn all(
        xs: &mut [protobuf::Node],
        ok: bool,
        f: &mut dyn FnMut(&mut protobuf::Node, bool) -> bool,
    ) {
        for x in xs {
            expression(x, ok, f);
        }
    }
    match node {
        N::ResTarget(t) => opt(&mut t.val, ok, f),
        N::AExpr(e) => {
            opt(&mut e.lexpr, ok, f);
            opt(&mut e.rexpr, ok, f);
        }
        N::BoolExpr(e) => all(&mut e.args, ok, f),
        N::FuncCall(c) => {
            all(&mut c.args, ok, f);
            all(&mut c.agg_order, ok, f);
            opt(&mut c.agg_filter, ok, f);
        }
        N::NamedArgExpr(a) => opt(&mut a.arg, ok, f),
        N::TypeCast(c) => opt(&mut c.arg, ok, f),
        N::CollateClause(c) => opt(&mut c.arg, ok, f),
        N::NullTest(t) => opt(&mut t.arg, ok, f),
        N::BooleanTest(t) => opt(&mut t.arg, ok, f),
        N::CaseExpr(c) => {
            opt(&mut c.arg, ok, f);
            all(&mut c.args, ok, f);
            opt(&mut c.defresult, ok, f);
        }
        N::CaseWhen(w) => {
            opt(&mut w.expr, ok, f);
            opt(&mut w.result, ok, f);
        }
        N::CoalesceExpr(c) => all(&mut c.args, ok, f),
        N::MinMaxExpr(m) => all(&mut m.args, ok, f),
        N::RowExpr(r) => all(&mut r.args, ok, f),
        N::AArrayExpr(a) => all(&mut a.elements, ok, f),
        N::AIndirection(a) => opt(&mut a.arg, ok, f),
        N::List(l) => all(&mut l.items, ok, f),
        N::MultiAssignRef(m) => opt(&mut m.source, ok, f),
        N::SortBy(s) => opt(&mut s.node, ok, f),
        N::SubLink(s) => {
            opt(&mut s.testexpr, ok, f);
            if let Some(sub) = s.subselect.as_deref_mut().and_then(|x| x.node.as_mut()) {
                statement(sub, false, f);
            }
        }
        N::RangeSubselect(r) => {
            if let Some(sub) = r.subquery.as_deref_mut().and_then(|x| x.node.as_mut()) {
                statement(sub, false, f);
            }
        }
        N::JoinExpr(j) => {
            opt(&mut j.larg, ok, f);
            opt(&mut j.rarg, ok, f);
            opt(&mut j.quals, ok, f);
        }
        N::ColumnDef(c) => {
            opt(&mut c.raw_default, ok, f);
            all(&mut c.constraints, ok, f);
        }
        N::Constraint(c) => {
            opt(&mut c.raw_expr, ok, f);
            opt(&mut c.where_clause, ok, f);
        }
        N::IndexElem(e) => opt(&mut e.expr, ok, f),
        N::CommonTableExpr(c) => {
            if let Some(q) = c.ctequery.as_deref_mut().and_then(|x| x.node.as_mut()) {
                statement(q, false, f);
            }
        }
        _ => {}
    }
}

/// Every reference to the table inside the statement's expressions (`li.a`,
/// `public.li.a`, whole rows `li.*` and `li` in index expressions, partial-index
/// WHERE, CHECK constraints, defaults, policies' USING / WITH CHECK) renamed to
/// `shard` (the shard table of a DDL statement, whose relation is renamed so).
pub fn rename_table_references(
    stmt: &mut N,
    (schema, name): (&str, &str),
    columns: &[String],
    shard: &str,
) {
    let mut rename = |n: &mut protobuf::Node, _: bool| {
        let Some(N::ColumnRef(c)) = n.node.as_mut() else {
            return false;
        };
        let names: Vec<Option<String>> = c
            .fields
            .iter()
            .map(|f| match &f.node {
                Some(N::String(s)) => Some(s.sval.clone()),
                _ => None,
            })
            .collect();
        let at = match names.as_slice() {
            // A whole-row reference by the bare name (a column of that name wins).
            [Some(t)] if t == name && !columns.iter().any(|c| c == t) => Some(0),
            [Some(t), _] if t == name => Some(0),
            [Some(s), Some(t), _] if s == schema && t == name => Some(1),
            _ => None,
        };
        if let Some(i) = at {
            c.fields[i] = protobuf::Node {
                node: Some(N::String(protobuf::String {
                    sval: shard.to_string(),
                })),
            };
        }
        false
    };
    let mut each = |x: &mut Option<Box<protobuf::Node>>| {
        if let Some(x) = x.as_deref_mut() {
            expression(x, false, &mut rename);
        }
    };
    match stmt {
        N::IndexStmt(i) => {
            for p in i.index_params.iter_mut() {
                if let Some(N::IndexElem(e)) = p.node.as_mut() {
                    each(&mut e.expr);
                }
            }
            each(&mut i.where_clause);
        }
        N::AlterTableStmt(a) => {
            for c in a.cmds.iter_mut() {
                if let Some(N::AlterTableCmd(cmd)) = c.node.as_mut() {
                    each(&mut cmd.def);
                }
            }
        }
        N::CreatePolicyStmt(p) => {
            each(&mut p.qual);
            each(&mut p.with_check);
        }
        N::AlterPolicyStmt(p) => {
            each(&mut p.qual);
            each(&mut p.with_check);
        }
        _ => {}
    }
}

/// The table qualifier dropped from column references in an `ALTER TABLE`'s CHECK
/// constraints (`li.a`, `public.li.a` become `a`; the same column, as a CHECK sees only
/// its table). The shell needs it: PostgreSQL recurses a CHECK to the shell's read-guard
/// child (an inheritance child of another name), where the qualified form names no
/// table. Returns whether anything changed.
pub fn unqualify_check_columns(stmt: &mut N, (schema, name): (&str, &str)) -> bool {
    let N::AlterTableStmt(a) = stmt else {
        return false;
    };
    let mut changed = false;
    let mut unqualify = |n: &mut protobuf::Node, _: bool| {
        let Some(N::ColumnRef(c)) = n.node.as_mut() else {
            return false;
        };
        let text = |i: usize| match c.fields.get(i).and_then(|f| f.node.as_ref()) {
            Some(N::String(s)) => Some(s.sval.as_str()),
            _ => None,
        };
        let qualifiers = match c.fields.len() {
            2 if text(0) == Some(name) && text(1).is_some() => 1,
            3 if text(0) == Some(schema) && text(1) == Some(name) && text(2).is_some() => 2,
            _ => 0,
        };
        if qualifiers > 0 {
            c.fields.drain(..qualifiers);
            changed = true;
        }
        false
    };
    for c in a.cmds.iter_mut() {
        let Some(N::AlterTableCmd(cmd)) = c.node.as_mut() else {
            continue;
        };
        let constraints: Vec<&mut protobuf::Node> =
            match cmd.def.as_deref_mut().and_then(|d| d.node.as_mut()) {
                Some(N::Constraint(_)) => vec![cmd.def.as_deref_mut().expect("def")],
                Some(N::ColumnDef(d)) => d.constraints.iter_mut().collect(),
                _ => Vec::new(),
            };
        for k in constraints {
            if let Some(N::Constraint(k)) = k.node.as_mut() {
                if k.contype == protobuf::ConstrType::ConstrCheck as i32 {
                    if let Some(e) = k.raw_expr.as_deref_mut() {
                        expression(e, false, &mut unqualify);
                    }
                }
            }
        }
    }
    changed
}
