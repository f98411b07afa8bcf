//! A Bind's parameters: their formats and types as PostgreSQL takes them, the
//! distribution value routed from them.

use super::*;

/// Parameters of an execution: their types and the Bind holding their values.
pub(super) struct BoundParams<'a> {
    pub(super) types: &'a [u32],
    pub(super) bind: Option<&'a BindMsg>,
}

impl BoundParams<'_> {
    pub(super) fn text(&self, i: usize) -> PgResult<Option<String>> {
        let bind = self.bind.ok_or_else(|| {
            PgError::new(
                sqlstate::PROTOCOL_VIOLATION,
                format!("there is no parameter ${}", i + 1),
            )
        })?;
        let v = bind.params.get(i).ok_or_else(|| {
            PgError::new(
                sqlstate::PROTOCOL_VIOLATION,
                format!("there is no parameter ${}", i + 1),
            )
        })?;
        match v {
            None => Ok(None),
            Some(b) if bind.param_format(i) == 0 => {
                Ok(Some(String::from_utf8_lossy(b).into_owned()))
            }
            Some(_) => Err(PgError::not_supported(
                "binary parameters are not supported for this statement in pgshard yet",
            )),
        }
    }
}

impl BindMsg {
    pub(super) fn default_empty() -> BindMsg {
        BindMsg {
            portal: String::new(),
            statement: String::new(),
            param_formats: vec![],
            params: vec![],
            result_formats: vec![],
        }
    }
}

/// The shard a routed statement goes to, with its values bound.
pub(super) fn route_bound<'a>(
    r: &'a RouterPlan,
    types: &[u32],
    bind: &BindMsg,
    _catalog: &Catalog,
) -> PgResult<&'a ShardInterval> {
    route_bound_with(r, types, bind, &[])
}

/// The parameters of the distribution value that pgshard does not hash itself
/// (a domain's, time's, interval's...): whether `hash_param` reads them.
pub(super) fn params_for_postgres(r: &RouterPlan, types: &[u32], bind: &BindMsg) -> Vec<usize> {
    let Some(col) = r.table.dist_column.as_ref() else {
        return Vec::new();
    };
    let usage = if r.is_insert {
        crate::planner::distvalue::ValueUse::Store
    } else {
        crate::planner::distvalue::ValueUse::Compare
    };
    r.values
        .iter()
        .filter_map(|v| match *v {
            ValueSource::Param(i) => {
                let bytes = bind.params.get(i)?.as_ref()?;
                let ptype = types.get(i).copied().unwrap_or(0);
                // A compared parameter of another type is left to the router's error.
                if !r.is_insert && ptype != col.type_oid {
                    return None;
                }
                let known = crate::planner::distvalue::hash_param(
                    col.type_oid,
                    usage.typmod(col),
                    ptype,
                    bind.param_format(i),
                    bytes,
                )
                .is_some()
                    || crate::planner::distvalue::param_is_invalid(col.type_oid, ptype);
                (!known).then_some(i)
            }
            _ => None,
        })
        .collect()
}

impl Session {
    /// Hashes computed by PostgreSQL for the parameters `params_for_postgres` names.
    pub(super) async fn hash_params_on_coordinator(
        &mut self,
        r: &RouterPlan,
        types: &[u32],
        bind: &BindMsg,
    ) -> PgResult<Vec<(usize, i32)>> {
        let mut out = Vec::new();
        for i in params_for_postgres(r, types, bind) {
            let (Some(col), Some(Some(bytes))) = (r.table.dist_column.as_ref(), bind.params.get(i))
            else {
                continue;
            };
            let ptype = types.get(i).copied().unwrap_or(0);
            let h = self
                .hash_stored_on_coordinator(
                    col,
                    bytes,
                    bind.param_format(i) == 1,
                    ptype,
                    r.is_insert,
                )
                .await?
                .unwrap_or(i32::MIN);
            out.push((i, h));
        }
        Ok(out)
    }
}

/// As `route_bound`, with the hashes of some parameters already computed (`hashed`).
pub(super) fn route_bound_with<'a>(
    r: &'a RouterPlan,
    types: &[u32],
    bind: &BindMsg,
    hashed: &[(usize, i32)],
) -> PgResult<&'a ShardInterval> {
    // Reference tables are routed with a fixed hash and have no column.
    let no_column;
    let col = match r.table.dist_column.as_ref() {
        Some(c) => c,
        None => {
            no_column = crate::catalog::DistColumn {
                name: String::new(),
                attnum: 0,
                type_oid: 0,
                collation: 0,
                typmod: -1,
                type_sql: String::new(),
            };
            &no_column
        }
    };
    let mut shard: Option<&ShardInterval> = None;
    for v in &r.values {
        let hash = match *v {
            ValueSource::Hash(h) => h,
            ValueSource::Null => {
                if r.is_insert {
                    return Err(PgError::new(
                        sqlstate::NOT_NULL_VIOLATION,
                        format!(
                            "cannot perform an INSERT with NULL in the partition column \"{}\"",
                            col.name
                        ),
                    ));
                }
                // `column = NULL` matches no row: any one shard answers that.
                i32::MIN
            }
            // PostgreSQL refuses the value: any one shard gives its exact error.
            ValueSource::Invalid => i32::MIN,
            ValueSource::Param(i) => {
                let Some(Some(bytes)) = bind.params.get(i) else {
                    if r.is_insert {
                        return Err(PgError::new(
                            sqlstate::NOT_NULL_VIOLATION,
                            format!(
                                "cannot perform an INSERT with NULL in the partition column \"{}\"",
                                col.name
                            ),
                        ));
                    }
                    shard = shard.or(r.table.shards.first());
                    continue;
                };
                if let Some((_, h)) = hashed.iter().find(|(p, _)| *p == i) {
                    *h
                } else {
                    let ptype = types.get(i).copied().unwrap_or(0);
                    let usage = if r.is_insert {
                        crate::planner::distvalue::ValueUse::Store
                    } else {
                        crate::planner::distvalue::ValueUse::Compare
                    };
                    match crate::planner::distvalue::hash_param(col.type_oid, usage.typmod(col), ptype, bind.param_format(i), bytes) {
                    Some(h) => h,
                    None if crate::planner::distvalue::param_is_invalid(col.type_oid, ptype) => i32::MIN,
                    None => {
                        return Err(PgError::not_supported(format!(
                            "pgshard cannot route a parameter of type {ptype} for the distribution column \"{}\" (type {})",
                            col.name, col.type_oid
                        )))
                    }
                }
                }
            }
        };
        let s = r.table.shard_for_hash(hash).ok_or_else(|| {
            PgError::internal(format!(
                "no shard of \"{}\" covers hash {hash}",
                r.table.name
            ))
        })?;
        match shard {
            Some(prev) if prev.shard_id != s.shard_id => {
                return Err(PgError::not_supported(
                    "pgshard does not support an INSERT whose rows go to several shards yet",
                ))
            }
            _ => shard = Some(s),
        }
    }
    shard.ok_or_else(|| PgError::internal("statement has no shard"))
}
