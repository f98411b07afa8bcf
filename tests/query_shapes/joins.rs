//! Generated joins (issue 20) over the tables of `schema.rs`: 2 to 4 table references drawn
//! from distributed tables (co-located `d1`, `d2`, `d3` by `id`; `j1` in a group of its own,
//! `j2` by a `bigint` key), reference tables (`r`, `r2`) and local tables (`l`, `l2`),
//! joined on their distribution columns or on other columns (equalities, some
//! non-equalities, cross joins), INNER / LEFT / RIGHT / FULL, comma joins, `USING (k)`,
//! self-joins under aliases; with GROUP BY / HAVING / aggregates of every kind, DISTINCT,
//! windows, ORDER BY and LIMIT / OFFSET above them; joins inside subqueries, CTEs and
//! LATERAL, and correlated EXISTS / IN / scalar subqueries across a join.
//!
//! Every statement is deterministic: an ORDER BY lists every output column (rows it leaves
//! tied are equal, so they are compared in order, LIMIT / OFFSET only under it), ordered
//! aggregates order by their own argument, window frames are the default (peers included)
//! and only rank-like functions order. FULL joins have equalities only (PostgreSQL's rule).

use super::common::rng::Rng;
use super::generate::{predicate, tenant, Stmt};
use super::schema::SCHEMA;

/// The join categories (`generate.rs` runs them next to the shapes of issue 19).
pub const JOIN_CATEGORIES: &[&str] = &[
    "join_colocated",
    "join_colocated_outer",
    "join_reference",
    "join_local",
    "join_non_colocated",
    "join_nested",
];

/// How a table is spread, as far as joins care.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Spread {
    Hash { key: &'static str, group: u8 },
    Reference,
    Local,
}

#[derive(Clone, Copy)]
struct Table {
    name: &'static str,
    spread: Spread,
}

const fn hash(name: &'static str, key: &'static str, group: u8) -> Table {
    Table {
        name,
        spread: Spread::Hash { key, group },
    }
}

const D1: Table = hash("d1", "k", 1);
const D2: Table = hash("d2", "k", 1);
const D3: Table = hash("d3", "id", 1);
const J1: Table = hash("j1", "k", 2);
const J2: Table = hash("j2", "k", 3);
const R: Table = Table {
    name: "r",
    spread: Spread::Reference,
};
const R2: Table = Table {
    name: "r2",
    spread: Spread::Reference,
};
const L: Table = Table {
    name: "l",
    spread: Spread::Local,
};
const L2: Table = Table {
    name: "l2",
    spread: Spread::Local,
};

/// A table reference of a join, under its alias.
struct Ref {
    table: Table,
    alias: String,
}

impl Ref {
    fn c(&self, col: &str) -> String {
        format!("{}.{col}", self.alias)
    }

    fn key(&self) -> Option<&'static str> {
        match self.table.spread {
            Spread::Hash { key, .. } => Some(key),
            _ => None,
        }
    }

    fn group(&self) -> Option<u8> {
        match self.table.spread {
            Spread::Hash { group, .. } => Some(group),
            _ => None,
        }
    }

    fn small(&self) -> bool {
        self.key().is_none()
    }

    fn sql(&self) -> String {
        format!("{SCHEMA}.{} {}", self.table.name, self.alias)
    }
}

const ALIASES: &[&str] = &["a", "b", "c", "e"];

/// 2 to 4 references of tables drawn from `pool` (repeats are self-joins).
fn refs(rng: &mut Rng, pool: &[Table]) -> Vec<Ref> {
    let n = match rng.below(20) {
        0..=9 => 2,
        10..=16 => 3,
        _ => 4,
    };
    (0..n)
        .map(|i| Ref {
            table: *rng.pick(pool),
            alias: ALIASES[i].to_string(),
        })
        .collect()
}

