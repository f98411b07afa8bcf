//! The repartition step's decisions over the join tests' catalog: `a`, `b`
//! (co-located on `k`), `c` (another group, on `k`), reference `r`; columns `k`, `v`,
//! `<name>_only`, all of one hashable type here.

use super::*;
use crate::planner::join::tests::plan_over_abcr;

fn repartition_plan(sql: &str) -> Arc<RepartitionPlan> {
    match plan_over_abcr(sql) {
        Plan::Repartition(p) => p,
        other => panic!("not a repartition plan: {other:?}"),
    }
}

fn catalog() -> Catalog {
    use crate::planner::join::tests::table;
    let mut c = Catalog::default();
    c.add_table(table(1, "a", PartitionMethod::Hash, 1, 100));
    c.add_table(table(2, "b", PartitionMethod::Hash, 1, 200));
    c.add_table(table(3, "c", PartitionMethod::Hash, 2, 300));
    c.add_table(table(4, "r", PartitionMethod::Reference, 3, 400));
    c
}

fn int4(_: usize, _: &str) -> Option<ColumnType> {
    Some(ColumnType {
        type_oid: 23,
        definition: "integer".into(),
        hashable: true,
    })
}

fn decided(sql: &str, est: &[f64]) -> Decision {
    let p = repartition_plan(sql);
    decide(&p, est, &int4, &catalog(), &|_| false).expect("a strategy")
}

#[test]
fn non_colocated_and_non_distribution_joins_repartition() {
    let p = repartition_plan("SELECT a.v, c.v FROM a JOIN c ON a.k = c.k");
    assert_eq!(p.rels.len(), 2);
    assert!(matches!(*p.fallback, Plan::Recursive(_)));
    let p = repartition_plan("SELECT a.v FROM a JOIN b ON a.v = b.b_only WHERE b.v > 3");
    // A name counts for every table that has such a column (a superset).
    assert_eq!(
        p.rels[1].needed,
        vec!["v".to_string(), "b_only".to_string()]
    );
    assert_eq!(p.rels[0].needed, vec!["v".to_string()]);
    assert_eq!(p.rels[1].own_conjuncts.len(), 1);
}

#[test]
fn small_side_broadcast_large_side_repartitioned() {
    let d = decided("SELECT a.v, c.v FROM a JOIN c ON a.v = c.k", &[50.0, 1e6]);
    assert_eq!(d.moves.len(), 1);
    assert_eq!(d.moves[0].rel, 0);
    assert_eq!(d.moves[0].kind, MoveKind::Broadcast);
    let d = decided("SELECT a.v, c.v FROM a JOIN c ON a.v = c.k", &[1e6, 1e6]);
    assert_eq!(d.moves.len(), 1);
    // `a` joins `c`'s distribution column: single repartition of `a` on `v`.
    assert_eq!(d.moves[0].rel, 0);
    assert!(matches!(&d.moves[0].kind, MoveKind::Repartition { column, .. } if column == "v"));
    assert!(
        matches!(d.outer_plan, Plan::MultiShard(_)),
        "{:?}",
        d.outer_plan
    );
    // Neither side on its distribution column: dual repartition.
    let d = decided("SELECT * FROM a JOIN c ON a.v = c.v", &[2e6, 1e6]);
    assert_eq!(d.moves.len(), 2);
    assert!(d
        .moves
        .iter()
        .all(|m| matches!(&m.kind, MoveKind::Repartition { column, .. } if column == "v")));
}

#[test]
fn outer_joins_keep_the_preserved_side_unbroadcast() {
    // `c` is preserved: broadcasting it would lose its unmatched rows' uniqueness.
    let d = decided("SELECT * FROM c LEFT JOIN a ON a.v = c.k", &[1e6, 10.0]);
    assert!(d
        .moves
        .iter()
        .all(|m| m.kind != MoveKind::Broadcast || m.rel != 0));
    let q = source_copy(
        &repartition_plan("SELECT * FROM c LEFT JOIN a ON a.v = c.k"),
        &d.moves[0],
        101,
    )
    .unwrap();
    assert!(q.starts_with("COPY (SELECT"), "{q}");
}

#[test]
fn references_inside_subqueries_move() {
    // Correlated on `c.k = a.v`: `a` re-hashed on `v` into `c`'s layout, and the
    // renamed statement pushes the subquery down.
    let sql = "SELECT c.v FROM c WHERE c.v < (SELECT avg(a.k) FROM a WHERE a.v = c.k AND a.k > 2)";
    let p = repartition_plan(sql);
    assert_eq!(p.rels.len(), 2);
    assert_eq!(p.rels[1].own_conjuncts.len(), 1);
    assert_eq!(p.rels[1].probed, vec!["v".to_string()]);
    assert!(p.rels[0].probed.is_empty());
    let d = decided(sql, &[1e6, 1e6]);
    assert_eq!(d.moves.len(), 1);
    assert_eq!(d.moves[0].rel, 1);
    assert!(matches!(&d.moves[0].kind, MoveKind::Repartition { column, .. } if column == "v"));
    assert!(
        d.outer.text.contains("pgshard_intermediate"),
        "{}",
        d.outer.text
    );
    // The same table read outside and inside under one name, joined alike: one move
    // serves both references (TPC-H Q17's shape).
    let sql = "SELECT sum(a.k) FROM a, c WHERE c.k = a.v \
               AND a.k < (SELECT avg(a.k) FROM a WHERE a.v = c.k)";
    let p = repartition_plan(sql);
    assert_eq!(p.rels.len(), 2, "{:?}", p.rels);
    assert_eq!(p.rels[0].also.len(), 1);
    let d = decided(sql, &[1e6, 1e6]);
    assert_eq!(d.moves.len(), 1);
    assert_eq!(
        d.outer.text.matches("pgshard_intermediate").count(),
        2,
        "{}",
        d.outer.text
    );
    // NOT IN over a small filtered table: broadcast.
    let sql = "SELECT a.v FROM a WHERE a.v NOT IN (SELECT c.v FROM c WHERE c.c_only > 3)";
    let d = decided(sql, &[1e6, 10.0]);
    assert_eq!(d.moves.len(), 1);
    assert_eq!(d.moves[0].kind, MoveKind::Broadcast);
    // An IN link on non-distribution columns: the inner table re-hashed on it.
    let sql = "SELECT a.v FROM a WHERE a.k IN (SELECT c.v FROM c)";
    let d = decided(sql, &[1e6, 1e6]);
    assert!(
        d.moves
            .iter()
            .any(|m| matches!(&m.kind, MoveKind::Repartition { column, .. } if column == "v")),
        "{:?}",
        d.moves
    );
}

#[test]
fn subquery_columns_resolve_innermost_first() {
    // `v` inside names `c.v`, not `a.v`: no equality `a.v = c.k`, so `c.k = v` is c's own.
    let p = repartition_plan("SELECT a.v FROM a WHERE EXISTS (SELECT 1 FROM c WHERE c.k = v)");
    assert!(p.equalities.is_empty(), "{:?}", p.equalities);
    assert_eq!(p.rels[1].own_conjuncts.len(), 1);
}
