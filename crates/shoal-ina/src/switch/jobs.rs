//! The job table: admission, release and the fair share of switch memory.
//!
//! Memory is a budget of slot copies (`memory / slot_bytes`). A job's pool
//! size (`slots`) fixes how sequence numbers map to slots and never changes;
//! what is re-shared as jobs come and go is the window cap that results carry
//! (`cwnd_cap = copies / 2 / active jobs`, PANAMA's `memory / num_jobs`),
//! which bounds the copies each job keeps busy. The cap is also bounded by
//! the data socket's receive buffer, shared the same way among jobs and
//! then among each job's members, so that a full window of every member is
//! queued, not dropped, while the switch core catches up.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use crate::control::{AdmitOk, AdmitReq, ErrCode, Uplink};
use crate::mac::PacketKey;
use crate::proto::{WireType, MAX_SLOTS};

use super::core::Shard;
use super::metrics::{JobStats, Metrics};
use super::slots::{SlotCopy, MAX_MEMBERS};
use super::SwitchConfig;

/// A job's window may not be cut below this by re-sharing; admission of a
/// job that would push the share under it is refused as Full.
pub const MIN_SHARE_SLOTS: usize = 2;

pub struct Job {
    pub id: u32,
    /// Tags the job's packets, both ways (registered at admission).
    pub key: PacketKey,
    pub tree: u16,
    pub members: u16,
    pub slots: u16,
    pub wire_mask: u8,
    /// Members needed to emit a result (all, unless partial aggregation).
    pub needed: u16,
    pub deadline: Option<Duration>,
    pub uplink: Option<Uplink>,
    /// Control connection that admitted the job (its lease).
    pub conn: u64,
    /// Each member's address, bound by its first authenticated packet.
    pub addrs: Vec<Option<SocketAddr>>,
    pub copies: Vec<SlotCopy>,
    pub in_use: usize,
    pub stats: Arc<JobStats>,
}

pub struct Jobs {
    pub map: HashMap<u32, Job>,
    /// Parent job id -> local job id, for results coming down.
    pub uplinks: HashMap<u32, u32>,
    pub capacity_copies: usize,
    pub copies_in_use: usize,
    pub slot_bytes: usize,
    next_id: u32,
    /// Job ids of shard i are i+1, i+1+count, ...: unique across shards.
    id_step: u32,
    max_jobs: usize,
    max_slots: u16,
    int_only: bool,
    has_parent: bool,
    pub payload_budget: usize,
    /// Datagrams the data socket's receive buffer holds (unbounded when the
    /// core runs without a socket).
    pub rx_packets: usize,
    data_port: u16,
    metrics: Arc<Metrics>,
    shard: usize,
}

type Refusal = (ErrCode, String);

/// Bytes of one slot copy: an accumulator and an encoded packet of one payload.
pub fn slot_copy_bytes(payload_budget: usize) -> usize {
    2 * payload_budget + 64
}

impl Jobs {
    /// The job table of data-plane thread `shard`: it gets an equal part of
    /// the switch memory, so threads never share memory accounting either.
    pub fn new(cfg: &SwitchConfig, data_port: u16, metrics: Arc<Metrics>, shard: Shard) -> Jobs {
        let slot_bytes = slot_copy_bytes(cfg.payload_budget);
        let capacity_copies = cfg.memory / shard.count.max(1) / slot_bytes;
        metrics
            .shard(shard.index)
            .memory_capacity_bytes
            .store((capacity_copies * slot_bytes) as u64, Relaxed);
        Jobs {
            map: HashMap::new(),
            uplinks: HashMap::new(),
            capacity_copies,
            copies_in_use: 0,
            slot_bytes,
            next_id: shard.index as u32 + 1,
            id_step: shard.count as u32,
            max_jobs: cfg.max_jobs,
            max_slots: cfg.max_slots.min(MAX_SLOTS),
            int_only: cfg.int_only,
            has_parent: cfg.parent.is_some(),
            payload_budget: cfg.payload_budget,
            rx_packets: usize::MAX,
            data_port,
            metrics,
            shard: shard.index,
        }
    }

