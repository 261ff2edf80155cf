//! The SQLSTATE codes pgvia itself reports. Servers' codes are relayed untouched.

/// A five-character SQLSTATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SqlState(pub &'static str);

impl SqlState {
    pub const CONNECTION_EXCEPTION: Self = Self("08000");
    pub const CONNECTION_FAILURE: Self = Self("08006");
    pub const SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION: Self = Self("08001");
    pub const PROTOCOL_VIOLATION: Self = Self("08P01");
    pub const FEATURE_NOT_SUPPORTED: Self = Self("0A000");
    pub const INVALID_AUTHORIZATION_SPECIFICATION: Self = Self("28000");
    pub const INVALID_PASSWORD: Self = Self("28P01");
    pub const INVALID_CATALOG_NAME: Self = Self("3D000");
    pub const TOO_MANY_CONNECTIONS: Self = Self("53300");
    pub const CONFIGURATION_LIMIT_EXCEEDED: Self = Self("53400");
    pub const OUT_OF_MEMORY: Self = Self("53200");
    pub const QUERY_CANCELED: Self = Self("57014");
    pub const ADMIN_SHUTDOWN: Self = Self("57P01");
    pub const CANNOT_CONNECT_NOW: Self = Self("57P03");
    pub const INTERNAL_ERROR: Self = Self("XX000");
    pub const INVALID_PARAMETER_VALUE: Self = Self("22023");
    pub const SYNTAX_ERROR: Self = Self("42601");
    pub const UNDEFINED_OBJECT: Self = Self("42704");
    pub const CONFIG_FILE_ERROR: Self = Self("F0000");
    pub const IDLE_SESSION_TIMEOUT: Self = Self("57P05");
    pub const IDLE_IN_TRANSACTION_SESSION_TIMEOUT: Self = Self("25P03");
    pub const INVALID_SQL_STATEMENT_NAME: Self = Self("26000");
    pub const DUPLICATE_PREPARED_STATEMENT: Self = Self("42P05");
    pub const IN_FAILED_SQL_TRANSACTION: Self = Self("25P02");

    pub fn code(self) -> &'static str {
        self.0
    }
}

impl std::fmt::Display for SqlState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}
