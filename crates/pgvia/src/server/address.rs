//! Where and as whom pgvia connects to a server.

use crate::auth::{ServerAuthPolicy, ServerCredential};
use crate::net::server_tls::ServerTlsSettings;

/// Where and as whom to connect. `Debug` does not show the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerAddress {
    pub host: String,
    pub port: u16,
    pub dbname: String,
    pub user: String,
    /// What pgvia answers the server's password request with.
    pub credential: ServerCredential,
    /// TLS towards the server (the database's `server_tls_*` keys).
    pub tls: ServerTlsSettings,
    /// Which password requests are answered, and how much SCRAM work is done.
    pub auth: ServerAuthPolicy,
}

impl std::fmt::Debug for ServerAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerAddress")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("dbname", &self.dbname)
            .field("user", &self.user)
            .field("credential", &self.credential)
            .field("tls", &self.tls.mode)
            .finish()
    }
}

impl ServerAddress {
    pub fn display(&self) -> String {
        format!("{}:{}/{}", self.host, self.port, self.dbname)
    }
}
