//! A call of a distributed function (`planner::function_call`): pgshard runs the
//! function's statements itself, in order, each planned by the ladder with the call's
//! arguments in place of `$n`, all in one transaction (the client's block, or one of
//! pgshard's own committed at the call's end, with 2PC where several nodes wrote),
//! then answers as PostgreSQL answers the call (one row, the function's `void`).
//!
//! What is run is read as the client, on its own coordinator-node connection: the
//! function's definition, its EXECUTE privilege (42501 as PostgreSQL). Functions pgshard
//! cannot run this way are refused (0A000): results other than `void`, SECURITY
//! DEFINER, PL/pgSQL bodies with anything but plain SQL statements (no variables,
//! control flow, INTO or exception handlers), statements naming parameters by name.

use super::*;
use crate::planner::function_call::FunctionCallPlan;
use crate::sql::quote::quote_ident;
use serde_json::Value;

impl Session {
    pub(super) async fn function_call(
        &mut self,
        plan: &FunctionCallPlan,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let (statements, answer) = self.function_statements(plan).await?;
        let own = self.begin_own_block().await?;
        let r = self
            .function_body(plan, &statements, answer, params, formats, describe, sink)
            .await;
        let ended = self
            .end_own_block(own, r.is_ok(), params.bind.is_some())
            .await;
        r?;
        ended
    }

    async fn function_body(
        &mut self,
        plan: &FunctionCallPlan,
        statements: &[(Statement, Vec<String>)],
        answer: &str,
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let catalog = self.shared.catalog.snapshot();
        for (body_stmt, arg_types) in statements {
            let Some(node) = body_stmt.node.as_ref() else {
                continue;
            };
            let sql = crate::planner::sql_prepare::with_arguments(node, &plan.args, arg_types)?;
            let stmt = parse::parse(&sql)?.remove(0);
            let inner = self.plan_statement(&stmt, &catalog).await?;
            if let Plan::Unsupported(e) = &inner {
                return Err(e.clone());
            }
            let mut discarded = ResultSink::capturing();
            self.run_as_simple_query(&inner, &stmt, params, &mut discarded, true)
                .await?;
        }
        // The call's own answer, as PostgreSQL gives it.
        let answer = format!(
            "SELECT {answer}::pg_catalog.void AS {}",
            quote_ident(&plan.column)
        );
        let stmt = parse::parse(&answer)?.remove(0);
        self.plan_into(&Plan::Local, &stmt, params, formats, describe, sink)
            .await
    }

    /// The function's statements (each with the SQL types of the function's
    /// arguments), read from its definition as the client sees it, and the call's
    /// answer: `''` from PL/pgSQL, NULL from SQL, NULL without running anything from a
    /// STRICT function given a NULL.
    async fn function_statements(
        &mut self,
        plan: &FunctionCallPlan,
    ) -> PgResult<(Vec<(Statement, Vec<String>)>, &'static str)> {
        let sql = format!(
            "SELECT l.lanname::text, p.prosrc, (p.prorettype = 'pg_catalog.void'::pg_catalog.regtype)::text, \
                    p.prosecdef::text, pg_catalog.has_function_privilege(p.oid, 'EXECUTE')::text, \
                    ARRAY(SELECT pg_catalog.format_type(a.t, NULL) \
                          FROM unnest(p.proargtypes) WITH ORDINALITY AS a(t, i) ORDER BY a.i)::text, \
                    coalesce(p.proargnames, '{{}}')::text, \
                    CASE WHEN l.lanname = 'plpgsql' THEN pg_catalog.pg_get_functiondef(p.oid) END, \
                    p.proisstrict::text \
             FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang \
             WHERE p.oid = {}",
            plan.oid
        );
        let rows = self.home_rows(&sql).await?;
        let Some(row) = rows.into_iter().next() else {
            return Err(PgError::new(
                sqlstate::UNDEFINED_FUNCTION,
                format!("function {} does not exist", plan.name),
            ));
        };
        let text = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
        let refuse = |why: &str| {
            Err(PgError::not_supported(format!(
                "pgshard cannot run the distributed function {}: {why}",
                plan.name
            )))
        };
        if text(4) != "true" {
            return Err(PgError::new(
                sqlstate::INSUFFICIENT_PRIVILEGE,
                format!("permission denied for function {}", plan.name),
            ));
        }
        if text(2) != "true" {
            return refuse("it returns a value (only functions returning void are run by pgshard)");
        }
        if text(3) == "true" {
            return refuse("it is SECURITY DEFINER");
        }
        if text(8) == "true" && plan.args.iter().any(is_null) {
            return Ok((Vec::new(), "NULL"));
        }
        let answer = if text(0) == "plpgsql" { "''" } else { "NULL" };
        let arg_types = text_array(&text(5));
        let arg_names = text_array(&text(6));
        let bodies: Vec<String> = match text(0).as_str() {
            "sql" => vec![text(1)],
            "plpgsql" => match plpgsql_statements(&text(7)) {
                Some(s) => s,
                None => {
                    return refuse(
                        "its PL/pgSQL body has more than plain SQL statements (variables, control flow, INTO, exception handlers)",
                    )
                }
            },
            other => return refuse(&format!("it is written in {other}")),
        };
        let mut out = Vec::new();
        for body in bodies {
            for stmt in parse::parse(&body)? {
                if names_an_argument(&stmt, &arg_names) {
                    return refuse("its statements name parameters by name (write $1, $2, ...)");
                }
                out.push((stmt, arg_types.clone()));
            }
        }
        Ok((out, answer))
    }
}

