//! The TCP store client: one authenticated connection, requests serialised
//! over it, errors that say which store, which key and what went wrong.

use std::io::{self, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use crate::auth::Key;
use crate::KvStore;

use super::handshake::{self, ClientFailure};
use super::wire::{
    invalid, put_bytes, read_bytes, read_u64, read_u8, MAX_ERROR_MESSAGE, OP_ADD, OP_CHECK,
    OP_DELETE, OP_GET, OP_SET, ST_ERROR, ST_OK, ST_TIMEOUT,
};
use crate::secret::{JobSecret, SecretSource};
use crate::store::{deadline_after, fmt_secs, key_timeout, lock, with_context, StoreLimits};

/// Extra time a client waits for a GET reply beyond the GET's own timeout,
/// covering network delay before it declares the server unresponsive.
const REPLY_GRACE: Duration = Duration::from_secs(10);
/// Bound of one connection attempt.
const CONNECT_LIMIT: Duration = Duration::from_secs(5);

/// Whether `e` means the connection to the store is gone (or was never
/// made): the server closed it, reset it, or nobody listens.
pub fn is_disconnect(e: &io::Error) -> bool {
    use io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused
            | ConnectionReset
            | ConnectionAborted
            | BrokenPipe
            | UnexpectedEof
            | NotConnected
    )
}

/// A client of [`super::TcpStoreServer`]. Thread-safe: requests from several
/// threads are serialised over one connection. After an I/O error the
/// connection is dropped and the next request reconnects once.
pub struct TcpStore {
    addr: String,
    key: Key,
    /// Where the secret came from, to name it when the server refuses it.
    secret_source: SecretSource,
    /// Who runs the server, for "did rank 0 exit?".
    host: String,
    max_value: usize,
    timeout: Duration,
    conn: Mutex<Option<TcpStream>>,
}

impl TcpStore {
    /// Connects to the server at `addr` ("host:port") and proves `secret`,
    /// retrying until `timeout` because the server usually starts at about
    /// the same time as its clients. `timeout` also bounds every later `get`.
    pub fn connect(
        addr: &str,
        secret: &JobSecret,
        limits: &StoreLimits,
        timeout: Duration,
    ) -> io::Result<TcpStore> {
        let store = TcpStore {
            addr: addr.to_string(),
            key: secret.key.derive("store"),
            secret_source: secret.source.clone(),
            host: "rank 0".to_string(),
            max_value: limits.max_value,
            timeout,
            conn: Mutex::new(None),
        };
        let stream = store.open_retrying()?;
        *lock(&store.conn) = Some(stream);
        Ok(store)
    }

    /// Names who runs the server in "did ... exit?" (default "rank 0").
    pub fn served_by(mut self, host: &str) -> TcpStore {
        self.host = host.to_string();
        self
    }

    /// The server address this client talks to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends one request and parses its reply; `Ok(None)` means TIMEOUT.
    /// Errors name the server, the operation and the key.
    fn request<T>(
        &self,
        op: &str,
        key: &str,
        req: &[u8],
        parse: impl FnOnce(&mut TcpStream) -> io::Result<T>,
    ) -> io::Result<Option<T>> {
        let mut conn = lock(&self.conn);
        if conn.is_none() {
            *conn = Some(self.open().map_err(|e| self.explain(e, op, key))?);
        }
        let stream = conn.as_mut().expect("connection was just established");
        let result = exchange(stream, req, parse);
        if result.is_err() {
            // The reply stream may be out of step with our requests now.
            *conn = None;
        }
        result.map_err(|e| self.explain(e, op, key))
    }

    /// Words an error of `op` on `key`: a lost connection asks whether the
    /// server's host exited; anything else is prefixed with store and key.
    fn explain(&self, e: io::Error, op: &str, key: &str) -> io::Error {
        let what = match e.kind() {
            io::ErrorKind::ConnectionRefused => "refused the connection",
            _ if is_disconnect(&e) => "closed the connection",
            _ => return with_context(e, format!("store {}: {op} '{key}'", self.addr)),
        };
        io::Error::new(
            e.kind(),
            format!(
                "{op} '{key}': the store at {} {what}; did {} exit?",
                self.addr, self.host
            ),
        )
    }

    /// One connection attempt and handshake.
    fn open(&self) -> io::Result<TcpStream> {
        let mut stream = connect_within(&self.addr, CONNECT_LIMIT)?;
        self.authenticate(&mut stream)?;
        Ok(stream)
    }

