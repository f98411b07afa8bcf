//! Server side of SCRAM-SHA-256 authentication (RFC 5802 / RFC 7677) as PostgreSQL
//! implements it, for the pgshard client listener.
//!
//! pgshard authenticates its clients against the roles of the coordinator node: the
//! listener reads `pg_authid.rolpassword` (a SCRAM verifier, see [`ScramVerifier::parse`])
//! and runs the exchange itself with a [`ScramServer`]. This module is pure logic, no I/O:
//! it parses the bodies of the client's SASL messages and builds the bodies of the
//! `AuthenticationSASL*` replies; message framing (tag byte and length) is done by the
//! caller.
//!
//! The flow, as in PostgreSQL's `auth-scram.c`:
//!
//! 1. send `AuthenticationSASL` with [`sasl_mechanisms_body`];
//! 2. the client answers with `SASLInitialResponse` ('p'); split it with
//!    [`parse_sasl_initial_response`] and check the mechanism with [`check_mechanism`];
//! 3. [`ScramServer::client_first`] on the data → send it in `AuthenticationSASLContinue`
//!    ([`sasl_continue_body`]);
//! 4. the client answers with `SASLResponse` ('p', the whole body is the data);
//!    [`ScramServer::client_final`] on it → send it in `AuthenticationSASLFinal`
//!    ([`sasl_final_body`]), then `AuthenticationOk`.
//!
//! Any error ends the exchange; report it with [`AuthError::sqlstate`] as a FATAL error.
//! For [`AuthError::WrongPassword`] PostgreSQL's message is
//! `password authentication failed for user "<user>"` (the user of the startup packet).
//!
//! Unknown users (and users without a SCRAM verifier) go through the same exchange with a
//! [`mock_verifier`] and fail at the proof exactly like a wrong password, so that the
//! existence of a role does not leak — PostgreSQL does the same.
//!
//! Only `SCRAM-SHA-256` is offered, not `SCRAM-SHA-256-PLUS`: pgshard has no TLS yet, so
//! there is no channel binding. A client that sends the gs2 flag `p=` is refused; the flag
//! `y` ("I support channel binding but think the server does not") is accepted, which is
//! correct as long as the server really offers no `-PLUS` mechanism. Once TLS and
//! `SCRAM-SHA-256-PLUS` exist, `y` must be refused on TLS connections (downgrade attack),
//! as PostgreSQL does.

use crate::backend::scram_keys::ClientKeys;
use std::fmt;
use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// The SASL mechanism name pgshard offers.
pub const SCRAM_SHA_256: &str = "SCRAM-SHA-256";

/// Iteration count of PostgreSQL 15 verifiers (`scram_sha_256_iterations` became a
/// setting only in PostgreSQL 16; its default is still 4096). Used by [`mock_verifier`].
pub const DEFAULT_ITERATIONS: u32 = 4096;

/// Salt length of PostgreSQL verifiers (`SCRAM_DEFAULT_SALT_LEN`). Used by [`mock_verifier`].
pub const DEFAULT_SALT_LEN: usize = 16;

/// Raw length of the server nonce before base64 (`SCRAM_RAW_NONCE_LEN` in PostgreSQL).
const SERVER_NONCE_RAW_LEN: usize = 18;

const KEY_LEN: usize = 32;

/// `AuthenticationSASL`.
const AUTH_SASL: i32 = 10;
/// `AuthenticationSASLContinue`.
const AUTH_SASL_CONTINUE: i32 = 11;
/// `AuthenticationSASLFinal`.
const AUTH_SASL_FINAL: i32 = 12;

/// Why a SCRAM exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// A message did not follow the SCRAM / SASL grammar.
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    /// The client proof did not verify: wrong password, or unknown user (mock verifier).
    #[error("password authentication failed")]
    WrongPassword,
    /// The client asked for channel binding (gs2 flag `p=`), which pgshard does not offer.
    #[error(
        "the client selected SCRAM-SHA-256 without channel binding, but the SCRAM message \
         includes channel binding data"
    )]
    ChannelBindingNotSupported,
    /// The `c=` attribute of client-final-message does not echo the gs2 header.
    #[error("unexpected SCRAM channel-binding attribute in client-final-message")]
    ChannelBindingMismatch,
    /// The `r=` attribute of client-final-message is not the nonce of server-first-message.
    #[error("invalid SCRAM response: nonce does not match")]
    NonceMismatch,
    /// A valid but unsupported SCRAM feature (authorization identity, mandatory extension).
    #[error("{0}")]
    Unsupported(&'static str),
    /// The client chose a SASL mechanism that was not offered.
    #[error("client selected an invalid SASL authentication mechanism: {0:?}")]
    UnsupportedMechanism(String),
    /// A message arrived in the wrong state of the exchange (or after it ended).
    #[error("SCRAM message received out of order")]
    OutOfOrder,
}

impl AuthError {
    /// The SQLSTATE to report: `28P01` (invalid_password) for a failed proof, `0A000`
    /// (feature_not_supported) for unsupported SCRAM features, `08P01`
    /// (protocol_violation) for everything else.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            AuthError::WrongPassword => "28P01",
            AuthError::Unsupported(_) => "0A000",
            AuthError::Malformed(_)
            | AuthError::ChannelBindingNotSupported
            | AuthError::ChannelBindingMismatch
            | AuthError::NonceMismatch
            | AuthError::UnsupportedMechanism(_)
            | AuthError::OutOfOrder => "08P01",
        }
    }
}

/// A SCRAM-SHA-256 verifier: what the server stores instead of the password.
///
/// `Display` gives the `pg_authid.rolpassword` form; `Debug` hides the keys.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramVerifier {
    iterations: u32,
    salt: Vec<u8>,
    stored_key: [u8; KEY_LEN],
    server_key: [u8; KEY_LEN],
    /// Made up for an unknown user: no proof is ever accepted.
    mock: bool,
}

impl ScramVerifier {
    /// Parses `pg_authid.rolpassword` in the form
    /// `SCRAM-SHA-256$<iterations>:<base64 salt>$<base64 StoredKey>:<base64 ServerKey>`.
    ///
    /// Returns `None` for anything else (md5 hashes, plain text, NULL-as-empty, damaged
    /// verifiers): the caller should then authenticate against [`mock_verifier`].
    pub fn parse(rolpassword: &str) -> Option<ScramVerifier> {
        let rest = rolpassword.strip_prefix("SCRAM-SHA-256$")?;
        let (iter_salt, keys) = rest.split_once('$')?;
        let (iterations, salt) = iter_salt.split_once(':')?;
        let (stored_key, server_key) = keys.split_once(':')?;
        if iterations.is_empty() || !iterations.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let iterations: u32 = iterations.parse().ok()?;
        if iterations == 0 {
            return None;
        }
        let salt = BASE64.decode(salt).ok()?;
        if salt.is_empty() {
            return None;
        }
        let stored_key = BASE64.decode(stored_key).ok()?.try_into().ok()?;
        let server_key = BASE64.decode(server_key).ok()?.try_into().ok()?;
        Some(ScramVerifier {
            iterations,
            salt,
            stored_key,
            server_key,
            mock: false,
        })
    }

