//! Statements pgshard reads itself, answered exactly as one plain PostgreSQL answers
//! them: every message of the answer compared, errors and warnings with all their
//! fields (SQLSTATE, message, position, hint, detail).
//!
//! - Syntax errors pgshard's parser catches: PostgreSQL's own error, position (psql's
//!   `LINE 1: ... ^`) and hint included, in the simple and the extended protocol, on
//!   distributed, local and no tables; nothing of a string that does not parse runs
//!   (no row reaches a shard or the shell of a distributed table).
//! - `standard_conforming_strings = off` (with `backslash_quote`, `escape_string_warning`):
//!   constants such as `'a\\b\'cd'` read as PostgreSQL reads them, for local and
//!   distributed tables, with PostgreSQL's warnings.

use super::*;

/// One message of an answer, in a form two servers can be compared by: errors and
/// notices with their fields, rows, column names and types, tags, statuses.
fn comparable(m: &Msg) -> String {
    match m.tag {
        b'E' | b'N' => {
            let f = |t: u8| m.field(t).unwrap_or_default();
            format!(
                "{} {} {} {:?} position={} hint={:?} detail={:?}",
                m.tag as char,
                f(b'S'),
                f(b'C'),
                f(b'M'),
                f(b'P'),
                f(b'H'),
                f(b'D')
            )
        }
        b'T' => {
            // Names and type oids (table oids differ between servers).
            let mut b = &m.body[2..];
            let mut cols = Vec::new();
            while let Some(end) = b.iter().position(|&c| c == 0) {
                let name = String::from_utf8_lossy(&b[..end]).into_owned();
                let ty = u32::from_be_bytes(b[end + 7..end + 11].try_into().unwrap());
                cols.push(format!("{name}:{ty}"));
                b = &b[end + 19..];
            }
            format!("T {}", cols.join(","))
        }
        b'D' => format!("D {:?}", String::from_utf8_lossy(&m.body)),
        b'C' => format!(
            "C {}",
            String::from_utf8_lossy(&m.body).trim_end_matches('\0')
        ),
        b'Z' => format!("Z {}", m.body[0] as char),
        b'S' => format!("S {:?}", String::from_utf8_lossy(&m.body)),
        other => format!("{}", other as char),
    }
}

/// Both sessions of a comparison: through pgshard and on the plain PostgreSQL.
struct Both {
    pgshard: Raw,
    plain: Raw,
}

impl Both {
    async fn open() -> Both {
        let p = plain_postgres();
        let mut plain = Raw::open_to(&p.host, p.port).await;
        assert_ok_login(
            &plain
                .login_with(&p.user, &p.database, &p.password, &[])
                .await,
        );
        Both {
            pgshard: Raw::logged_in().await,
            plain,
        }
    }

    /// Runs `sql` (simple protocol) on both and checks the answers are the same;
    /// returns pgshard's.
    async fn same(&mut self, sql: &str) -> Vec<String> {
        let got = simple(&mut self.pgshard, sql).await;
        let want = simple(&mut self.plain, sql).await;
        assert_eq!(got, want, "answers to {sql:?}");
        got
    }

    /// Runs `sql` as Parse / Bind / Execute / Sync on both; the same answers.
    async fn same_extended(&mut self, sql: &str) -> Vec<String> {
        let got = extended(&mut self.pgshard, sql).await;
        let want = extended(&mut self.plain, sql).await;
        assert_eq!(got, want, "extended-protocol answers to {sql:?}");
        got
    }
}

async fn simple(r: &mut Raw, sql: &str) -> Vec<String> {
    let mut out = BytesMut::new();
    frontend::query(sql, &mut out).unwrap();
    r.send(&out).await;
    r.until_ready().await.iter().map(comparable).collect()
}

async fn extended(r: &mut Raw, sql: &str) -> Vec<String> {
    let mut out = BytesMut::new();
    frontend::parse("", sql, std::iter::empty(), &mut out).unwrap();
    frontend::bind(
        "",
        "",
        [0i16; 0],
        std::iter::empty::<()>(),
        |_, _| Ok(postgres_protocol::IsNull::No),
        [0i16; 0],
        &mut out,
    )
    .map_err(|_| "bind")
    .unwrap();
    frontend::execute("", 0, &mut out).unwrap();
    frontend::sync(&mut out);
    r.send(&out).await;
    r.until_ready().await.iter().map(comparable).collect()
}

