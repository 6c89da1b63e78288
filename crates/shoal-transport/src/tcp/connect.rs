//! Opening a job's TCP connections, one per pair of ranks.
//!
//! Every rank listens on the address it publishes in the store (never on
//! all interfaces), and the higher rank of each pair dials the lower one.
//! Each connection starts with the mutual challenge-response of
//! [`super::handshake`], the dialer proving first; this file runs it on
//! sockets.
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

use tracing::warn;

use super::handshake::{
    AcceptorChallenged, DialerSaidHello, Expect, Hello, Nonce, Proof, Proven, Refusal, ACCEPTED,
    HELLO_HEAD, REFUSED,
};
use super::{io, io_err, set_tcp_option, Congestion, TcpConfig};
use crate::auth::{random_bytes, Key, KEY_BYTES};
use crate::setup::wait_for_rank;
use crate::{KvStore, Result};

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

/// The dialer's side of the handshake: hello, prove the key over the
/// acceptor's nonce, then check the acceptor's proof that comes with "you
/// are in".
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
    let (hs, hello) =
        DialerSaidHello::new(cfg.rank, peer, &cfg.job_id, random_bytes().map_err(io)?);
    s.write_all(&hello)
        .map_err(|e| failed("sending the hello", e))?;
    let mut theirs: Nonce = [0; KEY_BYTES];
    s.read_exact(&mut theirs)
        .map_err(|e| failed("no answer to the hello", e))?;
    let (hs, proof) = hs.challenge(&cfg.key, &theirs);
    s.write_all(&proof)
        .map_err(|e| failed("sending our proof", e))?;
    let mut verdict = [0u8; 1];
    match s.read_exact(&mut verdict).map(|()| verdict[0]) {
        Ok(ACCEPTED) => {}
        Ok(REFUSED) => {
            return Err(io_err(&format!(
                "rank {peer} at {addr} refused this rank's proof of the job's key: \
                 the ranks do not share one job secret (SHOAL_SECRET or the secret file)"
            )))
        }
        _ => {
            return Err(io_err(&format!(
                "rank {peer} at {addr} did not let this rank in (rank {peer} stopped \
                 waiting, or another process answers at that address)"
            )))
        }
    }
    let mut their_proof: Proof = [0; KEY_BYTES];
    let proved = s.read_exact(&mut their_proof).is_ok();
    if !(proved && hs.acceptor_proved(&cfg.key, &their_proof)) {
        return Err(io_err(&format!(
            "rank {peer} at {addr} could not prove that it holds this job's key: \
             another process answers at that address"
        )));
    }
    s.set_read_timeout(None).map_err(io)?;
    s.set_write_timeout(None).map_err(io)?;
    Ok(s)
}

// ---------------------------------------------------------------------------
// Letting peers in

/// What a handshake thread hands back: the dialer that proved the key (and
/// the verdict that lets it in), or why the connection was dropped.
type Answer = std::result::Result<(Proven, TcpStream), Refused>;

/// A connection the gate dropped: where it came from and why.
struct Refused {
    from: SocketAddr,
    why: Refusal,
}

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
            job: self.cfg.job_id.clone(),
            rank: self.cfg.rank,
            dialers: self.missing.clone(),
        };
        let key = self.cfg.key.clone();
        let tx = self.answers_tx.clone();
        let run = move || {
            // The connection stays open until the gate has the answer: a
            // refused stranger sees it close only once its refusal is queued
            // (ahead of anyone who connects after), so the count is exact.
            let held = s.try_clone().ok();
            let answer = check(&expect, &key, s, limit).map_err(|why| Refused { from, why });
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

    /// Lets a proven rank in, once: only then does it get this rank's proof.
    fn settle(&mut self, answer: Answer, admitted: &mut Vec<(usize, TcpStream)>) -> Result<()> {
        let (Proven { rank, welcome }, mut s) = match answer {
            Ok(proven) => proven,
            Err(Refused { from, why }) => {
                self.refused.push(format!("{from}: {why}"));
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
            .write_all(&welcome)
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

/// The acceptor's side of the handshake, on a handshake thread: returns the
/// proven dialer.
fn check(
    expect: &Expect,
    key: &Key,
    mut s: TcpStream,
    limit: Instant,
) -> std::result::Result<(Proven, TcpStream), Refusal> {
    s.set_nonblocking(false).map_err(Refusal::Io)?;
    limit_io(&s, limit).map_err(Refusal::Io)?;
    let mut head = [0u8; HELLO_HEAD];
    s.read_exact(&mut head).map_err(Refusal::Incomplete)?;
    let mut job = vec![0u8; Hello::job_len(&head)?];
    s.read_exact(&mut job).map_err(Refusal::Incomplete)?;
    let mine = random_bytes().map_err(Refusal::Io)?;
    let (hs, challenge) = AcceptorChallenged::hello(expect, Hello::decode(&head, job), mine)?;
    let dialer = hs.dialer();
    s.write_all(&challenge)
        .map_err(|error| Refusal::HungUp { dialer, error })?;
    let mut proof: Proof = [0; KEY_BYTES];
    s.read_exact(&mut proof)
        .map_err(|error| Refusal::NoProof { dialer, error })?;
    match hs.proof(key, &proof) {
        Ok(proven) => Ok((proven, s)),
        Err(why) => {
            let _ = s.write_all(&[REFUSED]); // (so a rank with another secret can say so)
            Err(why)
        }
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
}
