//! Planner decisions on statements reading views over a distributed table: simple
//! views merged (routed, multi-shard), others planned as subqueries, CTE names hiding
//! views, writes and missing privileges refused.

use super::ViewDef;
use crate::catalog::Catalog;
use crate::planner::{plan, Names, Plan};
use std::sync::Arc;

fn catalog() -> Catalog {
    crate::planner::tests::catalog_of_t(&["k", "v", "w"])
}

fn view(
    oid: u32,
    name: &str,
    definition: &str,
    columns: &[&str],
    selectable: bool,
) -> Arc<ViewDef> {
    Arc::new(ViewDef {
        oid,
        schema: "public".into(),
        name: name.into(),
        definition: definition.into(),
        columns: columns.iter().map(|c| c.to_string()).collect(),
        selectable,
    })
}

fn plan_of(sql: &str) -> Plan {
    let cat = catalog();
    let names = Names::on_path(&cat, &["public"]).with_views(
        [
            view(
                1,
                "sv",
                " SELECT t.k, t.v FROM t WHERE t.v > 3;",
                &["k", "v"],
                true,
            ),
            view(
                2,
                "rv",
                " SELECT t.v AS k, t.k AS v FROM t;",
                &["k", "v"],
                true,
            ),
            view(
                3,
                "nv",
                " SELECT sv.k FROM sv WHERE sv.k < 9;",
                &["k"],
                true,
            ),
            view(4, "hidden", " SELECT t.k FROM t;", &["k"], false),
        ]
        .into_iter()
        .map(|v| ((None, v.name.clone()), v)),
    );
    let stmt = crate::sql::parse::parse(sql).unwrap().remove(0);
    plan(&stmt, &cat, &names, &|_| false).unwrap()
}

#[test]
fn simple_views_merge_into_the_query() {
    match plan_of("select * from sv where k = 5") {
        Plan::Router(r) => {
            let sql = r.template.for_shard(102009);
            assert!(sql.contains("\"t_102009\""), "{sql}");
            assert!(sql.contains("sv.v > 3"), "{sql}");
            // Made from pgshard's text: no shape for the client's.
            assert!(r.relation_span.is_none() && r.value_exprs.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(plan_of("select v from sv"), Plan::MultiShard(_)));
    // A view over a view merges twice.
    assert!(matches!(
        plan_of("select k from nv where k = 2"),
        Plan::Router(_)
    ));
}

#[test]
fn other_views_are_subqueries() {
    // `k` of rv is t.v: the filter must not route.
    assert!(!matches!(
        plan_of("select * from rv where k = 5"),
        Plan::Router(_)
    ));
    // The hidden column `w` named: not merged, so PostgreSQL's 42703 stays.
    assert!(!matches!(
        plan_of("select w from sv where k = 5"),
        Plan::Router(_)
    ));
}

#[test]
fn cte_names_hide_views() {
    assert!(matches!(
        plan_of("with sv as (select 1 as k) select * from sv"),
        Plan::Local
    ));
}

#[test]
fn writes_and_missing_privileges_are_refused() {
    match plan_of("insert into sv values (1, 2)") {
        Plan::Unsupported(e) => assert_eq!(e.code, "0A000"),
        other => panic!("{other:?}"),
    }
    match plan_of("select * from hidden") {
        Plan::Unsupported(e) => assert_eq!(e.code, "42501", "{}", e.message),
        other => panic!("{other:?}"),
    }
}
