//! TRUNCATE / VACUUM / ANALYZE / LOCK of distributed tables: the client's statement
//! with the table swapped for shards, every option kept as written (`RESTART
//! IDENTITY`, `CASCADE`, `VACUUM (FULL, FREEZE)`, `ANALYZE t (a, b)`, `IN SHARE MODE
//! NOWAIT`): the parse tree is rewritten and deparsed, never the text edited.

use super::names::Names;
use crate::catalog::{shard_table_name, Catalog, DistTable, ShardId};
use crate::error::{PgError, PgResult};
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self, Node};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaintenanceKind {
    Truncate,
    Vacuum,
    Analyze,
    Lock,
}

impl MaintenanceKind {
    /// PostgreSQL's command tag.
    pub fn tag(self) -> &'static str {
        match self {
            MaintenanceKind::Truncate => "TRUNCATE TABLE",
            MaintenanceKind::Vacuum => "VACUUM",
            MaintenanceKind::Analyze => "ANALYZE",
            MaintenanceKind::Lock => "LOCK TABLE",
        }
    }

    /// Whether the statement writes on the shards' nodes (a block's node that only
    /// took locks commits with a plain COMMIT, not as a 2PC participant).
    pub fn writes(self) -> bool {
        self != MaintenanceKind::Lock
    }
}

/// One distributed table of the statement and the statement naming only it.
#[derive(Debug, Clone)]
pub struct TableStatement {
    pub table: Arc<DistTable>,
    stmt: N,
}

impl TableStatement {
    /// The statement over `shards` of the table (all on one node): one statement, so
    /// the node takes its locks and does its work in one go.
    pub fn for_shards(&self, shards: &[ShardId]) -> PgResult<String> {
        let rv_for = |template: &protobuf::RangeVar, shard: ShardId| protobuf::RangeVar {
            schemaname: self.table.schema.clone(),
            relname: shard_table_name(&self.table.name, shard),
            inh: template.inh,
            relpersistence: template.relpersistence.clone(),
            location: -1,
            ..Default::default()
        };
        let stmt = match &self.stmt {
            N::TruncateStmt(t) => {
                let template = range_var(&t.relations[0]).expect("checked at plan time");
                N::TruncateStmt(protobuf::TruncateStmt {
                    relations: shards
                        .iter()
                        .map(|s| node(N::RangeVar(rv_for(template, *s))))
                        .collect(),
                    ..t.clone()
                })
            }
            N::LockStmt(l) => {
                let template = range_var(&l.relations[0]).expect("checked at plan time");
                N::LockStmt(protobuf::LockStmt {
                    relations: shards
                        .iter()
                        .map(|s| node(N::RangeVar(rv_for(template, *s))))
                        .collect(),
                    ..l.clone()
                })
            }
            N::VacuumStmt(v) => {
                let mut rels = Vec::new();
                for s in shards {
                    for r in &v.rels {
                        let Some(N::VacuumRelation(vr)) = r.node.as_ref() else {
                            continue;
                        };
                        let template = vr.relation.as_ref().expect("checked at plan time");
                        rels.push(node(N::VacuumRelation(protobuf::VacuumRelation {
                            relation: Some(rv_for(template, *s)),
                            ..vr.clone()
                        })));
                    }
                }
                N::VacuumStmt(protobuf::VacuumStmt { rels, ..v.clone() })
            }
            _ => return Err(PgError::internal("not a statement pgshard propagates")),
        };
        stmt.deparse(Default::default())
            .map_err(|e| PgError::internal(format!("cannot deparse the shard statement: {e}")))
    }
}

/// The plan of a TRUNCATE / VACUUM / ANALYZE / LOCK naming distributed tables.
#[derive(Debug, Clone)]
pub struct PropagatePlan {
    pub kind: MaintenanceKind,
    pub tables: Vec<TableStatement>,
    /// LOCK: the client's statement as written, run first on the coordinator node. It
    /// locks the tables' shells (so the lock also holds off DDL and the coordinator's
    /// combine queries, which go through the shells) and any local table named with them.
    pub coordinator_sql: Option<String>,
}

fn node(n: N) -> Node {
    Node { node: Some(n) }
}

fn range_var(n: &Node) -> Option<&protobuf::RangeVar> {
    match n.node.as_ref() {
        Some(N::RangeVar(rv)) => Some(rv),
        _ => None,
    }
}

