//! What the coordinator node itself does to keep its copy of the cluster honest: the
//! *shell guard* of every distributed and reference table, the `sql_drop` event
//! trigger that keeps the `pg_dist_*` catalog equal to the tables that exist, and the
//! owner sync of guards. All of it is SQL installed with the catalog (`ensure_schema`),
//! so it holds for every client of the coordinator node, not only pgshard's.
//!
//! A shell (the coordinator node's empty table carrying a distributed table's
//! definition) must never answer a read or take a write that pgshard did not plan: a
//! PL/pgSQL `EXECUTE`, a view, a rule, a trigger or a client connected to the node
//! directly would see an empty table or write a row pgshard never sees again.
//!
//! - **Writes**: a statement-level `BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE`
//!   trigger `pgshard_shell_guard` on each shell raises 0A000 naming the table, unless
//!   `pgshard.shell_write` is `on` in the transaction. pgshard's own shell writes (the
//!   via-coordinator INSERT ... RETURNING, rolled back in its savepoint) set it with
//!   `SET LOCAL` inside that savepoint. Triggers fire for superusers too.
//! - **Reads**: PostgreSQL has no SELECT trigger and superusers bypass row-level
//!   security, so each shell gets an inheritance child `pgshard_guard.<name>_<oid>`, a
//!   `file_fdw` foreign table reading `program 'exit 1 # <table> is distributed ...'`.
//!   Any scan of the shell through inheritance scans it too and fails when it ends
//!   (38000, "program ... failed", the message naming the table). Planning, EXPLAIN,
//!   `CREATE TABLE AS ... WITH NO DATA` (pgshard's combine step) never run it, and
//!   ANALYZE skips program foreign tables. Its dependency on the shell is made
//!   automatic, so dropping the shell drops it. Known holes: `SELECT ... FROM ONLY t`
//!   and `COPY t TO` read the empty shell alone.
//! - **Drops**: `pgshard_on_sql_drop` (an `sql_drop` event trigger, as Citus's
//!   `citus_drop_trigger`) deletes the catalog rows of every distributed or reference
//!   table dropped by any statement (`DROP SCHEMA ... CASCADE`, `DROP OWNED`, a drop on
//!   the coordinator node directly), records its shard placements in
//!   `pg_dist_cleanup` for pgshard to drop if still there (`commands::shards::drop_orphaned_shards`), removes dropped objects from
//!   `pg_dist_object`, and raises the catalog version, all in the dropping transaction.
//! - **Owners**: ALTER TABLE on a parent recurses to the guard as the caller, who must
//!   own it: the guard's owner follows the shell's (`pgshard_guard_owners`, an event
//!   trigger after ALTER TABLE; REASSIGN OWNED moves shell and guard together).

/// The setting (`SET LOCAL ... = on`) under which pgshard's own statements write a shell.
pub const SHELL_WRITE: &str = "pgshard.shell_write";

/// Guards one shell (`$1`: its oid), in the transaction that makes it a shell.
pub const GUARD_ONE_SQL: &str = "SELECT pg_catalog.pgshard_guard_shell($1::oid::regclass)";

/// Removes a shell's guard (undistribute_table), in the transaction that moves its rows back.
pub const UNGUARD_ONE_SQL: &str = "SELECT pg_catalog.pgshard_unguard_shell($1::oid::regclass)";

/// Installed by `schema::ensure_schema` after the catalog tables, in its transaction.
/// Every statement is idempotent. Needs a superuser (event triggers, file_fdw programs).
pub const GUARD_SQL: &str = r#"
DO $pgshard$
BEGIN
    CREATE EXTENSION IF NOT EXISTS file_fdw SCHEMA pg_catalog;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_foreign_server WHERE srvname = 'pgshard_shell_guard') THEN
        CREATE SERVER pgshard_shell_guard FOREIGN DATA WRAPPER file_fdw;
    END IF;
EXCEPTION WHEN undefined_file OR undefined_object THEN
    RAISE WARNING 'file_fdw is not available on the coordinator node: reads of shell tables are not guarded';
END
$pgshard$;

CREATE SCHEMA IF NOT EXISTS pgshard_guard;
GRANT USAGE ON SCHEMA pgshard_guard TO PUBLIC;

