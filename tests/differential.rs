//! Differential test harness (issue #4): the same schema and data in one plain PostgreSQL
//! (the oracle) and in the shared pgshard test cluster, then the same queries against both.
//!
//! - A hand-written corpus (`tests/differential/corpus.sql`) covers every multi-shard
//!   feature by name: two-phase aggregates, GROUP BY, HAVING, ORDER BY, LIMIT/OFFSET,
//!   DISTINCT (ON), expressions over aggregates. It runs through the simple protocol and
//!   through the extended protocol.
//! - A random generator (seeded: `PGSHARD_DIFF_SEED`, count `PGSHARD_DIFF_QUERIES`,
//!   one query only: `PGSHARD_DIFF_ONLY=<index>`, list without running: `PGSHARD_DIFF_LIST=1`,
//!   more mismatches shown: `PGSHARD_DIFF_SHOW=<n>`) writes filters, groupings, aggregates,
//!   orders, limits and offsets over two tables with every common type and many NULLs;
//!   a quarter of the queries run through the extended protocol with `$n` parameters.
//! - Multi-shard UPDATE/DELETE: row counts, RETURNING rows, contents, atomicity.
//!
//! Results are compared as multisets, or in order where the query's ORDER BY makes the
//! order total (the generator only writes LIMIT/OFFSET and DISTINCT ON then). Floats are
//! compared with a relative tolerance (addition order differs between shards), everything
//! else exactly, as text. When the oracle errors, pgshard must error with the same
//! SQLSTATE. A refusal (0A000) is counted apart: the generated run fails on any mismatch
//! and when 10% or more of the generated queries are refused.

mod common;

use common::rng::Rng;
use common::{cluster, plain_postgres};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::error::Error;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;
use tokio_postgres::types::{FromSql, ToSql, Type};
use tokio_postgres::{Client, SimpleQueryMessage};

const DEFAULT_SEED: u64 = 4_2026_1122;
const DEFAULT_QUERIES: usize = 2400;
/// Concurrent connection pairs (plain, pgshard) the generated queries are spread over.
const LANES: usize = 4;
const QUERY_TIMEOUT: Duration = Duration::from_secs(60);
/// The data never changes with the query seed, so one seed replays one query.
const DATA_SEED: u64 = 0x5eed_da7a;
const MAX_REFUSED_SHARE: f64 = 0.10;
/// Settings of every comparing session, on both sides.
const SESSION_SETUP: &str = "set timezone to 'Europe/Berlin'";

// ---------------------------------------------------------------------------------------
// Schema and data.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ty {
    I2,
    I4,
    I8,
    Num,
    F4,
    F8,
    Text,
    Varchar,
    Bool,
    Date,
    Ts,
    Tz,
    Uuid,
    Jsonb,
}

impl Ty {
    fn is_number(self) -> bool {
        matches!(self, Ty::I2 | Ty::I4 | Ty::I8 | Ty::Num | Ty::F4 | Ty::F8)
    }
    fn is_int(self) -> bool {
        matches!(self, Ty::I2 | Ty::I4 | Ty::I8)
    }
    fn is_float(self) -> bool {
        matches!(self, Ty::F4 | Ty::F8)
    }
    fn is_text(self) -> bool {
        matches!(self, Ty::Text | Ty::Varchar)
    }
    /// Has min/max in PostgreSQL 15.
    fn has_min_max(self) -> bool {
        !matches!(self, Ty::Bool | Ty::Uuid | Ty::Jsonb)
    }
}

struct Col {
    name: &'static str,
    ty: Ty,
    /// Share of NULLs in the data.
    nulls: f64,
}

struct TableDef {
    name: &'static str,
    ddl_columns: &'static str,
    dist: &'static str,
    cols: Vec<Col>,
    rows: usize,
}

fn col(name: &'static str, ty: Ty, nulls: f64) -> Col {
    Col { name, ty, nulls }
}

/// `diff_items`, distributed by int `k` (many duplicates); `diff_texts`, distributed by
/// text `name`. `id` is unique in both and makes any ORDER BY total.
fn tables() -> Vec<TableDef> {
    vec![
        TableDef {
            name: "diff_items",
            ddl_columns: "id int8 not null, k int4 not null, s2 int2, i4 int4, i8 int8, \
                          n numeric, f4 float4, f8 float8, t text, vc varchar(20), b bool, \
                          d date, ts timestamp, tz timestamptz, u uuid, j jsonb, \
                          primary key (k, id)",
            dist: "k",
            cols: vec![
                col("id", Ty::I8, 0.0),
                col("k", Ty::I4, 0.0),
                col("s2", Ty::I2, 0.2),
                col("i4", Ty::I4, 0.2),
                col("i8", Ty::I8, 0.2),
                col("n", Ty::Num, 0.25),
                col("f4", Ty::F4, 0.2),
                col("f8", Ty::F8, 0.2),
                col("t", Ty::Text, 0.2),
                col("vc", Ty::Varchar, 0.3),
                col("b", Ty::Bool, 0.3),
                col("d", Ty::Date, 0.2),
                col("ts", Ty::Ts, 0.2),
                col("tz", Ty::Tz, 0.2),
                col("u", Ty::Uuid, 0.3),
                col("j", Ty::Jsonb, 0.3),
            ],
            rows: 3000,
        },
        TableDef {
            name: "diff_texts",
            ddl_columns: "name text not null, id int8 not null, qty int4, price numeric(12,2), \
                          f8 float8, note varchar(30), flag bool, d date, \
                          primary key (name, id)",
            dist: "name",
            cols: vec![
                col("name", Ty::Text, 0.0),
                col("id", Ty::I8, 0.0),
                col("qty", Ty::I4, 0.2),
                col("price", Ty::Num, 0.2),
                col("f8", Ty::F8, 0.25),
                col("note", Ty::Varchar, 0.3),
                col("flag", Ty::Bool, 0.3),
                col("d", Ty::Date, 0.2),
            ],
            rows: 1200,
        },
    ]
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Value pools: data and query literals come from the same pools, so filters hit rows
/// and groups have duplicates. Equal values always have the same text (no `1.5` beside
/// `1.50`, no `-0`), so a group's representative value prints the same on both sides.
struct Pools {
    text: Vec<String>,
    varchar: Vec<String>,
    num: Vec<String>,
    price: Vec<String>,
    f4: Vec<String>,
    f8: Vec<String>,
    date: Vec<String>,
    ts: Vec<String>,
    tz: Vec<String>,
    uuid: Vec<String>,
    jsonb: Vec<String>,
}

fn pools() -> Pools {
    let mut r = Rng::new(DATA_SEED ^ 1);
    let mut text: Vec<String> = [
        "apple",
        "Apple",
        "APPLE",
        "banana",
        "Banana",
        "cherry",
        "Ärger",
        "ärger",
        "Äpfel",
        "zebra",
        "Zebra",
        "Zürich",
        "zurich",
        "naïve",
        "naive",
        "façade",
        "日本語",
        "中文",
        "Ωmega",
        "ωmega",
        "straße",
        "STRASSE",
        "ß",
        "😀 smile",
        "emoji 🎉",
        "",
        " leading space",
        "trailing space ",
        "it's",
        "back\\slash",
        "100%",
        "under_score",
        "a",
        "A",
        "b",
        "B",
        "x y z",
        "ÉCOLE",
        "école",
        "Ölfeld",
        "o'clock",
        "tab\tinside",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let letters: Vec<char> = "abcdeXYZäöüÉñøåçß".chars().collect();
    while text.len() < 70 {
        let len = r.range(1, 9) as usize;
        let w: String = (0..len).map(|_| *r.pick(&letters)).collect();
        if !text.contains(&w) {
            text.push(w);
        }
    }
    let mut varchar: Vec<String> = ["007", "10", "9", "Zeta", "alpha", "Alpha", "ñandú", "Ñu"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    varchar.extend(text.iter().step_by(3).cloned());

    let mut num = vec![
        "0".to_string(),
        "1".to_string(),
        "-1".to_string(),
        "99999999999999.999999999999".to_string(),
        "-0.000000000001".to_string(),
        "NaN".to_string(),
        "Infinity".to_string(),
        "-Infinity".to_string(),
    ];
    while num.len() < 140 {
        let int_digits = r.range(0, 14) as u32;
        let frac_digits = r.range(0, 12) as usize;
        let int_part = if int_digits == 0 {
            0
        } else {
            r.range(0, 10i64.pow(int_digits) - 1)
        };
        let mut s = int_part.to_string();
        if frac_digits > 0 {
            let mut frac: String = (0..frac_digits - 1)
                .map(|_| char::from(b'0' + r.below(10) as u8))
                .collect();
            frac.push(char::from(b'1' + r.below(9) as u8)); // last digit nonzero
            s = format!("{s}.{frac}");
        }
        if s == "0" {
            continue;
        }
        if r.chance(0.4) {
            s = format!("-{s}");
        }
        if !num.contains(&s) {
            num.push(s);
        }
    }
    let mut price = Vec::new();
    while price.len() < 60 {
        let cents = r.range(-50_000, 9_999_999);
        let s = format!(
            "{}{}.{:02}",
            if cents < 0 { "-" } else { "" },
            cents.abs() / 100,
            cents.abs() % 100
        );
        if !price.contains(&s) {
            price.push(s);
        }
    }
    // Multiples of 1/4 within ±256 (float4) and of 1/1024 within ±1e6 (float8): sums
    // of a few thousand of them are exact in any order.
    let mut f4 = vec![
        "0".to_string(),
        "NaN".into(),
        "Infinity".into(),
        "-Infinity".into(),
    ];
    while f4.len() < 80 {
        let v = r.range(-1024, 1024) as f64 / 4.0;
        let s = format!("{v}");
        if v != 0.0 && !f4.contains(&s) {
            f4.push(s);
        }
    }
    let mut f8 = vec![
        "0".to_string(),
        "NaN".into(),
        "Infinity".into(),
        "-Infinity".into(),
    ];
    while f8.len() < 150 {
        let v = r.range(-1_000_000_000, 1_000_000_000) as f64 / 1024.0;
        let s = format!("{v}");
        if v != 0.0 && !f8.contains(&s) {
            f8.push(s);
        }
    }
    let mut date = vec![
        "2000-02-29".to_string(),
        "1999-12-31".into(),
        "1970-01-01".into(),
    ];
    while date.len() < 90 {
        let s = format!(
            "{:04}-{:02}-{:02}",
            r.range(1950, 2045),
            r.range(1, 12),
            r.range(1, 28)
        );
        if !date.contains(&s) {
            date.push(s);
        }
    }
    let mut ts = Vec::new();
    while ts.len() < 90 {
        let s = format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:06}",
            r.range(1990, 2035),
            r.range(1, 12),
            r.range(1, 28),
            r.range(0, 23),
            r.range(0, 59),
            r.range(0, 59),
            r.range(0, 999_999)
        );
        if !ts.contains(&s) {
            ts.push(s);
        }
    }
    let offsets = ["+00", "+05:30", "-08", "+02", "-03:30"];
    let mut tz = Vec::new();
    while tz.len() < 90 {
        let s = format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}{}",
            r.range(1990, 2035),
            r.range(1, 12),
            r.range(1, 28),
            r.range(0, 23),
            r.range(0, 59),
            r.range(0, 59),
            r.range(0, 999),
            r.pick(&offsets)
        );
        if !tz.contains(&s) {
            tz.push(s);
        }
    }
    let uuid = (0..40)
        .map(|_| {
            let h = format!("{:016x}{:016x}", r.next_u64(), r.next_u64());
            format!(
                "{}-{}-{}-{}-{}",
                &h[0..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..32]
            )
        })
        .collect();
    let jsonb = [
        r#"{"a": 1}"#,
        r#"{"a": 2, "b": "x"}"#,
        r#"{"a": "Ärger"}"#,
        r#"{"b": {"c": [true, null]}}"#,
        r#"[1, 2, 3]"#,
        r#"[]"#,
        r#"{}"#,
        r#""str""#,
        r#"null"#,
        r#"42"#,
        r#"-0.5"#,
        r#"true"#,
        r#"{"a": null}"#,
        r#"{"a": [1, {"z": "日本"}]}"#,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    Pools {
        text,
        varchar,
        num,
        price,
        f4,
        f8,
        date,
        ts,
        tz,
        uuid,
        jsonb,
    }
}

