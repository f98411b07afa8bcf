//! Wire formats of the PostgreSQL protocol v3 as small pure functions, apart from
//! all I/O: framing, decoding of what clients send, and encoding of what pgshard
//! answers. Backend connections reuse the same framing and encoders.

use crate::error::{sqlstate, PgError, PgResult};
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Largest message pgshard accepts from a client (PostgreSQL's own limit for most
/// messages is 1 GB; a claimed size above this is refused before it is read).
pub const MAX_MESSAGE_LEN: usize = 256 * 1024 * 1024;
/// Largest startup packet (PostgreSQL: MAX_STARTUP_PACKET_LENGTH = 10000).
pub const MAX_STARTUP_LEN: usize = 10000;

pub const PROTOCOL_V3: i32 = 196608;
pub const SSL_REQUEST: i32 = 80877103;
pub const GSSENC_REQUEST: i32 = 80877104;
pub const CANCEL_REQUEST: i32 = 80877102;

/// One message: its type byte and its body (without the length word).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub tag: u8,
    pub body: Bytes,
}

/// Splits one complete message off `buf`, or `None` if more bytes are needed.
/// A length below 4 or above `max_len` is a protocol violation.
pub fn decode_frame(buf: &mut BytesMut, max_len: usize) -> PgResult<Option<Frame>> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let tag = buf[0];
    let len = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
    if len < 4 || len as usize > max_len {
        return Err(PgError::fatal(
            sqlstate::PROTOCOL_VIOLATION,
            format!(
                "invalid message length {len} for message type \"{}\"",
                tag as char
            ),
        ));
    }
    let total = 1 + len as usize;
    if buf.len() < total {
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    let mut msg = buf.split_to(total);
    msg.advance(5);
    Ok(Some(Frame {
        tag,
        body: msg.freeze(),
    }))
}

/// The message at the start of `buf` without consuming it: its tag, body and total
/// length, or None while it has not fully arrived (or its length is invalid, which
/// `decode_frame` reports when the message is read for real).
pub fn peek_frame(buf: &[u8]) -> Option<(u8, &[u8], usize)> {
    if buf.len() < 5 {
        return None;
    }
    let len = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
    if len < 4 {
        return None;
    }
    let total = 1 + len as usize;
    (buf.len() >= total).then(|| (buf[0], &buf[5..total], total))
}

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

fn malformed(what: &str) -> PgError {
    PgError::new(
        sqlstate::PROTOCOL_VIOLATION,
        format!("invalid {what} message format"),
    )
}

/// Reads a NUL-terminated UTF-8 string.
pub fn read_cstr(buf: &mut &[u8]) -> PgResult<String> {
    let end = buf
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| PgError::new(sqlstate::PROTOCOL_VIOLATION, "invalid string in message"))?;
    let s = std::str::from_utf8(&buf[..end])
        .map_err(|_| PgError::new("22021", "invalid byte sequence for encoding \"UTF8\""))?
        .to_string();
    *buf = &buf[end + 1..];
    Ok(s)
}

fn read_i16(buf: &mut &[u8], what: &str) -> PgResult<i16> {
    if buf.len() < 2 {
        return Err(malformed(what));
    }
    Ok(buf.get_i16())
}

/// A count of parameters or formats: unsigned 16 bits in the protocol (up to 65535).
fn read_count(buf: &mut &[u8], what: &str) -> PgResult<usize> {
    if buf.len() < 2 {
        return Err(malformed(what));
    }
    Ok(buf.get_u16() as usize)
}

fn read_i32(buf: &mut &[u8], what: &str) -> PgResult<i32> {
    if buf.len() < 4 {
        return Err(malformed(what));
    }
    Ok(buf.get_i32())
}

/// Parse ('P').
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseMsg {
    pub name: String,
    pub query: String,
    pub param_types: Vec<u32>,
}

