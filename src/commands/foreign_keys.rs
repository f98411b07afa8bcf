//! Foreign keys on distributed and reference tables, as Citus allows them: between
//! co-located hash-distributed tables on keys pairing both distribution columns at
//! the same position, from distributed tables to reference tables, and between
//! reference tables. The workers enforce them: each shard gets the constraint
//! (`<name>_<shardid>`) pointing at the shard of the referenced table on its own
//! worker (shard `i` of a co-located table: the one with the same hash range; a
//! reference table: its one shard, placed on every worker).
//!
//! The constraint's definition is PostgreSQL's own (`pg_get_constraintdef` on the
//! shell), rewritten for a shard on the parse tree: the shard's table, the
//! constraint's shard name, the referenced shard. `create_distributed_table` and
//! `create_reference_table` read the shell's foreign keys; `ALTER TABLE ... ADD`
//! reads the ones the statement made on the shell (`commands::ddl`). Refusals are
//! Citus's (`check`), with its messages and SQLSTATEs.

use super::db_err;
use super::distribute::shard_object_name;
use crate::catalog::{shard_table_name, Oid};
use crate::error::{sqlstate, PgError};
use crate::sql::quote::quote_ident;
use pg_query::protobuf::node::Node as N;
use std::collections::HashMap;
use tokio_postgres::Client;

/// A foreign key as the coordinator node's `pg_constraint` has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignKey {
    pub name: String,
    pub referenced: Oid,
    pub referenced_schema: String,
    pub referenced_name: String,
    /// Referencing and referenced attnums, pairwise.
    pub conkey: Vec<i16>,
    pub confkey: Vec<i16>,
    /// `confdeltype` / `confupdtype`: 'a' no action, 'r' restrict, 'c' cascade,
    /// 'n' set null, 'd' set default.
    pub on_delete: char,
    pub on_update: char,
    /// `pg_get_constraintdef`.
    pub definition: String,
}

/// What a table of a foreign key is, for Citus's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Hash {
        dist_attnum: i16,
        colocation_id: i32,
    },
    Reference,
    /// A table of the coordinator node only.
    Local,
}

/// Which shard of the referenced table a shard's constraint points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A self-referencing key: the shard itself.
    Same,
    /// A reference table's one shard.
    One(i64),
    /// Co-located shards: referencing shard id -> referenced shard id.
    Paired(HashMap<i64, i64>),
}

/// A foreign key ready to be made on each shard of the referencing table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardForeignKey {
    pub key: ForeignKey,
    pub target: Target,
}

impl ShardForeignKey {
    /// `ALTER TABLE <shard> ADD CONSTRAINT <name>_<shardid> FOREIGN KEY ... REFERENCES
    /// <referenced shard> ...` for shard `shard_id` of `schema.table`.
    pub fn shard_sql(&self, schema: &str, table: &str, shard_id: i64) -> Result<String, PgError> {
        let (ref_schema, ref_table, ref_shard) = match &self.target {
            Target::Same => (schema, table, shard_id),
            Target::One(id) => (
                self.key.referenced_schema.as_str(),
                self.key.referenced_name.as_str(),
                *id,
            ),
            Target::Paired(pairs) => (
                self.key.referenced_schema.as_str(),
                self.key.referenced_name.as_str(),
                *pairs.get(&shard_id).ok_or_else(|| {
                    PgError::internal(format!(
                        "no shard of \"{}\" is co-located with shard {shard_id} of \"{table}\"",
                        self.key.referenced_name
                    ))
                })?,
            ),
        };
        shard_constraint_sql(
            &self.key.name,
            &self.key.definition,
            (schema, &shard_table_name(table, shard_id)),
            &shard_object_name(&self.key.name, shard_id),
            (ref_schema, &shard_table_name(ref_table, ref_shard)),
        )
    }
}

