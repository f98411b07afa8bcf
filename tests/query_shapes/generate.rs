//! Generated statements of the shapes issue 19 is about, over the tables of `schema.rs`
//! (distributed, reference and local, mixed at random): CTEs (referenced once or twice,
//! MATERIALIZED or not, chained, WITH RECURSIVE), subqueries in FROM, in WHERE (IN, NOT IN,
//! EXISTS, NOT EXISTS, scalar), in the select list and in HAVING, correlated on the
//! distribution column `k` or on another column, and set operations (UNION, INTERSECT,
//! EXCEPT, with and without ALL). The writing shapes are in `writes.rs`.
//!
//! A third of the cases are tenant-scoped (`TENANT`): co-located tables filtered on one `k`.
//!
//! Every statement is deterministic: LIMIT only under an ORDER BY on the unique `(k, id)`,
//! scalar subqueries always aggregate, joins of writes match on the unique `(k, id)`.

use super::common::rng::Rng;
use super::joins::{self, JOIN_CATEGORIES};
use super::schema::SCHEMA;
use super::writes;
use std::cell::Cell;

thread_local! {
    /// The tenant (`k`) of a tenant-scoped case, as applications write them: its tables
    /// are the co-located ones (and the reference table) and every filter fixes `k`, so
    /// that much of it routes to one shard.
    static TENANT: Cell<Option<i64>> = const { Cell::new(None) };
}

/// The tenant of the case being generated, if it is tenant-scoped.
pub fn tenant() -> Option<i64> {
    TENANT.with(Cell::get)
}

/// One statement of a case.
pub struct Stmt {
    pub sql: String,
    /// Its ORDER BY fixes the order of all its rows (compared in order).
    pub ordered: bool,
    /// A write or DDL: run on pgshard first, its tables' contents compared after.
    pub write: bool,
    /// Tables whose contents are compared after the statement.
    pub check: Vec<String>,
}

impl Stmt {
    pub fn read(sql: String) -> Stmt {
        Stmt {
            sql,
            ordered: false,
            write: false,
            check: Vec::new(),
        }
    }

    pub fn write(sql: String, check: Vec<String>) -> Stmt {
        Stmt {
            sql,
            ordered: false,
            write: true,
            check,
        }
    }
}

/// One generated case: its statements run in order on both sides, then `cleanup` (on both
/// sides, errors ignored).
pub struct Case {
    pub category: &'static str,
    pub statements: Vec<Stmt>,
    pub cleanup: Vec<String>,
}

/// The categories of issue 19's shapes, each generated equally often.
pub const CATEGORIES: &[&str] = &[
    "cte",
    "cte_recursive",
    "cte_modifying",
    "subquery_from",
    "in_not_in",
    "exists",
    "scalar_where",
    "subquery_select_list",
    "subquery_having",
    "set_operation",
    "update_from",
    "delete_using",
    "insert_select_on_conflict",
    "create_table_as",
    "view",
];

/// A table to read: distributed more often than reference or local ones; the lane's own
/// tables among them.
pub fn table(rng: &mut Rng, lane: usize) -> String {
    if tenant().is_some() {
        let name = match rng.below(5) {
            0 | 1 => "d1".to_string(),
            2 => "d2".to_string(),
            3 => format!("wd{lane}"),
            _ => "r".to_string(),
        };
        return format!("{SCHEMA}.{name}");
    }
    let name = match rng.below(10) {
        0..=2 => "d1".to_string(),
        3 | 4 => "d2".to_string(),
        5 => "d3".to_string(),
        6 => "r".to_string(),
        7 => "l".to_string(),
        8 => format!("wd{lane}"),
        _ => format!("{}{lane}", rng.pick(&["wr", "wl"])),
    };
    format!("{SCHEMA}.{name}")
}