CREATE OR REPLACE FUNCTION pg_catalog.pgshard_shell_write_guard() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog AS $pgshard$
BEGIN
    IF coalesce(current_setting('pgshard.shell_write', true), '') <> 'on' THEN
        RAISE EXCEPTION 'cannot % table % on the coordinator node: it is a distributed table',
                lower(TG_OP), TG_RELID::regclass
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'Its rows live in its shards on the worker nodes; the coordinator node holds an empty shell.',
                  HINT = 'Run the statement through pgshard.';
    END IF;
    RETURN NULL;
END
$pgshard$;

CREATE OR REPLACE FUNCTION pg_catalog.pgshard_guard_of(rel regclass) RETURNS regclass
    LANGUAGE sql STABLE SET search_path = pg_catalog AS $pgshard$
    SELECT i.inhrelid::regclass FROM pg_inherits i JOIN pg_class g ON g.oid = i.inhrelid
     WHERE i.inhparent = rel AND g.relnamespace = pg_catalog.to_regnamespace('pgshard_guard')
$pgshard$;

-- The checks of a shell's own foreign keys (PostgreSQL's RI_ConstraintTrigger_c_*
-- triggers) off or on. The shards' keys are enforced by the workers; on the shell, whose
-- referenced shells are empty, a check would refuse every row pgshard's own statements
-- insert there (inside a savepoint rolled back at once) to have PostgreSQL compute the
-- row: defaults, sequences, casts, CHECK constraints.
CREATE OR REPLACE FUNCTION pg_catalog.pgshard_shell_key_checks(rel regclass, enable boolean) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $pgshard$
DECLARE
    t name;
BEGIN
    FOR t IN SELECT g.tgname FROM pg_trigger g JOIN pg_constraint c ON c.oid = g.tgconstraint
              WHERE g.tgrelid = rel AND c.conrelid = rel AND c.contype = 'f'
                AND (g.tgenabled = 'D') = enable
    LOOP
        EXECUTE format('ALTER TABLE %s %s TRIGGER %I', rel,
                       CASE WHEN enable THEN 'ENABLE' ELSE 'DISABLE' END, t);
    END LOOP;
END
$pgshard$;

