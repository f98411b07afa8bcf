//! Checks `pgshard::sharding::hash` against a real PostgreSQL 15: for thousands of
//! values of every supported type, the server's own hash function (and its binary send
//! form of the value) must agree with `hash_text_value` / `hash_binary_value`, and the
//! Rust side must refuse exactly the inputs the server refuses.
//!
//! The server is the harness's plain PostgreSQL (`common::plain_postgres()`), or the one
//! named by PGSHARD_TEST_PGHOST / PGPORT / PGUSER / PGPASSWORD (database PGSHARD_TEST_PGDATABASE,
//! default `postgres`) when those are set.

mod common;

use bytes::BytesMut;
use pgshard::sharding::hash::{
    self, hash_binary_value, hash_binary_value_typmod, hash_sql_expression, hash_text_value,
    hash_text_value_typmod, oid,
};
use std::error::Error;
use tokio_postgres::types::{to_sql_checked, FromSql, IsNull, ToSql, Type};
use tokio_postgres::Client;

type BoxError = Box<dyn Error + Sync + Send>;

async fn server() -> Client {
    match std::env::var("PGSHARD_TEST_PGHOST") {
        Ok(host) => {
            let var = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
            let port = var("PGSHARD_TEST_PGPORT", "5432").parse().expect("port");
            let user = var("PGSHARD_TEST_PGUSER", "postgres");
            let password = var("PGSHARD_TEST_PGPASSWORD", "");
            let db = var("PGSHARD_TEST_PGDATABASE", "postgres");
            common::connect(&host, port, &user, &password, &db).await
        }
        Err(_) => common::plain_postgres().client().await,
    }
}

/// Any column or parameter as its raw binary bytes.
struct Raw(Vec<u8>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        Ok(Raw(raw.to_vec()))
    }
    fn accepts(_: &Type) -> bool {
        true
    }
}

#[derive(Debug)]
struct RawParam(Vec<u8>);

impl ToSql for RawParam {
    fn to_sql(&self, _: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        out.extend_from_slice(&self.0);
        Ok(IsNull::No)
    }
    fn accepts(_: &Type) -> bool {
        true
    }
    to_sql_checked!();
}

/// `probe(v, type, hash_expr, generic_expr, table)`: reads `v` as the type (a cast of
/// the literal, or an INSERT into `table` for assignment semantics), returns its hash by
/// both expressions and its binary send form; all NULL when PostgreSQL rejects it.
const PROBE: &str = r#"
create or replace function pg_temp.probe(v text, t text, hexpr text, gexpr text, tbl text,
    out h int4, out g int4, out b bytea) language plpgsql as $$
declare send text;
begin
  select typsend::text into strict send from pg_type where oid = t::regtype;
  if tbl is null then
    execute format('select %s, %s, %s(x) from (select %L::%s as x) s', hexpr, gexpr, send, v, t)
      into h, g, b;
  else
    execute format('insert into %s values (%L) returning %s, %s, %s(x)', tbl, v, hexpr, gexpr, send)
      into h, g, b;
  end if;
exception when others then
  h := null; g := null; b := null;
end $$"#;

/// How strictly the Rust text reader must match the server.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Rust returns a hash exactly when PostgreSQL accepts the value.
    Exact,
    /// Rust may decline (None) values PostgreSQL accepts, never the reverse.
    MayDecline,
}

struct Case<'a> {
    type_sql: &'a str,
    oid: u32,
    typmod: i32,
    /// Insert into a column of the type instead of casting (typmod assignment rules).
    assign: bool,
    mode: Mode,
}

impl<'a> Case<'a> {
    fn bare(type_sql: &'a str, oid: u32, mode: Mode) -> Self {
        Case {
            type_sql,
            oid,
            typmod: -1,
            assign: false,
            mode,
        }
    }
    fn column(type_sql: &'a str, oid: u32, typmod: i32, mode: Mode) -> Self {
        Case {
            type_sql,
            oid,
            typmod,
            assign: true,
            mode,
        }
    }
}

