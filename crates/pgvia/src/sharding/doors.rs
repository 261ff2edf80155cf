//! The pure side of results pgvia itself hands out in parts or in another form when a query
//! spans several shards (`session/sharded/doors.rs`): what a `DECLARE`, `FETCH`/`MOVE` or
//! `COPY ... TO` asks for, a cursor's position rules, and COPY's text and CSV output. No I/O.

use pg_raw_parse::raw::{FetchDirection, CURSOR_OPT_BINARY, CURSOR_OPT_HOLD, CURSOR_OPT_NO_SCROLL};
use pg_raw_parse::Node;

/// PostgreSQL's `FETCH ALL` count (`LONG_MAX`).
pub const ALL: i64 = i64::MAX;

/// What a `DECLARE` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declare {
    pub query: String,
    pub no_scroll: bool,
    pub hold: bool,
    pub binary: bool,
}

/// What a `FETCH` or `MOVE` asks for, as PostgreSQL's grammar reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fetch {
    pub direction: Direction,
    pub count: i64,
    pub is_move: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Forward,
    Backward,
    Absolute,
    Relative,
}

fn one_statement(sql: &str) -> Option<pg_raw_parse::ParseResult> {
    let parsed = pg_raw_parse::parse(sql).ok()?;
    (parsed.iter().count() == 1).then_some(parsed)
}

fn deparse_query(node: Node<'_>) -> Option<String> {
    if matches!(node, Node::None) {
        return None;
    }
    pg_raw_parse::deparse(node).ok().map(|d| d.as_str().to_owned())
}

/// Reads `DECLARE name ... CURSOR FOR query`; `None` if `sql` is not one.
pub fn declare(sql: &str) -> Option<Declare> {
    let parsed = one_statement(sql)?;
    let raw = parsed.iter().next()?;
    let Node::DeclareCursorStmt(d) = raw.stmt() else { return None };
    let options = d.options as u32;
    Some(Declare {
        query: deparse_query(d.query())?,
        no_scroll: options & CURSOR_OPT_NO_SCROLL != 0,
        hold: options & CURSOR_OPT_HOLD != 0,
        binary: options & CURSOR_OPT_BINARY != 0,
    })
}

/// Reads `FETCH`/`MOVE`; `None` if `sql` is not one.
pub fn fetch(sql: &str) -> Option<Fetch> {
    let parsed = one_statement(sql)?;
    let raw = parsed.iter().next()?;
    let Node::FetchStmt(f) = raw.stmt() else { return None };
    let direction = match f.direction {
        FetchDirection::FETCH_FORWARD => Direction::Forward,
        FetchDirection::FETCH_BACKWARD => Direction::Backward,
        FetchDirection::FETCH_ABSOLUTE => Direction::Absolute,
        FetchDirection::FETCH_RELATIVE => Direction::Relative,
        _ => return None,
    };
    // `how_many` is a C long: 64 bits here, 32 on some platforms.
    #[allow(clippy::unnecessary_cast)]
    let count = f.how_many as i64;
    Some(Fetch { direction, count, is_move: f.ismove })
}

/// Why a motion cannot be made: PostgreSQL's error for a backward move of a NO SCROLL cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardOnly;

pub const FORWARD_ONLY_CODE: &str = "55000";
pub const FORWARD_ONLY: &str = "cursor can only scan forward";
pub const FORWARD_ONLY_HINT: &str = "Declare it with SCROLL option to enable backward scan.";

/// A cursor's place in its rows, kept as PostgreSQL's portal keeps it (`portalPos`,
/// `atStart`, `atEnd`), so every motion lands where PostgreSQL's would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pos: u64,
    at_start: bool,
    at_end: bool,
}

impl Default for Position {
    fn default() -> Self {
        Position { pos: 0, at_start: true, at_end: false }
    }
}

/// One motion over `rows` rows: the rows it returns (indices, in order) and its count.
struct Motion<'a> {
    rows: u64,
    no_scroll: bool,
    at: &'a mut Position,
    out: &'a mut Vec<u64>,
}

