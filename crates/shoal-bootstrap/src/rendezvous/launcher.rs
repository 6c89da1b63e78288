//! Who this process is: rank, world and local layout from explicit arguments
//! or a launcher's environment convention (`shoal run`/torchrun, Slurm,
//! OpenMPI), and where the store every rank meets at lives.

use std::path::PathBuf;

use super::slurm::{slurm_first_host, slurm_local_world, slurm_port};
use super::{nonempty, Env};
use crate::{Error, Result};

/// `MASTER_PORT` when none is given (torch's default).
pub const DEFAULT_MASTER_PORT: u16 = 29500;

/// Values passed by the caller (e.g. `shoal.init(rank=..., world_size=..., addr=...)`);
/// they override the environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Explicit {
    pub rank: Option<usize>,
    pub world_size: Option<usize>,
    /// `host:port` of the master: rank 0 serves the store there.
    pub addr: Option<String>,
}

/// Who this process is and where its store lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    pub rank: usize,
    pub world_size: usize,
    pub local_rank: Option<usize>,
    pub local_world_size: Option<usize>,
    /// Host where rank 0 serves the store (unless an external store is set).
    pub master_addr: Option<String>,
    pub master_port: Option<u16>,
    /// `SHOAL_STORE_ADDR`: a standalone store server; overrides the master.
    pub store_addr: Option<String>,
    /// `SHOAL_STORE_PATH`: a shared directory used as a [`FileStore`](crate::store::FileStore); overrides both.
    pub store_path: Option<PathBuf>,
    /// Where rank and world came from: "explicit", "shoal", "torchrun", "slurm",
    /// "openmpi" or "default".
    pub source: &'static str,
}

/// Rank, world and local layout as one launcher convention reports them,
/// plus where that convention puts the master by default.
struct Found {
    source: &'static str,
    rank: usize,
    world: usize,
    local_rank: Option<usize>,
    local_world: Option<usize>,
    default_master: Option<String>,
    default_port: u16,
}

/// Resolves this process's identity: explicit values win, then the
/// launchers' environment conventions in the order of the module docs.
/// Invalid or inconsistent values are errors naming the variable and value.
pub fn detect(explicit: &Explicit, env: Env) -> Result<ProcessInfo> {
    let found = match from_explicit(explicit)? {
        Some(f) => f,
        None => match from_torchrun(env)? {
            Some(f) => f,
            None => match from_slurm(env)? {
                Some(f) => f,
                None => from_openmpi(env)?.unwrap_or_else(single_process),
            },
        },
    };
    let (master_addr, master_port) = resolve_master(explicit, &found, env)?;
    let info = ProcessInfo {
        rank: found.rank,
        world_size: found.world,
        local_rank: found.local_rank,
        local_world_size: found.local_world,
        master_addr,
        master_port,
        store_addr: store_addr(env)?,
        store_path: nonempty(env, "SHOAL_STORE_PATH").map(PathBuf::from),
        source: found.source,
    };
    require_store(&info)?;
    Ok(info)
}

/// [`detect`] on the process's real environment.
pub fn detect_from_process_env(explicit: &Explicit) -> Result<ProcessInfo> {
    detect(explicit, &|k| std::env::var(k).ok())
}

/// Parses an optional non-negative integer variable.
pub(super) fn num(env: Env, var: &str) -> Result<Option<usize>> {
    nonempty(env, var)
        .map(|v| {
            v.parse()
                .map_err(|_| Error::bad(var, &v, "is not a non-negative integer"))
        })
        .transpose()
}

/// Parses a variable that must be present once its convention is in use.
fn required(env: Env, var: &'static str, because: &'static str) -> Result<usize> {
    num(env, var)?.ok_or_else(|| missing(because, var))
}

/// `set` is set, but `name` is not.
fn missing(set: &'static str, name: &'static str) -> Error {
    Error::MissingVariable {
        set,
        missing: vec![name],
    }
}

/// Checks `rank < world` and `world >= 1`, naming the variables on failure.
fn check_rank(rank_var: &str, rank: usize, world_var: &str, world: usize) -> Result<()> {
    if world == 0 {
        return Err(Error::bad(
            world_var,
            0,
            "is not a world size: it must be at least 1",
        ));
    }
    if rank >= world {
        let why = format!("is not below {world_var}=\"{world}\"");
        return Err(Error::bad(rank_var, rank, why));
    }
    Ok(())
}

/// Names of the four variables of one convention, for error messages.
struct Vars {
    rank: &'static str,
    world: &'static str,
    local_rank: &'static str,
    local_world: &'static str,
}