/// Runs the probe over `values` in one round trip and compares; returns how many values
/// the server accepted and how many of those Rust hashed from text.
async fn check(client: &Client, case: &Case<'_>, values: &[String]) -> (usize, usize) {
    client.batch_execute(PROBE).await.unwrap();
    let table = if case.assign {
        let t = format!(
            "probe_{}",
            case.type_sql.replace(|c: char| !c.is_alphanumeric(), "_")
        );
        client
            .batch_execute(&format!(
                "create temp table if not exists {t} (x {})",
                case.type_sql
            ))
            .await
            .unwrap();
        Some(t)
    } else {
        None
    };
    let hexpr = hash_sql_expression(case.oid, "x");
    // OID 0 has no named function: this is the generic hash_array route.
    let gexpr = hash_sql_expression(0, "x");
    let rows = client
        .query(
            "select p.h, p.g, p.b from unnest($1::text[]) with ordinality u(v, i) \
             cross join lateral pg_temp.probe(u.v, $2, $3, $4, $5) p order by u.i",
            &[&values, &case.type_sql, &hexpr, &gexpr, &table],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), values.len());
    let (mut accepted, mut hashed) = (0, 0);
    for (v, row) in values.iter().zip(&rows) {
        let pg: Option<i32> = row.get(0);
        let generic: Option<i32> = row.get(1);
        let bin: Option<Raw> = row.get(2);
        let ctx = format!("{} {:?}", case.type_sql, v);
        assert_eq!(pg, generic, "direct vs hash_array route: {ctx}");
        let rust = hash_text_value_typmod(case.oid, case.typmod, v);
        if case.typmod == -1 {
            assert_eq!(rust, hash_text_value(case.oid, v), "typmod -1: {ctx}");
        }
        match case.mode {
            Mode::Exact => assert_eq!(rust, pg, "text: {ctx}"),
            Mode::MayDecline => {
                if rust.is_some() {
                    assert_eq!(rust, pg, "text: {ctx}");
                }
            }
        }
        if let Some(h) = pg {
            accepted += 1;
            hashed += usize::from(rust.is_some());
            let bin = bin.expect("binary form").0;
            // What the server sent back is a valid value of the column: always readable.
            let rb = hash_binary_value_typmod(case.oid, case.typmod, &bin);
            assert_eq!(rb, Some(h), "binary {bin:02x?}: {ctx}");
            if case.typmod == -1 {
                assert_eq!(hash_binary_value(case.oid, &bin), Some(h), "binary: {ctx}");
            }
        }
    }
    eprintln!(
        "{:<16} {:>5} values, {:>5} accepted by PostgreSQL, {:>5} hashed from text in Rust",
        case.type_sql,
        values.len(),
        accepted,
        hashed
    );
    (accepted, hashed)
}

