//! EXPLAIN of statements on distributed tables, in Citus's shape: a `Custom Scan
//! (Citus Adaptive)` node with its task count, the task(s) shown with their node and
//! the worker's own plan of the shard query, under the coordinator's combine plan
//! where there is one. Planning (which statement is explained, with which options)
//! and the pure text layout live here; the executor runs the EXPLAINs.

use super::Plan;
use crate::error::{PgError, PgResult};
use crate::sql::clauses::explained_statement_start;
use crate::sql::parse::{parse, Statement};
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self};

#[derive(Debug)]
pub struct ExplainPlan {
    /// The plan of the explained statement (Router, MultiShard, MultiShardModify).
    pub inner: Plan,
    /// `EXPLAIN <options> ` exactly as the client wrote it, put before shard queries.
    pub prefix: String,
    pub analyze: bool,
    pub costs: bool,
}

/// The explained statement and the client's EXPLAIN options. None when the text
/// cannot be split (then the caller refuses).
pub fn split_explain(
    e: &protobuf::ExplainStmt,
    text: &str,
) -> PgResult<Option<(Statement, String, bool, bool)>> {
    let Some(start) = explained_statement_start(text) else {
        return Ok(None);
    };
    let mut analyze = false;
    let mut costs = true;
    for o in &e.options {
        let Some(N::DefElem(d)) = o.node.as_ref() else {
            continue;
        };
        let value = super::const_text(d.arg.as_deref()).map(|v| v.to_ascii_lowercase());
        let on = value
            .as_deref()
            .map_or(true, |v| matches!(v, "true" | "on" | "1" | "yes"));
        match d.defname.as_str() {
            "analyze" => analyze = on,
            "costs" => costs = on,
            "format" if value.as_deref() != Some("text") => {
                return Err(PgError::not_supported(
                    "pgshard supports EXPLAIN of distributed queries in FORMAT TEXT only",
                ))
            }
            _ => {}
        }
    }
    let inner_text = text[start..].to_string();
    let mut stmts = parse(&inner_text)?;
    if stmts.len() != 1 {
        return Ok(None);
    }
    Ok(Some((
        stmts.remove(0),
        text[..start].to_string(),
        analyze,
        costs,
    )))
}

fn cost(costs: bool, rows: u64, width: u64) -> String {
    if costs {
        format!("  (cost=0.00..0.00 rows={rows} width={width})")
    } else {
        String::new()
    }
}

/// The `width=` of a plan line, if it has one.
fn width_of(line: &str) -> Option<u64> {
    let at = line.find("width=")? + 6;
    let digits: String = line[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// The Custom Scan block: `task_count` tasks, `shown` as (host, port, worker plan lines).
pub fn custom_scan(
    task_count: usize,
    shown: &[(String, u16, Vec<String>)],
    dbname: &str,
    all: bool,
    costs: bool,
    rows: u64,
) -> Vec<String> {
    let width = shown
        .first()
        .and_then(|(_, _, l)| l.first())
        .and_then(|l| width_of(l))
        .unwrap_or(0);
    let mut out = vec![format!(
        "Custom Scan (Citus Adaptive){}",
        cost(costs, rows, width)
    )];
    out.push(format!("  Task Count: {task_count}"));
    if all || task_count <= 1 {
        out.push("  Tasks Shown: All".into());
    } else {
        out.push(format!("  Tasks Shown: One of {task_count}"));
    }
    for (host, port, lines) in shown {
        out.push("  ->  Task".into());
        out.push(format!(
            "        Node: host={host} port={port} dbname={dbname}"
        ));
        for (i, l) in lines.iter().enumerate() {
            if i == 0 {
                out.push(format!("        ->  {l}"));
            } else {
                out.push(format!("            {l}"));
            }
        }
    }
    out
}

/// `block` as the child of a node named `name` (a combine step done by pgshard).
pub fn under(name: &str, costs: bool, block: Vec<String>) -> Vec<String> {
    let mut out = vec![format!("{name}{}", cost(costs, 0, 0))];
    out.extend(indent_child(&block, 0));
    out
}

/// `block` as a child at indentation `k` (spaces before `->  `).
fn indent_child(block: &[String], k: usize) -> Vec<String> {
    block
        .iter()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                format!("{}->  {l}", " ".repeat(k + 2))
            } else {
                format!("{}{l}", " ".repeat(k + 6))
            }
        })
        .collect()
}

/// The coordinator's combine plan with its scan of the temporary table replaced by
/// the Custom Scan block.
pub fn splice_scan(coordinator: &[String], scan: &[String]) -> Vec<String> {
    let Some(at) = coordinator
        .iter()
        .position(|l| l.contains("on pgs_partials"))
    else {
        return scan.to_vec();
    };
    let line = &coordinator[at];
    // The scan node's details (Filter: ...) are lines indented deeper, right after it.
    let node_indent = line.len() - line.trim_start().len();
    let mut end = at + 1;
    while end < coordinator.len() {
        let l = &coordinator[end];
        let ind = l.len() - l.trim_start().len();
        if ind <= node_indent || l.trim_start().starts_with("->") {
            break;
        }
        end += 1;
    }
    let mut out: Vec<String> = coordinator[..at].to_vec();
    match line.trim_start().strip_prefix("->  ") {
        Some(_) => {
            let k = node_indent.saturating_sub(2);
            out.extend(indent_child(scan, k));
        }
        None => out.extend(scan.iter().cloned()),
    }
    out.extend(coordinator[end..].iter().cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_scan_shape() {
        let worker = vec![
            "HashAggregate  (cost=1.00..2.00 rows=10 width=12)".to_string(),
            "  Group Key: c1".to_string(),
            "  ->  Seq Scan on test_102008 test  (cost=0.00..1.00 rows=10 width=4)".to_string(),
        ];
        let block = custom_scan(
            32,
            &[("127.0.0.1".into(), 5433, worker)],
            "postgres",
            false,
            true,
            100000,
        );
        assert_eq!(
            block,
            vec![
                "Custom Scan (Citus Adaptive)  (cost=0.00..0.00 rows=100000 width=12)",
                "  Task Count: 32",
                "  Tasks Shown: One of 32",
                "  ->  Task",
                "        Node: host=127.0.0.1 port=5433 dbname=postgres",
                "        ->  HashAggregate  (cost=1.00..2.00 rows=10 width=12)",
                "              Group Key: c1",
                "              ->  Seq Scan on test_102008 test  (cost=0.00..1.00 rows=10 width=4)",
            ]
        );
        let coordinator = vec![
            "Limit".to_string(),
            "  ->  Sort".to_string(),
            "        Sort Key: (count(*)) DESC".to_string(),
            "        ->  HashAggregate".to_string(),
            "              Group Key: test.c1".to_string(),
            "              ->  Seq Scan on pgs_partials test".to_string(),
        ];
        let spliced = splice_scan(&coordinator, &block[..3]);
        assert_eq!(
            spliced[5..],
            [
                "              ->  Custom Scan (Citus Adaptive)  (cost=0.00..0.00 rows=100000 width=12)",
                "                    Task Count: 32",
                "                    Tasks Shown: One of 32",
            ]
        );
        let top = splice_scan(&["Seq Scan on pgs_partials test".to_string()], &block[..1]);
        assert_eq!(top, block[..1].to_vec());
    }
}
