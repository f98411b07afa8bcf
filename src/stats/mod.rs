//! Citus's statistics views, answered by pgshard: `statements` (the
//! `citus_stat_statements` counters), `activity` (what each client session is
//! doing), `views` (the SQL bodies of `citus_stat_statements`, `citus_stat_activity`,
//! `citus_dist_stat_activity` and `citus_lock_waits`, put in place of the views'
//! names by the one catalog-view rewrite, `citus_settings::catalog`). The session
//! side (counting, gathering the node rows) is `executor/session/stats.rs`.

pub mod activity;
pub mod statements;
pub mod views;
