//! Commands: the Citus user-facing functions (`create_distributed_table`,
//! `citus_add_node`, ...) that pgshard executes itself.
//!
//! The executor recognises a call (`is_utility_function`), places named arguments by
//! position (`utility_arg_names`) and runs it with [`call_utility`]; arguments arrive
//! as text (None = NULL or omitted) and the result goes back as text rows.
//!
//! - `nodes`: `citus_add_node`, `citus_remove_node`, `citus_get_active_worker_nodes`,
//!   `start_metadata_sync_to_node` / `stop_metadata_sync_to_node`
//! - `distribute`: `create_distributed_table` (shard creation, data copy, 2PC)
//! - `shard_load`: new shards created and loaded by COPY (create / alter)
//! - `alter_table`: `alter_distributed_table` (rows moved into new shards)
//! - `reference`: `create_reference_table`, writes to every placement
//! - `replicate`: `replicate_reference_tables` (and `citus_add_node`'s copies)
//! - `nodes` also: `citus_set_coordinator_host`; `shards` also:
//!   `truncate_local_data_after_distributing_table`
//! - `ddl`: DDL propagation to shells and shards
//! - `foreign_keys`: foreign keys of distributed and reference tables, per shard pair
//! - `shards`: `get_shard_id_for_distribution_column`, the size functions,
//!   `undistribute_table`, and the helpers `drop_distributed_table` and
//!   `maintain_shards` for the executor
//! - `recover_prepared_transactions`: `crate::transaction::recovery`
//! - `citus_cleanup_orphaned_resources`: `shards::drop_orphaned_shards`
//! - `citus_version`: `crate::citus_settings::catalog`; `run_command_on_*` run by the
//!   session as the client's role (`executor::session::run_command`)
//! - `twopc`: two-phase commit of control-plane work anchored in the coordinator node
//! - `roles`: roles made equal on every node; `privileges`: the privilege checks of
//!   these functions, shards' owner/ACL/policies, GRANT propagation

pub mod alter_table;
pub mod ddl;
pub mod dependencies;
pub mod distribute;
pub mod foreign_keys;
pub mod functions;
pub mod nodes;
pub mod privileges;
pub mod reference;
pub mod replicate;
pub mod roles;
pub mod shard_load;
pub mod shards;
pub mod twopc;

pub use shards::{drop_distributed_table, maintain_shards};

use crate::catalog::cache::CatalogCache;
use crate::catalog::schema::CATALOG_LOCK_KEY;
use crate::error::{sqlstate, PgError};
use tokio::sync::mpsc::UnboundedSender;
use tokio_postgres::Client;

/// The `citus.*` settings of the calling session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CitusSettings {
    pub shard_count: u32,
    pub shard_replication_factor: u32,
}

/// Type oids of result columns.
pub mod type_oid {
    pub const INT4: u32 = 23;
    pub const INT8: u32 = 20;
    pub const TEXT: u32 = 25;
    pub const VOID: u32 = 2278;
    pub const BOOL: u32 = 16;
}

/// A function's result set, in text format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UtilityResult {
    pub columns: Vec<(String, u32)>,
    pub rows: Vec<Vec<Option<String>>>,
}

impl UtilityResult {
    /// The one-row result of a `void` function named `name`.
    pub fn void(name: &str) -> UtilityResult {
        UtilityResult {
            columns: vec![(name.to_string(), type_oid::VOID)],
            rows: vec![vec![Some(String::new())]],
        }
    }

    /// A one-row, one-column result.
    pub fn scalar(name: &str, type_oid: u32, value: Option<String>) -> UtilityResult {
        UtilityResult {
            columns: vec![(name.to_string(), type_oid)],
            rows: vec![vec![value]],
        }
    }
}

/// The SQL name of a result column type of the Citus functions.
pub fn result_type_sql(type_oid: u32) -> &'static str {
    match type_oid {
        type_oid::INT8 => "pg_catalog.int8",
        type_oid::INT4 => "pg_catalog.int4",
        16 => "pg_catalog.bool",
        _ => "pg_catalog.text",
    }
}