/// How the tables of a join are linked.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Links {
    /// A hash table to an earlier one of its group by their distribution columns.
    Distribution,
    /// Any columns.
    Any,
}

/// A condition between two references besides the link.
fn extra(rng: &mut Rng, e: &Ref, n: &Ref) -> String {
    match rng.below(5) {
        0 => format!("{} < {}", e.c("v"), n.c("v")),
        1 => format!("{} = {}", e.c("t"), n.c("t")),
        2 => format!("{} <> {}", e.c("id"), n.c("id")),
        3 => format!("{} is not null", n.c("v")),
        _ => format!("{} + {} > 10", e.c("v"), n.c("v")),
    }
}

/// The condition joining `n` to the references before it; `equi`: equalities only (a
/// FULL join).
fn link(rng: &mut Rng, n: &Ref, earlier: &[Ref], links: Links, equi: bool) -> String {
    if links == Links::Distribution {
        if let Some(nk) = n.key() {
            let same: Vec<&Ref> = earlier.iter().filter(|e| e.group() == n.group()).collect();
            if !same.is_empty() {
                let e = same[rng.below(same.len())];
                let on = format!("{} = {}", e.c(e.key().unwrap()), n.c(nk));
                return match rng.chance(0.3) {
                    true if equi => format!("{on} and {} = {}", e.c("v"), n.c("v")),
                    true => format!("{on} and {}", extra(rng, e, n)),
                    false => on,
                };
            }
        }
    }
    let e = &earlier[rng.below(earlier.len())];
    let int_col = |rng: &mut Rng| *rng.pick(&["k", "id", "v"]);
    let choice = if equi { rng.below(6) } else { rng.below(10) };
    match choice {
        0..=2 => {
            let col = *rng.pick(&["k", "id", "v", "t", "k"]);
            format!("{} = {}", e.c(col), n.c(col))
        }
        3 | 4 => format!("{} = {}", e.c(int_col(rng)), n.c(int_col(rng))),
        5 => format!("{} = {} + 1", n.c("k"), e.c("k")),
        6 => format!("{} = {} and {}", e.c("k"), n.c("k"), extra(rng, e, n)),
        7 => format!(
            "{} < {} and {} = {}",
            e.c("v"),
            n.c("v"),
            e.c("t"),
            n.c("t")
        ),
        8 => format!("{} between {} and {} + 1", n.c("k"), e.c("k"), e.c("k")),
        _ => format!(
            "({} = {} or {} = {})",
            e.c("v"),
            n.c("v"),
            e.c("k"),
            n.c("id")
        ),
    }
}

/// A FROM clause over `refs`, and the conditions it leaves to WHERE (comma joins).
/// `outer`: the chance of each join being LEFT / RIGHT / FULL.
fn from_clause(rng: &mut Rng, refs: &[Ref], links: Links, outer: f64) -> (String, Vec<String>) {
    let comma = rng.chance(0.25);
    let mut sql = refs[0].sql();
    let mut conds = Vec::new();
    // The left side has one `k` (every join so far was `USING (k)`).
    let mut one_k = true;
    for i in 1..refs.len() {
        let (n, earlier) = (&refs[i], &refs[..i]);
        if comma {
            sql += &format!(", {}", n.sql());
            if !(n.small() && rng.chance(0.15)) {
                conds.push(link(rng, n, earlier, links, false));
            }
            continue;
        }
        let kind = if rng.chance(outer) {
            *rng.pick(&["left join", "right join", "full join", "left outer join"])
        } else {
            *rng.pick(&["join", "inner join"])
        };
        if n.small() && (kind == "join" || kind == "inner join") && rng.chance(0.1) {
            sql += &format!(" cross join {}", n.sql());
            one_k = false;
            continue;
        }
        let using_links = links == Links::Any
            || n.small()
            || (n.key() == Some("k")
                && earlier
                    .iter()
                    .any(|e| e.key() == Some("k") && e.group() == n.group()));
        if one_k && using_links && rng.chance(0.2) {
            sql += &format!(" {kind} {} using (k)", n.sql());
            continue;
        }
        one_k = false;
        let on = link(rng, n, earlier, links, kind.starts_with("full"));
        sql += &format!(" {kind} {} on {on}", n.sql());
    }
    (sql, conds)
}

