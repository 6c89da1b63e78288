//! The shared segment every local rank creates: a control block (doorbell,
//! pid, bye and abort flags, abort reason, rendezvous permissions) followed
//! by one ring per local sender; its name in `/dev/shm`, and the checks
//! that keep other users from reading or planting one.

use std::ffi::CString;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use super::ring::{Ring, RingHdr};
use super::{io_err, os_err};
use crate::cma;
use crate::doorbell::{BellWords, Doorbell};
use crate::Result;

/// Local ranks beyond this many never use the rendezvous path (the control
/// block has one flag per local rank).
pub(super) const CMA_SLOTS: usize = 1024;

/// Bytes at the start of a segment reserved for its control block.
pub(super) const CONTROL_SIZE: usize = 4096;
/// The page size the mappings are laid out by.
const PAGE: usize = 4096;
/// Bytes before each ring's data: its two positions, a cache line each.
pub(super) const RING_HDR_SIZE: usize = 128;
/// The longest abort reason a peer can read.
pub(super) const REASON_MAX: usize = 1024;

/// The control block at the start of every segment. Written by its owner,
/// read by everyone.
#[repr(C)]
pub(super) struct Control {
    pub(super) bell: BellWords,
    pub(super) pid: AtomicU32,
    pub(super) abort: AtomicU32,
    pub(super) bye: AtomicU32,
    pub(super) reason_len: AtomicU32,
    pub(super) reason: std::cell::UnsafeCell<[u8; REASON_MAX]>,
    /// Where this segment is mapped in its owner, so peers can probe whether
    /// they may read the owner's memory (they read `pid` through it).
    pub(super) addr: AtomicU64,
    /// `cma_from[s]` is 1 when this rank reads rendezvous messages from the
    /// rank in local slot `s` (it probed that it may; written before the
    /// setup barrier).
    pub(super) cma_from: [AtomicU8; CMA_SLOTS],
    /// The regions this rank exposes to shared-memory collective steps
    /// (see [`super::window`]), one per plan flag.
    pub(super) exposed: [ExposedFlag; EXPOSED_FLAGS],
    /// The headers of this rank's slot buffers (see [`super::window`]).
    pub(super) slots: [SlotHdr; SLOT_BUFFERS],
}

/// Slot buffers per rank: a call fills a free one while peers may still
/// read those of the calls before, so a rank that exposes (a broadcast's
/// root) runs up to this many calls ahead of its slowest reader before it
/// waits. Two made the root wait for readers that had not been
/// scheduled yet: 8-byte `shm_read` broadcasts at 4 ranks on 2 vCPUs took
/// 22.7 us with two, 14.0 us with eight (docs/benchmarks.md). Eight headers
/// are what fits the control block.
pub const SLOT_BUFFERS: usize = 8;

/// One slot buffer's header: written by its owner, `reads` bumped by readers.
/// Free for reuse once `reads` reaches `expected`.
#[repr(C, align(64))]
pub(super) struct SlotHdr {
    /// The call (`comm << 32 | seq`) whose data the buffer holds; stored
    /// last, so a reader that sees it sees the data and the fields below.
    pub(super) stamp: AtomicU64,
    pub(super) len: AtomicU64,
    /// The plan flag the data is exposed under.
    pub(super) flag: AtomicU32,
    /// Reads finished by peers since the owner filled the buffer.
    pub(super) reads: AtomicU32,
    /// Reads the owner's plan makes peers do (set at its Release; `u32::MAX`
    /// until then). Zero in a fresh segment: both buffers start free.
    pub(super) expected: AtomicU32,
    pub(super) sig: [AtomicU64; 3],
}

/// How many flags a plan may expose at once (`Op::Expose { flag }`, flag
/// below this).
pub const EXPOSED_FLAGS: usize = 16;

