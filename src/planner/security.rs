//! Roles, privileges and row-level security: which statements reach the workers and
//! what each worker or shard runs, made from the parse tree (names rewritten, then
//! deparsed), never by editing the client's text.
//!
//! - Role statements (`CREATE/ALTER/DROP ROLE`, `ALTER ROLE ... RENAME`, `GRANT/REVOKE
//!   role`): [`RolePlan`] names the roles whose state changes; the workers are then made
//!   equal to the coordinator node role by role (`commands::roles`), never by running
//!   the client's text again (a password in clear would get another salt).
//! - `GRANT/REVOKE` on objects and `ALTER DEFAULT PRIVILEGES`: [`GrantPlan`], with one
//!   statement per node naming its shards for distributed and reference tables, and
//!   statements every worker runs for schemas, sequences, functions, databases,
//!   `ALL ... IN SCHEMA` and default privileges (skipped where the object is missing).
//! - Policies (`CREATE/ALTER/DROP POLICY`, `ALTER POLICY ... RENAME`) of distributed
//!   tables become `DdlPlan`s (`planner::ddl`) with the table swapped for each shard.
//!
//! `CURRENT_USER` / `CURRENT_ROLE` / `SESSION_USER` in a statement run on the workers by
//! pgshard's own connection would name pgshard's user there: [`pin_current_roles`]
//! replaces them with the caller's name first.

use super::ddl::DdlPlan;
use super::names::Names;
use crate::catalog::{shard_table_name, Catalog, DistTable, ShardId};
use crate::error::{PgError, PgResult};
use crate::sql::parse::string_items;
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self, GrantTargetType, ObjectType, RoleSpecType};
use std::sync::Arc;

/// A role named by a statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleRef {
    Name(String),
    /// `CURRENT_USER`, `CURRENT_ROLE`, `SESSION_USER`: the caller.
    Caller,
}

impl RoleRef {
    pub fn resolve(&self, caller: &str) -> String {
        match self {
            RoleRef::Name(n) => n.clone(),
            RoleRef::Caller => caller.to_string(),
        }
    }
}

/// A role statement: run on the coordinator node, then every worker's copy of `roles`
/// is made equal to the coordinator node's (created, altered or dropped).
#[derive(Debug, Clone)]
pub struct RolePlan {
    /// The client's text, run on the coordinator node as the caller.
    pub text: String,
    /// Roles whose attributes or memberships the statement changes.
    pub roles: Vec<RoleRef>,
    /// `ALTER ROLE old RENAME TO new`: renamed on the workers first.
    pub renamed: Option<(RoleRef, String)>,
    /// The statement itself also runs on every worker as the caller: what it changes
    /// is each node's own (`ALTER ROLE ... SET`, `REASSIGN OWNED`, `DROP OWNED`).
    pub text_on_workers: bool,
    /// `DROP OWNED BY` these roles: it may drop distributed tables' shells (their
    /// catalog rows go with them: `catalog::guard`) and, on the workers, their shards.
    pub drop_owned: Vec<RoleRef>,
    pub tag: &'static str,
}

fn role_ref(rs: &protobuf::RoleSpec) -> Option<RoleRef> {
    match RoleSpecType::try_from(rs.roletype).ok()? {
        RoleSpecType::RolespecCstring => Some(RoleRef::Name(rs.rolename.clone())),
        RoleSpecType::RolespecCurrentRole
        | RoleSpecType::RolespecCurrentUser
        | RoleSpecType::RolespecSessionUser => Some(RoleRef::Caller),
        _ => None,
    }
}

fn role_refs(nodes: &[protobuf::Node]) -> Vec<RoleRef> {
    nodes
        .iter()
        .filter_map(|n| match n.node.as_ref() {
            Some(N::RoleSpec(rs)) => role_ref(rs),
            _ => None,
        })
        .collect()
}

