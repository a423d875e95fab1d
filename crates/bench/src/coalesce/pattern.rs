//! The access patterns of the coalescing bench: seed 001's microbenchmarks (section 3.2:
//! "random, streaming, and repeated access patterns were tested").
//!
//! A pattern yields window-relative offsets of items, one *pass* at a time; the bench
//! flushes the cache after every pass, as an iterative code would after each step.
//!
//! - **random**: uniformly random slots of the footprint, drawn independently (the seed's
//!   pattern), as many per pass as the footprint has slots. About 37% of a pass's draws
//!   hit a slot drawn before in the same pass, so the cache absorbs them (the `dedup`
//!   column shows it) and ways hold about 63% of their lines when they leave: scattered.
//! - **permutation**: every slot of the footprint once per pass, in a uniformly random
//!   order (a fresh permutation each pass): random placement without rewrites, so every
//!   item counted is a byte the cache had to deliver, and every way is full when the pass
//!   ends.
//! - **streaming**: the footprint in order, item after item.
//! - **repeated**: a small hot set of [`HOT_ITEMS`] slots scattered over the footprint,
//!   written over and over in random order (as many items per pass as `random`).
//!
//! Offsets come from a fixed-seed generator, so every mode (direct RMA, cache, checked
//! cache) and every run sees the same sequence.

use std::fmt;
use std::str::FromStr;

/// Distinct item slots the `repeated` pattern writes (32 KiB of 64-byte items).
pub const HOT_ITEMS: usize = 512;

/// An access pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pattern {
    /// Independent uniformly random slots.
    Random,
    /// Every slot once per pass, in random order.
    Permutation,
    /// Every slot once per pass, in order.
    Streaming,
    /// A hot set of [`HOT_ITEMS`] slots, over and over.
    Repeated,
}

impl Pattern {
    /// All patterns, in table order.
    pub const ALL: [Pattern; 4] = [
        Pattern::Random,
        Pattern::Permutation,
        Pattern::Streaming,
        Pattern::Repeated,
    ];

    /// The name used on the command line and in figures.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Random => "random",
            Pattern::Permutation => "permutation",
            Pattern::Streaming => "streaming",
            Pattern::Repeated => "repeated",
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Pattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Pattern, String> {
        Pattern::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                format!("unknown pattern {s:?} (known: random, permutation, streaming, repeated)")
            })
    }
}

/// xorshift64*: small, fast and deterministic; statistical quality is ample for picking
/// offsets.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (multiply-shift; the bias is below 2^-32 for the sizes used here).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// The offsets of `passes` passes of `pattern` over `footprint` bytes cut into `item`-byte
/// slots, concatenated: each pass is [`pass_items`] long.
///
/// # Panics
/// If `item` is zero or the footprint holds no item.
pub fn offsets(
    pattern: Pattern,
    item: usize,
    footprint: u64,
    passes: usize,
    seed: u64,
) -> Vec<u64> {
    let slots = footprint / item as u64;
    assert!(slots > 0, "footprint {footprint} holds no {item}-byte item");
    let n = pass_items(pattern, item, footprint);
    let mut out = Vec::with_capacity(n * passes);
    let mut rng = Rng::new(seed);
    match pattern {
        Pattern::Random => {
            for _ in 0..passes {
                out.extend((0..n).map(|_| rng.below(slots) * item as u64));
            }
        }
        Pattern::Permutation => {
            let mut perm: Vec<u32> = (0..slots as u32).collect();
            for _ in 0..passes {
                // Fisher–Yates: a uniformly random permutation.
                for i in (1..perm.len()).rev() {
                    let j = rng.below(i as u64 + 1) as usize;
                    perm.swap(i, j);
                }
                out.extend(perm.iter().map(|&s| u64::from(s) * item as u64));
            }
        }
        Pattern::Streaming => {
            for _ in 0..passes {
                out.extend((0..slots).map(|s| s * item as u64));
            }
        }
        Pattern::Repeated => {
            let hot = hot_set(&mut rng, slots, HOT_ITEMS.min(slots as usize));
            for _ in 0..passes {
                out.extend((0..n).map(|_| hot[rng.below(hot.len() as u64) as usize] * item as u64));
            }
        }
    }
    out
}