pub fn decode_parse(body: &[u8]) -> PgResult<ParseMsg> {
    let mut b = body;
    let name = read_cstr(&mut b)?;
    let query = read_cstr(&mut b)?;
    let n = read_count(&mut b, "Parse")?;
    let mut param_types = Vec::with_capacity(n.min(b.len() / 4));
    for _ in 0..n {
        param_types.push(read_i32(&mut b, "Parse")? as u32);
    }
    Ok(ParseMsg {
        name,
        query,
        param_types,
    })
}

/// Bind ('B'). Parameter values stay as slices of the message body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindMsg {
    pub portal: String,
    pub statement: String,
    pub param_formats: Vec<i16>,
    pub params: Vec<Option<Bytes>>,
    pub result_formats: Vec<i16>,
}

impl BindMsg {
    /// Format code of parameter `i` (PostgreSQL's rules: none = all text, one = all).
    pub fn param_format(&self, i: usize) -> i16 {
        match self.param_formats.len() {
            0 => 0,
            1 => self.param_formats[0],
            _ => self.param_formats.get(i).copied().unwrap_or(0),
        }
    }
}

pub fn decode_bind(body: &Bytes) -> PgResult<BindMsg> {
    let mut b: &[u8] = body;
    let portal = read_cstr(&mut b)?;
    let statement = read_cstr(&mut b)?;
    let nf = read_count(&mut b, "Bind")?;
    let mut param_formats = Vec::with_capacity(nf.min(b.len() / 2));
    for _ in 0..nf {
        param_formats.push(read_i16(&mut b, "Bind")?);
    }
    let np = read_count(&mut b, "Bind")?;
    let mut params = Vec::with_capacity(np.min(b.len() / 4));
    for _ in 0..np {
        let len = read_i32(&mut b, "Bind")?;
        if len == -1 {
            params.push(None);
        } else if len < 0 || len as usize > b.len() {
            return Err(malformed("Bind"));
        } else {
            let start = body.len() - b.len();
            params.push(Some(body.slice(start..start + len as usize)));
            b.advance(len as usize);
        }
    }
    let nr = read_count(&mut b, "Bind")?;
    let mut result_formats = Vec::with_capacity(nr.min(b.len() / 2));
    for _ in 0..nr {
        result_formats.push(read_i16(&mut b, "Bind")?);
    }
    if nf > 1 && nf != np {
        return Err(PgError::new(
            sqlstate::PROTOCOL_VIOLATION,
            format!("bind message has {nf} parameter formats but {np} parameters"),
        ));
    }
    Ok(BindMsg {
        portal,
        statement,
        param_formats,
        params,
        result_formats,
    })
}

/// Describe ('D') and Close ('C'): a kind byte ('S' statement or 'P' portal) and a name.
pub fn decode_target(body: &[u8], what: &str) -> PgResult<(u8, String)> {
    let mut b = body;
    if b.is_empty() {
        return Err(malformed(what));
    }
    let kind = b.get_u8();
    if kind != b'S' && kind != b'P' {
        return Err(PgError::new(
            sqlstate::PROTOCOL_VIOLATION,
            format!("invalid {what} message subtype {kind}"),
        ));
    }
    Ok((kind, read_cstr(&mut b)?))
}

/// Execute ('E'): portal name and row limit (0 = all).
pub fn decode_execute(body: &[u8]) -> PgResult<(String, i32)> {
    let mut b = body;
    let portal = read_cstr(&mut b)?;
    let max_rows = read_i32(&mut b, "Execute")?;
    Ok((portal, max_rows))
}

/// Query ('Q'): one NUL-terminated string filling the whole message.
pub fn decode_query(body: &[u8]) -> PgResult<String> {
    let mut b = body;
    let q = read_cstr(&mut b)?;
    if !b.is_empty() {
        return Err(malformed("Query"));
    }
    Ok(q)
}

// ---- encoders -------------------------------------------------------------

