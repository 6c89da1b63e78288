//! Job placement: a job's workers "as close together as possible" (PANAMA
//! section 7's scheduler).
//!
//! Hosts are numbered in topology order (the hosts of one ToR are
//! consecutive, then those of one pod), so the tightest placement is the
//! set of `workers` free hosts spanning the shortest id range: it fills a
//! rack before touching the next and a pod before crossing the core.

use crate::error::SimError;

/// Picks `workers` free hosts (marking them used) spanning the shortest id
/// range; ties go to the lowest ids. Errors when too few hosts are free.
pub fn place_close(free: &mut [bool], workers: usize) -> Result<Vec<u32>, SimError> {
    let free_ids: Vec<usize> = (0..free.len()).filter(|&h| free[h]).collect();
    if workers == 0 {
        return Err(SimError::NoWorkers);
    }
    if free_ids.len() < workers {
        return Err(SimError::TooFewFree {
            workers,
            free: free_ids.len(),
            hosts: free.len(),
        });
    }
    // Sliding window over the free ids: the window with the smallest span.
    let best = (0..=free_ids.len() - workers)
        .min_by_key(|&i| (free_ids[i + workers - 1] - free_ids[i], i))
        .expect("at least one window");
    let chosen: Vec<u32> = free_ids[best..best + workers]
        .iter()
        .map(|&h| h as u32)
        .collect();
    for &h in &chosen {
        free[h as usize] = false;
    }
    Ok(chosen)
}
