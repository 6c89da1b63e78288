//! Rendezvous: who is this process (rank, world, local rank), where is the
//! store every rank meets at, and which ranks share a host.
//!
//! Sources, first match wins:
//!
//! 1. explicit arguments (`rank`, `world_size`, `addr`);
//! 2. the torchrun / `shoal run` convention: `RANK`, `WORLD_SIZE`,
//!    `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`;
//! 3. Slurm (`srun`): `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, tasks
//!    per node from `SLURM_NTASKS_PER_NODE` or `SLURM_STEP_TASKS_PER_NODE` /
//!    `SLURM_TASKS_PER_NODE` (`2(x3),1`) with `SLURM_NODEID`; the master is
//!    `MASTER_ADDR` or the first host of the step's / job's node list;
//! 4. OpenMPI (`mpirun`): `OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}`;
//! 5. nothing: a single process, rank 0 of 1.
//!
//! The store is, in order: `SHOAL_STORE_PATH` (a directory, [`FileStore`](crate::store::FileStore)),
//! `SHOAL_STORE_ADDR` (`host:port` of a running `TcpStoreServer`), or a
//! [`TcpStoreServer`] that rank 0 starts on the master address
//! ([`store_bind_addrs`]). TCP connections prove the job secret
//! ([`JobSecret`]). `MASTER_PORT`
//! defaults to 29500; under Slurm to a port derived from the job id, so jobs
//! sharing a first node do not collide. Under a torchrun agent that already
//! serves torch's own store on `MASTER_PORT` (`TORCHELASTIC_USE_AGENT_STORE`),
//! shoal's store uses `MASTER_PORT + 1`.
//!
//! Every key is scoped by a job id ([`job_id`]) and a generation, so several
//! jobs, or several initialisations of one job, can share a store. Rank 0
//! opens each generation (a counter only it adds to, and an "open" key that
//! names the generation while it gathers); the other ranks join whichever is
//! open. Rank 0 closes it before publishing the host list, and a newer rank
//! 0 marks an unfinished older one superseded, so neither a re-init nor a
//! crashed launch leaves ranks in the wrong generation (docs/architecture.md,
//! "Rendezvous").
//!
//! The environment is read through an injected accessor so tests are hermetic.
//!
//! Where each part lives: `launcher` (who this process is, by explicit
//! arguments or a launcher's variables), `slurm` (Slurm's host-list and
//! tasks-per-node grammars), `connect` (which store, and rank 0's server),
//! `hosts` (host ids and the map of who shares a host); this module joins
//! them ([`establish`]) and holds job scoping and generations.

mod connect;
mod hosts;
mod launcher;
mod slurm;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::secret::JobSecret;
use crate::store::{is_disconnect, ScopedStore, Store, TcpStoreServer};
use crate::{Error, KvStore, Result};

use hosts::{check_host_id, host_map};

pub use connect::{connect_store, job_secret, store_bind_addrs, store_limits};
pub use hosts::{host_id, hostname, HostMap};
pub use launcher::{
    detect, detect_from_process_env, split_host_port, Explicit, ProcessInfo, DEFAULT_MASTER_PORT,
};
pub use slurm::{expand_nodelist, parse_tasks_per_node, ListSyntax};

/// Reads an environment variable; injected so tests need not touch the process env.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

