//! Which relation an unqualified table name stands for, as PostgreSQL decides it: through
//! the session's `search_path` (`$user`, `pg_temp` first, `pg_catalog` implied), where a
//! local or temporary table of the same name hides a distributed one further down the path.
//!
//! The planner stays pure: before planning, the session looks up the unqualified names
//! that could matter (those a distributed table carries and the statement's text mentions,
//! [`Names::candidates`]) on the client's own coordinator-node connection with
//! `to_regclass`, and gives the answers to the planner as a [`Names`]. Every planner step
//! resolves table references through [`Names::resolve`]; a schema-qualified name needs no
//! lookup (the catalog holds each table's schema).

use super::views::ViewDef;
use crate::catalog::{Catalog, DistTable, Oid};
use std::collections::HashMap;
use std::sync::Arc;

/// The answers for one statement: unqualified name → the OID of the relation PostgreSQL
/// finds for it with the session's path (None: no relation of that name on the path).
#[derive(Debug, Clone, Default)]
pub struct Names {
    found: HashMap<String, Option<Oid>>,
    /// The views the statement may read (`planner::views`), by the name as written
    /// (schema if qualified, name).
    views: HashMap<(Option<String>, String), Arc<ViewDef>>,
}

impl Names {
    /// The names a distributed table carries that `text` mentions as an identifier
    /// (quoted or not, any case): the only unqualified names that may resolve to a
    /// distributed table. Others need no lookup.
    pub fn candidates<'c>(text: &str, catalog: &'c Catalog) -> Vec<&'c str> {
        catalog
            .tables_by_name
            .keys()
            .map(String::as_str)
            .filter(|n| crate::sql::parse::count_mentions(text, n) > 0)
            .collect()
    }

    /// The answers of the session's lookups.
    pub fn from_lookups(found: impl IntoIterator<Item = (String, Option<Oid>)>) -> Names {
        Names {
            found: found.into_iter().collect(),
            views: HashMap::new(),
        }
    }

    /// These answers with the views the session found for names as written
    /// (schema if qualified, name).
    pub fn with_views(
        mut self,
        views: impl IntoIterator<Item = ((Option<String>, String), Arc<ViewDef>)>,
    ) -> Names {
        self.views.extend(views);
        self
    }

    /// Whether any name of the statement is a view (the views step has work).
    pub fn has_views(&self) -> bool {
        !self.views.is_empty()
    }

    /// The view a reference names (`schema` as written), if the session found one.
    pub fn view(&self, schema: Option<&str>, name: &str) -> Option<&Arc<ViewDef>> {
        self.views
            .get(&(schema.map(str::to_string), name.to_string()))
    }

    /// The answers PostgreSQL would give with `path` as search path when the only
    /// tables of the candidate names are the distributed ones (planner tests, tools
    /// that have no session).
    pub fn on_path(catalog: &Catalog, path: &[&str]) -> Names {
        let found = catalog.tables_by_name.iter().map(|(name, tables)| {
            let oid = path
                .iter()
                .find_map(|s| tables.iter().find(|t| t.schema == *s))
                .map(|t| t.relid);
            (name.clone(), oid)
        });
        Names::from_lookups(found)
    }

    /// Whether `name` was looked up.
    pub fn knows(&self, name: &str) -> bool {
        self.found.contains_key(name)
    }

    /// The distributed table a reference stands for (`schema` as written, None when
    /// unqualified), or None when it names another relation or none.
    pub fn resolve<'c>(
        &self,
        catalog: &'c Catalog,
        schema: Option<&str>,
        name: &str,
    ) -> Option<&'c Arc<DistTable>> {
        match schema {
            Some(s) => catalog.qualified(s, name),
            None => {
                let oid = (*self.found.get(name)?)?;
                catalog.tables_by_oid.get(&oid)
            }
        }
    }
}