/// Deterministic pseudo-random numbers (no seed files, same values every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 ^ (self.0 >> 29)
    }
    fn below(&mut self, n: u64) -> u64 {
        (self.next() >> 16) % n
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// Odd spellings every integer type must treat like PostgreSQL does.
fn integer_spellings() -> Vec<String> {
    strings(&[
        "",
        " ",
        "-",
        "+",
        "-0",
        "+0",
        " 42",
        "42 ",
        "\t42\n",
        " -17 ",
        "+17",
        "0042",
        "4 2",
        "42x",
        "x42",
        "0x10",
        "1e3",
        "1.0",
        "1_000",
        "--1",
        "+-1",
        "١٢",
        "4\u{b}",
        "\u{c}4",
        "000000000000000000000000000000000000001",
    ])
}

#[tokio::test]
async fn integers_match_postgres() {
    let client = server().await;
    let mut rng = Lcg(1);

    let mut int2: Vec<String> = (-3000..=3000).map(|v: i32| v.to_string()).collect();
    for v in [
        i16::MIN as i32,
        i16::MAX as i32,
        32768,
        -32769,
        65535,
        99999,
    ] {
        int2.push(v.to_string());
    }
    int2.extend(integer_spellings());
    let (ok, _) = check(&client, &Case::bare("int2", oid::INT2, Mode::Exact), &int2).await;
    assert!(ok > 6000);

    let mut int4: Vec<String> = (-2000..=2000).map(|v: i32| v.to_string()).collect();
    int4.extend((0..3000).map(|_| (rng.next() as i32).to_string()));
    for k in 0..32 {
        let p = 1i64 << k;
        int4.extend(
            [p - 1, p, p + 1, -p - 1, -p, -p + 1]
                .iter()
                .map(|v| v.to_string()),
        );
    }
    let edges = [
        i32::MIN as i64,
        i32::MAX as i64,
        2147483648,
        -2147483649,
        1 << 40,
    ];
    int4.extend(edges.iter().map(|v| v.to_string()));
    int4.extend(integer_spellings());
    let (ok, _) = check(&client, &Case::bare("int4", oid::INT4, Mode::Exact), &int4).await;
    assert!(ok > 7000);

    let mut int8: Vec<String> = (-1000..=1000).map(|v: i64| v.to_string()).collect();
    int8.extend((0..3000).map(|_| (rng.next() as i64).to_string()));
    int8.extend((0..1000).map(|_| ((rng.next() as i64) >> rng.below(64)).to_string()));
    for k in 0..64 {
        let p = 1i128 << k;
        int8.extend(
            [p - 1, p, p + 1, -p - 1, -p, -p + 1]
                .iter()
                .map(|v| v.to_string()),
        );
    }
    for v in [
        i64::MIN as i128,
        i64::MAX as i128,
        1 << 63,
        -(1 << 63) - 1,
        5000000000,
    ] {
        int8.push(v.to_string());
    }
    int8.extend(integer_spellings());
    let (ok, _) = check(&client, &Case::bare("int8", oid::INT8, Mode::Exact), &int8).await;
    assert!(ok > 6000);

    let mut oids: Vec<String> = (0..1000).map(|v: u32| v.to_string()).collect();
    oids.extend((0..1000).map(|_| (rng.next() as u32).to_string()));
    for v in [
        "4294967295",
        "4294967296",
        "-1",
        "-2147483648",
        "-2147483649",
        "-4294967295",
    ] {
        oids.push(v.to_string());
    }
    oids.extend(integer_spellings());
    let (ok, _) = check(&client, &Case::bare("oid", oid::OID, Mode::Exact), &oids).await;
    assert!(ok > 2000);
}

/// Text covering ASCII, accents, CJK, emoji, quotes and backslashes, every lookup3 tail
/// length (byte lengths 0..=60) and long values.
fn text_values(rng: &mut Lcg) -> Vec<String> {
    let pieces = [
        "a",
        "Z",
        "0",
        " ",
        "é",
        "ß",
        "ÿ",
        "€",
        "ж",
        "日",
        "本",
        "語",
        "🎉",
        "👍🏽",
        "\t",
        "'",
        "\\",
        "\"",
        "-",
        "\u{7f}",
        "\u{80}",
        "\u{ffff}",
        "\u{10ffff}",
    ];
    let mut v: Vec<String> = (0..=60).map(|n| "x".repeat(n)).collect();
    v.extend((0..=60).map(|n| "é".repeat(n / 2) + &"k".repeat(n % 2)));
    v.extend((0..2500).map(|_| {
        let len = rng.below(30);
        (0..len).map(|_| rng.pick(&pieces)).collect::<String>()
    }));
    v.extend(
        [100, 255, 256, 1000, 4097]
            .iter()
            .map(|&n| "abc日本🎉".repeat(n / 4)),
    );
    v.extend(strings(&[
        "abc",
        "ABC",
        "abc ",
        " abc",
        "abc\t",
        "  ",
        "trailing   ",
    ]));
    v
}

#[tokio::test]
async fn text_types_match_postgres() {
    let client = server().await;
    let mut rng = Lcg(2);
    let texts = text_values(&mut rng);
    for (t, o) in [
        ("text", oid::TEXT),
        ("varchar", oid::VARCHAR),
        ("bpchar", oid::BPCHAR),
    ] {
        let (ok, _) = check(&client, &Case::bare(t, o, Mode::Exact), &texts).await;
        assert_eq!(ok, texts.len(), "{t} accepts everything");
    }

    // name: clipped at 63 bytes without splitting a character.
    let mut names = texts.clone();
    for pad in 58..66 {
        for tail in ["é", "日", "🎉", "x"] {
            names.push("n".repeat(pad) + tail + "zz");
        }
    }
    names.push("n".repeat(200));
    check(&client, &Case::bare("name", oid::NAME, Mode::Exact), &names).await;

    // "char": first byte, or a \ooo octal escape.
    let mut chars = strings(&[
        "", "a", "ab", "é", "日", "🎉", "\\", "\\0", "\\08", "\\1234", "\\x41",
    ]);
    chars.extend((1u8..128).map(|b| (b as char).to_string()));
    chars.extend((0..512).step_by(7).map(|o| format!("\\{o:03o}")));
    chars.push("\\777".into());
    check(
        &client,
        &Case::bare("\"char\"", oid::CHAR, Mode::Exact),
        &chars,
    )
    .await;
}

#[tokio::test]
async fn length_typmods_match_postgres() {
    let client = server().await;
    let vals = strings(&[
        "",
        "a",
        "ab",
        "abc",
        "abcd",
        "abc ",
        "abc   ",
        "ab    ",
        "ab  c",
        " abc",
        "abc\t",
        "日本語",
        "日本語 ",
        "日本語x",
        "🎉🎉🎉  ",
        "🎉🎉🎉🎉",
        "é é ",
        "   ",
        "    ",
    ]);
    // varchar(3) / character(3): atttypmod 3 + 4.
    check(
        &client,
        &Case::column("varchar(3)", oid::VARCHAR, 7, Mode::Exact),
        &vals,
    )
    .await;
    check(
        &client,
        &Case::column("character(3)", oid::BPCHAR, 7, Mode::Exact),
        &vals,
    )
    .await;
    check(
        &client,
        &Case::column("varchar(1)", oid::VARCHAR, 5, Mode::Exact),
        &vals,
    )
    .await;
}

#[tokio::test]
async fn bool_and_uuid_match_postgres() {
    let client = server().await;
    let mut bools = strings(&[
        "t", "tr", "tru", "true", "TRUE", "True", " true ", "\ttrue\n", "truee", "f", "fa", "fal",
        "fals", "false", "FALSE", "y", "ye", "yes", "YES", "yess", "n", "no", "NO", "non", "o",
        "on", "ON", "of", "off", "OFF", "offf", "1", "0", "01", "10", "2", "-1", "", " ", "t rue",
        "é", "nope", "yep", "On ", " oFf",
    ]);
    bools.extend(bools.clone().iter().map(|b| b.to_uppercase()));
    check(&client, &Case::bare("bool", oid::BOOL, Mode::Exact), &bools).await;

    let mut rng = Lcg(3);
    let mut uuids = Vec::new();
    for _ in 0..1500 {
        let hex: String = (0..32).map(|_| format!("{:x}", rng.below(16))).collect();
        let dashed = format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        );
        let form = rng.below(6);
        uuids.push(match form {
            0 => dashed,
            1 => dashed.to_uppercase(),
            2 => format!("{{{dashed}}}"),
            3 => hex,
            4 => (0..8)
                .map(|k| &hex[k * 4..k * 4 + 4])
                .collect::<Vec<_>>()
                .join("-"),
            _ => format!("{{{hex}}}"),
        });
    }
    uuids.extend(strings(&[
        "00000000-0000-0000-0000-000000000000",
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11 ",
        " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a111",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-",
        "-a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "a0eebc9-99c0b-4ef8-bb6d-6bb9bd380a11",
        "a0eebc99--9c0b-4ef8-bb6d-6bb9bd380a11",
        "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
        "g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "",
        "{}",
    ]));
    let (ok, _) = check(&client, &Case::bare("uuid", oid::UUID, Mode::Exact), &uuids).await;
    assert!(ok >= 1502);
}

