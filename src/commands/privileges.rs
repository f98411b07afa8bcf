//! Privileges across the cluster.
//!
//! - Checks of the Citus functions, as Citus makes them: [`ensure_owner`] (table
//!   ownership: `create_distributed_table`, `create_reference_table`,
//!   `undistribute_table`, DROP TABLE) and [`ensure_superuser`] (node management,
//!   `recover_prepared_transactions`), with PostgreSQL's SQLSTATE 42501 and wording.
//! - A shard's security equals its table's: [`read_table_security`] reads the owner,
//!   ACL (table and columns), row-level security flags and policies of a table on the
//!   coordinator node and [`secure_shard`] gives them to a new shard; schemas made on
//!   a worker get their owner and ACL the same way ([`read_schema_acl`],
//!   [`secure_schema`]).
//! - The statements a client's `GRANT/REVOKE` and `ALTER DEFAULT PRIVILEGES` need on
//!   shards and workers; the session runs them in its block after the client's own
//!   statement (`executor/session/ddl_in_block.rs`, one two-phase commit).

use super::db_err;
use crate::catalog::cache::CatalogCache;
use crate::catalog::Oid;
use crate::error::{sqlstate, PgError};
use crate::sql::quote::quote_ident;
use tokio_postgres::Client;

/// Functions only a superuser may call (Citus revokes them from PUBLIC).
const SUPERUSER_FUNCTIONS: &[&str] = &[
    "citus_add_node",
    "master_add_node",
    "citus_remove_node",
    "master_remove_node",
    "start_metadata_sync_to_node",
    "stop_metadata_sync_to_node",
    "recover_prepared_transactions",
    "citus_cleanup_orphaned_resources",
    "citus_stat_statements_reset",
    "replicate_reference_tables",
    "citus_set_coordinator_host",
];

/// Whether `function` (lower-case, unqualified) is for superusers only.
pub fn needs_superuser(function: &str) -> bool {
    SUPERUSER_FUNCTIONS.contains(&function)
}

/// 42501 `permission denied for function <name>` unless `caller` is a superuser.
pub(crate) async fn ensure_superuser(
    cache: &CatalogCache,
    caller: &str,
    function: &str,
) -> Result<(), PgError> {
    if caller == cache.config().user {
        return Ok(());
    }
    let coord = crate::backend::control::connect_coordinator(cache.config()).await?;
    let superuser: bool = coord
        .query_opt(
            "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = $1",
            &[&caller],
        )
        .await
        .map_err(db_err("cannot read pg_roles"))?
        .is_some_and(|r| r.get(0));
    if superuser {
        return Ok(());
    }
    Err(PgError::new(
        sqlstate::INSUFFICIENT_PRIVILEGE,
        format!("permission denied for function {function}"),
    ))
}

/// 42501 `must be owner of table <name>` unless `caller` has the privileges of the
/// relation's owner (a member of it, or a superuser), as PostgreSQL checks ownership.
pub(crate) async fn ensure_owner(coord: &Client, caller: &str, relid: Oid) -> Result<(), PgError> {
    let row = coord
        .query_one(
            "SELECT pg_catalog.pg_has_role($1, c.relowner, 'USAGE'), c.relname::text, c.relkind::text \
             FROM pg_catalog.pg_class c WHERE c.oid = $2",
            &[&caller, &relid],
        )
        .await
        .map_err(db_err("cannot check the table's owner"))?;
    if row.get(0) {
        return Ok(());
    }
    let name: String = row.get(1);
    let kind = match row.get::<_, String>(2).as_str() {
        "v" => "view",
        "m" => "materialized view",
        "S" => "sequence",
        "f" => "foreign table",
        "i" | "I" => "index",
        _ => "table",
    };
    Err(PgError::new(
        sqlstate::INSUFFICIENT_PRIVILEGE,
        format!("must be owner of {kind} {name}"),
    ))
}

/// One entry of an ACL (`aclexplode`): `grantee` None is PUBLIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclItem {
    pub grantor: String,
    pub grantee: Option<String>,
    pub privilege: String,
    pub grantable: bool,
}

/// The owner and ACL of a table or schema (`acl` None: the default, never changed).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObjectAcl {
    pub owner: String,
    pub acl: Option<Vec<AclItem>>,
    /// Column privileges of a table, by column.
    pub columns: Vec<(String, Vec<AclItem>)>,
}

