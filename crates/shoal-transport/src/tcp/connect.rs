//! Opening a job's TCP connections, one per pair of ranks.
//!
//! Every rank listens on the address it publishes in the store (never on
//! all interfaces), and the higher rank of each pair dials the lower one.
//! Each connection starts with a mutual challenge-response (byte by byte in
//! docs/security.md, "Connections between ranks"): both ends prove that
//! they hold the job's transport key by a MAC over a challenge that binds
//! the job id, both claimed ranks and a fresh nonce from each end, so a
//! proof is worthless for another rank, another job or another connection.
//!
//! The listening rank answers each incoming connection on its own thread,
//! with a deadline, so a stranger that sends nothing, garbage or a forged
//! hello is dropped (and counted) without holding up the ranks. The
//! listener closes once every peer is in: later connections are refused.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tracing::warn;

use super::{io, io_err, set_tcp_option, Congestion, TcpConfig};
use crate::auth::{random_bytes, Key, KEY_BYTES};
use crate::setup::wait_for_rank;
use crate::{KvStore, Result};

/// First bytes of a hello; the digit is the handshake's version.
const MAGIC: &[u8; 8] = b"SHOALTC2";
/// Bytes of a hello before the job id: magic, dialer's rank, acceptor's
/// rank, dialer's nonce, job id length.
const HELLO_HEAD: usize = MAGIC.len() + 4 + 4 + KEY_BYTES + 4;
const MAX_JOB_LEN: usize = 4096;
/// Proof roles: each end proves in its own, so neither can reflect the
/// other's proof back.
const DIALER: &str = "shoal tcp dialer";
const ACCEPTOR: &str = "shoal tcp acceptor";
/// The acceptor's last byte: the dialer is in.
const ACCEPTED: u8 = 1;
/// How long an incoming connection gets to prove itself. A rank needs a
/// few round trips; only a stranger takes longer.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Incoming connections answered at once (a thread each); more wait in the
/// listen backlog, so a flood of strangers costs a bounded number of threads.
const MAX_HANDSHAKES: usize = 32;

/// The connections of one rank, and how many strangers it turned away.
pub(super) struct Connected {
    pub streams: Vec<(usize, TcpStream)>,
    pub refused: usize,
}

/// Listens, publishes the address, dials the lower `peers` and lets the
/// higher ones in.
pub(super) fn establish(
    cfg: &TcpConfig,
    store: &dyn KvStore,
    peers: &[usize],
) -> Result<Connected> {
    if cfg.bind_ip.is_unspecified() {
        return Err(io_err(&format!(
            "will not listen on {}: a rank listens only on the address it publishes \
             (set SHOAL_TCP_ADDR to this host's address)",
            cfg.bind_ip
        )));
    }
    let deadline = Instant::now() + cfg.timeout;
    let listener = TcpListener::bind(SocketAddr::new(cfg.bind_ip, 0)).map_err(io)?;
    let addr = listener.local_addr().map_err(io)?;
    store
        .set(
            &addr_key(&cfg.job_id, cfg.rank),
            addr.to_string().as_bytes(),
        )
        .map_err(io)?;
    let mut streams = Vec::new();
    for &p in peers.iter().filter(|&&p| p < cfg.rank) {
        streams.push((p, dial(cfg, store, p, deadline)?));
    }
    let higher = peers.iter().copied().filter(|&p| p > cfg.rank).collect();
    let mut gate = Gate::new(cfg, listener, higher);
    let admitted = gate.admit_all(deadline);
    gate.warn_about_refusals();
    streams.extend(admitted?);
    Ok(Connected {
        streams,
        refused: gate.refused.len(),
    })
}

fn addr_key(job: &str, rank: usize) -> String {
    format!("{job}/tcp/{rank}")
}

// ---------------------------------------------------------------------------
// Dialing

