//! The session's views over distributed tables (`planner::views`): which names of a
//! statement may be such views (those the catalog task lists, and those this session
//! created or renamed itself, which the list may not show yet: its block, or the next
//! poll), and their definitions, looked up on the client's own coordinator-node
//! connection (its search_path, role, temporary views and block) with
//! `pg_get_viewdef`, the column names and the role's SELECT privilege; then the views
//! their definitions name, level by level. Kept with the session's other names and
//! dropped with them (`session/names.rs`).

use super::*;
use crate::planner::names::Names;
use crate::planner::views::ViewDef;
use crate::sql::parse::count_mentions;
use pg_query::protobuf::node::Node as N;
use std::collections::HashSet;

/// A view name as written: schema if qualified, name.
pub(super) type ViewKey = (Option<String>, String);

/// How many levels of views inside views are looked up (deeper ones are planned as
/// relations of the coordinator node).
const MAX_LEVELS: usize = 32;

/// One row per name, as JSON: (oid, schema, name, definition, columns, may select);
/// a relation that is no view has no definition.
fn lookup_sql(n: usize) -> String {
    let params: Vec<String> = (1..=n).map(|i| format!("${i}")).collect();
    format!(
        "SELECT pg_catalog.json_agg(pg_catalog.json_build_array(c.oid::pg_catalog.int8, n.nspname, c.relname, \
           CASE WHEN c.relkind = 'v' THEN pg_catalog.pg_get_viewdef(c.oid) END, \
           CASE WHEN c.relkind = 'v' THEN (SELECT pg_catalog.json_agg(a.attname ORDER BY a.attnum) \
             FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 \
             AND NOT a.attisdropped) END, \
           CASE WHEN c.relkind = 'v' THEN pg_catalog.has_table_privilege(c.oid, 'SELECT') END) \
           ORDER BY x.i) \
         FROM pg_catalog.unnest(ARRAY[{}]::pg_catalog.text[]) WITH ORDINALITY AS x(name, i) \
         LEFT JOIN pg_catalog.pg_class c ON c.oid = pg_catalog.to_regclass(x.name) \
         LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace",
        params.join(", ")
    )
}

fn view_of(v: &serde_json::Value) -> Option<ViewDef> {
    let a = v.as_array()?;
    Some(ViewDef {
        oid: a.first()?.as_u64()? as u32,
        schema: a.get(1)?.as_str()?.to_string(),
        name: a.get(2)?.as_str()?.to_string(),
        definition: a.get(3)?.as_str()?.to_string(),
        columns: a
            .get(4)?
            .as_array()?
            .iter()
            .filter_map(|c| c.as_str().map(str::to_string))
            .collect(),
        selectable: a.get(5)?.as_bool()?,
    })
}

impl Session {
    /// The view names `text` mentions: listed views over distributed tables and the
    /// views this session made, each unqualified and qualified.
    fn view_candidates(&self, text: &str) -> Vec<ViewKey> {
        let listed = self.shared.catalog.distributed_views();
        let mut out: Vec<ViewKey> = Vec::new();
        let mut add = |schema: Option<&str>, name: &str| {
            if count_mentions(text, name) == 0 {
                return;
            }
            for key in [
                (None, name.to_string()),
                (schema.map(str::to_string), name.to_string()),
            ] {
                if !out.contains(&key) {
                    out.push(key);
                }
            }
        };
        for (schema, name) in listed.iter() {
            add(Some(schema), name);
        }
        for (schema, name) in &self.names.own_views {
            add(schema.as_deref(), name);
        }
        out
    }

    /// The views `text` may read, with the views inside them; the distributed-table
    /// names their definitions mention are added to `candidates`.
    pub(super) async fn views_for(
        &mut self,
        text: &str,
        catalog: &Catalog,
        candidates: &mut Vec<String>,
    ) -> PgResult<Vec<(ViewKey, Arc<ViewDef>)>> {
        let mut pending = self.view_candidates(text);
        let mut out: Vec<(ViewKey, Arc<ViewDef>)> = Vec::new();
        let mut seen: HashSet<u32> = HashSet::new();
        for _ in 0..MAX_LEVELS {
            if pending.is_empty() {
                break;
            }
            let missing: Vec<ViewKey> = pending
                .iter()
                .filter(|k| !self.names.views.contains_key(*k))
                .cloned()
                .collect();
            if !missing.is_empty() && self.tx.state != TxnState::Failed {
                let found = self.look_up_views(&missing).await?;
                for (key, view) in missing.into_iter().zip(found) {
                    self.names.views.insert(key, view.map(Arc::new));
                }
            }
            let mut next: Vec<ViewKey> = Vec::new();
            for key in pending {
                let Some(Some(view)) = self.names.views.get(&key).cloned() else {
                    continue;
                };
                if seen.insert(view.oid) {
                    for name in Names::candidates(&view.definition, catalog) {
                        if !candidates.iter().any(|c| c == name) {
                            candidates.push(name.to_string());
                        }
                    }
                    next.extend(self.view_candidates(&view.definition));
                }
                out.push((key, view));
            }
            next.retain(|k| !out.iter().any(|(o, _)| o == k));
            next.dedup();
            pending = next;
        }
        Ok(out)
    }

    /// Each name (as written) looked up on the client's own coordinator-node
    /// connection: the view it names, or None (no relation, or not a view).
    async fn look_up_views(&mut self, keys: &[ViewKey]) -> PgResult<Vec<Option<ViewDef>>> {
        let written: Vec<String> = keys
            .iter()
            .map(|(schema, name)| match schema {
                Some(s) => format!("{}.{}", quote_ident(s), quote_ident(name)),
                None => quote_ident(name),
            })
            .collect();
        let params: Vec<&str> = written.iter().map(String::as_str).collect();
        let row = self
            .home_row_with_params(&lookup_sql(params.len()), &params)
            .await?;
        let json = row.into_iter().next().flatten().unwrap_or_default();
        let rows: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap_or_default();
        Ok((0..keys.len())
            .map(|i| rows.get(i).and_then(view_of))
            .collect())
    }

    /// A view this session creates or renames: its name is looked up as a view from
    /// now on (the catalog task's list shows it only once committed and polled).
    pub(super) fn note_own_view(&mut self, stmt: &Statement) {
        use pg_query::protobuf::ObjectType;
        let rv_key = |rv: &pg_query::protobuf::RangeVar, name: &str| -> ViewKey {
            (
                (!rv.schemaname.is_empty()).then(|| rv.schemaname.clone()),
                name.to_string(),
            )
        };
        let key = match stmt.node.as_ref() {
            Some(N::ViewStmt(v)) => v.view.as_ref().map(|rv| rv_key(rv, &rv.relname)),
            Some(N::RenameStmt(r)) if r.rename_type == ObjectType::ObjectView as i32 => {
                r.relation.as_ref().map(|rv| rv_key(rv, &r.newname))
            }
            _ => None,
        };
        if let Some(key) = key {
            self.names.own_views.insert(key);
        }
    }
}
