//! A COPY's data options, and one field of a COPY row decoded by them the way PostgreSQL's COPY FROM decodes it
//! (`CopyReadAttributesText` and `CopyReadAttributesCSV` in copyfromparse.c), so that the key
//! pgvia hashes is byte for byte the value the shard stores. The row has been cut at its
//! line end already; the bytes are the server's encoding (pgvia's sessions are UTF8 on both
//! sides), and escapes produce raw bytes in it, as PostgreSQL's do.

/// The data format of a COPY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Csv,
    Binary,
}

/// What the splitter needs from a `COPY ... FROM STDIN` statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOptions {
    pub format: Format,
    pub delimiter: u8,
    pub quote: u8,
    pub escape: u8,
    /// The string that means NULL (`\N` in text, empty and unquoted in CSV).
    pub null: Vec<u8>,
    pub header: bool,
    /// The column list as written (lower-cased unless quoted); empty when none is given.
    pub columns: Vec<String>,
}

/// Field `index` of a text-format row: `None` if the row has fewer fields, `Some(None)` for
/// NULL, else its decoded bytes.
///
/// PostgreSQL's rules: a backslash takes the next byte with it (so an escaped delimiter does
/// not end the field); `\b \f \n \r \t \v` are the control characters; `\` and one to three
/// octal digits is that byte; `\x` and one or two hex digits is that byte (`\x` alone is
/// `x`); any other escaped byte stands for itself; a backslash ending the line is dropped.
/// NULL is decided on the field as written, before decoding (`\N`, not `\116`).
pub(super) fn text_field(row: &[u8], index: usize, o: &CopyOptions) -> Option<Option<Vec<u8>>> {
    let mut i = 0;
    for field in 0.. {
        let start = i;
        let wanted = field == index;
        let mut out = Vec::new();
        let mut ended_by_delimiter = false;
        while i < row.len() {
            let c = row[i];
            i += 1;
            if c == o.delimiter {
                ended_by_delimiter = true;
                break;
            }
            if c != b'\\' {
                if wanted {
                    out.push(c);
                }
                continue;
            }
            let Some(&e) = row.get(i) else { break };
            i += 1;
            let byte = match e {
                b'0'..=b'7' => {
                    let mut v = u32::from(e - b'0');
                    for _ in 0..2 {
                        match row.get(i) {
                            Some(&d @ b'0'..=b'7') => {
                                v = (v << 3) + u32::from(d - b'0');
                                i += 1;
                            }
                            _ => break,
                        }
                    }
                    // `\777` is 511: PostgreSQL keeps the low byte.
                    (v & 0xff) as u8
                }
                b'x' => match row.get(i).and_then(|&d| hex(d)) {
                    Some(h) => {
                        i += 1;
                        let mut v = h;
                        if let Some(l) = row.get(i).and_then(|&d| hex(d)) {
                            i += 1;
                            v = (v << 4) | l;
                        }
                        v
                    }
                    None => b'x',
                },
                b'b' => 0x08,
                b'f' => 0x0c,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b'v' => 0x0b,
                other => other,
            };
            if wanted {
                out.push(byte);
            }
        }
        if wanted {
            let end = if ended_by_delimiter { i - 1 } else { i };
            if row[start..end] == *o.null {
                return Some(None);
            }
            return Some(Some(out));
        }
        if !ended_by_delimiter {
            return None;
        }
    }
    None
}

fn hex(d: u8) -> Option<u8> {
    (d as char).to_digit(16).map(|v| v as u8)
}

/// Field `index` of a CSV row, as [`text_field`].
///
/// PostgreSQL's rules: quoting may start and stop anywhere in a field; inside quotes the
/// escape byte followed by the quote or by the escape byte stands for that byte (a doubled
/// quote when the two are the same, the default), and the delimiter is data. NULL is the
/// null string unquoted, as written.
pub(super) fn csv_field(row: &[u8], index: usize, o: &CopyOptions) -> Option<Option<Vec<u8>>> {
    let mut i = 0;
    for field in 0.. {
        let start = i;
        let mut value = Vec::new();
        let mut quoted = false;
        let mut in_quotes = false;
        let mut ended_by_delimiter = false;
        while i < row.len() {
            let c = row[i];
            i += 1;
            if in_quotes {
                if c == o.escape {
                    if let Some(&next) = row.get(i).filter(|&&n| n == o.escape || n == o.quote) {
                        value.push(next);
                        i += 1;
                        continue;
                    }
                }
                if c == o.quote {
                    in_quotes = false;
                } else {
                    value.push(c);
                }
                continue;
            }
            if c == o.delimiter {
                ended_by_delimiter = true;
                break;
            }
            if c == o.quote {
                in_quotes = true;
                quoted = true;
            } else {
                value.push(c);
            }
        }
        if field == index {
            let end = if ended_by_delimiter { i - 1 } else { i };
            if !quoted && row[start..end] == *o.null {
                return Some(None);
            }
            return Some(Some(value));
        }
        if !ended_by_delimiter {
            return None;
        }
    }
    None
}