/// The constraint `definition` (`FOREIGN KEY (...) REFERENCES t(...) ...`) added to
/// `table` as `shard_name`, referencing `referenced`: parsed, renamed, deparsed.
pub fn shard_constraint_sql(
    name: &str,
    definition: &str,
    table: (&str, &str),
    shard_name: &str,
    referenced: (&str, &str),
) -> Result<String, PgError> {
    let text = format!(
        "ALTER TABLE pgshard_fk ADD CONSTRAINT {} {definition}",
        quote_ident(name)
    );
    let bad = |why: &str| PgError::internal(format!("foreign key {name:?} ({definition}): {why}"));
    let mut parsed = pg_query::parse(&text, 0).map_err(|e| bad(&e.to_string()))?;
    let stmt = parsed
        .protobuf
        .stmts
        .first_mut()
        .and_then(|s| s.stmt.as_mut())
        .and_then(|s| s.node.as_mut());
    let Some(N::AlterTableStmt(alter)) = stmt else {
        return Err(bad("not an ALTER TABLE"));
    };
    let rel = alter.relation.as_mut().ok_or_else(|| bad("no table"))?;
    rel.schemaname = table.0.to_string();
    rel.relname = table.1.to_string();
    let constraint = alter
        .cmds
        .first_mut()
        .and_then(|c| c.node.as_mut())
        .and_then(|c| match c {
            N::AlterTableCmd(cmd) => cmd.def.as_mut().and_then(|d| d.node.as_mut()),
            _ => None,
        });
    let Some(N::Constraint(c)) = constraint else {
        return Err(bad("not a constraint"));
    };
    c.conname = shard_name.to_string();
    let pk = c
        .pktable
        .as_mut()
        .ok_or_else(|| bad("no referenced table"))?;
    pk.schemaname = referenced.0.to_string();
    pk.relname = referenced.1.to_string();
    parsed
        .protobuf
        .deparse(Default::default())
        .map_err(|e| bad(&format!("cannot deparse: {e}")))
}

fn cannot_create() -> PgError {
    PgError::not_supported("cannot create foreign key constraint")
}

/// Citus's rules for a foreign key from a `referencing` table to a `referenced` one
/// (`replicated`: the referencing hash table has several placements per shard).
pub fn check(
    fk: &ForeignKey,
    referencing: Side,
    referenced: Side,
    replicated: bool,
) -> Result<(), PgError> {
    match (referencing, referenced) {
        (_, Side::Local) => {
            return Err(PgError::new(
                sqlstate::INVALID_TABLE_DEFINITION,
                "cannot create foreign key constraint",
            )
            .with_detail("Referenced table must be a distributed table or a reference table."))
        }
        (Side::Local, Side::Reference) => return Err(local_to_reference()),
        (Side::Local, Side::Hash { .. }) => return Err(local_to_distributed()),
        (Side::Reference, Side::Reference) => return Ok(()),
        (Side::Reference, Side::Hash { .. }) => {
            return Err(PgError::not_supported(
                "cannot create foreign key constraint since foreign keys from reference tables \
                 to distributed tables are not supported",
            )
            .with_detail(
                "A reference table can only have reference keys to other reference tables",
            ))
        }
        (Side::Hash { .. }, _) => {}
    }
    let Side::Hash {
        dist_attnum,
        colocation_id,
    } = referencing
    else {
        return Ok(());
    };
    let referenced_dist = match referenced {
        Side::Hash {
            dist_attnum,
            colocation_id: theirs,
        } => {
            if theirs != colocation_id {
                return Err(PgError::not_supported(
                    "cannot create foreign key constraint since relations are not colocated or \
                     not referencing a reference table",
                )
                .with_detail(
                    "A distributed table can only have foreign keys if it is referencing another \
                     colocated hash distributed table or a reference table",
                ));
            }
            Some(dist_attnum)
        }
        _ => None,
    };
    let mine = fk.conkey.iter().position(|a| *a == dist_attnum);
    let theirs = referenced_dist.and_then(|d| fk.confkey.iter().position(|a| *a == d));
    if mine.is_some() {
        if matches!(fk.on_delete, 'n' | 'd') {
            return Err(cannot_create().with_detail(
                "SET NULL or SET DEFAULT is not supported in ON DELETE operation when distribution \
                 key is included in the foreign key constraint",
            ));
        }
        if matches!(fk.on_update, 'n' | 'd' | 'c') {
            return Err(cannot_create().with_detail(
                "SET NULL, SET DEFAULT or CASCADE is not supported in ON UPDATE operation when \
                 distribution key included in the foreign constraint.",
            ));
        }
    }
    if referenced_dist.is_some() && (mine.is_none() || mine != theirs) {
        return Err(cannot_create().with_detail(
            "Foreign keys are supported in two cases, either in between two colocated tables \
             including partition column in the same ordinal in the both tables or from \
             distributed to reference tables",
        ));
    }
    if replicated {
        return Err(cannot_create()
            .with_detail(
                "Citus Community Edition currently supports foreign key constraints only for \
                 \"citus.shard_replication_factor = 1\".",
            )
            .with_hint("Please change \"citus.shard_replication_factor to 1\"."));
    }
    Ok(())
}

