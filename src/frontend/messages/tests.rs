//! Unit tests of the wire formats.

#[test]
fn command_tags_give_their_row_count() {
    assert_eq!(super::command_rows(b"INSERT 0 12\0"), 12);
    assert_eq!(super::command_rows(b"UPDATE 3\0"), 3);
    assert_eq!(super::command_rows(b"INSERT 0 0\0"), 0);
    assert_eq!(super::command_rows(b"CREATE TABLE\0"), 0);
}

#[test]
fn unnamed_run_is_parse_bind_describe_execute() {
    let bind = super::BindMsg {
        portal: String::new(),
        statement: String::new(),
        param_formats: vec![1],
        params: vec![Some(bytes::Bytes::from_static(&[0, 0, 0, 7]))],
        result_formats: vec![],
    };
    let mut with = bytes::BytesMut::new();
    super::write_unnamed_run(&mut with, "SELECT $1", &[23], &bind, &[0], true);
    let mut by_hand = bytes::BytesMut::new();
    super::write_parse(&mut by_hand, "", "SELECT $1", &[23]);
    super::write_bind(&mut by_hand, "", "", &[1], &bind.params, &[0]);
    super::write_describe(&mut by_hand, b'P', "");
    super::write_execute(&mut by_hand, "", 0);
    assert_eq!(with, by_hand);
    let tags: Vec<u8> = {
        let mut b = with.clone();
        let mut t = Vec::new();
        while let Ok(Some(f)) = super::decode_frame(&mut b, 1 << 20) {
            t.push(f.tag);
        }
        t
    };
    assert_eq!(tags, b"PBDE");
    let mut without = bytes::BytesMut::new();
    super::write_unnamed_run(&mut without, "SELECT 1", &[], &bind, &[], false);
    assert!(!without.contains(&b'D'));
}

use super::*;

fn framed(tag: u8, body: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    write_raw(&mut b, tag, body);
    b
}

#[test]
fn peek_sees_whole_messages_only_and_consumes_nothing() {
    let mut buf = framed(b'E', b"\0\0\0\0\0");
    write_sync(&mut buf);
    let (tag, body, len) = peek_frame(&buf).unwrap();
    assert_eq!((tag, body, len), (b'E', &b"\0\0\0\0\0"[..], 10));
    assert_eq!(peek_frame(&buf[len..]).unwrap(), (b'S', &b""[..], 5));
    assert_eq!(buf.len(), 15);
    assert_eq!(peek_frame(&buf[..9]), None);
    assert_eq!(peek_frame(&buf[..3]), None);
    assert_eq!(peek_frame(&[b'S', 0, 0, 0, 2]), None);
}

#[test]
fn frames_split_and_wait_for_more() {
    let mut buf = framed(b'Q', b"select 1\0");
    buf.extend_from_slice(&[b'S', 0, 0]);
    let f = decode_frame(&mut buf, MAX_MESSAGE_LEN).unwrap().unwrap();
    assert_eq!(f.tag, b'Q');
    assert_eq!(decode_query(&f.body).unwrap(), "select 1");
    assert_eq!(decode_query(b"select 1\0S").unwrap_err().code, "08P01");
    assert_eq!(decode_query(b"select 1").unwrap_err().code, "08P01");
    assert_eq!(decode_frame(&mut buf, MAX_MESSAGE_LEN).unwrap(), None);
    buf.extend_from_slice(&[0, 4]);
    assert_eq!(
        decode_frame(&mut buf, MAX_MESSAGE_LEN)
            .unwrap()
            .unwrap()
            .tag,
        b'S'
    );
}

#[test]
fn lying_and_huge_lengths_are_refused() {
    let mut buf = BytesMut::from(&[b'Q', 0, 0, 0, 2][..]);
    assert_eq!(
        decode_frame(&mut buf, MAX_MESSAGE_LEN).unwrap_err().code,
        "08P01"
    );
    let mut buf = BytesMut::from(&[b'Q', 0x7f, 0xff, 0xff, 0xff][..]);
    assert!(decode_frame(&mut buf, MAX_MESSAGE_LEN).is_err());
}

