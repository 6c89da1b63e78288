//! The TCP control channel: length-prefixed messages that authenticate the
//! client and the switch to each other (`handshake`), then admit and release
//! jobs. The connection that admitted a job is its lease: when it closes, the
//! switch releases the job, so a crashed rank 0 cannot leak switch memory.

pub mod handshake;

use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use crate::mac::{PacketKey, PACKET_KEY_BYTES};

/// Largest control frame body; anything bigger is a protocol error.
pub const MAX_FRAME: usize = 4096;
/// Version of the control protocol, sent in `HELLO`. Version 1 had no
/// handshake (and a token instead of the data plane's tag); in version 2 the
/// switch proved itself first, to anyone (see `handshake` for why not).
pub const CONTROL_VERSION: u8 = 3;
/// Bytes of a handshake nonce and proof.
pub const NONCE_BYTES: usize = 32;

const T_ADMIT: u8 = 1;
const T_ADMIT_OK: u8 = 2;
const T_RELEASE: u8 = 3;
const T_RELEASED: u8 = 4;
const T_ERROR: u8 = 5;
const T_HELLO: u8 = 6;
const T_CHALLENGE: u8 = 7;
const T_PROOF: u8 = 8;
const T_WELCOME: u8 = 9;

/// Where a leaf switch sends its partial sums: the job admitted at the parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Uplink {
    pub job: u32,
    pub tree: u16,
    /// This leaf's member index in the parent's job.
    pub member: u16,
    /// The parent's slot-pool size (maps sequence numbers to parent slots).
    pub slots: u16,
    /// The parent job's packet key (wrapped on the wire, see `handshake`).
    pub key: PacketKey,
    /// The parent job's data port (its `ADMIT_OK` `data_port`: a
    /// multi-threaded parent serves each job on its own port); 0, or absent
    /// on the wire, means the port of the leaf's `--parent`.
    pub port: u16,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmitReq {
    pub tree: u16,
    pub members: u16,
    /// Largest slot pool the job wants (0: the switch's default).
    pub slots: u16,
    /// Bit `WireType::mask_bit()` for each element type the job will send.
    pub wire_mask: u8,
    /// Partial aggregation: emit once this many members contributed (0: all).
    pub partial_min: u16,
    /// Partial aggregation: emit this long after the first contribution (0: never).
    pub deadline_us: u32,
    /// The key that tags the job's packets (wrapped on the wire, see `handshake`).
    pub key: PacketKey,
    pub uplink: Option<Uplink>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmitOk {
    pub job: u32,
    /// Slot-pool size: sequence numbers map to `seq % slots`.
    pub slots: u16,
    /// The job's current window cap (its fair share of switch memory).
    pub cwnd_cap: u16,
    /// Largest UDP payload the switch accepts.
    pub payload_budget: u16,
    /// UDP port of the switch's data plane.
    pub data_port: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrCode {
    /// No memory or job slots left; try again later or fall back.
    Full = 1,
    /// The switch will not serve this job (unsupported type, bad parameters).
    Refused = 2,
    /// The peer sent something unparseable or out of order.
    Protocol = 3,
    /// No such job leased by this connection.
    UnknownJob = 4,
    /// The peer did not prove that it holds the switch secret.
    Unauthorized = 5,
    /// Too many control connections from this client, or idle too long.
    Busy = 6,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CtrlMsg {
    /// Client: the protocol version and a fresh challenge for the switch.
    Hello {
        version: u8,
        nonce: [u8; NONCE_BYTES],
    },
    /// Switch: its own fresh challenge, and nothing derived from the secret.
    Challenge {
        nonce: [u8; NONCE_BYTES],
    },
    /// Client: its answer to the switch's challenge.
    Proof {
        proof: [u8; NONCE_BYTES],
    },
    /// Switch: the client is authenticated; its answer to the client's
    /// challenge.
    Welcome {
        proof: [u8; NONCE_BYTES],
    },
    Admit(AdmitReq),
    AdmitOk(AdmitOk),
    Release {
        job: u32,
    },
    Released {
        job: u32,
    },
    Error {
        code: ErrCode,
        reason: String,
    },
}

impl CtrlMsg {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(48);
        match self {
            CtrlMsg::Hello { version, nonce } => {
                b.extend([T_HELLO, *version]);
                b.extend_from_slice(nonce);
            }
            CtrlMsg::Challenge { nonce } => {
                b.push(T_CHALLENGE);
                b.extend_from_slice(nonce);
            }
            CtrlMsg::Proof { proof } => {
                b.push(T_PROOF);
                b.extend_from_slice(proof);
            }
            CtrlMsg::Welcome { proof } => {
                b.push(T_WELCOME);
                b.extend_from_slice(proof);
            }
            CtrlMsg::Admit(r) => {
                b.push(T_ADMIT);
                put16(&mut b, r.tree);
                put16(&mut b, r.members);
                put16(&mut b, r.slots);
                b.push(r.wire_mask);
                put16(&mut b, r.partial_min);
                put32(&mut b, r.deadline_us);
                b.extend_from_slice(r.key.as_bytes());
                match r.uplink {
                    None => b.push(0),
                    Some(u) => {
                        b.push(1);
                        put32(&mut b, u.job);
                        put16(&mut b, u.tree);
                        put16(&mut b, u.member);
                        put16(&mut b, u.slots);
                        b.extend_from_slice(u.key.as_bytes());
                        put16(&mut b, u.port);
                    }
                }
            }
            CtrlMsg::AdmitOk(a) => {
                b.push(T_ADMIT_OK);
                put32(&mut b, a.job);
                put16(&mut b, a.slots);
                put16(&mut b, a.cwnd_cap);
                put16(&mut b, a.payload_budget);
                put16(&mut b, a.data_port);
            }
            CtrlMsg::Release { job } => {
                b.push(T_RELEASE);
                put32(&mut b, *job);
            }
            CtrlMsg::Released { job } => {
                b.push(T_RELEASED);
                put32(&mut b, *job);
            }
            CtrlMsg::Error { code, reason } => {
                b.push(T_ERROR);
                b.push(*code as u8);
                let r = &reason.as_bytes()[..reason.len().min(1024)];
                put16(&mut b, r.len() as u16);
                b.extend_from_slice(r);
            }
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<CtrlMsg, DecodeError> {
        let mut r = Reader { b, at: 0 };
        let msg = match r.u8()? {
            T_HELLO => CtrlMsg::Hello {
                version: r.u8()?,
                nonce: r.array()?,
            },
            T_CHALLENGE => CtrlMsg::Challenge { nonce: r.array()? },
            T_PROOF => CtrlMsg::Proof { proof: r.array()? },
            T_WELCOME => CtrlMsg::Welcome { proof: r.array()? },
            T_ADMIT => {
                let mut req = AdmitReq {
                    tree: r.u16()?,
                    members: r.u16()?,
                    slots: r.u16()?,
                    wire_mask: r.u8()?,
                    partial_min: r.u16()?,
                    deadline_us: r.u32()?,
                    key: r.key()?,
                    uplink: None,
                };
                if r.u8()? == 1 {
                    req.uplink = Some(Uplink {
                        job: r.u32()?,
                        tree: r.u16()?,
                        member: r.u16()?,
                        slots: r.u16()?,
                        key: r.key()?,
                        // Optional: earlier clients end the message here.
                        port: if r.at < r.b.len() { r.u16()? } else { 0 },
                    });
                }
                CtrlMsg::Admit(req)
            }
            T_ADMIT_OK => CtrlMsg::AdmitOk(AdmitOk {
                job: r.u32()?,
                slots: r.u16()?,
                cwnd_cap: r.u16()?,
                payload_budget: r.u16()?,
                data_port: r.u16()?,
            }),
            T_RELEASE => CtrlMsg::Release { job: r.u32()? },
            T_RELEASED => CtrlMsg::Released { job: r.u32()? },
            T_ERROR => {
                let code = match r.u8()? {
                    1 => ErrCode::Full,
                    2 => ErrCode::Refused,
                    4 => ErrCode::UnknownJob,
                    5 => ErrCode::Unauthorized,
                    6 => ErrCode::Busy,
                    _ => ErrCode::Protocol,
                };
                let n = r.u16()? as usize;
                let reason = String::from_utf8_lossy(r.take(n)?).into_owned();
                CtrlMsg::Error { code, reason }
            }
            t => return Err(DecodeError::UnknownType(t)),
        };
        if r.at != b.len() {
            return Err(DecodeError::TrailingBytes);
        }
        Ok(msg)
    }
}

/// Why a control message body could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The body ends inside a field.
    Truncated,
    /// The first byte names no message type.
    UnknownType(u8),
    /// Bytes follow a complete message.
    TrailingBytes,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "truncated control message"),
            DecodeError::UnknownType(t) => write!(f, "unknown control message type {t}"),
            DecodeError::TrailingBytes => write!(f, "trailing bytes in control message"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Writes one frame: a big-endian u32 body length, then the body.
pub fn write_msg(w: &mut impl Write, msg: &CtrlMsg) -> io::Result<()> {
    let body = msg.encode();
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    w.write_all(&frame)?;
    w.flush()
}

/// Reads one frame; oversize or unparseable frames are `InvalidData`.
pub fn read_msg(r: &mut impl Read) -> io::Result<CtrlMsg> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = frame_len(len)?;
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    CtrlMsg::decode(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Reads one frame that must arrive whole before `deadline` (`TimedOut`
/// otherwise), however slowly the peer trickles its bytes.
pub fn read_msg_before(s: &mut TcpStream, deadline: Instant) -> io::Result<CtrlMsg> {
    let mut len = [0u8; 4];
    read_before(s, &mut len, deadline)?;
    let mut body = vec![0u8; frame_len(len)?];
    read_before(s, &mut body, deadline)?;
    CtrlMsg::decode(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

fn frame_len(prefix: [u8; 4]) -> io::Result<usize> {
    let len = u32::from_be_bytes(prefix) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("control frame of {len} bytes"),
        ));
    }
    Ok(len)
}

fn read_before(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf[at..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::ErrorKind::TimedOut.into())
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn put16(b: &mut Vec<u8>, v: u16) {
    b.extend_from_slice(&v.to_be_bytes());
}

fn put32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_be_bytes());
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let s = self
            .b
            .get(self.at..self.at + n)
            .ok_or(DecodeError::Truncated)?;
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        let s = self.take(2)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        let s = self.take(4)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        Ok(self.take(N)?.try_into().expect("take returns N bytes"))
    }
    fn key(&mut self) -> Result<PacketKey, DecodeError> {
        Ok(PacketKey::from_bytes(self.array::<PACKET_KEY_BYTES>()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_all_messages() {
        let key = PacketKey::from_bytes(*b"abcdefgh");
        let msgs = [
            CtrlMsg::Hello {
                version: CONTROL_VERSION,
                nonce: [7; NONCE_BYTES],
            },
            CtrlMsg::Challenge {
                nonce: [1; NONCE_BYTES],
            },
            CtrlMsg::Proof {
                proof: [3; NONCE_BYTES],
            },
            CtrlMsg::Welcome {
                proof: [2; NONCE_BYTES],
            },
            CtrlMsg::Admit(AdmitReq {
                tree: 1,
                members: 4,
                slots: 64,
                wire_mask: 3,
                partial_min: 3,
                deadline_us: 500,
                key,
                uplink: Some(Uplink {
                    job: 9,
                    tree: 1,
                    member: 2,
                    slots: 32,
                    key: PacketKey::from_bytes(*b"12345678"),
                    port: 9801,
                }),
            }),
            CtrlMsg::AdmitOk(AdmitOk {
                job: 1,
                slots: 3,
                cwnd_cap: 4,
                payload_budget: 1472,
                data_port: 9800,
            }),
            CtrlMsg::Release { job: 5 },
            CtrlMsg::Released { job: 5 },
            CtrlMsg::Error {
                code: ErrCode::Busy,
                reason: "too many connections".into(),
            },
        ];
        for m in msgs {
            let mut buf = Vec::new();
            write_msg(&mut buf, &m).unwrap();
            assert_eq!(read_msg(&mut &buf[..]).unwrap(), m);
        }
    }

    #[test]
    fn malformed_bodies_say_what_is_wrong() {
        let release = CtrlMsg::Release { job: 5 }.encode();
        assert_eq!(
            CtrlMsg::decode(&release[..release.len() - 1]),
            Err(DecodeError::Truncated)
        );
        assert_eq!(CtrlMsg::decode(&[]), Err(DecodeError::Truncated));
        assert_eq!(
            CtrlMsg::decode(&[0xee]),
            Err(DecodeError::UnknownType(0xee))
        );
        let mut long = release.clone();
        long.push(0);
        assert_eq!(CtrlMsg::decode(&long), Err(DecodeError::TrailingBytes));
        // What the control connection reports when it drops a frame.
        let err = read_msg(&mut &[0, 0, 0, 1, 0xee][..]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert_eq!(err.to_string(), "unknown control message type 238");
    }
}
