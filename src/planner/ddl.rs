//! DDL on distributed (and reference) tables: which statements pgshard propagates to
//! every shard, and the shard's own statement, made by rewriting the parse tree
//! (relation, index and constraint names) and deparsing it, never by text replacement.
//!
//! Objects on a shard are named like Citus: `<name>_<shardid>`. Objects the client
//! left unnamed (`ADD PRIMARY KEY (...)`, `CREATE INDEX ON t (...)`) get the name
//! PostgreSQL chose on the coordinator's shell table; the executor reads those after
//! running the statement there and passes them in order to [`shard_statement`].

use super::names::Names;
use crate::catalog::{shard_table_name, Catalog, DistTable, PartitionMethod, ShardId};
use crate::commands::distribute::shard_object_name;
use crate::error::{PgError, PgResult};
use crate::sql::parse::string_items;
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self, AlterTableType as At, ConstrType, ObjectType};
use std::sync::Arc;

/// An object the client did not name; PostgreSQL names it on the shell first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unnamed {
    Index,
    /// A constraint of this `pg_constraint.contype` ('p', 'u', 'c') on these
    /// columns (sorted; `pg_constraint.conkey`).
    Constraint(char, Vec<String>),
}

#[derive(Debug, Clone)]
pub struct DdlPlan {
    pub table: Arc<DistTable>,
    /// The statement as parsed (rewritten per shard).
    pub stmt: N,
    /// The client's text, run unchanged on the shell table.
    pub text: String,
    /// `CREATE/DROP INDEX CONCURRENTLY`: no transaction, shard by shard.
    pub concurrent: bool,
    /// `ALTER TABLE ... RENAME TO new`.
    pub new_table_name: Option<String>,
    /// `RENAME COLUMN` of the distribution column: its new name (catalog partkey).
    pub new_dist_column: Option<String>,
    /// Unnamed objects, in the order [`shard_statement`] meets them.
    pub unnamed: Vec<Unnamed>,
    /// The statement adds foreign keys: made on the shell by the client's statement,
    /// then read back and made per shard pair (`commands::foreign_keys`), not by
    /// [`shard_statement`].
    pub foreign_keys: bool,
    /// The command tag sent to the client.
    pub tag: String,
}

impl DdlPlan {
    /// The plan of `node` (the client's `text`) on `table`, answered with `tag`.
    pub fn new(table: &Arc<DistTable>, node: &N, text: &str, tag: &str) -> DdlPlan {
        // A CHECK naming the table runs unqualified on the shell (see
        // `sql::walk::unqualify_check_columns`); other statements run as the client wrote them.
        let mut unqualified = node.clone();
        let shell_text = match crate::sql::walk::unqualify_check_columns(
            &mut unqualified,
            (&table.schema, &table.name),
        ) {
            true => unqualified
                .deparse(Default::default())
                .unwrap_or_else(|_| text.to_string()),
            false => text.to_string(),
        };
        DdlPlan {
            table: table.clone(),
            stmt: node.clone(),
            text: shell_text,
            concurrent: false,
            new_table_name: None,
            new_dist_column: None,
            unnamed: Vec::new(),
            foreign_keys: false,
            tag: tag.to_string(),
        }
    }

    /// The plan with `CURRENT_USER` and friends naming roles replaced by `caller`, for
    /// the shards' statements that pgshard's own connections run.
    pub fn for_caller(&self, caller: &str) -> DdlPlan {
        let mut p = self.clone();
        super::security::pin_current_roles(&mut p.stmt, caller);
        p
    }

