//! Objects a distributed or reference table depends on, created on every worker before
//! its shards (Citus's object propagation): schemas, types (enum, composite, domain
//! with its default and constraints, range), collations, functions its defaults,
//! CHECK constraints and index expressions call, and extensions owning any of these.
//!
//! The coordinator node's `pg_depend` is walked from the table (and its defaults,
//! constraints and indexes; from a type to its domain constraints and composite
//! columns; from an array type to its element type) down to user objects
//! (oid >= 16384); an object that belongs to an extension stands for its extension.
//! Each object's DDL is made from the coordinator node's catalog (`pg_enum`,
//! `format_type`, `pg_get_constraintdef`, `pg_collation`, `pg_get_functiondef`,
//! `pg_extension`), names quoted by `sql::quote`, and run on a worker where the object
//! is missing, deepest dependency first, with the coordinator node's owner. Every such
//! object is recorded in `pg_dist_object`, so later DDL on it reaches the workers
//! (`planner::objects`) and `citus_add_node` can copy it to a new worker.

use super::{abbreviate, db_err};
use crate::catalog::Oid;
use crate::error::PgError;
use crate::sql::quote::{quote_ident, quote_literal, quote_qualified};
use tokio_postgres::Client;

/// PostgreSQL's first oid of user-made objects.
const FIRST_NORMAL_OBJECT_ID: u32 = 16384;

/// One object to create on the workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    pub classid: Oid,
    pub objid: Oid,
    /// `type`, `collation`, `function`, `extension`, `schema` (as in `pg_dist_object`).
    pub kind: &'static str,
    /// The qualified, quoted name (`to_regtype` / `to_regprocedure` form for types and
    /// functions), for the existence check on the workers.
    pub name: String,
    /// The statements that create it (owner included).
    pub create: Vec<String>,
    pub owner: Option<String>,
}

/// The user objects `relid` depends on, deepest first, each once.
const DEPENDENCIES_SQL: &str = "
WITH RECURSIVE objs(classid, objid, depth, path) AS (
    SELECT 'pg_class'::regclass::oid, $1::oid, 0, ARRAY['pg_class'::regclass::oid || '/' || $1::oid]
  UNION ALL
    SELECT x.classid, x.objid, o.depth + 1, o.path || (x.classid || '/' || x.objid)
      FROM objs o, LATERAL (
        SELECT d.refclassid AS classid, d.refobjid AS objid FROM pg_catalog.pg_depend d
         WHERE d.classid = o.classid AND d.objid = o.objid AND d.deptype IN ('n', 'a', 'i')
        UNION ALL
        SELECT 'pg_attrdef'::regclass::oid, a.oid FROM pg_catalog.pg_attrdef a
         WHERE o.classid = 'pg_class'::regclass AND a.adrelid = o.objid
        UNION ALL
        SELECT 'pg_constraint'::regclass::oid, c.oid FROM pg_catalog.pg_constraint c
         WHERE (o.classid = 'pg_class'::regclass AND c.conrelid = o.objid)
            OR (o.classid = 'pg_type'::regclass AND c.contypid = o.objid)
        UNION ALL
        SELECT 'pg_class'::regclass::oid, i.indexrelid FROM pg_catalog.pg_index i
         WHERE o.classid = 'pg_class'::regclass AND i.indrelid = o.objid
        UNION ALL
        SELECT 'pg_class'::regclass::oid, t.typrelid FROM pg_catalog.pg_type t
         WHERE o.classid = 'pg_type'::regclass AND t.oid = o.objid AND t.typrelid <> 0
      ) x
     WHERE o.depth < 12 AND x.objid >= 16384
       -- depth is the longest path without cycles (a composite type and its relation)
       AND NOT (x.classid || '/' || x.objid) = ANY (o.path)
       -- an extension's member is not looked into: the extension stands for it
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend e WHERE e.classid = o.classid
                          AND e.objid = o.objid AND e.deptype = 'e' AND o.depth > 0)
),
mapped AS (
    SELECT coalesce(e.refclassid, o.classid) AS classid, coalesce(e.refobjid, o.objid) AS objid, o.depth
      FROM objs o
      LEFT JOIN pg_catalog.pg_depend e ON e.classid = o.classid AND e.objid = o.objid AND e.deptype = 'e'
)
SELECT classid, objid, max(depth) AS depth FROM mapped
 WHERE classid IN ('pg_type'::regclass, 'pg_collation'::regclass, 'pg_proc'::regclass,
                   'pg_extension'::regclass, 'pg_namespace'::regclass)
   AND objid >= 16384
 GROUP BY classid, objid
 ORDER BY 3 DESC, 1, 2";

