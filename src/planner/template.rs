//! The text sent to a shard: the client's own statement text with the distributed
//! table's name replaced by the shard's (and, for multi-shard reads, a LIMIT/OFFSET
//! adjusted). A join names several relations: each is spliced with the shard that
//! goes with the task's shard of the first (co-located shard of the same index, or a
//! reference table's one shard). Splicing the original text keeps the statement exactly as written and
//! costs a copy, where a deparse would cost a tree walk per shard.

use crate::catalog::{DistTable, ShardId};
use crate::error::{PgError, PgResult};
use crate::sql::parse::{number_span, qualified_name_span, RelRef};
use crate::sql::quote::{quote_ident, quote_qualified};
use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    /// The qualified shard name of relation `n` goes here.
    ShardName(usize),
}

/// Which shard of a relation goes with the task's shard (of relation 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardMap {
    /// Relation 0 itself.
    Same,
    /// A reference table's only shard.
    Fixed(ShardId),
    /// A co-located table: its shard of the same index.
    ByPrimary(HashMap<ShardId, ShardId>),
}

/// A relation spliced into the template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelTarget {
    pub schema: String,
    pub table: String,
    pub map: ShardMap,
}

impl RelTarget {
    pub fn primary(table: &DistTable) -> RelTarget {
        RelTarget {
            schema: table.schema.clone(),
            table: table.name.clone(),
            map: ShardMap::Same,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSqlTemplate {
    pieces: Vec<Piece>,
    rels: Vec<RelTarget>,
}

/// A replacement of `text[start..end]`.
#[derive(Debug, Clone)]
pub struct Edit {
    pub start: usize,
    pub end: usize,
    pub with: EditWith,
}

#[derive(Debug, Clone)]
pub enum EditWith {
    Text(String),
    /// The relation reference: shard name, plus an alias equal to the table's name
    /// when the query had none, so `table.column` references keep working.
    Relation {
        add_alias: bool,
        /// Index into the template's relations.
        rel: usize,
    },
}

impl Edit {
    /// The edit replacing a table reference by its shard.
    pub fn relation(text: &str, rel: &RelRef) -> PgResult<Edit> {
        let (start, end) = qualified_name_span(text, rel.location).ok_or_else(|| {
            PgError::not_supported("pgshard could not locate the table name in the statement text")
        })?;
        Ok(Edit {
            start,
            end,
            with: EditWith::Relation {
                add_alias: rel.alias.is_none(),
                rel: 0,
            },
        })
    }

    /// The edit replacing a reference to relation `index` of a join.
    pub fn relation_of(text: &str, rel: &RelRef, index: usize) -> PgResult<Edit> {
        let mut e = Edit::relation(text, rel)?;
        e.with = EditWith::Relation {
            add_alias: rel.alias.is_none(),
            rel: index,
        };
        Ok(e)
    }

    /// The edit replacing a numeric constant at `location`.
    pub fn number(text: &str, location: usize, with: String) -> PgResult<Edit> {
        let (start, end) = number_span(text, location)
            .ok_or_else(|| PgError::not_supported("pgshard could not rewrite LIMIT/OFFSET"))?;
        Ok(Edit {
            start,
            end,
            with: EditWith::Text(with),
        })
    }
}

impl ShardSqlTemplate {
    pub fn new(text: &str, table: &DistTable, edits: Vec<Edit>) -> ShardSqlTemplate {
        ShardSqlTemplate::with_relations(text, vec![RelTarget::primary(table)], edits)
    }

    /// A template over several relations (`rels[0]` decides the task's shard).
    pub fn with_relations(
        text: &str,
        rels: Vec<RelTarget>,
        mut edits: Vec<Edit>,
    ) -> ShardSqlTemplate {
        edits.sort_by_key(|e| e.start);
        let mut pieces = Vec::new();
        let mut at = 0;
        for e in edits {
            pieces.push(Piece::Text(text[at..e.start].to_string()));
            match e.with {
                EditWith::Text(t) => pieces.push(Piece::Text(t)),
                EditWith::Relation { add_alias, rel } => {
                    pieces.push(Piece::ShardName(rel));
                    if add_alias {
                        pieces.push(Piece::Text(format!(
                            " AS {}",
                            quote_ident(&rels[rel].table)
                        )));
                    }
                }
            }
            at = e.end;
        }
        pieces.push(Piece::Text(text[at..].to_string()));
        ShardSqlTemplate { pieces, rels }
    }

    /// The statement text for one shard (of relation 0).
    pub fn for_shard(&self, shard_id: ShardId) -> String {
        let names: Vec<String> = self
            .rels
            .iter()
            .map(|r| {
                let id = match &r.map {
                    ShardMap::Same => shard_id,
                    ShardMap::Fixed(id) => *id,
                    // Built from the same catalog snapshot: every shard has a partner.
                    ShardMap::ByPrimary(m) => m.get(&shard_id).copied().unwrap_or(shard_id),
                };
                quote_qualified(&r.schema, &crate::catalog::shard_table_name(&r.table, id))
            })
            .collect();
        let mut out = String::with_capacity(
            self.pieces
                .iter()
                .map(|p| match p {
                    Piece::Text(t) => t.len(),
                    Piece::ShardName(i) => names[*i].len(),
                })
                .sum(),
        );
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::ShardName(i) => out.push_str(&names[*i]),
            }
        }
        out
    }
}