    /// Why this DDL cannot run inside a transaction block, if it cannot. Inside a block
    /// pgshard plans the block's later statements with the catalog as it was, so only
    /// DDL that changes nothing pgshard plans with may run there: CREATE INDEX and
    /// ALTER TABLE adding columns (at the end), defaults, NOT NULL or named constraints.
    pub fn not_in_block(&self) -> Option<&'static str> {
        if self.concurrent {
            return Some("CREATE INDEX CONCURRENTLY cannot run inside a transaction block");
        }
        if self.new_table_name.is_some() || self.new_dist_column.is_some() {
            return Some("renaming a distributed table or its distribution column");
        }
        if !self.unnamed.is_empty() {
            return Some("an index or constraint without a name (name it)");
        }
        if self.foreign_keys {
            return Some("adding a foreign key");
        }
        match &self.stmt {
            N::IndexStmt(_) | N::CreatePolicyStmt(_) | N::AlterPolicyStmt(_) | N::DropStmt(_) => {
                None
            }
            N::RenameStmt(r) if r.rename_type == ObjectType::ObjectPolicy as i32 => None,
            N::AlterTableStmt(a) => {
                let allowed = a.cmds.iter().all(|c| match c.node.as_ref() {
                    Some(N::AlterTableCmd(cmd)) => matches!(
                        At::try_from(cmd.subtype).unwrap_or(At::Undefined),
                        At::AtAddColumn
                            | At::AtColumnDefault
                            | At::AtSetNotNull
                            | At::AtDropNotNull
                            | At::AtAddConstraint
                            | At::AtDropConstraint
                            | At::AtChangeOwner
                            | At::AtEnableRowSecurity
                            | At::AtDisableRowSecurity
                            | At::AtForceRowSecurity
                            | At::AtNoForceRowSecurity
                            | At::AtSetRelOptions
                            | At::AtResetRelOptions
                    ),
                    _ => false,
                });
                (!allowed).then_some("this ALTER TABLE form")
            }
            _ => Some("this statement"),
        }
    }
}

fn refuse(msg: impl Into<String>) -> Option<PgResult<DdlPlan>> {
    Some(Err(PgError::not_supported(msg)))
}

fn partition_column_error() -> PgError {
    PgError::not_supported("cannot execute ALTER TABLE command involving partition column")
}

/// Plans a DDL statement whose target is a distributed table. `None`: not a DDL
/// statement pgshard propagates (the caller's usual rules apply). `Some(Err)`: a
/// refusal (0A000) with the reason.
pub fn plan_ddl(
    node: &N,
    text: &str,
    catalog: &Catalog,
    names: &Names,
) -> Option<PgResult<DdlPlan>> {
    let resolve = |rv: &protobuf::RangeVar| {
        let schema = (!rv.schemaname.is_empty()).then_some(rv.schemaname.as_str());
        names.resolve(catalog, schema, &rv.relname).cloned()
    };
    if let Some(p) = super::security::plan_policy(node, text, catalog, names) {
        return Some(p);
    }
    let plan = match node {
        N::IndexStmt(i) => {
            let table = resolve(i.relation.as_ref()?)?;
            if let Err(e) = check_index(i, &table) {
                return Some(Err(e));
            }
            let unnamed = if i.idxname.is_empty() {
                vec![Unnamed::Index]
            } else {
                vec![]
            };
            let mut p = base(&table, node, text, "CREATE INDEX");
            p.concurrent = i.concurrent;
            p.unnamed = unnamed;
            p
        }
        N::AlterTableStmt(a) => {
            if a.objtype != ObjectType::ObjectTable as i32 {
                return None;
            }
            // A local table's: the caller's rules apply (a constraint naming a
            // distributed table is a reference in its tree), foreign keys to
            // distributed or reference tables aside: Citus's refusals.
            let Some(table) = resolve(a.relation.as_ref()?) else {
                let targets = added_foreign_keys(a)
                    .into_iter()
                    .filter_map(|c| resolve(c.pktable.as_ref()?));
                return targets
                    .map(|t| match t.method {
                        PartitionMethod::Reference => {
                            Err(crate::commands::foreign_keys::local_to_reference())
                        }
                        PartitionMethod::Hash => {
                            Err(crate::commands::foreign_keys::local_to_distributed())
                        }
                    })
                    .next();
            };
            let mut p = base(&table, node, text, "ALTER TABLE");
            for c in &a.cmds {
                let Some(N::AlterTableCmd(cmd)) = c.node.as_ref() else {
                    return refuse("unexpected ALTER TABLE shape");
                };
                if let Err(e) = check_alter_cmd(cmd, &table, &mut p.unnamed) {
                    return Some(Err(e));
                }
            }
            p.foreign_keys = !added_foreign_keys(a).is_empty();
            p
        }
        N::RenameStmt(r) => {
            // ALTER TABLE ... RENAME TO / RENAME CONSTRAINT address tables only; a
            // column rename says which kind of relation it addresses (views stay local).
            let on_table = r.rename_type == ObjectType::ObjectTable as i32
                || r.rename_type == ObjectType::ObjectTabconstraint as i32
                || (r.rename_type == ObjectType::ObjectColumn as i32
                    && r.relation_type == ObjectType::ObjectTable as i32);
            if !on_table {
                return None;
            }
            let table = resolve(r.relation.as_ref()?)?;
            let mut p = base(&table, node, text, "ALTER TABLE");
            if r.rename_type == ObjectType::ObjectTable as i32 {
                p.new_table_name = Some(r.newname.clone());
            } else if r.rename_type == ObjectType::ObjectColumn as i32 {
                if table.dist_column.as_ref().map(|c| &c.name) == Some(&r.subname) {
                    p.new_dist_column = Some(r.newname.clone());
                }
            }
            p
        }
        _ => return None,
    };
    Some(Ok(plan))
}

