//! Roles on every node. The coordinator node holds the truth; a worker's role is made
//! equal to it by copying its `pg_authid` row (attributes, connection limit, `VALID
//! UNTIL` and the password *verifier* `rolpassword` verbatim, so a SCRAM login that
//! works on the coordinator node works on every worker) and its memberships
//! (`pg_auth_members`, both directions, admin option).
//!
//! - [`sync_role`]: one role on every worker (2PC), e.g. after a pass-through login
//!   to a worker failed; [`sync_role_on_node`]: on one node.
//! - [`copy_all_roles`]: every role and membership onto a node `citus_add_node` adds.
//! - A client's `CREATE/ALTER/DROP ROLE`, `GRANT/REVOKE role` runs in the session's
//!   block on its own backend, then on every worker; after the commit the roles it
//!   changed are made equal here ([`sync_role`]; `executor/session/ddl_in_block.rs`).
//!
//! Predefined `pg_*` roles exist on every node already and are never copied. Neither
//! passwords nor verifiers appear in errors or logs: a failed statement is reported by
//! the role and node it was for, never by its text. Per-role settings (`ALTER ROLE
//! ... SET`) are not copied: the statement itself runs on every worker.

use super::db_err;
use super::twopc::{self, Participant};
use crate::backend::control;
use crate::catalog::cache::CatalogCache;
use crate::config::Config;
use crate::error::PgError;
use crate::sql::quote::{quote_ident, quote_literal};
use futures_util::future::join_all;
use std::collections::{BTreeMap, BTreeSet};
use tokio_postgres::Client;

/// A `pg_authid` row. No `Debug`: it holds the password verifier.
#[derive(Clone, PartialEq, Eq)]
struct RoleDef {
    name: String,
    superuser: bool,
    inherit: bool,
    createrole: bool,
    createdb: bool,
    login: bool,
    replication: bool,
    bypassrls: bool,
    connection_limit: i32,
    password: Option<String>,
    /// `rolvaliduntil` as text (with its UTC offset).
    valid_until: Option<String>,
}

impl RoleDef {
    /// The attribute list of `CREATE ROLE` / `ALTER ROLE`. `was_valid_until`: the
    /// target's current expiry (PostgreSQL cannot set it back to NULL; `infinity` is
    /// the same for logins).
    fn attributes(&self, was_valid_until: Option<&str>) -> String {
        let flag = |on: bool, name: &str| format!("{}{name}", if on { "" } else { "NO" });
        let mut out = [
            flag(self.superuser, "SUPERUSER"),
            flag(self.inherit, "INHERIT"),
            flag(self.createrole, "CREATEROLE"),
            flag(self.createdb, "CREATEDB"),
            flag(self.login, "LOGIN"),
            flag(self.replication, "REPLICATION"),
            flag(self.bypassrls, "BYPASSRLS"),
        ]
        .join(" ");
        out.push_str(&format!(" CONNECTION LIMIT {}", self.connection_limit));
        match &self.password {
            Some(p) => out.push_str(&format!(" PASSWORD {}", quote_literal(p))),
            None => out.push_str(" PASSWORD NULL"),
        }
        match (&self.valid_until, was_valid_until) {
            (Some(v), _) => out.push_str(&format!(" VALID UNTIL {}", quote_literal(v))),
            (None, Some(_)) => out.push_str(" VALID UNTIL 'infinity'"),
            (None, None) => {}
        }
        out
    }
}

/// A `pg_auth_members` row by names.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Membership {
    role: String,
    member: String,
    admin: bool,
    grantor: Option<String>,
}

