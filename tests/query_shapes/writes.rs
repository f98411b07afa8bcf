//! The writing shapes of the generated cases, on the lane's own tables (`wd<lane>`
//! distributed, `wr<lane>` reference, `wl<lane>` local): modifying CTEs, UPDATE ... FROM,
//! DELETE ... USING, INSERT ... SELECT ... ON CONFLICT (with and without RETURNING),
//! CREATE TABLE AS / SELECT INTO and views, over any table of the schema. Each write's
//! table contents are compared after it; some writes run in a block that is rolled back
//! (the contents compared inside it), so the tables do not drain.

use super::common::rng::Rng;
use super::generate::{any_read, predicate, table, Stmt};
use super::schema::SCHEMA;

/// A lane's table to write: the distributed one more often.
fn target(rng: &mut Rng, lane: usize) -> String {
    let prefix = match rng.below(5) {
        0..=2 => "wd",
        3 => "wr",
        _ => "wl",
    };
    format!("{SCHEMA}.{prefix}{lane}")
}

fn maybe(rng: &mut Rng, p: f64, s: &str) -> String {
    if rng.chance(p) {
        s.to_string()
    } else {
        String::new()
    }
}

/// `{joiner} P` on alias `a`, or nothing.
fn maybe_filter(rng: &mut Rng, joiner: &str, a: &str) -> String {
    if rng.chance(0.6) {
        format!("{joiner} {}", predicate(rng, a))
    } else {
        String::new()
    }
}

/// `stmts` as they are, or inside `begin ... rollback` (contents compared inside).
fn maybe_rolled_back(rng: &mut Rng, stmts: Vec<Stmt>, cleanup: &mut Vec<String>) -> Vec<Stmt> {
    if !rng.chance(0.4) {
        return stmts;
    }
    cleanup.push("rollback".into());
    let mut all = vec![Stmt::write("begin".into(), Vec::new())];
    all.extend(stmts);
    all.push(Stmt::write("rollback".into(), Vec::new()));
    all
}

/// A lane's table to write other than `w`.
fn other_target(rng: &mut Rng, lane: usize, w: &str) -> String {
    let mut w2 = target(rng, lane);
    if w2 == w {
        w2 = format!("{SCHEMA}.wd{lane}");
    }
    if w2 == w {
        w2 = format!("{SCHEMA}.wr{lane}");
    }
    w2
}

fn cte_modifying(rng: &mut Rng, lane: usize) -> Vec<Stmt> {
    let w = target(rng, lane);
    let t = table(rng, lane);
    let p = predicate(rng, "w");
    let (sql, check) = match rng.below(9) {
        0 => (
            format!("with x as (delete from {w} w where {p} returning *) select count(*), sum(v) from x"),
            vec![w],
        ),
        1 => (
            format!(
                "with u as (update {w} w set v = coalesce(w.v, 0) + 1 where {p} returning k, id, v) \
                 select * from u"
            ),
            vec![w],
        ),
        2 => (
            format!(
                "with i as (insert into {w} (k, id, v, t) select k, id + 1000, v, t from {t} x{} \
                 on conflict do nothing returning k, id) select count(*), max(id) from i",
                maybe_filter(rng, " where", "x")
            ),
            vec![w],
        ),
        // The statement reads the table the CTE writes: as it was before.
        4 => (
            format!(
                "with u as (update {w} w set v = coalesce(w.v, 0) + 10 where {p} returning k, id, v) \
                 select (select count(*) from u), (select sum(v) from {w}), \
                 (select count(*) from {t} x where x.v > 5)"
            ),
            vec![w],
        ),
        // Referenced twice, and a read-only CTE beside it reading the written table.
        5 => (
            format!(
                "with d as (delete from {w} w where {p} returning k, id, v), \
                 s as (select k, count(*) as n from {w} group by k) \
                 select s.k, s.n, (select count(*) from d where d.k = s.k) from s \
                 where s.n > (select count(*) from d) - 100"
            ),
            vec![w],
        ),
        // Unreferenced (no RETURNING): runs once all the same.
        6 => (
            format!("with x as (delete from {w} w where {p}) select count(*), sum(v) from {t}"),
            vec![w],
        ),
        // Two modifying CTEs on two tables.
        7 => {
            let w2 = other_target(rng, lane, &w);
            let p2 = predicate(rng, "w");
            (
                format!(
                    "with a as (update {w} w set t = 'm' where {p} returning k, id), \
                     b as (delete from {w2} w where {p2} returning k, id) \
                     select (select count(*) from a), (select count(*) from b)"
                ),
                vec![w, w2],
            )
        }
        _ => {
            let w2 = other_target(rng, lane, &w);
            (
                format!(
                    "with moved as (delete from {w} w where {p} returning *) \
                     insert into {w2} select * from moved on conflict do nothing"
                ),
                vec![w, w2],
            )
        }
    };
    vec![Stmt::write(sql, check)]
}