/// One exposed region: written by its owner, `reads` bumped by readers. A
/// cache line each, so readers of one flag do not slow the owner's others.
#[repr(C, align(64))]
pub(super) struct ExposedFlag {
    /// The call (`comm << 32 | seq`) the region belongs to; stored last, so a
    /// reader that sees its call's stamp sees `addr` and `len` too.
    pub(super) stamp: AtomicU64,
    pub(super) addr: AtomicU64,
    pub(super) len: AtomicU64,
    /// Reads finished by peers since the owner exposed the region.
    pub(super) reads: AtomicU32,
    /// The call's signature (`CallSig`, packed), so a peer in another call
    /// with the same number reports a mismatch instead of reading.
    pub(super) sig: [AtomicU64; 3],
}

const _: () = assert!(std::mem::size_of::<Control>() <= CONTROL_SIZE);

/// One mapped segment; unmapped when the last user drops it.
pub(super) struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is shared memory accessed through atomics and the SPSC
// ring protocol.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own this mapping.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

impl Mapping {
    /// Records this process as the segment's owner: its pid, and where the
    /// segment is mapped here (peers read `pid` through that address to
    /// probe whether they may read this process's memory).
    pub(super) fn publish_owner(&self, pid: u32) {
        self.control().pid.store(pid, Ordering::Release);
        self.control()
            .addr
            .store(self.ptr as u64, Ordering::Release);
    }

    pub(super) fn control(&self) -> &Control {
        // SAFETY: every segment starts with a control block.
        unsafe { &*(self.ptr as *const Control) }
    }

    /// Where ring `slot` (of `size` bytes, after its header) begins: the
    /// rings follow the control block, each header then data.
    fn ring_offset(&self, slot: usize, size: usize) -> usize {
        let off = CONTROL_SIZE + slot * (RING_HDR_SIZE + size);
        assert!(off + RING_HDR_SIZE + size <= self.len);
        off
    }

    pub(super) fn ring(self: &Arc<Self>, slot: usize, size: usize) -> Ring {
        let off = self.ring_offset(slot, size);
        // SAFETY: in bounds (asserted).
        let hdr = unsafe { self.ptr.add(off) } as *const RingHdr;
        let data = unsafe { self.ptr.add(off + RING_HDR_SIZE) };
        Ring {
            hdr,
            data,
            size,
            _map: self.clone(),
        }
    }

    /// Maps ring `slot` (of `size` bytes) into this process's page tables
    /// now, writable, before anyone uses it. Otherwise each process takes a
    /// fault on its first touch of each 4 KiB of a ring, which a ring meets
    /// all through its first pass: on the 2-vCPU dev VM a job's first 120
    /// 32 KiB allreduces by recursive_doubling (4 MiB through the ring, the
    /// default size) took 20 us each, the rest 5 (docs/benchmarks.md).
    pub(super) fn prefault_ring(&self, slot: usize, size: usize) {
        self.prefault(self.ring_offset(slot, size), RING_HDR_SIZE + size);
    }

    /// Maps the slot buffers (each of `size` bytes) into this process's
    /// page tables now, as [`Mapping::prefault_ring`] a ring: without it
    /// the first call through each slot faults in its writer and its
    /// readers (8 KiB allreduces by shm_flat on the 2-vCPU dev VM: 10-13 us
    /// each, then 2-3).
    pub(super) fn prefault_slots(&self, size: usize) {
        let len = SLOT_BUFFERS * size;
        if len > 0 {
            self.prefault(self.slot_offset(0, size), len);
        }
    }

    /// Maps bytes `off..off + len` of this mapping writable now.
    fn prefault(&self, off: usize, len: usize) {
        assert!(off + len <= self.len);
        if !self.populate(off, len) {
            self.touch(off, len);
        }
    }

    /// Maps the pages of bytes `off..off + len` writable without touching
    /// them (MADV_POPULATE_WRITE, Linux 5.14); false where the kernel lacks it.
    fn populate(&self, off: usize, len: usize) -> bool {
        // The mapping is page-aligned, so whole pages around the range lie within it.
        let (begin, end) = (
            off / PAGE * PAGE,
            ((off + len).div_ceil(PAGE) * PAGE).min(self.len),
        );
        // SAFETY: a range of this mapping; the call does not change its bytes.
        let rc = unsafe {
            libc::madvise(
                self.ptr.add(begin).cast(),
                end - begin,
                libc::MADV_POPULATE_WRITE,
            )
        };
        rc == 0
    }

