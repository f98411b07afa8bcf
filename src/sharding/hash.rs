//! PostgreSQL's 32-bit hash support functions (the default hash opclass of each type),
//! ported exactly: these decide which shard a row lives on, so they must agree bit for
//! bit with `hashint4`, `hashtext`, `hash_numeric`, ... of a PostgreSQL 15 server
//! (x86-64, little-endian, UTF-8 database).
//!
//! Two layers:
//! - small pure functions over already-decoded values (`hash_int4`, `hash_text`, ...);
//! - decoders that read a value the way PostgreSQL's input (text) or receive (binary)
//!   function would, and hash it. They return `None` whenever the Rust side cannot be
//!   sure of the exact value PostgreSQL would store (invalid input, unsupported type or
//!   spelling); the caller then hashes inside SQL (`hash_sql_expression`). They never guess.
//!
//! Typmods: `hash_text_value` / `hash_binary_value` read values as a bare type (typmod
//! -1), which is what a comparison constant gets. An INSERT coerces to the column's
//! typmod first (`numeric(10,2)` rounds, `varchar(3)` trims spaces, `timestamp(0)`
//! rounds), so routing an inserted value must use the `_typmod` variants.
//!
//! Collations: `hashtext` is collation-aware only for nondeterministic collations; the
//! text hashes here are for deterministic ones (the default), as Citus needs too.

use crate::catalog::Oid;

/// OIDs of the built-in types this module knows (fixed in `pg_type.dat`).
pub mod oid {
    use crate::catalog::Oid;

    pub const BOOL: Oid = 16;
    pub const BYTEA: Oid = 17;
    pub const CHAR: Oid = 18;
    pub const NAME: Oid = 19;
    pub const INT8: Oid = 20;
    pub const INT2: Oid = 21;
    pub const INT4: Oid = 23;
    pub const TEXT: Oid = 25;
    pub const OID: Oid = 26;
    pub const JSONB: Oid = 3802;
    pub const FLOAT4: Oid = 700;
    pub const FLOAT8: Oid = 701;
    pub const MACADDR: Oid = 829;
    pub const INET: Oid = 869;
    pub const BPCHAR: Oid = 1042;
    pub const VARCHAR: Oid = 1043;
    pub const DATE: Oid = 1082;
    pub const TIME: Oid = 1083;
    pub const TIMESTAMP: Oid = 1114;
    pub const TIMESTAMPTZ: Oid = 1184;
    pub const INTERVAL: Oid = 1186;
    pub const TIMETZ: Oid = 1266;
    pub const NUMERIC: Oid = 1700;
    pub const UUID: Oid = 2950;
}

// ---------------------------------------------------------------------------
// lookup3 (src/common/hashfn.c)
// ---------------------------------------------------------------------------

/// PostgreSQL's seed: lookup3's golden ratio plus the length plus PostgreSQL's own
/// arbitrary constant.
fn initial_state(len: u32) -> u32 {
    0x9e37_79b9u32.wrapping_add(len).wrapping_add(3_923_095)
}

fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

fn final_mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

/// Little-endian word of up to 4 bytes (missing high bytes are zero).
fn le_word(bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .enumerate()
        .fold(0u32, |w, (i, &b)| w | (u32::from(b) << (8 * i)))
}

/// `hash_bytes` (a.k.a. `hash_any`). On little-endian machines PostgreSQL's aligned
/// (word loads) and unaligned (byte assembly) paths agree, so byte assembly is exact.
/// One quirk versus Jenkins' original: a tail byte 8..10 lands one byte higher in `c`
/// ("the lowest byte of c is reserved for the length").
pub fn hash_bytes(key: &[u8]) -> u32 {
    // PostgreSQL passes the length as an int; values are far below 2^31.
    let init = initial_state(key.len() as u32);
    let (mut a, mut b, mut c) = (init, init, init);
    let mut chunks = key.chunks_exact(12);
    for chunk in &mut chunks {
        a = a.wrapping_add(le_word(&chunk[0..4]));
        b = b.wrapping_add(le_word(&chunk[4..8]));
        c = c.wrapping_add(le_word(&chunk[8..12]));
        mix(&mut a, &mut b, &mut c);
    }
    let tail = chunks.remainder();
    let n = tail.len();
    a = a.wrapping_add(le_word(&tail[..n.min(4)]));
    if n > 4 {
        b = b.wrapping_add(le_word(&tail[4..n.min(8)]));
    }
    if n > 8 {
        c = c.wrapping_add(le_word(&tail[8..n]) << 8);
    }
    final_mix(&mut a, &mut b, &mut c);
    c
}

/// `hash_bytes_uint32` (a.k.a. `hash_uint32`): same as `hash_bytes` of the 4 bytes.
pub fn hash_bytes_uint32(k: u32) -> u32 {
    let init = initial_state(4);
    let (mut a, mut b, mut c) = (init.wrapping_add(k), init, init);
    final_mix(&mut a, &mut b, &mut c);
    c
}

// ---------------------------------------------------------------------------
// Per-type hash functions over decoded values
// ---------------------------------------------------------------------------

/// `hashint4`; also `date` (days since 2000-01-01) and `xid`/`cid`.
pub fn hash_int4(v: i32) -> i32 {
    hash_bytes_uint32(v as u32) as i32
}

/// `hashint2`: widened to int4 first, so small values hash like int4.
pub fn hash_int2(v: i16) -> i32 {
    hash_int4(i32::from(v))
}

/// `hashint8`: the high word is folded into the low one (complemented for negatives)
/// so that values fitting in int4 hash exactly like int4.
pub fn hash_int8(v: i64) -> i32 {
    let lo = v as u32;
    let hi = (v >> 32) as u32;
    let folded = lo ^ if v >= 0 { hi } else { !hi };
    hash_bytes_uint32(folded) as i32
}

