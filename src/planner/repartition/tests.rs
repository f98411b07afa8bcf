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
        array_oid: 1007,
        indexed: true,
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
    // `v` inside names `c.v`, not `a.v`: no equality `a.v = c.k`, so `c.k = v` is c's own;
    // the one equality is the correlation `c.c_only = a.a_only` (correlated, the
    // subquery is not run once as a value).
    let p = repartition_plan(
        "SELECT a.v FROM a WHERE EXISTS (SELECT 1 FROM c WHERE c.k = v AND c.c_only = a.a_only)",
    );
    assert_eq!(p.equalities.len(), 1, "{:?}", p.equalities);
    assert!(
        !format!("{:?}", p.equalities).contains("\"v\""),
        "{:?}",
        p.equalities
    );
    assert_eq!(p.rels[1].own_conjuncts.len(), 1);
}

/// The semijoins allowed for reference `rel` of `sql`: (column, source table, its column).
fn semijoins_of(sql: &str, rel: usize) -> Vec<(String, String, String)> {
    let p = repartition_plan(sql);
    p.semijoins[rel]
        .iter()
        .map(|s| {
            (
                s.column.clone(),
                s.source_table.name.clone(),
                s.source_column.clone(),
            )
        })
        .collect()
}

fn sj(column: &str, table: &str, source_column: &str) -> Vec<(String, String, String)> {
    vec![(column.into(), table.into(), source_column.into())]
}

#[test]
fn semijoins_reduce_what_only_matching_rows_serve() {
    // An inner equality (WHERE or ON) with a filtered reference.
    let sql = "SELECT a.v FROM a, c WHERE a.v = c.v AND c.c_only = 1";
    assert_eq!(semijoins_of(sql, 0), sj("v", "c", "v"));
    // c has the filter; a has none: c is not reduced by a.
    assert!(semijoins_of(sql, 1).is_empty());
    let sql = "SELECT a.v FROM a JOIN c ON a.v = c.v WHERE c.c_only = 1";
    assert_eq!(semijoins_of(sql, 0), sj("v", "c", "v"));
    // Through a chain: a.v = b.b_only (b unfiltered), b.b_only = c.k (c filtered).
    let sql = "SELECT a.v FROM a, c, r WHERE a.v = r.r_only AND r.r_only = c.k AND c.c_only = 1";
    assert_eq!(semijoins_of(sql, 0), sj("v", "c", "k"));
    // TPC-H Q17: the outer and the correlated inner reference (one move) both reach c.
    let sql = "SELECT sum(a.k) FROM a, c WHERE c.k = a.v AND c.c_only = 3 \
               AND a.k < (SELECT avg(a.k) FROM a WHERE a.v = c.k)";
    assert_eq!(semijoins_of(sql, 0), sj("v", "c", "k"));
    // A correlated scalar subquery in the select list: evaluated for c's kept rows.
    let sql = "SELECT c.v, (SELECT count(*) FROM a WHERE a.v = c.v) FROM c WHERE c.c_only = 1";
    assert_eq!(semijoins_of(sql, 0), sj("v", "c", "v"));
    // An IN link, and TPC-H Q20's chain through it (a.v = c.k, c.k IN filtered r).
    let sql = "SELECT a.v FROM a WHERE a.v IN (SELECT c.v FROM c WHERE c.c_only = 1)";
    assert_eq!(semijoins_of(sql, 0), sj("v", "c", "v"));
    let sql = "SELECT c.v FROM c WHERE c.k IN (SELECT r.k FROM r WHERE r.r_only = 2) \
               AND c.v > (SELECT sum(a.k) FROM a WHERE a.v = c.k)";
    assert_eq!(semijoins_of(sql, 2), sj("v", "r", "k"));
}