    /// Takes the fault of every page of bytes `off..off + len` now, by
    /// reading a byte of each (a shared mapping of shared memory is mapped
    /// writable on a read: the kernel does not track its writes). Not an
    /// atomic add of zero: the optimiser may drop an idempotent one.
    fn touch(&self, off: usize, len: usize) {
        assert!(off + len <= self.len);
        for at in (off..off + len).step_by(PAGE) {
            // SAFETY: in bounds (asserted); a read.
            unsafe { self.ptr.add(at).read_volatile() };
        }
    }

    /// Slot buffer `index` of `size` bytes: the segment ends with them.
    pub(super) fn slot_data(&self, index: usize, size: usize) -> *mut u8 {
        let off = self.slot_offset(index, size);
        // SAFETY: in bounds (`slot_offset` asserts it).
        unsafe { self.ptr.add(off) }
    }

    /// Where slot buffer `index` of `size` bytes begins: the segment ends
    /// with them.
    fn slot_offset(&self, index: usize, size: usize) -> usize {
        let off = self.len - (SLOT_BUFFERS - index) * size;
        assert!(index < SLOT_BUFFERS && off >= CONTROL_SIZE);
        off
    }

    pub(super) fn bell(self: &Arc<Self>) -> Doorbell {
        let words = &self.control().bell as *const BellWords;
        // SAFETY: the bell lives in this mapping, which the clone keeps alive.
        unsafe { Doorbell::at(words, self.clone()) }
    }
}

/// Whether this process may read the memory of `pid`, the owner of `map`:
/// reads the owner's `pid` field through the owner's own address of it.
pub(super) fn may_read(map: &Mapping, pid: i32) -> bool {
    let ctl = map.control();
    let addr = ctl.addr.load(Ordering::Acquire) + std::mem::offset_of!(Control, pid) as u64;
    let expect = ctl.pid.load(Ordering::Acquire).to_ne_bytes();
    ctl.addr.load(Ordering::Acquire) != 0 && cma::probe(pid, addr, &expect)
}

pub(super) fn read_reason(ctl: &Control) -> String {
    let n = (ctl.reason_len.load(Ordering::Acquire) as usize).min(REASON_MAX);
    // SAFETY: written before the abort flag was released; we acquired it.
    let bytes = unsafe { &(&*ctl.reason.get())[..n] };
    String::from_utf8_lossy(bytes).into_owned()
}

pub(super) fn seg_path(job: &str, rank: usize) -> String {
    let job: String = job
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("/dev/shm/shoal-{job}-{rank}")
}

/// Creates a segment only this user may open. An existing file of that
/// name is refused, not reused or removed: segment names carry a random
/// nonce per job, so another process made it, maybe to read our rings.
pub(super) fn create_segment(path: &str, len: usize) -> Result<Mapping> {
    let c = CString::new(path).map_err(|_| io_err("bad path"))?;
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: plain libc calls on a valid C string.
    let fd = unsafe { libc::open(c.as_ptr(), flags, 0o600) };
    if fd < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
        return Err(io_err(&format!(
            "{path} already exists: another process took this job's segment name; refusing it"
        )));
    }
    if fd < 0 {
        return Err(os_err(&format!("create {path}")));
    }
    // Reserve the pages now: a full /dev/shm fails here instead of SIGBUS later.
    let rc = unsafe { libc::posix_fallocate(fd, 0, len as libc::off_t) };
    if rc != 0 {
        unsafe { libc::close(fd) };
        unlink(path);
        return Err(io_err(&format!(
            "allocate {len} bytes for {path}: errno {rc}"
        )));
    }
    map_fd(fd, len, path)
}