CREATE OR REPLACE FUNCTION pg_catalog.pgshard_guard_shell(rel regclass) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $pgshard$
DECLARE
    guard text;
    owner name;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = rel AND tgname = 'pgshard_shell_guard') THEN
        EXECUTE format('CREATE TRIGGER pgshard_shell_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s '
                       'FOR EACH STATEMENT EXECUTE FUNCTION pg_catalog.pgshard_shell_write_guard()', rel);
    END IF;
    PERFORM pg_catalog.pgshard_shell_key_checks(rel, false);
    IF NOT EXISTS (SELECT 1 FROM pg_foreign_server WHERE srvname = 'pgshard_shell_guard')
       OR pg_catalog.pgshard_guard_of(rel) IS NOT NULL THEN
        RETURN;
    END IF;
    -- Named after the table (PostgreSQL's own errors name the guard: "cannot delete
    -- from foreign table ..."), made unique by its oid.
    SELECT left(relname, 40) || '_' || oid, pg_get_userbyid(relowner) INTO guard, owner
      FROM pg_class WHERE oid = rel;
    -- The table's name in a shell comment: only characters that cannot leave it.
    EXECUTE format('CREATE FOREIGN TABLE pgshard_guard.%I () INHERITS (%s) SERVER pgshard_shell_guard OPTIONS (program %L)',
        guard, rel,
        'exit 1 # ' || regexp_replace(rel::text, '[^A-Za-z0-9_.]', '_', 'g')
            || ' is a distributed table: read it through pgshard');
    EXECUTE format('ALTER FOREIGN TABLE pgshard_guard.%I OWNER TO %I', guard, owner);
    -- Every access fails anyway; LOCK TABLE on the shell checks the child's privileges.
    EXECUTE format('GRANT ALL ON pgshard_guard.%I TO PUBLIC', guard);
    -- Dropping the shell drops its guard (no CASCADE needed).
    UPDATE pg_depend SET deptype = 'a'
     WHERE classid = 'pg_class'::regclass AND objid = format('pgshard_guard.%I', guard)::regclass
       AND refclassid = 'pg_class'::regclass AND refobjid = rel AND deptype = 'n';
END
$pgshard$;

CREATE OR REPLACE FUNCTION pg_catalog.pgshard_unguard_shell(rel regclass) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $pgshard$
DECLARE
    guard regclass := pg_catalog.pgshard_guard_of(rel);
BEGIN
    EXECUTE format('DROP TRIGGER IF EXISTS pgshard_shell_guard ON %s', rel);
    PERFORM pg_catalog.pgshard_shell_key_checks(rel, true);
    IF guard IS NOT NULL THEN
        EXECUTE format('DROP FOREIGN TABLE %s', guard);
    END IF;
END
$pgshard$;

CREATE OR REPLACE FUNCTION pg_catalog.pgshard_guard_owners() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $pgshard$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT g.oid::regclass AS guard, pg_get_userbyid(p.relowner) AS owner
               FROM pg_inherits i
               JOIN pg_class g ON g.oid = i.inhrelid
               JOIN pg_class p ON p.oid = i.inhparent
              WHERE g.relnamespace = pg_catalog.to_regnamespace('pgshard_guard') AND g.relowner <> p.relowner
    LOOP
        EXECUTE format('ALTER FOREIGN TABLE %s OWNER TO %I', r.guard, r.owner);
    END LOOP;
END
$pgshard$;

CREATE OR REPLACE FUNCTION pg_catalog.pgshard_on_sql_drop() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $pgshard$
DECLARE
    tables oid[];
BEGIN
    -- No temporary table here: the dropping transaction may be prepared (2PC).
    SELECT array_agg(d.objid) INTO tables FROM pg_event_trigger_dropped_objects() d
     WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0
       AND EXISTS (SELECT 1 FROM pg_dist_partition p WHERE p.logicalrelid::oid = d.objid);
    DELETE FROM pg_dist_object o USING pg_event_trigger_dropped_objects() d
     WHERE o.classid = d.classid AND o.objid = d.objid AND (o.objsubid = d.objsubid OR d.objsubid = 0);
    IF tables IS NOT NULL THEN
        INSERT INTO pg_dist_cleanup (object_type, object_name, node_group_id, policy_type)
            SELECT 1, format('%I.%I', d.schema_name, d.object_name || '_' || s.shardid), pl.groupid, 1
              FROM pg_event_trigger_dropped_objects() d
              JOIN pg_dist_shard s ON s.logicalrelid::oid = d.objid
              JOIN pg_dist_placement pl ON pl.shardid = s.shardid
             WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = ANY (tables);
        DELETE FROM pg_dist_placement WHERE shardid IN
            (SELECT shardid FROM pg_dist_shard WHERE logicalrelid::oid = ANY (tables));
        DELETE FROM pg_dist_shard WHERE logicalrelid::oid = ANY (tables);
        WITH gone AS (DELETE FROM pg_dist_partition WHERE logicalrelid::oid = ANY (tables) RETURNING colocationid)
        DELETE FROM pg_dist_colocation c WHERE c.colocationid IN (SELECT colocationid FROM gone)
           AND NOT EXISTS (SELECT 1 FROM pg_dist_partition p WHERE p.colocationid = c.colocationid
                             AND NOT p.logicalrelid::oid = ANY (tables));
        PERFORM pg_catalog.pgshard_raise_catalog_version();
    END IF;
END
$pgshard$;

DO $pgshard$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger WHERE evtname = 'pgshard_on_sql_drop') THEN
        CREATE EVENT TRIGGER pgshard_on_sql_drop ON sql_drop
            EXECUTE FUNCTION pg_catalog.pgshard_on_sql_drop();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger WHERE evtname = 'pgshard_guard_owners') THEN
        CREATE EVENT TRIGGER pgshard_guard_owners ON ddl_command_end
            WHEN TAG IN ('ALTER TABLE')
            EXECUTE FUNCTION pg_catalog.pgshard_guard_owners();
    END IF;
END
$pgshard$;

-- pgshard's own (superuser) connections only: they change any table.
REVOKE EXECUTE ON FUNCTION pg_catalog.pgshard_shell_key_checks(regclass, boolean),
    pg_catalog.pgshard_guard_shell(regclass), pg_catalog.pgshard_unguard_shell(regclass) FROM PUBLIC;

SELECT pg_catalog.pgshard_guard_shell(logicalrelid) FROM pg_catalog.pg_dist_partition;
"#;
