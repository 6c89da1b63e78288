//! The handshake that opens every TCP store connection: client and server
//! each prove that they hold the job's store key by answering the other's
//! random challenge. Nothing secret crosses the wire, and a recorded
//! handshake cannot be replayed (the challenges are fresh) or reflected (the
//! two roles prove different messages). Bytes in docs/security.md:
//!
//! ```text
//! client -> server  hello:     MAGIC, client_nonce (32 bytes)
//! server -> client  challenge: MAGIC, server_nonce (32 bytes)
//! client -> server  proof:     prove(K, "store client", server_nonce) (32 bytes)
//! server -> client  verdict:   ACCEPTED, prove(K, "store server", client_nonce) (32 bytes)
//!                            | REFUSED (wrong proof) | FULL (too many connections); then it closes
//! ```
//!
//! The client proves first, so a stranger learns nothing from the server
//! (no proof to guess the secret from offline) before it is turned away.
//!
//! The server side is a state machine without I/O ([`ServerHandshake`]), so
//! one thread can run the handshakes of many connections at once.

use std::io::{self, Read, Write};
use std::time::Duration;

use crate::auth::{random_bytes, Key, KEY_BYTES};

/// Opens the hello and the challenge; names the protocol and its version.
pub const MAGIC: &[u8; 8] = b"shoalkv1";
pub const ACCEPTED: u8 = 0;
pub const REFUSED: u8 = 1;
pub const FULL: u8 = 2;

const CLIENT_ROLE: &str = "store client";
const SERVER_ROLE: &str = "store server";

/// Bytes of the hello and of the challenge.
pub const GREETING_LEN: usize = MAGIC.len() + KEY_BYTES;
/// How long the server gives a connection to finish the handshake: a rank
/// answers within milliseconds, a stranger that says nothing is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client waits for each message of the server.
const CLIENT_WAIT: Duration = Duration::from_secs(10);

type Nonce = [u8; KEY_BYTES];

fn greeting(nonce: &Nonce) -> [u8; GREETING_LEN] {
    let mut g = [0u8; GREETING_LEN];
    g[..MAGIC.len()].copy_from_slice(MAGIC);
    g[MAGIC.len()..].copy_from_slice(nonce);
    g
}

/// The nonce of a greeting, if it starts with [`MAGIC`].
fn nonce_of(greeting: &[u8]) -> Option<Nonce> {
    let rest = greeting.strip_prefix(MAGIC.as_slice())?;
    rest.try_into().ok()
}

// ---------------------------------------------------------------------------
// Server

/// Why the server turned a connection away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The first bytes were not a store hello (another protocol, or shoal's
    /// store protocol from before the job secret).
    NotShoal,
    /// The proof did not match: the client holds another secret, or none.
    WrongSecret,
}

/// What the server sends after a complete message of the client.
pub enum Reply {
    /// The challenge; then wait for the proof.
    Challenge([u8; GREETING_LEN]),
    /// The proof was right: send [`ACCEPTED`] and these bytes (the server's
    /// proof) unless the server is full.
    Accepted([u8; KEY_BYTES]),
}

/// The server side of one connection's handshake.
pub struct ServerHandshake {
    server_nonce: Nonce,
    /// Set once the hello has arrived.
    client_nonce: Option<Nonce>,
}

impl ServerHandshake {
    pub fn new() -> io::Result<ServerHandshake> {
        Ok(ServerHandshake {
            server_nonce: random_bytes()?,
            client_nonce: None,
        })
    }

    /// Bytes the next message of the client has.
    pub fn wanted(&self) -> usize {
        match self.client_nonce {
            None => GREETING_LEN,
            Some(_) => KEY_BYTES,
        }
    }

    /// Whether the first bytes of the client's next message already show that
    /// it is not a store hello, so the server need not wait for the rest.
    pub fn refuses_early(&self, partial: &[u8]) -> bool {
        let n = partial.len().min(MAGIC.len());
        self.client_nonce.is_none() && partial[..n] != MAGIC[..n]
    }

