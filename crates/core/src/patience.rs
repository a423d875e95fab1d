//! Waiting for a listener: a connect started before its listener binds waits for it, up to
//! the connect's timeout, as MPI ranks and services started in any order expect.

use std::time::{Duration, Instant};

use crate::Error;

/// The pauses of a connect waiting for its listener to appear: from 1 ms, doubling up to
/// 50 ms (a listener bound late is found within 50 ms; a connect waiting 10 s for one
/// costs about 200 tries).
#[derive(Debug)]
pub struct ListenerWait {
    start: Instant,
    timeout: Duration,
    nap: Duration,
}

impl ListenerWait {
    /// Waits for at most `timeout` from now.
    pub fn new(timeout: Duration) -> ListenerWait {
        ListenerWait {
            start: Instant::now(),
            timeout,
            nap: Duration::from_millis(1),
        }
    }

    /// Time left before the deadline.
    pub fn left(&self) -> Duration {
        self.timeout.saturating_sub(self.start.elapsed())
    }

    /// Sleeps before the next try; false (without sleeping) once the deadline has passed.
    pub fn pause(&mut self) -> bool {
        match self.next_pause() {
            Some(nap) => {
                std::thread::sleep(nap);
                true
            }
            None => false,
        }
    }

    /// How long to wait before the next try (for a caller that keeps working meanwhile);
    /// `None` once the deadline has passed.
    pub fn next_pause(&mut self) -> Option<Duration> {
        let left = self.left();
        if left.is_zero() {
            return None;
        }
        let nap = self.nap.min(left);
        self.nap = (self.nap * 2).min(Duration::from_millis(50));
        Some(nap)
    }

    /// The error once the deadline has passed with nobody listening at `addr`: a timeout
    /// that says so and how long the connect waited.
    pub fn gave_up(&self, addr: &str, why: &str) -> Error {
        Error::Timeout {
            op: "connect",
            resource: format!("{addr} ({why})"),
            after: self.timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_grow_and_stop_at_the_deadline() {
        let mut w = ListenerWait::new(Duration::from_millis(30));
        let t = Instant::now();
        let mut tries = 0;
        while w.pause() {
            tries += 1;
        }
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(30), "{took:?}");
        assert!(took < Duration::from_millis(200), "{took:?}");
        // 1 + 2 + 4 + 8 + 16 ms reach 30 ms on the fifth pause (the last one cut short).
        assert!((4..=6).contains(&tries), "{tries}");
        let e = w.gave_up("shm://x", "no listener was bound to this name");
        assert_eq!(
            e.to_string(),
            "connect on shm://x (no listener was bound to this name) timed out after 30ms"
        );
    }
}
