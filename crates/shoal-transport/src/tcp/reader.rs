//! The read half of a TCP connection: a frame parser driven by non-blocking
//! reads, from whichever thread holds its lock.
//!
//! Two threads drive it. The connection's reader thread sleeps in `poll` and
//! pumps whatever arrives, so data moves (and a dead peer is noticed) while
//! the rank computes. A rank waiting for a message pumps it too, from its own
//! spin loop: the bytes then go from the socket to the receive buffer without
//! waking another thread, which on a loaded or virtual machine costs tens of
//! microseconds per message.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::TcpStream;
use std::os::fd::AsRawFd;

use super::{set_tcp_option, Shared};
use crate::frame::{decode_waiting, Header, Kind, RndvInfo, HEADER_LEN};
use crate::matching::Incoming;
use crate::TransportError;

/// The read buffer: headers and small payloads arrive together in one `recv`
/// (a small message costs one system call); sink payloads pass through it.
const INBOX: usize = 64 << 10;
/// Payload bytes still to come from which a read goes straight into the
/// receive's memory instead of through the inbox.
const DIRECT_FROM: usize = 16 << 10;
/// The longest abort reason read (the rest of a longer one is not needed).
const MAX_REASON: usize = 1 << 20;

pub(super) struct ReadSide {
    stream: TcpStream,
    peer: usize,
    state: State,
    /// Bytes read but not yet consumed are `inbox[start..end]`.
    inbox: Vec<u8>,
    start: usize,
    end: usize,
    /// Rendezvous messages whose payload we asked for, by cookie: where
    /// each payload goes when its `Payload` frame comes.
    awaiting: HashMap<u64, Incoming>,
}

enum State {
    /// Expecting a frame header.
    Header,
    /// Reading a data payload into its receive (or the unexpected queue).
    Data(Incoming),
    /// Reading an abort frame's reason; `skip` more bytes follow that are
    /// not kept (a reason longer than `MAX_REASON`).
    Abort {
        reason: Vec<u8>,
        have: usize,
        skip: usize,
    },
    /// End of stream or a broken frame, already reported: nothing more to read.
    Closed,
}

/// What one non-blocking read gave.
enum Got {
    Bytes(usize),
    /// Nothing there now.
    Empty,
    Eof,
    Failed(std::io::Error),
}

impl ReadSide {
    pub(super) fn new(stream: TcpStream, peer: usize) -> ReadSide {
        ReadSide {
            stream,
            peer,
            state: State::Header,
            inbox: vec![0; INBOX],
            start: 0,
            end: 0,
            awaiting: HashMap::new(),
        }
    }

    /// The payload of rendezvous message `cookie` goes to `inc` when it comes.
    pub(super) fn expect(&mut self, cookie: u64, inc: Incoming) {
        self.awaiting.insert(cookie, inc);
    }

    pub(super) fn closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// Reads and delivers everything the socket has now.
    pub(super) fn pump(&mut self, sh: &Shared) {
        let mut read_any = false;
        loop {
            self.consume(sh);
            if self.closed() {
                return;
            }
            let (got, wanted) = self.read_more();
            match got {
                Got::Bytes(n) if n == wanted => {
                    read_any = true;
                    continue;
                }
                // A short read: the socket had no more than that.
                Got::Bytes(_) => {
                    read_any = true;
                    self.consume(sh);
                }
                Got::Empty => {}
                Got::Eof => {
                    if !sh.lock().said_bye(self.peer) {
                        sh.lost(self.peer, "connection closed without bye");
                    }
                    self.state = State::Closed;
                }
                Got::Failed(e) => {
                    sh.lost(self.peer, &format!("receive failed: {e}"));
                    self.state = State::Closed;
                }
            }
            break;
        }
        if read_any && matches!(self.state, State::Data(_)) {
            self.ack_now();
        }
    }

    /// Acknowledges what was read at once. Mid-message, the sender may be
    /// stopped by the receive window; reading opens it, but the kernel would
    /// tell the sender only with its delayed ACK (tens of milliseconds: the
    /// rest of the message would wait that long on a 64 KiB exchange).
    fn ack_now(&self) {
        // (a failure only costs the optimisation)
        let _ = set_tcp_option(
            &self.stream,
            libc::TCP_QUICKACK,
            &(1 as libc::c_int).to_ne_bytes(),
        );
    }

