//! A session's `citus.*` settings (`crate::citus_settings`): their starting values
//! (in the client's own backend's startup packet), `SET` / `RESET` / `SET LOCAL` of
//! them (checked here, then run on the coordinator node as any setting, so SHOW,
//! `current_setting` and rollbacks are PostgreSQL's), `set_config` of them, `ALTER
//! SYSTEM / DATABASE / ROLE ... SET` of them, and the typed copies of the settings
//! pgshard acts on.

use super::*;
use crate::citus_settings::{self as cs, SETTINGS};
use crate::planner::SettingScope;

/// The `citus.*` values a client's session starts with, in `SETTINGS` order: the
/// process's starting values for its database and role, then its startup `options`
/// (checked: a bad one fails the connection, as PostgreSQL fails it).
pub async fn session_start_values(
    shared: &Shared,
    creds: &Credentials,
    options: &[(String, String)],
) -> PgResult<Vec<String>> {
    let mut conn = None;
    if shared.citus_defaults.is_stale() {
        conn = Some(shared.pools.node(&shared.coordinator).acquire().await?);
    }
    if let Some(conn) = conn.as_mut() {
        shared.citus_defaults.reload_if_stale(conn).await?;
    }
    let mut values = shared
        .citus_defaults
        .session_start(&creds.database, &creds.user);
    for (name, value) in options.iter().filter(|(n, _)| cs::is_citus_name(n)) {
        let i = SETTINGS
            .iter()
            .position(|s| s.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| cs::unknown_for_set(name))?;
        values[i] = SETTINGS[i].check(value)?;
    }
    Ok(values)
}

/// Statements reading `pg_settings` / `pg_extension` (or `SHOW ALL`) made to show
/// Citus's settings and extension (`citus_settings::catalog`), and those reading
/// Citus's statistics views made to read `live`'s rows (`stats::views`).
pub(super) fn with_citus_views(
    stmts: Vec<Statement>,
    live: Option<&crate::stats::views::Live>,
) -> Vec<Statement> {
    let extra = |name: &str| live.and_then(|l| l.body(name));
    stmts
        .into_iter()
        .map(|stmt| {
            if stmt.form != Default::default()
                || !(cs::catalog::may_need_rewrite(&stmt.text)
                    || (live.is_some() && crate::stats::views::mentioned(&stmt.text)))
            {
                return stmt;
            }
            let Some(text) = stmt
                .node
                .as_ref()
                .and_then(|n| cs::catalog::rewrite(n, &extra))
            else {
                return stmt;
            };
            match parse::parse_with(&text, Default::default()) {
                Ok(mut v) if v.len() == 1 => {
                    let mut extended = v.pop().expect("one statement");
                    extended.form = parse::StringForm::CitusViews;
                    extended
                }
                _ => stmt,
            }
        })
        .collect()
}

/// The typed copies of the settings pgshard acts on, from their shown values.
pub(super) struct Typed {
    pub citus: CitusSettings,
    pub commit_protocol: String,
    pub explain_all_tasks: bool,
    pub max_intermediate_kb: i64,
    pub enable_repartition_joins: bool,
    pub stat_statements_track: bool,
}

impl Typed {
    pub fn from_values(values: &[String]) -> Typed {
        let get = |name: &str| {
            SETTINGS
                .iter()
                .position(|s| s.name == name)
                .map(|i| values[i].as_str())
                .unwrap_or_default()
        };
        Typed {
            citus: CitusSettings {
                shard_count: get("citus.shard_count").parse().unwrap_or(32),
                shard_replication_factor: get("citus.shard_replication_factor")
                    .parse()
                    .unwrap_or(1),
            },
            commit_protocol: get("citus.multi_shard_commit_protocol").to_string(),
            explain_all_tasks: get("citus.explain_all_tasks") == "on",
            max_intermediate_kb: cs::find("citus.max_intermediate_result_size")
                .map(|s| s.raw(get("citus.max_intermediate_result_size")))
                .and_then(|kb| kb.parse().ok())
                .unwrap_or(1024 * 1024),
            enable_repartition_joins: get("citus.enable_repartition_joins") == "on",
            stat_statements_track: get("citus.stat_statements_track") == "all",
        }
    }
}

impl Session {
    /// The typed copy of setting `name` (a known one) takes `value` (shown form; None:
    /// the session's starting value). Settings pgshard does not act on have none.
    pub(super) fn set_citus(&mut self, name: &str, value: Option<&str>) {
        let Some(i) = SETTINGS
            .iter()
            .position(|s| s.name.eq_ignore_ascii_case(name))
        else {
            return;
        };
        if !SETTINGS[i].acted_on {
            return;
        }
        let mut values = self.citus_start.clone();
        if let Some(v) = value {
            values[i] = v.to_string();
        }
        let t = Typed::from_values(&values);
        match SETTINGS[i].name {
            "citus.shard_count" => self.citus.shard_count = t.citus.shard_count,
            "citus.shard_replication_factor" => {
                self.citus.shard_replication_factor = t.citus.shard_replication_factor
            }
            "citus.multi_shard_commit_protocol" => self.commit_protocol = t.commit_protocol,
            "citus.explain_all_tasks" => self.explain_all_tasks = t.explain_all_tasks,
            "citus.max_intermediate_result_size" => {
                self.max_intermediate_kb = t.max_intermediate_kb
            }
            "citus.enable_repartition_joins" => {
                self.enable_repartition_joins = t.enable_repartition_joins
            }
            "citus.stat_statements_track" => self.stat_track = t.stat_statements_track,
            _ => {}
        }
    }

