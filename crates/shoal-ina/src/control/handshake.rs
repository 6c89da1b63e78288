//! Mutual authentication of a control connection with the switch secret,
//! and the session key that wraps the packet keys an ADMIT carries.
//!
//! The switch and its authorised tenants hold the switch secret's key. Each
//! side challenges the other with a fresh 32-byte nonce and checks the HMAC
//! answer (`Key::prove`, a different role string per direction, so an answer
//! cannot be reflected); the secret never crosses the wire. The client
//! proves first:
//!
//! ```text
//! client -> switch  HELLO      version, Nc
//! switch -> client  CHALLENGE  Ns                              (fresh, nothing derived from the secret)
//! client -> switch  PROOF      prove("shoal ina client", Ns)
//! switch -> client  WELCOME    prove("shoal ina switch", Nc)   | ERROR, then it closes
//! ```
//!
//! Why the client goes first: whoever proves first hands a MAC over a nonce
//! it did not choose to a peer it has not authenticated. Were it the switch,
//! anyone who can reach its port could collect (nonce, MAC) pairs and guess
//! the secret offline. The client only proves to the switch address it was
//! configured with, and the switch's proof reaches only clients that proved
//! themselves. The store's handshake makes the same choice
//! (`shoal_bootstrap::store::tcp::handshake`).
//!
//! Both nonces and the key give the session key; the `i`-th packet key sent
//! on the connection travels XOR-ed with `HMAC(session, "shoal ina wrap" ||
//! i)`, so a listener without the switch secret learns nothing about it.
//! docs/ina-protocol.md, "Control channel", specifies the bytes.
//!
//! The protocol is a state machine per side without I/O (the types below
//! take a received message and return the one to send); [`client`] and
//! [`switch`] run them on a blocking TCP stream.

use std::io;
use std::net::TcpStream;
use std::time::Instant;

use shoal_bootstrap::auth::{random_bytes, Key};

use super::{read_msg_before, write_msg, AdmitReq, CtrlMsg, ErrCode, CONTROL_VERSION, NONCE_BYTES};
use crate::mac::{PacketKey, PACKET_KEY_BYTES};
use crate::InaError;

const CLIENT_ROLE: &str = "shoal ina client";
const SWITCH_ROLE: &str = "shoal ina switch";

type Nonce = [u8; NONCE_BYTES];

/// Why the switch refuses a connection: sent back as `ERROR` before it closes.
pub type Refusal = (ErrCode, String);

/// An authenticated control connection's key material (`Debug` shows no key).
#[derive(Debug)]
pub struct Session {
    key: Key,
    /// Packet keys wrapped (or unwrapped) so far: the next keystream block.
    wrapped: u32,
}

impl Session {
    fn new(switch_key: &Key, client_nonce: &[u8], switch_nonce: &[u8]) -> Session {
        let key = switch_key.mac(&[b"shoal ina session\0", client_nonce, switch_nonce]);
        Session {
            key: Key::from_bytes(key),
            wrapped: 0,
        }
    }

    /// Wraps (client, before sending) or unwraps (switch, after receiving)
    /// the packet keys of an ADMIT, the job's first, then its uplink's: XOR
    /// is its own inverse, and both sides count keys in the same order.
    pub fn crypt_admit(&mut self, req: &mut AdmitReq) {
        req.key = self.crypt(req.key);
        if let Some(u) = &mut req.uplink {
            u.key = self.crypt(u.key);
        }
    }

    fn crypt(&mut self, k: PacketKey) -> PacketKey {
        let stream = self
            .key
            .mac(&[b"shoal ina wrap\0", &self.wrapped.to_be_bytes()]);
        self.wrapped += 1;
        let mut out = [0u8; PACKET_KEY_BYTES];
        for (i, b) in out.iter_mut().enumerate() {
            *b = k.as_bytes()[i] ^ stream[i];
        }
        PacketKey::from_bytes(out)
    }
}

