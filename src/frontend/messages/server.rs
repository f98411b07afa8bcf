//! What pgshard answers clients (authentication, status, errors, rows, tags), and
//! the decoders of the same messages when nodes send them to pgshard.

use super::*;

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
