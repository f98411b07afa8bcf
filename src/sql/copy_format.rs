//! COPY data formats (text, CSV, binary) read just enough to route rows: where each
//! row ends and the raw value of one column (the distribution column). The rows
//! themselves are forwarded byte for byte to the shards, so everything else about
//! them (encoding, the other columns) is checked by PostgreSQL itself.
//! The rules follow PostgreSQL 15's copyfromparse.c.

use crate::error::{sqlstate, PgError, PgResult};
use crate::sql::quote::{quote_ident, quote_literal};
use bytes::BytesMut;
use pg_query::protobuf::node::Node as N;

/// The signature opening a binary COPY stream.
pub const BINARY_SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFormat {
    Text,
    Csv,
    Binary,
}

/// The options of a COPY statement that shape its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOptions {
    pub format: CopyFormat,
    pub delimiter: u8,
    pub null: Vec<u8>,
    pub quote: u8,
    pub escape: u8,
    pub header: bool,
    pub force_quote: Option<Vec<String>>,
    pub force_quote_all: bool,
    pub force_not_null: Vec<String>,
    pub force_null: Vec<String>,
    pub encoding: Option<String>,
}

fn bad_option(msg: impl Into<String>) -> PgError {
    PgError::new(sqlstate::SYNTAX_ERROR, msg)
}

fn def_string(arg: Option<&pg_query::protobuf::Node>) -> Option<String> {
    match arg?.node.as_ref()? {
        N::String(s) => Some(s.sval.clone()),
        N::Integer(i) => Some(i.ival.to_string()),
        N::Float(f) => Some(f.fval.clone()),
        N::Boolean(b) => Some(if b.boolval { "true" } else { "false" }.into()),
        _ => None,
    }
}

