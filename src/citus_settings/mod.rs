//! The one home of Citus's `citus.*` settings: every name pgshard knows, its type,
//! default, context, bounds or allowed values, description, and whether pgshard acts
//! on it (the others are accepted and shown, as a Citus user's scripts expect, with
//! no effect).
//!
//! The values themselves live as PostgreSQL placeholder variables on the client's own
//! coordinator-node backend: its startup packet carries every setting's starting
//! value (`defaults.rs`: pgshard's configuration, ALTER SYSTEM, ALTER DATABASE /
//! ROLE ... SET, the client's `options`), and a `SET citus.x` checked here runs there
//! like any setting. So `SHOW`, `current_setting()`, `set_config()`, `RESET`, SET
//! LOCAL and rollbacks behave as PostgreSQL's own. pgshard keeps typed copies of the
//! settings it acts on in the session. `pg_settings` hides placeholders: its citus
//! rows come from `catalog.rs`.
//!
//! Citus reserves the `citus` prefix (`EmitWarningsOnPlaceholders("citus")`, which is
//! `MarkGUCPrefixReserved` since PostgreSQL 15): setting an unknown `citus.x` is
//! 42602, reading one 42704, as there.

pub mod catalog;
pub mod defaults;

use crate::error::{sqlstate, PgError};

/// A setting's type, with its bounds or allowed values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Bool,
    /// An integer; `unit` as PostgreSQL names it (`kB`, `ms`) or none.
    Int {
        min: i64,
        max: i64,
        unit: Option<&'static str>,
    },
    Real {
        min: f64,
        max: f64,
    },
    Enum(&'static [&'static str]),
    Str,
}

/// Who may change a setting, and when (PostgreSQL's `pg_settings.context`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    User,
    Superuser,
    Sighup,
    Postmaster,
}

impl Context {
    pub fn name(self) -> &'static str {
        match self {
            Context::User => "user",
            Context::Superuser => "superuser",
            Context::Sighup => "sighup",
            Context::Postmaster => "postmaster",
        }
    }
}

/// One `citus.*` setting.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    pub name: &'static str,
    pub kind: Kind,
    /// The default as SHOW displays it (pgshard's configuration may change some:
    /// `defaults.rs`).
    pub default: &'static str,
    pub context: Context,
    pub description: &'static str,
    /// Whether pgshard acts on the value (else accepted and shown only).
    pub acted_on: bool,
}

const fn s(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    context: Context,
    acted_on: bool,
    description: &'static str,
) -> Setting {
    Setting {
        name,
        kind,
        default,
        context,
        description,
        acted_on,
    }
}

use Context::{Postmaster, Sighup, Superuser, User};
use Kind::{Bool, Enum, Real, Str};

const fn int(min: i64, max: i64) -> Kind {
    Kind::Int {
        min,
        max,
        unit: None,
    }
}
const fn int_unit(min: i64, max: i64, unit: &'static str) -> Kind {
    Kind::Int {
        min,
        max,
        unit: Some(unit),
    }
}
const INT_MAX: i64 = i32::MAX as i64;