/// A filter on alias `a`: in a tenant-scoped case its `k` fixed (so that the join
/// routes when it can), and maybe another condition.
fn filter(rng: &mut Rng, a: &str) -> String {
    match tenant() {
        Some(k) if rng.chance(0.5) => format!("{a}.k = {k} and {a}.v is not null"),
        Some(k) => format!("{a}.k = {k}"),
        None => predicate(rng, a),
    }
}

/// A column or an expression over the references.
fn expr(rng: &mut Rng, refs: &[Ref]) -> String {
    let x = &refs[rng.below(refs.len())];
    let y = &refs[rng.below(refs.len())];
    match rng.below(12) {
        0 => format!("coalesce({}, {})", x.c("v"), y.c("v")),
        1 => format!("{} + {}", x.c("v"), y.c("v")),
        2 => format!("{} || {}", x.c("t"), y.c("t")),
        3 => format!(
            "case when {} > {} then {} else {} end",
            x.c("v"),
            y.c("v"),
            x.c("t"),
            y.c("t")
        ),
        _ => x.c(rng.pick::<&str>(&["k", "id", "v", "t"])),
    }
}

fn exprs(rng: &mut Rng, refs: &[Ref], lo: usize, hi: usize) -> Vec<String> {
    let n = lo + rng.below(hi - lo + 1);
    (0..n).map(|_| expr(rng, refs)).collect()
}

/// An aggregate over the references.
fn aggregate(rng: &mut Rng, refs: &[Ref]) -> String {
    let x = &refs[rng.below(refs.len())];
    let y = &refs[rng.below(refs.len())];
    match rng.below(20) {
        0 | 1 => "count(*)".into(),
        2 => format!("count({})", x.c("v")),
        3 => format!("count(distinct {})", x.c("v")),
        4 => format!("count(distinct {})", x.c("t")),
        5 | 6 => format!("sum({})", x.c("v")),
        7 => format!("avg({})", x.c("v")),
        8 => format!("min({})", x.c("t")),
        9 => format!("max({})", x.c("v")),
        10 => format!("string_agg({}, ',' order by {})", x.c("t"), x.c("t")),
        11 => format!(
            "string_agg(distinct {}, '|' order by {})",
            x.c("t"),
            x.c("t")
        ),
        12 => format!("bool_and({} > {})", x.c("v"), y.c("v")),
        13 => format!("bool_or({} is null)", x.c("t")),
        14 => format!("array_agg(distinct {} order by {})", x.c("k"), x.c("k")),
        15 => format!("sum({}) filter (where {} is not null)", x.c("v"), y.c("v")),
        16 => format!("max({}) - min({})", x.c("v"), y.c("v")),
        17 => format!("stddev_pop({})", x.c("v")),
        18 => format!("bit_or({})", x.c("id")),
        _ => format!("count(*) filter (where {} = 'a')", x.c("t")),
    }
}

/// A window function over the references.
fn window(rng: &mut Rng, refs: &[Ref]) -> String {
    let x = &refs[rng.below(refs.len())];
    let p = expr(rng, refs);
    let o = expr(rng, refs);
    match rng.below(6) {
        0 => format!("rank() over (partition by {p} order by {o})"),
        1 => format!("dense_rank() over (order by {o} nulls first)"),
        2 => format!("sum({}) over (partition by {p})", x.c("v")),
        3 => "count(*) over ()".into(),
        4 => format!("max({}) over (partition by {p} order by {o})", x.c("t")),
        _ => format!("avg({}) over (partition by {p})", x.c("v")),
    }
}

