//! In-network aggregation in the runtime: joining the switch job at init,
//! deciding when allreduce goes through the switch, and the ATP-style
//! fallback to host algorithms when the switch is unreachable, full,
//! refusing, or dies mid-collective.
//!
//! The world's switch job, joined at init, has the world's ranks as
//! members; a sub-group joins a switch job of its own members at its first
//! allreduce that could use the switch (`Ina::join_group`). After any failure every rank stops using the
//! switch (a rank that lost packets and one that got its result would
//! otherwise disagree about where the job's slots stand), and retries after
//! a back-off counted in allreduce calls: `SHOAL_INA_RETRY_CALLS` calls the
//! switch could have run, doubling after each failed retry up to
//! `SHOAL_INA_RETRY_MAX_CALLS`. Calls, not seconds, because every rank
//! makes the same calls: all of them retry at the same call without a
//! message, and the retry is a switch call like any other, whose outcome
//! the ranks agree on (re-admission, then the allreduce) before any goes
//! on, so no call mixes the switch and host algorithms.
//!
//! Keys (docs/security.md, "The aggregation switch"): every rank derives the
//! job's INA key from the job secret and the job's store scope, so nothing
//! secret passes through the store; rank 0 authenticates to the switches
//! with the switch secret, which authorised tenants share with the switch.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Mutex;

use shoal_bootstrap::small_file::read_text;
use shoal_ina::{InaClient, InaConfig, InaDType, InaError, InaKeys, InaOp, PeerCheck};
use shoal_plan::CostParams;
use shoal_transport::auth::Key;

use crate::config::InaSettings;
use crate::dtype::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::log;
use crate::secret::{key_of, JobSecret, MAX_SECRET_FILE_BYTES};
use crate::store::ScopedStore;

/// This rank's membership in the switch job.
pub struct Ina {
    client: Mutex<InaClient>,
    /// Whether the switch is in use, and when to try it again.
    state: Mutex<Recovery>,
    /// What a re-admission needs: the job's config and its store scope.
    config: InaConfig,
    store: ScopedStore,
    retry: Backoff,
}

/// The back-off of re-admission, in eligible allreduce calls.
#[derive(Clone, Copy, Debug)]
struct Backoff {
    /// Calls before the first retry (0: never retry).
    first: u64,
    /// The longest wait, in calls.
    max: u64,
}

impl Backoff {
    /// Calls to wait after the `failures`-th failure in a row.
    fn wait(&self, failures: u32) -> u64 {
        let doublings = failures.saturating_sub(1).min(63);
        self.first
            .saturating_mul(1 << doublings)
            .min(self.max.max(self.first))
    }
}

#[derive(Default)]
struct Recovery {
    /// Why the switch is not used now (`None`: it is).
    disabled: Option<String>,
    /// Failures since the switch last completed a call.
    failures: u32,
    /// Eligible calls still to run on host algorithms before a retry.
    calls_left: u64,
    /// The next switch call re-admits the job first.
    readmit: bool,
    /// A retry is under way: its failure doubles the back-off.
    retrying: bool,
    /// Re-admissions so far (each joins under its own store keys).
    generation: u32,
}

mod error;
pub use error::{JobOf, SwitchCallError, SwitchSecretError, Unavailable};

/// This rank's switch job, or why allreduce cannot use a switch.
pub type Membership = std::result::Result<Ina, Unavailable>;

