//! The TEXT layout of EXPLAIN in Citus's shape: the `Custom Scan (Citus Adaptive)`
//! block with its tasks and subplans, the wrappers pgshard's own combine adds, and the
//! coordinator node's combine plan with its scan of the partials table replaced by the
//! Custom Scan. Pure functions over lines; the structured formats live in `tree.rs`.

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

/// `subplans` put under the first Custom Scan of `block`, before its task count, each
/// as `->  Distributed Subplan <plan_id>_<n>` with its plan as a child (Citus's layout).
pub fn with_subplans(block: Vec<String>, subplans: &[Vec<String>], plan_id: u64) -> Vec<String> {
    if subplans.is_empty() {
        return block;
    }
    let Some(at) = block
        .iter()
        .position(|l| l.contains("Custom Scan (Citus Adaptive)"))
    else {
        return block;
    };
    let line = &block[at];
    let spaces = line.len() - line.trim_start().len();
    // The column where the node's own name starts (after `->  ` for a child).
    let column = if line.trim_start().starts_with("->  ") {
        spaces + 4
    } else {
        spaces
    };
    let mut out: Vec<String> = block[..=at].to_vec();
    for (n, sub) in subplans.iter().enumerate() {
        out.push(format!(
            "{}->  Distributed Subplan {plan_id}_{}",
            " ".repeat(column + 2),
            n + 1
        ));
        out.extend(indent_child(sub, column + 6));
    }
    out.extend(block[at + 1..].iter().cloned());
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

    #[test]
    fn subplans_go_under_the_first_custom_scan() {
        let outer = vec![
            "Aggregate".to_string(),
            "  ->  Custom Scan (Citus Adaptive)".to_string(),
            "        Task Count: 1".to_string(),
        ];
        let sub = vec![
            "Custom Scan (Citus Adaptive)".to_string(),
            "  Task Count: 4".to_string(),
        ];
        assert_eq!(
            with_subplans(outer, &[sub], 1),
            vec![
                "Aggregate",
                "  ->  Custom Scan (Citus Adaptive)",
                "        ->  Distributed Subplan 1_1",
                "              ->  Custom Scan (Citus Adaptive)",
                "                    Task Count: 4",
                "        Task Count: 1",
            ]
        );
    }
}