fn def_list(arg: Option<&pg_query::protobuf::Node>) -> Option<Vec<String>> {
    match arg?.node.as_ref()? {
        N::List(l) => l
            .items
            .iter()
            .map(|i| match i.node.as_ref() {
                Some(N::String(s)) => Some(s.sval.clone()),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

fn one_byte(name: &str, v: &str) -> PgResult<u8> {
    match v.as_bytes() {
        [b] if b.is_ascii() => Ok(*b),
        _ => Err(PgError::new(
            sqlstate::FEATURE_NOT_SUPPORTED,
            format!("COPY {name} must be a single one-byte character"),
        )),
    }
}

fn parse_bool(name: &str, v: Option<String>) -> PgResult<bool> {
    match v.map(|s| s.to_ascii_lowercase()).as_deref() {
        None | Some("true" | "on" | "1" | "yes") => Ok(true),
        Some("false" | "off" | "0" | "no") => Ok(false),
        Some(other) => Err(bad_option(format!(
            "{name} requires a Boolean value (got \"{other}\")"
        ))),
    }
}

impl CopyOptions {
    /// Reads the options of a COPY statement (its `DefElem` list, old or new syntax).
    pub fn from_defelems(options: &[pg_query::protobuf::Node]) -> PgResult<CopyOptions> {
        let mut format = CopyFormat::Text;
        let (mut delimiter, mut null, mut quote, mut escape) = (None, None, None, None);
        let mut o = CopyOptions {
            format,
            delimiter: b'\t',
            null: Vec::new(),
            quote: b'"',
            escape: b'"',
            header: false,
            force_quote: None,
            force_quote_all: false,
            force_not_null: Vec::new(),
            force_null: Vec::new(),
            encoding: None,
        };
        for opt in options {
            let Some(N::DefElem(d)) = opt.node.as_ref() else {
                continue;
            };
            let arg = d.arg.as_deref();
            match d.defname.as_str() {
                "format" => {
                    format = match def_string(arg).unwrap_or_default().to_lowercase().as_str() {
                        "text" => CopyFormat::Text,
                        "csv" => CopyFormat::Csv,
                        "binary" => CopyFormat::Binary,
                        other => {
                            return Err(bad_option(format!(
                                "COPY format \"{other}\" not recognized"
                            )))
                        }
                    }
                }
                "delimiter" => delimiter = Some(def_string(arg).unwrap_or_default()),
                "null" => null = Some(def_string(arg).unwrap_or_default()),
                "quote" => quote = Some(def_string(arg).unwrap_or_default()),
                "escape" => escape = Some(def_string(arg).unwrap_or_default()),
                "header" => {
                    let v = def_string(arg);
                    if v.as_deref().map(|s| s.eq_ignore_ascii_case("match")) == Some(true) {
                        return Err(PgError::not_supported(
                            "pgshard does not support COPY ... HEADER MATCH into distributed tables yet",
                        ));
                    }
                    o.header = parse_bool("header", v)?;
                }
                "force_quote" => match arg.and_then(|a| a.node.as_ref()) {
                    Some(N::AStar(_)) => o.force_quote_all = true,
                    _ => o.force_quote = def_list(arg),
                },
                "force_not_null" => o.force_not_null = def_list(arg).unwrap_or_default(),
                "force_null" => o.force_null = def_list(arg).unwrap_or_default(),
                "encoding" => o.encoding = def_string(arg),
                "freeze" => {
                    if parse_bool("freeze", def_string(arg))? {
                        return Err(PgError::not_supported(
                            "pgshard does not support COPY ... FREEZE on distributed tables",
                        ));
                    }
                }
                other => {
                    return Err(bad_option(format!("option \"{other}\" not recognized")));
                }
            }
        }
        o.format = format;
        let csv = format == CopyFormat::Csv;
        if format == CopyFormat::Binary && (delimiter.is_some() || null.is_some()) {
            return Err(bad_option(
                "cannot specify DELIMITER or NULL in BINARY mode",
            ));
        }
        if !csv
            && (quote.is_some()
                || escape.is_some()
                || o.force_quote.is_some()
                || o.force_quote_all
                || !o.force_not_null.is_empty()
                || !o.force_null.is_empty())
        {
            return Err(PgError::not_supported(
                "COPY quote, escape and force options are available only in CSV mode",
            ));
        }
        if format == CopyFormat::Binary && o.header {
            return Err(PgError::not_supported(
                "cannot specify HEADER in BINARY mode",
            ));
        }
        o.delimiter = match delimiter {
            Some(d) => one_byte("delimiter", &d)?,
            None if csv => b',',
            None => b'\t',
        };
        o.null = match null {
            Some(n) => n.into_bytes(),
            None if csv => Vec::new(),
            None => b"\\N".to_vec(),
        };
        o.quote = match quote {
            Some(q) => one_byte("quote", &q)?,
            None => b'"',
        };
        o.escape = match escape {
            Some(e) => one_byte("escape", &e)?,
            None => o.quote,
        };
        if matches!(o.delimiter, b'\r' | b'\n') || o.null.iter().any(|b| matches!(b, b'\r' | b'\n'))
        {
            return Err(PgError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                "COPY delimiter and null representation cannot contain newline or carriage return",
            ));
        }
        if csv && o.delimiter == o.quote {
            return Err(PgError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                "COPY delimiter and quote must be different",
            ));
        }
        if !csv
            && (o.delimiter == b'\\' || o.delimiter.is_ascii_alphanumeric() || o.delimiter == b'.')
        {
            return Err(PgError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("COPY delimiter cannot be \"{}\"", o.delimiter as char),
            ));
        }
        Ok(o)
    }

    /// The `WITH (...)` clause of the COPY sent to each shard: the client's options
    /// except HEADER (pgshard reads and drops the header itself for COPY FROM).
    pub fn shard_options(&self, with_header: bool) -> String {
        let lit = |b: &[u8]| quote_literal(&String::from_utf8_lossy(b));
        let mut parts = vec![format!(
            "FORMAT {}",
            match self.format {
                CopyFormat::Text => "text",
                CopyFormat::Csv => "csv",
                CopyFormat::Binary => "binary",
            }
        )];
        if self.format != CopyFormat::Binary {
            parts.push(format!("DELIMITER {}", lit(&[self.delimiter])));
            parts.push(format!("NULL {}", lit(&self.null)));
        }
        if self.format == CopyFormat::Csv {
            parts.push(format!("QUOTE {}", lit(&[self.quote])));
            parts.push(format!("ESCAPE {}", lit(&[self.escape])));
            let cols = |c: &[String]| {
                c.iter()
                    .map(|x| quote_ident(x))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            if !self.force_not_null.is_empty() {
                parts.push(format!("FORCE_NOT_NULL ({})", cols(&self.force_not_null)));
            }
            if !self.force_null.is_empty() {
                parts.push(format!("FORCE_NULL ({})", cols(&self.force_null)));
            }
            if self.force_quote_all {
                parts.push("FORCE_QUOTE *".into());
            } else if let Some(q) = &self.force_quote {
                parts.push(format!("FORCE_QUOTE ({})", cols(q)));
            }
        }
        if with_header && self.header {
            parts.push("HEADER".into());
        }
        if let Some(e) = &self.encoding {
            parts.push(format!("ENCODING {}", quote_literal(e)));
        }
        format!("({})", parts.join(", "))
    }
}

/// The distribution column's value in one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyValue {
    Null,
    /// The value as the type's input (text/CSV) or receive (binary) function sees it.
    Value(Vec<u8>),
    /// The row has fewer fields (or is malformed): PostgreSQL reports the error.
    Missing,
}

/// The next piece of a COPY stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// A whole row of `len` bytes (terminator included).
    Row { len: usize, key: KeyValue },
    /// End-of-data marker (`\.` line or binary trailer) of `len` bytes: data after it is ignored.
    End { len: usize },
    /// The buffer holds no complete row yet.
    NeedMore,
}