fn class(name: &str) -> String {
    format!("'{name}'::regclass")
}

/// Reads what `relid` depends on from the coordinator node (inside its transaction).
pub(crate) async fn read(coord: &Client, relid: Oid) -> Result<Vec<Dependency>, PgError> {
    let rows = coord
        .query(DEPENDENCIES_SQL, &[&relid])
        .await
        .map_err(db_err("cannot read the table's dependencies"))?;
    let classes = coord
        .query_one(
            &format!(
                "SELECT {}::oid, {}::oid, {}::oid, {}::oid, {}::oid",
                class("pg_type"),
                class("pg_collation"),
                class("pg_proc"),
                class("pg_extension"),
                class("pg_namespace")
            ),
            &[],
        )
        .await
        .map_err(db_err("cannot read catalog oids"))?;
    let (ty, coll, proc_, ext, nsp): (Oid, Oid, Oid, Oid, Oid) = (
        classes.get(0),
        classes.get(1),
        classes.get(2),
        classes.get(3),
        classes.get(4),
    );
    let mut out = Vec::new();
    for r in rows {
        let classid: Oid = r.get(0);
        let objid: Oid = r.get(1);
        debug_assert!(objid >= FIRST_NORMAL_OBJECT_ID);
        let dep = if classid == ty {
            type_dependency(coord, objid).await?
        } else if classid == coll {
            Some(collation_dependency(coord, objid).await?)
        } else if classid == proc_ {
            Some(function_dependency(coord, objid).await?)
        } else if classid == ext {
            Some(extension_dependency(coord, objid).await?)
        } else if classid == nsp {
            schema_dependency(coord, objid).await?
        } else {
            None
        };
        if let Some(mut d) = dep {
            d.classid = classid;
            d.objid = objid;
            if !out
                .iter()
                .any(|x: &Dependency| x.name == d.name && x.kind == d.kind)
            {
                out.push(d);
            }
        }
    }
    Ok(out)
}

fn owner_sql(kind: &str, name: &str, owner: &str) -> String {
    format!("ALTER {kind} {name} OWNER TO {}", quote_ident(owner))
}

async fn schema_dependency(coord: &Client, oid: Oid) -> Result<Option<Dependency>, PgError> {
    let r = coord
        .query_one(
            "SELECT nspname::text, pg_catalog.pg_get_userbyid(nspowner)::text FROM pg_catalog.pg_namespace WHERE oid = $1",
            &[&oid],
        )
        .await
        .map_err(db_err("cannot read a schema"))?;
    let (name, owner): (String, String) = (r.get(0), r.get(1));
    Ok(Some(Dependency {
        classid: 0,
        objid: oid,
        kind: "schema",
        name: quote_ident(&name),
        create: vec![
            format!("CREATE SCHEMA IF NOT EXISTS {}", quote_ident(&name)),
            owner_sql("SCHEMA", &quote_ident(&name), &owner),
        ],
        owner: Some(owner),
    }))
}

