//! The coordinator node's views that read distributed tables (directly or through
//! other views, as `pg_depend` records a view's rule reading a relation): the names a
//! session must look up as views before planning (`planner::views`). The catalog task
//! reads a signature of every view that is not temporary (OID, name, schema, its rule
//! row's version, so `CREATE OR REPLACE VIEW` counts) with each relations poll, and
//! lists them again when it or the catalog changed.

use crate::error::PgError;
use tokio_postgres::Client;

/// The signature of every non-temporary view: changes with any CREATE [OR REPLACE],
/// RENAME, SET SCHEMA or DROP of a view.
pub const VIEWS_SIGNATURE: &str = "SELECT count(*)::int8, \
     coalesce(sum(pg_catalog.hashtext(c.oid::text || '/' || c.relname || '/' || n.nspname \
       || '/' || r.xmin::text)::int8), 0)::int8 \
     FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
     JOIN pg_catalog.pg_rewrite r ON r.ev_class = c.oid \
     WHERE c.relkind = 'v' AND c.relpersistence <> 't'";

/// Every view (not temporary) whose rule reads a distributed table, or such a view,
/// transitively: (schema, name).
const DISTRIBUTED_VIEWS: &str = "WITH RECURSIVE reads(oid) AS ( \
       SELECT r.ev_class FROM pg_catalog.pg_depend d \
         JOIN pg_catalog.pg_rewrite r ON r.oid = d.objid \
        WHERE d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass \
          AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass \
          AND d.refobjid IN (SELECT logicalrelid FROM pg_catalog.pg_dist_partition) \
          AND r.ev_class <> d.refobjid \
       UNION \
       SELECT r.ev_class FROM reads v \
         JOIN pg_catalog.pg_depend d ON d.refobjid = v.oid \
          AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass \
          AND d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass \
         JOIN pg_catalog.pg_rewrite r ON r.oid = d.objid \
        WHERE r.ev_class <> v.oid) \
     SELECT n.nspname::text, c.relname::text FROM reads v \
       JOIN pg_catalog.pg_class c ON c.oid = v.oid \
       JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
      WHERE c.relkind = 'v' AND c.relpersistence <> 't'";

/// The views reading distributed tables: (schema, name).
pub async fn distributed_views(client: &Client) -> Result<Vec<(String, String)>, PgError> {
    let rows = client.query(DISTRIBUTED_VIEWS, &[]).await.map_err(|e| {
        PgError::from_client_error("cannot list the views over distributed tables", &e)
    })?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}
