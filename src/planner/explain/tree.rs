//! The structured layout of EXPLAIN (JSON, YAML, XML) in Citus's shape, built as one
//! JSON tree with PostgreSQL's own keys: a `Custom Scan` node whose `Distributed Query`
//! holds its `Subplans` and its `Job` (task count, tasks shown, each task's `Node` and
//! `Remote Plan`, the node's own `EXPLAIN (FORMAT JSON)` answer), spliced into the
//! coordinator node's combine plan. `render.rs` writes the tree out in each format.

use serde_json::{Map, Value};

/// A JSON number exactly as PostgreSQL prints it (`0.00`).
fn number(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// The plan node of a node's whole answer (`[{"Plan": {...}, ...}]`), or `v` itself.
pub fn plan_node(v: Value) -> Value {
    match v {
        Value::Array(mut queries) if !queries.is_empty() => match queries.swap_remove(0) {
            Value::Object(mut q) => q.remove("Plan").unwrap_or(Value::Null),
            other => other,
        },
        other => other,
    }
}

/// A node's whole answer: `v` itself, or a plan node wrapped as one.
pub fn node_answer(v: Value) -> Value {
    match v {
        Value::Array(_) => v,
        node => document(node),
    }
}

/// The document of one explained statement: `[{"Plan": node}]`.
pub fn document(node: Value) -> Value {
    let node = plan_node(node);
    let mut query = Map::new();
    query.insert("Plan".into(), node);
    Value::Array(vec![Value::Object(query)])
}

/// The common head of a plan node: its type, then what PostgreSQL puts before the
/// node's own details.
fn node_head(node_type: &str, extra: &[(&str, Value)]) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("Node Type".into(), Value::String(node_type.into()));
    for (k, v) in extra {
        m.insert((*k).into(), v.clone());
    }
    m.insert("Parallel Aware".into(), Value::Bool(false));
    m.insert("Async Capable".into(), Value::Bool(false));
    m
}

fn add_costs(m: &mut Map<String, Value>, costs: bool, rows: u64, width: u64) {
    if costs {
        m.insert("Startup Cost".into(), number("0.00"));
        m.insert("Total Cost".into(), number("0.00"));
        m.insert("Plan Rows".into(), number(&rows.to_string()));
        m.insert("Plan Width".into(), number(&width.to_string()));
    }
}

/// `Plans` of `parent` set to the one child `child` (an `Outer` child).
fn with_child(mut parent: Map<String, Value>, child: Value) -> Value {
    let child = as_child(child);
    parent.insert("Plans".into(), Value::Array(vec![child]));
    Value::Object(parent)
}

/// `node` with `"Parent Relationship": "Outer"` where PostgreSQL puts it in a child:
/// after the node type and its strategy fields.
fn as_child(node: Value) -> Value {
    let Value::Object(m) = node else {
        return node;
    };
    let head = |k: &str| matches!(k, "Node Type" | "Strategy" | "Partial Mode" | "Operation");
    let mut out = Map::new();
    let mut placed = false;
    for (k, v) in m {
        if k == "Parent Relationship" {
            continue;
        }
        if !placed && !head(&k) {
            out.insert("Parent Relationship".into(), Value::String("Outer".into()));
            placed = true;
        }
        out.insert(k, v);
    }
    if !placed {
        out.insert("Parent Relationship".into(), Value::String("Outer".into()));
    }
    Value::Object(out)
}

/// The Custom Scan node: `task_count` tasks, `shown` as (host, port, the node's whole
/// answer), `subplans` (plan nodes) before the job.
pub fn custom_scan(
    task_count: usize,
    shown: &[(String, u16, Value)],
    subplans: Vec<Value>,
    dbname: &str,
    all: bool,
    costs: bool,
    rows: u64,
) -> Value {
    let width = shown
        .first()
        .and_then(|(_, _, answer)| answer.get(0)?.get("Plan")?.get("Plan Width")?.as_u64())
        .unwrap_or(0);
    let mut m = node_head(
        "Custom Scan",
        &[(
            "Custom Plan Provider",
            Value::String("Citus Adaptive".into()),
        )],
    );
    add_costs(&mut m, costs, rows, width);
    let mut job = Map::new();
    job.insert("Task Count".into(), number(&task_count.to_string()));
    let tasks_shown = if all || task_count <= 1 {
        "All".to_string()
    } else {
        format!("One of {task_count}")
    };
    job.insert("Tasks Shown".into(), Value::String(tasks_shown));
    let tasks = shown
        .iter()
        .map(|(host, port, answer)| {
            let mut t = Map::new();
            t.insert(
                "Node".into(),
                Value::String(format!("host={host} port={port} dbname={dbname}")),
            );
            // As Citus: the node's answer (an array) inside an array.
            t.insert("Remote Plan".into(), Value::Array(vec![answer.clone()]));
            Value::Object(t)
        })
        .collect();
    job.insert("Tasks".into(), Value::Array(tasks));
    let mut query = Map::new();
    if !subplans.is_empty() {
        query.insert("Subplans".into(), subplan_list(subplans));
    }
    query.insert("Job".into(), Value::Object(job));
    m.insert("Distributed Query".into(), Value::Object(query));
    Value::Object(m)
}

fn subplan_list(subplans: Vec<Value>) -> Value {
    Value::Array(
        subplans
            .into_iter()
            .map(|node| {
                let mut s = Map::new();
                s.insert("Plan".into(), plan_node(node));
                Value::Object(s)
            })
            .collect(),
    )
}

