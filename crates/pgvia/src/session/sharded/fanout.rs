//! One exchange's replies from several servers, merged into the one reply stream the client
//! expects: the answer one PostgreSQL would give if it held every shard's rows (for results
//! that need no ordering or aggregation across shards; those are the merge engine's).
//!
//! No I/O: the session feeds whole frames per lane (one lane per server) and writes what
//! comes out. Every lane answers the same requests, so their replies line up message for
//! message. Rows (`DataRow`, `CopyData`) flow as soon as they arrive from any lane; every
//! other reply is a *barrier*: it goes out once, when every lane has reached it, with counts
//! summed (`SELECT 7` from 3 + 4). The first `ErrorResponse` wins; the other lanes' replies
//! are dropped up to their `ReadyForQuery`. Frames pgvia itself caused (an injected `BEGIN`,
//! an injected `Parse`) are dropped per lane.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use wire::backend::tag;

/// A lane that runs this far ahead of the slowest is not read until the others catch up.
pub const LANE_QUEUE_LIMIT: usize = 1 << 20;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FanOutError {
    #[error("shards answered the same request differently ({0:?} and {1:?})")]
    Diverged(char, char),
}

/// One server's part of the exchange.
#[derive(Debug, Default)]
pub struct Lane {
    /// Frames held at a barrier (and the rows behind it), oldest first.
    queue: VecDeque<Bytes>,
    queued: usize,
    /// Whole simple-query replies pgvia injected ahead of the client's (a `BEGIN`), dropped
    /// up to and including their `ReadyForQuery`.
    pub skip_replies: u32,
    /// For each `Parse` sent in order: whether its `ParseComplete` is pgvia's, to drop.
    pub parse_drops: VecDeque<bool>,
    /// For each `Close` sent in order: whether its `CloseComplete` is pgvia's (a statement
    /// closed on the server to make room or because its copy is stale), to drop.
    pub close_drops: VecDeque<bool>,
    /// An injected request failed: the lane cannot serve the exchange as asked.
    pub injected_error: Option<Bytes>,
    /// How many of the client's own Parses this lane's server accepted (ParseComplete that
    /// is the client's, or one pgvia answered in its place): the session registers that
    /// many of the exchange's statement names (`names.rs`).
    pub client_parses: usize,
    /// A replicated write's rows so far (`Combine::Replicated`).
    rows: RowSum,
    /// The transaction status of this lane's `ReadyForQuery`, once it came.
    ready: Option<u8>,
    /// After an error was forwarded: everything up to `ReadyForQuery` is dropped.
    discarding: bool,
}

impl Lane {
    /// Whether a frame with tag `t` is not the client's: a reply to a request pgvia injected
    /// (an error of one is kept, from `frame`), or one the server sent after an error, up to
    /// its ReadyForQuery.
    fn dropped(&mut self, t: u8, frame: impl FnOnce() -> Bytes) -> bool {
        if self.skip_replies > 0 {
            match t {
                tag::READY_FOR_QUERY => self.skip_replies -= 1,
                tag::ERROR_RESPONSE if self.injected_error.is_none() => self.injected_error = Some(frame()),
                _ => {}
            }
            return true;
        }
        if t == tag::PARSE_COMPLETE {
            if self.parse_drops.pop_front() == Some(true) {
                return true;
            }
            if !self.discarding {
                self.client_parses += 1;
            }
        }
        if t == tag::CLOSE_COMPLETE && self.close_drops.pop_front() == Some(true) {
            return true;
        }
        if t == tag::ERROR_RESPONSE {
            self.parse_drops.clear();
            self.close_drops.clear();
        }
        self.discarding && t != tag::READY_FOR_QUERY
    }
}

/// How an exchange ended, once every lane is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    /// An `ErrorResponse` reached the client.
    pub failed: bool,
    /// Some lane's server is inside a transaction block (`T` or `E`).
    pub in_transaction: bool,
}

pub struct FanOut {
    lanes: Vec<Lane>,
    failed: bool,
    /// Inside a binary `COPY TO`: each lane's header after the first lane's, and every
    /// lane's trailer, are dropped; one trailer goes out before the CopyDone.
    binary_copy: bool,
    /// A `CopyInResponse` went to the client: the lanes wait for the client's rows.
    copy_in: bool,
    combine: Combine,
}

