//! `COPY ... FROM STDIN` into a sharded table: the options of the statement, and a splitter
//! that cuts the client's data (text, CSV or binary, in CopyData chunks cut anywhere) into
//! rows and hands each row to the shard its key belongs to. No I/O and no whole-file
//! buffering: a row is held only until its end arrives.

use bytes::BytesMut;
use shard::{KeyType, ShardFunction, ShardId, Value};

use super::copy_text::{csv_field, end_marker, text_field};
pub use super::copy_text::{CopyOptions, Format};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CopyError {
    #[error("COPY statement not understood: {0}")]
    Statement(String),
    #[error("COPY data, row {row}: {why}")]
    Row { row: u64, why: String },
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Str(Vec<u8>),
    Punct(u8),
}

fn tokens(sql: &str) -> Result<Vec<Token>, CopyError> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let bad = |why: &str| CopyError::Statement(why.to_owned());
    while i < b.len() {
        let c = b[i];
        match c {
            _ if c.is_ascii_whitespace() => i += 1,
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'(' | b')' | b',' | b'.' | b'=' | b';' => {
                out.push(Token::Punct(c));
                i += 1;
            }
            b'\'' => {
                let mut s = Vec::new();
                i += 1;
                loop {
                    match b.get(i) {
                        None => return Err(bad("unterminated string")),
                        Some(b'\'') if b.get(i + 1) == Some(&b'\'') => {
                            s.push(b'\'');
                            i += 2;
                        }
                        Some(b'\'') => {
                            i += 1;
                            break;
                        }
                        Some(&ch) => {
                            s.push(ch);
                            i += 1;
                        }
                    }
                }
                out.push(Token::Str(s));
            }
            b'"' => {
                let mut s = String::new();
                i += 1;
                loop {
                    match b.get(i) {
                        None => return Err(bad("unterminated quoted name")),
                        Some(b'"') if b.get(i + 1) == Some(&b'"') => {
                            s.push('"');
                            i += 2;
                        }
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(_) => {
                            let start = i;
                            while i < b.len() && b[i] != b'"' {
                                i += 1;
                            }
                            s.push_str(&sql[start..i]);
                        }
                    }
                }
                // A quoted name keeps its case: marked so it is not folded.
                out.push(Token::Word(format!("\"{s}")));
            }
            _ if c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80 => {
                let start = i;
                while i < b.len()
                    && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$' || b[i] >= 0x80)
                {
                    i += 1;
                }
                out.push(Token::Word(sql[start..i].to_ascii_lowercase()));
            }
            _ => return Err(bad(&format!("unexpected character {:?}", c as char))),
        }
    }
    Ok(out)
}

fn name(word: &str) -> String {
    word.strip_prefix('"').unwrap_or(word).to_owned()
}

/// Reads the options of `COPY table [(columns)] FROM STDIN [WITH] (...)`, in the current
/// syntax or the pre-9.0 one (`CSV HEADER DELIMITER ','`).
pub fn options(sql: &str) -> Result<CopyOptions, CopyError> {
    let t = tokens(sql)?;
    let bad = |why: &str| CopyError::Statement(why.to_owned());
    let mut i = 0;
    let word = |i: usize| match t.get(i) {
        Some(Token::Word(w)) => Some(w.as_str()),
        _ => None,
    };
    if word(i) != Some("copy") {
        return Err(bad("not a COPY"));
    }
    i += 1;
    // The table: name or schema.name.
    i += 1;
    while t.get(i) == Some(&Token::Punct(b'.')) {
        i += 2;
    }
    let mut columns = Vec::new();
    if t.get(i) == Some(&Token::Punct(b'(')) {
        i += 1;
        loop {
            match t.get(i) {
                Some(Token::Word(w)) => columns.push(name(w)),
                Some(Token::Punct(b',')) => {}
                Some(Token::Punct(b')')) => {
                    i += 1;
                    break;
                }
                _ => return Err(bad("column list")),
            }
            i += 1;
        }
    }
    if word(i) != Some("from") || word(i + 1) != Some("stdin") {
        return Err(bad("only COPY ... FROM STDIN is split by key"));
    }
    i += 2;
    let mut o = CopyOptions {
        format: Format::Text,
        delimiter: b'\t',
        quote: b'"',
        escape: 0,
        null: b"\\N".to_vec(),
        header: false,
        columns,
    };
    let (mut delimiter, mut null, mut escape) = (None, None, None);
    if word(i) == Some("with") {
        i += 1;
    }
    let single = |v: &[u8], what: &str| -> Result<u8, CopyError> {
        match v {
            [c] => Ok(*c),
            _ => Err(CopyError::Statement(format!("{what} must be a single one-byte character"))),
        }
    };
    let value = |tok: Option<&Token>| -> Option<Vec<u8>> {
        match tok {
            Some(Token::Str(s)) => Some(s.clone()),
            Some(Token::Word(w)) => Some(name(w).into_bytes()),
            _ => None,
        }
    };
    if t.get(i) == Some(&Token::Punct(b'(')) {
        i += 1;
        while let Some(Token::Word(opt)) = t.get(i) {
            let v = value(t.get(i + 1)).filter(|_| !matches!(t.get(i + 1), Some(Token::Punct(_))));
            i += if v.is_some() { 2 } else { 1 };
            match opt.as_str() {
                "format" => {
                    o.format = match v.as_deref() {
                        Some(b"text") => Format::Text,
                        Some(b"csv") => Format::Csv,
                        Some(b"binary") => Format::Binary,
                        _ => return Err(bad("FORMAT must be text, csv or binary")),
                    }
                }
                "delimiter" => delimiter = Some(single(&v.unwrap_or_default(), "DELIMITER")?),
                "quote" => o.quote = single(&v.unwrap_or_default(), "QUOTE")?,
                "escape" => escape = Some(single(&v.unwrap_or_default(), "ESCAPE")?),
                "null" => null = v,
                "header" => {
                    o.header = !matches!(v.as_deref(), Some(b"false" | b"off" | b"0"));
                }
                _ => {}
            }
            if t.get(i) == Some(&Token::Punct(b',')) {
                i += 1;
            }
        }
    } else {
        // The old syntax: keywords in any order.
        while let Some(Token::Word(w)) = t.get(i) {
            i += 1;
            let mut arg = || {
                if word(i) == Some("as") {
                    i += 1;
                }
                let v = value(t.get(i));
                i += 1;
                v.unwrap_or_default()
            };
            match w.as_str() {
                "binary" => o.format = Format::Binary,
                "csv" => o.format = Format::Csv,
                "header" => o.header = true,
                "delimiter" => delimiter = Some(single(&arg(), "DELIMITER")?),
                "null" => null = Some(arg()),
                "quote" => o.quote = single(&arg(), "QUOTE")?,
                "escape" => escape = Some(single(&arg(), "ESCAPE")?),
                _ => {}
            }
        }
    }
    if o.format == Format::Csv {
        o.delimiter = b',';
        o.null = Vec::new();
    }
    o.delimiter = delimiter.unwrap_or(o.delimiter);
    o.null = null.unwrap_or(o.null);
    o.escape = escape.unwrap_or(if o.format == Format::Csv { o.quote } else { b'\\' });
    Ok(o)
}