/// A parameter of the extended protocol.
#[derive(Clone, Debug)]
enum Param {
    I4(i32),
    I8(i64),
    Text(String),
    Bool(bool),
}

impl Param {
    fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Param::I4(v) => v,
            Param::I8(v) => v,
            Param::Text(v) => v,
            Param::Bool(v) => v,
        }
    }
}

/// A value of column `c` as an SQL literal, with a parameter form where one exists.
fn literal(c: &Col, p: &Pools, r: &mut Rng) -> (String, Option<Param>) {
    let special = |s: &str, ty: &str| {
        if s.parse::<f64>().map_or(true, |v| !v.is_finite()) {
            format!("'{s}'::{ty}")
        } else {
            s.to_string()
        }
    };
    match (c.name, c.ty) {
        ("k", _) => {
            let v = r.range(-40, 260) as i32;
            (v.to_string(), Some(Param::I4(v)))
        }
        ("id", _) => {
            let v = r.range(1, 3000);
            (v.to_string(), Some(Param::I8(v)))
        }
        (_, Ty::I2) => {
            let v = if r.chance(0.02) {
                *r.pick(&[32767, -32767])
            } else {
                r.range(-60, 60)
            };
            (v.to_string(), None)
        }
        (_, Ty::I4) => {
            let v = if r.chance(0.02) {
                *r.pick(&[2147483647, -2147483647])
            } else {
                r.range(-1000, 1000) as i32
            };
            (v.to_string(), Some(Param::I4(v)))
        }
        (_, Ty::I8) => {
            let v = if r.chance(0.02) {
                *r.pick(&[i64::MAX, -i64::MAX])
            } else {
                r.range(-1_000_000_000_000, 1_000_000_000_000)
            };
            (v.to_string(), Some(Param::I8(v)))
        }
        ("price", Ty::Num) => (r.pick::<String>(&p.price).clone(), None),
        (_, Ty::Num) => (special(r.pick::<String>(&p.num), "numeric"), None),
        (_, Ty::F4) => (special(r.pick::<String>(&p.f4), "float4"), None),
        (_, Ty::F8) => (special(r.pick::<String>(&p.f8), "float8"), None),
        (_, Ty::Text) => {
            let s = r.pick::<String>(&p.text).clone();
            (quote(&s), Some(Param::Text(s)))
        }
        (_, Ty::Varchar) => {
            let s = r.pick::<String>(&p.varchar).clone();
            (quote(&s), Some(Param::Text(s)))
        }
        (_, Ty::Bool) => {
            let v = r.chance(0.5);
            (v.to_string(), Some(Param::Bool(v)))
        }
        (_, Ty::Date) => (format!("date {}", quote(r.pick::<String>(&p.date))), None),
        (_, Ty::Ts) => (
            format!("timestamp {}", quote(r.pick::<String>(&p.ts))),
            None,
        ),
        (_, Ty::Tz) => (
            format!("timestamptz {}", quote(r.pick::<String>(&p.tz))),
            None,
        ),
        (_, Ty::Uuid) => (format!("{}::uuid", quote(r.pick::<String>(&p.uuid))), None),
        (_, Ty::Jsonb) => (
            format!("{}::jsonb", quote(r.pick::<String>(&p.jsonb))),
            None,
        ),
    }
}

/// One row's value of `c` for the INSERT that loads the data.
fn data_value(c: &Col, p: &Pools, r: &mut Rng, id: usize) -> String {
    if c.name == "id" {
        return id.to_string();
    }
    if r.chance(c.nulls) {
        return "NULL".into();
    }
    let rare = |r: &mut Rng, pool: &[String]| -> String {
        // Specials (NaN, ±Infinity) are the first entries after index 0: keep them rare.
        if r.chance(0.97) {
            pool[4 + r.below(pool.len() - 4)].clone()
        } else {
            r.pick(pool).clone()
        }
    };
    match (c.name, c.ty) {
        (_, Ty::Num) if c.name != "price" => quote(&rare(r, &p.num)),
        (_, Ty::F4) => quote(&rare(r, &p.f4)),
        (_, Ty::F8) if r.chance(0.5) => {
            // Values outside the pool, all distinct (still multiples of 1/1024).
            let v = r.range(-1_000_000_000, 1_000_000_000) as f64 / 1024.0;
            format!("{v}")
        }
        (_, Ty::F8) => quote(&rare(r, &p.f8)),
        ("k", _) => {
            // Skewed: a few hot keys, many rare ones.
            if r.chance(0.2) {
                r.range(0, 4).to_string()
            } else {
                r.range(-40, 260).to_string()
            }
        }
        _ => literal(c, p, r).0,
    }
}

/// `insert` statements loading `rows` deterministic rows of `t` into `name`.
fn insert_statements(t: &TableDef, name: &str, pools: &Pools, seed: u64) -> Vec<String> {
    let mut r = Rng::new(seed);
    let cols: Vec<&str> = t.cols.iter().map(|c| c.name).collect();
    let mut out = Vec::new();
    let mut values = Vec::new();
    for id in 1..=t.rows {
        let row: Vec<String> = t
            .cols
            .iter()
            .map(|c| data_value(c, pools, &mut r, id))
            .collect();
        values.push(format!("({})", row.join(", ")));
        if values.len() == 500 || id == t.rows {
            out.push(format!(
                "insert into {name} ({}) values {}",
                cols.join(", "),
                values.join(",\n")
            ));
            values.clear();
        }
    }
    out
}

/// Creates `name` with `t`'s columns and data on both sides, distributed over 32 shards
/// through pgshard (loaded as a local table first, then `create_distributed_table`).
async fn load_table(t: &TableDef, name: &str, pools: &Pools, seed: u64) {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    let ddl = format!(
        "drop table if exists {name}; create table {name} ({})",
        t.ddl_columns
    );
    for c in [&shard, &plain] {
        c.batch_execute(&ddl).await.unwrap();
        for stmt in insert_statements(t, name, pools, seed) {
            c.batch_execute(&stmt)
                .await
                .unwrap_or_else(|e| panic!("loading {name}: {e}"));
        }
    }
    shard
        .batch_execute("set citus.shard_count = 32")
        .await
        .unwrap();
    shard
        .simple_query(&format!(
            "select create_distributed_table('{name}', '{}')",
            t.dist
        ))
        .await
        .unwrap_or_else(|e| panic!("create_distributed_table of {name}: {e}"));
    // The comparison is only worth something if the table really is spread over shards.
    let shards = shard
        .query_one(
            "select count(*) from pg_dist_shard where logicalrelid = $1::text::regclass",
            &[&name],
        )
        .await
        .unwrap();
    assert_eq!(shards.get::<_, i64>(0), 32, "shards of {name}");
    for &port in &cluster().worker_ports {
        let w = cluster().direct(port).await;
        let n: i64 = w
            .query_one(
                "select count(*) from pg_class where relkind = 'r' and relname ~ $1",
                &[&format!("^{name}_[0-9]+$")],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 16, "shards of {name} on the worker at port {port}");
    }
    plain
        .batch_execute(&format!("analyze {name}"))
        .await
        .unwrap();
    if let Err(e) = shard.batch_execute(&format!("analyze {name}")).await {
        eprintln!("analyze {name} through pgshard: {e}");
    }
}