    /// The window cap every job gets now: its fair share of slot pairs.
    pub fn share(&self) -> usize {
        self.capacity_copies / 2 / self.map.len().max(1)
    }

    pub fn cwnd_cap(&self, job: &Job) -> u16 {
        self.cap_for(self.map.len(), job.members, job.slots)
    }

    /// Window cap of a job of `members` and `slots` among `jobs` jobs: its
    /// memory share, and its members' share of the receive buffer.
    fn cap_for(&self, jobs: usize, members: u16, slots: u16) -> u16 {
        let jobs = jobs.max(1);
        let memory = self.capacity_copies / 2 / jobs;
        let buffer = self.rx_packets / jobs / members.max(1) as usize;
        memory.min(buffer).clamp(1, slots as usize) as u16
    }

    pub fn admit(&mut self, req: &AdmitReq, conn: u64) -> Result<AdmitOk, Refusal> {
        let admitted = self.try_admit(req, conn);
        if let Err((code, reason)) = &admitted {
            info!(
                "refused a job of {} members ({code:?}): {reason}",
                req.members
            );
        }
        admitted
    }

    fn try_admit(&mut self, req: &AdmitReq, conn: u64) -> Result<AdmitOk, Refusal> {
        self.check_request(req)?;
        // A connection leases at most one job, so the per-client bound on
        // connections bounds the jobs a client holds.
        if let Some(j) = self.map.values().find(|j| j.conn == conn) {
            return Err((
                ErrCode::Refused,
                format!("this control connection already leases job {}", j.id),
            ));
        }
        if self.map.len() >= self.max_jobs {
            return Err((
                ErrCode::Full,
                format!("{} jobs already active", self.map.len()),
            ));
        }
        let share = self.capacity_copies / 2 / (self.map.len() + 1);
        if share < MIN_SHARE_SLOTS {
            return Err((
                ErrCode::Full,
                format!("memory share would be {share} slots"),
            ));
        }
        let wanted = if req.slots == 0 {
            self.max_slots
        } else {
            req.slots
        };
        let slots = wanted.min(self.max_slots).max(1);
        let job = self.new_job(req, conn, slots);
        let ok = AdmitOk {
            job: job.id,
            slots,
            cwnd_cap: self.cap_for(self.map.len() + 1, req.members, slots),
            payload_budget: self.payload_budget as u16,
            data_port: self.data_port,
        };
        if let Some(u) = job.uplink {
            self.uplinks.insert(u.job, job.id);
        }
        info!(
            "admitted job {} of tree {}: {} members, {} slots, window cap {}{}",
            job.id,
            job.tree,
            job.members,
            slots,
            ok.cwnd_cap,
            if job.uplink.is_some() {
                ", with an uplink"
            } else {
                ""
            }
        );
        self.metrics.add_job(job.id, job.stats.clone());
        self.metrics.jobs_admitted.fetch_add(1, Relaxed);
        self.metrics.shard(self.shard).jobs.fetch_add(1, Relaxed);
        self.map.insert(job.id, job);
        Ok(ok)
    }

    fn check_request(&self, req: &AdmitReq) -> Result<(), Refusal> {
        let refuse = |r: String| Err((ErrCode::Refused, r));
        if req.members == 0 || req.members as usize > MAX_MEMBERS {
            return refuse(format!(
                "{} members (1..={MAX_MEMBERS} per switch)",
                req.members
            ));
        }
        if req.partial_min > req.members {
            return refuse("partial aggregation needs more members than the job has".into());
        }
        if req.wire_mask == 0 || req.wire_mask & !0x0F != 0 {
            return refuse(format!("bad element-type mask {:#x}", req.wire_mask));
        }
        if self.int_only && req.wire_mask != WireType::I32.mask_bit() {
            return refuse("this switch aggregates int32 only (use the int32 mode)".into());
        }
        if req.uplink.is_some() && !self.has_parent {
            return refuse("job needs an uplink but the switch has no --parent".into());
        }
        Ok(())
    }