impl Ina {
    /// Joins the job when `SHOAL_SWITCH` is set; otherwise, or when joining
    /// fails, the reason allreduce cannot use a switch. Collective: every rank
    /// calls it, with the job's store scope (`job` names the job's keys). A
    /// switch that cannot be used is a warning, not an error: allreduce then
    /// uses hosts. An invalid setting (`SHOAL_INA_TIMEOUT=inf`, an unreadable
    /// secret file) is an error naming it.
    pub fn join_from_env(
        rank: usize,
        world: usize,
        secret: &JobSecret,
        job: &ScopedStore,
        settings: &InaSettings,
    ) -> Result<Membership> {
        let env = |k: &str| std::env::var(k).ok();
        if !InaConfig::switch_configured(&env) {
            return Ok(Err(Unavailable::NotConfigured));
        }
        let keys = InaKeys {
            job: secret.key.derive(&format!("ina/{}", job.prefix())),
            switch: switch_secret(&env, None).map_err(|e| Error::invalid(e.to_string()))?,
        };
        let joined = match InaConfig::from_env(rank, world, keys, &env) {
            Ok(Some(mut cfg)) => {
                settings.apply(&mut cfg);
                InaClient::join(&cfg, &job.scope("ina")).map(|c| (c, cfg))
            }
            Ok(None) => return Ok(Err(Unavailable::NoSwitch)),
            Err(InaError::Config(reason)) => return Err(Error::invalid(reason)),
            Err(e) => Err(e),
        };
        Ok(match joined {
            Ok((client, config)) => {
                if rank == 0 {
                    tracing::info!("in-network aggregation: {}", client.admission());
                }
                Ok(Ina {
                    client: Mutex::new(client),
                    state: Mutex::new(Recovery::default()),
                    config,
                    store: job.scope("ina"),
                    retry: Backoff {
                        first: settings.retry_calls,
                        max: settings.retry_max_calls,
                    },
                })
            }
            Err(error) => {
                let reason = Unavailable::JoinFailed {
                    job: JobOf::World,
                    error,
                };
                // Worded as the communicator words a call's fallback
                // (`comm/switch.rs`), so a call asking for the switch later does
                // not repeat it: one warning per process.
                warn(&format!(
                    "allreduce falls back to host algorithms: {reason}"
                ));
                Err(reason)
            }
        })
    }

    /// Why the switch may not be used now (`None`: it may).
    pub fn unusable(&self) -> Option<String> {
        self.state.lock().unwrap().disabled.clone()
    }

    /// Whether the switch is in use: [`Ina::unusable`] without copying the
    /// reason, for the offer each eligible call asks for.
    pub fn usable(&self) -> bool {
        self.state.lock().unwrap().disabled.is_none()
    }

    /// A switch call failed on some rank: host algorithms until the next
    /// retry, which waits twice as long as the last.
    pub fn disable(&self, reason: &str) {
        let mut st = self.state.lock().unwrap();
        if st.disabled.is_some() && !st.retrying {
            return; // a call asked for the switch while it is away: no news
        }
        st.disabled = Some(reason.to_string());
        st.retrying = false;
        st.readmit = false;
        st.failures = st.failures.saturating_add(1);
        st.calls_left = self.retry.wait(st.failures);
    }

    /// Every rank agreed that a switch call worked: the back-off starts over.
    pub fn succeeded(&self) {
        let mut st = self.state.lock().unwrap();
        st.failures = 0;
        st.retrying = false;
    }

    /// A switch job of a sub-group: `rank` of `size` members, its keys and
    /// store keys its own (derived from the group's id, which every member
    /// computes alike). Collective over the group's members; a switch that
    /// cannot be used is a warning and the group uses host algorithms.
    pub fn join_group(&self, id: u32, rank: usize, size: usize) -> Membership {
        self.join_derived(rank, size, &format!("group {id}"), &format!("group{id}"))
            .map_err(|error| {
                let reason = Unavailable::JoinFailed {
                    job: JobOf::Group(id),
                    error,
                };
                warn(&format!(
                    "allreduce falls back to host algorithms: {reason}"
                ));
                reason
            })
    }

    /// Joins a switch job of its own for `rank` of `size` members, with job
    /// keys derived from this job's by `name` and store keys under `scope`
    /// (sub-groups, the shards of hierarchical allreduce); the client's
    /// error as it is.
    fn join_derived(
        &self,
        rank: usize,
        size: usize,
        name: &str,
        scope: &str,
    ) -> std::result::Result<Ina, InaError> {
        let mut config = self.config.clone();
        config.rank = rank;
        config.world = size;
        config.keys.job = self.config.keys.job.derive(name);
        let store = self.store.scope(scope);
        let client = InaClient::join(&config, &store)?;
        Ok(Ina {
            client: Mutex::new(client),
            state: Mutex::new(Recovery::default()),
            config,
            store,
            retry: self.retry,
        })
    }

    /// The switch job of shard `shard` of hierarchical allreduce: local rank
    /// `shard` of every host, `host` of `hosts` (see [`ShardJob`]). Its keys
    /// and store keys are derived from this job's and the shard's, and the
    /// attempt's, so a job joined again after a failure starts afresh.
    fn join_shard(&self, shard: usize, host: usize, hosts: usize, attempt: u32) -> Membership {
        let name = format!("shard {shard} attempt {attempt}");
        self.join_derived(host, hosts, &name, &format!("shard{shard}a{attempt}"))
            .map_err(|error| Unavailable::JoinFailed {
                job: JobOf::Shard { shard, attempt },
                error,
            })
    }

