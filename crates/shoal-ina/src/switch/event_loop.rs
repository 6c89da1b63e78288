//! The switch's data plane thread: the single-threaded UDP event loop. The
//! control threads (`control.rs`) reach it over a channel, so all job state
//! stays on the loop's core.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use crate::control::CtrlMsg;
use crate::net::{wait_readable, Batch, MAX_DATAGRAM};

use super::core::{Sink, SwitchCore};

/// A request from a control connection to the event loop.
pub enum Command {
    Msg {
        conn: u64,
        msg: CtrlMsg,
        reply: Sender<CtrlMsg>,
    },
    Closed(u64),
}

/// Bytes read without finding the socket empty before ECN marks start: a
/// proxy for the receive-queue depth (queueing delay) that works on any
/// kernel. 1024 datagrams of the default 1472-byte budget, about a
/// millisecond of switch work; counted in bytes so that large payloads
/// (`--payload 32768`) do not build a queue of many milliseconds first.
const BACKLOG_MARK: usize = 1024 * 1472;

/// Messages received per system call: datagrams, or runs of them where the
/// kernel coalesces (GRO).
const RX_BATCH: usize = 64;

/// Datagrams sent per system call (results fan out to every member).
const TX_BATCH: usize = 1024;

/// The core's output: datagrams queued in a batch, sent when it fills and
/// after each received batch is processed.
struct BatchSink<'a> {
    sock: &'a UdpSocket,
    tx: &'a mut Batch,
}

impl BatchSink<'_> {
    fn flush(&mut self) {
        // A full send buffer loses packets like a switch queue would; the
        // members' timeouts repair it.
        self.tx.send(self.sock);
    }
}

impl Sink for BatchSink<'_> {
    fn send(&mut self, pkt: &[u8], to: SocketAddr) {
        if self.tx.is_full() {
            self.flush();
        }
        self.tx.push(pkt, to);
    }

    fn send_all(&mut self, pkt: &[u8], to: &[Option<SocketAddr>]) {
        let mut queued = false;
        for &addr in to.iter().flatten() {
            if self.tx.is_full() {
                self.flush();
                queued = false;
            }
            if queued {
                self.tx.repeat_last(addr);
            } else {
                self.tx.push(pkt, addr);
                queued = true;
            }
        }
    }
}

/// Runs the data plane until `stop` is set: drains up to `RX_BATCH`
/// messages per system call, processes their datagrams, then sends
/// everything they produced in as few system calls as possible.
pub fn run_loop(sock: UdpSocket, mut core: SwitchCore, cmds: Receiver<Command>, stop: &AtomicBool) {
    let _ = sock.set_nonblocking(true);
    let mut rx = Batch::receiver(&sock, RX_BATCH, MAX_DATAGRAM);
    let mut tx = Batch::sender(TX_BATCH);
    let mut backlog = 0usize;
    let mut last_poll = Instant::now();
    while !stop.load(Relaxed) {
        let n = rx.recv(&sock).unwrap_or(0);
        let mut out = BatchSink {
            sock: &sock,
            tx: &mut tx,
        };
        let now = Instant::now();
        if n > 0 {
            backlog += rx.bytes();
            core.queue_congested = backlog > BACKLOG_MARK;
            for i in 0..rx.len() {
                let (pkt, from) = rx.get(i);
                core.on_datagram(pkt, from, now, &mut out);
            }
        }
        if n == 0 || now.duration_since(last_poll) >= Duration::from_millis(1) {
            last_poll = now;
            housekeeping(&mut core, &cmds, &mut out, now);
        }
        out.flush();
        if n == rx.capacity() {
            continue; // more may be queued
        }
        // The socket was found empty.
        backlog = 0;
        if n == 0 {
            core.queue_congested = false;
        }
        wait_readable(&sock, Duration::from_millis(1));
    }
}

fn housekeeping(core: &mut SwitchCore, cmds: &Receiver<Command>, out: &mut dyn Sink, now: Instant) {
    while let Ok(cmd) = cmds.try_recv() {
        match cmd {
            Command::Msg { conn, msg, reply } => {
                let _ = reply.send(core.control(msg, conn));
            }
            Command::Closed(conn) => core.conn_closed(conn),
        }
    }
    core.on_tick(now, out);
}
