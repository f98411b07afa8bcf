//! Who a session is on the nodes. Every node connection a client's statements use
//! logs in as the client's own role (SCRAM pass-through, `backend::scram_keys`), so
//! each node checks privileges, row-level security and `current_user` exactly as
//! for that client; pgshard's own superuser connections serve only catalog work.
//!
//! - The session's *home* connection: one coordinator-node connection the client
//!   owns from login to logout, opened at login (its pid and secret key are the
//!   client's BackendKeyData). Everything the client runs on the coordinator node
//!   goes there: local tables, temporary tables, advisory locks, LISTEN, SQL-level
//!   PREPARE, `set_config`, Describe of its statements, inside its blocks too. So no
//!   other client ever sees that state, as with one PostgreSQL backend per client.
//!   If that backend goes away (`pg_terminate_backend`), the session ends.
//! - Worker connections (and pgshard's private coordinator connections for combine
//!   steps) come from per-role pools: only sessions of the same role share them,
//!   and each is brought to the session's settings, role included, before use. A
//!   session whose statement may leave other state on them (a function's
//!   `set_config`, advisory locks...) gets pools of its own instead (`isolation.rs`).
//! - A worker that does not know the role's verifier yet (a role created before it
//!   was added, or a password changed directly on the coordinator node) refuses the
//!   login; the role is then copied from the coordinator node
//!   (`commands::roles::sync_role_on_node`) and the login tried once more.

use super::*;
use crate::backend::conn::Secret;
use crate::backend::BackendConn;

/// A client's credentials and its own coordinator-node connection.
pub struct ClientIdentity {
    pub creds: Arc<Credentials>,
    pub home: Arc<NodePool>,
    /// The followed reported settings as the client's backend reported them at login.
    pub reported: HashMap<String, String>,
    /// The `citus.*` values the session starts with (`citus_settings::SETTINGS` order).
    pub citus_start: Vec<String>,
}

/// What the client's login reports: its BackendKeyData and the ParameterStatus
/// values of its own backend.
pub struct HomeBackend {
    pub process_id: i32,
    pub secret_key: i32,
    pub parameters: Vec<(String, String)>,
}

/// Opens the client's own coordinator-node connection, as the client, with the
/// parameters of its startup packet (`application_name`, `DateStyle`, `TimeZone`...,
/// and `options` as given in `option_settings` without pgshard's own `citus.*`): they
/// are that backend's startup values, so `RESET x` / `RESET ALL` there return to them,
/// as on PostgreSQL. `user`, `database` and `replication` are pgshard's to give.
pub async fn open_home(
    shared: &Shared,
    creds: Arc<Credentials>,
    startup: &[(String, String)],
    option_settings: &[(String, String)],
) -> PgResult<(ClientIdentity, HomeBackend)> {
    let options = crate::frontend::startup_options::join(
        option_settings
            .iter()
            .filter(|(name, _)| !crate::citus_settings::is_citus_name(name)),
    );
    // Every `citus.*` setting is a placeholder on the client's own backend, starting
    // with the session's value: SHOW, current_setting and RESET answer there.
    let citus_start =
        super::citus_settings::session_start_values(shared, &creds, option_settings).await?;
    let mut parameters: Vec<(&str, &str)> = startup
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "user" | "database" | "options" | "replication"))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    if !parameters.iter().any(|(k, _)| *k == "application_name") {
        // Not pgshard's: a client that gave none has an empty one, as on PostgreSQL.
        parameters.push(("application_name", ""));
    }
    if !options.is_empty() {
        parameters.push(("options", &options));
    }
    for (setting, value) in crate::citus_settings::SETTINGS.iter().zip(&citus_start) {
        parameters.push((setting.name, value));
    }
    // Held while the coordinator node fails over, then opened on its new server.
    let target = crate::failover::target(&shared.coordinator)
        .await?
        .unwrap_or_else(|| shared.coordinator.clone());
    let conn = crate::backend::pool::open_following(&target, &creds, &parameters)
        .await
        .map_err(|mut e| {
            // The node's own words (permission denied for database, too many
            // connections...) are the client's: without pgshard's node suffix.
            if let Some(at) = e.message.rfind(" (node ") {
                e.message.truncate(at);
            }
            e
        })?;
    let home = HomeBackend {
        process_id: conn.process_id,
        secret_key: conn.secret_key,
        parameters: conn.parameters.clone(),
    };
    let mut conn = conn;
    conn.reports = Some(Vec::new());
    let home_pool = NodePool::single(conn, creds.clone());
    Ok((
        ClientIdentity {
            creds,
            home: home_pool,
            reported: home
                .parameters
                .iter()
                .filter(|(k, _)| FOLLOWED_REPORTS.contains(&k.as_str()))
                .cloned()
                .collect(),
            citus_start,
        },
        home,
    ))
}

