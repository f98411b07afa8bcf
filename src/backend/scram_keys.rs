//! SCRAM-SHA-256 client side from keys instead of a password: how pgshard logs into a
//! node *as the client* without ever knowing the client's password.
//!
//! When a client authenticates to pgshard with SCRAM, its proof reveals ClientKey
//! (`ClientProof XOR HMAC(StoredKey, AuthMessage)`, checked against StoredKey). ClientKey
//! and the role's verifier (StoredKey, ServerKey, salt, iterations) are all a client
//! needs to answer another SCRAM exchange against the same verifier: the proof is
//! `ClientKey XOR HMAC(StoredKey, AuthMessage')` and the server's signature is checked
//! with ServerKey. PgBouncer calls this SCRAM pass-through. It works on every node that
//! stores the *same* verifier as the coordinator node (same salt and iterations); roles
//! are copied to the workers with their verifier for that reason.
//!
//! Pure logic, no I/O: [`KeyClient`] builds the bodies of the SASL messages and checks
//! the server's; framing is the caller's (`backend::conn`).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::fmt;

type HmacSha256 = Hmac<Sha256>;

/// Length of SHA-256 keys.
pub const KEY_LEN: usize = 32;

/// What pgshard keeps of a client's SCRAM login to log into nodes as that client.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientKeys {
    pub client_key: [u8; KEY_LEN],
    pub stored_key: [u8; KEY_LEN],
    pub server_key: [u8; KEY_LEN],
    pub salt: Vec<u8>,
    pub iterations: u32,
}

impl fmt::Debug for ClientKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientKeys")
            .field("iterations", &self.iterations)
            .field("keys", &"<hidden>")
            .finish()
    }
}

impl ClientKeys {
    /// A number that differs between two key sets (for pool keys); reveals nothing
    /// usable (a hash of the public StoredKey).
    pub fn fingerprint(&self) -> u64 {
        let d = Sha256::digest(self.stored_key);
        u64::from_be_bytes(d[..8].try_into().unwrap())
    }
}

/// Why a node's SCRAM exchange failed on pgshard's side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyClientError {
    /// The server's message is not SCRAM as expected.
    Malformed(&'static str),
    /// The node stores another verifier (other salt or iteration count) for the role:
    /// the keys cannot answer it.
    OtherVerifier,
    /// The server's signature is wrong: it does not know the verifier.
    BadServerSignature,
}

impl fmt::Display for KeyClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyClientError::Malformed(what) => write!(f, "malformed SCRAM message: {what}"),
            KeyClientError::OtherVerifier => {
                write!(f, "the node stores another password verifier for the role")
            }
            KeyClientError::BadServerSignature => write!(f, "invalid SCRAM server signature"),
        }
    }
}

/// The client side of one exchange: [`first_message`](Self::first_message), then
/// [`final_message`](Self::final_message) on the server-first-message, then
/// [`check_server_final`](Self::check_server_final).
pub struct KeyClient {
    keys: ClientKeys,
    nonce: String,
    /// AuthMessage, once known.
    auth_message: Option<Vec<u8>>,
}

impl KeyClient {
    pub fn new(keys: ClientKeys) -> KeyClient {
        let mut raw = [0u8; 18];
        rand::thread_rng().fill_bytes(&mut raw);
        KeyClient::with_nonce(keys, BASE64.encode(raw))
    }

    fn with_nonce(keys: ClientKeys, nonce: String) -> KeyClient {
        KeyClient {
            keys,
            nonce,
            auth_message: None,
        }
    }

    /// client-first-message (no channel binding; the user name is the startup
    /// packet's, so it is left empty as libpq does).
    pub fn first_message(&self) -> Vec<u8> {
        format!("n,,n=,r={}", self.nonce).into_bytes()
    }

