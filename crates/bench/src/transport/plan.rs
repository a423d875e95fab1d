//! How long each figure runs, and how many iterations that makes.
//!
//! Counts are not fixed per size: backends differ by 100x (an 8-byte round trip takes
//! ~0.3 us over `shm` and ~30 us over loopback TCP), so a count that gives `tcp` a stable
//! median would give `shm` a few milliseconds of samples. Each figure therefore has a
//! *time* target per sample; an untimed warm-up, whose length scales with the message size,
//! estimates the cost of one item, and [`count_for`] turns the target into a count. With
//! these targets a full run over `shm` and `tcp` takes one to two minutes on a 2-core VM
//! and `--quick` about 15 seconds.

use std::time::Duration;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// Message sizes of a full run: 8 B to 64 MiB.
pub const DEFAULT_SIZES: &[u64] = &[
    8,
    64,
    512,
    4 * KIB,
    32 * KIB,
    256 * KIB,
    512 * KIB,
    2 * MIB,
    8 * MIB,
    64 * MIB,
];

/// Message sizes of a `--quick` run.
pub const QUICK_SIZES: &[u64] = &[8, 4 * KIB, 512 * KIB, 2 * MIB];

/// Window sizes whose registration is timed: the sizes seed 004 measured for SCIF (64 KiB,
/// 512 KiB, 2 MiB) and the largest message size.
pub const REGISTER_SIZES: &[u64] = &[64 * KIB, 512 * KIB, 2 * MIB, 64 * MIB];

/// Registration sizes of a `--quick` run (64 MiB is left out: on a VM its first touch alone
/// takes up to 200 ms, see `MACHINE_NOTES.md`).
pub const QUICK_REGISTER_SIZES: &[u64] = &[64 * KIB, 512 * KIB, 2 * MIB];

/// Largest message size the bench accepts: the contract guarantees messages up to 1 GiB,
/// and the bench holds several buffers of this size at once.
pub const MAX_SIZE: u64 = 1 << 30;

/// Time targets and iteration bounds for the figures of one message size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Latency samples: batches of round trips, each summarized by its median.
    pub lat_batches: usize,
    /// Target duration of one latency batch.
    pub lat_batch_time: Duration,
    /// Untimed round trips before the batches; they also estimate the round-trip time.
    pub lat_warmup: usize,
    /// Most round trips in one batch.
    pub lat_max_iters: usize,
    /// Timed passes of the streaming and of the RMA figure (one sample each).
    pub passes: usize,
    /// Target duration of one pass.
    pub pass_time: Duration,
    /// Messages (or RMA writes) of the untimed warm-up pass, which estimates the rate.
    pub warmup_msgs: usize,
    /// Fewest messages (or writes) in a timed pass.
    pub min_msgs: usize,
    /// Most messages (or writes) in a timed pass.
    pub max_msgs: usize,
    /// memcpy ceiling samples.
    pub memcpy_samples: usize,
    /// Wall time of one memcpy sample.
    pub memcpy_batch: Duration,
}

/// `budget / per_item` clamped to `min..=max`: how many items of `per_item` bytes fit a byte
/// budget.
pub(crate) fn scaled(budget: u64, per_item: u64, min: usize, max: usize) -> usize {
    let n = budget / per_item.max(1);
    usize::try_from(n).unwrap_or(usize::MAX).clamp(min, max)
}

/// How many items of `per_item_secs` each fill `target`, clamped to `min..=max` (an
/// unmeasurably fast item counts as `max`).
pub fn count_for(target: Duration, per_item_secs: f64, min: usize, max: usize) -> usize {
    if per_item_secs.is_nan() || per_item_secs <= 0.0 {
        return max.max(min);
    }
    let n = target.as_secs_f64() / per_item_secs;
    if n >= max as f64 {
        max.max(min)
    } else {
        (n as usize).clamp(min, max.max(min))
    }
}

impl Plan {
    /// The plan for `size`-byte messages. `repetitions` overrides the number of samples of
    /// every figure (latency batches, streaming and RMA passes, memcpy batches); by default
    /// 11 latency batches and 5 passes (quick: 5 and 3).
    pub fn for_size(size: u64, quick: bool, repetitions: Option<usize>) -> Plan {
        let size = size.max(1);
        let (batches, passes) = match (repetitions, quick) {
            (Some(r), _) => (r.max(1), r.max(1)),
            (None, true) => (5, 3),
            (None, false) => (11, 5),
        };
        let (batch_ms, pass_ms, memcpy_ms) = if quick { (60, 120, 10) } else { (80, 200, 25) };
        Plan {
            lat_batches: batches,
            lat_batch_time: Duration::from_millis(batch_ms),
            // Enough round trips to warm caches and rings and to estimate the RTT, bounded
            // by bytes so that 64 MiB messages warm up with 2.
            lat_warmup: scaled(16 * MIB, 2 * size, 2, 200),
            lat_max_iters: 100_000,
            passes,
            pass_time: Duration::from_millis(pass_ms),
            // A warm-up pass longer than any ring, so its rate is the steady one.
            warmup_msgs: scaled(64 * MIB, size, 4, 4000),
            min_msgs: 8,
            max_msgs: 5_000_000,
            memcpy_samples: passes,
            memcpy_batch: Duration::from_millis(memcpy_ms),
        }
    }
}