/// Resets a node connection's role to its login role (RESET ALL leaves `SET ROLE`
/// and `SET SESSION AUTHORIZATION` alone). A connection of a trusted client is
/// logged in as pgshard and switched to the client's role.
pub(super) fn reset_identity_sql(creds: &Credentials) -> String {
    match creds.secret {
        Secret::TrustedAs { .. } => {
            format!(
                "SET SESSION AUTHORIZATION {};RESET ROLE;",
                quote_ident(&creds.user)
            )
        }
        _ => "RESET SESSION AUTHORIZATION;RESET ROLE;".to_string(),
    }
}

/// Whether a recorded SET statement sets the role or the session authorization
/// (kept by RESET ALL, as in PostgreSQL).
pub(super) fn is_identity_setting(text: &str) -> bool {
    use pg_query::NodeEnum;
    let Ok(tree) = pg_query::parse(text, 0) else {
        return false;
    };
    tree.protobuf.stmts.iter().any(|s| {
        matches!(
            s.stmt.as_ref().and_then(|n| n.node.as_ref()),
            Some(NodeEnum::VariableSetStmt(v))
                if v.name.eq_ignore_ascii_case("role")
                    || v.name.eq_ignore_ascii_case("session_authorization")
        )
    })
}

/// Reported settings that shape what the other nodes send or read (dates, time
/// zones, encoding, literals) or who runs there: when the client's own backend
/// reports a change however it was made (`set_config`, a function, a transaction's
/// end), the session's node connections follow it.
const FOLLOWED_REPORTS: &[&str] = &[
    "TimeZone",
    "DateStyle",
    "IntervalStyle",
    "client_encoding",
    "standard_conforming_strings",
    "session_authorization",
];

/// The variable a recorded SET / RESET statement sets (lower case).
fn setting_variable(text: &str) -> Option<String> {
    let tree = pg_query::parse(text, 0).ok()?;
    tree.protobuf
        .stmts
        .iter()
        .find_map(|s| match s.stmt.as_ref()?.node.as_ref()? {
            pg_query::NodeEnum::VariableSetStmt(v) => Some(v.name.to_ascii_lowercase()),
            _ => None,
        })
}

/// Whether a SET / RESET statement sets its variable back to the session's startup
/// value (`RESET x`, `SET x TO DEFAULT`): in a replay the startup settings before it
/// already do that, where the statement itself would go to the node's own default.
pub(super) fn resets_to_startup(text: &str) -> bool {
    use pg_query::protobuf::VariableSetKind as K;
    let Ok(tree) = pg_query::parse(text, 0) else {
        return false;
    };
    tree.protobuf.stmts.iter().any(|s| {
        matches!(
            s.stmt.as_ref().and_then(|n| n.node.as_ref()),
            Some(pg_query::NodeEnum::VariableSetStmt(v))
                if v.kind == K::VarReset as i32 || v.kind == K::VarSetDefault as i32
        )
    })
}

/// Whether a recorded SET / RESET statement is made pointless by a later one of
/// `variable`: the same variable, or the role after the session authorization.
pub(super) fn overridden_by(text: &str, variable: &str) -> bool {
    let variable = variable.to_ascii_lowercase();
    match setting_variable(text) {
        Some(old) => old == variable || (variable == "session_authorization" && old == "role"),
        None => false,
    }
}

/// Whether a node's refusal of a login means it does not know the role as the
/// coordinator node does (missing, another verifier, no LOGIN).
fn is_role_mismatch(e: &PgError) -> bool {
    e.code == sqlstate::INVALID_PASSWORD || e.code == sqlstate::INVALID_AUTHORIZATION
}

impl Session {
    /// A connection to `addr` for the client's statements: its home connection on
    /// the coordinator node, a pooled connection of its role elsewhere.
    pub(super) async fn client_conn(&self, addr: &NodeAddr) -> PgResult<PooledConn> {
        if *addr == self.shared.coordinator {
            return self.home.acquire().await;
        }
        self.pooled_client_conn(addr).await
    }

    /// A pooled connection to `addr` logged in as the client's role (never its home
    /// connection): for work of the session's own beside its statements (combine
    /// steps, pipelined reads).
    pub(super) async fn pooled_client_conn(&self, addr: &NodeAddr) -> PgResult<PooledConn> {
        let pool = match self.own_pool(addr) {
            Some(own) => own,
            None => self.shared.pools.node_as(addr, &self.creds),
        };
        match pool.acquire().await {
            Err(e)
                if is_role_mismatch(&e)
                    && !matches!(self.creds.secret, Secret::TrustedAs { .. }) =>
            {
                commands::roles::sync_role_on_node(&self.shared.cfg, &addr.host, addr.port, &self.creds.user)
                    .await
                    .map_err(|sync| {
                        tracing::warn!(
                            "node {addr} refused role {}: copying it from the coordinator node failed: {sync}",
                            self.creds.user
                        );
                        e
                    })?;
                pool.acquire().await
            }
            r => r,
        }
    }

