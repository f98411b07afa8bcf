//! SQL-level `PREPARE name [(types)] AS <statement on distributed tables>` and
//! `EXECUTE name(args)` of such a statement. PostgreSQL keeps SQL and protocol-level
//! prepared statements in one namespace, and so does pgshard: PREPARE prepares the
//! statement as a protocol Parse with that name would (`executor::session::prepare`:
//! planned, described on the coordinator node), so Bind, `EXECUTE`, `DEALLOCATE` and
//! `DISCARD ALL` all find it. `EXECUTE` of a statement pgshard holds runs it with each
//! argument in place of its parameter, cast to the parameter's type (constants only:
//! PostgreSQL evaluates an argument once, a spliced expression would be evaluated per
//! row). PREPARE of a statement on local tables, and EXECUTE of one, still go to the
//! coordinator node as written.

use super::Plan;
use crate::error::{sqlstate, PgError, PgResult};
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self};
use std::sync::Arc;

#[derive(Debug)]
pub struct PreparePlan {
    pub name: String,
    /// The prepared statement, deparsed.
    pub query: String,
    /// `NULL::type, ...` for the declared parameter types (deparsed): described on
    /// the coordinator node, it gives their OIDs. None without declared types.
    pub declared: Option<String>,
}

#[derive(Debug)]
pub struct ExecutePlan {
    pub name: String,
    /// The arguments, each a constant expression.
    pub args: Vec<protobuf::Node>,
}

/// Plans `PREPARE` of a statement reading or writing distributed tables.
pub fn plan_prepare(p: &protobuf::PrepareStmt) -> PgResult<Plan> {
    let Some(query) = p.query.as_deref().and_then(|q| q.node.as_ref()) else {
        return Ok(Plan::Unsupported(PgError::not_supported(
            "pgshard could not read this PREPARE",
        )));
    };
    let query = query
        .deparse(Default::default())
        .map_err(|e| PgError::internal(format!("PREPARE {}: {e}", p.name)))?;
    let declared = if p.argtypes.is_empty() {
        None
    } else {
        let targets = p
            .argtypes
            .iter()
            .map(|t| match t.node.as_ref() {
                Some(N::TypeName(tn)) => Ok(null_of_type(tn.clone())),
                _ => Err(PgError::not_supported(
                    "pgshard could not read this PREPARE's types",
                )),
            })
            .collect::<PgResult<Vec<_>>>()?;
        let select = protobuf::SelectStmt {
            target_list: targets,
            limit_option: protobuf::LimitOption::Default as i32,
            op: protobuf::SetOperation::SetopNone as i32,
            ..Default::default()
        };
        Some(
            N::SelectStmt(Box::new(select))
                .deparse(Default::default())
                .map_err(|e| PgError::internal(format!("PREPARE {} types: {e}", p.name)))?,
        )
    };
    Ok(Plan::SqlPrepare(Arc::new(PreparePlan {
        name: p.name.clone(),
        query,
        declared,
    })))
}

/// `NULL::type` as a select-list entry.
fn null_of_type(type_name: protobuf::TypeName) -> protobuf::Node {
    let cast = protobuf::Node {
        node: Some(N::TypeCast(Box::new(protobuf::TypeCast {
            arg: Some(Box::new(protobuf::Node {
                node: Some(N::AConst(protobuf::AConst {
                    isnull: true,
                    ..Default::default()
                })),
            })),
            type_name: Some(type_name),
            location: -1,
        }))),
    };
    protobuf::Node {
        node: Some(N::ResTarget(Box::new(protobuf::ResTarget {
            val: Some(Box::new(cast)),
            location: -1,
            ..Default::default()
        }))),
    }
}

/// Plans `EXECUTE name(args)` of a statement pgshard holds.
pub fn plan_execute(e: &protobuf::ExecuteStmt) -> Plan {
    for a in &e.params {
        if !is_constant(a) {
            return Plan::Unsupported(PgError::not_supported(format!(
                "pgshard supports only constants as the arguments of EXECUTE {} yet",
                e.name
            )));
        }
    }
    Plan::SqlExecute(Arc::new(ExecutePlan {
        name: e.name.clone(),
        args: e.params.clone(),
    }))
}

pub(super) fn is_constant(n: &protobuf::Node) -> bool {
    match n.node.as_ref() {
        Some(N::AConst(_)) => true,
        Some(N::TypeCast(tc)) => tc.arg.as_deref().is_some_and(is_constant),
        Some(N::AExpr(e)) if e.lexpr.is_none() => e.rexpr.as_deref().is_some_and(is_constant),
        _ => false,
    }
}

/// The statement `stmt` with each parameter `$n` replaced by `CAST(args[n-1] AS
/// types[n-1])` (`types`: SQL type names as `format_type` writes them), deparsed.
pub fn with_arguments(stmt: &N, args: &[protobuf::Node], types: &[String]) -> PgResult<String> {
    if args.len() != types.len() {
        return Err(PgError::new(
            sqlstate::SYNTAX_ERROR,
            format!(
                "wrong number of parameters for prepared statement\nDETAIL: Expected {} parameters but got {}.",
                types.len(),
                args.len()
            ),
        ));
    }
    let mut type_names = Vec::new();
    for t in types {
        let sql = format!("SELECT NULL::{t}");
        let tree = crate::sql::parse::first_tree(&sql, "a parameter's type")?;
        let tn = match tree.node {
            Some(N::SelectStmt(s)) => s.target_list.first().and_then(|r| match r.node.as_ref() {
                Some(N::ResTarget(rt)) => match rt.val.as_deref().and_then(|v| v.node.as_ref()) {
                    Some(N::TypeCast(tc)) => tc.type_name.clone(),
                    _ => None,
                },
                _ => None,
            }),
            _ => None,
        };
        type_names.push(tn.ok_or_else(|| PgError::internal(format!("type name {t}")))?);
    }
    let mut node = stmt.clone();
    crate::sql::walk::statement(&mut node, true, &mut |n, _| {
        if let Some(N::ParamRef(p)) = n.node.as_ref() {
            let i = p.number as usize;
            if i >= 1 && i <= args.len() {
                n.node = Some(N::TypeCast(Box::new(protobuf::TypeCast {
                    arg: Some(Box::new(args[i - 1].clone())),
                    type_name: Some(type_names[i - 1].clone()),
                    location: -1,
                })));
            }
            return true;
        }
        false
    });
    node.deparse(Default::default())
        .map_err(|e| PgError::internal(format!("EXECUTE: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_replace_parameters_cast_to_their_types() {
        let tree = crate::sql::parse::first_tree("SELECT * FROM t WHERE k = $1 AND v > $2", "test")
            .unwrap();
        let args: Vec<protobuf::Node> = ["SELECT 5", "SELECT 'x''y'"]
            .iter()
            .map(
                |s| match crate::sql::parse::first_tree(s, "a").unwrap().node {
                    Some(N::SelectStmt(s)) => match s.target_list[0].node.as_ref() {
                        Some(N::ResTarget(rt)) => (**rt.val.as_ref().unwrap()).clone(),
                        _ => unreachable!(),
                    },
                    _ => unreachable!(),
                },
            )
            .collect();
        let sql = with_arguments(
            tree.node.as_ref().unwrap(),
            &args,
            &["integer".into(), "character varying(3)".into()],
        )
        .unwrap();
        assert!(!sql.contains('$'), "{sql}");
        assert!(sql.contains("'x''y'"), "{sql}");
    }
}
