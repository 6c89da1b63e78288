//! Setups that cannot succeed fail on every rank that came, quickly, with
//! an error naming the cause, and leave no shared-memory segment behind;
//! a segment that someone else planted under a rank's name is refused.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use shoal_transport::*;

const RING: usize = 64 << 10;

/// Segments in /dev/shm whose name contains `job`.
fn segments_of(job: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(job))
        .collect()
}

/// The path of `rank`'s segment of `job` (the shm transport's naming).
fn segment_path(job: &str, rank: usize) -> String {
    format!("/dev/shm/shoal-{job}-{rank}")
}

/// Runs `Routed::connect` for each `(rank, world, use_shm)` on its own
/// thread over one store; returns each rank's error and how long it took.
fn routed_errors(
    store: Arc<MemStore>,
    job: &str,
    ranks: &[(usize, usize, bool)],
) -> Vec<(String, Duration)> {
    let handles: Vec<_> = ranks
        .iter()
        .map(|&(rank, world, use_shm)| {
            let (store, job) = (store.clone(), job.to_string());
            std::thread::spawn(move || {
                let mut c = RoutedConfig::new(rank, world, (0..world).collect(), &job, test_key());
                c.use_shm = use_shm;
                c.ring_size = RING;
                let t0 = Instant::now();
                let e = Routed::connect(&c, &*store).err().expect("setup succeeded");
                (e.to_string(), t0.elapsed())
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn ranks_of_one_host_disagreeing_on_the_transport_fail_at_once() {
    let job = job_id("choice");
    let store = Arc::new(MemStore::default());
    for (msg, took) in routed_errors(store, &job, &[(0, 2, true), (1, 2, false)]) {
        assert!(
            msg.contains("rank 1 uses tcp but rank 0 uses shm (SHOAL_TRANSPORT must be alike"),
            "{msg}"
        );
        assert!(took < Duration::from_secs(1), "{took:?}");
    }
    assert_eq!(segments_of(&job), Vec::<String>::new());
}

#[test]
fn ranks_disagreeing_on_the_world_size_fail_at_once() {
    let job = job_id("world");
    let store = Arc::new(MemStore::default());
    for (msg, took) in routed_errors(store, &job, &[(0, 2, true), (1, 3, true)]) {
        assert!(
            msg.contains("ranks disagree on the world size: rank 0 has 2, rank 1 has 3"),
            "{msg}"
        );
        assert!(took < Duration::from_secs(1), "{took:?}");
    }
    assert_eq!(segments_of(&job), Vec::<String>::new());
}

#[test]
fn a_rank_that_never_joins_is_named_after_the_timeout() {
    let job = job_id("missing");
    let store = Arc::new(MemStore::with_timeout(Duration::from_secs(1)));
    for use_shm in [true, false] {
        let job = format!("{job}-{use_shm}");
        for (msg, took) in routed_errors(store.clone(), &job, &[(0, 3, use_shm), (1, 3, use_shm)]) {
            assert!(
                msg.contains("rank 2 never joined the transport setup (waited 1"),
                "{msg}"
            );
            assert!(took < Duration::from_secs(3), "{took:?}");
        }
        assert_eq!(segments_of(&job), Vec::<String>::new());
    }
}

#[test]
fn a_rank_that_stops_after_agreeing_leaves_no_segment_behind() {
    // Rank 1 publishes its setup record, then never builds its transport
    // (it crashed): rank 0 has made its segment by then and must remove it.
    let job = job_id("vanished");
    let store = MemStore::with_timeout(Duration::from_secs(1));
    store
        .set(&format!("{job}/setup/1"), b"world=2 transport=shm")
        .unwrap();
    let mut c = RoutedConfig::new(0, 2, vec![0, 1], &job, test_key());
    c.ring_size = RING;
    let msg = Routed::connect(&c, &store)
        .err()
        .expect("setup succeeded")
        .to_string();
    assert!(
        msg.contains("rank 1 never joined the transport setup"),
        "{msg}"
    );
    assert_eq!(segments_of(&job), Vec::<String>::new());
}

/// Plants a file as rank 1's segment of `job`, says in the store that rank 1
/// is ready, and returns rank 0's setup error.
fn setup_over_planted_segment(job: &str, plant: impl Fn(&str)) -> String {
    let path = segment_path(job, 1);
    plant(&path);
    let store = MemStore::with_timeout(Duration::from_secs(2));
    store
        .set(
            &format!("{job}/shm/1"),
            std::process::id().to_string().as_bytes(),
        )
        .unwrap();
    let mut c = ShmConfig::new(0, 2, vec![0, 1], job);
    c.ring_size = RING;
    let e = ShmTransport::connect(&c, &store)
        .err()
        .expect("mapped a planted segment");
    let _ = std::fs::remove_file(&path);
    assert_eq!(segments_of(job), Vec::<String>::new());
    e.to_string()
}

/// The size of a two-rank segment with `RING`-byte rings.
const SEGMENT_LEN: u64 = 4096 + 2 * (128 + RING as u64);

#[test]
fn a_segment_that_others_may_open_is_refused() {
    let job = job_id("plant-mode");
    let msg = setup_over_planted_segment(&job, |path| {
        let f = std::fs::File::create(path).unwrap();
        f.set_len(SEGMENT_LEN).unwrap();
        f.set_permissions(std::fs::Permissions::from_mode(0o666))
            .unwrap();
    });
    assert!(
        msg.contains("has mode 666: other users may open it"),
        "{msg}"
    );
}

#[test]
fn a_segment_of_another_user_is_refused() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: only root can give a file to another user");
        return;
    }
    let job = job_id("plant-owner");
    let msg = setup_over_planted_segment(&job, |path| {
        let f = std::fs::File::create(path).unwrap();
        f.set_len(SEGMENT_LEN).unwrap();
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .unwrap();
        std::os::unix::fs::chown(path, Some(65534), Some(65534)).unwrap();
    });
    assert!(
        msg.contains("belongs to uid 65534, not to this user"),
        "{msg}"
    );
}

#[test]
fn a_symlink_in_place_of_a_segment_is_refused() {
    let job = job_id("plant-link");
    let target = std::env::temp_dir().join(format!("{job}-target"));
    std::fs::write(&target, vec![0u8; SEGMENT_LEN as usize]).unwrap();
    let msg = setup_over_planted_segment(&job, |path| {
        std::os::unix::fs::symlink(&target, path).unwrap()
    });
    let _ = std::fs::remove_file(&target);
    assert!(
        msg.contains("open /dev/shm/") && msg.contains("symbolic links"),
        "{msg}"
    );
}

#[test]
fn a_name_taken_before_a_rank_creates_its_segment_is_refused_and_kept() {
    let job = job_id("taken");
    let path = segment_path(&job, 0);
    std::fs::write(&path, b"someone else's").unwrap();
    let store = MemStore::with_timeout(Duration::from_secs(2));
    let c = ShmConfig::new(0, 2, vec![0, 1], &job);
    let msg = ShmTransport::connect(&c, &store)
        .err()
        .expect("used a taken name")
        .to_string();
    assert!(
        msg.contains("already exists: another process took this job's segment name"),
        "{msg}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"someone else's");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn segments_are_private_to_the_user_and_gone_once_every_rank_has_mapped_them() {
    let job = job_id("private");
    let store = Arc::new(MemStore::default());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..2)
        .map(|r| {
            let (store, job, seen) = (store.clone(), job.clone(), seen.clone());
            std::thread::spawn(move || {
                let mut c = ShmConfig::new(r, 2, vec![0, 1], &job);
                c.ring_size = RING;
                // Rank 1 looks at rank 0's segment while rank 0 waits for it.
                if r == 1 {
                    let path = segment_path(&job, 0);
                    while std::fs::metadata(&path).is_err() {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
                    seen.lock().unwrap().push(mode & 0o777);
                }
                let t = ShmTransport::connect(&c, &*store).unwrap();
                if r == 0 {
                    send(&t, 1, 0, &pattern(1000, 0));
                } else {
                    assert_eq!(recv(&t, 0, 0, 1000), pattern(1000, 0));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(*seen.lock().unwrap(), vec![0o600]);
    assert_eq!(segments_of(&job), Vec::<String>::new());
}

/// Bytes this process's page tables map of each mapping of `job`'s
/// segments (their `Rss` in /proc/self/smaps).
fn mapped_segment_bytes(job: &str) -> Vec<usize> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let name = format!("/dev/shm/shoal-{job}-");
    let mut mapped = Vec::new();
    let mut lines = smaps.lines();
    while let Some(line) = lines.next() {
        if line.contains(&name) {
            let rss = lines.find(|l| l.starts_with("Rss:")).unwrap();
            let kb: usize = rss.split_whitespace().nth(1).unwrap().parse().unwrap();
            mapped.push(kb * 1024);
        }
    }
    mapped
}

/// Bytes mapped of each mapping of a 2-rank setup's segments, as rank 0
/// sees them once both ranks have connected with `configure`d configs.
fn mapped_at_setup(name: &str, configure: fn(&mut ShmConfig)) -> Vec<usize> {
    let job = job_id(name);
    let store = Arc::new(MemStore::default());
    let connected = Arc::new(std::sync::Barrier::new(2));
    let mapped = Arc::new(std::sync::Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..2)
        .map(|r| {
            let (store, job, connected) = (store.clone(), job.clone(), connected.clone());
            let mapped = mapped.clone();
            std::thread::spawn(move || {
                let mut c = ShmConfig::new(r, 2, vec![0, 1], &job);
                configure(&mut c);
                let t = ShmTransport::connect(&c, &*store).unwrap();
                connected.wait();
                if r == 0 {
                    *mapped.lock().unwrap() = mapped_segment_bytes(&job);
                }
                connected.wait();
                drop(t);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    // Each rank maps its own segment and the peer's: four mappings in
    // this process.
    let mapped = std::mem::take(&mut *mapped.lock().unwrap());
    assert_eq!(mapped.len(), 4, "{mapped:?}");
    mapped
}

#[test]
fn every_ring_is_mapped_by_its_writer_and_its_reader_at_setup() {
    // Not at a message's first pass through it, a fault per 4 KiB. Each
    // mapping holds a ring: the peer's to the rank in its own segment,
    // the rank's to the peer in the peer's.
    let mapped = mapped_at_setup("prefault", |c| {
        c.ring_size = 1 << 20;
        c.slot_size = 0;
    });
    assert!(mapped.iter().all(|&b| b >= 1 << 20), "{mapped:?}");
}

#[test]
fn every_slot_buffer_is_mapped_by_its_writer_and_its_reader_at_setup() {
    // Not at a job's first calls through the slots, a fault each: its own
    // slots the rank writes, the peer's it reads.
    let mapped = mapped_at_setup("prefault-slots", |c| {
        c.ring_size = 4096;
        c.slot_size = 64 << 10;
    });
    let slots = shoal_transport::shm::SLOT_BUFFERS * (64 << 10);
    assert!(mapped.iter().all(|&b| b >= slots), "{mapped:?}");
}