/// Plans a role statement; `None` for every other statement.
pub fn plan_role(node: &N, text: &str) -> Option<RolePlan> {
    let plan = |roles: Vec<RoleRef>, tag: &'static str| RolePlan {
        text: text.to_string(),
        roles,
        renamed: None,
        text_on_workers: false,
        drop_owned: Vec::new(),
        tag,
    };
    let on_workers = |tag: &'static str, drop_owned: Vec<RoleRef>| RolePlan {
        text_on_workers: true,
        drop_owned,
        ..plan(Vec::new(), tag)
    };
    match node {
        N::CreateRoleStmt(c) => Some(plan(vec![RoleRef::Name(c.role.clone())], "CREATE ROLE")),
        N::AlterRoleStmt(a) => Some(plan(
            a.role.as_ref().and_then(role_ref).into_iter().collect(),
            "ALTER ROLE",
        )),
        N::DropRoleStmt(d) => Some(plan(role_refs(&d.roles), "DROP ROLE")),
        N::GrantRoleStmt(g) => Some(plan(
            role_refs(&g.grantee_roles),
            if g.is_grant {
                "GRANT ROLE"
            } else {
                "REVOKE ROLE"
            },
        )),
        N::AlterRoleSetStmt(_) => Some(on_workers("ALTER ROLE", Vec::new())),
        N::ReassignOwnedStmt(_) => Some(on_workers("REASSIGN OWNED", Vec::new())),
        N::DropOwnedStmt(d) => Some(on_workers("DROP OWNED", role_refs(&d.roles))),
        N::RenameStmt(r) if r.rename_type == ObjectType::ObjectRole as i32 => {
            let mut p = plan(vec![RoleRef::Name(r.newname.clone())], "ALTER ROLE");
            p.renamed = Some((RoleRef::Name(r.subname.clone()), r.newname.clone()));
            Some(p)
        }
        _ => None,
    }
}

/// `GRANT` / `REVOKE` on objects, or `ALTER DEFAULT PRIVILEGES`.
#[derive(Debug, Clone)]
pub struct GrantPlan {
    /// The client's text, run on the coordinator node (shells included) as the caller.
    pub text: String,
    /// The statement, for the shards' statements (objects replaced by shards).
    pub stmt: protobuf::GrantStmt,
    /// Distributed and reference tables the statement names.
    pub tables: Vec<Arc<DistTable>>,
    /// Statements every worker runs, each skipped where its object does not exist.
    pub worker_statements: Vec<String>,
    /// Roles the statement grants to or revokes from (made to exist on the workers).
    pub grantees: Vec<RoleRef>,
    pub tag: &'static str,
    /// The statement may drop distributed tables by cascade (`planner::objects`): the
    /// coordinator node's `sql_drop` trigger deletes their catalog rows, so the
    /// catalog is reloaded after the commit.
    pub drops_tables: bool,
}

impl GrantPlan {
    /// The statement on `shards` of `table` (all on one node).
    pub fn shard_statement(&self, table: &DistTable, shards: &[ShardId]) -> PgResult<String> {
        let objects = shards
            .iter()
            .map(|s| protobuf::Node {
                node: Some(N::RangeVar(protobuf::RangeVar {
                    schemaname: table.schema.clone(),
                    relname: shard_table_name(&table.name, *s),
                    inh: true,
                    relpersistence: "p".into(),
                    location: -1,
                    ..Default::default()
                })),
            })
            .collect();
        deparse(N::GrantStmt(protobuf::GrantStmt {
            objects,
            ..self.stmt.clone()
        }))
    }

    /// The plan with `CURRENT_USER` and friends replaced by `caller`.
    pub fn for_caller(&self, caller: &str) -> PgResult<GrantPlan> {
        let mut p = self.clone();
        pin_grant_roles(&mut p.stmt, caller);
        p.worker_statements = p
            .worker_statements
            .iter()
            .map(|sql| pin_statement_roles(sql, caller))
            .collect::<PgResult<_>>()?;
        Ok(p)
    }
}

fn deparse(n: N) -> PgResult<String> {
    n.deparse(Default::default())
        .map_err(|e| PgError::internal(format!("cannot deparse a statement for the workers: {e}")))
}