/// Maps a peer's segment, if it is what its owner made: a regular file of
/// this user that no other user may open, of the expected size.
pub(super) fn open_segment(path: &str, len: usize) -> Result<Mapping> {
    let c = CString::new(path).map_err(|_| io_err("bad path"))?;
    // SAFETY: plain libc calls.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(os_err(&format!("open {path}")));
    }
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let problem = if unsafe { libc::fstat(fd, &mut st) } != 0 {
        Some(format!("fstat {path}: {}", std::io::Error::last_os_error()))
    } else {
        segment_problem(path, &st, len)
    };
    if let Some(problem) = problem {
        unsafe { libc::close(fd) };
        return Err(io_err(&problem));
    }
    map_fd(fd, len, path)
}

/// Why the file `st` describes is not a segment this rank may map, if it is not.
fn segment_problem(path: &str, st: &libc::stat, len: usize) -> Option<String> {
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        Some(format!("{path} is not a regular file; refusing it"))
    } else if st.st_uid != me {
        Some(format!(
            "{path} belongs to uid {}, not to this user (uid {me}); refusing a segment \
             another user could have planted",
            st.st_uid
        ))
    } else if st.st_mode & 0o077 != 0 {
        Some(format!(
            "{path} has mode {:o}: other users may open it; refusing it",
            st.st_mode & 0o777
        ))
    } else if st.st_size as usize != len {
        Some(format!(
            "{path} has {} bytes, expected {len} (SHOAL_SHM_RING_BYTES or SHOAL_SHM_SLOT_BYTES differ between ranks?)",
            st.st_size
        ))
    } else {
        None
    }
}

fn map_fd(fd: i32, len: usize, path: &str) -> Result<Mapping> {
    // SAFETY: mapping a file we just opened; the fd is closed right after.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    let err = os_err(&format!("mmap {path}"));
    unsafe { libc::close(fd) };
    if p == libc::MAP_FAILED {
        return Err(err);
    }
    Ok(Mapping { ptr: p.cast(), len })
}

fn unlink(path: &str) {
    if let Ok(c) = CString::new(path) {
        // SAFETY: plain libc call.
        unsafe { libc::unlink(c.as_ptr()) };
    }
}

/// Unlinks its path when dropped.
pub(super) struct Unlink(pub(super) String);

impl Drop for Unlink {
    fn drop(&mut self) {
        unlink(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes of `map` that this process's page tables map (its `Rss` in
    /// /proc/self/smaps).
    fn mapped_bytes(map: &Mapping) -> usize {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let head = format!("{:x}-", map.ptr as usize);
        let entry = smaps.split_once(&format!("\n{head}")).unwrap().1;
        let rss = entry.lines().find(|l| l.starts_with("Rss:")).unwrap();
        let kb: usize = rss.split_whitespace().nth(1).unwrap().parse().unwrap();
        kb * 1024
    }

    #[test]
    fn a_prefaulted_ring_is_mapped_and_keeps_its_bytes() {
        let size = 1 << 20;
        let path = format!("/dev/shm/shoal-test-prefault-{}", std::process::id());
        let map = create_segment(&path, CONTROL_SIZE + 3 * (RING_HDR_SIZE + size)).unwrap();
        unlink(&path);
        let ring = |slot: usize| CONTROL_SIZE + slot * (RING_HDR_SIZE + size);
        let before = mapped_bytes(&map);
        assert!(before < size / 2, "{before} bytes mapped before");
        // SAFETY: this test's own mapping.
        let byte = |at: usize| unsafe { map.ptr.add(at) };
        unsafe { byte(ring(1) + 5000).write(7) };
        map.prefault_ring(1, size);
        let after = mapped_bytes(&map);
        assert!(after >= before + size, "{before} then {after} bytes mapped");
        // The older kernels' way, the same for the next ring.
        unsafe { byte(ring(2) + 4096).write(9) };
        map.touch(ring(2), RING_HDR_SIZE + size);
        let touched = mapped_bytes(&map);
        assert!(
            touched >= after + size,
            "{after} then {touched} bytes mapped"
        );
        assert_eq!(
            unsafe { (byte(ring(1) + 5000).read(), byte(ring(2) + 4096).read()) },
            (7, 9)
        );
    }
}