    /// Computes the verifier of `password`, as `CREATE ROLE ... PASSWORD` with
    /// `password_encryption = 'scram-sha-256'` would (given the same salt and iterations).
    ///
    /// SaltedPassword = Hi(SASLprep(password), salt, iterations). PostgreSQL applies
    /// SASLprep (RFC 4013) when the password is valid UTF-8 and prep succeeds, and uses
    /// the raw bytes otherwise. This function implements SASLprep only for what it does
    /// to pure ASCII, which is nothing (PostgreSQL's `pg_saslprep` returns ASCII input
    /// unchanged; prohibited ASCII control characters make it fail, and the fallback is
    /// again the raw bytes). Non-ASCII passwords are used as raw UTF-8 bytes, which agrees
    /// with PostgreSQL whenever the password is already SASLprep-normalized (NFKC, no
    /// non-ASCII spaces, no "mapped to nothing" characters such as U+00AD) or contains a
    /// prohibited character — true of nearly every real password. Real authentication
    /// never depends on this: the verifier comes from `pg_authid` and the client does its
    /// own SASLprep.
    ///
    /// An `iterations` of 0 is treated as 1 (Hi needs at least one round).
    pub fn from_password(password: &str, salt: &[u8], iterations: u32) -> ScramVerifier {
        let iterations = iterations.max(1);
        let salted_password = hi(password.as_bytes(), salt, iterations);
        let client_key = hmac(&salted_password, &[b"Client Key"]);
        let stored_key: [u8; KEY_LEN] = Sha256::digest(client_key).into();
        let server_key = hmac(&salted_password, &[b"Server Key"]);
        ScramVerifier {
            iterations,
            salt: salt.to_vec(),
            stored_key,
            server_key,
            mock: false,
        }
    }

    /// The iteration count sent to the client.
    pub fn iterations(&self) -> u32 {
        self.iterations
    }

    /// The salt sent to the client.
    pub fn salt(&self) -> &[u8] {
        &self.salt
    }

    /// Whether this is a [`mock_verifier`] (no proof will ever verify).
    pub fn is_mock(&self) -> bool {
        self.mock
    }
}

impl fmt::Display for ScramVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SCRAM-SHA-256${}:{}${}:{}",
            self.iterations,
            BASE64.encode(&self.salt),
            BASE64.encode(self.stored_key),
            BASE64.encode(self.server_key)
        )
    }
}

impl fmt::Debug for ScramVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramVerifier")
            .field("iterations", &self.iterations)
            .field("salt", &BASE64.encode(&self.salt))
            .field("keys", &"<hidden>")
            .field("mock", &self.mock)
            .finish()
    }
}

/// A verifier for a user that does not exist (or has no SCRAM password): the exchange
/// runs to the end and fails at the proof with [`AuthError::WrongPassword`], exactly like
/// a wrong password, so that user existence does not leak.
///
/// The salt is derived from the user name and a per-process random key, so repeated
/// attempts for the same name see the same salt (as for a real role) while nobody can
/// predict it; iterations are [`DEFAULT_ITERATIONS`]. This is what PostgreSQL's
/// `scram_mock_salt` does with its `mock_auth_nonce`.
pub fn mock_verifier(user: &str) -> ScramVerifier {
    static MOCK_KEY: OnceLock<[u8; KEY_LEN]> = OnceLock::new();
    let key = MOCK_KEY.get_or_init(|| {
        let mut key = [0u8; KEY_LEN];
        rand::thread_rng().fill_bytes(&mut key);
        key
    });
    let salt = hmac(key, &[b"salt\0", user.as_bytes()]);
    ScramVerifier {
        iterations: DEFAULT_ITERATIONS,
        salt: salt[..DEFAULT_SALT_LEN].to_vec(),
        stored_key: hmac(key, &[b"stored\0", user.as_bytes()]),
        server_key: hmac(key, &[b"server\0", user.as_bytes()]),
        mock: true,
    }
}

enum State {
    AwaitClientFirst,
    AwaitClientFinal {
        /// The gs2 cbind flag of client-first-message: `b'n'` or `b'y'`.
        cbind_flag: u8,
        /// client nonce + server nonce.
        nonce: Vec<u8>,
        /// `client-first-message-bare + "," + server-first-message + ","`.
        auth_message_prefix: Vec<u8>,
    },
    /// Finished, successfully or not; every further message is refused.
    Done,
}

/// The server side of one SCRAM-SHA-256 exchange.
///
/// Call [`client_first`](Self::client_first) then [`client_final`](Self::client_final);
/// after any error (or after success) the server refuses further messages.
pub struct ScramServer {
    verifier: ScramVerifier,
    server_nonce: String,
    state: State,
    /// The client's ClientKey, once its proof verified (see [`Self::client_keys`]).
    client_key: Option<[u8; KEY_LEN]>,
}

impl ScramServer {
    /// Starts an exchange against `verifier` (use [`mock_verifier`] for unknown users),
    /// with a fresh random server nonce.
    pub fn new(verifier: ScramVerifier) -> ScramServer {
        let mut raw = [0u8; SERVER_NONCE_RAW_LEN];
        rand::thread_rng().fill_bytes(&mut raw);
        ScramServer::with_server_nonce(verifier, BASE64.encode(raw))
    }

    /// `server_nonce` must consist of printable characters other than `,`.
    fn with_server_nonce(verifier: ScramVerifier, server_nonce: String) -> ScramServer {
        debug_assert!(is_printable(server_nonce.as_bytes()));
        ScramServer {
            verifier,
            server_nonce,
            state: State::AwaitClientFirst,
            client_key: None,
        }
    }

