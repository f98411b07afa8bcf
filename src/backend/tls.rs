//! TLS on pgshard's own TCP connections to the nodes (`node_sslmode` in the config):
//! the SSLRequest exchange and the rustls handshake that `conn::connect_stream` runs
//! before the startup message. Connections over Unix-domain sockets stay plain, as
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
use std::io;
use std::sync::{Arc, OnceLock};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
