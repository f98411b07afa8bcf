//! Planner tests of joins: the co-location proof, subqueries, the combine stages.
use super::*;
use crate::catalog::{Catalog, DistColumn, ShardInterval};
use crate::sharding::ranges::ShardIndexer;

/// `sql` planned over `a`, `b` (co-located), `c` (another group) and reference `r`.
pub(crate) fn plan_over_abcr(sql: &str) -> crate::planner::Plan {
    let stmts = crate::sql::parse::parse(sql).unwrap();
    let mut c = Catalog::default();
    c.add_table(table(1, "a", PartitionMethod::Hash, 1, 100));
    c.add_table(table(2, "b", PartitionMethod::Hash, 1, 200));
    c.add_table(table(3, "c", PartitionMethod::Hash, 2, 300));
    c.add_table(table(4, "r", PartitionMethod::Reference, 3, 400));
    crate::planner::plan(
        &stmts[0],
        &c,
        &crate::planner::Names::on_path(&c, &["public"]),
        &|_| false,
    )
    .unwrap()
}

/// A table for planner tests: hash-distributed on `k` (two shards on groups 1
/// and 2) or a reference table on both.
pub(crate) fn table(
    relid: u32,
    name: &str,
    method: PartitionMethod,
    coloc: i32,
    first_id: i64,
) -> DistTable {
    let shards: Vec<ShardInterval> = if method == PartitionMethod::Reference {
        vec![ShardInterval {
            shard_id: first_id,
            min: i32::MIN,
            max: i32::MAX,
            placement_groups: vec![1, 2],
        }]
    } else {
        crate::sharding::ranges::all_ranges(2)
            .into_iter()
            .enumerate()
            .map(|(i, (min, max))| ShardInterval {
                shard_id: first_id + i as i64,
                min,
                max,
                placement_groups: vec![1 + i as i32],
            })
            .collect()
    };
    DistTable {
        relid,
        schema: "public".into(),
        name: name.into(),
        method,
        dist_column: (method == PartitionMethod::Hash).then(|| DistColumn {
            name: "k".into(),
            attnum: 1,
            type_oid: 23,
            collation: 0,
            typmod: -1,
            type_sql: "integer".into(),
        }),
        colocation_id: coloc,
        indexer: ShardIndexer::for_intervals(&shards),
        shards,
        columns: vec!["k".into(), "v".into(), format!("{name}_only")],
        indexes: vec![],
        sequence_columns: vec![],
    }
}

fn catalog() -> Catalog {
    let mut c = Catalog::default();
    c.add_table(table(1, "a", PartitionMethod::Hash, 1, 100));
    c.add_table(table(2, "b", PartitionMethod::Hash, 1, 200));
    c.add_table(table(3, "c", PartitionMethod::Hash, 2, 300));
    c.add_table(table(4, "r", PartitionMethod::Reference, 3, 400));
    c
}

fn plan(sql: &str) -> Plan {
    let stmts = crate::sql::parse::parse(sql).unwrap();
    let c = catalog();
    super::super::plan(
        &stmts[0],
        &c,
        &crate::planner::Names::on_path(&c, &["public"]),
        &|_| false,
    )
    .unwrap()
}

fn shard_sql(p: &Plan) -> String {
    match p {
        Plan::Router(r) => r.template.for_shard(r.table.shards[1].shard_id),
        Plan::MultiShard(m) => m.template.for_shard(m.table.shards[1].shard_id),
        other => panic!("not pushed down: {other:?}"),
    }
}

/// The join step refuses it: refused, or planned in parts by the recursive step.
fn refused(sql: &str) -> bool {
    matches!(plan(sql), Plan::Unsupported(e) if e.code == "0A000")
        || matches!(plan(sql), Plan::Recursive(_) | Plan::Repartition(_))
}

