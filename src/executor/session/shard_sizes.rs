//! `citus_shards.shard_size`: the view in the coordinator node's catalog cannot read
//! the workers, so a statement naming `citus_shards` gets, when pgshard parses it, the
//! view with its `shard_size` column replaced by the sizes read from the workers just
//! then (`pg_total_relation_size` of each placement, the largest placement's per
//! shard, as Citus's `citus_shard_sizes()`), on the parse tree as
//! `citus_settings::with_citus_views` rewrites `pg_settings`. A statement prepared
//! with the extended protocol keeps the sizes of its Parse; views and rules defined
//! over `citus_shards` are left alone (they would freeze the sizes) and read NULL.

use super::*;
use crate::sql::parse::StringForm;
use crate::sql::quote::quote_qualified;
use pg_query::protobuf::node::Node as N;

/// Whether `text` may name the view (a cheap test before the parse tree's).
fn mentions_citus_shards(text: &str) -> bool {
    text.as_bytes()
        .windows(12)
        .any(|w| w.eq_ignore_ascii_case(b"citus_shards"))
}

fn is_citus_shards(rv: &pg_query::protobuf::RangeVar) -> bool {
    (rv.schemaname.is_empty() || rv.schemaname == "pg_catalog")
        && rv.relname == "citus_shards"
        && rv.inh
}

/// `node` with every `citus_shards` reference replaced by the view with `sizes`
/// (shard id, bytes); None when it has none.
fn rewrite(node: &N, sizes: &[(i64, i64)]) -> Option<String> {
    use pg_query::protobuf;
    let values: Vec<String> = sizes
        .iter()
        .map(|(id, size)| format!("({id}::pg_catalog.int8, {size}::pg_catalog.int8)"))
        .collect();
    let sized = if values.is_empty() {
        "(SELECT NULL::pg_catalog.int8 AS shardid, NULL::pg_catalog.int8 AS size WHERE false)"
            .to_string()
    } else {
        format!("(VALUES {})", values.join(", "))
    };
    let body = format!(
        "SELECT v.table_name, v.shardid, v.shard_name, v.citus_table_type, v.colocation_id, \
                v.nodename, v.nodeport, s.size AS shard_size \
         FROM pg_catalog.citus_shards v LEFT JOIN {sized} AS s (shardid, size) \
           ON s.shardid = v.shardid"
    );
    let subquery = pg_query::parse(&body, 0)
        .ok()?
        .protobuf
        .stmts
        .into_iter()
        .next()?
        .stmt
        .map(|b| *b)?;
    let mut node = node.clone();
    let mut changed = false;
    crate::sql::walk::statement(&mut node, false, &mut |n, _| {
        let Some(N::RangeVar(rv)) = &n.node else {
            return false;
        };
        if !is_citus_shards(rv) {
            return false;
        }
        let alias = rv.alias.clone().unwrap_or(protobuf::Alias {
            aliasname: rv.relname.clone(),
            colnames: Vec::new(),
        });
        n.node = Some(N::RangeSubselect(Box::new(protobuf::RangeSubselect {
            lateral: false,
            subquery: Some(Box::new(subquery.clone())),
            alias: Some(alias),
        })));
        changed = true;
        true
    });
    if !changed {
        return None;
    }
    node.deparse(Default::default()).ok()
}