/// A filter on alias `a`'s columns.
pub fn predicate(rng: &mut Rng, a: &str) -> String {
    let one = |rng: &mut Rng| match rng.below(8) {
        0 | 1 => format!("{a}.k = {}", rng.range(0, 11)),
        2 => format!("{a}.v > {}", rng.range(0, 19)),
        3 => format!("{a}.v <= {}", rng.range(0, 19)),
        4 => format!(
            "{a}.{} is {}null",
            rng.pick(&["v", "t"]),
            if rng.chance(0.5) { "not " } else { "" }
        ),
        5 => format!("{a}.k in ({}, {})", rng.range(0, 11), rng.range(0, 11)),
        6 => format!("{a}.t = {}", rng.pick(&["'a'", "'b'", "'ab'", "''"])),
        _ => {
            let lo = rng.range(1, 50);
            format!("{a}.id between {lo} and {}", lo + rng.range(0, 20))
        }
    };
    let p = match rng.below(5) {
        0 => format!("({} or {})", one(rng), one(rng)),
        1 => format!("{} and {}", one(rng), one(rng)),
        _ => one(rng),
    };
    match tenant() {
        Some(k) => format!("{a}.k = {k} and {p}"),
        None => p,
    }
}

/// `where P` or nothing.
fn maybe_where(rng: &mut Rng, a: &str) -> String {
    if tenant().is_some() || rng.chance(0.6) {
        format!(" where {}", predicate(rng, a))
    } else {
        String::new()
    }
}

/// A final projection over alias `a` that aggregates or lists rows.
fn outer_select(rng: &mut Rng, a: &str) -> String {
    match rng.below(4) {
        0 => format!("select count(*), sum({a}.v), max({a}.t) from"),
        1 => format!("select {a}.k, count(*), min({a}.v) from"),
        _ => format!("select {a}.k, {a}.id, {a}.v, {a}.t from"),
    }
}

fn group_by_if_needed(select: &str, a: &str) -> String {
    if select.contains("min(") {
        format!(" group by {a}.k")
    } else {
        String::new()
    }
}

/// A column correlating an inner alias `b` with the outer `a`: the distribution column
/// (pushed down with it) or another.
fn correlation(rng: &mut Rng, b: &str, a: &str) -> String {
    match rng.below(4) {
        0 | 1 => format!("{b}.k = {a}.k"),
        2 => format!("{b}.v = {a}.v"),
        _ => format!("{b}.k = {a}.k and {b}.id <> {a}.id"),
    }
}

fn cte(rng: &mut Rng, lane: usize) -> Vec<Stmt> {
    let (t1, t2) = (table(rng, lane), table(rng, lane));
    let mat = *rng.pick(&["", "materialized ", "not materialized "]);
    let inner = format!("select k, id, v, t from {t1} x{}", maybe_where(rng, "x"));
    let head = format!("with c as {mat}({inner})");
    let sql = match rng.below(5) {
        0 => {
            let sel = outer_select(rng, "c");
            let gb = group_by_if_needed(&sel, "c");
            format!("{head} {sel} c{}{gb}", maybe_where(rng, "c"))
        }
        // Referenced twice.
        1 => format!("{head} select c1.k, count(*) from c c1 join c c2 on c1.k = c2.k and c1.id <> c2.id group by c1.k"),
        // Joined with a table, on the distribution column or not.
        2 => {
            let on = if rng.chance(0.6) { "y.k = c.k" } else { "y.v = c.v" };
            format!("{head} select count(*), sum(y.v) from c join {t2} y on {on}{}", maybe_where(rng, "y"))
        }
        // Chained.
        3 => format!(
            "{head}, d as (select k, count(*) as n from c group by k) \
             select d.k, d.n, (select count(*) from c where c.k = d.k) from d"
        ),
        // Used in a WHERE of the outer query.
        _ => format!(
            "{head} select y.k, y.id, y.v from {t2} y where y.k in (select k from c){}",
            if rng.chance(0.5) { " and y.v is not null" } else { "" }
        ),
    };
    vec![Stmt::read(sql)]
}

fn cte_recursive(rng: &mut Rng, lane: usize) -> Vec<Stmt> {
    let t = table(rng, lane);
    let depth = rng.range(2, 8);
    let sql = match rng.below(3) {
        // A series joined to a table.
        0 => format!(
            "with recursive s(n) as (select 0 union all select n + 1 from s where n < {depth}) \
             select s.n, count(x.id), sum(x.v) from s left join {t} x on x.k = s.n group by s.n"
        ),
        // Walking a table by ids.
        1 => format!(
            "with recursive chain as (select k, id, v from {t} where id = {} \
             union select x.k, x.id, x.v from {t} x join chain c on x.id = c.id + 1 where x.id < {}) \
             select * from chain",
            rng.range(1, 20),
            rng.range(10, 40)
        ),
        // A recursive CTE in a WHERE over a table.
        _ => format!(
            "with recursive ks(k) as (select {} union select k + 2 from ks where k < 10) \
             select x.k, x.id, x.t from {t} x where x.k in (select k from ks){}",
            rng.range(0, 3),
            if rng.chance(0.5) { " and x.v > 3" } else { "" }
        ),
    };
    vec![Stmt::read(sql)]
}

