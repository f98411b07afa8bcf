//! Rows written through pgshard land on exactly the shard Citus's formula names.
//!
//! For distributed tables keyed by int4, int8, text (non-ASCII and escaped literals
//! included) and uuid, with shard counts that are and are not powers of two, every row
//! inserted through pgshard with a single-row INSERT (simple protocol with literals,
//! extended protocol with literals, `$1` parameters, a reused prepared statement) must
//! be found, by querying every shard table on every worker directly, on the one shard
//! whose hash range (read from `pg_dist_shard` through pgshard, and equal to
//! `pgshard::sharding::ranges::all_ranges`) holds the key's hash
//! (`pgshard::sharding::hash`, checked against the worker's own hash function), on the
//! worker `pg_dist_shard_placement` names, and nowhere else. SELECT, UPDATE and DELETE by
//! key through pgshard then touch exactly that row (CommandComplete counts, worker
//! contents).

mod common;

use bytes::BytesMut;
use common::cluster;
use pgshard::sharding::hash::{hash_int4, hash_int8, hash_text, hash_uuid};
use pgshard::sharding::ranges::{all_ranges, uniform_index};
use std::collections::BTreeMap;
use std::error::Error;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};
use tokio_postgres::{Client, SimpleQueryMessage};

/// A uuid parameter in binary form (tokio-postgres has no uuid type without a feature).
#[derive(Debug, Clone, Copy)]
struct Uuid([u8; 16]);

impl ToSql for Uuid {
    fn to_sql(&self, _: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        out.extend_from_slice(&self.0);
        Ok(IsNull::No)
    }
    fn accepts(ty: &Type) -> bool {
        *ty == Type::UUID
    }
    to_sql_checked!();
}

fn parse_uuid(s: &str) -> [u8; 16] {
    let hex: Vec<u8> = s
        .bytes()
        .filter(|b| b.is_ascii_hexdigit())
        .map(|b| (b as char).to_digit(16).unwrap() as u8)
        .collect();
    assert_eq!(hex.len(), 32, "uuid {s}");
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        out[i] = pair[0] << 4 | pair[1];
    }
    out
}

#[derive(Debug, Clone)]
enum Key {
    I4(i32),
    I8(i64),
    Text(String),
    Uuid([u8; 16]),
}

impl Key {
    /// How the worker prints `k::text`.
    fn text(&self) -> String {
        match self {
            Key::I4(v) => v.to_string(),
            Key::I8(v) => v.to_string(),
            Key::Text(s) => s.clone(),
            Key::Uuid(b) => {
                let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
                format!(
                    "{}-{}-{}-{}-{}",
                    &h[0..8],
                    &h[8..12],
                    &h[12..16],
                    &h[16..20],
                    &h[20..32]
                )
            }
        }
    }

    /// A plain SQL literal of the key.
    fn literal(&self) -> String {
        match self {
            Key::I4(v) => v.to_string(),
            Key::I8(v) => v.to_string(),
            Key::Text(s) => format!("'{}'", s.replace('\'', "''")),
            Key::Uuid(_) => format!("'{}'", self.text()),
        }
    }

    /// PostgreSQL's hash of the key (the default hash opclass of its type).
    fn hash(&self) -> i32 {
        match self {
            Key::I4(v) => hash_int4(*v),
            Key::I8(v) => hash_int8(*v),
            Key::Text(s) => hash_text(s.as_bytes()),
            Key::Uuid(b) => hash_uuid(b),
        }
    }

    fn param(&self) -> Box<dyn ToSql + Sync + Send> {
        match self {
            Key::I4(v) => Box::new(*v),
            Key::I8(v) => Box::new(*v),
            Key::Text(s) => Box::new(s.clone()),
            Key::Uuid(b) => Box::new(Uuid(*b)),
        }
    }
}

/// One shard of a table as the catalog describes it.
#[derive(Debug, Clone, PartialEq)]
struct Shard {
    id: i64,
    min: i32,
    max: i32,
    port: u16,
}