/// SQL standing for a Citus function's whole result where its call was a FROM item:
/// a subquery of typed rows with the function's column names, followed by `AS alias`
/// when the FROM item had none (PostgreSQL names it after the function).
pub fn result_as_from_item(
    columns: &[(String, u32)],
    rows: &[Vec<Option<String>>],
    alias: &str,
) -> String {
    use crate::sql::quote::{quote_ident, quote_literal};
    let value = |v: &Option<String>, t: u32| match v {
        Some(v) => format!("CAST({} AS {})", quote_literal(v), result_type_sql(t)),
        None => format!("CAST(NULL AS {})", result_type_sql(t)),
    };
    let names: Vec<String> = columns.iter().map(|(n, _)| quote_ident(n)).collect();
    let body = if rows.is_empty() {
        let cols: Vec<String> = columns
            .iter()
            .zip(&names)
            .map(|((_, t), n)| format!("{} AS {n}", value(&None, *t)))
            .collect();
        format!("(SELECT {} WHERE false)", cols.join(", "))
    } else {
        let tuples: Vec<String> = rows
            .iter()
            .map(|r| {
                let vals: Vec<String> = columns
                    .iter()
                    .enumerate()
                    .map(|(i, (_, t))| value(r.get(i).unwrap_or(&None), *t))
                    .collect();
                format!("({})", vals.join(", "))
            })
            .collect();
        format!(
            "(SELECT * FROM (VALUES {}) AS pgshard_result({}))",
            tuples.join(", "),
            names.join(", ")
        )
    };
    if alias.is_empty() {
        body
    } else {
        format!("{body} AS {}", quote_ident(alias))
    }
}

/// Every function pgshard runs itself, with its argument names (for named notation).
const FUNCTIONS: &[(&str, &[&str])] = &[
    (
        "citus_add_node",
        &["nodename", "nodeport", "groupid", "noderole", "nodecluster"],
    ),
    (
        "master_add_node",
        &["nodename", "nodeport", "groupid", "noderole", "nodecluster"],
    ),
    ("citus_remove_node", &["nodename", "nodeport"]),
    ("master_remove_node", &["nodename", "nodeport"]),
    ("citus_get_active_worker_nodes", &[]),
    ("start_metadata_sync_to_node", &["nodename", "nodeport"]),
    (
        "stop_metadata_sync_to_node",
        &["nodename", "nodeport", "clear_metadata"],
    ),
    ("master_get_active_worker_nodes", &[]),
    (
        "create_distributed_table",
        &[
            "table_name",
            "distribution_column",
            "distribution_type",
            "colocate_with",
            "shard_count",
        ],
    ),
    ("create_reference_table", &["table_name"]),
    (
        "create_distributed_function",
        &[
            "function_name",
            "distribution_arg_name",
            "colocate_with",
            "force_delegation",
        ],
    ),
    (
        "get_shard_id_for_distribution_column",
        &["table_name", "distribution_value"],
    ),
    ("citus_relation_size", &["logicalrelid"]),
    ("citus_table_size", &["logicalrelid"]),
    (
        "citus_total_relation_size",
        &["logicalrelid", "fail_on_error"],
    ),
    (
        "undistribute_table",
        &["table_name", "cascade_via_foreign_keys"],
    ),
    (
        "alter_distributed_table",
        &[
            "table_name",
            "distribution_column",
            "shard_count",
            "colocate_with",
            "cascade_to_colocated",
        ],
    ),
    ("recover_prepared_transactions", &[]),
    ("citus_cleanup_orphaned_resources", &[]),
    ("citus_version", &[]),
    ("citus_stat_statements_reset", &[]),
    ("replicate_reference_tables", &["shard_transfer_mode"]),
    (
        "citus_set_coordinator_host",
        &["host", "port", "node_role", "node_cluster"],
    ),
    (
        "truncate_local_data_after_distributing_table",
        &["function_name"],
    ),
    // Run by the session as the client's role (`executor::session::run_command`).
    ("run_command_on_workers", &["command", "parallel"]),
    (
        "run_command_on_all_nodes",
        &["command", "parallel", "give_warning_for_connection_errors"],
    ),
    (
        "run_command_on_shards",
        &["table_name", "command", "parallel"],
    ),
    (
        "run_command_on_placements",
        &["table_name", "command", "parallel"],
    ),
];

fn normalize(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    match lower.strip_prefix("pg_catalog.") {
        Some(rest) => rest.to_string(),
        None => lower,
    }
}

/// Whether pgshard runs `name` itself (lower-case, schema-less name).
pub fn is_utility_function(name: &str) -> bool {
    let name = normalize(name);
    FUNCTIONS.iter().any(|(f, _)| *f == name)
}

