//! The catalog views that show Citus's settings and extension: `pg_settings` (and
//! `SHOW ALL`, which lists the same) hides placeholder variables, so a statement
//! reading it reads instead `pg_settings` with a row per `citus.*` setting, the value
//! as the client's own backend holds it; `pg_extension` gets a `citus` row (pgshard
//! answers for the extension: the nodes are plain PostgreSQL). The rewrite is on the
//! parse tree: each such table reference becomes a subquery of the same name. It is
//! the one rewrite of views pgshard answers: the caller may add others (Citus's
//! statistics views, `stats::views`), each name with its body.

use super::{Context, Kind, SETTINGS};
use crate::sql::quote::quote_literal;
use pg_query::protobuf::{self, node::Node as N};

/// The Citus version whose API pgshard follows, as `citus_version()` names it.
pub const CITUS_VERSION: &str = "12.1.5";
/// The extension version `pg_extension.extversion` shows.
pub const EXTENSION_VERSION: &str = "12.1-1";

/// `citus_version()`: Citus's format, naming pgshard as the compiler.
pub fn citus_version() -> String {
    format!(
        "Citus {CITUS_VERSION} on {}-pc-linux-gnu, compiled by pgshard {} (rustc), 64-bit",
        std::env::consts::ARCH,
        env!("CARGO_PKG_VERSION")
    )
}

/// Whether the text may read a view this module extends (a cheap test before parsing).
pub fn may_need_rewrite(text: &str) -> bool {
    let has = |word: &str| {
        text.as_bytes()
            .windows(word.len())
            .any(|w| w.eq_ignore_ascii_case(word.as_bytes()))
    };
    has("pg_settings") || has("pg_extension") || has("show")
}

/// The statement with `pg_settings` / `pg_extension` references (and `SHOW ALL`)
/// made to show Citus's rows, and any view `extra` has a body for replaced by it;
/// None when it has none.
pub fn rewrite(node: &N, extra: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    if let N::VariableShowStmt(v) = node {
        if v.name.eq_ignore_ascii_case("all") {
            return Some(show_all_sql());
        }
        return None;
    }
    let mut node = node.clone();
    let mut changed = false;
    crate::sql::walk::statement(&mut node, false, &mut |n, _| {
        let Some(N::RangeVar(rv)) = &n.node else {
            return false;
        };
        if !(rv.schemaname.is_empty() || rv.schemaname == "pg_catalog") || !rv.inh {
            return false;
        }
        let body = match rv.relname.as_str() {
            "pg_settings" => pg_settings_sql(),
            "pg_extension" => pg_extension_sql(),
            other => match extra(other) {
                Some(body) => body,
                None => return false,
            },
        };
        let alias = rv.alias.clone().unwrap_or(protobuf::Alias {
            aliasname: rv.relname.clone(),
            colnames: Vec::new(),
        });
        let Some(subquery) = parse_select(&body) else {
            return false;
        };
        n.node = Some(N::RangeSubselect(Box::new(protobuf::RangeSubselect {
            lateral: false,
            subquery: Some(Box::new(subquery)),
            alias: Some(alias),
        })));
        changed = true;
        true
    });
    if !changed {
        return None;
    }
    node.deparse(Default::default()).ok()
}

fn parse_select(sql: &str) -> Option<protobuf::Node> {
    let tree = pg_query::parse(sql, 0).ok()?;
    tree.protobuf.stmts.into_iter().next()?.stmt.map(|b| *b)
}