/// `hashoid`.
pub fn hash_oid(v: u32) -> i32 {
    hash_bytes_uint32(v) as i32
}

/// `hashchar`: "char" is a C `char`, signed on x86-64, widened to int32.
pub fn hash_char(v: u8) -> i32 {
    hash_int4(i32::from(v as i8))
}

/// `bool` uses `hashchar` of 0/1 in its default hash opclass.
pub fn hash_bool(v: bool) -> i32 {
    hash_char(u8::from(v))
}

/// `hashtext` (also `varchar` and `hashname`) under a deterministic collation.
pub fn hash_text(s: &[u8]) -> i32 {
    hash_bytes(s) as i32
}

/// `hashbpchar`: trailing spaces are insignificant for `character(n)`.
pub fn hash_bpchar(s: &[u8]) -> i32 {
    hash_text(strip_trailing_spaces(s))
}

/// `uuid_hash`.
pub fn hash_uuid(bytes: &[u8; 16]) -> i32 {
    hash_bytes(bytes) as i32
}

/// The `date` opclass hashes the day number with `hashint4`.
pub fn hash_date(days_since_2000: i32) -> i32 {
    hash_int4(days_since_2000)
}

/// `timestamp_hash` (timestamp and timestamptz) is `hashint8` of the microseconds
/// since 2000-01-01 00:00 (UTC for timestamptz).
pub fn hash_timestamp(micros_since_2000: i64) -> i32 {
    hash_int8(micros_since_2000)
}

/// `hash_numeric` of a finite value given as PostgreSQL stores it: base-10000 digits
/// with `weight` the power of 10000 of the first one. Leading and trailing zero digits
/// are ignored (PostgreSQL strips them too), zero hashes to -1, and sign and display
/// scale are not hashed (1.50 = 1.5 and -1 hashes like 1).
pub fn hash_numeric(weight: i32, digits: &[u16]) -> i32 {
    let lead = digits.iter().take_while(|&&d| d == 0).count();
    let rest = &digits[lead..];
    let trail = rest.iter().rev().take_while(|&&d| d == 0).count();
    let significant = &rest[..rest.len() - trail];
    if significant.is_empty() {
        return -1;
    }
    let weight = weight - lead as i32;
    // The digits are hashed as the in-memory int16 array (little-endian).
    let bytes: Vec<u8> = significant.iter().flat_map(|d| d.to_le_bytes()).collect();
    (hash_bytes(&bytes) ^ weight as u32) as i32
}

/// NaN and the infinities all hash to 0.
pub fn hash_numeric_special() -> i32 {
    0
}

fn strip_trailing_spaces(s: &[u8]) -> &[u8] {
    let len = s.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
    &s[..len]
}

// ---------------------------------------------------------------------------
// Public entry points: decode a wire value, then hash
// ---------------------------------------------------------------------------

/// Hash of a distribution value given in PostgreSQL text form, read as the bare type
/// (typmod -1) exactly as the type's input function would. `None`: not computable here
/// (invalid value, unsupported type or spelling); hash in SQL instead.
pub fn hash_text_value(type_oid: Oid, text: &str) -> Option<i32> {
    hash_text_value_typmod(type_oid, -1, text)
}

/// Hash of a distribution value in PostgreSQL's binary (send/recv) format, bare type.
pub fn hash_binary_value(type_oid: Oid, bytes: &[u8]) -> Option<i32> {
    hash_binary_value_typmod(type_oid, -1, bytes)
}

/// As `hash_text_value`, after coercion to a column with this `atttypmod` (-1: none),
/// as an INSERT does. Returns `None` where that coercion would fail.
pub fn hash_text_value_typmod(type_oid: Oid, typmod: i32, text: &str) -> Option<i32> {
    // A NUL byte can never reach a PostgreSQL input function (encoding check rejects it).
    if text.contains('\0') {
        return None;
    }
    match type_oid {
        oid::INT2 => parse_int(text, i16::MIN.into(), i16::MAX.into()).map(|v| hash_int2(v as i16)),
        oid::INT4 => parse_int(text, i32::MIN.into(), i32::MAX.into()).map(|v| hash_int4(v as i32)),
        oid::INT8 => parse_int(text, i64::MIN, i64::MAX).map(hash_int8),
        oid::OID => parse_oid(text).map(hash_oid),
        oid::TEXT => Some(hash_text(text.as_bytes())),
        oid::VARCHAR => apply_varchar_typmod(text.as_bytes(), typmod).map(hash_text),
        oid::BPCHAR => {
            bpchar_fits_typmod(text.as_bytes(), typmod).then(|| hash_bpchar(text.as_bytes()))
        }
        oid::NAME => Some(hash_text(clip_name(text.as_bytes()))),
        oid::CHAR => Some(hash_char(parse_char(text.as_bytes()))),
        oid::BOOL => parse_bool(text).map(hash_bool),
        oid::UUID => parse_uuid(text).map(|u| hash_uuid(&u)),
        oid::DATE => parse_iso_date(trim_space(text)).map(hash_date),
        oid::TIMESTAMP => parse_iso_timestamp(trim_space(text))
            .and_then(|t| apply_timestamp_typmod(t, typmod))
            .map(hash_timestamp),
        oid::NUMERIC => hash_numeric_value(&parse_numeric_text(text)?, typmod),
        // timestamptz text depends on the session TimeZone: only the server knows.
        _ => None,
    }
}

