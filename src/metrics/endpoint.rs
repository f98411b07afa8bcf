//! The metrics endpoint: `GET /metrics` over plain HTTP/1.1 on `metrics_listen`,
//! answered with the text exposition (`Metrics::render`) and the connection closed.
//! One request per connection, a bounded request head and a time limit per request:
//! a scraper needs nothing more, and nothing a client sends can hold memory or a task.

use crate::executor::shared::Shared;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The longest request head read.
const MAX_HEAD: usize = 8 * 1024;
/// The most time one request may take.
const REQUEST_TIME: Duration = Duration::from_secs(5);

/// Binds `addr` (`host:port`); the endpoint then serves until the process ends.
pub async fn start(addr: &str, shared: &Arc<Shared>) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    tracing::info!("metrics on http://{}/metrics", listener.local_addr()?);
    let shared = Arc::downgrade(shared);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(REQUEST_TIME, answer(stream, shared)).await;
            });
        }
    });
    Ok(())
}

async fn answer(mut stream: TcpStream, shared: Weak<Shared>) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 || head.len() + n > MAX_HEAD {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let response = match request_target(&head) {
        Some(("GET", "/metrics" | "/")) => {
            let pools = shared
                .upgrade()
                .map(|s| s.pools.usage())
                .unwrap_or_default();
            let pools: Vec<_> = pools
                .into_iter()
                .map(|(addr, in_use, idle)| (addr.to_string(), in_use, idle))
                .collect();
            response(
                "200 OK",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                &super::get().render(&pools),
            )
        }
        Some(("GET", _)) => response("404 Not Found", "text/plain", "not found: try /metrics\n"),
        _ => response("405 Method Not Allowed", "text/plain", "GET only\n"),
    };
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// The method and target of an HTTP request head.
fn request_target(head: &[u8]) -> Option<(&str, &str)> {
    let line = head.split(|&b| b == b'\r').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    let method = parts.next()?;
    let target = parts.next()?;
    let target = target.split('?').next().unwrap_or(target);
    Some((method, target))
}

fn response(status: &str, content_type: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines() {
        assert_eq!(
            request_target(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"),
            Some(("GET", "/metrics"))
        );
        assert_eq!(
            request_target(b"POST / HTTP/1.1\r\n\r\n"),
            Some(("POST", "/"))
        );
        assert_eq!(request_target(b"garbage"), None);
    }
}
