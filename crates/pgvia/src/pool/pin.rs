//! Why a client keeps its server past the end of a transaction: the pool counts its pins
//! by reason (`SHOW POOLS`, metrics); the session decides them.

/// Why a client must keep its server beyond the end of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinReason {
    AdvisoryLock,
    Listen,
    TempTable,
    HoldCursor,
    SqlPrepare,
    Role,
    LoadedLibrary,
}

impl PinReason {
    pub const ALL: [PinReason; 7] = [
        PinReason::AdvisoryLock,
        PinReason::Listen,
        PinReason::TempTable,
        PinReason::HoldCursor,
        PinReason::SqlPrepare,
        PinReason::Role,
        PinReason::LoadedLibrary,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PinReason::AdvisoryLock => "session advisory lock",
            PinReason::Listen => "LISTEN",
            PinReason::TempTable => "temporary table",
            PinReason::HoldCursor => "WITH HOLD cursor",
            PinReason::SqlPrepare => "SQL PREPARE",
            PinReason::Role => "SET ROLE / SESSION AUTHORIZATION",
            PinReason::LoadedLibrary => "LOAD",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    pub(crate) fn bit(self) -> u8 {
        1 << (self as u8)
    }
}