/// How the distribution column is read from a text or CSV row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySpec {
    /// 0-based field index.
    pub index: usize,
    /// CSV FORCE_NULL / FORCE_NOT_NULL on that column.
    pub force_null: bool,
    pub force_not_null: bool,
}

/// The end of the line starting at `buf[0]`, text format: (content length, length with
/// terminator). A backslash escapes the next byte, newline included.
fn text_line_end(buf: &[u8], eof: bool) -> Option<(usize, usize)> {
    let mut i = 0;
    while i < buf.len() {
        match buf[i] {
            b'\\' => {
                if i + 1 >= buf.len() {
                    return if eof {
                        Some((buf.len(), buf.len()))
                    } else {
                        None
                    };
                }
                i += 2;
            }
            b'\n' => return Some((i, i + 1)),
            b'\r' => {
                if i + 1 >= buf.len() {
                    return if eof { Some((i, i + 1)) } else { None };
                }
                let n = if buf[i + 1] == b'\n' { 2 } else { 1 };
                return Some((i, i + n));
            }
            _ => i += 1,
        }
    }
    eof.then_some((buf.len(), buf.len()))
}

/// The next row of a text-format stream and the raw value of field `key.index`.
pub fn next_text_row(buf: &[u8], eof: bool, opts: &CopyOptions, key: KeySpec) -> Next {
    if buf.is_empty() {
        return Next::NeedMore;
    }
    let Some((content, total)) = text_line_end(buf, eof) else {
        return Next::NeedMore;
    };
    let line = &buf[..content];
    if line == b"\\." {
        return Next::End { len: total };
    }
    let mut field = 0;
    let mut start = 0;
    let mut i = 0;
    while i <= line.len() {
        if i == line.len() || line[i] == opts.delimiter {
            if field == key.index {
                let raw = &line[start..i];
                let value = if raw == opts.null.as_slice() {
                    KeyValue::Null
                } else {
                    KeyValue::Value(unescape_text(raw))
                };
                return Next::Row {
                    len: total,
                    key: value,
                };
            }
            field += 1;
            start = i + 1;
            i += 1;
        } else if line[i] == b'\\' {
            i += 2;
        } else {
            i += 1;
        }
    }
    Next::Row {
        len: total,
        key: KeyValue::Missing,
    }
}