/// Starts a message; `finish_msg` fills in its length.
#[inline]
pub fn begin_msg(buf: &mut BytesMut, tag: u8) -> usize {
    buf.put_u8(tag);
    let at = buf.len();
    buf.put_i32(0);
    at
}

#[inline]
pub fn finish_msg(buf: &mut BytesMut, at: usize) {
    let len = (buf.len() - at) as i32;
    buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

pub fn put_cstr(buf: &mut BytesMut, s: &str) {
    buf.put_slice(s.as_bytes());
    buf.put_u8(0);
}

/// A message whose body is given whole.
pub fn write_raw(buf: &mut BytesMut, tag: u8, body: &[u8]) {
    buf.put_u8(tag);
    buf.put_i32(body.len() as i32 + 4);
    buf.put_slice(body);
}

pub fn write_auth(buf: &mut BytesMut, body: &[u8]) {
    write_raw(buf, b'R', body);
}

pub fn write_auth_ok(buf: &mut BytesMut) {
    write_raw(buf, b'R', &0i32.to_be_bytes());
}

pub fn write_parameter_status(buf: &mut BytesMut, name: &str, value: &str) {
    let at = begin_msg(buf, b'S');
    put_cstr(buf, name);
    put_cstr(buf, value);
    finish_msg(buf, at);
}

pub fn write_backend_key_data(buf: &mut BytesMut, pid: i32, key: i32) {
    let at = begin_msg(buf, b'K');
    buf.put_i32(pid);
    buf.put_i32(key);
    finish_msg(buf, at);
}

pub fn write_ready_for_query(buf: &mut BytesMut, status: u8) {
    write_raw(buf, b'Z', &[status]);
}

pub fn write_command_complete(buf: &mut BytesMut, tag: &str) {
    let at = begin_msg(buf, b'C');
    put_cstr(buf, tag);
    finish_msg(buf, at);
}

pub fn write_empty_query(buf: &mut BytesMut) {
    write_raw(buf, b'I', &[]);
}

pub fn write_parse_complete(buf: &mut BytesMut) {
    write_raw(buf, b'1', &[]);
}

pub fn write_bind_complete(buf: &mut BytesMut) {
    write_raw(buf, b'2', &[]);
}

pub fn write_close_complete(buf: &mut BytesMut) {
    write_raw(buf, b'3', &[]);
}

pub fn write_no_data(buf: &mut BytesMut) {
    write_raw(buf, b'n', &[]);
}

/// ErrorResponse ('E') or NoticeResponse ('N'): forwarded bytes where the error came
/// from a server, otherwise built from the fields.
pub fn write_error(buf: &mut BytesMut, err: &PgError) {
    write_report(buf, b'E', err);
}

pub fn write_report(buf: &mut BytesMut, tag: u8, err: &PgError) {
    if let Some(raw) = &err.raw {
        write_raw(buf, tag, raw);
        return;
    }
    let at = begin_msg(buf, tag);
    for (field, value) in [(b'S', err.severity), (b'V', err.severity)] {
        buf.put_u8(field);
        put_cstr(buf, value);
    }
    buf.put_u8(b'C');
    put_cstr(buf, &err.code);
    buf.put_u8(b'M');
    put_cstr(buf, &err.message);
    if let Some(d) = &err.detail {
        buf.put_u8(b'D');
        put_cstr(buf, d);
    }
    if let Some(h) = &err.hint {
        buf.put_u8(b'H');
        put_cstr(buf, h);
    }
    buf.put_u8(0);
    finish_msg(buf, at);
}

pub fn write_notice(buf: &mut BytesMut, message: &str) {
    let notice = PgError {
        severity: "NOTICE",
        ..PgError::new("00000", message)
    };
    write_report(buf, b'N', &notice);
}

/// One column of a RowDescription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDesc {
    pub name: String,
    pub table_oid: u32,
    pub column: i16,
    pub type_oid: u32,
    pub type_len: i16,
    pub type_mod: i32,
    pub format: i16,
}

