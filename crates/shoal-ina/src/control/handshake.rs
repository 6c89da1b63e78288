//! Mutual authentication of a control connection with the switch secret,
//! and the session key that wraps the packet keys an ADMIT carries.
//!
//! The switch and its authorised tenants hold the switch secret's key.
//! Each side challenges the other with a fresh 32-byte nonce and checks the
//! HMAC answer (`Key::prove`, a different role string per direction, so an
//! answer cannot be reflected); the secret never crosses the wire. Both
//! nonces and the key give the session key; the `i`-th packet key sent on
//! the connection travels XOR-ed with `HMAC(session, "shoal ina wrap" || i)`,
//! so a listener without the switch secret learns nothing about it.
//! docs/ina-protocol.md, "Control channel", specifies the bytes.

use std::io;
use std::net::TcpStream;
use std::time::Instant;

use shoal_bootstrap::auth::{random_bytes, Key};

use super::{read_msg_before, write_msg, AdmitReq, CtrlMsg, ErrCode, CONTROL_VERSION, NONCE_BYTES};
use crate::mac::{PacketKey, PACKET_KEY_BYTES};
use crate::InaError;

const CLIENT_ROLE: &str = "shoal ina client";
const SWITCH_ROLE: &str = "shoal ina switch";

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

fn nonce() -> io::Result<[u8; NONCE_BYTES]> {
    random_bytes::<NONCE_BYTES>()
}

/// The client's side: proves that it holds `switch_key` and checks that the
/// switch does too, before `deadline`.
pub fn client(s: &mut TcpStream, switch_key: &Key, deadline: Instant) -> Result<Session, InaError> {
    let lost = |e: io::Error| InaError::Unreachable(format!("control channel: {e}"));
    let mine = nonce().map_err(lost)?;
    let hello = CtrlMsg::Hello {
        version: CONTROL_VERSION,
        nonce: mine,
    };
    write_msg(s, &hello).map_err(lost)?;
    let theirs = match read_msg_before(s, deadline).map_err(lost)? {
        CtrlMsg::Challenge { nonce, proof } if switch_key.verify(SWITCH_ROLE, &mine, &proof) => {
            nonce
        }
        CtrlMsg::Challenge { .. } => {
            return Err(InaError::Unauthenticated(
                "the switch could not prove that it holds the switch secret \
                 (is SHOAL_SWITCH_SECRET or SHOAL_SWITCH_SECRET_FILE the switch's?)"
                    .into(),
            ))
        }
        other => return Err(unexpected(other)),
    };
    let proof = switch_key.prove(CLIENT_ROLE, &theirs);
    write_msg(s, &CtrlMsg::Proof { proof }).map_err(lost)?;
    match read_msg_before(s, deadline).map_err(lost)? {
        CtrlMsg::Welcome => Ok(Session::new(switch_key, &mine, &theirs)),
        other => Err(unexpected(other)),
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

/// The switch's side: checks the client's `HELLO` and proof before
/// `deadline`. The caller answers `WELCOME` once it admits the connection.
/// A handshake not finished in time is refused as `Busy`.
pub fn switch(s: &mut TcpStream, switch_key: &Key, deadline: Instant) -> Result<Session, Refusal> {
    let broken = |e: io::Error| match e.kind() {
        io::ErrorKind::TimedOut => (ErrCode::Busy, "did not authenticate in time".to_string()),
        _ => (ErrCode::Protocol, format!("handshake: {e}")),
    };
    let theirs = match read_msg_before(s, deadline).map_err(broken)? {
        CtrlMsg::Hello { version, nonce } if version == CONTROL_VERSION => nonce,
        CtrlMsg::Hello { version, .. } => {
            return Err((
                ErrCode::Protocol,
                format!("control protocol version {version}; this switch speaks {CONTROL_VERSION}"),
            ))
        }
        _ => {
            return Err((
                ErrCode::Protocol,
                "authenticate first: the first message must be HELLO".into(),
            ))
        }
    };
    let mine = nonce().map_err(broken)?;
    let challenge = CtrlMsg::Challenge {
        nonce: mine,
        proof: switch_key.prove(SWITCH_ROLE, &theirs),
    };
    write_msg(s, &challenge).map_err(broken)?;
    match read_msg_before(s, deadline).map_err(broken)? {
        CtrlMsg::Proof { proof } if switch_key.verify(CLIENT_ROLE, &mine, &proof) => {
            Ok(Session::new(switch_key, &theirs, &mine))
        }
        CtrlMsg::Proof { .. } => Err((
            ErrCode::Unauthorized,
            "the proof does not match the switch secret".into(),
        )),
        _ => Err((ErrCode::Protocol, "expected PROOF".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;
    use std::time::Duration;

    fn pair(
        client_key: Key,
        switch_key: Key,
    ) -> (Result<Session, InaError>, Result<Session, Refusal>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let r = switch(&mut s, &switch_key, Instant::now() + Duration::from_secs(5));
            match &r {
                Ok(_) => write_msg(&mut s, &CtrlMsg::Welcome).unwrap(),
                Err((code, reason)) => {
                    let e = CtrlMsg::Error {
                        code: *code,
                        reason: reason.clone(),
                    };
                    let _ = write_msg(&mut s, &e);
                }
            }
            r
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
        let k = Key::from_material(b"the switch secret, long enough");
        let (c, s) = pair(k.clone(), k);
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
    fn a_client_with_another_secret_is_refused_and_a_fake_switch_is_noticed() {
        let right = Key::from_material(b"the switch secret, long enough");
        let wrong = Key::from_material(b"a stranger's guess at the secret");
        // The client checks the switch's proof first: a wrong client already
        // sees a switch it cannot trust, and the switch never welcomes it.
        let (c, s) = pair(wrong.clone(), right.clone());
        assert!(matches!(c, Err(InaError::Unauthenticated(_))), "{c:?}");
        assert!(s.is_err());
        let (c, _) = pair(right, wrong);
        assert!(matches!(c, Err(InaError::Unauthenticated(_))), "{c:?}");
    }
}