fn base(table: &Arc<DistTable>, node: &N, text: &str, tag: &str) -> DdlPlan {
    DdlPlan::new(table, node, text, tag)
}

/// A unique index or constraint must contain the distribution column, or uniqueness
/// could not be enforced shard by shard (reference tables have one shard).
fn unique_needs_dist_column(table: &DistTable, columns: &[&str], what: &str) -> PgResult<()> {
    if table.method == PartitionMethod::Reference {
        return Ok(());
    }
    let Some(col) = &table.dist_column else {
        return Ok(());
    };
    if columns.contains(&col.name.as_str()) {
        return Ok(());
    }
    Err(PgError::not_supported(format!(
        "cannot create constraint on \"{}\"",
        table.name
    ))
    .with_detail(format!(
        "Distributed relations cannot have {what} that do not include the partition column (column \"{}\").",
        col.name
    )))
}

fn check_index(i: &protobuf::IndexStmt, table: &DistTable) -> PgResult<()> {
    if !i.unique && !i.primary {
        return Ok(());
    }
    let columns: Vec<&str> = i
        .index_params
        .iter()
        .filter_map(|p| match p.node.as_ref() {
            Some(N::IndexElem(e)) if e.expr.is_none() => Some(e.name.as_str()),
            _ => None,
        })
        .collect();
    unique_needs_dist_column(table, &columns, "UNIQUE indexes")
}

fn check_constraint(
    c: &protobuf::Constraint,
    table: &DistTable,
    column: Option<&str>,
    unnamed: &mut Vec<Unnamed>,
) -> PgResult<()> {
    let kind = ConstrType::try_from(c.contype).unwrap_or(ConstrType::Undefined);
    let name_kind = match kind {
        ConstrType::ConstrNull
        | ConstrType::ConstrNotnull
        | ConstrType::ConstrAttrDeferrable
        | ConstrType::ConstrAttrNotDeferrable
        | ConstrType::ConstrAttrDeferred
        | ConstrType::ConstrAttrImmediate => return Ok(()),
        ConstrType::ConstrDefault => {
            if c.raw_expr.as_deref().is_some_and(uses_sequence) {
                return Err(sequence_column_refusal());
            }
            return Ok(());
        }
        ConstrType::ConstrGenerated => return Ok(()),
        ConstrType::ConstrCheck => 'c',
        ConstrType::ConstrPrimary | ConstrType::ConstrUnique => {
            if c.indexname.is_empty() {
                let keys = string_items(&c.keys);
                let columns: Vec<&str> = match column {
                    Some(col) if keys.is_empty() => vec![col],
                    _ => keys,
                };
                unique_needs_dist_column(table, &columns, "UNIQUE constraints or PRIMARY KEYs")?;
            }
            if kind == ConstrType::ConstrPrimary {
                'p'
            } else {
                'u'
            }
        }
        // Checked against Citus's rules once the shell has it (`commands::foreign_keys`).
        ConstrType::ConstrForeign => return Ok(()),
        ConstrType::ConstrExclusion => {
            return Err(PgError::not_supported(
                "pgshard does not support exclusion constraints on distributed tables yet",
            ))
        }
        _ => {
            return Err(PgError::not_supported(
                "pgshard does not support this constraint on distributed tables yet",
            ))
        }
    };
    if c.conname.is_empty() {
        let mut columns: Vec<String> = match name_kind {
            'c' => c.raw_expr.as_deref().map(column_names).unwrap_or_default(),
            _ => string_items(&c.keys)
                .iter()
                .map(|s| s.to_string())
                .collect(),
        };
        if columns.is_empty() {
            columns.extend(column.map(str::to_string));
        }
        columns.sort();
        columns.dedup();
        unnamed.push(Unnamed::Constraint(name_kind, columns));
    }
    Ok(())
}

