//! A call of a function distributed with `create_distributed_function`, alone in its
//! statement (`SELECT f(5, 45)`, as Citus's tutorials call them): pgshard runs the
//! function's statements itself (`executor::session::function_call`), since the
//! function body run by the coordinator node would meet the shells of the tables it
//! touches. The arguments must be constants; everything else stays with the ladder.

use super::sql_prepare::is_constant;
use super::Plan;
use crate::catalog::{Catalog, Oid};
use crate::error::PgError;
use pg_query::protobuf::{self, node::Node as N};
use std::sync::Arc;

#[derive(Debug)]
pub struct FunctionCallPlan {
    pub oid: Oid,
    pub name: String,
    /// The result column's name: the target's alias, or the function's name.
    pub column: String,
    /// The call's arguments, constants.
    pub args: Vec<protobuf::Node>,
}

/// `SELECT f(args) [AS c]` with nothing else, `f` a distributed function of the
/// catalog (by name, schema when given, and argument count); None when not such a call.
pub fn plan_function_call(select: &protobuf::SelectStmt, catalog: &Catalog) -> Option<Plan> {
    if catalog.functions.is_empty()
        || select.target_list.len() != 1
        || !select.from_clause.is_empty()
        || select.where_clause.is_some()
        || !select.group_clause.is_empty()
        || select.having_clause.is_some()
        || !select.sort_clause.is_empty()
        || select.limit_count.is_some()
        || select.limit_offset.is_some()
        || select.with_clause.is_some()
        || !select.distinct_clause.is_empty()
        || select.into_clause.is_some()
        || !select.values_lists.is_empty()
        || !select.locking_clause.is_empty()
        || select.larg.is_some()
    {
        return None;
    }
    let Some(N::ResTarget(target)) = select.target_list[0].node.as_ref() else {
        return None;
    };
    let Some(N::FuncCall(call)) = target.val.as_deref().and_then(|v| v.node.as_ref()) else {
        return None;
    };
    if call.agg_star
        || call.agg_distinct
        || call.func_variadic
        || call.over.is_some()
        || call.agg_filter.is_some()
        || !call.agg_order.is_empty()
    {
        return None;
    }
    let names = crate::sql::parse::string_items(&call.funcname);
    let (schema, name) = match names.as_slice() {
        [name] => (None, *name),
        [schema, name] => (Some(*schema), *name),
        _ => return None,
    };
    let mut found = catalog.functions.iter().filter(|f| {
        f.name == name
            && schema.map_or(true, |s| s == f.schema)
            && f.nargs as usize == call.args.len()
    });
    let function = found.next()?;
    if found.next().is_some() {
        return None;
    }
    if !call.args.iter().all(is_constant) {
        return Some(Plan::Unsupported(PgError::not_supported(format!(
            "pgshard supports only constants as the arguments of the distributed function {name} yet"
        ))));
    }
    Some(Plan::FunctionCall(Arc::new(FunctionCallPlan {
        oid: function.oid,
        name: function.name.clone(),
        column: if target.name.is_empty() {
            function.name.clone()
        } else {
            target.name.clone()
        },
        args: call.args.clone(),
    })))
}