static LOADED: OnceCell<()> = OnceCell::const_new();

/// The two query tables, loaded once per test binary.
async fn setup() {
    LOADED
        .get_or_init(|| async {
            let pools = pools();
            for (i, t) in tables().iter().enumerate() {
                load_table(t, t.name, &pools, DATA_SEED + i as u64).await;
            }
        })
        .await;
}

// ---------------------------------------------------------------------------------------
// Running a statement and comparing outcomes.

/// What a server answered.
#[derive(Debug)]
enum Outcome {
    Rows {
        names: Vec<String>,
        rows: Vec<Vec<Option<String>>>,
        /// CommandComplete's row count (DML).
        count: Option<u64>,
    },
    Error {
        code: String,
        message: String,
    },
}

fn error_outcome(e: tokio_postgres::Error) -> Outcome {
    let (code, message) = common::sqlstate_and_message(&e);
    Outcome::Error { code, message }
}

async fn run_simple(c: &Client, sql: &str) -> Outcome {
    let msgs = match tokio::time::timeout(QUERY_TIMEOUT, c.simple_query(sql)).await {
        Err(_) => {
            return Outcome::Error {
                code: "timeout".into(),
                message: format!("no answer within {QUERY_TIMEOUT:?}"),
            }
        }
        Ok(Err(e)) => return error_outcome(e),
        Ok(Ok(m)) => m,
    };
    let (mut names, mut rows, mut count) = (Vec::new(), Vec::new(), None);
    for m in msgs {
        match m {
            SimpleQueryMessage::RowDescription(cols) => {
                names = cols.iter().map(|c| c.name().to_string()).collect();
            }
            SimpleQueryMessage::Row(r) => {
                rows.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            SimpleQueryMessage::CommandComplete(n) => count = Some(n),
            _ => {}
        }
    }
    Outcome::Rows { names, rows, count }
}

/// Any value in binary form (the extended protocol's results).
struct Raw(Option<Vec<u8>>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
        Ok(Raw(Some(raw.to_vec())))
    }
    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn Error + Sync + Send>> {
        Ok(Raw(None))
    }
    fn accepts(_: &Type) -> bool {
        true
    }
}

/// A binary value as comparable text: numbers and text decoded, the rest in hex.
fn render_binary(ty: &Type, b: &[u8]) -> String {
    match *ty {
        Type::FLOAT4 if b.len() == 4 => f32::from_be_bytes(b.try_into().unwrap()).to_string(),
        Type::FLOAT8 if b.len() == 8 => f64::from_be_bytes(b.try_into().unwrap()).to_string(),
        Type::INT2 if b.len() == 2 => i16::from_be_bytes(b.try_into().unwrap()).to_string(),
        Type::INT4 if b.len() == 4 => i32::from_be_bytes(b.try_into().unwrap()).to_string(),
        Type::INT8 if b.len() == 8 => i64::from_be_bytes(b.try_into().unwrap()).to_string(),
        Type::BOOL => (if b == [1] { "t" } else { "f" }).to_string(),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
            String::from_utf8_lossy(b).into_owned()
        }
        _ => {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            format!("\\x{hex}")
        }
    }
}

/// Runs `sql` with parameters through the extended protocol (Parse/Describe, then
/// Bind/Execute), returning the column types the server described as well.
async fn run_extended(c: &Client, sql: &str, params: &[Param]) -> (Outcome, Vec<Type>) {
    let work = async {
        let st = c.prepare(sql).await?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(Param::as_sql).collect();
        let rows = c.query(&st, &refs).await?;
        Ok::<_, tokio_postgres::Error>((st, rows))
    };
    let (st, rows) = match tokio::time::timeout(QUERY_TIMEOUT, work).await {
        Err(_) => {
            return (
                Outcome::Error {
                    code: "timeout".into(),
                    message: format!("no answer within {QUERY_TIMEOUT:?}"),
                },
                vec![],
            )
        }
        Ok(Err(e)) => return (error_outcome(e), vec![]),
        Ok(Ok(x)) => x,
    };
    let types: Vec<Type> = st.columns().iter().map(|c| c.type_().clone()).collect();
    let names = st.columns().iter().map(|c| c.name().to_string()).collect();
    let rows = rows
        .iter()
        .map(|r| {
            (0..r.len())
                .map(|i| r.get::<_, Raw>(i).0.map(|b| render_binary(&types[i], &b)))
                .collect()
        })
        .collect();
    (
        Outcome::Rows {
            names,
            rows,
            count: None,
        },
        types,
    )
}

/// The oracle's column types of `sql` (empty when it cannot be described).
async fn describe(c: &Client, sql: &str) -> Vec<Type> {
    match c.prepare(sql).await {
        Ok(st) => st.columns().iter().map(|c| c.type_().clone()).collect(),
        Err(_) => vec![],
    }
}

fn parse_float(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "Infinity" | "inf" => Some(f64::INFINITY),
        "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
        _ => s.parse().ok(),
    }
}

/// Relative tolerance of a float column; None for exactly compared types.
fn tolerance(ty: Option<&Type>) -> Option<f64> {
    match ty {
        Some(&Type::FLOAT8) => Some(1e-9),
        Some(&Type::FLOAT4) => Some(1e-6),
        _ => None,
    }
}

#[derive(Clone, Copy, PartialEq)]
enum CellMatch {
    Exact,
    Close,
    Differ,
}

fn cell_match(tol: Option<f64>, a: &Option<String>, b: &Option<String>) -> CellMatch {
    if a == b {
        return CellMatch::Exact;
    }
    let (Some(tol), Some(a), Some(b)) = (tol, a, b) else {
        return CellMatch::Differ;
    };
    let (Some(x), Some(y)) = (parse_float(a), parse_float(b)) else {
        return CellMatch::Differ;
    };
    let close = if x.is_nan() || y.is_nan() {
        x.is_nan() && y.is_nan()
    } else if x.is_infinite() || y.is_infinite() {
        x == y
    } else {
        (x - y).abs() <= tol * x.abs().max(y.abs()) || (x - y).abs() < 1e-12
    };
    if close {
        CellMatch::Close
    } else {
        CellMatch::Differ
    }
}

