//! `io-relay SHAPE LISTEN_PORT UPSTREAM_PORT`: accepts clients on 127.0.0.1:LISTEN_PORT and
//! relays each one's bytes to and from its own connection to 127.0.0.1:UPSTREAM_PORT, without
//! reading them. SHAPE is how the I/O is done:
//!
//! - `epoll-1`: tokio on epoll, one thread (a current-thread runtime);
//! - `epoll-2`: tokio on epoll, two worker threads (pgvia's default shape on this machine);
//! - `uring`: io_uring through tokio-uring, one thread;
//! - `monoio`: io_uring through monoio (a thread-per-core runtime built for it), one thread.
//!
//! A relay does the least work any proxy can do per round trip: one read and one write per
//! direction. Comparing its CPU per transaction across shapes bounds what moving pgvia's I/O to
//! io_uring could save, before anyone rebuilds pgvia's sockets on it (`bench/io-relay.sh`).

use std::net::SocketAddr;
use std::rc::Rc;

const BUF: usize = 16 * 1024;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: io-relay epoll-1|epoll-2|uring|monoio LISTEN_PORT UPSTREAM_PORT";
    let (Some(shape), Some(listen), Some(upstream)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let (Ok(listen), Ok(upstream)) = (listen.parse::<u16>(), upstream.parse::<u16>()) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let listen = SocketAddr::from(([127, 0, 0, 1], listen));
    let upstream = SocketAddr::from(([127, 0, 0, 1], upstream));
    let result = match shape.as_str() {
        "epoll-1" => tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .map(|rt| rt.block_on(epoll(listen, upstream))),
        "epoll-2" => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_io()
            .build()
            .map(|rt| rt.block_on(epoll(listen, upstream))),
        "uring" => Ok(tokio_uring::start(uring(listen, upstream))),
        "monoio" => monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .build()
            .map(|mut rt| rt.block_on(with_monoio(listen, upstream))),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    if let Err(e) = result.and_then(|r| r) {
        eprintln!("io-relay: {e}");
        std::process::exit(1);
    }
}

async fn epoll(listen: SocketAddr, upstream: SocketAddr) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    loop {
        let (mut client, _) = listener.accept().await?;
        tokio::spawn(async move {
            let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else { return };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            // One task polls both directions, as pgvia's relay does.
            let _ = tokio::io::copy_bidirectional_with_sizes(&mut client, &mut server, BUF, BUF).await;
        });
    }
}

async fn uring(listen: SocketAddr, upstream: SocketAddr) -> std::io::Result<()> {
    let listener = tokio_uring::net::TcpListener::bind(listen)?;
    loop {
        let (client, _) = listener.accept().await?;
        tokio_uring::spawn(async move {
            let Ok(server) = tokio_uring::net::TcpStream::connect(upstream).await else { return };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (client, server) = (Rc::new(client), Rc::new(server));
            // io_uring owns a buffer while an operation is in flight: one task per direction,
            // each with its buffer, submitting a read and then a write.
            let up = tokio_uring::spawn(pump(client.clone(), server.clone()));
            pump(server.clone(), client.clone()).await;
            let _ = client.shutdown(std::net::Shutdown::Both);
            let _ = up.await;
        });
    }
}

async fn pump(from: Rc<tokio_uring::net::TcpStream>, to: Rc<tokio_uring::net::TcpStream>) {
    let mut buf = vec![0u8; BUF];
    loop {
        let (read, b) = from.read(buf).await;
        let n = match read {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let (written, b) = to.write_all(tokio_uring::buf::BoundedBuf::slice(b, ..n)).await;
        buf = b.into_inner();
        if written.is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

async fn with_monoio(listen: SocketAddr, upstream: SocketAddr) -> std::io::Result<()> {
    let listener = monoio::net::TcpListener::bind(listen)?;
    loop {
        let (client, _) = listener.accept().await?;
        monoio::spawn(async move {
            use monoio::io::Splitable;
            let Ok(server) = monoio::net::TcpStream::connect_addr(upstream).await else { return };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            let up = monoio::spawn(monoio_pump(client_read, server_write));
            monoio_pump(server_read, client_write).await;
            let _ = up.await;
        });
    }
}

async fn monoio_pump<R, W>(mut from: R, mut to: W)
where
    R: monoio::io::AsyncReadRent,
    W: monoio::io::AsyncWriteRent,
{
    use monoio::io::AsyncWriteRentExt;
    let mut buf = Vec::with_capacity(BUF);
    loop {
        let (read, b) = from.read(buf).await;
        buf = b;
        match read {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let (written, b) = to.write_all(buf).await;
        buf = b;
        if written.is_err() {
            break;
        }
        buf.clear();
    }
    let _ = to.shutdown().await;
}
