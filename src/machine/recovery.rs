//! What follows a failed request ([`Machine::recover`]), and the counts that docs/protocol.md
//! §6.10 describes: the failure count that `max_retries` bounds, when it starts over (progress,
//! the 410 that ends an outage), how a run of refused connections and a repeated 410 move the
//! backoff, and whether the store is in step with the server ([`Effect::Stale`],
//! [`Effect::Fresh`]).

use std::time::{Duration, Instant};

use super::backoff::BackoffState;
use super::{Effect, Machine, Next, State, Then};
use crate::error::{Error, Recovery};
use crate::notice::RelistReason;
use crate::wire::request::ListParams;

impl Machine {
    /// A request failed: recover as [`Error::recovery`] classes the error, from where `failed`
    /// left off. The one place that decides what follows a failure (410 Gone, too large, a
    /// refusal, transport trouble), for lists, streaming lists and watches alike
    /// (docs/protocol.md §6.9). `failure`: `Refused` when the request never reached a server
    /// (the recovery is then `Resume`'s), otherwise `Reported`.
    pub(super) fn recover(
        &mut self,
        e: Error,
        failed: Failed,
        failure: Failure,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) -> Then {
        self.lose(fx);
        let recovery = e.recovery();
        if matches!(recovery, Recovery::Expired | Recovery::TooLarge) {
            log::debug!("{e}; relisting");
        }
        // A relist in progress is abandoned, whatever follows.
        if !matches!(failed, Failed::Watch { .. }) {
            fx.push(Effect::AbortInit);
        }
        match (recovery, failed) {
            // The watch's resourceVersion expired: relist not older than it, unpaged.
            (Recovery::Expired, Failed::Watch { rv }) => {
                self.relist_quietly(State::Sync { resume: Some(rv), reason: RelistReason::Expired }, now, fx)
            }
            // An expired continue token or relist resourceVersion: start over, consistent and paged.
            (Recovery::Expired, Failed::List(_) | Failed::StreamInit { .. }) => {
                self.relist_quietly(State::Sync { resume: None, reason: RelistReason::Expired }, now, fx)
            }
            // The server has not reached the resourceVersion asked for: forget it.
            (Recovery::TooLarge, Failed::List(_) | Failed::StreamInit { .. } | Failed::Watch { .. }) => {
                self.relist_quietly(State::Sync { resume: None, reason: RelistReason::TooLarge }, now, fx)
            }
            (Recovery::Resume, Failed::Watch { rv }) => self.fail(e, failure, State::Watch { rv }, now, fx),
            // Broken line, in-stream error, 4xx: relist not older than what we have.
            (Recovery::Relist | Recovery::Refused, Failed::Watch { rv }) => {
                self.fail(e, failure, State::Sync { resume: Some(rv), reason: RelistReason::Error }, now, fx)
            }
            // A failed list relists from the resourceVersion it asked for, if that was a resume
            // point (not "any", not a later page).
            (Recovery::Resume | Recovery::Relist | Recovery::Refused, Failed::List(next)) => {
                let paging = next.continue_token.is_some();
                let resume = next.resource_version.filter(|rv| rv != "0" && !paging);
                self.fail(e, failure, State::Sync { resume, reason: RelistReason::Error }, now, fx)
            }
            // Throttling or transport trouble says nothing about streaming support, nor does
            // a server that does not know or admit the user (401, 403: the same refusal would
            // meet a paged list; a permission granted later is granted to both).
            (Recovery::Resume, Failed::StreamInit { resume }) => {
                self.fail(e, failure, State::Sync { resume, reason: RelistReason::Error }, now, fx)
            }
            (Recovery::Refused, Failed::StreamInit { resume }) if matches!(e.status(), Some(401 | 403)) => {
                self.fail(e, failure, State::Sync { resume, reason: RelistReason::Error }, now, fx)
            }
            // Rejected (422 and friends), failed in-stream or a broken line: list + watch.
            (Recovery::Relist | Recovery::Refused, Failed::StreamInit { resume }) => {
                self.fall_back(&e.to_string(), resume, now, fx)
            }
        }
    }

    /// A failure: report it (as `failure` says), count it, and either end (retry limit) or
    /// wait, then go to `then` (docs/protocol.md §6.10).
    pub(super) fn fail(&mut self, e: Error, failure: Failure, then: State, now: Instant, fx: &mut Vec<Effect>) -> Then {
        self.lose(fx);
        if failure != Failure::Expired {
            self.expiring = false;
        }
        let again = self.refusing.is_some();
        let counts = match failure {
            Failure::Refused => {
                let step = self.backoff.step();
                let run = self.refusing.get_or_insert(Refusals { counts_at: now, step });
                run.counts(now, &self.backoff)
            }
            Failure::Reported | Failure::Expired => {
                self.refusing = None;
                true
            }
        };
        if counts {
            self.failures = self.failures.saturating_add(1);
        }
        if let Some(max) = self.config.max_retries
            && self.failures > max
        {
            return (State::Ended, Next::End(Error::GaveUp { attempts: self.failures, last: Box::new(e) }));
        }
        let delay = match failure {
            Failure::Refused => self.backoff.delay_refused(now, &mut self.rng),
            Failure::Reported | Failure::Expired => self.backoff.delay_after(&e, now, &mut self.rng),
        };
        log::debug!("{e}; retrying in {delay:?}");
        let report = match failure {
            Failure::Reported => true,
            Failure::Refused => !again,
            Failure::Expired => false,
        };
        if report {
            fx.push(Effect::Report(e));
        }
        (then, Next::Wait(delay))
    }

