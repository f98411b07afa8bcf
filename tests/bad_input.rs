//! Bad input at the pgshard listener, over raw TCP and through a normal client.
//!
//! Raw sockets (startup and SCRAM-SHA-256 done by hand with `postgres_protocol`):
//! malformed startup packets (length 3, length above 10000, an unterminated parameter),
//! an unknown message type after a good login, lengths that lie (the connection then
//! closes, or the bytes that follow are other messages), a claimed 2 GB message, a wrong
//! password and an unknown user. Each gets an ErrorResponse with the SQLSTATE
//! PostgreSQL uses (08P01 protocol violation, 28P01 invalid password) where an answer
//! is possible, the connection is closed, nothing of the bogus input is executed, and
//! afterwards a normal tokio-postgres client still connects and runs `select 1`.
//! SSLRequest and GSSENCRequest are answered 'N' and the startup then proceeds.
//!
//! Through a normal session: unknown table, wrong type, syntax error give the SQLSTATE
//! a plain PostgreSQL gives for the same statement (the oracle), and the session goes
//! on. A CancelRequest stops a running `pg_sleep(30)` (routed, multi-shard, local
//! table, no table) with 57014 within a few seconds.

mod common;
#[path = "bad_input/postgres_answers.rs"]
mod postgres_answers;
#[path = "bad_input/startup.rs"]
mod startup;

use bytes::{Buf, BufMut, BytesMut};
use common::{cluster, plain_postgres};
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use postgres_protocol::message::frontend;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_postgres::{Client, NoTls};

const WAIT: Duration = Duration::from_secs(10);

/// One backend message.
#[derive(Debug)]
struct Msg {
    tag: u8,
    body: Vec<u8>,
}

impl Msg {
    /// Fields of an ErrorResponse / NoticeResponse by their type byte.
    fn field(&self, ty: u8) -> Option<String> {
        let mut b = &self.body[..];
        while let Some((&t, rest)) = b.split_first() {
            if t == 0 {
                break;
            }
            let end = rest.iter().position(|&c| c == 0)?;
            if t == ty {
                return Some(String::from_utf8_lossy(&rest[..end]).into_owned());
            }
            b = &rest[end + 1..];
        }
        None
    }

    fn sqlstate(&self) -> Option<String> {
        (self.tag == b'E').then(|| self.field(b'C')).flatten()
    }

    /// The int32 code of an Authentication message.
    fn auth_code(&self) -> Option<i32> {
        (self.tag == b'R' && self.body.len() >= 4)
            .then(|| i32::from_be_bytes(self.body[..4].try_into().unwrap()))
    }
}

/// A raw client connection to the pgshard listener.
struct Raw {
    s: TcpStream,
    buf: BytesMut,
}

impl Raw {
    async fn open() -> Raw {
        let c = cluster();
        Raw::open_to(&c.host, c.port).await
    }

    /// A raw connection to any server (the plain PostgreSQL, to compare with).
    async fn open_to(host: &str, port: u16) -> Raw {
        let s = TcpStream::connect((host, port))
            .await
            .expect("connect to the server");
        Raw {
            s,
            buf: BytesMut::new(),
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).await.expect("send");
    }

    /// Reads more bytes: Ok(false) at end of stream (or a reset: the server is gone too).
    async fn fill(&mut self) -> bool {
        match tokio::time::timeout(WAIT, self.s.read_buf(&mut self.buf)).await {
            Err(_) => panic!("no answer from pgshard within {WAIT:?}"),
            Ok(Ok(0)) | Ok(Err(_)) => false,
            Ok(Ok(_)) => true,
        }
    }

    /// The next message, or None when the server closed the connection.
    async fn next(&mut self) -> Option<Msg> {
        loop {
            if self.buf.len() >= 5 {
                let len = i32::from_be_bytes(self.buf[1..5].try_into().unwrap());
                assert!(len >= 4, "bad length {len} from pgshard");
                if self.buf.len() >= 1 + len as usize {
                    let tag = self.buf.get_u8();
                    self.buf.advance(4);
                    let body = self.buf.split_to(len as usize - 4).to_vec();
                    return Some(Msg { tag, body });
                }
            }
            if !self.fill().await {
                assert!(
                    self.buf.is_empty(),
                    "connection closed inside a message: {:?}",
                    &self.buf[..]
                );
                return None;
            }
        }
    }

