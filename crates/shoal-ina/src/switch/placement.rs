//! Which data-plane thread serves which job. Every job lives on exactly one
//! thread (its shard), with its own UDP socket and port: `ADMIT_OK` names
//! that port, so all of a job's packets reach the thread that owns its
//! slots, and no slot is ever touched by two threads. A new job goes to the
//! thread with the fewest jobs; control requests about a job (release, its
//! lease closing) go to the thread that holds it.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};

use crate::control::{CtrlMsg, ErrCode};

use super::event_loop::Command;
use super::metrics::Metrics;

pub struct Placement {
    shards: Vec<Sender<Command>>,
    max_jobs: usize,
    metrics: Arc<Metrics>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Jobs placed (or being admitted) per shard.
    load: Vec<usize>,
    /// Control connection -> (shard, job) of the job it leases.
    leases: HashMap<u64, (usize, Option<u32>)>,
}

/// What `ask` decided before talking to a shard.
enum Route {
    Shard(usize),
    Reply(CtrlMsg),
}

impl Placement {
    pub fn new(shards: Vec<Sender<Command>>, max_jobs: usize, metrics: Arc<Metrics>) -> Placement {
        let load = vec![0; shards.len()];
        Placement {
            shards,
            max_jobs,
            metrics,
            state: Mutex::new(State {
                load,
                leases: HashMap::new(),
            }),
        }
    }

    /// One request from connection `conn` to the shard it concerns, and the
    /// shard's reply.
    pub fn ask(&self, conn: u64, msg: CtrlMsg) -> io::Result<CtrlMsg> {
        let shard = match self.route(conn, &msg) {
            Route::Shard(s) => s,
            Route::Reply(r) => return Ok(r),
        };
        let reply = self.send(shard, conn, msg);
        let mut st = self.state.lock().unwrap();
        match &reply {
            Ok(CtrlMsg::AdmitOk(ok)) => {
                st.leases.insert(conn, (shard, Some(ok.job)));
            }
            Ok(CtrlMsg::Released { .. }) if st.leases.remove(&conn).is_some() => {
                st.load[shard] -= 1;
            }
            _ if matches!(st.leases.get(&conn), Some((s, None)) if *s == shard) => {
                // The reservation made for a refused admission.
                st.leases.remove(&conn);
                st.load[shard] -= 1;
            }
            _ => {}
        }
        reply
    }

    fn route(&self, conn: u64, msg: &CtrlMsg) -> Route {
        let mut st = self.state.lock().unwrap();
        if let Some(&(shard, _)) = st.leases.get(&conn) {
            // Its own shard refuses a second job or releases this one.
            return Route::Shard(shard);
        }
        match msg {
            CtrlMsg::Admit(_) => {
                let placed: usize = st.load.iter().sum();
                if placed >= self.max_jobs {
                    self.metrics.jobs_refused.fetch_add(1, Relaxed);
                    return Route::Reply(CtrlMsg::Error {
                        code: ErrCode::Full,
                        reason: format!("{placed} jobs already active"),
                    });
                }
                let shard = (0..st.load.len()).min_by_key(|&i| st.load[i]).unwrap_or(0);
                st.load[shard] += 1; // reserved until the shard answers
                st.leases.insert(conn, (shard, None));
                Route::Shard(shard)
            }
            // Not leased here: shard 0 answers `unknown job`.
            _ => Route::Shard(0),
        }
    }

    /// The lease of `conn` ended: its shard releases the job it holds.
    pub fn closed(&self, conn: u64) {
        let held = self.state.lock().unwrap().leases.remove(&conn);
        if let Some((shard, _)) = held {
            let _ = self.shards[shard].send(Command::Closed(conn));
            self.state.lock().unwrap().load[shard] -= 1;
        }
    }

    fn send(&self, shard: usize, conn: u64, msg: CtrlMsg) -> io::Result<CtrlMsg> {
        let (reply, answer) = channel();
        let stopped = || io::Error::other("switch stopped");
        let request = Command::Msg { conn, msg, reply };
        self.shards[shard].send(request).map_err(|_| stopped())?;
        answer.recv().map_err(|_| stopped())
    }
}