impl Motion<'_> {
    /// PostgreSQL's `PortalRunSelect`: `count` rows one way (`ALL` for all), returned when
    /// `emit`. The count of rows passed.
    fn select(&mut self, forward: bool, count: i64, emit: bool) -> Result<u64, ForwardOnly> {
        let at = &mut *self.at;
        if forward {
            if at.at_end || count <= 0 {
                return Ok(0);
            }
            let left = self.rows.saturating_sub(at.pos);
            let n = if count == ALL { left } else { left.min(count as u64) };
            if emit {
                self.out.extend(at.pos..at.pos + n);
            }
            if n > 0 {
                at.at_start = false;
            }
            if count == ALL || n < count as u64 {
                at.at_end = true;
            }
            at.pos += n;
            return Ok(n);
        }
        if self.no_scroll {
            return Err(ForwardOnly);
        }
        if at.at_start || count <= 0 {
            return Ok(0);
        }
        // From past the end, the first row back is the last; from a row, the one before it.
        let behind = if at.at_end { at.pos } else { at.pos.saturating_sub(1) };
        let n = if count == ALL { behind } else { behind.min(count as u64) };
        if emit {
            self.out.extend((behind - n..behind).rev());
        }
        if n > 0 && at.at_end {
            at.at_end = false;
            at.pos += 1;
        }
        if count == ALL || n < count as u64 {
            at.at_start = true;
            at.pos = 0;
        } else {
            at.pos -= n;
        }
        Ok(n)
    }

    /// PostgreSQL's `DoPortalRewind`.
    fn rewind(&mut self) -> Result<(), ForwardOnly> {
        if self.at.at_start && !self.at.at_end {
            return Ok(());
        }
        if self.no_scroll {
            return Err(ForwardOnly);
        }
        *self.at = Position::default();
        Ok(())
    }
}

impl Position {
    /// Moves as `FETCH`/`MOVE` `f` does over `rows` rows (PostgreSQL's `DoPortalRunFetch`):
    /// the indices of the rows a FETCH returns go to `out`; the count is its tag's.
    pub fn run(
        &mut self,
        f: Fetch,
        rows: u64,
        no_scroll: bool,
        out: &mut Vec<u64>,
    ) -> Result<u64, ForwardOnly> {
        let mut m = Motion { rows, no_scroll, at: self, out };
        let emit = !f.is_move;
        let (mut direction, mut count) = (f.direction, f.count);
        match direction {
            Direction::Forward | Direction::Backward if count < 0 => {
                direction =
                    if direction == Direction::Forward { Direction::Backward } else { Direction::Forward };
                count = count.saturating_neg();
            }
            Direction::Absolute if count > 0 => {
                let pos = m.at.pos;
                if pos == u64::MAX || ((count - 1) as u64) < pos {
                    m.rewind()?;
                    if count > 1 {
                        m.select(true, count - 1, false)?;
                    }
                } else {
                    let pos = m.at.pos + u64::from(m.at.at_end);
                    if count as u64 <= pos {
                        m.select(false, (pos - count as u64 + 1) as i64, false)?;
                    } else if count as u64 > pos + 1 {
                        m.select(true, (count as u64 - pos - 1) as i64, false)?;
                    }
                }
                return m.select(true, 1, emit);
            }
            Direction::Absolute if count < 0 => {
                m.select(true, ALL, false)?;
                if count < -1 {
                    m.select(false, count.saturating_neg() - 1, false)?;
                }
                return m.select(false, 1, emit);
            }
            Direction::Absolute => {
                m.rewind()?;
                return m.select(true, 0, emit);
            }
            Direction::Relative if count > 0 => {
                if count > 1 {
                    m.select(true, count - 1, false)?;
                }
                return m.select(true, 1, emit);
            }
            Direction::Relative if count < 0 => {
                if count < -1 {
                    m.select(false, count.saturating_neg() - 1, false)?;
                }
                return m.select(false, 1, emit);
            }
            Direction::Relative => direction = Direction::Forward,
            _ => {}
        }
        let mut forward = direction == Direction::Forward;
        if count == 0 {
            // FETCH 0 fetches the current row again; MOVE 0 says whether there is one.
            let on_row = !m.at.at_start && !m.at.at_end;
            if !emit {
                return Ok(u64::from(on_row));
            }
            if on_row {
                m.select(false, 1, false)?;
                count = 1;
                forward = true;
            }
        }
        if !forward && count == ALL && !emit {
            let mut passed = m.at.pos;
            if passed > 0 && !m.at.at_end {
                passed -= 1;
            }
            m.rewind()?;
            return Ok(passed);
        }
        m.select(forward, count, emit)
    }
}

/// The data format of a `COPY ... TO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFormat {
    Text,
    Csv,
    Binary,
}

/// What a `COPY ... TO` asks for, as far as pgvia formats its rows itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOut {
    /// The query whose rows are copied (`SELECT * FROM t` for `COPY t TO`).
    pub query: String,
    pub format: CopyFormat,
    pub header: bool,
    pub delimiter: u8,
    pub null: Vec<u8>,
    pub quote: u8,
    pub escape: u8,
    /// `FORCE_QUOTE *` is `Some(empty)` with `force_all`.
    pub force_quote: Vec<String>,
    pub force_all: bool,
}

