//! Decoding of what clients send after startup: Parse, Bind, Describe / Close
//! targets, Execute, Query.

use super::*;

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
