//! The control listener: one thread per TCP connection, each authenticated
//! with the switch secret before it may ask anything, bounded in number and
//! in time, and closed (FIN, fd released) whatever way it ends. Requests go
//! to the data-plane thread that holds (or will hold) the job (`placement`).
//!
//! Why each bound: a stranger cannot authenticate, so it can only hold
//! connections that are still in their handshake; those are few
//! (`max_pending`, the oldest closed for a newcomer) and short-lived
//! (`handshake_timeout`), so a flood of them never keeps a tenant out for
//! long. An authenticated tenant leases at most one job per connection and
//! holds at most `max_per_client` connections, so it cannot take every job
//! slot; a connection that leases nothing is closed after `idle_timeout`.

use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{IpAddr, Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use shoal_bootstrap::auth::Key;

use crate::control::handshake::{self, Proven, Refusal};
use crate::control::{read_msg, read_msg_before, write_msg, CtrlMsg, ErrCode};

use super::metrics::{Metrics, Refused};
use super::placement::Placement;

/// Bounds on control connections (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct ControlLimits {
    pub handshake_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_per_client: usize,
    pub max_pending: usize,
}

impl Default for ControlLimits {
    fn default() -> Self {
        ControlLimits {
            handshake_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(10),
            max_per_client: 32,
            max_pending: 64,
        }
    }
}

/// A reply is a few bytes; a peer that does not read it in this long is gone.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// After our FIN, how long we read (and discard) what the peer still sends,
/// so that closing does not turn into a reset that could destroy our reply.
const LINGER: Duration = Duration::from_secs(1);

/// What every connection thread shares.
pub struct Ctx {
    pub secret: Key,
    pub limits: ControlLimits,
    /// The data-plane threads, and which holds which job.
    pub shards: Placement,
    pub metrics: Arc<Metrics>,
    registry: Mutex<HashMap<u64, Entry>>,
}

/// An open connection as the registry knows it.
struct Entry {
    /// A handle to shut the connection down from another thread (eviction,
    /// switch stop); dropped with the entry, so its fd is closed too.
    handle: TcpStream,
    client: IpAddr,
    opened: Instant,
    authenticated: bool,
}

impl Ctx {
    pub fn new(
        secret: Key,
        limits: ControlLimits,
        shards: Placement,
        metrics: Arc<Metrics>,
    ) -> Ctx {
        Ctx {
            secret,
            limits,
            shards,
            metrics,
            registry: Mutex::new(HashMap::new()),
        }
    }

    /// Registers a new connection, closing the oldest unauthenticated one
    /// when too many are still in their handshake.
    fn register(&self, id: u64, handle: TcpStream, client: IpAddr) {
        let mut reg = self.registry.lock().unwrap();
        let pending = reg.values().filter(|e| !e.authenticated).count();
        if pending >= self.limits.max_pending {
            let oldest = reg
                .iter()
                .filter(|(_, e)| !e.authenticated)
                .min_by_key(|(_, e)| e.opened)
                .map(|(id, _)| *id);
            if let Some(e) = oldest.and_then(|id| reg.remove(&id)) {
                let _ = e.handle.shutdown(Shutdown::Both);
                self.metrics.count_refusal(Refused::Evicted);
            }
        }
        let entry = Entry {
            handle,
            client,
            opened: Instant::now(),
            authenticated: false,
        };
        reg.insert(id, entry);
        self.publish(&reg);
    }

    /// Marks a connection authenticated unless its client already holds
    /// `max_per_client` authenticated connections (or it was evicted meanwhile).
    fn authenticate(&self, id: u64) -> Result<(), Refusal> {
        let mut reg = self.registry.lock().unwrap();
        let client = reg.get(&id).map(|e| e.client).ok_or((
            ErrCode::Busy,
            "closed to make room for newer connections".to_string(),
        ))?;
        let held = reg
            .values()
            .filter(|e| e.authenticated && e.client == client)
            .count();
        if held >= self.limits.max_per_client {
            return Err((
                ErrCode::Busy,
                format!("{client} already has {held} control connections (--max-conns-per-client)"),
            ));
        }
        reg.get_mut(&id).expect("looked up above").authenticated = true;
        Ok(())
    }

    fn is_registered(&self, id: u64) -> bool {
        self.registry.lock().unwrap().contains_key(&id)
    }

    fn unregister(&self, id: u64) {
        let mut reg = self.registry.lock().unwrap();
        reg.remove(&id);
        self.publish(&reg);
    }

    fn publish(&self, reg: &HashMap<u64, Entry>) {
        self.metrics
            .control_connections
            .store(reg.len() as u64, Relaxed);
    }

    fn shutdown_all(&self) {
        for e in self.registry.lock().unwrap().values() {
            let _ = e.handle.shutdown(Shutdown::Both);
        }
    }
}

