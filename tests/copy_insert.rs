//! Bulk writes into distributed tables through pgshard, compared with a plain PostgreSQL:
//! COPY FROM STDIN in text, CSV and binary (bytes made by the plain PostgreSQL's own
//! COPY TO STDOUT), COPY TO STDOUT back out, atomicity of a failing COPY and of W2's
//! 9-row INSERT across shards (checked on the workers' shards directly), multi-row
//! INSERT with RETURNING / ON CONFLICT and parameters, and `pgbench -M prepared` on W2.

mod common;

use bytes::Bytes;
use common::{cluster, plain_postgres, psql};
use futures_util::{pin_mut, SinkExt, StreamExt};
use tokio_postgres::{Client, SimpleQueryMessage};

const ROWS: i64 = 200_000;

/// Source rows with every character COPY must escape or quote, NULLs and numerics.
const SOURCE: &str = "create table if not exists src as select g::int as id, \
     md5(g::text) || case g % 5 when 0 then E'\\ttab' when 1 then ',comma\"quote' \
     when 2 then E'new\\nline' when 3 then E'back\\\\slash' else '' end as t, \
     g * 1.5 as n, case when g % 7 = 0 then null else g % 1000 end as j \
     from generate_series(1, 200000) g";

const TABLE_DEF: &str = "(id int, t text, n numeric, j int)";

