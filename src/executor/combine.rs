//! Combining the partial results of a multi-shard read. Counts are added here;
//! every other aggregate is combined by the coordinator node's PostgreSQL over the
//! shards' partial values, so types, NULLs and collation follow PostgreSQL exactly.

use crate::error::{PgError, PgResult};
use crate::planner::aggregate::{partial_column, partial_count_column, PartialKind};
use crate::planner::AggKind;
use crate::sql::quote::quote_ident;

pub const INT8: u32 = 20;

/// Sum of count partials given as text.
pub fn add_counts<'a>(partials: impl Iterator<Item = Option<&'a [u8]>>) -> PgResult<i64> {
    let mut total: i64 = 0;
    for p in partials {
        let p = p.ok_or_else(|| PgError::internal("a shard returned NULL for count()"))?;
        let v: i64 = std::str::from_utf8(p)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| PgError::internal("a shard returned a malformed count"))?;
        total = total
            .checked_add(v)
            .ok_or_else(|| PgError::internal("count overflow"))?;
    }
    Ok(total)
}

/// Types whose values may carry a collation (text, varchar, bpchar, name) or might
/// (user types: domains, citext, ...).
fn maybe_collatable(t: u32) -> bool {
    matches!(t, 19 | 25 | 1042 | 1043) || t >= 16384
}

/// The coordinator query combining `rows` partial rows of `aggs` (parameters
/// `$1..` hold the partial values row by row, typed as the shards returned them).
/// `collation_source` (see `MultiShardShape::Aggregate`): when a min/max combines
/// values that may carry a collation, the partial rows are the UNION ALL of it (no
/// rows) and the parameters, so their columns take the arguments' collation
/// (PostgreSQL: a non-default implicit collation beats the parameters' default one).
pub fn combine_query(
    aggs: &[AggKind],
    partial_types: &[u32],
    names: &[String],
    rows: usize,
    collation_source: Option<&str>,
) -> String {
    let cols: Vec<String> = (0..aggs.len()).map(|i| format!("c{i}")).collect();
    let select: Vec<String> = aggs
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let c = &cols[i];
            let expr = match a {
                // Partial counts are int8: their sum is numeric in PostgreSQL, the
                // answer is int8 again; an empty set of partials counts 0.
                AggKind::Count => format!("coalesce(sum({c}), 0)::int8"),
                // sum(int2/int4) partials are int8; summing them must stay int8.
                AggKind::Sum if partial_types[i] == INT8 => format!("sum({c})::int8"),
                AggKind::Sum => format!("sum({c})"),
                AggKind::Min => format!("min({c})"),
                AggKind::Max => format!("max({c})"),
            };
            format!("{expr} AS {}", quote_ident(&names[i]))
        })
        .collect();
    let values: Vec<String> = (0..rows.max(1))
        .map(|r| {
            let row: Vec<String> = (0..aggs.len())
                .map(|c| {
                    if rows == 0 {
                        "NULL".to_string()
                    } else {
                        format!("${}", r * aggs.len() + c + 1)
                    }
                })
                .collect();
            format!("({})", row.join(", "))
        })
        .collect();
    let filter = if rows == 0 { " WHERE false" } else { "" };
    let collated = aggs.iter().enumerate().any(|(i, a)| {
        matches!(a, AggKind::Min | AggKind::Max)
            && partial_types.get(i).copied().is_some_and(maybe_collatable)
    });
    let source = match collation_source {
        Some(q) if collated => format!("{q} UNION ALL VALUES {}", values.join(", ")),
        _ => format!("VALUES {}", values.join(", ")),
    };
    format!(
        "SELECT {} FROM ({source}) AS partials({}){}",
        select.join(", "),
        cols.join(", "),
        filter
    )
}

/// Signature and header of COPY's binary format (no flags, no extension).
pub const COPY_BINARY_HEADER: [u8; 19] = *b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// A DataRow body in text format as one line of COPY's text format: tab-separated,
/// `\N` for NULL, backslash escapes for backslash, newline, carriage return and tab.
pub fn copy_text_row(body: &bytes::Bytes, out: &mut bytes::BytesMut) -> PgResult<()> {
    let row = crate::frontend::messages::decode_data_row(body)?;
    for (i, v) in row.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b"\t");
        }
        match v {
            None => out.extend_from_slice(b"\\N"),
            Some(v) => {
                for &b in v.iter() {
                    match b {
                        b'\\' => out.extend_from_slice(b"\\\\"),
                        b'\n' => out.extend_from_slice(b"\\n"),
                        b'\r' => out.extend_from_slice(b"\\r"),
                        b'\t' => out.extend_from_slice(b"\\t"),
                        _ => out.extend_from_slice(&[b]),
                    }
                }
            }
        }
    }
    out.extend_from_slice(b"\n");
    Ok(())
}

const NUMERIC: u32 = 1700;
const FLOAT8: u32 = 701;
const INTERVAL: u32 = 1186;