    /// Counts one allreduce the switch could run while it is away; true
    /// when this call is the retry (it then goes through the switch, which
    /// re-admits the job first). Every rank counts the same calls.
    pub fn retry_due(&self) -> bool {
        let mut st = self.state.lock().unwrap();
        if st.disabled.is_none() || self.retry.first == 0 {
            return false;
        }
        st.calls_left = st.calls_left.saturating_sub(1);
        if st.calls_left > 0 {
            return false;
        }
        // The switch counts as back from this call on, decided here (in
        // call order, on every rank alike) rather than when the retry has
        // run: calls prepared meanwhile route the same way on every rank.
        // If the retry fails, its call and those fall back like any other.
        st.disabled = None;
        st.readmit = true;
        true
    }

    /// Joins the switch job again when a retry is due (collective: every
    /// rank does it in the same call). The old membership is dropped: its
    /// sockets close and, on rank 0, its leases, which releases what a
    /// switch that is still alive holds of it.
    fn readmit_if_due(&self) -> std::result::Result<(), SwitchCallError> {
        let generation = {
            let mut st = self.state.lock().unwrap();
            if !st.readmit {
                return Ok(());
            }
            st.readmit = false;
            st.retrying = true;
            st.generation += 1;
            st.generation
        };
        let mut cfg = self.config.clone();
        cfg.key_prefix = format!("{}retry{generation}/", self.config.key_prefix);
        let client = InaClient::join(&cfg, &self.store).map_err(SwitchCallError::Readmission)?;
        if cfg.rank == 0 {
            tracing::info!("in-network aggregation re-admitted: {}", client.admission());
        }
        *self.client.lock().unwrap() = client;
        Ok(())
    }

    /// Sums (or min/max/avg) `buf` with every rank's through the switch.
    /// `peers` says whether the other ranks are alive (the transport's
    /// view): asked when results stop coming, so a dead rank ends the call
    /// within milliseconds rather than after `SHOAL_INA_TIMEOUT`.
    /// What the last allreduce did on the wire (for traces).
    pub fn last_call(&self) -> shoal_ina::CallStats {
        self.client.lock().unwrap().last_call().clone()
    }

    pub fn allreduce(
        &self,
        buf: &mut [u8],
        dtype: DType,
        op: ReduceOp,
        peers: PeerCheck<'_>,
    ) -> std::result::Result<(), SwitchCallError> {
        let (dt, op) = wire_types(dtype, op).ok_or(SwitchCallError::Unsupported { dtype, op })?;
        self.readmit_if_due()?;
        if let Some(reason) = self.unusable() {
            return Err(SwitchCallError::Away(reason));
        }
        self.client
            .lock()
            .unwrap()
            .allreduce_checked(buf, dt, op, peers)
            .map_err(SwitchCallError::Failed)
    }
}

/// This rank's switch job in hierarchical allreduce (`hierarchical_ina`):
/// after the host's reduce-scatter, local rank `j` of every host holds its
/// host's sum of shard `j`, and those ranks sum it through a switch job of
/// their own, one job per shard, so every local rank drives the network at
/// once and the switch's threads serve the shards side by side. The job is
/// joined at the first call that needs it (every rank makes that call, so
/// each shard's ranks join together) and dropped after a failed call, to be
/// joined afresh when the communicator's switch is back (`ina.rs`'s
/// back-off decides that for the whole communicator).
#[derive(Default)]
pub struct ShardJob {
    joined: Mutex<Option<Membership>>,
    /// Joins so far: each one under keys of its own.
    attempts: Mutex<u32>,
}

impl ShardJob {
    /// Sums `buf` (this rank's shard) over the hosts through the shard's
    /// switch job, joining it first if needed (`base` is the communicator's
    /// membership: its switches, keys and store scope). Avg is summed here
    /// and divided by the caller, who knows the whole group's size.
    pub fn allreduce(
        &self,
        base: &Ina,
        (shard, host, hosts): (usize, usize, usize),
        buf: &mut [u8],
        dtype: DType,
        op: ReduceOp,
        peers: PeerCheck<'_>,
    ) -> std::result::Result<(), SwitchCallError> {
        let mut joined = self.joined.lock().unwrap();
        if joined.is_none() {
            let mut attempts = self.attempts.lock().unwrap();
            *attempts += 1;
            *joined = Some(base.join_shard(shard, host, hosts, *attempts));
        }
        let job = joined
            .as_ref()
            .unwrap()
            .as_ref()
            .map_err(|why| why.clone())?;
        let op = if op == ReduceOp::Avg {
            ReduceOp::Sum
        } else {
            op
        };
        job.allreduce(buf, dtype, op, peers)
    }

