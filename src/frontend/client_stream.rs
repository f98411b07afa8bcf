//! A client's connection, over TCP or a Unix-domain socket: the two halves a session
//! reads and writes, and the plain std socket handed from the listener's thread to a
//! serving thread. Clients on pgshard's own host (pgbench, an application server)
//! reach it through its socket as they would reach PostgreSQL's: no TCP stack on
//! either side, which costs pgshard about a third less CPU per message.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{tcp, unix, TcpStream, UnixStream};

/// An accepted client connection.
pub enum ClientStream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// The same, detached from any runtime: what crosses to another serving thread.
pub enum StdClientStream {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

/// The read half a session's reader owns.
pub enum ClientRead {
    Tcp(tcp::OwnedReadHalf),
    Unix(unix::OwnedReadHalf),
}

/// The write half a session answers through.
pub enum ClientWrite {
    Tcp(tcp::OwnedWriteHalf),
    Unix(unix::OwnedWriteHalf),
}

impl ClientStream {
    /// Splits the connection; TCP answers go out without Nagle's delay.
    pub fn into_split(self) -> (ClientRead, ClientWrite) {
        match self {
            ClientStream::Tcp(s) => {
                let _ = s.set_nodelay(true);
                let (r, w) = s.into_split();
                (ClientRead::Tcp(r), ClientWrite::Tcp(w))
            }
            ClientStream::Unix(s) => {
                let (r, w) = s.into_split();
                (ClientRead::Unix(r), ClientWrite::Unix(w))
            }
        }
    }

    pub fn into_std(self) -> io::Result<StdClientStream> {
        Ok(match self {
            ClientStream::Tcp(s) => StdClientStream::Tcp(s.into_std()?),
            ClientStream::Unix(s) => StdClientStream::Unix(s.into_std()?),
        })
    }
}

impl StdClientStream {
    /// Registers the socket with the calling thread's runtime.
    pub fn into_tokio(self) -> io::Result<ClientStream> {
        Ok(match self {
            StdClientStream::Tcp(s) => ClientStream::Tcp(TcpStream::from_std(s)?),
            StdClientStream::Unix(s) => ClientStream::Unix(UnixStream::from_std(s)?),
        })
    }
}

impl AsyncRead for ClientRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientRead::Tcp(r) => Pin::new(r).poll_read(cx, buf),
            ClientRead::Unix(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientWrite {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientWrite::Tcp(w) => Pin::new(w).poll_write(cx, buf),
            ClientWrite::Unix(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientWrite::Tcp(w) => Pin::new(w).poll_flush(cx),
            ClientWrite::Unix(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientWrite::Tcp(w) => Pin::new(w).poll_shutdown(cx),
            ClientWrite::Unix(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

/// The socket file PostgreSQL clients look for in a socket directory for `port`.
pub fn socket_path(dir: &std::path::Path, port: u16) -> std::path::PathBuf {
    dir.join(format!(".s.PGSQL.{port}"))
}

/// Binds the listener's socket file. A file left by a process that is gone is
/// replaced; one another process still accepts on is an error, as with a taken port.
pub fn bind_unix(path: &std::path::Path) -> io::Result<tokio::net::UnixListener> {
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{} is taken by a running process", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    // Anyone on the host may connect, as to PostgreSQL's socket (its default
    // unix_socket_permissions): authentication still applies.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_file_is_named_as_postgresql_names_it() {
        assert_eq!(
            socket_path(std::path::Path::new("/run/pg"), 6432),
            std::path::PathBuf::from("/run/pg/.s.PGSQL.6432")
        );
    }
}
