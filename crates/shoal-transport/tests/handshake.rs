//! The TCP handshake between ranks, attacked: strangers that connect to a
//! rank's port while the job sets up (silent, garbage, a forged hello
//! claiming a rank, bytes replayed from a real rank's handshake, a flood)
//! are dropped without disturbing the job; a stranger answering at a rank's
//! address cannot pass for it; a rank with another job secret is refused
//! with an error that says so.
//!
//! The strangers speak the wire format of docs/security.md ("Connections
//! between ranks"), built here byte by byte as an attacker would. The
//! dialer proves first: a stranger gets nothing from a rank that it could
//! test guesses of the job secret against offline.

mod common;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use sha2::{Digest, Sha256};
use shoal_transport::auth::{random_bytes, Key};
use shoal_transport::*;

const MESSAGE: usize = 100;
/// The handshake's version: the last byte of the magic, and in the label of
/// the challenge both ranks prove over.
const VERSION: u8 = b'3';
const DIALER: &str = "shoal tcp dialer";
const ACCEPTOR: &str = "shoal tcp acceptor";
const ACCEPTED: u8 = 1;
const REFUSED: u8 = 0;

fn config(rank: usize, job: &str, key: Key, timeout: Duration) -> TcpConfig {
    let mut c = TcpConfig::new(rank, 2, vec![1 - rank], job, key);
    c.timeout = timeout;
    c
}

/// Rank 0 of a two-rank job: sets up, receives one message from rank 1;
/// returns it and how many connections rank 0 refused.
fn rank0(store: Arc<MemStore>, job: &str) -> JoinHandle<(Vec<u8>, usize)> {
    rank0_with(store, job, test_key())
}

fn rank0_with(store: Arc<MemStore>, job: &str, key: Key) -> JoinHandle<(Vec<u8>, usize)> {
    let job = job.to_string();
    std::thread::spawn(move || {
        let c = config(0, &job, key, TIMEOUT);
        let t = TcpTransport::connect(&c, &*store).unwrap();
        (recv(&t, 1, 0, MESSAGE), t.refused_connections())
    })
}

/// Rank 1: sets up and sends its message to rank 0.
fn rank1(store: &dyn KvStore, job: &str) -> Result<()> {
    rank1_with(store, job, test_key())
}

fn rank1_with(store: &dyn KvStore, job: &str, key: Key) -> Result<()> {
    let t = TcpTransport::connect(&config(1, job, key, TIMEOUT), store)?;
    send(&t, 0, 0, &pattern(MESSAGE, 1));
    Ok(())
}

/// The address rank 0 published (waits until it has).
fn address_of_rank0(store: &dyn KvStore, job: &str) -> SocketAddr {
    let v = store.get(&format!("{job}/tcp/0")).unwrap();
    String::from_utf8(v).unwrap().parse().unwrap()
}

/// A hello as a dialer sends it (docs/security.md), with a random nonce.
fn hello(dialer: u32, acceptor: u32, job: &str) -> Vec<u8> {
    hello_with(dialer, acceptor, job, random_bytes().unwrap())
}

/// A hello with the dialer's nonce chosen by the caller.
fn hello_with(dialer: u32, acceptor: u32, job: &str, nonce: [u8; 32]) -> Vec<u8> {
    let mut b = b"SHOALTC".to_vec();
    b.push(VERSION);
    b.extend_from_slice(&dialer.to_le_bytes());
    b.extend_from_slice(&acceptor.to_le_bytes());
    b.extend_from_slice(&nonce);
    b.extend_from_slice(&(job.len() as u32).to_le_bytes());
    b.extend_from_slice(job.as_bytes());
    b
}