#[test]
fn colocated_joins_pair_shards() {
    let p = plan("SELECT a.v, b.v FROM a JOIN b ON a.k = b.k");
    assert!(matches!(p, Plan::MultiShard(_)));
    assert_eq!(
        shard_sql(&p),
        r#"SELECT a.v, b.v FROM "public"."a_101" AS "a" JOIN "public"."b_201" AS "b" ON a.k = b.k"#
    );
    let p = plan("SELECT * FROM a x, b y WHERE y.k = x.k AND x.k = 5");
    assert!(matches!(p, Plan::Router(_)));
    let p = plan("SELECT * FROM a LEFT JOIN b USING (k)");
    assert!(matches!(p, Plan::MultiShard(_)));
    assert!(plan("SELECT * FROM a LEFT JOIN b ON a.k = b.k AND b.v > 1").is_multi_or_router());
}

#[test]
fn reference_joins_splice_the_one_shard() {
    let p = plan("SELECT * FROM a JOIN r ON a.v = r.v WHERE a.k = 3");
    assert!(matches!(p, Plan::Router(_)));
    assert!(
        shard_sql(&p).contains(r#""public"."r_400" AS "r""#),
        "{}",
        shard_sql(&p)
    );
    assert!(plan("SELECT * FROM a LEFT JOIN r ON a.v = r.v").is_multi_or_router());
}

#[test]
fn refuses_unprovable_joins() {
    assert!(refused("SELECT * FROM a JOIN b ON a.v = b.v"));
    assert!(refused("SELECT * FROM a JOIN c ON a.k = c.k"));
    assert!(refused("SELECT * FROM a JOIN b ON a.k = b.k OR a.v = 1"));
    assert!(refused("SELECT * FROM r LEFT JOIN a ON a.v = r.v"));
    assert!(refused(
        "SELECT * FROM a LEFT JOIN b ON a.v = b.v WHERE a.k = b.k"
    ));
    assert!(refused(
        "SELECT * FROM a, (SELECT * FROM b) s WHERE a.k = s.k"
    ));
    assert!(refused(
        "SELECT * FROM a JOIN b ON a.k = b.k JOIN c ON c.k = b.k"
    ));
}

/// The worker query of the combine stage run without user-defined aggregates.
fn combine_worker(sql: &str) -> String {
    match plan(sql) {
        Plan::MultiShard(m) => {
            let c = m.combine.as_ref().expect("a combine plan");
            let stage = c.partial.as_ref().unwrap_or(&c.raw);
            m.shard_sql(Some(stage), m.table.shards[1].shard_id)
        }
        other => panic!("not pushed down: {other:?}"),
    }
}

#[test]
fn joins_grouped_by_the_distribution_column_run_whole() {
    let w = combine_worker(
        "SELECT a.k, b.v, count(*) FROM a JOIN b ON a.k = b.k GROUP BY a.k, b.v HAVING count(*) > 1 ORDER BY 3 DESC LIMIT 5 OFFSET 2",
    );
    assert!(w.contains("GROUP BY a.k, b.v HAVING count(*) > 1"), "{w}");
    assert!(
        w.contains(r#""public"."a_101" AS "a""#) && w.contains(r#""public"."b_201" AS "b""#),
        "{w}"
    );
    assert!(
        w.contains("LIMIT 5::pg_catalog.int8 + 2::pg_catalog.int8")
            || w.contains("LIMIT 5::bigint + 2::bigint"),
        "{w}"
    );
    // By the nullable side's distribution column: partial aggregation instead.
    let w = combine_worker("SELECT b.k, count(*) FROM a LEFT JOIN b ON a.k = b.k GROUP BY b.k");
    assert!(w.contains("pgs_g0") && w.contains("pgs_a0"), "{w}");
    // Not by a distribution column: partials grouped by the column.
    let w = combine_worker("SELECT a.v, avg(b.v) FROM a JOIN b ON a.k = b.k GROUP BY a.v");
    assert!(w.contains("GROUP BY a.v") && w.contains("pgs_c0"), "{w}");
    // Aggregates that do not decompose: raw rows.
    let w = combine_worker("SELECT a.v, stddev(b.v) FROM a JOIN b ON a.k = b.k GROUP BY a.v");
    assert!(!w.contains("GROUP BY") && w.contains("pgs_r0"), "{w}");
    // Windows not partitioned by the distribution column: raw rows.
    let w = combine_worker("SELECT a.k, rank() OVER (ORDER BY b.v) FROM a JOIN b ON a.k = b.k");
    assert!(!w.contains("rank") && w.contains("pgs_r0"), "{w}");
    let w = combine_worker(
        "SELECT a.k, rank() OVER (PARTITION BY b.k ORDER BY b.v) FROM a JOIN b ON a.k = b.k",
    );
    assert!(w.contains("rank()"), "{w}");
}

#[test]
fn colocated_subqueries_are_pushed_down() {
    for sql in [
        "SELECT * FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k = a.k AND b.v > a.v)",
        "SELECT * FROM a WHERE NOT EXISTS (SELECT 1 FROM b x WHERE x.k = a.k)",
        "SELECT * FROM a WHERE k IN (SELECT k FROM b WHERE v > 1)",
        "SELECT * FROM a WHERE a.k NOT IN (SELECT b.k FROM b)",
        "SELECT * FROM a WHERE a.k IN (SELECT k FROM b GROUP BY k HAVING count(*) > 1)",
        "SELECT a.v, (SELECT max(v) FROM b WHERE b.k = a.k) FROM a",
        "SELECT * FROM a WHERE a.v > (SELECT v FROM b WHERE b.k = a.k ORDER BY v LIMIT 1)",
        "SELECT * FROM a WHERE k IN (SELECT k FROM a WHERE v = 3)",
        "SELECT * FROM a WHERE EXISTS (SELECT 1 FROM b JOIN r ON r.v = b.v WHERE b.k = a.k)",
        "SELECT * FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k = a.k AND EXISTS (SELECT 1 FROM a x WHERE x.k = b.k))",
    ] {
        let p = plan(sql);
        assert!(p.is_multi_or_router(), "{sql}: {p:?}");
        assert!(shard_sql(&p).contains("_101"), "{sql}: {}", shard_sql(&p));
    }
    let p = plan("SELECT * FROM a WHERE a.k = 5 AND EXISTS (SELECT 1 FROM b WHERE b.k = a.k)");
    assert!(matches!(p, Plan::Router(_)));
}

#[test]
fn subqueries_that_read_other_shards_are_refused() {
    for sql in [
        // Not correlated on the distribution column.
        "SELECT * FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.v = a.v)",
        "SELECT * FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k = a.k OR b.v = 1)",
        "SELECT * FROM a WHERE EXISTS (SELECT 1 FROM b)",
        // IN over another column, or over rows that are not a union per shard.
        "SELECT * FROM a WHERE a.v NOT IN (SELECT b.k FROM b)",
        "SELECT * FROM a WHERE a.k IN (SELECT b.v FROM b)",
        "SELECT * FROM a WHERE a.k IN (SELECT k FROM b LIMIT 3)",
        "SELECT * FROM a WHERE a.k IN (SELECT max(k) FROM b GROUP BY v)",
        "SELECT * FROM a WHERE a.k IN (SELECT max(k) FROM b)",
        // An ambiguous column (b.k or r.k) is no proof.
        "SELECT * FROM a WHERE a.k IN (SELECT k FROM b JOIN r ON r.v = b.v)",
        // Another co-location group; an outer join nulling the IN's column.
        "SELECT * FROM a WHERE EXISTS (SELECT 1 FROM c WHERE c.k = a.k)",
        "SELECT * FROM a LEFT JOIN b ON a.k = b.k WHERE NOT (b.k IN (SELECT k FROM a))",
        // Shadowed names: the inner `a` is not the outer one.
        "SELECT * FROM a WHERE EXISTS (SELECT 1 FROM b a WHERE a.k = a.k)",
    ] {
        assert!(refused(sql), "{sql}: {:?}", plan(sql));
    }
}

impl Plan {
    fn is_multi_or_router(&self) -> bool {
        matches!(self, Plan::MultiShard(_) | Plan::Router(_))
    }
}
