//! The self-signed TLS certificate of a local cluster's pgshard listener
//! (`DIR/server.crt`, `DIR/server.key`), made by `cluster up` the first time with
//! rcgen: valid for `localhost`, `127.0.0.1`, `::1` and the listen host, so that
//! `sslmode=verify-full sslrootcert=DIR/server.crt` works for each of them.

use anyhow::{Context, Result};
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};
use std::path::{Path, PathBuf};

/// The certificate and key files of the cluster in `dir`.
pub fn files(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("server.crt"), dir.join("server.key"))
}

/// Host names and addresses the certificate is for: the usual loopback names and
/// `listen_host` unless it is a wildcard.
pub fn names(listen_host: &str) -> Vec<String> {
    let mut names: Vec<String> = ["localhost", "127.0.0.1", "::1"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let wildcard = matches!(listen_host, "" | "*" | "0.0.0.0" | "::");
    if !wildcard && !names.iter().any(|n| n == listen_host) {
        names.push(listen_host.to_string());
    }
    names
}

/// Makes the certificate and its key (mode 0600) unless both exist. Returns whether
/// they were made now.
pub fn ensure(dir: &Path, listen_host: &str, common_name: &str) -> Result<bool> {
    let (cert_file, key_file) = files(dir);
    if cert_file.exists() && key_file.exists() {
        return Ok(false);
    }
    let (cert_pem, key_pem) = make(&names(listen_host), common_name)?;
    // The key first: a certificate without its key is never left behind alone.
    super::write_private(&key_file, &key_pem)?;
    std::fs::write(&cert_file, cert_pem)
        .with_context(|| format!("writing {}", cert_file.display()))?;
    Ok(true)
}

/// A self-signed server certificate for `names` (subjectAltName) and `common_name`,
/// with its private key, both in PEM.
pub fn make(names: &[String], common_name: &str) -> Result<(String, String)> {
    let key = KeyPair::generate().context("generating the TLS key")?;
    let mut params =
        CertificateParams::new(names.to_vec()).context("the certificate's host names")?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params
        .distinguished_name
        .push(DnType::OrganizationName, "pgshard local cluster");
    // A server certificate that is its own trust anchor (the client's sslrootcert).
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let at =
        |secs: i64| rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(secs as u64);
    params.not_before = at(now - 24 * 3600);
    params.not_after = at(now + 10 * 365 * 24 * 3600);
    let cert = params
        .self_signed(&key)
        .context("signing the certificate")?;
    Ok((cert.pem(), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listen_host_is_named_unless_it_is_a_wildcard() {
        assert_eq!(names("127.0.0.1"), ["localhost", "127.0.0.1", "::1"]);
        assert_eq!(names("0.0.0.0"), ["localhost", "127.0.0.1", "::1"]);
        assert_eq!(
            names("db.example.net"),
            ["localhost", "127.0.0.1", "::1", "db.example.net"]
        );
    }

    #[test]
    fn the_certificate_and_key_make_a_tls_configuration() {
        let dir = std::env::temp_dir().join(format!("pgshard-cert-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(ensure(&dir, "127.0.0.1", "127.0.0.1").unwrap());
        assert!(
            !ensure(&dir, "127.0.0.1", "127.0.0.1").unwrap(),
            "made once"
        );
        let (cert, key) = files(&dir);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        crate::frontend::tls::acceptor(&cert, &key).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