#[test]
fn sql_syntax_functions_filter_a_semijoins_source() {
    // TPC-H Q22: the anti join's inner side (c) serves only the outer rows kept by
    // a filter written with SQL's substring syntax (a pg_catalog built-in).
    let sql = "SELECT a.v FROM a WHERE substring(a.a_only::text FROM 1 FOR 2) IN ('13', '31') \
               AND NOT EXISTS (SELECT 1 FROM c WHERE c.v = a.v)";
    assert_eq!(semijoins_of(sql, 1), sj("v", "a", "v"));
    // A function called by name may be anyone's, or VOLATILE: no filter of a's own.
    for f in ["lower(a.a_only::text) = 'x'", "a.k > random() * 10"] {
        let sql =
            format!("SELECT a.v FROM a WHERE {f} AND NOT EXISTS (SELECT 1 FROM c WHERE c.v = a.v)");
        assert!(semijoins_of(&sql, 1).is_empty(), "{sql}");
    }
}

#[test]
fn semijoins_refused_where_unmatched_rows_matter() {
    for (sql, rel) in [
        // Outer joins: the preserved side keeps unmatched rows; the nullable side's
        // filter is in ON; a nullable reference's rows are not reduced.
        (
            "SELECT * FROM a LEFT JOIN c ON a.v = c.v AND c.c_only = 1",
            0,
        ),
        (
            "SELECT * FROM a LEFT JOIN c ON a.v = c.v WHERE c.c_only = 1",
            0,
        ),
        (
            "SELECT * FROM c LEFT JOIN a ON a.v = c.v WHERE c.c_only = 1",
            1,
        ),
        (
            "SELECT * FROM a FULL JOIN c ON a.v = c.v WHERE c.c_only = 1",
            0,
        ),
        // Anti joins: a's unmatched rows are the answer.
        (
            "SELECT * FROM a WHERE NOT EXISTS (SELECT 1 FROM c WHERE c.v = a.v AND c.c_only = 1)",
            0,
        ),
        (
            "SELECT * FROM a WHERE a.v NOT IN (SELECT c.v FROM c WHERE c.c_only = 1)",
            0,
        ),
        // EXISTS / scalar subqueries constrain nothing outwards.
        (
            "SELECT * FROM a WHERE EXISTS (SELECT 1 FROM c WHERE c.v = a.v AND c.c_only = 1)",
            0,
        ),
        (
            "SELECT * FROM a WHERE a.k > (SELECT count(*) FROM c WHERE c.v = a.v AND c.c_only = 1)",
            0,
        ),
        // An OR'ed equality, an IN under OR.
        (
            "SELECT * FROM a, c WHERE (a.v = c.v OR a.k = 1) AND c.c_only = 1",
            0,
        ),
        (
            "SELECT * FROM a WHERE a.v IN (SELECT c.v FROM c WHERE c.c_only = 1) OR a.k = 2",
            0,
        ),
        // The other side has no filter of its own.
        ("SELECT * FROM a, c WHERE a.v = c.v AND a.k = 3", 0),
        ("SELECT * FROM a, c WHERE a.v = c.v AND c.c_only = a.k", 0),
    ] {
        assert!(
            semijoins_of(sql, rel).is_empty(),
            "{sql}: {:?}",
            semijoins_of(sql, rel)
        );
    }
}