/// `order by 1, 2, ...`: every output column, each in some direction.
fn order_all(rng: &mut Rng, columns: usize) -> String {
    let keys: Vec<String> = (1..=columns)
        .map(|i| {
            let dir = *rng.pick(&["", " desc", " nulls first", " desc nulls last"]);
            format!("{i}{dir}")
        })
        .collect();
    format!(" order by {}", keys.join(", "))
}

fn limit(rng: &mut Rng) -> String {
    let l = rng.range(1, 25);
    match rng.chance(0.4) {
        true => format!(" limit {l} offset {}", rng.range(0, 10)),
        false => format!(" limit {l}"),
    }
}

fn where_of(conds: &[String]) -> String {
    match conds.is_empty() {
        true => String::new(),
        false => format!(" where {}", conds.join(" and ")),
    }
}

/// A statement over a FROM clause: rows, DISTINCT, ORDER BY + LIMIT, aggregates with or
/// without GROUP BY / HAVING, windows (over rows or groups).
fn over_join(rng: &mut Rng, refs: &[Ref], from: &str, mut conds: Vec<String>) -> Stmt {
    // Rows of a join of 3 or 4 tables are many: filtered on the first table.
    let narrow = |rng: &mut Rng, conds: &mut Vec<String>| {
        if refs.len() > 2 || rng.chance(0.4) {
            conds.push(filter(rng, &refs[0].alias));
        }
    };
    let mut ordered = false;
    let sql = match rng.below(10) {
        // Rows, or distinct rows.
        0 | 1 => {
            narrow(rng, &mut conds);
            let cols = exprs(rng, refs, 1, 4);
            let distinct = if rng.chance(0.4) { "distinct " } else { "" };
            format!(
                "select {distinct}{} from {from}{}",
                cols.join(", "),
                where_of(&conds)
            )
        }
        // In a total order, with LIMIT / OFFSET.
        2 | 3 => {
            narrow(rng, &mut conds);
            let cols = exprs(rng, refs, 1, 4);
            let distinct = if rng.chance(0.3) { "distinct " } else { "" };
            ordered = true;
            let lim = if rng.chance(0.7) {
                limit(rng)
            } else {
                String::new()
            };
            format!(
                "select {distinct}{} from {from}{}{}{lim}",
                cols.join(", "),
                where_of(&conds),
                order_all(rng, cols.len())
            )
        }
        // Groups.
        4..=6 => {
            if rng.chance(0.3) {
                conds.push(filter(rng, &refs[0].alias));
            }
            let groups = exprs(rng, refs, 1, 2);
            let aggs: Vec<String> = (0..1 + rng.below(3))
                .map(|_| aggregate(rng, refs))
                .collect();
            let having = match rng.below(5) {
                0 => " having count(*) > 1".to_string(),
                1 => format!(" having {} is not null", aggregate(rng, refs)),
                2 => format!(" having sum({}) > 5", refs[0].c("v")),
                _ => String::new(),
            };
            let n = groups.len() + aggs.len();
            let tail = if rng.chance(0.4) {
                ordered = true;
                let lim = if rng.chance(0.6) {
                    limit(rng)
                } else {
                    String::new()
                };
                format!("{}{lim}", order_all(rng, n))
            } else {
                String::new()
            };
            format!(
                "select {}, {} from {from}{} group by {}{having}{tail}",
                groups.join(", "),
                aggs.join(", "),
                where_of(&conds),
                groups.join(", ")
            )
        }
        // Aggregates of the whole join.
        7 => {
            let aggs: Vec<String> = (0..1 + rng.below(4))
                .map(|_| aggregate(rng, refs))
                .collect();
            format!("select {} from {from}{}", aggs.join(", "), where_of(&conds))
        }
        // Windows over rows.
        8 => {
            narrow(rng, &mut conds);
            let mut cols = exprs(rng, refs, 1, 3);
            cols.push(window(rng, refs));
            let tail = if rng.chance(0.4) {
                ordered = true;
                format!("{}{}", order_all(rng, cols.len()), limit(rng))
            } else {
                String::new()
            };
            format!(
                "select {} from {from}{}{tail}",
                cols.join(", "),
                where_of(&conds)
            )
        }
        // Windows over groups.
        _ => {
            let g = expr(rng, refs);
            let agg = aggregate(rng, refs);
            let win = match rng.below(3) {
                0 => "rank() over (order by count(*) desc)".to_string(),
                1 => format!("sum(sum({})) over ()", refs[0].c("v")),
                _ => "count(*) over ()".to_string(),
            };
            format!(
                "select {g}, {agg}, {win} from {from}{} group by {g}",
                where_of(&conds)
            )
        }
    };
    let mut stmt = Stmt::read(sql);
    stmt.ordered = ordered;
    stmt
}