    /// Connects and authenticates, retrying until the timeout while nobody
    /// listens yet or the server drops the connection (a store that is
    /// shutting down while its host starts the next one).
    fn open_retrying(&self) -> io::Result<TcpStream> {
        let deadline = deadline_after(self.timeout);
        let mut backoff = Duration::from_millis(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let attempt = connect_within(&self.addr, left.min(CONNECT_LIMIT)).and_then(|mut s| {
                self.authenticate(&mut s)?;
                Ok(s)
            });
            match attempt {
                Ok(s) => return Ok(s),
                Err(e) if !is_disconnect(&e) && e.kind() != io::ErrorKind::TimedOut => {
                    return Err(e)
                }
                Err(e) if left.is_zero() => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "could not connect to the store at {} within {}s: {e}",
                            self.addr,
                            fmt_secs(self.timeout)
                        ),
                    ))
                }
                Err(_) => thread::sleep(backoff.min(left)),
            }
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// Runs the handshake and sets the read timeout of requests.
    fn authenticate(&self, stream: &mut TcpStream) -> io::Result<()> {
        handshake::client_tcp(stream, &self.key).map_err(|f| self.handshake_error(f))?;
        // Bounds how long any reply may take, so a hung server is detected.
        stream.set_read_timeout(Some(self.timeout.saturating_add(REPLY_GRACE)))
    }

    fn handshake_error(&self, failure: ClientFailure) -> io::Error {
        let addr = &self.addr;
        let (kind, message) = match failure {
            ClientFailure::Refused => (
                io::ErrorKind::PermissionDenied,
                format!(
                    "the store at {addr} refused this rank's job secret (from {}): every rank \
                     must hold the same job secret; shoal run sets SHOAL_SECRET, and under other \
                     launchers export one SHOAL_SECRET to every rank (`shoal secret` prints one)",
                    self.secret_source
                ),
            ),
            ClientFailure::Full => (
                io::ErrorKind::Other,
                format!(
                    "the store at {addr} refused the connection: it already serves as many as \
                     it allows (the world size plus a margin); is another job using its address?"
                ),
            ),
            ClientFailure::NotShoal => (
                io::ErrorKind::InvalidData,
                format!(
                    "the server at {addr} does not speak shoal's store protocol (another \
                     program on this port, or a shoal of another version)"
                ),
            ),
            ClientFailure::ServerUnproven => (
                io::ErrorKind::PermissionDenied,
                format!(
                    "the server at {addr} accepted this rank but could not prove that it holds \
                     the job secret; another program may be listening on this port"
                ),
            ),
            ClientFailure::Io(e) if is_disconnect(&e) => (
                e.kind(),
                format!("the store at {addr} closed the connection during the handshake"),
            ),
            ClientFailure::Io(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                (
                    io::ErrorKind::TimedOut,
                    format!("the store at {addr} did not answer the handshake in time"),
                )
            }
            ClientFailure::Io(e) => {
                return with_context(e, format!("handshake with the store at {addr}"))
            }
        };
        io::Error::new(kind, message)
    }
}

/// Writes a request and reads its status and payload.
fn exchange<T>(
    stream: &mut TcpStream,
    req: &[u8],
    parse: impl FnOnce(&mut TcpStream) -> io::Result<T>,
) -> io::Result<Option<T>> {
    stream.write_all(req)?;
    match read_u8(stream)? {
        ST_OK => parse(stream).map(Some),
        ST_TIMEOUT => Ok(None),
        ST_ERROR => {
            let msg = read_bytes(stream, "error message", MAX_ERROR_MESSAGE, &|| {
                format!("{MAX_ERROR_MESSAGE}")
            })?;
            Err(invalid(String::from_utf8_lossy(&msg).into_owned()))
        }
        s => Err(invalid(format!("server sent unknown status {s}"))),
    }
}

/// One connection attempt to each address `addr` resolves to.
fn connect_within(addr: &str, limit: Duration) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the address resolved to nothing");
    for sa in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&sa, limit.max(Duration::from_millis(1))) {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

impl KvStore for TcpStore {
    fn set(&self, key: &str, value: &[u8]) -> io::Result<()> {
        if value.len() > self.max_value {
            return Err(invalid(format!(
                "store {}: set '{key}': the value of {} bytes exceeds SHOAL_STORE_MAX_VALUE={}",
                self.addr,
                value.len(),
                self.max_value
            )));
        }
        let mut req = vec![OP_SET];
        put_bytes(&mut req, key.as_bytes());
        put_bytes(&mut req, value);
        self.request("set", key, &req, |_| Ok(())).map(|_| ())
    }

    fn get(&self, key: &str) -> io::Result<Vec<u8>> {
        let mut req = vec![OP_GET];
        put_bytes(&mut req, key.as_bytes());
        let timeout_ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        req.extend_from_slice(&timeout_ms.to_le_bytes());
        let whole = u32::MAX as usize; // the server only holds values it accepted
        let v = self.request("get", key, &req, |r| {
            read_bytes(r, "value", whole, &|| whole.to_string())
        })?;
        v.ok_or_else(|| key_timeout(&format!("store {}", self.addr), key, self.timeout))
    }

    fn add(&self, key: &str, delta: i64) -> io::Result<i64> {
        let mut req = vec![OP_ADD];
        put_bytes(&mut req, key.as_bytes());
        req.extend_from_slice(&delta.to_le_bytes());
        let v = self.request("add", key, &req, |r| Ok(read_u64(r)? as i64))?;
        v.ok_or_else(|| {
            invalid(format!(
                "store {}: add '{key}': unexpected TIMEOUT",
                self.addr
            ))
        })
    }

    fn check(&self, keys: &[&str]) -> io::Result<bool> {
        let mut req = vec![OP_CHECK];
        req.extend_from_slice(&(keys.len() as u32).to_le_bytes());
        keys.iter().for_each(|k| put_bytes(&mut req, k.as_bytes()));
        let what = keys.join("', '");
        let v = self.request("check", &what, &req, |r| Ok(read_u8(r)? != 0))?;
        Ok(v.unwrap_or(false))
    }

    fn delete(&self, key: &str) -> io::Result<bool> {
        let mut req = vec![OP_DELETE];
        put_bytes(&mut req, key.as_bytes());
        Ok(self
            .request("delete", key, &req, |r| Ok(read_u8(r)? != 0))?
            .unwrap_or(false))
    }
}