fn is_foreign(n: &protobuf::Node) -> Option<&protobuf::Constraint> {
    match n.node.as_ref() {
        Some(N::Constraint(c)) if c.contype == ConstrType::ConstrForeign as i32 => Some(c),
        _ => None,
    }
}

/// The foreign keys an ALTER TABLE adds: `ADD [CONSTRAINT] FOREIGN KEY` and
/// `ADD COLUMN ... REFERENCES`.
pub fn added_foreign_keys(a: &protobuf::AlterTableStmt) -> Vec<&protobuf::Constraint> {
    let mut out = Vec::new();
    for c in &a.cmds {
        let Some(N::AlterTableCmd(cmd)) = c.node.as_ref() else {
            continue;
        };
        let Some(def) = cmd.def.as_deref() else {
            continue;
        };
        match At::try_from(cmd.subtype).unwrap_or(At::Undefined) {
            At::AtAddConstraint => out.extend(is_foreign(def)),
            At::AtAddColumn => {
                if let Some(N::ColumnDef(cd)) = def.node.as_ref() {
                    out.extend(cd.constraints.iter().filter_map(is_foreign));
                }
            }
            _ => {}
        }
    }
    out
}

/// The columns an expression refers to.
fn column_names(n: &protobuf::Node) -> Vec<String> {
    let Some(e) = n.node.as_ref() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut add = |cr: &protobuf::ColumnRef| {
        if let Some(N::String(s)) = cr.fields.last().and_then(|f| f.node.as_ref()) {
            out.push(s.sval.clone());
        }
    };
    if let N::ColumnRef(cr) = e {
        add(cr);
    }
    for (x, _, _, _) in e.nodes() {
        if let pg_query::NodeRef::ColumnRef(cr) = x {
            add(cr);
        }
    }
    out
}

/// ADD COLUMN filled from a sequence: PostgreSQL would number the existing rows, and
/// those live on the shards, not in the shell where the sequence is.
fn sequence_column_refusal() -> PgError {
    PgError::not_supported(
        "pgshard does not support adding a column filled from a sequence (serial, identity, \
         nextval default) to a distributed table",
    )
    .with_hint("Add the column without the default, then set it with ALTER TABLE ... ALTER COLUMN ... SET DEFAULT.")
}

/// Whether an expression calls `nextval` (sequences exist only on the coordinator).
fn uses_sequence(n: &protobuf::Node) -> bool {
    let Some(e) = n.node.as_ref() else {
        return false;
    };
    e.nodes().into_iter().any(|(x, _, _, _)| match x {
        pg_query::NodeRef::FuncCall(fc) => {
            super::func_name(fc).is_some_and(|f| f == "nextval" || f == "setval")
        }
        _ => false,
    }) || matches!(e, N::FuncCall(fc) if super::func_name(fc).is_some_and(|f| f == "nextval"))
}