    fn new_job(&mut self, req: &AdmitReq, conn: u64, slots: u16) -> Job {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(self.id_step).max(1);
        let stats = Arc::new(JobStats::default());
        stats.members.store(req.members as u64, Relaxed);
        Job {
            id,
            key: req.key,
            tree: req.tree,
            members: req.members,
            slots,
            wire_mask: req.wire_mask,
            needed: if req.partial_min == 0 {
                req.members
            } else {
                req.partial_min
            },
            deadline: (req.deadline_us > 0).then(|| Duration::from_micros(req.deadline_us as u64)),
            uplink: req.uplink,
            conn,
            addrs: vec![None; req.members as usize],
            copies: (0..2 * slots as usize).map(|_| SlotCopy::new()).collect(),
            in_use: 0,
            stats,
        }
    }

    /// Releases `job` if connection `conn` leases it: only the job's own
    /// lease may end it early.
    pub fn release(&mut self, job: u32, conn: u64) -> Result<(), Refusal> {
        match self.map.get(&job) {
            Some(j) if j.conn == conn => {
                self.remove(job);
                Ok(())
            }
            _ => Err((
                ErrCode::UnknownJob,
                format!("no job {job} leased by this connection"),
            )),
        }
    }

    /// Releases every job leased by a control connection that closed.
    pub fn release_conn(&mut self, conn: u64) {
        let ids: Vec<u32> = self
            .map
            .values()
            .filter(|j| j.conn == conn)
            .map(|j| j.id)
            .collect();
        for id in ids {
            self.remove(id);
        }
    }

    fn remove(&mut self, id: u32) {
        if let Some(job) = self.map.remove(&id) {
            info!("released job {id}");
            self.copies_in_use -= job.in_use;
            if let Some(u) = job.uplink {
                self.uplinks.remove(&u.job);
            }
            self.metrics.remove_job(id);
            self.metrics.jobs_released.fetch_add(1, Relaxed);
            self.metrics.shard(self.shard).jobs.fetch_sub(1, Relaxed);
            self.publish_memory();
        }
    }

    pub fn publish_memory(&self) {
        let bytes = (self.copies_in_use * self.slot_bytes) as u64;
        self.metrics
            .shard(self.shard)
            .memory_bytes
            .store(bytes, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: Shard = Shard { index: 0, count: 1 };

    fn req(members: u16) -> AdmitReq {
        AdmitReq {
            tree: 0,
            members,
            slots: 256,
            wire_mask: 1,
            partial_min: 0,
            deadline_us: 0,
            key: PacketKey::from_bytes([0; 8]),
            uplink: None,
        }
    }

    #[test]
    fn window_cap_fits_every_members_window_in_the_socket_buffer() {
        let cfg = SwitchConfig::loopback(shoal_bootstrap::auth::Key::from_material(b"secret"));
        let mut jobs = Jobs::new(&cfg, 9800, Arc::new(Metrics::default()), ONE);
        jobs.rx_packets = 1000;
        let a = jobs.admit(&req(4), 1).unwrap();
        assert_eq!(a.cwnd_cap, 250);
        let b = jobs.admit(&req(8), 2).unwrap();
        assert_eq!(b.cwnd_cap, 1000 / 2 / 8);
        assert_eq!(jobs.cwnd_cap(&jobs.map[&a.job]), 1000 / 2 / 4);
        jobs.rx_packets = usize::MAX; // memory and the pool bound it instead
        assert_eq!(jobs.cwnd_cap(&jobs.map[&a.job]), 256);
    }

    #[test]
    fn a_connection_leases_one_job_and_releases_only_its_own() {
        let cfg = SwitchConfig::loopback(shoal_bootstrap::auth::Key::from_material(b"secret"));
        let mut jobs = Jobs::new(&cfg, 9800, Arc::new(Metrics::default()), ONE);
        let a = jobs.admit(&req(2), 1).unwrap();
        assert_eq!(jobs.admit(&req(2), 1).unwrap_err().0, ErrCode::Refused);
        let b = jobs.admit(&req(2), 2).unwrap();
        assert_eq!(jobs.release(a.job, 2).unwrap_err().0, ErrCode::UnknownJob);
        assert!(jobs.map.contains_key(&a.job));
        jobs.release(a.job, 1).unwrap();
        jobs.release(b.job, 2).unwrap();
        assert!(jobs.map.is_empty());
    }
}