fn nonempty(env: Env, var: &str) -> Option<String> {
    env(var)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

// ---------------------------------------------------------------------------
// Job ids and generations

/// The id that scopes this job's keys: `SHOAL_JOB_ID`, else the launcher's
/// (`TORCHELASTIC_RUN_ID`, `SLURM_JOB_ID.SLURM_STEP_ID`, OpenMPI's job id),
/// else "default".
pub fn job_id(env: Env) -> String {
    let slurm = nonempty(env, "SLURM_JOB_ID").map(|job| match nonempty(env, "SLURM_STEP_ID") {
        Some(step) => format!("slurm-{job}.{step}"),
        None => format!("slurm-{job}"),
    });
    nonempty(env, "SHOAL_JOB_ID")
        .or_else(|| nonempty(env, "TORCHELASTIC_RUN_ID").map(|id| format!("torchrun-{id}")))
        .or(slurm)
        .or_else(|| {
            [
                "OMPI_MCA_ess_base_jobid",
                "OMPI_MCA_orte_ess_jobid",
                "PMIX_NAMESPACE",
            ]
            .iter()
            .find_map(|v| nonempty(env, v))
            .map(|id| format!("ompi-{id}"))
        })
        .unwrap_or_else(|| "default".to_string())
}

/// The key prefix of one initialisation of one job.
pub fn scope(job: &str, generation: u64) -> String {
    format!("shoal/{job}/{generation}")
}

/// The keys by which the initialisations of one job (at one world size)
/// find each other, outside every generation's scope.
struct JobKeys {
    /// How many generations rank 0s have opened; only rank 0 adds to it, so
    /// a rank that dies before joining cannot leave it off by one.
    generations: String,
    /// The generation gathering its ranks, while one is, and rank 0's world
    /// size (`<generation> <world>`), so a rank started with another world
    /// size is told at once instead of waiting for a generation of its own.
    open: String,
}

impl JobKeys {
    fn new(job: &str) -> JobKeys {
        JobKeys {
            generations: format!("shoal/{job}/generations"),
            open: format!("shoal/{job}/open"),
        }
    }
}

/// Within a generation's scope: where rank `r` publishes its host id, and
/// where rank 0 publishes everyone's.
fn host_key(rank: usize) -> String {
    format!("rdzv/host/{rank}")
}
const HOSTS_KEY: &str = "rdzv/hosts";

/// What rank 0 of a newer initialisation writes as the host list of an
/// older one that never finished (its launch crashed), so that ranks waiting
/// there move to the newer one. No real list starts with a newline: host
/// ids are never empty.
const SUPERSEDED: &[u8] = b"\nsuperseded";

/// Pause before a rank looks for an open generation again after losing the store.
const REJOIN_PAUSE: Duration = Duration::from_millis(50);

/// What a rank publishes as its host id when its world size is not rank
/// 0's, so that rank 0 names the disagreement rather than waiting for it.
/// Like [`SUPERSEDED`], it starts with a newline, which no host id does.
const OTHER_WORLD: &str = "\nworld ";

/// `(generation, world size)` of an open key.
fn parse_open(value: &[u8]) -> Option<(u64, usize)> {
    let text = std::str::from_utf8(value).ok()?;
    let (generation, world) = text.trim().split_once(' ')?;
    Some((generation.parse().ok()?, world.parse().ok()?))
}

fn world_disagreement(rank: usize, world: usize, rank0_world: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!(
            "ranks disagree on the world size: rank 0 has {rank0_world}, rank {rank} has {world}"
        ),
    )
}

/// Rank 0: opens a new generation for its ranks to join, and marks the
/// previously open one, if a crashed launch left it open, as superseded.
fn open_generation(store: &Store, keys: &JobKeys, job: &str, world: usize) -> std::io::Result<u64> {
    let count = store.add(&keys.generations, 1)?;
    let generation = u64::try_from(count - 1).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "key '{}' holds {}, not a count",
                keys.generations,
                count - 1
            ),
        )
    })?;
    let stale = match store.check(&[&keys.open])? {
        true => parse_open(&store.get(&keys.open)?).map(|(g, _)| g),
        false => None,
    };
    // Open the new one first: a rank sent away from the stale one finds it.
    store.set(&keys.open, format!("{generation} {world}").as_bytes())?;
    if let Some(stale) = stale.filter(|&g| g != generation) {
        store.set(&format!("{}/{HOSTS_KEY}", scope(job, stale)), SUPERSEDED)?;
    }
    Ok(generation)
}

