//! Unit tests of server-side SCRAM-SHA-256, checked against PostgreSQL 15's verifiers and
//! rust-postgres' client.

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
fn exchange(verifier: ScramVerifier, password: &str, cb: ChannelBinding) -> Result<(), AuthError> {
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
    let v = ScramVerifier::parse(&postgres_protocol::password::scram_sha_256(b"hunter2")).unwrap();
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
    let v =
        ScramVerifier::from_password("foobar", &BASE64.decode("fs3IXBy7U7+IvVjZ").unwrap(), 4096);
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
    // Each cost the fastest of 5 runs: a run the scheduler interrupts (tests run
    // beside other tests) says nothing of the work done. 20 failed logins: one that
    // derived a key would cost 20 derivations.
    let attempts = 20;
    let fastest = |run: &dyn Fn()| {
        (0..5)
            .map(|_| {
                let started = std::time::Instant::now();
                run();
                started.elapsed()
            })
            .min()
            .expect("5 runs")
    };
    let failed_logins = fastest(&|| {
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
    });
    let one_derivation = fastest(&|| {
        std::hint::black_box(ScramVerifier::from_password(
            "p",
            b"salt",
            DEFAULT_ITERATIONS,
        ));
    });
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
        let msg = format!("c=biws,r=9IZ2O01zb9IgiIZ1WJ/zgpJBjx/oIRLs02gGSHcw1KEty3eY,p={proof}");
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