/// Decimal text with many signs, scales, exponents and leading/trailing zeros.
fn numeric_values(rng: &mut Lcg) -> Vec<String> {
    let mut v = Vec::new();
    for _ in 0..4000 {
        let mut s = String::new();
        s += rng.pick(&["", "", "-", "+"]);
        let zeros = ["", "", "", "0", "000"];
        s += rng.pick(&zeros);
        let int_len = rng.below(22);
        s.extend((0..int_len).map(|_| char::from(b'0' + rng.below(10) as u8)));
        if rng.below(3) > 0 {
            s.push('.');
            let frac_len = rng.below(22);
            s.extend((0..frac_len).map(|_| char::from(b'0' + rng.below(10) as u8)));
            s += rng.pick(&zeros);
        }
        if rng.below(4) == 0 {
            s += rng.pick(&["e", "E", "e+", "e-", "E-"]);
            s += &rng.below(45).to_string();
        }
        if !s.bytes().any(|b| b.is_ascii_digit()) {
            s.push('7');
        }
        if rng.below(10) == 0 {
            s = format!(" {s}\t");
        }
        v.push(s);
    }
    v.extend((-1000..=1000).map(|k: i32| format!("{}", k as f64 / 8.0)));
    v.extend((0..40).map(|k| format!("1{}", "0".repeat(k))));
    v.extend((0..40).map(|k| format!("0.{}1", "0".repeat(k))));
    v.extend((0..40).map(|k| format!("9999{}.0001", "0".repeat(k))));
    v.extend(strings(&[
        "0",
        "-0",
        "+0",
        "0.000",
        "-0.000e5",
        "00000",
        ".0",
        "0.",
        "NaN",
        "nan",
        " NaN ",
        "-NaN",
        "NaNx",
        "Infinity",
        "infinity",
        "+Infinity",
        "-Infinity",
        "inf",
        "+inf",
        "-inf",
        "INF",
        "-INFINITY ",
        "infx",
        "Infinityx",
        "in",
        ".5",
        "5.",
        "-.5e-3",
        "+.5E+3",
        "5.e3",
        ".",
        "-",
        "+",
        "",
        " ",
        "e5",
        "1e",
        "1e+",
        "1e-",
        "1e 5",
        "1e\t-5",
        "1e5 ",
        "1e5x",
        "1.2.3",
        "--1",
        "+-1",
        "1_000",
        "0x10",
        "1,5",
        "1e1.5",
        "1 2",
        "١",
        "0e-16383",
        "0e-16384",
        "1e-16383",
        "1e-16384",
        "0.1e-16383",
        "1e131071",
        "9.999e131071",
        "99999e131067",
        "1e131072",
        "0e1073741822",
        "0e1073741823",
        "0e-1073741823",
        "1e99999999999999999999",
        "123456789012345678901234567890.123456789012345678901234567890",
    ]));
    v.push("9".repeat(1000));
    v.push(format!("0.{}", "9".repeat(1000)));
    v.push(format!("{}.{}", "1".repeat(500), "0".repeat(500)));
    v.push(format!("0.{}", "0".repeat(16382)) + "1");
    v.push(format!("0.{}", "0".repeat(16383)) + "1");
    v
}