/// As `hash_binary_value`, after coercion to a column with this `atttypmod` (-1: none).
pub fn hash_binary_value_typmod(type_oid: Oid, typmod: i32, bytes: &[u8]) -> Option<i32> {
    match type_oid {
        oid::INT2 => Some(hash_int2(i16::from_be_bytes(bytes.try_into().ok()?))),
        oid::INT4 => Some(hash_int4(i32::from_be_bytes(bytes.try_into().ok()?))),
        oid::INT8 => Some(hash_int8(i64::from_be_bytes(bytes.try_into().ok()?))),
        oid::OID => Some(hash_oid(u32::from_be_bytes(bytes.try_into().ok()?))),
        oid::TEXT => Some(hash_text(valid_text(bytes)?)),
        oid::VARCHAR => apply_varchar_typmod(valid_text(bytes)?, typmod).map(hash_text),
        oid::BPCHAR => {
            let s = valid_text(bytes)?;
            bpchar_fits_typmod(s, typmod).then(|| hash_bpchar(s))
        }
        // namerecv refuses (rather than truncates) names of NAMEDATALEN bytes or more.
        oid::NAME => {
            let s = valid_text(bytes)?;
            (s.len() < NAMEDATALEN).then(|| hash_text(s))
        }
        oid::CHAR => match bytes {
            [b] => Some(hash_char(*b)),
            _ => None,
        },
        oid::BOOL => match bytes {
            [b] => Some(hash_bool(*b != 0)),
            _ => None,
        },
        oid::UUID => Some(hash_uuid(bytes.try_into().ok()?)),
        oid::DATE => {
            let days = i32::from_be_bytes(bytes.try_into().ok()?);
            date_in_range(days).then(|| hash_date(days))
        }
        oid::TIMESTAMP | oid::TIMESTAMPTZ => {
            let t = i64::from_be_bytes(bytes.try_into().ok()?);
            if !timestamp_in_range(t) {
                return None;
            }
            apply_timestamp_typmod(t, typmod).map(hash_timestamp)
        }
        oid::NUMERIC => hash_numeric_value(&parse_numeric_binary(bytes)?, typmod),
        _ => None,
    }
}

/// Name of the SQL-callable hash support function of a type's default hash opclass,
/// for types where `name(value::type)` is valid SQL. `date`, `bool` and `timestamptz`
/// use `hashint4` / `hashchar` / `timestamp_hash` internally, but SQL cannot call those
/// on them, so they get `None` here: use `hash_sql_expression`, which covers every type.
pub fn hash_function_sql(type_oid: Oid) -> Option<&'static str> {
    Some(match type_oid {
        oid::INT2 => "hashint2",
        oid::INT4 => "hashint4",
        oid::INT8 => "hashint8",
        oid::OID => "hashoid",
        oid::TEXT | oid::VARCHAR => "hashtext",
        oid::BPCHAR => "hashbpchar",
        oid::NAME => "hashname",
        oid::CHAR => "hashchar",
        oid::UUID => "uuid_hash",
        oid::NUMERIC => "hash_numeric",
        oid::TIMESTAMP => "timestamp_hash",
        oid::FLOAT4 => "hashfloat4",
        oid::FLOAT8 => "hashfloat8",
        oid::TIME => "time_hash",
        oid::TIMETZ => "timetz_hash",
        oid::INTERVAL => "interval_hash",
        oid::JSONB => "jsonb_hash",
        oid::INET => "hashinet",
        oid::MACADDR => "hashmacaddr",
        _ => return None,
    })
}

/// A SQL expression (type int4) computing the distribution hash of `arg`, which must be
/// an expression of the column's type including its typmod (e.g. `$1::numeric(10,2)`).
/// Uses the named function where one is callable; otherwise `hash_array` of a
/// one-element array, which calls the element type's default hash function `h` and
/// returns `31 + h` (mod 2^32) — that works for any hashable type (date, bool, enums,
/// domains, ...), and the wrap-around arithmetic below undoes the `+ 31`.
pub fn hash_sql_expression(type_oid: Oid, arg: &str) -> String {
    match hash_function_sql(type_oid) {
        Some(f) => format!("{f}({arg})"),
        None => format!(
            "((((hash_array(ARRAY[{arg}]))::int8 + 2147483617) & 4294967295) - 2147483648)::int4"
        ),
    }
}

// ---------------------------------------------------------------------------
// Text input, mirroring PostgreSQL 15's input functions
// ---------------------------------------------------------------------------

/// C `isspace` in a UTF-8 locale: ASCII whitespace including vertical tab.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn trim_space(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_ascii() && is_c_space(c as u8))
}

/// `pg_strtoint16/32/64`: optional whitespace around, optional sign, at least one digit.
fn parse_int(s: &str, min: i64, max: i64) -> Option<i64> {
    let t = trim_space(s).as_bytes();
    let (neg, digits) = match t.first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: i128 = 0;
    for &d in digits {
        v = v * 10 + i128::from(d - b'0');
        if v > 1 << 64 {
            return None;
        }
    }
    let v = if neg { -v } else { v };
    (i128::from(min)..=i128::from(max))
        .contains(&v)
        .then_some(v as i64)
}

/// `oidin`: C `strtoul` semantics, so `-1` means 4294967295; accepted range is
/// -2147483648 ..= 4294967295.
fn parse_oid(s: &str) -> Option<u32> {
    let v = parse_int(s, -(1i64 << 31), u32::MAX.into())?;
    Some(v as u32)
}

/// `charin`: `\ooo` octal escape, else the first byte (0 for an empty string).
fn parse_char(s: &[u8]) -> u8 {
    let is_octal = |b: u8| (b'0'..=b'7').contains(&b);
    match s {
        [b'\\', a, b, c] if is_octal(*a) && is_octal(*b) && is_octal(*c) => {
            let v = (u32::from(a - b'0') << 6) | (u32::from(b - b'0') << 3) | u32::from(c - b'0');
            v as u8 // C's (char) conversion keeps the low byte
        }
        _ => s.first().copied().unwrap_or(0),
    }
}

