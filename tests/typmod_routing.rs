//! Rows are routed by the value PostgreSQL stores, not by the value the client wrote.
//!
//! A distribution column with a type modifier (`numeric(10,1)`, `timestamp(0)`,
//! `timestamptz(0)`, `time(0)`, `interval(0)`, `varchar(3)`, `char(4)`, a domain over
//! `numeric(6,1)`) stores `1.54` as `1.5`, `10:00:00.6` as `10:00:01`, `'ab   '` as
//! `'ab '`. The same rows go into a distributed table through pgshard and into a plain
//! PostgreSQL (the oracle) through every write path: single-row INSERT, multi-row
//! INSERT, a prepared INSERT with text and with binary parameters, COPY text, CSV and
//! binary, INSERT ... SELECT from a local table (through the coordinator) and from a
//! co-located distributed table whose column has another typmod. Every stored value is
//! then looked up by equality (simple protocol and a `$1` parameter), updated and
//! deleted by equality: counts and rows must equal the oracle's.
//!
//! Also: min/max/ORDER BY/DISTINCT/GROUP BY over a column with a non-default collation
//! across shards, the refusal of a nondeterministic collation, and two Citus functions
//! (`master_get_active_worker_nodes()` in FROM, `get_shard_id_for_distribution_column`
//! on a reference table).

mod common;

use bytes::{BufMut, Bytes, BytesMut};
use common::{cluster, plain_postgres};
use futures_util::{pin_mut, SinkExt};
use std::error::Error;
use tokio_postgres::types::{to_sql_checked, Format, IsNull, ToSql, Type};
use tokio_postgres::{Client, SimpleQueryMessage};

type Rows = Vec<Vec<Option<String>>>;

/// A parameter sent in text format, whatever its type.
#[derive(Debug)]
struct TextParam(String);

impl ToSql for TextParam {
    fn to_sql(&self, _: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        out.put_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }
    fn accepts(_: &Type) -> bool {
        true
    }
    fn encode_format(&self, _: &Type) -> Format {
        Format::Text
    }
    to_sql_checked!();
}

/// A parameter sent in binary format as these exact bytes.
#[derive(Debug)]
struct BinaryParam(Vec<u8>);

impl ToSql for BinaryParam {
    fn to_sql(&self, _: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        out.put_slice(&self.0);
        Ok(IsNull::No)
    }
    fn accepts(_: &Type) -> bool {
        true
    }
    to_sql_checked!();
}

/// Days from 2000-01-01 to y-m-d (proleptic Gregorian).
fn days_since_2000(y: i64, m: i64, d: i64) -> i64 {
    let civil = |y: i64, m: i64, d: i64| {
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146097 + doe
    };
    civil(y, m, d) - civil(2000, 1, 1)
}

/// numeric's binary form of a plain decimal ("-1.54").
fn numeric_binary(s: &str) -> Vec<u8> {
    let (neg, s) = s.strip_prefix('-').map_or((false, s), |r| (true, r));
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let dscale = frac.len() as i16;
    // Pad the integer part to whole base-10000 groups on the left, the fraction on the right.
    let int_pad = format!("{}{int}", "0".repeat((4 - int.len() % 4) % 4));
    let frac_pad = format!("{frac}{}", "0".repeat((4 - frac.len() % 4) % 4));
    let mut digits: Vec<i16> = Vec::new();
    for c in int_pad
        .as_bytes()
        .chunks(4)
        .chain(frac_pad.as_bytes().chunks(4))
    {
        digits.push(std::str::from_utf8(c).unwrap().parse().unwrap());
    }
    let mut weight = (int_pad.len() / 4) as i16 - 1;
    while digits.first() == Some(&0) {
        digits.remove(0);
        weight -= 1;
    }
    while digits.last() == Some(&0) {
        digits.pop();
    }
    if digits.is_empty() {
        weight = 0;
    }
    let mut out = Vec::new();
    out.extend_from_slice(&(digits.len() as i16).to_be_bytes());
    out.extend_from_slice(&weight.to_be_bytes());
    out.extend_from_slice(&(if neg { 0x4000u16 } else { 0 }).to_be_bytes());
    out.extend_from_slice(&dscale.to_be_bytes());
    for d in digits {
        out.extend_from_slice(&d.to_be_bytes());
    }
    out
}