fn subquery_from(rng: &mut Rng, lane: usize) -> Vec<Stmt> {
    let (t1, t2) = (table(rng, lane), table(rng, lane));
    let sql = match rng.below(4) {
        0 => format!(
            "select s.k, count(*), sum(s.v) from (select k, v from {t1} x{}) s group by s.k",
            maybe_where(rng, "x")
        ),
        // A LIMIT inside (under a total order).
        1 => format!(
            "select count(*), max(s.v) from (select * from {t1} x order by k, id limit {}) s",
            rng.range(1, 30)
        ),
        // An aggregate inside.
        2 => format!(
            "select max(s.n), min(s.n), count(*) from (select k, count(*) as n from {t1} group by k) s"
        ),
        // Joined with a table.
        _ => {
            let on = if rng.chance(0.6) { "s.k = y.k" } else { "s.v = y.v" };
            format!(
                "select y.k, y.id, s.v from (select k, id, v from {t1} x{}) s join {t2} y on {on}",
                maybe_where(rng, "x")
            )
        }
    };
    vec![Stmt::read(sql)]
}

fn in_not_in(rng: &mut Rng, lane: usize) -> Vec<Stmt> {
    let (t1, t2) = (table(rng, lane), table(rng, lane));
    let col = *rng.pick(&["k", "v", "t"]);
    let not = if rng.chance(0.4) { "not " } else { "" };
    let inner_where = if rng.chance(0.3) {
        format!(" where {}", correlation(rng, "b", "a"))
    } else {
        maybe_where(rng, "b")
    };
    let sel = outer_select(rng, "a");
    let gb = group_by_if_needed(&sel, "a");
    vec![Stmt::read(format!(
        "{sel} {t1} a where a.{col} {not}in (select b.{col} from {t2} b{inner_where}){gb}"
    ))]
}

fn exists(rng: &mut Rng, lane: usize) -> Vec<Stmt> {
    let (t1, t2) = (table(rng, lane), table(rng, lane));
    let not = if rng.chance(0.4) { "not " } else { "" };
    let inner = if rng.chance(0.75) {
        let extra = if rng.chance(0.5) {
            format!(" and {}", predicate(rng, "b"))
        } else {
            String::new()
        };
        format!("{}{extra}", correlation(rng, "b", "a"))
    } else {
        predicate(rng, "b")
    };
    let sel = outer_select(rng, "a");
    let gb = group_by_if_needed(&sel, "a");
    vec![Stmt::read(format!(
        "{sel} {t1} a where {not}exists (select 1 from {t2} b where {inner}){gb}"
    ))]
}

fn scalar_where(rng: &mut Rng, lane: usize) -> Vec<Stmt> {
    let (t1, t2) = (table(rng, lane), table(rng, lane));
    let agg = *rng.pick(&["max(b.v)", "min(b.v)", "count(*)", "sum(b.v) / 10"]);
    let op = *rng.pick(&["=", "<", ">=", "<>"]);
    let inner_where = if rng.chance(0.5) {
        format!(" where {}", correlation(rng, "b", "a"))
    } else {
        maybe_where(rng, "b")
    };
    let sel = outer_select(rng, "a");
    let gb = group_by_if_needed(&sel, "a");
    vec![Stmt::read(format!(
        "{sel} {t1} a where a.v {op} (select {agg} from {t2} b{inner_where}){gb}"
    ))]
}