#[tokio::test]
async fn numeric_matches_postgres() {
    let client = server().await;
    let mut rng = Lcg(4);
    let values = numeric_values(&mut rng);
    let (ok, _) = check(
        &client,
        &Case::bare("numeric", oid::NUMERIC, Mode::Exact),
        &values,
    )
    .await;
    assert!(ok > 6000);

    // Columns with a typmod: values are rounded to the scale (as an INSERT does), and
    // refused when too many integer digits remain.
    let typmod = |p: i32, s: i32| ((p << 16) | (s & 0x7ff)) + 4;
    for (t, p, s) in [
        ("numeric(10,2)", 10, 2),
        ("numeric(5,0)", 5, 0),
        ("numeric(1,0)", 1, 0),
        ("numeric(3,5)", 3, 5),
        ("numeric(6,-2)", 6, -2),
        ("numeric(30,12)", 30, 12),
    ] {
        let case = Case::column(t, oid::NUMERIC, typmod(p, s), Mode::Exact);
        let (ok, _) = check(&client, &case, &values).await;
        assert!(ok > 100, "{t}");
    }
}

/// Crafted binary numerics: unnormalized digits, digits hidden by dscale, bad headers.
#[tokio::test]
async fn numeric_binary_matches_postgres() {
    let client = server().await;
    let enc = |ndigits: u16, weight: i16, sign: u16, dscale: u16, digits: &[u16]| {
        let mut b = Vec::new();
        for w in [ndigits, weight as u16, sign, dscale] {
            b.extend(w.to_be_bytes());
        }
        for d in digits {
            b.extend(d.to_be_bytes());
        }
        b
    };
    let mut cases = vec![
        enc(1, 0, 0, 0, &[1]),
        enc(1, 0, 0x4000, 0, &[1]),
        enc(2, 0, 0, 4, &[1, 5000]),
        enc(2, 0, 0, 1, &[1, 5678]),
        enc(2, 0, 0, 2, &[1, 5678]),
        enc(2, 0, 0, 3, &[1, 5678]),
        enc(2, 0, 0, 0, &[1, 5678]),
        enc(2, 0, 0, 9, &[1, 5678]),
        enc(3, 1, 0, 0, &[0, 5, 0]),
        enc(3, 1, 0, 4, &[0, 0, 0]),
        enc(0, 0, 0, 0, &[]),
        enc(0, 7, 0x4000, 3, &[]),
        enc(1, -5, 0, 0, &[1]),
        enc(1, -5, 0, 19, &[1]),
        enc(1, -5, 0, 20, &[1]),
        enc(1, 32767, 0, 0, &[1]),
        enc(2, 32767, 0, 0, &[0, 1]),
        enc(1, -32768, 0, 16383, &[1]),
        enc(2, -32768, 0, 16383, &[0, 1]),
        enc(1, 0, 0, 0, &[9999]),
        enc(1, 0, 0, 0, &[10000]),
        enc(1, 0, 0x8000, 0, &[1]),
        enc(1, 0, 0x2000, 0, &[1]),
        enc(1, 0, 0xC000, 0, &[1]),
        enc(1, 0, 0xC000, 0, &[10000]),
        enc(0, 0, 0xD000, 0, &[]),
        enc(0, 0, 0xF000, 0, &[]),
        enc(1, 0, 0, 0x3FFF, &[1]),
        enc(1, 0, 0, 0x4000, &[1]),
        enc(4, 2, 0x4000, 6, &[12, 3456, 7890, 1234]),
        vec![0, 1, 0, 0, 0, 0, 0, 0],
        vec![0, 0, 0, 0, 0, 0, 0],
        vec![],
    ];
    let mut extra = enc(1, 0, 0, 0, &[1]);
    extra.push(0);
    cases.push(extra);
    let mut rng = Lcg(5);
    for _ in 0..300 {
        let n = rng.below(6) as u16;
        let digits: Vec<u16> = (0..n)
            .map(|_| [0, 1, 9999, rng.below(10000) as u16][rng.below(4) as usize])
            .collect();
        let weight = rng.below(20) as i16 - 10;
        let dscale = rng.below(30) as u16;
        cases.push(enc(
            n,
            weight,
            [0, 0x4000][rng.below(2) as usize],
            dscale,
            &digits,
        ));
    }
    compare_binary(&client, oid::NUMERIC, Type::NUMERIC, "numeric", &cases).await;
}

