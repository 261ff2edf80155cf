//! Rows to JSON with no allocation per row: DataRow frames are cut from a read buffer,
//! viewed in place and written into the response buffer by the gateway's own writer, for
//! every format, with a counting allocator watching (per thread, so other tests' threads do
//! not disturb it).
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::{BufMut, BytesMut};
use pgvia::gateway::document::Document;
use pgvia::gateway::json::ValueText;
use pgvia::gateway::request::Format;
use pgvia::gateway::results::RowAs;
use wire::backend::BackendMessage;
use wire::FrameDecoder;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every method forwards to the system allocator with the caller's arguments; the
// count only touches a `const`-initialised thread-local, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

fn frame(buf: &mut BytesMut, tag: u8, body: &[u8]) {
    buf.put_u8(tag);
    buf.put_i32(body.len() as i32 + 4);
    buf.put_slice(body);
}

/// A RowDescription for (oid, name) columns, text format.
fn row_description(cols: &[(u32, &str)]) -> BytesMut {
    let mut b = BytesMut::new();
    b.put_i16(cols.len() as i16);
    for (oid, name) in cols {
        b.put_slice(name.as_bytes());
        b.put_u8(0);
        b.put_u32(0);
        b.put_i16(0);
        b.put_u32(*oid);
        b.put_i16(-1);
        b.put_i32(-1);
        b.put_i16(0);
    }
    let mut f = BytesMut::new();
    frame(&mut f, b'T', &b);
    f
}

fn data_row(values: &[Option<&[u8]>]) -> Vec<u8> {
    let mut b = BytesMut::new();
    b.put_i16(values.len() as i16);
    for v in values {
        match v {
            Some(v) => {
                b.put_i32(v.len() as i32);
                b.put_slice(v);
            }
            None => b.put_i32(-1),
        }
    }
    let mut f = BytesMut::new();
    frame(&mut f, b'D', &b);
    f.to_vec()
}

/// The four shapes of the benchmark: narrow integers, mixed types, a wide row with jsonb,
/// half NULLs.
/// Columns as (type oid, name), and one DataRow frame for them.
type Shape = (Vec<(u32, &'static str)>, Vec<u8>);

fn shapes() -> Vec<Shape> {
    let long = "some text with \"quotes\", a tab\t and é".repeat(4);
    vec![
        (vec![(23, "a"), (23, "b"), (21, "c")], data_row(&[Some(b"123456"), Some(b"-7"), Some(b"42")])),
        (
            vec![
                (23, "id"),
                (25, "name"),
                (701, "score"),
                (16, "ok"),
                (1184, "at"),
                (1700, "amount"),
                (1007, "ints"),
            ],
            data_row(&[
                Some(b"17"),
                Some(b"alice \"the\" \x01 great"),
                Some(b"3.14159"),
                Some(b"t"),
                Some(b"2024-01-02 03:04:05.678+00"),
                Some(b"12345.6789"),
                Some(b"{1,2,NULL,4}"),
            ]),
        ),
        (
            (0..20).map(|i| (if i == 19 { 3802 } else { 25 }, ["c0", "c1", "c2"][i % 3])).collect(),
            data_row(
                &(0..20)
                    .map(|i| {
                        Some(if i == 19 {
                            &b"{\"k\": [1, 2, {\"n\": \"v\\\"q\"}], \"x\": null}"[..]
                        } else {
                            long.as_bytes()
                        })
                    })
                    .collect::<Vec<_>>(),
            ),
        ),
        (vec![(23, "a"), (25, "b"), (701, "c"), (16, "d")], data_row(&[None, Some(b"x"), None, Some(b"f")])),
    ]
}

#[test]
fn rows_are_written_without_allocating() {
    const ROWS: usize = 20_000;
    // The counter sees this thread's allocations.
    let before = allocs();
    let v = std::hint::black_box(vec![1u8; 10]);
    assert!(allocs() > before && v.len() == 10);
    for (cols, row) in shapes() {
        for format in [Format::Json, Format::Ndjson, Format::NeonStream] {
            for (text, row_as) in [(ValueText::Typed, RowAs::Object), (ValueText::Raw, RowAs::Array)] {
                // What the tunnel reads: many DataRow frames in one buffer.
                let mut input = BytesMut::with_capacity(row.len() * ROWS);
                for _ in 0..ROWS {
                    input.extend_from_slice(&row);
                }
                let desc_frame = row_description(&cols);
                let decoder = FrameDecoder::new(1 << 30);
                let mut desc_buf = desc_frame.clone();
                let desc = decoder.decode(&mut desc_buf).expect("decode").expect("a frame");
                let BackendMessage::RowDescription(d) = BackendMessage::parse(&desc).expect("parse") else {
                    panic!("not a RowDescription")
                };
                let mut doc = Document::new(format, false, text);
                let mut out = BytesMut::with_capacity(64 * 1024 * 1024);
                doc.result_start(&mut out, Some(&d), row_as).expect("start");
                let mut count = |n: usize, input: &mut BytesMut, out: &mut BytesMut| {
                    let before = allocs();
                    for _ in 0..n {
                        let f = decoder.decode(input).expect("decode").expect("a frame");
                        let BackendMessage::DataRow(r) = BackendMessage::parse(&f).expect("parse") else {
                            panic!("not a DataRow")
                        };
                        doc.row(out, &r).expect("row");
                    }
                    allocs() - before
                };
                // Warm-up: the read buffer becomes shared on the first split.
                count(100, &mut input, &mut out);
                let n = count(ROWS - 100, &mut input, &mut out);
                let per_row = n as f64 / (ROWS - 100) as f64;
                assert_eq!(
                    n,
                    0,
                    "{format:?} {text:?} {row_as:?}: {n} allocations over {} rows ({per_row}/row)",
                    ROWS - 100
                );
                // And the output is what it should be.
                let text_out = std::str::from_utf8(&out).expect("UTF-8");
                if format == Format::Ndjson {
                    let first = text_out.lines().next().expect("a line");
                    serde_json::from_str::<serde_json::Value>(first).expect("a JSON row");
                }
            }
        }
    }
}
