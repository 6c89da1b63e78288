//! The handshake that opens every TCP connection between two ranks. Both
//! ends prove that they hold the job's transport key `K` by a MAC over a
//! challenge `c` that binds the job id, both claimed ranks and a fresh nonce
//! from each end, so a proof is worthless for another rank, another job or
//! another connection. The higher rank D dials the lower rank A; bytes in
//! docs/security.md ("Connections between ranks"):
//!
//! ```text
//! D -> A  hello      MAGIC, D, A, nonce_D, job id
//! A -> D  challenge  nonce_A                                (fresh, nothing derived from K)
//! D -> A  proof      prove(K, "shoal tcp dialer", c)
//! A -> D  verdict    ACCEPTED, prove(K, "shoal tcp acceptor", c) | REFUSED; then A closes
//! ```
//!
//! Why the dialer proves first: whoever proves first hands a MAC under `K`
//! to a peer it has not authenticated. Anyone who can reach a listening rank
//! can connect to it, so were it the acceptor, a stranger could collect
//! MACs and test guesses of a weak job secret offline. The dialer proves
//! only to the address its peer published in the (authenticated) store, and
//! the acceptor's proof reaches only a dialer that proved `K`. The store's
//! and the switch's handshakes make the same choice.
//!
//! Each side is a state machine without I/O (a received message in, the one
//! to send out); `connect.rs` runs them on sockets, with deadlines.

use std::fmt;

use sha2::{Digest, Sha256};

use crate::auth::{Key, KEY_BYTES};

/// First bytes of a hello; the last is the handshake's version.
const MAGIC: &[u8; 8] = b"SHOALTC3";
/// Bytes of a hello before the job id: magic, dialer's rank, acceptor's
/// rank, dialer's nonce, job id length.
pub(super) const HELLO_HEAD: usize = MAGIC.len() + 4 + 4 + KEY_BYTES + 4;
const MAX_JOB_LEN: usize = 4096;
/// Proof roles: each end proves in its own, so neither can reflect the
/// other's proof back.
const DIALER: &str = "shoal tcp dialer";
const ACCEPTOR: &str = "shoal tcp acceptor";
/// The verdict's first byte: the dialer is in (the acceptor's proof follows)...
pub(super) const ACCEPTED: u8 = 1;
/// ... or its proof failed (nothing follows).
pub(super) const REFUSED: u8 = 0;
/// Bytes of the verdict that lets a dialer in.
pub(super) const WELCOME_LEN: usize = 1 + KEY_BYTES;

pub(super) type Nonce = [u8; KEY_BYTES];
pub(super) type Proof = [u8; KEY_BYTES];

/// Why the acceptor dropped an incoming connection before letting it in.
#[derive(Debug)]
pub(super) enum Refusal {
    /// The first bytes are not a shoal hello.
    NotAHello,
    /// A hello of another handshake version (`theirs`, `ours`: its digit).
    Version {
        theirs: u8,
        ours: u8,
    },
    /// A hello announcing a job id longer than any job's.
    JobIdTooLong(usize),
    AnotherJob,
    /// A hello for this job but addressed to another acceptor rank.
    AnotherAcceptor(u32),
    /// A hello from a rank that is not (or no longer) expected to connect.
    NotExpected(usize),
    /// The dialer's proof does not match this job's key.
    WrongProof(usize),
    /// The connection ended or timed out inside the hello.
    Incomplete(std::io::Error),
    /// The dialer hung up when sent the challenge.
    HungUp {
        dialer: usize,
        error: std::io::Error,
    },
    /// The dialer sent the hello but no proof.
    NoProof {
        dialer: usize,
        error: std::io::Error,
    },
    /// The acceptor's own socket or random source failed.
    Io(std::io::Error),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotAHello => write!(f, "not a shoal hello"),
            Refusal::Version { theirs, ours } => write!(
                f,
                "a hello of handshake version {}; this rank speaks {} \
                 (do all ranks run the same shoal?)",
                *theirs as char, *ours as char
            ),
            Refusal::JobIdTooLong(len) => write!(f, "a hello with a job id of {len} bytes"),
            Refusal::AnotherJob => write!(f, "a hello for another job"),
            Refusal::AnotherAcceptor(rank) => write!(f, "a hello for rank {rank}, not this rank"),
            Refusal::NotExpected(dialer) => {
                write!(f, "claims rank {dialer}, which is not expected to connect")
            }
            Refusal::WrongProof(dialer) => write!(
                f,
                "claims rank {dialer} but its proof does not match this job's key \
                 (another job secret, or replayed bytes)"
            ),
            Refusal::Incomplete(e) => write!(f, "no complete hello ({e})"),
            Refusal::HungUp { dialer, error } => {
                write!(f, "claims rank {dialer}, then hung up: {error}")
            }
            Refusal::NoProof { dialer, error } => write!(
                f,
                "claims rank {dialer} but gave no proof ({error}): a stranger, or a rank that stopped"
            ),
            Refusal::Io(e) => write!(f, "{e}"),
        }
    }
}