    /// Everything the server sends until it closes the connection; panics if it keeps
    /// the connection open longer than WAIT.
    async fn until_closed(&mut self) -> Vec<Msg> {
        let mut all = Vec::new();
        while let Some(m) = self.next().await {
            all.push(m);
        }
        all
    }

    /// Messages up to and including ReadyForQuery.
    async fn until_ready(&mut self) -> Vec<Msg> {
        let mut all = Vec::new();
        loop {
            let m = self
                .next()
                .await
                .unwrap_or_else(|| panic!("closed before ReadyForQuery after {all:?}"));
            let done = m.tag == b'Z';
            all.push(m);
            if done {
                return all;
            }
        }
    }

    /// Startup and SCRAM-SHA-256 by hand. Returns the messages after the client's last
    /// SASL message (AuthenticationSASLFinal, AuthenticationOk, ... ReadyForQuery on
    /// success; an ErrorResponse on failure).
    async fn login(&mut self, user: &str, password: &str) -> Vec<Msg> {
        let c = cluster();
        self.login_with(user, &c.database, password, &[]).await
    }

    /// The same with more startup parameters.
    async fn login_with(
        &mut self,
        user: &str,
        database: &str,
        password: &str,
        extra: &[(&str, &str)],
    ) -> Vec<Msg> {
        let mut out = BytesMut::new();
        let mut params = vec![
            ("user", user),
            ("database", database),
            ("application_name", "bad_input"),
        ];
        params.extend_from_slice(extra);
        frontend::startup_message(params, &mut out).unwrap();
        self.send(&out).await;
        self.sasl(password).await
    }

    async fn sasl(&mut self, password: &str) -> Vec<Msg> {
        let m = self.next().await.expect("AuthenticationSASL");
        assert_eq!(
            m.auth_code(),
            Some(10),
            "AuthenticationSASL expected: {m:?}"
        );
        assert!(
            m.body[4..]
                .split(|&b| b == 0)
                .any(|mech| mech == b"SCRAM-SHA-256"),
            "mechanisms {:?}",
            String::from_utf8_lossy(&m.body[4..])
        );
        let mut scram = ScramSha256::new(password.as_bytes(), ChannelBinding::unsupported());
        let mut out = BytesMut::new();
        frontend::sasl_initial_response("SCRAM-SHA-256", scram.message(), &mut out).unwrap();
        self.send(&out).await;
        let m = self.next().await.expect("AuthenticationSASLContinue");
        assert_eq!(m.auth_code(), Some(11), "SASLContinue expected: {m:?}");
        scram.update(&m.body[4..]).expect("server-first-message");
        out.clear();
        frontend::sasl_response(scram.message(), &mut out).unwrap();
        self.send(&out).await;
        let mut after = Vec::new();
        loop {
            match self.next().await {
                None => return after,
                Some(m) => {
                    let end = m.tag == b'Z' || m.tag == b'E';
                    if m.auth_code() == Some(12) {
                        scram.finish(&m.body[4..]).expect("server signature");
                    }
                    after.push(m);
                    if end {
                        return after;
                    }
                }
            }
        }
    }

    /// A logged-in raw connection as the cluster's user.
    async fn logged_in() -> Raw {
        let c = cluster();
        let mut r = Raw::open().await;
        let msgs = r.login(&c.user, &c.password).await;
        assert_ok_login(&msgs);
        r
    }

    /// `select <n>` with the simple protocol; returns the single value.
    async fn select(&mut self, n: i32) -> String {
        let mut out = BytesMut::new();
        frontend::query(&format!("select {n}"), &mut out).unwrap();
        self.send(&out).await;
        let msgs = self.until_ready().await;
        let row = msgs
            .iter()
            .find(|m| m.tag == b'D')
            .unwrap_or_else(|| panic!("no DataRow in {msgs:?}"));
        // DataRow: int16 count, int32 length, bytes.
        String::from_utf8(row.body[6..].to_vec()).unwrap()
    }
}

fn assert_ok_login(msgs: &[Msg]) {
    let tags: Vec<char> = msgs.iter().map(|m| m.tag as char).collect();
    assert!(
        msgs.iter().any(|m| m.auth_code() == Some(12)),
        "no SASLFinal: {tags:?}"
    );
    assert!(
        msgs.iter().any(|m| m.auth_code() == Some(0)),
        "no AuthenticationOk: {msgs:?}"
    );
    assert!(msgs.iter().any(|m| m.tag == b'K'), "no BackendKeyData");
    assert_eq!(msgs.last().map(|m| m.tag), Some(b'Z'), "{tags:?}");
    assert!(msgs.iter().all(|m| m.tag != b'E'), "{msgs:?}");
}

