//! The backoff policy: jittered exponential backoff that resets after a healthy period, the
//! short wait after a refused connection, and how a server's `Retry-After` bounds and extends a
//! delay (docs/protocol.md §6.10). Clock and RNG are injected.

use std::time::{Duration, Instant};

use rand::Rng;

use crate::config::Backoff;
use crate::error::Error;

/// The running state of a [`Backoff`] policy.
///
/// Invariant: `attempt` (the step) counts the failures since the last reset, but for refused
/// connections, which do not raise it.
#[derive(Debug, Clone)]
pub(crate) struct BackoffState {
    policy: Backoff,
    attempt: u32,
    /// When the last failure happened; a failure after `reset_after` of health starts over.
    last_failure: Option<Instant>,
}

impl BackoffState {
    pub(crate) fn new(policy: Backoff) -> Self {
        BackoffState { policy, attempt: 0, last_failure: None }
    }

    /// The delay before retrying after the failure `e` at `now`: the jittered backoff, or the
    /// server's `Retry-After` ([`server_wait`](Self::server_wait)) when that is longer.
    pub(crate) fn delay_after(&mut self, e: &Error, now: Instant, rng: &mut impl Rng) -> Duration {
        let delay = self.next_delay(now, rng);
        self.server_wait(e).map_or(delay, |ra| ra.max(delay))
    }

    /// The delay before retrying a connection that the server's host refused at `now` (nothing
    /// listens on the port: a server restarting or not up yet). Such a retry costs the server
    /// nothing, so it waits no longer than the first step (jittered up to `initial`), and the
    /// step stays where it is: a server that comes back after any outage is reached within
    /// `initial` of listening again. It counts as a failure for `reset_after`.
    pub(crate) fn delay_refused(&mut self, now: Instant, rng: &mut impl Rng) -> Duration {
        self.failed_at(now);
        jittered(self.cap(0), rng)
    }

    /// The step the backoff has reached: the exponent of the next delay's cap.
    pub(crate) fn step(&self) -> u32 {
        self.attempt
    }

    /// What the `step`-th delay waits on average (half its cap: the jitter is uniform). A run
    /// of refused connections, retried sooner, counts against `max_retries` at this pace
    /// (`Machine::fail`), so a retry limit gives a restarting server as long as it did when
    /// every failure waited its step.
    pub(crate) fn typical(&self, step: u32) -> Duration {
        self.cap(step) / 2
    }

    /// How long the server asked us to wait (`Retry-After`), clamped to the backoff maximum: a
    /// watch cache minutes behind is a broken cache, so no server can park a watcher for longer
    /// than its own backoff would (30 s by default). The only place a server's wait is bounded.
    pub(crate) fn server_wait(&self, e: &Error) -> Option<Duration> {
        e.retry_after().map(|ra| ra.min(self.policy.max))
    }

    /// The delay before the next attempt, after a failure at `now`.
    ///
    /// Full jitter: uniform in `[0, cap]`, where `cap = min(max, initial × factor^attempt)`.
    fn next_delay(&mut self, now: Instant, rng: &mut impl Rng) -> Duration {
        self.failed_at(now);
        let cap = self.cap(self.attempt);
        self.attempt = self.attempt.saturating_add(1);
        jittered(cap, rng)
    }

    /// A failure at `now`: after `reset_after` without one, the step starts over.
    fn failed_at(&mut self, now: Instant) {
        if let Some(last) = self.last_failure
            && now.saturating_duration_since(last) >= self.policy.reset_after
        {
            self.attempt = 0;
        }
        self.last_failure = Some(now);
    }

    /// The largest delay the `attempt`-th consecutive failure may wait.
    fn cap(&self, attempt: u32) -> Duration {
        let max = self.policy.max.as_secs_f64();
        // powi saturates to infinity on overflow; min() brings it back to the cap.
        let grown = self.policy.initial.as_secs_f64() * self.policy.factor.powi(attempt.min(1024) as i32);
        Duration::try_from_secs_f64(grown.min(max).max(0.0)).unwrap_or(self.policy.max)
    }
}