#[test]
fn semijoin_chosen_by_estimates_and_types() {
    let sql = "SELECT a.v, c.v FROM a, c WHERE a.v = c.k AND c.c_only = 1";
    // a moved (re-hashed on v into c's layout), c's filtered keys few: reduced.
    let d = decided(sql, &[1e6, 2e4]);
    assert_eq!(d.moves.len(), 1);
    assert_eq!(d.moves[0].rel, 0);
    let s = d.moves[0].semijoin.as_ref().expect("reduced");
    assert_eq!((s.column.as_str(), s.source_column.as_str()), ("v", "k"));
    // Over the cap of keys, or not fewer than the moved rows: not reduced.
    let d = decided(sql, &[1e7, 2e5]);
    assert!(
        d.moves.iter().all(|m| m.semijoin.is_none()),
        "{:?}",
        d.moves
    );
    // Columns of different types: the keys' text would not read back alike.
    let p = repartition_plan(sql);
    let mixed = |i: usize, c: &str| {
        Some(ColumnType {
            type_oid: if i == 0 && c == "v" { 20 } else { 23 },
            definition: String::new(),
            hashable: true,
            array_oid: 0,
            indexed: true,
        })
    };
    let d = decide(&p, &[1e6, 2e4], &mixed, &catalog(), &|_| false);
    assert!(d
        .iter()
        .flat_map(|d| &d.moves)
        .all(|m| m.semijoin.is_none()));
    // The reduced read: the keys a table on the node, never spliced; several shards
    // read at once.
    let d = decided(sql, &[1e6, 2e4]);
    let q = source_select(
        &p,
        0,
        &d.moves[0].table.columns,
        move_hash(&d.moves[0]),
        &[101, 103],
        Some(KeysFilter::Query("v", "SELECT k FROM keys_table".into())),
    )
    .unwrap();
    assert!(q.contains(" FROM (SELECT "), "{q}");
    assert!(q.contains("FROM public.a_101 UNION ALL SELECT"), "{q}");
    assert!(q.ends_with("a.v IN (SELECT k FROM keys_table)"), "{q}");
    let k = semijoin_key_select(d.moves[0].semijoin.as_ref().unwrap(), 301).unwrap();
    assert!(
        k.starts_with(
            "SELECT DISTINCT c.k FROM public.c_301 c WHERE c.k IS NOT NULL AND c.c_only = 1"
        ),
        "{k}"
    );
}

#[test]
fn a_reference_tables_keys_enter_the_estimate() {
    // TPC-H Q11: c (supplier) is reduced by the filtered reference r (nation): its
    // estimate explains the reduction, so that it may be broadcast.
    let p = repartition_plan(
        "SELECT count(*) FROM a, c, r WHERE a.v = c.v AND c.v = r.k AND r.r_only = 2",
    );
    let q = estimate_query(&p, 1).unwrap().unwrap();
    assert!(q.contains(" IN (SELECT DISTINCT r.k FROM"), "{q}");
    assert!(q.contains("r.r_only = 2"), "{q}");
    // Without a filtered reference table, the plain estimate.
    let p = repartition_plan("SELECT count(*) FROM a, c WHERE a.v = c.v AND c.c_only = 2");
    let q = estimate_query(&p, 0).unwrap().unwrap();
    assert!(!q.contains(" IN ("), "{q}");
}

