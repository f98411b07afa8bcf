//! Plan shapes of simple-protocol statements, reused across statements that differ
//! only in their constants (`... WHERE aid = 1`, `... WHERE aid = 2`): PostgreSQL's
//! own scanner splits the text into tokens (far cheaper than a parse), the constants
//! are blanked out to form the key, and a cached router or local decision is applied
//! to the new constants. The distribution value is hashed by the same code as in a
//! full plan, from a copy of the original value expression with the new constant in
//! it; whenever anything does not fit, the statement takes the full path.

use super::distvalue::{value_source, ValueSource, ValueUse};
use super::{Plan, RouterPlan};
use crate::catalog::DistTable;
use crate::sql::quote::{quote_ident, quote_qualified};
use pg_query::protobuf::a_const::Val;
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self, ScanToken, Token};
use std::collections::HashMap;
use std::sync::Arc;

/// Most shapes one session remembers.
const MAX_SHAPES: usize = 1000;

/// A statement's tokens and its shape key.
pub struct Scanned {
    pub tokens: Vec<ScanToken>,
    pub key: String,
}

fn is_constant(t: &ScanToken) -> bool {
    t.token == Token::Iconst as i32
        || t.token == Token::Fconst as i32
        || t.token == Token::Sconst as i32
}

/// Scans one statement; None for several statements or text the scanner refuses.
pub fn scan(sql: &str) -> Option<Scanned> {
    let tokens = pg_query::scan_tokens(sql).ok()?;
    let semis = tokens.iter().position(|t| t.token == Token::Ascii59 as i32);
    if let Some(i) = semis {
        if i + 1 != tokens.len() {
            return None;
        }
    }
    let mut key = String::with_capacity(sql.len());
    let mut at = 0;
    for t in tokens.iter().filter(|t| is_constant(t)) {
        key.push_str(sql.get(at..t.start as usize)?);
        key.push('\u{1}');
        at = t.end as usize;
    }
    key.push_str(sql.get(at..)?);
    Some(Scanned { tokens, key })
}

/// What a cached shape does with a statement.
#[derive(Debug)]
pub enum Shape {
    /// Runs on the coordinator node unchanged.
    Local {
        write: bool,
    },
    Router(RouterShape),
}

#[derive(Debug)]
pub struct RouterShape {
    table: Arc<DistTable>,
    read_only: bool,
    /// The value expression (a constant, maybe cast) and the token holding its constant.
    value: protobuf::Node,
    value_token: usize,
    /// Whether the value is stored (INSERT) or compared.
    usage: ValueUse,
    /// Token ranges [first, last] of the table reference to replace by the shard's name.
    relation: (usize, usize),
    add_alias: bool,
}

/// A cached shape applied to a statement.
pub enum FastPlan {
    Local {
        write: bool,
    },
    Router {
        table: Arc<DistTable>,
        hash: i32,
        shard_sql: Box<dyn Fn(i64) -> String + Send + Sync>,
        read_only: bool,
    },
}

/// What the cached shapes were planned with: the catalog version and the epoch of the
/// session's name resolution (`executor::session::names`); shapes of another are dropped.
pub type ShapeVersion = (i64, u64);

#[derive(Default)]
pub struct ShapeCache {
    version: ShapeVersion,
    shapes: HashMap<String, Shape>,
}

impl ShapeCache {
    pub fn lookup(
        &mut self,
        version: ShapeVersion,
        scanned: &Scanned,
        sql: &str,
    ) -> Option<FastPlan> {
        if version != self.version {
            self.shapes.clear();
            self.version = version;
            return None;
        }
        match self.shapes.get(&scanned.key)? {
            Shape::Local { write } => Some(FastPlan::Local { write: *write }),
            Shape::Router(r) => apply_router(r, &scanned.tokens, sql),
        }
    }