fn nonce() -> io::Result<Nonce> {
    random_bytes::<NONCE_BYTES>()
}

// ---------------------------------------------------------------------------
// Client

/// The client's side after its `HELLO`, waiting for the switch's `CHALLENGE`.
pub struct ClientSaidHello {
    mine: Nonce,
}

/// The client's side after its `PROOF`, waiting for the switch's `WELCOME`.
pub struct ClientProved {
    mine: Nonce,
    theirs: Nonce,
}

impl ClientSaidHello {
    /// Starts a handshake with the client's fresh nonce; returns the `HELLO`.
    pub fn new(mine: Nonce) -> (ClientSaidHello, CtrlMsg) {
        let hello = CtrlMsg::Hello {
            version: CONTROL_VERSION,
            nonce: mine,
        };
        (ClientSaidHello { mine }, hello)
    }

    /// Answers the switch's `CHALLENGE` with the client's `PROOF`.
    pub fn challenge(self, key: &Key, msg: CtrlMsg) -> Result<(ClientProved, CtrlMsg), InaError> {
        let CtrlMsg::Challenge { nonce: theirs } = msg else {
            return Err(unexpected(msg));
        };
        let proof = CtrlMsg::Proof {
            proof: key.prove(CLIENT_ROLE, &theirs),
        };
        let mine = self.mine;
        Ok((ClientProved { mine, theirs }, proof))
    }
}

impl ClientProved {
    /// Checks the switch's proof in its `WELCOME`: a switch without the
    /// secret is not trusted with the job's packet keys.
    pub fn welcome(self, key: &Key, msg: CtrlMsg) -> Result<Session, InaError> {
        match msg {
            CtrlMsg::Welcome { proof } if key.verify(SWITCH_ROLE, &self.mine, &proof) => {
                Ok(Session::new(key, &self.mine, &self.theirs))
            }
            CtrlMsg::Welcome { .. } => Err(InaError::Unauthenticated(
                "the switch could not prove that it holds the switch secret \
                 (is SHOAL_SWITCH_SECRET or SHOAL_SWITCH_SECRET_FILE the switch's?)"
                    .into(),
            )),
            other => Err(unexpected(other)),
        }
    }
}

fn unexpected(msg: CtrlMsg) -> InaError {
    match msg {
        CtrlMsg::Error {
            code: ErrCode::Unauthorized,
            reason,
        } => InaError::Unauthenticated(format!(
            "the switch refused this job's switch secret ({reason}); set SHOAL_SWITCH_SECRET \
             or SHOAL_SWITCH_SECRET_FILE to the secret the switch runs with"
        )),
        CtrlMsg::Error {
            code: ErrCode::Busy,
            reason,
        } => InaError::Full(reason),
        CtrlMsg::Error { reason, .. } => InaError::Protocol(reason),
        other => InaError::Protocol(format!("unexpected reply {other:?} during the handshake")),
    }
}

/// The client's side on `s`: proves that it holds `switch_key`, then checks
/// that the switch does too, before `deadline`.
pub fn client(s: &mut TcpStream, switch_key: &Key, deadline: Instant) -> Result<Session, InaError> {
    let lost = |e: io::Error| InaError::Unreachable(format!("control channel: {e}"));
    let (hs, hello) = ClientSaidHello::new(nonce().map_err(lost)?);
    write_msg(s, &hello).map_err(lost)?;
    let challenge = read_msg_before(s, deadline).map_err(lost)?;
    let (hs, proof) = hs.challenge(switch_key, challenge)?;
    write_msg(s, &proof).map_err(lost)?;
    hs.welcome(switch_key, read_msg_before(s, deadline).map_err(lost)?)
}

// ---------------------------------------------------------------------------
// Switch

/// The switch's side after its `CHALLENGE`, waiting for the client's `PROOF`.
pub struct SwitchChallenged {
    mine: Nonce,
    theirs: Nonce,
}

