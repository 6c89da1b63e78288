//! The TCP store: [`TcpStoreServer`] (usually in rank 0) and its clients
//! [`TcpStore`]. Works across hosts; every connection first proves that it
//! holds the job secret ([`handshake`]), and strangers are dropped.
//!
//! # Wire protocol of the TCP store
//!
//! A connection starts with the handshake of [`handshake`] (bytes in
//! docs/security.md). Then every request is one message and gets exactly one
//! reply, in order, on the same connection. Integers are little-endian.
//! `bytes` is `len: u32` followed by `len` bytes; keys are UTF-8.
//!
//! ```text
//! request := op: u8, body
//!   SET    = 1  key: bytes, value: bytes        -> OK
//!   GET    = 2  key: bytes, timeout_ms: u64     -> OK value: bytes | TIMEOUT
//!   ADD    = 3  key: bytes, delta: i64          -> OK new_value: i64 | ERROR
//!   CHECK  = 4  n: u32, n x key: bytes          -> OK all_present: u8
//!   DELETE = 5  key: bytes                      -> OK existed: u8
//! reply   := status: u8, payload
//!   OK = 0 (payload as above), TIMEOUT = 1 (none), ERROR = 2 (message: bytes)
//! ```
//!
//! GET blocks on the server until the key is set or `timeout_ms` passes, so a
//! waiting client costs no polling traffic. A request the server cannot
//! accept (unknown op, a key over 4 KiB, a value over `SHOAL_STORE_MAX_VALUE`,
//! invalid UTF-8) is answered with ERROR naming the problem, and that
//! connection is closed. A server that stops closes its connections without
//! replying, so a waiting client learns that the store went away.

mod client;
pub mod handshake;
mod server;
mod wire;