/// A join of `pool`'s tables linked as `links` says, with something above it.
fn join_of(rng: &mut Rng, pool: &[Table], links: Links, outer: f64) -> Stmt {
    let refs = refs(rng, pool);
    let (from, conds) = from_clause(rng, &refs, links, outer);
    over_join(rng, &refs, &from, conds)
}

/// Local tables with reference tables (and sometimes a distributed one): at least one
/// local table.
fn local_join(rng: &mut Rng) -> Stmt {
    let pool: &[Table] = match rng.below(4) {
        0 => &[R, L, D1],
        1 => &[L, L2, R2, D2],
        _ => &[R, R2, L, L2],
    };
    let mut refs = refs(rng, pool);
    if !refs.iter().any(|r| r.table.spread == Spread::Local) {
        let i = rng.below(refs.len());
        refs[i].table = *rng.pick(&[L, L2]);
    }
    let (from, conds) = from_clause(rng, &refs, Links::Any, 0.3);
    over_join(rng, &refs, &from, conds)
}

/// Joins inside subqueries, CTEs and LATERAL; correlated EXISTS / IN / scalar subqueries
/// across a join.
fn nested(rng: &mut Rng) -> Stmt {
    let pool: &[Table] = match rng.below(3) {
        0 => &[D1, D2, D3, R],
        1 => &[D1, J1, J2, R, L],
        _ => &[D1, D2, R, R2, L],
    };
    let links = if rng.chance(0.5) {
        Links::Distribution
    } else {
        Links::Any
    };
    let pair = |rng: &mut Rng| {
        let mut refs = refs(rng, pool);
        refs.truncate(2);
        let (from, conds) = from_clause(rng, &refs, links, 0.2);
        (refs, from, conds)
    };
    let outer_table = *rng.pick(&["d1", "d2", "r", "j1"]);
    let sql = match rng.below(8) {
        // A join in a subquery in FROM, grouped above.
        0 => {
            let (refs, from, mut conds) = pair(rng);
            if rng.chance(0.5) {
                conds.push(filter(rng, &refs[0].alias));
            }
            format!(
                "select s.k, count(*), sum(s.v), max(s.t) from (select {} as k, {} as v, {} as t \
                 from {from}{}) s group by s.k",
                refs[0].c("k"),
                refs[1].c("v"),
                expr(rng, &refs),
                where_of(&conds)
            )
        }
        // A join in a CTE, joined to a table.
        1 => {
            let (refs, from, conds) = pair(rng);
            let mat = *rng.pick(&["", "materialized "]);
            format!(
                "with j as {mat}(select {} as k, {} as id, {} as v from {from}{}) \
                 select x.k, count(*), min(j.v), count(distinct j.id) from {SCHEMA}.{outer_table} x \
                 join j on j.k = x.k group by x.k",
                refs[0].c("k"),
                refs[1].c("id"),
                refs[1].c("v"),
                where_of(&conds)
            )
        }
        // A correlated EXISTS across the join's two sides.
        2 => {
            let (refs, from, mut conds) = pair(rng);
            let not = if rng.chance(0.4) { "not " } else { "" };
            conds.push(format!(
                "{not}exists (select 1 from {SCHEMA}.{outer_table} z where z.k = {} and z.v = {})",
                refs[0].c("k"),
                refs[1].c("v")
            ));
            let cols = [refs[0].c("k"), refs[0].c("id"), refs[1].c("v")];
            format!("select {} from {from}{}", cols.join(", "), where_of(&conds))
        }
        // A correlated IN across the join.
        3 => {
            let (refs, from, mut conds) = pair(rng);
            conds.push(format!(
                "{} in (select z.v from {SCHEMA}.{outer_table} z where z.k = {})",
                refs[0].c("v"),
                refs[1].c("k")
            ));
            format!(
                "select {}, count(*) from {from}{} group by {}",
                refs[0].c("k"),
                where_of(&conds),
                refs[0].c("k")
            )
        }
        // A join inside an EXISTS or IN of a query on another table.
        4 => {
            let (refs, from, mut conds) = pair(rng);
            let correlated = rng.chance(0.6);
            if correlated {
                conds.push(format!("{} = x.k", refs[0].c("k")));
                format!(
                    "select x.k, x.id, x.t from {SCHEMA}.{outer_table} x where exists \
                     (select 1 from {from}{})",
                    where_of(&conds)
                )
            } else {
                format!(
                    "select x.k, count(*) from {SCHEMA}.{outer_table} x where x.v in \
                     (select {} from {from}{}) group by x.k",
                    refs[1].c("v"),
                    where_of(&conds)
                )
            }
        }
        // A join in a scalar subquery of the select list.
        5 => {
            let (refs, from, mut conds) = pair(rng);
            conds.push(format!("{} = x.k", refs[0].c("k")));
            format!(
                "select x.k, x.id, (select count(*) from {from}{}) from {SCHEMA}.{outer_table} x{}",
                where_of(&conds),
                if rng.chance(0.5) {
                    " where x.v > 5"
                } else {
                    ""
                }
            )
        }
        // Two grouped joins joined.
        6 => {
            let (r1, f1, c1) = pair(rng);
            let (r2, f2, c2) = pair(rng);
            let kind = *rng.pick(&["join", "left join", "full join"]);
            format!(
                "select s.k, s.n, u.n from (select {} as k, count(*) as n from {f1}{} group by 1) s \
                 {kind} (select {} as k, count(*) as n from {f2}{} group by 1) u on s.k = u.k",
                r1[0].c("k"),
                where_of(&c1),
                r2[0].c("k"),
                where_of(&c2)
            )
        }
        // LATERAL over a join.
        _ => {
            let (refs, from, conds) = pair(rng);
            format!(
                "select {}, {}, s.n, s.m from {from}, lateral (select count(*) as n, \
                 max(z.v) as m from {SCHEMA}.{outer_table} z where z.k = {} and z.id <> {}) s{}",
                refs[0].c("k"),
                refs[1].c("id"),
                refs[1].c("k"),
                refs[0].c("id"),
                where_of(&conds)
            )
        }
    };
    Stmt::read(sql)
}

/// The statements of a join category's case.
pub fn generate(category: &str, rng: &mut Rng) -> Vec<Stmt> {
    let stmt = match category {
        "join_colocated" => join_of(rng, &[D1, D2, D3, D1, R, R2], Links::Distribution, 0.0),
        "join_colocated_outer" => join_of(rng, &[D1, D2, D3, D2, R], Links::Distribution, 0.7),
        "join_reference" => join_of(rng, &[R, R2], Links::Any, 0.35),
        "join_local" => local_join(rng),
        "join_non_colocated" => join_of(rng, &[D1, D2, D3, J1, J2, R], Links::Any, 0.3),
        _ => nested(rng),
    };
    vec![stmt]
}