fn update_from(rng: &mut Rng, lane: usize) -> Vec<Stmt> {
    let w = target(rng, lane);
    let t = table(rng, lane);
    let returning = maybe(rng, 0.3, " returning w.k, w.id, w.v");
    let sql = match rng.below(3) {
        0 | 1 => format!(
            "update {w} w set v = s.v, t = s.t from {t} s where s.k = w.k and s.id = w.id{}{returning}",
            maybe_filter(rng, " and", "s")
        ),
        _ => format!(
            "update {w} w set t = 'u' where w.k in (select s.k from {t} s where {}){returning}",
            predicate(rng, "s")
        ),
    };
    vec![Stmt::write(sql, vec![w])]
}

fn delete_using(rng: &mut Rng, lane: usize) -> Vec<Stmt> {
    let w = target(rng, lane);
    let t = table(rng, lane);
    let returning = maybe(rng, 0.3, " returning w.k, w.id");
    let sql = match rng.below(3) {
        0 | 1 => format!(
            "delete from {w} w using {t} s where s.k = w.k and s.id = w.id and {}{returning}",
            predicate(rng, "s")
        ),
        _ => format!(
            "delete from {w} w where exists (select 1 from {t} s where s.k = w.k and s.v = w.v){returning}"
        ),
    };
    vec![Stmt::write(sql, vec![w])]
}

fn insert_select_on_conflict(rng: &mut Rng, lane: usize) -> Vec<Stmt> {
    let w = target(rng, lane);
    let (t1, t2) = (table(rng, lane), table(rng, lane));
    let source = match rng.below(3) {
        0 | 1 => format!(
            "select k, id{}, v, t from {t1} x{}",
            maybe(rng, 0.3, " + 100"),
            maybe_filter(rng, " where", "x")
        ),
        _ => format!(
            "select x.k, x.id, y.v, x.t from {t1} x join {t2} y on x.k = y.k and x.id = y.id"
        ),
    };
    let conflict = format!(
        "on conflict {}",
        rng.pick(&[
            "do nothing",
            "(k, id) do update set v = excluded.v, t = excluded.t",
            "(k, id) do update set v = coalesce(w.v, 0) + 1",
        ])
    );
    let returning = maybe(rng, 0.3, " returning w.k, w.id, w.v");
    vec![Stmt::write(
        format!("insert into {w} as w (k, id, v, t) {source} {conflict}{returning}"),
        vec![w],
    )]
}

/// `SELECT ... INTO t FROM` a reference table, or a distributed one filtered to one shard,
/// runs on a worker on main: it answers `SELECT n` and the new table exists there only
/// (`main.rs`'s ignored `select_into_creates_the_table_where_the_client_sees_it`). While
/// true, the generator writes CREATE TABLE AS instead of SELECT INTO.
const SELECT_INTO_ROUTED_TO_A_WORKER: bool = false;

fn create_table_as(rng: &mut Rng, lane: usize, cleanup: &mut Vec<String>) -> Vec<Stmt> {
    let name = format!("{SCHEMA}.ctas{lane}");
    cleanup.push(format!("drop table if exists {name}"));
    let t = table(rng, lane);
    let mut variant = rng.below(3);
    if variant == 1 && SELECT_INTO_ROUTED_TO_A_WORKER {
        variant = 0;
    }
    let create = match variant {
        0 => format!(
            "create table {name} as select k, id, v, t from {t} x where {}",
            predicate(rng, "x")
        ),
        1 => format!("select k, count(*) as n, sum(v) as s into {name} from {t} group by k"),
        _ => format!("create table {name} as {}", any_read(rng, lane)),
    };
    vec![
        Stmt::write(create, Vec::new()),
        Stmt::read(format!("select * from {name}")),
    ]
}

fn view(rng: &mut Rng, lane: usize, cleanup: &mut Vec<String>) -> Vec<Stmt> {
    let name = format!("{SCHEMA}.v{lane}");
    cleanup.push(format!("drop view if exists {name}"));
    let t = table(rng, lane);
    if rng.chance(0.5) {
        let t2 = table(rng, lane);
        vec![
            Stmt::write(
                format!(
                    "create view {name} as select k, id, v, t from {t} x where {}",
                    predicate(rng, "x")
                ),
                Vec::new(),
            ),
            Stmt::read(format!(
                "select k, count(*), sum(v) from {name} where v > 3 group by k"
            )),
            Stmt::read(format!(
                "select y.k, y.id, y.v from {name} y join {t2} z on y.k = z.k and y.id = z.id"
            )),
        ]
    } else {
        vec![
            Stmt::write(
                format!("create view {name} as {}", any_read(rng, lane)),
                Vec::new(),
            ),
            Stmt::read(format!("select * from {name}")),
        ]
    }
}

/// The statements of a writing case of `category`; `cleanup` collects what undoes it.
pub fn generate(
    category: &str,
    rng: &mut Rng,
    lane: usize,
    cleanup: &mut Vec<String>,
) -> Vec<Stmt> {
    let stmts = match category {
        "cte_modifying" => cte_modifying(rng, lane),
        "update_from" => update_from(rng, lane),
        "delete_using" => delete_using(rng, lane),
        "insert_select_on_conflict" => insert_select_on_conflict(rng, lane),
        "create_table_as" => return create_table_as(rng, lane, cleanup),
        "view" => return view(rng, lane, cleanup),
        other => panic!("no generator for {other}"),
    };
    maybe_rolled_back(rng, stmts, cleanup)
}