    /// Handles client-first-message (the data of `SASLInitialResponse`) and returns
    /// server-first-message, to be sent in `AuthenticationSASLContinue`.
    ///
    /// The user name in the message is ignored, as in PostgreSQL: the user of the startup
    /// packet is the one being authenticated.
    pub fn client_first(&mut self, msg: &[u8]) -> Result<Vec<u8>, AuthError> {
        if !matches!(self.state, State::AwaitClientFirst) {
            self.state = State::Done;
            return Err(AuthError::OutOfOrder);
        }
        self.state = State::Done;
        let (cbind_flag, bare, client_nonce) = parse_client_first(msg)?;

        let mut nonce = client_nonce.to_vec();
        nonce.extend_from_slice(self.server_nonce.as_bytes());
        let mut server_first = b"r=".to_vec();
        server_first.extend_from_slice(&nonce);
        server_first.extend_from_slice(b",s=");
        server_first.extend_from_slice(BASE64.encode(&self.verifier.salt).as_bytes());
        server_first.extend_from_slice(format!(",i={}", self.verifier.iterations).as_bytes());

        let mut auth_message_prefix = Vec::with_capacity(bare.len() + server_first.len() + 2);
        auth_message_prefix.extend_from_slice(bare);
        auth_message_prefix.push(b',');
        auth_message_prefix.extend_from_slice(&server_first);
        auth_message_prefix.push(b',');

        self.state = State::AwaitClientFinal {
            cbind_flag,
            nonce,
            auth_message_prefix,
        };
        Ok(server_first)
    }

    /// Handles client-final-message (the data of `SASLResponse`): checks the channel
    /// binding echo and the nonce, verifies the client proof in constant time, and returns
    /// server-final-message (`v=<ServerSignature>`), to be sent in
    /// `AuthenticationSASLFinal`. A failed proof is [`AuthError::WrongPassword`].
    pub fn client_final(&mut self, msg: &[u8]) -> Result<Vec<u8>, AuthError> {
        let (cbind_flag, nonce, auth_message_prefix) =
            match std::mem::replace(&mut self.state, State::Done) {
                State::AwaitClientFinal {
                    cbind_flag,
                    nonce,
                    auth_message_prefix,
                } => (cbind_flag, nonce, auth_message_prefix),
                _ => return Err(AuthError::OutOfOrder),
            };
        check_message(msg)?;
        let attrs: Vec<&[u8]> = msg.split(|&b| b == b',').collect();

        // channel-binding: base64 of the gs2 header, which for non-PLUS SCRAM is "n,," or
        // "y,,". PostgreSQL compares the base64 text itself.
        let cbind = attr_value(attrs[0], b'c')?;
        let expected: &[u8] = if cbind_flag == b'y' { b"eSws" } else { b"biws" };
        if cbind != expected {
            return Err(AuthError::ChannelBindingMismatch);
        }
        let final_nonce = attr_value(
            attrs.get(1).ok_or(AuthError::Malformed("nonce expected"))?,
            b'r',
        )?;
        // Optional extensions, then the proof, which must be the last attribute.
        let mut proof_index = None;
        for (i, attr) in attrs.iter().enumerate().skip(2) {
            if attr_name(attr)? == b'p' {
                proof_index = Some(i);
                break;
            }
        }
        let proof_index = proof_index.ok_or(AuthError::Malformed("proof expected"))?;
        if proof_index != attrs.len() - 1 {
            return Err(AuthError::Malformed(
                "garbage at the end of client-final-message",
            ));
        }
        let proof = BASE64
            .decode(attr_value(attrs[proof_index], b'p')?)
            .map_err(|_| AuthError::Malformed("invalid base64 in ClientProof"))?;
        let proof: [u8; KEY_LEN] = proof
            .try_into()
            .map_err(|_| AuthError::Malformed("invalid ClientProof"))?;
        if final_nonce != nonce.as_slice() {
            return Err(AuthError::NonceMismatch);
        }

        // AuthMessage = client-first-message-bare "," server-first-message ","
        //               client-final-message-without-proof
        let without_proof = &msg[..msg.len() - attrs[proof_index].len() - 1];
        let mut auth_message = auth_message_prefix;
        auth_message.extend_from_slice(without_proof);

        // ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage); H(ClientKey) must be
        // StoredKey.
        let client_signature = hmac(&self.verifier.stored_key, &[&auth_message]);
        let mut client_key = proof;
        for (k, s) in client_key.iter_mut().zip(client_signature) {
            *k ^= s;
        }
        let computed: [u8; KEY_LEN] = Sha256::digest(client_key).into();
        let proof_ok = constant_time_eq(&computed, &self.verifier.stored_key);
        if !proof_ok || self.verifier.mock {
            return Err(AuthError::WrongPassword);
        }

        self.client_key = Some(client_key);
        let server_signature = hmac(&self.verifier.server_key, &[&auth_message]);
        let mut server_final = b"v=".to_vec();
        server_final.extend_from_slice(BASE64.encode(server_signature).as_bytes());
        Ok(server_final)
    }
}

impl ScramServer {
    /// After a successful exchange: the client's ClientKey with the verifier, which let
    /// pgshard log into the nodes as this client (`backend::scram_keys`).
    pub fn client_keys(&self) -> Option<ClientKeys> {
        let client_key = self.client_key?;
        Some(ClientKeys {
            client_key,
            stored_key: self.verifier.stored_key,
            server_key: self.verifier.server_key,
            salt: self.verifier.salt.clone(),
            iterations: self.verifier.iterations,
        })
    }
}

/// Parses client-first-message; returns the gs2 cbind flag (`b'n'` or `b'y'`),
/// client-first-message-bare and the client nonce.
fn parse_client_first(msg: &[u8]) -> Result<(u8, &[u8], &[u8]), AuthError> {
    check_message(msg)?;
    // gs2-header = gs2-cbind-flag "," [ authzid ] ","
    let cbind_flag = match msg[0] {
        b'n' | b'y' => msg[0],
        b'p' => return Err(AuthError::ChannelBindingNotSupported),
        _ => return Err(AuthError::Malformed("unexpected channel-binding flag")),
    };
    if msg.get(1) != Some(&b',') {
        return Err(AuthError::Malformed(
            "comma expected after channel-binding flag",
        ));
    }
    match msg.get(2) {
        Some(b',') => {}
        Some(b'a') => {
            return Err(AuthError::Unsupported(
                "client uses authorization identity, but it is not supported",
            ))
        }
        _ => return Err(AuthError::Malformed("unexpected attribute in gs2 header")),
    }
    let bare = &msg[3..];
    let mut attrs = bare.split(|&b| b == b',');
    // `split` always yields at least one item.
    let first = attrs.next().unwrap_or_default();
    if attr_name(first)? == b'm' {
        return Err(AuthError::Unsupported(
            "client requires an unsupported SCRAM extension",
        ));
    }
    // The user name is ignored (PostgreSQL uses the one of the startup packet).
    attr_value(first, b'n')?;
    let client_nonce = attr_value(
        attrs.next().ok_or(AuthError::Malformed("nonce expected"))?,
        b'r',
    )?;
    if client_nonce.is_empty() || !is_printable(client_nonce) {
        return Err(AuthError::Malformed("invalid characters in SCRAM nonce"));
    }
    // Optional extensions, ignored as by PostgreSQL, but they must look like attributes.
    for attr in attrs {
        attr_name(attr)?;
    }
    Ok((cbind_flag, bare, client_nonce))
}