impl FieldDesc {
    pub fn computed(name: &str, type_oid: u32, type_len: i16, format: i16) -> FieldDesc {
        FieldDesc {
            name: name.into(),
            table_oid: 0,
            column: 0,
            type_oid,
            type_len,
            type_mod: -1,
            format,
        }
    }
}

pub fn write_row_description(buf: &mut BytesMut, fields: &[FieldDesc]) {
    let at = begin_msg(buf, b'T');
    buf.put_i16(fields.len() as i16);
    for f in fields {
        put_cstr(buf, &f.name);
        buf.put_u32(f.table_oid);
        buf.put_i16(f.column);
        buf.put_u32(f.type_oid);
        buf.put_i16(f.type_len);
        buf.put_i32(f.type_mod);
        buf.put_i16(f.format);
    }
    finish_msg(buf, at);
}

pub fn decode_row_description(body: &[u8]) -> PgResult<Vec<FieldDesc>> {
    let mut b = body;
    let n = read_i16(&mut b, "RowDescription")?;
    let mut out = Vec::with_capacity(n.max(0) as usize);
    for _ in 0..n {
        let name = read_cstr(&mut b)?;
        if b.len() < 18 {
            return Err(malformed("RowDescription"));
        }
        out.push(FieldDesc {
            name,
            table_oid: b.get_u32(),
            column: b.get_i16(),
            type_oid: b.get_u32(),
            type_len: b.get_i16(),
            type_mod: b.get_i32(),
            format: b.get_i16(),
        });
    }
    Ok(out)
}

pub fn write_data_row(buf: &mut BytesMut, values: &[Option<&[u8]>]) {
    let at = begin_msg(buf, b'D');
    buf.put_i16(values.len() as i16);
    for v in values {
        match v {
            None => buf.put_i32(-1),
            Some(v) => {
                buf.put_i32(v.len() as i32);
                buf.put_slice(v);
            }
        }
    }
    finish_msg(buf, at);
}

/// Column values of a DataRow body, as slices of it.
pub fn decode_data_row(body: &Bytes) -> PgResult<Vec<Option<Bytes>>> {
    let mut b: &[u8] = body;
    let n = read_i16(&mut b, "DataRow")?;
    let mut out = Vec::with_capacity(n.max(0) as usize);
    for _ in 0..n {
        let len = read_i32(&mut b, "DataRow")?;
        if len < 0 {
            out.push(None);
        } else {
            if len as usize > b.len() {
                return Err(malformed("DataRow"));
            }
            let start = body.len() - b.len();
            out.push(Some(body.slice(start..start + len as usize)));
            b.advance(len as usize);
        }
    }
    Ok(out)
}

pub fn write_parameter_description(buf: &mut BytesMut, types: &[u32]) {
    let at = begin_msg(buf, b't');
    buf.put_u16(types.len() as u16);
    for t in types {
        buf.put_u32(*t);
    }
    finish_msg(buf, at);
}

pub fn decode_parameter_description(body: &[u8]) -> PgResult<Vec<u32>> {
    let mut b = body;
    let mut n = read_count(&mut b, "ParameterDescription")?;
    // PostgreSQL writes the count in 16 bits and every type after it: with 65,536
    // parameters or more the count wraps, the types are all there.
    let sent = b.len() / 4;
    if sent > n && sent % 65_536 == n {
        n = sent;
    }
    (0..n)
        .map(|_| read_i32(&mut b, "ParameterDescription").map(|v| v as u32))
        .collect()
}

// ---- frontend-side encoders (pgshard as a client of backends) -----------

pub fn write_parse(buf: &mut BytesMut, name: &str, query: &str, types: &[u32]) {
    let at = begin_msg(buf, b'P');
    put_cstr(buf, name);
    put_cstr(buf, query);
    buf.put_u16(types.len() as u16);
    for t in types {
        buf.put_u32(*t);
    }
    finish_msg(buf, at);
}

