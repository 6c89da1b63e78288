//! Point-to-point: `send`, `recv` and receiving from any source, each a
//! one-step plan run by the executor, so they share its error handling,
//! timeouts and mismatch checks.

use std::time::Duration;

use shoal_plan::{Buf, Op, Plan, Region};
use shoal_transport::{Blocked, CallSig, Tag};

use super::{Communicator, P2P_KIND, P2P_SEQ};
use crate::buffers::CallBuffers;
use crate::dtype::{DType, ReduceOp};
use crate::error::{Error, ErrorKind, Result};
use crate::exec::CompiledPlan;
use crate::stall::{answer_time, Stall};

/// The signature of a point-to-point message of `count` elements of `dtype`.
fn p2p_sig(dtype: DType, count: usize) -> CallSig {
    CallSig {
        kind: P2P_KIND,
        dtype: dtype.index(),
        op: 0,
        algo: 0,
        root: 0,
        count: count as u64,
        history: 0,
    }
}

impl Communicator {
    /// Sends `count` elements at `data` to group rank `peer`. Messages with the
    /// same (peer, tag) arrive in order.
    pub fn send(
        &self,
        peer: usize,
        tag: u32,
        dtype: DType,
        data: *const u8,
        count: usize,
    ) -> Result<()> {
        let src = Region::new(Buf::Input, 0, count);
        let bufs = CallBuffers {
            input: data,
            input_bytes: count * dtype.size(),
            output: std::ptr::null_mut(),
            output_bytes: 0,
        };
        self.point_to_point(peer, tag, dtype, count, true, bufs, |t| Op::Send {
            peer,
            tag: t,
            src,
        })
    }

    /// Receives `count` elements from group rank `peer` into `data`.
    pub fn recv(
        &self,
        peer: usize,
        tag: u32,
        dtype: DType,
        data: *mut u8,
        count: usize,
    ) -> Result<()> {
        let dst = Region::new(Buf::Output, 0, count);
        let bufs = CallBuffers {
            input: std::ptr::null(),
            input_bytes: 0,
            output: data,
            output_bytes: count * dtype.size(),
        };
        self.point_to_point(peer, tag, dtype, count, false, bufs, |t| Op::Recv {
            peer,
            tag: t,
            dst,
        })
    }