/// A client that proved the secret: its session, and the `WELCOME` (the
/// switch's own proof) to send once the switch admits the connection.
pub struct Proven {
    pub session: Session,
    pub welcome: CtrlMsg,
}

impl SwitchChallenged {
    /// Answers a `HELLO` with `CHALLENGE`, the switch's fresh nonce `mine`.
    /// It takes no key: what a stranger gets back cannot depend on the secret.
    pub fn hello(msg: CtrlMsg, mine: Nonce) -> Result<(SwitchChallenged, CtrlMsg), Refusal> {
        let theirs = match msg {
            CtrlMsg::Hello { version, nonce } if version == CONTROL_VERSION => nonce,
            CtrlMsg::Hello { version, .. } => {
                return Err((
                    ErrCode::Protocol,
                    format!(
                        "control protocol version {version}; this switch speaks {CONTROL_VERSION}"
                    ),
                ))
            }
            _ => {
                return Err((
                    ErrCode::Protocol,
                    "authenticate first: the first message must be HELLO".into(),
                ))
            }
        };
        let challenge = CtrlMsg::Challenge { nonce: mine };
        Ok((SwitchChallenged { mine, theirs }, challenge))
    }

    /// Checks the client's `PROOF`; only a client that passes gets the
    /// switch's proof.
    pub fn proof(self, key: &Key, msg: CtrlMsg) -> Result<Proven, Refusal> {
        match msg {
            CtrlMsg::Proof { proof } if key.verify(CLIENT_ROLE, &self.mine, &proof) => Ok(Proven {
                session: Session::new(key, &self.theirs, &self.mine),
                welcome: CtrlMsg::Welcome {
                    proof: key.prove(SWITCH_ROLE, &self.theirs),
                },
            }),
            CtrlMsg::Proof { .. } => Err((
                ErrCode::Unauthorized,
                "the proof does not match the switch secret".into(),
            )),
            _ => Err((ErrCode::Protocol, "expected PROOF".into())),
        }
    }
}

