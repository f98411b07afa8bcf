//! EXPLAIN of statements on distributed tables, in Citus's shape: a `Custom Scan
//! (Citus Adaptive)` node with its task count, the task(s) shown with their node and
//! the worker's own plan of the shard query, its distributed subplans (recursive
//! planning), under the coordinator's combine plan where there is one; in every
//! format PostgreSQL has (TEXT, JSON, YAML, XML).
//!
//! Planning (which statement is explained, with which options) lives here; the layout
//! in `text.rs` (TEXT) and `tree.rs` (the structured formats, built as one JSON tree
//! and written out by `render.rs` exactly as PostgreSQL writes each format); the
//! executor (`executor::explain`) runs the EXPLAINs on the nodes.

mod render;
mod text;
mod tree;

use super::Plan;
use crate::error::{PgError, PgResult};
use crate::sql::clauses::explained_statement_start;
use crate::sql::parse::{parse, Statement};
use crate::sql::quote::{quote_ident, quote_literal};
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self};
use serde_json::Value;

/// EXPLAIN's output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExplainFormat {
    Text,
    Json,
    Yaml,
    Xml,
}

#[derive(Debug)]
pub struct ExplainPlan {
    /// The plan of the explained statement.
    pub inner: Plan,
    /// The explained statement itself (run on the coordinator node when it is a
    /// part of a recursive plan that runs there).
    pub stmt: Statement,
    /// `EXPLAIN (<options>) ` put before the shard queries: the client's own text in
    /// TEXT format; its options with `FORMAT JSON` in the structured formats, whose
    /// output pgshard assembles from the nodes' JSON plans.
    pub prefix: String,
    pub format: ExplainFormat,
    pub analyze: bool,
    pub costs: bool,
}

/// The explained statement, the node-side EXPLAIN prefix, and the client's options.
/// None when the text cannot be split (then the caller refuses).
pub fn split_explain(
    e: &protobuf::ExplainStmt,
    text: &str,
) -> PgResult<Option<(Statement, String, ExplainFormat, bool, bool)>> {
    let Some(start) = explained_statement_start(text) else {
        return Ok(None);
    };
    let mut analyze = false;
    let mut costs = true;
    let mut format = ExplainFormat::Text;
    let mut options = Vec::new();
    for o in &e.options {
        let Some(N::DefElem(d)) = o.node.as_ref() else {
            continue;
        };
        let value = super::const_text(d.arg.as_deref());
        let lower = value.as_deref().map(str::to_ascii_lowercase);
        let on = lower
            .as_deref()
            .map_or(true, |v| matches!(v, "true" | "on" | "1" | "yes"));
        match d.defname.as_str() {
            "analyze" => analyze = on,
            "costs" => costs = on,
            "format" => {
                format = match lower.as_deref() {
                    Some("text") => ExplainFormat::Text,
                    Some("json") => ExplainFormat::Json,
                    Some("yaml") => ExplainFormat::Yaml,
                    Some("xml") => ExplainFormat::Xml,
                    // PostgreSQL's own error for an unknown format.
                    _ => return Ok(None),
                };
                continue;
            }
            _ => {}
        }
        options.push(match &value {
            Some(v) => format!("{} {}", quote_ident(&d.defname), quote_literal(v)),
            None => quote_ident(&d.defname),
        });
    }
    let prefix = if format == ExplainFormat::Text {
        text[..start].to_string()
    } else {
        options.push("FORMAT JSON".into());
        format!("EXPLAIN ({}) ", options.join(", "))
    };
    let inner_text = text[start..].to_string();
    let mut stmts = parse(&inner_text)?;
    if stmts.len() != 1 {
        return Ok(None);
    }
    Ok(Some((stmts.remove(0), prefix, format, analyze, costs)))
}

/// One explained plan (or a node's plan of its part), laid out for its format: lines
/// in TEXT; in the structured formats a JSON tree (a plan node, or a node's whole
/// `EXPLAIN (FORMAT JSON)` answer).
#[derive(Debug, Clone)]
pub enum Explained {
    Text(Vec<String>),
    Tree(Value),
}