    /// One `recv`: straight into a large payload's memory, else into the
    /// inbox. Returns what it got and how much it asked for.
    fn read_more(&mut self) -> (Got, usize) {
        if let State::Data(inc) = &mut self.state {
            if inc.remaining() >= DIRECT_FROM {
                if let Some(dst) = inc.direct() {
                    let wanted = dst.len();
                    let got = recv(&self.stream, dst);
                    if let Got::Bytes(n) = got {
                        inc.advance(n);
                    }
                    return (got, wanted);
                }
            }
        }
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.start > 0 {
            self.inbox.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        let wanted = INBOX - self.end;
        let got = recv(&self.stream, &mut self.inbox[self.end..]);
        if let Got::Bytes(n) = got {
            self.end += n;
        }
        (got, wanted)
    }

    /// Parses and delivers what the inbox holds.
    fn consume(&mut self, sh: &Shared) {
        loop {
            let peer = self.peer;
            match &mut self.state {
                State::Closed => return,
                State::Header => {
                    if self.buffered() < HEADER_LEN {
                        return;
                    }
                    let mut hdr = [0u8; HEADER_LEN];
                    hdr.copy_from_slice(&self.inbox[self.start..self.start + HEADER_LEN]);
                    self.start += HEADER_LEN;
                    self.start_frame(sh, &hdr);
                }
                State::Data(inc) => {
                    let n = inc.remaining().min(self.end - self.start);
                    if n > 0 {
                        inc.push(&self.inbox[self.start..self.start + n]);
                        self.start += n;
                    }
                    if !inc.done() {
                        return;
                    }
                    self.finish_data(sh);
                }
                State::Abort { reason, have, skip } => {
                    let n = (reason.len() - *have).min(self.end - self.start);
                    reason[*have..*have + n]
                        .copy_from_slice(&self.inbox[self.start..self.start + n]);
                    *have += n;
                    self.start += n;
                    let dropped = (*skip).min(self.end - self.start);
                    *skip -= dropped;
                    self.start += dropped;
                    if *have < reason.len() || *skip > 0 {
                        return;
                    }
                    let reason = String::from_utf8_lossy(reason).into_owned();
                    sh.update(|m| m.set_fatal(TransportError::Aborted { peer, reason }));
                    self.state = State::Header;
                }
            }
        }
    }

    fn start_frame(&mut self, sh: &Shared, buf: &[u8; HEADER_LEN]) {
        let peer = self.peer;
        let h = match Header::decode(buf) {
            Ok(h) => h,
            Err(e) => return self.broken(sh, &e.to_string()),
        };
        self.state = match h.kind {
            Kind::Data => State::Data(sh.lock().on_header(peer, &h)),
            Kind::Abort => State::Abort {
                reason: vec![0; (h.len as usize).min(MAX_REASON)],
                have: 0,
                skip: (h.len as usize).saturating_sub(MAX_REASON),
            },
            Kind::Bye => {
                sh.update(|m| m.peer_bye(peer));
                State::Header
            }
            Kind::Waiting => {
                sh.hear(|m| m.on_waiting(peer, decode_waiting(&h, buf)));
                State::Header
            }
            Kind::Query => {
                sh.hear(|m| m.on_query(peer));
                State::Header
            }
            Kind::Rndv => {
                sh.update(|m| m.on_rndv(peer, &h, RndvInfo::decode(buf)));
                State::Header
            }
            Kind::Ack => {
                sh.acks.push(peer, RndvInfo::decode(buf));
                sh.update(|_| {});
                State::Header
            }
            Kind::Credit => {
                sh.lock().on_credit(peer, RndvInfo::decode(buf).word);
                State::Header
            }
            Kind::Split | Kind::Wrote => {
                return self.broken(sh, "a shared-memory frame (split message) over tcp");
            }
            Kind::Payload => {
                let cookie = RndvInfo::decode(buf).cookie;
                match self.awaiting.remove(&cookie) {
                    Some(inc) if inc.len as u64 == h.len => State::Data(inc),
                    _ => {
                        let why = format!("a payload nobody asked for (message {cookie})");
                        return self.broken(sh, &why);
                    }
                }
            }
        };
    }

    fn finish_data(&mut self, sh: &Shared) {
        if let State::Data(inc) = std::mem::replace(&mut self.state, State::Header) {
            sh.update(|m| m.on_complete(self.peer, inc));
        }
    }

    fn broken(&mut self, sh: &Shared, why: &str) {
        sh.lost(self.peer, why);
        self.state = State::Closed;
    }
}

/// One `recv` that never blocks (MSG_DONTWAIT: the socket stays blocking for
/// the writers that share its file description).
fn recv(s: &TcpStream, dst: &mut [u8]) -> Got {
    if dst.is_empty() {
        return Got::Bytes(0);
    }
    loop {
        // SAFETY: dst is valid writable memory of dst.len() bytes.
        let n = unsafe {
            libc::recv(
                s.as_raw_fd(),
                dst.as_mut_ptr().cast(),
                dst.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n > 0 {
            return Got::Bytes(n as usize);
        }
        if n == 0 {
            return Got::Eof;
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            ErrorKind::Interrupted => continue,
            ErrorKind::WouldBlock => return Got::Empty,
            _ => return Got::Failed(e),
        }
    }
}

/// Sleeps until `s` has something to read (or is closed).
pub(super) fn wait_readable(s: &TcpStream) {
    let mut pfd = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd; -1 = no timeout (close shuts the socket down, which wakes it).
    unsafe { libc::poll(&mut pfd, 1, -1) };
}
