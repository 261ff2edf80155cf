//! The client listeners: TCP, and a Unix socket in a directory as PostgreSQL makes it.

use std::net::SocketAddr;

use std::path::{Path, PathBuf};

use tokio::net::{lookup_host, TcpListener, UnixListener};

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
    TcpListener::from_std(bind_std(addr, false)?)
}

fn bind_std(addr: SocketAddr, reuse_port: bool) -> std::io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.set_nonblocking(true)?;
    // Accepted sockets inherit these (see `ACCEPTED_INHERIT_TUNING`).
    crate::net::stream::tune_socket(socket2::SockRef::from(&socket));
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// Binds `count` listeners on one address and port with `SO_REUSEPORT`, so each client thread
/// accepts from its own and the kernel spreads new connections over them (`cores`).
///
/// `SO_REUSEPORT` would also let a second pgvia of the same user join the group unnoticed, so
/// a probe without it binds first: that fails when anything holds the port, and names the
/// port when 0 was asked for. The group binds right after the probe closes. With port 0,
/// something else may take the probe's port in between (any socket bound to port 0 can get
/// it); another free port is then as good, so it is tried a few times.
pub async fn bind_group(host: &str, port: u16, count: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
    let attempts = if port == 0 { 8 } else { 1 };
    let mut last_err = None;
    for addr in lookup_host((host, port)).await? {
        for _ in 0..attempts {
            let bound = bind_std(addr, false).and_then(|probe| probe.local_addr()).and_then(|addr| {
                (0..count.max(1)).map(|_| bind_std(addr, true)).collect::<std::io::Result<Vec<_>>>()
            });
            match bound {
                Ok(group) => return Ok(group),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => last_err = Some(e),
                Err(e) => {
                    last_err = Some(e);
                    break;
                }
            }
        }
    }
    Err(last_err.unwrap_or_else(|| std::io::Error::other(format!("{host} resolves to no address"))))
}

/// A Unix-socket listener; its file is removed when this is dropped.
pub struct UnixSocket {
    pub listener: UnixListener,
    pub path: PathBuf,
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Binds `<dir>/.s.PGSQL.<port>`, the name libpq looks for given `host=<dir>`. A file left
/// there by a process that is gone is replaced; one something still accepts on is not.
/// Anyone who can reach the directory may connect (PostgreSQL's default permissions, 0777):
/// the directory's own permissions are the place to restrict that.
pub fn bind_unix(dir: &Path, port: u16) -> std::io::Result<UnixSocket> {
    let path = dir.join(format!(".s.PGSQL.{port}"));
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(&path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("{} is in use by another server", path.display()),
            ));
        }
        std::fs::remove_file(&path)?;
    }
    let listener = UnixListener::bind(&path)?;
    let socket = UnixSocket { listener, path };
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&socket.path, std::fs::Permissions::from_mode(0o777))?;
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_group_shares_its_port_and_no_one_else_joins_it() {
        let group = bind_group("127.0.0.1", 0, 2).await.expect("bind the group");
        assert_eq!(group.len(), 2);
        let port = group[0].local_addr().expect("address").port();
        assert_eq!(group[1].local_addr().expect("address").port(), port);
        // Another process's pgvia would bind the same way: refused while the group listens.
        let err = bind_group("127.0.0.1", port, 2).await.expect_err("the port is taken");
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
        drop(group);
        bind_group("127.0.0.1", port, 1).await.expect("free again");
    }

    /// The premise of `ACCEPTED_INHERIT_TUNING`: an accepted socket comes with the listener's
    /// options, so the session does not set them again.
    #[tokio::test]
    async fn accepted_sockets_inherit_the_listeners_tuning() {
        if !crate::net::stream::ACCEPTED_INHERIT_TUNING {
            return;
        }
        let listener = bind_addr("127.0.0.1:0".parse().expect("address")).expect("bind");
        let addr = listener.local_addr().expect("local address");
        let _client = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (accepted, _) = listener.accept().await.expect("accept");
        let sock = socket2::SockRef::from(&accepted);
        assert!(sock.nodelay().expect("TCP_NODELAY"));
        assert!(sock.keepalive().expect("SO_KEEPALIVE"));
        assert_eq!(sock.keepalive_time().expect("TCP_KEEPIDLE"), std::time::Duration::from_secs(60));
        assert_eq!(sock.keepalive_interval().expect("TCP_KEEPINTVL"), std::time::Duration::from_secs(10));
    }
}