/// Iteration counts of the connection and registration figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetupPlan {
    /// Connections timed, one after the other.
    pub connects: usize,
    /// Window sizes whose registration is timed.
    pub register_sizes: Vec<u64>,
    /// Most registrations per size.
    pub register_max: usize,
    /// Fewest registrations per size, whatever they cost.
    pub register_min: usize,
    /// Stop registering a size after this much time once `register_min` are done.
    pub register_budget: Duration,
}

impl SetupPlan {
    /// The plan of a full or quick run; `repetitions` sets the fewest registrations.
    pub fn new(quick: bool, repetitions: Option<usize>) -> SetupPlan {
        let register_min = repetitions.unwrap_or(3).max(1);
        if quick {
            SetupPlan {
                connects: 10,
                register_sizes: QUICK_REGISTER_SIZES.to_vec(),
                register_max: 20.max(register_min),
                register_min,
                register_budget: Duration::from_millis(200),
            }
        } else {
            SetupPlan {
                connects: 30,
                register_sizes: REGISTER_SIZES.to_vec(),
                register_max: 50.max(register_min),
                register_min,
                register_budget: Duration::from_millis(800),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmups_scale_with_size_between_bounds() {
        let p = Plan::for_size(8, false, None);
        assert_eq!((p.lat_batches, p.lat_warmup, p.passes), (11, 200, 5));
        assert_eq!(p.warmup_msgs, 4000);
        let p = Plan::for_size(64 * MIB, false, None);
        assert_eq!((p.lat_warmup, p.warmup_msgs), (2, 4));
        // 64 MiB / 512 KiB = 128 warm-up messages; 16 MiB / 1 MiB = 16 round trips.
        let p = Plan::for_size(512 * KIB, false, None);
        assert_eq!((p.lat_warmup, p.warmup_msgs), (16, 128));
        let mut last = usize::MAX;
        for &s in DEFAULT_SIZES {
            let p = Plan::for_size(s, false, None);
            assert!(p.warmup_msgs <= last && p.warmup_msgs >= 4, "size {s}");
            last = p.warmup_msgs;
        }
    }

    #[test]
    fn quick_is_shorter_and_repetitions_override_sample_counts() {
        let q = Plan::for_size(4 * KIB, true, None);
        let f = Plan::for_size(4 * KIB, false, None);
        assert_eq!((q.lat_batches, q.passes, q.memcpy_samples), (5, 3, 3));
        assert!(q.lat_batch_time < f.lat_batch_time && q.pass_time < f.pass_time);
        assert!(q.memcpy_batch < f.memcpy_batch);
        let r = Plan::for_size(4 * KIB, true, Some(7));
        assert_eq!((r.lat_batches, r.passes, r.memcpy_samples), (7, 7, 7));
        assert_eq!(Plan::for_size(0, false, Some(0)).lat_batches, 1);
    }

    #[test]
    fn counts_fill_the_time_target_within_bounds() {
        let t = Duration::from_millis(200);
        // 30 us round trips: 6666 fit in 200 ms.
        assert_eq!(count_for(t, 30e-6, 1, 100_000), 6666);
        // A 64 MiB message at 2 GB/s takes 33 ms: 6 fit, but a pass needs at least 8.
        assert_eq!(count_for(t, 0.0336, 8, 1000), 8);
        assert_eq!(count_for(t, 1e-12, 8, 1000), 1000);
        assert_eq!(count_for(t, 0.0, 8, 1000), 1000);
        assert_eq!(count_for(t, f64::NAN, 8, 1000), 1000);
        assert_eq!(count_for(t, 1.0, 2, 1), 2);
    }

    #[test]
    fn setup_plan_follows_seed_004_sizes() {
        assert_eq!(
            SetupPlan::new(false, None).register_sizes,
            vec![64 * KIB, 512 * KIB, 2 * MIB, 64 * MIB]
        );
        let q = SetupPlan::new(true, Some(30));
        assert_eq!((q.register_min, q.register_max, q.connects), (30, 30, 10));
    }

    #[test]
    fn scaled_clamps() {
        assert_eq!(scaled(100, 0, 1, 1000), 100);
        assert_eq!(scaled(100, 1000, 3, 10), 3);
        assert_eq!(scaled(u64::MAX, 1, 0, 5), 5);
    }
}
