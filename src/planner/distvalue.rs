//! The distribution column's value in a statement: a constant hashed at plan time or
//! a parameter hashed at Bind, always as the column's own type (a value that cannot
//! be converted exactly makes the statement unroutable, never misrouted).

use crate::catalog::{DistColumn, Oid};
use crate::sharding::hash::{self, oid};
use pg_query::protobuf::a_const::Val;
use pg_query::protobuf::node::Node as N;
use pg_query::protobuf::{self, AExprKind, BoolExprType};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueSource {
    /// Hash known at plan time.
    Hash(i32),
    /// Parameter `$n` (0-based index), hashed when bound.
    Param(usize),
    /// The value is NULL.
    Null,
    /// A value PostgreSQL refuses for the column's type (`'abc'` for an integer): any
    /// one shard raises PostgreSQL's own error for it.
    Invalid,
}

/// What a statement does with the value, which decides the typmod it is read with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueUse {
    /// Compared with the column (`WHERE col = value`): PostgreSQL reads a constant or
    /// parameter as the bare type (typmod -1), so `numeric(10,1) = 1.54` compares 1.54.
    Compare,
    /// Stored in the column (INSERT, COPY): coerced to the column's typmod first, so
    /// 1.54 is stored, and must be routed, as 1.5.
    Store,
}

impl ValueUse {
    /// The typmod a value of this use is read with for `col`.
    pub fn typmod(self, col: &DistColumn) -> i32 {
        match self {
            ValueUse::Compare => -1,
            ValueUse::Store => col.typmod,
        }
    }
}

/// Types whose text input pgshard's hash module reads exactly as PostgreSQL does, so
/// that a value it refuses is a value PostgreSQL refuses too.
pub fn input_is_exact(t: Oid) -> bool {
    matches!(
        t,
        oid::INT2
            | oid::INT4
            | oid::INT8
            | oid::TEXT
            | oid::VARCHAR
            | oid::BPCHAR
            | oid::UUID
            | oid::BOOL
            | oid::NUMERIC
    )
}

/// The type a cast names, for the types pgshard hashes itself. A cast with a typmod
/// (`::numeric(10,2)`, `::char`, `::varchar(3)`) is left to PostgreSQL.
fn cast_type(tn: &protobuf::TypeName) -> Option<Oid> {
    if !tn.array_bounds.is_empty() || tn.setof || !tn.typmods.is_empty() {
        return None;
    }
    let name = match tn.names.last()?.node.as_ref()? {
        N::String(s) => s.sval.as_str(),
        _ => return None,
    };
    Some(match name {
        "int2" | "smallint" => oid::INT2,
        "int4" | "integer" | "int" => oid::INT4,
        "int8" | "bigint" => oid::INT8,
        "text" => oid::TEXT,
        "varchar" => oid::VARCHAR,
        "bpchar" => oid::BPCHAR,
        "uuid" => oid::UUID,
        "bool" | "boolean" => oid::BOOL,
        "numeric" | "decimal" => oid::NUMERIC,
        "date" => oid::DATE,
        _ => return None,
    })
}

fn is_int(t: Oid) -> bool {
    matches!(t, oid::INT2 | oid::INT4 | oid::INT8)
}

fn int_fits(t: Oid, v: i64) -> bool {
    match t {
        oid::INT2 => i16::try_from(v).is_ok(),
        oid::INT4 => i32::try_from(v).is_ok(),
        _ => true,
    }
}