/// The combine expression of each partial aggregate over the temporary table's
/// partial columns (`type_of(column)` gives their type oid and SQL name). None when
/// some aggregate has no exact combine for its partial type (then raw rows are used).
pub fn partial_expressions(
    kinds: &[PartialKind],
    type_of: &dyn Fn(&str) -> Option<(u32, String)>,
) -> Option<Vec<String>> {
    let mut out = Vec::with_capacity(kinds.len());
    for (i, k) in kinds.iter().enumerate() {
        let col = partial_column(i);
        let c = quote_ident(&col);
        let (oid, type_name) = type_of(&col)?;
        out.push(match k {
            // Partial counts are int8; their sum is numeric in PostgreSQL.
            PartialKind::Count => format!("coalesce(sum({c}), 0)::int8"),
            // The sum of partial sums has the partials' type (sum(int4) partials are
            // int8, and so is the answer; sum(int8) partials are numeric...).
            PartialKind::Sum => format!("sum({c})::{type_name}"),
            PartialKind::Min => format!("min({c})"),
            PartialKind::Max => format!("max({c})"),
            PartialKind::BoolAnd => format!("bool_and({c})"),
            PartialKind::BoolOr => format!("bool_or({c})"),
            PartialKind::BitAnd => format!("bit_and({c})"),
            PartialKind::BitOr => format!("bit_or({c})"),
            PartialKind::Avg => {
                let n = quote_ident(&partial_count_column(i));
                match oid {
                    // avg(int2/int4) and avg(int8)/avg(numeric): numeric sum / count,
                    // PostgreSQL's own final step (numeric_div).
                    INT8 | NUMERIC => format!("(sum({c})::numeric / sum({n})::numeric)"),
                    FLOAT8 | INTERVAL => format!("(sum({c}) / sum({n})::float8)"),
                    _ => return None,
                }
            }
        });
    }
    Some(out)
}

/// Applies OFFSET and LIMIT to a stream position: whether row number `i` (0-based,
/// over all shards) is sent to the client.
pub fn row_selected(i: u64, offset: i64, limit: Option<i64>) -> bool {
    let i = i as i64;
    i >= offset && limit.map_or(true, |l| i < offset.saturating_add(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_exactly() {
        let parts: Vec<Option<&[u8]>> = vec![Some(b"3"), Some(b"4000000000"), Some(b"0")];
        assert_eq!(add_counts(parts.into_iter()).unwrap(), 4000000003);
        let bad: Vec<Option<&[u8]>> = vec![None];
        assert!(add_counts(bad.into_iter()).is_err());
    }

    #[test]
    fn combine_query_shape() {
        let q = combine_query(
            &[AggKind::Sum, AggKind::Min],
            &[INT8, 25],
            &["sum".into(), "m\"x".into()],
            2,
            None,
        );
        assert_eq!(
            q,
            "SELECT sum(c0)::int8 AS \"sum\", min(c1) AS \"m\"\"x\" FROM (VALUES ($1, $2), ($3, $4)) AS partials(c0, c1)"
        );
    }

    #[test]
    fn min_max_of_text_take_the_arguments_collation() {
        let source = "SELECT NULL, v FROM t WHERE false";
        let q = combine_query(
            &[AggKind::Count, AggKind::Min],
            &[INT8, 25],
            &["count".into(), "min".into()],
            1,
            Some(source),
        );
        assert_eq!(
            q,
            "SELECT coalesce(sum(c0), 0)::int8 AS \"count\", min(c1) AS \"min\" FROM \
             (SELECT NULL, v FROM t WHERE false UNION ALL VALUES ($1, $2)) AS partials(c0, c1)"
        );
        // Integers carry no collation: the plain VALUES.
        let q = combine_query(&[AggKind::Min], &[23], &["min".into()], 1, Some(source));
        assert!(q.contains("FROM (VALUES ($1))"), "{q}");
    }

    #[test]
    fn copy_text_escapes() {
        let mut row = bytes::BytesMut::new();
        crate::frontend::messages::write_data_row(
            &mut row,
            &[Some(&b"a\tb\\c\nd"[..]), None, Some(&b"\xc3\xa9"[..])],
        );
        let b = row.split_off(5).freeze();
        let mut out = bytes::BytesMut::new();
        copy_text_row(&b, &mut out).unwrap();
        assert_eq!(&out[..], b"a\\tb\\\\c\\nd\t\\N\t\xc3\xa9\n");
    }

    #[test]
    fn partial_combines_keep_types() {
        let types = |name: &str| -> Option<(u32, String)> {
            Some(match name {
                "pgs_a0" => (INT8, "bigint".into()),
                "pgs_a1" => (INT8, "bigint".into()),
                "pgs_a2" => (NUMERIC, "numeric".into()),
                _ => (700, "real".into()),
            })
        };
        let e = partial_expressions(
            &[PartialKind::Count, PartialKind::Sum, PartialKind::Avg],
            &types,
        )
        .unwrap();
        assert_eq!(e[0], "coalesce(sum(\"pgs_a0\"), 0)::int8");
        assert_eq!(e[1], "sum(\"pgs_a1\")::bigint");
        assert_eq!(
            e[2],
            "(sum(\"pgs_a2\")::numeric / sum(\"pgs_c2\")::numeric)"
        );
        // avg(float4) partial sums lose precision: no partial combine.
        assert!(
            partial_expressions(&[PartialKind::Min, PartialKind::Avg], &|n: &str| {
                Some(if n == "pgs_a1" {
                    (700, "real".into())
                } else {
                    (23, "integer".into())
                })
            })
            .is_none()
        );
    }

    #[test]
    fn limit_offset_window() {
        let picked: Vec<u64> = (0..10).filter(|i| row_selected(*i, 2, Some(3))).collect();
        assert_eq!(picked, vec![2, 3, 4]);
        assert!(row_selected(100, 0, None));
        assert!(!row_selected(0, 0, Some(0)));
    }
}
