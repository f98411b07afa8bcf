//! Creation of the catalog in the coordinator node's PostgreSQL: Citus's `pg_dist_*`
//! tables, sequences and views (same names, columns and keys as Citus), in
//! `pg_catalog` as Citus keeps them, plus `pgshard_catalog_version`; then the shell
//! guards and event triggers of `catalog::guard`.
//!
//! `ensure_schema` is idempotent and safe to run from several pgshard processes at
//! once: it takes a transaction-scoped advisory lock first. Creating objects in
//! `pg_catalog` needs `allow_system_table_mods` (a superuser setting, set only for
//! that transaction); reading and writing the tables afterwards does not.

use crate::error::PgError;
use tokio_postgres::Client;

/// Advisory lock serialising `ensure_schema` across pgshard processes.
pub const SCHEMA_LOCK_KEY: i64 = 0x7067_7368_6172_6401;
/// Advisory lock that every catalog-changing command (add/remove node, distribute,
/// drop) takes in its coordinator transaction, so that they run one at a time.
pub const CATALOG_LOCK_KEY: i64 = 0x7067_7368_6172_6402;

/// The catalog DDL, in dependency order. Every statement is idempotent.
pub const SCHEMA_SQL: &str = r#"
CREATE SEQUENCE IF NOT EXISTS pg_catalog.pg_dist_shardid_seq START WITH 102008 MINVALUE 102008;
CREATE SEQUENCE IF NOT EXISTS pg_catalog.pg_dist_placement_placementid_seq;
CREATE SEQUENCE IF NOT EXISTS pg_catalog.pg_dist_node_nodeid_seq;
CREATE SEQUENCE IF NOT EXISTS pg_catalog.pg_dist_groupid_seq;
CREATE SEQUENCE IF NOT EXISTS pg_catalog.pg_dist_colocationid_seq;

CREATE TABLE IF NOT EXISTS pg_catalog.pg_dist_node (
    nodeid int NOT NULL DEFAULT nextval('pg_catalog.pg_dist_node_nodeid_seq'),
    groupid int NOT NULL DEFAULT nextval('pg_catalog.pg_dist_groupid_seq'),
    nodename text NOT NULL,
    nodeport int NOT NULL DEFAULT 5432,
    noderack text NOT NULL DEFAULT 'default',
    hasmetadata bool NOT NULL DEFAULT false,
    isactive bool NOT NULL DEFAULT true,
    noderole text NOT NULL DEFAULT 'primary',
    nodecluster name NOT NULL DEFAULT 'default',
    metadatasynced bool NOT NULL DEFAULT false,
    shouldhaveshards bool NOT NULL DEFAULT true,
    CONSTRAINT pg_dist_node_pkey PRIMARY KEY (nodeid),
    CONSTRAINT pg_dist_node_nodename_nodeport_key UNIQUE (nodename, nodeport)
);

CREATE TABLE IF NOT EXISTS pg_catalog.pg_dist_colocation (
    colocationid int NOT NULL,
    shardcount int NOT NULL,
    replicationfactor int NOT NULL,
    distributioncolumntype oid NOT NULL,
    distributioncolumncollation oid NOT NULL DEFAULT 0,
    CONSTRAINT pg_dist_colocation_pkey PRIMARY KEY (colocationid)
);
CREATE INDEX IF NOT EXISTS pg_dist_colocation_configuration_index
    ON pg_catalog.pg_dist_colocation (shardcount, replicationfactor, distributioncolumntype);

CREATE TABLE IF NOT EXISTS pg_catalog.pg_dist_partition (
    logicalrelid regclass NOT NULL,
    partmethod "char" NOT NULL,
    partkey text,
    colocationid int NOT NULL DEFAULT 0,
    repmodel "char" NOT NULL DEFAULT 's',
    autoconverted bool NOT NULL DEFAULT false
);
CREATE UNIQUE INDEX IF NOT EXISTS pg_dist_partition_logical_relid_index
    ON pg_catalog.pg_dist_partition (logicalrelid);
CREATE INDEX IF NOT EXISTS pg_dist_partition_colocationid_index
    ON pg_catalog.pg_dist_partition (colocationid);