/// Rank 0: gathers every rank's host id, closes the generation, then
/// publishes the list. Closing first means a generation whose list exists is
/// never open, so the ranks of a later initialisation cannot mistake it for theirs.
fn gather_hosts(
    store: &Store,
    scoped: &ScopedStore,
    keys: &JobKeys,
    world: usize,
    host_id: &str,
) -> std::io::Result<Vec<u8>> {
    scoped.set(&host_key(0), host_id.as_bytes())?;
    let ids = (0..world)
        .map(|r| {
            let id = scoped.get(&host_key(r)).map_err(|e| match e.kind() {
                std::io::ErrorKind::TimedOut => with_context(e, format!("rank {r} did not join")),
                _ => e,
            })?;
            match String::from_utf8_lossy(&id).strip_prefix(OTHER_WORLD) {
                Some(theirs) => Err(world_disagreement(r, theirs.parse().unwrap_or(0), world)),
                None => Ok(id),
            }
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    store.delete(&keys.open)?;
    let joined = ids.join(&b'\n');
    scoped.set(HOSTS_KEY, &joined)?;
    Ok(joined)
}

/// Any other rank: joins the open generation (waiting until rank 0 opens
/// one), publishes its host id there and waits for the host list. A list
/// marked [`SUPERSEDED`] sends it on to the newer generation. Losing the
/// store before a generation is open (rank 0 replacing its store for the
/// next initialisation) makes it reconnect until `deadline`.
fn join_generation(
    store: &Arc<Store>,
    keys: &JobKeys,
    job: &str,
    (rank, world): (usize, usize),
    host_id: &str,
    deadline: Instant,
) -> std::io::Result<(u64, Vec<u8>)> {
    loop {
        let open = match store.get(&keys.open) {
            Ok(v) => v,
            Err(e) if is_disconnect(&e) && Instant::now() < deadline => {
                thread::sleep(REJOIN_PAUSE);
                continue;
            }
            Err(e) => return Err(with_context(e, "waiting for rank 0 to open the rendezvous")),
        };
        let (generation, rank0_world) = parse_open(&open).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("key '{}' holds {open:?}, not a generation", keys.open),
            )
        })?;
        let scoped = ScopedStore::new(store.clone(), scope(job, generation));
        if rank0_world != world {
            if rank < rank0_world {
                let told = format!("{OTHER_WORLD}{world}");
                scoped.set(&host_key(rank), told.as_bytes())?;
            }
            return Err(world_disagreement(rank, world, rank0_world));
        }
        // A rank already claimed here belongs to a launch that crashed (then
        // rank 0 supersedes this generation) or to one still running.
        let claimed = scoped.add(&format!("rdzv/claim/{rank}"), 1)? == 1;
        if claimed {
            scoped.set(&host_key(rank), host_id.as_bytes())?;
        }
        let hosts = scoped.get(HOSTS_KEY);
        if hosts.as_deref().is_ok_and(|h| h == SUPERSEDED) {
            continue;
        }
        return match (hosts, claimed) {
            (Ok(hosts), true) => Ok((generation, hosts)),
            (Ok(_), false) => Err(claimed_twice(job, generation, rank)),
            (Err(e), true) => Err(e),
            (Err(e), false) => Err(with_context(e, claimed_twice(job, generation, rank))),
        };
    }
}

/// Two launches sharing a job id and a store would otherwise mix their ranks.
fn claimed_twice(job: &str, generation: u64, rank: usize) -> std::io::Error {
    std::io::Error::other(format!(
        "another process already joined initialisation {generation} of job '{job}' as rank \
         {rank}; is another launch with this job id (SHOAL_JOB_ID) using the same store?"
    ))
}

fn with_context(e: std::io::Error, context: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{context}: {e}"))
}

/// Agrees with the other ranks on a generation (rank 0 opens it, the others
/// join it) and returns it with every rank's host id, one per line.
fn meet(
    store: &Arc<Store>,
    job: &str,
    info: &ProcessInfo,
    host_id: &str,
    timeout: Duration,
) -> std::io::Result<(u64, Vec<u8>)> {
    let keys = JobKeys::new(job);
    let me = (info.rank, info.world_size);
    if info.rank != 0 {
        let deadline = Instant::now() + timeout.min(Duration::from_secs(100 * 365 * 86_400));
        return join_generation(store, &keys, job, me, host_id, deadline);
    }
    let generation = open_generation(store, &keys, job, info.world_size)?;
    let scoped = ScopedStore::new(store.clone(), scope(job, generation));
    let joined = gather_hosts(store, &scoped, &keys, info.world_size, host_id)?;
    Ok((generation, joined))
}

// ---------------------------------------------------------------------------
// Everything at once

/// The outcome of a full rendezvous.
pub struct Rendezvous {
    pub info: ProcessInfo,
    /// The job secret every rank holds; the store and the other channels
    /// derive their keys from it.
    pub secret: JobSecret,
    /// The store, scoped to this job and initialisation.
    pub store: ScopedStore,
    /// On rank 0 (unless the store is external): the server, which must
    /// outlive every rank's use of the store.
    pub server: Option<TcpStoreServer>,
    pub hosts: HostMap,
    pub generation: u64,
}