/// `boolin`: trimmed, case-insensitive, any unambiguous prefix of true/false/yes/no,
/// "on"/"off" (at least two letters), or exactly "1"/"0".
fn parse_bool(s: &str) -> Option<bool> {
    let t = trim_space(s).to_ascii_lowercase();
    let prefix_of = |word: &str, min: usize| t.len() >= min && word.starts_with(t.as_str());
    match t.as_bytes().first()? {
        b't' if prefix_of("true", 1) => Some(true),
        b'f' if prefix_of("false", 1) => Some(false),
        b'y' if prefix_of("yes", 1) => Some(true),
        b'n' if prefix_of("no", 1) => Some(false),
        b'o' if prefix_of("on", 2) => Some(true),
        b'o' if prefix_of("off", 2) => Some(false),
        _ => match t.as_str() {
            "1" => Some(true),
            "0" => Some(false),
            _ => None,
        },
    }
}

/// `uuid_in`: 32 hex digits, optionally in braces, with an optional hyphen after any
/// group of four digits; no surrounding whitespace.
fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let mut src = s.as_bytes();
    let braces = src.first() == Some(&b'{');
    if braces {
        src = &src[1..];
    }
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        let hi = hex_value(*src.first()?)?;
        let lo = hex_value(*src.get(1)?)?;
        *byte = (hi << 4) | lo;
        src = &src[2..];
        if src.first() == Some(&b'-') && i % 2 == 1 && i < 15 {
            src = &src[1..];
        }
    }
    if braces {
        src = src.strip_prefix(b"}")?;
    }
    src.is_empty().then_some(out)
}

fn hex_value(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

const NAMEDATALEN: usize = 64;

/// `namein` truncates to NAMEDATALEN-1 bytes without splitting a character.
fn clip_name(s: &[u8]) -> &[u8] {
    if s.len() < NAMEDATALEN {
        return s;
    }
    let mut end = NAMEDATALEN - 1;
    while end > 0 && (s[end] & 0xC0) == 0x80 {
        end -= 1;
    }
    &s[..end]
}

/// What PostgreSQL's encoding check accepts for text received from a UTF-8 client.
fn valid_text(bytes: &[u8]) -> Option<&[u8]> {
    let s = std::str::from_utf8(bytes).ok()?;
    (!s.contains('\0')).then_some(bytes)
}

/// `varchar(n)`: longer values lose trailing spaces to fit; anything else beyond `n`
/// characters is an error.
fn apply_varchar_typmod(s: &[u8], typmod: i32) -> Option<&[u8]> {
    match char_limit_split(s, typmod) {
        None => Some(s),
        Some((kept, excess)) => excess.iter().all(|&b| b == b' ').then_some(kept),
    }
}

/// `character(n)`: as varchar, and the padding or trimmed spaces never affect the hash.
fn bpchar_fits_typmod(s: &[u8], typmod: i32) -> bool {
    match char_limit_split(s, typmod) {
        None => true,
        Some((_, excess)) => excess.iter().all(|&b| b == b' '),
    }
}

/// For a length typmod (n + 4), split a too-long string after its first n characters.
fn char_limit_split(s: &[u8], typmod: i32) -> Option<(&[u8], &[u8])> {
    if typmod < 4 {
        return None;
    }
    let max_chars = (typmod - 4) as usize;
    let text = std::str::from_utf8(s).ok()?;
    let (cut, _) = text.char_indices().nth(max_chars)?;
    Some(s.split_at(cut))
}

// --- dates and timestamps -------------------------------------------------

/// Days from 1970-01-01 to a proleptic Gregorian date (Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

const DAYS_1970_TO_2000: i64 = 10_957;
const USECS_PER_DAY: i64 = 86_400_000_000;

fn days_in_month(y: i64, m: i64) -> i64 {
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    match m {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Fixed-width decimal field.
fn digits_value(s: &[u8]) -> Option<i64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0, |v, &d| v * 10 + i64::from(d - b'0')))
}

/// Strict ISO `YYYY-MM-DD` (years 0001-9999) as days since 2000-01-01. Other spellings
/// PostgreSQL accepts depend on DateStyle or are rare: left to the server.
fn parse_iso_date(s: &str) -> Option<i32> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (y, m, d) = (
        digits_value(&b[0..4])?,
        digits_value(&b[5..7])?,
        digits_value(&b[8..10])?,
    );
    if y < 1 || !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
        return None;
    }
    Some((days_from_civil(y, m, d) - DAYS_1970_TO_2000) as i32)
}

/// Strict ISO `YYYY-MM-DD[( |T)HH:MM[:SS[.f{1,6}]]]` without zone, as microseconds since
/// 2000-01-01. Hour 24, leap seconds and more than 6 fraction digits (rounded by
/// PostgreSQL) are left to the server.
fn parse_iso_timestamp(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let days = i64::from(parse_iso_date(s.get(..10)?)?);
    let mut micros = days * USECS_PER_DAY;
    if b.len() == 10 {
        return Some(micros);
    }
    if !matches!(b[10], b' ' | b'T') || b.len() < 16 || b[13] != b':' {
        return None;
    }
    let (h, mi) = (digits_value(&b[11..13])?, digits_value(&b[14..16])?);
    let mut sec = 0;
    let mut frac = 0;
    let rest = &b[16..];
    if !rest.is_empty() {
        if rest.len() < 3 || rest[0] != b':' {
            return None;
        }
        sec = digits_value(&rest[1..3])?;
        let f = &rest[3..];
        if !f.is_empty() {
            if f[0] != b'.' || f.len() > 7 {
                return None;
            }
            let fd = &f[1..];
            frac = digits_value(fd)? * 10i64.pow(6 - fd.len() as u32);
        }
    }
    if h > 23 || mi > 59 || sec > 59 {
        return None;
    }
    micros += ((h * 60 + mi) * 60 + sec) * 1_000_000 + frac;
    Some(micros)
}

