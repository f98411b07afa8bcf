//! What pgshard sends to nodes as their client: Parse, Bind, Describe, Execute,
//! Close, Sync, Flush, Query.

use super::*;

/// Parse declaring `types`, at most the 65,535 a Parse can carry: a statement described
/// with more (PostgreSQL infers a type for each of up to 65,536 parameters; the client
/// declared at most 65,535) gets the rest inferred again, as at its first Parse.
pub fn write_parse(buf: &mut BytesMut, name: &str, query: &str, types: &[u32]) {
    let types = &types[..types.len().min(u16::MAX as usize)];
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
