//! A client's connection, over TCP (plain or TLS) or a Unix-domain socket: the two
//! halves a session reads and writes, and the plain std socket handed from the
//! listener's thread to a serving thread (TLS starts after the hand-over). Clients on pgshard's own host (pgbench, an application server)
//! reach it through its socket as they would reach PostgreSQL's, and pgshard no longer
//! runs their TCP input path (about a third of its CPU per routed lookup on loopback
//! TCP; see docs/ARCHITECTURE.md, "Client connections").

use std::io;
use std::net::IpAddr;
use tokio::io::{ReadHalf, WriteHalf};
use tokio::net::{tcp, unix, TcpStream, UnixStream};
use tokio_rustls::server::TlsStream;
use tokio_util::either::Either;

/// An accepted client connection.
pub enum ClientStream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// TCP after an SSLRequest answered 'S' and the TLS handshake.
    Tls(Box<TlsStream<TcpStream>>),
}

/// The same, detached from any runtime: what crosses to another serving thread.
pub enum StdClientStream {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

/// The read half a session's reader owns: plain TCP (Left(Left)), Unix-domain socket
/// (Left(Right)) or TLS (Right).
pub type ClientRead =
    Either<Either<tcp::OwnedReadHalf, unix::OwnedReadHalf>, ReadHalf<TlsStream<TcpStream>>>;

/// The write half a session answers through. TLS may keep encrypted bytes back until
/// flushed: writers call `flush` after `write_all` (a no-op on plain sockets).
pub type ClientWrite =
    Either<Either<tcp::OwnedWriteHalf, unix::OwnedWriteHalf>, WriteHalf<TlsStream<TcpStream>>>;

impl ClientStream {
    /// Splits the connection; TCP answers go out without Nagle's delay.
    pub fn into_split(self) -> (ClientRead, ClientWrite) {
        match self {
            ClientStream::Tcp(s) => {
                let _ = s.set_nodelay(true);
                let (r, w) = s.into_split();
                (Either::Left(Either::Left(r)), Either::Left(Either::Left(w)))
            }
            ClientStream::Unix(s) => {
                let (r, w) = s.into_split();
                (
                    Either::Left(Either::Right(r)),
                    Either::Left(Either::Right(w)),
                )
            }
            ClientStream::Tls(s) => {
                let _ = s.get_ref().0.set_nodelay(true);
                let (r, w) = tokio::io::split(*s);
                (Either::Right(r), Either::Right(w))
            }
        }
    }

    /// The halves put back together (to start TLS on them); None when they are not
    /// the two halves of one plain socket.
    pub fn reunite(rd: ClientRead, wr: ClientWrite) -> Option<ClientStream> {
        match (rd, wr) {
            (Either::Left(Either::Left(r)), Either::Left(Either::Left(w))) => {
                r.reunite(w).ok().map(ClientStream::Tcp)
            }
            (Either::Left(Either::Right(r)), Either::Left(Either::Right(w))) => {
                r.reunite(w).ok().map(ClientStream::Unix)
            }
            _ => None,
        }
    }

    /// The client's address: None on the Unix-domain socket.
    pub fn peer_ip(&self) -> io::Result<Option<IpAddr>> {
        Ok(match self {
            ClientStream::Tcp(s) => Some(s.peer_addr()?.ip()),
            ClientStream::Tls(s) => Some(s.get_ref().0.peer_addr()?.ip()),
            ClientStream::Unix(_) => None,
        })
    }

    pub fn into_std(self) -> io::Result<StdClientStream> {
        Ok(match self {
            ClientStream::Tcp(s) => StdClientStream::Tcp(s.into_std()?),
            ClientStream::Unix(s) => StdClientStream::Unix(s.into_std()?),
            ClientStream::Tls(_) => {
                return Err(io::Error::other(
                    "a TLS connection cannot change threads (TLS starts after the hand-over)",
                ))
            }
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