/// Appends one row in COPY's default text format (tab-separated, `\N` for NULL,
/// backslash escapes), as `COPY ... FROM STDIN` reads it back.
pub fn write_text_row(values: &[Option<&[u8]>], out: &mut BytesMut) {
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b"\t");
        }
        let Some(v) = v else {
            out.extend_from_slice(b"\\N");
            continue;
        };
        let mut start = 0;
        for (j, &c) in v.iter().enumerate() {
            let esc: &[u8] = match c {
                b'\\' => b"\\\\",
                b'\t' => b"\\t",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                _ => continue,
            };
            out.extend_from_slice(&v[start..j]);
            out.extend_from_slice(esc);
            start = j + 1;
        }
        out.extend_from_slice(&v[start..]);
    }
    out.extend_from_slice(b"\n");
}

/// De-escapes a text-format field (`\n`, `\t`, octal `\123`, hex `\x41`, `\<c>`).
pub fn unescape_text(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let c = raw[i];
        if c != b'\\' || i + 1 >= raw.len() {
            out.push(c);
            i += 1;
            continue;
        }
        let e = raw[i + 1];
        i += 2;
        match e {
            b'0'..=b'7' => {
                let mut v = (e - b'0') as u32;
                for _ in 0..2 {
                    match raw.get(i) {
                        Some(d @ b'0'..=b'7') => {
                            v = v * 8 + (d - b'0') as u32;
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push((v & 0o377) as u8);
            }
            b'x' => {
                let hex = |b: u8| (b as char).to_digit(16);
                match raw.get(i).copied().and_then(hex) {
                    Some(h1) => {
                        i += 1;
                        let mut v = h1;
                        if let Some(h2) = raw.get(i).copied().and_then(hex) {
                            v = v * 16 + h2;
                            i += 1;
                        }
                        out.push(v as u8);
                    }
                    None => out.push(b'x'),
                }
            }
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            other => out.push(other),
        }
    }
    out
}

/// The end of a CSV record: newlines inside quotes belong to the data.
fn csv_line_end(buf: &[u8], eof: bool, quote: u8, escape: u8) -> Option<(usize, usize)> {
    // An escape equal to the quote is just the quote toggling (PostgreSQL: escapec = '\0').
    let escape = if escape == quote { None } else { Some(escape) };
    let mut in_quote = false;
    let mut last_was_esc = false;
    let mut i = 0;
    while i < buf.len() {
        let c = buf[i];
        if in_quote && Some(c) == escape {
            last_was_esc = !last_was_esc;
        }
        if c == quote && !last_was_esc {
            in_quote = !in_quote;
        }
        if Some(c) != escape {
            last_was_esc = false;
        }
        if !in_quote {
            if c == b'\n' {
                return Some((i, i + 1));
            }
            if c == b'\r' {
                if i + 1 >= buf.len() {
                    return if eof { Some((i, i + 1)) } else { None };
                }
                let n = if buf[i + 1] == b'\n' { 2 } else { 1 };
                return Some((i, i + n));
            }
        }
        i += 1;
    }
    eof.then_some((buf.len(), buf.len()))
}

/// The next row of a CSV stream and the value of field `key.index` (unquoted).
pub fn next_csv_row(buf: &[u8], eof: bool, opts: &CopyOptions, key: KeySpec) -> Next {
    if buf.is_empty() {
        return Next::NeedMore;
    }
    let Some((content, total)) = csv_line_end(buf, eof, opts.quote, opts.escape) else {
        return Next::NeedMore;
    };
    let line = &buf[..content];
    if line == b"\\." {
        return Next::End { len: total };
    }
    let mut field = 0;
    let mut i = 0;
    loop {
        // One field: unquoted and quoted parts until a delimiter outside quotes.
        let start = i;
        let mut value = Vec::new();
        let mut saw_quote = false;
        let mut in_quote = false;
        while i < line.len() {
            let c = line[i];
            if in_quote {
                if c == opts.escape
                    && i + 1 < line.len()
                    && (line[i + 1] == opts.quote || line[i + 1] == opts.escape)
                    && !(opts.escape == opts.quote && line[i + 1] != opts.quote)
                {
                    value.push(line[i + 1]);
                    i += 2;
                    continue;
                }
                if c == opts.quote {
                    in_quote = false;
                    i += 1;
                    continue;
                }
                value.push(c);
                i += 1;
            } else {
                if c == opts.delimiter {
                    break;
                }
                if c == opts.quote {
                    saw_quote = true;
                    in_quote = true;
                    i += 1;
                    continue;
                }
                value.push(c);
                i += 1;
            }
        }
        if field == key.index {
            if in_quote {
                // Unterminated quoted field: PostgreSQL's error comes from the shard.
                return Next::Row {
                    len: total,
                    key: KeyValue::Missing,
                };
            }
            let raw = &line[start..i];
            let mut is_null = !saw_quote && raw == opts.null.as_slice();
            if is_null && key.force_not_null {
                is_null = false;
                value = opts.null.clone();
            } else if !is_null && key.force_null && value == opts.null {
                is_null = true;
            }
            let v = if is_null {
                KeyValue::Null
            } else {
                KeyValue::Value(value)
            };
            return Next::Row { len: total, key: v };
        }
        if i >= line.len() {
            return Next::Row {
                len: total,
                key: KeyValue::Missing,
            };
        }
        i += 1; // the delimiter
        field += 1;
    }
}

/// The length of a binary COPY header when the buffer holds all of it.
pub fn binary_header_len(buf: &[u8]) -> PgResult<Option<usize>> {
    if buf.len() < 19 {
        if !BINARY_SIGNATURE.starts_with(&buf[..buf.len().min(11)]) {
            return Err(bad_copy("COPY file signature not recognized"));
        }
        return Ok(None);
    }
    if &buf[..11] != BINARY_SIGNATURE {
        return Err(bad_copy("COPY file signature not recognized"));
    }
    let flags = u32::from_be_bytes(buf[11..15].try_into().unwrap());
    if flags & (1 << 16) != 0 {
        return Err(bad_copy("invalid COPY file header (WITH OIDS)"));
    }
    if flags & 0xffff_0000 & !(1 << 16) != 0 {
        return Err(bad_copy("unrecognized critical flags in COPY file header"));
    }
    let ext = i32::from_be_bytes(buf[15..19].try_into().unwrap());
    if ext < 0 {
        return Err(bad_copy("invalid COPY file header (missing length)"));
    }
    let total = 19 + ext as usize;
    Ok((buf.len() >= total).then_some(total))
}

fn bad_copy(msg: &str) -> PgError {
    PgError::new("22P04", msg)
}

/// The next tuple of a binary stream (after the header); the trailer (-1) is the end.
pub fn next_binary_row(buf: &[u8], key_index: usize) -> PgResult<Next> {
    if buf.len() < 2 {
        return Ok(Next::NeedMore);
    }
    let count = i16::from_be_bytes([buf[0], buf[1]]);
    if count == -1 {
        return Ok(Next::End { len: 2 });
    }
    if count < 0 {
        return Err(bad_copy(&format!(
            "row field count is {count}, expected a positive number"
        )));
    }
    let mut i = 2;
    let mut key = KeyValue::Missing;
    for f in 0..count as usize {
        if buf.len() < i + 4 {
            return Ok(Next::NeedMore);
        }
        let len = i32::from_be_bytes(buf[i..i + 4].try_into().unwrap());
        i += 4;
        if len < -1 {
            return Err(bad_copy("invalid field size"));
        }
        if len == -1 {
            if f == key_index {
                key = KeyValue::Null;
            }
            continue;
        }
        let len = len as usize;
        if buf.len() < i + len {
            return Ok(Next::NeedMore);
        }
        if f == key_index {
            key = KeyValue::Value(buf[i..i + len].to_vec());
        }
        i += len;
    }
    Ok(Next::Row { len: i, key })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(sql: &str) -> CopyOptions {
        let stmts = crate::sql::parse::parse(sql).unwrap();
        let Some(N::CopyStmt(c)) = &stmts[0].node else {
            panic!("not a COPY")
        };
        CopyOptions::from_defelems(&c.options).unwrap()
    }

    #[test]
    fn text_rows_written_read_back_the_same() {
        let values: Vec<Option<&[u8]>> = vec![
            Some(b"plain"),
            None,
            Some(b"tab\there\nnew\rline \\ back\\N"),
            Some(b""),
            Some("ünï".as_bytes()),
        ];
        let mut out = BytesMut::new();
        write_text_row(&values, &mut out);
        write_text_row(&[Some(b"\\.")], &mut out);
        assert_eq!(
            &out[..],
            b"plain\t\\N\ttab\\there\\nnew\\rline \\\\ back\\\\N\t\t\xc3\xbcn\xc3\xaf\n\\\\.\n"
        );
        let o = opts("COPY t FROM STDIN");
        for (i, v) in values.iter().enumerate() {
            let Next::Row { key: k, .. } = next_text_row(&out, true, &o, key(i)) else {
                panic!("no row")
            };
            match v {
                None => assert_eq!(k, KeyValue::Null),
                Some(v) => assert_eq!(k, KeyValue::Value(v.to_vec())),
            }
        }
        // A lone "\." value is escaped, so it does not end the data.
        let second = &out[out.iter().position(|&c| c == b'\n').unwrap() + 1..];
        assert_eq!(
            next_text_row(second, true, &o, key(0)),
            Next::Row {
                len: 4,
                key: KeyValue::Value(b"\\.".to_vec())
            }
        );
    }

    fn key(i: usize) -> KeySpec {
        KeySpec {
            index: i,
            force_null: false,
            force_not_null: false,
        }
    }

    fn val(s: &str) -> KeyValue {
        KeyValue::Value(s.as_bytes().to_vec())
    }

    #[test]
    fn options_defaults_and_old_syntax() {
        let t = opts("COPY t FROM STDIN");
        assert_eq!(
            (t.format, t.delimiter, t.null.as_slice()),
            (CopyFormat::Text, b'\t', &b"\\N"[..])
        );
        let c = opts("COPY t FROM STDIN CSV HEADER");
        assert_eq!(
            (c.format, c.delimiter, c.header),
            (CopyFormat::Csv, b',', true)
        );
        assert_eq!(c.null, b"");
        let c = opts("COPY t FROM STDIN WITH (FORMAT csv, DELIMITER ';', QUOTE '''', ESCAPE '\\', NULL 'NA', FORCE_NULL (a))");
        assert_eq!((c.delimiter, c.quote, c.escape), (b';', b'\'', b'\\'));
        assert_eq!(c.force_null, vec!["a".to_string()]);
        assert!(c.shard_options(false).contains("FORCE_NULL ("));
        assert!(!c.shard_options(false).contains("HEADER"));
        assert_eq!(
            opts("COPY t FROM STDIN (FORMAT binary)").format,
            CopyFormat::Binary
        );
    }

    #[test]
    fn text_rows() {
        let o = opts("COPY t FROM STDIN");
        let buf = b"1\ta\n22\tb\\\nc\n";
        assert_eq!(
            next_text_row(buf, false, &o, key(0)),
            Next::Row {
                len: 4,
                key: val("1")
            }
        );
        assert_eq!(
            next_text_row(&buf[4..], false, &o, key(1)),
            Next::Row {
                len: 8,
                key: val("b\nc")
            }
        );
        assert_eq!(next_text_row(b"1\ta", false, &o, key(0)), Next::NeedMore);
        assert_eq!(
            next_text_row(b"1\ta", true, &o, key(0)),
            Next::Row {
                len: 3,
                key: val("1")
            }
        );
        assert_eq!(
            next_text_row(b"\\N\tx\r\n", false, &o, key(0)),
            Next::Row {
                len: 6,
                key: KeyValue::Null
            }
        );
        assert_eq!(
            next_text_row(b"1\n", false, &o, key(1)),
            Next::Row {
                len: 2,
                key: KeyValue::Missing
            }
        );
        assert_eq!(
            next_text_row(b"\\.\nrest", false, &o, key(0)),
            Next::End { len: 3 }
        );
        assert_eq!(
            next_text_row(b"a\\tb\\x41\\101\\\\\tz\n", false, &o, key(0)),
            Next::Row {
                len: 17,
                key: val("a\tbAA\\")
            }
        );
        // An escaped delimiter is data.
        assert_eq!(
            next_text_row(b"a\\\tb\tc\n", false, &o, key(1)),
            Next::Row {
                len: 7,
                key: val("c")
            }
        );
    }

    #[test]
    fn csv_rows() {
        let o = opts("COPY t FROM STDIN CSV");
        let buf = b"\"a,\nb\",2\n";
        assert_eq!(
            next_csv_row(buf, false, &o, key(0)),
            Next::Row {
                len: buf.len(),
                key: val("a,\nb")
            }
        );
        assert_eq!(
            next_csv_row(buf, false, &o, key(1)),
            Next::Row {
                len: buf.len(),
                key: val("2")
            }
        );
        assert_eq!(
            next_csv_row(b"\"a\"\"b\",x\n", false, &o, key(0)),
            Next::Row {
                len: 9,
                key: val("a\"b")
            }
        );
        assert_eq!(
            next_csv_row(b",x\n", false, &o, key(0)),
            Next::Row {
                len: 3,
                key: KeyValue::Null
            }
        );
        assert_eq!(
            next_csv_row(b"\"\",x\n", false, &o, key(0)),
            Next::Row {
                len: 5,
                key: val("")
            }
        );
        assert_eq!(next_csv_row(b"\"a\nb", false, &o, key(0)), Next::NeedMore);
        let mut k = key(0);
        k.force_null = true;
        assert_eq!(
            next_csv_row(b"\"\",x\n", false, &o, k),
            Next::Row {
                len: 5,
                key: KeyValue::Null
            }
        );
        let mut k = key(0);
        k.force_not_null = true;
        assert_eq!(
            next_csv_row(b",x\n", false, &o, k),
            Next::Row {
                len: 3,
                key: val("")
            }
        );
        let e = opts("COPY t FROM STDIN WITH (FORMAT csv, ESCAPE '\\')");
        assert_eq!(
            next_csv_row(b"\"a\\\"b\",1\n", false, &e, key(0)),
            Next::Row {
                len: 9,
                key: val("a\"b")
            }
        );
        assert_eq!(
            next_csv_row(b"1\n", false, &o, key(2)),
            Next::Row {
                len: 2,
                key: KeyValue::Missing
            }
        );
    }

    #[test]
    fn binary_rows() {
        let mut buf = BINARY_SIGNATURE.to_vec();
        buf.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(binary_header_len(&buf).unwrap(), Some(19));
        assert_eq!(binary_header_len(&buf[..5]).unwrap(), None);
        assert!(binary_header_len(b"XXXXXXXXXXXXXXXXXXXXX").is_err());
        let mut row = vec![0, 2, 0, 0, 0, 4, 0, 0, 0, 7, 255, 255, 255, 255];
        assert_eq!(
            next_binary_row(&row, 0).unwrap(),
            Next::Row {
                len: 14,
                key: KeyValue::Value(vec![0, 0, 0, 7])
            }
        );
        assert_eq!(
            next_binary_row(&row, 1).unwrap(),
            Next::Row {
                len: 14,
                key: KeyValue::Null
            }
        );
        assert_eq!(next_binary_row(&row[..9], 0).unwrap(), Next::NeedMore);
        row.truncate(0);
        row.extend_from_slice(&[255, 255]);
        assert_eq!(next_binary_row(&row, 0).unwrap(), Next::End { len: 2 });
    }
}
