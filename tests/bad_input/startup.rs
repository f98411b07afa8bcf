//! The startup packet and logins, answered as PostgreSQL 15 answers them, compared
//! byte for byte or field by field with the plain PostgreSQL:
//!
//! - protocol 3.2, or unknown `_pq_.` options: NegotiateProtocolVersion (newest 3.0,
//!   the unknown options), then the session goes on in 3.0;
//! - protocol 2.0 or 4.x: PostgreSQL's FATAL 0A000 (in the old format to 2.0);
//! - user and database names of any length: cut to 63 bytes as PostgreSQL does, so
//!   the errors name them as it does; a packet over 10000 bytes is closed without an
//!   answer (PostgreSQL only logs `invalid length of startup packet`), and the server
//!   stays up;
//! - more than 32,767 parameters (up to 65,535, unsigned in the protocol) through
//!   tokio-postgres, on a local and a distributed table;
//! - failed logins are logged with the user and the client's address, never the
//!   password.

use super::*;
use tokio_postgres::types::ToSql;

fn startup_with(code: i32, params: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    b.put_i32(code);
    for (k, v) in params {
        b.extend_from_slice(k.as_bytes());
        b.put_u8(0);
        b.extend_from_slice(v.as_bytes());
        b.put_u8(0);
    }
    b.put_u8(0);
    startup_packet(&b)
}

/// Everything a server sends to `packet` until it closes the connection (bytes).
async fn raw_answer(host: &str, port: u16, packet: &[u8]) -> Vec<u8> {
    let mut r = Raw::open_to(host, port).await;
    r.send(packet).await;
    let mut all = Vec::new();
    while r.fill().await {}
    all.extend_from_slice(&r.buf);
    all
}

#[tokio::test]
async fn newer_protocol_versions_are_negotiated_down_to_3_0() {
    let c = cluster();
    let p = plain_postgres();
    for (code, options) in [
        ((3 << 16) | 2, vec![]),
        (
            3 << 16,
            vec![("_pq_.compression", "on"), ("_pq_.other", "x")],
        ),
        ((3 << 16) | 1, vec![("_pq_.x", "1")]),
    ] {
        let mut first = Vec::new();
        for (host, port, user, database, password) in [
            (&c.host, c.port, &c.user, &c.database, &c.password),
            (&p.host, p.port, &p.user, &p.database, &p.password),
        ] {
            let mut params = vec![("user", user.as_str()), ("database", database.as_str())];
            params.extend(options.iter().copied());
            let mut r = Raw::open_to(host, port).await;
            r.send(&startup_with(code, &params)).await;
            let v = r.next().await.expect("NegotiateProtocolVersion");
            assert_eq!(v.tag, b'v', "{v:?}");
            first.push(v.body);
            let msgs = r.sasl(password).await;
            assert_ok_login(&msgs);
            assert_eq!(r.select(5).await, "5");
        }
        assert_eq!(first[0], first[1], "NegotiateProtocolVersion for {code:#x}");
    }
}

#[tokio::test]
async fn other_protocol_versions_are_refused_as_postgresql_refuses_them() {
    let c = cluster();
    let p = plain_postgres();
    // Protocol 2.0: PostgreSQL answers in that protocol's own error format.
    let packet = startup_with(2 << 16, &[("user", "postgres")]);
    let got = raw_answer(&c.host, c.port, &packet).await;
    let want = raw_answer(&p.host, p.port, &packet).await;
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
    // 4.1: a protocol-3 ErrorResponse, 0A000.
    let packet = startup_with((4 << 16) | 1, &[("user", "postgres")]);
    let fields = |bytes: Vec<u8>| {
        let m = Msg {
            tag: bytes[0],
            body: bytes[5..].to_vec(),
        };
        (m.tag, m.field(b'S'), m.sqlstate(), m.field(b'M'))
    };
    let got = fields(raw_answer(&c.host, c.port, &packet).await);
    assert_eq!(got, fields(raw_answer(&p.host, p.port, &packet).await));
    assert_eq!(got.2.as_deref(), Some("0A000"));
    server_still_up().await;
}