/// Enum, domain, composite or range type; `None` for an array type (its element type
/// is a dependency of its own) or a table's row type.
async fn type_dependency(coord: &Client, oid: Oid) -> Result<Option<Dependency>, PgError> {
    let r = coord
        .query_one(
            "SELECT n.nspname::text, t.typname::text, t.typtype::text, \
                    pg_catalog.pg_get_userbyid(t.typowner)::text, t.typelem <> 0 AND t.typsubscript <> 0, \
                    coalesce((SELECT c.relkind::text FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid), ''), \
                    pg_catalog.format_type(t.typbasetype, t.typtypmod), t.typdefault, t.typnotnull, \
                    CASE WHEN t.typcollation <> 0 AND t.typcollation <> \
                         (SELECT b.typcollation FROM pg_catalog.pg_type b WHERE b.oid = t.typbasetype) \
                    THEN (SELECT pg_catalog.quote_ident(cn.nspname) || '.' || pg_catalog.quote_ident(c.collname) \
                          FROM pg_catalog.pg_collation c JOIN pg_catalog.pg_namespace cn ON cn.oid = c.collnamespace \
                          WHERE c.oid = t.typcollation) END \
             FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace WHERE t.oid = $1",
            &[&oid],
        )
        .await
        .map_err(db_err("cannot read a type"))?;
    let (schema, name, typtype, owner): (String, String, String, String) =
        (r.get(0), r.get(1), r.get(2), r.get(3));
    let is_array: bool = r.get(4);
    let relkind: String = r.get(5);
    let qualified = quote_qualified(&schema, &name);
    if is_array || (typtype == "c" && relkind != "c") {
        return Ok(None);
    }
    let create = match typtype.as_str() {
        "e" => {
            let labels: Vec<String> = coord
                .query(
                    "SELECT enumlabel::text FROM pg_catalog.pg_enum WHERE enumtypid = $1 ORDER BY enumsortorder",
                    &[&oid],
                )
                .await
                .map_err(db_err("cannot read an enum's labels"))?
                .iter()
                .map(|l| quote_literal(&l.get::<_, String>(0)))
                .collect();
            format!("CREATE TYPE {qualified} AS ENUM ({})", labels.join(", "))
        }
        "d" => {
            let base: String = r.get(6);
            let default: Option<String> = r.get(7);
            let not_null: bool = r.get(8);
            let collation: Option<String> = r.get(9);
            let mut sql = format!("CREATE DOMAIN {qualified} AS {base}");
            if let Some(c) = collation {
                sql.push_str(&format!(" COLLATE {c}"));
            }
            if let Some(d) = default {
                sql.push_str(&format!(" DEFAULT {d}"));
            }
            if not_null {
                sql.push_str(" NOT NULL");
            }
            for c in coord
                .query(
                    "SELECT conname::text, pg_catalog.pg_get_constraintdef(oid) FROM pg_catalog.pg_constraint \
                     WHERE contypid = $1 ORDER BY oid",
                    &[&oid],
                )
                .await
                .map_err(db_err("cannot read a domain's constraints"))?
            {
                sql.push_str(&format!(
                    " CONSTRAINT {} {}",
                    quote_ident(&c.get::<_, String>(0)),
                    c.get::<_, String>(1)
                ));
            }
            sql
        }
        "c" => {
            let attrs: Vec<String> = coord
                .query(
                    "SELECT pg_catalog.quote_ident(a.attname) || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod) || \
                            CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation THEN \
                              (SELECT ' COLLATE ' || pg_catalog.quote_ident(cn.nspname) || '.' || pg_catalog.quote_ident(c.collname) \
                               FROM pg_catalog.pg_collation c JOIN pg_catalog.pg_namespace cn ON cn.oid = c.collnamespace \
                               WHERE c.oid = a.attcollation) ELSE '' END \
                     FROM pg_catalog.pg_type ct JOIN pg_catalog.pg_attribute a ON a.attrelid = ct.typrelid \
                     JOIN pg_catalog.pg_type t ON t.oid = a.atttypid \
                     WHERE ct.oid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
                    &[&oid],
                )
                .await
                .map_err(db_err("cannot read a composite type's attributes"))?
                .iter()
                .map(|a| a.get::<_, String>(0))
                .collect();
            format!("CREATE TYPE {qualified} AS ({})", attrs.join(", "))
        }
        "r" => {
            let rr = coord
                .query_one(
                    "SELECT pg_catalog.format_type(r.rngsubtype, NULL), \
                            (SELECT pg_catalog.quote_ident(cn.nspname) || '.' || pg_catalog.quote_ident(c.collname) \
                               FROM pg_catalog.pg_collation c JOIN pg_catalog.pg_namespace cn ON cn.oid = c.collnamespace \
                              WHERE c.oid = r.rngcollation AND r.rngcollation <> \
                                    (SELECT typcollation FROM pg_catalog.pg_type WHERE oid = r.rngsubtype)), \
                            CASE WHEN r.rngsubdiff <> 0 THEN r.rngsubdiff::regproc::text END, \
                            (SELECT pg_catalog.quote_ident(mt.typname) FROM pg_catalog.pg_type mt WHERE mt.oid = r.rngmultitypid) \
                     FROM pg_catalog.pg_range r WHERE r.rngtypid = $1",
                    &[&oid],
                )
                .await
                .map_err(db_err("cannot read a range type"))?;
            let mut opts = vec![format!("SUBTYPE = {}", rr.get::<_, String>(0))];
            if let Some(c) = rr.get::<_, Option<String>>(1) {
                opts.push(format!("COLLATION = {c}"));
            }
            if let Some(f) = rr.get::<_, Option<String>>(2) {
                opts.push(format!("SUBTYPE_DIFF = {f}"));
            }
            if let Some(m) = rr.get::<_, Option<String>>(3) {
                opts.push(format!("MULTIRANGE_TYPE_NAME = {}.{m}", quote_ident(&schema)));
            }
            format!("CREATE TYPE {qualified} AS RANGE ({})", opts.join(", "))
        }
        _ => {
            return Err(PgError::not_supported(format!(
                "pgshard cannot create type {qualified} on the worker nodes: only enum, domain, composite \
                 and range types, and types of extensions, are propagated"
            )))
        }
    };
    let kind = if typtype == "d" { "DOMAIN" } else { "TYPE" };
    Ok(Some(Dependency {
        classid: 0,
        objid: oid,
        kind: "type",
        name: qualified.clone(),
        create: vec![create, owner_sql(kind, &qualified, &owner)],
        owner: Some(owner),
    }))
}