/// The source of a value expression compared with (or inserted into) the column.
pub fn value_source(
    expr: &protobuf::Node,
    col: &DistColumn,
    usage: ValueUse,
) -> Option<ValueSource> {
    let typmod = usage.typmod(col);
    match expr.node.as_ref()? {
        N::ParamRef(p) if p.number >= 1 => Some(ValueSource::Param(p.number as usize - 1)),
        N::AConst(c) if c.isnull => Some(ValueSource::Null),
        N::AConst(c) => match const_hash(c.val.as_ref()?, col.type_oid, typmod) {
            Some(h) => Some(ValueSource::Hash(h)),
            // An untyped string literal the column's type refuses: PostgreSQL errors.
            None if matches!(c.val, Some(Val::Sval(_))) && input_is_exact(col.type_oid) => {
                Some(ValueSource::Invalid)
            }
            None => None,
        },
        N::TypeCast(tc) => {
            let t = cast_type(tc.type_name.as_ref()?)?;
            let same_family = t == col.type_oid || (is_int(t) && is_int(col.type_oid));
            if !same_family {
                return None;
            }
            match tc.arg.as_ref()?.node.as_ref()? {
                // `$1::int4`: the parameter's type is then the cast's, checked at Bind.
                N::ParamRef(p) if t == col.type_oid && p.number >= 1 => {
                    Some(ValueSource::Param(p.number as usize - 1))
                }
                N::AConst(c) if c.isnull => Some(ValueSource::Null),
                N::AConst(c) => {
                    // The literal is first read as the cast type (bare), then compared as
                    // the column type or stored with the column's typmod: both are integers
                    // here or the same type. Reading with the typmod at once coerces alike
                    // (the input functions apply the typmod to the value they read).
                    const_hash(c.val.as_ref()?, t, -1)?;
                    const_hash(c.val.as_ref()?, col.type_oid, typmod).map(ValueSource::Hash)
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// Hash of a literal read as type `t` with `typmod` (-1: none).
fn const_hash(v: &Val, t: Oid, typmod: i32) -> Option<i32> {
    match v {
        Val::Ival(i) => {
            let i = i.ival as i64;
            if is_int(t) {
                int_fits(t, i)
                    .then(|| hash::hash_text_value(t, &i.to_string()))
                    .flatten()
            } else if t == oid::NUMERIC {
                hash::hash_text_value_typmod(t, typmod, &i.to_string())
            } else {
                None
            }
        }
        Val::Fval(f) => {
            if is_int(t) {
                let i: i64 = f.fval.parse().ok()?;
                int_fits(t, i)
                    .then(|| hash::hash_text_value(t, &i.to_string()))
                    .flatten()
            } else if t == oid::NUMERIC {
                hash::hash_text_value_typmod(t, typmod, &f.fval)
            } else {
                None
            }
        }
        // An untyped string literal takes the column's type: PostgreSQL's input rules.
        Val::Sval(s) => hash::hash_text_value_typmod(t, typmod, &s.sval),
        Val::Boolval(b) if t == oid::BOOL => {
            hash::hash_text_value(t, if b.boolval { "t" } else { "f" })
        }
        _ => None,
    }
}

/// Whether PostgreSQL itself refuses a bound parameter of the column's own type
/// (so any one shard reports the error).
pub fn param_is_invalid(col_type: Oid, param_type: Oid) -> bool {
    param_type == col_type && input_is_exact(col_type)
}

/// Hash of a bound parameter of type `param_type` for a column of type `col_type`,
/// read with `typmod` (`ValueUse::typmod`).
pub fn hash_param(
    col_type: Oid,
    typmod: i32,
    param_type: Oid,
    format: i16,
    bytes: &[u8],
) -> Option<i32> {
    let text_like = |t: Oid| matches!(t, oid::TEXT | oid::VARCHAR);
    if param_type == col_type || (text_like(param_type) && text_like(col_type)) {
        return if format == 0 {
            hash::hash_text_value_typmod(col_type, typmod, std::str::from_utf8(bytes).ok()?)
        } else if param_type == col_type {
            hash::hash_binary_value_typmod(col_type, typmod, bytes)
        } else {
            // text and varchar share their binary format (the UTF-8 bytes).
            let s = std::str::from_utf8(bytes).ok()?;
            hash::hash_text_value_typmod(col_type, typmod, s)
        };
    }
    if is_int(param_type) && is_int(col_type) {
        let v: i64 = if format == 0 {
            std::str::from_utf8(bytes).ok()?.trim().parse().ok()?
        } else {
            match bytes.len() {
                2 => i16::from_be_bytes(bytes.try_into().ok()?) as i64,
                4 => i32::from_be_bytes(bytes.try_into().ok()?) as i64,
                8 => i64::from_be_bytes(bytes.try_into().ok()?),
                _ => return None,
            }
        };
        return int_fits(col_type, v)
            .then(|| hash::hash_text_value(col_type, &v.to_string()))
            .flatten();
    }
    None
}

/// Finds `column = value` among the top-level AND-ed conditions of a WHERE clause,
/// with the value expression itself. `names_table` tells whether a qualifier names
/// the table (its name or alias).
pub fn find_equality<'a>(
    where_clause: Option<&'a protobuf::Node>,
    col: &DistColumn,
    names_table: &dyn Fn(&str) -> bool,
) -> Option<(ValueSource, &'a protobuf::Node)> {
    let node = where_clause?.node.as_ref()?;
    match node {
        N::BoolExpr(b) if b.boolop == BoolExprType::AndExpr as i32 => b
            .args
            .iter()
            .find_map(|a| find_equality(Some(a), col, names_table)),
        N::AExpr(e) if e.kind == AExprKind::AexprOp as i32 && is_equals(&e.name) => {
            let (l, r) = (e.lexpr.as_deref()?, e.rexpr.as_deref()?);
            if is_column(l, col, names_table) {
                compared_value(r, col).map(|v| (v, r))
            } else if is_column(r, col, names_table) {
                compared_value(l, col).map(|v| (v, l))
            } else {
                None
            }
        }
        _ => None,
    }
}

/// Where the constant of a value expression (a constant, maybe cast) stands.
pub fn constant_location(expr: &protobuf::Node) -> Option<usize> {
    match expr.node.as_ref()? {
        N::AConst(c) => Some(c.location.max(0) as usize),
        N::TypeCast(tc) => match tc.arg.as_ref()?.node.as_ref()? {
            N::AConst(c) => Some(c.location.max(0) as usize),
            _ => None,
        },
        _ => None,
    }
}

fn is_equals(name: &[protobuf::Node]) -> bool {
    matches!(name, [n] if matches!(n.node.as_ref(), Some(N::String(s)) if s.sval == "="))
}

/// Whether an expression is a reference to the distribution column.
pub fn is_column(
    expr: &protobuf::Node,
    col: &DistColumn,
    names_table: &dyn Fn(&str) -> bool,
) -> bool {
    let Some(N::ColumnRef(cr)) = expr.node.as_ref() else {
        return false;
    };
    let names = crate::sql::parse::string_items(&cr.fields);
    if names.len() != cr.fields.len() {
        return false;
    }
    match names.as_slice() {
        [c] => *c == col.name,
        [t, c] => *c == col.name && names_table(t),
        _ => false,
    }
}

/// The value an integer column is compared with: a constant or parameter, integer
/// arithmetic over constants (folded as PostgreSQL would), or an integral numeric
/// literal. Values no row can hold (out of range, fractional, overflowing) are left
/// to every shard, as before.
fn compared_value(expr: &protobuf::Node, col: &DistColumn) -> Option<ValueSource> {
    if let Some(v) = value_source(expr, col, ValueUse::Compare) {
        return Some(v);
    }
    if !is_int(col.type_oid) {
        return None;
    }
    let whole = |v: i64| {
        if int_fits(col.type_oid, v) {
            hash::hash_text_value(col.type_oid, &v.to_string()).map(ValueSource::Hash)
        } else {
            None
        }
    };
    if let Some(N::AConst(c)) = expr.node.as_ref() {
        if let Some(Val::Fval(f)) = c.val.as_ref() {
            let (int, frac) = f.fval.split_once('.').unwrap_or((&f.fval, ""));
            if int.is_empty()
                || !int.bytes().all(|b| b.is_ascii_digit())
                || !frac.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            if frac.bytes().any(|b| b != b'0') {
                return None;
            }
            return int.parse::<i64>().ok().and_then(whole);
        }
    }
    let e = super::insert::int_expr(expr)?;
    match super::insert::eval_int(&e, &|_| None) {
        Ok(Some((_, v))) => whole(v),
        // Parameters inside (not known at plan time) or an overflow error.
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::parse::parse;

    /// The value expression of `select 1 from t where k = <expr>`.
    fn expr(text: &str) -> protobuf::Node {
        let stmt = parse(&format!("select {text}")).unwrap().remove(0);
        let Some(N::SelectStmt(s)) = stmt.node else {
            panic!()
        };
        let Some(N::ResTarget(rt)) = s.target_list[0].node.clone() else {
            panic!()
        };
        *rt.val.unwrap()
    }

    fn numeric_10_1() -> DistColumn {
        DistColumn {
            name: "v".into(),
            attnum: 1,
            type_oid: oid::NUMERIC,
            collation: 0,
            typmod: (10 << 16 | 1) + 4,
            type_sql: "numeric(10,1)".into(),
        }
    }

    #[test]
    fn stored_values_are_read_with_the_column_typmod() {
        let col = numeric_10_1();
        let h = |v: &str| {
            Some(ValueSource::Hash(
                hash::hash_text_value(oid::NUMERIC, v).unwrap(),
            ))
        };
        for text in ["1.54", "'1.54'", "'1.54'::numeric", "1.5"] {
            assert_eq!(
                value_source(&expr(text), &col, ValueUse::Store),
                h("1.5"),
                "{text}"
            );
        }
        // Compared, a constant keeps its own value (typmod -1).
        assert_eq!(
            value_source(&expr("1.54"), &col, ValueUse::Compare),
            h("1.54")
        );
        // A cast with its own typmod is left to PostgreSQL.
        assert_eq!(
            value_source(&expr("1.54::numeric(10,2)"), &col, ValueUse::Compare),
            None
        );
        // Too large for numeric(10,1) once stored: PostgreSQL's error from any shard.
        assert_eq!(
            value_source(&expr("'123456789012'"), &col, ValueUse::Store),
            Some(ValueSource::Invalid)
        );
    }

    #[test]
    fn stored_parameters_are_read_with_the_column_typmod() {
        let col = numeric_10_1();
        let store = hash_param(
            oid::NUMERIC,
            ValueUse::Store.typmod(&col),
            oid::NUMERIC,
            0,
            b"1.54",
        );
        let compare = hash_param(
            oid::NUMERIC,
            ValueUse::Compare.typmod(&col),
            oid::NUMERIC,
            0,
            b"1.54",
        );
        assert_eq!(store, hash::hash_text_value(oid::NUMERIC, "1.5"));
        assert_eq!(compare, hash::hash_text_value(oid::NUMERIC, "1.54"));
        // varchar(3): trailing spaces beyond the length are cut when stored.
        let vc = (3 + 4) as i32;
        assert_eq!(
            hash_param(oid::VARCHAR, vc, oid::TEXT, 1, b"ab   "),
            hash::hash_text_value(oid::VARCHAR, "ab ")
        );
    }
}