    /// An expected recovery (410, too large): the server answered, so it is not failing. The
    /// relist goes out at once and the failures before it (an outage) no longer count, unless
    /// this repeats the last failure with no watch taking hold in between: then it backs off,
    /// so a server that always answers 410 cannot cause a hot loop (docs/protocol.md §6.10).
    fn relist_quietly(&mut self, then: State, now: Instant, fx: &mut Vec<Effect>) -> Then {
        if !self.expiring {
            self.expiring = true;
            self.failures = 0;
            return self.request(then, now, fx);
        }
        let e = Error::transport("relist", "the server keeps answering 410 Gone or \"too large resource version\"");
        self.fail(e, Failure::Expired, then, now, fx)
    }

    /// Streaming lists do not work with this server: relist with paged lists, now and from now on.
    pub(super) fn fall_back(&mut self, why: &str, resume: Option<String>, now: Instant, fx: &mut Vec<Effect>) -> Then {
        log::debug!("streaming lists unavailable ({why}); using paged lists from now on");
        self.streaming_unsupported = true;
        self.request(State::Sync { resume, reason: RelistReason::StreamingFallback }, now, fx)
    }

    /// How long the server asked us to wait, as the backoff policy bounds it
    /// ([`BackoffState::server_wait`]).
    pub(crate) fn server_wait(&self, e: &Error) -> Option<Duration> {
        self.backoff.server_wait(e)
    }

    pub(super) fn progress(&mut self) {
        self.failures = 0;
    }

    /// The store is no longer known to be in step with the server (docs/protocol.md §6.10).
    pub(super) fn lose(&mut self, fx: &mut Vec<Effect>) {
        if self.freshness == Freshness::Fresh {
            self.freshness = Freshness::Stale;
            fx.push(Effect::Stale);
        }
    }

    /// A sync completed: the store is in step with the server.
    pub(super) fn synced(&mut self, fx: &mut Vec<Effect>) {
        if self.freshness == Freshness::Stale {
            fx.push(Effect::Fresh);
        }
        self.freshness = Freshness::Fresh;
    }

    /// The watch took hold: the server accepted its resourceVersion (it delivered an event or a
    /// bookmark, or ended the watch cleanly at its deadline, `CONFIRM` for a watch resumed while
    /// stale). A stale store is in step again, and a 410 after this is no repeat of one before it.
    pub(super) fn took_hold(&mut self, fx: &mut Vec<Effect>) {
        self.expiring = false;
        if self.freshness == Freshness::Stale {
            self.synced(fx);
        }
    }
}

/// A run of refused connections: retried sooner than the backoff's step (docs/protocol.md
/// §6.10), but counted as failures only as often as the backoff would have retried, so that
/// `max_retries` gives a restarting server as much time as it did when every failure waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Refusals {
    /// When the next refused connection of the run counts as a failure.
    counts_at: Instant,
    /// The step the backoff would have reached, had each counted one raised it.
    step: u32,
}

impl Refusals {
    /// Whether a refused connection at `now` counts as a failure: the first of the run does,
    /// then one each time the backoff's typical delay at the run's step has passed.
    fn counts(&mut self, now: Instant, backoff: &BackoffState) -> bool {
        if now < self.counts_at {
            return false;
        }
        self.counts_at = now.checked_add(backoff.typical(self.step)).unwrap_or(now);
        self.step = self.step.saturating_add(1);
        true
    }
}

/// The request that failed, with what [`Machine::recover`] needs to go on from it.
pub(super) enum Failed {
    /// A list page, requested with these parameters.
    List(ListParams),
    /// A streaming list that would have resumed the store from `resume`.
    StreamInit { resume: Option<String> },
    /// A watch from `rv`, where the store is in sync.
    Watch { rv: String },
}

/// How [`Machine::fail`] handles a failure: whether it is reported, and how it moves the backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failure {
    /// Reported to consumers; the backoff takes its next step.
    Reported,
    /// A connection the server's host refused: reported unless the failure before it was one
    /// too; it waits at most the first step and does not raise the backoff.
    Refused,
    /// The server answered 410 Gone (or "too large") again: an expected recovery, not
    /// reported; the backoff takes its next step.
    Expired,
}

/// Whether the store is known to be in step with the server (docs/protocol.md §6.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Freshness {
    /// Before the first sync (the store is not ready yet).
    Unsynced,
    /// In step: a sync completed, and nothing failed since.
    Fresh,
    /// Not known to be in step since a failure, until a relist completes or a resumed watch
    /// takes hold.
    Stale,
}
