//! Framing: one message split off the stream, and the helpers every encoder uses.

use super::*;

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

// ---- readers shared by the decoders ----------------------------------------

pub(super) fn malformed(what: &str) -> PgError {
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

pub(super) fn read_i16(buf: &mut &[u8], what: &str) -> PgResult<i16> {
    if buf.len() < 2 {
        return Err(malformed(what));
    }
    Ok(buf.get_i16())
}

/// A count of parameters or formats: unsigned 16 bits in the protocol (up to 65535).
pub(super) fn read_count(buf: &mut &[u8], what: &str) -> PgResult<usize> {
    if buf.len() < 2 {
        return Err(malformed(what));
    }
    Ok(buf.get_u16() as usize)
}

pub(super) fn read_i32(buf: &mut &[u8], what: &str) -> PgResult<i32> {
    if buf.len() < 4 {
        return Err(malformed(what));
    }
    Ok(buf.get_i32())
}