/// Plans `GRANT/REVOKE` on objects and `ALTER DEFAULT PRIVILEGES`; `None` when the
/// statement is neither, or names only objects that live on the coordinator node alone
/// (local tables and views, types, languages, ...).
pub fn plan_grant(
    node: &N,
    text: &str,
    catalog: &Catalog,
    names: &Names,
) -> Option<PgResult<GrantPlan>> {
    let (g, tag) = match node {
        N::GrantStmt(g) => (g, if g.is_grant { "GRANT" } else { "REVOKE" }),
        N::AlterDefaultPrivilegesStmt(a) => {
            let action = a.action.as_ref()?;
            return Some(Ok(GrantPlan {
                text: text.to_string(),
                stmt: action.clone(),
                tables: Vec::new(),
                worker_statements: vec![match deparse(node.clone()) {
                    Ok(s) => s,
                    Err(e) => return Some(Err(e)),
                }],
                grantees: role_refs(&action.grantees)
                    .into_iter()
                    .chain(a.options.iter().flat_map(|o| match o.node.as_ref() {
                        // FOR ROLE r, ...
                        Some(N::DefElem(d)) if d.defname == "roles" => {
                            match d.arg.as_deref().and_then(|x| x.node.as_ref()) {
                                Some(N::List(l)) => role_refs(&l.items),
                                _ => Vec::new(),
                            }
                        }
                        _ => Vec::new(),
                    }))
                    .collect(),
                tag: "ALTER DEFAULT PRIVILEGES",
                drops_tables: false,
            }));
        }
        _ => return None,
    };
    let objtype = ObjectType::try_from(g.objtype).unwrap_or(ObjectType::Undefined);
    let target = GrantTargetType::try_from(g.targtype).unwrap_or(GrantTargetType::Undefined);
    let mut plan = GrantPlan {
        text: text.to_string(),
        stmt: g.clone(),
        tables: Vec::new(),
        worker_statements: Vec::new(),
        grantees: role_refs(&g.grantees),
        tag,
        drops_tables: false,
    };
    let every_worker = matches!(
        objtype,
        ObjectType::ObjectSchema
            | ObjectType::ObjectSequence
            | ObjectType::ObjectFunction
            | ObjectType::ObjectProcedure
            | ObjectType::ObjectRoutine
            | ObjectType::ObjectDatabase
    );
    match target {
        // Shards live in their table's schema: the statement grants on them too.
        GrantTargetType::AclTargetAllInSchema
            if every_worker || objtype == ObjectType::ObjectTable =>
        {
            match deparse(node.clone()) {
                Ok(s) => plan.worker_statements.push(s),
                Err(e) => return Some(Err(e)),
            }
        }
        GrantTargetType::AclTargetObject if objtype == ObjectType::ObjectTable => {
            for o in &g.objects {
                let Some(N::RangeVar(rv)) = o.node.as_ref() else {
                    continue;
                };
                let schema = (!rv.schemaname.is_empty()).then_some(rv.schemaname.as_str());
                if let Some(t) = names.resolve(catalog, schema, &rv.relname) {
                    if !plan.tables.iter().any(|x| x.relid == t.relid) {
                        plan.tables.push(t.clone());
                    }
                }
            }
        }
        // One statement per object, so that one missing on a worker skips only itself.
        GrantTargetType::AclTargetObject if every_worker => {
            for o in &g.objects {
                let one = N::GrantStmt(protobuf::GrantStmt {
                    objects: vec![o.clone()],
                    ..g.clone()
                });
                match deparse(one) {
                    Ok(s) => plan.worker_statements.push(s),
                    Err(e) => return Some(Err(e)),
                }
            }
        }
        _ => {}
    }
    if plan.tables.is_empty() && plan.worker_statements.is_empty() {
        return None;
    }
    Some(Ok(plan))
}

fn pin_role(rs: &mut protobuf::RoleSpec, caller: &str) {
    if role_ref(rs) == Some(RoleRef::Caller) {
        rs.roletype = RoleSpecType::RolespecCstring as i32;
        rs.rolename = caller.to_string();
    }
}

fn pin_role_nodes(nodes: &mut [protobuf::Node], caller: &str) {
    for n in nodes {
        if let Some(N::RoleSpec(rs)) = n.node.as_mut() {
            pin_role(rs, caller);
        }
    }
}

fn pin_grant_roles(g: &mut protobuf::GrantStmt, caller: &str) {
    pin_role_nodes(&mut g.grantees, caller);
    if let Some(rs) = g.grantor.as_mut() {
        pin_role(rs, caller);
    }
}