/// Roles named in `names` (all but the predefined ones when None).
async fn read_roles(client: &Client, names: Option<&[String]>) -> Result<Vec<RoleDef>, PgError> {
    let names: Option<Vec<String>> = names.map(<[String]>::to_vec);
    let rows = client
        .query(
            "SELECT rolname::text, rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolcanlogin, \
                    rolreplication, rolbypassrls, rolconnlimit, rolpassword, rolvaliduntil::text \
             FROM pg_catalog.pg_authid \
             WHERE rolname !~ '^pg_' AND ($1::text[] IS NULL OR rolname = ANY($1)) ORDER BY oid",
            &[&names],
        )
        .await
        .map_err(db_err("cannot read pg_authid"))?;
    Ok(rows
        .iter()
        .map(|r| RoleDef {
            name: r.get(0),
            superuser: r.get(1),
            inherit: r.get(2),
            createrole: r.get(3),
            createdb: r.get(4),
            login: r.get(5),
            replication: r.get(6),
            bypassrls: r.get(7),
            connection_limit: r.get(8),
            password: r.get(9),
            valid_until: r.get(10),
        })
        .collect())
}

/// Memberships with a role of `names` on either side (all when None).
async fn read_memberships(
    client: &Client,
    names: Option<&[String]>,
) -> Result<Vec<Membership>, PgError> {
    let names: Option<Vec<String>> = names.map(<[String]>::to_vec);
    let rows = client
        .query(
            "SELECT r.rolname::text, m.rolname::text, a.admin_option, g.rolname::text \
             FROM pg_catalog.pg_auth_members a \
             JOIN pg_catalog.pg_authid r ON r.oid = a.roleid \
             JOIN pg_catalog.pg_authid m ON m.oid = a.member \
             LEFT JOIN pg_catalog.pg_authid g ON g.oid = a.grantor \
             WHERE $1::text[] IS NULL OR r.rolname = ANY($1) OR m.rolname = ANY($1)",
            &[&names],
        )
        .await
        .map_err(db_err("cannot read pg_auth_members"))?;
    Ok(rows
        .iter()
        .map(|r| Membership {
            role: r.get(0),
            member: r.get(1),
            admin: r.get(2),
            grantor: r.get(3),
        })
        .collect())
}

