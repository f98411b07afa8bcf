//! Control-plane connections: tokio-postgres clients that pgshard opens to the
//! coordinator node and to workers for catalog work, DDL and data moves (never for
//! the per-query data path, which speaks the raw protocol through `conn`/`pool`).
//!
//! Every control session uses the configured superuser, `application_name =
//! 'pgshard control'`, and fixed output styles (ISO dates, `postgres` intervals, exact
//! floats) so that text copied from one node reads back identically on another.

use crate::config::Config;
use crate::error::PgError;
use futures_util::{stream, StreamExt};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, Notification};

/// `application_name` of control-plane sessions (visible in `pg_stat_activity`).
pub const APPLICATION_NAME: &str = "pgshard control";

/// Session settings that make text output portable between nodes.
const SESSION_OPTIONS: &str =
    "-c DateStyle=ISO,MDY -c IntervalStyle=postgres -c extra_float_digits=3";

/// The coordinator node's configured address leads to the server serving it now
/// (`failover::coordinator::physical`).
fn client_config(cfg: &Config, host: &str, port: u16) -> tokio_postgres::Config {
    let (host, port) = crate::failover::coordinator::physical_host_port(host, port);
    let host = host.as_str();
    let mut pc = tokio_postgres::Config::new();
    pc.host(host)
        .port(port)
        .user(&cfg.user)
        .password(cfg.password.as_bytes())
        .dbname(&cfg.database)
        .application_name(APPLICATION_NAME)
        .options(SESSION_OPTIONS)
        .connect_timeout(Duration::from_millis(cfg.node_connect_timeout_ms.max(1)))
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(cfg.node_keepalive_idle_secs.max(1)))
        .keepalives_interval(Duration::from_secs(cfg.node_keepalive_interval_secs.max(1)))
        .keepalives_retries(cfg.node_keepalive_count.max(1))
        .ssl_mode(super::tls::control_ssl_mode(host));
    pc
}

fn connect_error(host: &str, port: u16, e: &tokio_postgres::Error) -> PgError {
    PgError::from_client_error(&format!("cannot connect to node {host}:{port}"), e)
}

/// Opens a control connection to `host:port` (database and credentials from `cfg`).
/// The connection task runs in the background until the client is dropped.
pub async fn connect(cfg: &Config, host: &str, port: u16) -> Result<Client, PgError> {
    let (client, connection) = client_config(cfg, host, port)
        .connect(super::tls::ControlTls)
        .await
        .map_err(|e| connect_error(host, port, &e))?;
    let (host, port) = (host.to_string(), port);
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("control connection to {host}:{port} ended: {e}");
        }
    });
    Ok(client)
}

/// Opens a control connection to the coordinator node.
pub async fn connect_coordinator(cfg: &Config) -> Result<Client, PgError> {
    connect(cfg, &cfg.coordinator.host, cfg.coordinator.port).await
}

/// Like [`connect`], but forwards the session's notifications (LISTEN/NOTIFY). The
/// receiver ends when the connection does.
pub async fn connect_with_notifications(
    cfg: &Config,
    host: &str,
    port: u16,
) -> Result<(Client, mpsc::UnboundedReceiver<Notification>), PgError> {
    let (client, mut connection) = client_config(cfg, host, port)
        .connect(super::tls::ControlTls)
        .await
        .map_err(|e| connect_error(host, port, &e))?;
    let (tx, rx) = mpsc::unbounded_channel();
    let (host, port) = (host.to_string(), port);
    tokio::spawn(async move {
        let mut messages = stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    // The receiver may be gone: keep driving the connection anyway.
                    let _ = tx.send(n);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!("control connection to {host}:{port} ended: {e}");
                    break;
                }
            }
        }
    });
    Ok((client, rx))
}