/// A local table referencing a reference table: Citus needs the reference table on
/// the coordinator node, where pgshard keeps no placement of it.
pub fn local_to_reference() -> PgError {
    PgError::not_supported("coordinator is not added to the metadata").with_detail(
        "A foreign key from a local table to a reference table needs a placement of the \
         reference table on the coordinator node; pgshard keeps reference tables on the workers \
         only. Distribute the referencing table (create_distributed_table or \
         create_reference_table) first.",
    )
}

/// A local table referencing a hash-distributed table.
pub fn local_to_distributed() -> PgError {
    PgError::not_supported(
        "cannot create foreign key constraint since foreign keys from reference tables and citus \
         local tables to distributed tables are not supported",
    )
}

/// The foreign keys of `relid` (the referencing side), in creation order.
pub async fn read(coord: &Client, relid: Oid) -> Result<Vec<ForeignKey>, PgError> {
    let rows = coord
        .query(
            "SELECT k.conname::text, k.confrelid, n.nspname::text, c.relname::text, \
                    k.conkey::int2[], k.confkey::int2[], k.confdeltype::text, k.confupdtype::text, \
                    pg_catalog.pg_get_constraintdef(k.oid) \
             FROM pg_catalog.pg_constraint k \
             JOIN pg_catalog.pg_class c ON c.oid = k.confrelid \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE k.conrelid = $1 AND k.contype = 'f' ORDER BY k.oid",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot read the table's foreign keys"))?;
    let first = |s: String| s.chars().next().unwrap_or('a');
    Ok(rows
        .iter()
        .map(|r| ForeignKey {
            name: r.get(0),
            referenced: r.get(1),
            referenced_schema: r.get(2),
            referenced_name: r.get(3),
            conkey: r.get(4),
            confkey: r.get(5),
            on_delete: first(r.get(6)),
            on_update: first(r.get(7)),
            definition: r.get(8),
        })
        .collect())
}

/// What a distributed or reference table of the catalog snapshot is.
pub fn side_of_table(t: &crate::catalog::DistTable) -> Side {
    match (t.method, &t.dist_column) {
        (crate::catalog::PartitionMethod::Hash, Some(c)) => Side::Hash {
            dist_attnum: c.attnum,
            colocation_id: t.colocation_id,
        },
        _ => Side::Reference,
    }
}

/// What `relid` is in the catalog, and its shards as (shard id, hash range min).
async fn side_of(coord: &Client, relid: Oid) -> Result<(Side, Vec<(i64, i32)>), PgError> {
    let row = coord
        .query_opt(
            "SELECT p.partmethod::text, a.attnum, p.colocationid \
             FROM pg_catalog.pg_dist_partition p \
             LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = p.logicalrelid AND a.attname = p.partkey \
             WHERE p.logicalrelid = $1::oid::regclass",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot read pg_dist_partition"))?;
    let Some(row) = row else {
        return Ok((Side::Local, Vec::new()));
    };
    let shards: Vec<(i64, i32)> = coord
        .query(
            "SELECT shardid, coalesce(shardminvalue::int4, -2147483648) FROM pg_catalog.pg_dist_shard \
             WHERE logicalrelid = $1::oid::regclass ORDER BY 2, 1",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot read pg_dist_shard"))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let side = match row.get::<_, String>(0).as_str() {
        "h" => Side::Hash {
            dist_attnum: row.get::<_, Option<i16>>(1).unwrap_or(0),
            colocation_id: row.get(2),
        },
        "n" => Side::Reference,
        other => {
            return Err(PgError::not_supported(format!(
                "pgshard does not support foreign keys to tables of partmethod '{other}'"
            )))
        }
    };
    Ok((side, shards))
}

/// The foreign keys of `relid` (all, or those not named in `skip`), checked against
/// Citus's rules and paired with the referenced shards. `referencing` is what the
/// table is (or is becoming), `shards` its shards as (shard id, hash range min).
pub async fn resolve(
    coord: &Client,
    relid: Oid,
    referencing: Side,
    replicated: bool,
    shards: &[(i64, i32)],
    skip: &[String],
) -> Result<Vec<ShardForeignKey>, PgError> {
    let mut out = Vec::new();
    for key in read(coord, relid).await? {
        if skip.contains(&key.name) {
            continue;
        }
        if key.referenced == relid {
            check(&key, referencing, referencing, replicated)?;
            out.push(ShardForeignKey {
                key,
                target: Target::Same,
            });
            continue;
        }
        let (side, theirs) = side_of(coord, key.referenced).await?;
        check(&key, referencing, side, replicated)?;
        let target = match side {
            Side::Reference => Target::One(theirs.first().map(|s| s.0).ok_or_else(|| {
                PgError::internal(format!(
                    "reference table \"{}\" has no shard",
                    key.referenced_name
                ))
            })?),
            _ => {
                let by_min: HashMap<i32, i64> =
                    theirs.iter().map(|(id, min)| (*min, *id)).collect();
                let mut pairs = HashMap::new();
                for (id, min) in shards {
                    let other = by_min.get(min).ok_or_else(|| {
                        PgError::internal(format!(
                            "shard {id} of the referencing table has no co-located shard of \"{}\"",
                            key.referenced_name
                        ))
                    })?;
                    pairs.insert(*id, *other);
                }
                Target::Paired(pairs)
            }
        };
        out.push(ShardForeignKey { key, target });
    }
    Ok(out)
}

/// Whether `relid` has a foreign key or is referenced by one.
pub async fn in_any_key(coord: &Client, relid: Oid) -> Result<bool, PgError> {
    Ok(coord
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint WHERE contype = 'f' \
               AND (conrelid = $1 OR confrelid = $1))",
            &[&relid],
        )
        .await
        .map_err(db_err("cannot read foreign keys"))?
        .get(0))
}