/// Where the end-of-data marker `\.` starts in a row, if the row has one. In text format it
/// may end a row with data before it (that data is the last row); anything after it but the
/// line end is PostgreSQL's "end-of-copy marker corrupt". In CSV it counts only alone on
/// its line, as in PostgreSQL.
pub(super) fn end_marker(row: &[u8], o: &CopyOptions) -> Result<Option<usize>, &'static str> {
    if o.format == Format::Csv {
        return Ok((row == b"\\.").then_some(0));
    }
    let mut i = 0;
    while i + 1 < row.len() {
        if row[i] == b'\\' {
            if row[i + 1] == b'.' {
                return match i + 2 == row.len() {
                    true => Ok(Some(i)),
                    false => Err("end-of-copy marker corrupt"),
                };
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::super::copy::options;
    use super::*;

    fn text(row: &[u8], index: usize) -> Option<Option<Vec<u8>>> {
        text_field(row, index, &options("COPY t FROM STDIN").expect("options"))
    }

    fn one(row: &[u8]) -> Vec<u8> {
        text(row, 0).flatten().expect("a value")
    }

    #[test]
    fn control_escapes() {
        assert_eq!(one(b"a\\bb\\fc\\nd\\re\\tf\\vg"), b"a\x08b\x0cc\nd\re\tf\x0bg");
    }

    #[test]
    fn octal_takes_one_to_three_digits_and_keeps_the_low_byte() {
        assert_eq!(one(b"\\61"), b"1");
        assert_eq!(one(b"\\061"), b"1");
        assert_eq!(one(b"\\0612"), b"12");
        assert_eq!(one(b"\\7"), b"\x07");
        assert_eq!(one(b"\\18"), b"\x018");
        assert_eq!(one(b"\\777"), b"\xff");
        assert_eq!(one(b"\\400"), b"\x00");
    }

    #[test]
    fn hex_takes_one_or_two_digits() {
        assert_eq!(one(b"\\x31"), b"1");
        assert_eq!(one(b"\\x3"), b"\x03");
        assert_eq!(one(b"\\x312"), b"12");
        assert_eq!(one(b"\\xaF"), b"\xaf");
        assert_eq!(one(b"\\xg"), b"xg");
        assert_eq!(one(b"\\x"), b"x");
    }

    #[test]
    fn any_other_escaped_byte_stands_for_itself() {
        assert_eq!(one(b"\\\\\\a\\9\\8\\.\\N\\X41"), b"\\a98.NX41");
        // An escaped delimiter is data and does not end the field.
        assert_eq!(text(b"a\\\tb\tc", 0), Some(Some(b"a\tb".to_vec())));
        assert_eq!(text(b"a\\\tb\tc", 1), Some(Some(b"c".to_vec())));
        // A backslash ending the line is dropped.
        assert_eq!(one(b"ab\\"), b"ab");
    }

    #[test]
    fn null_is_read_before_decoding() {
        assert_eq!(text(b"\\N\tx", 0), Some(None));
        assert_eq!(text(b"x\t\\N", 1), Some(None));
        assert_eq!(one(b"\\116"), b"N");
        assert_eq!(one(b"\\\\N"), b"\\N");
        let o = options("COPY t FROM STDIN WITH (NULL 'nil')").expect("options");
        assert_eq!(text_field(b"nil", 0, &o), Some(None));
        assert_eq!(text_field(b"\\nil", 0, &o), Some(Some(b"\nil".to_vec())));
    }

    #[test]
    fn missing_fields() {
        assert_eq!(text(b"a\tb", 2), None);
        assert_eq!(text(b"a\tb\t", 2), Some(Some(Vec::new())));
        assert_eq!(text(b"", 0), Some(Some(Vec::new())));
    }

    #[test]
    fn end_marker_in_text_and_csv() {
        let t = options("COPY t FROM STDIN").expect("options");
        assert_eq!(end_marker(b"\\.", &t), Ok(Some(0)));
        assert_eq!(end_marker(b"5\tx\\.", &t), Ok(Some(3)));
        assert_eq!(end_marker(b"5\tx\\\\.", &t), Ok(None));
        assert!(end_marker(b"\\.x", &t).is_err());
        let c = options("COPY t FROM STDIN CSV").expect("options");
        assert_eq!(end_marker(b"\\.", &c), Ok(Some(0)));
        assert_eq!(end_marker(b"5,\\.", &c), Ok(None));
    }

    #[test]
    fn csv_quotes_and_escapes() {
        let o = options("COPY t FROM STDIN CSV").expect("options");
        let f = |row: &[u8], i| csv_field(row, i, &o);
        assert_eq!(f(b"\"a,b\",c", 0), Some(Some(b"a,b".to_vec())));
        assert_eq!(f(b"\"a,b\",c", 1), Some(Some(b"c".to_vec())));
        assert_eq!(f(b"\"a\"\"b\"", 0), Some(Some(b"a\"b".to_vec())));
        assert_eq!(f(b"1\"2\"3", 0), Some(Some(b"123".to_vec())));
        assert_eq!(f(b",x", 0), Some(None));
        assert_eq!(f(b"\"\",x", 0), Some(Some(Vec::new())));
        assert_eq!(f(b"\\x31", 0), Some(Some(b"\\x31".to_vec())));
        assert_eq!(f(b"a", 1), None);
        let o = options("COPY t FROM STDIN WITH (FORMAT csv, ESCAPE '\\')").expect("options");
        assert_eq!(csv_field(b"\"a\\\"b\\\\c\\d\"", 0, &o), Some(Some(b"a\"b\\c\\d".to_vec())));
        let o = options("COPY t FROM STDIN WITH (FORMAT csv, NULL 'NULL')").expect("options");
        assert_eq!(csv_field(b"NULL", 0, &o), Some(None));
        assert_eq!(csv_field(b"\"NULL\"", 0, &o), Some(Some(b"NULL".to_vec())));
    }
}