/// What both ends prove over: the hello's claims and both nonces.
fn challenge(job: &str, dialer: u32, acceptor: u32, nonce_d: &[u8], nonce_a: &[u8]) -> [u8; 32] {
    Sha256::new()
        .chain_update(b"shoal tcp hello ")
        .chain_update([VERSION, 0])
        .chain_update((job.len() as u32).to_le_bytes())
        .chain_update(job.as_bytes())
        .chain_update(dialer.to_le_bytes())
        .chain_update(acceptor.to_le_bytes())
        .chain_update(nonce_d)
        .chain_update(nonce_a)
        .finalize()
        .into()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Everything the far end sends until it waits for us: at least `n` bytes,
/// then whatever follows before 300 ms of silence or the end.
fn all_it_says(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut got = vec![0u8; n];
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.read_exact(&mut got).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 256];
    while let Ok(n @ 1..) = s.read(&mut buf) {
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// Everything the far end sends until it closes (or 5 s pass).
fn rest_of(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while let Ok(n @ 1..) = s.read(&mut buf) {
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// Whether the far end closes `s` within `within` (reads until EOF or reset).
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn forged_hello_claiming_rank_1_is_dropped_and_the_real_rank_1_gets_in() {
    let store = Arc::new(MemStore::default());
    let job = job_id("forged");
    let r0 = rank0(store.clone(), &job);
    let mut stranger = TcpStream::connect(address_of_rank0(&*store, &job)).unwrap();
    stranger.write_all(&hello(1, 0, &job)).unwrap();
    // Rank 0 answers with its nonce; the stranger cannot prove the key over
    // it, and guesses.
    let mut reply = [0u8; 32];
    stranger.read_exact(&mut reply).unwrap();
    stranger.write_all(&random_bytes::<32>().unwrap()).unwrap();
    assert_eq!(rest_of(&mut stranger), [REFUSED]);

    rank1(&*store, &job).unwrap();
    let (got, refused) = r0.join().unwrap();
    assert_eq!(got, pattern(MESSAGE, 1));
    assert_eq!(refused, 1);
}

/// A stranger must get nothing it could test guesses of the job secret
/// against offline: ranks with different keys answer the same hello with a
/// fresh nonce and nothing more, no MAC over the stranger's nonce.
#[test]
fn a_strangers_hello_gets_nothing_derived_from_the_key() {
    let job = job_id("stranger-hello");
    let nonce = [0x5a; 32];
    let mut replies = Vec::new();
    for key in [test_key(), Key::from_material(b"another job's secret")] {
        let store = Arc::new(MemStore::default());
        let r0 = rank0_with(store.clone(), &job, key.clone());
        let addr = address_of_rank0(&*store, &job);
        let mut strangers = Vec::new();
        for _ in 0..2 {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&hello_with(1, 0, &job, nonce)).unwrap();
            let reply = all_it_says(&mut s, 32);
            let c = challenge(&job, 1, 0, &nonce, &reply[..32]);
            for role in [ACCEPTOR, DIALER] {
                for over in [&nonce, &c] {
                    let mac = key.prove(role, over);
                    assert!(!contains(&reply, &mac), "a MAC over the stranger's nonce");
                }
            }
            replies.push(reply);
            strangers.push(s);
        }
        drop(strangers);
        rank1_with(&*store, &job, key).unwrap();
        assert_eq!(r0.join().unwrap().0, pattern(MESSAGE, 1));
    }
    for r in &replies {
        assert_eq!(r.len(), 32, "a nonce and no more: {r:?}");
    }
    let fresh: HashSet<&Vec<u8>> = replies.iter().collect();
    assert_eq!(fresh.len(), replies.len(), "a rank's nonce repeats");
}

/// The dialer proves first: one with a wrong key is refused without ever
/// receiving the acceptor's proof over its nonce.
#[test]
fn a_wrong_key_is_refused_before_the_acceptor_proves_itself() {
    let store = Arc::new(MemStore::default());
    let job = job_id("wrong-key-bytes");
    let r0 = rank0(store.clone(), &job);
    let mut s = TcpStream::connect(address_of_rank0(&*store, &job)).unwrap();
    let nonce = [0x3c; 32];
    s.write_all(&hello_with(1, 0, &job, nonce)).unwrap();
    let reply = all_it_says(&mut s, 32);
    let c = challenge(&job, 1, 0, &nonce, &reply[..32]);
    let wrong = Key::from_material(b"another job's secret");
    s.write_all(&wrong.prove(DIALER, &c)).unwrap();
    let rest = rest_of(&mut s);
    let acceptor_proof = test_key().prove(ACCEPTOR, &c);
    assert!(
        !contains(&reply, &acceptor_proof) && !contains(&rest, &acceptor_proof),
        "rank 0 proved itself to a dialer that did not"
    );
    assert_eq!(rest, [REFUSED], "refused, then closed");

    rank1(&*store, &job).unwrap();
    let (got, refused) = r0.join().unwrap();
    assert_eq!(got, pattern(MESSAGE, 1));
    assert_eq!(refused, 1);
}

#[test]
fn garbage_is_dropped_and_counted_once() {
    let store = Arc::new(MemStore::default());
    let job = job_id("garbage");
    let r0 = rank0(store.clone(), &job);
    let mut stranger = TcpStream::connect(address_of_rank0(&*store, &job)).unwrap();
    stranger
        .write_all(&random_bytes::<4096>().unwrap())
        .unwrap();
    assert!(closed_within(&mut stranger, Duration::from_secs(5)));

    rank1(&*store, &job).unwrap();
    let (got, refused) = r0.join().unwrap();
    assert_eq!(got, pattern(MESSAGE, 1));
    assert_eq!(refused, 1);
}

#[test]
fn silent_stranger_does_not_hold_up_setup_and_is_dropped() {
    let store = Arc::new(MemStore::default());
    let job = job_id("silent");
    let r0 = rank0(store.clone(), &job);
    let mut stranger = TcpStream::connect(address_of_rank0(&*store, &job)).unwrap();
    std::thread::sleep(Duration::from_millis(50)); // (rank 0 has accepted it)

    let t0 = Instant::now();
    rank1(&*store, &job).unwrap();
    let (got, _) = r0.join().unwrap();
    assert_eq!(got, pattern(MESSAGE, 1));
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    // Its handshake times out (5 s) and the connection goes.
    assert!(closed_within(&mut stranger, Duration::from_secs(8)));
}

#[test]
fn a_flood_of_silent_strangers_delays_setup_but_does_not_stop_it() {
    let store = Arc::new(MemStore::default());
    let job = job_id("flood");
    let r0 = rank0(store.clone(), &job);
    let addr = address_of_rank0(&*store, &job);
    // More than rank 0 answers at once: the rest wait in its backlog.
    let strangers: Vec<TcpStream> = (0..40).map(|_| TcpStream::connect(addr).unwrap()).collect();
    rank1(&*store, &job).unwrap();
    let (got, _) = r0.join().unwrap();
    assert_eq!(got, pattern(MESSAGE, 1));
    drop(strangers);
}

/// Copies one connection's bytes both ways between `client` and `server`,
/// recording what the client sent.
fn relay(client: TcpStream, server: SocketAddr, record: Arc<Mutex<Vec<u8>>>) {
    let upstream = TcpStream::connect(server).unwrap();
    let (mut c_in, mut s_out) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = c_in.read(&mut buf) {
            record.lock().unwrap().extend_from_slice(&buf[..n]);
            if s_out.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    let (mut s_in, mut c_out) = (upstream, client);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut s_in, &mut c_out);
    });
}

#[test]
fn replayed_handshake_of_a_real_rank_is_dropped() {
    // A real rank 1 connects through a relay that records its bytes.
    let job = job_id("replay");
    let store0 = Arc::new(MemStore::default());
    let r0 = rank0(store0.clone(), &job);
    let server = address_of_rank0(&*store0, &job);
    let relay_at = TcpListener::bind("127.0.0.1:0").unwrap();
    let store1 = MemStore::default();
    let at = relay_at.local_addr().unwrap().to_string();
    store1.set(&format!("{job}/tcp/0"), at.as_bytes()).unwrap();
    let record = Arc::new(Mutex::new(Vec::new()));
    let rec = record.clone();
    std::thread::spawn(move || relay(relay_at.accept().unwrap().0, server, rec));
    rank1(&store1, &job).unwrap();
    assert_eq!(r0.join().unwrap().0, pattern(MESSAGE, 1));

    // The same job id and key again: the recorded hello and proof replayed.
    let handshake = 8 + 4 + 4 + 32 + 4 + job.len() + 32;
    let recorded = record.lock().unwrap()[..handshake].to_vec();
    let store = Arc::new(MemStore::default());
    let r0 = rank0(store.clone(), &job);
    let mut stranger = TcpStream::connect(address_of_rank0(&*store, &job)).unwrap();
    stranger.write_all(&recorded).unwrap();
    assert!(closed_within(&mut stranger, Duration::from_secs(5)));
    rank1(&*store, &job).unwrap();
    let (got, refused) = r0.join().unwrap();
    assert_eq!(got, pattern(MESSAGE, 1));
    assert_eq!(refused, 1);
}

#[test]
fn a_stranger_answering_at_a_ranks_address_cannot_pass_for_it() {
    let job = job_id("fake-acceptor");
    let store = MemStore::default();
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = fake.local_addr().unwrap().to_string();
    store.set(&format!("{job}/tcp/0"), at.as_bytes()).unwrap();
    let hello_len = 52 + job.len();
    std::thread::spawn(move || {
        let (mut s, _) = fake.accept().unwrap();
        let mut hello = vec![0u8; hello_len];
        let _ = s.read_exact(&mut hello);
        // A nonce; then, whatever rank 1 proves, "you are in" and a guessed proof.
        let _ = s.write_all(&random_bytes::<32>().unwrap());
        let mut proof = [0u8; 32];
        let _ = s.read_exact(&mut proof);
        let _ = s.write_all(&[ACCEPTED]);
        let _ = s.write_all(&random_bytes::<32>().unwrap());
        std::thread::sleep(Duration::from_secs(2));
    });
    let e = rank1(&store, &job).expect_err("rank 1 trusted a stranger");
    let msg = e.to_string();
    assert!(
        msg.contains("rank 0") && msg.contains("could not prove that it holds this job's key"),
        "{msg}"
    );
}

#[test]
fn a_rank_with_another_job_secret_is_refused_with_a_clear_error() {
    let store = Arc::new(MemStore::default());
    let job = job_id("wrong-key");
    let setup = Duration::from_secs(2);
    let s0 = store.clone();
    let j0 = job.clone();
    let r0 = std::thread::spawn(move || {
        TcpTransport::connect(&config(0, &j0, test_key(), setup), &*s0).err()
    });
    let other = Key::from_material(b"another job's secret");
    let t0 = Instant::now();
    let e1 = TcpTransport::connect(&config(1, &job, other, setup), &*store)
        .err()
        .expect("rank 1 connected with the wrong key");
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    let msg = e1.to_string();
    assert!(
        msg.contains("rank 0 at")
            && msg.contains("refused this rank's proof of the job's key")
            && msg.contains("do not share one job secret"),
        "{msg}"
    );
    // Rank 0 waits for the real rank 1 until its timeout, then says why.
    let e0 = r0
        .join()
        .unwrap()
        .expect("rank 0 let a wrong key in")
        .to_string();
    assert!(
        e0.contains("rank 1 never connected to rank 0 (waited 2"),
        "{e0}"
    );
    assert!(e0.contains("1 connection(s) failed the handshake"), "{e0}");
    assert!(
        e0.contains("claims rank 1 but its proof does not match this job's key"),
        "{e0}"
    );
}

#[test]
fn after_setup_the_port_is_closed_and_the_job_goes_on() {
    let store = Arc::new(MemStore::default());
    let job = job_id("after");
    let s1 = store.clone();
    let j1 = job.clone();
    let r1 = std::thread::spawn(move || {
        let t = TcpTransport::connect(&config(1, &j1, test_key(), TIMEOUT), &*s1).unwrap();
        send(&t, 0, 0, &pattern(MESSAGE, 1));
        send(&t, 0, 1, &pattern(MESSAGE, 2));
    });
    let t = TcpTransport::connect(&config(0, &job, test_key(), TIMEOUT), &*store).unwrap();
    assert_eq!(recv(&t, 1, 0, MESSAGE), pattern(MESSAGE, 1));
    let addr = address_of_rank0(&*store, &job);
    let e = TcpStream::connect(addr).expect_err("the port still listens");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
    assert_eq!(recv(&t, 1, 1, MESSAGE), pattern(MESSAGE, 2));
    r1.join().unwrap();
}

#[test]
fn a_rank_will_not_listen_on_every_interface() {
    let mut c = config(0, &job_id("any"), test_key(), TIMEOUT);
    c.bind_ip = "0.0.0.0".parse().unwrap();
    let e = TcpTransport::connect(&c, &MemStore::default())
        .err()
        .expect("listened on 0.0.0.0")
        .to_string();
    assert!(e.contains("will not listen on 0.0.0.0"), "{e}");
}