/// Every `citus.*` setting pgshard knows, by name. Citus 12.1's user-facing settings,
/// and names of older Citus versions that the seeds' scripts still set
/// (`multi_shard_commit_protocol`, `task_executor_type`, `replication_model`).
pub const SETTINGS: &[Setting] = &[
    s("citus.all_modifications_commutative", Bool, "off", User, false,
      "Bypass commutativity checks when enabled"),
    s("citus.allow_modifications_from_workers_to_replicated_tables", Bool, "on", User, false,
      "Enables modifications from workers to replicated tables such as reference tables"),
    s("citus.coordinator_aggregation_strategy", Enum(&["disabled", "row-gather"]), "row-gather", User, false,
      "Sets the strategy for when an aggregate cannot be pushed down"),
    s("citus.count_distinct_error_rate", Real { min: 0.0, max: 1.0 }, "0", User, false,
      "Desired error rate when calculating count(distinct) approximates using the postgresql-hll extension"),
    s("citus.create_object_propagation", Enum(&["deferred", "automatic", "immediate"]), "immediate", User, false,
      "Controls the behavior of CREATE statements in transactions for supported objects"),
    s("citus.distributed_deadlock_detection_factor", Real { min: -1.0, max: 1000.0 }, "2", Sighup, false,
      "Sets the time to wait before checking for distributed deadlocks"),
    s("citus.enable_alter_role_propagation", Bool, "on", User, false,
      "Enables propagating ALTER ROLE statements to workers (excluding ALTER ROLE SET)"),
    s("citus.enable_binary_protocol", Bool, "on", User, false,
      "Enables communication between nodes using binary protocol when possible"),
    s("citus.enable_change_data_capture", Bool, "off", User, false,
      "Enables using replication origin to track changes from Citus internal operations"),
    s("citus.enable_ddl_propagation", Bool, "on", User, false,
      "Enables propagating DDL statements to worker shards"),
    s("citus.enable_deadlock_prevention", Bool, "on", User, false,
      "Avoids deadlocks by preventing concurrent multi-shard commands"),
    s("citus.enable_fast_path_router_planner", Bool, "on", User, false,
      "Enables fast path router planner"),
    s("citus.enable_local_execution", Bool, "on", User, false,
      "Enables queries on shards that are local to the current node to be planned and executed locally"),
    s("citus.enable_non_colocated_router_query_pushdown", Bool, "off", User, false,
      "Enables router planner for the queries that reference non-colocated distributed tables"),
    s("citus.enable_repartition_joins", Bool, "on", User, true,
      "Allows Citus to repartition data between nodes"),
    s("citus.enable_repartitioned_insert_select", Bool, "on", User, false,
      "Enables repartitioned INSERT/SELECTs"),
    s("citus.enable_router_execution", Bool, "on", User, false,
      "Enables router execution"),
    s("citus.enable_schema_based_sharding", Bool, "off", User, false,
      "Enables schema based sharding"),
    s("citus.explain_all_tasks", Bool, "off", User, true,
      "Enables showing output for all tasks in Explain"),
    s("citus.explain_analyze_sort_method", Enum(&["execution-time", "taskId"]), "execution-time", User, false,
      "Sets the sorting method for EXPLAIN ANALYZE queries"),
    s("citus.limit_clause_row_fetch_count", int(-1, INT_MAX), "-1", User, false,
      "Number of rows to fetch per task for limit clause optimization"),
    s("citus.local_hostname", Str, "localhost", Superuser, false,
      "Sets the hostname when connecting back to itself"),
    s("citus.local_table_join_policy", Enum(&["never", "prefer-local", "prefer-distributed", "auto"]), "auto", User, false,
      "Defines the behaviour when a distributed table is joined with a local table"),
    s("citus.log_distributed_deadlock_detection", Bool, "off", Sighup, false,
      "Log distributed deadlock detection related processing in the server log"),
    s("citus.log_multi_join_order", Bool, "off", User, false,
      "Logs the distributed join order to the server log"),
    s("citus.log_remote_commands", Bool, "off", User, false,
      "Log queries sent to other nodes in the server log"),
    s("citus.max_adaptive_executor_pool_size", int(1, INT_MAX), "16", User, false,
      "Sets the maximum number of connections per worker node used by the adaptive executor to execute a multi-shard command"),
    s("citus.max_cached_conns_per_worker", int(0, INT_MAX), "1", User, false,
      "Sets the maximum number of connections to cache per worker"),
    s("citus.max_intermediate_result_size", int_unit(-1, INT_MAX, "kB"), "1GB", User, true,
      "Sets the maximum size of the intermediate results in KB for CTEs and complex subqueries"),
    s("citus.max_shared_pool_size", int(-1, INT_MAX), "0", Sighup, false,
      "Sets the maximum number of connections allowed per worker node across all the backends from this node"),
    s("citus.max_worker_nodes_tracked", int(8, INT_MAX), "2048", Postmaster, false,
      "Sets the maximum number of worker nodes that are tracked"),
    s("citus.multi_shard_commit_protocol", Enum(&["1pc", "2pc"]), "2pc", User, true,
      "Sets the commit protocol for commands modifying multiple shards (a setting of Citus before 11; pgshard acts on it)"),
    s("citus.multi_shard_modify_mode", Enum(&["parallel", "sequential"]), "parallel", User, false,
      "Sets the connection type for multi shard modify queries"),
    s("citus.multi_task_query_log_level", Enum(&["off", "debug", "log", "info", "notice", "warning", "error"]), "off", User, false,
      "Sets the level of multi task query execution log messages"),
    s("citus.next_placement_id", int(0, INT_MAX), "0", User, false,
      "Set the next placement ID to use in placement creation"),
    s("citus.next_shard_id", int(0, INT_MAX), "0", User, false,
      "Set the next shard ID to use in shard creation"),
    s("citus.node_connection_timeout", int_unit(10, 3_600_000, "ms"), "30s", User, false,
      "Sets the maximum duration to connect to worker nodes"),
    s("citus.node_conninfo", Str, "sslmode=require", Sighup, false,
      "Sets parameters used for outbound connections"),
    s("citus.override_table_visibility", Bool, "on", User, false,
      "Enables replacing occurrences of pg_catalog.pg_table_visible() with pg_catalog.citus_table_visible()"),
    s("citus.propagate_set_commands", Enum(&["none", "local"]), "none", User, false,
      "Sets which SET commands are propagated to workers"),
    s("citus.recover_2pc_interval", int_unit(-1, INT_MAX, "ms"), "1min", Sighup, false,
      "Sets the time to wait between recovering 2PCs"),
    s("citus.replication_model", Enum(&["statement", "streaming"]), "streaming", User, false,
      "Deprecated. Please use citus.shard_replication_factor instead (a setting of Citus before 11)"),
    s("citus.shard_count", int(1, 64000), "32", User, true,
      "Sets the number of shards for a new hash-partitioned table"),
    s("citus.shard_replication_factor", int(1, 100), "1", User, true,
      "Sets the replication factor for shards"),
    s("citus.show_shards_for_app_name_prefixes", Str, "", User, false,
      "If application_name starts with one of these values, show shards"),
    s("citus.stat_statements_max", int(1000, 10_000_000), "50000", Postmaster, true,
      "Determines maximum number of statements tracked by citus_stat_statements"),
    s("citus.stat_statements_track", Enum(&["none", "all"]), "none", User, true,
      "Enables/Disables the stats collection for citus_stat_statements"),
    s("citus.task_assignment_policy", Enum(&["greedy", "round-robin", "first-replica"]), "greedy", User, false,
      "Sets the policy to use when assigning tasks to worker nodes"),
    s("citus.task_executor_type", Enum(&["adaptive", "real-time", "task-tracker"]), "adaptive", User, false,
      "Sets the executor type to be used for distributed queries (a setting of Citus before 10)"),
    s("citus.use_citus_managed_tables", Bool, "off", User, false,
      "Allows new local tables to be accessed on worker nodes"),
    s("citus.use_secondary_nodes", Enum(&["never", "always"]), "never", Superuser, false,
      "Sets the policy to use when choosing nodes for SELECT queries"),
    s("citus.writable_standby_coordinator", Bool, "off", User, false,
      "Enables simple DML via a streaming replica of the coordinator"),
];