/// Hashes each binary value as a bind parameter on the server (one statement each;
/// errors mean PostgreSQL refuses the value) and compares with `hash_binary_value`.
async fn compare_binary(
    client: &Client,
    type_oid: u32,
    ty: Type,
    type_sql: &str,
    cases: &[Vec<u8>],
) {
    let sql = format!(
        "select {}",
        hash_sql_expression(type_oid, &format!("$1::{type_sql}"))
    );
    let stmt = client.prepare_typed(&sql, &[ty]).await.unwrap();
    let mut accepted = 0;
    for bytes in cases {
        let pg = match client.query_one(&stmt, &[&RawParam(bytes.clone())]).await {
            Ok(row) => Some(row.get::<_, i32>(0)),
            Err(e) => {
                assert!(e.as_db_error().is_some(), "{type_sql} {bytes:02x?}: {e}");
                None
            }
        };
        accepted += usize::from(pg.is_some());
        assert_eq!(
            hash_binary_value(type_oid, bytes),
            pg,
            "{type_sql} binary {bytes:02x?}"
        );
    }
    eprintln!(
        "{type_sql:<16} {:>5} binary values, {accepted:>5} accepted by PostgreSQL",
        cases.len()
    );
}

#[tokio::test]
async fn binary_edge_cases_match_postgres() {
    let client = server().await;
    let be32 = |v: i32| v.to_be_bytes().to_vec();
    let be64 = |v: i64| v.to_be_bytes().to_vec();

    let dates: Vec<Vec<u8>> = [
        0,
        1,
        -1,
        8825,
        -2451545,
        -2451546,
        2145031948,
        2145031949,
        i32::MIN,
        i32::MAX,
    ]
    .into_iter()
    .map(be32)
    .chain([vec![0, 0, 0], vec![0; 5]])
    .collect();
    compare_binary(&client, oid::DATE, Type::DATE, "date", &dates).await;

    let stamps: Vec<Vec<u8>> = [
        0,
        1,
        -1,
        631152000000000,
        -211813488000000000,
        -211813488000000001,
        9223371331199999999,
        9223371331200000000,
        i64::MIN,
        i64::MAX,
    ]
    .into_iter()
    .map(be64)
    .chain([vec![0; 7]])
    .collect();
    compare_binary(
        &client,
        oid::TIMESTAMP,
        Type::TIMESTAMP,
        "timestamp",
        &stamps,
    )
    .await;
    compare_binary(
        &client,
        oid::TIMESTAMPTZ,
        Type::TIMESTAMPTZ,
        "timestamptz",
        &stamps,
    )
    .await;

    let ints: Vec<Vec<u8>> = vec![
        vec![],
        vec![1],
        vec![0, 1],
        vec![0x80, 0],
        vec![0, 0, 1],
        vec![0xff; 4],
        vec![0; 8],
    ];
    compare_binary(&client, oid::INT2, Type::INT2, "int2", &ints).await;
    compare_binary(&client, oid::INT4, Type::INT4, "int4", &ints).await;
    compare_binary(&client, oid::INT8, Type::INT8, "int8", &ints).await;
    compare_binary(&client, oid::OID, Type::OID, "oid", &ints).await;

    let bytes1: Vec<Vec<u8>> = vec![
        vec![],
        vec![0],
        vec![1],
        vec![2],
        vec![0x7f],
        vec![0x80],
        vec![0xff],
        vec![1, 0],
    ];
    compare_binary(&client, oid::BOOL, Type::BOOL, "bool", &bytes1).await;
    compare_binary(&client, oid::CHAR, Type::CHAR, "\"char\"", &bytes1).await;

    let texts: Vec<Vec<u8>> = vec![
        vec![],
        b"abc".to_vec(),
        b"abc   ".to_vec(),
        "日本語🎉".as_bytes().to_vec(),
        vec![0xff],
        vec![0xc3],
        vec![0xed, 0xa0, 0x80],
        vec![0xf4, 0x90, 0x80, 0x80],
        vec![b'a', 0, b'b'],
        vec![b'n'; 63],
        vec![b'n'; 64],
        [vec![b'n'; 61], "é".as_bytes().to_vec()].concat(),
    ];
    compare_binary(&client, oid::TEXT, Type::TEXT, "text", &texts).await;
    compare_binary(&client, oid::VARCHAR, Type::VARCHAR, "varchar", &texts).await;
    compare_binary(&client, oid::BPCHAR, Type::BPCHAR, "bpchar", &texts).await;
    compare_binary(&client, oid::NAME, Type::NAME, "name", &texts).await;

    let uuids: Vec<Vec<u8>> = vec![
        vec![0; 16],
        vec![0xff; 16],
        (0..16).collect(),
        vec![0; 15],
        vec![0; 17],
    ];
    compare_binary(&client, oid::UUID, Type::UUID, "uuid", &uuids).await;
}