/// The server is still up: a normal client connects and `select 1` works.
async fn server_still_up() {
    let c = cluster();
    let client = c.client().await;
    let one: i32 = client.query_one("select 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
}

/// The messages hold exactly one ErrorResponse, with `code`, and nothing that means the
/// input was accepted (no row, no command completed, no authentication).
fn assert_one_error(msgs: &[Msg], code: &str, what: &str) {
    let errors: Vec<&Msg> = msgs.iter().filter(|m| m.tag == b'E').collect();
    assert_eq!(errors.len(), 1, "{what}: ErrorResponses in {msgs:?}");
    assert_eq!(
        errors[0].sqlstate().as_deref(),
        Some(code),
        "{what}: {:?}",
        errors[0].field(b'M')
    );
    for m in msgs {
        assert!(
            !matches!(m.tag, b'D' | b'C' | b'T' | b'K' | b'S'),
            "{what}: unexpected {:?}",
            m
        );
        assert!(m.auth_code() != Some(0), "{what}: authenticated: {msgs:?}");
    }
}

/// Nothing but possibly one protocol-violation error, then the connection closed.
fn assert_nothing_but_08p01(msgs: &[Msg], what: &str) {
    for m in msgs {
        match m.tag {
            b'E' => assert_eq!(m.sqlstate().as_deref(), Some("08P01"), "{what}: {m:?}"),
            // Notices and ParameterStatus are harmless.
            b'N' | b'S' => {}
            _ => panic!("{what}: unexpected {m:?} in {msgs:?}"),
        }
    }
}

fn startup_packet(body: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    p.put_i32(body.len() as i32 + 4);
    p.extend_from_slice(body);
    p
}

/// A startup packet of an impossible length gets no answer, as from PostgreSQL (it
/// only logs "invalid length of startup packet"): node-postgres closing before its
/// startup sends a Terminate there.
#[tokio::test]
async fn startup_length_3() {
    let pg = plain_postgres();
    for (host, port) in [
        (cluster().host.clone(), cluster().port),
        (pg.host.clone(), pg.port),
    ] {
        let mut r = Raw::open_to(&host, port).await;
        r.send(&[0, 0, 0, 3]).await;
        let msgs = r.until_closed().await;
        assert!(msgs.is_empty(), "startup length 3 at port {port}: {msgs:?}");
        // Terminate before the startup packet.
        let mut r = Raw::open_to(&host, port).await;
        r.send(&[b'X', 0, 0, 0, 4]).await;
        let msgs = r.until_closed().await;
        assert!(msgs.is_empty(), "Terminate at port {port}: {msgs:?}");
    }
    server_still_up().await;
}

#[tokio::test]
async fn startup_length_too_large() {
    let pg = plain_postgres();
    // PostgreSQL's limit: 10000 bytes after the length word.
    for len in [10_005i32, 0x7fff_ffff, -1] {
        for (host, port) in [
            (cluster().host.clone(), cluster().port),
            (pg.host.clone(), pg.port),
        ] {
            let mut r = Raw::open_to(&host, port).await;
            let mut p = Vec::new();
            p.put_i32(len);
            p.put_i32(196608);
            p.extend_from_slice(b"user\0postgres\0\0");
            r.send(&p).await;
            let msgs = r.until_closed().await;
            assert!(
                msgs.is_empty(),
                "startup length {len} at port {port}: {msgs:?}"
            );
        }
        server_still_up().await;
    }
}

#[tokio::test]
async fn startup_unterminated_parameter() {
    let c = cluster();
    for body in [
        // The value is not NUL-terminated.
        format!("user\0{}", c.user).into_bytes(),
        // The list is not terminated by an empty name.
        format!("user\0{}\0database\0{}\0", c.user, c.database).into_bytes(),
        // A name without a value.
        format!("user\0{}\0database", c.user).into_bytes(),
    ] {
        let mut r = Raw::open().await;
        let mut b = Vec::new();
        b.put_i32(196608);
        b.extend_from_slice(&body);
        r.send(&startup_packet(&b)).await;
        let msgs = r.until_closed().await;
        assert_one_error(
            &msgs,
            "08P01",
            &format!("startup {:?}", String::from_utf8_lossy(&body)),
        );
        server_still_up().await;
    }
}

#[tokio::test]
async fn unknown_message_type_after_login() {
    let mut r = Raw::logged_in().await;
    assert_eq!(r.select(7).await, "7");
    r.send(&[b'Y', 0, 0, 0, 4]).await;
    let msgs = r.until_closed().await;
    assert_one_error(&msgs, "08P01", "message type Y");
    server_still_up().await;
}

#[tokio::test]
async fn lying_length_then_close() {
    // In the startup packet: 100 announced, 20 sent, then the client is done sending.
    let mut r = Raw::open().await;
    let mut p = Vec::new();
    p.put_i32(100);
    p.put_i32(196608);
    p.extend_from_slice(b"user\0postgres\0");
    r.send(&p).await;
    r.s.shutdown().await.unwrap();
    let msgs = r.until_closed().await;
    assert_nothing_but_08p01(&msgs, "startup cut short");

    // After login: a Query announcing 100 bytes, carrying a complete `select 1`.
    let mut r = Raw::logged_in().await;
    let mut p = vec![b'Q'];
    p.put_i32(100);
    p.extend_from_slice(b"select 1\0");
    r.send(&p).await;
    r.s.shutdown().await.unwrap();
    let msgs = r.until_closed().await;
    assert_nothing_but_08p01(&msgs, "query cut short");
    server_still_up().await;
}

#[tokio::test]
async fn lying_length_then_other_messages() {
    // The announced 100 bytes swallow a Sync and a Query that follow: neither may be
    // run as a message of its own; the client then stops sending.
    let mut r = Raw::logged_in().await;
    let mut p = vec![b'Q'];
    p.put_i32(100);
    p.extend_from_slice(b"select 1\0");
    let mut more = BytesMut::new();
    frontend::sync(&mut more);
    frontend::query("select 2", &mut more).unwrap();
    p.extend_from_slice(&more);
    assert!(p.len() < 101);
    r.send(&p).await;
    // Nothing may come back while the message is incomplete.
    let early = tokio::time::timeout(Duration::from_millis(500), r.s.read_buf(&mut r.buf)).await;
    assert!(
        early.is_err(),
        "answer to an incomplete message: {:?}",
        &r.buf[..]
    );
    r.s.shutdown().await.unwrap();
    let msgs = r.until_closed().await;
    assert_nothing_but_08p01(&msgs, "swallowed messages");

    server_still_up().await;
}

/// PostgreSQL checks that a Query message ends right after its string
/// (`pq_getmsgend`: 08P01 "invalid message format").
#[tokio::test]
async fn query_with_trailing_bytes() {
    let mut r = Raw::logged_in().await;
    let mut body = b"select 5\0".to_vec();
    let mut more = BytesMut::new();
    frontend::sync(&mut more);
    body.extend_from_slice(&more);
    let mut p = vec![b'Q'];
    p.put_i32(body.len() as i32 + 4);
    p.extend_from_slice(&body);
    r.send(&p).await;
    let msgs = r.until_ready().await;
    assert!(
        msgs.iter().all(|m| !matches!(m.tag, b'D' | b'T' | b'C')),
        "ran the query: {msgs:?}"
    );
    assert!(
        msgs.iter()
            .any(|m| m.sqlstate().as_deref() == Some("08P01")),
        "{msgs:?}"
    );
    server_still_up().await;
}

/// PostgreSQL answers a Query whose string lacks its NUL with ERROR 08P01 ("invalid
/// string in message") and goes on.
#[tokio::test]
async fn query_without_terminator() {
    let mut r = Raw::logged_in().await;
    let mut p = vec![b'Q'];
    p.put_i32(4 + 8);
    p.extend_from_slice(b"select 6");
    r.send(&p).await;
    r.s.shutdown().await.unwrap();
    let msgs = r.until_closed().await;
    assert!(
        msgs.iter()
            .any(|m| m.sqlstate().as_deref() == Some("08P01")),
        "no 08P01 for an unterminated query string: {msgs:?}"
    );
    assert!(
        msgs.iter().all(|m| !matches!(m.tag, b'D' | b'T' | b'C')),
        "{msgs:?}"
    );

    // A length shorter than the text: the body "sele" lacks its NUL, and the rest
    // ("ct 3\0") reads as a message 'c' with a garbage length; nothing may run.
    let mut r = Raw::logged_in().await;
    let mut p = vec![b'Q'];
    p.put_i32(8);
    p.extend_from_slice(b"select 3\0");
    r.send(&p).await;
    r.s.shutdown().await.unwrap();
    let msgs = r.until_closed().await;
    assert!(
        msgs.iter()
            .any(|m| m.sqlstate().as_deref() == Some("08P01")),
        "no 08P01 for a cut-off query: {msgs:?}"
    );
    for m in &msgs {
        assert!(
            !matches!(m.tag, b'D' | b'T' | b'C'),
            "ran something: {msgs:?}"
        );
    }
    server_still_up().await;
}

#[tokio::test]
async fn claimed_2gb_message() {
    for (tag, len) in [
        (b'Q', 0x7fff_ffffi32),
        (b'P', 0x7fff_ffff),
        (b'Q', -1),
        (b'Q', 3),
    ] {
        let mut r = Raw::logged_in().await;
        let started = Instant::now();
        let mut p = vec![tag];
        p.put_i32(len);
        p.extend_from_slice(b"select 1\0");
        r.send(&p).await;
        let msgs = r.until_closed().await;
        assert_one_error(
            &msgs,
            "08P01",
            &format!("{} with length {len}", tag as char),
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
        server_still_up().await;
    }
}

#[tokio::test]
async fn wrong_password_and_unknown_user() {
    let c = cluster();
    for (user, password) in [
        (c.user.as_str(), "not the password"),
        (c.user.as_str(), ""),
        ("no_such_user_here", "whatever"),
        ("no_such_user_here", c.password.as_str()),
    ] {
        let mut r = Raw::open().await;
        let mut msgs = r.login(user, password).await;
        msgs.extend(r.until_closed().await);
        assert_one_error(&msgs, "28P01", &format!("login as {user:?}"));
        let e = msgs.iter().find(|m| m.tag == b'E').unwrap();
        assert_eq!(e.field(b'S').as_deref(), Some("FATAL"));
        assert_eq!(
            e.field(b'M'),
            Some(format!(
                "password authentication failed for user \"{user}\""
            )),
        );
        assert!(
            msgs.iter().all(|m| m.auth_code() != Some(12)),
            "server signature sent for a failed login"
        );

        // The same through tokio-postgres.
        let err = tokio_postgres::Config::new()
            .host(&c.host)
            .port(c.port)
            .user(user)
            .password(password)
            .dbname(&c.database)
            .connect(NoTls)
            .await
            .err()
            .unwrap_or_else(|| panic!("login as {user:?} with a wrong password succeeded"));
        assert_eq!(
            err.as_db_error().map(|d| d.code().code()),
            Some("28P01"),
            "{err}"
        );
        server_still_up().await;
    }
    // The right password on a raw socket still works.
    let mut r = Raw::logged_in().await;
    assert_eq!(r.select(1).await, "1");
}

/// GSSENCRequest is refused and the startup goes on in clear; the test cluster has
/// TLS on (`cluster up` makes a certificate), so SSLRequest is accepted ('S': the TLS
/// handshake itself is tests/tls.rs's).
#[tokio::test]
async fn encryption_requests_are_answered_then_startup_proceeds() {
    let c = cluster();
    let mut r = Raw::open().await;
    let mut p = Vec::new();
    p.put_i32(8);
    p.put_i32(80877104);
    r.send(&p).await;
    let mut one = [0u8; 1];
    tokio::time::timeout(WAIT, r.s.read_exact(&mut one))
        .await
        .expect("answer to the GSS request")
        .unwrap();
    assert_eq!(one[0], b'N');
    let msgs = r.login(&c.user, &c.password).await;
    assert_ok_login(&msgs);
    assert_eq!(r.select(42).await, "42");
    // GSS then SSL in one write: 'N', then 'S'.
    let mut r = Raw::open().await;
    let mut p = Vec::new();
    for code in [80877104i32, 80877103] {
        p.put_i32(8);
        p.put_i32(code);
    }
    r.send(&p).await;
    let mut two = [0u8; 2];
    tokio::time::timeout(WAIT, r.s.read_exact(&mut two))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&two, b"NS");
}

/// The SQLSTATE of `sql` on `c`, or None when it succeeds.
async fn sqlstate_of(c: &Client, sql: &str) -> Option<String> {
    match c.simple_query(sql).await {
        Ok(_) => None,
        Err(e) => Some(
            e.as_db_error()
                .unwrap_or_else(|| panic!("{sql}: not a server error: {e}"))
                .code()
                .code()
                .to_string(),
        ),
    }
}

async fn sqlstate_extended(c: &Client, sql: &str) -> Option<String> {
    match c.query(sql, &[]).await {
        Ok(_) => None,
        Err(e) => Some(
            e.as_db_error()
                .unwrap_or_else(|| panic!("{sql}: not a server error: {e}"))
                .code()
                .code()
                .to_string(),
        ),
    }
}

#[tokio::test]
async fn session_errors_match_postgres_and_the_session_goes_on() {
    let c = cluster().client().await;
    let plain = plain_postgres().client().await;
    let ddl = "drop table if exists bi_dist, bi_local; \
               create table bi_dist (k int primary key, v text); \
               create table bi_local (k int primary key, v text); \
               insert into bi_local values (1, 'one')";
    c.batch_execute(ddl).await.unwrap();
    plain.batch_execute(ddl).await.unwrap();
    c.simple_query("select create_distributed_table('bi_dist', 'k')")
        .await
        .unwrap();
    c.simple_query("insert into bi_dist values (1, 'one')")
        .await
        .unwrap();
    plain
        .simple_query("insert into bi_dist values (1, 'one')")
        .await
        .unwrap();

    let cases = [
        ("select * from bi_no_such_table", "42P01"),
        ("select * from bi_no_such_table where k = 1", "42P01"),
        ("insert into bi_no_such_table values (1)", "42P01"),
        ("selec 1", "42601"),
        ("select * from bi_dist where", "42601"),
        ("select * from bi_dist where k = 'abc'", "22P02"),
        ("select * from bi_local where k = 'abc'", "22P02"),
        ("select * from bi_dist where k = 1::text", "42883"),
        ("select * from bi_dist where k = 1 and v = 2", "42883"),
        ("select * from bi_dist where no_such_column = 1", "42703"),
        ("insert into bi_dist values (1, 'dup')", "23505"),
        ("select 1/0 from bi_dist where k = 1", "22012"),
    ];
    for (sql, code) in cases {
        let want = sqlstate_of(&plain, sql).await;
        assert_eq!(want.as_deref(), Some(code), "oracle for {sql}");
        assert_eq!(sqlstate_of(&c, sql).await, want, "simple protocol: {sql}");
        let one: i32 = c.query_one("select 1", &[]).await.unwrap().get(0);
        assert_eq!(one, 1, "after {sql}");
        assert_eq!(
            sqlstate_extended(&c, sql).await,
            sqlstate_extended(&plain, sql).await,
            "extended protocol: {sql}"
        );
        let v: String = c
            .query_one("select v from bi_dist where k = 1", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(v, "one", "after {sql}");
    }
    // In a transaction block: the error aborts it (25P02) until ROLLBACK.
    c.batch_execute("begin").await.unwrap();
    assert_eq!(
        sqlstate_of(&c, "select * from bi_dist where k = 'abc'")
            .await
            .as_deref(),
        Some("22P02")
    );
    assert_eq!(sqlstate_of(&c, "select 1").await.as_deref(), Some("25P02"));
    c.batch_execute("rollback").await.unwrap();
    let one: i32 = c.query_one("select 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
}

/// Runs `sql` (expected to sleep 30 s) on a fresh session, cancels it after a moment,
/// and checks 57014 arrives quickly and the session goes on.
async fn cancel_case(sql: &str) {
    let c = cluster().client().await;
    let token = c.cancel_token();
    let started = Instant::now();
    let query = c.simple_query(sql);
    let cancel = async {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        token.cancel_query(NoTls).await.expect("send CancelRequest");
    };
    let (result, ()) = tokio::time::timeout(Duration::from_secs(15), async {
        tokio::join!(query, cancel)
    })
    .await
    .unwrap_or_else(|_| panic!("{sql}: not cancelled within 15 s"));
    let elapsed = started.elapsed();
    let err = result
        .err()
        .unwrap_or_else(|| panic!("{sql}: finished without error"));
    assert_eq!(
        err.as_db_error().map(|d| d.code().code()),
        Some("57014"),
        "{sql}: {err}"
    );
    assert!(
        elapsed < Duration::from_secs(6),
        "{sql}: cancelled after {elapsed:?}"
    );
    let one: i32 = c.query_one("select 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1, "session after cancelling {sql}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_stops_pg_sleep() {
    let c = cluster().client().await;
    c.batch_execute(
        "drop table if exists bi_cancel, bi_cancel_local; \
         create table bi_cancel (k int, v text); \
         create table bi_cancel_local (k int, v text); \
         insert into bi_cancel_local values (1, 'x')",
    )
    .await
    .unwrap();
    c.simple_query("select create_distributed_table('bi_cancel', 'k')")
        .await
        .unwrap();
    for k in 1..=8 {
        c.simple_query(&format!("insert into bi_cancel values ({k}, 'x')"))
            .await
            .unwrap();
    }
    cancel_case("select pg_sleep(30)").await;
    cancel_case("select pg_sleep(30) from bi_cancel where k = 3").await;
    cancel_case("select count(*) from bi_cancel where pg_sleep(30) is not null").await;
    cancel_case("select pg_sleep(30) from bi_cancel_local").await;
    // Nothing is left running on the workers.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for &port in &cluster().worker_ports {
        let w = cluster().direct(port).await;
        let n: i64 = w
            .query_one(
                "select count(*) from pg_stat_activity where query like '%pg_sleep(30)%' \
                 and pid <> pg_backend_pid() and state = 'active'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 0, "pg_sleep still running on worker {port}");
    }
}

/// PostgreSQL rejects a value that is not an int for the int distribution column
/// with 22P02 whatever the statement; pgshard gives 0A000 when it cannot route it.
#[tokio::test]
async fn invalid_distribution_value_gives_22p02() {
    let c = cluster().client().await;
    let plain = plain_postgres().client().await;
    let ddl = "drop table if exists bi_dist2; create table bi_dist2 (k int primary key, v text)";
    c.batch_execute(ddl).await.unwrap();
    plain.batch_execute(ddl).await.unwrap();
    c.simple_query("select create_distributed_table('bi_dist2', 'k')")
        .await
        .unwrap();
    for sql in [
        "insert into bi_dist2 values ('x', 'y')",
        "update bi_dist2 set v = 'z' where k = 'abc'",
        "delete from bi_dist2 where k = 'abc'",
    ] {
        let want = sqlstate_of(&plain, sql).await;
        assert_eq!(want.as_deref(), Some("22P02"), "oracle for {sql}");
        assert_eq!(sqlstate_of(&c, sql).await, want, "simple protocol: {sql}");
        assert_eq!(
            sqlstate_extended(&c, sql).await,
            want,
            "extended protocol: {sql}"
        );
    }
}

/// `PGOPTIONS` (the startup packet's `options`): settings apply to the session, as on
/// PostgreSQL, `citus.*` ones included; a bad switch or value fails the connection with
/// PostgreSQL's SQLSTATE, and the server goes on.
#[tokio::test]
async fn startup_options_set_the_session_or_fail_the_connection() {
    let cl = cluster();
    let run = |options: &str, sql: &str| {
        let mut env = cl.pg_env();
        env.push(("PGOPTIONS".into(), options.into()));
        std::process::Command::new("psql")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args(["-X", "-tA", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
            .expect("psql")
    };
    let ok = run(
        r"-c citus.multi_shard_commit_protocol=1pc -c search_path=pg_temp,public --statement-timeout=4s -c application_name=with\ space",
        "show citus.multi_shard_commit_protocol; show search_path; show statement_timeout; show application_name",
    );
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let lines: Vec<String> = String::from_utf8_lossy(&ok.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    // As PostgreSQL shows a list given in options: as written. psql's own
    // application_name in the startup packet wins over the one in options, as there.
    assert_eq!(lines, ["1pc", "pg_temp,public", "4s", "psql"]);

    for (options, code_text) in [
        ("-d 3", "invalid command-line argument"),
        (
            "-c citus.multi_shard_commit_protocol=3pc",
            "invalid value for parameter",
        ),
        (
            "-c no_such_setting=1",
            "unrecognized configuration parameter",
        ),
        ("-c work_mem=lots", "invalid value for parameter"),
    ] {
        let out = run(options, "select 1");
        assert!(!out.status.success(), "{options}: connected");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("FATAL") && err.contains(code_text),
            "{options}: {err}"
        );
    }
    server_still_up().await;
}

/// Settings given in `options` that PostgreSQL reports (DateStyle, TimeZone, ...) reach
/// the client in ParameterStatus as PostgreSQL itself shows them: drivers read dates
/// and encodings by these, not by the server's defaults.
#[tokio::test]
async fn startup_options_are_reported_as_postgresql_reports_them() {
    let options = r"-c datestyle=iso,dmy -c timezone=europe/paris -c intervalstyle=sql_standard -c work_mem=8MB -c application_name=from\ options";
    let last_status = |msgs: &[Msg]| {
        let mut values = std::collections::BTreeMap::new();
        for m in msgs.iter().filter(|m| m.tag == b'S') {
            let mut parts = m.body.split(|&b| b == 0);
            let name = String::from_utf8_lossy(parts.next().unwrap()).into_owned();
            let value = String::from_utf8_lossy(parts.next().unwrap()).into_owned();
            values.insert(name, value);
        }
        values
    };
    let c = cluster();
    let mut r = Raw::open().await;
    let got = r
        .login_with(&c.user, &c.database, &c.password, &[("options", options)])
        .await;
    assert_ok_login(&got);
    let got = last_status(&got);
    let p = plain_postgres();
    let mut r = Raw::open_to(&p.host, p.port).await;
    let want = r
        .login_with(&p.user, &p.database, &p.password, &[("options", options)])
        .await;
    assert_ok_login(&want);
    let want = last_status(&want);
    assert_eq!(got["DateStyle"], "ISO, DMY");
    for name in ["DateStyle", "TimeZone", "IntervalStyle", "application_name"] {
        assert!(got.contains_key(name), "{name} reported");
        assert_eq!(got.get(name), want.get(name), "{name}");
    }
    assert!(!got.contains_key("work_mem"), "work_mem is not reported");
}

/// An extended-protocol batch up to Sync is one implicit transaction: a SET in it is
/// undone when a later statement of the batch fails, as in PostgreSQL, also on the
/// worker that reads it; without the failure it stays.
#[tokio::test]
async fn set_in_a_failed_extended_batch_is_undone() {
    let c = cluster();
    c.client()
        .await
        .batch_execute(
            "DROP TABLE IF EXISTS xset; CREATE TABLE xset (id int); COMMIT; \
             SELECT create_distributed_table('xset', 'id'); COMMIT; INSERT INTO xset VALUES (1)",
        )
        .await
        .unwrap();
    let mut r = Raw::logged_in().await;
    async fn worker_work_mem(r: &mut Raw) -> String {
        let mut out = BytesMut::new();
        frontend::query(
            "SELECT current_setting('work_mem') FROM xset WHERE id = 1",
            &mut out,
        )
        .unwrap();
        r.send(&out).await;
        let msgs = r.until_ready().await;
        let row = msgs
            .iter()
            .find(|m| m.tag == b'D')
            .unwrap_or_else(|| panic!("no DataRow in {msgs:?}"));
        String::from_utf8(row.body[6..].to_vec()).unwrap()
    }
    async fn batch(r: &mut Raw, statements: &[&str]) -> Vec<u8> {
        let mut out = BytesMut::new();
        for sql in statements {
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
        }
        frontend::sync(&mut out);
        r.send(&out).await;
        r.until_ready().await.iter().map(|m| m.tag).collect()
    }
    // The same batches on a plain PostgreSQL give the same messages.
    let p = plain_postgres();
    let mut plain = Raw::open_to(&p.host, p.port).await;
    assert_ok_login(
        &plain
            .login_with(&p.user, &p.database, &p.password, &[])
            .await,
    );
    let failing = ["SET work_mem = '7MB'", "SELECT 1/0"];
    let passing = ["SET work_mem = '7MB'", "SELECT 1"];
    let before = worker_work_mem(&mut r).await;
    assert_ne!(before, "7MB");
    let tags = batch(&mut r, &failing).await;
    assert_eq!(tags, batch(&mut plain, &failing).await);
    assert_eq!(tags.last(), Some(&b'Z'));
    assert!(tags.contains(&b'E'), "{}", String::from_utf8_lossy(&tags));
    assert_eq!(worker_work_mem(&mut r).await, before);
    let tags = batch(&mut r, &passing).await;
    assert_eq!(tags, batch(&mut plain, &passing).await);
    assert_eq!(worker_work_mem(&mut r).await, "7MB");
}
