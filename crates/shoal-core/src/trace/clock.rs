//! How far each rank's trace clock is from rank 0's, measured at init so
//! that `shoal trace merge` can put every rank on one timeline.
//!
//! Rank 0 answers ping-pongs from every other rank in turn (NTP's method):
//! a rank sends its time t1, rank 0 replies with its time t0, the rank
//! reads t2 on arrival; rank 0's clock read t0 around the midpoint, so the
//! offset is t0 - (t1 + t2) / 2, within half the round trip. The round trip
//! with the smallest time wins.

use crate::error::Result;

use super::Tracing;

const ROUNDS: usize = 16;
/// Below calibration's tag; user tags are smaller still in practice, and
/// their messages are told apart by their index per (peer, tag) anyway.
const TAG: u32 = (1 << 31) - 2;

/// Add `offset_ns` to this rank's trace times to get rank 0's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockOffset {
    pub offset_ns: i64,
    /// The round trip of the measurement that gave it: the offset is good to half of it.
    pub rtt_ns: u64,
}

/// What the measurement needs of the ranks: one 64-bit word at a time to and
/// from a peer, on `TAG` (init gives the world communicator's point-to-point;
/// the clock knows nothing else of communicators).
pub trait WordExchange {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    fn send_word(&self, peer: usize, tag: u32, word: u64) -> Result<()>;
    fn recv_word(&self, peer: usize, tag: u32) -> Result<u64>;
}

/// Measures this rank's offset. Collective over `world`: every rank calls it.
pub fn measure_offset(world: &dyn WordExchange, tracing: &Tracing) -> Result<ClockOffset> {
    if world.rank() == 0 {
        for peer in 1..world.size() {
            for _ in 0..ROUNDS {
                world.recv_word(peer, TAG)?;
                world.send_word(peer, TAG, tracing.now_ns())?;
            }
        }
        return Ok(ClockOffset::default());
    }
    let mut best = ClockOffset {
        offset_ns: 0,
        rtt_ns: u64::MAX,
    };
    for _ in 0..ROUNDS {
        let t1 = tracing.now_ns();
        world.send_word(0, TAG, t1)?;
        let theirs = world.recv_word(0, TAG)?;
        let t2 = tracing.now_ns();
        let rtt = t2 - t1;
        if rtt < best.rtt_ns {
            let mid = (t1 / 2 + t2 / 2) as i64;
            best = ClockOffset {
                offset_ns: theirs as i64 - mid,
                rtt_ns: rtt,
            };
        }
    }
    Ok(best)
}