/// Whether running `stmt` may change what unqualified names stand for in the session:
/// the path (`SET [LOCAL] search_path`, `set_config`, `RESET ALL`), the role `$user`
/// expands to (`SET ROLE`, `SET SESSION AUTHORIZATION`), temporary tables (`DISCARD`),
/// or the relations themselves (any DDL or utility statement, `CALL`, `DO`).
/// Queries, DML and transaction control do not (a function called by one that makes
/// tables is the known gap).
pub fn may_change_names(stmt: &crate::sql::parse::Statement) -> bool {
    use pg_query::protobuf::node::Node as N;
    use pg_query::protobuf::VariableSetKind;
    let Some(node) = &stmt.node else {
        return false;
    };
    // Checked at each execution of a prepared statement: no allocation.
    let calls_set_config = || {
        stmt.text
            .as_bytes()
            .windows(b"set_config".len())
            .any(|w| w.eq_ignore_ascii_case(b"set_config"))
    };
    match node {
        N::VariableSetStmt(v) => {
            v.kind == VariableSetKind::VarResetAll as i32
                || matches!(
                    v.name.to_ascii_lowercase().as_str(),
                    "search_path" | "role" | "session_authorization"
                )
        }
        N::SelectStmt(_)
        | N::InsertStmt(_)
        | N::UpdateStmt(_)
        | N::DeleteStmt(_)
        | N::CopyStmt(_)
        | N::ExplainStmt(_)
        | N::DeclareCursorStmt(_)
        | N::ExecuteStmt(_) => calls_set_config(),
        N::TransactionStmt(_)
        | N::VariableShowStmt(_)
        | N::FetchStmt(_)
        | N::ClosePortalStmt(_)
        | N::ListenStmt(_)
        | N::UnlistenStmt(_)
        | N::NotifyStmt(_)
        | N::LockStmt(_)
        | N::VacuumStmt(_)
        | N::TruncateStmt(_)
        | N::PrepareStmt(_)
        | N::DeallocateStmt(_)
        | N::CheckPointStmt(_) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::PartitionMethod;
    use crate::sharding::ranges::ShardIndexer;

    fn table(relid: Oid, schema: &str, name: &str) -> DistTable {
        DistTable {
            relid,
            schema: schema.into(),
            name: name.into(),
            method: PartitionMethod::Reference,
            dist_column: None,
            colocation_id: 0,
            shards: Vec::new(),
            columns: Vec::new(),
            indexes: Vec::new(),
            sequence_columns: Vec::new(),
            indexer: ShardIndexer::for_intervals::<crate::catalog::ShardInterval>(&[]),
        }
    }

    #[test]
    fn unqualified_names_follow_the_lookups() {
        let mut c = Catalog::default();
        c.add_table(table(10, "s2", "dup"));
        c.add_table(table(11, "public", "d"));
        // `dup` found as a local table (another OID), `d` as the distributed one.
        let names = Names::from_lookups([("dup".to_string(), Some(99)), ("d".into(), Some(11))]);
        assert!(names.resolve(&c, None, "dup").is_none());
        assert_eq!(names.resolve(&c, None, "d").unwrap().relid, 11);
        assert_eq!(names.resolve(&c, Some("s2"), "dup").unwrap().relid, 10);
        assert!(names.resolve(&c, Some("s1"), "d").is_none());
        // Never looked up: not a distributed table's name.
        assert!(names.resolve(&c, None, "other").is_none());
    }

    #[test]
    fn statements_that_may_change_names() {
        let changes = |sql: &str| may_change_names(&crate::sql::parse::parse(sql).unwrap()[0]);
        assert!(changes("set search_path = s2, public"));
        assert!(changes("set local search_path to s1"));
        assert!(changes("reset all"));
        assert!(changes("set role app"));
        assert!(changes("create temp table dup (k int)"));
        assert!(changes("alter table t set schema s2"));
        assert!(changes(
            "select pg_catalog.set_config('search_path', 's2', false)"
        ));
        assert!(!changes("set work_mem = '64MB'"));
        assert!(!changes("select * from dup where k = 1"));
        assert!(!changes("commit"));
    }

    #[test]
    fn candidates_are_the_mentioned_distributed_names() {
        let mut c = Catalog::default();
        c.add_table(table(10, "public", "clicks"));
        c.add_table(table(11, "public", "d"));
        let mut found = Names::candidates("create table ads_daily (clicks bigint)", &c);
        found.sort();
        assert_eq!(found, vec!["clicks"]);
        let on_path = Names::on_path(&c, &["s1"]);
        assert!(on_path.knows("d") && on_path.resolve(&c, None, "d").is_none());
    }
}
