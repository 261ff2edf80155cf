use std::net::SocketAddr;

use tokio::net::{lookup_host, TcpListener};

/// Binds the client listener. `SO_REUSEADDR` lets a restarted pgvia bind while old
/// connections linger in TIME_WAIT.
pub async fn bind(host: &str, port: u16) -> std::io::Result<TcpListener> {
    let mut last_err = None;
    for addr in lookup_host((host, port)).await? {
        match bind_addr(addr) {
            Ok(l) => return Ok(l),
            Err(e) => last_err = Some(e),
        }
    }
    Err(last_err.unwrap_or_else(|| std::io::Error::other(format!("{host} resolves to no address"))))
}

fn bind_addr(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    TcpListener::from_std(socket.into())
}
