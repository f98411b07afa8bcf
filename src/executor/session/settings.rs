//! The session's settings across nodes: `SET` / `RESET` / `SET LOCAL` /
//! `SET TRANSACTION`, and the typed copies of `citus.*` values
//! (`session/citus_settings.rs`), with PostgreSQL's transaction semantics.
//!
//! A session's `SET`s run on the coordinator node first (it checks them and reports
//! ParameterStatus), then are replayed on every node connection the session uses.
//! Inside a transaction block they are transactional, as in PostgreSQL: a block that
//! rolls back (or a `ROLLBACK TO` a savepoint older than them) undoes them, and
//! `SET LOCAL` / `SET TRANSACTION` reach every node of the block, including one that
//! joins it later. The session's state is copied lazily, at the block's first change
//! of it, so blocks that change nothing (nearly all) pay nothing.

use super::*;
use crate::planner::{begin_with_modes, SettingScope};

/// pgshard's own `citus.*` values of a session.
#[derive(Clone)]
pub(super) struct CitusValues {
    citus: CitusSettings,
    commit_protocol: String,
    explain_all_tasks: bool,
    max_intermediate_kb: i64,
    enable_repartition_joins: bool,
    stat_track: bool,
}

/// Everything of the session's settings a rollback can restore.
#[derive(Clone)]
pub(super) struct SettingsSnapshot {
    settings: Vec<String>,
    local_settings: Vec<(String, String)>,
    /// The followed reports as the settings had them: a rollback's own reports (the
    /// session authorization back to what it was) then change nothing.
    reported: HashMap<String, String>,
    citus: CitusValues,
    citus_local: Option<CitusLocal>,
}

/// After a `SET LOCAL citus.*` in the block: the citus values the session had before
/// it, and the session-level `SET citus.*` made since, which outlive the block.
#[derive(Clone)]
pub(super) struct CitusLocal {
    before: CitusValues,
    pub session_sets: Vec<(String, Option<String>)>,
}

impl CitusLocal {
    pub fn new(before: CitusValues) -> CitusLocal {
        CitusLocal {
            before,
            session_sets: Vec::new(),
        }
    }
}

/// An active savepoint and, if the block had changed settings before it, the
/// settings as they were when it was made.
pub(super) struct Savepoint {
    pub name: String,
    settings: Option<Box<SettingsSnapshot>>,
}

/// The SQL that brings a node connection to the session's settings: reset (the role
/// too: RESET ALL keeps `SET ROLE` and `SET SESSION AUTHORIZATION`), replay the
/// session's SETs, and, on a connection inside the block, the block's SET LOCALs
/// (RESET ALL undoes those too).
pub(super) fn settings_replay_sql(
    creds: &Credentials,
    settings: &[String],
    locals: &[(String, String)],
) -> String {
    let mut sql = identity::reset_identity_sql(creds);
    sql.push_str("RESET ALL;");
    for x in settings.iter().chain(locals.iter().map(|(_, text)| text)) {
        match placeholder_replay(x) {
            Some(guarded) => sql.push_str(&guarded),
            None => sql.push_str(x),
        }
        sql.push(';');
    }
    sql
}

