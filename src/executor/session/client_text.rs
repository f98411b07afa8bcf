//! A client's query text into statements, read as PostgreSQL reads it.
//!
//! - String settings: pgshard's parser reads the text with the session's
//!   `standard_conforming_strings` / `backslash_quote` / `escape_string_warning`
//!   (`sql::strings`), and statements written with the setting off are planned in
//!   standard form (`StringForm::Rewritten`); a statement on local tables still reaches
//!   the coordinator node as the client wrote it. One pgshard could not rewrite may
//!   only run there (`only_as_written`).
//! - Errors: when pgshard's parser refuses the text, the coordinator node is asked to
//!   parse it too, with a Parse message (nothing is bound or executed, so nothing can
//!   run, on a shell table or anywhere), and the client gets PostgreSQL's own error:
//!   message, SQLSTATE, position, hint, detail, and the warnings before it.

use super::*;
use crate::sql::parse::StringForm;
use crate::sql::strings::{ScannerWarning, StringSettings};

impl Session {
    /// The session's string settings: the coordinator node's at pgshard's start, then
    /// the session's own settings and the block's SET LOCALs.
    pub(super) fn string_settings(&self) -> StringSettings {
        let reported = |name: &str| {
            self.shared
                .server_params
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let base = StringSettings {
            standard_conforming: reported("standard_conforming_strings") != Some("off"),
            ..StringSettings::default()
        };
        let statements = self
            .settings
            .iter()
            .map(String::as_str)
            .chain(self.local_settings.iter().map(|(_, text)| text.as_str()));
        StringSettings::after(base, statements, self.startup_settings)
    }

    /// Whether the session's string settings change how `sql` reads (a backslash in it,
    /// and a setting away from standard form).
    pub(super) fn strings_matter(&self, sql: &str) -> bool {
        sql.contains('\\') && self.string_settings().matter_for(sql)
    }

    /// Splits and parses a client's query string (a Query, or a Parse message's). When
    /// pgshard's parser refuses it, the error is the coordinator node's own.
    pub(super) async fn parse_client(&mut self, sql: &str) -> PgResult<Vec<Statement>> {
        let settings = if sql.contains('\\') {
            self.string_settings()
        } else {
            StringSettings::default()
        };
        let own = match parse::parse_with(sql, settings) {
            Ok(stmts) => {
                let live = self.live_views_for(&stmts).await;
                let stmts = citus_settings::with_citus_views(stmts, live.as_ref());
                return self.with_shard_sizes(stmts).await;
            }
            Err(e) => e,
        };
        match self.parse_on_coordinator(sql).await {
            Ok(Some(postgres)) => Err(postgres),
            // PostgreSQL reads what pgshard's parser cannot (another grammar version, a
            // setting pgshard does not follow): nothing may run.
            Ok(None) => Err(PgError::not_supported(format!(
                "pgshard cannot parse this statement: {}",
                own.message
            ))),
            Err(e) => {
                tracing::warn!(
                    "the coordinator node could not check a statement pgshard cannot parse: {e}"
                );
                Err(own)
            }
        }
    }

    /// The coordinator node's error for parsing `sql` (None: it parsed), its warnings
    /// before it passed on to the client. Parse, Close and Sync only: nothing runs.
    async fn parse_on_coordinator(&mut self, sql: &str) -> PgResult<Option<PgError>> {
        // Answers to the client's earlier messages go out first.
        self.drain_all().await?;
        let coord = self.shared.coordinator.clone();
        let mut conn = self.private_conn(&coord).await?;
        msg::write_parse(&mut conn.wbuf, "", sql, &[]);
        msg::write_close(&mut conn.wbuf, b'S', "");
        msg::write_sync(&mut conn.wbuf);
        conn.flush().await?;
        let mut err = None;
        let mut notices = Vec::new();
        loop {
            let f = conn.read().await?;
            match f.tag {
                b'E' => err = Some(f.body),
                b'N' => notices.push(f.body),
                b'Z' => break,
                _ => {}
            }
        }
        let Some(raw) = err else {
            return Ok(None);
        };
        // A string of several statements that PostgreSQL parsed: only a Parse message
        // refuses it ("cannot insert multiple commands into a prepared statement").
        if server_field(&raw, b'R').as_deref() == Some("exec_parse_message") {
            return Ok(None);
        }
        for n in notices {
            msg::write_raw(&mut self.out, b'N', &n);
        }
        Ok(Some(PgError::from_server_fields(raw)))
    }

    /// PostgreSQL's scanner warnings for a statement written with nonstandard strings,
    /// unless the coordinator node gives them itself: it reads the client's text of a
    /// statement on local tables in the simple protocol (`simple_local`); its warnings
    /// to Parse messages are not passed on.
    pub(super) fn string_warnings(stmt: &Statement, simple_local: bool) -> &[ScannerWarning] {
        match &stmt.form {
            StringForm::Rewritten { warnings, .. } if !simple_local => warnings,
            _ => &[],
        }
    }
}

/// A statement pgshard could not bring into standard form may only run where the
/// client's text is read with the session's own settings: on the coordinator node, as
/// written (local tables, and SET, which reaches the other nodes in the session's
/// order). Anything else is refused.
pub(super) fn only_as_written(stmt: &Statement, plan: Plan) -> Plan {
    if stmt.form != StringForm::SessionOnly
        || matches!(
            plan,
            Plan::Local | Plan::Session(SessionCommand::Setting(_)) | Plan::Unsupported(_)
        )
    {
        return plan;
    }
    Plan::Unsupported(PgError::not_supported(
        "pgshard cannot read the string constants of this statement with standard_conforming_strings = off: write them as E'...' constants",
    ))
}

/// A WARNING as an ErrorResponse-shaped NoticeResponse body, position included.
pub(super) fn write_warning(out: &mut BytesMut, w: &ScannerWarning) {
    let at = msg::begin_msg(out, b'N');
    let position = w.position.to_string();
    for (field, value) in [
        (b'S', "WARNING"),
        (b'V', "WARNING"),
        (b'C', w.code),
        (b'M', w.message),
        (b'H', w.hint),
        (b'P', position.as_str()),
    ] {
        out.extend_from_slice(&[field]);
        msg::put_cstr(out, value);
    }
    out.extend_from_slice(&[0]);
    msg::finish_msg(out, at);
}

/// One field of an ErrorResponse / NoticeResponse body.
fn server_field(body: &[u8], ty: u8) -> Option<String> {
    let mut rest = body;
    while let Some((&t, tail)) = rest.split_first() {
        if t == 0 {
            return None;
        }
        let end = tail.iter().position(|&b| b == 0)?;
        if t == ty {
            return Some(String::from_utf8_lossy(&tail[..end]).into_owned());
        }
        rest = &tail[end + 1..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_carry_postgresql_fields() {
        let mut out = BytesMut::new();
        let w = crate::sql::strings::nonstandard_warnings("select 'a\\b'", 0, "select 'a\\b'");
        write_warning(&mut out, &w[0]);
        assert_eq!(out[0], b'N');
        let body = &out[5..];
        assert_eq!(server_field(body, b'S').as_deref(), Some("WARNING"));
        assert_eq!(server_field(body, b'C').as_deref(), Some("22P06"));
        assert_eq!(server_field(body, b'P').as_deref(), Some("8"));
        assert_eq!(
            server_field(body, b'H').as_deref(),
            Some("Use the escape string syntax for escapes, e.g., E'\\r\\n'.")
        );
        assert_eq!(server_field(body, b'R'), None);
    }
}
