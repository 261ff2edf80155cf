//! How targets that take several messages cut them out of one fuzz input.

/// Separates messages in an input. A byte no SCRAM message or SQL text of interest contains,
/// so seeds stay readable and the fuzzer finds the boundary easily.
pub const SEPARATOR: u8 = 0xff;

/// The messages of `data`, split at [`SEPARATOR`]; at most `max` (the rest stay in the last).
pub fn messages(data: &[u8], max: usize) -> Vec<&[u8]> {
    data.splitn(max, |&b| b == SEPARATOR).collect()
}

/// Joins messages with [`SEPARATOR`] (for seed generation).
pub fn join(messages: &[&[u8]]) -> Vec<u8> {
    messages.join(&SEPARATOR)
}