/// How the lanes' results become the client's one result.
pub enum Combine {
    /// Rows concatenated in lane order, row counts summed.
    Concat,
    /// Every lane applied the same change (a write to omnisharded tables): the client gets
    /// one lane's row count, as from the one table it writes.
    Replicated,
    /// A cross-shard SELECT that needs merging (ORDER BY, aggregates, ...): the lanes'
    /// RowDescription, DataRows and CommandComplete go to the merge engine, and what it
    /// writes goes out.
    Merge(Box<Merge>),
}

/// The merge engine at work on one exchange.
pub struct Merge {
    merger: merge::Merger,
    /// The lanes that sent their CommandComplete (their rows are all in).
    rows_done: Vec<bool>,
    /// The merge wrote its CommandComplete (past a LIMIT, the rest is dropped).
    finished: bool,
    /// The client did not ask for a RowDescription (extended protocol without Describe):
    /// the merged one is dropped.
    drop_description: bool,
    /// The last drain stopped at a full slice of output; more needs no input.
    more: bool,
}

impl Merge {
    pub fn new(merger: merge::Merger, lanes: usize, drop_description: bool) -> Merge {
        Merge { merger, rows_done: vec![false; lanes], finished: false, drop_description, more: false }
    }

    /// The Bind's parameter values, for a `LIMIT $n` / `OFFSET $m`.
    pub fn bind_params(&mut self, params: &[(Option<&[u8]>, bool)]) -> Result<(), merge::MergeError> {
        self.merger.bind_params(params)
    }

    /// The client's per-column result formats, when the shards are asked for text.
    pub fn set_result_formats(&mut self, formats: &[i16]) {
        self.merger.set_result_formats(formats);
    }
}

/// The rows one lane returned for a statement, summed without regard to their order: how
/// many, and the wrapping sum of their hashes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct RowSum {
    count: u64,
    hashes: u64,
}

impl RowSum {
    fn add(&mut self, frame: &[u8]) {
        use std::hash::{Hash, Hasher};
        // Fixed keys: every lane hashes alike.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        frame.hash(&mut h);
        self.count += 1;
        self.hashes = self.hashes.wrapping_add(h.finish());
    }
}

/// Why a write to an omnisharded table was refused when its copies answered differently.
const COPIES_DIFFER: &str = "the copies of an omnisharded table answered this write differently (RETURNING rows or row counts differ between shards: a sequence default, now(), random() or copies that already differ); the statement fails and is rolled back on every shard, so the copies stay identical: give such values explicitly";

/// Binary COPY's file header starts so; its trailer is an int16 -1.
const BINARY_SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";
const BINARY_TRAILER: &[u8] = &[0xff, 0xff];

impl FanOut {
    pub fn new(lanes: usize, combine: Combine) -> FanOut {
        FanOut {
            lanes: (0..lanes).map(|_| Lane::default()).collect(),
            failed: false,
            binary_copy: false,
            copy_in: false,
            combine,
        }
    }

    fn merge(&self) -> Option<&Merge> {
        match &self.combine {
            Combine::Merge(m) => Some(m),
            _ => None,
        }
    }

    pub fn lane_mut(&mut self, i: usize) -> &mut Lane {
        &mut self.lanes[i]
    }

    pub fn lanes(&self) -> &[Lane] {
        &self.lanes
    }

    /// Whether lane `i` should be read: it owes replies and is not too far ahead (of the
    /// other lanes, or of an ORDER BY merge waiting for another shard's next row).
    pub fn wants_input(&self, i: usize) -> bool {
        let lane = &self.lanes[i];
        let merge_waits = self.merge().is_some_and(|m| {
            !m.finished
                && !m.rows_done[i]
                && !self.failed
                && !m.merger.needs_input(i)
                && lane.queue.is_empty()
        });
        lane.ready.is_none() && lane.queued < LANE_QUEUE_LIMIT && !merge_waits
    }

    /// Whether an error reached the client: the lanes' further replies are dropped.
    pub fn failed(&self) -> bool {
        self.failed
    }

    /// Whether lane `i` still owes replies up to its ReadyForQuery.
    pub fn owes(&self, i: usize) -> bool {
        let lane = &self.lanes[i];
        lane.ready.is_none() && !lane.queue.iter().any(|f| f[0] == tag::READY_FOR_QUERY)
    }

