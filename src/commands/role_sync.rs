//! Copies a role from the coordinator node to another node: its attributes, its
//! password verifier verbatim (so that pgshard can log into that node as the role
//! with the keys of the client's own login, `backend::scram_keys`) and the roles it
//! is a member of. The coordinator node is where roles are managed; the copy is
//! made on pgshard's own superuser control connections.
//!
//! Never logs or reports the verifier.

use crate::backend::NodeAddr;
use crate::config::Config;
use crate::error::{PgError, PgResult};
use crate::sql::quote::{quote_ident, quote_literal};

/// The attribute clause of `CREATE/ALTER ROLE` for a `pg_authid` row.
fn attribute_clause(row: &tokio_postgres::Row) -> String {
    let flag = |col: &str, yes: &str, no: &str| {
        if row.get::<_, bool>(col) {
            yes.to_string()
        } else {
            no.to_string()
        }
    };
    let mut parts = vec![
        flag("rolsuper", "SUPERUSER", "NOSUPERUSER"),
        flag("rolinherit", "INHERIT", "NOINHERIT"),
        flag("rolcreaterole", "CREATEROLE", "NOCREATEROLE"),
        flag("rolcreatedb", "CREATEDB", "NOCREATEDB"),
        flag("rolcanlogin", "LOGIN", "NOLOGIN"),
        flag("rolreplication", "REPLICATION", "NOREPLICATION"),
        flag("rolbypassrls", "BYPASSRLS", "NOBYPASSRLS"),
        format!("CONNECTION LIMIT {}", row.get::<_, i32>("rolconnlimit")),
    ];
    match row.get::<_, Option<String>>("rolpassword") {
        Some(p) => parts.push(format!("PASSWORD {}", quote_literal(&p))),
        None => parts.push("PASSWORD NULL".into()),
    }
    match row.get::<_, Option<String>>("valid_until") {
        Some(v) => parts.push(format!("VALID UNTIL {}", quote_literal(&v))),
        None => parts.push("VALID UNTIL 'infinity'".into()),
    }
    parts.join(" ")
}

/// Makes `role` on `node` what it is on the coordinator node (created if missing),
/// with its memberships in roles that exist there.
pub async fn sync_role(cfg: &Config, node: &NodeAddr, role: &str) -> PgResult<()> {
    let coord = crate::backend::control::connect_coordinator(cfg).await?;
    let row = coord
        .query_opt(
            "SELECT rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolcanlogin, \
                    rolreplication, rolbypassrls, rolconnlimit, rolpassword, \
                    rolvaliduntil::text AS valid_until \
             FROM pg_catalog.pg_authid WHERE rolname = $1",
            &[&role],
        )
        .await
        .map_err(|e| PgError::from_client_error("reading the role on the coordinator node", &e))?
        .ok_or_else(|| PgError::internal(format!("role \"{role}\" is not on the coordinator node")))?;
    let member_of: Vec<(String, bool)> = coord
        .query(
            "SELECT g.rolname::text, m.admin_option FROM pg_catalog.pg_auth_members m \
             JOIN pg_catalog.pg_roles g ON g.oid = m.roleid \
             JOIN pg_catalog.pg_roles u ON u.oid = m.member WHERE u.rolname = $1",
            &[&role],
        )
        .await
        .map_err(|e| PgError::from_client_error("reading the role's memberships", &e))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let target = crate::backend::control::connect(cfg, &node.host, node.port).await?;
    let exists = target
        .query_opt("SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1", &[&role])
        .await
        .map_err(|e| PgError::from_client_error(&format!("reading roles on node {node}"), &e))?
        .is_some();
    let verb = if exists { "ALTER" } else { "CREATE" };
    let mut sql = format!("{verb} ROLE {} WITH {};", quote_ident(role), attribute_clause(&row));
    for (group, admin) in &member_of {
        // Only memberships in roles the node has; missing groups are copied when
        // one of their members logs in there.
        let known = target
            .query_opt("SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1", &[group])
            .await
            .map_err(|e| PgError::from_client_error(&format!("reading roles on node {node}"), &e))?
            .is_some();
        if known {
            sql.push_str(&format!(
                "GRANT {} TO {}{};",
                quote_ident(group),
                quote_ident(role),
                if *admin { " WITH ADMIN OPTION" } else { "" }
            ));
        }
    }
    // One implicit transaction: all or nothing. The text carries the verifier: the
    // error is reported without it.
    target.batch_execute(&sql).await.map_err(|e| {
        let reason = e
            .as_db_error()
            .map(|d| d.message().to_string())
            .unwrap_or_else(|| e.to_string());
        PgError::internal(format!("copying role \"{role}\" to node {node}: {reason}"))
    })?;
    tracing::info!("copied role \"{role}\" from the coordinator node to node {node}");
    Ok(())
}
