//! The threads of a running switch: the single-threaded UDP event loop, the
//! control listener (one thread per TCP connection, talking to the loop over
//! a channel so all state stays on the loop's core) and the metrics server.

use std::io::{self, ErrorKind};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::control::{read_msg, write_msg, CtrlMsg};

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

/// Packets read without finding the socket empty before ECN marks start: a
/// proxy for the receive-queue depth that works on any kernel.
const BACKLOG_MARK: usize = 256;

struct UdpSink<'a>(&'a UdpSocket);

impl Sink for UdpSink<'_> {
    fn send(&mut self, pkt: &[u8], to: SocketAddr) {
        // A full send buffer loses the packet like a switch queue would;
        // the members' timeouts repair it.
        let _ = self.0.send_to(pkt, to);
    }
}

/// Runs the data plane until `stop` is set.
pub fn run_loop(sock: UdpSocket, mut core: SwitchCore, cmds: Receiver<Command>, stop: &AtomicBool) {
    let _ = sock.set_nonblocking(true);
    let mut buf = vec![0u8; 65536];
    let mut backlog = 0usize;
    let mut last_poll = Instant::now();
    while !stop.load(Relaxed) {
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => {
                backlog += 1;
                core.queue_congested = backlog > BACKLOG_MARK;
                let now = Instant::now();
                core.on_datagram(&buf[..n], from, now, &mut UdpSink(&sock));
                if now.duration_since(last_poll) >= Duration::from_millis(1) {
                    last_poll = now;
                    housekeeping(&mut core, &cmds, &sock, now);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                backlog = 0;
                core.queue_congested = false;
                housekeeping(&mut core, &cmds, &sock, Instant::now());
                super::super::net::wait_readable(&sock, Duration::from_millis(1));
            }
            Err(_) => {}
        }
    }
}

fn housekeeping(core: &mut SwitchCore, cmds: &Receiver<Command>, sock: &UdpSocket, now: Instant) {
    while let Ok(cmd) = cmds.try_recv() {
        match cmd {
            Command::Msg { conn, msg, reply } => {
                let _ = reply.send(core.control(msg, conn));
            }
            Command::Closed(conn) => core.conn_closed(conn),
        }
    }
    core.on_tick(now, &mut UdpSink(sock));
}

/// Open control connections, shut down when the switch stops.
pub type Conns = Arc<Mutex<Vec<TcpStream>>>;

/// Accepts control connections until `stop` is set.
pub fn serve_control(
    listener: TcpListener,
    tx: Sender<Command>,
    conns: Conns,
    stop: Arc<AtomicBool>,
) {
    let _ = listener.set_nonblocking(true);
    let next = AtomicU64::new(1);
    while !stop.load(Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_nodelay(true);
                if let Ok(c) = stream.try_clone() {
                    conns.lock().unwrap().push(c);
                }
                let (tx, id) = (tx.clone(), next.fetch_add(1, Relaxed));
                thread::spawn(move || serve_conn(stream, id, tx));
            }
            Err(_) => thread::sleep(Duration::from_millis(5)),
        }
    }
    for c in conns.lock().unwrap().drain(..) {
        let _ = c.shutdown(std::net::Shutdown::Both);
    }
}

/// One control connection: request, reply, until it closes (which releases
/// the jobs it admitted).
fn serve_conn(mut stream: TcpStream, conn: u64, tx: Sender<Command>) {
    let _ = serve_requests(&mut stream, conn, &tx);
    let _ = tx.send(Command::Closed(conn));
}

fn serve_requests(stream: &mut TcpStream, conn: u64, tx: &Sender<Command>) -> io::Result<()> {
    loop {
        let msg = read_msg(stream)?;
        let (reply_tx, reply_rx) = channel();
        let cmd = Command::Msg {
            conn,
            msg,
            reply: reply_tx,
        };
        tx.send(cmd)
            .map_err(|_| io::Error::other("switch stopped"))?;
        let reply = reply_rx
            .recv()
            .map_err(|_| io::Error::other("switch stopped"))?;
        write_msg(stream, &reply)?;
    }
}