/// ISO dates over the whole 4-digit range plus spellings Rust leaves to the server.
fn date_values(rng: &mut Lcg) -> Vec<String> {
    let mut v = Vec::new();
    for _ in 0..2500 {
        let y = 1 + rng.below(9999);
        let m = 1 + rng.below(12);
        let d = 1 + rng.below(31);
        v.push(format!("{y:04}-{m:02}-{d:02}"));
    }
    for y in [
        1, 4, 100, 200, 400, 1600, 1700, 1900, 1999, 2000, 2004, 2100, 2400, 9996, 9999,
    ] {
        for md in [
            "01-01", "02-28", "02-29", "03-01", "12-31", "02-30", "04-31", "00-01", "13-01",
            "01-00", "01-32",
        ] {
            v.push(format!("{y:04}-{md}"));
        }
    }
    v.extend(strings(&[
        "0000-01-01",
        " 2020-01-05",
        "2020-01-05 ",
        "2020-1-5",
        "20200105",
        "01/05/2020",
        "January 5, 2020",
        "2020-01-05 BC",
        "2020-01-05 10:00",
        "infinity",
        "-infinity",
        "epoch",
        "today",
        "",
        "x",
        "2020-01-0x",
        "10000-01-01",
        "2020/01/05",
        "2020.01.05",
    ]));
    v
}