/// `node` as the child of an `Aggregate` (plain) or `Limit` node done by pgshard.
pub fn under(name: &str, costs: bool, node: Value) -> Value {
    let extra: Vec<(&str, Value)> = if name == "Aggregate" {
        vec![
            ("Strategy", Value::String("Plain".into())),
            ("Partial Mode", Value::String("Simple".into())),
        ]
    } else {
        Vec::new()
    };
    let mut m = node_head(name, &extra);
    add_costs(&mut m, costs, 0, 0);
    with_child(m, plan_node(node))
}

/// The coordinator node's combine plan (its whole answer) with its scan of the
/// partials table replaced by `scan`.
pub fn splice_scan(coordinator: Value, scan: Value) -> Value {
    let mut root = plan_node(coordinator);
    let mut scan = Some(scan);
    if is_partials_scan(&root) {
        return scan.take().unwrap_or(Value::Null);
    }
    replace_partials_scan(&mut root, &mut scan);
    if let Some(scan) = scan {
        // No scan of the partials table found: the Custom Scan alone.
        return scan;
    }
    root
}

fn is_partials_scan(node: &Value) -> bool {
    node.get("Relation Name")
        .and_then(Value::as_str)
        .is_some_and(|r| {
            let table = crate::planner::aggregate::PARTIALS_TABLE;
            r == table.rsplit('.').next().unwrap_or(table)
        })
}

fn replace_partials_scan(node: &mut Value, scan: &mut Option<Value>) {
    let Some(Value::Array(children)) = node.get_mut("Plans") else {
        return;
    };
    for child in children.iter_mut() {
        if scan.is_none() {
            return;
        }
        if is_partials_scan(child) {
            *child = as_child(scan.take().unwrap_or(Value::Null));
            return;
        }
        replace_partials_scan(child, scan);
    }
}

/// `subplans` put into the first Custom Scan of `node`, before its job.
pub fn with_subplans(mut node: Value, subplans: Vec<Value>) -> Value {
    if subplans.is_empty() {
        return node;
    }
    let mut subplans = Some(subplans);
    attach(&mut node, &mut subplans);
    node
}

fn attach(node: &mut Value, subplans: &mut Option<Vec<Value>>) {
    if subplans.is_none() {
        return;
    }
    if let Some(Value::Object(query)) = node.get_mut("Distributed Query") {
        let mut out = Map::new();
        out.insert(
            "Subplans".into(),
            subplan_list(subplans.take().unwrap_or_default()),
        );
        for (k, v) in std::mem::take(query) {
            out.insert(k, v);
        }
        *query = out;
        return;
    }
    if let Some(Value::Array(children)) = node.get_mut("Plans") {
        for child in children.iter_mut() {
            attach(child, subplans);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_scan_keeps_citus_keys_and_order() {
        let answer: Value = serde_json::from_str(
            r#"[{"Plan": {"Node Type": "Seq Scan", "Parallel Aware": false, "Async Capable": false, "Relation Name": "t_102008", "Alias": "t", "Startup Cost": 0.00, "Total Cost": 1.00, "Plan Rows": 10, "Plan Width": 8}}]"#,
        )
        .unwrap();
        let scan = custom_scan(
            4,
            &[("h".into(), 5432, answer)],
            Vec::new(),
            "db",
            false,
            true,
            100,
        );
        let keys: Vec<&String> = scan.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "Node Type",
                "Custom Plan Provider",
                "Parallel Aware",
                "Async Capable",
                "Startup Cost",
                "Total Cost",
                "Plan Rows",
                "Plan Width",
                "Distributed Query"
            ]
        );
        assert_eq!(scan["Plan Width"].to_string(), "8");
        assert_eq!(scan["Startup Cost"].to_string(), "0.00");
        let job = &scan["Distributed Query"]["Job"];
        assert_eq!(job["Tasks Shown"], "One of 4");
        assert_eq!(job["Tasks"][0]["Node"], "host=h port=5432 dbname=db");
        assert_eq!(
            job["Tasks"][0]["Remote Plan"][0][0]["Plan"]["Relation Name"],
            "t_102008"
        );

        let coordinator: Value = serde_json::from_str(
            r#"[{"Plan": {"Node Type": "Aggregate", "Strategy": "Hashed", "Partial Mode": "Simple", "Parallel Aware": false, "Async Capable": false, "Plans": [{"Node Type": "Seq Scan", "Parent Relationship": "Outer", "Parallel Aware": false, "Async Capable": false, "Relation Name": "pgs_partials", "Alias": "t"}]}}]"#,
        )
        .unwrap();
        let spliced = splice_scan(coordinator, scan.clone());
        let child = &spliced["Plans"][0];
        assert_eq!(child["Node Type"], "Custom Scan");
        let keys: Vec<&String> = child.as_object().unwrap().keys().take(3).collect();
        assert_eq!(
            keys,
            ["Node Type", "Parent Relationship", "Custom Plan Provider"]
        );

        let with = with_subplans(spliced, vec![scan]);
        let query = with["Plans"][0]["Distributed Query"].as_object().unwrap();
        let keys: Vec<&String> = query.keys().collect();
        assert_eq!(keys, ["Subplans", "Job"]);
        assert_eq!(query["Subplans"][0]["Plan"]["Node Type"], "Custom Scan");

        let agg = under("Aggregate", false, with);
        let keys: Vec<&String> = agg["Plans"][0]
            .as_object()
            .unwrap()
            .keys()
            .take(4)
            .collect();
        assert_eq!(
            keys,
            [
                "Node Type",
                "Strategy",
                "Partial Mode",
                "Parent Relationship"
            ]
        );
        assert_eq!(agg["Strategy"], "Plain");
    }
}