fn subquery_select_list(rng: &mut Rng, lane: usize) -> Vec<Stmt> {
    let (t1, t2) = (table(rng, lane), table(rng, lane));
    let agg = *rng.pick(&["count(*)", "max(b.v)", "min(b.t)"]);
    let inner_where = if rng.chance(0.6) {
        format!(" where {}", correlation(rng, "b", "a"))
    } else {
        maybe_where(rng, "b")
    };
    let exists = if rng.chance(0.3) {
        format!(", exists (select 1 from {t2} e where e.k = a.k and e.v > a.v)")
    } else {
        String::new()
    };
    vec![Stmt::read(format!(
        "select a.k, a.id, (select {agg} from {t2} b{inner_where}){exists} from {t1} a{}",
        maybe_where(rng, "a")
    ))]
}

fn subquery_having(rng: &mut Rng, lane: usize) -> Vec<Stmt> {
    let (t1, t2) = (table(rng, lane), table(rng, lane));
    let having = match rng.below(3) {
        0 => format!("count(*) > (select count(*) / 12 from {t2})"),
        1 => format!(
            "max(a.v) >= (select avg(v) from {t2} b{})",
            maybe_where(rng, "b")
        ),
        _ => format!("a.k in (select k from {t2} b{})", maybe_where(rng, "b")),
    };
    vec![Stmt::read(format!(
        "select a.k, count(*), sum(a.v) from {t1} a{} group by a.k having {having}",
        maybe_where(rng, "a")
    ))]
}

fn set_operation(rng: &mut Rng, lane: usize) -> Vec<Stmt> {
    let (t1, t2) = (table(rng, lane), table(rng, lane));
    let op = *rng.pick(&[
        "union",
        "union all",
        "intersect",
        "intersect all",
        "except",
        "except all",
    ]);
    let cols = *rng.pick(&["k, v", "k", "v, t", "k, id, v"]);
    let arm = |rng: &mut Rng, t: &str| format!("select {cols} from {t} x{}", maybe_where(rng, "x"));
    let (a1, a2) = (arm(rng, &t1), arm(rng, &t2));
    let sql = match rng.below(4) {
        0 => format!("select count(*) from ({a1} {op} {a2}) u"),
        1 if cols.starts_with('k') => {
            format!("select u.k, count(*) from ({a1} {op} {a2}) u group by u.k")
        }
        2 => {
            let t3 = table(rng, lane);
            format!("{a1} {op} {a2} union {}", arm(rng, &t3))
        }
        _ => format!("{a1} {op} {a2}"),
    };
    vec![Stmt::read(sql)]
}

/// One read of a generated shape (for CREATE TABLE AS and views).
pub fn any_read(rng: &mut Rng, lane: usize) -> String {
    let mut stmts = match rng.below(9) {
        0 => cte(rng, lane),
        1 => cte_recursive(rng, lane),
        2 => subquery_from(rng, lane),
        3 => in_not_in(rng, lane),
        4 => exists(rng, lane),
        5 => scalar_where(rng, lane),
        6 => subquery_select_list(rng, lane),
        7 => subquery_having(rng, lane),
        _ => set_operation(rng, lane),
    };
    stmts.remove(0).sql
}

/// The case of `index` in the run of `seed`, for `lane` (whose own tables it may write).
pub fn generate(seed: u64, index: usize, lane: usize) -> Case {
    let mut rng = Rng::new(seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    // Every other case is a join (`joins.rs`).
    let category = if index % 2 == 1 {
        *rng.pick(JOIN_CATEGORIES)
    } else {
        *rng.pick(CATEGORIES)
    };
    let scoped = rng.chance(0.35).then(|| rng.range(0, 11));
    TENANT.with(|t| t.set(scoped));
    let mut cleanup = Vec::new();
    let statements = match category {
        "cte" => cte(&mut rng, lane),
        "cte_recursive" => cte_recursive(&mut rng, lane),
        "subquery_from" => subquery_from(&mut rng, lane),
        "in_not_in" => in_not_in(&mut rng, lane),
        "exists" => exists(&mut rng, lane),
        "scalar_where" => scalar_where(&mut rng, lane),
        "subquery_select_list" => subquery_select_list(&mut rng, lane),
        "subquery_having" => subquery_having(&mut rng, lane),
        "set_operation" => set_operation(&mut rng, lane),
        join if join.starts_with("join_") => joins::generate(join, &mut rng),
        other => writes::generate(other, &mut rng, lane, &mut cleanup),
    };
    TENANT.with(|t| t.set(None));
    Case {
        category,
        statements,
        cleanup,
    }
}