/// Bind with the client's own parameter bytes and formats.
pub fn write_bind(
    buf: &mut BytesMut,
    portal: &str,
    statement: &str,
    param_formats: &[i16],
    params: &[Option<Bytes>],
    result_formats: &[i16],
) {
    let at = begin_msg(buf, b'B');
    put_cstr(buf, portal);
    put_cstr(buf, statement);
    buf.put_u16(param_formats.len() as u16);
    for f in param_formats {
        buf.put_i16(*f);
    }
    buf.put_u16(params.len() as u16);
    for p in params {
        match p {
            None => buf.put_i32(-1),
            Some(v) => {
                buf.put_i32(v.len() as i32);
                buf.put_slice(v);
            }
        }
    }
    buf.put_u16(result_formats.len() as u16);
    for f in result_formats {
        buf.put_i16(*f);
    }
    finish_msg(buf, at);
}

pub fn write_describe(buf: &mut BytesMut, kind: u8, name: &str) {
    let at = begin_msg(buf, b'D');
    buf.put_u8(kind);
    put_cstr(buf, name);
    finish_msg(buf, at);
}

pub fn write_execute(buf: &mut BytesMut, portal: &str, max_rows: i32) {
    let at = begin_msg(buf, b'E');
    put_cstr(buf, portal);
    buf.put_i32(max_rows);
    finish_msg(buf, at);
}

/// One statement run through the unnamed statement and portal, as multi-shard work
/// pipelines them per node: Parse, Bind (the client's parameters), Describe of the
/// portal when `describe`, Execute of all rows. The Sync that ends the batch is the
/// caller's.
pub fn write_unnamed_run(
    buf: &mut BytesMut,
    sql: &str,
    param_types: &[u32],
    bind: &BindMsg,
    result_formats: &[i16],
    describe: bool,
) {
    write_parse(buf, "", sql, param_types);
    write_bind(
        buf,
        "",
        "",
        &bind.param_formats,
        &bind.params,
        result_formats,
    );
    if describe {
        write_describe(buf, b'P', "");
    }
    write_execute(buf, "", 0);
}

pub fn write_close(buf: &mut BytesMut, kind: u8, name: &str) {
    let at = begin_msg(buf, b'C');
    buf.put_u8(kind);
    put_cstr(buf, name);
    finish_msg(buf, at);
}

pub fn write_sync(buf: &mut BytesMut) {
    write_raw(buf, b'S', &[]);
}

pub fn write_flush(buf: &mut BytesMut) {
    write_raw(buf, b'H', &[]);
}

pub fn write_query(buf: &mut BytesMut, sql: &str) {
    let at = begin_msg(buf, b'Q');
    put_cstr(buf, sql);
    finish_msg(buf, at);
}

/// The tag of a CommandComplete body ("SELECT 3" etc.).
pub fn command_tag(body: &[u8]) -> &str {
    let end = body.iter().position(|&b| b == 0).unwrap_or(body.len());
    std::str::from_utf8(&body[..end]).unwrap_or("")
}