/// A row-level security policy as `pg_policy` holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub name: String,
    /// `ALL`, `SELECT`, `INSERT`, `UPDATE` or `DELETE`.
    pub command: &'static str,
    pub permissive: bool,
    /// None: PUBLIC.
    pub roles: Vec<Option<String>>,
    pub using: Option<String>,
    pub check: Option<String>,
}

/// What a shard copies from its table besides columns, constraints and indexes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableSecurity {
    pub acl: ObjectAcl,
    pub row_security: bool,
    pub force_row_security: bool,
    pub policies: Vec<Policy>,
}

impl TableSecurity {
    /// Every role the shard's statements name (they must exist on its node).
    pub fn roles(&self) -> Vec<String> {
        let mut out = vec![self.acl.owner.clone()];
        let items = self
            .acl
            .acl
            .iter()
            .flatten()
            .chain(self.acl.columns.iter().flat_map(|(_, c)| c));
        for i in items {
            out.push(i.grantor.clone());
            out.extend(i.grantee.clone());
        }
        for p in &self.policies {
            out.extend(p.roles.iter().flatten().cloned());
        }
        out.sort();
        out.dedup();
        out
    }
}

const EXPLODE: &str = "pg_catalog.pg_get_userbyid(x.grantor)::text, \
     CASE WHEN x.grantee = 0 THEN NULL ELSE pg_catalog.pg_get_userbyid(x.grantee)::text END, \
     x.privilege_type, x.is_grantable";

fn acl_item(r: &tokio_postgres::Row, at: usize) -> AclItem {
    AclItem {
        grantor: r.get(at),
        grantee: r.get(at + 1),
        privilege: r.get(at + 2),
        grantable: r.get(at + 3),
    }
}

/// The owner, ACL, row-level security and policies of table `relid`.
pub(crate) async fn read_table_security(
    coord: &Client,
    relid: Oid,
) -> Result<TableSecurity, PgError> {
    let err = db_err("cannot read the table's privileges");
    let row = coord
        .query_one(
            "SELECT pg_catalog.pg_get_userbyid(relowner)::text, relacl IS NULL, relrowsecurity, relforcerowsecurity \
             FROM pg_catalog.pg_class WHERE oid = $1",
            &[&relid],
        )
        .await
        .map_err(&err)?;
    let mut acl = ObjectAcl {
        owner: row.get(0),
        acl: None,
        columns: Vec::new(),
    };
    if !row.get::<_, bool>(1) {
        let items = coord
            .query(
                &format!(
                    "SELECT {EXPLODE} FROM pg_catalog.pg_class c, \
                     pg_catalog.aclexplode(c.relacl) WITH ORDINALITY x WHERE c.oid = $1 ORDER BY x.ordinality"
                ),
                &[&relid],
            )
            .await
            .map_err(&err)?;
        acl.acl = Some(items.iter().map(|r| acl_item(r, 0)).collect());
    }
    let columns = coord
        .query(
            &format!(
                "SELECT a.attname::text, {EXPLODE} FROM pg_catalog.pg_attribute a, \
                 pg_catalog.aclexplode(a.attacl) WITH ORDINALITY x \
                 WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum, x.ordinality"
            ),
            &[&relid],
        )
        .await
        .map_err(&err)?;
    for r in &columns {
        let name: String = r.get(0);
        match acl.columns.last_mut() {
            Some((n, items)) if *n == name => items.push(acl_item(r, 1)),
            _ => acl.columns.push((name, vec![acl_item(r, 1)])),
        }
    }
    let policies = coord
        .query(
            "SELECT polname::text, polcmd::text, polpermissive, \
                    ARRAY(SELECT CASE WHEN r = 0 THEN NULL ELSE pg_catalog.pg_get_userbyid(r)::text END \
                          FROM unnest(polroles) r), \
                    pg_catalog.pg_get_expr(polqual, polrelid), pg_catalog.pg_get_expr(polwithcheck, polrelid) \
             FROM pg_catalog.pg_policy WHERE polrelid = $1 ORDER BY polname",
            &[&relid],
        )
        .await
        .map_err(&err)?;
    Ok(TableSecurity {
        acl,
        row_security: row.get(2),
        force_row_security: row.get(3),
        policies: policies
            .iter()
            .map(|r| Policy {
                name: r.get(0),
                command: match r.get::<_, String>(1).as_str() {
                    "r" => "SELECT",
                    "a" => "INSERT",
                    "w" => "UPDATE",
                    "d" => "DELETE",
                    _ => "ALL",
                },
                permissive: r.get(2),
                roles: r.get(3),
                using: r.get(4),
                check: r.get(5),
            })
            .collect(),
    })
}