/// Detects the process, loads the job secret, opens the store, agrees on
/// the generation and discovers the hosts. `host_id` defaults to [`host_id`].
pub fn establish(
    explicit: &Explicit,
    env: Env,
    timeout: Duration,
    host: Option<&str>,
) -> Result<Rendezvous> {
    let info = detect(explicit, env)?;
    let secret = job_secret(&info, env)?;
    let limits = store_limits(env, info.world_size)?;
    let id = host.map(str::to_string).unwrap_or_else(|| host_id(env));
    check_host_id(&id)?;
    let (store, server) = connect_store(&info, &secret, &limits, timeout)?;
    let store = Arc::new(store);
    let job = job_id(env);
    let (generation, joined) =
        meet(&store, &job, &info, &id, timeout).map_err(|source| Error::Meeting {
            rank: info.rank,
            world: info.world_size,
            source,
        })?;
    let hosts = host_map(info.rank, info.world_size, &joined)?;
    Ok(Rendezvous {
        info,
        secret,
        store: ScopedStore::new(store, scope(&job, generation)),
        server,
        hosts,
        generation,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::HashMap;

    pub(crate) const TEST_SECRET: &str = "rendezvous tests' job secret";

    pub(crate) fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn job_ids() {
        let j = |pairs: &[(&str, &str)]| job_id(&env_of(pairs));
        assert_eq!(j(&[]), "default");
        assert_eq!(j(&[("SHOAL_JOB_ID", "x"), ("SLURM_JOB_ID", "1")]), "x");
        assert_eq!(
            j(&[("TORCHELASTIC_RUN_ID", "r"), ("SLURM_JOB_ID", "1")]),
            "torchrun-r"
        );
        assert_eq!(
            j(&[("SLURM_JOB_ID", "1"), ("SLURM_STEP_ID", "2")]),
            "slurm-1.2"
        );
        assert_eq!(j(&[("OMPI_MCA_ess_base_jobid", "77")]), "ompi-77");
    }

    /// Runs `f(rank, env)` on `world` threads, each with its own environment.
    fn run_ranks<T: Send + 'static>(
        world: usize,
        extra: &[(&str, &str)],
        f: impl Fn(usize, &dyn Fn(&str) -> Option<String>) -> T + Send + Sync + 'static,
    ) -> Vec<T> {
        let f = Arc::new(f);
        let extra: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let threads: Vec<_> = (0..world)
            .map(|r| {
                let (f, mut vars) = (f.clone(), extra.clone());
                vars.push(("RANK".into(), r.to_string()));
                vars.push(("WORLD_SIZE".into(), world.to_string()));
                vars.push(("SHOAL_SECRET".into(), TEST_SECRET.into()));
                thread::spawn(move || {
                    let pairs: Vec<(&str, &str)> =
                        vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                    f(r, &env_of(&pairs))
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    fn free_port() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port().to_string()
    }

    #[test]
    fn establish_over_master_server() {
        let port = free_port();
        let extra = [
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", port.as_str()),
            ("SHOAL_JOB_ID", "j"),
        ];
        let results = run_ranks(4, &extra, |r, env| {
            let host = if r < 2 { "hA" } else { "hB" };
            let a = establish(
                &Explicit::default(),
                env,
                Duration::from_secs(20),
                Some(host),
            )
            .unwrap();
            // Keep rank 0's server alive until everyone is done with it.
            a.store.set(&format!("done/{r}"), b"1").unwrap();
            if r == 0 {
                (0..4).for_each(|p| drop(a.store.get(&format!("done/{p}")).unwrap()));
            }
            (a.generation, a.hosts, a.server.is_some())
        });
        for (r, (gen, hosts, served)) in results.into_iter().enumerate() {
            assert_eq!(gen, 0);
            assert_eq!(hosts.host_of, [0, 0, 1, 1]);
            assert_eq!(hosts.local_ranks, if r < 2 { [0, 1] } else { [2, 3] });
            assert_eq!(hosts.hosts, ["hA", "hB"]);
            assert_eq!(served, r == 0);
        }
    }

    #[test]
    fn establish_over_file_store_with_generations() {
        let dir = crate::store::tests::temp_dir("rdzv");
        let d = dir.to_string_lossy().to_string();
        let extra = [
            ("SHOAL_STORE_PATH", d.as_str()),
            ("SHOAL_JOB_ID", "jf"),
            ("SHOAL_HOST_ID", "one"),
        ];
        let gens = run_ranks(3, &extra, |_, env| {
            let t = Duration::from_secs(20);
            let a = establish(&Explicit::default(), env, t, None).unwrap();
            let b = establish(&Explicit::default(), env, t, None).unwrap();
            assert_eq!(a.hosts.local_ranks, [0, 1, 2]);
            assert!(a.server.is_none());
            (a.generation, b.generation, b.store.prefix().to_string())
        });
        for (ga, gb, prefix) in gens {
            assert_eq!((ga, gb), (0, 1));
            assert_eq!(prefix, "shoal/jf/1");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn single_process_needs_no_configuration() {
        let a = establish(
            &Explicit::default(),
            &env_of(&[]),
            Duration::from_secs(5),
            Some("h"),
        )
        .unwrap();
        assert_eq!(
            (a.info.world_size, a.hosts.local_ranks.clone()),
            (1, vec![0])
        );
        assert!(a.server.is_some());
    }

    #[test]
    fn bad_host_ids_and_a_missing_rank_0_are_clear_errors() {
        let dir = crate::store::tests::temp_dir("missing0");
        let d = dir.to_string_lossy().to_string();
        let env = env_of(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("SHOAL_STORE_PATH", &d),
            ("SHOAL_SECRET", TEST_SECRET),
        ]);
        let t = Duration::from_millis(200);
        let e = establish(&Explicit::default(), &env, t, Some("a\nb"))
            .err()
            .unwrap();
        assert!(matches!(&e, Error::BadHostId(id) if id == "a\nb"), "{e:?}");
        assert!(e.to_string().contains("one line"), "{e}");
        let e = establish(&Explicit::default(), &env, t, Some("h"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("rank 1 of 2")
                && e.contains("waiting for rank 0 to open the rendezvous")
                && e.contains("timed out after 0.2s"),
            "{e}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn master_addr_may_be_this_hosts_name() {
        let port = free_port();
        let host = hostname();
        let extra = [
            ("MASTER_ADDR", host.as_str()),
            ("MASTER_PORT", port.as_str()),
            ("SHOAL_JOB_ID", "named"),
        ];
        let gens = run_ranks(2, &extra, |r, env| {
            let a = establish(&Explicit::default(), env, Duration::from_secs(20), None).unwrap();
            a.store.set(&format!("done/{r}"), b"1").unwrap();
            if r == 0 {
                (0..2).for_each(|p| drop(a.store.get(&format!("done/{p}")).unwrap()));
            }
            a.generation
        });
        assert_eq!(gens, [0, 0]);
    }

    #[test]
    fn a_crashed_rendezvous_is_superseded() {
        let dir = crate::store::tests::temp_dir("crashed");
        let d = dir.to_string_lossy().to_string();
        let extra = [
            ("SHOAL_STORE_PATH", d.as_str()),
            ("SHOAL_JOB_ID", "c"),
            ("SHOAL_HOST_ID", "h"),
        ];
        // Rank 2 never comes: ranks 0 and 1 give up, the generation stays open.
        let failed = run_ranks(3, &extra, |r, env| {
            (r < 2).then(|| establish(&Explicit::default(), env, Duration::from_millis(300), None))
        });
        assert!(failed.iter().flatten().all(|a| a.is_err()));
        let gens = run_ranks(3, &extra, |r, env| {
            if r == 0 {
                thread::sleep(Duration::from_millis(200)); // the others find the stale one first
            }
            let t = Duration::from_secs(20);
            establish(&Explicit::default(), env, t, None)
                .unwrap()
                .generation
        });
        assert_eq!(gens, [1, 1, 1]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn two_processes_claiming_one_rank_are_refused() {
        let dir = crate::store::tests::temp_dir("claim");
        let d = dir.to_string_lossy().to_string();
        let base = [
            ("SHOAL_STORE_PATH", d.as_str()),
            ("SHOAL_JOB_ID", "twice"),
            ("SHOAL_HOST_ID", "h"),
            ("SHOAL_SECRET", TEST_SECRET),
            ("WORLD_SIZE", "3"),
        ];
        let join = |rank: &'static str| {
            let mut vars: Vec<(String, String)> = base
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            vars.push(("RANK".into(), rank.into()));
            thread::spawn(move || {
                let pairs: Vec<(&str, &str)> =
                    vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let t = Duration::from_secs(30);
                establish(&Explicit::default(), &env_of(&pairs), t, None)
                    .map(|a| a.generation)
                    .map_err(|e| e.to_string())
            })
        };
        let (zero, first, second) = (join("0"), join("1"), join("1"));
        // Rank 2 comes once both have claimed rank 1, so the generation is
        // still open for the second however late it runs. (A process that
        // comes after rank 0 closed it waits for the next one, as a rank of
        // the job's next initialisation would.)
        let store = crate::store::FileStore::new(&dir, Duration::from_secs(1)).unwrap();
        let claims = format!("{}/rdzv/claim/1", scope("twice", 0));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(store.check(&[&claims]).unwrap() && store.get(&claims).unwrap() == b"2") {
            assert!(Instant::now() < deadline, "rank 1 was not claimed twice");
            thread::sleep(Duration::from_millis(10));
        }
        let two = join("2");
        let results = [first.join().unwrap(), second.join().unwrap()];
        assert_eq!(zero.join().unwrap(), Ok(0));
        assert_eq!(two.join().unwrap(), Ok(0));
        let errors: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        assert_eq!(errors.len(), 1, "{results:?}");
        assert!(
            errors[0].contains("already joined initialisation 0 of job 'twice' as rank 1"),
            "{}",
            errors[0]
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
