//! DDL propagation: a DDL statement on a distributed (or reference) table runs on the
//! coordinator node's shell table and on every shard placement as one distributed
//! transaction (two-phase commit anchored in the coordinator node, `twopc`).
//!
//! Order: the shell first (PostgreSQL checks the statement and names any unnamed
//! objects), then every node in parallel (its shards one after another), then the
//! catalog change (distribution column renamed) and the commit. Any failure rolls
//! everything back; the error names the shard, node and statement.
//!
//! `CREATE/DROP INDEX CONCURRENTLY` cannot run in a transaction: the shell first, then
//! the shards node by node in parallel; a failure stops there and says which shards
//! already have the change.

use super::{abbreviate, begin_catalog_change, db_err};
use super::{foreign_keys, twopc};
use crate::backend::control;
use crate::catalog::cache::{bump_version, CatalogCache};
use crate::catalog::{shard_table_name, Catalog, DistTable, GroupId, Oid};
use crate::error::PgError;
use crate::planner::ddl::{drop_index_shard_statement, shard_statement, DdlPlan, Unnamed};
use crate::sql::quote::quote_ident;
use futures_util::future::join_all;
use pg_query::protobuf;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio_postgres::Client;

/// Longest identifier PostgreSQL keeps.
const MAX_IDENTIFIER: usize = 63;

/// A node and the (shard id, statement) list it runs.
pub(crate) type NodeWork = BTreeMap<(GroupId, String, u16), Vec<(i64, String)>>;

/// An error of the client's own statement on the shell: PostgreSQL's, unchanged.
fn shell_error(e: &tokio_postgres::Error) -> PgError {
    match e.as_db_error() {
        Some(db) => {
            let mut err = PgError::new(db.code().code(), db.message());
            err.detail = db.detail().map(str::to_string);
            err.hint = db.hint().map(str::to_string);
            err
        }
        None => PgError::from_client_error("coordinator node", e),
    }
}

/// Runs the client's statement `text` on the coordinator node's open transaction on
/// `coord` (pgshard's own superuser connection) as `caller`, so that PostgreSQL checks
/// the caller's privileges there (ownership, CREATEROLE, grant options) and answers
/// with its own error; pgshard's user is back for the catalog work that follows.
/// Outside a transaction (`CREATE INDEX CONCURRENTLY`) the role is set for the session.
/// The text runs with the caller's `search_path`, so its names mean what they mean
/// for the caller.
pub(crate) async fn run_as_caller(
    coord: &Client,
    caller: &Caller<'_>,
    text: &str,
) -> Result<(), PgError> {
    run_as(coord, caller, text, true).await
}

/// Who runs a statement on a shell: the caller's role and `search_path`.
pub struct Caller<'a> {
    pub role: &'a str,
    pub search_path: &'a str,
}

async fn run_as(
    coord: &Client,
    caller: &Caller<'_>,
    text: &str,
    in_transaction: bool,
) -> Result<(), PgError> {
    let scope = if in_transaction { "LOCAL " } else { "" };
    let role = caller.role;
    coord
        .batch_execute(&format!("SET {scope}ROLE {}", quote_ident(role)))
        .await
        .map_err(db_err(&format!("cannot take the role \"{role}\"")))?;
    coord
        .execute(
            "SELECT pg_catalog.set_config('search_path', $1, $2)",
            &[&caller.search_path, &in_transaction],
        )
        .await
        .map_err(db_err("cannot take the caller's search_path"))?;
    coord
        .batch_execute(text)
        .await
        .map_err(|e| shell_error(&e))?;
    coord
        .batch_execute("RESET ROLE")
        .await
        .map_err(db_err("cannot reset the role"))
}

/// Statements per node for every placement of `table`.
pub(crate) fn work_per_node(
    catalog: &Catalog,
    table: &DistTable,
    sql_for: impl Fn(i64) -> Result<String, PgError>,
) -> Result<NodeWork, PgError> {
    let mut per_node = NodeWork::new();
    for (node, shards) in catalog.placements_by_node(table)? {
        let stmts = shards
            .iter()
            .map(|id| Ok((*id, sql_for(*id)?)))
            .collect::<Result<Vec<_>, PgError>>()?;
        per_node.insert((node.group_id, node.host.clone(), node.port), stmts);
    }
    Ok(per_node)
}

