//! Combining the partial results of a multi-shard read. Counts are added here;
//! every other aggregate is combined by the coordinator node's PostgreSQL over the
//! shards' partial values, so types, NULLs and collation follow PostgreSQL exactly.

use crate::error::{PgError, PgResult};
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

/// The coordinator query combining `rows` partial rows of `aggs` (parameters
/// `$1..` hold the partial values row by row, typed as the shards returned them).
pub fn combine_query(
    aggs: &[AggKind],
    partial_types: &[u32],
    names: &[String],
    rows: usize,
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
    format!(
        "SELECT {} FROM (VALUES {}) AS partials({}){}",
        select.join(", "),
        values.join(", "),
        cols.join(", "),
        filter
    )
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
        );
        assert_eq!(
            q,
            "SELECT sum(c0)::int8 AS \"sum\", min(c1) AS \"m\"\"x\" FROM (VALUES ($1, $2), ($3, $4)) AS partials(c0, c1)"
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