    /// Reports of the client's own backend: those no answer carried go to the client
    /// (`unforwarded`), and a changed value of a followed setting joins the settings
    /// replayed on the session's other node connections. True when the settings
    /// changed.
    fn absorb_reports(
        &mut self,
        reports: Vec<(String, String)>,
        unforwarded: Vec<(String, String)>,
    ) -> bool {
        self.pending_reports.extend(unforwarded);
        let mut changed = false;
        for (name, value) in reports {
            if !FOLLOWED_REPORTS.contains(&name.as_str())
                || self.reported.get(&name) == Some(&value)
            {
                continue;
            }
            let prefix = if name == "session_authorization" {
                "SET SESSION AUTHORIZATION ".to_string()
            } else {
                format!("SET {} TO ", quote_ident(&name))
            };
            // One followed entry per setting: a replay's RESET ALL reports too.
            let start = self.startup_settings;
            let mut at = 0;
            self.settings.retain(|text| {
                at += 1;
                at <= start || !text.starts_with(&prefix)
            });
            self.settings
                .push(format!("{prefix}{}", quote_literal(&value)));
            self.reported.insert(name, value);
            changed = true;
        }
        if changed {
            self.settings_fp = fingerprint(&self.settings);
        }
        changed
    }

    /// `absorb_reports` of the client's own connection `conn` (which has the new
    /// settings already).
    pub(super) fn absorb_home_reports(&mut self, conn: &mut BackendConn) {
        self.pending_notifications
            .append(&mut conn.unforwarded_notifications);
        let reports = match conn.reports.as_mut() {
            Some(r) if !r.is_empty() => std::mem::take(r),
            _ => return,
        };
        let unforwarded = std::mem::take(&mut conn.unforwarded_reports);
        if self.absorb_reports(reports, unforwarded) {
            conn.settings_fingerprint = self.settings_fp;
        }
    }

    /// `absorb_home_reports` for held connection `idx`, if it is the client's own.
    pub(super) fn absorb_held_reports(&mut self, idx: usize) {
        if self.tx.held[idx].conn.addr != self.shared.coordinator {
            return;
        }
        self.pending_notifications
            .append(&mut self.tx.held[idx].conn.unforwarded_notifications);
        let reports = match self.tx.held[idx].conn.reports.as_mut() {
            Some(r) if !r.is_empty() => std::mem::take(r),
            _ => return,
        };
        let unforwarded = std::mem::take(&mut self.tx.held[idx].conn.unforwarded_reports);
        if self.absorb_reports(reports, unforwarded) {
            self.tx.held[idx].conn.settings_fingerprint = self.settings_fp;
        }
    }