/// Where each row goes: the key's column, type and function.
pub struct KeyPlace<'a> {
    pub index: usize,
    pub key_type: KeyType,
    pub function: &'a ShardFunction,
}

/// Cuts COPY data into rows and appends each to its shard's buffer.
pub struct Splitter {
    options: CopyOptions,
    /// The row being read, until its end arrives.
    row: Vec<u8>,
    /// Text: the last byte was an unescaped backslash. CSV: inside quotes.
    in_escape: bool,
    in_quotes: bool,
    rows: u64,
    /// Binary: the file header is still to come.
    binary_header: bool,
    /// The header line (text/CSV `HEADER`) or binary header goes to every shard.
    pub header: Option<Vec<u8>>,
    done: bool,
}

impl Splitter {
    pub fn new(options: CopyOptions) -> Splitter {
        let binary = options.format == Format::Binary;
        Splitter {
            options,
            row: Vec::new(),
            in_escape: false,
            in_quotes: false,
            rows: 0,
            binary_header: binary,
            header: None,
            done: false,
        }
    }

    /// Rows placed so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Takes a chunk of the client's data; appends whole rows to `out[shard]`. Rows every
    /// shard needs (a header line, the end marker) are appended to all of them.
    pub fn push(&mut self, data: &[u8], key: &KeyPlace<'_>, out: &mut [BytesMut]) -> Result<(), CopyError> {
        match self.options.format {
            Format::Binary => self.push_binary(data, key, out),
            _ => self.push_lines(data, key, out),
        }
    }

    /// The data is complete: anything left is a last row without its line end.
    pub fn finish(&mut self, key: &KeyPlace<'_>, out: &mut [BytesMut]) -> Result<(), CopyError> {
        if self.row.is_empty() || self.done {
            return Ok(());
        }
        if self.options.format == Format::Binary {
            return Err(CopyError::Row {
                row: self.rows + 1,
                why: "the binary data ends inside a row".into(),
            });
        }
        let row = std::mem::take(&mut self.row);
        self.place_line(row, key, out)
    }

    fn push_lines(&mut self, data: &[u8], key: &KeyPlace<'_>, out: &mut [BytesMut]) -> Result<(), CopyError> {
        let csv = self.options.format == Format::Csv;
        let mut start = 0;
        for (i, &c) in data.iter().enumerate() {
            if csv {
                if self.in_quotes {
                    if self.in_escape {
                        self.in_escape = false;
                    } else if c == self.options.escape && self.options.escape != self.options.quote {
                        self.in_escape = true;
                    } else if c == self.options.quote {
                        self.in_quotes = false;
                    }
                    continue;
                }
                if c == self.options.quote {
                    self.in_quotes = true;
                    continue;
                }
            } else if self.in_escape {
                self.in_escape = false;
                continue;
            } else if c == b'\\' {
                self.in_escape = true;
                continue;
            }
            if c == b'\n' {
                self.row.extend_from_slice(&data[start..=i]);
                start = i + 1;
                let row = std::mem::take(&mut self.row);
                self.place_line(row, key, out)?;
            }
        }
        self.row.extend_from_slice(&data[start..]);
        Ok(())
    }