impl Explained {
    /// A node's answer to the prefix's EXPLAIN: one row per line in TEXT, one JSON
    /// document otherwise.
    pub fn from_node(format: ExplainFormat, rows: Vec<String>) -> PgResult<Explained> {
        if format == ExplainFormat::Text {
            return Ok(Explained::Text(rows));
        }
        let doc = rows.concat();
        serde_json::from_str(&doc)
            .map(Explained::Tree)
            .map_err(|e| PgError::internal(format!("cannot read a node's EXPLAIN: {e}")))
    }

    /// The rows sent to the client: a line each in TEXT, one document otherwise.
    pub fn into_rows(self, format: ExplainFormat) -> Vec<String> {
        match self {
            Explained::Text(lines) => lines,
            Explained::Tree(node) => vec![render::document(format, &tree::document(node))],
        }
    }
}

/// A task shown under a Custom Scan: its node and the node's plan of its SQL.
pub struct ShownTask {
    pub host: String,
    pub port: u16,
    pub plan: Explained,
}

/// The Custom Scan block: `task_count` tasks, `shown` of them with their plans,
/// `subplans` (each an explained plan) before them.
pub fn custom_scan(
    format: ExplainFormat,
    task_count: usize,
    shown: Vec<ShownTask>,
    subplans: Vec<Explained>,
    dbname: &str,
    all: bool,
    costs: bool,
    rows: u64,
) -> Explained {
    if format == ExplainFormat::Text {
        let shown: Vec<(String, u16, Vec<String>)> = shown
            .into_iter()
            .map(|t| (t.host, t.port, text_lines(t.plan)))
            .collect();
        let block = text::custom_scan(task_count, &shown, dbname, all, costs, rows);
        let subplans: Vec<Vec<String>> = subplans.into_iter().map(text_lines).collect();
        Explained::Text(text::with_subplans(block, &subplans, 1))
    } else {
        let shown: Vec<(String, u16, Value)> = shown
            .into_iter()
            .map(|t| (t.host, t.port, tree::node_answer(tree_value(t.plan))))
            .collect();
        let subplans: Vec<Value> = subplans.into_iter().map(tree_value).collect();
        Explained::Tree(tree::custom_scan(
            task_count, &shown, subplans, dbname, all, costs, rows,
        ))
    }
}

/// `block` as the child of a node named `name` (`Aggregate` or `Limit`: a combine
/// step done by pgshard itself).
pub fn under(name: &str, costs: bool, block: Explained) -> Explained {
    match block {
        Explained::Text(lines) => Explained::Text(text::under(name, costs, lines)),
        Explained::Tree(node) => Explained::Tree(tree::under(name, costs, node)),
    }
}

/// The coordinator node's combine plan with its scan of the partials table replaced
/// by the Custom Scan block.
pub fn splice_scan(coordinator: Explained, scan: Explained) -> Explained {
    match (coordinator, scan) {
        (Explained::Text(c), Explained::Text(s)) => Explained::Text(text::splice_scan(&c, &s)),
        (Explained::Tree(c), Explained::Tree(s)) => Explained::Tree(tree::splice_scan(c, s)),
        (_, scan) => scan,
    }
}

/// `subplans` attached to the first Custom Scan of `block` (a recursive plan's outer
/// statement run by the workers); `plan_id` numbers them as Citus does (`1_1`, `1_2`).
pub fn with_subplans(block: Explained, subplans: Vec<Explained>, plan_id: u64) -> Explained {
    match block {
        Explained::Text(lines) => {
            let subplans: Vec<Vec<String>> = subplans.into_iter().map(text_lines).collect();
            Explained::Text(text::with_subplans(lines, &subplans, plan_id))
        }
        Explained::Tree(node) => {
            let subplans: Vec<Value> = subplans.into_iter().map(tree_value).collect();
            Explained::Tree(tree::with_subplans(node, subplans))
        }
    }
}

fn text_lines(e: Explained) -> Vec<String> {
    match e {
        Explained::Text(lines) => lines,
        Explained::Tree(v) => vec![v.to_string()],
    }
}

/// The JSON of a structured block (a plan node, or a node's whole answer).
fn tree_value(e: Explained) -> Value {
    match e {
        Explained::Tree(v) => v,
        Explained::Text(lines) => Value::String(lines.join("\n")),
    }
}