/// Why a `COPY ... TO` is not formatted by pgvia: an option it does not handle exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyRefusal(pub String);

fn def_str(node: Node<'_>) -> Option<String> {
    match node {
        Node::String(s) => s.sval().map(str::to_owned),
        Node::Integer(i) => Some(i.ival.to_string()),
        Node::Boolean(b) => Some(if b.boolval { "true" } else { "false" }.to_owned()),
        Node::None => None,
        _ => None,
    }
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Reads `COPY (query) TO ...` / `COPY table [(columns)] TO ...`; `Ok(None)` if `sql` is not
/// one; a refusal for an option pgvia cannot honour exactly.
pub fn copy_out(sql: &str) -> Result<Option<CopyOut>, CopyRefusal> {
    let Some(parsed) = one_statement(sql) else { return Ok(None) };
    let Some(raw) = parsed.iter().next() else { return Ok(None) };
    let Node::CopyStmt(c) = raw.stmt() else { return Ok(None) };
    if c.is_from {
        return Ok(None);
    }
    let refuse = |why: &str| Err(CopyRefusal(why.to_owned()));
    let query = match (c.relation(), deparse_query(c.query())) {
        (_, Some(q)) => q,
        (Some(rel), None) => {
            let mut columns = Vec::new();
            for item in c.attlist().iter() {
                match item {
                    Node::String(s) => columns.push(quote_ident(s.sval().unwrap_or_default())),
                    _ => return refuse("a column list pgvia cannot read"),
                }
            }
            let cols = if columns.is_empty() { "*".to_owned() } else { columns.join(", ") };
            let name = match rel.schemaname() {
                Some(s) => format!("{}.{}", quote_ident(s), quote_ident(rel.relname().unwrap_or_default())),
                None => quote_ident(rel.relname().unwrap_or_default()),
            };
            format!("SELECT {cols} FROM {name}")
        }
        (None, None) => return Ok(None),
    };
    let mut out = CopyOut {
        query,
        format: CopyFormat::Text,
        header: false,
        delimiter: b'\t',
        null: b"\\N".to_vec(),
        quote: b'"',
        escape: b'"',
        force_quote: Vec::new(),
        force_all: false,
    };
    let (mut delimiter, mut null, mut quote, mut escape) = (None, None, None, None);
    let single = |v: Option<String>, what: &str| match v.as_deref().map(str::as_bytes) {
        Some([b]) => Ok(*b),
        _ => Err(CopyRefusal(format!("COPY {what} must be a single one-byte character"))),
    };
    for d in c.options().iter() {
        let name = d.defname().unwrap_or_default().to_ascii_lowercase();
        match name.as_str() {
            "format" => {
                out.format = match def_str(d.arg()).map(|s| s.to_ascii_lowercase()).as_deref() {
                    Some("text") => CopyFormat::Text,
                    Some("csv") => CopyFormat::Csv,
                    Some("binary") => CopyFormat::Binary,
                    _ => return refuse("COPY format not recognized"),
                }
            }
            "header" => {
                out.header = match def_str(d.arg()).map(|s| s.to_ascii_lowercase()).as_deref() {
                    None | Some("true" | "on" | "1" | "yes" | "t" | "y") => true,
                    Some("false" | "off" | "0" | "no" | "f" | "n") => false,
                    _ => return refuse("a COPY HEADER value pgvia does not read"),
                }
            }
            "delimiter" => delimiter = Some(single(def_str(d.arg()), "delimiter")?),
            "quote" => quote = Some(single(def_str(d.arg()), "quote")?),
            "escape" => escape = Some(single(def_str(d.arg()), "escape")?),
            "null" => null = def_str(d.arg()),
            "force_quote" => match d.arg() {
                Node::A_Star(_) => out.force_all = true,
                Node::NodeList(l) => {
                    for item in l.iter() {
                        match item {
                            Node::String(s) => out.force_quote.push(s.sval().unwrap_or_default().to_owned()),
                            _ => return refuse("a COPY FORCE_QUOTE list pgvia cannot read"),
                        }
                    }
                }
                _ => return refuse("a COPY FORCE_QUOTE value pgvia cannot read"),
            },
            other => return refuse(&format!("COPY option {other} over several shards")),
        }
    }
    if out.format == CopyFormat::Csv {
        out.delimiter = b',';
        out.null = Vec::new();
    }
    out.delimiter = delimiter.unwrap_or(out.delimiter);
    out.null = null.map(String::into_bytes).unwrap_or(out.null);
    out.quote = quote.unwrap_or(out.quote);
    out.escape = escape.unwrap_or(out.quote);
    Ok(Some(out))
}

impl CopyOut {
    /// Writes one line (a header or a row) of COPY text or CSV output, with its newline.
    /// `values`: each column's text, `None` for NULL; `force`: per column, FORCE_QUOTE.
    pub fn line(&self, values: &[Option<&[u8]>], force: &[bool], out: &mut Vec<u8>) {
        let single = values.len() == 1;
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                out.push(self.delimiter);
            }
            match v {
                None => out.extend_from_slice(&self.null),
                Some(v) if self.format == CopyFormat::Csv => {
                    self.csv(v, force.get(i).copied().unwrap_or(false), single, out)
                }
                Some(v) => self.text(v, out),
            }
        }
        out.push(b'\n');
    }

    /// PostgreSQL's `CopyAttributeOutText`.
    fn text(&self, v: &[u8], out: &mut Vec<u8>) {
        for &c in v {
            let letter = match c {
                8 => Some(b'b'),
                12 => Some(b'f'),
                b'\n' => Some(b'n'),
                b'\r' => Some(b'r'),
                b'\t' => Some(b't'),
                11 => Some(b'v'),
                _ => None,
            };
            match letter {
                Some(l) => out.extend_from_slice(&[b'\\', l]),
                None if c == b'\\' || c == self.delimiter => out.extend_from_slice(&[b'\\', c]),
                None => out.push(c),
            }
        }
    }

    /// PostgreSQL's `CopyAttributeOutCSV`.
    fn csv(&self, v: &[u8], force: bool, single: bool, out: &mut Vec<u8>) {
        let quoted = force
            || v == self.null.as_slice()
            || (single && v == b"\\.")
            || v.iter().any(|&c| c == self.delimiter || c == self.quote || c == b'\n' || c == b'\r');
        if !quoted {
            out.extend_from_slice(v);
            return;
        }
        out.push(self.quote);
        for &c in v {
            if c == self.quote || c == self.escape {
                out.push(self.escape);
            }
            out.push(c);
        }
        out.push(self.quote);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetch_all(
        sql: &str,
        rows: u64,
        no_scroll: bool,
        at: &mut Position,
    ) -> Result<(Vec<u64>, u64), ForwardOnly> {
        let mut out = Vec::new();
        let n = at.run(fetch(sql).expect("a FETCH"), rows, no_scroll, &mut out)?;
        Ok((out, n))
    }

    #[test]
    fn motions_land_where_postgres_lands() {
        let mut at = Position::default();
        assert_eq!(fetch_all("FETCH 3 FROM c", 5, false, &mut at), Ok((vec![0, 1, 2], 3)));
        assert_eq!(fetch_all("FETCH PRIOR FROM c", 5, false, &mut at), Ok((vec![1], 1)));
        assert_eq!(fetch_all("FETCH LAST FROM c", 5, false, &mut at), Ok((vec![4], 1)));
        assert_eq!(fetch_all("FETCH NEXT FROM c", 5, false, &mut at), Ok((vec![], 0)));
        assert_eq!(fetch_all("FETCH BACKWARD ALL FROM c", 5, false, &mut at), Ok((vec![4, 3, 2, 1, 0], 5)));
        assert_eq!(fetch_all("FETCH ABSOLUTE -2 FROM c", 5, false, &mut at), Ok((vec![3], 1)));
        assert_eq!(fetch_all("MOVE FORWARD ALL IN c", 5, false, &mut at), Ok((vec![], 1)));
        assert_eq!(fetch_all("FETCH RELATIVE -1 FROM c", 5, false, &mut at), Ok((vec![4], 1)));
        assert_eq!(fetch_all("FETCH PRIOR FROM c", 5, true, &mut at), Err(ForwardOnly));
    }

    #[test]
    fn copy_lines_escape_as_postgres() {
        let text = copy_out("COPY (SELECT 1) TO STDOUT").unwrap().unwrap();
        let mut out = Vec::new();
        text.line(&[Some(b"a\tb\\c\nd"), None], &[false, false], &mut out);
        assert_eq!(out, b"a\\tb\\\\c\\nd\t\\N\n");
        let csv = copy_out("COPY (SELECT 1) TO STDOUT (FORMAT csv)").unwrap().unwrap();
        out.clear();
        csv.line(&[Some(b"x,\"y\""), Some(b""), None, Some(b"plain")], &[false; 4], &mut out);
        assert_eq!(out, b"\"x,\"\"y\"\"\",\"\",,plain\n");
    }
}
