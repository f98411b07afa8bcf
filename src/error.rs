//! PostgreSQL-style errors (SQLSTATE, message, detail) as pgshard raises and forwards them.

use std::fmt;

/// An error destined for a client as an ErrorResponse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgError {
    pub severity: &'static str,
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
    /// A complete ErrorResponse body received from a PostgreSQL server, forwarded unchanged.
    pub raw: Option<bytes::Bytes>,
}

pub type PgResult<T> = Result<T, PgError>;

/// SQLSTATE codes pgshard raises itself.
pub mod sqlstate {
    pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
    pub const SYNTAX_ERROR: &str = "42601";
    pub const UNDEFINED_TABLE: &str = "42P01";
    pub const DUPLICATE_TABLE: &str = "42P07";
    pub const UNDEFINED_COLUMN: &str = "42703";
    pub const UNDEFINED_FUNCTION: &str = "42883";
    pub const INVALID_PARAMETER_VALUE: &str = "22023";
    pub const INVALID_TEXT_REPRESENTATION: &str = "22P02";
    pub const PROTOCOL_VIOLATION: &str = "08P01";
    pub const CONNECTION_FAILURE: &str = "08006";
    pub const CONNECTION_EXCEPTION: &str = "08000";
    pub const CANNOT_CONNECT_NOW: &str = "57P03";
    pub const INVALID_PASSWORD: &str = "28P01";
    pub const INVALID_AUTHORIZATION: &str = "28000";
    pub const INVALID_SQL_STATEMENT_NAME: &str = "26000";
    pub const INVALID_CURSOR_NAME: &str = "34000";
    pub const DUPLICATE_PREPARED_STATEMENT: &str = "42P05";
    pub const IN_FAILED_TRANSACTION: &str = "25P02";
    pub const ACTIVE_SQL_TRANSACTION: &str = "25001";
    pub const NO_ACTIVE_SQL_TRANSACTION: &str = "25P01";
    pub const NOT_NULL_VIOLATION: &str = "23502";
    pub const GENERATED_ALWAYS: &str = "428C9";
    pub const INTERNAL_ERROR: &str = "XX000";
    pub const PROGRAM_LIMIT_EXCEEDED: &str = "54000";
    pub const TOO_MANY_CONNECTIONS: &str = "53300";
    pub const QUERY_CANCELED: &str = "57014";
    pub const ADMIN_SHUTDOWN: &str = "57P01";
    pub const SERIALIZATION_FAILURE: &str = "40001";
    pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
    pub const INVALID_OBJECT_DEFINITION: &str = "42P17";
    pub const INVALID_TABLE_DEFINITION: &str = "42P16";
    pub const OBJECT_NOT_IN_PREREQUISITE_STATE: &str = "55000";
    pub const WRONG_OBJECT_TYPE: &str = "42809";
    pub const DUPLICATE_OBJECT: &str = "42710";
    pub const DATATYPE_MISMATCH: &str = "42804";
    pub const NONSTANDARD_USE_OF_ESCAPE_CHARACTER: &str = "22P06";
    pub const UNDEFINED_OBJECT: &str = "42704";
    pub const INVALID_NAME: &str = "42602";
    pub const CANT_CHANGE_RUNTIME_PARAM: &str = "55P02";
    pub const INVALID_SCHEMA_NAME: &str = "3F000";
    pub const INVALID_CATALOG_NAME: &str = "3D000";
}

impl PgError {
    pub fn new(code: &str, message: impl Into<String>) -> PgError {
        PgError {
            severity: "ERROR",
            code: code.to_string(),
            message: message.into(),
            detail: None,
            hint: None,
            raw: None,
        }
    }

    pub fn fatal(code: &str, message: impl Into<String>) -> PgError {
        PgError {
            severity: "FATAL",
            ..PgError::new(code, message)
        }
    }

    pub fn not_supported(message: impl Into<String>) -> PgError {
        PgError::new(sqlstate::FEATURE_NOT_SUPPORTED, message)
    }

    pub fn internal(message: impl Into<String>) -> PgError {
        PgError::new(sqlstate::INTERNAL_ERROR, message)
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> PgError {
        self.detail = Some(detail.into());
        self
    }

    /// The same error with `context` (what ran where) before its message. The server's
    /// own bytes are dropped: they carry the message without it.
    pub fn in_context(mut self, context: &str) -> PgError {
        self.message = format!("{context}: {}", self.message);
        self.raw = None;
        self
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> PgError {
        self.hint = Some(hint.into());
        self
    }

    /// An error that came from a PostgreSQL server: keep its fields and its bytes.
    pub fn from_server_fields(raw: bytes::Bytes) -> PgError {
        let mut err = PgError::new(sqlstate::INTERNAL_ERROR, "");
        let mut rest = &raw[..];
        while let Some((&field, tail)) = rest.split_first() {
            if field == 0 {
                break;
            }
            let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
            let value = String::from_utf8_lossy(&tail[..end]).into_owned();
            match field {
                b'C' => err.code = value,
                b'M' => err.message = value,
                b'D' => err.detail = Some(value),
                b'H' => err.hint = Some(value),
                b'V' if value == "FATAL" => err.severity = "FATAL",
                b'V' if value == "PANIC" => err.severity = "PANIC",
                _ => {}
            }
            rest = tail.get(end + 1..).unwrap_or(&[]);
        }
        err.raw = Some(raw);
        err
    }

    /// Errors from tokio-postgres (control-plane connections).
    pub fn from_client_error(context: &str, e: &tokio_postgres::Error) -> PgError {
        if let Some(db) = e.as_db_error() {
            let mut err = PgError::new(db.code().code(), format!("{context}: {}", db.message()));
            err.detail = db.detail().map(str::to_string);
            err.hint = db.hint().map(str::to_string);
            err
        } else {
            // tokio-postgres's own text names only the kind ("error performing TLS
            // handshake"); the cause says what happened.
            let cause = std::error::Error::source(e).map_or(String::new(), |c| format!(": {c}"));
            PgError::new(
                sqlstate::CONNECTION_FAILURE,
                format!("{context}: {e}{cause}"),
            )
        }
    }

    /// Whether the error ends the connection that carries it (FATAL, PANIC).
    pub fn is_fatal(&self) -> bool {
        self.severity == "FATAL" || self.severity == "PANIC"
    }
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.severity, self.code, self.message)?;
        if let Some(d) = &self.detail {
            write!(f, " ({d})")?;
        }
        Ok(())
    }
}

impl std::error::Error for PgError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_server_error_fields() {
        let raw = bytes::Bytes::from_static(
            b"SERROR\0VERROR\0C42P01\0Mrelation \"x\" does not exist\0Dsome detail\0\0",
        );
        let e = PgError::from_server_fields(raw);
        assert_eq!(e.code, "42P01");
        assert_eq!(e.message, "relation \"x\" does not exist");
        assert_eq!(e.detail.as_deref(), Some("some detail"));
        assert!(!e.is_fatal());
    }
}