    /// Takes the client's next message (exactly [`Self::wanted`] bytes).
    pub fn take(&mut self, key: &Key, message: &[u8]) -> Result<Reply, Refusal> {
        match self.client_nonce {
            None => {
                self.client_nonce = Some(nonce_of(message).ok_or(Refusal::NotShoal)?);
                Ok(Reply::Challenge(greeting(&self.server_nonce)))
            }
            Some(client_nonce) => {
                if !key.verify(CLIENT_ROLE, &self.server_nonce, message) {
                    return Err(Refusal::WrongSecret);
                }
                Ok(Reply::Accepted(key.prove(SERVER_ROLE, &client_nonce)))
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Client

/// How a client's handshake failed (the caller words the error: it knows
/// the address and where the secret came from).
#[derive(Debug)]
pub enum ClientFailure {
    /// The server does not speak this protocol (another program, or a shoal
    /// of another version).
    NotShoal,
    /// The server refused this client's proof: the secrets differ.
    Refused,
    /// The server serves as many connections as it allows.
    Full,
    /// The server accepted but could not prove the secret itself.
    ServerUnproven,
    /// The connection failed or closed midway.
    Io(io::Error),
}

impl From<io::Error> for ClientFailure {
    fn from(e: io::Error) -> Self {
        ClientFailure::Io(e)
    }
}

/// Runs the client side on a fresh connection.
pub fn client(stream: &mut (impl Read + Write), key: &Key) -> Result<(), ClientFailure> {
    let client_nonce: Nonce = random_bytes()?;
    stream.write_all(&greeting(&client_nonce))?;
    let mut challenge = [0u8; GREETING_LEN];
    stream.read_exact(&mut challenge)?;
    let server_nonce = nonce_of(&challenge).ok_or(ClientFailure::NotShoal)?;
    stream.write_all(&key.prove(CLIENT_ROLE, &server_nonce))?;
    let mut verdict = [0u8; 1];
    stream.read_exact(&mut verdict)?;
    match verdict[0] {
        ACCEPTED => {}
        REFUSED => return Err(ClientFailure::Refused),
        FULL => return Err(ClientFailure::Full),
        _ => return Err(ClientFailure::NotShoal),
    }
    let mut proof = [0u8; KEY_BYTES];
    stream.read_exact(&mut proof)?;
    if !key.verify(SERVER_ROLE, &client_nonce, &proof) {
        return Err(ClientFailure::ServerUnproven);
    }
    Ok(())
}

/// [`client`] on a TCP stream, with a bounded wait for each server message;
/// the caller sets the read timeout of its requests afterwards.
pub fn client_tcp(stream: &mut std::net::TcpStream, key: &Key) -> Result<(), ClientFailure> {
    stream.set_read_timeout(Some(CLIENT_WAIT))?;
    client(stream, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a whole handshake in memory: the client's messages go through
    /// `server`, whose replies the client reads.
    fn run(client_key: &Key, server_key: &Key) -> (Result<(), ClientFailure>, Option<Refusal>) {
        // The client writes all it can before each read, so replay it in two
        // rounds: hello -> challenge, proof -> verdict.
        struct Pipe<'a> {
            server: ServerHandshake,
            key: &'a Key,
            pending: Vec<u8>,
            replies: Vec<u8>,
            refusal: Option<Refusal>,
        }
        impl Write for Pipe<'_> {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.pending.extend_from_slice(buf);
                while self.refusal.is_none() && self.pending.len() >= self.server.wanted() {
                    let msg: Vec<u8> = self.pending.drain(..self.server.wanted()).collect();
                    match self.server.take(self.key, &msg) {
                        Ok(Reply::Challenge(c)) => self.replies.extend_from_slice(&c),
                        Ok(Reply::Accepted(p)) => {
                            self.replies.push(ACCEPTED);
                            self.replies.extend_from_slice(&p);
                        }
                        Err(r) => {
                            self.refusal = Some(r);
                            if r == Refusal::WrongSecret {
                                self.replies.push(REFUSED);
                            }
                        }
                    }
                }
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        impl Read for Pipe<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = buf.len().min(self.replies.len());
                buf[..n].copy_from_slice(&self.replies[..n]);
                self.replies.drain(..n);
                Ok(n)
            }
        }
        let mut pipe = Pipe {
            server: ServerHandshake::new().unwrap(),
            key: server_key,
            pending: Vec::new(),
            replies: Vec::new(),
            refusal: None,
        };
        let result = client(&mut pipe, client_key);
        (result, pipe.refusal)
    }

    #[test]
    fn same_key_is_accepted_both_ways() {
        let k = Key::random().unwrap();
        let (result, refusal) = run(&k, &k);
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(refusal, None);
    }

    #[test]
    fn different_keys_are_refused() {
        let (result, refusal) = run(&Key::random().unwrap(), &Key::random().unwrap());
        assert!(matches!(result, Err(ClientFailure::Refused)), "{result:?}");
        assert_eq!(refusal, Some(Refusal::WrongSecret));
    }

    #[test]
    fn other_protocols_are_not_shoal() {
        let mut hs = ServerHandshake::new().unwrap();
        // A GET of the store protocol from before the handshake, key "kkk...".
        let mut old_get = vec![2u8, 40, 0, 0, 0];
        assert!(hs.refuses_early(&old_get[..1]));
        old_get.resize(GREETING_LEN, b'k');
        let r = hs.take(&Key::random().unwrap(), &old_get);
        assert!(matches!(r, Err(Refusal::NotShoal)));
        assert!(!hs.refuses_early(b"shoal"));
    }

    #[test]
    fn a_proof_for_one_challenge_fails_another() {
        let k = Key::random().unwrap();
        let mut a = ServerHandshake::new().unwrap();
        let mut b = ServerHandshake::new().unwrap();
        let hello = greeting(&[7u8; KEY_BYTES]);
        let Ok(Reply::Challenge(ca)) = a.take(&k, &hello) else {
            panic!("no challenge")
        };
        assert!(b.take(&k, &hello).is_ok());
        let proof_for_a = k.prove(CLIENT_ROLE, &nonce_of(&ca).unwrap());
        assert!(a.take(&k, &proof_for_a).is_ok());
        assert!(matches!(
            b.take(&k, &proof_for_a),
            Err(Refusal::WrongSecret)
        ));
    }
}