fn dial(cfg: &TcpConfig, store: &dyn KvStore, peer: usize, deadline: Instant) -> Result<TcpStream> {
    let v = wait_for_rank(store, &addr_key(&cfg.job_id, peer), peer)?;
    let text = String::from_utf8_lossy(&v);
    let addr: SocketAddr = text
        .parse()
        .map_err(|_| io_err(&format!("rank {peer} published a bad address {text:?}")))?;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(&addr, left.max(Duration::from_millis(1))) {
            Ok(s) => return introduce(cfg, s, peer, addr, deadline),
            Err(e) if Instant::now() >= deadline => {
                return Err(io_err(&format!("connect to rank {peer} at {addr}: {e}")))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// The dialer's side of the handshake: hello, check the acceptor's proof,
/// send ours, wait to be let in.
fn introduce(
    cfg: &TcpConfig,
    mut s: TcpStream,
    peer: usize,
    addr: SocketAddr,
    deadline: Instant,
) -> Result<TcpStream> {
    tune(&s, cfg)?;
    let failed = |what: &str, e: std::io::Error| {
        io_err(&format!(
            "handshake with rank {peer} at {addr}: {what}: {e}"
        ))
    };
    limit_io(&s, deadline).map_err(|e| failed("setting a deadline", e))?;
    let nonce: [u8; KEY_BYTES] = random_bytes().map_err(io)?;
    let hello = Hello {
        dialer: cfg.rank as u32,
        acceptor: peer as u32,
        nonce,
        job: cfg.job_id.as_bytes().to_vec(),
    };
    s.write_all(&hello.encode())
        .map_err(|e| failed("sending the hello", e))?;
    let mut reply = [0u8; 2 * KEY_BYTES];
    s.read_exact(&mut reply)
        .map_err(|e| failed("no answer to the hello", e))?;
    let (their_nonce, their_proof) = reply.split_at(KEY_BYTES);
    let c = hello.challenge(their_nonce.try_into().unwrap());
    if !cfg.key.verify(ACCEPTOR, &c, their_proof) {
        return Err(io_err(&format!(
            "rank {peer} at {addr} could not prove that it holds this job's key: \
             the ranks do not share one job secret (SHOAL_SECRET or the secret file), \
             or another process answers at that address"
        )));
    }
    s.write_all(&cfg.key.prove(DIALER, &c))
        .map_err(|e| failed("sending our proof", e))?;
    let mut ack = [0u8; 1];
    match s.read_exact(&mut ack) {
        Ok(()) if ack[0] == ACCEPTED => {}
        _ => {
            return Err(io_err(&format!(
                "rank {peer} at {addr} did not let this rank in (it proved itself, so this \
                 rank's proof failed there, or rank {peer} stopped waiting)"
            )))
        }
    }
    s.set_read_timeout(None).map_err(io)?;
    s.set_write_timeout(None).map_err(io)?;
    Ok(s)
}

// ---------------------------------------------------------------------------
// Letting peers in

/// What a handshake thread hands back: the rank the connection proved to
/// be, or why it was dropped.
type Answer = std::result::Result<(usize, TcpStream), String>;

/// The listening side: answers incoming connections until every higher
/// rank is in.
struct Gate<'a> {
    cfg: &'a TcpConfig,
    listener: TcpListener,
    missing: Vec<usize>,
    in_flight: usize,
    answers_tx: Sender<Answer>,
    answers: Receiver<Answer>,
    /// Why each dropped connection was dropped.
    refused: Vec<String>,
}

impl<'a> Gate<'a> {
    fn new(cfg: &'a TcpConfig, listener: TcpListener, missing: Vec<usize>) -> Gate<'a> {
        let (answers_tx, answers) = channel();
        Gate {
            cfg,
            listener,
            missing,
            in_flight: 0,
            answers_tx,
            answers,
            refused: Vec::new(),
        }
    }

    fn admit_all(&mut self, deadline: Instant) -> Result<Vec<(usize, TcpStream)>> {
        let started = Instant::now();
        self.listener.set_nonblocking(true).map_err(io)?;
        let mut admitted = Vec::new();
        while !self.missing.is_empty() {
            self.accept_waiting(deadline)?;
            if Instant::now() >= deadline {
                return Err(self.never_connected(started));
            }
            // (a short nap: new connections are noticed by polling the listener)
            if let Ok(answer) = self.answers.recv_timeout(Duration::from_millis(1)) {
                self.in_flight -= 1;
                self.settle(answer, &mut admitted)?;
            }
        }
        Ok(admitted)
    }

    /// Hands every connection in the backlog to a handshake thread, while
    /// fewer than `MAX_HANDSHAKES` run.
    fn accept_waiting(&mut self, deadline: Instant) -> Result<()> {
        while self.in_flight < MAX_HANDSHAKES {
            match self.listener.accept() {
                Ok((s, from)) => self.answer(s, from, deadline),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                // (a connection reset while queued: nothing to answer)
                Err(e) if e.kind() == ErrorKind::ConnectionAborted => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
        }
        Ok(())
    }

    fn answer(&mut self, s: TcpStream, from: SocketAddr, deadline: Instant) {
        let limit = deadline.min(Instant::now() + HANDSHAKE_TIMEOUT);
        let expect = Expect {
            key: self.cfg.key.clone(),
            job: self.cfg.job_id.clone(),
            rank: self.cfg.rank,
            dialers: self.missing.clone(),
        };
        let tx = self.answers_tx.clone();
        let run = move || {
            // The connection stays open until the gate has the answer: a
            // refused stranger sees it close only once its refusal is queued
            // (ahead of anyone who connects after), so the count is exact.
            let held = s.try_clone().ok();
            let answer = expect
                .check(s, limit)
                .map_err(|why| format!("{from}: {why}"));
            let _ = tx.send(answer); // (the gate may have closed meanwhile)
            drop(held);
        };
        match std::thread::Builder::new()
            .name("shoal-tcp-hello".into())
            .spawn(run)
        {
            Ok(_) => self.in_flight += 1,
            Err(e) => self
                .refused
                .push(format!("{from}: no thread to answer it: {e}")),
        }
    }

    /// Lets a proven rank in, once.
    fn settle(&mut self, answer: Answer, admitted: &mut Vec<(usize, TcpStream)>) -> Result<()> {
        let (rank, mut s) = match answer {
            Ok(proven) => proven,
            Err(why) => {
                self.refused.push(why);
                return Ok(());
            }
        };
        if !self.missing.contains(&rank) {
            self.refused
                .push(format!("a second connection proved to be rank {rank}"));
            return Ok(());
        }
        tune(&s, self.cfg)?;
        let entered = s
            .write_all(&[ACCEPTED])
            .and_then(|()| s.set_read_timeout(None))
            .and_then(|()| s.set_write_timeout(None));
        if let Err(e) = entered {
            self.refused
                .push(format!("rank {rank} hung up before it was let in: {e}"));
            return Ok(());
        }
        self.missing.retain(|&m| m != rank);
        admitted.push((rank, s));
        Ok(())
    }

    fn never_connected(&self, started: Instant) -> crate::TransportError {
        let who = match self.missing.as_slice() {
            [one] => format!("rank {one}"),
            many => format!("ranks {many:?}"),
        };
        let mut msg = format!(
            "{who} never connected to rank {} (waited {:.1} s)",
            self.cfg.rank,
            started.elapsed().as_secs_f64()
        );
        if let Some(last) = self.refused.last() {
            msg += &format!(
                "; {} connection(s) failed the handshake, the last from {last}",
                self.refused.len()
            );
        }
        io_err(&msg)
    }

    /// One warning for all connections dropped during setup.
    fn warn_about_refusals(&self) {
        if let Some(first) = self.refused.first() {
            warn!(
                "dropped {} connection(s) to this rank's TCP port that failed the handshake \
                 (first from {first})",
                self.refused.len()
            );
        }
    }
}

/// What the acceptor expects of a hello, for a handshake thread.
struct Expect {
    key: Key,
    job: String,
    rank: usize,
    /// Ranks that may still connect.
    dialers: Vec<usize>,
}

impl Expect {
    /// The acceptor's side of the handshake; returns the proven rank.
    fn check(
        &self,
        mut s: TcpStream,
        limit: Instant,
    ) -> std::result::Result<(usize, TcpStream), String> {
        s.set_nonblocking(false).map_err(|e| e.to_string())?;
        limit_io(&s, limit).map_err(|e| e.to_string())?;
        let hello = Hello::read(&mut s)?;
        let dialer = hello.dialer as usize;
        if hello.job != self.job.as_bytes() {
            return Err("a hello for another job".into());
        }
        if hello.acceptor as usize != self.rank {
            return Err(format!(
                "a hello for rank {}, not this rank",
                hello.acceptor
            ));
        }
        if !self.dialers.contains(&dialer) {
            return Err(format!(
                "claims rank {dialer}, which is not expected to connect"
            ));
        }
        let nonce: [u8; KEY_BYTES] = random_bytes().map_err(|e| e.to_string())?;
        let c = hello.challenge(&nonce);
        let mut reply = nonce.to_vec();
        reply.extend_from_slice(&self.key.prove(ACCEPTOR, &c));
        s.write_all(&reply)
            .map_err(|e| format!("claims rank {dialer}, then hung up: {e}"))?;
        let mut proof = [0u8; KEY_BYTES];
        s.read_exact(&mut proof).map_err(|e| {
            format!("claims rank {dialer} but gave no proof ({e}): a rank with another job secret?")
        })?;
        if !self.key.verify(DIALER, &c, &proof) {
            return Err(format!(
                "claims rank {dialer} but its proof does not match this job's key \
                 (another job secret, or replayed bytes)"
            ));
        }
        Ok((dialer, s))
    }
}

// ---------------------------------------------------------------------------
// The hello

/// The dialer's first message.
struct Hello {
    dialer: u32,
    acceptor: u32,
    nonce: [u8; KEY_BYTES],
    job: Vec<u8>,
}

impl Hello {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HELLO_HEAD + self.job.len());
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&self.dialer.to_le_bytes());
        b.extend_from_slice(&self.acceptor.to_le_bytes());
        b.extend_from_slice(&self.nonce);
        b.extend_from_slice(&(self.job.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.job);
        b
    }

    fn read(s: &mut TcpStream) -> std::result::Result<Hello, String> {
        let mut head = [0u8; HELLO_HEAD];
        s.read_exact(&mut head)
            .map_err(|e| format!("no complete hello ({e})"))?;
        if &head[..MAGIC.len()] != MAGIC {
            return Err("not a shoal hello".into());
        }
        let word = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().unwrap());
        let job_len = word(HELLO_HEAD - 4) as usize;
        if job_len > MAX_JOB_LEN {
            return Err(format!("a hello with a job id of {job_len} bytes"));
        }
        let mut job = vec![0u8; job_len];
        s.read_exact(&mut job)
            .map_err(|e| format!("no complete hello ({e})"))?;
        Ok(Hello {
            dialer: word(8),
            acceptor: word(12),
            nonce: head[16..16 + KEY_BYTES].try_into().unwrap(),
            job,
        })
    }

    /// What both ends prove they can MAC: the hello's claims and both nonces.
    fn challenge(&self, acceptor_nonce: &[u8; KEY_BYTES]) -> [u8; KEY_BYTES] {
        Sha256::new()
            .chain_update(b"shoal tcp hello 2\0")
            .chain_update((self.job.len() as u32).to_le_bytes())
            .chain_update(&self.job)
            .chain_update(self.dialer.to_le_bytes())
            .chain_update(self.acceptor.to_le_bytes())
            .chain_update(self.nonce)
            .chain_update(acceptor_nonce)
            .finalize()
            .into()
    }
}

/// Bounds every read and write on `s` by the time left until `limit`.
fn limit_io(s: &TcpStream, limit: Instant) -> std::io::Result<()> {
    let left = limit
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    s.set_read_timeout(Some(left))?;
    s.set_write_timeout(Some(left))
}

fn tune(s: &TcpStream, cfg: &TcpConfig) -> Result<()> {
    s.set_nodelay(true).map_err(io)?;
    // (buffer sizes are left to kernel autotuning: fixed sizes disable it)
    if let Some(cc) = &cfg.congestion {
        if let Err(e) = set_tcp_option(s, libc::TCP_CONGESTION, cc.name.as_bytes()) {
            if cc.required {
                let available =
                    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
                        .unwrap_or_default();
                return Err(io_err(&format!(
                    "cannot use TCP congestion control {:?}: {e} (available: {})",
                    cc.name,
                    available.trim()
                )));
            }
        }
    }
    Ok(())
}

/// The congestion control that connections set up with `cc` get, as the
/// kernel reports it on a socket tuned alike (an unavailable default falls
/// back to the system's, see [`tune`]).
pub fn congestion_in_effect(cc: Option<&Congestion>) -> std::io::Result<String> {
    // SAFETY: creating a socket has no preconditions; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh socket that nothing else owns.
    let s = TcpStream::from(unsafe { OwnedFd::from_raw_fd(fd) });
    if let Some(cc) = cc {
        match set_tcp_option(&s, libc::TCP_CONGESTION, cc.name.as_bytes()) {
            Err(e) if cc.required => return Err(e),
            _ => {}
        }
    }
    let mut name = [0u8; 16]; // TCP_CA_NAME_MAX
    let mut len = name.len() as libc::socklen_t;
    // SAFETY: a valid socket; `name` has room for `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let name = &name[..len as usize];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn congestion_in_effect_is_what_the_kernel_says() {
        let system = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap();
        assert_eq!(congestion_in_effect(None).unwrap(), system.trim());
        let missing = |required| Congestion {
            name: "nosuchcc".into(),
            required,
        };
        // An unavailable default keeps the system's; one the user named is an error.
        assert_eq!(
            congestion_in_effect(Some(&missing(false))).unwrap(),
            system.trim()
        );
        assert!(congestion_in_effect(Some(&missing(true))).is_err());
    }

    fn hello(dialer: u32, acceptor: u32, job: &str) -> Hello {
        Hello {
            dialer,
            acceptor,
            nonce: [7; KEY_BYTES],
            job: job.as_bytes().to_vec(),
        }
    }

    #[test]
    fn a_proof_holds_only_for_its_ranks_job_nonces_and_role() {
        let key = Key::random().unwrap();
        let theirs = [9u8; KEY_BYTES];
        let c = hello(1, 0, "job").challenge(&theirs);
        let proof = key.prove(DIALER, &c);
        assert!(key.verify(DIALER, &c, &proof));
        assert!(!key.verify(ACCEPTOR, &c, &proof));
        for other in [
            hello(2, 0, "job").challenge(&theirs),
            hello(1, 2, "job").challenge(&theirs),
            hello(1, 0, "jobs").challenge(&theirs),
            hello(1, 0, "job").challenge(&[8; KEY_BYTES]),
        ] {
            assert!(!key.verify(DIALER, &other, &proof));
        }
    }
}