/// Total order of rows for multiset comparison: floats by value, the rest as text.
fn cmp_rows(types: &[Type], a: &[Option<String>], b: &[Option<String>]) -> Ordering {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let o = match (x, y) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (Some(x), Some(y)) => match (tolerance(types.get(i)), parse_float(x), parse_float(y)) {
                (Some(_), Some(p), Some(q)) => p.total_cmp(&q),
                _ => x.cmp(y),
            },
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

/// How one query fared.
#[derive(Debug)]
enum Verdict {
    Agree {
        close: bool,
    },
    /// Both failed with this SQLSTATE.
    BothError(String),
    Refused(String),
    Mismatch(String),
}

fn show_rows(rows: &[Vec<Option<String>>]) -> String {
    let shown: Vec<String> = rows
        .iter()
        .take(6)
        .map(|r| {
            let cells: Vec<String> = r
                .iter()
                .map(|c| c.as_deref().map_or("NULL".into(), |s| format!("{s:?}")))
                .collect();
            format!("({})", cells.join(", "))
        })
        .collect();
    let more = if rows.len() > 6 {
        format!(" ... ({} rows)", rows.len())
    } else {
        String::new()
    };
    format!("{}{more}", shown.join(" "))
}

/// Compares pgshard's outcome with the oracle's.
fn compare(types: &[Type], ordered: bool, want: Outcome, got: Outcome) -> Verdict {
    match (want, got) {
        (_, Outcome::Error { code, message }) if code == "0A000" => Verdict::Refused(message),
        (Outcome::Error { code: a, .. }, Outcome::Error { code: b, .. }) if a == b => {
            Verdict::BothError(a)
        }
        (
            Outcome::Error { code, message },
            Outcome::Error {
                code: c2,
                message: m2,
            },
        ) => Verdict::Mismatch(format!(
            "expected error {code} ({message}), got error {c2} ({m2})"
        )),
        (Outcome::Error { code, message }, Outcome::Rows { rows, .. }) => {
            Verdict::Mismatch(format!(
                "expected error {code} ({message}), got {} rows: {}",
                rows.len(),
                show_rows(&rows)
            ))
        }
        (Outcome::Rows { rows, .. }, Outcome::Error { code, message }) => {
            Verdict::Mismatch(format!(
                "expected {} rows: {}; got error {code}: {message}",
                rows.len(),
                show_rows(&rows)
            ))
        }
        (
            Outcome::Rows {
                names: n1,
                rows: mut r1,
                count: c1,
            },
            Outcome::Rows {
                names: n2,
                rows: mut r2,
                count: c2,
            },
        ) => {
            if c1 != c2 {
                return Verdict::Mismatch(format!("expected row count {c1:?}, got {c2:?}"));
            }
            if r1.len() != r2.len() {
                return Verdict::Mismatch(format!(
                    "expected {} rows, got {}\n    expected: {}\n    got:      {}",
                    r1.len(),
                    r2.len(),
                    show_rows(&r1),
                    show_rows(&r2)
                ));
            }
            if !ordered {
                r1.sort_by(|a, b| cmp_rows(types, a, b));
                r2.sort_by(|a, b| cmp_rows(types, a, b));
            }
            let mut close = false;
            for (i, (a, b)) in r1.iter().zip(&r2).enumerate() {
                if a.len() != b.len() {
                    return Verdict::Mismatch(format!("row {i}: {} vs {} cells", a.len(), b.len()));
                }
                for (j, (x, y)) in a.iter().zip(b).enumerate() {
                    match cell_match(tolerance(types.get(j)), x, y) {
                        CellMatch::Exact => {}
                        CellMatch::Close => close = true,
                        CellMatch::Differ => {
                            return Verdict::Mismatch(format!(
                                "{} row {i} column {} differs: expected {x:?}, got {y:?}\n    \
                                 expected: {}\n    got:      {}",
                                if ordered { "ordered" } else { "sorted" },
                                n1.get(j).map_or("?", |s| s.as_str()),
                                show_rows(&r1[i..]),
                                show_rows(&r2[i..])
                            ))
                        }
                    }
                }
            }
            // Names last: a wrong value matters more than a wrong column name.
            if n1 != n2 {
                return Verdict::Mismatch(format!(
                    "column names: expected {n1:?}, got {n2:?} (values agree)"
                ));
            }
            Verdict::Agree { close }
        }
    }
}

/// A pair of connections, oracle and pgshard, with the same session settings.
struct Pair {
    plain: Client,
    shard: Client,
}

impl Pair {
    async fn new() -> Pair {
        let plain = plain_postgres().client().await;
        let shard = cluster().client().await;
        plain.batch_execute(SESSION_SETUP).await.unwrap();
        shard.batch_execute(SESSION_SETUP).await.unwrap();
        Pair { plain, shard }
    }

    /// Runs a data-changing statement on both sides; the oracle's change is kept only
    /// where pgshard made it too (not after a refusal), so later contents stay comparable.
    async fn check_dml(&mut self, sql: &str) -> Verdict {
        self.plain.batch_execute("begin").await.unwrap();
        let v = self.check(sql, &[], false, false).await;
        let keep = matches!(v, Verdict::Agree { .. } | Verdict::Mismatch(_));
        self.plain
            .batch_execute(if keep { "commit" } else { "rollback" })
            .await
            .unwrap();
        v
    }

    /// Runs one query on both sides and compares.
    async fn check(
        &mut self,
        sql: &str,
        params: &[Param],
        extended: bool,
        ordered: bool,
    ) -> Verdict {
        let (want, got, types) = if extended {
            let (want, types) = run_extended(&self.plain, sql, params).await;
            let (got, _) = run_extended(&self.shard, sql, params).await;
            (want, got, types)
        } else {
            let types = describe(&self.plain, sql).await;
            let want = run_simple(&self.plain, sql).await;
            let got = run_simple(&self.shard, sql).await;
            (want, got, types)
        };
        let lost = matches!(&got, Outcome::Error { code, .. } if code == "connection" || code == "timeout");
        let verdict = compare(&types, ordered, want, got);
        if lost || self.shard.is_closed() {
            // A hang or a lost connection: go on with a fresh session.
            self.shard = cluster().client().await;
            self.shard.batch_execute(SESSION_SETUP).await.unwrap();
        }
        verdict
    }
}

// ---------------------------------------------------------------------------------------
// The query generator.

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Category {
    Plain,
    Aggregate,
    GroupBy,
    Distinct,
    DistinctOn,
}

#[derive(Debug)]
struct GenQuery {
    index: usize,
    category: Category,
    sql: String,
    params: Vec<Param>,
    extended: bool,
    ordered: bool,
}

/// An SQL expression and whether its value is independent of the order rows are combined
/// in (everything but float averages and deviations), so that it may decide an order.
#[derive(Clone)]
struct Expr {
    sql: String,
    exact: bool,
}

struct Gen<'a> {
    r: Rng,
    t: &'a TableDef,
    p: &'a Pools,
    extended: bool,
    params: Vec<Param>,
}

const SCALAR_FORMS: &[(Ty, &[&str])] = &[
    (
        Ty::I2,
        &[
            "{c}",
            "-{c}",
            "abs({c})",
            "{c} % 7",
            "{c}::int4 * 3",
            "coalesce({c}, 0)",
            "{c} / 4",
        ],
    ),
    (
        Ty::I4,
        &[
            "{c}",
            "-{c}",
            "abs({c})",
            "{c} % 10",
            "{c}::int8 * 3",
            "coalesce({c}, -1)",
            "{c} / 7",
            "greatest({c}, 0)",
            "{c}::numeric / 7",
        ],
    ),
    (
        Ty::I8,
        &[
            "{c}",
            "{c} % 1000",
            "{c}::numeric * 2",
            "{c} / 1000000",
            "abs({c})",
            "coalesce({c}, 0)",
        ],
    ),
    (
        Ty::Num,
        &[
            "{c}",
            "{c} * 2",
            "round({c}, 2)",
            "trunc({c})",
            "abs({c})",
            "-{c}",
            "{c} + 1.5",
            "floor({c})",
            "{c} / 3",
        ],
    ),
    (
        Ty::F4,
        &[
            "{c}",
            "{c} * 2",
            "abs({c})",
            "{c} + 1",
            "floor({c})",
            "{c}::float8 / 3",
        ],
    ),
    (
        Ty::F8,
        &[
            "{c}",
            "{c} * 2",
            "abs({c})",
            "floor({c})",
            "{c} / 3",
            "round({c}::numeric, 2)",
        ],
    ),
    (
        Ty::Text,
        &[
            "{c}",
            "upper({c})",
            "lower({c})",
            "length({c})",
            "{c} || '!'",
            "substr({c}, 2, 3)",
            "coalesce({c}, '∅')",
            "initcap({c})",
            "reverse({c})",
            "left({c}, 1)",
        ],
    ),
    (
        Ty::Varchar,
        &[
            "{c}",
            "upper({c})",
            "length({c})",
            "{c} || '-x'",
            "coalesce({c}, 'none')",
        ],
    ),
    (
        Ty::Bool,
        &["{c}", "not {c}", "{c} is true", "coalesce({c}, false)"],
    ),
    (
        Ty::Date,
        &[
            "{c}",
            "{c} + 7",
            "extract(year from {c})",
            "date_trunc('month', {c})",
            "to_char({c}, 'YYYY-MM')",
            "extract(dow from {c})",
        ],
    ),
    (
        Ty::Ts,
        &[
            "{c}",
            "date_trunc('day', {c})",
            "{c} + interval '90 minutes'",
            "extract(epoch from {c})",
            "{c}::date",
            "extract(hour from {c})",
        ],
    ),
    (
        Ty::Tz,
        &[
            "{c}",
            "date_trunc('hour', {c})",
            "{c} at time zone 'UTC'",
            "extract(epoch from {c})",
            "{c}::date",
            "to_char({c}, 'YYYY-MM-DD HH24:MI TZ')",
        ],
    ),
    (Ty::Uuid, &["{c}", "{c}::text", "substr({c}::text, 1, 8)"]),
    (
        Ty::Jsonb,
        &[
            "{c}",
            "{c}->'a'",
            "{c}->>'a'",
            "jsonb_typeof({c})",
            "{c} ? 'a'",
        ],
    ),
];

/// Grouping expressions with few distinct values.
const GROUP_FORMS: &[(Ty, &[&str])] = &[
    (Ty::I2, &["{c}", "{c} % 5"]),
    (Ty::I4, &["{c} % 10", "{c} / 100", "({c} > 0)", "{c}"]),
    (Ty::I8, &["{c} % 7", "({c} < 0)"]),
    (Ty::Num, &["{c}", "sign({c})", "trunc({c} / 1000000000)"]),
    (Ty::F4, &["{c}", "floor({c} / 50)"]),
    (Ty::F8, &["floor({c} / 100000)", "sign({c})", "{c}"]),
    (
        Ty::Text,
        &["{c}", "lower({c})", "length({c})", "left({c}, 1)"],
    ),
    (Ty::Varchar, &["{c}", "upper({c})"]),
    (Ty::Bool, &["{c}"]),
    (
        Ty::Date,
        &["{c}", "extract(year from {c})", "date_trunc('year', {c})"],
    ),
    (
        Ty::Ts,
        &[
            "date_trunc('month', {c})",
            "extract(dow from {c})",
            "{c}::date",
        ],
    ),
    (Ty::Tz, &["date_trunc('year', {c})", "{c}::date"]),
    (Ty::Uuid, &["{c}", "left({c}::text, 1)"]),
    (Ty::Jsonb, &["{c}", "jsonb_typeof({c})", "{c}->>'a'"]),
];

