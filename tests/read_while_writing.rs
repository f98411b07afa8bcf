//! A client's data relayed to a node while the node sends: pgshard reads what the node
//! sends while it writes to it, as PostgreSQL does with its own client (issue 17, pgx's
//! `TestConnCopyFromNoticeResponseReceivedMidStream`,
//! `TestConnLargeResponseWhileWritingDoesNotDeadlock` and
//! `TestConnCopyFromFailServerSideMidwayAbortsWithoutWaiting`):
//! - a NOTICE per row of a COPY FROM STDIN (10 MB of data) and debug5 messages during a
//!   Bind of 65,535 parameters reach the client meanwhile instead of hanging for good;
//! - an error raised by a row mid-COPY reaches the client at once, with ReadyForQuery,
//!   though the client has not ended the COPY; its remaining COPY messages are ignored
//!   (into a distributed table too, for a row pgshard itself refuses).
//!
//! Each case runs through pgshard and on a plain PostgreSQL, with a raw client that
//! writes from one task while it reads from another, and under a time limit so that a
//! hang fails the test.

mod common;

use bytes::{BufMut, BytesMut};
use common::raw::{raw_targets, Msg, Raw};
use postgres_protocol::message::frontend;
use std::time::{Duration, Instant};

impl Raw {
    async fn simple(&mut self, sql: &str) -> Vec<String> {
        let mut out = BytesMut::new();
        frontend::query(sql, &mut out).unwrap();
        self.send(&out).await;
        summary(&self.until_ready().await)
    }
}

fn sqlstate(body: &[u8]) -> String {
    body.split(|&b| b == 0)
        .find(|f| f.first() == Some(&b'C'))
        .map(|f| String::from_utf8_lossy(&f[1..]).into_owned())
        .unwrap_or_default()
}

/// The answers in a comparable form: NOTICEs and debug messages counted, rows counted.
fn summary(msgs: &[Msg]) -> Vec<String> {
    let notices = msgs.iter().filter(|m| m.0 == b'N').count();
    let rows = msgs.iter().filter(|m| m.0 == b'D').count();
    let mut s = vec![format!("{notices} notices"), format!("{rows} rows")];
    for (tag, body) in msgs {
        match tag {
            b'E' => s.push(format!("E {}", sqlstate(body))),
            b'C' => s.push(format!(
                "C {}",
                String::from_utf8_lossy(body).trim_end_matches('\0')
            )),
            b'Z' => s.push(format!("Z {}", body[0] as char)),
            b'G' => s.push("G".into()),
            _ => {}
        }
    }
    s
}

fn copy_data(row: &[u8], out: &mut BytesMut) {
    out.put_u8(b'd');
    out.put_i32(4 + row.len() as i32);
    out.put_slice(row);
}

