//! Generated checks in the manner of SQLancer's oracles, over the schema of `schema.rs`:
//!
//! - ternary logic partitioning (TLP): a query's rows are exactly the rows of the same
//!   query `WHERE p`, `WHERE NOT p` and `WHERE (p) IS NULL` together; for `count`, `sum`
//!   and grouped counts, the base's values are the partitions' values added up;
//! - non-optimizing reference engine construction (NoREC): `count(*) ... WHERE p` equals
//!   the number of rows for which `(p) IS TRUE` is true when `p` is evaluated per row in
//!   the select list, so a filter pushed to (or routed by) the shards is checked against
//!   an evaluation that scans every shard.
//!
//! Predicates mix comparisons with the values PostgreSQL rounds, pads or trims on the way
//! in, collations (explicit and the columns' own), enums and domains, NULLs, IN, BETWEEN
//! and boolean connectives; tables are named bare (resolved through one of several
//! search paths, set for the session or with `SET LOCAL` in a block) or schema-qualified.

use super::common::rng::Rng;
use super::schema::{column, COLUMNS, SCHEMAS, TABLES};

/// The search paths checks run under (on both sides).
pub const SEARCH_PATHS: &[&str] = &[
    "tlp_a, public",
    "tlp_b, public",
    "tlp_b, tlp_a",
    "\"$user\", tlp_a, tlp_b",
    "public",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Oracle {
    /// Rows of the base query = rows of the three partitions.
    TlpRows,
    /// `count(*)`, `count(c)` and `sum` of the base = those of the partitions added.
    TlpAggregate,
    /// Per-group counts of the base = those of the partitions added.
    TlpGroupCounts,
    /// `count(*) WHERE p` = rows with `(p) IS TRUE` evaluated in the select list.
    NoRec,
}

/// One generated check: queries run on both sides in order; `queries[0]` is the base.
pub struct Check {
    pub oracle: Oracle,
    pub search_path: &'static str,
    /// Run in a block with `SET LOCAL search_path` instead of a session `SET`.
    pub set_local: bool,
    pub queries: Vec<String>,
}

const COMPARISONS: &[&str] = &["=", "<>", "<", "<=", ">", ">="];

/// Columns the predicates favour: the distribution columns (equality there is routed).
const DISTRIBUTION_COLUMNS: &[&str] = &["n", "ts", "vc", "ch", "m", "id"];

/// Pairs of columns comparable with each other.
const COLUMN_PAIRS: &[(&str, &str)] = &[("id", "i"), ("n", "m"), ("tx", "tx"), ("vc", "vc")];

fn leaf(rng: &mut Rng) -> String {
    let c = if rng.chance(0.5) {
        column(*rng.pick(DISTRIBUTION_COLUMNS))
    } else {
        rng.pick(COLUMNS)
    };
    if c.name == "b" {
        return rng
            .pick(&["b", "not b", "b = true", "b is not true", "b is false"])
            .to_string();
    }
    let p = |rng: &mut Rng| rng.pick(c.probes).to_string();
    match rng.below(10) {
        0..=3 => format!("{} = {}", c.name, p(rng)),
        4 | 5 => format!("{} {} {}", c.name, rng.pick(COMPARISONS), p(rng)),
        6 => format!(
            "{} is {}null",
            c.name,
            if rng.chance(0.5) { "not " } else { "" }
        ),
        7 => {
            let mut items = vec![p(rng), p(rng)];
            if rng.chance(0.3) {
                items.push("NULL".into());
            }
            format!(
                "{} {}in ({})",
                c.name,
                if rng.chance(0.2) { "not " } else { "" },
                items.join(", ")
            )
        }
        8 => match c.name {
            "tx" | "tci" | "vc" => format!(
                "{} {} {} collate {}",
                c.name,
                rng.pick(COMPARISONS),
                p(rng),
                rng.pick(&["\"C\"", "\"en-x-icu\"", "\"POSIX\""])
            ),
            _ => format!("coalesce({}, {}) = {}", c.name, p(rng), p(rng)),
        },
        _ => {
            let (a, b) = *rng.pick(COLUMN_PAIRS);
            format!("{a} {} {b}", rng.pick(COMPARISONS))
        }
    }
}

/// A predicate of up to `depth` levels of AND / OR / NOT.
pub fn predicate(rng: &mut Rng, depth: usize) -> String {
    if depth == 0 || rng.chance(0.45) {
        return leaf(rng);
    }
    match rng.below(3) {
        0 => format!(
            "({} and {})",
            predicate(rng, depth - 1),
            predicate(rng, depth - 1)
        ),
        1 => format!(
            "({} or {})",
            predicate(rng, depth - 1),
            predicate(rng, depth - 1)
        ),
        _ => format!("not ({})", predicate(rng, depth - 1)),
    }
}

/// The table as the query names it: bare (search path) or schema-qualified.
fn table_reference(rng: &mut Rng) -> String {
    let t = rng.pick(TABLES).name;
    if rng.chance(0.3) {
        format!("{}.{t}", rng.pick(SCHEMAS))
    } else {
        t.to_string()
    }
}

fn select_list(rng: &mut Rng) -> String {
    if rng.chance(0.3) {
        return "*".into();
    }
    let n = 1 + rng.below(4);
    let mut cols: Vec<&str> = Vec::new();
    while cols.len() < n {
        let c = rng.pick(COLUMNS).name;
        if !cols.contains(&c) {
            cols.push(c);
        }
    }
    cols.join(", ")
}

/// The three TLP partitions of `p`, each ANDed with the optional `base` filter.
fn partitions(head: &str, base: &Option<String>, p: &str, tail: &str) -> Vec<String> {
    let with = |cond: String| match base {
        Some(b) => format!("{head} where {b} and {cond}{tail}"),
        None => format!("{head} where {cond}{tail}"),
    };
    vec![
        with(format!("({p})")),
        with(format!("not ({p})")),
        with(format!("(({p}) is null)")),
    ]
}

pub fn generate(seed: u64, index: usize) -> Check {
    let mut rng = Rng::new(seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let search_path = *rng.pick(SEARCH_PATHS);
    let set_local = rng.chance(0.25);
    let table = table_reference(&mut rng);
    let p = predicate(&mut rng, 2);
    // A routed base: the distribution column (of most tables) fixed.
    let base = if rng.chance(0.3) {
        let c = column(*rng.pick(DISTRIBUTION_COLUMNS));
        Some(format!("{} = {}", c.name, rng.pick(c.probes)))
    } else {
        None
    };
    let base_where = |q: String| match &base {
        Some(b) => format!("{q} where {b}"),
        None => q,
    };
    let oracle = match rng.below(8) {
        0..=2 => Oracle::TlpRows,
        3 | 4 => Oracle::TlpAggregate,
        5 => Oracle::TlpGroupCounts,
        _ => Oracle::NoRec,
    };
    let queries = match oracle {
        Oracle::TlpRows => {
            let head = format!("select {} from {table}", select_list(&mut rng));
            let mut q = vec![base_where(head.clone())];
            q.extend(partitions(&head, &base, &p, ""));
            q
        }
        Oracle::TlpAggregate => {
            let counted = rng.pick(COLUMNS).name;
            let summed = rng.pick(&["n", "m", "i", "id"]);
            let ordered = COLUMNS.iter().filter(|c| c.ordered).collect::<Vec<_>>();
            let extreme = rng.pick(&ordered).name;
            let head = format!(
                "select count(*), count({counted}), sum({summed}), min({extreme}), max({extreme}) from {table}"
            );
            let mut q = vec![base_where(head.clone())];
            q.extend(partitions(&head, &base, &p, ""));
            q
        }
        Oracle::TlpGroupCounts => {
            let key = rng.pick(COLUMNS).name;
            let head = format!("select {key}, count(*) from {table}");
            let tail = format!(" group by {key}");
            let mut q = vec![base_where(head.clone()) + &tail];
            q.extend(partitions(&head, &base, &p, &tail));
            q
        }
        Oracle::NoRec => {
            let optimized = match &base {
                Some(b) => format!("select count(*) from {table} where {b} and ({p})"),
                None => format!("select count(*) from {table} where {p}"),
            };
            let unoptimized = base_where(format!("select (({p}) is true) from {table}"));
            vec![optimized, unoptimized]
        }
    };
    Check {
        oracle,
        search_path,
        set_local,
        queries,
    }
}