    /// Receives `count` elements into `data` from whichever group rank's
    /// message with `tag` comes first, and returns that rank.
    ///
    /// Matching: from each peer, only its next message with `tag` (per peer
    /// and tag, messages are received in the order they were sent, as by
    /// [`Communicator::recv`]); among the peers whose next message has
    /// arrived, the one that arrived first at this rank (on a job over hosts,
    /// same-host and remote peers are asked first in turn). The message is
    /// then received as `recv` from that peer would: a size or type that
    /// differs fails the same way, and a wait with no message for the
    /// communicator's timeout fails naming what the peers wait for.
    pub fn recv_any(&self, tag: u32, dtype: DType, data: *mut u8, count: usize) -> Result<usize> {
        self.engine.check_healthy()?;
        if tag >= P2P_SEQ {
            return Err(Error::invalid(format!(
                "tag {tag} too large (must be < 2^31)"
            )));
        }
        if self.size() < 2 {
            return Err(Error::invalid(
                "recv from any source: this group has no other rank",
            ));
        }
        let t = &*self.engine.transport;
        let me = self.members[self.rank];
        let peers: Vec<usize> = (0..self.size()).filter(|&p| p != self.rank).collect();
        let describe =
            || format!("recv({count} x {dtype}, tag={tag}) from any source on rank {me}");
        let fail = |e: Error| -> Error {
            if e.kind != ErrorKind::InvalidArgument {
                t.abort(&e.message);
                self.engine.fail(&e);
            }
            e
        };
        let sig = p2p_sig(dtype, count);
        let timeout = self.timeout();
        let blocked_after = Duration::from_millis(100).min(timeout / 4);
        let mut last_progress = std::time::Instant::now();
        let mut told_blocked = false;
        self.engine.queue.flush();
        let source = loop {
            let _one_at_a_time = self.engine.scratch.lock().unwrap();
            let from: Vec<(usize, Tag)> = {
                let st = self.state.lock().unwrap();
                (peers.iter())
                    .map(|&p| {
                        let step = st.recvs.get(&(p, tag)).copied().unwrap_or(0);
                        (
                            self.members[p],
                            Tag {
                                comm: self.id,
                                seq: P2P_SEQ | tag,
                                step,
                            },
                        )
                    })
                    .collect()
            };
            let transport_error =
                |e: &shoal_transport::TransportError| fail(Error::from_transport(e, &describe()));
            if let Some(g) = t.probe(&from).map_err(|e| transport_error(&e))? {
                break self.members.iter().position(|&m| m == g).unwrap();
            }
            if t.progress().map_err(|e| transport_error(&e))? {
                last_progress = std::time::Instant::now();
                continue;
            }
            let idle = last_progress.elapsed();
            let on: Vec<usize> = from.iter().map(|&(g, _)| g).collect();
            if idle > timeout {
                let stall = Stall::find(t, me, &on, answer_time(timeout))
                    .map_err(|e| transport_error(&e))?;
                let mut message = format!(
                    "{}: no progress for {timeout:.0?}, the timeout of its communicator \
                     (SHOAL_TIMEOUT unless set); waiting on a message from any of ranks {on:?}",
                    describe()
                );
                let found = stall.describe();
                if !found.is_empty() {
                    message = format!("{message}; {found}");
                }
                return Err(fail(Error::new(ErrorKind::Timeout, message)));
            }
            if !told_blocked && idle >= blocked_after {
                let mut on = on;
                on.truncate(Blocked::MAX_ON);
                let tag = Tag {
                    comm: self.id,
                    seq: P2P_SEQ | tag,
                    step: 0,
                };
                t.set_blocked(&Blocked { tag, sig, on });
                told_blocked = true;
            }
            t.wait(Duration::from_millis(50))
                .map_err(|e| transport_error(&e))?;
        };
        self.recv(source, tag, dtype, data, count)?;
        Ok(source)
    }

    /// Point-to-point messages run as one-step plans, so they share the
    /// executor's error handling, timeouts and mismatch checks.
    #[allow(clippy::too_many_arguments)]
    fn point_to_point(
        &self,
        peer: usize,
        tag: u32,
        dtype: DType,
        count: usize,
        sending: bool,
        bufs: CallBuffers,
        make: impl FnOnce(u32) -> Op,
    ) -> Result<()> {
        self.engine.check_healthy()?;
        if peer >= self.size() || peer == self.rank {
            return Err(Error::invalid(format!(
                "{}: peer {peer} must be another rank of this group of {}",
                if sending { "send" } else { "recv" },
                self.size()
            )));
        }
        if tag >= P2P_SEQ {
            return Err(Error::invalid(format!(
                "tag {tag} too large (must be < 2^31)"
            )));
        }
        let index = {
            let mut st = self.state.lock().unwrap();
            let counters = if sending {
                &mut st.sends
            } else {
                &mut st.recvs
            };
            let next = counters.entry((peer, tag)).or_insert(0);
            *next += 1;
            *next - 1
        };
        let mut plan = Plan::new(self.rank);
        plan.push(make(index), vec![]);
        let cp = CompiledPlan::new(plan);
        let describe = || {
            format!(
                "{}({} x {dtype}, tag={tag}) between ranks {} and {}",
                if sending { "send" } else { "recv" },
                count,
                self.members[self.rank],
                self.members[peer]
            )
        };
        let sig = p2p_sig(dtype, count);
        let ctx = self.call_context(P2P_SEQ | tag, sig, dtype, ReduceOp::Sum, &describe);
        self.engine.queue.flush();
        self.engine.run(&cp, &ctx, bufs)
    }
}