/// A NULL constant argument.
fn is_null(arg: &pg_query::protobuf::Node) -> bool {
    match arg.node.as_ref() {
        Some(pg_query::protobuf::node::Node::AConst(c)) => c.isnull,
        Some(pg_query::protobuf::node::Node::TypeCast(tc)) => {
            tc.arg.as_deref().is_some_and(is_null)
        }
        _ => false,
    }
}

/// The SQL statements of a PL/pgSQL function (its `CREATE FUNCTION` text) whose body
/// is only plain SQL statements and a final bare RETURN; None otherwise.
fn plpgsql_statements(definition: &str) -> Option<Vec<String>> {
    let parsed = pg_query::parse_plpgsql(definition).ok()?;
    let function = parsed.get(0)?.get("PLpgSQL_function")?;
    let block = function.get("action")?.get("PLpgSQL_stmt_block")?;
    if block.get("exceptions").is_some() {
        return None;
    }
    let body = block.get("body")?.as_array()?;
    let mut out = Vec::new();
    for (i, stmt) in body.iter().enumerate() {
        let Value::Object(m) = stmt else {
            return None;
        };
        let (kind, inner) = m.iter().next()?;
        match kind.as_str() {
            "PLpgSQL_stmt_execsql" => {
                if inner.get("into").is_some() {
                    return None;
                }
                let query = inner.get("sqlstmt")?.get("PLpgSQL_expr")?.get("query")?;
                out.push(query.as_str()?.to_string());
            }
            "PLpgSQL_stmt_return" if i + 1 == body.len() && inner.get("expr").is_none() => {}
            _ => return None,
        }
    }
    Some(out)
}

/// A PostgreSQL text array's elements (`{a,"b c"}`), unquoted.
fn text_array(text: &str) -> Vec<String> {
    let inner = text.trim().trim_start_matches('{').trim_end_matches('}');
    if inner.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' if quoted => cur.extend(chars.next()),
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// Whether `stmt` has an unqualified column reference spelled as one of the
/// function's argument names (PL/pgSQL would read it as the argument).
fn names_an_argument(stmt: &Statement, arg_names: &[String]) -> bool {
    let Some(node) = stmt.node.as_ref() else {
        return false;
    };
    node.nodes().into_iter().any(|(n, _, _, _)| match n {
        pg_query::NodeRef::ColumnRef(c) if c.fields.len() == 1 => {
            crate::sql::parse::string_items(&c.fields)
                .first()
                .is_some_and(|f| arg_names.iter().any(|a| !a.is_empty() && a == f))
        }
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_plpgsql_bodies_give_their_statements() {
        let def = "CREATE OR REPLACE FUNCTION public.delete_campaign(company_id integer, campaign_id integer)\n \
                   RETURNS void\n LANGUAGE plpgsql\nAS $function$ BEGIN \
                   DELETE FROM campaigns WHERE id = $2 AND campaigns.company_id = $1; \
                   DELETE FROM ads WHERE ads.campaign_id = $2 AND ads.company_id = $1; \
                   END; $function$\n";
        assert_eq!(
            plpgsql_statements(def).unwrap(),
            vec![
                "DELETE FROM campaigns WHERE id = $2 AND campaigns.company_id = $1",
                "DELETE FROM ads WHERE ads.campaign_id = $2 AND ads.company_id = $1"
            ]
        );
        let branching = "CREATE FUNCTION f(a int) RETURNS void LANGUAGE plpgsql AS $$ \
                         BEGIN IF a > 1 THEN DELETE FROM t; END IF; END $$";
        assert_eq!(plpgsql_statements(branching), None);
        let into = "CREATE FUNCTION f(a int) RETURNS void LANGUAGE plpgsql AS $$ \
                    DECLARE x int; BEGIN SELECT 1 INTO x; END $$";
        assert_eq!(plpgsql_statements(into), None);
    }

    #[test]
    fn text_arrays() {
        assert_eq!(
            text_array("{integer,\"character varying(3)\"}"),
            vec!["integer", "character varying(3)"]
        );
        assert!(text_array("{}").is_empty());
    }
}
