//! The generated query shapes' tables, all of the same four columns `(k int, id int, v int,
//! t text)` with `(k, id)` unique, so that any generated join, set operation or write is
//! well-typed and deterministic: two distributed tables co-located by `k` (`d1`, `d2`), one
//! distributed by `id` (`d3`, joined off its distribution column), a reference table (`r`)
//! and a local table (`l`) on the coordinator node, read by every lane; and per lane a
//! distributed (`wd<lane>`), reference (`wr<lane>`) and local (`wl<lane>`) table that only
//! that lane writes and reads, so that writes never race the other lanes' reads.
//! `v` and `t` hold NULLs (NOT IN and set operations over NULLs).
//!
//! The join categories (`joins.rs`) read four more tables (`JOIN_TABLES`, loaded after the
//! others so that their rows stay as they were): `j1`, distributed by `k` in a
//! co-location group of its own, `j2`, distributed by a `bigint` `k` (another group by
//! type), a second reference table `r2` and a second local table `l2`. Their `k` spread
//! wider (`-3..=14`), so joins on `k` find keys on one side only.

use super::common::rng::Rng;

pub const SCHEMA: &str = "qs";

/// How a table is spread.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Distributed(&'static str),
    Reference,
    Local,
}

/// The tables every lane reads.
pub const SHARED: &[(&str, Kind)] = &[
    ("d1", Kind::Distributed("k")),
    ("d2", Kind::Distributed("k")),
    ("d3", Kind::Distributed("id")),
    ("r", Kind::Reference),
    ("l", Kind::Local),
];

/// A lane's own tables (name prefixes; the lane's number follows).
pub const PER_LANE: &[(&str, Kind)] = &[
    ("wd", Kind::Distributed("k")),
    ("wr", Kind::Reference),
    ("wl", Kind::Local),
];

/// Every table of the schema with its kind, for `lanes` lanes.
pub fn tables(lanes: usize) -> Vec<(String, Kind)> {
    let mut all: Vec<(String, Kind)> = SHARED.iter().map(|(n, k)| (n.to_string(), *k)).collect();
    for lane in 0..lanes {
        all.extend(PER_LANE.iter().map(|(n, k)| (format!("{n}{lane}"), *k)));
    }
    all
}

/// A table of the join categories: name, kind, the type of `k`, and its
/// `create_distributed_table` co-location argument.
pub struct JoinTable {
    pub name: &'static str,
    pub kind: Kind,
    pub key_type: &'static str,
    pub colocate_with: &'static str,
}

pub const JOIN_TABLES: &[JoinTable] = &[
    JoinTable {
        name: "j1",
        kind: Kind::Distributed("k"),
        key_type: "int",
        colocate_with: "none",
    },
    JoinTable {
        name: "j2",
        kind: Kind::Distributed("k"),
        key_type: "bigint",
        colocate_with: "default",
    },
    JoinTable {
        name: "r2",
        kind: Kind::Reference,
        key_type: "int",
        colocate_with: "default",
    },
    JoinTable {
        name: "l2",
        kind: Kind::Local,
        key_type: "int",
        colocate_with: "default",
    },
];

const TEXTS: &[&str] = &["'a'", "'b'", "'B'", "'ab'", "''", "'zz'"];

/// A SQL literal list of one row `(k, id, v, t)`.
fn row(rng: &mut Rng, id: i64) -> String {
    row_with_keys(rng, id, 0, 11)
}

fn row_with_keys(rng: &mut Rng, id: i64, lo: i64, hi: i64) -> String {
    let k = rng.range(lo, hi);
    let v = if rng.chance(0.2) {
        "NULL".to_string()
    } else {
        rng.range(0, 20).to_string()
    };
    let t = if rng.chance(0.2) {
        "NULL"
    } else {
        rng.pick(TEXTS)
    };
    format!("({k}, {id}, {v}, {t})")
}

/// The statements that create and fill the schema, for pgshard (`distributed`: with the
/// Citus calls) or the plain PostgreSQL; the same rows on both sides.
pub fn load_steps(seed: u64, lanes: usize, distributed: bool) -> Vec<String> {
    let mut steps = vec![format!("create schema {SCHEMA}")];
    let mut rng = Rng::new(seed);
    for (name, kind) in tables(lanes) {
        let qualified = format!("{SCHEMA}.{name}");
        steps.push(format!(
            "create table {qualified} (k int not null, id int not null, v int, t text, \
             primary key (k, id))"
        ));
        if distributed {
            match kind {
                Kind::Distributed(col) => steps.push(format!(
                    "select create_distributed_table('{qualified}', '{col}')"
                )),
                Kind::Reference => {
                    steps.push(format!("select create_reference_table('{qualified}')"))
                }
                Kind::Local => {}
            }
        }
        let n = match kind {
            Kind::Distributed(_) => 60,
            _ => 16,
        };
        let rows: Vec<String> = (1..=n).map(|id| row(&mut rng, id)).collect();
        steps.push(format!(
            "insert into {qualified} values {}",
            rows.join(", ")
        ));
    }
    for j in JOIN_TABLES {
        let qualified = format!("{SCHEMA}.{}", j.name);
        steps.push(format!(
            "create table {qualified} (k {} not null, id int not null, v int, t text, \
             primary key (k, id))",
            j.key_type
        ));
        if distributed {
            match j.kind {
                Kind::Distributed(col) => steps.push(format!(
                    "select create_distributed_table('{qualified}', '{col}', colocate_with => '{}')",
                    j.colocate_with
                )),
                Kind::Reference => {
                    steps.push(format!("select create_reference_table('{qualified}')"))
                }
                Kind::Local => {}
            }
        }
        let n = match j.kind {
            Kind::Distributed(_) => 40,
            _ => 12,
        };
        let rows: Vec<String> = (1..=n)
            .map(|id| row_with_keys(&mut rng, id, -3, 14))
            .collect();
        steps.push(format!(
            "insert into {qualified} values {}",
            rows.join(", ")
        ));
    }
    steps
}