/// A session-level `SET prefix.name = value` of a custom variable, replayed only where
/// PostgreSQL would take it: a placeholder is refused once a loaded module reserved its
/// prefix (`LOAD 'plpgsql'` drops `plpgsql.x` with a WARNING and refuses it from then
/// on), which another node connection may have done where the client's own backend has
/// not, or the other way round. So the value is set unless the prefix has variables of
/// a loaded module and the name is not one of them (placeholders are not in
/// `pg_settings`). None: not such a statement (replayed as it is).
fn placeholder_replay(text: &str) -> Option<String> {
    use pg_query::protobuf::VariableSetKind;
    use VariableSetKind as K;
    if !text.contains('.') {
        return None;
    }
    let tree = pg_query::parse(text, 0).ok()?;
    let [stmt] = tree.protobuf.stmts.as_slice() else {
        return None;
    };
    let pg_query::NodeEnum::VariableSetStmt(v) = stmt.stmt.as_ref()?.node.as_ref()? else {
        return None;
    };
    if v.is_local {
        return None;
    }
    let name = v.name.to_ascii_lowercase();
    let (prefix, _) = name.split_once('.')?;
    let value = match (VariableSetKind::try_from(v.kind), v.args.as_slice()) {
        // A module's variable goes back to its reset value, a placeholder to empty.
        (Ok(K::VarReset | K::VarSetDefault), _) => format!(
            "coalesce((SELECT reset_val FROM pg_catalog.pg_settings WHERE name = {}), '')",
            quote_literal(&name)
        ),
        (Ok(K::VarSetValue), [arg]) => match arg.node.as_ref()? {
            pg_query::NodeEnum::AConst(_) => quote_literal(&crate::planner::const_text(Some(arg))?),
            _ => return None,
        },
        _ => return None,
    };
    Some(format!(
        "SELECT pg_catalog.set_config({name}, {value}, false) WHERE NOT EXISTS \
         (SELECT FROM pg_catalog.pg_settings WHERE pg_catalog.starts_with(name, {prefix})) \
         OR EXISTS (SELECT FROM pg_catalog.pg_settings WHERE name = {name})",
        name = quote_literal(&name),
        prefix = quote_literal(&format!("{prefix}.")),
    ))
}

/// What starts the block on a node joining it: BEGIN, the active savepoints, then the
/// block's SET LOCALs (re-run on every node after a ROLLBACK TO, see
/// `rollback_settings_to`).
pub(super) fn begin_sequence(
    begin_text: &str,
    savepoints: &[Savepoint],
    locals: &[(String, String)],
) -> String {
    let mut sql = begin_text.to_string();
    for sp in savepoints {
        sql.push_str("; SAVEPOINT ");
        sql.push_str(&quote_ident(&sp.name));
    }
    for (_, text) in locals {
        sql.push_str("; ");
        sql.push_str(text);
    }
    sql
}

/// DateStyle's style and order, as `SET datestyle` statements leave them: each gives
/// a style, an order or both and keeps the other part (PostgreSQL's
/// `check_datestyle`; `German` alone also sets DMY). The earlier SETs and the new one
/// folded into one SET giving the parts they gave (the startup value supplies the
/// rest in a replay, as on the client's own backend); None when the new statement is
/// not a plain SET of known keywords (it then replaces the earlier ones, as any SET).
pub(super) fn fold_datestyle(earlier: &[&str], new: &str) -> Option<String> {
    let mut style: Option<&'static str> = None;
    let mut order: Option<&'static str> = None;
    for text in earlier.iter().chain(std::iter::once(&new)) {
        let words = datestyle_words(text)?;
        let mut have_order = false;
        let mut german = false;
        for w in words {
            match w.to_ascii_lowercase().as_str() {
                "iso" => style = Some("ISO"),
                "sql" => style = Some("SQL"),
                "postgres" => style = Some("Postgres"),
                "german" => {
                    style = Some("German");
                    german = true;
                }
                "ymd" => (order, have_order) = (Some("YMD"), true),
                "dmy" | "euro" | "european" => (order, have_order) = (Some("DMY"), true),
                "mdy" | "us" | "noneuropean" => (order, have_order) = (Some("MDY"), true),
                _ => return None,
            }
        }
        if german && !have_order {
            order = Some("DMY");
        }
    }
    let parts: Vec<&str> = style.into_iter().chain(order).collect();
    (!parts.is_empty()).then(|| format!("SET datestyle TO {}", quote_literal(&parts.join(", "))))
}