/// The table's shards sorted by hash range, read through pgshard.
async fn shards_of(c: &Client, table: &str) -> Vec<Shard> {
    let rows = c
        .query(
            &format!(
                "select s.shardid, s.shardminvalue, s.shardmaxvalue, p.nodeport \
                 from pg_dist_shard s join pg_dist_shard_placement p on p.shardid = s.shardid \
                 where s.logicalrelid = '{table}'::regclass \
                 order by s.shardminvalue::int"
            ),
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("catalog of {table}: {e}"));
    rows.iter()
        .map(|r| Shard {
            id: r.get(0),
            min: r.get::<_, String>(1).parse().unwrap(),
            max: r.get::<_, String>(2).parse().unwrap(),
            port: r.get::<_, i32>(3) as u16,
        })
        .collect()
}

/// What the workers hold: key text -> [(shardid, worker port, worker's hash, v)].
type Found = BTreeMap<String, Vec<(i64, u16, i32, String)>>;

async fn scan_workers(table: &str, hash_fn: &str) -> Found {
    let c = cluster();
    let mut found = Found::new();
    for &port in &c.worker_ports {
        let w = c.direct(port).await;
        let tables: Vec<String> = w
            .query(
                "select relname::text from pg_class where relkind = 'r' and relname ~ $1",
                &[&format!("^{table}_[0-9]+$")],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        for t in tables {
            let id: i64 = t[table.len() + 1..].parse().unwrap();
            let rows = w
                .query(&format!("select k::text, {hash_fn}(k), v from {t}"), &[])
                .await
                .unwrap_or_else(|e| panic!("{t} on {port}: {e}"));
            for r in rows {
                found
                    .entry(r.get(0))
                    .or_default()
                    .push((id, port, r.get(1), r.get(2)));
            }
        }
    }
    found
}

/// The shard Citus puts `hash` on, with the bounds checked against Citus's formula.
fn expected_shard(shards: &[Shard], hash: i32) -> &Shard {
    let n = shards.len() as u32;
    let i = uniform_index(hash, n) as usize;
    let s = &shards[i];
    assert!(s.min <= hash && hash <= s.max, "hash {hash} not in {s:?}");
    s
}

/// Asserts that every key of `expected` (key -> v) is on its shard only, and that the
/// workers hold nothing else.
async fn check_placement(
    table: &str,
    hash_fn: &str,
    shards: &[Shard],
    keys: &[Key],
    expected: &BTreeMap<String, String>,
) {
    let found = scan_workers(table, hash_fn).await;
    for key in keys {
        let text = key.text();
        let Some(want_v) = expected.get(&text) else {
            continue;
        };
        let hash = key.hash();
        let s = expected_shard(shards, hash);
        let at = found
            .get(&text)
            .unwrap_or_else(|| panic!("{table}: key {text:?} is on no shard"));
        assert_eq!(
            at,
            &vec![(s.id, s.port, hash, want_v.clone())],
            "{table}: key {text:?} (hash {hash}) must be on shard {} at worker {} only",
            s.id,
            s.port
        );
    }
    let total: usize = found.values().map(Vec::len).sum();
    assert_eq!(
        total,
        expected.len(),
        "{table}: rows on the workers {found:?}"
    );
}

/// Creates `table (k <sql_type> primary key, v text)` with `shard_count` shards
/// through pgshard and checks the catalog against Citus's range formula.
async fn create(c: &Client, table: &str, sql_type: &str, shard_count: u32) -> Vec<Shard> {
    c.batch_execute(&format!(
        "drop table if exists {table}; \
         create table {table} (k {sql_type} primary key, v text not null)"
    ))
    .await
    .unwrap();
    c.batch_execute(&format!("set citus.shard_count = {shard_count}"))
        .await
        .unwrap();
    // Simple protocol: through the extended protocol this call is mis-described (see
    // driver_psycopg.rs, `create_distributed_table_through_extended_protocol`).
    c.simple_query(&format!("select create_distributed_table('{table}', 'k')"))
        .await
        .unwrap_or_else(|e| panic!("create_distributed_table {table}: {e}"));
    let shards = shards_of(c, table).await;
    let bounds: Vec<(i32, i32)> = shards.iter().map(|s| (s.min, s.max)).collect();
    assert_eq!(bounds, all_ranges(shard_count), "{table}: shard bounds");
    let ports: std::collections::BTreeSet<u16> = shards.iter().map(|s| s.port).collect();
    assert_eq!(
        ports.into_iter().collect::<Vec<_>>(),
        cluster().worker_ports,
        "{table}: placements on both workers"
    );
    shards
}

/// An error with its SQLSTATE and server message.
fn db(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{}: {}", d.code().code(), d.message()),
        None => e.to_string(),
    }
}

