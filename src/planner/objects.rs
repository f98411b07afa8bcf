//! DDL on the objects distributed tables can depend on (Citus's object propagation,
//! issue 18 item 6): once the cluster has a distributed table, `CREATE / ALTER / DROP`
//! of types (enum, composite, range), domains and collations, `ALTER / DROP` of
//! functions and procedures, `CREATE OR REPLACE FUNCTION`, and `DROP SCHEMA` run on the
//! coordinator node as the caller, then as written on every worker, in the session's
//! block (pgshard's own in autocommit), one 2PC; a worker where the object is missing
//! skips it (`commands::privileges::is_missing_object`). So the shards keep the same
//! types as their shell, and a drop that cascades removes the shards' columns or the
//! shards themselves in the same transaction as the shell's (the coordinator node's
//! `sql_drop` trigger deletes the catalog rows: `catalog::guard`).
//!
//! The plan is a [`GrantPlan`] without tables: its executor does exactly this.
//! Objects made before any table was distributed reach the workers as dependencies
//! (`commands::dependencies`) when a table using them is distributed.

use super::security::GrantPlan;
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self, ObjectType};

fn is_propagated_type(t: i32) -> bool {
    matches!(
        ObjectType::try_from(t).unwrap_or(ObjectType::Undefined),
        ObjectType::ObjectType
            | ObjectType::ObjectDomain
            | ObjectType::ObjectCollation
            | ObjectType::ObjectFunction
            | ObjectType::ObjectProcedure
            | ObjectType::ObjectRoutine
            | ObjectType::ObjectDomconstraint
            | ObjectType::ObjectAttribute
    )
}

/// The statement's tag, whether it may drop distributed tables by cascade; `None`
/// when the statement is not object DDL that reaches the workers.
fn classify(node: &N) -> Option<(&'static str, bool)> {
    let cascade = |b: i32| b == protobuf::DropBehavior::DropCascade as i32;
    Some(match node {
        N::CreateEnumStmt(_) | N::CompositeTypeStmt(_) | N::CreateRangeStmt(_) => {
            ("CREATE TYPE", false)
        }
        N::CreateDomainStmt(_) => ("CREATE DOMAIN", false),
        N::DefineStmt(d) if d.kind == ObjectType::ObjectCollation as i32 => {
            ("CREATE COLLATION", false)
        }
        N::AlterEnumStmt(_) => ("ALTER TYPE", false),
        N::AlterDomainStmt(d) => ("ALTER DOMAIN", cascade(d.behavior)),
        N::AlterTableStmt(a) if a.objtype == ObjectType::ObjectType as i32 => ("ALTER TYPE", true),
        N::RenameStmt(r) if is_propagated_type(r.rename_type) => ("ALTER", false),
        N::AlterOwnerStmt(o) if is_propagated_type(o.object_type) => ("ALTER", false),
        N::AlterObjectSchemaStmt(o) if is_propagated_type(o.object_type) => ("ALTER", false),
        N::AlterFunctionStmt(_) => ("ALTER FUNCTION", false),
        N::CreateFunctionStmt(f) if f.replace => (
            if f.is_procedure {
                "CREATE PROCEDURE"
            } else {
                "CREATE FUNCTION"
            },
            false,
        ),
        N::DropStmt(d)
            if is_propagated_type(d.remove_type)
                || d.remove_type == ObjectType::ObjectSchema as i32 =>
        {
            ("DROP", cascade(d.behavior))
        }
        _ => return None,
    })
}

/// Plans object DDL for every worker (see the module comment).
pub fn plan_objects(node: &N, text: &str) -> Option<GrantPlan> {
    let (tag, drops_tables) = classify(node)?;
    Some(GrantPlan {
        text: text.to_string(),
        stmt: protobuf::GrantStmt::default(),
        tables: Vec::new(),
        worker_statements: vec![text.to_string()],
        grantees: Vec::new(),
        tag,
        drops_tables,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(sql: &str) -> Option<GrantPlan> {
        let node = crate::sql::parse::first_statement_for_tests(sql);
        plan_objects(&node, sql)
    }

    #[test]
    fn type_domain_collation_and_schema_ddl_reach_the_workers() {
        for sql in [
            "CREATE TYPE mood AS ENUM ('a', 'b')",
            "CREATE TYPE pair AS (a int, b text)",
            "CREATE TYPE r AS RANGE (subtype = int4)",
            "CREATE DOMAIN posint AS int CHECK (VALUE > 0)",
            "CREATE COLLATION ci (provider = icu, locale = 'und', deterministic = false)",
            "ALTER TYPE mood ADD VALUE 'c'",
            "ALTER TYPE mood RENAME VALUE 'a' TO 'aa'",
            "ALTER TYPE mood RENAME TO feeling",
            "ALTER DOMAIN posint ADD CONSTRAINT small CHECK (VALUE < 100)",
            "ALTER TYPE pair ADD ATTRIBUTE c int",
            "CREATE OR REPLACE FUNCTION f() RETURNS int LANGUAGE sql AS 'select 1'",
            "DROP FUNCTION f()",
            "DROP TYPE mood CASCADE",
            "DROP SCHEMA sc CASCADE",
        ] {
            let p = plan(sql).unwrap_or_else(|| panic!("{sql}"));
            assert_eq!(p.worker_statements, vec![sql.to_string()]);
        }
        assert!(plan("DROP SCHEMA sc CASCADE").unwrap().drops_tables);
        assert!(!plan("DROP SCHEMA sc").unwrap().drops_tables);
        for sql in [
            "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'select 1'",
            "CREATE TABLE t (k int)",
            "DROP TABLE t",
            "CREATE SCHEMA sc",
            "ALTER TABLE t ADD COLUMN c int",
        ] {
            assert!(plan(sql).is_none(), "{sql}");
        }
    }
}