/// Validates a convention's values and packs them into a [`Found`].
fn found(
    source: &'static str,
    vars: &Vars,
    (rank, world): (usize, usize),
    (local_rank, local_world): (Option<usize>, Option<usize>),
) -> Result<Found> {
    check_rank(vars.rank, rank, vars.world, world)?;
    if let Some(lw) = local_world {
        if lw > world {
            let why = format!("exceeds {}=\"{world}\"", vars.world);
            return Err(Error::bad(vars.local_world, lw, why));
        }
        if let Some(lr) = local_rank {
            check_rank(vars.local_rank, lr, vars.local_world, lw)?;
        }
    }
    Ok(Found {
        source,
        rank,
        world,
        local_rank,
        local_world,
        default_master: None,
        default_port: DEFAULT_MASTER_PORT,
    })
}

fn from_explicit(e: &Explicit) -> Result<Option<Found>> {
    let (rank, world) = match (e.rank, e.world_size) {
        (None, None) => return Ok(None),
        (Some(r), Some(w)) => (r, w),
        (rank, world_size) => return Err(Error::HalfExplicit { rank, world_size }),
    };
    let vars = Vars {
        rank: "rank",
        world: "world_size",
        local_rank: "",
        local_world: "",
    };
    found("explicit", &vars, (rank, world), (None, None)).map(Some)
}

fn from_torchrun(env: Env) -> Result<Option<Found>> {
    let (rank, world) = match (num(env, "RANK")?, num(env, "WORLD_SIZE")?) {
        (None, None) => return Ok(None),
        (Some(r), Some(w)) => (r, w),
        (Some(_), None) => return Err(missing("RANK", "WORLD_SIZE")),
        (None, Some(_)) => return Err(missing("WORLD_SIZE", "RANK")),
    };
    let source = if env("SHOAL_JOB_ID").is_some() && env("TORCHELASTIC_RUN_ID").is_none() {
        "shoal"
    } else {
        "torchrun"
    };
    let vars = Vars {
        rank: "RANK",
        world: "WORLD_SIZE",
        local_rank: "LOCAL_RANK",
        local_world: "LOCAL_WORLD_SIZE",
    };
    let local = (num(env, "LOCAL_RANK")?, num(env, "LOCAL_WORLD_SIZE")?);
    found(source, &vars, (rank, world), local).map(Some)
}

fn from_slurm(env: Env) -> Result<Option<Found>> {
    // SLURM_PROCID is set by srun only; inside a bare salloc shell it is
    // absent, and that shell is a single process, not a task of a job step.
    let Some(rank) = num(env, "SLURM_PROCID")? else {
        return Ok(None);
    };
    let world = match num(env, "SLURM_NTASKS")? {
        Some(w) => w,
        None => num(env, "SLURM_NPROCS")?.ok_or_else(|| Error::MissingVariable {
            set: "SLURM_PROCID",
            missing: vec!["SLURM_NTASKS", "SLURM_NPROCS"],
        })?,
    };
    let vars = Vars {
        rank: "SLURM_PROCID",
        world: "SLURM_NTASKS",
        local_rank: "SLURM_LOCALID",
        local_world: "SLURM_NTASKS_PER_NODE",
    };
    let local = (num(env, "SLURM_LOCALID")?, slurm_local_world(env)?);
    let mut f = found("slurm", &vars, (rank, world), local)?;
    f.default_master = slurm_first_host(env)?;
    f.default_port = match num(env, "SLURM_JOB_ID")? {
        Some(job) => slurm_port(job),
        None => DEFAULT_MASTER_PORT,
    };
    Ok(Some(f))
}