/// Checks what PostgreSQL checks of every SCRAM message: not empty, no NUL byte.
fn check_message(msg: &[u8]) -> Result<(), AuthError> {
    if msg.is_empty() {
        return Err(AuthError::Malformed("the message is empty"));
    }
    if msg.contains(&0) {
        return Err(AuthError::Malformed("the message contains a NUL byte"));
    }
    Ok(())
}

/// The name of an `x=value` attribute (a letter).
fn attr_name(attr: &[u8]) -> Result<u8, AuthError> {
    match attr {
        [name, b'=', ..] if name.is_ascii_alphabetic() => Ok(*name),
        _ => Err(AuthError::Malformed("attribute expected")),
    }
}

/// The value of an attribute that must be named `name`.
fn attr_value(attr: &[u8], name: u8) -> Result<&[u8], AuthError> {
    match attr {
        [n, b'=', value @ ..] if *n == name => Ok(value),
        _ => Err(AuthError::Malformed("unexpected or missing attribute")),
    }
}

/// `printable = %x21-2B / %x2D-7E` (RFC 5802): the characters allowed in a nonce.
fn is_printable(s: &[u8]) -> bool {
    s.iter().all(|&b| (0x21..=0x7e).contains(&b) && b != b',')
}

fn constant_time_eq(a: &[u8; KEY_LEN], b: &[u8; KEY_LEN]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; KEY_LEN] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// Hi() of RFC 5802: PBKDF2 with HMAC-SHA-256, one output block. `iterations` >= 1.
fn hi(password: &[u8], salt: &[u8], iterations: u32) -> [u8; KEY_LEN] {
    let keyed = HmacSha256::new_from_slice(password).expect("HMAC accepts keys of any length");
    let mut mac = keyed.clone();
    mac.update(salt);
    mac.update(&1u32.to_be_bytes());
    let mut u: [u8; KEY_LEN] = mac.finalize().into_bytes().into();
    let mut result = u;
    for _ in 1..iterations {
        let mut mac = keyed.clone();
        mac.update(&u);
        u = mac.finalize().into_bytes().into();
        for (r, x) in result.iter_mut().zip(u) {
            *r ^= x;
        }
    }
    result
}

/// Checks the mechanism the client chose in `SASLInitialResponse`: only
/// [`SCRAM_SHA_256`] is offered.
pub fn check_mechanism(mechanism: &str) -> Result<(), AuthError> {
    if mechanism == SCRAM_SHA_256 {
        Ok(())
    } else {
        Err(AuthError::UnsupportedMechanism(mechanism.to_string()))
    }
}

/// Splits the body of `SASLInitialResponse` ('p' message after `AuthenticationSASL`):
/// mechanism name (cstring), int32 length of the data (-1 for none), data.
///
/// A length of -1 (no initial response) gives empty data; [`ScramServer::client_first`]
/// then fails with "the message is empty". PostgreSQL would instead answer with an empty
/// `AuthenticationSASLContinue` and wait for client-first-message in a `SASLResponse`;
/// no common client (libpq, pgjdbc, tokio-postgres, npgsql) omits the initial response
/// for SCRAM, so pgshard does not support that.
pub fn parse_sasl_initial_response(body: &[u8]) -> Result<(String, Vec<u8>), AuthError> {
    let nul = body
        .iter()
        .position(|&b| b == 0)
        .ok_or(AuthError::Malformed(
            "SASL mechanism name is not terminated",
        ))?;
    let mechanism = std::str::from_utf8(&body[..nul])
        .map_err(|_| AuthError::Malformed("SASL mechanism name is not valid UTF-8"))?
        .to_string();
    let rest = &body[nul + 1..];
    let (len, data) = match rest {
        [a, b, c, d, data @ ..] => (i32::from_be_bytes([*a, *b, *c, *d]), data),
        _ => return Err(AuthError::Malformed("SASLInitialResponse is truncated")),
    };
    if len == -1 {
        if !data.is_empty() {
            return Err(AuthError::Malformed(
                "garbage at the end of SASLInitialResponse",
            ));
        }
        return Ok((mechanism, Vec::new()));
    }
    if len < 0 || len as usize != data.len() {
        return Err(AuthError::Malformed(
            "SASLInitialResponse length does not match the message",
        ));
    }
    Ok((mechanism, data.to_vec()))
}

/// Body of `AuthenticationSASL`: int32 10, the offered mechanisms as cstrings, and an
/// empty cstring ending the list. Only `SCRAM-SHA-256` is offered.
pub fn sasl_mechanisms_body() -> Vec<u8> {
    let mut body = AUTH_SASL.to_be_bytes().to_vec();
    body.extend_from_slice(SCRAM_SHA_256.as_bytes());
    body.push(0);
    body.push(0);
    body
}

/// Body of `AuthenticationSASLContinue`: int32 11 and server-first-message.
pub fn sasl_continue_body(data: &[u8]) -> Vec<u8> {
    let mut body = AUTH_SASL_CONTINUE.to_be_bytes().to_vec();
    body.extend_from_slice(data);
    body
}