#[tokio::test]
async fn names_of_any_length_get_postgresql_errors() {
    let c = cluster();
    let p = plain_postgres();
    // A wrong password for a long user name: the error names it cut to 63 bytes.
    let long_user = "u".repeat(300);
    let mut errors = Vec::new();
    for (host, port, database) in [
        (&c.host, c.port, &c.database),
        (&p.host, p.port, &p.database),
    ] {
        let mut r = Raw::open_to(host, port).await;
        let mut msgs = r.login_with(&long_user, database, "wrong", &[]).await;
        msgs.extend(r.until_closed().await);
        assert_one_error(&msgs, "28P01", "long user name");
        let e = msgs.iter().find(|m| m.tag == b'E').unwrap();
        errors.push((e.field(b'S'), e.field(b'M')));
    }
    assert_eq!(errors[0], errors[1]);
    assert!(errors[0].1.as_ref().unwrap().contains(&"u".repeat(63)));
    assert!(!errors[0].1.as_ref().unwrap().contains(&"u".repeat(64)));
    // A long database name: PostgreSQL's error text with the name cut.
    let long_db = "d".repeat(300);
    let mut r = Raw::open_to(&p.host, p.port).await;
    let mut want = r.login_with(&p.user, &long_db, &p.password, &[]).await;
    want.extend(r.until_closed().await);
    let want = want
        .iter()
        .find(|m| m.tag == b'E')
        .expect("3D000 from PostgreSQL");
    // Authentication first, then the database, as PostgreSQL does.
    let mut r = Raw::open().await;
    let mut got = r.login_with(&c.user, &long_db, &c.password, &[]).await;
    got.extend(r.until_closed().await);
    let got = got
        .iter()
        .find(|m| m.tag == b'E')
        .expect("3D000 from pgshard");
    for field in [b'S', b'C', b'M'] {
        assert_eq!(
            got.field(field),
            want.field(field),
            "field {}",
            field as char
        );
    }
    // Longer than a startup packet may be: closed without an answer (PostgreSQL only
    // logs "invalid length of startup packet"), and nothing else happens.
    for (name, value) in [
        ("user", "u".repeat(20_000)),
        ("options", format!("-c search_path={}", "s".repeat(12_000))),
    ] {
        for (host, port) in [(&c.host, c.port), (&p.host, p.port)] {
            let mut r = Raw::open_to(host, port).await;
            r.send(&startup_with(196608, &[("user", &c.user), (name, &value)]))
                .await;
            let msgs = r.until_closed().await;
            assert!(msgs.is_empty(), "{name} at port {port}: {msgs:?}");
        }
        server_still_up().await;
    }
    // Long options within the limit work as on PostgreSQL.
    let path = format!("{},public", "s".repeat(5000));
    let options = format!("-c search_path={path}");
    for client in [cluster().client_with_options(&options).await, {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host(&p.host)
            .port(p.port)
            .user(&p.user)
            .password(&p.password)
            .dbname(&p.database)
            .options(&options);
        common::connect_with(cfg).await
    }] {
        let shown: String = client
            .query_one("show search_path", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(shown, path);
    }
}

/// Up to 65,535 parameters, as PostgreSQL allows (the counts are unsigned 16 bits).
#[tokio::test]
async fn more_than_32767_parameters() {
    let c = cluster().client().await;
    let plain = plain_postgres().client().await;
    let ddl = "drop table if exists bp_dist, bp_local; \
               create table bp_dist (k int primary key, v int); \
               create table bp_local (k int primary key, v int)";
    c.batch_execute(ddl).await.unwrap();
    plain.batch_execute(ddl).await.unwrap();
    c.simple_query("select create_distributed_table('bp_dist', 'k')")
        .await
        .unwrap();
    let values: Vec<i32> = (0..65_535).collect();
    let params: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as _).collect();
    // One statement reading all of them.
    let list: Vec<String> = (1..=65_535).map(|i| format!("${i}::int")).collect();
    let sql = format!(
        "select array_length(array[{}], 1), {}",
        list.join(","),
        list[65_534]
    );
    for client in [&c, &plain] {
        let row = client.query_one(&sql, &params).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), 65_535);
        assert_eq!(row.get::<_, i32>(1), 65_534);
    }
    // Multi-row INSERTs of 20,000 rows (40,000 parameters) into a local and a
    // distributed table.
    let rows: Vec<String> = (0..20_000)
        .map(|i| format!("(${}, ${})", 2 * i + 1, 2 * i + 2))
        .collect();
    for table in ["bp_local", "bp_dist"] {
        let sql = format!("insert into {table} values {}", rows.join(","));
        let params = &params[..40_000];
        let got = c.execute(&sql, params).await.unwrap();
        let want = plain.execute(&sql, params).await.unwrap();
        assert_eq!((got, want), (20_000, 20_000), "{table}");
        let check = format!("select count(*), sum(v)::int8 from {table}");
        let got = c.query_one(&check, &[]).await.unwrap();
        let want = plain.query_one(&check, &[]).await.unwrap();
        assert_eq!(
            (got.get::<_, i64>(0), got.get::<_, i64>(1)),
            (want.get::<_, i64>(0), want.get::<_, i64>(1)),
            "{table}"
        );
    }
}

#[tokio::test]
async fn failed_logins_are_logged_without_the_password() {
    let c = cluster();
    let user = format!("nobody_{}", std::process::id());
    let password = "never-logged-secret";
    for _ in 0..20 {
        let mut r = Raw::open().await;
        let mut msgs = r.login(&user, password).await;
        msgs.extend(r.until_closed().await);
        assert_one_error(&msgs, "28P01", "unknown user");
    }
    server_still_up().await;
    let log =
        std::fs::read_to_string(c.dir.join("logs").join("pgshard.log")).expect("pgshard's log");
    // Without the terminal colours tracing writes.
    let mut plain_log = String::with_capacity(log.len());
    let mut in_escape = false;
    for ch in log.chars() {
        match (in_escape, ch) {
            (false, '\u{1b}') => in_escape = true,
            (false, ch) => plain_log.push(ch),
            (true, 'm') => in_escape = false,
            (true, _) => {}
        }
    }
    let log = plain_log;
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("authentication failed") && l.contains(&user))
        .collect();
    assert_eq!(lines.len(), 20, "{lines:?}");
    assert!(
        lines.iter().all(|l| l.contains("client=127.0.0.1")),
        "{lines:?}"
    );
    assert!(!log.contains(password), "the password is in the log");
}