/// The keywords of a `SET [SESSION] datestyle TO ...` statement (None for anything
/// else: RESET, DEFAULT, SET LOCAL).
fn datestyle_words(text: &str) -> Option<Vec<String>> {
    use pg_query::protobuf::VariableSetKind as K;
    let tree = pg_query::parse(text, 0).ok()?;
    let [raw] = tree.protobuf.stmts.as_slice() else {
        return None;
    };
    let Some(pg_query::NodeEnum::VariableSetStmt(v)) = raw.stmt.as_ref()?.node.as_ref() else {
        return None;
    };
    if v.kind != K::VarSetValue as i32 || v.is_local || !v.name.eq_ignore_ascii_case("datestyle") {
        return None;
    }
    let mut words = Vec::new();
    for arg in &v.args {
        let Some(pg_query::NodeEnum::AConst(c)) = arg.node.as_ref() else {
            return None;
        };
        let Some(pg_query::protobuf::a_const::Val::Sval(s)) = c.val.as_ref() else {
            return None;
        };
        words.extend(
            s.sval
                .split(|ch: char| ch == ',' || ch.is_whitespace())
                .filter(|w| !w.is_empty())
                .map(str::to_string),
        );
    }
    Some(words)
}

impl Session {
    pub(super) fn citus_values(&self) -> CitusValues {
        CitusValues {
            citus: self.citus,
            commit_protocol: self.commit_protocol.clone(),
            explain_all_tasks: self.explain_all_tasks,
            max_intermediate_kb: self.max_intermediate_kb,
            enable_repartition_joins: self.enable_repartition_joins,
            stat_track: self.stat_track,
        }
    }

    fn restore_citus(&mut self, v: CitusValues) {
        self.citus = v.citus;
        self.commit_protocol = v.commit_protocol;
        self.explain_all_tasks = v.explain_all_tasks;
        self.max_intermediate_kb = v.max_intermediate_kb;
        self.enable_repartition_joins = v.enable_repartition_joins;
        self.stat_track = v.stat_track;
    }

    fn settings_snapshot(&self) -> Box<SettingsSnapshot> {
        Box::new(SettingsSnapshot {
            settings: self.settings.clone(),
            local_settings: self.local_settings.clone(),
            reported: self.reported.clone(),
            citus: self.citus_values(),
            citus_local: self.citus_local.clone(),
        })
    }

    fn restore_settings(&mut self, s: SettingsSnapshot) {
        self.settings = s.settings;
        self.settings_fp = fingerprint(&self.settings);
        self.local_settings = s.local_settings;
        self.reported = s.reported;
        self.restore_citus(s.citus);
        self.citus_local = s.citus_local;
    }

    /// Before a change of the session's settings: inside a block, the first one keeps
    /// what a rollback of the block restores.
    fn before_settings_change(&mut self) {
        if self.tx.state != TxnState::Idle {
            if self.block_settings.is_none() {
                self.block_settings = Some(self.settings_snapshot());
            }
        } else if self.implicit_txn && self.implicit_settings.is_none() {
            self.implicit_settings = Some(self.settings_snapshot());
        }
    }

    /// A SAVEPOINT: remembers the settings a ROLLBACK TO it restores.
    pub(super) fn savepoint(&self, name: &str) -> Savepoint {
        Savepoint {
            name: name.to_string(),
            // Unchanged since BEGIN: the block's own snapshot (if one is taken later)
            // is also this savepoint's.
            settings: self
                .block_settings
                .is_some()
                .then(|| self.settings_snapshot()),
        }
    }

    /// After `ROLLBACK TO` savepoint `at` ran on every node: the settings as they were
    /// when it was made. Every connection of the block is then brought to them (RESET
    /// ALL, the session's SETs, the block's SET LOCALs) before its next use.
    pub(super) fn rollback_settings_to(&mut self, at: usize) {
        let Some(snapshot) = self.savepoints[at]
            .settings
            .clone()
            .or_else(|| self.block_settings.clone())
        else {
            return;
        };
        self.restore_settings(*snapshot);
        for h in self.tx.held.iter_mut() {
            h.conn.settings_fingerprint = STALE_SETTINGS;
        }
    }

    /// The end of an implicit transaction (the statements of one simple query, an
    /// extended-protocol batch at Sync, or one ended early by COMMIT / ROLLBACK in it):
    /// a failure or ROLLBACK undoes its SETs, as in PostgreSQL.
    pub(super) fn end_implicit_settings(&mut self, undo: bool) {
        let Some(snapshot) = self.implicit_settings.take() else {
            return;
        };
        if undo {
            // Connections that took the undone SETs differ from the restored
            // fingerprint, so they are brought back before their next use.
            self.restore_settings(*snapshot);
        }
    }