/// Runs one node's shard statements in order; an error names the shard, node and statement.
pub(super) async fn run_on_node(
    client: &Client,
    host: &str,
    port: u16,
    stmts: &[(i64, String)],
) -> Result<(), PgError> {
    for (shard_id, sql) in stmts.iter().filter(|(_, sql)| !sql.is_empty()) {
        client.batch_execute(sql).await.map_err(|e| {
            PgError::from_client_error(&shard_context(*shard_id, host, port, sql), &e)
        })?;
    }
    Ok(())
}

/// What an error of a shard statement is prefixed with: the shard, node and statement.
pub(crate) fn shard_context(shard_id: i64, host: &str, port: u16, sql: &str) -> String {
    format!(
        "shard {shard_id} on node {host}:{port}, statement \"{}\"",
        abbreviate(sql)
    )
}

/// A named object of a table: (name, Some(contype)) for constraints, (name, None) for
/// indexes not made by one; and its columns (sorted).
type Object = (String, Option<char>, Vec<String>);

/// Index and constraint names of a relation.
async fn object_names(coord: &Client, relid: Oid) -> Result<Vec<Object>, PgError> {
    let rows = coord
        .query(
            "SELECT conname::text, contype::text, oid, ARRAY(SELECT a.attname::text FROM pg_catalog.pg_attribute a \
                      WHERE a.attrelid = conrelid AND a.attnum = ANY(conkey) ORDER BY 1) \
             FROM pg_catalog.pg_constraint WHERE conrelid = $1 \
             UNION ALL \
             SELECT c.relname::text, NULL, c.oid, '{}'::text[] FROM pg_catalog.pg_index i \
               JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid \
             WHERE i.indrelid = $1 AND NOT EXISTS \
               (SELECT 1 FROM pg_catalog.pg_constraint k WHERE k.conindid = i.indexrelid AND k.conrelid = $1) \
             ORDER BY 3",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot read the shell table's indexes and constraints"))?;
    Ok(rows
        .iter()
        .map(|r| {
            let kind: Option<String> = r.get(1);
            (r.get(0), kind.and_then(|k| k.chars().next()), r.get(3))
        })
        .collect())
}

/// The names PostgreSQL gave the unnamed objects: the new object of the same kind on
/// the same columns. Two unnamed objects alike would be ambiguous: refused (the
/// caller's transaction then rolls back).
fn resolve_unnamed(
    unnamed: &[Unnamed],
    before: &[Object],
    after: &[Object],
) -> Result<Vec<String>, PgError> {
    let fresh: Vec<&Object> = after.iter().filter(|a| !before.contains(a)).collect();
    let mut out = Vec::new();
    for u in unnamed {
        let matches: Vec<&&Object> = fresh
            .iter()
            .filter(|(_, kind, cols)| match u {
                Unnamed::Index => kind.is_none(),
                Unnamed::Constraint(k, want) => *kind == Some(*k) && cols == want,
            })
            .collect();
        match matches.as_slice() {
            [one] => out.push(one.0.clone()),
            [] => {
                return Err(PgError::internal(
                    "pgshard could not find the name PostgreSQL gave a new object",
                ))
            }
            _ => {
                return Err(PgError::not_supported(
                    "pgshard cannot tell apart several unnamed constraints of the same kind on the same columns: name them",
                ))
            }
        }
    }
    Ok(out)
}

/// Runs a DDL statement on a distributed table's shell (as `caller`) and every shard
/// placement.
pub async fn propagate_ddl(
    cache: &CatalogCache,
    plan: &DdlPlan,
    caller: &Caller<'_>,
) -> Result<(), PgError> {
    let plan = &plan.for_caller(caller.role);
    if plan.concurrent {
        return concurrently(cache, plan, caller).await;
    }
    let table = &plan.table;
    if let Some(new) = &plan.new_table_name {
        let longest = table
            .shards
            .iter()
            .map(|s| shard_table_name(new, s.shard_id))
            .max_by_key(|n| n.len())
            .unwrap_or_default();
        if longest.len() > MAX_IDENTIFIER {
            return Err(PgError::not_supported(format!(
                "cannot rename \"{}\" to \"{new}\": its shard names (\"{longest}\") would exceed {MAX_IDENTIFIER} bytes",
                table.name
            )));
        }
    }
    let coord = begin_catalog_change(cache).await?;
    let before = if plan.unnamed.is_empty() {
        Vec::new()
    } else {
        object_names(&coord, table.relid).await?
    };
    let keys_before = if plan.foreign_keys {
        foreign_keys::names(&coord, table.relid).await?
    } else {
        Vec::new()
    };
    run_as_caller(&coord, caller, &plan.text).await?;
    let resolved = if plan.unnamed.is_empty() {
        Vec::new()
    } else {
        let after = object_names(&coord, table.relid).await?;
        resolve_unnamed(&plan.unnamed, &before, &after)?
    };
    // The foreign keys the statement made on the shell, checked and paired.
    let new_keys = if plan.foreign_keys {
        foreign_keys::resolve(
            &coord,
            table.relid,
            foreign_keys::side_of_table(table),
            table.shards.iter().any(|s| s.placement_groups.len() > 1),
            &table
                .shards
                .iter()
                .map(|s| (s.shard_id, s.min))
                .collect::<Vec<_>>(),
            &keys_before,
        )
        .await?
    } else {
        Vec::new()
    };
    let catalog = cache.snapshot();
    let per_node = work_per_node(&catalog, table, |id| {
        let mut sql = shard_statement(plan, id, &resolved)?;
        for key in &new_keys {
            if !sql.is_empty() {
                sql.push_str(";\n");
            }
            sql.push_str(&key.shard_sql(&table.schema, &table.name, id)?);
        }
        Ok(sql)
    })?;
    let mut participants =
        super::shards::open_participants(cache.config(), per_node.keys().cloned()).await?;
    let results = join_all(participants.iter().map(|p| {
        let stmts = &per_node[&(p.group_id, p.host.clone(), p.port)];
        run_on_node(&p.client, &p.host, p.port, stmts)
    }))
    .await;
    if let Some(e) = results.into_iter().find_map(Result::err) {
        twopc::abort(&participants).await;
        return Err(e);
    }
    let relid = table.relid;
    let new_column = plan.new_dist_column.clone();
    twopc::commit_distributed(&coord, &mut participants, "ddl", || async {
        if let Some(col) = &new_column {
            coord
                .execute(
                    "UPDATE pg_catalog.pg_dist_partition SET partkey = $2 WHERE logicalrelid = $1::oid::regclass",
                    &[&relid, col],
                )
                .await
                .map_err(db_err("cannot update pg_dist_partition"))?;
        }
        if !new_keys.is_empty() {
            // The shell's new keys are not checked there (`catalog::guard`).
            coord
                .execute(crate::catalog::guard::GUARD_ONE_SQL, &[&relid])
                .await
                .map_err(db_err("cannot turn off the shell's key checks"))?;
        }
        // Column lists, names and types feed planning: every process reloads.
        bump_version(&coord).await
    })
    .await?;
    cache.reload().await;
    Ok(())
}

/// `CREATE INDEX CONCURRENTLY`: the shell first, then each node's shards in turn,
/// nodes in parallel, each statement on its own.
async fn concurrently(
    cache: &CatalogCache,
    plan: &DdlPlan,
    caller: &Caller<'_>,
) -> Result<(), PgError> {
    let table = &plan.table;
    let coord = control::connect_coordinator(cache.config()).await?;
    let before = if plan.unnamed.is_empty() {
        Vec::new()
    } else {
        object_names(&coord, table.relid).await?
    };
    run_as(&coord, caller, &plan.text, false).await?;
    let resolved = if plan.unnamed.is_empty() {
        Vec::new()
    } else {
        let after = object_names(&coord, table.relid).await?;
        resolve_unnamed(&plan.unnamed, &before, &after)?
    };
    let catalog = cache.snapshot();
    let per_node = work_per_node(&catalog, table, |id| shard_statement(plan, id, &resolved))?;
    let r = run_outside_transaction(cache, &per_node).await;
    // The shell's index list changed whatever happened on the shards.
    bump_version(&coord).await?;
    cache.reload().await;
    r
}

async fn run_outside_transaction(cache: &CatalogCache, per_node: &NodeWork) -> Result<(), PgError> {
    let cfg = cache.config();
    let results = join_all(per_node.iter().map(|((_, host, port), stmts)| async move {
        let client = control::connect(cfg, host, *port).await?;
        run_on_node(&client, host, *port, stmts).await
    }))
    .await;
    match results.into_iter().find_map(Result::err) {
        None => Ok(()),
        Some(e) => Err(e.with_hint(
            "The statement does not run in a transaction: the coordinator node and some shards \
             may already have the change. Repeat it with IF EXISTS / IF NOT EXISTS, or undo it.",
        )),
    }
}

/// `DROP INDEX [CONCURRENTLY]` of indexes of distributed tables: the shell (as
/// `caller`) and every shard placement.
pub async fn drop_indexes(
    cache: &CatalogCache,
    d: &protobuf::DropStmt,
    text: &str,
    indexes: &[(Arc<DistTable>, String)],
    caller: &Caller<'_>,
) -> Result<(), PgError> {
    let catalog = cache.snapshot();
    let mut per_node = NodeWork::new();
    for (table, index) in indexes {
        let work = work_per_node(&catalog, table, |id| {
            drop_index_shard_statement(d, &table.schema, index, id)
        })?;
        for (k, mut v) in work {
            per_node.entry(k).or_default().append(&mut v);
        }
    }
    if d.concurrent {
        let coord = control::connect_coordinator(cache.config()).await?;
        run_as(&coord, caller, text, false).await?;
        let r = run_outside_transaction(cache, &per_node).await;
        bump_version(&coord).await?;
        return r;
    }
    let coord = begin_catalog_change(cache).await?;
    run_as_caller(&coord, caller, text).await?;
    let mut participants =
        super::shards::open_participants(cache.config(), per_node.keys().cloned()).await?;
    let results = join_all(participants.iter().map(|p| {
        let stmts = &per_node[&(p.group_id, p.host.clone(), p.port)];
        run_on_node(&p.client, &p.host, p.port, stmts)
    }))
    .await;
    if let Some(e) = results.into_iter().find_map(Result::err) {
        twopc::abort(&participants).await;
        return Err(e);
    }
    twopc::commit_distributed(&coord, &mut participants, "ddl", || async {
        bump_version(&coord).await
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_unnamed_objects_by_kind_in_order() {
        let o = |n: &str, k: Option<char>, c: &[&str]| -> Object {
            (n.into(), k, c.iter().map(|s| s.to_string()).collect())
        };
        let before = vec![o("t_pkey", Some('p'), &["k"])];
        let after = vec![
            o("t_pkey", Some('p'), &["k"]),
            o("t_w_check", Some('c'), &["w"]),
            o("t_v_idx", None, &[]),
            o("t_v_check", Some('c'), &["v"]),
        ];
        let c = |k: char, cols: &[&str]| {
            Unnamed::Constraint(k, cols.iter().map(|s| s.to_string()).collect())
        };
        let got = resolve_unnamed(
            &[Unnamed::Index, c('c', &["v"]), c('c', &["w"])],
            &before,
            &after,
        )
        .unwrap();
        assert_eq!(got, vec!["t_v_idx", "t_v_check", "t_w_check"]);
        assert!(resolve_unnamed(&[c('u', &["k"])], &before, &after).is_err());
        let twice = vec![o("a", Some('c'), &["v"]), o("b", Some('c'), &["v"])];
        assert_eq!(
            resolve_unnamed(&[c('c', &["v"])], &[], &twice)
                .unwrap_err()
                .code,
            "0A000"
        );
    }
}
