//! TLS for clients of the pgshard listener (rustls through tokio-rustls): the server
//! configuration built from the PEM files named in the config, and the switch of a
//! plain TCP connection to TLS after its SSLRequest was answered 'S'.

use super::client_stream::{ClientRead, ClientStream, ClientWrite};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io;
use std::path::Path;
use std::sync::Arc;
pub use tokio_rustls::TlsAcceptor;

/// The listener's TLS configuration from a certificate (chain) and key in PEM. The key
/// file must be private as PostgreSQL requires it of `ssl_key_file`.
pub fn acceptor(cert_file: &Path, key_file: &Path) -> Result<TlsAcceptor, String> {
    let certs = CertificateDer::pem_file_iter(cert_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            format!(
                "could not load server certificate file \"{}\": {e}",
                cert_file.display()
            )
        })?;
    if certs.is_empty() {
        return Err(format!(
            "could not load server certificate file \"{}\": no certificate in it",
            cert_file.display()
        ));
    }
    check_key_permissions(key_file)?;
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| {
        format!(
            "could not load private key file \"{}\": {e}",
            key_file.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            format!(
                "the certificate \"{}\" and key \"{}\" do not make a TLS configuration: {e}",
                cert_file.display(),
                key_file.display()
            )
        })?;
    // What PostgreSQL 17 announces (clients not offering ALPN are accepted as well).
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// PostgreSQL's rule (be-secure-common.c): 0600 or less when the file is the server
/// user's own, 0640 or less when root owns it.
fn check_key_permissions(key_file: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(key_file).map_err(|e| {
        format!(
            "could not access private key file \"{}\": {e}",
            key_file.display()
        )
    })?;
    let mode = meta.mode();
    let too_open = if meta.uid() == 0 {
        mode & 0o137 != 0
    } else {
        mode & 0o077 != 0
    };
    if !meta.is_file() || too_open {
        return Err(format!(
            "private key file \"{}\" has group or world access (it must have permissions u=rw (0600) or less if owned by pgshard's user, or u=rw,g=r (0640) or less if owned by root)",
            key_file.display()
        ));
    }
    Ok(())
}

/// Runs the TLS handshake on a plain TCP connection whose halves are `rd` and `wr`
/// (nothing unread may be left: the caller checked), and returns the encrypted halves.
pub async fn upgrade(
    acceptor: &TlsAcceptor,
    rd: ClientRead,
    wr: ClientWrite,
) -> io::Result<(ClientRead, ClientWrite)> {
    let Some(ClientStream::Tcp(tcp)) = ClientStream::reunite(rd, wr) else {
        return Err(io::Error::other(
            "TLS is only offered on plain TCP connections",
        ));
    };
    let tls = acceptor.accept(tcp).await?;
    Ok(ClientStream::Tls(Box::new(tls)).into_split())
}