/// Full jitter: uniform in `[0, cap]`.
fn jittered(cap: Duration, rng: &mut impl Rng) -> Duration {
    if cap.is_zero() {
        return cap;
    }
    // A huge `max` (Duration::MAX) is larger than an f64 of seconds converts back: keep the cap.
    Duration::try_from_secs_f64(rng.random_range(0.0..=cap.as_secs_f64())).unwrap_or(cap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    fn policy() -> Backoff {
        Backoff::default()
    }

    #[test]
    fn delays_are_jittered_below_a_doubling_cap() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut b = BackoffState::new(policy());
        let now = Instant::now();
        let caps = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0];
        for cap in caps {
            let d = b.next_delay(now, &mut rng).as_secs_f64();
            assert!(d <= cap + 1e-9, "delay {d} above cap {cap}");
        }
    }

    #[test]
    fn jitter_spreads_delays_over_the_range() {
        let mut rng = SmallRng::seed_from_u64(1);
        let now = Instant::now();
        let delays: Vec<f64> = (0..200)
            .map(|_| {
                let mut b = BackoffState::new(policy());
                b.next_delay(now, &mut rng).as_secs_f64()
            })
            .collect();
        let low = delays.iter().filter(|d| **d < 0.4).count();
        assert!(low > 50 && low < 150, "{low} of 200 below half the cap");
    }

    #[test]
    fn a_healthy_period_resets_the_delay() {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut b = BackoffState::new(policy());
        let t0 = Instant::now();
        for _ in 0..6 {
            b.next_delay(t0, &mut rng);
        }
        assert_eq!(b.attempt, 6);
        let later = t0 + Duration::from_secs(121);
        let d = b.next_delay(later, &mut rng);
        assert!(d <= Duration::from_millis(800));
        assert_eq!(b.attempt, 1);
    }

    #[test]
    fn a_retry_after_extends_the_delay_up_to_the_backoff_maximum() {
        let mut rng = SmallRng::seed_from_u64(5);
        let mut b = BackoffState::new(policy());
        let now = Instant::now();
        let asked = |secs| {
            Error::Api(Box::new(crate::error::ApiError {
                retry_after: Some(Duration::from_secs(secs)),
                ..Default::default()
            }))
        };
        assert_eq!(b.delay_after(&asked(7), now, &mut rng), Duration::from_secs(7));
        assert_eq!(b.delay_after(&asked(u64::MAX), now, &mut rng), Duration::from_secs(30));
        assert!(b.delay_after(&Error::transport("watch", "reset"), now, &mut rng) <= Duration::from_millis(3200));
    }

    /// However far an outage raised the step, a refused connection is retried within the first
    /// step's delay, and leaves the step as it was for the failures the server answers.
    #[test]
    fn a_refused_connection_waits_at_most_the_first_step_and_leaves_the_step() {
        let mut rng = SmallRng::seed_from_u64(9);
        let mut b = BackoffState::new(policy());
        let t0 = Instant::now();
        for _ in 0..5 {
            b.next_delay(t0, &mut rng);
        }
        for _ in 0..100 {
            assert!(b.delay_refused(t0, &mut rng) <= Duration::from_millis(800));
        }
        assert_eq!(b.attempt, 5);
        // It is a failure all the same: no healthy period while connections are refused.
        b.delay_refused(t0 + Duration::from_secs(100), &mut rng);
        b.next_delay(t0 + Duration::from_secs(200), &mut rng);
        assert_eq!(b.attempt, 6);
        // After a healthy period, the step starts over.
        b.delay_refused(t0 + Duration::from_secs(400), &mut rng);
        assert_eq!(b.attempt, 0);
    }

    #[test]
    fn huge_attempt_counts_stay_at_the_cap() {
        let b = BackoffState { policy: policy(), attempt: u32::MAX, last_failure: None };
        assert_eq!(b.cap(u32::MAX), Duration::from_secs(30));
    }
}