fn has_error(answer: &[String]) -> bool {
    answer.iter().any(|m| m.starts_with("E "))
}

/// The same tables on both: a distributed one through pgshard, plain on PostgreSQL.
async fn tables(dist: &str, local: &str) {
    let ddl = format!(
        "drop table if exists {dist}, {local}; \
         create table {dist} (k int primary key, v text); \
         create table {local} (k int primary key, v text); \
         insert into {local} values (1, 'one')"
    );
    let c = cluster().client().await;
    c.batch_execute(&ddl).await.unwrap();
    c.simple_query(&format!("select create_distributed_table('{dist}', 'k')"))
        .await
        .unwrap();
    c.simple_query(&format!("insert into {dist} values (1, 'one')"))
        .await
        .unwrap();
    let plain = plain_postgres().client().await;
    plain.batch_execute(&ddl).await.unwrap();
    plain
        .simple_query(&format!("insert into {dist} values (1, 'one')"))
        .await
        .unwrap();
}

#[tokio::test]
async fn syntax_errors_are_postgresql_own() {
    tables("pa_dist", "pa_local").await;
    let mut both = Both::open().await;
    for sql in [
        "selec 1",
        "select * from pa_dist where",
        "select * from pa_local where k = 1 and",
        "select 1 limit 1,2",
        "select * from pa_dist limit 1,2",
        "select * from (values (1)) ",
        "select 'unterminated",
        "select * from pa_dist where v = $$abc",
        "update pa_dist set v = 'x' where k = 1 returning *, ;",
        "/* unterminated comment",
        "select U&'\\00zz'",
        "insert into pa_dist values (2, 'two'); selec 1",
        "insert into pa_local values (2, 'two'); insert into pa_dist values (3, 'three'); select * from pa_dist where",
        "create table pa_new (a int,)",
    ] {
        let answer = both.same(sql).await;
        assert!(has_error(&answer), "{sql}: {answer:?}");
        assert!(
            answer.iter().any(|m| m.starts_with("E ") && !m.contains("position= ")),
            "{sql}: PostgreSQL gives a position: {answer:?}"
        );
        let answer = both.same_extended(sql).await;
        assert!(has_error(&answer), "{sql}: {answer:?}");
    }
    // Nothing of the strings that did not parse ran: no row 2 or 3 anywhere, on the
    // shards or the coordinator node's shell.
    both.same("select k from pa_dist order by k").await;
    both.same("select k from pa_local order by k").await;
    let cl = cluster();
    let coordinator = cl.direct(cl.coordinator_port).await;
    let shell: i64 = coordinator
        .query_one("select count(*) from only pa_dist", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(shell, 0, "rows in the shell of pa_dist");
    // In a block: the error fails it until ROLLBACK, as there.
    for sql in ["begin", "selec 1", "select 1", "rollback", "select 1"] {
        both.same(sql).await;
    }
}

#[tokio::test]
async fn strings_read_with_the_session_string_settings() {
    tables("ps_dist", "ps_local").await;
    let mut both = Both::open().await;
    both.same("SET standard_conforming_strings = off").await;
    let answer = both.same(r"SELECT 'a\\b\'cd'").await;
    assert!(
        answer.contains(&r#"D "\0\u{1}\0\0\0\u{6}a\\b'cd""#.to_string()),
        "{answer:?}"
    );
    for table in ["ps_dist", "ps_local"] {
        for sql in [
            format!(r"insert into {table} values (2, 'it\'s a \\ test'), (3, 'x\\y')"),
            format!(r"insert into {table} values (4, 'four\n') on conflict (k) do nothing"),
            format!(r"select v from {table} where k = 2"),
            format!(r"select k from {table} where v = 'it\'s a \\ test'"),
            format!(r"select k, v from {table} where v like '%\\\\%' order by k"),
            format!(r"update {table} set v = v || '\'' where k = 3 returning v"),
            format!(r"delete from {table} where v = 'x\\y\'' returning k"),
            format!(r"select v from {table} where k = 4 and v = E'four\n'"),
            format!("select 1 from {table} where v = 'a\\'"),
        ] {
            both.same(&sql).await;
            if !sql.contains("(2, ") {
                both.same_extended(&sql).await;
            }
        }
    }
    both.same("SET escape_string_warning = off").await;
    both.same(r"select v from ps_dist where k = 2 and v <> '\\'")
        .await;
    both.same("SET backslash_quote = off").await;
    for sql in [
        r"select v from ps_dist where v = 'it\'s'",
        r"select v from ps_local where v = E'it\'s'",
        r"select 'it\'s'",
    ] {
        assert!(has_error(&both.same(sql).await), "{sql}");
    }
    // (Not RESET ALL: it resets application_name, which the node connections pgshard
    // shares start with as their own.)
    for sql in [
        "RESET standard_conforming_strings",
        "RESET escape_string_warning",
        "RESET backslash_quote",
    ] {
        both.same(sql).await;
    }
    both.same(r"select k, v from ps_dist where v <> 'a\b' order by k")
        .await;
    // SET LOCAL in a block, and its end.
    for sql in [
        "begin",
        "set local standard_conforming_strings = off",
        r"select k from ps_dist where v = 'it\'s a \\ test'",
    ] {
        both.same(sql).await;
    }
    // (PostgreSQL reports the setting's return to on at COMMIT; pgshard does not
    // pass on ParameterStatus from the end of a block yet.)
    let ends = |a: &[String]| a.first().cloned();
    assert_eq!(
        ends(&simple(&mut both.pgshard, "commit").await),
        ends(&simple(&mut both.plain, "commit").await)
    );
    both.same(r"select 'a\\b', k from ps_dist where v = 'x\y' || chr(39)")
        .await;
}

/// A client that gives no application_name has an empty one, as on PostgreSQL: in
/// SHOW, in pg_stat_activity and in the ParameterStatus of its startup.
#[tokio::test]
async fn default_application_name_is_empty() {
    let c = cluster().client().await;
    let plain = plain_postgres().client().await;
    for sql in [
        "show application_name",
        "select application_name from pg_stat_activity where pid = pg_backend_pid()",
    ] {
        let got: String = c.query_one(sql, &[]).await.unwrap().get(0);
        let want: String = plain.query_one(sql, &[]).await.unwrap().get(0);
        assert_eq!(got, want, "{sql}");
        assert_eq!(got, "", "{sql}");
    }
}

/// A statement of 65,536 parameters: PostgreSQL describes it with the count wrapped to
/// 0 in 16 bits and every parameter type after it (pgx then refuses it itself); one of
/// 65,535 describes and runs. pgshard answers both as PostgreSQL does.
#[tokio::test]
async fn parameter_descriptions_of_65536_parameters() {
    let mut both = Both::open().await;
    for n in [65_535usize, 65_536] {
        let list: Vec<String> = (1..=n).map(|i| format!("${i}::int")).collect();
        let sql = format!("select array_length(array[{}], 1)", list.join(","));
        let mut answers = Vec::new();
        for r in [&mut both.pgshard, &mut both.plain] {
            let mut out = BytesMut::new();
            frontend::parse("", &sql, std::iter::empty(), &mut out).unwrap();
            frontend::describe(b'S', "", &mut out).unwrap();
            frontend::sync(&mut out);
            r.send(&out).await;
            let msgs = r.until_ready().await;
            let description = msgs.iter().find(|m| m.tag == b't').map(|m| {
                (
                    u16::from_be_bytes([m.body[0], m.body[1]]),
                    (m.body.len() - 2) / 4,
                )
            });
            answers.push((description, msgs.iter().map(comparable).collect::<Vec<_>>()));
        }
        assert_eq!(answers[0], answers[1], "{n} parameters");
        assert_eq!(
            answers[0].0,
            Some(((n % 65_536) as u16, n)),
            "{n} parameters"
        );
    }
}
