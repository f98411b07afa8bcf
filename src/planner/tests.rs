//! Planner decisions on parsed statements against a small fixed catalog: what is
//! routed, to which shard, what runs everywhere, and what is refused.

use super::*;
use crate::catalog::{Catalog, DistColumn, DistTable, PartitionMethod, ShardInterval};
use crate::sharding::hash::{hash_int4, oid};
use crate::sharding::ranges::{all_ranges, ShardIndexer};
use crate::sql::parse::parse;
use pg_query::protobuf::node::Node as N;

fn catalog() -> Catalog {
    catalog_of_t(&["k", "v"])
}

/// One hash table `public.t` (distributed by int `k`, 4 shards on groups 1 and 2) with
/// `columns`.
pub(crate) fn catalog_of_t(columns: &[&str]) -> Catalog {
    let shards: Vec<ShardInterval> = all_ranges(4)
        .into_iter()
        .enumerate()
        .map(|(i, (min, max))| ShardInterval {
            shard_id: 102008 + i as i64,
            min,
            max,
            placement_groups: vec![1 + (i as i32 % 2)],
        })
        .collect();
    let mut c = Catalog::default();
    c.add_table(DistTable {
        relid: 16400,
        schema: "public".into(),
        name: "t".into(),
        method: PartitionMethod::Hash,
        dist_column: Some(DistColumn {
            name: "k".into(),
            attnum: 1,
            type_oid: oid::INT4,
            collation: 0,
            typmod: -1,
            type_sql: "integer".into(),
        }),
        colocation_id: 1,
        indexer: ShardIndexer::for_intervals(&shards),
        shards,
        columns: columns.iter().map(|c| c.to_string()).collect(),
        indexes: vec![],
        sequence_columns: vec![],
    });
    c
}

/// Names as PostgreSQL resolves them with the default search path and no local tables.
fn on_public(c: &Catalog) -> super::Names {
    super::Names::on_path(c, &["public"])
}

fn plan_of(sql: &str) -> Plan {
    let stmt = parse(sql).unwrap().remove(0);
    let cat = catalog();
    plan(&stmt, &cat, &on_public(&cat), &|n| {
        n == "create_distributed_table" || n == "citus_table_size"
    })
    .unwrap()
}

fn unsupported(sql: &str) -> bool {
    matches!(plan_of(sql), Plan::Unsupported(e) if e.code == "0A000")
}