#[tokio::test]
async fn date_and_timestamp_match_postgres() {
    let client = server().await;
    let mut rng = Lcg(6);
    let dates = date_values(&mut rng);
    let (_, hashed) = check(
        &client,
        &Case::bare("date", oid::DATE, Mode::MayDecline),
        &dates,
    )
    .await;
    assert!(hashed > 2000);

    let mut stamps = Vec::new();
    for d in dates.iter().take(1500) {
        let (h, mi, s) = (rng.below(24), rng.below(60), rng.below(60));
        let sep = rng.pick(&[" ", " ", "T"]);
        let frac = match rng.below(4) {
            0 => String::new(),
            1 => format!(".{:06}", rng.below(1_000_000)),
            _ => format!(".{}", rng.below(1000)),
        };
        stamps.push(format!("{d}{sep}{h:02}:{mi:02}:{s:02}{frac}"));
    }
    stamps.extend(dates.iter().skip(1500).take(200).cloned());
    stamps.extend(strings(&[
        "2020-01-01 00:00",
        "2020-01-01 24:00:00",
        "2020-01-01 23:59:60",
        "2020-01-01 23:60:00",
        "2020-01-01 25:00:00",
        "2020-01-01 10:00:00.1234567",
        "2020-01-01 10:00:00.",
        "2020-01-01 10:00:00+02",
        "2020-01-01 10:00:00 UTC",
        "2020-01-01 10:00:00Z",
        "2020-01-01 1:00:00",
        "2020-01-01 10:0:00",
        "2020-01-01  10:00:00",
        "9999-12-31 23:59:59.999999",
        "0001-01-01 00:00:00",
        "2020-01-01 10:00:00 ",
        " 2020-01-01 10:00:00",
        "epoch",
        "infinity",
    ]));
    let (_, hashed) = check(
        &client,
        &Case::bare("timestamp", oid::TIMESTAMP, Mode::MayDecline),
        &stamps,
    )
    .await;
    assert!(hashed > 1400);
    // timestamptz text depends on TimeZone: Rust declines it all; binary must still match.
    let (ok, hashed) = check(
        &client,
        &Case::bare("timestamptz", oid::TIMESTAMPTZ, Mode::MayDecline),
        &stamps,
    )
    .await;
    assert!(ok > 1400 && hashed == 0);
    for (t, p) in [("timestamp(0)", 0), ("timestamp(3)", 3)] {
        let case = Case::column(t, oid::TIMESTAMP, p, Mode::MayDecline);
        let (_, hashed) = check(&client, &case, &stamps).await;
        assert!(hashed > 1400, "{t}");
    }
    check(
        &client,
        &Case::column("timestamptz(2)", oid::TIMESTAMPTZ, 2, Mode::MayDecline),
        &stamps,
    )
    .await;
}

/// The SQL function names are callable on their type and give the same hash as the
/// type's default hash opclass (via hash_array).
#[tokio::test]
async fn sql_function_names_are_callable() {
    let client = server().await;
    let samples = [
        (oid::INT2, "int2", "7"),
        (oid::INT4, "int4", "7"),
        (oid::INT8, "int8", "7"),
        (oid::OID, "oid", "7"),
        (oid::TEXT, "text", "abc"),
        (oid::VARCHAR, "varchar", "abc"),
        (oid::BPCHAR, "bpchar", "abc  "),
        (oid::NAME, "name", "abc"),
        (oid::CHAR, "\"char\"", "a"),
        (oid::UUID, "uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        (oid::NUMERIC, "numeric", "1.5"),
        (oid::TIMESTAMP, "timestamp", "2020-01-01 10:00"),
        (oid::FLOAT4, "float4", "1.5"),
        (oid::FLOAT8, "float8", "-0"),
        (oid::TIME, "time", "10:00"),
        (oid::TIMETZ, "timetz", "10:00+02"),
        (oid::INTERVAL, "interval", "1 day"),
        (oid::JSONB, "jsonb", "{\"a\": 1}"),
        (oid::INET, "inet", "10.0.0.1/8"),
        (oid::MACADDR, "macaddr", "08:00:2b:01:02:03"),
        (oid::DATE, "date", "2020-01-01"),
        (oid::BOOL, "bool", "true"),
        (oid::TIMESTAMPTZ, "timestamptz", "2020-01-01 10:00+00"),
        (oid::BYTEA, "bytea", "\\x0102"),
    ];
    for (o, t, v) in samples {
        let arg = format!("'{}'::{t}", v.replace('\'', "''"));
        let sql = format!(
            "select {}, {}",
            hash_sql_expression(o, &arg),
            hash_sql_expression(0, &arg)
        );
        let row = client
            .query_one(&sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let (direct, generic): (i32, i32) = (row.get(0), row.get(1));
        assert_eq!(direct, generic, "{sql}");
        if let Some(h) = hash_text_value(o, v) {
            assert_eq!(h, direct, "{sql}");
        }
    }
    assert_eq!(hash::hash_function_sql(oid::DATE), None);
}