    fn place_line(
        &mut self,
        row: Vec<u8>,
        key: &KeyPlace<'_>,
        out: &mut [BytesMut],
    ) -> Result<(), CopyError> {
        if self.done {
            return Ok(());
        }
        let content = trim_line_end(&row);
        if self.options.header && self.header.is_none() {
            for o in out.iter_mut() {
                o.extend_from_slice(&row);
            }
            self.header = Some(row);
            return Ok(());
        }
        let marker = end_marker(content, &self.options)
            .map_err(|why| CopyError::Row { row: self.rows + 1, why: why.to_owned() })?;
        if let Some(at) = marker {
            if at > 0 {
                // Text data right before `\.` is the last row.
                let mut last = content[..at].to_vec();
                last.push(b'\n');
                self.place_line(last, key, out)?;
            }
            self.done = true;
            return Ok(());
        }
        self.rows += 1;
        let field = match self.options.format {
            Format::Csv => csv_field(content, key.index, &self.options),
            _ => text_field(content, key.index, &self.options),
        };
        let value = match field {
            Some(Some(v)) => Some(
                key.key_type
                    .parse_text(&v)
                    .map_err(|e| CopyError::Row { row: self.rows, why: e.to_string() })?,
            ),
            Some(None) => None,
            None => {
                return Err(CopyError::Row {
                    row: self.rows,
                    why: format!("no column {} in the row", key.index + 1),
                })
            }
        };
        let shard = self.shard_of(value.as_ref(), key)?;
        out[shard].extend_from_slice(&row);
        Ok(())
    }

    fn shard_of(&self, value: Option<&Value>, key: &KeyPlace<'_>) -> Result<ShardId, CopyError> {
        match value {
            Some(v) => {
                key.function.shard_of(v).map_err(|e| CopyError::Row { row: self.rows, why: e.to_string() })
            }
            // PostgreSQL's hash partitioning puts a NULL key in remainder 0.
            None if matches!(key.function, ShardFunction::Hash { .. }) => Ok(0),
            None => Err(CopyError::Row { row: self.rows, why: "the sharding key is NULL".into() }),
        }
    }

    fn push_binary(
        &mut self,
        data: &[u8],
        key: &KeyPlace<'_>,
        out: &mut [BytesMut],
    ) -> Result<(), CopyError> {
        self.row.extend_from_slice(data);
        let mut at = 0;
        if self.binary_header {
            if self.row.len() < 19 {
                return Ok(());
            }
            if !self.row.starts_with(b"PGCOPY\n\xff\r\n\0") {
                return Err(CopyError::Row { row: 0, why: "binary COPY data without its signature".into() });
            }
            let ext = u32::from_be_bytes([self.row[15], self.row[16], self.row[17], self.row[18]]) as usize;
            if self.row.len() < 19 + ext {
                return Ok(());
            }
            at = 19 + ext;
            for o in out.iter_mut() {
                o.extend_from_slice(&self.row[..at]);
            }
            self.header = Some(self.row[..at].to_vec());
            self.binary_header = false;
        }
        loop {
            let rest = &self.row[at..];
            if rest.len() < 2 {
                break;
            }
            let fields = i16::from_be_bytes([rest[0], rest[1]]);
            if fields == -1 {
                // The trailer: every shard's stream ends with one.
                for o in out.iter_mut() {
                    o.extend_from_slice(&rest[..2]);
                }
                at += 2;
                self.done = true;
                break;
            }
            let mut p = 2;
            let mut key_value: Option<Option<&[u8]>> = None;
            let mut complete = true;
            for f in 0..fields.max(0) as usize {
                let Some(len) = rest.get(p..p + 4) else {
                    complete = false;
                    break;
                };
                let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
                p += 4;
                let value = if len < 0 {
                    None
                } else {
                    let Some(v) = rest.get(p..p + len as usize) else {
                        complete = false;
                        break;
                    };
                    p += len as usize;
                    Some(v)
                };
                if f == key.index {
                    key_value = Some(value);
                }
            }
            if !complete {
                break;
            }
            self.rows += 1;
            let value = match key_value {
                Some(Some(bytes)) => Some(
                    key.key_type
                        .parse_binary(bytes)
                        .map_err(|e| CopyError::Row { row: self.rows, why: e.to_string() })?,
                ),
                Some(None) => None,
                None => {
                    return Err(CopyError::Row {
                        row: self.rows,
                        why: format!("no column {} in the row", key.index + 1),
                    })
                }
            };
            let shard = self.shard_of(value.as_ref(), key)?;
            out[shard].extend_from_slice(&rest[..p]);
            at += p;
        }
        self.row.drain(..at);
        Ok(())
    }
}

fn trim_line_end(row: &[u8]) -> &[u8] {
    let row = row.strip_suffix(b"\n").unwrap_or(row);
    row.strip_suffix(b"\r").unwrap_or(row)
}

#[cfg(test)]
#[path = "copy_tests.rs"]
mod tests;