/// Whether utility function `name` only reads (the catalog, sizes): it may run in a
/// transaction's midst, since it has nothing of its own to commit.
pub fn utility_reads_only(name: &str) -> bool {
    matches!(
        normalize(name).as_str(),
        "citus_get_active_worker_nodes"
            | "master_get_active_worker_nodes"
            | "get_shard_id_for_distribution_column"
            | "citus_relation_size"
            | "citus_table_size"
            | "citus_total_relation_size"
            | "citus_version"
            | "citus_stat_statements_reset"
    )
}

/// Argument names of a utility function, in order (empty if unknown).
pub fn utility_arg_names(name: &str) -> &'static [&'static str] {
    let name = normalize(name);
    FUNCTIONS
        .iter()
        .find(|(f, _)| *f == name)
        .map(|(_, a)| *a)
        .unwrap_or(&[])
}

/// The result columns of a utility function, known before it runs (for Describe).
pub fn result_columns(name: &str) -> Vec<(String, u32)> {
    let name = normalize(name);
    let col = |t: u32| vec![(name.clone(), t)];
    match name.as_str() {
        "citus_add_node" | "master_add_node" => col(type_oid::INT4),
        "citus_get_active_worker_nodes" | "master_get_active_worker_nodes" => {
            vec![
                ("node_name".to_string(), type_oid::TEXT),
                ("node_port".to_string(), type_oid::INT8),
            ]
        }
        "get_shard_id_for_distribution_column"
        | "citus_relation_size"
        | "citus_table_size"
        | "citus_total_relation_size" => col(type_oid::INT8),
        "recover_prepared_transactions" | "citus_cleanup_orphaned_resources" => col(type_oid::INT4),
        "citus_version" => col(type_oid::TEXT),
        "run_command_on_workers"
        | "run_command_on_all_nodes"
        | "run_command_on_shards"
        | "run_command_on_placements" => run_command_columns(&name),
        _ => col(type_oid::VOID),
    }
}

/// The result columns of `run_command_on_*`, as Citus declares them.
pub fn run_command_columns(name: &str) -> Vec<(String, u32)> {
    let c = |n: &str, t: u32| (n.to_string(), t);
    match name {
        "run_command_on_all_nodes" => vec![
            c("nodeid", type_oid::INT4),
            c("success", type_oid::BOOL),
            c("result", type_oid::TEXT),
        ],
        "run_command_on_shards" => vec![
            c("shardid", type_oid::INT8),
            c("success", type_oid::BOOL),
            c("result", type_oid::TEXT),
        ],
        "run_command_on_placements" => vec![
            c("nodename", type_oid::TEXT),
            c("nodeport", type_oid::INT4),
            c("shardid", type_oid::INT8),
            c("success", type_oid::BOOL),
            c("result", type_oid::TEXT),
        ],
        _ => vec![
            c("nodename", type_oid::TEXT),
            c("nodeport", type_oid::INT4),
            c("success", type_oid::BOOL),
            c("result", type_oid::TEXT),
        ],
    }
}