/// The switch's side on `s`: checks the client's `HELLO` and proof before
/// `deadline`. The caller sends the returned `WELCOME` once it admits the
/// connection. A handshake not finished in time is refused as `Busy`.
pub fn switch(s: &mut TcpStream, switch_key: &Key, deadline: Instant) -> Result<Proven, Refusal> {
    let broken = |e: io::Error| match e.kind() {
        io::ErrorKind::TimedOut => (ErrCode::Busy, "did not authenticate in time".to_string()),
        _ => (ErrCode::Protocol, format!("handshake: {e}")),
    };
    let hello = read_msg_before(s, deadline).map_err(broken)?;
    let (hs, challenge) = SwitchChallenged::hello(hello, nonce().map_err(broken)?)?;
    write_msg(s, &challenge).map_err(broken)?;
    hs.proof(switch_key, read_msg_before(s, deadline).map_err(broken)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;
    use std::time::Duration;

    fn right() -> Key {
        Key::from_material(b"the switch secret, long enough")
    }

    fn wrong() -> Key {
        Key::from_material(b"a stranger's guess at the secret")
    }

    /// Both sides over loopback TCP, as the switch's control thread runs them.
    fn pair(
        client_key: Key,
        switch_key: Key,
    ) -> (Result<Session, InaError>, Result<Session, Refusal>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let r = switch(&mut s, &switch_key, Instant::now() + Duration::from_secs(5));
            let reply = match &r {
                Ok(p) => p.welcome.clone(),
                Err((code, reason)) => CtrlMsg::Error {
                    code: *code,
                    reason: reason.clone(),
                },
            };
            let _ = write_msg(&mut s, &reply);
            r.map(|p| p.session)
        });
        let mut c = TcpStream::connect(addr).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        (
            client(&mut c, &client_key, deadline),
            server.join().unwrap(),
        )
    }

    #[test]
    fn same_secret_gives_one_session_key_and_wrapping_round_trips() {
        let (c, s) = pair(right(), right());
        let (mut c, mut s) = (c.unwrap(), s.unwrap());
        let key = PacketKey::from_bytes(*b"job key!");
        let mut req = AdmitReq {
            tree: 0,
            members: 2,
            slots: 0,
            wire_mask: 1,
            partial_min: 0,
            deadline_us: 0,
            key,
            uplink: None,
        };
        c.crypt_admit(&mut req);
        assert_ne!(req.key, key, "the key travels wrapped");
        s.crypt_admit(&mut req);
        assert_eq!(req.key, key);
    }

    #[test]
    fn a_client_with_another_secret_is_refused() {
        let (c, s) = pair(wrong(), right());
        assert!(matches!(c, Err(InaError::Unauthenticated(_))), "{c:?}");
        assert!(matches!(s, Err((ErrCode::Unauthorized, _))), "{s:?}");
    }

    /// A challenge is the switch's nonce and nothing else: the same stranger
    /// `HELLO` gets the same answer from switches with different secrets
    /// (`hello` takes no key, so it could not do otherwise).
    #[test]
    fn the_challenge_is_the_switch_nonce_alone() {
        let stranger = CtrlMsg::Hello {
            version: CONTROL_VERSION,
            nonce: [7; NONCE_BYTES],
        };
        let (_, challenge) = SwitchChallenged::hello(stranger, [1; NONCE_BYTES]).unwrap();
        assert_eq!(
            challenge,
            CtrlMsg::Challenge {
                nonce: [1; NONCE_BYTES]
            }
        );
        assert_eq!(challenge.encode().len(), 1 + NONCE_BYTES);
    }

    #[test]
    fn a_wrong_proof_gets_no_welcome_and_a_right_one_gets_the_switch_proof() {
        let hello = |n| CtrlMsg::Hello {
            version: CONTROL_VERSION,
            nonce: n,
        };
        let (hs, _) = SwitchChallenged::hello(hello([7; 32]), [1; 32]).unwrap();
        let forged = CtrlMsg::Proof {
            proof: wrong().prove(CLIENT_ROLE, &[1; 32]),
        };
        assert!(matches!(
            hs.proof(&right(), forged),
            Err((ErrCode::Unauthorized, _))
        ));
        let (hs, _) = SwitchChallenged::hello(hello([7; 32]), [1; 32]).unwrap();
        let proven = CtrlMsg::Proof {
            proof: right().prove(CLIENT_ROLE, &[1; 32]),
        };
        let welcome = hs.proof(&right(), proven).unwrap().welcome;
        let want = right().prove(SWITCH_ROLE, &[7; 32]);
        assert_eq!(welcome, CtrlMsg::Welcome { proof: want });
    }

    #[test]
    fn a_fake_switch_is_noticed() {
        let (hs, _) = ClientSaidHello::new([7; 32]);
        let challenge = CtrlMsg::Challenge { nonce: [1; 32] };
        let (hs, _) = hs.challenge(&right(), challenge).unwrap();
        // A fake switch cannot check the proof; it welcomes with its guess.
        let fake = CtrlMsg::Welcome {
            proof: wrong().prove(SWITCH_ROLE, &[7; 32]),
        };
        let r = hs.welcome(&right(), fake);
        assert!(matches!(r, Err(InaError::Unauthenticated(_))), "{r:?}");
    }

    #[test]
    fn an_older_client_is_told_the_versions() {
        let hello = CtrlMsg::Hello {
            version: CONTROL_VERSION - 1,
            nonce: [7; 32],
        };
        let Err((code, reason)) = SwitchChallenged::hello(hello, [1; 32]) else {
            panic!("an old HELLO was answered")
        };
        assert_eq!(code, ErrCode::Protocol);
        let (old, new) = (CONTROL_VERSION - 1, CONTROL_VERSION);
        let want = format!("version {old}; this switch speaks {new}");
        assert!(reason.contains(&want), "{reason}");
    }
}
