//! Where the payload of an arriving message goes: a posted receive's
//! buffer or sink, a heap buffer while it waits unexpected, or nowhere; and
//! the rendezvous pulls a transport reads from the sender.

use crate::frame::RndvInfo;
use crate::{RecvInto, ReqId, Sink};

/// Where the payload of one arriving message goes.
pub(super) enum Dest {
    Buffer(*mut u8),
    /// `carry` holds received bytes not yet handed on (fewer than 64), so
    /// every piece but the last is a multiple of 64 whatever the I/O sizes.
    Sink {
        sink: Sink,
        carry: Vec<u8>,
    },
    Heap(Vec<u8>),
    Discard,
}

pub(super) enum Target {
    Req(ReqId),
    Unexpected(u64),
    Discard,
}

/// A message whose payload is arriving.
pub(crate) struct Incoming {
    pub len: usize,
    pub received: usize,
    pub(super) target: Target,
    pub(super) dest: Dest,
}

// SAFETY: the buffer pointer comes from a receive whose caller guarantees the
// memory outlives the request (see `Transport::irecv`).
unsafe impl Send for Incoming {}

/// A rendezvous message whose payload the transport must read from the
/// sender (`rndv` says where) into `inc`, then acknowledge.
pub(crate) struct Pull {
    pub peer: usize,
    pub rndv: RndvInfo,
    pub inc: Incoming,
}

impl Incoming {
    pub(super) fn discard(len: usize) -> Incoming {
        Incoming {
            len,
            received: 0,
            target: Target::Discard,
            dest: Dest::Discard,
        }
    }

    /// Whether anybody wants the payload (a discarded one need not be read).
    pub fn wanted(&self) -> bool {
        !matches!(self.dest, Dest::Discard)
    }

    pub fn done(&self) -> bool {
        self.received == self.len
    }

    pub fn remaining(&self) -> usize {
        self.len - self.received
    }

    /// The rest of the destination when it is plain memory, so a transport
    /// can read straight into it (then call [`Incoming::advance`]).
    pub fn direct(&mut self) -> Option<&mut [u8]> {
        let rest = self.remaining();
        match &mut self.dest {
            // (an empty receive's pointer may be null, which no slice may hold)
            Dest::Buffer(_) if rest == 0 => Some(&mut []),
            // SAFETY: the receive's buffer has `len` bytes (checked on match).
            Dest::Buffer(p) => {
                Some(unsafe { std::slice::from_raw_parts_mut(p.add(self.received), rest) })
            }
            Dest::Heap(v) => Some(&mut v[self.received..]),
            _ => None,
        }
    }

    /// The address of the receive's buffer, when the payload goes straight
    /// to one (not to a sink, the heap or nowhere).
    pub fn buffer_addr(&self) -> Option<u64> {
        match self.dest {
            Dest::Buffer(p) => Some(p as u64),
            _ => None,
        }
    }

    pub fn advance(&mut self, n: usize) {
        debug_assert!(n <= self.remaining());
        self.received += n;
    }

    /// Appends the next payload bytes (at most `remaining()`).
    pub fn push(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        debug_assert!(n <= self.remaining());
        match &mut self.dest {
            Dest::Buffer(_) | Dest::Heap(_) => self.direct().unwrap()[..n].copy_from_slice(bytes),
            Dest::Sink { sink, carry } => feed_sink(sink, carry, self.received, self.len, bytes),
            Dest::Discard => {}
        }
        self.received += n;
    }
}

/// Hands `bytes` (arriving at message offset `at`) to `sink` in pieces that
/// are multiples of 64 except the message's last one.
fn feed_sink(sink: &mut Sink, carry: &mut Vec<u8>, at: usize, total: usize, mut bytes: &[u8]) {
    let end = at + bytes.len();
    if !carry.is_empty() {
        let take = (64 - carry.len()).min(bytes.len());
        carry.extend_from_slice(&bytes[..take]);
        bytes = &bytes[take..];
        if carry.len() < 64 && end < total {
            return;
        }
        sink(at + take - carry.len(), carry);
        carry.clear();
    }
    let start = end - bytes.len();
    let whole = if end == total {
        bytes.len()
    } else {
        bytes.len() / 64 * 64
    };
    if whole > 0 {
        sink(start, &bytes[..whole]);
    }
    carry.extend_from_slice(&bytes[whole..]);
}

pub(super) fn dest_of(into: RecvInto) -> Dest {
    match into {
        RecvInto::Buffer { dst, .. } => Dest::Buffer(dst),
        RecvInto::Sink { sink, .. } => Dest::Sink {
            sink,
            carry: Vec::with_capacity(64),
        },
    }
}

pub(super) fn len_of(into: &RecvInto) -> usize {
    match into {
        RecvInto::Buffer { len, .. } | RecvInto::Sink { len, .. } => *len,
    }
}

/// Delivers a fully received unexpected message into a late receive.
pub(super) fn deliver(into: RecvInto, data: &[u8]) {
    match into {
        // SAFETY: lengths were checked equal when the receive matched.
        RecvInto::Buffer { dst, .. } => unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len())
        },
        RecvInto::Sink { mut sink, .. } => sink(0, data),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn sink_pieces_are_multiples_of_64() {
        let got: Arc<Mutex<Vec<(usize, usize)>>> = Arc::default();
        let g = got.clone();
        let mut sink: Sink = Box::new(move |off, b| g.lock().unwrap().push((off, b.len())));
        let mut carry = Vec::new();
        let total = 1000;
        let mut at = 0;
        for n in [10, 100, 3, 500, 387] {
            feed_sink(&mut sink, &mut carry, at, total, &vec![0; n]);
            at += n;
        }
        let got = got.lock().unwrap();
        let mut next = 0;
        for (i, &(off, len)) in got.iter().enumerate() {
            assert_eq!(off, next);
            if i + 1 < got.len() {
                assert_eq!(len % 64, 0);
            }
            next += len;
        }
        assert_eq!(next, total);
    }
}