/// One value as text and in its type's binary form.
struct Value {
    text: &'static str,
    binary: Vec<u8>,
}

/// A distribution column type with a typmod, and values the typmod changes.
struct Case {
    table: &'static str,
    /// Column type on both servers.
    column_type: &'static str,
    /// The same type without its typmod (source tables of INSERT ... SELECT).
    bare_type: &'static str,
    values: Vec<Value>,
}

fn micros(h: i64, m: i64, s: i64, us: i64) -> i64 {
    ((h * 60 + m) * 60 + s) * 1_000_000 + us
}

fn cases() -> Vec<Case> {
    let num = |t: &'static str| Value {
        text: t,
        binary: numeric_binary(t),
    };
    let ts = |t: &'static str, h, m, s, us| Value {
        text: t,
        binary: (days_since_2000(2020, 1, 1) * 86_400_000_000 + micros(h, m, s, us))
            .to_be_bytes()
            .to_vec(),
    };
    let time = |t: &'static str, h, m, s, us| Value {
        text: t,
        binary: micros(h, m, s, us).to_be_bytes().to_vec(),
    };
    let interval = |t: &'static str, us: i64, days: i32| Value {
        text: t,
        binary: [
            &us.to_be_bytes()[..],
            &days.to_be_bytes(),
            &0i32.to_be_bytes(),
        ]
        .concat(),
    };
    let text = |t: &'static str| Value {
        text: t,
        binary: t.as_bytes().to_vec(),
    };
    let numerics = || {
        ["1.54", "1.46", "1.5", "1.55", "-0.05", "2.45", "12345.67"]
            .into_iter()
            .map(num)
            .collect::<Vec<_>>()
    };
    vec![
        Case {
            table: "tm_numeric",
            column_type: "numeric(10,1)",
            bare_type: "numeric",
            values: numerics(),
        },
        Case {
            table: "tm_domain",
            column_type: "tm_dnum",
            bare_type: "numeric",
            values: numerics(),
        },
        Case {
            table: "tm_timestamp",
            column_type: "timestamp(0)",
            bare_type: "timestamp",
            values: vec![
                ts("2020-01-01 10:00:00.4", 10, 0, 0, 400_000),
                ts("2020-01-01 10:00:00.6", 10, 0, 0, 600_000),
                ts("2020-01-01 10:00:00", 10, 0, 0, 0),
                ts("2020-01-01 10:00:01", 10, 0, 1, 0),
                ts("2020-01-01 23:59:59.5", 23, 59, 59, 500_000),
            ],
        },
        Case {
            table: "tm_timestamptz",
            column_type: "timestamptz(0)",
            bare_type: "timestamptz",
            values: vec![
                ts("2020-01-01 10:00:00.4+00", 10, 0, 0, 400_000),
                ts("2020-01-01 10:00:00.6+00", 10, 0, 0, 600_000),
                ts("2020-01-01 10:00:00+00", 10, 0, 0, 0),
                ts("2020-01-01 10:00:01+00", 10, 0, 1, 0),
            ],
        },
        Case {
            table: "tm_time",
            column_type: "time(0)",
            bare_type: "time",
            values: vec![
                time("10:00:00.4", 10, 0, 0, 400_000),
                time("10:00:00.6", 10, 0, 0, 600_000),
                time("10:00:00", 10, 0, 0, 0),
                time("10:00:01", 10, 0, 1, 0),
            ],
        },
        Case {
            table: "tm_interval",
            column_type: "interval(0)",
            bare_type: "interval",
            values: vec![
                interval("1 second 400 milliseconds", 1_400_000, 0),
                interval("1 second", 1_000_000, 0),
                interval("1 day 00:00:00.6", 600_000, 1),
                interval("1 day 00:00:01", 1_000_000, 1),
            ],
        },
        Case {
            table: "tm_varchar",
            column_type: "varchar(3)",
            bare_type: "varchar",
            values: vec![
                text("ab   "),
                text("ab "),
                text("ab"),
                text("abc  "),
                text("abc"),
            ],
        },
        Case {
            table: "tm_char",
            column_type: "char(4)",
            bare_type: "bpchar",
            values: vec![text("ab     "), text("ab"), text("ab  "), text("abcd   ")],
        },
    ]
}