/// The owner and ACL of schema `name` on the coordinator node.
pub(crate) async fn read_schema_acl(coord: &Client, name: &str) -> Result<ObjectAcl, PgError> {
    let err = db_err("cannot read the schema's privileges");
    let row = coord
        .query_one(
            "SELECT pg_catalog.pg_get_userbyid(nspowner)::text, nspacl IS NULL \
             FROM pg_catalog.pg_namespace WHERE nspname = $1",
            &[&name],
        )
        .await
        .map_err(&err)?;
    let mut acl = ObjectAcl {
        owner: row.get(0),
        acl: None,
        columns: Vec::new(),
    };
    if !row.get::<_, bool>(1) {
        let items = coord
            .query(
                &format!(
                    "SELECT {EXPLODE} FROM pg_catalog.pg_namespace n, \
                     pg_catalog.aclexplode(n.nspacl) WITH ORDINALITY x WHERE n.nspname = $1 ORDER BY x.ordinality"
                ),
                &[&name],
            )
            .await
            .map_err(&err)?;
        acl.acl = Some(items.iter().map(|r| acl_item(r, 0)).collect());
    }
    Ok(acl)
}

fn role_list(roles: &[Option<String>]) -> String {
    roles
        .iter()
        .map(|r| r.as_deref().map_or("PUBLIC".to_string(), quote_ident))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Statements giving the object `target` (`TABLE "s"."t_7"`, `SCHEMA "s"`) the owner
/// and ACL of `want`. `present`: the grantees of the object's current ACL (table and
/// columns), None when it has the default one. Entries some other role than the owner
/// granted are granted as that role, so the ACL records the same grantor.
pub fn acl_sql(target: &str, want: &ObjectAcl, present: Option<&[Option<String>]>) -> Vec<String> {
    let owner = quote_ident(&want.owner);
    let mut out = vec![format!("ALTER {target} OWNER TO {owner}")];
    if want.acl.is_none() && want.columns.is_empty() && present.is_none() {
        return out;
    }
    let mut from: Vec<Option<String>> = vec![None, Some(want.owner.clone())];
    for p in present.unwrap_or_default() {
        if !from.contains(p) {
            from.push(p.clone());
        }
    }
    out.push(format!(
        "REVOKE ALL ON {target} FROM {} CASCADE",
        role_list(&from)
    ));
    let default_acl = [AclItem {
        grantor: want.owner.clone(),
        grantee: Some(want.owner.clone()),
        privilege: "ALL".into(),
        grantable: false,
    }];
    let table_items = want.acl.as_deref().unwrap_or(&default_acl);
    let items = table_items.iter().map(|i| (None, i)).chain(
        want.columns
            .iter()
            .flat_map(|(c, items)| items.iter().map(move |i| (Some(c.as_str()), i))),
    );
    // One GRANT per (column, grantor, grantee, grant option), in the ACL's order.
    type GrantKey<'a> = (Option<&'a str>, &'a str, Option<&'a str>, bool);
    let mut grants: Vec<(GrantKey, Vec<&str>)> = Vec::new();
    for (column, i) in items {
        let key = (
            column,
            i.grantor.as_str(),
            i.grantee.as_deref(),
            i.grantable,
        );
        match grants.iter_mut().find(|(k, _)| *k == key) {
            Some((_, privileges)) => privileges.push(&i.privilege),
            None => grants.push((key, vec![&i.privilege])),
        }
    }
    // The owner's grants first: they may give the grant options the others use.
    grants.sort_by_key(|((_, grantor, _, _), _)| *grantor != want.owner);
    for ((column, grantor, grantee, grantable), privileges) in grants {
        let columns = column.map_or(String::new(), |c| format!(" ({})", quote_ident(c)));
        let grant = format!(
            "GRANT {}{columns} ON {target} TO {}{}",
            privileges.join(", "),
            grantee.map_or("PUBLIC".to_string(), quote_ident),
            if grantable { " WITH GRANT OPTION" } else { "" }
        );
        if grantor == want.owner {
            out.push(grant);
        } else {
            out.push(format!("SET LOCAL ROLE {}", quote_ident(grantor)));
            out.push(grant);
            out.push("RESET ROLE".into());
        }
    }
    out
}

