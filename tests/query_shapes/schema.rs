//! The generated query shapes' tables, all of the same four columns `(k int, id int, v int,
//! t text)` with `(k, id)` unique, so that any generated join, set operation or write is
//! well-typed and deterministic: two distributed tables co-located by `k` (`d1`, `d2`), one
//! distributed by `id` (`d3`, joined off its distribution column), a reference table (`r`)
//! and a local table (`l`) on the coordinator node, read by every lane; and per lane a
//! distributed (`wd<lane>`), reference (`wr<lane>`) and local (`wl<lane>`) table that only
//! that lane writes and reads, so that writes never race the other lanes' reads.
//! `v` and `t` hold NULLs (NOT IN and set operations over NULLs).

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

const TEXTS: &[&str] = &["'a'", "'b'", "'B'", "'ab'", "''", "'zz'"];

/// A SQL literal list of one row `(k, id, v, t)`.
fn row(rng: &mut Rng, id: i64) -> String {
    let k = rng.range(0, 11);
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
    steps
}