    /// A call failed on some rank: the next one joins a fresh job (the old
    /// one's slots may hold a half-done call; dropping it releases them).
    pub fn reset(&self) {
        *self.joined.lock().unwrap() = None;
    }

    /// What the last switch call did on the wire (for traces).
    pub fn last_call(&self) -> shoal_ina::CallStats {
        match &*self.joined.lock().unwrap() {
            Some(Ok(job)) => job.last_call(),
            _ => Default::default(),
        }
    }
}

/// The key of the switch secret, from (first match) `file` (the daemon's
/// `--secret-file`), `SHOAL_SWITCH_SECRET`, `SHOAL_SWITCH_SECRET_FILE`, else
/// the per-user secret file (`~/.config/shoal/secret`, created on first
/// use), so that one user's switch and jobs agree without configuration.
/// The same function serves the daemon and the ranks, so both derive the
/// same key from the same secret.
pub fn switch_secret(
    env: &dyn Fn(&str) -> Option<String>,
    file: Option<&Path>,
) -> std::result::Result<Key, SwitchSecretError> {
    let key = if let Some(path) = file {
        read_shared_secret(path, "--secret-file")?
    } else if let Some(s) = env("SHOAL_SWITCH_SECRET").filter(|s| !s.is_empty()) {
        key_of(&s, "switch", "SHOAL_SWITCH_SECRET").map_err(SwitchSecretError::Key)?
    } else if let Some(p) = env("SHOAL_SWITCH_SECRET_FILE").filter(|s| !s.is_empty()) {
        read_shared_secret(Path::new(&p), "SHOAL_SWITCH_SECRET_FILE")?
    } else {
        // The per-user file, as the job secret uses it without SHOAL_SECRET.
        let per_user = |k: &str| match k {
            "SHOAL_SECRET" | "SHOAL_SECRET_FILE" => None,
            k => env(k),
        };
        let key = JobSecret::load(&per_user).map_err(SwitchSecretError::NoSecret)?;
        return Ok(key.key.derive("ina switch"));
    };
    Ok(key.derive("ina switch"))
}

/// A switch secret file is shared by the switch and its tenants, so it may
/// belong to another user and be readable by a group (the tenants'), but
/// never by everyone.
fn read_shared_secret(path: &Path, what: &str) -> std::result::Result<Key, SwitchSecretError> {
    let unreadable = |source| SwitchSecretError::Unreadable {
        what: what.to_string(),
        path: path.to_path_buf(),
        source,
    };
    let meta = fs::metadata(path).map_err(unreadable)?;
    let mode = meta.permissions().mode();
    if mode & 0o007 != 0 {
        return Err(SwitchSecretError::OpenToEveryone {
            what: what.to_string(),
            path: path.to_path_buf(),
            mode: mode & 0o777,
        });
    }
    let text = read_text(path, MAX_SECRET_FILE_BYTES).map_err(unreadable)?;
    key_of(
        text.trim(),
        "switch",
        &format!("{what} ({})", path.display()),
    )
    .map_err(SwitchSecretError::Key)
}

/// The switch's element type and op for a call, if it can aggregate them.
pub fn wire_types(dtype: DType, op: ReduceOp) -> Option<(InaDType, InaOp)> {
    let dt = match dtype {
        DType::F32 => InaDType::F32,
        DType::F16 => InaDType::F16,
        DType::BF16 => InaDType::Bf16,
        DType::I32 => InaDType::I32,
        _ => return None,
    };
    let op = match op {
        ReduceOp::Sum => InaOp::Sum,
        ReduceOp::Avg => InaOp::Avg,
        ReduceOp::Min => InaOp::Min,
        ReduceOp::Max => InaOp::Max,
        _ => return None,
    };
    Some((dt, op))
}

/// Each worker sends its data once and receives the result once, both
/// directions at once: about one message's latency each way and the bytes
/// once over its link (against ring's `2 (p-1)/p` of them). Workers that
/// share a host share its link: `per_link` of them send through the busiest.
pub fn cost(bytes: usize, per_link: usize, params: &CostParams) -> f64 {
    2.0 * params.alpha + (bytes * per_link.max(1)) as f64 * params.beta
}