fn forms(table: &'static [(Ty, &'static [&'static str])], ty: Ty) -> &'static [&'static str] {
    table.iter().find(|(t, _)| *t == ty).unwrap().1
}

impl<'a> Gen<'a> {
    fn col(&mut self) -> &'a Col {
        let t = self.t;
        self.r.pick(&t.cols)
    }

    fn col_where(&mut self, f: impl Fn(&Col) -> bool) -> &'a Col {
        let t = self.t;
        let cs: Vec<&'a Col> = t.cols.iter().filter(|c| f(c)).collect();
        cs[self.r.below(cs.len())]
    }

    /// A literal of `c`, as `$n` in extended mode where a parameter type exists.
    fn lit(&mut self, c: &Col) -> String {
        let (sql, param) = literal(c, self.p, &mut self.r);
        match param {
            Some(p) if self.extended && self.r.chance(0.7) => {
                self.params.push(p);
                format!("${}", self.params.len())
            }
            _ => sql,
        }
    }

    fn scalar(&mut self) -> String {
        if self.extended && self.r.chance(0.08) {
            // A parameter in the target list or ORDER BY.
            return if self.r.chance(0.5) {
                let c = self.col_where(|c| c.ty == Ty::Text);
                self.params
                    .push(Param::Text(self.r.pick(&self.p.text).clone()));
                format!("coalesce({}, ${})", c.name, self.params.len())
            } else {
                let c = self.col_where(|c| c.ty == Ty::I4);
                self.params.push(Param::I8(self.r.range(-100, 100)));
                format!("{}::int8 + ${}", c.name, self.params.len())
            };
        }
        let c = self.col();
        let f = *self.r.pick(forms(SCALAR_FORMS, c.ty));
        f.replace("{c}", c.name)
    }

    fn group_key(&mut self) -> String {
        let c = self.col_where(|c| c.name != "id");
        let f = *self.r.pick(forms(GROUP_FORMS, c.ty));
        f.replace("{c}", c.name)
    }

    /// A condition on one column.
    fn atom(&mut self) -> String {
        let c = self.col();
        let n = c.name;
        match self.r.below(10) {
            0 => format!("{n} is null"),
            1 => format!("{n} is not null"),
            _ => match c.ty {
                Ty::Bool => match self.r.below(4) {
                    0 => n.to_string(),
                    1 => format!("not {n}"),
                    2 => format!("{n} is not false"),
                    _ => format!("{n} = {}", self.lit(c)),
                },
                Ty::Jsonb => match self.r.below(3) {
                    0 => format!("{n} ? 'a'"),
                    1 => format!("{n} @> '{{\"a\": 1}}'"),
                    _ => format!("{n} = {}", self.lit(c)),
                },
                Ty::Uuid => {
                    let op = *self.r.pick(&["=", "<>", "<", ">="]);
                    format!("{n} {op} {}", self.lit(c))
                }
                ty => match self.r.below(9) {
                    0 => format!("{n} between {} and {}", self.lit(c), self.lit(c)),
                    1 => {
                        let k = self.r.range(1, 4);
                        let items: Vec<String> = (0..k).map(|_| self.lit(c)).collect();
                        format!("{n} in ({})", items.join(", "))
                    }
                    2 => format!("{n} is distinct from {}", self.lit(c)),
                    3 if ty.is_text() => {
                        let pat = *self
                            .r
                            .pick(&["'a%'", "'%e%'", "'%ä%'", "'_'", "'Z%'", "'%!'"]);
                        let op = *self.r.pick(&["like", "ilike", "not like"]);
                        format!("{n} {op} {pat}")
                    }
                    4 if ty.is_text() => format!("lower({n}) = lower({})", self.lit(c)),
                    5 if ty.is_text() => format!("length({n}) > {}", self.r.range(0, 6)),
                    3 | 4 if ty.is_int() => format!("{n} % {} = 0", self.r.range(2, 5)),
                    5 if ty.is_number() => format!("abs({n}) < {}", self.lit(c)),
                    _ => {
                        let op = *self.r.pick(&["=", "<>", "<", "<=", ">", ">="]);
                        format!("{n} {op} {}", self.lit(c))
                    }
                },
            },
        }
    }

    /// A WHERE condition: atoms joined by AND/OR, sometimes negated; sometimes it fixes
    /// the distribution column (router path).
    fn filter(&mut self) -> String {
        let n = self.r.range(1, 3);
        let mut s = self.atom();
        for _ in 1..n {
            let op = if self.r.chance(0.6) { "and" } else { "or" };
            s = format!("{s} {op} {}", self.atom());
        }
        if self.r.chance(0.15) {
            s = format!("not ({s})");
        }
        if self.r.chance(0.1) {
            let dist = self.t.cols.iter().find(|c| c.name == self.t.dist).unwrap();
            s = format!("{} = {} and ({s})", dist.name, self.lit(dist));
        }
        s
    }

    fn where_clause(&mut self) -> String {
        if self.r.chance(0.7) {
            format!(" where {}", self.filter())
        } else {
            String::new()
        }
    }

    fn aggregate(&mut self) -> Expr {
        let ex = |s: String| Expr {
            sql: s,
            exact: true,
        };
        match self.r.below(12) {
            0 => ex("count(*)".into()),
            1 => {
                let c = self.col();
                ex(format!("count({})", c.name))
            }
            2 => {
                let c = self.col_where(|c| c.name != "id");
                ex(format!("count(distinct {})", c.name))
            }
            3 | 4 => {
                let c = self.col_where(|c| c.ty.is_number());
                let f = *self.r.pick(&["sum", "avg", "min", "max", "sum", "avg"]);
                let exact = !(c.ty.is_float() && f == "avg");
                Expr {
                    sql: format!("{f}({})", c.name),
                    exact,
                }
            }
            5 => {
                let c = self.col_where(|c| c.ty.has_min_max() && !c.ty.is_number());
                let f = *self.r.pick(&["min", "max"]);
                ex(format!("{f}({})", c.name))
            }
            6 => {
                let c = self.col_where(|c| c.ty.is_number());
                let f = *self.r.pick(&[
                    "stddev",
                    "stddev_pop",
                    "stddev_samp",
                    "variance",
                    "var_pop",
                    "var_samp",
                ]);
                Expr {
                    sql: format!("{f}({})", c.name),
                    exact: !c.ty.is_float(),
                }
            }
            7 => {
                let f = *self.r.pick(&["bool_and", "bool_or", "every"]);
                let arg = match self.t.cols.iter().find(|c| c.ty == Ty::Bool) {
                    Some(c) if self.r.chance(0.6) => c.name.to_string(),
                    _ => self.atom(),
                };
                ex(format!("{f}({arg})"))
            }
            8 => {
                // Ordered aggregates; the order inside is total (ties broken by id).
                match self.r.below(4) {
                    0 => {
                        let c = self.col_where(|c| c.ty.is_text());
                        ex(format!("string_agg({0}, ', ' order by {0}, id)", c.name))
                    }
                    1 => {
                        let c = self.col_where(|c| c.ty.is_text());
                        ex(format!(
                            "string_agg(distinct {0}, '|' order by {0})",
                            c.name
                        ))
                    }
                    2 => {
                        let c = self.col_where(|c| c.name != "id");
                        let dir = *self.r.pick(&["", " desc", " nulls first"]);
                        ex(format!("array_agg({0} order by {0}{dir}, id)", c.name))
                    }
                    _ => {
                        let c = self.col_where(|c| c.ty.is_int());
                        ex(format!("array_agg(distinct {0} order by {0})", c.name))
                    }
                }
            }
            9 => {
                // Expressions over aggregates.
                let c = self.col_where(|c| c.ty.is_number());
                let n = c.name;
                let forms: &[&str] = if c.ty.is_int() {
                    &[
                        "sum({c})*100/count(*)",
                        "max({c})::numeric - min({c})",
                        "coalesce(sum({c}), 0) + count(*)",
                        "sum({c}) / nullif(count({c}), 0)",
                        "round(avg({c}), 3)",
                        "count(*) - count({c})",
                        "sum(distinct {c})",
                    ]
                } else if c.ty == Ty::Num {
                    &[
                        "sum({c})*100/count(*)",
                        "max({c}) - min({c})",
                        "round(avg({c}), 4)",
                        "sum({c}) / nullif(count({c}), 0)",
                        "count(*) - count({c})",
                    ]
                } else {
                    &[
                        "max({c}) - min({c})",
                        "count(*) - count({c})",
                        "sum({c}) * 2",
                    ]
                };
                ex(self.r.pick(forms).replace("{c}", n))
            }
            10 => {
                let cond = self.atom();
                if self.r.chance(0.5) {
                    ex(format!("count(*) filter (where {cond})"))
                } else {
                    let c = self.col_where(|c| c.ty.is_int() || c.ty == Ty::Num);
                    ex(format!("sum({}) filter (where {cond})", c.name))
                }
            }
            _ => {
                let c = self.col_where(|c| c.ty.is_text());
                let f = *self.r.pick(&[
                    "max(length({c}))",
                    "min(lower({c}))",
                    "count(distinct lower({c}))",
                ]);
                ex(f.replace("{c}", c.name))
            }
        }
    }

    fn having(&mut self) -> String {
        let mut parts = Vec::new();
        for _ in 0..self.r.range(1, 2) {
            parts.push(match self.r.below(8) {
                0 => format!("count(*) > {}", self.r.range(0, 6)),
                1 => {
                    let c = self.col_where(|c| c.ty.is_int() || c.ty == Ty::Num);
                    format!("sum({}) > {}", c.name, literal(c, self.p, &mut self.r).0)
                }
                2 => {
                    let c = self.col_where(|c| c.ty.is_text());
                    format!("min({}) < {}", c.name, self.lit(c))
                }
                3 => {
                    let c = self.col_where(|c| c.ty.is_number());
                    format!("avg({}) is not null", c.name)
                }
                4 => format!("count(distinct {}) >= 2", self.col().name),
                5 if self.extended => {
                    self.params.push(Param::I8(self.r.range(0, 5)));
                    format!("count(*) > ${}", self.params.len())
                }
                5 => format!("count(*) >= {}", self.r.range(0, 5)),
                6 => {
                    let c = self.col_where(|c| c.ty.is_int());
                    format!(
                        "max({0})::numeric - min({0}) > {1}",
                        c.name,
                        self.r.range(0, 500)
                    )
                }
                _ => {
                    let c = self.col_where(|c| c.ty.is_int());
                    format!("coalesce(sum({}), 0) * 2 > count(*)", c.name)
                }
            });
        }
        let op = if self.r.chance(0.7) { " and " } else { " or " };
        parts.join(op)
    }

    fn direction(&mut self) -> String {
        let dir = *self.r.pick(&["", " asc", " desc"]);
        let nulls = *self.r.pick(&["", "", " nulls first", " nulls last"]);
        format!("{dir}{nulls}")
    }

    fn limit_offset(&mut self) -> String {
        let mut s = String::new();
        if self.r.chance(0.8) {
            let n = if self.r.chance(0.1) {
                0
            } else {
                self.r.range(1, 25)
            };
            if self.extended && self.r.chance(0.5) {
                self.params.push(Param::I8(n));
                s = format!(" limit ${}", self.params.len());
            } else {
                s = format!(" limit {n}");
            }
        }
        if self.r.chance(0.4) {
            let n = self.r.range(1, 40);
            if self.extended && self.r.chance(0.5) {
                self.params.push(Param::I8(n));
                s = format!("{s} offset ${}", self.params.len());
            } else {
                s = format!("{s} offset {n}");
            }
        }
        s
    }
}