/// `undistribute_table` of a table in a foreign key (either side), as Citus refuses
/// it without `cascade_via_foreign_keys` (which pgshard does not do): its rows would
/// come back into a shell whose key partner is empty or distributed.
pub async fn refuse_undistribute(coord: &Client, relid: Oid, table: &str) -> Result<(), PgError> {
    if !in_any_key(coord, relid).await? {
        return Ok(());
    }
    Err(PgError::not_supported(format!(
        "cannot complete operation because table {table} has a foreign key"
    ))
    .with_hint(
        "pgshard does not support cascade_via_foreign_keys: drop the foreign keys first \
         (ALTER TABLE ... DROP CONSTRAINT).",
    ))
}

/// Names of the foreign keys of `relid`.
pub async fn names(coord: &Client, relid: Oid) -> Result<Vec<String>, PgError> {
    Ok(read(coord, relid)
        .await?
        .into_iter()
        .map(|k| k.name)
        .collect())
}

/// The order to drop `relids` in: a table referencing another of the list first.
pub async fn drop_order(coord: &Client, relids: &[Oid]) -> Result<Vec<Oid>, PgError> {
    let rows = coord
        .query(
            "SELECT conrelid, confrelid FROM pg_catalog.pg_constraint \
             WHERE contype = 'f' AND conrelid <> confrelid AND conrelid = ANY($1) AND confrelid = ANY($1)",
            &[&relids.to_vec()],
        )
        .await
        .map_err(db_err("cannot read foreign keys"))?;
    let edges: Vec<(Oid, Oid)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    Ok(referencing_first(relids, &edges))
}