    /// Whether every lane is waiting for COPY data (the client was told so once).
    pub fn copy_in_started(&self) -> bool {
        self.copy_in
    }

    pub fn finished(&self) -> Option<Finished> {
        if self.lanes.iter().any(|l| l.ready.is_none()) {
            return None;
        }
        let in_transaction = self.lanes.iter().any(|l| matches!(l.ready, Some(b'T' | b'E')));
        Some(Finished { failed: self.failed, in_transaction })
    }

    /// How many of the client's Parses every lane accepted: the client's ParseCompletes
    /// (a lane that failed earlier than the others decides).
    pub fn client_parses(&self) -> usize {
        self.lanes.iter().map(|l| l.client_parses).min().unwrap_or(0)
    }

    /// Whether lane `i`'s next frame, with tag `t`, can be decided by [`Self::pass`]: the
    /// exchange has one lane, no merge and nothing held at a barrier, and the frame is no part
    /// of a COPY (whose framing the general path keeps).
    pub fn passes(&self, i: usize, t: u8) -> bool {
        self.lanes.len() == 1
            && !matches!(self.combine, Combine::Merge(_))
            && self.lanes[i].queue.is_empty()
            && !matches!(
                t,
                tag::COPY_DATA
                    | tag::COPY_DONE
                    | tag::COPY_IN_RESPONSE
                    | tag::COPY_OUT_RESPONSE
                    | tag::COPY_BOTH_RESPONSE
            )
    }

    /// Takes lane `i`'s next whole frame where [`Self::passes`]: whether it goes to the client
    /// as the server wrote it (else pgvia drops it). One lane has no barrier to meet and no
    /// count to sum; its ReadyForQuery is the session's to write.
    pub fn pass(&mut self, i: usize, frame: &[u8]) -> bool {
        let Some(&t) = frame.first() else { return false };
        let lane = &mut self.lanes[i];
        if lane.dropped(t, || Bytes::copy_from_slice(frame)) {
            return false;
        }
        match t {
            tag::READY_FOR_QUERY => {
                lane.ready = Some(frame.get(5).copied().unwrap_or(b'I'));
                false
            }
            tag::ERROR_RESPONSE => {
                lane.discarding = true;
                self.failed = true;
                true
            }
            _ => true,
        }
    }

    /// Takes one whole frame from lane `i`, writing to `out` what the client gets now.
    pub fn push(&mut self, i: usize, frame: Bytes, out: &mut BytesMut) -> Result<(), FanOutError> {
        let Some(&t) = frame.first() else { return Ok(()) };
        if self.passes(i, t) {
            if self.pass(i, &frame) {
                out.extend_from_slice(&frame);
            }
            return Ok(());
        }
        let lane = &mut self.lanes[i];
        if lane.dropped(t, || frame.clone()) {
            return Ok(());
        }
        let frame = if t == tag::COPY_DATA && self.binary_copy {
            match binary_copy_data(frame, i) {
                Some(f) => f,
                None => return Ok(()),
            }
        } else {
            frame
        };
        let replicated = matches!(self.combine, Combine::Replicated);
        match t {
            // Every copy of an omnisharded table says the same; the client hears it once.
            tag::NOTICE_RESPONSE if replicated => {
                if i == 0 {
                    out.extend_from_slice(&frame);
                }
            }
            tag::NOTICE_RESPONSE | tag::NOTIFICATION_RESPONSE => out.extend_from_slice(&frame),
            // Settings are reported once, from the first lane; the others say the same.
            tag::PARAMETER_STATUS => {
                if i == 0 {
                    out.extend_from_slice(&frame);
                }
            }
            tag::ROW_DESCRIPTION | tag::DATA_ROW | tag::COMMAND_COMPLETE
                if matches!(self.combine, Combine::Merge(_)) && lane.queue.is_empty() =>
            {
                self.feed_merge(i, frame, out);
            }
            tag::ROW_DESCRIPTION | tag::DATA_ROW | tag::COMMAND_COMPLETE
                if matches!(self.combine, Combine::Merge(_)) =>
            {
                lane.queued += frame.len();
                lane.queue.push_back(frame);
            }
            // A replicated write: the first copy's rows go to the client, every copy's are
            // summed up to be compared at the CommandComplete (`copies_agree`).
            tag::DATA_ROW if replicated => {
                lane.rows.add(&frame);
                if i == 0 {
                    if lane.queue.is_empty() {
                        out.extend_from_slice(&frame);
                    } else {
                        lane.queued += frame.len();
                        lane.queue.push_back(frame);
                    }
                }
            }
            tag::DATA_ROW | tag::COPY_DATA if lane.queue.is_empty() => out.extend_from_slice(&frame),
            _ => {
                lane.queued += frame.len();
                lane.queue.push_back(frame);
                self.advance(out)?;
            }
        }
        Ok(())
    }