/// The row count a CommandComplete reports (its tag's last word: `INSERT 0 12` → 12,
/// `COPY 5` → 5), 0 for tags without one.
pub fn command_rows(body: &[u8]) -> u64 {
    command_tag(body)
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn command_tags_give_their_row_count() {
        assert_eq!(super::command_rows(b"INSERT 0 12\0"), 12);
        assert_eq!(super::command_rows(b"UPDATE 3\0"), 3);
        assert_eq!(super::command_rows(b"INSERT 0 0\0"), 0);
        assert_eq!(super::command_rows(b"CREATE TABLE\0"), 0);
    }

    #[test]
    fn unnamed_run_is_parse_bind_describe_execute() {
        let bind = super::BindMsg {
            portal: String::new(),
            statement: String::new(),
            param_formats: vec![1],
            params: vec![Some(bytes::Bytes::from_static(&[0, 0, 0, 7]))],
            result_formats: vec![],
        };
        let mut with = bytes::BytesMut::new();
        super::write_unnamed_run(&mut with, "SELECT $1", &[23], &bind, &[0], true);
        let mut by_hand = bytes::BytesMut::new();
        super::write_parse(&mut by_hand, "", "SELECT $1", &[23]);
        super::write_bind(&mut by_hand, "", "", &[1], &bind.params, &[0]);
        super::write_describe(&mut by_hand, b'P', "");
        super::write_execute(&mut by_hand, "", 0);
        assert_eq!(with, by_hand);
        let tags: Vec<u8> = {
            let mut b = with.clone();
            let mut t = Vec::new();
            while let Ok(Some(f)) = super::decode_frame(&mut b, 1 << 20) {
                t.push(f.tag);
            }
            t
        };
        assert_eq!(tags, b"PBDE");
        let mut without = bytes::BytesMut::new();
        super::write_unnamed_run(&mut without, "SELECT 1", &[], &bind, &[], false);
        assert!(!without.contains(&b'D'));
    }

    use super::*;

    fn framed(tag: u8, body: &[u8]) -> BytesMut {
        let mut b = BytesMut::new();
        write_raw(&mut b, tag, body);
        b
    }

    #[test]
    fn peek_sees_whole_messages_only_and_consumes_nothing() {
        let mut buf = framed(b'E', b"\0\0\0\0\0");
        write_sync(&mut buf);
        let (tag, body, len) = peek_frame(&buf).unwrap();
        assert_eq!((tag, body, len), (b'E', &b"\0\0\0\0\0"[..], 10));
        assert_eq!(peek_frame(&buf[len..]).unwrap(), (b'S', &b""[..], 5));
        assert_eq!(buf.len(), 15);
        assert_eq!(peek_frame(&buf[..9]), None);
        assert_eq!(peek_frame(&buf[..3]), None);
        assert_eq!(peek_frame(&[b'S', 0, 0, 0, 2]), None);
    }

    #[test]
    fn frames_split_and_wait_for_more() {
        let mut buf = framed(b'Q', b"select 1\0");
        buf.extend_from_slice(&[b'S', 0, 0]);
        let f = decode_frame(&mut buf, MAX_MESSAGE_LEN).unwrap().unwrap();
        assert_eq!(f.tag, b'Q');
        assert_eq!(decode_query(&f.body).unwrap(), "select 1");
        assert_eq!(decode_query(b"select 1\0S").unwrap_err().code, "08P01");
        assert_eq!(decode_query(b"select 1").unwrap_err().code, "08P01");
        assert_eq!(decode_frame(&mut buf, MAX_MESSAGE_LEN).unwrap(), None);
        buf.extend_from_slice(&[0, 4]);
        assert_eq!(
            decode_frame(&mut buf, MAX_MESSAGE_LEN)
                .unwrap()
                .unwrap()
                .tag,
            b'S'
        );
    }

    #[test]
    fn lying_and_huge_lengths_are_refused() {
        let mut buf = BytesMut::from(&[b'Q', 0, 0, 0, 2][..]);
        assert_eq!(
            decode_frame(&mut buf, MAX_MESSAGE_LEN).unwrap_err().code,
            "08P01"
        );
        let mut buf = BytesMut::from(&[b'Q', 0x7f, 0xff, 0xff, 0xff][..]);
        assert!(decode_frame(&mut buf, MAX_MESSAGE_LEN).is_err());
    }

    #[test]
    fn startup_packets() {
        let mut b = BytesMut::new();
        b.put_i32(8);
        b.put_i32(SSL_REQUEST);
        assert_eq!(
            decode_startup(&mut b).unwrap(),
            Some(StartupPacket::SslRequest)
        );
        let mut b = BytesMut::new();
        b.put_i32(16);
        b.put_i32(CANCEL_REQUEST);
        b.put_i32(7);
        b.put_i32(9);
        assert_eq!(
            decode_startup(&mut b).unwrap(),
            Some(StartupPacket::Cancel {
                process_id: 7,
                secret_key: 9
            })
        );
        let body = b"user\0bob\0database\0db\0\0";
        let mut b = BytesMut::new();
        b.put_i32(8 + body.len() as i32);
        b.put_i32(PROTOCOL_V3);
        b.put_slice(body);
        match decode_startup(&mut b).unwrap().unwrap() {
            StartupPacket::Startup {
                params,
                minor,
                protocol_options,
            } => {
                assert_eq!(
                    params,
                    vec![
                        ("user".into(), "bob".into()),
                        ("database".into(), "db".into())
                    ]
                );
                assert_eq!((minor, protocol_options.len()), (0, 0));
            }
            other => panic!("{other:?}"),
        }
        let mut b = BytesMut::new();
        b.put_i32(3);
        assert!(decode_startup(&mut b).is_err());
        let mut b = BytesMut::new();
        b.put_i32(12);
        b.put_i32(PROTOCOL_V3);
        b.put_slice(b"user"); // no terminator
        assert!(decode_startup(&mut b).is_err());
    }

    #[test]
    fn newer_minor_versions_and_protocol_options_are_negotiated() {
        let body = b"user\0bob\0_pq_.compression\0on\0database\0db\0\0";
        let mut b = BytesMut::new();
        b.put_i32(8 + body.len() as i32);
        b.put_i32(PROTOCOL_V3 | 2);
        b.put_slice(body);
        assert_eq!(
            decode_startup(&mut b).unwrap(),
            Some(StartupPacket::Startup {
                params: vec![
                    ("user".into(), "bob".into()),
                    ("database".into(), "db".into())
                ],
                minor: 2,
                protocol_options: vec!["_pq_.compression".into()],
            })
        );
        // PostgreSQL 15's bytes for 3.2 with that option.
        let mut v = BytesMut::new();
        write_negotiate_protocol_version(&mut v, &["_pq_.compression".to_string()]);
        assert_eq!(&v[..], b"v\0\0\0\x1d\0\x03\0\0\0\0\0\x01_pq_.compression\0");
        // Another major version: PostgreSQL's 0A000, in the old format to protocol 2.
        for (code, major) in [(2 << 16, 2u16), (4 << 16 | 1, 4)] {
            let mut b = BytesMut::new();
            b.put_i32(8 + body.len() as i32);
            b.put_i32(code);
            b.put_slice(body);
            assert_eq!(requested_major(&b), Some(major));
            let e = decode_startup(&mut b).unwrap_err();
            assert_eq!(e.code, "0A000");
            let mut out = BytesMut::new();
            write_startup_error(&mut out, &e, Some(major));
            if major == 2 {
                assert_eq!(
                    &out[..],
                    &b"EFATAL:  unsupported frontend protocol 2.0: server supports 3.0 to 3.0\n\0"
                        [..]
                );
            } else {
                assert_eq!(out[0], b'E');
                assert_eq!(
                    e.message,
                    "unsupported frontend protocol 4.1: server supports 3.0 to 3.0"
                );
            }
        }
        assert_eq!(startup_name(&"u".repeat(200)), "u".repeat(63));
        assert_eq!(startup_name(&"é".repeat(40)), "é".repeat(31));
        assert_eq!(startup_name("bob"), "bob");
    }

    #[test]
    fn parameter_descriptions_of_65536_types_keep_them_all() {
        // As PostgreSQL writes it: the count wrapped to 0, every type after it.
        let types = vec![25u32; 65_536];
        let mut b = BytesMut::new();
        write_parameter_description(&mut b, &types);
        let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
        assert_eq!(&f.body[..2], &[0, 0]);
        assert_eq!(decode_parameter_description(&f.body).unwrap().len(), 65_536);
    }

    #[test]
    fn startup_refusals_are_sent_or_only_logged_as_postgresql_does() {
        let mut b = BytesMut::from(&b"X\0\0\0\x04"[..]);
        let e = decode_startup(&mut b).unwrap_err();
        assert_eq!(e.severity, LOG_ONLY);
        for body in [&b"user\0u"[..], b"user\0u\0", b"user\0u\0database\0", b""] {
            let mut b = BytesMut::new();
            b.put_i32(8 + body.len() as i32);
            b.put_i32(196608);
            b.put_slice(body);
            let e = decode_startup(&mut b).unwrap_err();
            assert_eq!(e.severity, "FATAL");
            assert_eq!(
                e.message,
                "invalid startup packet layout: expected terminator as last byte"
            );
        }
    }

    #[test]
    fn parameter_counts_are_unsigned_16_bits() {
        let types = vec![23u32; 65535];
        let mut b = BytesMut::new();
        write_parse(&mut b, "", "select", &types);
        let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
        assert_eq!(decode_parse(&f.body).unwrap().param_types.len(), 65535);
        let params = vec![Some(Bytes::from_static(b"1")); 40000];
        let mut b = BytesMut::new();
        write_bind(&mut b, "", "", &[0], &params, &[]);
        let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
        assert_eq!(decode_bind(&f.body).unwrap().params.len(), 40000);
        let mut b = BytesMut::new();
        write_parameter_description(&mut b, &types[..40000]);
        let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
        assert_eq!(decode_parameter_description(&f.body).unwrap().len(), 40000);
        // A count claiming more than the message holds is an error, not an allocation.
        let mut body = BytesMut::new();
        body.put_slice(b"\0select\0");
        body.put_u16(65535);
        assert!(decode_parse(&body).is_err());
    }

    #[test]
    fn parse_bind_roundtrip() {
        let mut b = BytesMut::new();
        write_parse(&mut b, "s1", "select $1", &[23]);
        let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
        let p = decode_parse(&f.body).unwrap();
        assert_eq!(
            (p.name.as_str(), p.query.as_str(), p.param_types),
            ("s1", "select $1", vec![23])
        );

        let mut b = BytesMut::new();
        let params = vec![Some(Bytes::from_static(b"42")), None];
        write_bind(&mut b, "p", "s1", &[0], &params, &[1]);
        let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
        let bind = decode_bind(&f.body).unwrap();
        assert_eq!(bind.params, params);
        assert_eq!(bind.result_formats, vec![1]);
        assert_eq!(bind.param_format(1), 0);
    }

    #[test]
    fn truncated_bind_is_an_error_not_a_panic() {
        let mut b = BytesMut::new();
        write_bind(
            &mut b,
            "",
            "s",
            &[],
            &[Some(Bytes::from_static(b"hello"))],
            &[],
        );
        let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
        for cut in 0..f.body.len() {
            let _ = decode_bind(&f.body.slice(..cut));
        }
        assert!(decode_bind(&f.body.slice(..f.body.len() - 3)).is_err());
    }

    #[test]
    fn row_description_and_data_row_roundtrip() {
        let fields = vec![FieldDesc::computed("count", 20, 8, 0)];
        let mut b = BytesMut::new();
        write_row_description(&mut b, &fields);
        let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
        assert_eq!(decode_row_description(&f.body).unwrap(), fields);
        let mut b = BytesMut::new();
        write_data_row(&mut b, &[Some(b"12"), None]);
        let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
        let vals = decode_data_row(&f.body).unwrap();
        assert_eq!(vals, vec![Some(Bytes::from_static(b"12")), None]);
    }

    #[test]
    fn error_fields_are_encoded() {
        let mut b = BytesMut::new();
        write_error(&mut b, &PgError::not_supported("nope").with_detail("d"));
        let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
        let e = PgError::from_server_fields(f.body);
        assert_eq!((e.code.as_str(), e.message.as_str()), ("0A000", "nope"));
        assert_eq!(e.detail.as_deref(), Some("d"));
    }
}