/// `relids` ordered so that the referencing side of each edge comes before the
/// referenced one (cycles keep the given order).
pub fn referencing_first(relids: &[Oid], edges: &[(Oid, Oid)]) -> Vec<Oid> {
    let mut left: Vec<Oid> = relids.to_vec();
    let mut out = Vec::new();
    while !left.is_empty() {
        // A table no remaining table references can go now.
        let next = left
            .iter()
            .position(|t| {
                !edges
                    .iter()
                    .any(|(from, to)| to == t && from != t && left.contains(from))
            })
            .unwrap_or(0);
        out.push(left.remove(next));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fk(conkey: &[i16], confkey: &[i16], del: char, upd: char) -> ForeignKey {
        ForeignKey {
            name: "fk".into(),
            referenced: 2,
            referenced_schema: "public".into(),
            referenced_name: "companies".into(),
            conkey: conkey.to_vec(),
            confkey: confkey.to_vec(),
            on_delete: del,
            on_update: upd,
            definition: "FOREIGN KEY (company_id) REFERENCES companies(id)".into(),
        }
    }

    const H1: Side = Side::Hash {
        dist_attnum: 1,
        colocation_id: 7,
    };

    #[test]
    fn citus_rules() {
        let ok = fk(&[1, 2], &[1, 3], 'c', 'a');
        assert!(check(&ok, H1, H1, false).is_ok());
        assert!(check(&ok, H1, Side::Reference, false).is_ok());
        assert!(check(&ok, Side::Reference, Side::Reference, false).is_ok());
        let other_group = Side::Hash {
            dist_attnum: 1,
            colocation_id: 8,
        };
        let e = check(&ok, H1, other_group, false).unwrap_err();
        assert_eq!(e.code, "0A000");
        assert!(e.message.contains("not colocated"), "{}", e.message);
        let e = check(&ok, H1, Side::Local, false).unwrap_err();
        assert_eq!(e.code, "42P16");
        let e = check(&ok, Side::Reference, H1, false).unwrap_err();
        assert!(e.message.contains("from reference tables"), "{}", e.message);
        // Distribution columns at different positions, or missing.
        let e = check(&fk(&[2, 1], &[1, 3], 'a', 'a'), H1, H1, false).unwrap_err();
        assert!(e.detail.unwrap().contains("same ordinal"));
        assert!(check(&fk(&[2], &[1], 'a', 'a'), H1, H1, false).is_err());
        // Not including the distribution column is fine towards a reference table.
        assert!(check(&fk(&[2], &[1], 'n', 'c'), H1, Side::Reference, false).is_ok());
        let e = check(&fk(&[1], &[1], 'n', 'a'), H1, Side::Reference, false).unwrap_err();
        assert!(e.detail.unwrap().contains("ON DELETE"));
        let e = check(&fk(&[1], &[1], 'a', 'c'), H1, H1, false).unwrap_err();
        assert!(e.detail.unwrap().contains("ON UPDATE"));
        assert!(check(&ok, H1, H1, true).is_err());
        assert!(check(&ok, Side::Local, Side::Reference, false).is_err());
        assert!(check(&ok, Side::Local, H1, false).is_err());
        // A new co-location group (-1) matches no other table, itself only.
        let fresh = Side::Hash {
            dist_attnum: 1,
            colocation_id: -1,
        };
        assert!(check(&ok, fresh, H1, false).is_err());
        assert!(check(&ok, fresh, fresh, false).is_ok());
    }

    #[test]
    fn shard_statement_points_at_the_paired_shard() {
        let key = ForeignKey {
            definition: "FOREIGN KEY (company_id, campaign_id) REFERENCES campaigns(company_id, id) ON DELETE CASCADE".into(),
            name: "ads_campaign\"fk".into(),
            referenced_schema: "my s".into(),
            referenced_name: "campaigns".into(),
            ..fk(&[1, 2], &[1, 2], 'c', 'a')
        };
        let pairs = ShardForeignKey {
            key,
            target: Target::Paired(HashMap::from([(102040, 102008)])),
        };
        let sql = pairs.shard_sql("my s", "ads", 102040).unwrap();
        assert_eq!(
            sql,
            "ALTER TABLE \"my s\".ads_102040 ADD CONSTRAINT \"ads_campaign\"\"fk_102040\" \
             FOREIGN KEY (company_id, campaign_id) REFERENCES \"my s\".campaigns_102008 \
             (company_id, id) ON DELETE CASCADE"
        );
        assert!(pairs.shard_sql("my s", "ads", 1).is_err());
        let same = ShardForeignKey {
            target: Target::Same,
            ..pairs.clone()
        };
        assert!(same
            .shard_sql("public", "ads", 5)
            .unwrap()
            .contains("REFERENCES public.ads_5"));
        let one = ShardForeignKey {
            target: Target::One(9),
            ..pairs
        };
        assert!(one
            .shard_sql("public", "ads", 5)
            .unwrap()
            .contains("REFERENCES \"my s\".campaigns_9"));
    }

    #[test]
    fn drops_referencing_tables_first() {
        assert_eq!(
            referencing_first(&[1, 2, 3], &[(2, 1), (3, 2)]),
            vec![3, 2, 1]
        );
        assert_eq!(referencing_first(&[1, 2], &[(1, 2), (2, 1)]), vec![1, 2]);
        assert_eq!(referencing_first(&[1, 2], &[(1, 1)]), vec![1, 2]);
    }
}