fn from_openmpi(env: Env) -> Result<Option<Found>> {
    let Some(rank) = num(env, "OMPI_COMM_WORLD_RANK")? else {
        return Ok(None);
    };
    let world = required(env, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")?;
    let vars = Vars {
        rank: "OMPI_COMM_WORLD_RANK",
        world: "OMPI_COMM_WORLD_SIZE",
        local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
        local_world: "OMPI_COMM_WORLD_LOCAL_SIZE",
    };
    let local = (
        num(env, "OMPI_COMM_WORLD_LOCAL_RANK")?,
        num(env, "OMPI_COMM_WORLD_LOCAL_SIZE")?,
    );
    found("openmpi", &vars, (rank, world), local).map(Some)
}

fn single_process() -> Found {
    Found {
        source: "default",
        rank: 0,
        world: 1,
        local_rank: Some(0),
        local_world: Some(1),
        default_master: None,
        default_port: DEFAULT_MASTER_PORT,
    }
}

/// Master address and port: explicit `addr`, else `MASTER_ADDR` /
/// `MASTER_PORT`, else the convention's defaults.
fn resolve_master(
    explicit: &Explicit,
    found: &Found,
    env: Env,
) -> Result<(Option<String>, Option<u16>)> {
    if let Some(addr) = &explicit.addr {
        let (host, port) = split_host_port(addr).map_err(|why| Error::bad("addr", addr, why))?;
        return Ok((Some(host), Some(port)));
    }
    let host = nonempty(env, "MASTER_ADDR").or_else(|| found.default_master.clone());
    let port = match nonempty(env, "MASTER_PORT") {
        Some(p) => parse_port(&p).map_err(|why| Error::bad("MASTER_PORT", &p, why))?,
        None => found.default_port,
    };
    let port = if truthy(env, "TORCHELASTIC_USE_AGENT_STORE") {
        // torchrun's agent already serves torch's store on MASTER_PORT.
        port.checked_add(1).ok_or_else(|| {
            Error::bad(
                "MASTER_PORT",
                port,
                "leaves no port for shoal's store (MASTER_PORT + 1 under a torchrun agent)",
            )
        })?
    } else {
        port
    };
    let port = host.as_ref().map(|_| port);
    Ok((host, port))
}

fn truthy(env: Env, var: &str) -> bool {
    matches!(
        nonempty(env, var)
            .map(|v| v.to_ascii_lowercase())
            .as_deref(),
        Some("1" | "true" | "yes")
    )
}

/// A port number, or why `p` is none.
fn parse_port(p: &str) -> std::result::Result<u16, &'static str> {
    match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("is not a port number (1-65535)"),
    }
}

/// Splits `host:port` (also `[v6addr]:port`) into its parts, or says why
/// `addr` is not one (to follow the variable that holds it).
pub fn split_host_port(addr: &str) -> std::result::Result<(String, u16), &'static str> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or("is not of the form host:port")?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err("has an empty host");
    }
    Ok((host.to_string(), parse_port(port)?))
}

fn store_addr(env: Env) -> Result<Option<String>> {
    let Some(addr) = nonempty(env, "SHOAL_STORE_ADDR") else {
        return Ok(None);
    };
    split_host_port(&addr).map_err(|why| Error::bad("SHOAL_STORE_ADDR", &addr, why))?;
    Ok(Some(addr))
}