fn generate(seed: u64, index: usize, t: &TableDef, p: &Pools) -> GenQuery {
    let mut r = Rng::new(seed ^ (index as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407));
    let extended = r.chance(0.25);
    let category = match r.below(20) {
        0..=3 => Category::Plain,
        4..=7 => Category::Aggregate,
        8..=15 => Category::GroupBy,
        16..=17 => Category::Distinct,
        _ => Category::DistinctOn,
    };
    let mut g = Gen {
        r,
        t,
        p,
        extended,
        params: Vec::new(),
    };
    let table = t.name;
    let (sql, ordered) = match category {
        Category::Plain => {
            let targets: Vec<String> = if g.r.chance(0.1) {
                vec!["*".into()]
            } else {
                (0..g.r.range(1, 5)).map(|_| g.scalar()).collect()
            };
            let wh = g.where_clause();
            let mut sql = format!("select {} from {table}{wh}", targets.join(", "));
            let ordered = g.r.chance(0.6);
            if ordered {
                let mut keys = Vec::new();
                for _ in 0..g.r.range(0, 2) {
                    let key = if targets[0] != "*" && g.r.chance(0.3) {
                        (1 + g.r.below(targets.len())).to_string()
                    } else {
                        g.scalar()
                    };
                    keys.push(format!("{key}{}", g.direction()));
                }
                keys.push(format!("id{}", g.direction()));
                sql = format!("{sql} order by {}", keys.join(", "));
                if g.r.chance(0.6) {
                    sql += &g.limit_offset();
                }
            }
            (sql, ordered)
        }
        Category::Aggregate => {
            let aggs: Vec<String> = (0..g.r.range(1, 5)).map(|_| g.aggregate().sql).collect();
            let wh = g.where_clause();
            let mut sql = format!("select {} from {table}{wh}", aggs.join(", "));
            if g.r.chance(0.05) {
                sql += &format!(" having {}", g.having());
            }
            // One row (or none): LIMIT/OFFSET are deterministic even without ORDER BY.
            if g.r.chance(0.05) {
                sql += *g.r.pick(&[
                    " limit 1",
                    " limit 0",
                    " offset 1",
                    " offset 0",
                    " limit 5 offset 0",
                ]);
            }
            (sql, false)
        }
        Category::GroupBy => {
            let mut keys: Vec<String> = Vec::new();
            for _ in 0..g.r.range(1, 3) {
                let k = g.group_key();
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            // Target list: each key (mostly), then aggregates; sometimes shuffled.
            let mut targets: Vec<(String, bool, Option<usize>)> = Vec::new(); // sql, exact, key index
            for (i, k) in keys.iter().enumerate() {
                if g.r.chance(0.85) {
                    targets.push((k.clone(), true, Some(i)));
                }
            }
            // Functions of plain-column keys (valid: the column is grouped).
            for k in &keys {
                if let Some(c) = t.cols.iter().find(|c| c.name == k) {
                    if g.r.chance(0.2) {
                        let f = *g.r.pick(forms(SCALAR_FORMS, c.ty));
                        targets.push((f.replace("{c}", c.name), true, None));
                    }
                }
            }
            for _ in 0..g.r.range(1, 4) {
                let a = g.aggregate();
                targets.push((a.sql, a.exact, None));
            }
            if g.r.chance(0.3) {
                let n = targets.len();
                for i in (1..n).rev() {
                    let j = g.r.below(i + 1);
                    targets.swap(i, j);
                }
            }
            let select: Vec<String> = targets
                .iter()
                .enumerate()
                .map(|(i, (s, _, _))| {
                    if i == 0 && g.r.chance(0.2) {
                        format!("{s} as first_col")
                    } else {
                        s.clone()
                    }
                })
                .collect();
            let wh = g.where_clause();
            let group: Vec<String> = keys
                .iter()
                .enumerate()
                .map(|(i, k)| match targets.iter().position(|t| t.2 == Some(i)) {
                    Some(pos) if g.r.chance(0.2) => (pos + 1).to_string(),
                    _ => k.clone(),
                })
                .collect();
            let mut sql = format!(
                "select {} from {table}{wh} group by {}",
                select.join(", "),
                group.join(", ")
            );
            if g.r.chance(0.3) {
                sql += &format!(" having {}", g.having());
            }
            let ordered = g.r.chance(0.6);
            if ordered {
                let mut order = Vec::new();
                for _ in 0..g.r.range(0, 2) {
                    let pos = g.r.below(targets.len());
                    if !targets[pos].1 {
                        continue;
                    }
                    let item = if g.r.chance(0.4) {
                        (pos + 1).to_string()
                    } else {
                        targets[pos].0.clone()
                    };
                    order.push(format!("{item}{}", g.direction()));
                }
                if g.r.chance(0.3) {
                    // An aggregate or an expression over aggregates not in the output.
                    let a = g.aggregate();
                    if a.exact {
                        order.push(format!("{}{}", a.sql, g.direction()));
                    }
                }
                // All grouping keys: the order is total.
                for k in &keys {
                    order.push(format!("{k}{}", g.direction()));
                }
                sql = format!("{sql} order by {}", order.join(", "));
                if g.r.chance(0.5) {
                    sql += &g.limit_offset();
                }
            }
            (sql, ordered)
        }
        Category::Distinct => {
            let mut exprs: Vec<String> = Vec::new();
            for _ in 0..g.r.range(1, 3) {
                let e = if g.r.chance(0.6) {
                    g.group_key()
                } else {
                    g.scalar()
                };
                if !exprs.contains(&e) {
                    exprs.push(e);
                }
            }
            let wh = g.where_clause();
            let mut sql = format!("select distinct {} from {table}{wh}", exprs.join(", "));
            let ordered = g.r.chance(0.6);
            if ordered {
                let order: Vec<String> = (0..exprs.len())
                    .map(|i| {
                        let item = if g.r.chance(0.5) {
                            (i + 1).to_string()
                        } else {
                            exprs[i].clone()
                        };
                        format!("{item}{}", g.direction())
                    })
                    .collect();
                sql = format!("{sql} order by {}", order.join(", "));
                if g.r.chance(0.5) {
                    sql += &g.limit_offset();
                }
            }
            (sql, ordered)
        }
        Category::DistinctOn => {
            let on = g.group_key();
            let mut others: Vec<String> = (0..g.r.range(1, 3)).map(|_| g.scalar()).collect();
            others.dedup();
            let wh = g.where_clause();
            let dir = g.direction();
            let mut order = vec![format!("{on}{dir}")];
            if g.r.chance(0.5) {
                let e = g.scalar();
                order.push(format!("{e}{}", g.direction()));
            }
            order.push(format!("id{}", g.direction()));
            let mut sql = format!(
                "select distinct on ({on}) {on}, {} from {table}{wh} order by {}",
                others.join(", "),
                order.join(", ")
            );
            if g.r.chance(0.4) {
                sql += &g.limit_offset();
            }
            (sql, true)
        }
    };
    GenQuery {
        index,
        category,
        sql,
        params: g.params,
        extended,
        ordered,
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
    })
}

/// A refusal message with numbers and `$n` removed, so that similar reasons add up.
fn reason_key(msg: &str) -> String {
    let s: String = msg
        .chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect();
    s.chars().take(110).collect()
}

#[derive(Default)]
struct Tally {
    total: usize,
    agreed: usize,
    /// SQLSTATE -> queries where both sides failed with it.
    both_error: BTreeMap<String, usize>,
    refused: usize,
    close: usize,
    extended: usize,
    mismatches: Vec<String>,
    mismatch_kinds: BTreeMap<&'static str, usize>,
    /// (category, reason) -> count
    reasons: BTreeMap<(String, String), usize>,
    per_category: BTreeMap<String, (usize, usize)>,
}