fn check_alter_cmd(
    cmd: &protobuf::AlterTableCmd,
    table: &DistTable,
    unnamed: &mut Vec<Unnamed>,
) -> PgResult<()> {
    let dist = table.dist_column.as_ref().map(|c| c.name.as_str());
    let is_dist = |name: &str| dist == Some(name);
    match At::try_from(cmd.subtype).unwrap_or(At::Undefined) {
        At::AtAddColumn => {
            let Some(N::ColumnDef(cd)) = cmd.def.as_ref().and_then(|d| d.node.as_ref()) else {
                return Err(PgError::not_supported("unexpected ADD COLUMN shape"));
            };
            let type_name = cd
                .type_name
                .as_ref()
                .map(|t| string_items(&t.names).last().copied().unwrap_or(""))
                .unwrap_or("");
            if matches!(
                type_name,
                "serial" | "serial4" | "bigserial" | "serial8" | "smallserial" | "serial2"
            ) {
                return Err(sequence_column_refusal());
            }
            if !cd.identity.is_empty() {
                return Err(sequence_column_refusal());
            }
            if cd.raw_default.as_deref().is_some_and(uses_sequence) {
                return Err(sequence_column_refusal());
            }
            for c in &cd.constraints {
                if let Some(N::Constraint(c)) = c.node.as_ref() {
                    check_constraint(c, table, Some(&cd.colname), unnamed)?;
                }
            }
            Ok(())
        }
        // A default calling nextval stays on the shell: the shards drop theirs
        // (`shard_statement`), the coordinator node fills the column (`sequences.rs`).
        At::AtColumnDefault => Ok(()),
        At::AtDropNotNull | At::AtSetNotNull | At::AtSetStatistics => Ok(()),
        // Storage parameters (`SET (parallel_workers = 64)`, seed 004) go to every shard.
        At::AtSetRelOptions | At::AtResetRelOptions => Ok(()),
        At::AtDropColumn | At::AtAlterColumnType if is_dist(&cmd.name) => {
            Err(partition_column_error())
        }
        At::AtDropColumn | At::AtAlterColumnType => Ok(()),
        At::AtAddConstraint => {
            let Some(N::Constraint(c)) = cmd.def.as_ref().and_then(|d| d.node.as_ref()) else {
                return Err(PgError::not_supported("unexpected ADD CONSTRAINT shape"));
            };
            check_constraint(c, table, None, unnamed)
        }
        At::AtDropConstraint | At::AtValidateConstraint => Ok(()),
        // The shards get the table's owner and row-level security.
        At::AtChangeOwner
        | At::AtEnableRowSecurity
        | At::AtDisableRowSecurity
        | At::AtForceRowSecurity
        | At::AtNoForceRowSecurity => Ok(()),
        _ => Err(PgError::not_supported(
            "pgshard does not support this ALTER TABLE subcommand on distributed tables yet",
        )),
    }
}

/// The statement for one shard: relation, index and constraint names rewritten.
/// `resolved` holds the names PostgreSQL gave the plan's unnamed objects on the shell.
pub fn shard_statement(plan: &DdlPlan, shard_id: ShardId, resolved: &[String]) -> PgResult<String> {
    let table = &plan.table;
    let mut stmt = plan.stmt.clone();
    let mut next = resolved.iter();
    let mut take = || -> PgResult<String> {
        next.next().cloned().ok_or_else(|| {
            PgError::internal("pgshard could not find the name PostgreSQL gave a new object")
        })
    };
    let shard_rel = |rv: &mut protobuf::RangeVar| {
        rv.schemaname = table.schema.clone();
        rv.relname = shard_table_name(&table.name, shard_id);
    };
    let obj = |name: &str| shard_object_name(name, shard_id);
    match &mut stmt {
        N::IndexStmt(i) => {
            if let Some(rv) = i.relation.as_mut() {
                shard_rel(rv);
            }
            let name = if i.idxname.is_empty() {
                take()?
            } else {
                i.idxname.clone()
            };
            i.idxname = obj(&name);
        }
        N::AlterTableStmt(a) => {
            if let Some(rv) = a.relation.as_mut() {
                shard_rel(rv);
            }
            // Foreign keys are made per shard pair from the shell's definition.
            a.cmds.retain(|c| match c.node.as_ref() {
                Some(N::AlterTableCmd(cmd)) => {
                    cmd.subtype != At::AtAddConstraint as i32
                        || cmd.def.as_deref().and_then(is_foreign).is_none()
                }
                _ => true,
            });
            if a.cmds.is_empty() {
                return Ok(String::new());
            }
            for c in &mut a.cmds {
                let Some(N::AlterTableCmd(cmd)) = c.node.as_mut() else {
                    continue;
                };
                match At::try_from(cmd.subtype).unwrap_or(At::Undefined) {
                    At::AtAddConstraint => {
                        if let Some(N::Constraint(c)) =
                            cmd.def.as_mut().and_then(|d| d.node.as_mut())
                        {
                            name_constraint(c, shard_id, &mut take)?;
                        }
                    }
                    At::AtAddColumn => {
                        if let Some(N::ColumnDef(cd)) =
                            cmd.def.as_mut().and_then(|d| d.node.as_mut())
                        {
                            cd.constraints.retain(|c| is_foreign(c).is_none());
                            for c in &mut cd.constraints {
                                if let Some(N::Constraint(c)) = c.node.as_mut() {
                                    name_constraint(c, shard_id, &mut take)?;
                                }
                            }
                        }
                    }
                    At::AtDropConstraint | At::AtValidateConstraint => {
                        cmd.name = obj(&cmd.name);
                    }
                    At::AtColumnDefault if cmd.def.as_deref().is_some_and(uses_sequence) => {
                        cmd.def = None;
                    }
                    _ => {}
                }
            }
        }
        N::RenameStmt(r) => {
            if let Some(rv) = r.relation.as_mut() {
                shard_rel(rv);
            }
            if r.rename_type == ObjectType::ObjectTable as i32 {
                r.newname = shard_table_name(&r.newname, shard_id);
            } else if r.rename_type == ObjectType::ObjectTabconstraint as i32 {
                r.subname = obj(&r.subname);
                r.newname = obj(&r.newname);
            }
        }
        other => {
            if !super::security::policy_shard_statement(other, table, shard_id) {
                return Err(PgError::internal("not a DDL statement pgshard propagates"));
            }
        }
    }
    crate::sql::walk::rename_table_references(
        &mut stmt,
        (&table.schema, &table.name),
        &table.columns,
        &shard_table_name(&table.name, shard_id),
    );
    stmt.deparse(Default::default())
        .map_err(|e| PgError::internal(format!("cannot deparse the shard's statement: {e}")))
}