/// `date_recv` accepts the infinities and Julian days 0 ..< 2147483494.
fn date_in_range(days: i32) -> bool {
    const POSTGRES_EPOCH_JDATE: i64 = 2_451_545;
    const DATE_END_JULIAN: i64 = 2_147_483_494;
    let d = i64::from(days);
    days == i32::MIN
        || days == i32::MAX
        || (-POSTGRES_EPOCH_JDATE..DATE_END_JULIAN - POSTGRES_EPOCH_JDATE).contains(&d)
}

/// `timestamp_recv` accepts the infinities and MIN_TIMESTAMP ..< END_TIMESTAMP.
fn timestamp_in_range(t: i64) -> bool {
    const MIN_TIMESTAMP: i64 = -211_813_488_000_000_000;
    const END_TIMESTAMP: i64 = 9_223_371_331_200_000_000;
    t == i64::MIN || t == i64::MAX || (MIN_TIMESTAMP..END_TIMESTAMP).contains(&t)
}

/// `AdjustTimestampForTypmod`: round (half away from zero) to `typmod` fraction digits.
fn apply_timestamp_typmod(t: i64, typmod: i32) -> Option<i64> {
    if typmod == -1 || typmod == 6 || t == i64::MIN || t == i64::MAX {
        return Some(t);
    }
    if !(0..6).contains(&typmod) {
        return None;
    }
    let scale = 10i64.pow(6 - typmod as u32);
    let offset = scale / 2;
    let rounded = if t >= 0 {
        (t + offset) / scale * scale
    } else {
        -((-t + offset) / scale * scale)
    };
    Some(rounded)
}

// --- numeric ---------------------------------------------------------------

/// A numeric as PostgreSQL stores it, minus sign and display scale (not hashed).
#[derive(Debug, PartialEq)]
enum Numeric {
    NaN,
    /// Infinity or -Infinity.
    Infinite,
    /// `digits` in base 10000 without leading/trailing zeros (empty: zero), `weight` the
    /// power of 10000 of the first digit.
    Finite {
        weight: i32,
        digits: Vec<u16>,
    },
}

const NUMERIC_DSCALE_MAX: i64 = 0x3FFF;

/// Hash after applying the column typmod and checking what `make_result` checks
/// (the weight fits int16).
fn hash_numeric_value(n: &Numeric, typmod: i32) -> Option<i32> {
    match n {
        Numeric::NaN => Some(hash_numeric_special()),
        // A column typmod admits NaN but not the infinities.
        Numeric::Infinite => (typmod < 4).then(hash_numeric_special),
        Numeric::Finite { weight, digits } => {
            let (weight, digits) = apply_numeric_typmod(*weight, digits, typmod)?;
            if digits.is_empty() {
                return Some(hash_numeric(0, &[]));
            }
            i16::try_from(weight).ok()?;
            Some(hash_numeric(weight, &digits))
        }
    }
}

/// `apply_typmod` for numeric(p,s): round half away from zero to `s` decimal places
/// (`s` may be negative), then refuse more than p-s integer digits.
fn apply_numeric_typmod(weight: i32, digits: &[u16], typmod: i32) -> Option<(i32, Vec<u16>)> {
    if typmod < 4 || digits.is_empty() {
        return Some((weight, digits.to_vec()));
    }
    let precision = ((typmod - 4) >> 16) & 0xffff;
    let scale = (((typmod - 4) & 0x7ff) ^ 1024) - 1024;
    let (weight, digits) = match round_numeric(weight, digits, scale) {
        Numeric::Finite { weight, digits } => (weight, digits),
        _ => unreachable!("rounding keeps a finite value finite"),
    };
    let Some(&first) = digits.first() else {
        return Some((0, digits)); // rounded to zero, which always fits
    };
    // Integer digits counted as PostgreSQL does (<= 0 for fractions).
    let width = match first {
        1000.. => 4,
        100.. => 3,
        10.. => 2,
        _ => 1,
    };
    let int_digits = i64::from(weight) * 4 + width;
    (int_digits <= i64::from(precision - scale)).then_some((weight, digits))
}

/// `round_var`: keep the decimal digits at 10^-scale and above, rounding up when the
/// first dropped digit is 5 or more (on the magnitude: ties away from zero).
fn round_numeric(weight: i32, digits: &[u16], scale: i32) -> Numeric {
    let decimals: Vec<u8> = digits
        .iter()
        .flat_map(|&d| [d / 1000, d / 100 % 10, d / 10 % 10, d % 10].map(|x| x as u8))
        .collect();
    let mut first_exp = i64::from(weight) * 4 + 3;
    let keep = first_exp + i64::from(scale) + 1;
    if keep >= decimals.len() as i64 {
        return numeric_from_decimals(&decimals, first_exp);
    }
    if keep < 0 {
        return numeric_from_decimals(&[], 0);
    }
    let keep = keep as usize;
    let mut kept = decimals[..keep].to_vec();
    if decimals[keep] >= 5 {
        match kept.iter().rposition(|&d| d != 9) {
            Some(i) => {
                kept[i] += 1;
                kept[i + 1..].iter_mut().for_each(|d| *d = 0);
            }
            None => {
                // All nines (or nothing kept): the carry adds a new leading digit.
                kept.iter_mut().for_each(|d| *d = 0);
                kept.insert(0, 1);
                first_exp += 1;
            }
        }
    }
    numeric_from_decimals(&kept, first_exp)
}

