//! COPY FROM STDIN into a table whose column list leaves out columns filled from a
//! sequence (serial, identity, a default calling `nextval`): the sequence lives on
//! the coordinator node only, so pgshard evaluates those columns' defaults there for
//! each batch of rows (`SELECT <defaults> FROM generate_series(1, n)` on the client's
//! own coordinator-node connection: row by row, column by column, as PostgreSQL's COPY
//! evaluates them, `currval` / `lastval` the session's) and appends the values to the
//! rows before they are routed. Text and CSV only; binary COPY is refused.

use super::*;
use crate::catalog::DistTable;
use crate::sql::copy_format::{self as cf, CopyFormat, KeySpec, Next};

/// The sequence columns a COPY fills, and how.
pub(super) struct SequenceFill {
    /// Column names, appended to the client's column list in table order.
    pub columns: Vec<String>,
    /// Their default expressions, as the coordinator node deparses them for the
    /// client's connection.
    exprs: Vec<String>,
    /// The header line is still to come (passed on unchanged).
    header_left: bool,
    /// Client data not yet filled (an incomplete row).
    raw: BytesMut,
}

impl Session {
    /// The sequence columns a COPY with `columns` leaves out, with their defaults;
    /// None when it gives them all.
    pub(super) async fn copy_sequence_fill(
        &mut self,
        table: &DistTable,
        columns: &[String],
        opts: &cf::CopyOptions,
    ) -> PgResult<Option<SequenceFill>> {
        let missing: Vec<String> = table
            .sequence_columns
            .iter()
            .filter(|c| !columns.contains(&c.name))
            .map(|c| quote_literal(&c.name))
            .collect();
        if missing.is_empty() {
            return Ok(None);
        }
        if opts.format == CopyFormat::Binary {
            return Err(PgError::not_supported(format!(
                "pgshard does not support binary COPY into \"{}\" without its columns filled \
                 from a sequence: give them values, or use text or CSV",
                table.name
            )));
        }
        // An identity column's default is its sequence's nextval.
        let sql = format!(
            "SELECT a.attname::pg_catalog.text, CASE WHEN a.attidentity <> '' THEN \
               'pg_catalog.nextval(' OPERATOR(pg_catalog.||) pg_catalog.quote_literal(\
                 pg_catalog.pg_get_serial_sequence(a.attrelid::pg_catalog.regclass::pg_catalog.text, \
                 a.attname::pg_catalog.text)) OPERATOR(pg_catalog.||) '::pg_catalog.regclass)' \
             ELSE pg_catalog.pg_get_expr(d.adbin, d.adrelid) END \
             FROM pg_catalog.pg_attribute a \
             LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
             WHERE a.attrelid = {} AND a.attnum > 0 AND NOT a.attisdropped \
               AND a.attname::pg_catalog.text = ANY (ARRAY[{}]::pg_catalog.text[]) \
             ORDER BY a.attnum",
            table.relid,
            missing.join(", ")
        );
        let rows = self.home_rows(&sql).await?;
        let mut fill = SequenceFill {
            columns: Vec::new(),
            exprs: Vec::new(),
            header_left: opts.header,
            raw: BytesMut::new(),
        };
        for row in rows {
            let (Some(name), Some(expr)) = (&row[0], &row[1]) else {
                continue;
            };
            fill.columns.push(name.clone());
            fill.exprs.push(expr.clone());
        }
        Ok((!fill.columns.is_empty()).then_some(fill))
    }

    /// Moves the complete rows of `data` (the client's) into `out` with the filled
    /// columns' values appended; an incomplete row waits in the fill for more data.
    pub(super) async fn fill_copy_rows(
        &mut self,
        fill: &mut SequenceFill,
        data: &[u8],
        out: &mut BytesMut,
        opts: &cf::CopyOptions,
        eof: bool,
    ) -> PgResult<()> {
        fill.raw.extend_from_slice(data);
        let key = KeySpec {
            index: 0,
            force_null: false,
            force_not_null: false,
        };
        // Row spans (start, length), and where the end-of-data marker starts.
        let mut spans = Vec::new();
        let mut at = 0;
        let mut end_at = None;
        loop {
            let buf = &fill.raw[at..];
            if buf.is_empty() {
                break;
            }
            let next = match opts.format {
                CopyFormat::Csv => cf::next_csv_row(buf, eof, opts, key),
                _ => cf::next_text_row(buf, eof, opts, key),
            };
            match next {
                Next::NeedMore => break,
                Next::End { .. } => {
                    end_at = Some(at);
                    break;
                }
                Next::Row { len, .. } => {
                    spans.push((at, len));
                    at += len;
                }
            }
        }
        let header = usize::from(fill.header_left && !spans.is_empty());
        let n = spans.len() - header;
        let values = if n > 0 {
            let sql = format!(
                "SELECT {} FROM pg_catalog.generate_series(1, {n})",
                fill.exprs.join(", ")
            );
            self.home_rows(&sql).await?
        } else {
            Vec::new()
        };
        if values.len() != n {
            return Err(PgError::internal(
                "the coordinator node gave too few sequence values for COPY",
            ));
        }
        for (i, &(start, len)) in spans.iter().enumerate() {
            let row = &fill.raw[start..start + len];
            if i < header {
                fill.header_left = false;
                out.extend_from_slice(row);
                continue;
            }
            let content = row
                .strip_suffix(b"\r\n")
                .or_else(|| row.strip_suffix(b"\n"))
                .or_else(|| row.strip_suffix(b"\r"))
                .unwrap_or(row);
            let terminator = &row[content.len()..];
            out.extend_from_slice(content);
            for v in &values[i - header] {
                out.extend_from_slice(&[opts.delimiter]);
                match v {
                    Some(v) if plain_value(v.as_bytes(), opts) => {
                        out.extend_from_slice(v.as_bytes())
                    }
                    Some(_) => {
                        return Err(PgError::not_supported(
                            "pgshard fills COPY rows only with values that need no quoting \
                             (a sequence's numbers): give the column a value",
                        ))
                    }
                    None => out.extend_from_slice(&opts.null),
                }
            }
            out.extend_from_slice(if terminator.is_empty() {
                b"\n"
            } else {
                terminator
            });
        }
        let consumed = match end_at {
            Some(e) => {
                out.extend_from_slice(&fill.raw[e..]);
                fill.raw.len()
            }
            None => at,
        };
        let _ = fill.raw.split_to(consumed);
        Ok(())
    }
}

/// Whether `v` reads the same unquoted in a COPY row with these options.
fn plain_value(v: &[u8], opts: &cf::CopyOptions) -> bool {
    !v.is_empty()
        && v != opts.null.as_slice()
        && v.iter().all(|&b| {
            b != opts.delimiter
                && b != opts.quote
                && b != b'\\'
                && b != b'\n'
                && b != b'\r'
                && b != b'"'
        })
}