    /// At the end of the block: a commit keeps the session's SETs and ends the SET
    /// LOCALs; anything else restores the settings the block began with. Connections
    /// that saw a change are brought to the session's settings before their next use.
    pub(super) fn end_block_settings(&mut self, committed: bool, held: &mut [Held]) {
        if std::mem::take(&mut self.citus_stored_in_block) && committed {
            self.shared.citus_defaults.mark_stale();
        }
        let Some(snapshot) = self.block_settings.take() else {
            return;
        };
        if committed {
            self.local_settings.clear();
            if let Some(CitusLocal {
                before,
                session_sets,
            }) = self.citus_local.take()
            {
                self.restore_citus(before);
                for (name, value) in session_sets {
                    // They were accepted once already.
                    self.set_citus(&name, value.as_deref());
                }
            }
        } else {
            self.restore_settings(*snapshot);
        }
        for h in held.iter_mut() {
            h.conn.settings_fingerprint = STALE_SETTINGS;
        }
    }

    /// `SET` / `RESET` (Plan::SessionSetting): runs on the coordinator node (which
    /// checks it and answers, ParameterStatus included), then reaches the other nodes
    /// as its scope says. Applied only once it succeeded: a bad value fails this
    /// statement, as in PostgreSQL, and nothing after it.
    pub(super) async fn session_setting(
        &mut self,
        stmt: &Statement,
        scope: &SettingScope,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let in_block = self.tx.state != TxnState::Idle;
        if !matches!(scope, SettingScope::CoordinatorOnly) {
            self.before_settings_change();
        }
        let coord = self.shared.coordinator.clone();
        let idx = self
            .simple_on_backend_into(&coord, &stmt.text, false, Some(sink))
            .await?;
        match scope {
            SettingScope::Session { variable } => {
                // The connection now holds the new value under the old fingerprint: it
                // is brought to the session's settings again before its next use.
                self.tx.held[idx].conn.settings_fingerprint = STALE_SETTINGS;
                self.record_setting(stmt, variable.as_deref());
            }
            // Outside a block PostgreSQL only warns (the coordinator node did).
            SettingScope::Local { variable } if in_block => {
                self.on_every_held_but(idx, &stmt.text).await?;
                self.local_settings
                    .push((variable.clone(), stmt.text.trim().to_string()));
            }
            SettingScope::Transaction { modes } if in_block => {
                // Nodes that ran a query of the block refuse an isolation change as
                // PostgreSQL does (25001); nodes joining later begin with the modes.
                self.on_every_held_but(idx, &stmt.text).await?;
                self.tx.begin_text = begin_with_modes(&self.tx.begin_text, modes);
            }
            _ => {}
        }
        Ok(())
    }

    /// `DISCARD ALL` (refused inside a block by the coordinator node, as by
    /// PostgreSQL): the session's settings as RESET ALL leaves them, and no prepared
    /// statements or portals.
    pub(super) async fn discard_all(
        &mut self,
        stmt: &Statement,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let coord = self.shared.coordinator.clone();
        let idx = self
            .simple_on_backend_into(&coord, &stmt.text, false, Some(sink))
            .await?;
        self.tx.held[idx].conn.settings_fingerprint = STALE_SETTINGS;
        // It dropped pgshard's own prepared statements on that connection too.
        self.tx.held[idx].conn.prepared.clear();
        self.record_setting(stmt, None);
        self.statements.clear();
        self.portals.clear();
        // The state its statements left on its own node connections goes with them.
        self.unpin();
        Ok(())
    }

