//! Writes on reference tables: the statement on every placement, node by node.
//! When the session has no transaction block and several nodes are written, pgshard
//! opens one of its own, committed with 2PC (or 1PC if the session chose it).

use super::*;
use crate::catalog::DistTable;
use crate::planner::insert_select::InsertViaCoordinatorPlan;
use crate::planner::template::ShardSqlTemplate;
use crate::planner::DefaultUse;

/// The nodes holding a reference table's placements, in group order.
pub(super) fn reference_nodes(catalog: &Catalog, table: &DistTable) -> PgResult<Vec<NodeAddr>> {
    let shard = table.shards.first().ok_or_else(|| {
        PgError::internal(format!("reference table \"{}\" has no shard", table.name))
    })?;
    let mut groups = shard.placement_groups.clone();
    groups.sort_unstable();
    let mut nodes = Vec::new();
    for g in groups {
        let n = catalog.placement_node(shard.shard_id, g)?;
        nodes.push(NodeAddr {
            host: n.host.clone(),
            port: n.port,
        });
    }
    Ok(nodes)
}

impl Session {
    /// A write on a reference table: the statement on every placement, one node after
    /// the other in group order, so that sessions writing the same rows queue on the
    /// first placement instead of deadlocking across nodes. It runs in the client's
    /// block or in pgshard's own; several placements commit with two-phase commit.
    /// RETURNING rows and the row count are the first placement's.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn reference_write(
        &mut self,
        table: &DistTable,
        template: &ShardSqlTemplate,
        tag: &str,
        (functions, defaults, evaluate_once): (
            &[String],
            &DefaultUse,
            Option<&InsertViaCoordinatorPlan>,
        ),
        params: &BoundParams<'_>,
        formats: &[i16],
        describe: bool,
        sink: &mut ResultSink,
    ) -> PgResult<()> {
        let kinds = self.function_kinds(functions).await?;
        let non_immutable = functions
            .iter()
            .zip(&kinds)
            .find(|(_, k)| !k.is_some_and(|k| k.immutable));
        let volatile_default = match non_immutable {
            Some(_) => None,
            None => self.volatile_default(table, defaults).await?,
        };
        if let (Some(plan), true) = (
            evaluate_once,
            non_immutable.is_some() || volatile_default.is_some(),
        ) {
            // The rows computed once on the coordinator node, then copied to every
            // placement: the same values everywhere.
            return self
                .insert_via_coordinator(plan, params, formats, describe, sink)
                .await;
        }
        if let Some((name, _)) = non_immutable {
            return Err(PgError::not_supported(format!(
                "pgshard does not support calling the non-immutable function {name}() in a write \
                 to the reference table \"{}\": each placement would compute its own value",
                table.name
            )));
        }
        if let Some((column, name)) = volatile_default {
            return Err(PgError::not_supported(format!(
                "pgshard does not support a write to the reference table \"{}\" that fills \
                 column \"{column}\" with its default, which calls the non-immutable function \
                 {name}(): each placement would compute its own value; give the column a value",
                table.name
            )));
        }
        let catalog = self.shared.catalog.snapshot();
        let nodes = reference_nodes(&catalog, table)?;
        let shard = table.shards.first().expect("reference_nodes found it");
        let sql = template.for_shard(shard.shard_id);
        let extended = params.bind.is_some();
        // pgshard's own block even for one placement: a placement added meanwhile
        // (see below) joins the write.
        let own = self.begin_own_block().await?;
        let mut count = None;
        let mut result = Ok(());
        let mut nodes = nodes;
        let mut i = 0;
        loop {
            if i == 1 {
                // The first placement is held now: a new placement being copied by
                // `replicate_reference_tables` (it holds the first placement until every
                // pgshard process has loaded it) is in the catalog by this point.
                let fresh = self.shared.catalog.snapshot();
                if let Some(t) = fresh.tables_by_oid.get(&table.relid) {
                    for n in reference_nodes(&fresh, t).unwrap_or_default() {
                        if !nodes.contains(&n) {
                            nodes.push(n);
                        }
                    }
                }
            }
            let Some(addr) = nodes.get(i).cloned() else {
                break;
            };
            i += 1;
            let one = [(addr, vec![sql.clone()])];
            let r = if count.is_none() {
                self.insert_on_nodes(&one, params, formats, describe, sink)
                    .await
            } else {
                let mut ignored = ResultSink::default();
                self.insert_on_nodes(&one, params, formats, false, &mut ignored)
                    .await
            };
            match r {
                Ok(n) => {
                    count.get_or_insert(n);
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if let Err(e) = result {
            self.end_own_block(own, false, extended).await.ok();
            return Err(e);
        }
        self.end_own_block(own, true, extended).await?;
        let n = count.unwrap_or(0);
        sink.complete(&if tag == "INSERT" {
            format!("INSERT 0 {n}")
        } else {
            format!("{tag} {n}")
        });
        Ok(())
    }

    /// A column the write may fill with a default that is not immutable, with the
    /// first such function its default calls.
    pub(super) async fn volatile_default(
        &mut self,
        table: &DistTable,
        defaults: &DefaultUse,
    ) -> PgResult<Option<(String, String)>> {
        if *defaults == DefaultUse::Nothing {
            return Ok(None);
        }
        // Defaults (not generation expressions: PostgreSQL makes those immutable), with
        // each column's position among the live ones.
        let sql = format!(
            "SELECT x.n::text, x.attname::text, x.def FROM (\
               SELECT row_number() OVER (ORDER BY a.attnum) AS n, a.attname, a.attgenerated, \
                      pg_catalog.pg_get_expr(d.adbin, d.adrelid) AS def \
               FROM pg_catalog.pg_attribute a \
               LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
               WHERE a.attrelid = {} AND a.attnum > 0 AND NOT a.attisdropped) x \
             WHERE x.def IS NOT NULL AND x.attgenerated = ''",
            table.relid
        );
        let coord = self.shared.coordinator.clone();
        let rows = {
            let mut conn = self.shared.pools.node(&coord).acquire().await?;
            conn.simple_rows(&sql).await?
        };
        for row in rows {
            let (Some(n), Some(column), Some(def)) = (&row[0], &row[1], &row[2]) else {
                continue;
            };
            let position: usize = n.parse().unwrap_or(0);
            let used = match defaults {
                DefaultUse::Nothing => false,
                DefaultUse::Any => true,
                DefaultUse::AllExcept(given) => !given.contains(column),
                DefaultUse::AllAfter(k) => position > *k,
            };
            if !used {
                continue;
            }
            let names = match parse::parse(&format!("SELECT {def}")) {
                Ok(stmts) => stmts
                    .first()
                    .and_then(|s| s.node.as_ref())
                    .map(crate::sql::parse::function_calls)
                    .unwrap_or_default(),
                Err(_) => vec![def.clone()],
            };
            let kinds = self.function_kinds(&names).await?;
            if let Some((name, _)) = names
                .iter()
                .zip(&kinds)
                .find(|(_, k)| !k.is_some_and(|k| k.immutable))
            {
                return Ok(Some((column.clone(), name.clone())));
            }
        }
        Ok(None)
    }
}