fn name_constraint(
    c: &mut protobuf::Constraint,
    shard_id: ShardId,
    take: &mut dyn FnMut() -> PgResult<String>,
) -> PgResult<()> {
    let named = matches!(
        ConstrType::try_from(c.contype),
        Ok(ConstrType::ConstrCheck | ConstrType::ConstrPrimary | ConstrType::ConstrUnique)
    );
    if !named {
        return Ok(());
    }
    let name = if c.conname.is_empty() {
        take()?
    } else {
        c.conname.clone()
    };
    c.conname = shard_object_name(&name, shard_id);
    if !c.indexname.is_empty() {
        c.indexname = shard_object_name(&c.indexname, shard_id);
    }
    Ok(())
}

/// `DROP INDEX [CONCURRENTLY] a, b`: the (schema, name) of each index as written.
pub fn dropped_indexes(d: &protobuf::DropStmt) -> Vec<(Option<String>, String)> {
    d.objects
        .iter()
        .filter_map(|o| match o.node.as_ref() {
            Some(N::List(l)) => {
                let parts = string_items(&l.items);
                match parts.as_slice() {
                    [name] => Some((None, name.to_string())),
                    [.., schema, name] => Some((Some(schema.to_string()), name.to_string())),
                    [] => None,
                }
            }
            _ => None,
        })
        .collect()
}

/// `DROP INDEX` naming indexes of distributed tables: each with its table. `None`
/// when it names none (a local statement); a refusal when it mixes both.
pub fn plan_drop_index(
    d: &protobuf::DropStmt,
    catalog: &Catalog,
) -> Option<PgResult<Vec<(Arc<DistTable>, String)>>> {
    let mut found = Vec::new();
    let mut local = 0;
    for (schema, name) in dropped_indexes(d) {
        let mut owners = catalog.tables_by_oid.values().filter(|t| {
            t.indexes.contains(&name) && schema.as_ref().map_or(true, |s| *s == t.schema)
        });
        match (owners.next(), owners.next()) {
            (Some(t), None) => found.push((t.clone(), name)),
            (Some(_), Some(_)) => {
                return refuse(format!(
                "index \"{name}\" exists on several distributed tables: qualify it with its schema"
            ))
                .map(|r| r.map(|_| Vec::new()))
            }
            (None, _) => local += 1,
        }
    }
    if found.is_empty() {
        return None;
    }
    if local > 0 {
        return Some(Err(PgError::not_supported(
            "DROP INDEX mixing indexes of distributed and local tables is not supported yet: drop them separately",
        )));
    }
    Some(Ok(found))
}

