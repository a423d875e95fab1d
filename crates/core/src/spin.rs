//! How a waiting call spends its spin budget before it sleeps.
//!
//! Spinning keeps a round trip at the cost of a cache line or a loopback segment, where a
//! sleep and wake-up costs tens of microseconds on a virtual machine. But a spinner keeps
//! its core from everyone else, the peer it waits for included when both share a core
//! (more ranks than cores, or a peer the scheduler placed beside it): the peer then makes
//! progress only once the spinner gives up and sleeps. So a [`Spin`] polls without a pause
//! for its first [`Spin::ALONE`], then hands the core over (`sched_yield`) every so often
//! until the budget is spent. A yield that came back at once found nobody else wanting
//! the core, and the next waits twice as long; one that let another thread run keeps the
//! hand-overs frequent. Spinning therefore costs nothing extra while the peer runs on a
//! core of its own, and a peer on the same core runs within microseconds.
//!
//! Measured with both ends of `accio bench transport` on one core (`taskset -c 0`), where
//! before each wait spun its whole 50 us budget first: one-way 8 B over shm 54 -> 9.8 us,
//! over tcp 60 -> 16 us; 64 KiB over tcp streamed at 4.1-4.4 GB/s instead of 1.7-2.8. On
//! cores of their own, 8 runs each interleaved with the build before, shm and tcp latency
//! and streaming from 8 B to 2 MiB were the same within the host's noise.

use std::time::{Duration, Instant};

/// One wait's spin: call [`go_on`](Spin::go_on) between looks at what is awaited.
#[derive(Debug)]
pub struct Spin {
    start: Instant,
    budget: Duration,
    /// Elapsed time of the next hand-over.
    next: Duration,
    /// Time between hand-overs, doubled after each that nobody took.
    gap: Duration,
    /// The peer shares this core ([`Spin::share_core`]): hand it over at every call.
    shared: bool,
}

impl Spin {
    /// How long a wait polls before its first hand-over: longer than most waits spinning
    /// is for (a 64 KiB round trip over shm takes about 7 us here), so that they meet no
    /// system call; a yield costs about 0.5 us on this VM, and a message that lands
    /// during one waits for it.
    pub const ALONE: Duration = Duration::from_micros(8);
    /// A hand-over that took longer than this let another thread run.
    const TAKEN: Duration = Duration::from_micros(2);

    /// A spin of at most `budget`.
    pub fn new(budget: Duration) -> Spin {
        Spin {
            start: Instant::now(),
            budget,
            next: Self::ALONE,
            gap: Self::ALONE,
            shared: false,
        }
    }

    /// The peer awaited last ran on this core: it makes progress only while this thread
    /// lets it, so from now on every call hands the core over, none polls first.
    pub fn share_core(&mut self) {
        self.shared = true;
        self.next = Duration::ZERO;
    }

    /// True while the budget lasts; now and then first hands the core to any other thread
    /// that wants it (see the module docs). False once the budget is spent: time to sleep.
    pub fn go_on(&mut self) -> bool {
        let at = self.start.elapsed();
        if at >= self.budget {
            return false;
        }
        if at >= self.next {
            let t = Instant::now();
            std::thread::yield_now();
            if self.shared {
                self.next = Duration::ZERO;
            } else {
                self.gap = next_gap(self.gap, t.elapsed(), self.budget);
                self.next = self.start.elapsed() + self.gap;
            }
        }
        true
    }
}

/// The time to the next hand-over after one that took `took`: back to [`Spin::ALONE`] if
/// another thread ran meanwhile, else twice `gap`, at most `budget`.
fn next_gap(gap: Duration, took: Duration, budget: Duration) -> Duration {
    if took > Spin::TAKEN {
        Spin::ALONE
    } else {
        (gap * 2).min(budget)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spin_ends_when_its_budget_is_spent() {
        let budget = Duration::from_millis(5);
        let t = Instant::now();
        let mut s = Spin::new(budget);
        let mut looks = 0u64;
        while s.go_on() {
            looks += 1;
        }
        assert!(t.elapsed() >= budget);
        assert!(looks > 0);
        assert!(!s.go_on(), "a spent spin stays spent");
    }

    #[test]
    fn a_spin_beside_its_peer_hands_the_core_over_at_every_call() {
        let mut s = Spin::new(Duration::from_secs(1));
        s.share_core();
        for _ in 0..3 {
            assert!(s.go_on());
            assert_eq!(s.next, Duration::ZERO, "the next call hands over again");
        }
    }

    #[test]
    fn a_zero_budget_never_spins() {
        assert!(!Spin::new(Duration::ZERO).go_on());
    }

    #[test]
    fn hand_overs_nobody_takes_come_ever_less_often_and_taken_ones_often() {
        let (a, budget) = (Spin::ALONE, Duration::from_micros(50));
        let quick = Duration::from_nanos(500);
        assert_eq!(next_gap(a, quick, budget), 2 * a);
        assert_eq!(next_gap(2 * a, quick, budget), 4 * a);
        assert_eq!(
            next_gap(4 * a, quick, budget),
            budget,
            "never past the budget"
        );
        let ran_another = Duration::from_micros(30);
        assert_eq!(next_gap(4 * a, ran_another, budget), a);
    }
}