/// Row-level security and policies of a new shard (`qualified`, quoted).
pub fn row_security_sql(sec: &TableSecurity, qualified: &str) -> Vec<String> {
    let mut out = Vec::new();
    if sec.row_security {
        out.push(format!("ALTER TABLE {qualified} ENABLE ROW LEVEL SECURITY"));
    }
    if sec.force_row_security {
        out.push(format!("ALTER TABLE {qualified} FORCE ROW LEVEL SECURITY"));
    }
    for p in &sec.policies {
        // The expressions are PostgreSQL's own deparse of the table's (pg_get_expr).
        let mut sql = format!(
            "CREATE POLICY {} ON {qualified} AS {} FOR {} TO {}",
            quote_ident(&p.name),
            if p.permissive {
                "PERMISSIVE"
            } else {
                "RESTRICTIVE"
            },
            p.command,
            role_list(&p.roles)
        );
        if let Some(u) = &p.using {
            sql.push_str(&format!(" USING ({u})"));
        }
        if let Some(c) = &p.check {
            sql.push_str(&format!(" WITH CHECK ({c})"));
        }
        out.push(sql);
    }
    out
}

/// The grantees of an object's ACL (None: PUBLIC), or None when it has the default.
async fn present_grantees(
    client: &Client,
    sql: &str,
    name: &str,
) -> Result<Option<Vec<Option<String>>>, tokio_postgres::Error> {
    let row = client.query_one(sql, &[&name]).await?;
    Ok((!row.get::<_, bool>(0)).then(|| row.get(1)))
}

/// Gives the new shard `qualified` (quoted) the owner, ACL, row-level security and
/// policies of its table, in the worker's open transaction. An error carries the
/// failing statement.
pub(crate) async fn secure_shard(
    client: &Client,
    sec: &TableSecurity,
    qualified: &str,
) -> Result<(), (String, tokio_postgres::Error)> {
    let lookup = "SELECT c.relacl IS NULL AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a \
                       WHERE a.attrelid = c.oid AND a.attacl IS NOT NULL), \
                  ARRAY(SELECT DISTINCT CASE WHEN g = 0 THEN NULL ELSE pg_catalog.pg_get_userbyid(g)::text END \
                        FROM (SELECT (pg_catalog.aclexplode(c.relacl)).grantee AS g \
                              UNION ALL SELECT (pg_catalog.aclexplode(a.attacl)).grantee \
                              FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid) x) \
                  FROM pg_catalog.pg_class c WHERE c.oid = $1::text::regclass";
    let present = present_grantees(client, lookup, qualified)
        .await
        .map_err(|e| (lookup.to_string(), e))?;
    let mut stmts = acl_sql(&format!("TABLE {qualified}"), &sec.acl, present.as_deref());
    stmts.extend(row_security_sql(sec, qualified));
    for sql in stmts {
        client.batch_execute(&sql).await.map_err(|e| (sql, e))?;
    }
    Ok(())
}

/// Gives schema `name`, just made on a worker, its owner and ACL on the coordinator node.
pub(crate) async fn secure_schema(
    client: &Client,
    acl: &ObjectAcl,
    name: &str,
) -> Result<(), (String, tokio_postgres::Error)> {
    let lookup = "SELECT n.nspacl IS NULL, ARRAY(SELECT DISTINCT CASE WHEN g = 0 THEN NULL \
                       ELSE pg_catalog.pg_get_userbyid(g)::text END \
                       FROM (SELECT (pg_catalog.aclexplode(n.nspacl)).grantee AS g) x) \
                  FROM pg_catalog.pg_namespace n WHERE n.nspname = $1";
    let present = present_grantees(client, lookup, name)
        .await
        .map_err(|e| (lookup.to_string(), e))?;
    for sql in acl_sql(
        &format!("SCHEMA {}", quote_ident(name)),
        acl,
        present.as_deref(),
    ) {
        client.batch_execute(&sql).await.map_err(|e| (sql, e))?;
    }
    Ok(())
}