#[test]
fn staying_references_filtered_by_few_keys_at_their_level() {
    // `c` (small after its own conjunct) is broadcast; `a` and `b` stay, `a` filtered
    // by `c`'s keys in its own level, the correlated `b` in the subquery's.
    let sql = "SELECT a.v FROM a, c WHERE a.v = c.v AND c.c_only = 1 \
               AND EXISTS (SELECT 1 FROM b WHERE b.v = c.v AND b.k = a.k)";
    let p = repartition_plan(sql);
    let d = decide(&p, &[1e6, 100.0, 1e6], &int4, &catalog(), &|_| false).expect("a strategy");
    assert_eq!(d.moves.len(), 1);
    let filtered: Vec<usize> = d.staying.iter().map(|f| f.rel).collect();
    assert_eq!(filtered, vec![0, 2]);
    // Keys that need quoting inside the array and inside the literal.
    let keys: Vec<bytes::Bytes> = ["1", "it's", "a\"b\\c", "{x,y}"]
        .iter()
        .map(|k| bytes::Bytes::from(k.to_string()))
        .collect();
    let filters: Vec<(&StayingFilter, &[bytes::Bytes])> =
        d.staying.iter().map(|f| (f, &keys[..])).collect();
    let tree = staying::with_filters(&d.renamed, &p, &filters).expect("filtered");
    let text = deparse_node(&tree).unwrap();
    assert!(
        text.ends_with(") AND a.v = ANY(E'{\"1\",\"it''s\",\"a\\\\\"b\\\\\\\\c\",\"{x,y}\"}')"),
        "{text}"
    );
    assert!(text.contains("b.k = a.k) AND b.v = ANY("), "{text}");
    // The literal reads back as the keys' array.
    let parsed = crate::sql::parse::parse(&text).unwrap();
    let json = serde_json::to_string(parsed[0].node.as_ref().unwrap()).unwrap();
    let array = String::from_utf8(keys_array(&keys).to_vec()).unwrap();
    assert_eq!(array, r#"{"1","it's","a\"b\\c","{x,y}"}"#);
    let sval = serde_json::to_string(&array).unwrap();
    assert_eq!(json.matches(&sval[..]).count(), 2, "{json}");
    // Few keys only: the source estimated over the cap, or the staying side not much
    // larger than the keys, filters nothing.
    let d = decide(&p, &[1e6, 5000.0, 1e6], &int4, &catalog(), &|_| false).unwrap();
    assert!(d.staying.is_empty());
    let d = decide(&p, &[500.0, 100.0, 500.0], &int4, &catalog(), &|_| false).unwrap();
    assert!(d.staying.is_empty());
    // Nor without an index the filter could probe.
    let unindexed = |i: usize, c: &str| {
        int4(i, c).map(|t| ColumnType {
            indexed: false,
            ..t
        })
    };
    let d = decide(&p, &[1e6, 100.0, 1e6], &unindexed, &catalog(), &|_| false).unwrap();
    assert!(d.staying.is_empty());
    // Nor by a source that stays (its rows are on the shard's node already).
    let p = repartition_plan(
        "SELECT a.v FROM a, b, c WHERE a.k = b.k AND a.v = c.k AND b.v = c.v AND b.b_only = 1",
    );
    let d = decide(&p, &[1e6, 100.0, 1e6], &int4, &catalog(), &|_| false).unwrap();
    assert!(d.moves.iter().all(|m| m.rel != 1), "{:?}", d.moves);
    assert!(
        d.staying.iter().all(|f| f.semijoin.source != 1),
        "{:?}",
        d.staying
    );
}

#[test]
fn a_reference_tables_keys_filtered_through_another_reference_table() {
    // TPC-H Q5 / Q8: `c` joins `r1` (unfiltered), whose rows that matter join the
    // filtered `r2`: `r1`'s keys are those matching `r2`'s kept rows.
    let sql = "SELECT a.v FROM a, c, r r1, r r2 \
               WHERE a.k = c.k AND c.v = r1.k AND r1.v = r2.k AND r2.r_only = 1";
    let p = repartition_plan(sql);
    let by_r1: Vec<&Semijoin> = p.semijoins[1]
        .iter()
        .filter(|s| s.source_alias() == "r1")
        .collect();
    assert_eq!(by_r1.len(), 1, "{:?}", p.semijoins[1]);
    assert_eq!(
        (by_r1[0].column.as_str(), by_r1[0].source_column.as_str()),
        ("v", "k")
    );
    let shard = by_r1[0].source_table.shards[0].shard_id;
    let keys = semijoin_key_select(by_r1[0], shard).unwrap();
    assert!(
        keys.contains(&format!(
            "r1.v IN (SELECT r2.k FROM public.r_{shard} r2 WHERE r2.r_only = 1)"
        )),
        "{keys}"
    );
    // Not through an outer join's nullable side, nor when `r2` is unfiltered.
    let sql = "SELECT a.v FROM a, c, r r1 LEFT JOIN r r2 ON r1.v = r2.k AND r2.r_only = 1 \
               WHERE a.k = c.k AND c.v = r1.k";
    assert!(repartition_plan(sql).semijoins[1].is_empty());
    let sql = "SELECT a.v FROM a, c, r r1, r r2 WHERE a.k = c.k AND c.v = r1.k AND r1.v = r2.k";
    assert!(repartition_plan(sql).semijoins[1].is_empty());
}
