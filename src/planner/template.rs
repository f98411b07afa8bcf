//! The text sent to a shard: the client's own statement text with the distributed
//! table's name replaced by the shard's (and, for multi-shard reads, a LIMIT/OFFSET
//! adjusted). Splicing the original text keeps the statement exactly as written and
//! costs a copy, where a deparse would cost a tree walk per shard.

use crate::catalog::{DistTable, ShardId};
use crate::error::{PgError, PgResult};
use crate::sql::parse::{number_span, qualified_name_span, RelRef};
use crate::sql::quote::{quote_ident, quote_qualified};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    /// The shard table's qualified name goes here.
    ShardName,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSqlTemplate {
    pieces: Vec<Piece>,
    schema: String,
    table: String,
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
            },
        })
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
    pub fn new(text: &str, table: &DistTable, mut edits: Vec<Edit>) -> ShardSqlTemplate {
        edits.sort_by_key(|e| e.start);
        let mut pieces = Vec::new();
        let mut at = 0;
        for e in edits {
            pieces.push(Piece::Text(text[at..e.start].to_string()));
            match e.with {
                EditWith::Text(t) => pieces.push(Piece::Text(t)),
                EditWith::Relation { add_alias } => {
                    pieces.push(Piece::ShardName);
                    if add_alias {
                        pieces.push(Piece::Text(format!(" AS {}", quote_ident(&table.name))));
                    }
                }
            }
            at = e.end;
        }
        pieces.push(Piece::Text(text[at..].to_string()));
        ShardSqlTemplate {
            pieces,
            schema: table.schema.clone(),
            table: table.name.clone(),
        }
    }

    /// The statement text for one shard.
    pub fn for_shard(&self, shard_id: ShardId) -> String {
        let name = quote_qualified(
            &self.schema,
            &crate::catalog::shard_table_name(&self.table, shard_id),
        );
        let mut out = String::with_capacity(
            self.pieces
                .iter()
                .map(|p| match p {
                    Piece::Text(t) => t.len(),
                    Piece::ShardName => name.len(),
                })
                .sum(),
        );
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::ShardName => out.push_str(&name),
            }
        }
        out
    }
}