    /// Lets barriers through while every lane has reached one.
    fn advance(&mut self, out: &mut BytesMut) -> Result<(), FanOutError> {
        loop {
            // An error that every barrier before it has passed ends the exchange now: the
            // other lanes are in the same statement, whose answer it is. Waiting for them to
            // reach a barrier too could wait forever, as an ORDER BY merge stops reading a
            // lane whose rows it does not need yet. A COPY FROM's lanes wait for the client's
            // data, so there the error waits for the barrier the client's CopyDone brings.
            if !self.copy_in {
                let error = self.lanes.iter().position(|l| {
                    l.ready.is_none() && l.queue.front().is_some_and(|f| f[0] == tag::ERROR_RESPONSE)
                });
                if let Some(e) = error {
                    if let Some(frame) = self.lanes[e].queue.front() {
                        out.extend_from_slice(frame);
                    }
                    self.fail_lanes();
                    continue;
                }
            }
            let mut heads = Vec::with_capacity(self.lanes.len());
            for lane in &self.lanes {
                if lane.ready.is_some() {
                    return Ok(());
                }
                match lane.queue.front() {
                    Some(f) => heads.push(f[0]),
                    None => return Ok(()),
                }
            }
            let error_lane = heads.iter().position(|&t| t == tag::ERROR_RESPONSE);
            if let Some(e) = error_lane {
                if let Some(frame) = self.lanes[e].queue.front() {
                    out.extend_from_slice(frame);
                }
                self.fail_lanes();
                continue;
            }
            let first = heads[0];
            if matches!(self.combine, Combine::Replicated) && !self.copies_agree(first) {
                wire::build::ErrorFields::with_code(
                    wire::build::Severity::Error,
                    wire::sqlstate::SqlState::FEATURE_NOT_SUPPORTED.code(),
                    COPIES_DIFFER,
                )
                .write(out);
                self.fail_lanes();
                continue;
            }
            if let Some(&other) = heads.iter().find(|&&t| t != first) {
                return Err(FanOutError::Diverged(first as char, other as char));
            }
            match first {
                tag::READY_FOR_QUERY => {
                    for lane in &mut self.lanes {
                        let z = lane.queue.pop_front().unwrap_or_default();
                        lane.queued = lane.queued.saturating_sub(z.len());
                        lane.ready = Some(z.get(5).copied().unwrap_or(b'I'));
                    }
                    return Ok(());
                }
                tag::COMMAND_COMPLETE => {
                    let tags: Vec<Bytes> = self.pop_heads();
                    if matches!(self.combine, Combine::Replicated) {
                        out.extend_from_slice(tags.first().map_or(&[][..], |t| &t[..]));
                    } else {
                        merged_command_complete(&tags, out);
                    }
                }
                tag::COPY_OUT_RESPONSE => {
                    let fronts = self.pop_heads();
                    if let Some(f) = fronts.first() {
                        // The overall format: 0 text, 1 binary.
                        self.binary_copy = f.get(5) == Some(&1);
                        out.extend_from_slice(f);
                        if self.binary_copy {
                            // One header, first, whichever lane's rows come first.
                            wire::build::frame(out, tag::COPY_DATA, |b| {
                                b.extend_from_slice(BINARY_SIGNATURE);
                                b.extend_from_slice(&[0; 8]);
                            });
                        }
                    }
                }
                tag::COPY_DONE => {
                    self.pop_heads();
                    if std::mem::take(&mut self.binary_copy) {
                        wire::build::frame(out, tag::COPY_DATA, |b| b.extend_from_slice(BINARY_TRAILER));
                    }
                    wire::build::frame(out, tag::COPY_DONE, |_| {});
                }
                tag::COPY_IN_RESPONSE => {
                    let fronts = self.pop_heads();
                    if let Some(f) = fronts.first() {
                        out.extend_from_slice(f);
                    }
                    self.copy_in = true;
                    return Ok(());
                }
                _ => {
                    let fronts = self.pop_heads();
                    if let Some(f) = fronts.first() {
                        out.extend_from_slice(f);
                    }
                }
            }
            // Rows held behind the barrier flow now, up to each lane's next barrier.
            let binary_copy = self.binary_copy;
            let merging = self.merge().is_some();
            for i in 0..self.lanes.len() {
                loop {
                    let lane = &mut self.lanes[i];
                    let Some(f) = lane.queue.front() else { break };
                    let merged = merging
                        && matches!(f[0], tag::ROW_DESCRIPTION | tag::DATA_ROW | tag::COMMAND_COMPLETE);
                    if !merged
                        && !matches!(
                            f[0],
                            tag::DATA_ROW
                                | tag::COPY_DATA
                                | tag::NOTICE_RESPONSE
                                | tag::NOTIFICATION_RESPONSE
                        )
                    {
                        break;
                    }
                    let f = lane.queue.pop_front().unwrap_or_default();
                    lane.queued = lane.queued.saturating_sub(f.len());
                    if merged {
                        self.feed_merge(i, f, out);
                        continue;
                    }
                    // Queued before the CopyOutResponse said the COPY is binary.
                    if binary_copy && f[0] == tag::COPY_DATA {
                        if let Some(f) = binary_copy_data(f, i) {
                            out.extend_from_slice(&f);
                        }
                    } else {
                        out.extend_from_slice(&f);
                    }
                }
            }
        }
    }

