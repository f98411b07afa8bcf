//! COPY on distributed tables: `COPY t [(cols)] FROM STDIN` (rows routed to their
//! shards by pgshard, see `executor::session::copy`; a reference table's rows to
//! every placement), `COPY t TO STDOUT` (a reference table: one placement) and
//! `COPY (SELECT ...) TO STDOUT` over a plain multi-shard or router selection (one
//! COPY per shard, outputs concatenated). Files and programs are refused: they would
//! name paths on the coordinator node, not on the client.

use super::{MultiShardPlan, MultiShardShape, Plan, RouterPlan};
use crate::catalog::{DistTable, PartitionMethod};
use crate::error::{PgError, PgResult};
use crate::sql::copy_format::CopyOptions;
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self};
use std::sync::Arc;

#[derive(Debug)]
pub struct CopyInPlan {
    pub table: Arc<DistTable>,
    /// The client's column list (empty: every non-generated column).
    pub columns: Vec<String>,
    pub options: CopyOptions,
}

/// What a COPY TO STDOUT reads.
#[derive(Debug)]
pub enum CopyOutSource {
    /// The whole table (optionally some columns).
    Table {
        table: Arc<DistTable>,
        columns: Vec<String>,
    },
    /// A selection planned by the ordinary planner.
    Router(Arc<RouterPlan>),
    MultiShard(Arc<MultiShardPlan>),
}

#[derive(Debug)]
pub struct CopyOutPlan {
    pub source: CopyOutSource,
    pub options: CopyOptions,
}

fn refuse(msg: &str) -> PgResult<Plan> {
    Ok(Plan::Unsupported(PgError::not_supported(msg.to_string())))
}

fn column_names(attlist: &[protobuf::Node]) -> Vec<String> {
    attlist
        .iter()
        .filter_map(|a| match a.node.as_ref() {
            Some(N::String(s)) => Some(s.sval.clone()),
            _ => None,
        })
        .collect()
}

/// Plans a COPY naming the distributed table `table` (directly or in its query).
/// `plan_query` plans the text of `COPY (query)`'s query.
pub fn plan_copy(
    c: &protobuf::CopyStmt,
    text: &str,
    table: Arc<DistTable>,
    plan_query: &dyn Fn(&str) -> PgResult<Plan>,
) -> PgResult<Plan> {
    if c.is_program || !c.filename.is_empty() {
        return refuse(
            "pgshard supports COPY of distributed tables only FROM STDIN / TO STDOUT (use psql's \\copy for files)",
        );
    }
    if c.where_clause.is_some() {
        return refuse("pgshard does not support COPY ... WHERE on distributed tables yet");
    }
    let options = match CopyOptions::from_defelems(&c.options) {
        Ok(o) => o,
        Err(e) => return Ok(Plan::Unsupported(e)),
    };
    let columns = column_names(&c.attlist);
    if c.is_from {
        if c.query.is_some() {
            return refuse("COPY FROM cannot use a query");
        }
        if table.dist_column.is_none() && table.method != PartitionMethod::Reference {
            return refuse("the table has no distribution column");
        }
        return Ok(Plan::CopyIn(Arc::new(CopyInPlan {
            table,
            columns,
            options,
        })));
    }
    let source = match &c.query {
        None => CopyOutSource::Table { table, columns },
        Some(_) => {
            let Some((start, end)) = query_span(text) else {
                return refuse("pgshard could not locate the query of COPY (...) TO STDOUT");
            };
            match plan_query(&text[start..end])? {
                Plan::Router(r) if r.read_only => CopyOutSource::Router(r),
                Plan::MultiShard(m)
                    if m.shape == MultiShardShape::Plain
                        && m.limit == super::multishard::Bound::None
                        && m.offset == 0 =>
                {
                    CopyOutSource::MultiShard(m)
                }
                Plan::Unsupported(e) => return Ok(Plan::Unsupported(e)),
                _ => {
                    return refuse(
                        "pgshard supports COPY (query) TO STDOUT on distributed tables only for plain selections (no aggregates, LIMIT or ORDER BY across shards)",
                    )
                }
            }
        }
    };
    Ok(Plan::CopyOut(Arc::new(CopyOutPlan { source, options })))
}

/// The span of the parenthesised query in `COPY (query) TO ...`, without the parentheses.
pub fn query_span(text: &str) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    let open = text.find('(')?;
    let mut depth = 0usize;
    let mut i = open;
    while i < b.len() {
        match b[i] {
            b'\'' | b'"' => {
                let q = b[i];
                i += 1;
                while i < b.len() && b[i] != q {
                    i += 1;
                }
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some((open + 1, i));
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::query_span;

    #[test]
    fn finds_the_query_of_copy() {
        let t = "COPY (SELECT a, ')' FROM t WHERE (a) > 1) TO STDOUT";
        let (s, e) = query_span(t).unwrap();
        assert_eq!(&t[s..e], "SELECT a, ')' FROM t WHERE (a) > 1");
    }
}