/// Several processes need somewhere to meet.
fn require_store(info: &ProcessInfo) -> Result<()> {
    let has_store =
        info.master_addr.is_some() || info.store_addr.is_some() || info.store_path.is_some();
    if info.world_size > 1 && !has_store {
        return Err(Error::NoStore {
            rank: info.rank,
            world: info.world_size,
            launcher: info.source,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rendezvous::tests::env_of;

    fn det(pairs: &[(&str, &str)]) -> Result<ProcessInfo> {
        detect(&Explicit::default(), &env_of(pairs))
    }

    fn err(pairs: &[(&str, &str)]) -> String {
        det(pairs).unwrap_err().to_string()
    }

    #[test]
    fn errors_say_what_went_wrong_by_variant() {
        let e = det(&[("RANK", "x"), ("WORLD_SIZE", "2")]).unwrap_err();
        assert!(
            matches!(&e, Error::BadVariable { name, value, .. } if name == "RANK" && value == "x"),
            "{e:?}"
        );
        let e = det(&[("RANK", "1")]).unwrap_err();
        assert!(
            matches!(&e, Error::MissingVariable { set: "RANK", missing } if missing == &["WORLD_SIZE"]),
            "{e:?}"
        );
        let e = det(&[("RANK", "1"), ("WORLD_SIZE", "2")]).unwrap_err();
        assert!(
            matches!(
                e,
                Error::NoStore {
                    rank: 1,
                    world: 2,
                    ..
                }
            ),
            "{e:?}"
        );
    }

    #[test]
    fn nothing_set_is_a_single_process() {
        let i = det(&[]).unwrap();
        assert_eq!((i.rank, i.world_size, i.source), (0, 1, "default"));
        assert_eq!(
            (i.master_addr, i.store_addr, i.store_path),
            (None, None, None)
        );
    }

    #[test]
    fn explicit_wins_over_environment() {
        let env = env_of(&[("RANK", "3"), ("WORLD_SIZE", "4"), ("MASTER_ADDR", "m")]);
        let ex = Explicit {
            rank: Some(1),
            world_size: Some(2),
            addr: Some("h:1234".into()),
        };
        let i = detect(&ex, &env).unwrap();
        assert_eq!((i.rank, i.world_size, i.source), (1, 2, "explicit"));
        assert_eq!(
            (i.master_addr.as_deref(), i.master_port),
            (Some("h"), Some(1234))
        );
        // Explicit rank/world with the master from the environment.
        let ex = Explicit {
            rank: Some(0),
            world_size: Some(2),
            addr: None,
        };
        let i = detect(&ex, &env).unwrap();
        assert_eq!(
            (i.master_addr.as_deref(), i.master_port),
            (Some("m"), Some(29500))
        );
    }

    #[test]
    fn explicit_errors() {
        let e = |ex: Explicit| detect(&ex, &env_of(&[])).unwrap_err().to_string();
        let msg = e(Explicit {
            rank: Some(1),
            ..Default::default()
        });
        assert!(
            msg.contains("together") && msg.contains("world_size=None"),
            "{msg}"
        );
        let msg = e(Explicit {
            rank: Some(2),
            world_size: Some(2),
            addr: Some("h:1".into()),
        });
        assert!(
            msg.contains("rank=\"2\" is not below world_size=\"2\""),
            "{msg}"
        );
        let msg = e(Explicit {
            rank: Some(0),
            world_size: Some(2),
            addr: Some("h".into()),
        });
        assert!(
            msg.contains("addr=\"h\"") && msg.contains("host:port"),
            "{msg}"
        );
        let msg = e(Explicit {
            rank: Some(0),
            world_size: Some(2),
            addr: None,
        });
        assert!(
            msg.contains("MASTER_ADDR") && msg.contains("SHOAL_STORE_PATH"),
            "{msg}"
        );
    }

    #[test]
    fn torchrun_convention() {
        let i = det(&[
            ("RANK", "5"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "4"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "1234"),
            ("TORCHELASTIC_RUN_ID", "abc"),
        ])
        .unwrap();
        assert_eq!(
            (i.rank, i.world_size, i.local_rank, i.local_world_size),
            (5, 8, Some(1), Some(4))
        );
        assert_eq!(
            (i.master_addr.as_deref(), i.master_port),
            (Some("10.0.0.1"), Some(1234))
        );
        assert_eq!(i.source, "torchrun");
    }

    #[test]
    fn shoal_run_convention_and_agent_store_port() {
        let base = [
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
        ];
        let i = det(&[
            &base[..],
            &[("SHOAL_JOB_ID", "u1"), ("MASTER_PORT", "4000")],
        ]
        .concat())
        .unwrap();
        assert_eq!((i.source, i.master_port), ("shoal", Some(4000)));
        let i = det(&[&base[..], &[("TORCHELASTIC_USE_AGENT_STORE", "True")]].concat()).unwrap();
        assert_eq!(i.master_port, Some(29501));
    }

    #[test]
    fn torchrun_errors_name_variable_and_value() {
        let m = [("MASTER_ADDR", "h")];
        let with = |extra: &[(&str, &str)]| err(&[&m[..], extra].concat());
        assert!(with(&[("RANK", "1")]).contains("RANK is set but WORLD_SIZE is not"));
        assert!(with(&[("WORLD_SIZE", "2")]).contains("WORLD_SIZE is set but RANK is not"));
        let e = with(&[("RANK", "x"), ("WORLD_SIZE", "2")]);
        assert!(
            e.contains("RANK=\"x\" is not a non-negative integer"),
            "{e}"
        );
        let e = with(&[("RANK", "2"), ("WORLD_SIZE", "2")]);
        assert!(
            e.contains("RANK=\"2\" is not below WORLD_SIZE=\"2\""),
            "{e}"
        );
        let e = with(&[("RANK", "0"), ("WORLD_SIZE", "0")]);
        assert!(
            e.contains("WORLD_SIZE=\"0\"") && e.contains("at least 1"),
            "{e}"
        );
        let e = with(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "70000")]);
        assert!(
            e.contains("MASTER_PORT=\"70000\" is not a port number"),
            "{e}"
        );
        let e = with(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "2"),
            ("LOCAL_WORLD_SIZE", "2"),
        ]);
        assert!(
            e.contains("LOCAL_RANK=\"2\" is not below LOCAL_WORLD_SIZE=\"2\""),
            "{e}"
        );
        let e = with(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_WORLD_SIZE", "3"),
        ]);
        assert!(
            e.contains("LOCAL_WORLD_SIZE=\"3\" exceeds WORLD_SIZE=\"2\""),
            "{e}"
        );
        let e = err(&[("RANK", "0"), ("WORLD_SIZE", "2")]);
        assert!(e.contains("no store") && e.contains("MASTER_ADDR"), "{e}");
    }

    #[test]
    fn slurm_convention() {
        let i = det(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "7"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NODEID", "2"),
            ("SLURM_TASKS_PER_NODE", "2(x3),1"),
            ("SLURM_JOB_NODELIST", "gpu[007-009,012],cpu1"),
            ("SLURM_JOB_ID", "123456"),
        ])
        .unwrap();
        assert_eq!((i.rank, i.world_size, i.source), (5, 7, "slurm"));
        assert_eq!((i.local_rank, i.local_world_size), (Some(1), Some(2)));
        assert_eq!(
            (i.master_addr.as_deref(), i.master_port),
            (Some("gpu007"), Some(23456))
        );
    }

    #[test]
    fn slurm_overrides_and_variants() {
        let i = det(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_NTASKS_PER_NODE", "4"),
            ("SLURM_TASKS_PER_NODE", "garbage"),
            ("SLURM_NODELIST", "n1"),
            ("MASTER_ADDR", "login"),
            ("MASTER_PORT", "5000"),
        ])
        .unwrap();
        assert_eq!(i.local_world_size, Some(4));
        assert_eq!(
            (i.master_addr.as_deref(), i.master_port),
            (Some("login"), Some(5000))
        );
        // Uniform tasks per node needs no SLURM_NODEID; the step list wins.
        let i = det(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_TASKS_PER_NODE", "2(x2)"),
            ("SLURM_STEP_NODELIST", "b[3-4]"),
            ("SLURM_JOB_NODELIST", "a[1-9]"),
        ])
        .unwrap();
        assert_eq!(
            (i.local_world_size, i.master_addr.as_deref()),
            (Some(2), Some("b3"))
        );
        // Torchrun variables take precedence over Slurm's.
        let i = det(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "4"),
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
        ])
        .unwrap();
        assert_eq!(i.source, "torchrun");
    }

    #[test]
    fn slurm_errors() {
        let e = err(&[("SLURM_PROCID", "0")]);
        assert!(e.contains("neither SLURM_NTASKS nor SLURM_NPROCS"), "{e}");
        let i = det(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NPROCS", "2"),
            ("SLURM_NODELIST", "n"),
        ]);
        assert_eq!(i.unwrap().world_size, 2);
        let e = err(&[
            ("SLURM_PROCID", "4"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_NODELIST", "n"),
        ]);
        assert!(
            e.contains("SLURM_PROCID=\"4\" is not below SLURM_NTASKS=\"4\""),
            "{e}"
        );
        let e = err(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_NODELIST", "n[1-"),
        ]);
        assert!(e.contains("SLURM_NODELIST=\"n[1-\""), "{e}");
        let e = err(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_TASKS_PER_NODE", "2(x"),
        ]);
        assert!(e.contains("SLURM_TASKS_PER_NODE=\"2(x\""), "{e}");
        let e = err(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_NODEID", "5"),
            ("SLURM_TASKS_PER_NODE", "1(x2)"),
        ]);
        assert!(e.contains("SLURM_NODEID=\"5\""), "{e}");
    }

    #[test]
    fn openmpi_convention() {
        let env = [
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("SHOAL_STORE_ADDR", "store:7000"),
        ];
        let i = det(&env).unwrap();
        assert_eq!(
            (i.rank, i.world_size, i.local_rank, i.local_world_size),
            (3, 4, Some(1), Some(2))
        );
        assert_eq!(
            (i.source, i.store_addr.as_deref(), i.master_addr),
            ("openmpi", Some("store:7000"), None)
        );
        let e = err(&env[..4]);
        assert!(e.contains("no store"), "{e}");
        let e = err(&[("OMPI_COMM_WORLD_RANK", "0")]);
        assert!(e.contains("OMPI_COMM_WORLD_SIZE"), "{e}");
        let e = err(&[&env[..], &[("OMPI_COMM_WORLD_LOCAL_RANK", "x")]].concat());
        assert!(e.contains("OMPI_COMM_WORLD_LOCAL_RANK=\"x\""), "{e}");
    }

    #[test]
    fn store_variables() {
        let i = det(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("SHOAL_STORE_PATH", "/shared/rdzv"),
        ])
        .unwrap();
        assert_eq!(i.store_path, Some(PathBuf::from("/shared/rdzv")));
        let e = err(&[("SHOAL_STORE_ADDR", "nohost")]);
        assert!(e.contains("SHOAL_STORE_ADDR=\"nohost\""), "{e}");
        assert_eq!(
            split_host_port("[::1]:80").unwrap(),
            ("::1".to_string(), 80)
        );
        assert!(split_host_port(":80").is_err());
    }
}