/// The setting of that name (case-insensitive, as PostgreSQL's names).
pub fn find(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name.eq_ignore_ascii_case(name))
}

/// Whether `name` is in Citus's reserved prefix.
pub fn is_citus_name(name: &str) -> bool {
    name.len() > 6 && name[..6].eq_ignore_ascii_case("citus.")
}

/// PostgreSQL's error for setting an unknown name under a reserved prefix.
pub fn unknown_for_set(name: &str) -> PgError {
    PgError::new(
        sqlstate::INVALID_NAME,
        format!("invalid configuration parameter name \"{name}\""),
    )
    .with_detail("\"citus\" is a reserved prefix.")
}

/// PostgreSQL's error for reading an unknown name.
pub fn unknown_for_show(name: &str) -> PgError {
    PgError::new(
        sqlstate::UNDEFINED_OBJECT,
        format!("unrecognized configuration parameter \"{name}\""),
    )
}

/// The setting `name` may be set now by a session (SET, set_config): PostgreSQL's
/// 55P02 for settings only the configuration file or a restart change.
pub fn settable_in_session(setting: &Setting) -> Result<(), PgError> {
    let message = match setting.context {
        Sighup => format!("parameter \"{}\" cannot be changed now", setting.name),
        Postmaster => format!(
            "parameter \"{}\" cannot be changed without restarting the server",
            setting.name
        ),
        _ => return Ok(()),
    };
    Err(PgError::new(sqlstate::CANT_CHANGE_RUNTIME_PARAM, message))
}