fn command_count(msgs: &[SimpleQueryMessage]) -> u64 {
    msgs.iter()
        .find_map(|m| match m {
            SimpleQueryMessage::CommandComplete(n) => Some(*n),
            _ => None,
        })
        .expect("CommandComplete")
}

/// Inserts every key with one single-row INSERT each, cycling through the ways a
/// client can send it; `literals` overrides the literal spelling of some keys.
async fn insert_all(
    c: &Client,
    table: &str,
    keys: &[Key],
    literals: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let insert = format!("insert into {table} (k, v) values ($1, $2)");
    let prepared = c.prepare(&insert).await.unwrap();
    let mut expected = BTreeMap::new();
    for (i, key) in keys.iter().enumerate() {
        let text = key.text();
        let lit = literals
            .get(&text)
            .cloned()
            .unwrap_or_else(|| key.literal());
        let how = if literals.contains_key(&text) {
            ["simple", "extended-literal"][i % 2]
        } else {
            ["simple", "extended-literal", "param", "prepared"][i % 4]
        };
        let v = format!("{how}-{i}");
        let n = match how {
            "simple" => command_count(
                &c.simple_query(&format!("insert into {table} (k, v) values ({lit}, '{v}')"))
                    .await
                    .unwrap_or_else(|e| panic!("{table} insert {lit}: {}", db(&e))),
            ),
            "extended-literal" => c
                .execute(
                    &format!("insert into {table} (k, v) values ({lit}, '{v}')"),
                    &[],
                )
                .await
                .unwrap_or_else(|e| panic!("{table} insert {lit}: {}", db(&e))),
            "param" => {
                let p = key.param();
                c.execute(&insert, &[p.as_ref() as &(dyn ToSql + Sync), &v])
                    .await
                    .unwrap_or_else(|e| panic!("{table} insert ${text:?}: {}", db(&e)))
            }
            _ => {
                let p = key.param();
                c.execute(&prepared, &[p.as_ref() as &(dyn ToSql + Sync), &v])
                    .await
                    .unwrap_or_else(|e| panic!("{table} insert prepared {text:?}: {}", db(&e)))
            }
        };
        assert_eq!(n, 1, "{table}: INSERT of {text:?} ({how}) count");
        expected.insert(text, v);
    }
    expected
}

