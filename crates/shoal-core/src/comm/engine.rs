//! What the ranks of one process share (the [`Engine`]: transport, plan
//! cache, scratch memory, the first failure), and a plan run on it: the
//! bottom of a communicator's call, which the providers run their plans
//! through and which calls only down (the executor, the transport).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use shoal_transport::{CallSig, Transport};

use super::{Communicator, PlanKey};
use crate::alias::Staging;
use crate::config::Config;
use crate::dtype::{DType, ReduceOp};
use crate::error::{Error, ErrorKind, Result};
use crate::exec::{execute, CallBuffers, CallContext, CompiledPlan, Workspace};
use crate::ina::Membership;
use crate::lru::Lru;
use crate::select::Selector;
use crate::trace::Tracing;
use crate::work::AsyncQueue;

/// What the ranks of one process share: the transport and the execution lock.
pub struct Engine {
    pub transport: Box<dyn Transport>,
    pub config: Config,
    pub selector: Selector,
    /// Global ranks sharing this process's host.
    pub local_ranks: Vec<usize>,
    /// Host index of every global rank.
    pub host_of: Vec<usize>,
    /// This rank's membership in the switch job, or why there is none.
    pub ina: Membership,
    /// Held while a plan runs (the transport is driven by one thread at a
    /// time); guards the reusable scratch memory.
    pub(super) scratch: Mutex<Workspace>,
    /// Compiled plans of every communicator of this process, bounded by
    /// `SHOAL_PLAN_CACHE` (a program may use endless distinct counts).
    pub(super) plans: Mutex<Lru<PlanKey, Arc<CompiledPlan>>>,
    /// Where in-place calls put their input or output aside (see `alias`).
    pub(super) staging: Staging,
    pub(super) queue: AsyncQueue,
    /// The caller's contribution during an in-network allreduce (for the fallback).
    pub(super) ina_backup: Mutex<Vec<u8>>,
    /// The first fatal error; after it every call fails fast with it.
    pub(super) failed: Mutex<Option<Error>>,
    /// Set once `failed` holds an error: a healthy engine's calls read this
    /// flag instead of taking the lock.
    pub(super) has_failed: AtomicBool,
    /// Whether some host of the job runs more ranks than it has CPUs,
    /// agreed at init (`init::agree_on_adaptation`): no call adapts then.
    pub(crate) oversubscribed_somewhere: AtomicBool,
    /// The trace (`SHOAL_TRACE`) and the flight recorder.
    pub tracing: Tracing,
    /// Keeps whatever the transport needs alive (store, store server).
    pub(super) _keepalive: Vec<Box<dyn std::any::Any + Send + Sync>>,
}

impl Engine {
    pub fn new(
        transport: Box<dyn Transport>,
        config: Config,
        selector: Selector,
        local_ranks: Vec<usize>,
        host_of: Vec<usize>,
        ina: Membership,
        keepalive: Vec<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Engine {
        let plans = Mutex::new(Lru::new(config.plan_cache));
        let tracing = Tracing::new(config.flight_recorder);
        Engine {
            transport,
            config,
            selector,
            local_ranks,
            host_of,
            ina,
            scratch: Mutex::new(Workspace::default()),
            plans,
            staging: Staging::default(),
            queue: AsyncQueue::new(),
            ina_backup: Mutex::new(Vec::new()),
            failed: Mutex::new(None),
            has_failed: AtomicBool::new(false),
            oversubscribed_somewhere: AtomicBool::new(false),
            tracing,
            _keepalive: keepalive,
        }
    }

    /// How many compiled plans are cached, and how many may be.
    pub fn plan_cache_usage(&self) -> (usize, usize) {
        let plans = self.plans.lock().unwrap();
        (plans.len(), plans.capacity())
    }

    pub(super) fn check_healthy(&self) -> Result<()> {
        if !self.has_failed.load(Ordering::Acquire) {
            return Ok(());
        }
        match &*self.failed.lock().unwrap() {
            Some(e) => Err(Error::new(
                e.kind,
                format!(
                    "communicator is unusable after an earlier failure: {}",
                    e.message
                ),
            )),
            None => Ok(()),
        }
    }

    pub(super) fn run(
        &self,
        cp: &CompiledPlan,
        ctx: &CallContext,
        bufs: CallBuffers,
    ) -> Result<()> {
        self.check_healthy()?;
        let mut scratch = match self.scratch.try_lock() {
            Ok(scratch) => scratch,
            Err(_) => {
                // Another thread runs a plan, for as long as it takes.
                shoal_transport::doorbell::long_wait_begins();
                self.scratch.lock().unwrap()
            }
        };
        let mut r = execute(cp, ctx, bufs, &mut scratch, &self.tracing);
        if let Err(e) = &mut r {
            if e.kind != ErrorKind::InvalidArgument {
                crate::trace::dump_flight(&self.tracing, self.transport.rank(), e);
                self.fail(e);
            }
        }
        r
    }

    /// Records the engine's first fatal error: every later call fails with it.
    pub(super) fn fail(&self, e: &Error) {
        self.failed.lock().unwrap().get_or_insert_with(|| e.clone());
        self.has_failed.store(true, Ordering::Release);
    }
}

impl Communicator {
    /// What the executor needs to run one call of this communicator: its
    /// transport, members, id and timeout, with the call's own sequence
    /// number, signature, element type, operation and description.
    pub(super) fn call_context<'a>(
        &'a self,
        seq: u32,
        sig: CallSig,
        dtype: DType,
        op: ReduceOp,
        describe: &'a dyn Fn() -> String,
    ) -> CallContext<'a> {
        CallContext {
            transport: &*self.engine.transport,
            members: &self.members,
            comm: self.id,
            seq,
            sig,
            dtype,
            op,
            timeout: self.timeout(),
            describe,
        }
    }
}
