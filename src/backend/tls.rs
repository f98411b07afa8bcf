//! TLS on pgshard's own TCP connections to the nodes (`node_sslmode` in the config):
//! the SSLRequest exchange and the rustls handshake that `conn::connect_stream` runs
//! before the startup message, and the same for the tokio-postgres clients of
//! `control` (`ControlTls`). Connections over Unix-domain sockets stay plain, as
//! libpq's.
//!
//! `require` and `prefer` encrypt without checking the node's certificate, as libpq's
//! modes of those names do (no root certificate is configured for the nodes).
//!
//! The mode is process-wide, set once by the listener at start-up
//! (`configure`); other commands (`cluster`, `bench`) connect in clear.

use crate::config::NodeSslMode;
use crate::frontend::messages::SSL_REQUEST;
use bytes::BufMut;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use tokio_util::either::Either;

/// A TCP connection to a node: plain (Left) or TLS (Right).
pub type NodeTcp = Either<TcpStream, Box<TlsStream<TcpStream>>>;

static MODE: OnceLock<(NodeSslMode, Option<TlsConnector>)> = OnceLock::new();

/// Sets the process's `node_sslmode` (first call wins).
pub fn configure(mode: NodeSslMode) {
    let connector = (mode != NodeSslMode::Disable).then(connector);
    let _ = MODE.set((mode, connector));
}

fn mode() -> (NodeSslMode, Option<&'static TlsConnector>) {
    match MODE.get() {
        Some((mode, connector)) => (*mode, connector.as_ref()),
        None => (NodeSslMode::Disable, None),
    }
}

/// Asks the node at `host` for TLS on `tcp` when the mode says so, and runs the
/// handshake if it agrees. `require` fails on a node without TLS with libpq's text.
pub async fn negotiate(mut tcp: TcpStream, host: &str) -> io::Result<NodeTcp> {
    let (mode, Some(connector)) = mode() else {
        return Ok(Either::Left(tcp));
    };
    let mut request = Vec::with_capacity(8);
    request.put_i32(8);
    request.put_i32(SSL_REQUEST);
    tcp.write_all(&request).await?;
    let mut answer = [0u8; 1];
    tcp.read_exact(&mut answer).await?;
    match (answer[0], mode) {
        (b'S', _) => {
            let name = ServerName::try_from(host.to_string()).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("host name {host}: {e}"),
                )
            })?;
            let tls = connector.connect(name, tcp).await?;
            Ok(Either::Right(Box::new(tls)))
        }
        (b'N', NodeSslMode::Prefer) => Ok(Either::Left(tcp)),
        (b'N', _) => Err(io::Error::other(
            "server does not support SSL, but SSL was required",
        )),
        (other, _) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "received invalid response to SSL negotiation: {:?}",
                other as char
            ),
        )),
    }
}

/// The `sslmode` of a control connection to `host`: the configured one over TCP,
/// `disable` for a socket directory.
pub fn control_ssl_mode(host: &str) -> tokio_postgres::config::SslMode {
    use tokio_postgres::config::SslMode;
    match mode().0 {
        _ if host.starts_with('/') => SslMode::Disable,
        NodeSslMode::Disable => SslMode::Disable,
        NodeSslMode::Prefer => SslMode::Prefer,
        NodeSslMode::Require => SslMode::Require,
    }
}

/// tokio-postgres's TLS for control connections, with the data path's configuration.
#[derive(Clone, Copy, Debug, Default)]
pub struct ControlTls;

/// One control connection's handshake (the host name is checked only when TLS is used:
/// a socket directory has none).
pub struct ControlTlsConnect {
    host: String,
}

/// A control connection's TLS stream.
pub struct ControlTlsStream<S>(TlsStream<S>);

impl<S> tokio_postgres::tls::MakeTlsConnect<S> for ControlTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = ControlTlsStream<S>;
    type TlsConnect = ControlTlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<ControlTlsConnect> {
        Ok(ControlTlsConnect {
            host: domain.to_string(),
        })
    }
}

impl<S> tokio_postgres::tls::TlsConnect<S> for ControlTlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = ControlTlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<ControlTlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let connector = match mode().1 {
                Some(c) => c.clone(),
                None => connector(),
            };
            let name = ServerName::try_from(self.host.clone()).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("host name {}: {e}", self.host),
                )
            })?;
            Ok(ControlTlsStream(connector.connect(name, stream).await?))
        })
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for ControlTlsStream<S> {
    fn channel_binding(&self) -> tokio_postgres::tls::ChannelBinding {
        tokio_postgres::tls::ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for ControlTlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for ControlTlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// The client configuration: any certificate is accepted (libpq's `require`), the
/// handshake's signatures are checked as usual.
fn connector() -> TlsConnector {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