CREATE TABLE IF NOT EXISTS pg_catalog.pg_dist_shard (
    logicalrelid regclass NOT NULL,
    shardid bigint NOT NULL,
    shardstorage "char" NOT NULL DEFAULT 't',
    shardminvalue text,
    shardmaxvalue text
);
CREATE UNIQUE INDEX IF NOT EXISTS pg_dist_shard_shardid_index
    ON pg_catalog.pg_dist_shard (shardid);
CREATE INDEX IF NOT EXISTS pg_dist_shard_logical_relid_index
    ON pg_catalog.pg_dist_shard (logicalrelid);

CREATE TABLE IF NOT EXISTS pg_catalog.pg_dist_placement (
    placementid bigint NOT NULL DEFAULT nextval('pg_catalog.pg_dist_placement_placementid_seq'),
    shardid bigint NOT NULL,
    shardstate int NOT NULL DEFAULT 1,
    shardlength bigint NOT NULL DEFAULT 0,
    groupid int NOT NULL,
    CONSTRAINT pg_dist_placement_placementid_index PRIMARY KEY (placementid)
);
CREATE INDEX IF NOT EXISTS pg_dist_placement_shardid_index
    ON pg_catalog.pg_dist_placement (shardid);
CREATE INDEX IF NOT EXISTS pg_dist_placement_groupid_index
    ON pg_catalog.pg_dist_placement (groupid);

CREATE TABLE IF NOT EXISTS pg_catalog.pg_dist_transaction (
    groupid int NOT NULL,
    gid text NOT NULL,
    CONSTRAINT pg_dist_transaction_unique_constraint UNIQUE (groupid, gid)
);

CREATE TABLE IF NOT EXISTS pg_catalog.pg_dist_object (
    classid oid NOT NULL,
    objid oid NOT NULL,
    objsubid integer NOT NULL,
    type text DEFAULT NULL,
    object_names text[] DEFAULT NULL,
    object_args text[] DEFAULT NULL,
    distribution_argument_index int,
    colocationid int,
    force_delegation bool,
    CONSTRAINT pg_dist_object_pkey PRIMARY KEY (classid, objid, objsubid)
);

CREATE SEQUENCE IF NOT EXISTS pg_catalog.pg_dist_cleanup_recordid_seq;
CREATE TABLE IF NOT EXISTS pg_catalog.pg_dist_cleanup (
    record_id bigint NOT NULL DEFAULT nextval('pg_catalog.pg_dist_cleanup_recordid_seq'),
    operation_id bigint NOT NULL DEFAULT 0,
    object_type int NOT NULL,
    object_name text NOT NULL,
    node_group_id int NOT NULL,
    policy_type int NOT NULL,
    CONSTRAINT pg_dist_cleanup_pkey PRIMARY KEY (record_id)
);

CREATE TABLE IF NOT EXISTS pg_catalog.pgshard_catalog_version (version bigint NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS pgshard_catalog_version_one_row
    ON pg_catalog.pgshard_catalog_version ((true));
INSERT INTO pg_catalog.pgshard_catalog_version (version)
    SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pgshard_catalog_version);

CREATE OR REPLACE FUNCTION pg_catalog.pgshard_raise_catalog_version() RETURNS void
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog
    AS $$UPDATE pg_catalog.pgshard_catalog_version SET version = version + 1$$;

CREATE OR REPLACE VIEW pg_catalog.pg_dist_shard_placement AS
    SELECT p.shardid, p.shardstate, p.shardlength, n.nodename, n.nodeport, p.placementid
    FROM pg_catalog.pg_dist_placement p
    JOIN pg_catalog.pg_dist_node n ON n.groupid = p.groupid AND n.noderole = 'primary';

CREATE OR REPLACE VIEW pg_catalog.citus_tables AS
    SELECT p.logicalrelid AS table_name,
           CASE p.partmethod WHEN 'n' THEN 'reference' ELSE 'distributed' END AS citus_table_type,
           CASE p.partmethod WHEN 'n' THEN '<none>' ELSE p.partkey END AS distribution_column,
           p.colocationid AS colocation_id,
           (SELECT count(*) FROM pg_catalog.pg_dist_shard s
             WHERE s.logicalrelid = p.logicalrelid) AS shard_count,
           pg_catalog.pg_get_userbyid(c.relowner) AS table_owner,
           am.amname AS access_method
    FROM pg_catalog.pg_dist_partition p
    JOIN pg_catalog.pg_class c ON c.oid = p.logicalrelid
    LEFT JOIN pg_catalog.pg_am am ON am.oid = c.relam;