    /// The current value of a setting pgshard acts on, in its shown form (None for the
    /// others: the coordinator node holds them).
    fn acted_on_value(&self, name: &str) -> Option<String> {
        let on_off = |b: bool| if b { "on" } else { "off" }.to_string();
        Some(match name {
            "citus.shard_count" => self.citus.shard_count.to_string(),
            "citus.shard_replication_factor" => self.citus.shard_replication_factor.to_string(),
            "citus.multi_shard_commit_protocol" => self.commit_protocol.clone(),
            "citus.explain_all_tasks" => on_off(self.explain_all_tasks),
            "citus.enable_repartition_joins" => on_off(self.enable_repartition_joins),
            "citus.stat_statements_track" => {
                if self.stat_track { "all" } else { "none" }.to_string()
            }
            "citus.max_intermediate_result_size" => cs::find(name)?
                .check(&self.max_intermediate_kb.to_string())
                .ok()?,
            _ => return None,
        })
    }

    /// The typed copies back to the session's starting values (RESET ALL, DISCARD ALL).
    pub(super) fn reset_citus_to_startup(&mut self) {
        let t = Typed::from_values(&self.citus_start);
        self.citus = t.citus;
        self.commit_protocol = t.commit_protocol;
        self.explain_all_tasks = t.explain_all_tasks;
        self.max_intermediate_kb = t.max_intermediate_kb;
        self.enable_repartition_joins = t.enable_repartition_joins;
        self.stat_track = t.stat_statements_track;
    }

    /// `SET [LOCAL] citus.x` / `RESET citus.x` / `SET citus.x TO DEFAULT`: checked as
    /// Citus checks it, then run on the coordinator node in its shown form like any
    /// setting (replayed on the session's other node connections, undone with its
    /// transaction), and the typed copy follows.
    pub(super) async fn set_citus_statement(
        &mut self,
        name: &str,
        value: Option<&str>,
        local: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let setting = cs::find(name).ok_or_else(|| cs::unknown_for_set(name))?;
        cs::settable_in_session(setting)?;
        let shown = value.map(|v| setting.check(v)).transpose()?;
        if shown.is_some()
            && self.citus_local.is_none()
            && shown == self.acted_on_value(setting.name)
        {
            // The value it has already, with no SET LOCAL of the block in the way (a
            // script's SET before each transaction): nothing changes, on any node,
            // whatever the block does next.
            sink.complete("SET");
            return Ok(());
        }
        let text = match (&shown, local) {
            (Some(v), _) => format!(
                "SET {}{} TO {}",
                if local { "LOCAL " } else { "" },
                setting.name,
                quote_literal(v)
            ),
            (None, true) => format!("SET LOCAL {} TO DEFAULT", setting.name),
            (None, false) => format!("RESET {}", setting.name),
        };
        let stmt = Statement {
            text,
            node: None,
            form: Default::default(),
        };
        let scope = if local {
            SettingScope::Local {
                variable: setting.name.to_string(),
            }
        } else {
            SettingScope::Session {
                variable: Some(setting.name.to_string()),
            }
        };
        let in_block = self.tx.state != TxnState::Idle;
        let before = self.citus_values();
        self.session_setting(&stmt, &scope, sink).await?;
        if local && !in_block {
            // PostgreSQL only warned (the coordinator node did).
            return Ok(());
        }
        self.citus_changed(setting.name, shown.as_deref(), local, before);
        Ok(())
    }

    /// A SET that reached the coordinator node: the typed copy follows, and in a block
    /// what a commit or rollback of it must restore is kept.
    pub(super) fn citus_changed(
        &mut self,
        name: &str,
        shown: Option<&str>,
        local: bool,
        before: settings::CitusValues,
    ) {
        if self.tx.state != TxnState::Idle {
            if local {
                self.citus_local.get_or_insert(CitusLocal::new(before));
            } else if let Some(l) = &mut self.citus_local {
                l.session_sets
                    .push((name.to_string(), shown.map(str::to_string)));
            }
        }
        self.set_citus(name, shown);
    }

    /// `ALTER SYSTEM` / `ALTER DATABASE ... SET` / `ALTER ROLE ... SET` of a `citus.*`
    /// setting: checked, run on the coordinator node (which checks privileges and
    /// stores it), then the process's starting values are read again.
    pub(super) async fn store_citus(
        &mut self,
        stmt: &Statement,
        name: &str,
        value: Option<&str>,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let setting = cs::find(name).ok_or_else(|| cs::unknown_for_set(name))?;
        if let Some(v) = value {
            setting.check(v)?;
        }
        let coord = self.shared.coordinator.clone();
        self.simple_on_backend_into(&coord, &stmt.text, false, Some(sink))
            .await?;
        if self.tx.state != TxnState::Idle {
            // Read once the block committed (`end_block_settings`).
            self.citus_stored_in_block = true;
            return Ok(());
        }
        let mut conn = self.shared.pools.node(&coord).acquire().await?;
        self.shared.citus_defaults.load(&mut conn).await
    }

    /// After a `set_config` of a `citus.*` setting ran on the client's own backend:
    /// the value it left there (`value`, read back) checked, and the typed copy
    /// follows. A name or value pgshard refuses fails the statement, and the block
    /// with it.
    pub(super) fn follow_citus_set_config(
        &mut self,
        name: &str,
        value: &str,
        local: bool,
    ) -> PgResult<()> {
        let setting = cs::find(name).ok_or_else(|| cs::unknown_for_set(name))?;
        cs::settable_in_session(setting)?;
        let shown = setting.check(value)?;
        let before = self.citus_values();
        self.citus_changed(setting.name, Some(&shown), local, before);
        Ok(())
    }
}