impl Setting {
    /// `value` checked as PostgreSQL checks a value of this type, in the form SHOW
    /// displays it (`on`/`off`, an enum's own spelling, sizes and times with units).
    pub fn check(&self, value: &str) -> Result<String, PgError> {
        let invalid = || {
            PgError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("invalid value for parameter \"{}\": \"{value}\"", self.name),
            )
        };
        let v = value.trim();
        match self.kind {
            Bool => parse_bool(v)
                .map(|b| if b { "on" } else { "off" }.to_string())
                .ok_or_else(|| {
                    PgError::new(
                        sqlstate::INVALID_PARAMETER_VALUE,
                        format!("parameter \"{}\" requires a Boolean value", self.name),
                    )
                }),
            Enum(values) => values
                .iter()
                .find(|a| a.eq_ignore_ascii_case(v))
                .map(|a| a.to_string())
                .ok_or_else(|| {
                    let quoted: Vec<String> = values.iter().map(|a| a.to_string()).collect();
                    invalid().with_hint(format!("Available values: {}.", quoted.join(", ")))
                }),
            Str => Ok(value.to_string()),
            Real { min, max } => {
                let n: f64 = v.parse().map_err(|_| invalid())?;
                if !(min..=max).contains(&n) {
                    return Err(PgError::new(
                        sqlstate::INVALID_PARAMETER_VALUE,
                        format!(
                            "{v} is outside the valid range for parameter \"{}\" ({min} .. {max})",
                            self.name
                        ),
                    ));
                }
                Ok(format_real(n))
            }
            Kind::Int { min, max, unit } => {
                let n = parse_int(v, unit).ok_or_else(|| match unit {
                    Some(u) if v.chars().any(|c| c.is_ascii_alphabetic()) => invalid().with_hint(
                        if u == "kB" {
                            "Valid units for this parameter are \"B\", \"kB\", \"MB\", \"GB\", and \"TB\"."
                        } else {
                            "Valid units for this parameter are \"us\", \"ms\", \"s\", \"min\", \"h\", and \"d\"."
                        },
                    ),
                    _ => invalid(),
                })?;
                if n < min || n > max {
                    return Err(PgError::new(
                        sqlstate::INVALID_PARAMETER_VALUE,
                        format!(
                            "{n} {}is outside the valid range for parameter \"{}\" ({min} .. {max})",
                            unit.map(|u| format!("{u} ")).unwrap_or_default(),
                            self.name
                        ),
                    ));
                }
                Ok(format_int(n, unit))
            }
        }
    }

    /// The value in the setting's base unit (`pg_settings.setting`): sizes in kB,
    /// times in ms; other values as displayed.
    pub fn raw(&self, shown: &str) -> String {
        match self.kind {
            Kind::Int { unit, .. } => parse_int(shown, unit)
                .map(|n| n.to_string())
                .unwrap_or_else(|| shown.to_string()),
            _ => shown.to_string(),
        }
    }
}

/// PostgreSQL's boolean spellings (`parse_bool`): on/off, true/false, yes/no, 1/0 and
/// unique prefixes of them.
pub fn parse_bool(v: &str) -> Option<bool> {
    let l = v.to_ascii_lowercase();
    match l.as_str() {
        "on" | "1" => return Some(true),
        "off" | "of" | "0" => return Some(false),
        _ => {}
    }
    if l.is_empty() || l == "o" {
        return None;
    }
    if "true".starts_with(&l) || "yes".starts_with(&l) {
        Some(true)
    } else if "false".starts_with(&l) || "no".starts_with(&l) {
        Some(false)
    } else {
        None
    }
}

/// An integer in `unit` (kB or ms) from `v`, which may carry its own unit.
fn parse_int(v: &str, unit: Option<&str>) -> Option<i64> {
    let v = v.trim();
    let split = v
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || (*i == 0 && (*c == '-' || *c == '+'))))
        .map(|(i, _)| i)
        .unwrap_or(v.len());
    let (number, suffix) = v.split_at(split);
    let n: i64 = number.parse().ok()?;
    let suffix = suffix.trim();
    if suffix.is_empty() {
        return Some(n);
    }
    let factor: f64 = match (unit?, suffix) {
        ("kB", "B") => 1.0 / 1024.0,
        ("kB", "kB") => 1.0,
        ("kB", "MB") => 1024.0,
        ("kB", "GB") => 1024.0 * 1024.0,
        ("kB", "TB") => 1024.0 * 1024.0 * 1024.0,
        ("ms", "us") => 0.001,
        ("ms", "ms") => 1.0,
        ("ms", "s") => 1000.0,
        ("ms", "min") => 60_000.0,
        ("ms", "h") => 3_600_000.0,
        ("ms", "d") => 86_400_000.0,
        _ => return None,
    };
    let scaled = (n as f64 * factor).round();
    (scaled.abs() <= i64::MAX as f64).then_some(scaled as i64)
}