/// Accepts control connections until `stop` is set, then closes them all.
pub fn serve(listener: TcpListener, ctx: Arc<Ctx>, stop: Arc<AtomicBool>) {
    let _ = listener.set_nonblocking(true);
    let next = AtomicU64::new(1);
    while !stop.load(Relaxed) {
        let (stream, peer) = match listener.accept() {
            Ok(c) => c,
            Err(_) => {
                thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        let Ok(handle) = stream.try_clone() else {
            continue; // out of fds: dropping the stream closes it
        };
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_nodelay(true);
        let id = next.fetch_add(1, Relaxed);
        ctx.register(id, handle, peer.ip());
        let conn_ctx = ctx.clone();
        let spawned = thread::Builder::new()
            .name("shoal-switch-conn".into())
            .spawn(move || serve_conn(stream, id, &conn_ctx));
        if spawned.is_err() {
            ctx.unregister(id); // the stream went with the closure: both fds close
        }
    }
    ctx.shutdown_all();
}

/// Why a connection is closed early: the metric, and what the peer is told.
struct Closing {
    why: Refused,
    code: ErrCode,
    reason: String,
}

impl Closing {
    fn new(why: Refused, (code, reason): Refusal) -> Closing {
        Closing { why, code, reason }
    }

    fn bad_frame(reason: String) -> Closing {
        Closing::new(Refused::BadFrame, (ErrCode::Protocol, reason))
    }

    /// The handshake refuses with `Unauthorized`, `Busy` (too slow) or
    /// `Protocol`.
    fn from_handshake(r: Refusal) -> Closing {
        let why = match r.0 {
            ErrCode::Unauthorized => Refused::Unauthorized,
            ErrCode::Busy => Refused::Timeout,
            _ => Refused::BadFrame,
        };
        Closing::new(why, r)
    }
}

/// One connection from accept to close.
fn serve_conn(mut stream: TcpStream, id: u64, ctx: &Ctx) {
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    if let Err(c) = converse(&mut stream, id, ctx) {
        tracing::debug!("control connection {id} closed: {}", c.reason);
        if ctx.is_registered(id) {
            // (An evicted connection was counted when it was evicted.)
            ctx.metrics.count_refusal(c.why);
        }
        let e = CtrlMsg::Error {
            code: c.code,
            reason: c.reason,
        };
        let _ = write_msg(&mut stream, &e);
    }
    // Our FIN goes out first; the connection stops counting (and leasing)
    // now, while we linger for the peer's.
    let _ = stream.shutdown(Shutdown::Write);
    ctx.unregister(id);
    ctx.shards.closed(id);
    linger(&mut stream);
}

/// The handshake, then requests until the peer closes. An `Err` is the
/// refusal to send before closing.
fn converse(stream: &mut TcpStream, id: u64, ctx: &Ctx) -> Result<(), Closing> {
    let deadline = Instant::now() + ctx.limits.handshake_timeout;
    let Proven {
        mut session,
        welcome,
    } = handshake::switch(stream, &ctx.secret, deadline).map_err(Closing::from_handshake)?;
    ctx.authenticate(id)
        .map_err(|r| Closing::new(Refused::Busy, r))?;
    if write_msg(stream, &welcome).is_err() {
        return Ok(()); // the peer is gone: nothing to tell it
    }
    let mut leases_job = false;
    loop {
        let request = if leases_job {
            // The lease lasts as long as the job: no timeout.
            let _ = stream.set_read_timeout(None);
            read_msg(stream)
        } else {
            read_msg_before(stream, Instant::now() + ctx.limits.idle_timeout)
        };
        let msg = match request {
            Ok(CtrlMsg::Admit(mut req)) => {
                session.crypt_admit(&mut req);
                CtrlMsg::Admit(req)
            }
            Ok(m @ CtrlMsg::Release { .. }) => m,
            Ok(other) => {
                let what = format!("expected ADMIT or RELEASE, got {}", name(&other));
                return Err(Closing::bad_frame(what));
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                let idle = ctx.limits.idle_timeout.as_secs_f64();
                let why = (ErrCode::Busy, format!("idle for {idle}s without a job"));
                return Err(Closing::new(Refused::Timeout, why));
            }
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                return Err(Closing::bad_frame(e.to_string()))
            }
            Err(_) => return Ok(()), // closed by the peer or by the switch
        };
        let Ok(reply) = ctx.shards.ask(id, msg) else {
            return Ok(()); // the switch is stopping
        };
        match reply {
            CtrlMsg::AdmitOk(_) => leases_job = true,
            CtrlMsg::Released { .. } => leases_job = false,
            _ => {}
        }
        if write_msg(stream, &reply).is_err() {
            return Ok(());
        }
    }
}

fn name(msg: &CtrlMsg) -> &'static str {
    match msg {
        CtrlMsg::Hello { .. } => "HELLO",
        CtrlMsg::Challenge { .. } => "CHALLENGE",
        CtrlMsg::Proof { .. } => "PROOF",
        CtrlMsg::Welcome { .. } => "WELCOME",
        CtrlMsg::Admit(_) => "ADMIT",
        CtrlMsg::AdmitOk(_) => "ADMIT_OK",
        CtrlMsg::Release { .. } => "RELEASE",
        CtrlMsg::Released { .. } => "RELEASED",
        CtrlMsg::Error { .. } => "ERROR",
    }
}

/// After our FIN, reads what the peer still sends until it closes too (or
/// `LINGER` passes): closing with unread input would send a reset, which
/// can destroy the reply we just wrote. Dropping the stream afterwards
/// frees the fd.
fn linger(stream: &mut TcpStream) {
    let until = Instant::now() + LINGER;
    let mut sink = [0u8; 4096];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}