async fn copy_out(c: &Client, sql: &str) -> Vec<u8> {
    let stream = c
        .copy_out(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    pin_mut!(stream);
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    out
}

async fn copy_in(c: &Client, sql: &str, data: &[u8]) -> Result<u64, tokio_postgres::Error> {
    let sink = c.copy_in(sql).await?;
    pin_mut!(sink);
    // Uneven pieces, so rows straddle CopyData messages.
    for piece in data.chunks(100_003) {
        sink.send(Bytes::copy_from_slice(piece)).await?;
    }
    sink.as_mut().finish().await
}

fn sorted_lines(data: &[u8]) -> Vec<String> {
    let mut lines: Vec<String> = String::from_utf8_lossy(data)
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

async fn simple(c: &Client, sql: &str) {
    c.batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
}

async fn distributed(c: &Client, name: &str, def: &str) {
    simple(
        c,
        &format!(
            "drop table if exists {name}; create table {name} {def}; commit; select create_distributed_table('{name}', 'id')"
        ),
    )
    .await;
}

/// Rows of `table` summed over every shard on every worker, read there directly.
async fn rows_on_workers(table: &str) -> i64 {
    let mut total = 0;
    for port in &cluster().worker_ports {
        let w = cluster().direct(*port).await;
        let shards = w
            .query(
                "select quote_ident(tablename) from pg_tables where tablename ~ ('^' || $1 || '_[0-9]+$')",
                &[&table],
            )
            .await
            .unwrap();
        for s in shards {
            let name: String = s.get(0);
            let n: i64 = w
                .query_one(&format!("select count(*) from {name}"), &[])
                .await
                .unwrap()
                .get(0);
            total += n;
        }
    }
    total
}

#[tokio::test]
async fn copy_from_stdin_in_every_format_matches_postgres() {
    let plain = plain_postgres().client().await;
    simple(&plain, SOURCE).await;
    let expected = sorted_lines(&copy_out(&plain, "COPY src TO STDOUT").await);
    assert_eq!(expected.len() as i64, ROWS);
    let c = cluster().client().await;
    for (name, out_opts, in_opts) in [
        ("cp_text", "", ""),
        (
            "cp_csv",
            "WITH (FORMAT csv, HEADER)",
            "WITH (FORMAT csv, HEADER)",
        ),
        (
            "cp_csv_semi",
            "WITH (FORMAT csv, DELIMITER ';', NULL 'NA', QUOTE '''', ESCAPE '\\', FORCE_QUOTE *)",
            "WITH (FORMAT csv, DELIMITER ';', NULL 'NA', QUOTE '''', ESCAPE '\\')",
        ),
        ("cp_binary", "WITH (FORMAT binary)", "WITH (FORMAT binary)"),
    ] {
        let data = copy_out(&plain, &format!("COPY src TO STDOUT {out_opts}")).await;
        distributed(&c, name, TABLE_DEF).await;
        let n = copy_in(&c, &format!("COPY {name} FROM STDIN {in_opts}"), &data)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(n as i64, ROWS, "{name}");
        assert_eq!(rows_on_workers(name).await, ROWS, "{name}");
        // COPY TO STDOUT through pgshard gives the same rows.
        let back = sorted_lines(&copy_out(&c, &format!("COPY {name} TO STDOUT")).await);
        assert!(
            back == expected,
            "{name}: contents differ from PostgreSQL's"
        );
    }
    // A column list in another order, and COPY (query) TO STDOUT in CSV with a header.
    let data = copy_out(&plain, "COPY src (j, id, t) TO STDOUT").await;
    distributed(&c, "cp_cols", TABLE_DEF).await;
    copy_in(&c, "COPY cp_cols (j, id, t) FROM STDIN", &data)
        .await
        .unwrap();
    let q = "COPY (SELECT id, t, j FROM {} WHERE id % 10 = 3) TO STDOUT WITH (FORMAT csv, HEADER)";
    let mine = copy_out(&c, &q.replace("{}", "cp_cols")).await;
    let theirs = copy_out(&plain, &q.replace("{}", "src")).await;
    assert!(mine.starts_with(b"id,t,j\n"));
    assert_eq!(sorted_lines(&mine), sorted_lines(&theirs));
    // Binary COPY TO through pgshard loads back into the plain PostgreSQL unchanged.
    let bin = copy_out(&c, "COPY cp_binary TO STDOUT WITH (FORMAT binary)").await;
    simple(
        &plain,
        &format!("drop table if exists back_bin; create table back_bin {TABLE_DEF}"),
    )
    .await;
    let n = copy_in(
        &plain,
        "COPY back_bin FROM STDIN WITH (FORMAT binary)",
        &bin,
    )
    .await
    .unwrap();
    assert_eq!(n as i64, ROWS);
    assert_eq!(
        sorted_lines(&copy_out(&plain, "COPY back_bin TO STDOUT").await),
        expected
    );
    // psql's \copy (simple protocol) with CSV and a header.
    let file = common::run_dir().join("rows.csv");
    std::fs::write(&file, b"id,t,n,j\n1,\"a,b\",1.5,\n2,\"multi\nline\",2,7\n").unwrap();
    distributed(&c, "cp_psql", TABLE_DEF).await;
    let out = psql(
        &cluster().pg_env(),
        &[
            "-c",
            &format!("\\copy cp_psql from '{}' csv header", file.display()),
        ],
    );
    assert_eq!(out, "COPY 2");
    let rows = c
        .query("select id, t, j from cp_psql where id = 2", &[])
        .await
        .unwrap();
    assert_eq!(rows[0].get::<_, String>(1), "multi\nline");
}

#[tokio::test]
async fn a_bad_row_halfway_loads_nothing_anywhere() {
    let c = cluster().client().await;
    for (name, opts, bad) in [
        ("cp_bad_text", "", "50000\tx\t1\tnot a number\n"),
        ("cp_bad_csv", "WITH (FORMAT csv)", "50000,x,1,1,extra\n"),
        ("cp_bad_key", "", "abc\tx\t1\t1\n"),
    ] {
        distributed(&c, name, TABLE_DEF).await;
        let mut data = Vec::new();
        let sep = if opts.is_empty() { "\t" } else { "," };
        for i in 1..100_000 {
            if i == 50_000 {
                data.extend_from_slice(bad.as_bytes());
            } else {
                data.extend_from_slice(format!("{i}{sep}row{sep}{i}{sep}{}\n", i % 10).as_bytes());
            }
        }
        let e = copy_in(&c, &format!("COPY {name} FROM STDIN {opts}"), &data)
            .await
            .expect_err(name);
        let db = e.as_db_error().unwrap_or_else(|| panic!("{name}: {e:?}"));
        assert!(
            db.code().code() == "22P02" || db.code().code() == "22P04",
            "{name}: {db:?}"
        );
        assert!(
            db.where_().unwrap_or("").contains("on node"),
            "{name}: the error names the shard and node: {db:?}"
        );
        assert_eq!(rows_on_workers(name).await, 0, "{name}");
        // The session goes on.
        let n: i64 = c
            .query_one(&format!("select count(*) from {name}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 0);
    }
    // NULL in the distribution column, inside a transaction block: the block fails.
    distributed(&c, "cp_null", TABLE_DEF).await;
    simple(&c, "begin").await;
    let e = copy_in(&c, "COPY cp_null FROM STDIN", b"1\ta\t1\t1\n\\N\tb\t1\t1\n")
        .await
        .unwrap_err();
    assert!(e
        .as_db_error()
        .unwrap()
        .message()
        .contains("cannot be NULL"));
    simple(&c, "rollback").await;
    // Inside a block that commits, the COPY joins it.
    simple(&c, "begin").await;
    copy_in(
        &c,
        "COPY cp_null FROM STDIN",
        b"1\ta\t1\t1\n2\tb\t1\t1\n3\tc\t1\t1\n",
    )
    .await
    .unwrap();
    c.execute("insert into cp_null (id) values (4)", &[])
        .await
        .unwrap();
    simple(&c, "rollback").await;
    assert_eq!(rows_on_workers("cp_null").await, 0);
    common::assert_no_prepared_xacts().await;
}

fn command_count(m: &[SimpleQueryMessage]) -> u64 {
    m.iter()
        .find_map(|x| match x {
            SimpleQueryMessage::CommandComplete(n) => Some(*n),
            _ => None,
        })
        .unwrap()
}

fn w2_statement(id: i64) -> String {
    let rows: Vec<String> = (0..9).map(|k| format!("({id}+{k})")).collect();
    format!("insert into w2t values {}", rows.join(","))
}

#[tokio::test]
async fn w2_nine_row_insert_is_atomic_across_shards() {
    let c = cluster().client().await;
    distributed(&c, "w2t", "(id int primary key, check (id <> 1000006))").await;
    // Succeeds: 9 rows on 9 different shards (32 shards, consecutive keys).
    let n = command_count(&c.simple_query(&w2_statement(2000)).await.unwrap());
    assert_eq!(n, 9);
    assert_eq!(rows_on_workers("w2t").await, 9);
    // A CHECK violation on one row: no shard keeps any of the 9.
    let e = c.simple_query(&w2_statement(1000000)).await.unwrap_err();
    assert_eq!(e.code().unwrap().code(), "23514");
    assert_eq!(rows_on_workers("w2t").await, 9);
    // A duplicate key, extended protocol with parameters: the same.
    let stmt =
        "insert into w2t values ($1),($1+1),($1+2),($1+3),($1+4),($1+5),($1+6),($1+7),($1+8)";
    let e = c.execute(stmt, &[&1996i32]).await.unwrap_err();
    assert_eq!(e.code().unwrap().code(), "23505");
    assert_eq!(rows_on_workers("w2t").await, 9);
    assert_eq!(c.execute(stmt, &[&3000i32]).await.unwrap(), 9);
    // 1PC on request.
    simple(&c, "set citus.multi_shard_commit_protocol = '1pc'").await;
    assert_eq!(c.execute(stmt, &[&4000i32]).await.unwrap(), 9);
    simple(&c, "reset citus.multi_shard_commit_protocol").await;
    assert_eq!(rows_on_workers("w2t").await, 27);
    // Inside a client block, rolled back.
    simple(&c, "begin").await;
    assert_eq!(c.execute(stmt, &[&5000i32]).await.unwrap(), 9);
    simple(&c, "rollback").await;
    assert_eq!(rows_on_workers("w2t").await, 27);
    common::assert_no_prepared_xacts().await;
}

#[tokio::test]
async fn multi_row_insert_returning_and_on_conflict_match_postgres() {
    let c = cluster().client().await;
    let plain = plain_postgres().client().await;
    distributed(&c, "mr", "(id int primary key, v text, n int default 7)").await;
    simple(
        &plain,
        "drop table if exists mr; create table mr (id int primary key, v text, n int default 7)",
    )
    .await;
    let statements = [
        "insert into mr values (1, 'a', 7), (2, 'b', 3), (3, 'c', 7), (40, 'd', 7), (2+3, 'e', 7) returning id, v, n",
        "insert into mr values (20, 'a'), (21, 'b', 3), (22, 'c') returning id",
        "insert into mr (v, id) values ('x', 1), ('y', 6), ('z', 7) on conflict (id) do update set v = excluded.v || mr.v returning *",
        "insert into mr (id, v) values (1, 'q'), (8, 'r'), (9, 's') on conflict do nothing returning id",
        "insert into mr (id, v) values (-(10), upper('t')), (11, 'u'), (DEFAULT + 0, 'w') returning id",
    ];
    for sql in statements {
        let mine = c.simple_query(sql).await;
        let theirs = plain.simple_query(sql).await;
        match (mine, theirs) {
            (Ok(m), Ok(t)) => {
                assert_eq!(
                    common::sorted_simple_rows(&m),
                    common::sorted_simple_rows(&t),
                    "{sql}"
                );
                assert_eq!(command_count(&m), command_count(&t), "{sql}");
            }
            (Err(m), Err(t)) => assert!(
                m.code() == t.code() || m.code().map(|c| c.code()) == Some("0A000"),
                "{sql}: {m:?} vs {t:?}"
            ),
            (m, t) => panic!("{sql}: pgshard {m:?} vs PostgreSQL {t:?}"),
        }
    }
    // Extended protocol with parameters and RETURNING.
    let sql =
        "insert into mr (id, v) values ($1, $2), ($3, $4), ($5::int + 1, 'p') returning id, v";
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
        [&100i32, &"h", &101i32, &"i", &101i32];
    let mut mine: Vec<(i32, String)> = c
        .query(sql, &params)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut theirs: Vec<(i32, String)> = plain
        .query(sql, &params)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    mine.sort();
    theirs.sort();
    assert_eq!(mine, theirs);
    let dump = "select id, v, n from mr";
    let mut a: Vec<(i32, Option<String>, Option<i32>)> = c
        .query(dump, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let mut b: Vec<(i32, Option<String>, Option<i32>)> = plain
        .query(dump, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    // NULL key: refused, nothing written.
    let e = c
        .simple_query("insert into mr (id, v) values (500, 'a'), (NULL, 'b')")
        .await
        .unwrap_err();
    assert_eq!(e.code().unwrap().code(), "23502");
    assert_eq!(
        c.query("select id from mr where id = 500", &[])
            .await
            .unwrap()
            .len(),
        0
    );
}

#[test]
fn pgbench_prepared_w2_runs_without_failures() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = cluster().client().await;
        distributed(&c, "w2b", "(id int)").await;
    });
    let script = common::run_dir().join("w2.sql");
    std::fs::write(
        &script,
        "\\set id random(1, 100000000)\n\
         insert into w2b values (:id),(:id+1),(:id+2),(:id+3),(:id+4),(:id+5),(:id+6),(:id+7),(:id+8);\n",
    )
    .unwrap();
    let out = std::process::Command::new("pgbench")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(cluster().pg_env())
        .args([
            "-n", "-M", "prepared", "-c", "4", "-j", "2", "-T", "3", "-f",
        ])
        .arg(&script)
        .output()
        .expect("pgbench");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("number of failed transactions: 0 "), "{text}");
    let done: i64 = text
        .lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
        .and_then(|v| v.split('/').next())
        .and_then(|v| v.trim().parse().ok())
        .expect("transactions processed");
    assert!(done > 0);
    rt.block_on(async {
        assert_eq!(rows_on_workers("w2b").await, done * 9);
    });
}

#[tokio::test]
async fn insert_select_between_colocated_tables_matches_postgres() {
    let c = cluster().client().await;
    let plain = plain_postgres().client().await;
    let mut data = Vec::new();
    for i in 1..=5000 {
        data.extend_from_slice(format!("{i}\tv{}\t{}\n", i % 17, i % 100).as_bytes());
    }
    for db in [&c, &plain] {
        simple(db, "drop table if exists isa; drop table if exists isb; create table isa (id int, v int, w text); create table isb (id int, t text, k int)").await;
    }
    for t in ["isa", "isb"] {
        simple(&c, &format!("select create_distributed_table('{t}', 'id')")).await;
    }
    copy_in(&c, "COPY isb FROM STDIN", &data).await.unwrap();
    copy_in(&plain, "COPY isb FROM STDIN", &data).await.unwrap();
    for sql in [
        "insert into isa (id, v, w) select id, k * 2, upper(t) from isb where id % 3 = 0",
        "insert into isa select b.id, b.k, b.t from isb b where b.k < 10",
        "insert into isa (w, id) select 'again', id from isa where v > 150",
    ] {
        let mine = c
            .execute(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        let theirs = plain.execute(sql, &[]).await.unwrap();
        assert_eq!(mine, theirs, "{sql}");
    }
    let mine = sorted_lines(&copy_out(&c, "COPY isa TO STDOUT").await);
    let theirs = sorted_lines(&copy_out(&plain, "COPY isa TO STDOUT").await);
    assert!(mine == theirs && !mine.is_empty());
    // Shapes that cannot be pushed down run through the coordinator.
    for sql in [
        "insert into isa (id, v) select k, id from isb",
        "insert into isa (id, v) select id, count(*) from isb group by id",
        "insert into isa (id) select id from isb order by id limit 5",
    ] {
        let mine = c
            .execute(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        assert_eq!(mine, plain.execute(sql, &[]).await.unwrap(), "{sql}");
    }
    let mine = sorted_lines(&copy_out(&c, "COPY isa TO STDOUT").await);
    let theirs = sorted_lines(&copy_out(&plain, "COPY isa TO STDOUT").await);
    assert!(mine == theirs, "after the shapes through the coordinator");
}

/// Row text of a whole table, sorted, through a client.
async fn table_lines(c: &Client, table: &str) -> Vec<String> {
    sorted_lines(&copy_out(c, &format!("COPY {table} TO STDOUT")).await)
}

#[tokio::test]
async fn insert_select_through_the_coordinator_matches_postgres() {
    let c = cluster().client().await;
    let plain = plain_postgres().client().await;
    let setup = "drop table if exists ivc, ivc_local, ivc_src; \
         create table ivc (id int, v int, n numeric(8,2), s varchar(6) default 'dflt', \
           d date default '2020-01-02', g int generated always as (v * 2) stored, \
           check (v is null or v <> 99999)); \
         create table ivc_local (a bigint, b numeric, c text); \
         insert into ivc_local select i, i * 1.25, 'l' || i from generate_series(1, 3000) i; \
         create table ivc_src (id int, v int)";
    simple(&c, setup).await;
    simple(&plain, setup).await;
    simple(&c, "select create_distributed_table('ivc', 'id')").await;
    simple(
        &c,
        "select create_distributed_table('ivc_src', 'id', colocate_with => 'none', shard_count => 5)",
    )
    .await;
    let src = "insert into ivc_src select i, i % 50 from generate_series(1, 2000) i";
    simple(&c, src).await;
    simple(&plain, src).await;
    let statements = [
        // No table: generate_series, assignment casts (numeric -> int rounds), defaults.
        "insert into ivc (id, v, n) select i, (i / 3.0)::numeric, i * 0.125 from generate_series(1, 4000) i",
        // A local table: bigint -> int, numeric -> numeric(8,2), text -> varchar(6).
        "insert into ivc (id, v, n, s) select a, a % 10, b, c from ivc_local where a % 2 = 0",
        // Distributed sources that are not co-located: another table, an aggregate.
        "insert into ivc (v, id) select id, v + 10000 from ivc_src",
        "insert into ivc (id, v, n) select v, count(*), sum(id) from ivc_src group by v",
        // NULLs, a key computed by an expression, and text needing escapes.
        "insert into ivc (id, v, s) select i * 7, null, E'a\tb\\c' from generate_series(1, 3) i",
    ];
    for sql in statements {
        let mine = c
            .execute(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        assert_eq!(mine, plain.execute(sql, &[]).await.unwrap(), "{sql}");
        assert_eq!(
            table_lines(&c, "ivc").await,
            table_lines(&plain, "ivc").await,
            "after {sql}"
        );
    }
    let before = table_lines(&c, "ivc").await;
    // Errors as PostgreSQL gives them, and nothing of the statement left anywhere.
    for (sql, code) in [
        (
            "insert into ivc (id, v) select i, 99999 * (i / 100) from generate_series(1, 100) i",
            "23514",
        ),
        (
            "insert into ivc (id, s) select i, 'toolongvalue' from generate_series(1, 5) i",
            "22001",
        ),
        (
            "insert into ivc (id, v) select i, i / (i - 50) from generate_series(1, 100) i",
            "22012",
        ),
        (
            "insert into ivc (id, v) select id, v, v from ivc_src",
            "42601",
        ),
    ] {
        let e = c.execute(sql, &[]).await.unwrap_err();
        assert_eq!(e.code().map(|c| c.code()), Some(code), "{sql}: {e:?}");
        let e = plain.execute(sql, &[]).await.unwrap_err();
        assert_eq!(e.code().map(|c| c.code()), Some(code), "plain: {sql}");
    }
    // A NULL distribution value (one PostgreSQL would take it): refused like Citus.
    let e = c
        .execute(
            "insert into ivc (id, v) select 1, 1 union all select null::int, 2",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(e.code().map(|c| c.code()), Some("23502"), "{e:?}");
    assert_eq!(table_lines(&c, "ivc").await, before);
    // In a block: the block's own local writes are read; ROLLBACK leaves nothing.
    let block = "begin; \
         insert into ivc_local values (100001, 1.5, 'blk'); \
         insert into ivc (id, v, s) select a, 1, c from ivc_local where a > 100000; ";
    simple(&c, &format!("{block} rollback")).await;
    assert_eq!(table_lines(&c, "ivc").await, before);
    simple(&c, &format!("{block} commit")).await;
    simple(&plain, &format!("{block} commit")).await;
    assert_eq!(
        table_lines(&c, "ivc").await,
        table_lines(&plain, "ivc").await
    );
    // Prepared, with parameters in the SELECT.
    let sql = "insert into ivc (id, v) select g, $1::int from generate_series(1, $2::int) g";
    for (v, n) in [(3, 10), (4, 20)] {
        let mine = c.execute(sql, &[&v, &n]).await.unwrap();
        assert_eq!(mine, plain.execute(sql, &[&v, &n]).await.unwrap());
    }
    assert_eq!(
        table_lines(&c, "ivc").await,
        table_lines(&plain, "ivc").await
    );
    // The coordinator node's shell stays empty; nothing stays prepared.
    let coord = cluster().direct(cluster().coordinator_port).await;
    let shell: i64 = coord
        .query_one("select count(*) from only ivc", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(shell, 0);
    common::assert_no_prepared_xacts().await;
    // ON CONFLICT and RETURNING when rows cannot go shard by shard (more in
    // tests/insert_select.rs).
    for sql in [
        "insert into ivc (id, v) select id, v from ivc_src on conflict do nothing",
        "insert into ivc (id, v) select i, i from generate_series(1, 3) i returning id",
    ] {
        let mine = c.execute(sql, &[]).await.unwrap();
        assert_eq!(mine, plain.execute(sql, &[]).await.unwrap(), "{sql}");
    }
    assert_eq!(
        table_lines(&c, "ivc").await,
        table_lines(&plain, "ivc").await
    );
}

#[tokio::test]
async fn large_loads_report_progress_to_the_client() {
    let c = cluster().client().await;
    simple(
        &c,
        "drop table if exists progress_t; create table progress_t (id int, v int); commit; \
         select create_distributed_table('progress_t', 'id')",
    )
    .await;
    let out = std::process::Command::new("psql")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(cluster().pg_env())
        .args(["-X", "-v", "ON_ERROR_STOP=1", "-c"])
        .arg("insert into progress_t select g, g % 7 from generate_series(1, 1100000) g")
        .output()
        .expect("running psql");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("NOTICE:  1000000 rows routed to the shards of \"progress_t\""),
        "no progress notice: {stderr}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "INSERT 0 1100000"
    );
    assert_eq!(rows_on_workers("progress_t").await, 1_100_000);
    simple(&c, "drop table progress_t").await;
}

/// INSERT into a local table of a SELECT reading distributed tables (a rollup into a
/// coordinator-node table): the rows, counts, RETURNING and ON CONFLICT outcomes of one
/// PostgreSQL, in autocommit, in a rolled-back block, and with a parameter.
#[tokio::test]
async fn insert_into_a_local_table_from_distributed_ones_matches_postgres() {
    let c = cluster().client().await;
    let plain = plain_postgres().client().await;
    let setup = "drop table if exists ilo_src, ilo_sum, ilo_copy; \
         create table ilo_src (id int, g int, v numeric(10,2), t text); \
         create table ilo_sum (g int primary key, total numeric, n bigint, note text default 'd'); \
         create table ilo_copy (id bigint, t varchar(20))";
    simple(&c, setup).await;
    simple(&plain, setup).await;
    simple(&c, "select create_distributed_table('ilo_src', 'id')").await;
    let load = "insert into ilo_src select i, i % 7, i * 1.25, case when i % 11 = 0 then null \
         else E'it''s\\t' || i end from generate_series(1, 1500) i";
    simple(&c, load).await;
    simple(&plain, load).await;
    let statements = [
        // Many rows in several chunks: numeric sums and counts exact, defaults filled.
        "insert into ilo_copy select id, t from ilo_src",
        "insert into ilo_sum (g, total, n) select g, sum(v), count(*) from ilo_src group by g",
        // ON CONFLICT, as written, over the rows.
        "insert into ilo_sum (g, total, n) select distinct g, 0, 1 from ilo_src where id < 30 \
         on conflict (g) do update set n = ilo_sum.n + excluded.n, note = 'again'",
        // DO NOTHING: rows already there (and repeated keys) are skipped.
        "insert into ilo_sum (g, total, n) select g, 0, 1 from ilo_src where id < 30 \
         on conflict (g) do nothing",
        // No rows at all.
        "insert into ilo_sum (g, total, n) select g, 0, 0 from ilo_src where id < 0",
    ];
    for sql in statements {
        let mine = c
            .execute(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        assert_eq!(mine, plain.execute(sql, &[]).await.unwrap(), "{sql}");
    }
    for table in ["ilo_sum", "ilo_copy"] {
        assert_eq!(
            table_lines(&c, table).await,
            table_lines(&plain, table).await,
            "{table}"
        );
    }
    // RETURNING rows, through the simple protocol and the extended one (a parameter).
    let returning = "insert into ilo_sum (g, total, n) select g + 100, max(v), min(id) \
         from ilo_src group by g returning g, total, n, note";
    let mine = common::sorted_simple_rows(&c.simple_query(returning).await.unwrap());
    assert_eq!(mine.len(), 7);
    assert_eq!(
        mine,
        common::sorted_simple_rows(&plain.simple_query(returning).await.unwrap())
    );
    let sql = "insert into ilo_sum (g, total, n) select g + 200, sum(v), count(*) from ilo_src \
         where id > $1 group by g returning g, total::text, n";
    let mut mine: Vec<(i32, String, i64)> = c
        .query(sql, &[&700i32])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let mut want: Vec<(i32, String, i64)> = plain
        .query(sql, &[&700i32])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    mine.sort();
    want.sort();
    assert_eq!(mine.len(), 7);
    assert_eq!(mine, want);
    assert_eq!(
        table_lines(&c, "ilo_sum").await,
        table_lines(&plain, "ilo_sum").await
    );
    // A block rolled back leaves nothing; one committed keeps its rows.
    let before = table_lines(&c, "ilo_copy").await;
    simple(
        &c,
        "begin; insert into ilo_copy select id * 10, t from ilo_src where id < 5; rollback",
    )
    .await;
    assert_eq!(table_lines(&c, "ilo_copy").await, before);
    let block = "begin; insert into ilo_copy select id * 10, t from ilo_src where id < 5; \
         insert into ilo_copy select id * 100, t from ilo_src where id < 3; commit";
    simple(&c, block).await;
    simple(&plain, block).await;
    assert_eq!(
        table_lines(&c, "ilo_copy").await,
        table_lines(&plain, "ilo_copy").await
    );
    // PostgreSQL's own errors: a too-long value, a duplicate key without ON CONFLICT.
    for (sql, code) in [
        (
            "insert into ilo_copy select id, repeat('x', 30) from ilo_src where id = 1",
            "22001",
        ),
        (
            "insert into ilo_sum (g, total, n) select g, 0, 0 from ilo_src",
            "23505",
        ),
        (
            "insert into ilo_sum (g, total, n) select g, 0, 1 from ilo_src where id < 30 \
             on conflict (g) do update set n = 0",
            "21000",
        ),
    ] {
        let e = c.execute(sql, &[]).await.unwrap_err();
        assert_eq!(e.code().map(|c| c.code()), Some(code), "{sql}: {e:?}");
    }
    assert_eq!(
        table_lines(&c, "ilo_copy").await,
        table_lines(&plain, "ilo_copy").await
    );
}

/// COPY FROM STDIN into a local table through the extended protocol (tokio-postgres sends
/// Bind, Execute, Sync, then the data, CopyDone and Sync): the data reaches the coordinator
/// node, one ReadyForQuery ends it, and the connection goes on. It hung before: pgshard
/// waited for the node's answer to the first Sync while the node waited for the data.
#[tokio::test]
async fn extended_protocol_copy_into_local_table() {
    let c = cluster().client().await;
    simple(
        &c,
        "drop table if exists copy_local_ext; create table copy_local_ext (id int, t text)",
    )
    .await;
    let data = b"1\tone\n2\ttwo\n3\t\\N\n";
    let n = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        copy_in(&c, "copy copy_local_ext from stdin", data),
    )
    .await
    .expect("COPY through the extended protocol answered")
    .unwrap();
    assert_eq!(n, 3);
    // A bad row: PostgreSQL's error, and the connection is usable after it.
    let err = copy_in(&c, "copy copy_local_ext from stdin", b"x\ty\n")
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("22P02"), "{err:?}");
    let rows = c
        .query("select id, t from copy_local_ext order by id", &[])
        .await
        .unwrap();
    let got: Vec<(i32, Option<String>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        got,
        vec![(1, Some("one".into())), (2, Some("two".into())), (3, None)]
    );
}