/// Replaces `CURRENT_USER`, `CURRENT_ROLE` and `SESSION_USER` naming a role (not the
/// SQL functions of the same names) with `caller`, in the statements pgshard sends to
/// the workers: grantees, new owners, policy roles, `FOR ROLE` of default privileges.
pub fn pin_current_roles(node: &mut N, caller: &str) {
    match node {
        N::GrantStmt(g) => pin_grant_roles(g, caller),
        N::AlterDefaultPrivilegesStmt(a) => {
            if let Some(g) = a.action.as_mut() {
                pin_grant_roles(g, caller);
            }
            for o in &mut a.options {
                if let Some(N::DefElem(d)) = o.node.as_mut() {
                    if let Some(N::List(l)) = d.arg.as_mut().and_then(|x| x.node.as_mut()) {
                        pin_role_nodes(&mut l.items, caller);
                    }
                }
            }
        }
        N::AlterTableStmt(a) => {
            for c in &mut a.cmds {
                if let Some(N::AlterTableCmd(cmd)) = c.node.as_mut() {
                    if let Some(rs) = cmd.newowner.as_mut() {
                        pin_role(rs, caller);
                    }
                }
            }
        }
        N::CreatePolicyStmt(p) => pin_role_nodes(&mut p.roles, caller),
        N::AlterPolicyStmt(p) => pin_role_nodes(&mut p.roles, caller),
        _ => {}
    }
}

/// [`pin_current_roles`] on a statement pgshard deparsed itself.
fn pin_statement_roles(sql: &str, caller: &str) -> PgResult<String> {
    let mut stmts = crate::sql::parse::parse(sql)?;
    let Some(mut node) = stmts.remove(0).node else {
        return Ok(sql.to_string());
    };
    pin_current_roles(&mut node, caller);
    deparse(node)
}

/// Whether a policy expression reads a table: on a shard it would read the worker's
/// table of that name, not the cluster's.
fn reads_tables(expr: Option<&protobuf::Node>) -> bool {
    let Some(e) = expr.and_then(|e| e.node.as_ref()) else {
        return false;
    };
    matches!(e, N::RangeVar(_))
        || e.nodes()
            .into_iter()
            .any(|(n, _, _, _)| matches!(n, pg_query::NodeRef::RangeVar(_)))
}

/// `CREATE/ALTER/DROP POLICY` and `ALTER POLICY ... RENAME` on a distributed table:
/// `None` when the table is not distributed (or the statement not a policy's).
pub fn plan_policy(
    node: &N,
    text: &str,
    catalog: &Catalog,
    names: &Names,
) -> Option<PgResult<DdlPlan>> {
    let resolve = |rv: &protobuf::RangeVar| {
        let schema = (!rv.schemaname.is_empty()).then_some(rv.schemaname.as_str());
        names.resolve(catalog, schema, &rv.relname).cloned()
    };
    let (table, tag, exprs) = match node {
        N::CreatePolicyStmt(p) => (
            resolve(p.table.as_ref()?)?,
            "CREATE POLICY",
            [p.qual.as_deref(), p.with_check.as_deref()],
        ),
        N::AlterPolicyStmt(p) => (
            resolve(p.table.as_ref()?)?,
            "ALTER POLICY",
            [p.qual.as_deref(), p.with_check.as_deref()],
        ),
        N::RenameStmt(r) if r.rename_type == ObjectType::ObjectPolicy as i32 => {
            (resolve(r.relation.as_ref()?)?, "ALTER POLICY", [None, None])
        }
        N::DropStmt(d) if d.remove_type == ObjectType::ObjectPolicy as i32 => {
            let (schema, table, _) = dropped_policy(d)?;
            let t = names.resolve(catalog, schema.as_deref(), &table)?.clone();
            (t, "DROP POLICY", [None, None])
        }
        _ => return None,
    };
    if exprs.into_iter().any(reads_tables) {
        return Some(Err(PgError::not_supported(format!(
            "pgshard does not support policies that read tables on the distributed table \"{}\" yet",
            table.name
        ))));
    }
    Some(Ok(DdlPlan::new(&table, node, text, tag)))
}