/// Body of `AuthenticationSASLFinal`: int32 12 and server-final-message.
pub fn sasl_final_body(data: &[u8]) -> Vec<u8> {
    let mut body = AUTH_SASL_FINAL.to_be_bytes().to_vec();
    body.extend_from_slice(data);
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};

    /// Verifiers produced by a real PostgreSQL 15.
    /// (`set password_encryption='scram-sha-256'; create role u password 'p';
    /// select rolpassword from pg_authid where rolname='u'`), with their passwords.
    const PG15_VERIFIERS: &[(&str, &str)] = &[
        (
            "p",
            "SCRAM-SHA-256$4096:niZQKkHe6IiyZR21u87whw==$+xVCPDChd8qQOkLLl15SR/SyIRL3VsGntuDJmwmBoxM=:FPY6fB4p6nmD7MX7B8uQyaalL2PKtZxCJusKX7JkjsA=",
        ),
        (
            "correct horse battery staple",
            "SCRAM-SHA-256$4096:mGnRnTu2XLZK+TJCgIeDPQ==$ypki5lhSMUbCaxaKtP65tH/eVx3TGnQ/ar5YAxHYcC4=:e4GmW0+dfrE/CHCBkOoUxf+FfxhfoDzkQgjXskLAoIU=",
        ),
        (
            "pässwörd",
            "SCRAM-SHA-256$4096:hGFDJ+zoSLXOvcYIgFLW7g==$UVEHnA3gBNG/iS2L4izmLURCNZwC43kHifrt0vP804Q=:cOlq0Rr6QpwjyPUkg0Tztwx72RxmoXLcsXaLpX/SvKA=",
        ),
    ];

    /// Runs a whole exchange with postgres-protocol's client.
    fn exchange(
        verifier: ScramVerifier,
        password: &str,
        cb: ChannelBinding,
    ) -> Result<(), AuthError> {
        let mut client = ScramSha256::new(password.as_bytes(), cb);
        let mut server = ScramServer::new(verifier);
        let server_first = server.client_first(client.message())?;
        client
            .update(&server_first)
            .expect("client accepts server-first");
        let server_final = server.client_final(client.message())?;
        client
            .finish(&server_final)
            .expect("client verifies the server signature");
        Ok(())
    }

    /// Server after client-first, plus the client-final-message the real client sends.
    fn after_first(password: &str, cb: ChannelBinding) -> (ScramServer, String) {
        let verifier = ScramVerifier::parse(PG15_VERIFIERS[0].1).unwrap();
        let mut client = ScramSha256::new(password.as_bytes(), cb);
        let mut server = ScramServer::new(verifier);
        let server_first = server.client_first(client.message()).unwrap();
        client.update(&server_first).unwrap();
        let final_msg = String::from_utf8(client.message().to_vec()).unwrap();
        (server, final_msg)
    }

    #[test]
    fn full_exchange_succeeds() {
        for cb in [ChannelBinding::unsupported(), ChannelBinding::unrequested()] {
            let v = ScramVerifier::from_password("secret", b"0123456789abcdef", 4096);
            exchange(v, "secret", cb).unwrap();
        }
        let v =
            ScramVerifier::parse(&postgres_protocol::password::scram_sha_256(b"hunter2")).unwrap();
        exchange(v, "hunter2", ChannelBinding::unsupported()).unwrap();
    }

    #[test]
    fn pg15_verifiers() {
        for (password, rolpassword) in PG15_VERIFIERS {
            let v = ScramVerifier::parse(rolpassword).unwrap();
            assert_eq!(v.iterations(), 4096);
            assert_eq!(v.to_string(), *rolpassword);
            assert_eq!(
                ScramVerifier::from_password(password, v.salt(), v.iterations()),
                v
            );
            exchange(v.clone(), password, ChannelBinding::unsupported()).unwrap();
            exchange(v.clone(), password, ChannelBinding::unrequested()).unwrap();
            let err = exchange(v, "wrong", ChannelBinding::unsupported()).unwrap_err();
            assert_eq!(err, AuthError::WrongPassword);
        }
    }

    #[test]
    fn parse_round_trips_postgres_protocol_verifiers() {
        for password in ["", "a", "p", "with space", "ünïcödé"] {
            let s = postgres_protocol::password::scram_sha_256(password.as_bytes());
            let v = ScramVerifier::parse(&s).unwrap();
            assert_eq!(v.to_string(), s);
            assert!(!v.is_mock());
            assert_eq!(
                ScramVerifier::from_password(password, v.salt(), v.iterations()),
                v
            );
        }
    }

    #[test]
    fn parse_rejects_malformed_verifiers() {
        let good = PG15_VERIFIERS[0].1;
        assert!(ScramVerifier::parse(good).is_some());
        let (_, keys) = good.rsplit_once('$').unwrap();
        let bad = [
            "".to_string(),
            "p".to_string(),
            "md5e4b1d2c1b4b2d6f1e1c3ce2c6c4a5d4b".to_string(),
            good.replace("SCRAM-SHA-256$", "SCRAM-SHA-1$"),
            good.replace("4096", "0"),
            good.replace("4096", "-1"),
            good.replace("4096", "+4096"),
            good.replace("4096", "99999999999"),
            good.replace("4096", ""),
            good.replace("niZQKkHe6IiyZR21u87whw==", ""),
            good.replace("niZQKkHe6IiyZR21u87whw==", "niZQ*kHe6IiyZR21u87whw=="),
            good.replace(":FPY6", ":FPY"),
            good.replace("+xVCPDChd8qQOkLLl15SR/SyIRL3VsGntuDJmwmBoxM=", "AAAA"),
            good.replace(':', ";"),
            format!("SCRAM-SHA-256$4096:niZQKkHe6IiyZR21u87whw==${}", "x"),
            format!("SCRAM-SHA-256$4096$niZQKkHe6IiyZR21u87whw==${keys}"),
            good[..good.len() - 1].to_string(),
            format!("{good}x"),
        ];
        for b in &bad {
            assert!(ScramVerifier::parse(b).is_none(), "accepted {b:?}");
        }
    }

    #[test]
    fn debug_hides_keys() {
        let v = ScramVerifier::parse(PG15_VERIFIERS[0].1).unwrap();
        let dbg = format!("{v:?}");
        assert!(!dbg.contains("+xVCPDChd8"), "{dbg}");
        assert!(!dbg.contains("FPY6fB4p"), "{dbg}");
    }

    /// RFC 7677 section 3 test vector (user "user", password "pencil").
    #[test]
    fn rfc7677_vector() {
        let v = ScramVerifier::from_password(
            "pencil",
            &BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap(),
            4096,
        );
        let mut server =
            ScramServer::with_server_nonce(v, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".to_string());
        let first = server
            .client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
            .unwrap();
        assert_eq!(
            first,
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let fin = server
            .client_final(
                b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                  p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
            )
            .unwrap();
        assert_eq!(fin, b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
    }

    const PSQL_FIRST: &[u8] = b"n,,n=,r=9IZ2O01zb9IgiIZ1WJ/zgpJB";
    const PSQL_FINAL: &[u8] = b"c=biws,r=9IZ2O01zb9IgiIZ1WJ/zgpJBjx/oIRLs02gGSHcw1KEty3eY,\
                                p=AmNKosjJzS31NTlQYNs5BTeQjdHdk7lOflDo5re2an8=";

    /// A server in the state of a recorded psql exchange (password "foobar").
    fn psql_server() -> ScramServer {
        let v = ScramVerifier::from_password(
            "foobar",
            &BASE64.decode("fs3IXBy7U7+IvVjZ").unwrap(),
            4096,
        );
        ScramServer::with_server_nonce(v, "jx/oIRLs02gGSHcw1KEty3eY".to_string())
    }

    #[test]
    fn recorded_psql_exchange() {
        let mut server = psql_server();
        assert_eq!(
            server.client_first(PSQL_FIRST).unwrap(),
            b"r=9IZ2O01zb9IgiIZ1WJ/zgpJBjx/oIRLs02gGSHcw1KEty3eY,s=fs3IXBy7U7+IvVjZ,i=4096"
        );
        assert_eq!(
            server.client_final(PSQL_FINAL).unwrap(),
            b"v=U+ppxD5XUKtradnv8e2MkeupiA8FU87Sg8CXzXHDAzw="
        );
        // Nothing more is accepted afterwards.
        assert_eq!(server.client_final(PSQL_FINAL), Err(AuthError::OutOfOrder));
        assert_eq!(server.client_first(PSQL_FIRST), Err(AuthError::OutOfOrder));
    }

    #[test]
    fn server_nonce_extends_client_nonce() {
        let client = ScramSha256::new(b"p", ChannelBinding::unsupported());
        let first = String::from_utf8(client.message().to_vec()).unwrap();
        let client_nonce = first.split_once(",r=").unwrap().1;
        let mut server = ScramServer::new(ScramVerifier::parse(PG15_VERIFIERS[0].1).unwrap());
        let reply = String::from_utf8(server.client_first(first.as_bytes()).unwrap()).unwrap();
        let nonce = reply.strip_prefix("r=").unwrap().split(',').next().unwrap();
        assert!(nonce.starts_with(client_nonce));
        assert_eq!(nonce.len(), client_nonce.len() + 24);
        assert!(is_printable(nonce.as_bytes()));
        assert!(reply.ends_with(",s=niZQKkHe6IiyZR21u87whw==,i=4096"));
        // Two servers pick different nonces.
        let mut other = ScramServer::new(ScramVerifier::parse(PG15_VERIFIERS[0].1).unwrap());
        assert_ne!(
            other.client_first(first.as_bytes()).unwrap(),
            reply.as_bytes()
        );
        // The user name in client-first-message is ignored.
        let mut named = psql_server();
        let mut anonymous = psql_server();
        assert_eq!(
            named.client_first(b"n,,n=someone=2Celse,r=abc").unwrap(),
            anonymous.client_first(b"n,,n=,r=abc").unwrap()
        );
    }

    #[test]
    fn wrong_password_is_28p01() {
        let v = ScramVerifier::parse(PG15_VERIFIERS[0].1).unwrap();
        let err = exchange(v, "P", ChannelBinding::unsupported()).unwrap_err();
        assert_eq!(err, AuthError::WrongPassword);
        assert_eq!(err.sqlstate(), "28P01");
    }

    #[test]
    fn unknown_user_fails_like_wrong_password() {
        let a = mock_verifier("nobody");
        let b = mock_verifier("nobody");
        let c = mock_verifier("somebody");
        assert!(a.is_mock());
        assert_eq!(a, b, "the mock salt is stable for a user");
        assert_ne!(a.salt(), c.salt());
        assert_eq!(a.salt().len(), DEFAULT_SALT_LEN);
        assert_eq!(a.iterations(), DEFAULT_ITERATIONS);
        for password in ["", "p", "nobody"] {
            let err = exchange(a.clone(), password, ChannelBinding::unsupported()).unwrap_err();
            assert_eq!(err, AuthError::WrongPassword);
            assert_eq!(err.sqlstate(), "28P01");
        }
        // Even a proof that matches the mock's keys is refused: take a real verifier and
        // mark it as mock.
        let mut v = ScramVerifier::from_password("p", b"salt", 4096);
        v.mock = true;
        assert_eq!(
            exchange(v, "p", ChannelBinding::unsupported()),
            Err(AuthError::WrongPassword)
        );
    }

    /// The server side of a failed login never derives a key (the client does): an
    /// unknown user's mock verifier and the whole exchange are a few HMACs, far below
    /// one key derivation of a real role's iteration count, and nothing is kept.
    #[test]
    fn a_failed_login_costs_less_than_one_key_derivation() {
        let attempts = 100;
        let started = std::time::Instant::now();
        for i in 0..attempts {
            let mut server = ScramServer::new(mock_verifier(&format!("nobody{i}")));
            let first = server.client_first(b"n,,n=,r=clientnonce").unwrap();
            let nonce = std::str::from_utf8(&first[2..])
                .unwrap()
                .split(',')
                .next()
                .unwrap();
            let fin = format!("c=biws,r={nonce},p={}", BASE64.encode([7u8; KEY_LEN]));
            assert_eq!(
                server.client_final(fin.as_bytes()),
                Err(AuthError::WrongPassword)
            );
        }
        let failed_logins = started.elapsed();
        let started = std::time::Instant::now();
        std::hint::black_box(ScramVerifier::from_password(
            "p",
            b"salt",
            DEFAULT_ITERATIONS,
        ));
        let one_derivation = started.elapsed();
        assert!(
            failed_logins < one_derivation,
            "{attempts} failed logins took {failed_logins:?}, one key derivation {one_derivation:?}"
        );
    }

    #[test]
    fn tampered_nonce_fails() {
        let (mut server, fin) = after_first("p", ChannelBinding::unsupported());
        // Flip the last character of the nonce.
        let (before, proof) = fin.rsplit_once(",p=").unwrap();
        let mut before = before.as_bytes().to_vec();
        let last = before.last_mut().unwrap();
        *last = if *last == b'A' { b'B' } else { b'A' };
        let tampered = [&before[..], b",p=", proof.as_bytes()].concat();
        let err = server.client_final(&tampered).unwrap_err();
        assert_eq!(err, AuthError::NonceMismatch);
        assert_eq!(err.sqlstate(), "08P01");

        // Nonce cut short (a prefix of the right one) is not enough either.
        let (mut server, fin) = after_first("p", ChannelBinding::unsupported());
        let (before, proof) = fin.rsplit_once(",p=").unwrap();
        let tampered = format!("{},p={proof}", &before[..before.len() - 1]);
        assert_eq!(
            server.client_final(tampered.as_bytes()),
            Err(AuthError::NonceMismatch)
        );
    }

    #[test]
    fn bad_channel_binding_fails() {
        // n,, but the client claims y,, in c=, and vice versa.
        let (mut server, fin) = after_first("p", ChannelBinding::unsupported());
        let bad = fin.replacen("c=biws", "c=eSws", 1);
        let err = server.client_final(bad.as_bytes()).unwrap_err();
        assert_eq!(err, AuthError::ChannelBindingMismatch);
        assert_eq!(err.sqlstate(), "08P01");
        let (mut server, fin) = after_first("p", ChannelBinding::unrequested());
        let bad = fin.replacen("c=eSws", "c=biws", 1);
        assert_eq!(
            server.client_final(bad.as_bytes()),
            Err(AuthError::ChannelBindingMismatch)
        );
        // Channel binding requested: refused in client-first.
        let mut server = psql_server();
        let err = server
            .client_first(b"p=tls-server-end-point,,n=,r=abc")
            .unwrap_err();
        assert_eq!(err, AuthError::ChannelBindingNotSupported);
        assert_eq!(err.sqlstate(), "08P01");
        // With postgres-protocol's client asking for tls-server-end-point.
        let client = ScramSha256::new(b"p", ChannelBinding::tls_server_end_point(vec![1, 2, 3]));
        let mut server = psql_server();
        assert_eq!(
            server.client_first(client.message()),
            Err(AuthError::ChannelBindingNotSupported)
        );
    }

    #[test]
    fn garbage_base64_fails() {
        for proof in [
            "!!!!",
            "AmNKosjJzS31NTlQYNs5BTeQjdHdk7lOflDo5re2an8",
            "AmNKosjJzS31NTlQYNs5BTeQjdHdk7lOflDo5re2an8==",
            "AmNKosjJzS31NTlQYNs5BTeQjdHdk7lOflDo5re2an8=A",
            "AmNKosjJzS31NTlQYNs5BTeQjdHdk7lOflDo5re2",
            "AmNKosjJzS31NTlQYNs5BTeQjdHdk7lOflDo5re2an8AmNK",
            "",
        ] {
            let mut server = psql_server();
            server.client_first(PSQL_FIRST).unwrap();
            let msg =
                format!("c=biws,r=9IZ2O01zb9IgiIZ1WJ/zgpJBjx/oIRLs02gGSHcw1KEty3eY,p={proof}");
            let err = server.client_final(msg.as_bytes()).unwrap_err();
            assert!(matches!(err, AuthError::Malformed(_)), "{proof}: {err:?}");
            assert_eq!(err.sqlstate(), "08P01");
        }
        // A well-formed proof of the right length but wrong value.
        let mut server = psql_server();
        server.client_first(PSQL_FIRST).unwrap();
        let msg = format!(
            "c=biws,r=9IZ2O01zb9IgiIZ1WJ/zgpJBjx/oIRLs02gGSHcw1KEty3eY,p={}",
            BASE64.encode([0u8; 32])
        );
        assert_eq!(
            server.client_final(msg.as_bytes()),
            Err(AuthError::WrongPassword)
        );
    }

    #[test]
    fn truncated_messages_fail() {
        // Every strict prefix of client-final-message fails.
        for len in 0..PSQL_FINAL.len() {
            let mut server = psql_server();
            server.client_first(PSQL_FIRST).unwrap();
            assert!(
                server.client_final(&PSQL_FINAL[..len]).is_err(),
                "accepted prefix {:?}",
                String::from_utf8_lossy(&PSQL_FINAL[..len])
            );
        }
        // Prefixes of client-first-message up to the first nonce character fail; longer
        // ones are valid messages with a shorter nonce.
        let min = PSQL_FIRST.iter().position(|&b| b == b'r').unwrap() + 2;
        for len in 0..PSQL_FIRST.len() {
            let result = psql_server().client_first(&PSQL_FIRST[..len]);
            assert_eq!(result.is_ok(), len > min, "prefix length {len}: {result:?}");
        }
    }

    #[test]
    fn empty_and_out_of_order_input_fails() {
        let mut server = psql_server();
        assert_eq!(
            server.client_first(b""),
            Err(AuthError::Malformed("the message is empty"))
        );
        let mut server = psql_server();
        server.client_first(PSQL_FIRST).unwrap();
        assert_eq!(
            server.client_final(b""),
            Err(AuthError::Malformed("the message is empty"))
        );
        // Final before first.
        let mut server = psql_server();
        assert_eq!(server.client_final(PSQL_FINAL), Err(AuthError::OutOfOrder));
        // First twice.
        let mut server = psql_server();
        server.client_first(PSQL_FIRST).unwrap();
        assert_eq!(server.client_first(PSQL_FIRST), Err(AuthError::OutOfOrder));
        assert_eq!(server.client_final(PSQL_FINAL), Err(AuthError::OutOfOrder));
        // After a failure, the exchange is over.
        let mut server = psql_server();
        assert!(server.client_first(b"x").is_err());
        assert_eq!(server.client_first(PSQL_FIRST), Err(AuthError::OutOfOrder));
        let mut server = psql_server();
        server.client_first(PSQL_FIRST).unwrap();
        assert!(server.client_final(b"c=biws").is_err());
        assert_eq!(server.client_final(PSQL_FINAL), Err(AuthError::OutOfOrder));
    }

    #[test]
    fn malformed_client_first_fails() {
        let cases: &[(&[u8], &str)] = &[
            (b"n", "08P01"),
            (b"n,", "08P01"),
            (b"n,,", "08P01"),
            (b"x,,n=,r=abc", "08P01"),
            (b"nn,n=,r=abc", "08P01"),
            (b"n,x,n=,r=abc", "08P01"),
            (b"n,a=admin,n=,r=abc", "0A000"),
            (b"n,,m=ext,n=,r=abc", "0A000"),
            (b"n,,r=abc", "08P01"),
            (b"n,,n=,r=", "08P01"),
            (b"n,,n=,x=abc", "08P01"),
            (b"n,,n=,r=ab,c", "08P01"),
            (b"n,,n=,r=a b", "08P01"),
            (b"n,,n=,r=a\x7f", "08P01"),
            (b"n,,n=,r=\xc3\xa9", "08P01"),
            (b"n,,n=,r=abc\0", "08P01"),
            (b"n,,n=,r=abc,", "08P01"),
            (b"n,,n=,r=abc,1=x", "08P01"),
            (b"n,,n=,", "08P01"),
            (b",,n=,r=abc", "08P01"),
        ];
        for (msg, sqlstate) in cases {
            let err = psql_server().client_first(msg).unwrap_err();
            assert_eq!(
                err.sqlstate(),
                *sqlstate,
                "{:?}: {err:?}",
                String::from_utf8_lossy(msg)
            );
        }
        // Extensions after the nonce are ignored; non-UTF-8 user names are accepted.
        psql_server().client_first(b"n,,n=,r=abc,x=1").unwrap();
        psql_server().client_first(b"y,,n=\xff\xfe,r=abc").unwrap();
    }

    #[test]
    fn client_final_attribute_order() {
        let nonce = "9IZ2O01zb9IgiIZ1WJ/zgpJBjx/oIRLs02gGSHcw1KEty3eY";
        let proof = "AmNKosjJzS31NTlQYNs5BTeQjdHdk7lOflDo5re2an8=";
        let bad = [
            format!("r={nonce},c=biws,p={proof}"),
            format!("c=biws,p={proof},r={nonce}"),
            format!("c=biws,r={nonce}"),
            format!("c=biws,r={nonce},p={proof},x=1"),
            format!("c=biws,r={nonce},p={proof},"),
            format!("c=biws,r={nonce},p={proof},p={proof}"),
            format!("c=biws,r={nonce},,p={proof}"),
            format!("c=biws,,r={nonce},p={proof}"),
            format!("c=biws,r={nonce},=x,p={proof}"),
            format!("c=biws=,r={nonce},p={proof}"),
            format!("c=,r={nonce},p={proof}"),
            format!("c=biws,r={nonce},p= {proof}"),
            format!("p={proof}"),
            format!("c=biws,r={nonce}p={proof}"),
        ];
        for msg in &bad {
            let mut server = psql_server();
            server.client_first(PSQL_FIRST).unwrap();
            let err = server.client_final(msg.as_bytes()).unwrap_err();
            assert_eq!(err.sqlstate(), "08P01", "{msg}: {err:?}");
        }
        // An extension between the nonce and the proof is allowed (as in PostgreSQL),
        // but it is part of AuthMessage, so the recorded proof no longer matches.
        let mut server = psql_server();
        server.client_first(PSQL_FIRST).unwrap();
        let msg = format!("c=biws,r={nonce},x=1,p={proof}");
        assert_eq!(
            server.client_final(msg.as_bytes()),
            Err(AuthError::WrongPassword)
        );
    }

    /// Mutations of valid messages and random bytes never panic.
    #[test]
    fn mutations_never_panic() {
        use rand::Rng;
        let mut rng = rand::thread_rng();
        let replacements = [0u8, b',', b'=', b'p', b'r', b'c', b'n', b'y', 0xff, b'A'];
        for i in 0..PSQL_FIRST.len() {
            for r in replacements {
                let mut msg = PSQL_FIRST.to_vec();
                msg[i] = r;
                let _ = psql_server().client_first(&msg);
                msg.remove(i);
                let _ = psql_server().client_first(&msg);
            }
        }
        for i in 0..PSQL_FINAL.len() {
            for r in replacements {
                let mut msg = PSQL_FINAL.to_vec();
                msg[i] = r;
                let mut server = psql_server();
                server.client_first(PSQL_FIRST).unwrap();
                let result = server.client_final(&msg);
                if msg != PSQL_FINAL {
                    assert!(result.is_err(), "{:?}", String::from_utf8_lossy(&msg));
                }
            }
        }
        for _ in 0..2000 {
            let len = rng.gen_range(0..80);
            let msg: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            let _ = psql_server().client_first(&msg);
            let mut server = psql_server();
            server.client_first(PSQL_FIRST).unwrap();
            assert!(server.client_final(&msg).is_err());
            let _ = parse_sasl_initial_response(&msg);
        }
    }

    #[test]
    fn sasl_initial_response() {
        let mut body = b"SCRAM-SHA-256\0".to_vec();
        body.extend_from_slice(&(PSQL_FIRST.len() as i32).to_be_bytes());
        body.extend_from_slice(PSQL_FIRST);
        let (mech, data) = parse_sasl_initial_response(&body).unwrap();
        assert_eq!(mech, SCRAM_SHA_256);
        assert_eq!(data, PSQL_FIRST);
        check_mechanism(&mech).unwrap();

        let err = check_mechanism("SCRAM-SHA-256-PLUS").unwrap_err();
        assert_eq!(err.sqlstate(), "08P01");
        assert!(check_mechanism("").is_err());

        // No initial response.
        let mut none = b"SCRAM-SHA-256\0".to_vec();
        none.extend_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(
            parse_sasl_initial_response(&none).unwrap(),
            ("SCRAM-SHA-256".to_string(), vec![])
        );

        // Zero-length data.
        let mut empty = b"X\0".to_vec();
        empty.extend_from_slice(&0i32.to_be_bytes());
        assert_eq!(
            parse_sasl_initial_response(&empty).unwrap(),
            ("X".to_string(), vec![])
        );

        let bad: Vec<Vec<u8>> = vec![
            vec![],
            b"SCRAM-SHA-256".to_vec(),
            b"SCRAM-SHA-256\0".to_vec(),
            b"SCRAM-SHA-256\0\0\0\0".to_vec(),
            body[..body.len() - 1].to_vec(),
            [&body[..], b"x"].concat(),
            [&none[..], b"x"].concat(),
            [b"SCRAM-SHA-256\0".as_slice(), &(-2i32).to_be_bytes()].concat(),
            [b"\xff\0".as_slice(), &0i32.to_be_bytes()].concat(),
        ];
        for b in &bad {
            let err = parse_sasl_initial_response(b).unwrap_err();
            assert_eq!(err.sqlstate(), "08P01");
        }
    }

    #[test]
    fn message_bodies() {
        assert_eq!(sasl_mechanisms_body(), b"\0\0\0\x0aSCRAM-SHA-256\0\0");
        assert_eq!(sasl_continue_body(b"r=x"), b"\0\0\0\x0br=x");
        assert_eq!(sasl_final_body(b"v=y"), b"\0\0\0\x0cv=y");
    }

    #[test]
    fn sqlstates() {
        assert_eq!(AuthError::WrongPassword.sqlstate(), "28P01");
        assert_eq!(AuthError::Malformed("x").sqlstate(), "08P01");
        assert_eq!(AuthError::NonceMismatch.sqlstate(), "08P01");
        assert_eq!(AuthError::ChannelBindingMismatch.sqlstate(), "08P01");
        assert_eq!(AuthError::ChannelBindingNotSupported.sqlstate(), "08P01");
        assert_eq!(AuthError::OutOfOrder.sqlstate(), "08P01");
        assert_eq!(
            AuthError::UnsupportedMechanism("x".into()).sqlstate(),
            "08P01"
        );
        assert_eq!(AuthError::Unsupported("x").sqlstate(), "0A000");
    }

    #[test]
    fn hi_matches_pbkdf2_vector() {
        // PBKDF2-HMAC-SHA256("password", "salt", c, 32) from RFC 7914 / common vectors.
        assert_eq!(
            hi(b"password", b"salt", 1),
            [
                0x12, 0x0f, 0xb6, 0xcf, 0xfc, 0xf8, 0xb3, 0x2c, 0x43, 0xe7, 0x22, 0x52, 0x56, 0xc4,
                0xf8, 0x37, 0xa8, 0x65, 0x48, 0xc9, 0x2c, 0xcc, 0x35, 0x48, 0x08, 0x05, 0x98, 0x7c,
                0xb7, 0x0b, 0xe1, 0x7b
            ]
        );
        assert_eq!(
            hi(b"password", b"salt", 4096),
            [
                0xc5, 0xe4, 0x78, 0xd5, 0x92, 0x88, 0xc8, 0x41, 0xaa, 0x53, 0x0d, 0xb6, 0x84, 0x5c,
                0x4c, 0x8d, 0x96, 0x28, 0x93, 0xa0, 0x01, 0xce, 0x4e, 0x11, 0xa4, 0x96, 0x38, 0x73,
                0xaa, 0x98, 0x13, 0x4a
            ]
        );
    }
}
