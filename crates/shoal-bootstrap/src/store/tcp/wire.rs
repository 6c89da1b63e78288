//! The request/reply encoding of the TCP store (the table in the module
//! documentation of [`super`]), used after the handshake.

use std::io::{self, Read};
use std::time::Duration;

pub(super) const OP_SET: u8 = 1;
pub(super) const OP_GET: u8 = 2;
pub(super) const OP_ADD: u8 = 3;
pub(super) const OP_CHECK: u8 = 4;
pub(super) const OP_DELETE: u8 = 5;

pub(super) const ST_OK: u8 = 0;
pub(super) const ST_TIMEOUT: u8 = 1;
pub(super) const ST_ERROR: u8 = 2;

/// Longest key the server accepts. shoal's keys are under 200 bytes even
/// with a long job id; anything near this is a corrupt or hostile request.
pub(super) const MAX_KEY: usize = 4 << 10;
/// Most keys one CHECK may name.
pub(super) const MAX_CHECK_KEYS: usize = 4096;
/// Longest error message a client reads from an ERROR reply.
pub(super) const MAX_ERROR_MESSAGE: usize = 64 << 10;

pub(super) fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

pub(super) fn put_bytes(buf: &mut Vec<u8>, b: &[u8]) {
    buf.extend_from_slice(&(b.len() as u32).to_le_bytes());
    buf.extend_from_slice(b);
}

pub(super) fn read_array<const N: usize>(r: &mut impl Read) -> io::Result<[u8; N]> {
    let mut a = [0u8; N];
    r.read_exact(&mut a)?;
    Ok(a)
}

pub(super) fn read_u8(r: &mut impl Read) -> io::Result<u8> {
    Ok(read_array::<1>(r)?[0])
}

pub(super) fn read_u32(r: &mut impl Read) -> io::Result<u32> {
    Ok(u32::from_le_bytes(read_array(r)?))
}

pub(super) fn read_u64(r: &mut impl Read) -> io::Result<u64> {
    Ok(u64::from_le_bytes(read_array(r)?))
}

/// Reads a `len: u32` + bytes field. A length over `max` is refused before
/// anything is allocated; `limit` names the limit in the error ("the limit of 4096").
pub(super) fn read_bytes(
    r: &mut impl Read,
    what: &str,
    max: usize,
    limit: &dyn Fn() -> String,
) -> io::Result<Vec<u8>> {
    let len = read_u32(r)? as usize;
    if len > max {
        return Err(invalid(format!(
            "{what} of {len} bytes exceeds {}",
            limit()
        )));
    }
    let mut v = vec![0u8; len];
    r.read_exact(&mut v)?;
    Ok(v)
}

fn read_key(r: &mut impl Read) -> io::Result<String> {
    let bytes = read_bytes(r, "key", MAX_KEY, &|| format!("the limit of {MAX_KEY}"))?;
    String::from_utf8(bytes).map_err(|_| invalid("key is not UTF-8"))
}

/// A parsed request.
pub(super) enum Request {
    Set(String, Vec<u8>),
    Get(String, Duration),
    Add(String, i64),
    Check(Vec<String>),
    Delete(String),
}

impl Request {
    /// Reads one request; `Ok(None)` when the client closed the connection
    /// cleanly. A malformed request is an `InvalidData` error whose message
    /// the server sends back before closing the connection; `max_value`
    /// bounds SET values (`SHOAL_STORE_MAX_VALUE`).
    pub(super) fn read(r: &mut impl Read, max_value: usize) -> io::Result<Option<Request>> {
        let op = match read_u8(r) {
            Ok(op) => op,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        };
        let value_limit = || format!("SHOAL_STORE_MAX_VALUE={max_value} of this store");
        let req = match op {
            OP_SET => Request::Set(
                read_key(r)?,
                read_bytes(r, "value", max_value, &value_limit)?,
            ),
            OP_GET => Request::Get(read_key(r)?, Duration::from_millis(read_u64(r)?)),
            OP_ADD => Request::Add(read_key(r)?, read_u64(r)? as i64),
            OP_CHECK => {
                let n = read_u32(r)? as usize;
                if n > MAX_CHECK_KEYS {
                    return Err(invalid(format!(
                        "CHECK of {n} keys exceeds the limit of {MAX_CHECK_KEYS}"
                    )));
                }
                Request::Check((0..n).map(|_| read_key(r)).collect::<io::Result<_>>()?)
            }
            OP_DELETE => Request::Delete(read_key(r)?),
            other => return Err(invalid(format!("unknown op {other}"))),
        };
        Ok(Some(req))
    }
}