/// Runs `name(args)` for `caller` (the role whose privileges apply: the session's
/// current user). `notices` receives progress messages for the client.
pub async fn call_utility(
    cache: &CatalogCache,
    settings: &CitusSettings,
    call: UtilityCall<'_>,
    notices: UnboundedSender<String>,
    caller: &str,
) -> Result<UtilityResult, PgError> {
    let UtilityCall { name, args, relids } = call;
    let name = normalize(name);
    let arg_names = utility_arg_names(&name);
    if !is_utility_function(&name) || args.len() > arg_names.len() {
        return Err(PgError::new(
            sqlstate::UNDEFINED_FUNCTION,
            format!(
                "function {name} with {} arguments does not exist",
                args.len()
            ),
        ));
    }
    if privileges::needs_superuser(&name) {
        privileges::ensure_superuser(cache, caller, &name).await?;
    }
    let args = Args {
        name: &name,
        names: arg_names,
        values: args,
        relids,
    };
    match name.as_str() {
        "citus_add_node" | "master_add_node" => nodes::add_node(cache, &args).await,
        "citus_remove_node" | "master_remove_node" => nodes::remove_node(cache, &args).await,
        "start_metadata_sync_to_node" => nodes::metadata_sync(cache, &args, true, &notices).await,
        "stop_metadata_sync_to_node" => nodes::metadata_sync(cache, &args, false, &notices).await,
        "citus_get_active_worker_nodes" | "master_get_active_worker_nodes" => {
            nodes::active_worker_nodes(cache).await
        }
        "create_distributed_table" => {
            distribute::create_distributed_table(cache, settings, &args, &notices, caller).await
        }
        "create_reference_table" => reference::create_reference_table(cache, &args, caller).await,
        "create_distributed_function" => {
            functions::create_distributed_function(cache, &args, caller).await
        }
        "get_shard_id_for_distribution_column" => {
            shards::get_shard_id_for_distribution_column(cache, &args).await
        }
        "citus_relation_size" | "citus_table_size" | "citus_total_relation_size" => {
            shards::relation_size(cache, &name, &args).await
        }
        "undistribute_table" => shards::undistribute_table(cache, &args, &notices, caller).await,
        "alter_distributed_table" => {
            alter_table::alter_distributed_table(cache, &args, &notices, caller).await
        }
        "recover_prepared_transactions" => {
            let n = crate::transaction::recovery::recover(cache).await?;
            Ok(UtilityResult::scalar(
                &name,
                type_oid::INT4,
                Some(n.to_string()),
            ))
        }
        "citus_cleanup_orphaned_resources" => {
            let n = shards::drop_orphaned_shards(cache).await?;
            Ok(UtilityResult::scalar(
                &name,
                type_oid::INT4,
                Some(n.to_string()),
            ))
        }
        "replicate_reference_tables" => replicate::replicate_reference_tables(cache, &args).await,
        "citus_set_coordinator_host" => nodes::set_coordinator_host(cache, &args).await,
        "truncate_local_data_after_distributing_table" => {
            shards::truncate_local_data(cache, &args, caller).await
        }
        "citus_version" => Ok(UtilityResult::scalar(
            &name,
            type_oid::TEXT,
            Some(crate::citus_settings::catalog::citus_version()),
        )),
        "citus_stat_statements_reset" => {
            crate::stats::statements::reset();
            Ok(UtilityResult::void(&name))
        }
        _ => Err(PgError::internal(format!("{name}() is run by the session"))),
    }
}

/// A call of a Citus function pgshard runs itself.
pub struct UtilityCall<'a> {
    pub name: &'a str,
    /// The arguments by position, as text (None: NULL or omitted).
    pub args: Vec<Option<String>>,
    /// The relation each table argument ([`is_table_arg`]) names, as the caller's
    /// `regclass` read it (with the caller's search_path), by position.
    pub relids: Vec<Option<u32>>,
}

/// Whether argument `i` of `function`, given as `value`, names a table (`regclass`).
pub fn is_table_arg(function: &str, i: usize, value: &str) -> bool {
    match utility_arg_names(function).get(i) {
        Some(&"table_name") | Some(&"logicalrelid") => true,
        // Citus names this regclass argument so.
        Some(&"function_name") => {
            normalize(function) == "truncate_local_data_after_distributing_table"
        }
        Some(&"colocate_with") => {
            !matches!(value.to_ascii_lowercase().as_str(), "default" | "none")
        }
        _ => false,
    }
}

/// The arguments of one call, by position.
pub(crate) struct Args<'a> {
    pub name: &'a str,
    pub names: &'static [&'static str],
    pub values: Vec<Option<String>>,
    pub relids: Vec<Option<u32>>,
}

impl Args<'_> {
    /// The relation table argument `i` names (resolved by the caller's session),
    /// checked to exist still on `client`'s snapshot: 42P01 otherwise.
    pub async fn relation(&self, i: usize, client: &Client) -> Result<u32, PgError> {
        let arg = self.required(i)?;
        let Some(relid) = self.relids.get(i).copied().flatten() else {
            return Err(PgError::internal(format!(
                "{}: argument {} was not resolved",
                self.name,
                self.names.get(i).unwrap_or(&"?")
            )));
        };
        let row = client
            .query_opt(
                "SELECT c.oid FROM pg_catalog.pg_class c WHERE c.oid = $1",
                &[&relid],
            )
            .await
            .map_err(|e| {
                PgError::from_client_error(&format!("cannot resolve relation \"{arg}\""), &e)
            })?;
        row.map(|r| r.get(0)).ok_or_else(|| {
            PgError::new(
                sqlstate::UNDEFINED_TABLE,
                format!("relation \"{arg}\" does not exist"),
            )
        })
    }

    /// Argument `i` (None when NULL or omitted).
    pub fn get(&self, i: usize) -> Option<&str> {
        self.values.get(i).and_then(|v| v.as_deref())
    }

    /// A required, non-NULL argument.
    pub fn required(&self, i: usize) -> Result<&str, PgError> {
        self.get(i).ok_or_else(|| {
            PgError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!(
                    "{}: argument {} must not be NULL",
                    self.name,
                    self.names.get(i).unwrap_or(&"?")
                ),
            )
        })
    }

    /// An integer argument, `default` when NULL or omitted.
    pub fn int(&self, i: usize, default: Option<i64>) -> Result<Option<i64>, PgError> {
        match self.get(i) {
            None => Ok(default),
            Some(v) => v.trim().parse::<i64>().map(Some).map_err(|_| {
                PgError::new(
                    sqlstate::INVALID_TEXT_REPRESENTATION,
                    format!("invalid input syntax for type integer: \"{v}\""),
                )
            }),
        }
    }
}