#[test]
fn routes_fixed_distribution_values() {
    match plan_of("select v from t where k = 5 and v <> 'x'") {
        Plan::Router(r) => {
            assert_eq!(r.values, vec![ValueSource::Hash(hash_int4(5))]);
            let sql = r.template.for_shard(102009);
            assert_eq!(
                sql,
                "select v from \"public\".\"t_102009\" AS \"t\" where k = 5 and v <> 'x'"
            );
        }
        other => panic!("{other:?}"),
    }
    match plan_of("UPDATE t SET v = $1 WHERE t.k = $2") {
        Plan::Router(r) => assert_eq!(r.values, vec![ValueSource::Param(1)]),
        other => panic!("{other:?}"),
    }
    match plan_of("delete from t x where '7' = x.k") {
        Plan::Router(r) => assert_eq!(r.values, vec![ValueSource::Hash(hash_int4(7))]),
        other => panic!("{other:?}"),
    }
    match plan_of("insert into t (v, k) values ('a', 3), ('b', 3)") {
        Plan::Router(r) => assert_eq!(r.values, vec![ValueSource::Hash(hash_int4(3)); 2]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn never_routes_what_it_cannot_prove() {
    // OR, an out-of-range literal, a different column: all shards or refusal, never one shard.
    assert!(matches!(
        plan_of("select * from t where k = 1 or k = 2"),
        Plan::MultiShard(_)
    ));
    assert!(matches!(
        plan_of("select * from t where k = 5000000000"),
        Plan::MultiShard(_)
    ));
    assert!(matches!(
        plan_of("select * from t where v = '1'"),
        Plan::MultiShard(_)
    ));
    assert!(matches!(
        plan_of("select * from t where k in (1, 2)"),
        Plan::MultiShard(_)
    ));
    assert!(matches!(
        plan_of("update t set v = 'x'"),
        Plan::MultiShardModify(_)
    ));
    assert!(unsupported("update t set k = 2 where k = 1"));
    assert!(matches!(
        plan_of("delete from t where v = 'x'"),
        Plan::MultiShardModify(_)
    ));
    // INSERT ... SELECT: shard by shard where rows keep their shard, else through the
    // coordinator; never routed to one shard.
    assert!(matches!(
        plan_of("insert into t select k, v from t"),
        Plan::InsertSelect(_)
    ));
    assert!(matches!(
        plan_of("insert into t select * from t"),
        Plan::InsertViaCoordinator(_)
    ));
    assert!(matches!(
        plan_of("insert into t (k, v) select length(v), v from t"),
        Plan::InsertViaCoordinator(_)
    ));
    assert!(matches!(
        plan_of("insert into t select 1, 'x' from generate_series(1, 3)"),
        Plan::InsertViaCoordinator(_)
    ));
    // Into a local table: the SELECT through pgshard, the INSERT on the coordinator
    // node; parameters only in the SELECT.
    assert!(matches!(
        plan_of("insert into local_t select k, v from t where k > $1 on conflict do nothing returning *"),
        Plan::InsertIntoLocal(_)
    ));
    assert!(unsupported(
        "insert into local_t select k, v from t on conflict (k) do update set v = $1"
    ));
    // A read-only WITH of the INSERT moves into its SELECT; a data-modifying one is
    // refused.
    assert!(matches!(
        plan_of("with x as (select 1) insert into local_t select k, v from t"),
        Plan::InsertIntoLocal(p) if p.select.starts_with("WITH x AS")
    ));
    assert!(unsupported(
        "with x as (delete from t returning *) insert into local_t select k, v from x"
    ));
    // Into a distributed table through the coordinator: ON CONFLICT kept, ON
    // CONSTRAINT refused.
    assert!(matches!(
        plan_of("insert into t as w select * from t on conflict (k) do update set v = w.v || excluded.v"),
        Plan::InsertViaCoordinator(p) if p.on_conflict.as_ref().is_some_and(|oc| oc.do_update)
    ));
    assert!(unsupported(
        "insert into t select * from t on conflict on constraint t_pkey do nothing"
    ));
    assert!(
        matches!(plan_of("insert into t values (null, 'x')"), Plan::Unsupported(e) if e.code == "23502")
    );
}

#[test]
fn multi_shard_shapes() {
    match plan_of("select count(*), sum(k) as s, max(v) from t where v like 'a%'") {
        Plan::MultiShard(m) => {
            assert_eq!(
                m.shape,
                MultiShardShape::Aggregate {
                    aggs: vec![AggKind::Count, AggKind::Sum, AggKind::Max],
                    names: vec!["count".into(), "s".into(), "max".into()],
                    collation_source: Some("SELECT NULL, NULL, v FROM t WHERE false".into()),
                }
            );
        }
        other => panic!("{other:?}"),
    }
    match plan_of("select k, upper(v) from t limit 10 offset 5") {
        Plan::MultiShard(m) => {
            assert_eq!(m.offset, 5);
            assert_eq!(
                m.template.for_shard(1),
                "select k, upper(v) from \"public\".\"t_1\" AS \"t\" limit 15 offset 0"
            );
            assert_eq!(m.functions, vec!["upper".to_string()]);
        }
        other => panic!("{other:?}"),
    }
    for sql in [
        "select * from t order by k",
        "select v, count(*) from t group by v",
        "select distinct v from t",
        "select avg(k) from t",
        "select count(distinct v) from t",
        "select k, count(*) over () from t",
        "select k, count(*) from t",
    ] {
        assert!(
            matches!(plan_of(sql), Plan::MultiShard(m) if m.shape == MultiShardShape::Combine),
            "{sql}"
        );
    }
    assert!(unsupported("select * from t for update"));
    // Planned in parts (recursive planning): each arm, or each table, an intermediate result.
    for sql in [
        "select * from t join u on t.k = u.k",
        "select * from t union select * from t",
    ] {
        assert!(matches!(plan_of(sql), Plan::Recursive(_)), "{sql}");
    }
}

#[test]
fn local_and_utility() {
    assert!(matches!(plan_of("select * from other_table"), Plan::Local));
    assert!(matches!(plan_of("select 't'"), Plan::Local));
    assert!(matches!(
        plan_of("select create_distributed_table('t', 'k')"),
        Plan::Utility { .. }
    ));
    match plan_of("select pg_size_pretty(citus_table_size('t'))") {
        Plan::UtilityInline { calls } => assert_eq!(calls[0].name, "citus_table_size"),
        other => panic!("{other:?}"),
    }
    let utility = |n: &str| crate::commands::is_utility_function(n);
    let stmt = parse("select recover_prepared_transactions()::int8")
        .unwrap()
        .remove(0);
    let cat = catalog();
    match plan(&stmt, &cat, &on_public(&cat), &utility).unwrap() {
        Plan::UtilityInline { calls } => {
            assert_eq!(calls[0].name, "recover_prepared_transactions")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        plan_of("begin isolation level serializable"),
        Plan::Session(SessionCommand::Transaction(TxnCommand::Begin { .. }))
    ));
    assert!(matches!(
        plan_of("set citus.shard_count = 8"),
        Plan::Session(SessionCommand::SetCitus { .. })
    ));
    // Every other SET / RESET is the session's, whatever the catalog holds.
    for sql in [
        "set datestyle = 'German'",
        "reset all",
        "set search_path to a, b",
    ] {
        assert!(
            matches!(plan_of(sql), Plan::Session(SessionCommand::Setting(_))),
            "{sql}"
        );
    }
    // Each SET says how long it lasts.
    let session = |v: Option<&str>| {
        Plan::Session(SessionCommand::Setting(SettingScope::Session {
            variable: v.map(str::to_string),
        }))
    };
    for (sql, want) in [
        ("set datestyle = 'German'", session(Some("datestyle"))),
        ("reset search_path", session(Some("search_path"))),
        ("reset all", session(None)),
        (
            "set local statement_timeout = 5",
            Plan::Session(SessionCommand::Setting(SettingScope::Local {
                variable: "statement_timeout".into(),
            })),
        ),
        (
            "set transaction isolation level repeatable read, read only",
            Plan::Session(SessionCommand::Setting(SettingScope::Transaction {
                modes: vec!["ISOLATION LEVEL REPEATABLE READ".into(), "READ ONLY".into()],
            })),
        ),
        (
            "set transaction read write, not deferrable",
            Plan::Session(SessionCommand::Setting(SettingScope::Transaction {
                modes: vec!["READ WRITE".into(), "NOT DEFERRABLE".into()],
            })),
        ),
        (
            "set transaction snapshot '00000003-0000001B-1'",
            Plan::Session(SessionCommand::Setting(SettingScope::CoordinatorOnly)),
        ),
    ] {
        assert_eq!(format!("{:?}", plan_of(sql)), format!("{want:?}"), "{sql}");
    }
    assert!(matches!(
        plan_of("discard all"),
        Plan::Session(SessionCommand::DiscardAll)
    ));
    assert!(!matches!(
        plan_of("discard temp"),
        Plan::Session(SessionCommand::DiscardAll)
    ));
    assert!(matches!(
        plan_of("deallocate all"),
        Plan::Session(SessionCommand::Deallocate { name: None })
    ));
    assert!(
        matches!(plan_of("deallocate prepare \"S 1\""), Plan::Session(SessionCommand::Deallocate { name: Some(n) }) if n == "S 1")
    );
    assert!(matches!(
        plan_of("set local citus.multi_shard_commit_protocol = '1pc'"),
        Plan::Session(SessionCommand::SetCitus { local: true, .. })
    ));
    // A node joining a block after SET TRANSACTION begins with the block's modes.
    let modes = vec!["ISOLATION LEVEL SERIALIZABLE".to_string()];
    assert_eq!(
        begin_with_modes("BEGIN", &modes),
        "BEGIN ISOLATION LEVEL SERIALIZABLE"
    );
    assert_eq!(
        begin_with_modes("start transaction read only", &modes),
        "BEGIN READ ONLY, ISOLATION LEVEL SERIALIZABLE"
    );
    assert_eq!(
        begin_with_modes("begin isolation level repeatable read", &[]),
        "BEGIN ISOLATION LEVEL REPEATABLE READ"
    );
    // Savepoint commands carry the name PostgreSQL parsed (quoted names keep their case).
    for (sql, want) in [
        ("savepoint a", TxnCommand::Savepoint { name: "a".into() }),
        (
            "release savepoint \"B\"",
            TxnCommand::Release { name: "B".into() },
        ),
        ("release a", TxnCommand::Release { name: "a".into() }),
        ("rollback to a", TxnCommand::RollbackTo { name: "a".into() }),
        (
            "rollback to savepoint a",
            TxnCommand::RollbackTo { name: "a".into() },
        ),
        ("end", TxnCommand::Commit { chain: false }),
        ("commit and chain", TxnCommand::Commit { chain: true }),
        ("abort and no chain", TxnCommand::Rollback { chain: false }),
        ("rollback and chain", TxnCommand::Rollback { chain: true }),
    ] {
        match plan_of(sql) {
            Plan::Session(SessionCommand::Transaction(got)) => assert_eq!(got, want, "{sql}"),
            other => panic!("{sql}: {other:?}"),
        }
    }
    // Only statements that end the block (or roll back into it) run in a failed one.
    for (sql, ends) in [
        ("commit and chain", true),
        ("rollback", true),
        ("rollback to a", true),
        ("savepoint a", false),
        ("select 1", false),
    ] {
        assert_eq!(plan_of(sql).ends_failed_block(), ends, "{sql}");
    }
    // A view over a distributed table: made on the coordinator node (its queries are
    // planned as its definition, `planner::views`).
    assert!(matches!(
        plan_of("create view v as select * from t"),
        Plan::Local
    ));
    assert!(unsupported("comment on table t is 'x'"));
    assert!(matches!(
        plan_of("drop table if exists t"),
        Plan::DropTables { .. }
    ));
    assert!(matches!(plan_of("drop table if exists other"), Plan::Local));
    assert!(unsupported("drop table t, other"));
}

/// The shape cache must give exactly what a full plan gives, or decline.
#[test]
fn shape_cache_agrees_with_full_plans() {
    use super::fastpath::{scan, FastPlan, ShapeCache};
    let cat = catalog();
    let mut cache = ShapeCache::default();
    let names = on_public(&cat);
    let full = |sql: &str| plan(&parse(sql).unwrap().remove(0), &cat, &names, &|_| false).unwrap();
    // Prime with one statement of each shape.
    for sql in [
        "SELECT v FROM t WHERE k = 1;",
        "select * from t where k = '1'::int4",
        "update t set v = 'a' where k = 2",
        "insert into t values (3, 'x')",
        "select 1 + 2",
    ] {
        let st = parse(sql).unwrap().remove(0);
        let p = full(sql);
        let write = !matches!(st.node, Some(N::SelectStmt(_)));
        cache.lookup((cat.version, 0), &scan(sql).unwrap(), sql);
        cache.remember(
            (cat.version, 0),
            scan(sql).unwrap(),
            st.node.as_ref().unwrap(),
            &p,
            write,
        );
    }
    let cases = [
        "SELECT v FROM t WHERE k = 77;",
        "SELECT v FROM t WHERE k = 2147483647;",
        "SELECT v FROM t WHERE k = 5000000000;",
        "SELECT v FROM t WHERE k = 'abc';",
        "select * from t where k = '-12'::int4",
        "update t set v = 'it''s' where k = 40",
        "insert into t values (123456, 'y')",
        "insert into t values (-5, 'y')",
        "select 3 + 4",
    ];
    let mut hits = 0;
    for sql in cases {
        let Some(fast) = cache.lookup((cat.version, 0), &scan(sql).unwrap(), sql) else {
            continue;
        };
        hits += 1;
        match (fast, full(sql)) {
            (
                FastPlan::Router {
                    hash, shard_sql, ..
                },
                Plan::Router(r),
            ) => {
                assert_eq!(r.values, vec![ValueSource::Hash(hash)], "{sql}");
                assert_eq!(
                    shard_sql(102010).trim_end_matches(';'),
                    r.template.for_shard(102010),
                    "{sql}"
                );
            }
            (FastPlan::Local { .. }, Plan::Local) => {}
            (_, other) => panic!("{sql}: the cache answered, the full plan says {other:?}"),
        }
    }
    assert!(hits >= 5, "only {hits} hits");
    // A different catalog version empties the cache.
    let sql = "SELECT v FROM t WHERE k = 77;";
    assert!(cache
        .lookup((cat.version + 1, 0), &scan(sql).unwrap(), sql)
        .is_none());
}

#[test]
fn invalid_distribution_values_reach_postgresql() {
    match plan_of("insert into t values ('abc', 'x')") {
        Plan::Router(r) => assert_eq!(r.values, vec![ValueSource::Invalid]),
        other => panic!("{other:?}"),
    }
    // A numeric literal is rounded by PostgreSQL on insert: evaluated there, not guessed.
    match plan_of("insert into t values (5.5, 'x')") {
        Plan::InsertRows(p) => assert!(matches!(
            p.keys[0],
            crate::planner::insert::RowKey::Evaluate { .. }
        )),
        other => panic!("{other:?}"),
    }
}

fn combine_of(sql: &str) -> std::sync::Arc<aggregate::CombinePlan> {
    match plan_of(sql) {
        Plan::MultiShard(m) if m.shape == MultiShardShape::Combine => m.combine.clone().unwrap(),
        other => panic!("{sql}: {other:?}"),
    }
}

#[test]
fn group_by_columns_aggregate_on_the_shards() {
    let c = combine_of("select v, count(*) from t group by v order by count(*) desc limit 10");
    let p = c.partial.as_ref().expect("partial aggregation");
    assert_eq!(
        p.worker_sql("S"),
        "SELECT \"v\", count(*) AS \"pgs_a0\" FROM S AS \"t\" GROUP BY \"v\""
    );
    assert_eq!(
        p.combine_sql(&|i| format!("C{i}")),
        "select v, C0 AS \"count\" from pg_temp.pgs_partials AS \"t\" group by v order by C0 desc limit 10"
    );
    assert_eq!(p.partials, vec![aggregate::PartialKind::Count]);
    // avg is a sum and a count on the shards; WHERE stays on the shards.
    let c = combine_of("select v, avg(k) filter (where k > 1) from t x where x.k <> 3 group by 1");
    let p = c.partial.as_ref().unwrap();
    assert_eq!(
        p.worker_sql("S"),
        "SELECT \"v\", sum(k) filter (where k > 1) AS \"pgs_a0\", count(k) filter (where k > 1) AS \"pgs_c0\" FROM S AS \"x\" WHERE x.k <> 3 GROUP BY \"v\""
    );
    assert_eq!(
        p.combine_sql(&|_| "A".into()),
        "select v, A AS \"avg\" from pg_temp.pgs_partials x  group by 1"
    );
}

#[test]
fn other_shapes_pull_the_rows_they_read() {
    // Ordered aggregates, DISTINCT aggregates, group expressions: raw rows.
    for sql in [
        "select v, string_agg(v, ',' order by k) from t group by v",
        "select count(distinct v) from t",
        "select k % 3, count(*) from t group by k % 3",
        "select k, rank() over (order by v) from t",
    ] {
        let c = combine_of(sql);
        assert!(c.partial.is_none(), "{sql}");
        assert!(c.raw.raw_rows);
        let w = c.raw.worker_sql("S");
        let k_read = sql.contains('k');
        assert!(
            w.contains("\"k\"") == k_read && w.contains("\"v\"") == sql.contains('v'),
            "{sql}: {w}"
        );
    }
    // Sorting by a plain column: LIMIT + OFFSET pushed down with the sort.
    let c =
        combine_of("select k from t where v = 'x' order by k desc nulls first limit 5 offset 2");
    assert_eq!(
        c.raw.worker_sql("S"),
        "SELECT \"k\" FROM S AS \"t\" WHERE v = 'x' ORDER BY \"k\" DESC NULLS FIRST LIMIT (5)::int8 + (2)::int8"
    );
    // A set-returning function may yield fewer rows than it reads: no pushdown.
    let c = combine_of("select generate_series(1, k) from t order by k limit 5");
    assert_eq!(c.raw.worker_sql("S"), "SELECT \"k\" FROM S AS \"t\"");
    // An output name shadowing a column: no pushdown.
    let c = combine_of("select v as k from t order by k limit 5");
    assert_eq!(c.raw.worker_sql("S"), "SELECT \"v\", \"k\" FROM S AS \"t\"");
    match plan_of("select k from t union select k from t") {
        Plan::Recursive(r) => {
            assert_eq!(r.subplans.len(), 2);
            assert!(matches!(r.outer_plan, Plan::Local));
            assert!(
                r.outer.text.contains("pg_temp.pgs_intermediate_"),
                "{}",
                r.outer.text
            );
        }
        other => panic!("{other:?}"),
    }
    // A CTE: its body a subplan of its own (routed), the rest on the coordinator node.
    match plan_of("with x as (select * from t where k = 1) select count(*) from x") {
        Plan::Recursive(r) => {
            assert_eq!(r.subplans.len(), 1);
            assert!(matches!(r.subplans[0].plan, Plan::Router(_)));
            let create = &r.subplans[0].create_sql;
            assert!(create.starts_with("CREATE TEMP"), "{create}");
            assert!(create.contains(" pg_temp.pgs_intermediate_"), "{create}");
            assert!(
                r.subplans[0].create_sql.ends_with("WITH NO DATA"),
                "{}",
                r.subplans[0].create_sql
            );
            assert!(matches!(r.outer_plan, Plan::Local));
        }
        other => panic!("{other:?}"),
    }
    // A correlated subquery is no subplan: the tables themselves are pulled, the
    // columns the statement names (the fallback of moving `t2` to `t`'s rows first).
    let planned = plan_of("select k from t where exists (select 1 from t t2 where t2.v = t.v)");
    let planned = match planned {
        Plan::Repartition(p) => (*p.fallback).clone(),
        other => other,
    };
    match planned {
        Plan::Recursive(r) => {
            assert_eq!(r.subplans.len(), 2);
            for s in &r.subplans {
                assert!(
                    s.stmt.text.starts_with("SELECT k, v FROM"),
                    "{}",
                    s.stmt.text
                );
            }
        }
        other => panic!("{other:?}"),
    }
    // A pulled table is filtered by the WHERE conjuncts on it alone.
    match plan_of("select t.k from t join u on t.k = u.v where t.v = 'x' and u.k > 1 and t.k < u.k")
    {
        Plan::Recursive(r) => {
            let texts: Vec<&str> = r.subplans.iter().map(|s| s.stmt.text.as_str()).collect();
            assert!(
                texts.iter().any(|t| t.ends_with("WHERE t.v = 'x'")),
                "{texts:?}"
            );
            assert!(!texts.iter().any(|t| t.contains("u.k")), "{texts:?}");
        }
        other => panic!("{other:?}"),
    }
    // A modifying CTE on a distributed table: the CTE, then the statement over its rows.
    match plan_of("with d as (delete from t where v = 'x' returning *) select * from d") {
        Plan::ModifyingCte(m) => {
            assert_eq!(m.steps.len(), 1);
            assert!(matches!(&m.outer_plan, Plan::Local), "{:?}", m.outer_plan);
        }
        other => panic!("{other:?}"),
    }
    // Every part on one distribution value: the whole statement to that shard.
    match plan_of(
        "with d as (delete from t where k = 1 returning *) \
         select * from d where d.v not in (select v from t where t.k = 1)",
    ) {
        Plan::Router(r) => {
            assert!(!r.read_only);
            let sql = r.template.for_shard(r.table.shards[0].shard_id);
            assert!(sql.contains("\"t_"), "{sql}");
        }
        other => panic!("{other:?}"),
    }
    // Two distribution values, or a level without one: not sent whole.
    for sql in [
        "with d as (delete from t where k = 1 returning *) \
         select * from d where d.v not in (select v from t where t.k = 2)",
        "with d as (delete from t where k = 1 returning *) \
         select * from d where d.v not in (select v from t)",
    ] {
        assert!(matches!(plan_of(sql), Plan::ModifyingCte(_)), "{sql}");
    }
    // A read of the written table elsewhere reads a snapshot taken first.
    match plan_of("with d as (delete from t where k = 1 returning *) select count(*) from t") {
        Plan::ModifyingCte(m) => {
            assert_eq!(m.steps.len(), 2);
            assert!(
                m.outer.text.contains("pgs_intermediate"),
                "{}",
                m.outer.text
            );
        }
        other => panic!("{other:?}"),
    }
    // A modifying CTE nested below the top level is PostgreSQL's error (0A000).
    assert!(unsupported(
        "select * from (with d as (delete from t where k = 1 returning *) select * from d) s"
    ));
}

#[test]
fn multi_shard_modify_and_explain_plans() {
    match plan_of("update t set v = 'x' where v = 'y' returning k") {
        Plan::MultiShardModify(m) => {
            assert_eq!(m.verb, "UPDATE");
            assert!(m.returning);
            assert_eq!(
                m.template.for_shard(102008),
                "update \"public\".\"t_102008\" AS \"t\" set v = 'x' where v = 'y' returning k"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        plan_of("delete from t"),
        Plan::MultiShardModify(_)
    ));
    assert!(unsupported("update t set k = 2"));
    match plan_of("explain (costs off) select count(*) from t group by v") {
        Plan::Explain(e) => {
            assert_eq!(e.prefix, "explain (costs off) ");
            assert!(!e.costs && !e.analyze);
            assert!(matches!(e.inner, Plan::MultiShard(_)));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        plan_of("explain analyze select * from t where k = 1"),
        Plan::Explain(_)
    ));
    assert!(matches!(plan_of("explain select 1"), Plan::Local));
}

#[test]
fn combined_columns_keep_their_names() {
    let c = combine_of(
        "select count(*), every(k > 1), avg(k)::int, sum(k) + 1, count(*) as n from t group by v",
    );
    let sql = c
        .partial
        .as_ref()
        .unwrap()
        .combine_sql(&|i| format!("C{i}"));
    assert_eq!(
        sql,
        "select C0 AS \"count\", C1 AS \"every\", C2::int AS \"avg\", C3 + 1 AS \"?column?\", C0 as n from pg_temp.pgs_partials AS \"t\" group by v"
    );
    assert_eq!(
        aggregate::shape_with_params("SELECT count(*) filter (where v <> $1) FROM x", &[25])
            .unwrap(),
        "SELECT count(*) filter (where v <> CAST(NULL AS pg_catalog.text)) FROM x"
    );
    assert!(aggregate::shape_with_params("SELECT sum($1)", &[99999]).is_err());
}

#[test]
fn integer_constant_expressions_route_where_postgresql_would_find_the_row() {
    for (sql, key) in [
        ("delete from t where k = 2+3", 5),
        ("delete from t where k = -(3)", -3),
        ("select * from t where k = 8.0", 8),
        ("update t set v = 'x' where k = +7", 7),
    ] {
        match plan_of(sql) {
            Plan::Router(r) => {
                assert_eq!(r.values, vec![ValueSource::Hash(hash_int4(key))], "{sql}")
            }
            other => panic!("{sql}: {other:?}"),
        }
    }
    // Fractional, overflowing or out-of-range: every shard, as before.
    for sql in [
        "select * from t where k = 8.5",
        "select * from t where k = 2147483647 + 1",
        "select * from t where k = 2147483648",
    ] {
        assert!(matches!(plan_of(sql), Plan::MultiShard(_)), "{sql}");
    }
}

#[test]
fn node_tasks_only_where_a_union_subquery_reads_the_same() {
    let node_tasks = |sql: &str| match plan_of(sql) {
        Plan::MultiShard(m) => m.node_tasks,
        other => panic!("{sql}: {other:?}"),
    };
    for sql in [
        "select count(*) from t",
        "select v, count(*) from t group by v order by count(*) desc limit 10",
        "select * from t where k > 3 limit 5",
        "select x.* from t x(a, b) where a = 1",
        "select t.k, sum(k) from t group by t.k",
        "select count(*) from public.t",
    ] {
        assert!(node_tasks(sql), "{sql}");
    }
    for sql in [
        "select ctid, k from t",
        "select count(*) from t where xmin::text <> '0'",
        "select tableoid, count(*) from t group by 1",
        "select count(*) from only t",
        "select t from t",
        "select row_to_json(t.*) from t",
        "select x from t x where k > 1",
    ] {
        assert!(!node_tasks(sql), "{sql}");
    }
}

#[test]
fn node_tasks_aggregate_shard_by_shard_only_without_group_by() {
    let multi = |sql: &str| match plan_of(sql) {
        Plan::MultiShard(m) => m,
        other => panic!("{sql}: {other:?}"),
    };
    let three = [102008, 102010, 102012];
    // count/sum/min/max streamed: each shard's own statement, UNION ALL.
    let m = multi("select count(*), max(v) from t where k > 1;");
    assert_eq!(
        m.node_sql(None, &three).unwrap(),
        "(select count(*), max(v) from \"public\".\"t_102008\" AS \"t\" where k > 1\n) \
         UNION ALL (select count(*), max(v) from \"public\".\"t_102010\" AS \"t\" where k > 1\n) \
         UNION ALL (select count(*), max(v) from \"public\".\"t_102012\" AS \"t\" where k > 1\n)"
    );
    // Two shards: the union of the shards under one aggregate keeps more processes busy.
    assert!(m
        .node_sql(None, &three[..2])
        .unwrap()
        .starts_with("select count(*), max(v) from (SELECT * FROM"));
    assert_eq!(m.tasks(None, &three[..1]).len(), 1);
    // The combine step's partials without GROUP BY: per shard too.
    let m = multi("select avg(v) from t");
    let stage = m.combine.as_ref().unwrap().partial.as_ref().unwrap();
    assert!(stage.one_row);
    let sql = m.node_sql(Some(stage), &three).unwrap();
    assert_eq!(sql.matches(" UNION ALL ").count(), 2, "{sql}");
    assert!(!sql.contains("SELECT * FROM"), "{sql}");
    // Grouped partials: one aggregate over the node's shards.
    let m = multi("select v, count(*) from t group by v");
    let stage = m.combine.as_ref().unwrap().partial.as_ref().unwrap();
    assert!(!stage.one_row);
    let sql = m.node_sql(Some(stage), &three).unwrap();
    assert_eq!(sql.matches("SELECT * FROM").count(), 3, "{sql}");
    assert!(sql.ends_with("GROUP BY \"v\""), "{sql}");
    // Plain selections read the union; per-shard plans (system columns) have no node SQL.
    assert!(multi("select v from t")
        .node_sql(None, &three)
        .unwrap()
        .contains("(SELECT * FROM"));
    let m = multi("select ctid, count(*) from t group by 1");
    assert!(m.node_sql(None, &three).is_none());
    assert_eq!(m.tasks(None, &three).len(), 3);
}

#[test]
fn modifying_cte_without_returning_still_snapshots() {
    match plan_of("with x as (delete from t where k = 3) select count(*) from t") {
        Plan::ModifyingCte(m) => {
            assert_eq!(m.steps.len(), 2, "{:?}", m.steps);
            assert!(
                m.outer.text.contains("pgs_intermediate"),
                "{}",
                m.outer.text
            );
        }
        other => panic!("{other:?}"),
    }
}