/// An integer as SHOW displays it: the largest unit that divides it exactly.
fn format_int(n: i64, unit: Option<&str>) -> String {
    let units: &[(&str, i64)] = match unit {
        Some("kB") => &[("TB", 1 << 30), ("GB", 1 << 20), ("MB", 1 << 10), ("kB", 1)],
        Some("ms") => &[
            ("d", 86_400_000),
            ("h", 3_600_000),
            ("min", 60_000),
            ("s", 1000),
            ("ms", 1),
        ],
        _ => return n.to_string(),
    };
    if n <= 0 {
        // PostgreSQL shows -1 (and 0) without a unit.
        return n.to_string();
    }
    for (name, size) in units {
        if n % size == 0 {
            return format!("{}{name}", n / size);
        }
    }
    n.to_string()
}

fn format_real(n: f64) -> String {
    let s = format!("{n}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

/// The README's table of settings: name, default, whether pgshard acts on it.
pub fn markdown_table() -> String {
    let mut t = String::from("| setting | default | in pgshard |\n|---|---|---|\n");
    for s in SETTINGS {
        t.push_str(&format!(
            "| `{}` | `{}` | {} |\n",
            s.name,
            s.default,
            if s.acted_on {
                "acted on"
            } else {
                "accepted only"
            }
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked_and_shown_as_postgresql_shows_them() {
        let f = |n: &str, v: &str| find(n).unwrap().check(v);
        assert_eq!(f("citus.shard_count", " 128 ").unwrap(), "128");
        assert_eq!(f("citus.shard_count", "0").unwrap_err().code, "22023");
        assert_eq!(f("citus.shard_count", "x").unwrap_err().code, "22023");
        assert_eq!(f("citus.explain_all_tasks", "TRUE").unwrap(), "on");
        assert_eq!(f("citus.explain_all_tasks", "n").unwrap(), "off");
        assert!(f("citus.explain_all_tasks", "maybe")
            .unwrap_err()
            .message
            .contains("requires a Boolean value"));
        assert_eq!(
            f("citus.multi_shard_commit_protocol", "2PC").unwrap(),
            "2pc"
        );
        assert_eq!(
            f("citus.task_executor_type", "bogus")
                .unwrap_err()
                .hint
                .as_deref(),
            Some("Available values: adaptive, real-time, task-tracker.")
        );
        assert_eq!(
            f("citus.max_intermediate_result_size", "1048576").unwrap(),
            "1GB"
        );
        assert_eq!(
            f("citus.max_intermediate_result_size", "64MB").unwrap(),
            "64MB"
        );
        assert_eq!(f("citus.max_intermediate_result_size", "-1").unwrap(), "-1");
        assert_eq!(f("citus.node_connection_timeout", "5000").unwrap(), "5s");
        assert_eq!(f("citus.count_distinct_error_rate", "0.5").unwrap(), "0.5");
        let m = find("citus.max_intermediate_result_size").unwrap();
        assert_eq!(m.raw("1GB"), "1048576");
        assert!(find("CITUS.Shard_Count").is_some());
        assert!(find("citus.nonsense").is_none());
    }

    #[test]
    fn the_readme_lists_every_setting() {
        let readme = include_str!("../../README.md");
        assert!(
            readme.contains(&markdown_table()),
            "README's table differs:\n{}",
            markdown_table()
        );
    }

    #[test]
    fn every_default_is_a_valid_value_and_names_are_sorted() {
        for s in SETTINGS {
            assert_eq!(s.check(s.default).unwrap(), s.default, "{}", s.name);
        }
        for w in SETTINGS.windows(2) {
            assert!(w[0].name < w[1].name, "{} before {}", w[0].name, w[1].name);
        }
    }
}