/// Case-insensitive ASCII prefix test.
fn has_prefix_ci(s: &[u8], prefix: &str) -> bool {
    s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

/// `numeric_in` (PostgreSQL 15): whitespace, NaN/Infinity spellings, or
/// `[+-][digits][.digits][e[+-]digits]`. Values are exact (no rounding without typmod).
fn parse_numeric_text(s: &str) -> Option<Numeric> {
    let b = s.as_bytes();
    let mut i = b.iter().take_while(|&&c| is_c_space(c)).count();
    let only_space_after = |j: usize| b[j..].iter().all(|&c| is_c_space(c));
    // Same order as numeric_in: "Infinity" must be tried before its prefix "inf".
    for special in [
        "NaN",
        "Infinity",
        "+Infinity",
        "-Infinity",
        "inf",
        "+inf",
        "-inf",
    ] {
        if has_prefix_ci(&b[i..], special) {
            let value = if special == "NaN" {
                Numeric::NaN
            } else {
                Numeric::Infinite
            };
            return only_space_after(i + special.len()).then_some(value);
        }
    }
    if matches!(b.get(i), Some(b'+' | b'-')) {
        i += 1;
    }
    let mut have_point = false;
    if b.get(i) == Some(&b'.') {
        have_point = true;
        i += 1;
    }
    if !b.get(i).is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let mut decimals: Vec<u8> = Vec::new();
    let mut dweight: i64 = -1; // decimal exponent of the first digit
    let mut dscale: i64 = 0;
    while let Some(&c) = b.get(i) {
        if c.is_ascii_digit() {
            decimals.push(c - b'0');
            if have_point {
                dscale += 1;
            } else {
                dweight += 1;
            }
        } else if c == b'.' && !have_point {
            have_point = true;
        } else if c == b'.' {
            return None;
        } else {
            break;
        }
        i += 1;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        let (exponent, end) = parse_strtol(&b[i + 1..])?;
        i += 1 + end;
        // numeric_in's guard against int overflow; bigger exponents are errors.
        const LIMIT: i64 = (i32::MAX / 2) as i64;
        if exponent >= LIMIT || exponent <= -LIMIT {
            return None;
        }
        dweight += exponent;
        dscale = (dscale - exponent).max(0);
    }
    if !only_space_after(i) || dscale > NUMERIC_DSCALE_MAX {
        return None;
    }
    Some(numeric_from_decimals(&decimals, dweight))
}

/// C `strtol` base 10: leading whitespace, sign, digits (saturating). Returns the value
/// and the bytes consumed; `None` if no digits.
fn parse_strtol(b: &[u8]) -> Option<(i64, usize)> {
    let mut i = b.iter().take_while(|&&c| is_c_space(c)).count();
    let neg = b.get(i) == Some(&b'-');
    if matches!(b.get(i), Some(b'+' | b'-')) {
        i += 1;
    }
    let start = i;
    let mut v: i64 = 0;
    while let Some(d) = b.get(i).filter(|c| c.is_ascii_digit()) {
        v = v.saturating_mul(10).saturating_add(i64::from(d - b'0'));
        i += 1;
    }
    (i > start).then_some((if neg { -v } else { v }, i))
}

/// Groups decimal digits (the first at 10^dweight) into stripped base-10000 digits.
fn numeric_from_decimals(decimals: &[u8], dweight: i64) -> Numeric {
    let first = decimals.iter().position(|&d| d != 0);
    let last = decimals.iter().rposition(|&d| d != 0);
    let (Some(first), Some(last)) = (first, last) else {
        return Numeric::Finite {
            weight: 0,
            digits: Vec::new(),
        };
    };
    let exp_of = |j: usize| dweight - j as i64;
    let weight = exp_of(first).div_euclid(4);
    let low = exp_of(last).div_euclid(4);
    let mut digits = vec![0u16; (weight - low + 1) as usize];
    for (j, &d) in decimals.iter().enumerate().take(last + 1).skip(first) {
        let e = exp_of(j);
        digits[(weight - e.div_euclid(4)) as usize] +=
            u16::from(d) * 10u16.pow(e.rem_euclid(4) as u32);
    }
    // Weights beyond int16 are rejected later; clamp so the i32 cannot wrap.
    let weight = weight.clamp(i32::MIN.into(), i32::MAX.into()) as i32;
    Numeric::Finite { weight, digits }
}

/// `numeric_recv`: ndigits, weight, sign, dscale (each 16 bits, big-endian), then the
/// base-10000 digits. Digits hidden by dscale are truncated away, as PostgreSQL does.
fn parse_numeric_binary(b: &[u8]) -> Option<Numeric> {
    let word =
        |i: usize| -> Option<u16> { Some(u16::from_be_bytes(b.get(i..i + 2)?.try_into().ok()?)) };
    let ndigits = usize::from(word(0)?);
    let weight = i32::from(word(2)? as i16);
    let sign = word(4)?;
    let dscale = word(6)?;
    if b.len() != 8 + 2 * ndigits || i64::from(dscale) > NUMERIC_DSCALE_MAX {
        return None;
    }
    let digits: Vec<u16> = (0..ndigits)
        .map(|k| word(8 + 2 * k))
        .collect::<Option<_>>()?;
    if digits.iter().any(|&d| d >= 10_000) {
        return None;
    }
    match sign {
        0x0000 | 0x4000 => Some(truncate_numeric(weight, digits, i32::from(dscale))),
        0xC000 => Some(Numeric::NaN),
        0xD000 | 0xF000 => Some(Numeric::Infinite),
        _ => None,
    }
}

/// `trunc_var(var, dscale)` followed by stripping leading/trailing zero digits.
fn truncate_numeric(mut weight: i32, mut digits: Vec<u16>, dscale: i32) -> Numeric {
    let wanted_decimals = (weight + 1) * 4 + dscale;
    if wanted_decimals <= 0 {
        digits.clear();
    } else {
        let wanted = ((wanted_decimals + 3) / 4) as usize;
        if wanted <= digits.len() {
            digits.truncate(wanted);
            let keep = wanted_decimals % 4; // decimal digits kept in the last base-10000 digit
            if keep > 0 {
                let pow10 = [0u16, 1000, 100, 10][keep as usize];
                let last = digits.last_mut().expect("wanted >= 1");
                *last -= *last % pow10;
            }
        }
    }
    let lead = digits.iter().take_while(|&&d| d == 0).count();
    digits.drain(..lead);
    weight -= lead as i32;
    while digits.last() == Some(&0) {
        digits.pop();
    }
    if digits.is_empty() {
        weight = 0;
    }
    Numeric::Finite { weight, digits }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn design_note_vectors() {
        assert_eq!(hash_int4(1), -1905060026);
        assert_eq!(hash_int4(2), 1134484726);
        assert_eq!(hash_int4(3), -28094569);
        assert_eq!(hash_int4(4), -1011077333);
        assert_eq!(hash_int4(123), -205084363);
        assert_eq!(hash_int8(1), -1905060026);
        assert_eq!(hash_int8(-1), 385747274);
        assert_eq!(hash_int8(5000000000), -694934712);
        assert_eq!(hash_text(b"abc"), -785388649);
    }

    // Vectors below were read off PostgreSQL 15.18 (x86-64).
    #[test]
    fn integer_vectors() {
        assert_eq!(hash_int4(0), -272711505);
        assert_eq!(hash_int4(-1), 385747274);
        assert_eq!(hash_int4(i32::MIN), -1524351049);
        assert_eq!(hash_int4(i32::MAX), -96758253);
        assert_eq!(hash_int4(42), 1509752520);
        assert_eq!(hash_int2(i16::MIN), 193646934);
        assert_eq!(hash_int2(i16::MAX), 1289782602);
        assert_eq!(hash_int2(7), -978793473);
        assert_eq!(hash_int8(0), -272711505);
        assert_eq!(hash_int8(i64::MIN), -96758253);
        assert_eq!(hash_int8(i64::MAX), -1524351049);
        assert_eq!(hash_int8(-5000000000), 954517114);
        assert_eq!(hash_int8(4294967296), -1905060026);
        assert_eq!(hash_oid(0), -272711505);
        assert_eq!(hash_oid(u32::MAX), 385747274);
        assert_eq!(hash_oid(1259), -215855226);
    }

    #[test]
    fn text_vectors() {
        assert_eq!(hash_text(b""), -1477818771);
        assert_eq!(hash_text(b"a"), 1075015857);
        assert_eq!(hash_text(b"abcdefghijkl"), -1586087212);
        assert_eq!(hash_text(b"abcdefghijklm"), 405849808);
        assert_eq!(hash_text("héllo wörld 日本語 🎉".as_bytes()), -480283967);
        assert_eq!(hash_text(b"12345678901"), 1650060602);
        assert_eq!(hash_bpchar(b"abc   "), -785388649);
        assert_eq!(hash_bpchar(b"   "), -1477818771);
        assert_eq!(hash_bpchar(b" a b "), -295828986);
        assert_eq!(
            hash_text_value(oid::NAME, &"x".repeat(70)),
            Some(1580591788)
        );
        assert_eq!(hash_text_value(oid::VARCHAR, "abc"), Some(-785388649));
    }

    #[test]
    fn char_and_bool_vectors() {
        assert_eq!(hash_char(b'a'), 463612535);
        assert_eq!(hash_char(0), -272711505);
        assert_eq!(hash_char(0xff), 385747274);
        assert_eq!(hash_char(0x7f), -197710279);
        assert_eq!(hash_text_value(oid::CHAR, "é"), Some(372385741));
        assert_eq!(hash_text_value(oid::CHAR, "\\200"), Some(1361043915));
        assert_eq!(hash_text_value(oid::CHAR, ""), Some(-272711505));
        assert_eq!(hash_bool(true), -1905060026);
        assert_eq!(hash_bool(false), -272711505);
        for t in ["t", "TRUE", " yes ", "on", "1", "Tr"] {
            assert_eq!(hash_text_value(oid::BOOL, t), Some(hash_bool(true)), "{t}");
        }
        for f in ["f", "False", "n", "NO", "off", "0", "of"] {
            assert_eq!(hash_text_value(oid::BOOL, f), Some(hash_bool(false)), "{f}");
        }
        for bad in ["", "o", "truex", "2", "yess", "10"] {
            assert_eq!(hash_text_value(oid::BOOL, bad), None, "{bad}");
        }
    }

    #[test]
    fn uuid_vectors() {
        let h = Some(1154666245);
        for s in [
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
            "a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
        ] {
            assert_eq!(hash_text_value(oid::UUID, s), h, "{s}");
        }
        for bad in [
            " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-",
            "a0e-ebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "",
        ] {
            assert_eq!(hash_text_value(oid::UUID, bad), None, "{bad}");
        }
        assert_eq!(hash_uuid(&[0; 16]), 1353656403);
        assert_eq!(hash_uuid(&[0xff; 16]), -682383255);
    }

    #[test]
    fn numeric_vectors() {
        let n = |s: &str| hash_text_value(oid::NUMERIC, s);
        assert_eq!(n("1"), Some(1324868424));
        assert_eq!(n("-1"), Some(1324868424));
        assert_eq!(n("1.50"), Some(692967894));
        assert_eq!(n("10000"), Some(1324868425));
        assert_eq!(n("0.0001"), Some(-1324868425));
        assert_eq!(n("123456789.987654321"), Some(1241263062));
        assert_eq!(n("1e-20"), Some(-1324868429));
        assert_eq!(n("9999"), Some(1699550555));
        assert_eq!(n(" 0.000 "), Some(-1));
        assert_eq!(n("NaN"), Some(0));
        assert_eq!(n("-inf"), Some(0));
        assert_eq!(n("1.5E+0"), n("15e-1"));
        for bad in [
            "",
            ".",
            "1e",
            "1..2",
            "1_000",
            "0x10",
            "1e1073741823",
            "0e-20000",
            "infx",
        ] {
            assert_eq!(n(bad), None, "{bad}");
        }
        // Binary: ndigits 2, weight 0, positive, dscale 2: 1.5000 with dscale 2 -> 1.50.
        let bin = [0, 2, 0, 0, 0, 0, 0, 2, 0, 1, 0x13, 0x88];
        assert_eq!(hash_binary_value(oid::NUMERIC, &bin), Some(692967894));
        // dscale 0 truncates the fraction away: 1.
        let bin0 = [0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0x13, 0x88];
        assert_eq!(hash_binary_value(oid::NUMERIC, &bin0), Some(1324868424));
    }

    #[test]
    fn numeric_typmod() {
        let nt = |t: i32, s: &str| hash_text_value_typmod(oid::NUMERIC, t, s);
        let typmod = |p: i32, s: i32| ((p << 16) | (s & 0x7ff)) + 4;
        assert_eq!(nt(typmod(10, 2), "1.5"), Some(692967894));
        assert_eq!(nt(typmod(10, 2), "1.495"), nt(-1, "1.50"));
        assert_eq!(nt(typmod(10, 2), "-1.494"), nt(-1, "1.49"));
        assert_eq!(nt(typmod(2, 0), "99.5"), None);
        assert_eq!(nt(typmod(3, 0), "99.5"), nt(-1, "100"));
        assert_eq!(nt(typmod(3, 0), "0.4"), Some(-1));
        assert_eq!(nt(typmod(3, 0), "0.5"), nt(-1, "1"));
        assert_eq!(nt(typmod(3, 2), "12.5"), None);
        assert_eq!(nt(typmod(3, 2), "0"), Some(-1));
        assert_eq!(nt(typmod(2, -2), "1200"), nt(-1, "1200"));
        assert_eq!(nt(typmod(2, -2), "1250"), nt(-1, "1300"));
        assert_eq!(nt(typmod(2, -2), "9950"), None);
        assert_eq!(nt(typmod(10, 2), "NaN"), Some(0));
        assert_eq!(nt(typmod(10, 2), "-Infinity"), None);
    }

    #[test]
    fn date_and_timestamp_vectors() {
        assert_eq!(hash_text_value(oid::DATE, "2000-01-01"), Some(-272711505));
        assert_eq!(hash_text_value(oid::DATE, "2024-02-29"), Some(1456914585));
        assert_eq!(hash_text_value(oid::DATE, "1999-12-31"), Some(385747274));
        for bad in [
            "2023-02-29",
            "0000-01-01",
            "2020-1-1",
            "01/02/2020",
            "infinity",
            "2020-13-01",
        ] {
            assert_eq!(hash_text_value(oid::DATE, bad), None, "{bad}");
        }
        let ts = |s: &str| hash_text_value(oid::TIMESTAMP, s);
        assert_eq!(ts("2000-01-01 00:00:00"), Some(-272711505));
        assert_eq!(ts("2024-02-29 13:45:10.123456"), Some(-1004338188));
        assert_eq!(ts("1970-01-01 00:00:00"), Some(680174221));
        assert_eq!(ts("0001-01-01 00:00:00"), Some(255550282));
        assert_eq!(ts("2020-01-01 00:00:00"), Some(-575494134));
        assert_eq!(ts("2020-01-01T00:00"), Some(-575494134));
        assert_eq!(ts("2020-01-01 00:00:00+02"), None);
        assert_eq!(
            hash_text_value(oid::TIMESTAMPTZ, "2020-01-01 00:00:00"),
            None
        );
        let bin = 631152000000000i64.to_be_bytes();
        assert_eq!(hash_binary_value(oid::TIMESTAMPTZ, &bin), Some(-575494134));
    }

    #[test]
    fn lookup3_tails_agree_with_word_loads() {
        // hash_bytes_uint32(k) is documented equal to hash_bytes of k's 4 bytes.
        for k in [0u32, 1, 0xdead_beef, u32::MAX] {
            assert_eq!(hash_bytes_uint32(k), hash_bytes(&k.to_le_bytes()));
        }
    }

    #[test]
    fn never_panics_on_odd_input() {
        let types = [
            oid::INT2,
            oid::INT4,
            oid::INT8,
            oid::OID,
            oid::TEXT,
            oid::VARCHAR,
            oid::BPCHAR,
            oid::NAME,
            oid::CHAR,
            oid::BOOL,
            oid::UUID,
            oid::DATE,
            oid::TIMESTAMP,
            oid::TIMESTAMPTZ,
            oid::NUMERIC,
            0,
            99999,
        ];
        let long = "9".repeat(400);
        let texts = [
            "",
            " ",
            "-",
            "+",
            "\0",
            "é",
            "{",
            "1e",
            "2020-01-01 ",
            long.as_str(),
        ];
        let bins: [&[u8]; 6] = [
            &[],
            &[0],
            &[0xff; 3],
            &[0; 8],
            &[0xff; 16],
            &[0, 1, 0x80, 0, 0, 0, 0, 0],
        ];
        for &t in &types {
            for s in texts {
                let _ = hash_text_value(t, s);
                let _ = hash_text_value_typmod(t, 8, s);
            }
            for b in bins {
                let _ = hash_binary_value(t, b);
                let _ = hash_binary_value_typmod(t, 8, b);
            }
        }
    }

    #[test]
    fn sql_names() {
        assert_eq!(hash_function_sql(oid::INT4), Some("hashint4"));
        assert_eq!(hash_function_sql(oid::DATE), None);
        assert_eq!(
            hash_sql_expression(oid::INT8, "$1::int8"),
            "hashint8($1::int8)"
        );
        assert!(hash_sql_expression(oid::DATE, "$1::date").contains("hash_array(ARRAY[$1::date])"));
    }
}
