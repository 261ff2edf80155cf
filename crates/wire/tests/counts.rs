//! Counts of parameters, formats and columns are unsigned 16-bit in PostgreSQL's protocol
//! (`pq_getmsgint(msg, 2)`): up to 65,535, never negative. Every message with such a count is
//! built here by postgres-protocol (a driver's encoder) or by hand, with counts on both sides
//! of 32,767, and must parse with the count it was built with.

use bytes::{BufMut, BytesMut};
use postgres_protocol::message::frontend;
use postgres_protocol::IsNull;
use proptest::prelude::*;
use wire::backend::BackendMessage;
use wire::frontend::FrontendMessage;
use wire::{Frame, FrameDecoder};

fn one_frame(mut buf: BytesMut) -> Frame {
    let frame = FrameDecoder::new(64 << 20).decode(&mut buf).expect("valid frame").expect("whole frame");
    assert!(buf.is_empty());
    frame
}

/// A backend frame built by hand: tag, length, body.
fn backend_frame(tag: u8, body: &[u8]) -> Frame {
    let mut buf = BytesMut::new();
    buf.put_u8(tag);
    buf.put_i32(i32::try_from(body.len() + 4).expect("small"));
    buf.put_slice(body);
    one_frame(buf)
}

/// Bind of `n` int4 parameters (NULL every seventh), as tokio-postgres encodes it.
fn bind(n: usize) -> Frame {
    let mut buf = BytesMut::new();
    let values: Vec<Option<i32>> = (0..n).map(|i| (i % 7 != 0).then_some(i as i32)).collect();
    frontend::bind(
        "",
        "s",
        std::iter::repeat_n(1i16, n),
        values.iter(),
        |v, buf| match v {
            Some(v) => {
                buf.put_i32(*v);
                Ok(IsNull::No)
            }
            None => Ok(IsNull::Yes),
        },
        std::iter::repeat_n(1i16, n.min(3)),
        &mut buf,
    )
    .map_err(|_| "bind")
    .expect("encodes");
    one_frame(buf)
}

fn check_bind(n: usize) {
    let f = bind(n);
    let Ok(FrontendMessage::Bind(b)) = FrontendMessage::parse(&f) else { panic!("Bind of {n} parameters") };
    assert_eq!(b.params.len(), n);
    assert_eq!(b.param_formats.len(), n);
    assert_eq!(b.params.iter().count(), n);
    assert_eq!(b.params.iter().filter(Option::is_none).count(), n.div_ceil(7));
    assert_eq!(b.result_formats.len(), n.min(3));
}

fn check_parse(n: usize) {
    let mut buf = BytesMut::new();
    let types: Vec<u32> = (0..n as u32).collect();
    frontend::parse("s", "SELECT 1", types.iter().copied(), &mut buf).map_err(|_| "parse").expect("encodes");
    let f = one_frame(buf);
    let Ok(FrontendMessage::Parse(p)) = FrontendMessage::parse(&f) else { panic!("Parse of {n} types") };
    assert_eq!(p.param_types.len(), n);
    assert!(p.param_types.iter().eq(types.iter().copied()));
}

fn check_backend_counts(n: usize) {
    let count = u16::try_from(n).expect("a 16-bit count").to_be_bytes();
    // DataRow: n NULLs.
    let mut body = count.to_vec();
    (0..n).for_each(|_| body.extend_from_slice(&(-1i32).to_be_bytes()));
    let f = backend_frame(b'D', &body);
    let Ok(BackendMessage::DataRow(row)) = BackendMessage::parse(&f) else { panic!("DataRow of {n}") };
    assert_eq!(row.len(), n);
    assert_eq!(row.values().filter(|v| matches!(v, Ok(None))).count(), n);
    // RowDescription: n columns named "c".
    let mut body = count.to_vec();
    for _ in 0..n {
        body.extend_from_slice(b"c\0");
        body.extend_from_slice(&[0; 4 + 2 + 4 + 2 + 4 + 2]);
    }
    let f = backend_frame(b'T', &body);
    let Ok(BackendMessage::RowDescription(rd)) = BackendMessage::parse(&f) else { panic!("RowDescription") };
    assert_eq!(rd.len(), n);
    assert_eq!(rd.columns().filter(Result::is_ok).count(), n);
    // ParameterDescription: n OIDs.
    let mut body = count.to_vec();
    (0..n as u32).for_each(|oid| body.extend_from_slice(&oid.to_be_bytes()));
    let f = backend_frame(b't', &body);
    let Ok(BackendMessage::ParameterDescription(oids)) = BackendMessage::parse(&f) else { panic!("t") };
    assert_eq!(oids.len(), n);
    // CopyInResponse / CopyOutResponse: n column formats.
    for tag in [b'G', b'H'] {
        let mut body = vec![1u8];
        body.extend_from_slice(&count);
        (0..n).for_each(|_| body.extend_from_slice(&1i16.to_be_bytes()));
        let f = backend_frame(tag, &body);
        match BackendMessage::parse(&f) {
            Ok(BackendMessage::CopyInResponse(c) | BackendMessage::CopyOutResponse(c)) => {
                assert_eq!(c.column_formats.len(), n)
            }
            other => panic!("copy response of {n} columns: {other:?}"),
        }
    }
}

fn check_function_call(n: usize) {
    let mut body = Vec::new();
    body.extend_from_slice(&1234u32.to_be_bytes());
    body.extend_from_slice(&u16::try_from(n).expect("16-bit").to_be_bytes());
    (0..n).for_each(|_| body.extend_from_slice(&0i16.to_be_bytes()));
    body.extend_from_slice(&u16::try_from(n).expect("16-bit").to_be_bytes());
    (0..n).for_each(|_| body.extend_from_slice(&(-1i32).to_be_bytes()));
    body.extend_from_slice(&0i16.to_be_bytes());
    let mut buf = BytesMut::new();
    buf.put_u8(b'F');
    buf.put_i32(i32::try_from(body.len() + 4).expect("small"));
    buf.put_slice(&body);
    let f = one_frame(buf);
    let Ok(FrontendMessage::FunctionCall(call)) = FrontendMessage::parse(&f) else { panic!("F of {n}") };
    assert_eq!(call.args.len(), n);
    assert_eq!(call.arg_formats.len(), n);
}

#[test]
fn the_limits_and_the_old_sign_boundary() {
    for n in [0, 1, 32_767, 32_768, 40_000, 65_535] {
        check_bind(n);
        check_parse(n);
        check_backend_counts(n);
        check_function_call(n);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_16_bit_count_parses(n in 0usize..=65_535) {
        check_bind(n);
        check_parse(n);
        check_backend_counts(n);
        check_function_call(n);
    }
}