/// The dialer's first message.
pub(super) struct Hello {
    dialer: u32,
    acceptor: u32,
    nonce: Nonce,
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

    /// The length of the job id that follows a hello's `head`, or why the
    /// head is not a hello this rank takes.
    pub(super) fn job_len(head: &[u8; HELLO_HEAD]) -> Result<usize, Refusal> {
        let (magic, version) = (&MAGIC[..7], MAGIC[7]);
        if &head[..7] != magic {
            return Err(Refusal::NotAHello);
        }
        if head[7] != version {
            return Err(Refusal::Version {
                theirs: head[7],
                ours: version,
            });
        }
        let len = u32::from_le_bytes(head[HELLO_HEAD - 4..].try_into().unwrap()) as usize;
        if len > MAX_JOB_LEN {
            return Err(Refusal::JobIdTooLong(len));
        }
        Ok(len)
    }

    /// The hello of `head` (checked by [`Self::job_len`]) and `job`.
    pub(super) fn decode(head: &[u8; HELLO_HEAD], job: Vec<u8>) -> Hello {
        let word = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().unwrap());
        Hello {
            dialer: word(8),
            acceptor: word(12),
            nonce: head[16..16 + KEY_BYTES].try_into().unwrap(),
            job,
        }
    }

    /// What both ends prove they can MAC: the hello's claims and both nonces.
    fn challenge(&self, acceptor_nonce: &Nonce) -> [u8; KEY_BYTES] {
        Sha256::new()
            .chain_update(b"shoal tcp hello 3\0")
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

// ---------------------------------------------------------------------------
// Dialer

/// The dialer after its hello, waiting for the acceptor's nonce.
pub(super) struct DialerSaidHello {
    hello: Hello,
}

/// The dialer after its proof, waiting for the verdict.
pub(super) struct DialerProved {
    c: [u8; KEY_BYTES],
}

impl DialerSaidHello {
    /// Starts the handshake of rank `dialer` with rank `acceptor` of `job`,
    /// with the dialer's fresh nonce; returns the hello to send.
    pub(super) fn new(
        dialer: usize,
        acceptor: usize,
        job: &str,
        nonce: Nonce,
    ) -> (DialerSaidHello, Vec<u8>) {
        let hello = Hello {
            dialer: dialer as u32,
            acceptor: acceptor as u32,
            nonce,
            job: job.as_bytes().to_vec(),
        };
        let bytes = hello.encode();
        (DialerSaidHello { hello }, bytes)
    }

    /// Answers the acceptor's nonce with the dialer's proof.
    pub(super) fn challenge(self, key: &Key, theirs: &Nonce) -> (DialerProved, Proof) {
        let c = self.hello.challenge(theirs);
        (DialerProved { c }, key.prove(DIALER, &c))
    }
}

impl DialerProved {
    /// Whether the proof after [`ACCEPTED`] shows that the acceptor holds
    /// the key: a stranger answering at the peer's address cannot pass for
    /// it by saying "you are in".
    pub(super) fn acceptor_proved(&self, key: &Key, proof: &[u8]) -> bool {
        key.verify(ACCEPTOR, &self.c, proof)
    }
}

// ---------------------------------------------------------------------------
// Acceptor

/// What an acceptor takes a hello for.
pub(super) struct Expect {
    pub job: String,
    pub rank: usize,
    /// Ranks that may still connect.
    pub dialers: Vec<usize>,
}

/// The acceptor after its nonce, waiting for the dialer's proof.
pub(super) struct AcceptorChallenged {
    dialer: usize,
    c: [u8; KEY_BYTES],
}

/// A dialer that proved the key: its rank, and the verdict (with the
/// acceptor's proof) to send once the acceptor lets it in.
pub(super) struct Proven {
    pub rank: usize,
    pub welcome: [u8; WELCOME_LEN],
}

impl AcceptorChallenged {
    /// Answers a hello for this job and rank, from a rank that may still
    /// connect, with the acceptor's fresh nonce `mine` and nothing else. It
    /// takes no key, so what a stranger gets cannot depend on it.
    pub(super) fn hello(
        expect: &Expect,
        hello: Hello,
        mine: Nonce,
    ) -> Result<(AcceptorChallenged, Nonce), Refusal> {
        let dialer = hello.dialer as usize;
        if hello.job != expect.job.as_bytes() {
            return Err(Refusal::AnotherJob);
        }
        if hello.acceptor as usize != expect.rank {
            return Err(Refusal::AnotherAcceptor(hello.acceptor));
        }
        if !expect.dialers.contains(&dialer) {
            return Err(Refusal::NotExpected(dialer));
        }
        let c = hello.challenge(&mine);
        Ok((AcceptorChallenged { dialer, c }, mine))
    }

    /// The rank the hello claimed (for messages).
    pub(super) fn dialer(&self) -> usize {
        self.dialer
    }

    /// Checks the dialer's proof; only a dialer that passes gets the
    /// acceptor's proof. A failure is answered with [`REFUSED`].
    pub(super) fn proof(self, key: &Key, proof: &[u8]) -> Result<Proven, Refusal> {
        if !key.verify(DIALER, &self.c, proof) {
            return Err(Refusal::WrongProof(self.dialer));
        }
        let mut welcome = [ACCEPTED; WELCOME_LEN];
        welcome[1..].copy_from_slice(&key.prove(ACCEPTOR, &self.c));
        Ok(Proven {
            rank: self.dialer,
            welcome,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expect() -> Expect {
        Expect {
            job: "job".into(),
            rank: 0,
            dialers: vec![1],
        }
    }

    /// A hello as the acceptor reads it off the wire.
    fn received(bytes: &[u8]) -> Result<Hello, Refusal> {
        let head: [u8; HELLO_HEAD] = bytes[..HELLO_HEAD].try_into().unwrap();
        let len = Hello::job_len(&head)?;
        Ok(Hello::decode(&head, bytes[HELLO_HEAD..][..len].to_vec()))
    }

    /// Runs a whole handshake between a dialer holding `dk` and an acceptor
    /// holding `ak`: whether the acceptor let it in, and whether the dialer
    /// then took the acceptor's proof.
    fn run(dk: &Key, ak: &Key) -> (Result<usize, Refusal>, bool) {
        let (d, hello) = DialerSaidHello::new(1, 0, "job", [7; KEY_BYTES]);
        let (a, nonce) =
            AcceptorChallenged::hello(&expect(), received(&hello).unwrap(), [9; KEY_BYTES])
                .unwrap();
        let (d, proof) = d.challenge(dk, &nonce);
        match a.proof(ak, &proof) {
            Ok(p) => (Ok(p.rank), d.acceptor_proved(dk, &p.welcome[1..])),
            Err(why) => (Err(why), false),
        }
    }

    #[test]
    fn the_same_key_is_proven_both_ways() {
        let k = Key::random().unwrap();
        let (verdict, proved) = run(&k, &k);
        assert_eq!(verdict.ok(), Some(1));
        assert!(proved);
    }

    #[test]
    fn a_wrong_key_is_refused_and_gets_no_proof() {
        let (verdict, _) = run(&Key::random().unwrap(), &Key::random().unwrap());
        let why = verdict.unwrap_err();
        assert!(matches!(why, Refusal::WrongProof(1)), "{why:?}");
        let why = why.to_string();
        assert!(why.contains("does not match this job's key"), "{why}");
    }

    #[test]
    fn a_stranger_that_says_you_are_in_is_not_trusted() {
        let k = Key::random().unwrap();
        let (d, _) = DialerSaidHello::new(1, 0, "job", [7; KEY_BYTES]);
        let (d, _) = d.challenge(&k, &[9; KEY_BYTES]);
        let guessed = Key::random().unwrap().prove(ACCEPTOR, &[0; KEY_BYTES]);
        assert!(!d.acceptor_proved(&k, &guessed));
    }

    #[test]
    fn hellos_for_others_are_refused_before_any_challenge() {
        for (dialer, acceptor, job, why) in [
            (1, 0, "jobs", "another job"),
            (1, 2, "job", "for rank 2"),
            (2, 0, "job", "claims rank 2"),
        ] {
            let (_, hello) = DialerSaidHello::new(dialer, acceptor, job, [7; KEY_BYTES]);
            let r = AcceptorChallenged::hello(&expect(), received(&hello).unwrap(), [9; 32]);
            assert!(r.err().unwrap().to_string().contains(why), "{why}");
        }
        let (_, mut old) = DialerSaidHello::new(1, 0, "job", [7; KEY_BYTES]);
        old[7] = b'2';
        let why = received(&old).err().unwrap().to_string();
        assert!(why.contains("version 2; this rank speaks 3"), "{why}");
    }

    #[test]
    fn a_proof_holds_only_for_its_ranks_job_nonces_and_role() {
        let key = Key::random().unwrap();
        let hello = |dialer, acceptor, job: &str| Hello {
            dialer,
            acceptor,
            nonce: [7; KEY_BYTES],
            job: job.as_bytes().to_vec(),
        };
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
