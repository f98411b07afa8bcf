//! SQL text: parsing with PostgreSQL's own grammar, analysis of what a statement
//! touches, rewriting of table names to shard names, and quoting.

pub mod clauses;
pub mod copy_format;
pub mod parse;
pub mod quote;
pub mod strings;
pub mod walk;
