//! A raw protocol client for the tests that send what no client library sends
//! (batches of extended-protocol messages, COPY data written while the answers are
//! read): startup and SCRAM-SHA-256 by hand, its write half can be handed to another
//! task, and every read has a time limit so that a hang fails the test.

use super::{cluster, plain_postgres};
use bytes::{Buf, BytesMut};
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use postgres_protocol::message::frontend;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// One backend message: its type byte and body.
pub type Msg = (u8, Vec<u8>);

pub struct Raw {
    rd: OwnedReadHalf,
    /// Taken while `send_meanwhile` writes from another task.
    pub wr: Option<OwnedWriteHalf>,
    buf: BytesMut,
}

impl Raw {
    pub async fn login(host: &str, port: u16, user: &str, password: &str, database: &str) -> Raw {
        let (rd, wr) = TcpStream::connect((host, port)).await.unwrap().into_split();
        let mut r = Raw {
            rd,
            wr: Some(wr),
            buf: BytesMut::new(),
        };
        let mut out = BytesMut::new();
        frontend::startup_message([("user", user), ("database", database)], &mut out).unwrap();
        r.send(&out).await;
        let (tag, body) = r.next().await;
        assert_eq!(
            (tag, &body[..4]),
            (b'R', &10i32.to_be_bytes()[..]),
            "SASL expected"
        );
        let mut scram = ScramSha256::new(password.as_bytes(), ChannelBinding::unsupported());
        out.clear();
        frontend::sasl_initial_response("SCRAM-SHA-256", scram.message(), &mut out).unwrap();
        r.send(&out).await;
        let (_, body) = r.next().await;
        scram.update(&body[4..]).unwrap();
        out.clear();
        frontend::sasl_response(scram.message(), &mut out).unwrap();
        r.send(&out).await;
        let msgs = r.until_ready().await;
        assert!(msgs.iter().all(|m| m.0 != b'E'), "login failed: {msgs:?}");
        r
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.wr.as_mut().unwrap().write_all(bytes).await.unwrap();
    }

    /// Writes `bytes` from another task while the caller goes on reading; put the
    /// returned write half back into `wr` when it is done.
    pub fn send_meanwhile(&mut self, bytes: Vec<u8>) -> tokio::task::JoinHandle<OwnedWriteHalf> {
        let mut wr = self.wr.take().unwrap();
        tokio::spawn(async move {
            // The server may stop reading after an error: a failed write is fine.
            let _ = wr.write_all(&bytes).await;
            wr
        })
    }

    /// A whole message already read, if any.
    fn buffered(&mut self) -> Option<Msg> {
        if self.buf.len() < 5 {
            return None;
        }
        let len = i32::from_be_bytes(self.buf[1..5].try_into().unwrap()) as usize;
        if self.buf.len() <= len {
            return None;
        }
        let tag = self.buf.get_u8();
        self.buf.advance(4);
        Some((tag, self.buf.split_to(len - 4).to_vec()))
    }

    /// The next message (within 20 s).
    pub async fn next(&mut self) -> Msg {
        loop {
            if let Some(m) = self.buffered() {
                return m;
            }
            let n = tokio::time::timeout(Duration::from_secs(20), self.rd.read_buf(&mut self.buf))
                .await
                .expect("an answer within 20 s")
                .unwrap();
            assert!(n > 0, "connection closed");
        }
    }

    /// Messages up to and including ReadyForQuery.
    pub async fn until_ready(&mut self) -> Vec<Msg> {
        let mut all = vec![];
        loop {
            let m = self.next().await;
            let done = m.0 == b'Z';
            all.push(m);
            if done {
                return all;
            }
        }
    }

    /// Whatever arrives within `wait`.
    pub async fn received_within(&mut self, wait: Duration) -> Vec<Msg> {
        let until = tokio::time::Instant::now() + wait;
        while let Ok(Ok(n)) = tokio::time::timeout_at(until, self.rd.read_buf(&mut self.buf)).await
        {
            if n == 0 {
                break;
            }
        }
        std::iter::from_fn(|| self.buffered()).collect()
    }
}

/// Raw clients through pgshard first, then to the plain PostgreSQL.
pub async fn raw_targets() -> [Raw; 2] {
    let c = cluster();
    let p = plain_postgres();
    [
        Raw::login(&c.host, c.port, &c.user, &c.password, &c.database).await,
        Raw::login(&p.host, p.port, &p.user, &p.password, &p.database).await,
    ]
}

/// Appends Parse / Bind / Describe / Execute of `sql` as the unnamed statement and
/// portal, no parameters, text results (no Sync: the caller ends the batch).
pub fn write_unnamed_statement(out: &mut BytesMut, sql: &str) {
    frontend::parse("", sql, std::iter::empty(), out).unwrap();
    frontend::bind(
        "",
        "",
        [0i16; 0],
        std::iter::empty::<()>(),
        |_, _| Ok(postgres_protocol::IsNull::No),
        [0i16; 0],
        out,
    )
    .map_err(|_| "bind")
    .unwrap();
    frontend::describe(b'P', "", out).unwrap();
    frontend::execute("", 0, out).unwrap();
}