    /// A session-level SET / RESET (of `variable`; None: RESET ALL) that succeeded is
    /// replayed on every connection the session uses later. It overrides the block's
    /// SET LOCALs of the same variable (RESET ALL: all of them), as in PostgreSQL.
    fn record_setting(&mut self, stmt: &Statement, variable: Option<&str>) {
        match variable {
            None => {
                // Back to the session's defaults: those of its startup packet. RESET
                // ALL leaves the role and session authorization as they are.
                let identity: Vec<String> = self.settings[self.startup_settings..]
                    .iter()
                    .filter(|text| identity::is_identity_setting(text))
                    .cloned()
                    .collect();
                self.settings.truncate(self.startup_settings);
                self.settings.extend(identity);
                self.local_settings.clear();
                self.reset_citus_to_startup();
                self.citus_local = None;
            }
            Some(v) => {
                self.local_settings.retain(|(name, _)| name != v);
                // The latest SET of a variable is all a replay needs: older ones go
                // (a `SET ROLE x` replayed after x was dropped would fail). Setting the
                // session authorization resets the role too.
                let start = self.startup_settings;
                // DateStyle keeps the part a SET does not give: its SETs fold into one.
                let folded = v.eq_ignore_ascii_case("datestyle").then(|| {
                    let earlier: Vec<&str> = self.settings[start..]
                        .iter()
                        .filter(|text| identity::overridden_by(text, v))
                        .map(String::as_str)
                        .collect();
                    fold_datestyle(&earlier, &stmt.text)
                });
                let mut at = 0;
                self.settings.retain(|text| {
                    at += 1;
                    at <= start || !identity::overridden_by(text, v)
                });
                if let Some(Some(folded)) = folded {
                    self.settings.push(folded);
                    self.settings_fp = fingerprint(&self.settings);
                    return;
                }
                // RESET goes back to the startup value, which the replay sets first
                // (RESET ALL first, or the startup packet's value). A custom variable
                // the startup packet did not set is reset as the client did: the
                // placeholder stays, empty, as in PostgreSQL.
                let custom = v.contains('.')
                    && !crate::citus_settings::is_citus_name(v)
                    && !self
                        .startup_variables
                        .iter()
                        .any(|s| s.eq_ignore_ascii_case(v));
                if custom || !identity::resets_to_startup(&stmt.text) {
                    self.settings.push(stmt.text.trim().to_string());
                }
            }
        }
        self.settings_fp = fingerprint(&self.settings);
    }
}