    /// Gives a lane's RowDescription, DataRow or CommandComplete to the merge engine and
    /// writes what it can produce. A merge error is the client's error, as a shard's would be.
    fn feed_merge(&mut self, i: usize, frame: Bytes, out: &mut BytesMut) {
        let Combine::Merge(m) = &mut self.combine else { return };
        if m.finished || self.failed {
            return;
        }
        let fed = match frame[0] {
            tag::ROW_DESCRIPTION => m.merger.row_description(i, &frame[5..]),
            tag::DATA_ROW => m.merger.data_row_bytes(i, frame.slice(5..)),
            _ => {
                m.rows_done[i] = true;
                m.merger.shard_done(i)
            }
        };
        if let Err(e) = fed {
            self.merge_failed(&e, out);
            return;
        }
        self.drain_merge(out);
    }

    /// Whether the merge has more rows ready without more input (a grouping's rows come in
    /// slices): call [`FanOut::drain_merge`] again once `out` has gone to the client.
    pub fn merge_has_more(&self) -> bool {
        self.merge().is_some_and(|m| m.more && !m.finished) && !self.failed
    }

    /// Writes what the merge can produce now (one slice of a grouping's rows at most).
    pub fn drain_merge(&mut self, out: &mut BytesMut) {
        let Combine::Merge(m) = &mut self.combine else { return };
        let mut produced = BytesMut::new();
        let drained = m.merger.drain(&mut produced);
        if m.drop_description && produced.first() == Some(&tag::ROW_DESCRIPTION) {
            let len = u32::from_be_bytes([produced[1], produced[2], produced[3], produced[4]]) as usize;
            let _ = produced.split_to((len + 1).min(produced.len()));
            m.drop_description = false;
        }
        out.extend_from_slice(&produced);
        m.more = matches!(drained, Ok(merge::Drained::Full));
        match drained {
            Ok(merge::Drained::Finished) => m.finished = true,
            Ok(merge::Drained::NeedInput | merge::Drained::Full) => {}
            Err(e) => self.merge_failed(&e, out),
        }
    }

    /// A merge error is the client's error, as a shard's would be.
    fn merge_failed(&mut self, e: &merge::MergeError, out: &mut BytesMut) {
        wire::build::ErrorFields::with_code(wire::build::Severity::Error, e.sqlstate(), &e.to_string())
            .write(out);
        self.fail_lanes();
    }

    /// An error reached the client: every lane's remaining replies are dropped up to its own
    /// ReadyForQuery, which is kept.
    fn fail_lanes(&mut self) {
        self.failed = true;
        for lane in &mut self.lanes {
            let keep: VecDeque<Bytes> =
                lane.queue.drain(..).filter(|f| f[0] == tag::READY_FOR_QUERY).take(1).collect();
            lane.discarding = keep.is_empty();
            lane.queued = keep.iter().map(Bytes::len).sum();
            lane.queue = keep;
            lane.parse_drops.clear();
            lane.close_drops.clear();
        }
    }