/// SELECT / UPDATE / DELETE by key through pgshard touch exactly the one row.
async fn by_key(
    c: &Client,
    table: &str,
    hash_fn: &str,
    shards: &[Shard],
    keys: &[Key],
    expected: &mut BTreeMap<String, String>,
    missing: Key,
) {
    let select = c
        .prepare(&format!("select k::text, v from {table} where k = $1"))
        .await
        .unwrap();
    for key in keys {
        let p = key.param();
        let rows = c
            .query(&select, &[p.as_ref() as &(dyn ToSql + Sync)])
            .await
            .unwrap_or_else(|e| panic!("{table} select {:?}: {e}", key.text()));
        let got: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        assert_eq!(
            got,
            vec![(key.text(), expected[&key.text()].clone())],
            "{table}: select by key"
        );
        // The same with a literal, simple protocol.
        let msgs = c
            .simple_query(&format!(
                "select v from {table} where k = {}",
                key.literal()
            ))
            .await
            .unwrap();
        let vals: Vec<String> = msgs
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap().to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(
            vals,
            vec![expected[&key.text()].clone()],
            "{table}: literal select"
        );
    }

    // UPDATE two keys (one by parameter, one by literal), DELETE two others.
    let (a, b, d, e) = (&keys[0], &keys[1], &keys[2], &keys[3]);
    let update = format!("update {table} set v = 'updated' where k = $1");
    let pa = a.param();
    assert_eq!(
        c.execute(&update, &[pa.as_ref() as &(dyn ToSql + Sync)])
            .await
            .unwrap(),
        1,
        "{table}: UPDATE by parameter count"
    );
    expected.insert(a.text(), "updated".into());
    let msgs = c
        .simple_query(&format!(
            "update {table} set v = 'updated too' where k = {}",
            b.literal()
        ))
        .await
        .unwrap();
    assert_eq!(command_count(&msgs), 1, "{table}: UPDATE by literal count");
    expected.insert(b.text(), "updated too".into());

    let delete = format!("delete from {table} where k = $1");
    let pd = d.param();
    assert_eq!(
        c.execute(&delete, &[pd.as_ref() as &(dyn ToSql + Sync)])
            .await
            .unwrap(),
        1,
        "{table}: DELETE by parameter count"
    );
    assert_eq!(
        c.execute(&delete, &[pd.as_ref() as &(dyn ToSql + Sync)])
            .await
            .unwrap(),
        0,
        "{table}: second DELETE count"
    );
    expected.remove(&d.text());
    let msgs = c
        .simple_query(&format!("delete from {table} where k = {}", e.literal()))
        .await
        .unwrap();
    assert_eq!(command_count(&msgs), 1, "{table}: DELETE by literal count");
    expected.remove(&e.text());

    // A key that is not there: nothing selected, updated or deleted.
    let pm = missing.param();
    let pm = pm.as_ref() as &(dyn ToSql + Sync);
    assert!(c.query(&select, &[pm]).await.unwrap().is_empty());
    assert_eq!(c.execute(&update, &[pm]).await.unwrap(), 0);
    assert_eq!(c.execute(&delete, &[pm]).await.unwrap(), 0);

    // The workers agree: only those rows changed, and everything is still in place.
    check_placement(table, hash_fn, shards, keys, expected).await;
    let through: i64 = c
        .query_one(&format!("select count(*) from {table}"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        through as usize,
        expected.len(),
        "{table}: count via pgshard"
    );
}

async fn run(
    table: &str,
    sql_type: &str,
    hash_fn: &str,
    shard_count: u32,
    keys: Vec<Key>,
    literals: BTreeMap<String, String>,
    missing: Key,
) {
    let c = cluster().client().await;
    let shards = create(&c, table, sql_type, shard_count).await;
    let mut expected = insert_all(&c, table, &keys, &literals).await;
    assert_eq!(expected.len(), keys.len(), "{table}: keys must be distinct");
    // The keys must spread: a routing that sends everything to one shard is wrong.
    let used: std::collections::BTreeSet<i64> = keys
        .iter()
        .map(|k| expected_shard(&shards, k.hash()).id)
        .collect();
    assert!(used.len() > 1, "{table}: test keys hit one shard only");
    check_placement(table, hash_fn, &shards, &keys, &expected).await;
    by_key(&c, table, hash_fn, &shards, &keys, &mut expected, missing).await;
}

#[tokio::test]
async fn int4_keys() {
    let mut keys: Vec<Key> = [
        0,
        1,
        2,
        -1,
        42,
        7,
        1000,
        123_456,
        -98_765,
        i32::MAX,
        i32::MIN,
        i32::MIN + 1,
    ]
    .into_iter()
    .map(Key::I4)
    .collect();
    keys.extend((100..140).map(|i| Key::I4(i * 7919)));
    // Other spellings PostgreSQL accepts for an int column.
    let literals: BTreeMap<String, String> = [
        ("42", "'42'"),
        ("7", "7::int4"),
        ("1000", "1000::int"),
        ("-1", "'-1'::int4"),
    ]
    .into_iter()
    .map(|(k, l)| (k.to_string(), l.to_string()))
    .collect();
    run("r_int4", "int", "hashint4", 7, keys, literals, Key::I4(-5)).await;
}

#[tokio::test]
async fn int8_keys() {
    let mut keys: Vec<Key> = [
        0,
        -1,
        1,
        4_294_967_296,
        -4_294_967_297,
        i64::MAX,
        i64::MIN,
        i32::MAX as i64 + 1,
        i32::MIN as i64 - 1,
        1_000_000_000_000,
    ]
    .into_iter()
    .map(Key::I8)
    .collect();
    keys.extend((1..40).map(|i: i64| Key::I8(i * 1_000_000_007 * if i % 2 == 0 { -1 } else { 1 })));
    let literals: BTreeMap<String, String> = [("4294967296", "'4294967296'::bigint")]
        .into_iter()
        .map(|(k, l)| (k.to_string(), l.to_string()))
        .collect();
    run(
        "r_int8",
        "bigint",
        "hashint8",
        32,
        keys,
        literals,
        Key::I8(99),
    )
    .await;
}

#[tokio::test]
async fn text_keys() {
    let mut keys: Vec<Key> = [
        "alpha",
        "héllo wörld",
        "日本語のキー",
        "🐘 elephant",
        "O'Brien",
        "",
        " leading and trailing spaces ",
        "Ωμέγα",
        "a",
        "exactly twelve",
        "a somewhat longer key that spans several twelve-byte blocks of lookup3",
        "tab\there",
        "été",
        "back\\slash",
    ]
    .into_iter()
    .map(|s| Key::Text(s.to_string()))
    .collect();
    keys.extend((0..36).map(|i| Key::Text(format!("user-{i}-ключ"))));
    // Escape-string and Unicode-escape spellings of two keys.
    let literals: BTreeMap<String, String> =
        [("tab\there", r"E'tab\there'"), ("été", r"U&'\00e9t\00e9'")]
            .into_iter()
            .map(|(k, l)| (k.to_string(), l.to_string()))
            .collect();
    run(
        "r_text",
        "text",
        "hashtext",
        5,
        keys,
        literals,
        Key::Text("not there".into()),
    )
    .await;
}

#[tokio::test]
async fn uuid_keys() {
    let mut keys: Vec<Key> = [
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "00000000-0000-0000-0000-000000000000",
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
        "123e4567-e89b-12d3-a456-426614174000",
    ]
    .into_iter()
    .map(|s| Key::Uuid(parse_uuid(s)))
    .collect();
    keys.extend((0..40u32).map(|i| {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_be_bytes());
        b[12..].copy_from_slice(&(i * 31 + 7).to_le_bytes());
        b[6] = 0x40 | (i as u8 & 0x0f);
        Key::Uuid(b)
    }));
    // Upper case and braces are valid uuid input too.
    let literals: BTreeMap<String, String> = [
        (
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "'{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11}'",
        ),
        (
            "123e4567-e89b-12d3-a456-426614174000",
            "'123E4567E89B12D3A456426614174000'::uuid",
        ),
    ]
    .into_iter()
    .map(|(k, l)| (k.to_string(), l.to_string()))
    .collect();
    run(
        "r_uuid",
        "uuid",
        "uuid_hash",
        8,
        keys,
        literals,
        Key::Uuid(parse_uuid("11111111-2222-3333-4444-555555555555")),
    )
    .await;
}

