//! The shape of a response body, per format: where results, rows and errors go.
//!
//! * JSON (Neon's): `{"fields":[..],"rows":[..],"command":..,"rowCount":..,"rowAsArray":..}`,
//!   a batch as `{"results":[..]}`; it has no place for an error after rows (Neon's clients
//!   read an error from the status only), so the run aborts such an answer instead.
//! * NDJSON: one row per line; an error after rows is a last line `{"error":{..}}`.
//! * Neon's stream: `[1,..fields]`, `[0,..values]`, `[2,command,rowCount]`, then `[3]` or
//!   `[4,error]`, one per line.

use bytes::{BufMut, BytesMut};
use wire::backend::{DataRow, RowDescription};
use wire::WireError;

use super::json::ValueText;
use super::request::Format;
use super::results::{self, Columns, RowAs};

pub struct Document {
    format: Format,
    batch: bool,
    text: ValueText,
    /// Results started so far.
    results: usize,
    /// Rows written in the current result (for the separators).
    rows: u64,
    cols: Columns,
    row_as: RowAs,
}

impl Document {
    pub fn new(format: Format, batch: bool, text: ValueText) -> Self {
        Document { format, batch, text, results: 0, rows: 0, cols: Columns::none(), row_as: RowAs::Object }
    }

    pub fn open(&mut self, out: &mut BytesMut) {
        if self.format == Format::Json && self.batch {
            out.extend_from_slice(b"{\"results\":[");
        }
    }

    /// A statement's result begins (its RowDescription, or `None` for NoData).
    pub fn result_start(
        &mut self,
        out: &mut BytesMut,
        desc: Option<&RowDescription<'_>>,
        row_as: RowAs,
    ) -> Result<(), WireError> {
        self.cols = match desc {
            Some(d) => Columns::describe(d, self.text)?,
            None => Columns::none(),
        };
        self.row_as = row_as;
        self.rows = 0;
        match self.format {
            Format::Json => {
                if self.results > 0 {
                    out.put_u8(b',');
                }
                out.extend_from_slice(b"{\"fields\":");
                results::fields_into(out, desc, false)?;
                out.extend_from_slice(b",\"rows\":[");
            }
            Format::NeonStream => {
                out.extend_from_slice(b"[1");
                if desc.is_some_and(|d| !d.is_empty()) {
                    out.put_u8(b',');
                    results::fields_into(out, desc, true)?;
                }
                out.extend_from_slice(b"]\n");
            }
            Format::Ndjson => {}
        }
        self.results += 1;
        Ok(())
    }

    pub fn row(&mut self, out: &mut BytesMut, row: &DataRow<'_>) -> Result<(), WireError> {
        match self.format {
            Format::Json => {
                if self.rows > 0 {
                    out.put_u8(b',');
                }
                results::row_into(out, &self.cols, row, self.row_as)?;
            }
            Format::Ndjson => {
                results::row_into(out, &self.cols, row, self.row_as)?;
                out.put_u8(b'\n');
            }
            Format::NeonStream => {
                out.extend_from_slice(b"[0");
                if !self.cols.is_empty() {
                    out.put_u8(b',');
                    results::values_into(out, &self.cols, row, RowAs::Array)?;
                }
                out.extend_from_slice(b"]\n");
            }
        }
        self.rows += 1;
        Ok(())
    }

    /// The current result ends with its command tag.
    pub fn result_end(&mut self, out: &mut BytesMut, tag: &str) {
        match self.format {
            Format::Json => {
                out.extend_from_slice(b"],");
                results::command_into(out, tag);
                out.extend_from_slice(if self.row_as == RowAs::Array {
                    b",\"rowAsArray\":true}"
                } else {
                    b",\"rowAsArray\":false}"
                });
            }
            Format::NeonStream => {
                out.extend_from_slice(b"[2,");
                results::command_into_array(out, tag);
                out.extend_from_slice(b"]\n");
            }
            Format::Ndjson => {}
        }
    }

    /// The response ends well.
    pub fn close(&mut self, out: &mut BytesMut) {
        match self.format {
            Format::Json if self.batch => out.extend_from_slice(b"]}"),
            Format::NeonStream => out.extend_from_slice(b"[3]\n"),
            Format::Json | Format::Ndjson => {}
        }
    }

    /// The response ends with an error after part of it was sent; `error` writes the
    /// error object. JSON has no such trailer: nothing is written.
    pub fn close_with_error(&mut self, out: &mut BytesMut, error: impl FnOnce(&mut BytesMut)) {
        match self.format {
            Format::Json => {}
            Format::Ndjson => {
                out.extend_from_slice(b"{\"error\":");
                error(out);
                out.extend_from_slice(b"}\n");
            }
            Format::NeonStream => {
                out.extend_from_slice(b"[4,");
                error(out);
                out.extend_from_slice(b"]\n");
            }
        }
    }
}