/// `DROP INDEX` of one distributed index on one shard.
pub fn drop_index_shard_statement(
    d: &protobuf::DropStmt,
    schema: &str,
    index: &str,
    shard_id: ShardId,
) -> PgResult<String> {
    let stmt = N::DropStmt(protobuf::DropStmt {
        objects: vec![protobuf::Node {
            node: Some(N::List(protobuf::List {
                items: [schema.to_string(), shard_object_name(index, shard_id)]
                    .into_iter()
                    .map(|s| protobuf::Node {
                        node: Some(N::String(protobuf::String { sval: s })),
                    })
                    .collect(),
            })),
        }],
        remove_type: d.remove_type,
        behavior: d.behavior,
        missing_ok: true,
        concurrent: d.concurrent,
    });
    stmt.deparse(Default::default())
        .map_err(|e| PgError::internal(format!("cannot deparse DROP INDEX: {e}")))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::catalog::DistColumn;
    use crate::sharding::ranges::ShardIndexer;

    /// One hash-distributed table `t (k int, v)` without shards (also for
    /// `security.rs`'s tests).
    pub(crate) fn catalog() -> Catalog {
        let mut c = Catalog::default();
        c.add_table(DistTable {
            relid: 1,
            schema: "public".into(),
            name: "t".into(),
            method: PartitionMethod::Hash,
            dist_column: Some(DistColumn {
                name: "k".into(),
                attnum: 1,
                type_oid: 23,
                collation: 0,
                typmod: -1,
                type_sql: "integer".into(),
            }),
            colocation_id: 1,
            shards: vec![],
            columns: vec!["k".into(), "v".into()],
            indexes: vec![],
            sequence_columns: vec![],
            indexer: ShardIndexer::for_intervals::<crate::catalog::ShardInterval>(&[]),
        });
        c
    }

    fn plan(sql: &str) -> Option<PgResult<DdlPlan>> {
        let stmts = crate::sql::parse::parse(sql).unwrap();
        let c = catalog();
        plan_ddl(
            stmts[0].node.as_ref().unwrap(),
            sql,
            &c,
            &crate::planner::Names::on_path(&c, &["public"]),
        )
    }

    fn shard_sql(sql: &str, resolved: &[&str]) -> String {
        let p = plan(sql).unwrap().unwrap();
        let r: Vec<String> = resolved.iter().map(|s| s.to_string()).collect();
        shard_statement(&p, 102008, &r).unwrap()
    }

    fn refused(sql: &str) -> bool {
        matches!(plan(sql), Some(Err(e)) if e.code == "0A000")
    }

    #[test]
    fn rewrites_names_per_shard() {
        assert_eq!(
            shard_sql("CREATE INDEX i ON t (v)", &[]),
            "CREATE INDEX i_102008 ON public.t_102008 USING btree (v)"
        );
        assert_eq!(
            shard_sql("create index on t (v)", &["t_v_idx"]),
            "CREATE INDEX t_v_idx_102008 ON public.t_102008 USING btree (v)"
        );
        assert_eq!(
            shard_sql("ALTER TABLE t SET (parallel_workers=64)", &[]),
            "ALTER TABLE public.t_102008 SET (parallel_workers=64)"
        );
        assert_eq!(
            shard_sql("ALTER TABLE t ADD COLUMN c int DEFAULT 5", &[]),
            "ALTER TABLE public.t_102008 ADD COLUMN c int DEFAULT 5"
        );
        let s = shard_sql(
            "ALTER TABLE t ADD CHECK (v > 0), DROP CONSTRAINT x",
            &["t_v_check"],
        );
        assert!(s.contains("CONSTRAINT t_v_check_102008 CHECK"), "{s}");
        assert!(s.contains("DROP CONSTRAINT x_102008"), "{s}");
        assert_eq!(
            shard_sql("ALTER TABLE t RENAME TO u", &[]),
            "ALTER TABLE public.t_102008 RENAME TO u_102008"
        );
        let s = shard_sql(r#"ALTER TABLE t RENAME CONSTRAINT "a b" TO c"#, &[]);
        assert!(s.contains(r#""a b_102008" TO c_102008"#), "{s}");
        let s = shard_sql(r#"CREATE INDEX "Odd""Name" ON t (v)"#, &[]);
        assert!(s.contains(r#""Odd""Name_102008""#), "{s}");
    }

    #[test]
    fn unnamed_objects_in_order() {
        let p = plan("ALTER TABLE t ADD COLUMN c int CHECK (c > 0), ADD PRIMARY KEY (k, v)")
            .unwrap()
            .unwrap();
        assert_eq!(
            p.unnamed,
            vec![
                Unnamed::Constraint('c', vec!["c".into()]),
                Unnamed::Constraint('p', vec!["k".into(), "v".into()])
            ]
        );
    }

    #[test]
    fn foreign_keys_are_left_to_the_shell_definition() {
        let p = plan("ALTER TABLE t ADD FOREIGN KEY (v) REFERENCES t (k)")
            .unwrap()
            .unwrap();
        assert!(p.foreign_keys);
        assert_eq!(p.not_in_block(), Some("adding a foreign key"));
        assert_eq!(
            shard_sql("ALTER TABLE t ADD FOREIGN KEY (v) REFERENCES t (k)", &[]),
            ""
        );
        assert_eq!(
            shard_sql(
                "ALTER TABLE t ADD COLUMN w int REFERENCES t (k) NOT NULL, ADD CONSTRAINT c CHECK (w > 0), \
                 ADD CONSTRAINT f FOREIGN KEY (w) REFERENCES t (k)",
                &[]
            ),
            "ALTER TABLE public.t_102008 ADD COLUMN w int NOT NULL, ADD CONSTRAINT c_102008 CHECK (w > 0)"
        );
        assert!(
            !plan("ALTER TABLE t ADD CONSTRAINT c CHECK (v > 0)")
                .unwrap()
                .unwrap()
                .foreign_keys
        );
        // A local table referencing a distributed one: Citus's refusal.
        let e = plan("ALTER TABLE local_t ADD FOREIGN KEY (a) REFERENCES t (k)")
            .unwrap()
            .unwrap_err();
        assert!(
            e.message.contains("citus local tables to distributed"),
            "{e}"
        );
        assert!(
            plan("ALTER TABLE local_t ADD FOREIGN KEY (a) REFERENCES other_local (k)").is_none()
        );
    }

    #[test]
    fn refuses_unsafe_shapes() {
        assert!(refused("ALTER TABLE t ADD PRIMARY KEY (v)"));
        assert!(refused("ALTER TABLE t ADD CONSTRAINT u UNIQUE (v)"));
        assert!(refused("CREATE UNIQUE INDEX ON t (v)"));
        assert!(refused("ALTER TABLE t ADD COLUMN c int UNIQUE"));
        assert!(refused("ALTER TABLE t DROP COLUMN k"));
        assert!(refused("ALTER TABLE t ALTER COLUMN k TYPE bigint"));
        assert!(refused("ALTER TABLE t ADD COLUMN s serial"));
        assert_eq!(
            shard_sql("ALTER TABLE t ALTER COLUMN v SET DEFAULT nextval('s')", &[]),
            "ALTER TABLE public.t_102008 ALTER COLUMN v DROP DEFAULT"
        );
        assert!(refused("ALTER TABLE t CLUSTER ON i"));
        assert_eq!(
            shard_sql("ALTER TABLE t OWNER TO bob, FORCE ROW LEVEL SECURITY", &[]),
            "ALTER TABLE public.t_102008 OWNER TO bob, FORCE ROW LEVEL SECURITY"
        );
        let p = plan("ALTER TABLE t OWNER TO CURRENT_USER")
            .unwrap()
            .unwrap();
        assert_eq!(p.not_in_block(), None);
        assert_eq!(
            shard_statement(&p.for_caller("me"), 102008, &[]).unwrap(),
            "ALTER TABLE public.t_102008 OWNER TO me"
        );
        assert!(plan("ALTER TABLE t ADD PRIMARY KEY (k, v)")
            .unwrap()
            .is_ok());
        assert!(plan("CREATE UNIQUE INDEX ON t (v, k)").unwrap().is_ok());
        assert!(plan("ALTER TABLE t ALTER COLUMN v TYPE bigint")
            .unwrap()
            .is_ok());
        assert!(plan("CREATE INDEX ON other (v)").is_none());
        let p = plan("ALTER TABLE t RENAME COLUMN k TO kk")
            .unwrap()
            .unwrap();
        assert_eq!(p.new_dist_column.as_deref(), Some("kk"));
    }

    #[test]
    fn drop_index_per_shard() {
        let stmts = crate::sql::parse::parse("DROP INDEX CONCURRENTLY s.i").unwrap();
        let Some(N::DropStmt(d)) = stmts[0].node.as_ref() else {
            panic!()
        };
        assert_eq!(dropped_indexes(d), vec![(Some("s".into()), "i".into())]);
        assert_eq!(
            drop_index_shard_statement(d, "s", "i", 7).unwrap(),
            "DROP INDEX CONCURRENTLY IF EXISTS s.i_7"
        );
    }
}