/// `DROP POLICY p ON [schema.]table`: (schema, table, policy).
fn dropped_policy(d: &protobuf::DropStmt) -> Option<(Option<String>, String, String)> {
    let Some(N::List(l)) = d.objects.first()?.node.as_ref() else {
        return None;
    };
    match string_items(&l.items).as_slice() {
        [table, policy] => Some((None, table.to_string(), policy.to_string())),
        [.., schema, table, policy] => Some((
            Some(schema.to_string()),
            table.to_string(),
            policy.to_string(),
        )),
        _ => None,
    }
}

/// A policy statement on one shard: the table swapped for the shard (the policy keeps
/// its name: policy names are per table). `false` when `stmt` is not a policy's.
pub fn policy_shard_statement(stmt: &mut N, table: &DistTable, shard_id: ShardId) -> bool {
    let shard_rel = |rv: &mut protobuf::RangeVar| {
        rv.schemaname = table.schema.clone();
        rv.relname = shard_table_name(&table.name, shard_id);
    };
    match stmt {
        N::CreatePolicyStmt(p) => p.table.as_mut().map(shard_rel).is_some(),
        N::AlterPolicyStmt(p) => p.table.as_mut().map(shard_rel).is_some(),
        N::DropStmt(d) if d.remove_type == ObjectType::ObjectPolicy as i32 => {
            let Some((_, _, policy)) = dropped_policy(d) else {
                return false;
            };
            let items = [
                table.schema.clone(),
                shard_table_name(&table.name, shard_id),
                policy,
            ]
            .into_iter()
            .map(|s| protobuf::Node {
                node: Some(N::String(protobuf::String { sval: s })),
            })
            .collect();
            d.objects = vec![protobuf::Node {
                node: Some(N::List(protobuf::List { items })),
            }];
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::planner::ddl::tests::catalog;

    fn node(sql: &str) -> N {
        crate::sql::parse::parse(sql)
            .unwrap()
            .remove(0)
            .node
            .unwrap()
    }

    fn grant(sql: &str) -> Option<PgResult<GrantPlan>> {
        let c = catalog();
        plan_grant(
            &node(sql),
            sql,
            &c,
            &crate::planner::Names::on_path(&c, &["public"]),
        )
    }

    #[test]
    fn role_statements_name_the_roles_they_change() {
        let p = plan_role(&node("CREATE USER app PASSWORD 'x' IN ROLE r"), "").unwrap();
        assert_eq!(p.roles, vec![RoleRef::Name("app".into())]);
        assert_eq!(p.tag, "CREATE ROLE");
        let p = plan_role(&node("ALTER ROLE CURRENT_USER NOCREATEDB"), "").unwrap();
        assert_eq!(p.roles, vec![RoleRef::Caller]);
        assert_eq!(p.roles[0].resolve("me"), "me");
        let p = plan_role(&node("GRANT r1, r2 TO a, \"B\" WITH ADMIN OPTION"), "").unwrap();
        assert_eq!(
            p.roles,
            vec![RoleRef::Name("a".into()), RoleRef::Name("B".into())]
        );
        assert_eq!(p.tag, "GRANT ROLE");
        let p = plan_role(&node("REVOKE r1 FROM a"), "").unwrap();
        assert_eq!(p.tag, "REVOKE ROLE");
        let p = plan_role(&node("DROP ROLE IF EXISTS a, b"), "").unwrap();
        assert_eq!(p.roles.len(), 2);
        let p = plan_role(&node("ALTER ROLE a RENAME TO b"), "").unwrap();
        assert_eq!(p.renamed, Some((RoleRef::Name("a".into()), "b".into())));
        assert_eq!(p.roles, vec![RoleRef::Name("b".into())]);
        assert!(plan_role(&node("ALTER TABLE t RENAME TO u"), "").is_none());
        let p = plan_role(&node("ALTER ROLE a IN DATABASE d SET work_mem = '8MB'"), "").unwrap();
        assert!(p.text_on_workers && p.roles.is_empty() && p.tag == "ALTER ROLE");
        let p = plan_role(&node("REASSIGN OWNED BY a TO b"), "").unwrap();
        assert!(p.text_on_workers && p.drop_owned.is_empty());
        let p = plan_role(&node("DROP OWNED BY a, CURRENT_USER CASCADE"), "").unwrap();
        assert_eq!(
            p.drop_owned,
            vec![RoleRef::Name("a".into()), RoleRef::Caller]
        );
        assert!(plan_role(&node("SELECT 1"), "").is_none());
    }

    #[test]
    fn table_grants_name_each_nodes_shards() {
        let p = grant("GRANT SELECT, UPDATE (v) ON t, other TO app WITH GRANT OPTION")
            .unwrap()
            .unwrap();
        assert_eq!(p.tables.len(), 1);
        assert!(p.worker_statements.is_empty());
        assert_eq!(
            p.shard_statement(&p.tables[0], &[7, 8]).unwrap(),
            "GRANT select, update (v) ON public.t_7, public.t_8 TO app WITH GRANT OPTION"
        );
        assert!(grant("GRANT SELECT ON other TO app").is_none());
        assert!(grant("GRANT USAGE ON TYPE x TO app").is_none());
        let p = grant("REVOKE ALL ON TABLE t FROM PUBLIC CASCADE")
            .unwrap()
            .unwrap();
        assert_eq!(p.tag, "REVOKE");
        let s = p.shard_statement(&p.tables[0], &[7]).unwrap();
        assert_eq!(s, "REVOKE ALL ON public.t_7 FROM public CASCADE");
    }

    #[test]
    fn other_objects_go_to_every_worker_one_by_one() {
        let p = grant("GRANT USAGE ON SCHEMA a, \"B\" TO app")
            .unwrap()
            .unwrap();
        assert_eq!(
            p.worker_statements,
            vec![
                "GRANT usage ON SCHEMA a TO app",
                "GRANT usage ON SCHEMA \"B\" TO app"
            ]
        );
        let p = grant("GRANT EXECUTE ON FUNCTION f(int), g() TO app")
            .unwrap()
            .unwrap();
        assert_eq!(p.worker_statements.len(), 2);
        let p = grant("GRANT SELECT ON ALL TABLES IN SCHEMA s TO app")
            .unwrap()
            .unwrap();
        assert_eq!(
            p.worker_statements,
            vec!["GRANT select ON ALL TABLES IN SCHEMA s TO app"]
        );
        let p = grant("ALTER DEFAULT PRIVILEGES FOR ROLE CURRENT_USER IN SCHEMA s GRANT SELECT ON TABLES TO app")
            .unwrap()
            .unwrap();
        assert_eq!(p.tag, "ALTER DEFAULT PRIVILEGES");
        let pinned = p.for_caller("me").unwrap();
        assert!(
            pinned.worker_statements[0].contains("FOR ROLE me"),
            "{}",
            pinned.worker_statements[0]
        );
        let p = grant("GRANT SELECT ON t TO CURRENT_USER").unwrap().unwrap();
        let pinned = p.for_caller("x\"y").unwrap();
        let s = pinned.shard_statement(&pinned.tables[0], &[7]).unwrap();
        assert!(s.ends_with("TO \"x\"\"y\""), "{s}");
    }

    #[test]
    fn policies_swap_the_table_and_refuse_subqueries() {
        let c = catalog();
        let names = super::super::names::Names::on_path(&c, &["public"]);
        let plan = |sql: &str| plan_policy(&node(sql), sql, &c, &names);
        let p = plan("CREATE POLICY p ON t FOR SELECT TO app USING (v = current_user)")
            .unwrap()
            .unwrap();
        assert_eq!(p.tag, "CREATE POLICY");
        let mut stmt = p.stmt.clone();
        assert!(policy_shard_statement(&mut stmt, &p.table, 9));
        let s = stmt.deparse(Default::default()).unwrap();
        assert!(s.contains("ON public.t_9"), "{s}");
        let p = plan("DROP POLICY IF EXISTS p ON public.t")
            .unwrap()
            .unwrap();
        let mut stmt = p.stmt.clone();
        assert!(policy_shard_statement(&mut stmt, &p.table, 9));
        assert_eq!(
            stmt.deparse(Default::default()).unwrap(),
            "DROP POLICY IF EXISTS p ON public.t_9"
        );
        assert!(plan("CREATE POLICY p ON other USING (true)").is_none());
        assert!(matches!(
            plan("CREATE POLICY p ON t USING (k IN (SELECT k FROM t))"),
            Some(Err(e)) if e.code == "0A000"
        ));
        assert!(plan("ALTER POLICY p ON t RENAME TO q").unwrap().is_ok());
    }
}