/// Hierarchical allreduce through the switch (`hierarchical_ina`) on
/// `hosts` hosts of `local` ranks: a ring reduce-scatter and a ring
/// allgather of `bytes` inside each host (shared memory, `alpha_local`,
/// `beta_local`), and between them every local rank sends its shard to the
/// switch at once, so a host's link carries the `bytes` once (against flat
/// `ina`'s `local` times).
pub fn hierarchical_cost(bytes: usize, local: usize, params: &CostParams) -> f64 {
    let local = local.max(1);
    let shard = bytes.div_ceil(local) as f64;
    let steps = (local - 1) as f64;
    let host_rs = steps * (params.alpha_local + shard * (params.beta_local + params.gamma));
    let host_ag = steps * (params.alpha_local + shard * params.beta_local);
    host_rs + host_ag + cost(bytes.div_ceil(local), local, params)
}

/// A runtime warning (a switch that cannot be used, a fallback), once per
/// process however many communicators and calls meet it.
pub fn warn(message: &str) {
    if log::first_time(message) {
        tracing::warn!("{message}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_back_off_doubles_up_to_its_cap() {
        let b = Backoff { first: 8, max: 100 };
        let waits: Vec<u64> = (1..=6).map(|f| b.wait(f)).collect();
        assert_eq!(waits, [8, 16, 32, 64, 100, 100]);
        assert_eq!(b.wait(u32::MAX), 100, "no overflow");
        let never = Backoff { first: 0, max: 5 };
        assert_eq!(never.wait(3), 0);
    }
    use std::collections::HashMap;
    use std::path::PathBuf;

    fn env_of(pairs: &[(&str, String)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn secret_file(tag: &str, text: &str, mode: u32) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("shoal-switch-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("secret");
        fs::write(&path, text).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn switch_secret_sources_agree_and_come_in_order() {
        let text = "a shared switch secret";
        let file = secret_file("order", &format!("{text}\n"), 0o640);
        let by_env = switch_secret(&env_of(&[("SHOAL_SWITCH_SECRET", text.into())]), None).unwrap();
        let by_file = switch_secret(
            &env_of(&[("SHOAL_SWITCH_SECRET_FILE", file.display().to_string())]),
            None,
        );
        // A group (the switch's tenants) may read the file.
        assert_eq!(by_env, by_file.unwrap());
        // The daemon's --secret-file wins over the environment.
        let other = env_of(&[("SHOAL_SWITCH_SECRET", "another secret, long".into())]);
        assert_eq!(switch_secret(&other, Some(&file)).unwrap(), by_env);
        fs::remove_dir_all(file.parent().unwrap()).unwrap();
    }

    #[test]
    fn bad_switch_secrets_are_refused_naming_the_source() {
        let err = switch_secret(&env_of(&[("SHOAL_SWITCH_SECRET", "short".into())]), None);
        let err = err.unwrap_err();
        assert!(
            matches!(
                &err,
                SwitchSecretError::Key(crate::secret::SecretError::TooShort { .. })
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("SHOAL_SWITCH_SECRET"), "{err}");
        let file = secret_file("mode", "a shared switch secret", 0o644);
        let err = switch_secret(&env_of(&[]), Some(&file)).unwrap_err();
        assert!(
            matches!(&err, SwitchSecretError::OpenToEveryone { what, mode: 0o644, .. } if what == "--secret-file"),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("--secret-file") && text.contains("every user"),
            "{text}"
        );
        let missing = file.with_file_name("missing");
        let env = env_of(&[("SHOAL_SWITCH_SECRET_FILE", missing.display().to_string())]);
        let err = switch_secret(&env, None).unwrap_err();
        assert!(
            matches!(&err, SwitchSecretError::Unreadable { what, .. } if what == "SHOAL_SWITCH_SECRET_FILE"),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("SHOAL_SWITCH_SECRET_FILE"),
            "{err}"
        );
        fs::remove_dir_all(file.parent().unwrap()).unwrap();
    }

    #[test]
    fn without_configuration_the_per_user_file_is_the_switch_secret() {
        let home = secret_file("home", "", 0o600)
            .parent()
            .unwrap()
            .to_path_buf();
        let env = env_of(&[("HOME", home.display().to_string())]);
        let default = switch_secret(&env, None).unwrap();
        let file = home.join(".config/shoal/secret");
        let explicit = env_of(&[("SHOAL_SWITCH_SECRET_FILE", file.display().to_string())]);
        assert_eq!(switch_secret(&explicit, None).unwrap(), default);
        fs::remove_dir_all(home).unwrap();
    }
}