impl Tally {
    fn add(&mut self, category: &str, extended: bool, what: &str, v: Verdict) {
        self.total += 1;
        if extended {
            self.extended += 1;
        }
        let cat = self.per_category.entry(category.to_string()).or_default();
        cat.0 += 1;
        match v {
            Verdict::Agree { close } => {
                self.agreed += 1;
                if close {
                    self.close += 1;
                }
            }
            Verdict::BothError(code) => {
                self.agreed += 1;
                *self.both_error.entry(code).or_default() += 1;
            }
            Verdict::Refused(msg) => {
                self.refused += 1;
                cat.1 += 1;
                *self
                    .reasons
                    .entry((category.to_string(), reason_key(&msg)))
                    .or_default() += 1;
            }
            Verdict::Mismatch(m) => {
                let kind = if m.starts_with("column names") {
                    "column names only"
                } else if m.contains("error") {
                    "error vs rows or other error"
                } else {
                    "rows or values"
                };
                *self.mismatch_kinds.entry(kind).or_default() += 1;
                self.mismatches.push(format!("{what}\n    {m}"));
            }
        }
    }

    fn refused_share(&self) -> f64 {
        self.refused as f64 / self.total.max(1) as f64
    }

    fn report(&self, title: &str) {
        println!(
            "{title}: {} queries ({} extended protocol): {} agreed ({} both errored with the same \
             SQLSTATE {:?}, {} within float tolerance), {} refused ({:.1}%), {} mismatches",
            self.total,
            self.extended,
            self.agreed,
            self.both_error.values().sum::<usize>(),
            self.both_error,
            self.close,
            self.refused,
            100.0 * self.refused_share(),
            self.mismatches.len()
        );
        for (cat, (n, refused)) in &self.per_category {
            println!(
                "  {cat:<12} {n:>5} queries, {refused:>5} refused ({:.1}%)",
                100.0 * *refused as f64 / (*n).max(1) as f64
            );
        }
        if !self.reasons.is_empty() {
            println!("  refusals by category and reason:");
            let mut reasons: Vec<_> = self.reasons.iter().collect();
            reasons.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            for ((cat, reason), n) in reasons {
                println!("    {n:>5}  {cat:<12} {reason}");
            }
        }
        if !self.mismatches.is_empty() {
            println!("  mismatches by kind: {:?}", self.mismatch_kinds);
        }
        // Value mismatches first: they are the worst.
        let mut shown: Vec<&String> = self
            .mismatches
            .iter()
            .filter(|m| !m.contains("column names:"))
            .collect();
        shown.extend(
            self.mismatches
                .iter()
                .filter(|m| m.contains("column names:")),
        );
        let limit = std::env::var("PGSHARD_DIFF_SHOW")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10);
        for m in shown.into_iter().take(limit) {
            println!("MISMATCH {m}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_queries_match_postgres() {
    setup().await;
    let seed = env_u64("PGSHARD_DIFF_SEED").unwrap_or(DEFAULT_SEED);
    let count = env_u64("PGSHARD_DIFF_QUERIES").map_or(DEFAULT_QUERIES, |n| n as usize);
    let only = env_u64("PGSHARD_DIFF_ONLY").map(|n| n as usize);
    let defs = Arc::new(tables());
    let pools = Arc::new(pools());
    let indexes: Vec<usize> = match only {
        Some(i) => vec![i],
        None => (0..count).collect(),
    };
    let queries: Arc<Vec<GenQuery>> = Arc::new(
        indexes
            .iter()
            .map(|&i| {
                // One query in five on the table distributed by text.
                let mut r = Rng::new(seed.wrapping_add(i as u64));
                let t = if r.chance(0.2) { &defs[1] } else { &defs[0] };
                generate(seed, i, t, &pools)
            })
            .collect(),
    );
    if std::env::var_os("PGSHARD_DIFF_LIST").is_some() {
        for q in queries.iter() {
            println!(
                "#{} {:?} {:?} {}  {:?}",
                q.index, q.category, q.extended, q.sql, q.params
            );
        }
        return;
    }
    println!(
        "differential: seed {seed} (PGSHARD_DIFF_SEED), {} generated queries \
         (PGSHARD_DIFF_QUERIES), {LANES} connection pairs",
        queries.len()
    );
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut lanes = Vec::new();
    for _ in 0..LANES {
        let (queries, next) = (queries.clone(), next.clone());
        lanes.push(tokio::spawn(async move {
            let mut pair = Pair::new().await;
            let mut out = Vec::new();
            loop {
                let i = next.fetch_add(1, AtomicOrdering::SeqCst);
                let Some(q) = queries.get(i) else { break };
                let v = pair.check(&q.sql, &q.params, q.extended, q.ordered).await;
                out.push((i, v));
            }
            out
        }));
    }
    let mut results = Vec::new();
    for lane in lanes {
        results.extend(lane.await.unwrap());
    }
    results.sort_by_key(|(i, _)| *i);
    let mut tally = Tally::default();
    for (i, v) in results {
        let q = &queries[i];
        if only.is_some() {
            println!(
                "query #{}: {}\n  params {:?}\n  {v:?}",
                q.index, q.sql, q.params
            );
        }
        let what = format!(
            "[PGSHARD_DIFF_SEED={seed} PGSHARD_DIFF_ONLY={}] ({}{}{})\n    {}{}",
            q.index,
            if q.extended {
                "extended protocol"
            } else {
                "simple protocol"
            },
            if q.ordered {
                ", ordered"
            } else {
                ", as multiset"
            },
            format_args!(", {:?}", q.category),
            q.sql,
            if q.params.is_empty() {
                String::new()
            } else {
                format!("\n    params: {:?}", q.params)
            }
        );
        tally.add(&format!("{:?}", q.category), q.extended, &what, v);
    }
    tally.report("generated");
    println!("  {:.1} s", started.elapsed().as_secs_f64());
    assert!(
        tally.mismatches.is_empty(),
        "{} of {} generated queries answered differently from PostgreSQL (seed {seed}); first:\n{}",
        tally.mismatches.len(),
        tally.total,
        tally
            .mismatches
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    if only.is_none() {
        assert!(
            tally.refused_share() < MAX_REFUSED_SHARE,
            "{:.1}% of the generated queries were refused (seed {seed}); at most {:.0}% allowed",
            100.0 * tally.refused_share(),
            100.0 * MAX_REFUSED_SHARE
        );
    }
}

// ---------------------------------------------------------------------------------------
// The hand-written corpus.

/// The statements of the corpus file: separated by `;` at a line end, `--` comments.
fn corpus() -> Vec<String> {
    let text = include_str!("differential/corpus.sql");
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let l = line.trim();
        if l.is_empty() || l.starts_with("--") {
            continue;
        }
        cur.push_str(l);
        if let Some(stmt) = cur.strip_suffix(';') {
            out.push(stmt.trim().to_string());
            cur.clear();
        } else {
            cur.push(' ');
        }
    }
    assert!(cur.trim().is_empty(), "corpus ends without ';': {cur}");
    out
}

/// Whether `sql` has an ORDER BY of its own (outside parentheses and quotes).
fn has_top_level_order_by(sql: &str) -> bool {
    let lower = sql.to_lowercase();
    let b = lower.as_bytes();
    let (mut depth, mut quoted) = (0i32, false);
    for i in 0..b.len() {
        match b[i] {
            b'\'' => quoted = !quoted,
            b'(' if !quoted => depth += 1,
            b')' if !quoted => depth -= 1,
            b'o' if !quoted && depth == 0 && lower[i..].starts_with("order by") => return true,
            _ => {}
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_written_corpus_matches_postgres() {
    setup().await;
    let mut pair = Pair::new().await;
    let mut tally = Tally::default();
    let queries = corpus();
    for sql in &queries {
        let ordered = has_top_level_order_by(sql);
        for extended in [false, true] {
            let v = pair.check(sql, &[], extended, ordered).await;
            let what = format!(
                "({}{}) {sql}",
                if extended {
                    "extended protocol"
                } else {
                    "simple protocol"
                },
                if ordered {
                    ", ordered"
                } else {
                    ", as multiset"
                }
            );
            let protocol = if extended { "extended" } else { "simple" };
            tally.add(protocol, extended, &what, v);
        }
    }
    tally.report("corpus");
    assert!(
        tally.mismatches.is_empty(),
        "{} of {} corpus runs answered differently from PostgreSQL; first:\n{}",
        tally.mismatches.len(),
        tally.total,
        tally
            .mismatches
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

// ---------------------------------------------------------------------------------------
// Multi-shard UPDATE / DELETE.

/// Rows of `diff_dml` on both sides compared as multisets after each statement; row
/// counts (CommandComplete) and RETURNING rows compared; a failing statement changes
/// nothing; router lookups by every key still find every row (no row moved shards).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_shard_update_delete_match_postgres() {
    let defs = tables();
    let pools = pools();
    load_table(&defs[0], "diff_dml", &pools, DATA_SEED + 7).await;
    let mut pair = Pair::new().await;
    let mut tally = Tally::default();
    let statements: &[&str] = &[
        "update diff_dml set t = upper(t) where i4 > 0",
        "update diff_dml set n = n * 2, f8 = f8 + 1 where k between 10 and 20",
        "delete from diff_dml where s2 < -50",
        "update diff_dml set b = not b where b is not null and d < date '2000-01-01'",
        "update diff_dml set vc = 'upd' where k = 3",
        "delete from diff_dml where k = 4 and i4 < 0",
        // Overflows on some shard: PostgreSQL errors, nothing may change anywhere.
        "update diff_dml set i4 = i4 + 1",
        "update diff_dml set s2 = s2 * 1000 where s2 is not null",
        "update diff_dml set i4 = i4 - 1 where i4 = 2147483647 returning id, k, i4",
        "delete from diff_dml where t is null and vc is null returning id, t, vc",
        "update diff_dml set j = '{\"updated\": true}' where j ? 'a' returning id, j",
        "update diff_dml set tz = tz + interval '1 day' where extract(year from tz) < 2000",
        "delete from diff_dml where u is null and b",
        "update diff_dml set i8 = 0 where false",
        "delete from diff_dml where id in (select id from diff_dml where i4 % 13 = 0)",
        "update diff_dml set k = k + 1 where id = 5",
        "update diff_dml set f4 = f4 / 0 where f4 is not null",
        "delete from diff_dml where 1 / (i4 - i4) = 1 and i4 is not null",
    ];
    let contents = "select * from diff_dml";
    for (step, sql) in statements.iter().enumerate() {
        let v = pair.check_dml(sql).await;
        tally.add("dml", false, &format!("step {step}: {sql}"), v);
        let v = pair.check(contents, &[], false, false).await;
        tally.add(
            "contents",
            false,
            &format!("contents after step {step}: {sql}"),
            v,
        );
    }
    // Extended protocol with parameters.
    for (sql, params) in [
        (
            "update diff_dml set i4 = i4 - $1 where s2 > $2::int4",
            vec![Param::I4(1), Param::I4(10)],
        ),
        (
            "delete from diff_dml where t = $1",
            vec![Param::Text("apple".into())],
        ),
        (
            "update diff_dml set vc = $1 where b = $2 and k > $3",
            vec![Param::Text("ext".into()), Param::Bool(true), Param::I4(100)],
        ),
        ("delete from diff_dml where i8 < $1", vec![Param::I8(0)]),
    ] {
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(Param::as_sql).collect();
        pair.plain.batch_execute("begin").await.unwrap();
        let want = pair.plain.execute(sql, &refs).await;
        let got = pair.shard.execute(sql, &refs).await;
        let outcome = |r: Result<u64, tokio_postgres::Error>| match r {
            Ok(n) => Outcome::Rows {
                names: vec![],
                rows: vec![],
                count: Some(n),
            },
            Err(e) => error_outcome(e),
        };
        let v = compare(&[], false, outcome(want), outcome(got));
        let keep = matches!(v, Verdict::Agree { .. } | Verdict::Mismatch(_));
        pair.plain
            .batch_execute(if keep { "commit" } else { "rollback" })
            .await
            .unwrap();
        tally.add("dml", true, &format!("{sql} {params:?}"), v);
        let v = pair.check(contents, &[], false, false).await;
        tally.add("contents", false, &format!("contents after {sql}"), v);
    }
    // Transaction blocks, statement by statement on both sides; a block pgshard refuses
    // a statement of is rolled back on both.
    for (block, end) in [
        (
            &[
                "update diff_dml set t = 'rolled back' where i4 > 0",
                "delete from diff_dml where k < 50",
                "select count(*), sum(i4) from diff_dml",
            ],
            "rollback",
        ),
        (
            &[
                "update diff_dml set t = 'committed' where i4 < 0",
                "delete from diff_dml where k > 200",
                "select count(*), sum(i4) from diff_dml",
            ],
            "commit",
        ),
    ] {
        pair.plain.batch_execute("begin").await.unwrap();
        pair.shard.batch_execute("begin").await.unwrap();
        let mut end = end;
        for sql in block {
            let v = pair.check(sql, &[], false, false).await;
            let go_on = matches!(v, Verdict::Agree { .. });
            tally.add("dml", false, &format!("in a {end} block: {sql}"), v);
            if !go_on {
                end = "rollback";
                break;
            }
        }
        pair.plain.batch_execute(end).await.unwrap();
        let _ = pair.shard.batch_execute(end).await;
        let v = pair.check(contents, &[], false, false).await;
        tally.add(
            "contents",
            false,
            &format!("contents after a {end} block"),
            v,
        );
    }
    for sql in ["update diff_dml set ts = null", "delete from diff_dml"] {
        let v = pair.check_dml(sql).await;
        tally.add("dml", false, sql, v);
        let v = pair.check(contents, &[], false, false).await;
        tally.add("contents", false, &format!("contents after {sql}"), v);
    }
    // Every row is still on the shard its key hashes to.
    for k in -40..=260 {
        let sql = format!("select id, t from diff_dml where k = {k}");
        let v = pair.check(&sql, &[], false, false).await;
        tally.add("router", false, &sql, v);
    }
    tally.report("multi-shard DML");
    assert!(
        tally.mismatches.is_empty(),
        "{} multi-shard DML checks differ from PostgreSQL; first:\n{}",
        tally.mismatches.len(),
        tally
            .mismatches
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

// ---------------------------------------------------------------------------------------
// The harness's own logic.

#[cfg(test)]
mod harness {
    use super::*;

    fn rows(v: &[(&str, Option<&str>)]) -> Outcome {
        Outcome::Rows {
            names: vec!["a".into(), "b".into()],
            rows: v
                .iter()
                .map(|(a, b)| vec![Some(a.to_string()), b.map(str::to_string)])
                .collect(),
            count: None,
        }
    }

    fn err(code: &str) -> Outcome {
        Outcome::Error {
            code: code.into(),
            message: "m".into(),
        }
    }

    #[test]
    fn comparison_tells_agreement_refusal_and_mismatch_apart() {
        let t = [Type::INT4, Type::FLOAT8];
        let a = || rows(&[("1", Some("0.1")), ("2", Some("0.2"))]);
        let swapped = || rows(&[("2", Some("0.2")), ("1", Some("0.1"))]);
        assert!(matches!(
            compare(&t, false, a(), swapped()),
            Verdict::Agree { close: false }
        ));
        assert!(matches!(
            compare(&t, true, a(), swapped()),
            Verdict::Mismatch(_)
        ));
        let near = || rows(&[("1", Some("0.10000000000000002")), ("2", Some("0.2"))]);
        assert!(matches!(
            compare(&t, true, a(), near()),
            Verdict::Agree { close: true }
        ));
        let off = rows(&[("1", Some("0.1001")), ("2", Some("0.2"))]);
        assert!(matches!(compare(&t, true, a(), off), Verdict::Mismatch(_)));
        let null = rows(&[("1", None), ("2", Some("0.2"))]);
        assert!(matches!(compare(&t, true, a(), null), Verdict::Mismatch(_)));
        // Exact types get no tolerance.
        let exact = [Type::INT4, Type::NUMERIC];
        assert!(matches!(
            compare(&exact, true, a(), near()),
            Verdict::Mismatch(_)
        ));
        let nan = || rows(&[("1", Some("NaN"))]);
        assert!(matches!(
            compare(&t, true, nan(), nan()),
            Verdict::Agree { .. }
        ));
        assert!(matches!(
            compare(&t, true, nan(), rows(&[("1", Some("Infinity"))])),
            Verdict::Mismatch(_)
        ));
        assert!(matches!(
            compare(&t, true, a(), rows(&[("1", Some("0.1"))])),
            Verdict::Mismatch(_)
        ));
        assert!(matches!(
            compare(&t, true, err("22012"), err("22012")),
            Verdict::BothError(_)
        ));
        assert!(matches!(
            compare(&t, true, err("22012"), err("22003")),
            Verdict::Mismatch(_)
        ));
        assert!(matches!(
            compare(&t, true, a(), err("0A000")),
            Verdict::Refused(_)
        ));
        assert!(matches!(
            compare(&t, true, err("22012"), err("0A000")),
            Verdict::Refused(_)
        ));
        assert!(matches!(
            compare(&t, true, a(), err("XX000")),
            Verdict::Mismatch(_)
        ));
        assert!(matches!(
            compare(&t, true, err("22012"), a()),
            Verdict::Mismatch(_)
        ));
        let renamed = Outcome::Rows {
            names: vec!["a".into(), "c".into()],
            rows: vec![
                vec![Some("1".into()), Some("0.1".into())],
                vec![Some("2".into()), Some("0.2".into())],
            ],
            count: None,
        };
        assert!(
            matches!(compare(&t, true, a(), renamed), Verdict::Mismatch(m) if m.starts_with("column names"))
        );
    }

    #[test]
    fn top_level_order_by_is_found_outside_parentheses_and_quotes() {
        assert!(has_top_level_order_by("select a from t order by a"));
        assert!(!has_top_level_order_by(
            "select string_agg(a, ',' order by a) from t"
        ));
        assert!(!has_top_level_order_by("select 'order by' from t"));
        assert!(has_top_level_order_by(
            "select (a) from t where b = 'x' ORDER BY 1"
        ));
    }

    /// Same seed, same queries; LIMIT/OFFSET and DISTINCT ON only under an ORDER BY that
    /// ends with a unique key or all grouping keys (so the compared order is total).
    #[test]
    fn generator_is_deterministic_and_orders_what_it_limits() {
        let (defs, pools) = (tables(), pools());
        for i in 0..3000 {
            let t = &defs[i % 2];
            let q = generate(11, i, t, &pools);
            assert_eq!(q.sql, generate(11, i, t, &pools).sql);
            let top_limit = q.sql.rsplit(')').next().unwrap().contains(" limit ")
                && q.category != Category::Aggregate;
            if top_limit || q.sql.contains(" offset ") && q.category != Category::Aggregate {
                assert!(q.ordered && has_top_level_order_by(&q.sql), "{}", q.sql);
            }
            if q.category == Category::DistinctOn || q.category == Category::Plain && q.ordered {
                assert!(q.sql.contains("id"), "{}", q.sql);
            }
            let placeholders = (1..=q.params.len()).all(|n| q.sql.contains(&format!("${n}")));
            assert!(
                placeholders && (q.extended || q.params.is_empty()),
                "{}",
                q.sql
            );
        }
    }
}