async fn role_names(client: &Client) -> Result<BTreeSet<String>, PgError> {
    Ok(client
        .query("SELECT rolname::text FROM pg_catalog.pg_authid", &[])
        .await
        .map_err(db_err("cannot read pg_authid"))?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// One statement of a sync, and the role it is about (for its error message).
struct Step {
    role: String,
    sql: String,
}

/// What makes the target's roles `wanted` (all when None) equal to the source's.
/// `source_*` come from the coordinator node, `target_*` from the worker.
fn plan_sync(
    wanted: Option<&[String]>,
    source_roles: &[RoleDef],
    source_members: &[Membership],
    target_roles: &[RoleDef],
    target_names: &BTreeSet<String>,
    target_members: &[Membership],
) -> Vec<Step> {
    let mut steps = Vec::new();
    let target: BTreeMap<&str, &RoleDef> =
        target_roles.iter().map(|r| (r.name.as_str(), r)).collect();
    for r in source_roles {
        let sql = match target.get(r.name.as_str()) {
            None if target_names.contains(&r.name) => continue,
            None => format!(
                "CREATE ROLE {} WITH {}",
                quote_ident(&r.name),
                r.attributes(None)
            ),
            Some(t) if *t == r => continue,
            Some(t) => format!(
                "ALTER ROLE {} WITH {}",
                quote_ident(&r.name),
                r.attributes(t.valid_until.as_deref())
            ),
        };
        steps.push(Step {
            role: r.name.clone(),
            sql,
        });
    }
    let exists =
        |name: &str| target_names.contains(name) || source_roles.iter().any(|r| r.name == name);
    let key = |m: &Membership| (m.role.clone(), m.member.clone());
    let have: BTreeMap<_, &Membership> = target_members.iter().map(|m| (key(m), m)).collect();
    let want: BTreeMap<_, &Membership> = source_members.iter().map(|m| (key(m), m)).collect();
    // Roles named pg_* are PostgreSQL's own (a client cannot create one): never
    // copied, never dropped.
    let gone = |name: &str| {
        !name.starts_with("pg_")
            && wanted.is_some_and(|w| w.iter().any(|x| x == name))
            && !source_roles.iter().any(|r| r.name == name)
    };
    for (k, m) in &have {
        // Dropping a role drops its memberships.
        if gone(&m.role) || gone(&m.member) {
            continue;
        }
        let (role, member) = (quote_ident(&k.0), quote_ident(&k.1));
        let sql = match want.get(k) {
            None => format!("REVOKE {role} FROM {member}"),
            Some(w) if m.admin && !w.admin => {
                format!("REVOKE ADMIN OPTION FOR {role} FROM {member}")
            }
            Some(_) => continue,
        };
        steps.push(Step {
            role: k.1.clone(),
            sql,
        });
    }
    for (k, m) in &want {
        if have.get(k).is_some_and(|h| h.admin || !m.admin) || !exists(&k.0) || !exists(&k.1) {
            continue;
        }
        let mut sql = format!("GRANT {} TO {}", quote_ident(&k.0), quote_ident(&k.1));
        if m.admin {
            sql.push_str(" WITH ADMIN OPTION");
        }
        if let Some(g) = m.grantor.as_deref().filter(|g| exists(g)) {
            sql.push_str(&format!(" GRANTED BY {}", quote_ident(g)));
        }
        steps.push(Step {
            role: k.1.clone(),
            sql,
        });
    }
    for name in wanted.unwrap_or_default() {
        if gone(name) && target_names.contains(name) {
            steps.push(Step {
                role: name.clone(),
                sql: format!("DROP ROLE {}", quote_ident(name)),
            });
        }
    }
    steps
}

/// Makes the roles `wanted` (every role when None) on `worker` equal to the
/// coordinator node's, in the open transactions of both connections (the coordinator's
/// may hold the uncommitted change). A role a membership needs that the worker lacks
/// is copied too. `renamed`: (old, new) of a role renamed on the coordinator node.
pub(crate) async fn sync_roles_on(
    coord: &Client,
    worker: &Client,
    node: &str,
    wanted: Option<&[String]>,
    renamed: Option<(&str, &str)>,
) -> Result<(), PgError> {
    let fail = |role: &str, e: tokio_postgres::Error| {
        // Never the statement: it may carry a verifier.
        PgError::from_client_error(&format!("cannot copy role \"{role}\" to node {node}"), &e)
    };
    let mut target_names = role_names(worker).await?;
    if let Some((old, new)) = renamed {
        if target_names.contains(old) && !target_names.contains(new) {
            let sql = format!(
                "ALTER ROLE {} RENAME TO {}",
                quote_ident(old),
                quote_ident(new)
            );
            worker.batch_execute(&sql).await.map_err(|e| fail(old, e))?;
            target_names = role_names(worker).await?;
        }
    }
    // The wanted roles, and the other side of their memberships the worker lacks.
    let mut names: Option<Vec<String>> = wanted.map(<[String]>::to_vec);
    let (source_roles, source_members) = loop {
        let roles = read_roles(coord, names.as_deref()).await?;
        let members = read_memberships(coord, names.as_deref()).await?;
        let Some(list) = names.as_mut() else {
            break (roles, members);
        };
        let missing: BTreeSet<String> = members
            .iter()
            .flat_map(|m| [&m.role, &m.member])
            .filter(|n| !target_names.contains(*n) && !list.contains(n))
            .cloned()
            .collect();
        if missing.is_empty() {
            break (roles, members);
        }
        list.extend(missing);
    };
    let listed: Option<Vec<String>> = names.clone();
    let target_roles = read_roles(worker, listed.as_deref()).await?;
    // pgshard's own user keeps its password on the worker when the coordinator node's
    // has none (it may log in there otherwise): PASSWORD NULL would lock pgshard out.
    let own: String = worker
        .query_one("SELECT session_user::text", &[])
        .await
        .map_err(db_err("cannot read the session user"))?
        .get(0);
    let mut source_roles = source_roles;
    for r in source_roles
        .iter_mut()
        .filter(|r| r.name == own && r.password.is_none())
    {
        r.password = target_roles
            .iter()
            .find(|t| t.name == own)
            .and_then(|t| t.password.clone());
    }
    let target_members = read_memberships(worker, listed.as_deref()).await?;
    let steps = plan_sync(
        names.as_deref(),
        &source_roles,
        &source_members,
        &target_roles,
        &target_names,
        &target_members,
    );
    for step in steps {
        worker
            .batch_execute(&step.sql)
            .await
            .map_err(|e| fail(&step.role, e))?;
    }
    Ok(())
}

/// A coordinator-node connection inside `BEGIN`. No catalog lock: role changes must
/// not wait for a long `create_distributed_table`; PostgreSQL orders concurrent
/// changes of one role on the coordinator node.
async fn begin_coordinator(cfg: &Config) -> Result<Client, PgError> {
    let coord = control::connect_coordinator(cfg).await?;
    coord
        .batch_execute("BEGIN")
        .await
        .map_err(db_err("cannot begin on the coordinator node"))?;
    Ok(coord)
}

/// Active workers as (group, host, port).
fn workers(cache: &CatalogCache) -> Vec<(i32, String, u16)> {
    cache
        .snapshot()
        .workers
        .iter()
        .filter(|w| w.is_active)
        .map(|w| (w.group_id, w.host.clone(), w.port))
        .collect()
}

/// Syncs `roles` on every participant, then commits everything with 2PC (the
/// coordinator node's transaction, open on `coord`, is the anchor).
async fn sync_and_commit(
    coord: &Client,
    mut participants: Vec<Participant>,
    roles: &[String],
    renamed: Option<(&str, &str)>,
) -> Result<(), PgError> {
    let results = join_all(participants.iter().map(|p| async move {
        sync_roles_on(coord, &p.client, &p.node(), Some(roles), renamed).await
    }))
    .await;
    if let Some(e) = results.into_iter().find_map(Result::err) {
        let _ = coord.batch_execute("ROLLBACK").await;
        twopc::abort(&participants).await;
        return Err(e);
    }
    twopc::commit_distributed(coord, &mut participants, "role", || async { Ok(()) }).await
}

/// Makes `role` on every active worker equal to the coordinator node's: created when
/// missing, attributes, password verifier and memberships copied, dropped when the
/// coordinator node has no such role. One two-phase commit.
pub async fn sync_role(cache: &CatalogCache, role: &str) -> Result<(), PgError> {
    let coord = begin_coordinator(cache.config()).await?;
    let participants =
        super::shards::open_participants(cache.config(), workers(cache).into_iter()).await?;
    sync_and_commit(&coord, participants, &[role.to_string()], None).await
}

/// [`sync_role`] on one node (`host:port`), e.g. the worker a pass-through login failed on.
pub async fn sync_role_on_node(
    cfg: &Config,
    host: &str,
    port: u16,
    role: &str,
) -> Result<(), PgError> {
    let coord = control::connect_coordinator(cfg).await?;
    let worker = control::connect(cfg, host, port).await?;
    let node = format!("{host}:{port}");
    worker
        .batch_execute("BEGIN")
        .await
        .map_err(db_err(&format!("cannot begin on node {node}")))?;
    sync_roles_on(&coord, &worker, &node, Some(&[role.to_string()]), None).await?;
    worker
        .batch_execute("COMMIT")
        .await
        .map_err(db_err(&format!(
            "cannot commit role \"{role}\" on node {node}"
        )))
}

/// Copies every role and membership of the coordinator node (read on `coord`) onto
/// the node at `host:port`, in one transaction there: what `citus_add_node` does
/// before the node gets shards. Roles the node has and the coordinator node lacks stay.
pub(crate) async fn copy_all_roles(
    cfg: &Config,
    coord: &Client,
    host: &str,
    port: u16,
) -> Result<(), PgError> {
    let worker = control::connect(cfg, host, port).await?;
    let node = format!("{host}:{port}");
    worker
        .batch_execute("BEGIN")
        .await
        .map_err(db_err(&format!("cannot begin on node {node}")))?;
    sync_roles_on(coord, &worker, &node, None, None).await?;
    worker
        .batch_execute("COMMIT")
        .await
        .map_err(db_err(&format!("cannot commit the roles on node {node}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(name: &str) -> RoleDef {
        RoleDef {
            name: name.into(),
            superuser: false,
            inherit: true,
            createrole: false,
            createdb: false,
            login: true,
            replication: false,
            bypassrls: false,
            connection_limit: -1,
            password: Some("SCRAM-SHA-256$4096:c2FsdA==$a2V5:c2VydmVy".into()),
            valid_until: None,
        }
    }

    fn member(role: &str, member: &str, admin: bool) -> Membership {
        Membership {
            role: role.into(),
            member: member.into(),
            admin,
            grantor: Some("postgres".into()),
        }
    }

    fn sqls(steps: Vec<Step>) -> Vec<String> {
        steps.into_iter().map(|s| s.sql).collect()
    }

    #[test]
    fn creates_alters_and_drops() {
        let names: BTreeSet<String> = ["postgres", "old", "gone"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut changed = role("old");
        changed.valid_until = None;
        let mut was = role("old");
        was.valid_until = Some("2030-01-01 00:00:00+00".into());
        was.login = false;
        let wanted = ["new".to_string(), "old".into(), "gone".into()];
        let s = sqls(plan_sync(
            Some(&wanted),
            &[role("new"), changed],
            &[member("old", "new", true)],
            &[was],
            &names,
            &[],
        ));
        assert_eq!(
            s,
            vec![
                "CREATE ROLE \"new\" WITH NOSUPERUSER INHERIT NOCREATEROLE NOCREATEDB LOGIN NOREPLICATION NOBYPASSRLS CONNECTION LIMIT -1 PASSWORD 'SCRAM-SHA-256$4096:c2FsdA==$a2V5:c2VydmVy'",
                "ALTER ROLE \"old\" WITH NOSUPERUSER INHERIT NOCREATEROLE NOCREATEDB LOGIN NOREPLICATION NOBYPASSRLS CONNECTION LIMIT -1 PASSWORD 'SCRAM-SHA-256$4096:c2FsdA==$a2V5:c2VydmVy' VALID UNTIL 'infinity'",
                "GRANT \"old\" TO \"new\" WITH ADMIN OPTION GRANTED BY \"postgres\"",
                "DROP ROLE \"gone\"",
            ]
        );
    }

    #[test]
    fn equal_roles_need_nothing_and_memberships_are_made_equal() {
        let names: BTreeSet<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let wanted = ["a".to_string()];
        let s = sqls(plan_sync(
            Some(&wanted),
            &[role("a")],
            &[member("b", "a", false), member("a", "c", false)],
            &[role("a")],
            &names,
            &[member("b", "a", true), member("c", "a", false)],
        ));
        assert_eq!(
            s,
            vec![
                "REVOKE ADMIN OPTION FOR \"b\" FROM \"a\"",
                "REVOKE \"c\" FROM \"a\"",
                "GRANT \"a\" TO \"c\"",
            ]
        );
    }

    #[test]
    fn postgresql_own_roles_are_never_dropped() {
        let names: BTreeSet<String> = ["pg_signal_backend".to_string()].into_iter().collect();
        let wanted = ["pg_signal_backend".to_string()];
        let s = sqls(plan_sync(Some(&wanted), &[], &[], &[], &names, &[]));
        assert!(s.is_empty(), "{s:?}");
    }

    #[test]
    fn a_null_password_and_hostile_names() {
        let mut r = role("x\"; DROP ROLE postgres; --");
        r.password = None;
        r.superuser = true;
        let s = sqls(plan_sync(None, &[r], &[], &[], &BTreeSet::new(), &[]));
        assert_eq!(
            s,
            vec!["CREATE ROLE \"x\"\"; DROP ROLE postgres; --\" WITH SUPERUSER INHERIT NOCREATEROLE NOCREATEDB LOGIN NOREPLICATION NOBYPASSRLS CONNECTION LIMIT -1 PASSWORD NULL"]
        );
    }
}