    /// The role whose privileges apply to what pgshard runs for the client on its own
    /// connections (Citus functions, DDL on shells): the client's `current_user`, as
    /// its own backend says (after its SET ROLE, in its block).
    pub(super) async fn caller(&mut self) -> PgResult<String> {
        self.home_column("SELECT current_user")
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| PgError::internal("current_user gave no row"))
    }

    /// The client's own coordinator-node connection outside any block, carrying the
    /// session's settings.
    pub(super) async fn home_with_settings(&mut self) -> PgResult<PooledConn> {
        let mut conn = self.home.acquire().await?;
        if conn.settings_fingerprint != self.settings_fp {
            conn.simple(&settings_replay_sql(&self.creds, &self.settings, &[]))
                .await?;
            conn.settings_fingerprint = self.settings_fp;
        }
        Ok(conn)
    }

    /// The first column of `sql`'s rows on the client's own coordinator-node
    /// connection, in its block if it is in one, with its settings.
    pub(super) async fn home_column(&mut self, sql: &str) -> PgResult<Vec<String>> {
        let coord = self.shared.coordinator.clone();
        if let Some(i) = self.held_index(&coord) {
            self.drain_all().await?;
            return self.tx.held[i].conn.simple_column(sql).await;
        }
        let mut conn = self.home_with_settings().await?;
        let rows = conn.simple_column(sql).await?;
        self.absorb_home_reports(&mut conn);
        Ok(rows)
    }

    /// ReadyForQuery, after the reports no answer carried (PostgreSQL sends its
    /// ParameterStatus just before it).
    pub(super) fn write_ready_for_query(&mut self) {
        for f in std::mem::take(&mut self.pending_notifications) {
            msg::write_raw(&mut self.out, f.tag, &f.body);
        }
        for (name, value) in std::mem::take(&mut self.pending_reports) {
            msg::write_parameter_status(&mut self.out, &name, &value);
        }
        let status = self.status_byte();
        msg::write_ready_for_query(&mut self.out, status);
        self.activity_ready();
    }

    /// Whether the client's own coordinator-node backend is gone (terminated,
    /// crashed): the session cannot go on, as with PostgreSQL.
    pub fn home_lost(&self) -> bool {
        self.home.is_lost()
    }

    /// The FATAL to end the session with when the client's own backend has ended by
    /// now (terminated just before the client's message arrived), without waiting:
    /// for what pgshard answers itself, which must not answer as if it still lived.
    pub(super) async fn home_ended_now(&mut self) -> Option<PgError> {
        if self.held_index(&self.shared.coordinator).is_some() {
            return None;
        }
        let mut conn = match self.home.acquire().await {
            Ok(c) => c,
            Err(e) => return Some(e),
        };
        let e = conn.ended_now()?;
        Some(if e.is_fatal() {
            e
        } else {
            PgError::fatal(
                sqlstate::ADMIN_SHUTDOWN,
                "terminating connection because its backend on the coordinator node ended",
            )
        })
    }

    /// The client's next message. Meanwhile, unless a block holds it, what the
    /// client's own backend sends on its own goes to the client at once, as
    /// PostgreSQL sends it to an idle client: notifications, notices, parameter
    /// changes, and the FATAL of a terminated backend, which ends the session.
    pub async fn next_client_frame(&mut self) -> PgResult<Option<Frame>> {
        if self.reader.has_frame() || self.held_index(&self.shared.coordinator).is_some() {
            return self.reader.frame().await;
        }
        let mut conn = self.home.acquire().await?;
        loop {
            tokio::select! {
                biased;
                f = self.reader.frame() => return f,
                m = conn.read() => {
                    let m = m?;
                    match m.tag {
                        b'S' => {
                            let last = conn.reports.as_ref().and_then(|r| r.last()).cloned();
                            conn.unforwarded_reports.extend(last);
                            self.absorb_home_reports(&mut conn);
                            for (name, value) in std::mem::take(&mut self.pending_reports) {
                                msg::write_parameter_status(&mut self.out, &name, &value);
                            }
                            self.flush_client().await?;
                        }
                        b'A' | b'N' => {
                            msg::write_raw(&mut self.out, m.tag, &m.body);
                            self.flush_client().await?;
                        }
                        b'E' => {
                            // The backend ends the connection (FATAL): so does the session.
                            conn.broken = true;
                            self.write_client_error(&PgError::from_server_fields(m.body));
                            self.flush_client().await?;
                            return Ok(None);
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    /// The key of the serving thread's pipelined connections this session may use:
    /// its settings and its role.
    pub(super) fn mux_key(&self) -> u64 {
        let who = self.creds.fingerprint();
        (self.settings_fp ^ who.rotate_left(17)) | 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_settings_are_recognised() {
        assert!(is_identity_setting("SET ROLE app"));
        assert!(is_identity_setting("set role none"));
        assert!(is_identity_setting("RESET ROLE"));
        assert!(is_identity_setting("SET SESSION AUTHORIZATION app"));
        assert!(is_identity_setting("RESET SESSION AUTHORIZATION"));
        assert!(!is_identity_setting("SET search_path = app"));
        assert!(!is_identity_setting("SET datestyle TO 'German'"));
    }

    #[test]
    fn resets_are_recognised() {
        assert!(resets_to_startup("RESET datestyle"));
        assert!(resets_to_startup("set TimeZone to default"));
        assert!(resets_to_startup("SET SESSION AUTHORIZATION DEFAULT"));
        assert!(resets_to_startup("RESET ROLE"));
        assert!(!resets_to_startup("SET datestyle = 'ISO'"));
        assert!(!resets_to_startup("SET ROLE NONE"));
    }

    #[test]
    fn later_settings_override_earlier_ones() {
        assert!(overridden_by("SET ROLE x", "role"));
        assert!(overridden_by("RESET ROLE", "role"));
        assert!(overridden_by("SET ROLE x", "session_authorization"));
        assert!(overridden_by("set DateStyle = 'German'", "datestyle"));
        assert!(!overridden_by("SET search_path = a", "role"));
        assert!(!overridden_by("SET SESSION AUTHORIZATION u", "role"));
    }

    #[test]
    fn trusted_clients_are_switched_back_to_their_role() {
        let c = Credentials {
            user: "A b".into(),
            database: "d".into(),
            secret: Secret::TrustedAs {
                own_user: "postgres".into(),
                password: "x".into(),
            },
        };
        assert_eq!(
            reset_identity_sql(&c),
            "SET SESSION AUTHORIZATION \"A b\";RESET ROLE;"
        );
    }
}