#[test]
fn startup_packets() {
    let mut b = BytesMut::new();
    b.put_i32(8);
    b.put_i32(SSL_REQUEST);
    assert_eq!(
        decode_startup(&mut b).unwrap(),
        Some(StartupPacket::SslRequest)
    );
    let mut b = BytesMut::new();
    b.put_i32(16);
    b.put_i32(CANCEL_REQUEST);
    b.put_i32(7);
    b.put_i32(9);
    assert_eq!(
        decode_startup(&mut b).unwrap(),
        Some(StartupPacket::Cancel {
            process_id: 7,
            secret_key: 9
        })
    );
    let body = b"user\0bob\0database\0db\0\0";
    let mut b = BytesMut::new();
    b.put_i32(8 + body.len() as i32);
    b.put_i32(PROTOCOL_V3);
    b.put_slice(body);
    match decode_startup(&mut b).unwrap().unwrap() {
        StartupPacket::Startup {
            params,
            minor,
            protocol_options,
        } => {
            assert_eq!(
                params,
                vec![
                    ("user".into(), "bob".into()),
                    ("database".into(), "db".into())
                ]
            );
            assert_eq!((minor, protocol_options.len()), (0, 0));
        }
        other => panic!("{other:?}"),
    }
    let mut b = BytesMut::new();
    b.put_i32(3);
    assert!(decode_startup(&mut b).is_err());
    let mut b = BytesMut::new();
    b.put_i32(12);
    b.put_i32(PROTOCOL_V3);
    b.put_slice(b"user"); // no terminator
    assert!(decode_startup(&mut b).is_err());
}

#[test]
fn newer_minor_versions_and_protocol_options_are_negotiated() {
    let body = b"user\0bob\0_pq_.compression\0on\0database\0db\0\0";
    let mut b = BytesMut::new();
    b.put_i32(8 + body.len() as i32);
    b.put_i32(PROTOCOL_V3 | 2);
    b.put_slice(body);
    assert_eq!(
        decode_startup(&mut b).unwrap(),
        Some(StartupPacket::Startup {
            params: vec![
                ("user".into(), "bob".into()),
                ("database".into(), "db".into())
            ],
            minor: 2,
            protocol_options: vec!["_pq_.compression".into()],
        })
    );
    // PostgreSQL 15's bytes for 3.2 with that option.
    let mut v = BytesMut::new();
    write_negotiate_protocol_version(&mut v, &["_pq_.compression".to_string()]);
    assert_eq!(&v[..], b"v\0\0\0\x1d\0\x03\0\0\0\0\0\x01_pq_.compression\0");
    // Another major version: PostgreSQL's 0A000, in the old format to protocol 2.
    for (code, major) in [(2 << 16, 2u16), (4 << 16 | 1, 4)] {
        let mut b = BytesMut::new();
        b.put_i32(8 + body.len() as i32);
        b.put_i32(code);
        b.put_slice(body);
        assert_eq!(requested_major(&b), Some(major));
        let e = decode_startup(&mut b).unwrap_err();
        assert_eq!(e.code, "0A000");
        let mut out = BytesMut::new();
        write_startup_error(&mut out, &e, Some(major));
        if major == 2 {
            assert_eq!(
                &out[..],
                &b"EFATAL:  unsupported frontend protocol 2.0: server supports 3.0 to 3.0\n\0"[..]
            );
        } else {
            assert_eq!(out[0], b'E');
            assert_eq!(
                e.message,
                "unsupported frontend protocol 4.1: server supports 3.0 to 3.0"
            );
        }
    }
    assert_eq!(startup_name(&"u".repeat(200)), "u".repeat(63));
    assert_eq!(startup_name(&"é".repeat(40)), "é".repeat(31));
    assert_eq!(startup_name("bob"), "bob");
}

#[test]
fn parameter_descriptions_of_65536_types_keep_them_all() {
    // As PostgreSQL writes it: the count wrapped to 0, every type after it.
    let types = vec![25u32; 65_536];
    let mut b = BytesMut::new();
    write_parameter_description(&mut b, &types);
    let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
    assert_eq!(&f.body[..2], &[0, 0]);
    assert_eq!(decode_parameter_description(&f.body).unwrap().len(), 65_536);
}

