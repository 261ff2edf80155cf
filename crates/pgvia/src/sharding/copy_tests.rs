use bytes::BytesMut;
use shard::{KeyType, ShardFunction};

use super::*;

fn split(sql: &str, chunks: &[&[u8]]) -> Result<Vec<Vec<u8>>, CopyError> {
    let options = options(sql)?;
    let function = ShardFunction::Hash { shards: 2 };
    let index = options.columns.iter().position(|c| c == "id").unwrap_or(0);
    let key = KeyPlace { index, key_type: KeyType::BigInt, function: &function };
    let mut s = Splitter::new(options);
    let mut out = vec![BytesMut::new(), BytesMut::new()];
    for c in chunks {
        s.push(c, &key, &mut out)?;
    }
    s.finish(&key, &mut out)?;
    Ok(out.into_iter().map(|b| b.to_vec()).collect())
}

fn shard_of(id: i64) -> usize {
    ShardFunction::Hash { shards: 2 }.shard_of(&shard::Value::Int(id)).unwrap()
}

#[test]
fn options_in_both_syntaxes() {
    let o =
        options("COPY s.t (name, \"Id\") FROM STDIN WITH (FORMAT csv, HEADER true, DELIMITER ';')").unwrap();
    assert_eq!((o.format, o.delimiter, o.header, o.quote, o.escape), (Format::Csv, b';', true, b'"', b'"'));
    assert_eq!(o.columns, vec!["name".to_owned(), "Id".to_owned()]);
    let o = options("copy t from stdin csv header delimiter as '|' null 'x'").unwrap();
    assert_eq!((o.format, o.delimiter, o.header, o.null.as_slice()), (Format::Csv, b'|', true, &b"x"[..]));
    let o = options("COPY t FROM STDIN (FORMAT binary)").unwrap();
    assert_eq!(o.format, Format::Binary);
    assert!(options("COPY t TO STDOUT").is_err());
}

#[test]
fn text_rows_cut_anywhere_go_to_their_shards() {
    let data = b"1\tone\n2\ttwo\\\tstill two\n3\tthree\n";
    for cut in 0..data.len() {
        let out = split("COPY t (id, name) FROM STDIN", &[&data[..cut], &data[cut..]]).unwrap();
        for (id, line) in [(1, &b"1\tone\n"[..]), (2, b"2\ttwo\\\tstill two\n"), (3, b"3\tthree\n")] {
            let hay = &out[shard_of(id)];
            assert!(hay.windows(line.len()).any(|w| w == line), "row {id} cut at {cut}");
        }
        assert_eq!(out[0].len() + out[1].len(), data.len());
    }
}

#[test]
fn csv_quotes_hide_newlines_and_the_header_goes_everywhere() {
    let data = b"name,id\n\"a\nb\",1\n\"c,\"\"d\",2\n";
    let out = split("COPY t (name, id) FROM STDIN (FORMAT csv, HEADER)", &[data]).unwrap();
    for shard in &out {
        assert!(shard.starts_with(b"name,id\n"));
    }
    assert!(out[shard_of(1)].windows(8).any(|w| w == b"\"a\nb\",1\n"));
    assert!(out[shard_of(2)].windows(10).any(|w| w == b"\"c,\"\"d\",2\n"));
}

#[test]
fn binary_rows_are_read_by_their_fields() {
    let mut data = b"PGCOPY\n\xff\r\n\0".to_vec();
    data.extend_from_slice(&[0; 8]);
    for id in [1i64, 2, 3] {
        data.extend_from_slice(&2i16.to_be_bytes());
        data.extend_from_slice(&8i32.to_be_bytes());
        data.extend_from_slice(&id.to_be_bytes());
        data.extend_from_slice(&(-1i32).to_be_bytes());
    }
    data.extend_from_slice(&(-1i16).to_be_bytes());
    for cut in [1, 10, 20, 30, data.len() - 1] {
        let out =
            split("COPY t (id, name) FROM STDIN (FORMAT binary)", &[&data[..cut], &data[cut..]]).unwrap();
        let rows: usize = out.iter().map(|o| (o.len() - 21) / 18).sum();
        assert_eq!(rows, 3, "cut at {cut}");
        for o in &out {
            assert!(o.starts_with(b"PGCOPY") && o.ends_with(&[0xff, 0xff]));
        }
    }
}

#[test]
fn a_bad_key_names_its_row() {
    let e = split("COPY t (id) FROM STDIN", &[b"1\nx\n"]).unwrap_err();
    assert!(matches!(e, CopyError::Row { row: 2, .. }), "{e}");
}