async fn collation_dependency(coord: &Client, oid: Oid) -> Result<Dependency, PgError> {
    let r = coord
        .query_one(
            "SELECT n.nspname::text, c.collname::text, c.collprovider::text, c.collisdeterministic, \
                    c.collcollate, c.collctype, c.colliculocale, pg_catalog.pg_get_userbyid(c.collowner)::text \
             FROM pg_catalog.pg_collation c JOIN pg_catalog.pg_namespace n ON n.oid = c.collnamespace WHERE c.oid = $1",
            &[&oid],
        )
        .await
        .map_err(db_err("cannot read a collation"))?;
    let qualified = quote_qualified(&r.get::<_, String>(0), &r.get::<_, String>(1));
    let provider: String = r.get(2);
    let deterministic: bool = r.get(3);
    let mut opts = Vec::new();
    match provider.as_str() {
        "i" => {
            opts.push("provider = icu".to_string());
            let locale: Option<String> = r.get(6);
            opts.push(format!(
                "locale = {}",
                quote_literal(&locale.unwrap_or_default())
            ));
        }
        _ => {
            opts.push("provider = libc".to_string());
            let collate: Option<String> = r.get(4);
            let ctype: Option<String> = r.get(5);
            opts.push(format!(
                "lc_collate = {}",
                quote_literal(&collate.unwrap_or_default())
            ));
            opts.push(format!(
                "lc_ctype = {}",
                quote_literal(&ctype.unwrap_or_default())
            ));
        }
    }
    if !deterministic {
        opts.push("deterministic = false".to_string());
    }
    let owner: String = r.get(7);
    Ok(Dependency {
        classid: 0,
        objid: oid,
        kind: "collation",
        name: qualified.clone(),
        create: vec![
            format!("CREATE COLLATION {qualified} ({})", opts.join(", ")),
            owner_sql("COLLATION", &qualified, &owner),
        ],
        owner: Some(owner),
    })
}

async fn function_dependency(coord: &Client, oid: Oid) -> Result<Dependency, PgError> {
    let r = coord
        .query_one(
            "SELECT p.prokind::text, p.oid::regprocedure::text, \
                    CASE WHEN p.prokind IN ('f', 'p') THEN pg_catalog.pg_get_functiondef(p.oid) END, \
                    pg_catalog.pg_get_userbyid(p.proowner)::text, \
                    pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(p.proname) \
                      || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')' \
             FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace WHERE p.oid = $1",
            &[&oid],
        )
        .await
        .map_err(db_err("cannot read a function"))?;
    let signature: String = r.get(1);
    let Some(def) = r.get::<_, Option<String>>(2) else {
        return Err(PgError::not_supported(format!(
            "pgshard cannot create aggregate or window function {signature} on the worker nodes"
        )));
    };
    let owner: String = r.get(3);
    let qualified: String = r.get(4);
    let kind = if r.get::<_, String>(0) == "p" {
        "PROCEDURE"
    } else {
        "FUNCTION"
    };
    Ok(Dependency {
        classid: 0,
        objid: oid,
        kind: "function",
        name: qualified.clone(),
        create: vec![def, owner_sql(kind, &qualified, &owner)],
        owner: Some(owner),
    })
}

