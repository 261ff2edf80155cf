//! The columns of merged rows, as the plan, HAVING and the merger name them.

/// A column of the merged rows: one of the client's, or a hidden one (sort key, group key,
/// aggregate HAVING needs) the shard query carries and the merger strips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ColRef {
    Visible(usize),
    Hidden(usize),
}