/// Citus evaluates constant expressions in the distribution column of an INSERT on
/// the coordinator; PostgreSQL accepts all of these for an int column.
#[tokio::test]
async fn int4_keys_from_constant_expressions() {
    let keys: Vec<Key> = [7, 5, 8, -3].into_iter().map(Key::I4).collect();
    let literals: BTreeMap<String, String> =
        [("7", "+7"), ("5", "2+3"), ("8", "8.0"), ("-3", "-(3)")]
            .into_iter()
            .map(|(k, l)| (k.to_string(), l.to_string()))
            .collect();
    let c = cluster().client().await;
    let shards = create(&c, "r_int4_expr", "int", 4).await;
    let mut expected = BTreeMap::new();
    for key in &keys {
        let text = key.text();
        let lit = &literals[&text];
        for (i, sql) in [
            format!("insert into r_int4_expr (k, v) values ({lit}, 'x')"),
            format!("delete from r_int4_expr where k = {lit}"),
            format!("insert into r_int4_expr (k, v) values ({lit}, 'x')"),
        ]
        .iter()
        .enumerate()
        {
            let n = if i == 1 {
                c.execute(sql.as_str(), &[]).await
            } else {
                c.simple_query(sql).await.map(|m| command_count(&m))
            }
            .unwrap_or_else(|e| panic!("{sql}: {}", db(&e)));
            assert_eq!(n, 1, "{sql}");
        }
        expected.insert(text, "x".to_string());
    }
    check_placement("r_int4_expr", "hashint4", &shards, &keys, &expected).await;
}