/// Maps a tokio-postgres error with context.
pub(crate) fn db_err(context: &str) -> impl Fn(tokio_postgres::Error) -> PgError + '_ {
    move |e| PgError::from_client_error(context, &e)
}

/// Opens a coordinator-node connection inside `BEGIN` holding the catalog lock, so
/// that catalog-changing commands (from any pgshard process) run one at a time.
/// Dropping the client without COMMIT rolls everything back.
pub(crate) async fn begin_catalog_change(cache: &CatalogCache) -> Result<Client, PgError> {
    let client = crate::backend::control::connect_coordinator(cache.config()).await?;
    client
        .batch_execute(&format!(
            "BEGIN; SELECT pg_catalog.pg_advisory_xact_lock({CATALOG_LOCK_KEY})"
        ))
        .await
        .map_err(db_err("cannot lock the pgshard catalog"))?;
    Ok(client)
}

/// A statement shortened for error messages.
pub(crate) fn abbreviate(sql: &str) -> String {
    const MAX: usize = 200;
    if sql.len() <= MAX {
        return sql.to_string();
    }
    let mut end = MAX;
    while !sql.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &sql[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_as_from_items() {
        let cols = vec![
            ("node_name".to_string(), type_oid::TEXT),
            ("node_port".to_string(), type_oid::INT8),
        ];
        let rows = vec![
            vec![Some("a'b".to_string()), Some("5432".to_string())],
            vec![Some("c".to_string()), None],
        ];
        assert_eq!(
            result_as_from_item(&cols, &rows, "f"),
            "(SELECT * FROM (VALUES (CAST('a''b' AS pg_catalog.text), CAST('5432' AS pg_catalog.int8)), \
             (CAST('c' AS pg_catalog.text), CAST(NULL AS pg_catalog.int8))) AS pgshard_result(\"node_name\", \"node_port\")) AS \"f\""
        );
        assert_eq!(
            result_as_from_item(&cols, &[], ""),
            "(SELECT CAST(NULL AS pg_catalog.text) AS \"node_name\", CAST(NULL AS pg_catalog.int8) AS \"node_port\" WHERE false)"
        );
    }

    #[test]
    fn recognises_functions() {
        assert!(is_utility_function("create_distributed_table"));
        assert!(is_utility_function("MASTER_ADD_NODE"));
        assert!(is_utility_function("pg_catalog.citus_add_node"));
        assert!(!is_utility_function("count"));
        assert_eq!(
            utility_arg_names("create_distributed_table"),
            &[
                "table_name",
                "distribution_column",
                "distribution_type",
                "colocate_with",
                "shard_count"
            ]
        );
        assert!(utility_arg_names("nope").is_empty());
    }

    #[test]
    fn the_planner_spots_every_function_by_its_name() {
        for (name, _) in FUNCTIONS {
            assert!(
                crate::planner::UTILITY_NAME_HINTS
                    .iter()
                    .any(|h| name.contains(h)),
                "{name} has none of the planner's hints"
            );
        }
    }

    #[test]
    fn args_by_position() {
        let a = Args {
            name: "f",
            names: &["a", "b", "c"],
            values: vec![Some("x".into()), None, Some(" 12 ".into())],
            relids: Vec::new(),
        };
        assert_eq!(a.get(0), Some("x"));
        assert_eq!(a.get(1), None);
        assert_eq!(a.get(7), None);
        assert!(a.required(1).is_err());
        assert_eq!(a.int(2, None).unwrap(), Some(12));
        assert_eq!(a.int(1, Some(5)).unwrap(), Some(5));
        assert_eq!(a.int(0, None).unwrap_err().code, "22P02");
    }

    #[test]
    fn abbreviates_long_statements() {
        assert_eq!(abbreviate("select 1"), "select 1");
        let long = "é".repeat(300);
        let s = abbreviate(&long);
        assert!(s.ends_with("...") && s.len() <= 204);
    }
}