async fn rows(c: &Client, sql: &str) -> Result<Rows, tokio_postgres::Error> {
    let mut out = Vec::new();
    for m in c.simple_query(sql).await? {
        if let SimpleQueryMessage::Row(r) = m {
            out.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect());
        }
    }
    Ok(out)
}

async fn sorted_rows(c: &Client, sql: &str) -> Rows {
    let mut r = rows(c, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    r.sort();
    r
}

/// Runs `sql` on both servers; both must succeed with the same rows (sorted).
async fn same(shard: &Client, plain: &Client, sql: &str) -> Rows {
    let a = sorted_rows(shard, sql).await;
    let b = sorted_rows(plain, sql).await;
    assert_eq!(a, b, "pgshard and PostgreSQL differ on: {sql}");
    b
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

async fn copy_in(c: &Client, sql: &str, data: &[u8]) {
    let sink = c
        .copy_in(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    pin_mut!(sink);
    sink.send(Bytes::copy_from_slice(data)).await.unwrap();
    sink.as_mut()
        .finish()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
}

/// Writes every value through every path into `table` on one server. `x` numbers the
/// rows: path * 100 + value index.
async fn write_all_paths(c: &Client, case: &Case, table: &str, distributed: bool) {
    // 1. single-row INSERT, simple protocol.
    for (i, v) in case.values.iter().enumerate() {
        c.batch_execute(&format!(
            "INSERT INTO {table} VALUES ({}, {})",
            quote(v.text),
            100 + i
        ))
        .await
        .unwrap_or_else(|e| panic!("{table}: {e:?}"));
    }
    // 2. multi-row INSERT, the values cast to the bare type first.
    let tuples: Vec<String> = case
        .values
        .iter()
        .enumerate()
        .map(|(i, v)| format!("({}::{}, {})", quote(v.text), case.bare_type, 200 + i))
        .collect();
    c.batch_execute(&format!("INSERT INTO {table} VALUES {}", tuples.join(", ")))
        .await
        .unwrap_or_else(|e| panic!("{table}: {e:?}"));
    // 3./4. prepared INSERT, parameters in text and in binary format. Not for the
    // domain: its oid differs between the nodes, and a statement sent to a worker with
    // the coordinator node's oid fails there (domains are not yet created by pgshard).
    if !case.table.ends_with("_domain") {
        prepared_inserts(c, case, table).await;
    }
    write_bulk_paths(c, case, table, distributed).await;
}

async fn prepared_inserts(c: &Client, case: &Case, table: &str) {
    let insert = c
        .prepare(&format!("INSERT INTO {table} VALUES ($1, $2)"))
        .await
        .unwrap();
    for (i, v) in case.values.iter().enumerate() {
        c.execute(&insert, &[&TextParam(v.text.into()), &(300 + i as i32)])
            .await
            .unwrap_or_else(|e| panic!("{table} text parameter {}: {e:?}", v.text));
        c.execute(
            &insert,
            &[&BinaryParam(v.binary.clone()), &(400 + i as i32)],
        )
        .await
        .unwrap_or_else(|e| panic!("{table} binary parameter {}: {e:?}", v.text));
    }
}

/// COPY in three formats and INSERT ... SELECT from two sources.
async fn write_bulk_paths(c: &Client, case: &Case, table: &str, distributed: bool) {
    // 5. COPY text, 6. COPY CSV, 7. COPY binary.
    let text: String = case
        .values
        .iter()
        .enumerate()
        .map(|(i, v)| format!("{}\t{}\n", v.text, 500 + i))
        .collect();
    copy_in(c, &format!("COPY {table} FROM STDIN"), text.as_bytes()).await;
    let csv: String = case
        .values
        .iter()
        .enumerate()
        .map(|(i, v)| format!("\"{}\",{}\n", v.text, 600 + i))
        .collect();
    copy_in(
        c,
        &format!("COPY {table} FROM STDIN (FORMAT csv)"),
        csv.as_bytes(),
    )
    .await;
    let mut bin = b"PGCOPY\n\xff\r\n\0".to_vec();
    bin.extend_from_slice(&[0; 8]);
    for (i, v) in case.values.iter().enumerate() {
        bin.extend_from_slice(&2i16.to_be_bytes());
        bin.extend_from_slice(&(v.binary.len() as i32).to_be_bytes());
        bin.extend_from_slice(&v.binary);
        bin.extend_from_slice(&4i32.to_be_bytes());
        bin.extend_from_slice(&(700 + i as i32).to_be_bytes());
    }
    bin.extend_from_slice(&(-1i16).to_be_bytes());
    copy_in(c, &format!("COPY {table} FROM STDIN (FORMAT binary)"), &bin).await;
    // 8. INSERT ... SELECT from a local table of the bare type (through the coordinator).
    let local = format!("{table}_local");
    c.batch_execute(&format!(
        "DROP TABLE IF EXISTS {local}; CREATE TABLE {local} (v {}, x int)",
        case.bare_type
    ))
    .await
    .unwrap();
    for (i, v) in case.values.iter().enumerate() {
        c.batch_execute(&format!(
            "INSERT INTO {local} VALUES ({}, {})",
            quote(v.text),
            800 + i
        ))
        .await
        .unwrap();
    }
    c.batch_execute(&format!("INSERT INTO {table} SELECT v, x FROM {local}"))
        .await
        .unwrap_or_else(|e| panic!("{table} INSERT ... SELECT local: {e:?}"));
    // 9. INSERT ... SELECT from a distributed table co-located with it whose column has
    //    no typmod (the values are coerced on the way: not shard by shard).
    let source = format!("{table}_src");
    c.batch_execute(&format!(
        "DROP TABLE IF EXISTS {source}; CREATE TABLE {source} (v {}, x int)",
        case.bare_type
    ))
    .await
    .unwrap();
    if distributed {
        c.batch_execute(&format!(
            "SELECT create_distributed_table('{source}', 'v', colocate_with => '{table}')"
        ))
        .await
        .unwrap_or_else(|e| panic!("{source}: {e:?}"));
    }
    let tuples: Vec<String> = case
        .values
        .iter()
        .enumerate()
        .map(|(i, v)| format!("({}, {})", quote(v.text), 900 + i))
        .collect();
    c.batch_execute(&format!(
        "INSERT INTO {source} VALUES {}",
        tuples.join(", ")
    ))
    .await
    .unwrap();
    c.batch_execute(&format!("INSERT INTO {table} SELECT v, x FROM {source}"))
        .await
        .unwrap_or_else(|e| panic!("{table} INSERT ... SELECT distributed: {e:?}"));
}

async fn check_case(case: &Case) {
    let cl = cluster();
    let shard = cl.client().await;
    let plain = plain_postgres().client().await;
    let t = case.table;
    let create = format!(
        "DROP TABLE IF EXISTS {t}, {t}_src, {t}_local; CREATE TABLE {t} (v {}, x int)",
        case.column_type
    );
    shard.batch_execute(&create).await.unwrap();
    plain.batch_execute(&create).await.unwrap();
    shard
        .batch_execute(&format!(
            "SET citus.shard_count = 16; COMMIT; SELECT create_distributed_table('{t}', 'v', colocate_with => 'none')"
        ))
        .await
        .unwrap_or_else(|e| panic!("{t}: {e:?}"));
    write_all_paths(&shard, case, t, true).await;
    write_all_paths(&plain, case, t, false).await;
    same(&shard, &plain, &format!("SELECT v::text, x FROM {t}")).await;
    // Every stored value, looked up by equality.
    let stored = same(&shard, &plain, &format!("SELECT DISTINCT v::text FROM {t}")).await;
    let by_param_shard = shard
        .prepare(&format!("SELECT count(*) FROM {t} WHERE v = $1"))
        .await
        .unwrap();
    let by_param_plain = plain
        .prepare(&format!("SELECT count(*) FROM {t} WHERE v = $1"))
        .await
        .unwrap();
    let lookups = stored
        .iter()
        .map(|r| r[0].clone().unwrap())
        .chain(case.values.iter().map(|v| v.text.to_string()));
    for s in lookups {
        same(
            &shard,
            &plain,
            &format!("SELECT count(*), sum(x) FROM {t} WHERE v = {}", quote(&s)),
        )
        .await;
        let a: i64 = shard
            .query_one(&by_param_shard, &[&TextParam(s.clone())])
            .await
            .unwrap()
            .get(0);
        let b: i64 = plain
            .query_one(&by_param_plain, &[&TextParam(s.clone())])
            .await
            .unwrap()
            .get(0);
        assert_eq!(a, b, "{t}: WHERE v = $1 with {s:?}");
        let upd = format!("UPDATE {t} SET x = x + 10000 WHERE v = {}", quote(&s));
        let a = shard.execute(upd.as_str(), &[]).await.unwrap();
        let b = plain.execute(upd.as_str(), &[]).await.unwrap();
        assert_eq!(a, b, "{upd}");
    }
    same(&shard, &plain, &format!("SELECT v::text, x FROM {t}")).await;
    for r in &stored {
        let del = format!(
            "DELETE FROM {t} WHERE v = {}",
            quote(r[0].as_deref().unwrap())
        );
        let a = shard.execute(del.as_str(), &[]).await.unwrap();
        let b = plain.execute(del.as_str(), &[]).await.unwrap();
        assert_eq!(a, b, "{del}");
    }
    let left = same(&shard, &plain, &format!("SELECT count(*) FROM {t}")).await;
    assert_eq!(left, vec![vec![Some("0".to_string())]], "{t}");
}

/// The domain exists on every node (creating it on the workers is not pgshard's yet).
async fn create_domain() {
    let cl = cluster();
    let sql = "DROP DOMAIN IF EXISTS tm_dnum CASCADE; CREATE DOMAIN tm_dnum AS numeric(6,1)";
    for port in cl.worker_ports.iter().copied() {
        cl.direct(port).await.batch_execute(sql).await.unwrap();
    }
    cl.client().await.batch_execute(sql).await.unwrap();
    plain_postgres()
        .client()
        .await
        .batch_execute(sql)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_path_stores_where_lookups_find() {
    create_domain().await;
    for case in cases() {
        check_case(&case).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn combine_steps_keep_the_collation() {
    let cl = cluster();
    let shard = cl.client().await;
    let plain = plain_postgres().client().await;
    let setup = "DROP TABLE IF EXISTS tm_co2; \
        CREATE TABLE tm_co2 (v text COLLATE \"en-x-icu\", w varchar(10) COLLATE \"en-x-icu\", d text, k int); \
        INSERT INTO tm_co2 SELECT (ARRAY['a','B','b','Z','é','E','e','_x'])[1 + i % 8], \
                                  (ARRAY['a','B','b','Z'])[1 + i % 4], \
                                  (ARRAY['a','B','b','Z'])[1 + i % 4], i \
                           FROM generate_series(1, 64) AS s(i)";
    shard.batch_execute(setup).await.unwrap();
    plain.batch_execute(setup).await.unwrap();
    shard
        .batch_execute(
            "SET citus.shard_count = 8; COMMIT; SELECT create_distributed_table('tm_co2', 'k')",
        )
        .await
        .unwrap();
    for sql in [
        "SELECT min(v), max(v) FROM tm_co2",
        "SELECT min(w), max(w), count(*) FROM tm_co2",
        "SELECT min(v), max(v) FROM tm_co2 WHERE k > 10",
        "SELECT max(v || 'x'), min(upper(v)) FROM tm_co2",
        "SELECT min(d), max(d), min(d COLLATE \"en-x-icu\"), max(v COLLATE \"C\") FROM tm_co2",
        "SELECT min(t.v) FROM tm_co2 AS t",
    ] {
        same(&shard, &plain, sql).await;
    }
    // Order matters here: compare unsorted.
    for sql in [
        "SELECT v FROM tm_co2 ORDER BY v, k LIMIT 20",
        "SELECT DISTINCT v FROM tm_co2 ORDER BY v",
        "SELECT v, count(*) FROM tm_co2 GROUP BY v ORDER BY v",
        "SELECT v FROM tm_co2 ORDER BY v COLLATE \"C\", k LIMIT 10",
        "SELECT d FROM tm_co2 ORDER BY d, k LIMIT 10",
        "SELECT w, min(v) FROM tm_co2 GROUP BY w ORDER BY w",
    ] {
        let a = rows(&shard, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        let b = rows(&plain, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        assert_eq!(a, b, "{sql}");
    }
    // The default collation of the cluster and of the oracle are the same.
    same(&shard, &plain, "SHOW lc_collate").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nondeterministic_collations_are_refused() {
    let cl = cluster();
    let c = cl.client().await;
    // The collation exists on every node (creating it on the workers is not pgshard's yet).
    let coll = "DROP TABLE IF EXISTS tm_ci; DROP COLLATION IF EXISTS tm_ci_coll; \
         CREATE COLLATION tm_ci_coll (provider = icu, locale = 'und-u-ks-level2', deterministic = false)";
    for port in cl.worker_ports.iter().copied() {
        cl.direct(port).await.batch_execute(coll).await.unwrap();
    }
    c.batch_execute(coll).await.unwrap();
    c.batch_execute("CREATE TABLE tm_ci (v text COLLATE tm_ci_coll, k int)")
        .await
        .unwrap();
    let e = c
        .batch_execute("SELECT create_distributed_table('tm_ci', 'v')")
        .await
        .unwrap_err();
    let db = e.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "0A000");
    assert_eq!(
        db.message(),
        "Hash distributed partition columns may not use a non deterministic collation"
    );
    // Distributed by another column, it is fine; changing the distribution column's
    // collation afterwards is refused as any type change of it.
    c.batch_execute("SELECT create_distributed_table('tm_ci', 'k')")
        .await
        .unwrap();
    let e = c
        .batch_execute("ALTER TABLE tm_ci ALTER COLUMN k TYPE bigint")
        .await
        .unwrap_err();
    assert_eq!(e.code().unwrap().code(), "0A000");
    c.batch_execute("SELECT 1").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_functions_answer_as_citus() {
    let cl = cluster();
    let c = cl.client().await;
    for sql in [
        "SELECT * FROM master_get_active_worker_nodes()",
        "SELECT * FROM citus_get_active_worker_nodes() AS w",
        "SELECT node_name, node_port FROM master_get_active_worker_nodes() ORDER BY node_port",
    ] {
        let msgs = c
            .simple_query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        let got: Vec<(String, String)> = msgs
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => {
                    assert_eq!(r.columns()[0].name(), "node_name", "{sql}");
                    assert_eq!(r.columns()[1].name(), "node_port", "{sql}");
                    Some((r.get(0).unwrap().into(), r.get(1).unwrap().into()))
                }
                _ => None,
            })
            .collect();
        let mut ports: Vec<String> = got.iter().map(|(_, p)| p.clone()).collect();
        ports.sort();
        let mut want: Vec<String> = cl.worker_ports.iter().map(|p| p.to_string()).collect();
        want.sort();
        assert_eq!(ports, want, "{sql}");
    }
    c.batch_execute("DROP TABLE IF EXISTS tm_ref; CREATE TABLE tm_ref (a int)")
        .await
        .unwrap();
    c.batch_execute("SELECT create_reference_table('tm_ref')")
        .await
        .unwrap();
    let want = rows(
        &c,
        "SELECT shardid FROM pg_dist_shard WHERE logicalrelid = 'tm_ref'::regclass",
    )
    .await
    .unwrap();
    for sql in [
        "SELECT get_shard_id_for_distribution_column('tm_ref', 1)",
        "SELECT get_shard_id_for_distribution_column('tm_ref')",
    ] {
        let got = rows(&c, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        assert_eq!(got, want, "{sql}");
    }
}