/// Errors of a statement for every worker that mean its object is not on that worker
/// (schemas, sequences and functions exist on workers only where someone made them).
const MISSING_OBJECT: &[&str] = &[
    sqlstate::UNDEFINED_TABLE,
    sqlstate::UNDEFINED_FUNCTION,
    sqlstate::INVALID_SCHEMA_NAME,
    sqlstate::INVALID_CATALOG_NAME,
    sqlstate::UNDEFINED_OBJECT,
];

/// Whether SQLSTATE `code` says a statement's object does not exist (see `MISSING_OBJECT`).
pub fn is_missing_object(code: &str) -> bool {
    MISSING_OBJECT.contains(&code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(grantor: &str, grantee: Option<&str>, privilege: &str, grantable: bool) -> AclItem {
        AclItem {
            grantor: grantor.into(),
            grantee: grantee.map(str::to_string),
            privilege: privilege.into(),
            grantable,
        }
    }

    #[test]
    fn default_acl_needs_only_the_owner() {
        let want = ObjectAcl {
            owner: "o".into(),
            acl: None,
            columns: vec![],
        };
        assert_eq!(
            acl_sql("TABLE t", &want, None),
            vec!["ALTER TABLE t OWNER TO \"o\""]
        );
        // A worker's default privileges gave the new shard grants: back to the default.
        assert_eq!(
            acl_sql("TABLE t", &want, Some(&[Some("x".into())])),
            vec![
                "ALTER TABLE t OWNER TO \"o\"",
                "REVOKE ALL ON TABLE t FROM PUBLIC, \"o\", \"x\" CASCADE",
                "GRANT ALL ON TABLE t TO \"o\"",
            ]
        );
    }

    #[test]
    fn acl_entries_keep_grantor_grantee_and_grant_option() {
        let want = ObjectAcl {
            owner: "o".into(),
            acl: Some(vec![
                item("o", Some("o"), "SELECT", false),
                item("g", Some("app"), "SELECT", false),
                item("o", Some("o"), "INSERT", false),
                item("o", Some("g"), "SELECT", true),
                item("o", None, "SELECT", false),
            ]),
            columns: vec![("v w".into(), vec![item("o", Some("app"), "UPDATE", false)])],
        };
        assert_eq!(
            acl_sql("TABLE t", &want, None),
            vec![
                "ALTER TABLE t OWNER TO \"o\"",
                "REVOKE ALL ON TABLE t FROM PUBLIC, \"o\" CASCADE",
                "GRANT SELECT, INSERT ON TABLE t TO \"o\"",
                "GRANT SELECT ON TABLE t TO \"g\" WITH GRANT OPTION",
                "GRANT SELECT ON TABLE t TO PUBLIC",
                "GRANT UPDATE (\"v w\") ON TABLE t TO \"app\"",
                "SET LOCAL ROLE \"g\"",
                "GRANT SELECT ON TABLE t TO \"app\"",
                "RESET ROLE",
            ]
        );
    }

    #[test]
    fn policies_and_row_security() {
        let sec = TableSecurity {
            acl: ObjectAcl {
                owner: "o".into(),
                ..ObjectAcl::default()
            },
            row_security: true,
            force_row_security: true,
            policies: vec![Policy {
                name: "p q".into(),
                command: "SELECT",
                permissive: false,
                roles: vec![None, Some("app".into())],
                using: Some("(v = CURRENT_USER)".into()),
                check: None,
            }],
        };
        assert_eq!(
            row_security_sql(&sec, "s.t_7"),
            vec![
                "ALTER TABLE s.t_7 ENABLE ROW LEVEL SECURITY",
                "ALTER TABLE s.t_7 FORCE ROW LEVEL SECURITY",
                "CREATE POLICY \"p q\" ON s.t_7 AS RESTRICTIVE FOR SELECT TO PUBLIC, \"app\" USING ((v = CURRENT_USER))",
            ]
        );
        assert_eq!(sec.roles(), vec!["app", "o"]);
    }
}