CREATE OR REPLACE VIEW pg_catalog.citus_shards AS
    SELECT s.logicalrelid AS table_name,
           s.shardid,
           CASE WHEN n.nspname = 'public' THEN '' ELSE pg_catalog.quote_ident(n.nspname) || '.' END
             || pg_catalog.quote_ident(c.relname || '_' || s.shardid) AS shard_name,
           CASE p.partmethod WHEN 'n' THEN 'reference' ELSE 'distributed' END AS citus_table_type,
           p.colocationid AS colocation_id,
           dn.nodename,
           dn.nodeport,
           -- Filled by pgshard in the statements naming the view
           -- (executor/session/shard_sizes.rs), NULL when read here directly.
           NULL::bigint AS shard_size
    FROM pg_catalog.pg_dist_shard s
    JOIN pg_catalog.pg_dist_partition p ON p.logicalrelid = s.logicalrelid
    JOIN pg_catalog.pg_class c ON c.oid = s.logicalrelid
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_catalog.pg_dist_placement pl ON pl.shardid = s.shardid
    LEFT JOIN pg_catalog.pg_dist_node dn ON dn.groupid = pl.groupid AND dn.noderole = 'primary';

GRANT SELECT ON pg_catalog.pg_dist_node, pg_catalog.pg_dist_colocation,
    pg_catalog.pg_dist_partition, pg_catalog.pg_dist_shard, pg_catalog.pg_dist_placement,
    pg_catalog.pg_dist_transaction, pg_catalog.pgshard_catalog_version,
    pg_catalog.pg_dist_object, pg_catalog.pg_dist_cleanup,
    pg_catalog.pg_dist_shard_placement, pg_catalog.citus_tables, pg_catalog.citus_shards
    TO PUBLIC;
"#;

/// Creates the catalog if it is missing (or completes it). Runs in one transaction
/// under an advisory lock; on error the transaction is rolled back.
pub async fn ensure_schema(client: &Client) -> Result<(), PgError> {
    let script = format!(
        "BEGIN;\nSELECT pg_catalog.pg_advisory_xact_lock({SCHEMA_LOCK_KEY});\n\
         SET LOCAL allow_system_table_mods = on;\n{SCHEMA_SQL}\n{}\nCOMMIT;",
        super::guard::GUARD_SQL
    );
    if let Err(e) = client.batch_execute(&script).await {
        // A failed statement leaves the session inside an aborted transaction.
        let _ = client.batch_execute("ROLLBACK").await;
        return Err(PgError::from_client_error(
            "cannot create the pgshard catalog",
            &e,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_uses_citus_names() {
        for name in [
            "pg_dist_node",
            "pg_dist_partition",
            "pg_dist_shard",
            "pg_dist_placement",
            "pg_dist_shard_placement",
            "pg_dist_colocation",
            "pg_dist_transaction",
            "pg_dist_shardid_seq START WITH 102008",
            "pg_dist_placement_placementid_seq",
            "pg_dist_node_nodeid_seq",
            "pg_dist_groupid_seq",
            "pg_dist_colocationid_seq",
            "citus_tables",
            "citus_shards",
        ] {
            assert!(SCHEMA_SQL.contains(name), "{name}");
        }
        // Idempotent statements only.
        for stmt in SCHEMA_SQL
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let ok = stmt.starts_with("CREATE TABLE IF NOT EXISTS")
                || stmt.starts_with("CREATE SEQUENCE IF NOT EXISTS")
                || stmt.starts_with("CREATE INDEX IF NOT EXISTS")
                || stmt.starts_with("CREATE UNIQUE INDEX IF NOT EXISTS")
                || stmt.starts_with("CREATE OR REPLACE VIEW")
                || stmt.starts_with("CREATE OR REPLACE FUNCTION")
                || stmt.starts_with("INSERT INTO pg_catalog.pgshard_catalog_version")
                || stmt.starts_with("GRANT SELECT");
            assert!(ok, "not idempotent: {stmt}");
        }
    }
}
