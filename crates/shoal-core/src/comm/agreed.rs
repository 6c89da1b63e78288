//! The first-use agreement as a communicator keeps it (`crate::agree::first_use`
//! checks the records): the verdict per call shape, provider and host
//! algorithm, the record this rank contributes, and the agreement run in
//! call order before the call itself.

use std::sync::{Arc, OnceLock};

use shoal_plan::CallShape;
use shoal_transport::CallSig;

use super::{Communicator, Prepared};
use crate::agree::first_use;
use crate::error::{describe_call, Error, Result};
use crate::lru::Lru;
use crate::registry::Choice;
use crate::registry::AGREEMENT_ALGO_ID;
use crate::select::PlanSource;

/// Call shapes whose agreement a communicator remembers (see `first_use`).
/// A constant, not a setting: every member's cache must forget alike.
const AGREED_CACHED: usize = 1024;

/// What the ranks agree on at the first use: a call shape, who runs it (the
/// id in its signature) and the host algorithm (the plan, or the switch's
/// fallback).
pub(super) type AgreeKey = (CallShape, u32, u32);

/// The ranks' verdict on one [`AgreeKey`], set by the call that ran the
/// agreement; later calls of the key prepared before it ran read it then.
pub(super) type Verdict = Arc<OnceLock<Result<()>>>;

/// The verdicts of a communicator, bounded: a program may use endless
/// distinct counts, and a forgotten shape is only agreed on again.
pub(super) struct Agreed(pub(super) Lru<AgreeKey, Verdict>);

impl Default for Agreed {
    fn default() -> Agreed {
        Agreed(Lru::new(AGREED_CACHED))
    }
}

/// A call's part in the first-use agreement of its key.
pub(super) enum FirstUse {
    /// This call runs it, as sequence number `seq`, contributing `record`.
    Run {
        seq: u32,
        record: [u8; first_use::RECORD],
        verdict: Verdict,
    },
    /// An earlier call of the key runs it; this one reads its verdict.
    Await { verdict: Verdict, key: AgreeKey },
}

impl Communicator {
    /// The first-use agreement of a call's key (`agree::first_use`), in
    /// call order on the thread that runs the call: the first call of the
    /// key gathers every rank's record and keeps the verdict; calls of the
    /// key prepared before it ran read the verdict. Nothing of the call
    /// itself has been sent yet, so a disagreement leaves the group usable
    /// (the same error on every rank).
    pub(super) fn agree_on_first_use(&self, p: &Prepared, first: &FirstUse) -> Result<()> {
        match first {
            FirstUse::Run {
                seq,
                record,
                verdict,
            } => {
                let sig = CallSig {
                    algo: AGREEMENT_ALGO_ID,
                    ..p.sig
                };
                let describe = || format!("the agreement at the first use of {}", p.describe());
                let outcome = self.exchange(*seq, sig, record, &describe).and_then(|all| {
                    let call = describe_call(&p.sig);
                    first_use::verdict(&all, &self.members, p.collective, &call)
                });
                let _ = verdict.set(outcome.clone());
                outcome
            }
            FirstUse::Await { verdict, key } => match verdict.get() {
                Some(outcome) => outcome.clone(),
                None => {
                    // The call that was to agree ended before it did: forget
                    // the key, so that the next call of it agrees again.
                    let mut st = self.state.lock().unwrap();
                    if st
                        .agreed
                        .0
                        .peek(key)
                        .is_some_and(|v| Arc::ptr_eq(v, verdict))
                    {
                        st.agreed.0.remove(key);
                    }
                    Err(Error::runtime(format!(
                        "{}: the first call of this shape ended before the ranks agreed on what it runs; \
                         the next call of it agrees again",
                        p.describe()
                    )))
                }
            },
        }
    }

    /// This rank's record for the first-use agreement of `key`.
    pub(super) fn first_use_record(
        &self,
        key: &AgreeKey,
        choice: Choice,
        source: Option<&dyn PlanSource>,
    ) -> Result<[u8; first_use::RECORD]> {
        let (shape, runs, host) = key;
        let definition = match (choice, source) {
            (Choice::Builtin(_), _) => 0,
            (Choice::Registered(alg), Some(source)) => source.digest(alg, shape)?,
            (Choice::Registered(alg), None) => {
                return Err(Error::invalid(format!(
                    "{} algorithm '{}' is registered from Python and runs only in calls made from Python",
                    alg.collective, alg.name
                )))
            }
        };
        let record = first_use::Record {
            shape: first_use::shape_digest(shape),
            runs: *runs,
            host: *host,
            definition,
            name: choice.name(),
        };
        Ok(record.encode())
    }
}