impl Session {
    /// After `stmt` ran on the client's own coordinator-node connection: the settings
    /// its `set_config` calls made there (read back from it) reach the session's other
    /// node connections as a SET or, in a block, a SET LOCAL would (row-level security
    /// reading `current_setting` on a shard sees them). Only calls whose name and
    /// `is_local` are constants are followed (`isolation::set_config_calls`).
    pub(super) async fn follow_set_config(&mut self, stmt: &Statement) -> PgResult<()> {
        for (name, local) in super::isolation::set_config_calls(&stmt.text) {
            let in_block = self.tx.state != TxnState::Idle;
            if local && !in_block {
                // Its transaction already ended, and the value with it.
                continue;
            }
            let read = format!(
                "SELECT pg_catalog.current_setting({}, true)",
                quote_literal(&name)
            );
            let Some(value) = self.home_column(&read).await?.into_iter().next() else {
                continue;
            };
            let variable = name.to_ascii_lowercase();
            if crate::citus_settings::is_citus_name(&variable) {
                self.before_settings_change();
                self.follow_citus_set_config(&variable, &value, local)?;
            }
            let quoted: Vec<String> = name.split('.').map(quote_ident).collect();
            let scope = if local { "LOCAL " } else { "" };
            let text = format!(
                "SET {scope}{} TO {}",
                quoted.join("."),
                quote_literal(&value)
            );
            self.before_settings_change();
            if local {
                let coord = self.shared.coordinator.clone();
                match self.held_index(&coord) {
                    Some(home) => self.on_every_held_but(home, &text).await?,
                    None => self.on_every_held(&text).await?,
                }
                self.local_settings.retain(|(v, _)| *v != variable);
                self.local_settings.push((variable, text));
            } else {
                let set = Statement {
                    text,
                    node: None,
                    form: Default::default(),
                };
                self.record_setting(&set, Some(&variable));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datestyle_sets_fold_keeping_the_part_not_given() {
        let f = |earlier: &[&str], new: &str| fold_datestyle(earlier, new);
        assert_eq!(
            f(&["SET datestyle TO iso"], "SET datestyle TO ymd").as_deref(),
            Some("SET datestyle TO 'ISO, YMD'")
        );
        assert_eq!(
            f(&[], "SET datestyle = 'MDY'").as_deref(),
            Some("SET datestyle TO 'MDY'")
        );
        assert_eq!(
            f(&["SET datestyle TO 'ISO, MDY'"], "SET datestyle TO German").as_deref(),
            Some("SET datestyle TO 'German, DMY'")
        );
        assert_eq!(
            f(&["SET datestyle TO ymd"], "SET datestyle TO German, US").as_deref(),
            Some("SET datestyle TO 'German, MDY'")
        );
        assert_eq!(
            f(&["SET datestyle TO DEFAULT"], "SET datestyle TO ymd"),
            None
        );
        assert_eq!(f(&[], "RESET datestyle"), None);
        assert_eq!(f(&[], "SET datestyle TO nonsense"), None);
    }

    #[test]
    fn replay_resets_then_sets_the_session_then_the_block() {
        let creds = Credentials::with_password("u", "p", "db");
        let settings = vec!["SET datestyle TO 'German'".to_string()];
        assert_eq!(
            settings_replay_sql(&creds, &settings, &[]),
            "RESET SESSION AUTHORIZATION;RESET ROLE;RESET ALL;SET datestyle TO 'German';"
        );
        let locals = vec![(
            "search_path".to_string(),
            "SET LOCAL search_path = a".to_string(),
        )];
        assert_eq!(
            settings_replay_sql(&creds, &settings, &locals),
            "RESET SESSION AUTHORIZATION;RESET ROLE;RESET ALL;SET datestyle TO 'German';SET LOCAL search_path = a;"
        );
    }

    #[test]
    fn custom_variables_are_replayed_where_valid() {
        let creds = Credentials::with_password("u", "p", "db");
        let settings = vec![
            "SET plpgsql.Extra_Foo = true".to_string(),
            "SET app.list = a, b".to_string(),
            "RESET app.x".to_string(),
            "SET search_path = a".to_string(),
        ];
        assert_eq!(
            settings_replay_sql(&creds, &settings, &[]),
            "RESET SESSION AUTHORIZATION;RESET ROLE;RESET ALL;\
             SELECT pg_catalog.set_config('plpgsql.extra_foo', 'true', false) WHERE NOT EXISTS \
             (SELECT FROM pg_catalog.pg_settings WHERE pg_catalog.starts_with(name, 'plpgsql.')) \
             OR EXISTS (SELECT FROM pg_catalog.pg_settings WHERE name = 'plpgsql.extra_foo');\
             SET app.list = a, b;\
             SELECT pg_catalog.set_config('app.x', coalesce((SELECT reset_val FROM pg_catalog.pg_settings \
             WHERE name = 'app.x'), ''), false) WHERE NOT EXISTS \
             (SELECT FROM pg_catalog.pg_settings WHERE pg_catalog.starts_with(name, 'app.')) \
             OR EXISTS (SELECT FROM pg_catalog.pg_settings WHERE name = 'app.x');\
             SET search_path = a;"
        );
    }

    #[test]
    fn a_joining_node_begins_with_savepoints_then_set_locals() {
        let sps = vec![Savepoint {
            name: "Sp 1".into(),
            settings: None,
        }];
        let locals = vec![(
            "work_mem".to_string(),
            "SET LOCAL work_mem = '8MB'".to_string(),
        )];
        assert_eq!(
            begin_sequence("BEGIN ISOLATION LEVEL SERIALIZABLE", &sps, &locals),
            "BEGIN ISOLATION LEVEL SERIALIZABLE; SAVEPOINT \"Sp 1\"; SET LOCAL work_mem = '8MB'"
        );
        assert_eq!(begin_sequence("BEGIN", &[], &[]), "BEGIN");
    }
}