async fn extension_dependency(coord: &Client, oid: Oid) -> Result<Dependency, PgError> {
    let r = coord
        .query_one(
            "SELECT e.extname::text, n.nspname::text FROM pg_catalog.pg_extension e \
             JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.oid = $1",
            &[&oid],
        )
        .await
        .map_err(db_err("cannot read an extension"))?;
    let (name, schema): (String, String) = (r.get(0), r.get(1));
    Ok(Dependency {
        classid: 0,
        objid: oid,
        kind: "extension",
        name: quote_ident(&name),
        create: vec![
            format!("CREATE SCHEMA IF NOT EXISTS {}", quote_ident(&schema)),
            format!(
                "CREATE EXTENSION IF NOT EXISTS {} SCHEMA {}",
                quote_ident(&name),
                quote_ident(&schema)
            ),
        ],
        owner: None,
    })
}

/// Whether `dep` already exists on the worker `client`.
async fn exists_on(client: &Client, dep: &Dependency) -> Result<bool, tokio_postgres::Error> {
    let sql = match dep.kind {
        "type" => "SELECT pg_catalog.to_regtype($1) IS NOT NULL",
        "function" => "SELECT pg_catalog.to_regprocedure($1) IS NOT NULL",
        "collation" => "SELECT pg_catalog.to_regcollation($1) IS NOT NULL",
        "schema" => "SELECT pg_catalog.to_regnamespace($1) IS NOT NULL",
        // CREATE EXTENSION IF NOT EXISTS
        _ => return Ok(false),
    };
    Ok(client.query_one(sql, &[&dep.name]).await?.get(0))
}

/// Creates the missing `deps` on one worker, in its open transaction. Their owners
/// must exist there already (`roles::sync_roles_on`).
pub(crate) async fn create_on_worker(
    client: &Client,
    at: &str,
    deps: &[Dependency],
) -> Result<(), PgError> {
    let context = |sql: &str| format!("node {at}, statement \"{}\"", abbreviate(sql));
    client
        .batch_execute("SET LOCAL check_function_bodies = off")
        .await
        .map_err(db_err(&format!("cannot prepare node {at}")))?;
    for dep in deps {
        if exists_on(client, dep)
            .await
            .map_err(|e| PgError::from_client_error(&context(&dep.name), &e))?
        {
            continue;
        }
        for sql in &dep.create {
            client
                .batch_execute(sql)
                .await
                .map_err(|e| PgError::from_client_error(&context(sql), &e))?;
        }
    }
    Ok(())
}

/// Records `deps` in `pg_dist_object` (the coordinator node's catalog transaction).
pub(crate) async fn record(coord: &Client, deps: &[Dependency]) -> Result<(), PgError> {
    for dep in deps {
        coord
            .execute(
                "INSERT INTO pg_catalog.pg_dist_object (classid, objid, objsubid, type, object_names) \
                 VALUES ($1, $2, 0, $3, ARRAY[$4]) ON CONFLICT DO NOTHING",
                &[&dep.classid, &dep.objid, &dep.kind, &dep.name],
            )
            .await
            .map_err(db_err("cannot record in pg_dist_object"))?;
    }
    Ok(())
}

/// The objects recorded in `pg_dist_object`, deepest first as far as their recorded
/// order goes (for a new worker: `citus_add_node`).
pub(crate) async fn recorded(coord: &Client) -> Result<Vec<Dependency>, PgError> {
    let rows = coord
        .query(
            "SELECT DISTINCT p.logicalrelid::oid FROM pg_catalog.pg_dist_partition p",
            &[],
        )
        .await
        .map_err(db_err("cannot read pg_dist_partition"))?;
    let mut all: Vec<Dependency> = Vec::new();
    for r in rows {
        for d in read(coord, r.get(0)).await? {
            if !all.iter().any(|x| x.name == d.name && x.kind == d.kind) {
                all.push(d);
            }
        }
    }
    Ok(all)
}