    /// client-final-message for `server_first`.
    pub fn final_message(&mut self, server_first: &[u8]) -> Result<Vec<u8>, KeyClientError> {
        let text = std::str::from_utf8(server_first)
            .map_err(|_| KeyClientError::Malformed("server-first-message is not UTF-8"))?;
        let mut parts = text.split(',');
        let nonce = parts
            .next()
            .and_then(|p| p.strip_prefix("r="))
            .ok_or(KeyClientError::Malformed("nonce expected"))?;
        let salt = parts
            .next()
            .and_then(|p| p.strip_prefix("s="))
            .ok_or(KeyClientError::Malformed("salt expected"))?;
        let iterations = parts
            .next()
            .and_then(|p| p.strip_prefix("i="))
            .ok_or(KeyClientError::Malformed("iteration count expected"))?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(KeyClientError::Malformed(
                "server nonce does not extend ours",
            ));
        }
        let salt = BASE64
            .decode(salt)
            .map_err(|_| KeyClientError::Malformed("invalid base64 salt"))?;
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| KeyClientError::Malformed("invalid iteration count"))?;
        if salt != self.keys.salt || iterations != self.keys.iterations {
            return Err(KeyClientError::OtherVerifier);
        }
        let without_proof = format!("c=biws,r={nonce}");
        let mut auth_message = format!("n=,r={},", self.nonce).into_bytes();
        auth_message.extend_from_slice(server_first);
        auth_message.push(b',');
        auth_message.extend_from_slice(without_proof.as_bytes());
        let signature = hmac(&self.keys.stored_key, &auth_message);
        let mut proof = self.keys.client_key;
        for (p, s) in proof.iter_mut().zip(signature) {
            *p ^= s;
        }
        self.auth_message = Some(auth_message);
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Checks server-final-message (`v=<ServerSignature>`).
    pub fn check_server_final(&self, server_final: &[u8]) -> Result<(), KeyClientError> {
        let auth_message = self.auth_message.as_ref().ok_or(KeyClientError::Malformed(
            "server-final-message out of order",
        ))?;
        let text = std::str::from_utf8(server_final)
            .map_err(|_| KeyClientError::Malformed("server-final-message is not UTF-8"))?;
        let given = text
            .strip_prefix("v=")
            .and_then(|v| BASE64.decode(v.split(',').next().unwrap_or("")).ok())
            .ok_or(KeyClientError::Malformed("server signature expected"))?;
        let expected = hmac(&self.keys.server_key, auth_message);
        if given.as_slice() != expected.as_slice() {
            return Err(KeyClientError::BadServerSignature);
        }
        Ok(())
    }
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; KEY_LEN] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::auth::{ScramServer, ScramVerifier};

    fn keys_of(password: &str, salt: &[u8], iterations: u32) -> ClientKeys {
        // What a client's login to pgshard yields: run one exchange with
        // postgres-protocol's client (it knows the password) against pgshard's server.
        let verifier = ScramVerifier::from_password(password, salt, iterations);
        let mut server = ScramServer::new(verifier);
        let mut client = postgres_protocol::authentication::sasl::ScramSha256::new(
            password.as_bytes(),
            postgres_protocol::authentication::sasl::ChannelBinding::unsupported(),
        );
        let first = server.client_first(client.message()).unwrap();
        client.update(&first).unwrap();
        let fin = server.client_final(client.message()).unwrap();
        client.finish(&fin).unwrap();
        server.client_keys().expect("keys after success")
    }

    #[test]
    fn keys_answer_a_server_with_the_same_verifier() {
        let keys = keys_of("s3cret", b"0123456789abcdef", 4096);
        // A second server (a node) storing the same verifier.
        let verifier = ScramVerifier::from_password("s3cret", b"0123456789abcdef", 4096);
        let mut node = ScramServer::new(verifier);
        let mut client = KeyClient::new(keys);
        let first = node.client_first(&client.first_message()).unwrap();
        let fin = client.final_message(&first).unwrap();
        let server_final = node.client_final(&fin).expect("the node accepts the proof");
        client.check_server_final(&server_final).unwrap();
    }

    #[test]
    fn another_salt_is_recognised() {
        let keys = keys_of("s3cret", b"0123456789abcdef", 4096);
        let verifier = ScramVerifier::from_password("s3cret", b"fedcba9876543210", 4096);
        let mut node = ScramServer::new(verifier);
        let mut client = KeyClient::new(keys);
        let first = node.client_first(&client.first_message()).unwrap();
        assert_eq!(
            client.final_message(&first),
            Err(KeyClientError::OtherVerifier)
        );
    }

    #[test]
    fn a_forged_server_signature_fails() {
        let keys = keys_of("s3cret", b"0123456789abcdef", 4096);
        let verifier = ScramVerifier::from_password("s3cret", b"0123456789abcdef", 4096);
        let mut node = ScramServer::new(verifier);
        let mut client = KeyClient::with_nonce(keys, "abc".into());
        let first = node.client_first(&client.first_message()).unwrap();
        client.final_message(&first).unwrap();
        let forged = format!("v={}", BASE64.encode([7u8; KEY_LEN]));
        assert_eq!(
            client.check_server_final(forged.as_bytes()),
            Err(KeyClientError::BadServerSignature)
        );
        assert!(client.check_server_final(b"x=1").is_err());
    }

    #[test]
    fn malformed_server_first_fails() {
        let keys = keys_of("s3cret", b"0123456789abcdef", 4096);
        for bad in [&b""[..], b"r=zzz,s=AAAA,i=4096", b"r=abcX", b"\xff"] {
            let mut client = KeyClient::with_nonce(keys.clone(), "abc".into());
            assert!(client.final_message(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn debug_hides_keys() {
        let keys = keys_of("s3cret", b"0123456789abcdef", 4096);
        let shown = format!("{keys:?}");
        assert!(!shown.contains(&BASE64.encode(keys.client_key)));
        assert!(shown.contains("hidden"));
    }
}
