//! `create_distributed_function(function, distribution_arg_name, colocate_with,
//! force_delegation)`: records the function in `pg_dist_object` with its distribution
//! argument and the co-location group of the table it goes with, as Citus does.
//!
//! Citus then delegates each call to the worker holding the distribution argument's
//! shard, where the function's statements reach the local shards through Citus's
//! metadata. The workers here are plain PostgreSQL: pgshard instead runs a call of
//! such a function itself (`planner::function_call`, `executor::session::function_call`),
//! statement by statement through its own planner, in one transaction. The function
//! is not created on the workers (nothing there calls it).

use super::{begin_catalog_change, db_err, Args, UtilityResult};
use crate::catalog::cache::{bump_version, CatalogCache};
use crate::error::{sqlstate, PgError};

pub(crate) async fn create_distributed_function(
    cache: &CatalogCache,
    args: &Args<'_>,
    caller: &str,
) -> Result<UtilityResult, PgError> {
    let signature = args.required(0)?;
    let coord = begin_catalog_change(cache).await?;
    let function = coord
        .query_opt(
            "SELECT p.oid, p.proname::text, pg_catalog.pg_has_role($2, p.proowner, 'USAGE'), \
                    coalesce(p.proargnames, '{}')::text[], \
                    ARRAY(SELECT t::oid FROM unnest(p.proargtypes) t)::oid[], p.prokind::text \
             FROM pg_catalog.pg_proc p WHERE p.oid = pg_catalog.to_regprocedure($1)",
            &[&signature, &caller],
        )
        .await
        .map_err(db_err("cannot read the function"))?;
    let Some(function) = function else {
        return Err(PgError::new(
            sqlstate::UNDEFINED_FUNCTION,
            format!("function \"{signature}\" does not exist"),
        ));
    };
    let (oid, name): (u32, String) = (function.get(0), function.get(1));
    if !function.get::<_, bool>(2) {
        return Err(PgError::new(
            sqlstate::INSUFFICIENT_PRIVILEGE,
            format!("must be owner of function {name}"),
        ));
    }
    if function.get::<_, String>(5) != "f" {
        return Err(PgError::not_supported(format!(
            "pgshard distributes functions only, not \"{name}\""
        )));
    }
    let arg_names: Vec<String> = function.get(3);
    let arg_types: Vec<u32> = function.get(4);
    let invalid_argument = || {
        PgError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!(
                "cannot distribute the function \"{name}\" since the distribution argument is not valid"
            ),
        )
    };
    let dist_arg = match args.get(1) {
        None => None,
        Some(a) => {
            let index = match a.strip_prefix('$') {
                Some(n) => n.parse::<usize>().ok().and_then(|n| n.checked_sub(1)),
                None => arg_names.iter().position(|n| n == a),
            };
            match index {
                Some(i) if i < arg_types.len() => Some(i),
                _ => return Err(invalid_argument()),
            }
        }
    };
    let catalog = cache.snapshot();
    let colocate_with = args.get(2).unwrap_or("default");
    let colocation_id = match (args.relids.get(2).copied().flatten(), dist_arg) {
        (Some(relid), _) => {
            let table = catalog.tables_by_oid.get(&relid).ok_or_else(|| {
                PgError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!("relation {colocate_with} should be a hash or single shard distributed table"),
                )
            })?;
            if let (Some(i), Some(col)) = (dist_arg, table.dist_column.as_ref()) {
                // The argument's type, or one implicitly cast to the column's.
                let castable: bool = coord
                    .query_one(
                        "SELECT $1::oid = $2::oid OR EXISTS (SELECT 1 FROM pg_catalog.pg_cast \
                         WHERE castsource = $1::oid AND casttarget = $2::oid AND castcontext = 'i')",
                        &[&arg_types[i], &col.type_oid],
                    )
                    .await
                    .map_err(db_err("cannot read the argument's casts"))?
                    .get(0);
                if !castable {
                    return Err(PgError::new(
                        sqlstate::INVALID_PARAMETER_VALUE,
                        format!(
                            "cannot colocate function \"{name}\" and table \"{}\" because distribution column types don't match",
                            table.name
                        ),
                    ));
                }
            }
            table.colocation_id
        }
        // `default`: a co-location group of hash tables of the argument's type.
        (None, Some(i)) => catalog
            .tables_by_oid
            .values()
            .filter(|t| t.dist_column.as_ref().is_some_and(|c| c.type_oid == arg_types[i]))
            .map(|t| t.colocation_id)
            .min()
            .ok_or_else(|| {
                PgError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!(
                        "cannot distribute the function \"{name}\" since there is no table to colocate with"
                    ),
                )
            })?,
        (None, None) => {
            return Err(PgError::not_supported(format!(
                "pgshard distributes functions with a distribution argument only (function \"{name}\")"
            )))
        }
    };
    let force_delegation = args.get(3).map(|v| matches!(v, "t" | "true" | "on"));
    let dist_arg = dist_arg.map(|i| i as i32);
    coord
        .execute(
            "INSERT INTO pg_catalog.pg_dist_object \
               (classid, objid, objsubid, distribution_argument_index, colocationid, force_delegation) \
             VALUES ('pg_catalog.pg_proc'::pg_catalog.regclass, $1, 0, $2, $3, $4) \
             ON CONFLICT (classid, objid, objsubid) DO UPDATE SET \
               distribution_argument_index = EXCLUDED.distribution_argument_index, \
               colocationid = EXCLUDED.colocationid, force_delegation = EXCLUDED.force_delegation",
            &[&oid, &dist_arg, &(colocation_id as i32), &force_delegation],
        )
        .await
        .map_err(db_err("cannot record the distributed function"))?;
    bump_version(&coord).await?;
    coord
        .batch_execute("COMMIT")
        .await
        .map_err(db_err("cannot commit the distributed function"))?;
    cache.reload().await;
    Ok(UtilityResult::void("create_distributed_function"))
}