impl Session {
    /// The statements with `citus_shards` given the shards' sizes (module comment).
    pub(super) async fn with_shard_sizes(
        &mut self,
        stmts: Vec<Statement>,
    ) -> PgResult<Vec<Statement>> {
        if !stmts.iter().any(|s| mentions_citus_shards(&s.text)) {
            return Ok(stmts);
        }
        let mut sizes: Option<Vec<(i64, i64)>> = None;
        let mut out = Vec::with_capacity(stmts.len());
        for stmt in stmts {
            let eligible = mentions_citus_shards(&stmt.text)
                && matches!(stmt.form, StringForm::Client | StringForm::CitusViews)
                && !matches!(
                    stmt.node,
                    None | Some(N::ViewStmt(_)) | Some(N::RuleStmt(_))
                );
            if !eligible {
                out.push(stmt);
                continue;
            }
            let node = stmt.node.as_ref().expect("eligible statements have a tree");
            // Whether the tree names the view at all, before reading any size.
            if rewrite(node, &[]).is_none() {
                out.push(stmt);
                continue;
            }
            if sizes.is_none() {
                sizes = Some(self.shard_sizes().await?);
            }
            let Some(text) = rewrite(node, sizes.as_deref().unwrap_or_default()) else {
                out.push(stmt);
                continue;
            };
            match parse::parse_with(&text, Default::default()) {
                Ok(mut v) if v.len() == 1 => {
                    let mut extended = v.pop().expect("one statement");
                    extended.form = StringForm::CitusViews;
                    out.push(extended);
                }
                _ => out.push(stmt),
            }
        }
        Ok(out)
    }

    /// Every shard's size: the largest of its placements' `pg_total_relation_size`,
    /// one query per worker over pgshard's own connections.
    async fn shard_sizes(&mut self) -> PgResult<Vec<(i64, i64)>> {
        let catalog = self.shared.catalog.snapshot();
        let mut per_node: HashMap<NodeAddr, Vec<String>> = HashMap::new();
        for table in catalog.tables_by_oid.values() {
            for shard in &table.shards {
                let name = quote_qualified(&table.schema, &table.shard_name(shard.shard_id));
                for g in &shard.placement_groups {
                    let Some(node) = catalog.node_for_group(*g) else {
                        continue;
                    };
                    per_node
                        .entry(NodeAddr {
                            host: node.host.clone(),
                            port: node.port,
                        })
                        .or_default()
                        .push(format!(
                            "({}::pg_catalog.int8, {})",
                            shard.shard_id,
                            quote_literal(&name)
                        ));
                }
            }
        }
        let mut sizes: HashMap<i64, i64> = HashMap::new();
        for (addr, values) in per_node {
            let sql = format!(
                "SELECT v.id::text, pg_catalog.pg_total_relation_size(pg_catalog.to_regclass(v.name))::text \
                 FROM (VALUES {}) AS v (id, name)",
                values.join(", ")
            );
            let rows = {
                let mut conn = self.shared.pools.node(&addr).acquire().await?;
                conn.simple_rows(&sql).await.map_err(|e| {
                    e.in_context(&format!("while reading shard sizes on node {addr}"))
                })?
            };
            for row in rows {
                let (Some(id), Some(size)) = (&row[0], &row[1]) else {
                    continue;
                };
                let (Ok(id), Ok(size)) = (id.parse::<i64>(), size.parse::<i64>()) else {
                    continue;
                };
                let e = sizes.entry(id).or_insert(size);
                *e = (*e).max(size);
            }
        }
        let mut sizes: Vec<(i64, i64)> = sizes.into_iter().collect();
        sizes.sort_unstable();
        Ok(sizes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(sql: &str) -> N {
        crate::sql::parse::parse(sql).unwrap()[0]
            .node
            .clone()
            .unwrap()
    }

    #[test]
    fn names_the_view_and_keeps_aliases() {
        assert!(mentions_citus_shards("select * from CITUS_SHARDS"));
        assert!(!mentions_citus_shards("select * from citus_tables"));
        let sql = rewrite(
            &tree("SELECT shard_size FROM citus_shards c WHERE c.shardid = 1"),
            &[(1, 8192)],
        )
        .unwrap();
        assert!(sql.contains("(1::bigint, 8192::bigint)"), "{sql}");
        assert!(sql.contains(") c WHERE c.shardid = 1"), "{sql}");
        assert!(rewrite(&tree("SELECT * FROM other.citus_shards"), &[]).is_none());
        assert!(rewrite(&tree("SELECT 'citus_shards'"), &[]).is_none());
        let empty = rewrite(&tree("SELECT count(*) FROM pg_catalog.citus_shards"), &[]).unwrap();
        assert!(empty.contains("WHERE false"), "{empty}");
    }
}
