//! The first packet of a connection (startup, SSL / GSS / cancel requests) and the
//! answers only the startup phase sends.

use super::*;

/// Longest user or database name: PostgreSQL truncates longer ones in the startup
/// packet to NAMEDATALEN - 1 bytes.
pub const MAX_NAME_LEN: usize = 63;

/// The first packet of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupPacket {
    /// Protocol 3.x. `minor` above 0 or any `protocol_options` (`_pq_.*`, none of which
    /// PostgreSQL 15 knows) get a NegotiateProtocolVersion answer, and the session goes
    /// on with 3.0.
    Startup {
        params: Vec<(String, String)>,
        minor: u16,
        protocol_options: Vec<String>,
    },
    SslRequest,
    GssEncRequest,
    Cancel {
        process_id: i32,
        secret_key: i32,
    },
}

/// The severity of a refused startup packet PostgreSQL only logs (COMMERROR): the
/// client gets no answer, the connection is closed.
pub const LOG_ONLY: &str = "LOG";

/// Length-prefixed startup packet: `None` until complete.
pub fn decode_startup(buf: &mut BytesMut) -> PgResult<Option<StartupPacket>> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    // PostgreSQL's limit is on the packet without its length word.
    if len < 8 || len as usize - 4 > MAX_STARTUP_LEN {
        // PostgreSQL only logs this one (COMMERROR): a client closing before its
        // startup (node-postgres's Terminate) gets no answer.
        return Err(PgError {
            severity: LOG_ONLY,
            ..PgError::new(
                sqlstate::PROTOCOL_VIOLATION,
                "invalid length of startup packet",
            )
        });
    }
    if buf.len() < len as usize {
        return Ok(None);
    }
    let mut body = buf.split_to(len as usize);
    body.advance(4);
    let code = body.get_i32();
    match code {
        SSL_REQUEST => Ok(Some(StartupPacket::SslRequest)),
        GSSENC_REQUEST => Ok(Some(StartupPacket::GssEncRequest)),
        CANCEL_REQUEST => {
            if body.len() < 8 {
                return Err(PgError {
                    severity: LOG_ONLY,
                    ..PgError::new(sqlstate::PROTOCOL_VIOLATION, "invalid cancel request")
                });
            }
            Ok(Some(StartupPacket::Cancel {
                process_id: body.get_i32(),
                secret_key: body.get_i32(),
            }))
        }
        code if code >> 16 == PROTOCOL_V3 >> 16 => {
            // Name and value pairs, then the terminator as the last byte (else
            // PostgreSQL's FATAL, which it sends).
            let layout = || {
                PgError::fatal(
                    sqlstate::PROTOCOL_VIOLATION,
                    "invalid startup packet layout: expected terminator as last byte",
                )
            };
            let mut params = Vec::new();
            let mut protocol_options = Vec::new();
            let Some((0, mut rest)) = body.split_last().map(|(last, rest)| (*last, rest)) else {
                return Err(layout());
            };
            while !rest.is_empty() {
                let unterminated = |e: PgError| {
                    if e.code == sqlstate::PROTOCOL_VIOLATION {
                        layout()
                    } else {
                        e
                    }
                };
                let key = read_cstr(&mut rest).map_err(unterminated)?;
                if key.is_empty() {
                    return Err(layout());
                }
                let value = read_cstr(&mut rest).map_err(unterminated)?;
                if key.starts_with("_pq_.") {
                    protocol_options.push(key);
                } else {
                    params.push((key, value));
                }
            }
            Ok(Some(StartupPacket::Startup {
                params,
                minor: (code & 0xffff) as u16,
                protocol_options,
            }))
        }
        other => Err(unsupported_protocol(other)),
    }
}

/// PostgreSQL 15's refusal of another major protocol version (0A000).
fn unsupported_protocol(code: i32) -> PgError {
    PgError::fatal(
        sqlstate::FEATURE_NOT_SUPPORTED,
        format!(
            "unsupported frontend protocol {}.{}: server supports 3.0 to 3.0",
            (code as u32) >> 16,
            (code as u32) & 0xffff
        ),
    )
}

/// The refusal of a startup packet as PostgreSQL writes it: in the old protocol's
/// format (a bare 'E' and text) to a client asking for protocol 2 or older, which
/// cannot read anything else.
pub fn write_startup_error(buf: &mut BytesMut, err: &PgError, requested_major: Option<u16>) {
    match requested_major {
        Some(major) if major < 3 => {
            buf.put_u8(b'E');
            buf.put_slice(format!("{}:  {}\n", err.severity, err.message).as_bytes());
            buf.put_u8(0);
        }
        _ => write_error(buf, err),
    }
}

/// The major protocol version a startup packet at the start of `buf` asks for, if it
/// is one (not an SSL, GSS or cancel request).
pub fn requested_major(buf: &[u8]) -> Option<u16> {
    let code = i32::from_be_bytes(buf.get(4..8)?.try_into().ok()?);
    match code {
        SSL_REQUEST | GSSENC_REQUEST | CANCEL_REQUEST => None,
        code => Some(((code as u32) >> 16) as u16),
    }
}

/// A user or database name of the startup packet as PostgreSQL uses it: cut to
/// [`MAX_NAME_LEN`] bytes (at a character boundary).
pub fn startup_name(name: &str) -> String {
    let mut end = name.len().min(MAX_NAME_LEN);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

/// NegotiateProtocolVersion ('v'), as PostgreSQL 15 sends it: the newest version it
/// supports (3.0) and the protocol options it does not know.
pub fn write_negotiate_protocol_version(buf: &mut BytesMut, unknown_options: &[String]) {
    let at = begin_msg(buf, b'v');
    buf.put_i32(PROTOCOL_V3);
    buf.put_i32(unknown_options.len() as i32);
    for o in unknown_options {
        put_cstr(buf, o);
    }
    finish_msg(buf, at);
}