/// Runs `case` on both targets (told whether through pgshard), each under a time limit (a hang fails the test).
async fn on_both<F, Fut>(case: F) -> [Vec<String>; 2]
where
    F: Fn(Raw, bool) -> Fut,
    Fut: std::future::Future<Output = Vec<String>>,
{
    let [shard, plain] = raw_targets().await;
    let limit = Duration::from_secs(60);
    let through_pgshard = tokio::time::timeout(limit, case(shard, true))
        .await
        .expect("through pgshard: done within 60 s (no hang)");
    let on_postgres = tokio::time::timeout(limit, case(plain, false))
        .await
        .expect("on PostgreSQL: done within 60 s");
    [through_pgshard, on_postgres]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_per_copy_row_reaches_the_client_meanwhile() {
    let [through_pgshard, on_postgres] = on_both(|mut r, _| async move {
        r.simple("CREATE TEMP TABLE rw_sentences (t text, ts tsvector)")
            .await;
        r.simple(
            "CREATE FUNCTION pg_temp.rw_sentences_trigger() RETURNS trigger AS $$
             BEGIN new.ts := to_tsvector(new.t); RETURN new; END $$ LANGUAGE plpgsql",
        )
        .await;
        r.simple(
            "CREATE TRIGGER rw_sentences_ts BEFORE INSERT ON rw_sentences
             FOR EACH ROW EXECUTE PROCEDURE pg_temp.rw_sentences_trigger()",
        )
        .await;
        let mut out = BytesMut::new();
        frontend::query(
            "COPY rw_sentences(t) FROM STDIN WITH (FORMAT csv)",
            &mut out,
        )
        .unwrap();
        r.send(&out).await;
        assert_eq!(r.next().await.0, b'G');
        // 1,000 rows of one 10,001-letter word: to_tsvector raises a NOTICE for each
        // ("word is too long to be indexed").
        let mut data = BytesMut::new();
        let mut row = vec![b'x'; 10_001];
        row.push(b'\n');
        for _ in 0..1000 {
            copy_data(&row, &mut data);
        }
        frontend::copy_done(&mut data);
        let writer = r.send_meanwhile(data.to_vec());
        let mut answer = summary(&r.until_ready().await);
        r.wr = Some(writer.await.unwrap());
        answer.extend(r.simple("SELECT count(*) FROM rw_sentences").await);
        answer
    })
    .await;
    assert_eq!(through_pgshard[0], "1000 notices", "{through_pgshard:?}");
    assert_eq!(through_pgshard, on_postgres);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_messages_during_a_huge_bind_reach_the_client_meanwhile() {
    let [through_pgshard, on_postgres] = on_both(|mut r, _| async move {
        r.simple("SET client_min_messages = debug5").await;
        let count = u16::MAX as usize;
        let sql = (1..=count)
            .map(|i| format!("(${i}::text)"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut out = BytesMut::new();
        frontend::parse("", &format!("VALUES {sql}"), std::iter::empty(), &mut out).unwrap();
        // Bind by hand: postgres-protocol counts parameters in an i16.
        let mut bind = BytesMut::new();
        bind.put_slice(b"\0\0");
        bind.put_i16(0);
        bind.put_u16(count as u16);
        for i in 0..count {
            let v = i.to_string();
            bind.put_i32(v.len() as i32);
            bind.put_slice(v.as_bytes());
        }
        bind.put_i16(0);
        out.put_u8(b'B');
        out.put_i32(4 + bind.len() as i32);
        out.put_slice(&bind);
        frontend::describe(b'P', "", &mut out).unwrap();
        frontend::execute("", 0, &mut out).unwrap();
        frontend::sync(&mut out);
        let writer = r.send_meanwhile(out.to_vec());
        let msgs = r.until_ready().await;
        r.wr = Some(writer.await.unwrap());
        let notices = msgs.iter().filter(|m| m.0 == b'N').count();
        let mut answer = summary(&msgs);
        // How many debug messages each server sends is its own; that they came is not.
        answer[0] = format!("some notices: {}", notices > 0);
        answer.extend(
            r.simple("RESET client_min_messages")
                .await
                .into_iter()
                .skip(1),
        );
        answer
    })
    .await;
    assert_eq!(through_pgshard[1], "65535 rows", "{through_pgshard:?}");
    assert_eq!(through_pgshard, on_postgres);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_mid_copy_reaches_the_client_at_once() {
    let [through_pgshard, on_postgres] = on_both(|mut r, _| async move {
        r.simple("CREATE TEMP TABLE rw_copy_fail (a text NOT NULL)")
            .await;
        let mut out = BytesMut::new();
        frontend::query("COPY rw_copy_fail(a) FROM STDIN", &mut out).unwrap();
        r.send(&out).await;
        assert_eq!(r.next().await.0, b'G');
        let mut data = BytesMut::new();
        let mut row = vec![b'a'; 100_000];
        row.push(b'\n');
        copy_data(&row, &mut data);
        copy_data(&row, &mut data);
        copy_data(b"\\N\n", &mut data);
        r.send(&data).await;
        // No CopyDone: the error must come without it.
        let started = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(5), r.until_ready())
            .await
            .expect("the error and ReadyForQuery before the client ends the COPY");
        let mut answer = summary(&answer);
        answer.push(format!(
            "within a second: {}",
            started.elapsed() < Duration::from_secs(1)
        ));
        // The client's remaining COPY messages are ignored; the session goes on.
        data.clear();
        copy_data(&row, &mut data);
        frontend::copy_done(&mut data);
        r.send(&data).await;
        answer.extend(r.simple("SELECT count(*) FROM rw_copy_fail").await);
        answer
    })
    .await;
    assert!(
        through_pgshard.contains(&"E 23502".to_string()),
        "{through_pgshard:?}"
    );
    assert_eq!(through_pgshard, on_postgres);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_row_mid_copy_into_a_distributed_table_fails_at_once() {
    let [through_pgshard, on_postgres] = on_both(|mut r, through_pgshard| async move {
        r.simple("DROP TABLE IF EXISTS rw_dist_fail").await;
        r.simple("CREATE TABLE rw_dist_fail (k int NOT NULL, v text)")
            .await;
        if through_pgshard {
            r.simple("SELECT create_distributed_table('rw_dist_fail', 'k')")
                .await;
        }
        let mut out = BytesMut::new();
        frontend::query("COPY rw_dist_fail(k, v) FROM STDIN", &mut out).unwrap();
        r.send(&out).await;
        assert_eq!(r.next().await.0, b'G');
        let mut data = BytesMut::new();
        copy_data(b"1\tone\n2\ttwo\n", &mut data);
        copy_data(b"\\N\tnull key\n", &mut data);
        r.send(&data).await;
        let answer = tokio::time::timeout(Duration::from_secs(5), r.until_ready())
            .await
            .expect("the error and ReadyForQuery before the client ends the COPY");
        let mut answer = summary(&answer);
        data.clear();
        copy_data(b"3\tthree\n", &mut data);
        frontend::copy_done(&mut data);
        r.send(&data).await;
        answer.extend(r.simple("SELECT count(*) FROM rw_dist_fail").await);
        answer
    })
    .await;
    assert!(
        through_pgshard.contains(&"E 23502".to_string()),
        "{through_pgshard:?}"
    );
    assert_eq!(through_pgshard, on_postgres);
}
