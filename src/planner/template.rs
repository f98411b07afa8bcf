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
        self.render(&names)
    }

    /// The statement over the coordinator node's shells (each relation schema-qualified):
    /// the types of a combine step's worker query, with no data read.
    pub fn for_shells(&self) -> String {
        let names: Vec<String> = self
            .rels
            .iter()
            .map(|r| quote_qualified(&r.schema, &r.table))
            .collect();
        self.render(&names)
    }

    /// The statement text for one node's task over several shards of a single-table
    /// statement: the table reference becomes the UNION ALL of those shards (see
    /// `node_relation`). None for a join (its relations pair shard by shard).
    pub fn for_node(&self, shard_ids: &[ShardId]) -> Option<String> {
        match (self.rels.as_slice(), shard_ids) {
            ([_], [one]) => Some(self.for_shard(*one)),
            ([r], ids) if !ids.is_empty() && r.map == ShardMap::Same => {
                Some(self.render(&[node_relation(&r.schema, &r.table, ids)]))
            }
            _ => None,
        }
    }

    fn render(&self, names: &[String]) -> String {
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

/// What stands for a table in one node's task: its one shard's name, or the
/// `UNION ALL` of its shards on that node as a subquery. PostgreSQL flattens that
/// subquery into an append of the shards, so the node plans the statement once (a
/// Parallel Append with one set of parallel workers) instead of once per shard,
/// each starting its own workers.
pub fn node_relation(schema: &str, table: &str, shard_ids: &[ShardId]) -> String {
    let name = |id: ShardId| quote_qualified(schema, &crate::catalog::shard_table_name(table, id));
    if let [one] = shard_ids {
        return name(*one);
    }
    let parts: Vec<String> = shard_ids
        .iter()
        .map(|id| format!("SELECT * FROM {}", name(*id)))
        .collect();
    format!("({})", parts.join(" UNION ALL "))
}

/// One node's task made of its shards' own complete statements: the `UNION ALL` of
/// each shard's statement, each in parentheses (a branch may end with LIMIT, or with
/// a `--` comment, hence the line break before the closing parenthesis; a trailing
/// `;` of the client's text is dropped). PostgreSQL runs the branches as one append:
/// a Gather over a Parallel Append of the shards' aggregates (each shard's aggregate
/// computed by one process, no per-row work above it), or each branch with its own
/// parallel workers, whichever its cost model prefers.
pub fn union_of_statements<I>(statements: I) -> String
where
    I: IntoIterator<Item = String>,
{
    let mut out = String::new();
    for (i, sql) in statements.into_iter().enumerate() {
        if i > 0 {
            out.push_str(" UNION ALL ");
        }
        out.push('(');
        out.push_str(without_terminator(&sql));
        out.push_str("\n)");
    }
    out
}

/// A statement's text without its trailing `;` (and the blanks around it).
fn without_terminator(sql: &str) -> &str {
    let mut s = sql.trim_end();
    while let Some(rest) = s.strip_suffix(';') {
        s = rest.trim_end();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(text: &str, start: usize, end: usize, add_alias: bool) -> ShardSqlTemplate {
        let rel = RelTarget {
            schema: "public".into(),
            table: "test".into(),
            map: ShardMap::Same,
        };
        let edit = Edit {
            start,
            end,
            with: EditWith::Relation { add_alias, rel: 0 },
        };
        ShardSqlTemplate::with_relations(text, vec![rel], vec![edit])
    }

    #[test]
    fn node_relation_is_the_shard_or_a_union_of_shards() {
        assert_eq!(
            node_relation("public", "test", &[7]),
            "\"public\".\"test_7\""
        );
        assert_eq!(
            node_relation("s", "t", &[1, 3]),
            "(SELECT * FROM \"s\".\"t_1\" UNION ALL SELECT * FROM \"s\".\"t_3\")"
        );
    }

    #[test]
    fn node_task_keeps_the_alias() {
        let t = template("select count(*) from test", 21, 25, true);
        assert_eq!(
            t.for_node(&[1, 2]).unwrap(),
            "select count(*) from (SELECT * FROM \"public\".\"test_1\" UNION ALL \
             SELECT * FROM \"public\".\"test_2\") AS \"test\""
        );
        assert_eq!(
            t.for_node(&[5]).unwrap(),
            "select count(*) from \"public\".\"test_5\" AS \"test\""
        );
        let t = template("select x.c1 from test x(c1)", 17, 21, false);
        assert_eq!(
            t.for_node(&[1, 2]).unwrap(),
            "select x.c1 from (SELECT * FROM \"public\".\"test_1\" UNION ALL \
             SELECT * FROM \"public\".\"test_2\") x(c1)"
        );
    }

    #[test]
    fn union_of_statements_parenthesizes_each_statement() {
        assert_eq!(
            union_of_statements(vec![
                "select count(*) from a;  ".to_string(),
                "select count(*) from b -- note".to_string(),
                "select count(*) from c limit 1 ; ;".to_string(),
            ]),
            "(select count(*) from a\n) UNION ALL (select count(*) from b -- note\n) \
             UNION ALL (select count(*) from c limit 1\n)"
        );
    }

    #[test]
    fn joins_have_no_node_task() {
        let rels = vec![
            RelTarget {
                schema: "public".into(),
                table: "a".into(),
                map: ShardMap::Same,
            },
            RelTarget {
                schema: "public".into(),
                table: "r".into(),
                map: ShardMap::Fixed(9),
            },
        ];
        let t = ShardSqlTemplate::with_relations("select 1", rels, vec![]);
        assert!(t.for_node(&[1, 2]).is_none());
    }
}