    /// Whether every lane's next frame is as the first lane's (`first` its tag): a write to
    /// an omnisharded table must leave its copies identical, so at its CommandComplete each
    /// copy's tag and RETURNING rows (in any order: copies need not store rows alike) must
    /// be the others'. The rows are compared by sum, so none is held.
    fn copies_agree(&mut self, first: u8) -> bool {
        let head = |l: &Lane| l.queue.front().cloned().unwrap_or_default();
        let first_frame = head(&self.lanes[0]);
        let first_rows = self.lanes[0].rows;
        let agree = self.lanes.iter().all(|l| match first {
            tag::COMMAND_COMPLETE => head(l) == first_frame && l.rows == first_rows,
            _ => head(l).first() == Some(&first),
        });
        if first == tag::COMMAND_COMPLETE {
            for lane in &mut self.lanes {
                lane.rows = RowSum::default();
            }
        }
        agree
    }

    fn pop_heads(&mut self) -> Vec<Bytes> {
        self.lanes
            .iter_mut()
            .map(|lane| {
                let f = lane.queue.pop_front().unwrap_or_default();
                lane.queued = lane.queued.saturating_sub(f.len());
                f
            })
            .collect()
    }
}

/// A lane's CopyData frame of a binary COPY as the merged stream has it: PostgreSQL puts the
/// file header in front of a lane's first row and sends the trailer (an int16 -1) alone, or
/// after the header when there are no rows; the merged stream has one header (written at
/// the CopyOutResponse) and one trailer (at the CopyDone), so both are cut from every lane.
/// `None` when nothing of the frame is left.
fn binary_copy_data(frame: Bytes, _lane: usize) -> Option<Bytes> {
    let data = frame.get(5..).unwrap_or_default();
    let header = if data.starts_with(BINARY_SIGNATURE) && data.len() >= 19 {
        let ext = u32::from_be_bytes([data[15], data[16], data[17], data[18]]) as usize;
        (19 + ext).min(data.len())
    } else {
        0
    };
    let rest = &data[header..];
    if rest.is_empty() || rest == BINARY_TRAILER {
        return None;
    }
    if header == 0 {
        return Some(frame);
    }
    let mut out = BytesMut::with_capacity(rest.len() + 5);
    wire::build::frame(&mut out, tag::COPY_DATA, |b| b.extend_from_slice(rest));
    Some(out.freeze())
}

/// One `CommandComplete` for the client from every lane's: row counts summed (`SELECT`,
/// `INSERT 0`, `UPDATE`, `DELETE`, `MERGE`, `COPY`, `FETCH`, `MOVE`), other tags as the first
/// lane gave them.
fn merged_command_complete(frames: &[Bytes], out: &mut BytesMut) {
    let text = |f: &Bytes| -> String {
        let body = f.get(5..).unwrap_or_default();
        let end = body.iter().position(|&b| b == 0).unwrap_or(body.len());
        String::from_utf8_lossy(&body[..end]).into_owned()
    };
    let Some(first) = frames.first() else { return };
    let first_text = text(first);
    let Some((head, count)) = split_count(&first_text) else {
        out.extend_from_slice(first);
        return;
    };
    let mut total = count;
    for f in &frames[1..] {
        match split_count(&text(f)) {
            Some((h, n)) if h == head => total = total.saturating_add(n),
            _ => {
                out.extend_from_slice(first);
                return;
            }
        }
    }
    wire::build::command_complete(out, &format!("{head} {total}"));
}

/// `SELECT 7` → (`SELECT`, 7); `INSERT 0 7` → (`INSERT 0`, 7); tags without a count: `None`.
fn split_count(tag_text: &str) -> Option<(&str, u64)> {
    let (head, n) = tag_text.rsplit_once(' ')?;
    let counted =
        matches!(head, "SELECT" | "INSERT 0" | "UPDATE" | "DELETE" | "MERGE" | "COPY" | "FETCH" | "MOVE");
    counted.then(|| n.parse().ok().map(|n| (head, n))).flatten()
}

#[cfg(test)]
#[path = "fanout_tests.rs"]
mod tests;