/// `pg_settings` with a row per `citus.*` setting. Their values are read from the
/// backend the statement runs on, where every one is a placeholder; `source` is
/// `default` while a value is its default, `session` otherwise.
pub fn pg_settings_sql() -> String {
    let mut rows = Vec::new();
    for s in SETTINGS {
        let (vartype, min, max, enumvals, unit) = match s.kind {
            Kind::Bool => ("bool", None, None, None, None),
            Kind::Int { min, max, unit } => (
                "integer",
                Some(min.to_string()),
                Some(max.to_string()),
                None,
                unit,
            ),
            Kind::Real { min, max } => (
                "real",
                Some(min.to_string()),
                Some(max.to_string()),
                None,
                None,
            ),
            Kind::Enum(values) => ("enum", None, None, Some(values), None),
            Kind::Str => ("string", None, None, None, None),
        };
        let lit = |v: Option<&str>| v.map_or("NULL".to_string(), quote_literal);
        let enumvals = match enumvals {
            Some(values) => {
                let items: Vec<String> = values.iter().map(|v| quote_literal(v)).collect();
                format!("ARRAY[{}]::pg_catalog.text[]", items.join(", "))
            }
            None => "NULL::pg_catalog.text[]".to_string(),
        };
        rows.push(format!(
            "({}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
            quote_literal(s.name),
            lit(unit),
            quote_literal(s.description),
            quote_literal(match s.context {
                Context::User => "user",
                Context::Superuser => "superuser",
                Context::Sighup => "sighup",
                Context::Postmaster => "postmaster",
            }),
            quote_literal(vartype),
            lit(min.as_deref()),
            lit(max.as_deref()),
            enumvals,
            quote_literal(&s.raw(s.default)),
            lit(unit.map(|_| s.default)),
        ));
    }
    // The raw value (kB, ms) of a shown one with a unit.
    let raw = "CASE WHEN c.unit IS NULL OR v.shown ~ '^-?[0-9]+$' THEN v.shown \
               WHEN c.unit = 'kB' THEN (pg_catalog.pg_size_bytes(v.shown) / 1024)::pg_catalog.text \
               ELSE (pg_catalog.date_part('epoch', v.shown::pg_catalog.interval) * 1000)::pg_catalog.int8::pg_catalog.text END";
    format!(
        "SELECT * FROM pg_catalog.pg_settings UNION ALL \
         SELECT c.name, {raw}, c.unit, 'Customized Options'::pg_catalog.text, c.short_desc, \
                NULL::pg_catalog.text, c.context, c.vartype, \
                CASE WHEN v.shown = coalesce(c.boot_shown, c.boot_val) THEN 'default' ELSE 'session' END, \
                c.min_val, c.max_val, c.enumvals, c.boot_val, c.boot_val, \
                NULL::pg_catalog.text, NULL::pg_catalog.int4, false \
         FROM (VALUES {}) AS c(name, unit, short_desc, context, vartype, min_val, max_val, enumvals, boot_val, boot_shown), \
              LATERAL (SELECT pg_catalog.current_setting(c.name, true) AS shown) AS v",
        rows.join(", ")
    )
}

/// `SHOW ALL`: name, setting and description of every setting, Citus's included, in
/// PostgreSQL's order.
pub fn show_all_sql() -> String {
    format!(
        "SELECT s.name, s.setting, s.description FROM (\
           SELECT name, pg_catalog.current_setting(name) AS setting, short_desc AS description \
           FROM ({}) AS p) AS s ORDER BY pg_catalog.lower(s.name) COLLATE \"C\"",
        pg_settings_sql()
    )
}

/// `pg_extension` with a `citus` row when the node has none.
pub fn pg_extension_sql() -> String {
    format!(
        "SELECT * FROM pg_catalog.pg_extension UNION ALL \
         SELECT 0::pg_catalog.oid, 'citus'::pg_catalog.name, 10::pg_catalog.oid, \
                11::pg_catalog.oid, false, {}::pg_catalog.text, \
                NULL::pg_catalog.regclass[], NULL::pg_catalog.text[] \
         WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus')",
        quote_literal(EXTENSION_VERSION)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> Option<String> {
        let node = crate::sql::parse::first_statement_for_tests(sql);
        rewrite(&node, &|_| None)
    }

    #[test]
    fn references_to_the_views_become_subqueries_of_the_same_name() {
        let r =
            rewritten("SELECT setting FROM pg_settings WHERE name = 'citus.shard_count'").unwrap();
        assert!(r.contains(") pg_settings WHERE"), "{r}");
        assert!(r.contains("'citus.shard_count'"), "{r}");
        let r = rewritten("SELECT e.extversion FROM pg_catalog.pg_extension e").unwrap();
        assert!(r.contains(") e"), "{r}");
        assert!(rewritten("SELECT * FROM pg_class").is_none());
        assert!(rewritten("SHOW work_mem").is_none());
        assert!(rewritten("SHOW ALL").unwrap().starts_with("SELECT s.name"));
        // The generated SQL parses.
        pg_query::parse(&show_all_sql(), 0).unwrap();
        assert!(citus_version().starts_with("Citus 12.1.5 on "));
    }
}