    /// Remembers the shape of a statement just planned the full way, when its plan
    /// is one a shape can reproduce.
    pub fn remember(
        &mut self,
        version: ShapeVersion,
        scanned: Scanned,
        node: &N,
        plan: &Plan,
        write: bool,
    ) {
        if version != self.version {
            self.shapes.clear();
            self.version = version;
        }
        if self.shapes.len() >= MAX_SHAPES {
            self.shapes.clear();
        }
        let dml = matches!(
            node,
            N::SelectStmt(_) | N::InsertStmt(_) | N::UpdateStmt(_) | N::DeleteStmt(_)
        );
        let shape = match plan {
            Plan::Local if dml => Shape::Local { write },
            Plan::Router(r) => match router_shape(r, &scanned.tokens) {
                Some(s) => Shape::Router(s),
                None => return,
            },
            _ => return,
        };
        self.shapes.insert(scanned.key, shape);
    }
}

fn token_at(tokens: &[ScanToken], location: usize) -> Option<usize> {
    tokens.iter().position(|t| t.start as usize == location)
}

fn router_shape(r: &RouterPlan, tokens: &[ScanToken]) -> Option<RouterShape> {
    // One value, from one constant (not a parameter, not a negated or folded literal).
    let [ValueSource::Hash(_)] = r.values.as_slice() else {
        return None;
    };
    let (value, location) = r.value_exprs.first()?.clone();
    let value_token = token_at(tokens, location)?;
    if !is_constant(&tokens[value_token]) {
        return None;
    }
    let (start, end) = r.relation_span?;
    let first = token_at(tokens, start)?;
    let last = tokens.iter().position(|t| t.end as usize == end)?;
    Some(RouterShape {
        table: r.table.clone(),
        read_only: r.read_only,
        value,
        value_token,
        usage: if r.is_insert {
            ValueUse::Store
        } else {
            ValueUse::Compare
        },
        relation: (first, last),
        add_alias: r.add_alias,
    })
}

/// The constant of a token as the parser would make it.
fn constant_of(t: &ScanToken, sql: &str) -> Option<Val> {
    let text = sql.get(t.start as usize..t.end as usize)?;
    if t.token == Token::Iconst as i32 {
        let v: i32 = text.parse().ok()?;
        Some(Val::Ival(protobuf::Integer { ival: v }))
    } else if t.token == Token::Fconst as i32 {
        if !text
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
        {
            return None;
        }
        Some(Val::Fval(protobuf::Float {
            fval: text.to_string(),
        }))
    } else {
        // Only plain 'quoted' strings: escapes and continuations take the full path.
        let inner = text.strip_prefix('\'')?.strip_suffix('\'')?;
        if inner.contains('\\') || inner.replace("''", "").contains('\'') {
            return None;
        }
        Some(Val::Sval(protobuf::String {
            sval: inner.replace("''", "'"),
        }))
    }
}

/// Puts `val` into the (possibly cast) constant of a value expression.
fn with_constant(expr: &protobuf::Node, val: Val) -> Option<protobuf::Node> {
    let mut e = expr.clone();
    let target = match e.node.as_mut()? {
        N::AConst(c) => c,
        N::TypeCast(tc) => match tc.arg.as_mut()?.node.as_mut()? {
            N::AConst(c) => c,
            _ => return None,
        },
        _ => return None,
    };
    if target.isnull {
        return None;
    }
    target.val = Some(val);
    Some(e)
}

fn apply_router(r: &RouterShape, tokens: &[ScanToken], sql: &str) -> Option<FastPlan> {
    let col = r.table.dist_column.as_ref()?;
    let val = constant_of(tokens.get(r.value_token)?, sql)?;
    let expr = with_constant(&r.value, val)?;
    let ValueSource::Hash(hash) = value_source(&expr, col, r.usage)? else {
        return None;
    };
    let start = tokens.get(r.relation.0)?.start as usize;
    let end = tokens.get(r.relation.1)?.end as usize;
    let before = sql.get(..start)?.to_string();
    let after = sql.get(end..)?.to_string();
    let schema = r.table.schema.clone();
    let name = r.table.name.clone();
    let alias = if r.add_alias {
        format!(" AS {}", quote_ident(&name))
    } else {
        String::new()
    };
    let shard_sql = move |shard_id: i64| {
        format!(
            "{before}{}{alias}{after}",
            quote_qualified(&schema, &crate::catalog::shard_table_name(&name, shard_id))
        )
    };
    Some(FastPlan::Router {
        table: r.table.clone(),
        hash,
        shard_sql: Box::new(shard_sql),
        read_only: r.read_only,
    })
}