/// Items in one pass: the footprint's slot count (also for `repeated`, so that it moves as
/// many items per pass as `random`).
pub fn pass_items(_pattern: Pattern, item: usize, footprint: u64) -> usize {
    (footprint / item as u64) as usize
}

/// `k` distinct slots out of `0..slots`, drawn uniformly.
fn hot_set(rng: &mut Rng, slots: u64, k: usize) -> Vec<u64> {
    let mut picked = std::collections::BTreeSet::new();
    while picked.len() < k {
        picked.insert(rng.below(slots));
    }
    let mut v: Vec<u64> = picked.into_iter().collect();
    // Random order, so that consecutive hot slots are not neighbours in memory.
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_draws_slots_independently() {
        let o = offsets(Pattern::Random, 64, 64 * 1000, 4, 7);
        assert_eq!(o.len(), 4000);
        assert!(o.iter().all(|&x| x % 64 == 0 && x < 64 * 1000));
        // With replacement: about 1 - 1/e = 63% of the slots per pass are distinct.
        let distinct: std::collections::BTreeSet<u64> = o[..1000].iter().copied().collect();
        assert!((580..680).contains(&distinct.len()), "{}", distinct.len());
        assert_eq!(o, offsets(Pattern::Random, 64, 64 * 1000, 4, 7));
    }

    #[test]
    fn permutation_is_a_fresh_permutation_every_pass() {
        let item = 64;
        let footprint = 64 * 1000;
        let o = offsets(Pattern::Permutation, item, footprint, 3, 7);
        assert_eq!(o.len(), 3000);
        let passes: Vec<&[u64]> = o.chunks(1000).collect();
        for p in &passes {
            let mut s = p.to_vec();
            s.sort_unstable();
            let want: Vec<u64> = (0..1000).map(|i| i * 64).collect();
            assert_eq!(s, want, "each slot exactly once per pass");
        }
        assert_ne!(passes[0], passes[1], "passes use different orders");
        // Not merely sorted or reversed: most neighbours are far apart.
        let far = passes[0]
            .windows(2)
            .filter(|w| w[0].abs_diff(w[1]) > 64 * 8)
            .count();
        assert!(far > 900, "{far} of 999 steps are long jumps");
        // Deterministic: the same seed gives the same offsets.
        assert_eq!(o, offsets(Pattern::Permutation, item, footprint, 3, 7));
    }

    #[test]
    fn streaming_walks_the_footprint_in_order() {
        let o = offsets(Pattern::Streaming, 256, 4096, 2, 1);
        let one: Vec<u64> = (0..16).map(|i| i * 256).collect();
        assert_eq!(o, [one.clone(), one].concat());
    }

    #[test]
    fn repeated_touches_only_the_hot_set() {
        let o = offsets(Pattern::Repeated, 8, 8 << 20, 2, 3);
        assert_eq!(o.len(), 2 * (1 << 20));
        let distinct: std::collections::BTreeSet<u64> = o.iter().copied().collect();
        assert_eq!(distinct.len(), HOT_ITEMS);
        assert!(distinct.iter().all(|&x| x % 8 == 0 && x < 8 << 20));
        // Spread over the footprint, not bunched at its start.
        assert!(*distinct.last().unwrap() > 4 << 20);
    }

    #[test]
    fn a_footprint_smaller_than_the_hot_set_uses_every_slot() {
        let o = offsets(Pattern::Repeated, 64, 64 * 10, 50, 3);
        let distinct: std::collections::BTreeSet<u64> = o.iter().copied().collect();
        assert_eq!(distinct.len(), 10);
    }

    #[test]
    fn pattern_names_round_trip() {
        for p in Pattern::ALL {
            assert_eq!(p.name().parse::<Pattern>().unwrap(), p);
        }
        assert!("zigzag"
            .parse::<Pattern>()
            .unwrap_err()
            .contains("known: random, permutation, streaming, repeated"));
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut r = Rng::new(42);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            seen[r.below(10) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| (800..1200).contains(&c)), "{seen:?}");
    }
}