pub use client::{is_disconnect, TcpStore};
pub use server::TcpStoreServer;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::{
        check_concurrent_add, client, connect, secret, server, server_with, SECRET,
    };
    use crate::store::{Store, StoreLimits};
    use crate::KvStore;
    use std::io::{self, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::Arc;
    use std::thread;
    use std::time::{Duration, Instant};

    /// A raw connection that has passed the handshake, for sending bytes by hand.
    fn raw_member(s: &TcpStoreServer) -> TcpStream {
        let mut raw = TcpStream::connect(s.local_connect_addr()).unwrap();
        handshake::client(&mut raw, &secret(SECRET).key.derive("store")).unwrap();
        raw
    }

    /// Reads one reply that must be ERROR; returns its message.
    fn error_reply(raw: &mut TcpStream) -> String {
        assert_eq!(wire::read_u8(raw).unwrap(), wire::ST_ERROR);
        let n = wire::read_u32(raw).unwrap() as usize;
        let mut msg = vec![0u8; n];
        raw.read_exact(&mut msg).unwrap();
        String::from_utf8(msg).unwrap()
    }

    /// Whether the server closed `raw` without sending anything.
    fn closed_unanswered(raw: &mut TcpStream) -> bool {
        raw.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut buf = [0u8; 1];
        match raw.read(&mut buf) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() == io::ErrorKind::ConnectionReset,
        }
    }

    #[test]
    fn tcp_add_from_many_clients_and_threads() {
        let s = server();
        let c = Arc::new(Store::Tcp(client(&s, 5000)));
        let mut stores: Vec<_> = (0..4)
            .map(|_| Arc::new(Store::Tcp(client(&s, 5000))))
            .collect();
        stores.extend((0..4).map(|_| c.clone())); // threads sharing one connection
        check_concurrent_add(stores);
    }

    #[test]
    fn many_clients_exchange_values() {
        let s = server();
        let n = 8;
        let threads: Vec<_> = (0..n)
            .map(|r| {
                let c = client(&s, 5000);
                thread::spawn(move || {
                    c.set(&format!("rank/{r}"), format!("v{r}").as_bytes())
                        .unwrap();
                    (0..n)
                        .map(|p| c.get(&format!("rank/{p}")).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let expect: Vec<Vec<u8>> = (0..n).map(|p| format!("v{p}").into_bytes()).collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), expect);
        }
    }

    #[test]
    fn client_retries_until_server_starts() {
        // Reserve a free port, release it, and start the server there later.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let a2 = addr.clone();
        let t = thread::spawn(move || {
            let limits = StoreLimits::default();
            let c = TcpStore::connect(&a2, &secret(SECRET), &limits, Duration::from_secs(10));
            c.unwrap().get("hello").unwrap()
        });
        thread::sleep(Duration::from_millis(300));
        let s = TcpStoreServer::start(&addr, &secret(SECRET), StoreLimits::default()).unwrap();
        client(&s, 5000).set("hello", b"world").unwrap();
        assert_eq!(t.join().unwrap(), b"world");
    }

    #[test]
    fn connect_timeout_names_address() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let limits = StoreLimits::default();
        let e = TcpStore::connect(&addr, &secret(SECRET), &limits, Duration::from_millis(200))
            .err()
            .unwrap();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let msg = e.to_string();
        assert!(msg.contains(&addr) && msg.contains("within 0.2s"), "{msg}");
    }

    #[test]
    fn server_survives_disconnects_and_garbage() {
        let s = server();
        let addr = s.local_connect_addr();
        // A member that leaves mid-request.
        let mut raw = raw_member(&s);
        raw.write_all(&[wire::OP_SET, 10, 0]).unwrap();
        drop(raw);
        // An unknown op, and a length field over the limit, are answered with
        // ERROR naming the problem (nothing is allocated), then closed.
        let mut raw = raw_member(&s);
        raw.write_all(&[99, 1, 2, 3]).unwrap();
        assert_eq!(error_reply(&mut raw), "unknown op 99");
        assert!(closed_unanswered(&mut raw));
        let mut raw = raw_member(&s);
        raw.write_all(&[wire::OP_SET, 0xff, 0xff, 0xff, 0xff])
            .unwrap();
        assert!(error_reply(&mut raw).contains("key of 4294967295 bytes exceeds the limit of 4096"));
        // A member that disconnects while blocked in GET.
        let c = client(&s, 5000);
        let mut raw = raw_member(&s);
        let mut req = vec![wire::OP_GET];
        wire::put_bytes(&mut req, b"nothing");
        req.extend_from_slice(&200u64.to_le_bytes());
        raw.write_all(&req).unwrap();
        drop(raw);
        // A stranger speaking the protocol without the handshake.
        let mut raw = TcpStream::connect(addr).unwrap();
        raw.write_all(&req).unwrap();
        assert!(closed_unanswered(&mut raw));
        c.set("still", b"alive").unwrap();
        assert_eq!(c.get("still").unwrap(), b"alive");
    }

    #[test]
    fn a_wrong_secret_is_refused_with_a_clear_error() {
        let s = server();
        let e = connect(&s, "another job's secret", 2000).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        let msg = e.to_string();
        assert!(
            msg.contains("refused this rank's job secret (from SHOAL_SECRET)")
                && msg.contains("every rank must hold the same job secret"),
            "{msg}"
        );
        client(&s, 2000).set("k", b"v").unwrap();
    }

    #[test]
    fn a_store_of_another_secret_is_never_talked_to() {
        // A client that reaches a server holding another secret stops at the
        // server's refusal; the server's map never sees the request.
        let s = server();
        let stranger =
            TcpStoreServer::start("127.0.0.1:0", &secret("other"), StoreLimits::default()).unwrap();
        let addr = stranger.local_connect_addr().to_string();
        let limits = StoreLimits::default();
        let e = TcpStore::connect(&addr, &secret(SECRET), &limits, Duration::from_secs(2));
        assert!(e.is_err());
        assert!(!client(&s, 2000).check(&["k"]).unwrap());
    }

    #[test]
    fn connections_beyond_the_limit_are_refused() {
        let s = server_with(StoreLimits {
            max_connections: 2,
            ..StoreLimits::default()
        });
        let (a, b) = (client(&s, 2000), client(&s, 2000));
        let msg = connect(&s, SECRET, 2000).err().unwrap().to_string();
        assert!(msg.contains("already serves as many as it allows"), "{msg}");
        drop(a);
        // The server notices the closed connection; then there is room again.
        let deadline = Instant::now() + Duration::from_secs(5);
        let c = loop {
            match connect(&s, SECRET, 2000) {
                Ok(c) => break c,
                Err(e) => assert!(Instant::now() < deadline, "{e}"),
            }
            thread::sleep(Duration::from_millis(20));
        };
        c.set("k", b"v").unwrap();
        assert_eq!(b.get("k").unwrap(), b"v");
    }

    #[test]
    fn oversized_values_are_refused_on_both_sides() {
        let small = StoreLimits {
            max_value: 100,
            ..StoreLimits::default()
        };
        let s = server_with(small);
        // The server refuses by the length field, before reading the value.
        let big = client(&s, 2000);
        let e = big.set("k", &[0u8; 101]).unwrap_err().to_string();
        assert!(
            e.contains("exceeds SHOAL_STORE_MAX_VALUE=100 of this store"),
            "{e}"
        );
        big.set("k", &[0u8; 100]).unwrap(); // reconnects
                                            // A client checks its own limit before sending.
        let addr = s.local_connect_addr().to_string();
        let c = TcpStore::connect(&addr, &secret(SECRET), &small, Duration::from_secs(2)).unwrap();
        let e = c.set("k", &[0u8; 101]).unwrap_err().to_string();
        assert!(
            e.contains("101 bytes exceeds SHOAL_STORE_MAX_VALUE=100"),
            "{e}"
        );
        assert_eq!(c.get("k").unwrap().len(), 100);
    }

    #[test]
    fn a_refused_request_closes_the_connection_at_once() {
        // The sender of an oversized value must not be left writing into a
        // connection nobody reads: the server closes it when it refuses.
        let s = server_with(StoreLimits {
            max_value: 100,
            ..StoreLimits::default()
        });
        let mut raw = raw_member(&s);
        raw.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut header = vec![wire::OP_SET];
        wire::put_bytes(&mut header, b"k");
        header.extend_from_slice(&(64u32 << 20).to_le_bytes());
        raw.write_all(&header).unwrap();
        let t0 = Instant::now();
        let e = raw.write_all(&vec![0u8; 64 << 20]).unwrap_err();
        assert!(is_disconnect(&e), "{e:?} after {:?}", t0.elapsed());
    }

    #[test]
    fn idle_strangers_do_not_lock_members_out() {
        let s = server();
        let addr = s.local_connect_addr();
        let idle: Vec<TcpStream> = (0..300)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        let t0 = Instant::now();
        let c = client(&s, 5000);
        c.set("in", b"yes").unwrap();
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        drop(idle);
    }

    #[test]
    fn dropping_server_releases_waiters_and_clients() {
        let s = server();
        let c = Arc::new(client(&s, 30_000));
        let c2 = c.clone();
        let t = thread::spawn(move || c2.get("never"));
        thread::sleep(Duration::from_millis(100));
        let t0 = Instant::now();
        drop(s);
        let e = t.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("closed the connection; did rank 0 exit?"), "{e}");
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "drop took {:?}",
            t0.elapsed()
        );
        let e = c.set("k", b"v").unwrap_err().to_string();
        assert!(e.contains("set 'k'"), "{e}");
    }
}
