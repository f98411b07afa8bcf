//! Joins of reference tables only, and of reference tables with local tables (issue 20,
//! item 3), with every clause and outer joins, compared with the plain PostgreSQL; and
//! where they run: reference tables only on one placement (one task, no intermediate
//! result), with a local table by pulling the reference rows the join needs.

use super::common::compare::{run, show, Outcome};
use super::common::{cluster, plain_postgres};

const SETUP: &str = "create schema rj; \
    create table rj.r1 (k int primary key, v int, t text); \
    create table rj.r2 (k int primary key, v int, t text); \
    create table rj.l (k int primary key, v int, t text)";

const ROWS: &str = "insert into rj.r1 select i, nullif(i % 5, 0), (array['a', 'b', null])[1 + i % 3] \
        from generate_series(1, 20) i; \
    insert into rj.r2 select i, i % 4, (array['b', 'c'])[1 + i % 2] from generate_series(5, 30, 2) i; \
    insert into rj.l select i, i % 4, (array[null, 'a', 'c'])[1 + i % 3] from generate_series(0, 25, 3) i";

/// Reads over reference tables only, each in a total order.
const REFERENCE_ONLY: &[&str] = &[
    "select a.k, b.k from rj.r1 a join rj.r2 b on a.k = b.k order by 1, 2",
    "select a.k, b.k from rj.r1 a left join rj.r2 b on a.v = b.v and b.k > 10 order by 1, 2 nulls first",
    "select a.k, b.k from rj.r1 a right join rj.r2 b using (k) order by 1 nulls first, 2",
    "select a.k, b.k, a.t from rj.r1 a full join rj.r2 b on a.k = b.k order by 1 nulls first, 2 nulls first",
    "select a.k, b.k from rj.r1 a, rj.r1 b where a.v = b.v and a.k < b.k order by 1, 2",
    "select a.t, count(*), sum(b.v), string_agg(b.t, ',' order by b.t), count(distinct b.v) \
     from rj.r1 a join rj.r2 b on a.v = b.v group by a.t having count(*) > 1 order by 1 nulls first",
    "select distinct a.v, b.t from rj.r1 a cross join rj.r2 b where b.k < 12 order by 1 nulls first, 2",
    "select a.k, b.k, rank() over (partition by a.v order by b.k) from rj.r1 a join rj.r2 b \
     on b.k between a.k and a.k + 3 order by 1, 2 limit 7 offset 2",
    "select a.k from rj.r1 a where exists (select 1 from rj.r2 b where b.v = a.v and b.k > a.k) order by 1",
    "select a.k, (select count(*) from rj.r2 b where b.k < a.k) from rj.r1 a order by 1",
    "select k from rj.r1 union select k from rj.r2 order by 1",
    "select s.v, count(*) from (select a.v from rj.r1 a join rj.r2 b using (k)) s group by s.v order by 1 nulls first",
];

/// Reads over reference and local tables, each in a total order.
const WITH_LOCAL: &[&str] = &[
    "select l.k, a.k from rj.l l join rj.r1 a on a.k = l.k order by 1, 2",
    "select l.k, a.k from rj.l l left join rj.r1 a on a.k = l.k and a.v > 2 order by 1, 2",
    "select l.k, a.k from rj.r1 a left join rj.l l on a.k = l.k where l.k is null order by 1, 2",
    "select l.k, a.k, b.k from rj.l l full join rj.r1 a on a.k = l.k full join rj.r2 b on b.k = a.k \
     order by 1 nulls first, 2 nulls first, 3 nulls first",
    "select l.t, count(*), max(a.v), bool_and(a.v > l.v) from rj.l l join rj.r1 a on a.v = l.v \
     where a.k > 3 group by l.t order by 1 nulls first",
    "select a.k from rj.r1 a where a.k in (select k from rj.l) and a.v is not null order by 1",
    "select l.k from rj.l l where not exists (select 1 from rj.r2 b where b.k = l.k) order by 1",
];

async fn answers(sql: &str) -> (Outcome, Outcome) {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    (run(&shard, sql).await, run(&plain, sql).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_and_local_joins_match_postgres() {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    // The rows first: `create_reference_table` moves them.
    for c in [&shard, &plain] {
        c.batch_execute(SETUP).await.unwrap();
        c.batch_execute(ROWS).await.unwrap();
    }
    for call in ["rj.r1", "rj.r2"] {
        shard
            .batch_execute(&format!("select create_reference_table('{call}')"))
            .await
            .unwrap();
    }
    for sql in REFERENCE_ONLY.iter().chain(WITH_LOCAL) {
        let (got, want) = answers(sql).await;
        assert!(
            matches!(&want, Outcome::Rows { rows, .. } if !rows.is_empty()),
            "{sql}: {}",
            show(&want)
        );
        assert_eq!(
            got,
            want,
            "{sql}:\n pgshard {}\n plain {}",
            show(&got),
            show(&want)
        );
    }
    // With parameters (extended protocol), and inside a block after a write there.
    let sql = "select a.k, b.v from rj.r1 a join rj.r2 b on a.k = b.k where a.k > $1 order by 1";
    let rows = |rs: Vec<tokio_postgres::Row>| -> Vec<(i32, Option<i32>)> {
        rs.iter().map(|r| (r.get(0), r.get(1))).collect()
    };
    let got = rows(shard.query(sql, &[&8]).await.unwrap());
    let want = rows(plain.query(sql, &[&8]).await.unwrap());
    assert_eq!(got, want, "{sql}");
    let block = [
        "begin",
        "update rj.r2 set v = v + 100 where k > 20",
        "select a.k, b.v from rj.r1 a right join rj.r2 b using (k) order by b.k",
        "rollback",
    ];
    for sql in block {
        let (got, want) = (run(&shard, sql).await, run(&plain, sql).await);
        assert_eq!(got, want, "{sql}");
    }
    // Reference tables only: one task on one placement, nothing pulled first.
    for sql in REFERENCE_ONLY {
        let explain = format!("explain (costs off) {sql}");
        let Outcome::Rows { rows, .. } = run(&shard, &explain).await else {
            panic!("{explain}: {}", show(&run(&shard, &explain).await));
        };
        let plan: Vec<String> = rows.into_iter().filter_map(|r| r[0].clone()).collect();
        let plan = plan.join("\n");
        assert!(
            plan.contains("Task Count: 1") && !plan.contains("Distributed Subplan"),
            "{sql}:\n{plan}"
        );
    }
}
