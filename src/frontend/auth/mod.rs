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
mod tests;