#[test]
fn startup_refusals_are_sent_or_only_logged_as_postgresql_does() {
    let mut b = BytesMut::from(&b"X\0\0\0\x04"[..]);
    let e = decode_startup(&mut b).unwrap_err();
    assert_eq!(e.severity, LOG_ONLY);
    for body in [&b"user\0u"[..], b"user\0u\0", b"user\0u\0database\0", b""] {
        let mut b = BytesMut::new();
        b.put_i32(8 + body.len() as i32);
        b.put_i32(196608);
        b.put_slice(body);
        let e = decode_startup(&mut b).unwrap_err();
        assert_eq!(e.severity, "FATAL");
        assert_eq!(
            e.message,
            "invalid startup packet layout: expected terminator as last byte"
        );
    }
}

#[test]
fn parameter_counts_are_unsigned_16_bits() {
    let types = vec![23u32; 65535];
    let mut b = BytesMut::new();
    write_parse(&mut b, "", "select", &types);
    let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
    assert_eq!(decode_parse(&f.body).unwrap().param_types.len(), 65535);
    // One more (described, re-parsed after DDL): the count must not wrap to 0 with
    // 65,536 types after it (PostgreSQL: 08P01 invalid message format).
    let described = vec![23u32; 65536];
    let mut b = BytesMut::new();
    write_parse(&mut b, "", "select", &described);
    let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
    assert_eq!(decode_parse(&f.body).unwrap().param_types.len(), 65535);
    let params = vec![Some(Bytes::from_static(b"1")); 40000];
    let mut b = BytesMut::new();
    write_bind(&mut b, "", "", &[0], &params, &[]);
    let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
    assert_eq!(decode_bind(&f.body).unwrap().params.len(), 40000);
    let mut b = BytesMut::new();
    write_parameter_description(&mut b, &types[..40000]);
    let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
    assert_eq!(decode_parameter_description(&f.body).unwrap().len(), 40000);
    // A count claiming more than the message holds is an error, not an allocation.
    let mut body = BytesMut::new();
    body.put_slice(b"\0select\0");
    body.put_u16(65535);
    assert!(decode_parse(&body).is_err());
}

#[test]
fn parse_bind_roundtrip() {
    let mut b = BytesMut::new();
    write_parse(&mut b, "s1", "select $1", &[23]);
    let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
    let p = decode_parse(&f.body).unwrap();
    assert_eq!(
        (p.name.as_str(), p.query.as_str(), p.param_types),
        ("s1", "select $1", vec![23])
    );

    let mut b = BytesMut::new();
    let params = vec![Some(Bytes::from_static(b"42")), None];
    write_bind(&mut b, "p", "s1", &[0], &params, &[1]);
    let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
    let bind = decode_bind(&f.body).unwrap();
    assert_eq!(bind.params, params);
    assert_eq!(bind.result_formats, vec![1]);
    assert_eq!(bind.param_format(1), 0);
}

#[test]
fn truncated_bind_is_an_error_not_a_panic() {
    let mut b = BytesMut::new();
    write_bind(
        &mut b,
        "",
        "s",
        &[],
        &[Some(Bytes::from_static(b"hello"))],
        &[],
    );
    let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
    for cut in 0..f.body.len() {
        let _ = decode_bind(&f.body.slice(..cut));
    }
    assert!(decode_bind(&f.body.slice(..f.body.len() - 3)).is_err());
}

#[test]
fn row_description_and_data_row_roundtrip() {
    let fields = vec![FieldDesc::computed("count", 20, 8, 0)];
    let mut b = BytesMut::new();
    write_row_description(&mut b, &fields);
    let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
    assert_eq!(decode_row_description(&f.body).unwrap(), fields);
    let mut b = BytesMut::new();
    write_data_row(&mut b, &[Some(b"12"), None]);
    let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
    let vals = decode_data_row(&f.body).unwrap();
    assert_eq!(vals, vec![Some(Bytes::from_static(b"12")), None]);
}

#[test]
fn error_fields_are_encoded() {
    let mut b = BytesMut::new();
    write_error(&mut b, &PgError::not_supported("nope").with_detail("d"));
    let f = decode_frame(&mut b, MAX_MESSAGE_LEN).unwrap().unwrap();
    let e = PgError::from_server_fields(f.body);
    assert_eq!((e.code.as_str(), e.message.as_str()), ("0A000", "nope"));
    assert_eq!(e.detail.as_deref(), Some("d"));
}