fn resolve<'a>(
    catalog: &'a Catalog,
    names: &Names,
    rv: &protobuf::RangeVar,
) -> Option<&'a Arc<DistTable>> {
    let schema = (!rv.schemaname.is_empty()).then_some(rv.schemaname.as_str());
    names.resolve(catalog, schema, &rv.relname)
}

/// `None` when the statement names no distributed table (it runs on the coordinator
/// node); a refusal when TRUNCATE / VACUUM / ANALYZE mix distributed and other tables
/// (LOCK takes both: the local ones are locked on the coordinator node).
pub fn plan_propagate(
    stmt: &N,
    text: &str,
    catalog: &Catalog,
    names: &Names,
) -> Option<PgResult<PropagatePlan>> {
    let mut tables: Vec<TableStatement> = Vec::new();
    let mut local = 0;
    let kind = match stmt {
        N::LockStmt(l) => {
            for r in &l.relations {
                let Some(rv) = range_var(r) else { continue };
                match resolve(catalog, names, rv) {
                    Some(table) if !tables.iter().any(|x| x.table.relid == table.relid) => tables
                        .push(TableStatement {
                            table: table.clone(),
                            stmt: N::LockStmt(protobuf::LockStmt {
                                relations: vec![r.clone()],
                                ..l.clone()
                            }),
                        }),
                    _ => {}
                }
            }
            MaintenanceKind::Lock
        }
        N::TruncateStmt(t) => {
            for r in &t.relations {
                let Some(rv) = range_var(r) else { continue };
                match resolve(catalog, names, rv) {
                    Some(table) if !tables.iter().any(|x| x.table.relid == table.relid) => tables
                        .push(TableStatement {
                            table: table.clone(),
                            stmt: N::TruncateStmt(protobuf::TruncateStmt {
                                relations: vec![r.clone()],
                                ..t.clone()
                            }),
                        }),
                    Some(_) => {}
                    None => local += 1,
                }
            }
            MaintenanceKind::Truncate
        }
        N::VacuumStmt(v) => {
            for r in &v.rels {
                let Some(N::VacuumRelation(vr)) = r.node.as_ref() else {
                    continue;
                };
                let Some(rv) = vr.relation.as_ref() else {
                    continue;
                };
                match resolve(catalog, names, rv) {
                    Some(table) => match tables.iter_mut().find(|x| x.table.relid == table.relid) {
                        // `ANALYZE t (a), t (b)`: both column lists, shard by shard.
                        Some(TableStatement {
                            stmt: N::VacuumStmt(s),
                            ..
                        }) => s.rels.push(r.clone()),
                        _ => tables.push(TableStatement {
                            table: table.clone(),
                            stmt: N::VacuumStmt(protobuf::VacuumStmt {
                                rels: vec![r.clone()],
                                ..v.clone()
                            }),
                        }),
                    },
                    None => local += 1,
                }
            }
            if v.is_vacuumcmd {
                MaintenanceKind::Vacuum
            } else {
                MaintenanceKind::Analyze
            }
        }
        _ => return None,
    };
    if tables.is_empty() {
        return None;
    }
    if local > 0 {
        let verb = kind.tag().split(' ').next().unwrap_or_default();
        return Some(Err(PgError::not_supported(format!(
            "{verb} mixing distributed and local tables is not supported yet: name them in separate statements"
        ))));
    }
    let coordinator_sql = (kind == MaintenanceKind::Lock).then(|| text.to_string());
    Some(Ok(PropagatePlan {
        kind,
        tables,
        coordinator_sql,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{DistColumn, PartitionMethod};
    use crate::sharding::hash::oid;
    use crate::sharding::ranges::ShardIndexer;

    fn catalog() -> Catalog {
        let mut c = Catalog::default();
        for (relid, schema, name) in [(1, "public", "t"), (2, "app", "u")] {
            c.add_table(DistTable {
                relid,
                schema: schema.into(),
                name: name.into(),
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
                indexer: ShardIndexer::for_intervals::<crate::catalog::ShardInterval>(&[]),
                shards: vec![],
                columns: vec!["k".into(), "v".into()],
                indexes: vec![],
                sequence_columns: vec![],
            });
        }
        c
    }

    fn plan_of(sql: &str) -> Option<PgResult<PropagatePlan>> {
        let stmt = crate::sql::parse::parse(sql).unwrap().remove(0);
        let c = catalog();
        plan_propagate(
            stmt.node.as_ref().unwrap(),
            sql,
            &c,
            &crate::planner::Names::on_path(&c, &["public"]),
        )
    }

    fn shard_sql(sql: &str) -> Vec<String> {
        let p = plan_of(sql).unwrap().unwrap();
        p.tables
            .iter()
            .map(|t| t.for_shards(&[7, 8]).unwrap())
            .collect()
    }

    #[test]
    fn truncate_keeps_its_options_and_names_every_shard_of_the_node() {
        assert_eq!(
            shard_sql("truncate only t restart identity cascade"),
            ["TRUNCATE ONLY public.t_7, ONLY public.t_8 RESTART IDENTITY CASCADE"]
        );
        assert_eq!(
            shard_sql("TRUNCATE TABLE t, app.u"),
            [
                "TRUNCATE public.t_7, public.t_8",
                "TRUNCATE app.u_7, app.u_8"
            ]
        );
        assert_eq!(
            plan_of("truncate t").unwrap().unwrap().kind.tag(),
            "TRUNCATE TABLE"
        );
    }

    #[test]
    fn vacuum_and_analyze_keep_options_and_column_lists() {
        assert_eq!(
            shard_sql("vacuum (full, analyze) t (v)"),
            ["VACUUM (FULL, ANALYZE) public.t_7(v), public.t_8(v)"]
        );
        assert_eq!(
            shard_sql("VACUUM FREEZE t"),
            ["VACUUM (FREEZE) public.t_7, public.t_8"]
        );
        let p = plan_of("analyze t (k), t (v)").unwrap().unwrap();
        assert_eq!(p.kind, MaintenanceKind::Analyze);
        assert_eq!(
            p.tables[0].for_shards(&[7]).unwrap(),
            "ANALYZE public.t_7(k), public.t_7(v)"
        );
    }

    #[test]
    fn lock_keeps_its_mode_and_nowait_and_locks_local_tables_on_the_coordinator() {
        assert_eq!(
            shard_sql("lock table only t in share row exclusive mode nowait"),
            ["LOCK TABLE ONLY public.t_7, ONLY public.t_8 IN SHARE ROW EXCLUSIVE MODE NOWAIT"]
        );
        assert_eq!(
            shard_sql("LOCK t, other, app.u"),
            [
                "LOCK TABLE public.t_7, public.t_8",
                "LOCK TABLE app.u_7, app.u_8"
            ]
        );
        let p = plan_of("lock t, other in exclusive mode").unwrap().unwrap();
        assert_eq!(p.kind.tag(), "LOCK TABLE");
        assert!(!p.kind.writes());
        assert_eq!(
            p.coordinator_sql.as_deref(),
            Some("lock t, other in exclusive mode")
        );
        assert!(plan_of("lock other").is_none());
        assert!(plan_of("truncate t")
            .unwrap()
            .unwrap()
            .coordinator_sql
            .is_none());
    }

    #[test]
    fn hostile_names_are_quoted_by_the_deparser() {
        let mut c = catalog();
        c.add_table(DistTable {
            relid: 3,
            schema: "public".into(),
            name: "we\"ird; drop".into(),
            ..(*c.qualified("public", "t").unwrap().clone()).clone()
        });
        let stmt = crate::sql::parse::parse("truncate \"we\"\"ird; drop\"")
            .unwrap()
            .remove(0);
        let p = plan_propagate(
            stmt.node.as_ref().unwrap(),
            "",
            &c,
            &crate::planner::Names::on_path(&c, &["public"]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            p.tables[0].for_shards(&[7]).unwrap(),
            "TRUNCATE public.\"we\"\"ird; drop_7\""
        );
    }

    #[test]
    fn local_tables_run_on_the_coordinator_and_mixtures_are_refused() {
        assert!(plan_of("truncate other").is_none());
        assert!(plan_of("vacuum").is_none());
        assert!(plan_of("analyze other (a)").is_none());
        for sql in ["truncate t, other", "vacuum t, other"] {
            assert!(
                matches!(plan_of(sql), Some(Err(e)) if e.code == "0A000"),
                "{sql}"
            );
        }
    }
}
