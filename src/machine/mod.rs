//! The pure list → page → watch → relist state machine: `State`, `Input`, `step()` → `Step`.
//!
//! No I/O, no sleeping, no locks: [`Machine::step`] returns a [`Step`] (the [`Effect`]s to apply,
//! then one [`Next`] move), the engine performs it and feeds back what happened as [`Input`]s,
//! with the current time. Randomness (backoff jitter, watch timeouts)
//! comes from a seeded RNG, so every transition is testable with plain values.
//!
//! Every failed request goes through [`Machine::recover`], which decides what follows from how
//! [`Error::recovery`] classes the error; the delay before a retry is [`backoff`]'s. When the
//! failure count and the backoff start over, and when the store is stale, is written in
//! docs/protocol.md §6.10; the machine says both ([`Effect::Stale`], [`Effect::Fresh`]).
//!
//! This file holds the states, the machine and [`Machine::step`], with one handler per state.
//! Beside it: what a step takes and gives back (`step.rs`: [`Input`], [`Step`]), the request
//! each state leads to (`request.rs`), what follows a failure and whether the store is in step
//! (`recovery.rs`), the backoff policy (`backoff.rs`) and the drift check's comparison
//! (`drift.rs`).
//!
//! ```text
//!            ┌──────────────── 410 / too large / error (after backoff) ───────────────┐
//!            v                                                                         │
//!   ┌──── Sync ─────┐  streaming list  ┌─ StreamInit ─┐ end marker                     │
//!   │ (full relist) ├─────────────────>│ accumulating ├────────────┐                   │
//!   └──────┬────────┘<── fallback ─────┴──────────────┘            v                   │
//!          │ paged list                                   ┌─── Watching ───┐───────────┘
//!          v                  last page                   │ stream open at │
//!   ┌──── List ─────┐─────────────────> Watch ───────────>│ resume RV      │
//!   │ page n (token)│                  (in sync at RV) <──┴────────────────┘ clean end,
//!   └───────────────┘                                       transport error (backoff)
//! ```

pub(crate) mod backoff;
pub(crate) mod drift;
mod recovery;
mod request;
mod step;

use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::SmallRng;

use self::backoff::BackoffState;
use self::recovery::{Failed, Failure, Freshness, Refusals};
pub(crate) use self::step::{Checked, Effect, Input, Next, Step, WatchInput};
use crate::config::{Config, DEFAULT_TIMEOUT_SECS};
use crate::error::{Error, Result};
use crate::notice::RelistReason;
use crate::wire::request::ListParams;

/// A watch that ends cleanly this soon with no event is treated as a failure, so a misbehaving
/// server cannot cause a hot reconnect loop (client-go's reflector: "very short watch", 1 s).
const SHORT_WATCH: Duration = Duration::from_secs(1);

/// Where the watcher is. Each variant holds only what is valid in it.
#[derive(Debug, Clone, PartialEq)]
enum State {
    /// Next: a full sync. `resume` is the last synced RV (relist "not older than" it, without
    /// paging); `None` lists per the configured semantic, paged. Left by the first list or
    /// streaming request.
    Sync { resume: Option<String>, reason: RelistReason },
    /// A paged list is in progress; `next` requests the next page (first page when it has no
    /// token). Left at the last page (→ `Watch`) or on failure (→ `Sync`).
    List { next: ListParams },
    /// A streaming list is open; initial objects accumulate until the end-marker bookmark.
    /// Left at the marker (→ `Watching` on the same stream) or on failure/fallback (→ `Sync`).
    StreamInit { resume: Option<String>, opened: Instant, last_seen: Instant },
    /// In sync at `rv`; next: a watch from there. Left when the watch is requested.
    Watch { rv: String },
    /// In sync at `rv`, comparing the store with the server (`Config::drift_check`). Left with
    /// the result: a watch from `rv`, or a relist.
    Checking { rv: String },
    /// A watch is open; `rv` advances with every event and bookmark. Left when the stream ends.
    Watching { rv: String, events: u64, opened: Instant, last_seen: Instant, stall: Duration },
    /// The watcher has ended; every input is ignored.
    Ended,
}

/// The state machine and the settings it needs.
pub(crate) struct Machine {
    state: State,
    config: Config,
    backoff: BackoffState,
    rng: SmallRng,
    /// Consecutive failures since the last progress or the server's last answer to an
    /// outage (docs/protocol.md §6.10): what `max_retries` bounds.
    failures: u32,
    /// The last failure was a 410 Gone or "too large resource version", and no watch has taken
    /// hold since (an event, a bookmark, a clean end) nor has another failure come: another one
    /// is the server answering so again, and backs off.
    expiring: bool,
    /// The last failure was a refused connection, and nothing else happened since: the run of
    /// them, whose next one is retried without being reported again.
    refusing: Option<Refusals>,
    /// Whether the store is in step with the server.
    freshness: Freshness,
    /// The server rejected or ignored a streaming list: use paged lists from now on.
    streaming_unsupported: bool,
    /// When the store was last fully synced (for `relist_interval`).
    last_sync: Option<Instant>,
    /// When the store was last known to match the server: a completed sync or drift check.
    last_verified: Option<Instant>,
    /// The list version of the last drift check that found nothing out of step, until a watch
    /// opened after it ends cleanly (see `Machine::drift_position`).
    checked_at: Option<String>,
    /// A version the watch has covered although its own position (moved only by the events
    /// and bookmarks of its scope) may be older: a drift check's list version, after a watch
    /// opened after that check ended cleanly. Forgotten at every sync.
    covered: Option<String>,
}

/// A state to be in and the move that leaves it: what each handler returns.
type Then = (State, Next);

impl Machine {
    pub(crate) fn new(config: Config, seed: u64) -> Machine {
        Machine {
            state: State::Sync { resume: None, reason: RelistReason::Initial },
            backoff: BackoffState::new(config.backoff),
            config,
            rng: SmallRng::seed_from_u64(seed),
            failures: 0,
            expiring: false,
            refusing: None,
            freshness: Freshness::Unsynced,
            streaming_unsupported: false,
            last_sync: None,
            last_verified: None,
            checked_at: None,
            covered: None,
        }
    }

    /// The watcher's shard changed (`Config::shard_group`): whatever is in progress is
    /// abandoned (`relisting`: a relist had begun, and is aborted) and a relist from scratch
    /// follows, with the new shard's selector.
    pub(crate) fn resync(&mut self, reason: RelistReason, relisting: bool, now: Instant) -> Step {
        let mut fx = Vec::new();
        if relisting {
            fx.push(Effect::AbortInit);
        }
        let (state, next) = self.request(State::Sync { resume: None, reason }, now, &mut fx);
        self.state = state;
        Step { effects: fx, next }
    }

    /// One transition: consume `input` observed at `now`; say what to apply and what to do next.
    /// One handler per state.
    pub(crate) fn step(&mut self, input: Input<'_>, now: Instant) -> Step {
        let mut fx = Vec::new();
        if !matches!(input, Input::Start | Input::Refused(_)) {
            // Something other than a refused connection happened: the run of them is over.
            self.refusing = None;
        }
        let state = std::mem::replace(&mut self.state, State::Ended);
        let (state, next) = match (state, input) {
            (State::Ended, _) => (State::Ended, Next::End(Error::Stopped)),
            (state, Input::Start) => self.request(state, now, &mut fx),
            (State::List { next }, input) => self.on_list(next, input, now, &mut fx),
            (State::StreamInit { resume, opened, last_seen }, input) => {
                self.on_stream_init(resume, opened, last_seen, input, now, &mut fx)
            }
            (State::Watching { rv, events, opened, last_seen, stall }, input) => {
                self.on_watching(Watching { rv, events, opened, last_seen, stall }, input, now, &mut fx)
            }
            (State::Checking { rv }, Input::DriftChecked(result)) => self.on_drift_checked(rv, result, now, &mut fx),
            (state, input) => self.unexpected(state, input, now, &mut fx),
        };
        self.state = state;
        Step { effects: fx, next }
    }

    /// A paged list is in progress.
    fn on_list(&mut self, mut next: ListParams, input: Input<'_>, now: Instant, fx: &mut Vec<Effect>) -> Then {
        match input {
            // Progress counts at the last page only: a list whose later pages keep failing
            // (say, a continue token that always expires) must still back off.
            Input::Page { continue_token: Some(token), .. } => {
                next.continue_token = Some(token.to_owned());
                // Follow-up pages carry no resourceVersion (docs/protocol.md §5.1).
                next.resource_version = None;
                next.version_match = None;
                (State::List { next: next.clone() }, Next::List(next))
            }
            Input::Page { continue_token: None, resource_version: Some(rv) } => {
                self.progress();
                fx.push(Effect::InitDone(known(rv)));
                self.synced(fx);
                self.last_sync = Some(now);
                self.last_verified = Some(now);
                self.request(State::Watch { rv: rv.to_owned() }, now, fx)
            }
            Input::Page { continue_token: None, resource_version: None } => {
                fx.push(Effect::AbortInit);
                let e = Error::transport("list", "the list has no metadata.resourceVersion to watch from");
                self.fail(e, Failure::Reported, State::Sync { resume: None, reason: RelistReason::Error }, now, fx)
            }
            Input::ListFailed(e) => self.recover(e, Failed::List(next), Failure::Reported, now, fx),
            Input::Refused(e) => self.recover(e, Failed::List(next), Failure::Refused, now, fx),
            input => self.unexpected(State::List { next }, input, now, fx),
        }
    }

    /// A streaming list is open, before its end marker.
    fn on_stream_init(
        &mut self,
        resume: Option<String>,
        opened: Instant,
        last_seen: Instant,
        input: Input<'_>,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) -> Then {
        let fallback = |m: &mut Machine, why: &str, fx: &mut Vec<Effect>, resume: Option<String>| {
            fx.push(Effect::AbortInit);
            m.fall_back(why, resume, now, fx)
        };
        match input {
            Input::WatchOpened => {
                fx.push(Effect::BeginInit);
                (State::StreamInit { resume, opened, last_seen: now }, Next::ReadOn)
            }
            Input::Event(WatchInput::Added { .. }) => {
                fx.push(Effect::InitApply);
                (State::StreamInit { resume, opened, last_seen: now }, Next::ReadOn)
            }
            // Another shard's initial object: nothing to apply, and, as every initial event's,
            // its version says nothing of the list's (docs/protocol.md §2.3).
            Input::Event(WatchInput::Dropped { .. }) => (State::StreamInit { resume, opened, last_seen }, Next::ReadOn),
            Input::Event(WatchInput::Bookmark { resource_version, initial_events_end: true }) => {
                self.progress();
                self.last_sync = Some(now);
                self.last_verified = Some(now);
                fx.push(Effect::InitDone(known(resource_version)));
                self.synced(fx);
                let stall = self.stall_for(self.config.timeout.unwrap_or(Duration::from_secs(DEFAULT_TIMEOUT_SECS.1)));
                let rv = resource_version.to_owned();
                (State::Watching { rv, events: 1, opened, last_seen: now, stall }, Next::ReadOn)
            }
            // A conforming server sends only ADDED before the marker: this one ignores
            // sendInitialEvents (docs/protocol.md §7.4).
            Input::Event(_) => fallback(self, "the server sent a non-ADDED event before the end marker", fx, resume),
            Input::Idle if now.saturating_duration_since(last_seen) >= self.config.streaming_marker_timeout => {
                fallback(self, "no end-of-initial-events bookmark arrived in time", fx, resume)
            }
            Input::Idle => (State::StreamInit { resume, opened, last_seen }, Next::ReadOn),
            Input::WatchEnded => {
                fallback(self, "the stream ended before the end-of-initial-events bookmark", fx, resume)
            }
            Input::WatchFailed(e) => self.recover(e, Failed::StreamInit { resume }, Failure::Reported, now, fx),
            Input::Refused(e) => self.recover(e, Failed::StreamInit { resume }, Failure::Refused, now, fx),
            // Nothing began: no relist in progress to abandon.
            Input::ProbeFailed(e) => {
                self.fail(e, Failure::Reported, State::Sync { resume, reason: RelistReason::Error }, now, fx)
            }
            input => self.unexpected(State::StreamInit { resume, opened, last_seen }, input, now, fx),
        }
    }

    /// A watch is open.
    fn on_watching(&mut self, w: Watching, input: Input<'_>, now: Instant, fx: &mut Vec<Effect>) -> Then {
        let Watching { rv, events, opened, last_seen, stall } = w;
        match input {
            Input::WatchOpened => (State::Watching { rv, events, opened, last_seen, stall }, Next::ReadOn),
            Input::Event(ev) => {
                let new_rv = match ev {
                    WatchInput::Added { resource_version } | WatchInput::Modified { resource_version } => {
                        fx.push(Effect::Apply);
                        resource_version
                    }
                    WatchInput::Deleted { resource_version } => {
                        fx.push(Effect::Delete);
                        resource_version
                    }
                    WatchInput::Bookmark { resource_version, .. } | WatchInput::Dropped { resource_version } => {
                        resource_version
                    }
                };
                if !fx.is_empty() {
                    self.progress();
                }
                // Resume from the newest RV seen (docs/protocol.md §2.3); an empty one keeps the old.
                // The state's buffer is reused: this runs once per event.
                let mut rv = rv;
                if !new_rv.is_empty() {
                    rv.clear();
                    rv.push_str(new_rv);
                    fx.push(Effect::Reached(new_rv.to_owned()));
                }
                self.took_hold(fx);
                (State::Watching { rv, events: events + 1, opened, last_seen: now, stall }, Next::ReadOn)
            }
            Input::Idle if now.saturating_duration_since(last_seen) >= stall => {
                let e = Error::transport("watch", format!("no data for {stall:?}; the connection is presumed dead"));
                self.fail(e, Failure::Reported, State::Watch { rv }, now, fx)
            }
            Input::Idle => (State::Watching { rv, events, opened, last_seen, stall }, Next::ReadOn),
            Input::WatchEnded if events == 0 && now.saturating_duration_since(opened) < SHORT_WATCH => {
                let e = Error::transport("watch", "the server ended the watch at once without any event");
                self.fail(e, Failure::Reported, State::Watch { rv }, now, fx)
            }
            Input::WatchEnded => {
                log::trace!("watch ended cleanly at resourceVersion {rv}");
                self.took_hold(fx);
                // Opened after the last drift check, it was sent every change of its scope up to
                // that check's list first: it has covered that version, events or not.
                if let Some(list) = self.checked_at.take() {
                    self.covered = Some(list);
                }
                self.request(State::Watch { rv }, now, fx)
            }
            Input::WatchFailed(e) => self.recover(e, Failed::Watch { rv }, Failure::Reported, now, fx),
            Input::Refused(e) => self.recover(e, Failed::Watch { rv }, Failure::Refused, now, fx),
            input => self.unexpected(State::Watching { rv, events, opened, last_seen, stall }, input, now, fx),
        }
    }

    /// A drift check finished.
    fn on_drift_checked(
        &mut self,
        rv: String,
        result: Result<Checked<'_>>,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) -> Then {
        self.last_verified = Some(now);
        match result {
            Ok(Checked { mismatched: 0, list }) => {
                self.checked_at = known(list);
                self.request(State::Watch { rv }, now, fx)
            }
            Ok(Checked { mismatched: n, .. }) => {
                log::info!("drift check: {n} objects out of step with the server; relisting");
                self.lose(fx);
                self.request(State::Sync { resume: None, reason: RelistReason::Drift }, now, fx)
            }
            Err(e) => {
                // The watch itself is fine: report, and check again next interval.
                fx.push(Effect::Report(e));
                self.request(State::Watch { rv }, now, fx)
            }
        }
    }

    /// An input that cannot happen in this state: a bug in the worker; recover by resyncing.
    fn unexpected(&mut self, state: State, input: Input<'_>, now: Instant, fx: &mut Vec<Effect>) -> Then {
        log::error!("bug: unexpected {input:?} in state {state:?}; resyncing");
        self.lose(fx);
        fx.push(Effect::AbortInit);
        self.request(State::Sync { resume: None, reason: RelistReason::Error }, now, fx)
    }
}

/// A resourceVersion the server sent, if it sent one (an empty one says nothing).
fn known(rv: &str) -> Option<String> {
    Some(rv).filter(|rv| !rv.is_empty()).map(str::to_owned)
}

/// The fields of `State::Watching`, for its handler.
struct Watching {
    rv: String,
    events: u64,
    opened: Instant,
    last_seen: Instant,
    stall: Duration,
}

#[cfg(test)]
mod tests {
    use super::recovery::Freshness;
    use super::request::CONFIRM;
    use super::*;
    use crate::config::InitialListStrategy;
    use crate::error::{ApiError, Recovery};
    use crate::wire::request::{VersionMatch, WatchParams};

    /// The default configuration with paged lists (the default is a streaming list), which
    /// most of these tests follow page by page.
    fn paged() -> Config {
        Config::default().initial_list_strategy(InitialListStrategy::ListWatch)
    }

    /// The step that applies `effects`, then reads on.
    fn read_on(effects: &[Effect]) -> Step {
        Step { effects: effects.to_vec(), next: Next::ReadOn }
    }

    fn t0() -> Instant {
        Instant::now()
    }

    fn api(code: u16, reason: &str, in_stream: bool) -> Error {
        Error::Api(Box::new(ApiError {
            context: "test".into(),
            code,
            reason: reason.into(),
            message: String::new(),
            retry_after: None,
            too_large_resource_version: false,
            in_stream,
        }))
    }

    fn too_large() -> Error {
        let Error::Api(mut a) = api(504, "Timeout", false) else { unreachable!() };
        a.too_large_resource_version = true;
        Error::Api(a)
    }

    /// The effects other than relist counts and the store's freshness.
    fn effects(s: &Step) -> Vec<&Effect> {
        s.effects.iter().filter(|e| !matches!(e, Effect::Relist(_) | Effect::Stale)).collect()
    }

    fn list_params(next: &Next) -> &ListParams {
        match next {
            Next::List(p) => p,
            other => panic!("expected List, got {other:?}"),
        }
    }

    fn watch_params(next: &Next) -> &WatchParams {
        match next {
            Next::Watch { params, .. } => params,
            other => panic!("expected Watch, got {other:?}"),
        }
    }

    /// Drives a machine through a first list and into a watch at `rv`.
    fn watching(config: Config, rv: &str) -> (Machine, Instant) {
        let now = t0();
        let mut m = Machine::new(config, 1);
        m.step(Input::Start, now);
        let step = m.step(Input::Page { resource_version: Some(rv), continue_token: None }, now);
        assert!(matches!(&step.next, Next::Watch { .. }));
        let step = m.step(Input::WatchOpened, now);
        assert_eq!(step, read_on(&[]));
        (m, now)
    }

    #[test]
    fn first_sync_is_a_consistent_paged_list() {
        let mut m = Machine::new(paged().labels("app=web"), 1);
        let step = m.step(Input::Start, t0());
        assert_eq!(step.effects[0], Effect::Relist(RelistReason::Initial));
        assert_eq!(step.effects[1], Effect::BeginInit);
        let p = list_params(&step.next);
        assert_eq!(p.limit, Some(500));
        assert_eq!(p.resource_version, None);
        assert_eq!(p.label_selector.as_deref(), Some("app=web"));
    }

    #[test]
    fn first_sync_is_a_streaming_list_by_default() {
        let mut m = Machine::new(Config::default().labels("app=web"), 1);
        let step = m.step(Input::Start, t0());
        assert_eq!(step.effects, vec![Effect::Relist(RelistReason::Initial)]);
        let w = watch_params(&step.next);
        assert!(w.send_initial_events && w.bookmarks);
        assert_eq!(w.label_selector.as_deref(), Some("app=web"));
    }

    #[test]
    fn one_table_decides_how_every_failure_is_recovered_from() {
        // A 408 resumes the watch (it used to relist while `is_retryable` called it retryable).
        let (mut m, now) = watching(paged(), "5");
        let step = m.step(Input::WatchFailed(api(408, "Timeout", false)), now);
        assert!(matches!(&step.next, Next::Wait(_)));
        assert!(!step.effects.iter().any(|e| matches!(e, Effect::Relist(_))), "{step:?}");
        assert_eq!(watch_params(&m.step(Input::Start, now).next).resource_version.as_deref(), Some("5"));
        // An in-stream 500 cannot be resumed: relist past it.
        let (mut m, now) = watching(paged(), "5");
        m.step(Input::WatchFailed(api(500, "InternalError", true)), now);
        assert!(m.step(Input::Start, now).effects.contains(&Effect::Relist(RelistReason::Error)));
        for (e, recovery, retryable) in [
            (api(410, "Gone", true), Recovery::Expired, true),
            (too_large(), Recovery::TooLarge, true),
            (api(429, "TooManyRequests", false), Recovery::Resume, true),
            (api(503, "ServiceUnavailable", true), Recovery::Relist, true),
            (api(403, "Forbidden", false), Recovery::Refused, false),
            (api(403, "Forbidden", true), Recovery::Refused, false),
            (Error::transport("watch", "reset"), Recovery::Resume, true),
        ] {
            assert_eq!((e.recovery(), e.is_retryable()), (recovery, retryable), "{e}");
        }
    }

    #[test]
    fn any_semantic_lists_at_resource_version_zero() {
        let mut m = Machine::new(paged().any_semantic(), 1);
        let step = m.step(Input::Start, t0());
        assert_eq!(list_params(&step.next).resource_version.as_deref(), Some("0"));
    }

    #[test]
    fn follow_up_pages_carry_the_token_and_no_resource_version() {
        let mut m = Machine::new(paged().any_semantic(), 1);
        m.step(Input::Start, t0());
        let step = m.step(Input::Page { resource_version: Some("10"), continue_token: Some("T1") }, t0());
        let p = list_params(&step.next);
        assert_eq!(p.continue_token.as_deref(), Some("T1"));
        assert_eq!(p.resource_version, None);
        assert_eq!(p.limit, Some(500));
        assert!(effects(&step).is_empty(), "no InitDone before the last page: {step:?}");
    }

    #[test]
    fn the_last_page_completes_the_init_and_watches_from_the_list_rv() {
        let mut m = Machine::new(paged(), 1);
        m.step(Input::Start, t0());
        let step = m.step(Input::Page { resource_version: Some("42"), continue_token: None }, t0());
        assert_eq!(
            step.effects[0],
            Effect::InitDone(Some("42".into())),
            "the store reflects the list once it is switched in"
        );
        let w = watch_params(&step.next);
        assert_eq!(w.resource_version.as_deref(), Some("42"));
        assert!(w.bookmarks);
        assert!(!w.send_initial_events);
        let secs = w.timeout.as_secs();
        assert!((60..90).contains(&secs), "default watch timeout {secs}s");
    }

    #[test]
    fn watch_events_apply_and_advance_the_resume_rv() {
        let (mut m, now) = watching(paged(), "42");
        let step = m.step(Input::Event(WatchInput::Added { resource_version: "43" }), now);
        assert_eq!(step, read_on(&[Effect::Apply, Effect::Reached("43".into())]));
        let step = m.step(Input::Event(WatchInput::Deleted { resource_version: "44" }), now);
        assert_eq!(step, read_on(&[Effect::Delete, Effect::Reached("44".into())]));
        let step =
            m.step(Input::Event(WatchInput::Bookmark { resource_version: "50", initial_events_end: false }), now);
        assert_eq!(step, read_on(&[Effect::Reached("50".into())]), "a bookmark moves the store's version");
        let step = m.step(Input::Event(WatchInput::Modified { resource_version: "" }), now);
        assert_eq!(step, read_on(&[Effect::Apply]), "an event without a version says nothing of it");
        let step = m.step(Input::WatchEnded, now + Duration::from_secs(60));
        assert_eq!(watch_params(&step.next).resource_version.as_deref(), Some("50"));
        assert!(effects(&step).is_empty(), "a clean end re-watches without relisting: {step:?}");
    }

    /// An event of another shard, dropped unread by a sharded watcher whose server does not
    /// filter, moves the watch on as a bookmark does: resuming from the last event of its own
    /// shard would meet 410 Gone sooner than needed. Among a streaming list's initial events it
    /// moves nothing.
    #[test]
    fn a_dropped_event_of_another_shard_moves_the_resume_rv_as_a_bookmark_does() {
        let (mut m, now) = watching(paged(), "42");
        m.step(Input::Event(WatchInput::Added { resource_version: "43" }), now);
        let step = m.step(Input::Event(WatchInput::Dropped { resource_version: "47" }), now);
        assert_eq!(step, read_on(&[Effect::Reached("47".into())]));
        let step = m.step(Input::Event(WatchInput::Dropped { resource_version: "" }), now);
        assert_eq!(step, read_on(&[]), "no version read: nothing moves");
        // Data arrived: the stall clock restarts (a shard group's follower reads with a short
        // idle timeout, and a watch of only other shards' events is not a dead one).
        let State::Watching { stall, .. } = m.state.clone() else { panic!() };
        let later = now + stall - Duration::from_secs(1);
        m.step(Input::Event(WatchInput::Dropped { resource_version: "48" }), later);
        assert_eq!(m.step(Input::Idle, now + stall), read_on(&[]));
        // It counts as an event: a watch that saw only dropped ones and ended at once is fine.
        let step = m.step(Input::WatchEnded, now + stall);
        assert_eq!(watch_params(&step.next).resource_version.as_deref(), Some("48"));
        assert!(effects(&step).is_empty(), "{step:?}");
        // Streaming: an initial event of another shard neither applies nor moves anything.
        let mut m = Machine::new(Config::default().streaming_lists(), 1);
        m.step(Input::Start, now);
        m.step(Input::WatchOpened, now);
        let step = m.step(Input::Event(WatchInput::Dropped { resource_version: "3" }), now);
        assert_eq!(step, read_on(&[]));
        let marker = WatchInput::Bookmark { resource_version: "9", initial_events_end: true };
        assert_eq!(m.step(Input::Event(marker), now), read_on(&[Effect::InitDone(Some("9".into()))]));
    }

    /// A relist in progress counts from `InitDone`: until then the store shows, and reports the
    /// version of, the state before it.
    #[test]
    fn a_relist_moves_the_stores_version_only_at_its_last_page() {
        let (mut m, now) = watching(paged(), "42");
        let step = m.step(Input::WatchFailed(api(410, "Expired", true)), now);
        assert!(matches!(step.next, Next::List(_)), "{step:?}");
        assert!(!step.effects.iter().any(|e| matches!(e, Effect::Reached(_))), "{step:?}");
        let step = m.step(Input::Page { resource_version: Some("60"), continue_token: None }, now);
        assert_eq!(step.effects[0], Effect::InitDone(Some("60".into())));
    }

    #[test]
    fn a_clean_end_rewatches_without_relisting() {
        let (mut m, now) = watching(paged(), "7");
        m.step(Input::Event(WatchInput::Modified { resource_version: "8" }), now);
        let step = m.step(Input::WatchEnded, now + Duration::from_secs(61));
        assert!(step.effects.is_empty(), "{step:?}");
        assert_eq!(watch_params(&step.next).resource_version.as_deref(), Some("8"));
    }

    #[test]
    fn a_very_short_empty_watch_backs_off() {
        let (mut m, now) = watching(paged(), "7");
        let step = m.step(Input::WatchEnded, now + Duration::from_millis(10));
        assert!(matches!(&step.next, Next::Wait(_)), "{step:?}");
        let step = m.step(Input::Start, now + Duration::from_secs(1));
        assert_eq!(watch_params(&step.next).resource_version.as_deref(), Some("7"));
    }

    #[test]
    fn gone_during_a_watch_relists_not_older_than_the_resume_rv_unpaged() {
        for e in [api(410, "Expired", true), api(410, "Gone", false)] {
            let (mut m, now) = watching(paged(), "42");
            let step = m.step(Input::WatchFailed(e), now);
            assert_eq!(step.effects, [Effect::Stale, Effect::Relist(RelistReason::Expired), Effect::BeginInit]);
            let p = list_params(&step.next);
            assert_eq!(p.resource_version.as_deref(), Some("42"));
            assert_eq!(p.limit, None);
            assert!(!step.effects.iter().any(|e| matches!(e, Effect::Report(_))), "410 is recovery, not an error");
        }
    }

    #[test]
    fn gone_again_on_the_relist_falls_back_to_a_consistent_paged_list() {
        let (mut m, now) = watching(paged(), "42");
        m.step(Input::WatchFailed(api(410, "Expired", true)), now);
        let step = m.step(Input::ListFailed(api(410, "Expired", false)), now);
        assert_eq!(step.effects[0], Effect::AbortInit);
        // The second 410 in a row goes through backoff.
        assert!(matches!(&step.next, Next::Wait(_)), "{step:?}");
        let step = m.step(Input::Start, now);
        let p = list_params(&step.next);
        assert_eq!(p.resource_version, None);
        assert_eq!(p.limit, Some(500));
    }

    /// An outage (failures that raise the backoff), then the server answers the resumed watch
    /// with 410 Gone: the relist goes out at once, whatever the outage built up.
    #[test]
    fn the_relist_after_a_410_that_ends_an_outage_goes_out_at_once() {
        for answer in [api(410, "Expired", true), api(410, "Gone", false), too_large()] {
            let (mut m, now) = watching(paged(), "42");
            for _ in 0..8 {
                let step = m.step(Input::WatchFailed(Error::transport("watch", "connection reset")), now);
                assert!(matches!(&step.next, Next::Wait(_)), "{step:?}");
                m.step(Input::Start, now);
            }
            let step = m.step(Input::WatchFailed(answer), now);
            assert!(matches!(&step.next, Next::List(_)), "at once: {step:?}");
        }
    }

    /// The server answered: the failures of the outage before it no longer count against
    /// `max_retries`; those after it do.
    #[test]
    fn a_410_after_an_outage_starts_the_failure_count_over() {
        let (mut m, now) = watching(paged().max_retries(3), "42");
        for _ in 0..3 {
            m.step(Input::WatchFailed(Error::transport("watch", "connection reset")), now);
            m.step(Input::Start, now);
        }
        let step = m.step(Input::WatchFailed(api(410, "Expired", true)), now);
        assert!(matches!(&step.next, Next::List(_)), "{step:?}");
        for _ in 0..3 {
            let step = m.step(Input::ListFailed(api(503, "ServiceUnavailable", false)), now);
            assert!(matches!(&step.next, Next::Wait(_)), "{step:?}");
            m.step(Input::Start, now);
        }
        let step = m.step(Input::ListFailed(api(503, "ServiceUnavailable", false)), now);
        assert!(matches!(&step.next, Next::End(Error::GaveUp { attempts: 4, .. })), "{step:?}");
    }

    /// A server that answers every watch with 410, right after each completed relist, is met
    /// with the growing backoff: the list between two of its 410s is no watch that took hold.
    #[test]
    fn a_410_again_right_after_the_relist_of_a_410_backs_off() {
        let (mut m, now) = watching(paged(), "42");
        let step = m.step(Input::WatchFailed(api(410, "Expired", true)), now);
        assert!(matches!(&step.next, Next::List(_)), "the first relists at once: {step:?}");
        m.step(Input::Page { resource_version: Some("50"), continue_token: None }, now);
        m.step(Input::WatchOpened, now);
        let step = m.step(Input::WatchFailed(api(410, "Expired", true)), now);
        assert!(matches!(&step.next, Next::Wait(_)), "the second backs off: {step:?}");
        let step = m.step(Input::Start, now);
        assert_eq!(list_params(&step.next).resource_version.as_deref(), Some("50"));
        // A watch that took hold (an event) ends the run: the next 410 relists at once.
        m.step(Input::Page { resource_version: Some("60"), continue_token: None }, now);
        m.step(Input::WatchOpened, now);
        m.step(Input::Event(WatchInput::Modified { resource_version: "61" }), now);
        let step = m.step(Input::WatchFailed(api(410, "Expired", true)), now);
        assert!(matches!(&step.next, Next::List(_)), "{step:?}");
    }

    fn refused() -> Error {
        Error::transport("watch pods", "connection to 127.0.0.1:6443 refused")
    }

    fn delay(step: &Step) -> Duration {
        match step.next {
            Next::Wait(d) => d,
            ref other => panic!("expected a wait, got {other:?}"),
        }
    }

    fn reports(step: &Step) -> usize {
        step.effects.iter().filter(|e| matches!(e, Effect::Report(_))).count()
    }

    /// A refused connection (nothing listens: the server is restarting) is retried within the
    /// first step's delay however long the outage, and reported once per run of them; the
    /// backoff of the failures the server answers is left where it was.
    #[test]
    fn refused_connections_are_retried_within_the_first_step_and_reported_once_per_run() {
        let (mut m, now) = watching(paged(), "42");
        let step = m.step(Input::WatchFailed(Error::transport("watch pods", "connection reset")), now);
        assert_eq!(reports(&step), 1);
        let mut told = 0;
        for _ in 0..50 {
            let step = m.step(Input::Start, now);
            assert_eq!(watch_params(&step.next).resource_version.as_deref(), Some("42"));
            let step = m.step(Input::Refused(refused()), now);
            assert!(delay(&step) <= Duration::from_millis(800), "{step:?}");
            told += reports(&step);
        }
        assert_eq!(told, 1, "the first refused connection is reported, the run of them is not");
        // The server answers at last, with an error: reported, and its delay is the step the
        // answered failures had reached (the second), not the fifty-second.
        m.step(Input::Start, now);
        let step = m.step(Input::WatchFailed(api(503, "ServiceUnavailable", false)), now);
        assert_eq!(reports(&step), 1);
        assert!(delay(&step) <= Duration::from_millis(1600), "{step:?}");
        // A refused connection after it starts a new run: reported again.
        m.step(Input::Start, now);
        assert_eq!(reports(&m.step(Input::Refused(refused()), now)), 1);
    }

    /// Refused connections are failures all the same for `max_retries`: a watcher told to give
    /// up gives up when nothing listens. Retried sooner than the backoff would, they count only
    /// as often as it would have retried (on average: half each step's cap), so the limit gives
    /// a restarting server as long as before: with `max_retries(3)` and the default backoff,
    /// the fourth failure comes 0.4 + 0.8 + 1.6 = 2.8 s into the run, however often it retried.
    #[test]
    fn refused_connections_count_against_max_retries_at_the_backoffs_pace() {
        let (mut m, t0) = watching(paged().max_retries(3), "42");
        let mut now = t0;
        let mut tries = 0;
        let gave_up = loop {
            let step = m.step(Input::Refused(refused()), now);
            tries += 1;
            match step.next {
                Next::Wait(d) => now += d.max(Duration::from_millis(1)),
                Next::End(Error::GaveUp { attempts: 4, .. }) => break now,
                ref other => panic!("{other:?}"),
            }
            m.step(Input::Start, now);
        };
        let ran = gave_up - t0;
        assert!(ran >= Duration::from_millis(2800) && ran < Duration::from_millis(3600), "{ran:?} after {tries} tries");
        assert!(tries > 4, "retried more often than counted: {tries}");
        // Anything else ends the run: the next refused connection counts at once.
        let (mut m, now) = watching(paged().max_retries(2), "42");
        m.step(Input::Refused(refused()), now);
        m.step(Input::Start, now);
        m.step(Input::WatchFailed(api(503, "ServiceUnavailable", false)), now);
        m.step(Input::Start, now);
        let step = m.step(Input::Refused(refused()), now);
        assert!(matches!(&step.next, Next::End(Error::GaveUp { attempts: 3, .. })), "{step:?}");
    }

    /// A refused list or streaming list goes on as its failure would: the relist again.
    #[test]
    fn a_refused_list_is_retried_as_a_failed_one_is() {
        let (mut m, now) = watching(paged(), "42");
        m.step(Input::WatchFailed(api(500, "InternalError", true)), now);
        let step = m.step(Input::Start, now);
        assert_eq!(list_params(&step.next).resource_version.as_deref(), Some("42"));
        let step = m.step(Input::Refused(refused()), now);
        assert!(step.effects.contains(&Effect::AbortInit), "{step:?}");
        assert!(delay(&step) <= Duration::from_millis(800), "{step:?}");
        let step = m.step(Input::Start, now);
        assert_eq!(list_params(&step.next).resource_version.as_deref(), Some("42"));
        let mut m = Machine::new(Config::default().streaming_lists(), 1);
        m.step(Input::Start, now);
        let step = m.step(Input::Refused(refused()), now);
        assert!(delay(&step) <= Duration::from_millis(800), "{step:?}");
        assert!(watch_params(&m.step(Input::Start, now).next).send_initial_events, "still streaming");
    }

    /// The outage refused every connection; the server, back, answers 410: the relist goes at
    /// once, and the store is fresh when it completes.
    #[test]
    fn after_refused_connections_a_410_relists_at_once() {
        let (mut m, now) = watching(paged(), "42");
        m.step(Input::WatchFailed(Error::transport("watch pods", "connection reset")), now);
        for _ in 0..20 {
            m.step(Input::Start, now);
            m.step(Input::Refused(refused()), now);
        }
        m.step(Input::Start, now);
        m.step(Input::WatchOpened, now);
        let step = m.step(Input::WatchFailed(api(410, "Expired", true)), now);
        assert_eq!(list_params(&step.next).resource_version.as_deref(), Some("42"));
        let step = m.step(Input::Page { resource_version: Some("90"), continue_token: None }, now);
        assert_eq!(effects(&step)[..2], [&Effect::InitDone(Some("90".into())), &Effect::Fresh]);
    }

    /// After the server answered, failures raise the backoff again from the step they had
    /// reached (a server that keeps failing is still bounded), and a 410 after one of them is
    /// no repeat of the 410 before: the server answered in between.
    #[test]
    fn failures_after_the_answer_back_off_and_a_410_after_them_relists_at_once() {
        let (mut m, now) = watching(paged(), "42");
        m.step(Input::WatchFailed(api(410, "Expired", true)), now);
        let mut longest = Duration::ZERO;
        for _ in 0..10 {
            let step = m.step(Input::ListFailed(api(503, "ServiceUnavailable", false)), now);
            longest = longest.max(delay(&step));
            m.step(Input::Start, now);
        }
        assert!(longest > Duration::from_millis(800) && longest <= Duration::from_secs(30), "{longest:?}");
        let step = m.step(Input::ListFailed(api(410, "Expired", false)), now);
        assert!(matches!(&step.next, Next::List(_)), "{step:?}");
    }

    /// Stale from the first failure after a sync (not before the first one, and not for a
    /// watch the server ended cleanly) until a relist completes.
    #[test]
    fn the_store_is_stale_from_the_first_failure_until_a_relist_completes() {
        let mut m = Machine::new(paged(), 1);
        let now = t0();
        m.step(Input::Start, now);
        let step = m.step(Input::ListFailed(api(503, "ServiceUnavailable", false)), now);
        assert!(!step.effects.contains(&Effect::Stale), "not synced yet: {step:?}");
        m.step(Input::Start, now);
        let step = m.step(Input::Page { resource_version: Some("5"), continue_token: None }, now);
        assert!(!step.effects.contains(&Effect::Fresh), "{step:?}");
        m.step(Input::WatchOpened, now);
        let step = m.step(Input::WatchEnded, now + Duration::from_secs(61));
        assert!(step.effects.is_empty(), "a clean end is no failure: {step:?}");
        m.step(Input::WatchOpened, now + Duration::from_secs(61));
        let step = m.step(Input::WatchFailed(Error::transport("watch", "reset")), now + Duration::from_secs(62));
        assert_eq!(step.effects[0], Effect::Stale);
        m.step(Input::Start, now);
        let step = m.step(Input::Refused(refused()), now);
        assert!(!step.effects.contains(&Effect::Stale), "once: {step:?}");
        m.step(Input::Start, now);
        m.step(Input::WatchOpened, now);
        let step = m.step(Input::WatchFailed(api(410, "Expired", true)), now);
        assert!(!step.effects.contains(&Effect::Stale), "{step:?}");
        let step = m.step(Input::Page { resource_version: Some("9"), continue_token: None }, now);
        assert_eq!(effects(&step), [&Effect::InitDone(Some("9".into())), &Effect::Fresh]);
        // A drift check that finds the store out of step makes it stale too.
        let mut m = Machine::new(Config::default(), 1);
        m.freshness = Freshness::Fresh;
        m.state = State::Checking { rv: "6".into() };
        let step = m.step(Input::DriftChecked(Ok(Checked { mismatched: 2, list: "7" })), now);
        assert_eq!(step.effects[0], Effect::Stale);
    }

    /// A watch resumed from the store's version makes a stale store fresh once it takes hold:
    /// an event or bookmark, or its clean end at the deadline, which it asks to be `CONFIRM`
    /// while the store is stale; an error first keeps it stale.
    #[test]
    fn a_resumed_watch_makes_a_stale_store_fresh_when_it_takes_hold() {
        let later = |s: u64| t0() + Duration::from_secs(s);
        let broken = || {
            let (mut m, now) = watching(paged(), "42");
            m.step(Input::WatchFailed(Error::transport("watch", "reset")), now);
            let step = m.step(Input::Start, now);
            assert_eq!(watch_params(&step.next).timeout, CONFIRM, "{step:?}");
            assert!(matches!(step.next, Next::Watch { idle, .. } if idle > CONFIRM * 10), "{step:?}");
            m.step(Input::WatchOpened, now);
            (m, now)
        };
        let (mut m, now) = broken();
        let step = m.step(Input::Event(WatchInput::Modified { resource_version: "43" }), now);
        assert_eq!(step, read_on(&[Effect::Apply, Effect::Reached("43".into()), Effect::Fresh]));
        let (mut m, now) = broken();
        let step =
            m.step(Input::Event(WatchInput::Bookmark { resource_version: "43", initial_events_end: false }), now);
        assert_eq!(step, read_on(&[Effect::Reached("43".into()), Effect::Fresh]));
        let (mut m, now) = broken();
        assert_eq!(m.step(Input::Idle, now + CONFIRM / 2), read_on(&[]), "silence alone says nothing");
        let step = m.step(Input::WatchEnded, now + CONFIRM);
        assert_eq!(step.effects, [Effect::Fresh]);
        // In step again: the next watch has the usual timeout.
        assert!((60..90).contains(&watch_params(&step.next).timeout.as_secs()), "{step:?}");
        let step = m.step(Input::WatchEnded, later(70));
        assert!(step.effects.is_empty(), "once: {step:?}");
        let (mut m, now) = broken();
        let step = m.step(Input::WatchFailed(api(410, "Expired", true)), now);
        assert!(!step.effects.contains(&Effect::Fresh), "{step:?}");
    }

    #[test]
    fn too_large_resource_version_forgets_the_rv() {
        let (mut m, now) = watching(paged(), "42");
        let step = m.step(Input::WatchFailed(too_large()), now);
        assert_eq!(step.effects[..2], [Effect::Stale, Effect::Relist(RelistReason::TooLarge)]);
        assert_eq!(list_params(&step.next).resource_version, None);
    }

    #[test]
    fn an_expired_continue_token_restarts_the_list() {
        let mut m = Machine::new(paged(), 1);
        let now = t0();
        m.step(Input::Start, now);
        m.step(Input::Page { resource_version: Some("10"), continue_token: Some("T1") }, now);
        let step = m.step(Input::ListFailed(api(410, "Expired", false)), now);
        assert_eq!(step.effects[0], Effect::AbortInit);
        assert!(step.effects.contains(&Effect::BeginInit));
        let p = list_params(&step.next);
        assert_eq!(p.continue_token, None);
        assert_eq!(p.limit, Some(500));
    }

    #[test]
    fn continue_tokens_that_keep_expiring_back_off() {
        let mut m = Machine::new(paged().page_size(1), 1);
        let now = t0();
        m.step(Input::Start, now);
        m.step(Input::Page { resource_version: Some("10"), continue_token: Some("T1") }, now);
        let step = m.step(Input::ListFailed(api(410, "Expired", false)), now);
        assert!(matches!(&step.next, Next::List(_)), "the first expiry restarts at once: {step:?}");
        m.step(Input::Page { resource_version: Some("10"), continue_token: Some("T2") }, now);
        let step = m.step(Input::ListFailed(api(410, "Expired", false)), now);
        assert!(matches!(&step.next, Next::Wait(_)), "the second one backs off: {step:?}");
    }

    #[test]
    fn a_huge_retry_after_is_clamped_to_the_backoff_maximum() {
        for secs in [u64::MAX, 31_536_000, u64::from(u32::MAX)] {
            let (mut m, now) = watching(paged(), "42");
            let Error::Api(mut e) = api(429, "TooManyRequests", false) else { unreachable!() };
            e.retry_after = Some(Duration::from_secs(secs));
            let e = Error::Api(e);
            assert_eq!(m.server_wait(&e), Some(Duration::from_secs(30)));
            let step = m.step(Input::WatchFailed(e), now);
            assert_eq!(&step.next, &Next::Wait(Duration::from_secs(30)), "Retry-After {secs}");
        }
    }

    #[test]
    fn intervals_too_long_to_add_to_an_instant_are_never_due() {
        let config = paged().relist_interval(Duration::MAX).drift_check(Duration::MAX);
        let (mut m, now) = watching(config, "42");
        let step = m.step(Input::WatchEnded, now + Duration::from_secs(61));
        let w = watch_params(&step.next);
        assert!((60..90).contains(&w.timeout.as_secs()), "{:?}", w.timeout);
    }

    #[test]
    fn throttling_waits_at_least_retry_after_and_rewatches_from_the_same_rv() {
        let (mut m, now) = watching(paged(), "42");
        let Error::Api(mut e) = api(429, "TooManyRequests", false) else { unreachable!() };
        e.retry_after = Some(Duration::from_secs(7));
        let step = m.step(Input::WatchFailed(Error::Api(e)), now);
        assert!(matches!(step.effects[..], [Effect::Stale, Effect::Report(_)]), "{step:?}");
        match &step.next {
            Next::Wait(d) => assert!(*d >= Duration::from_secs(7), "{d:?}"),
            other => panic!("{other:?}"),
        }
        let step = m.step(Input::Start, now);
        assert_eq!(watch_params(&step.next).resource_version.as_deref(), Some("42"));
    }

    #[test]
    fn forbidden_is_reported_and_retried_with_a_full_relist() {
        let mut m = Machine::new(paged(), 1);
        let now = t0();
        m.step(Input::Start, now);
        let step = m.step(Input::ListFailed(api(403, "Forbidden", false)), now);
        assert!(matches!(&step.effects[1], Effect::Report(e) if e.status() == Some(403)), "{step:?}");
        assert!(matches!(&step.next, Next::Wait(_)));
        let step = m.step(Input::Start, now);
        assert!(matches!(&step.next, Next::List(_)));
    }

    #[test]
    fn a_transport_error_mid_watch_resumes_after_backoff() {
        let (mut m, now) = watching(paged(), "42");
        let step = m.step(Input::WatchFailed(Error::transport("watch pods", "connection reset")), now);
        assert!(matches!(&step.next, Next::Wait(d) if *d <= Duration::from_millis(800)));
        let step = m.step(Input::Start, now);
        assert_eq!(watch_params(&step.next).resource_version.as_deref(), Some("42"));
    }

    #[test]
    fn an_undecodable_event_relists_past_it() {
        let (mut m, now) = watching(paged(), "42");
        let e = Error::Decode(Box::new(crate::error::DecodeError {
            context: "watch".into(),
            line: Some(1),
            len: 3,
            message: "bad".into(),
            snippet: "abc".into(),
        }));
        m.step(Input::WatchFailed(e), now);
        let step = m.step(Input::Start, now);
        assert_eq!(list_params(&step.next).resource_version.as_deref(), Some("42"));
    }

    #[test]
    fn idle_beyond_the_stall_timeout_declares_the_connection_dead() {
        let config = paged().timeout(Duration::from_secs(60));
        let (mut m, now) = watching(config, "42");
        let step = m.step(Input::Idle, now + Duration::from_secs(10));
        assert_eq!(step, read_on(&[]), "idle before the stall limit keeps reading");
        let step = m.step(Input::Idle, now + Duration::from_secs(91));
        assert!(matches!(&step.effects[..], [Effect::Stale, Effect::Report(Error::Transport { .. })]), "{step:?}");
        assert!(matches!(&step.next, Next::Wait(_)));
    }

    #[test]
    fn the_default_stall_limit_finds_a_dead_connection_within_two_minutes() {
        let (mut m, now) = watching(paged(), "1");
        let State::Watching { stall, .. } = m.state.clone() else { panic!() };
        assert!(stall < Duration::from_secs(120), "{stall:?}");
        assert!(stall > Duration::from_secs(60), "{stall:?}");
        let step = m.step(Input::Idle, now + stall);
        assert!(matches!(&step.next, Next::Wait(_)));
    }

    #[test]
    fn max_retries_ends_the_watcher_with_gave_up() {
        let mut m = Machine::new(paged().max_retries(2), 1);
        let now = t0();
        m.step(Input::Start, now);
        for _ in 0..2 {
            let step = m.step(Input::ListFailed(api(503, "ServiceUnavailable", false)), now);
            assert!(matches!(&step.next, Next::Wait(_)));
            m.step(Input::Start, now);
        }
        let step = m.step(Input::ListFailed(api(503, "ServiceUnavailable", false)), now);
        assert!(matches!(&step.next, Next::End(Error::GaveUp { attempts: 3, .. })), "{step:?}");
        assert!(matches!(&m.step(Input::Start, now).next, Next::End(_)));
    }

    #[test]
    fn progress_resets_the_retry_count() {
        let (mut m, now) = watching(paged().max_retries(1), "1");
        m.step(Input::WatchFailed(Error::transport("w", "reset")), now);
        m.step(Input::Start, now);
        m.step(Input::WatchOpened, now);
        m.step(Input::Event(WatchInput::Modified { resource_version: "2" }), now);
        let step = m.step(Input::WatchFailed(Error::transport("w", "reset")), now);
        assert!(matches!(&step.next, Next::Wait(_)), "{step:?}");
    }

    #[test]
    fn periodic_relist_caps_the_watch_timeout_and_relists_when_due() {
        let config = paged().relist_interval(Duration::from_secs(30));
        let (mut m, now) = watching(config, "5");
        let State::Watching { .. } = m.state else { panic!() };
        // The watch opened at `now`, right after the sync: its timeout is capped at 30 s.
        let mut m2 = Machine::new(paged().relist_interval(Duration::from_secs(30)), 1);
        m2.step(Input::Start, now);
        let step = m2.step(Input::Page { resource_version: Some("5"), continue_token: None }, now);
        assert_eq!(watch_params(&step.next).timeout, Duration::from_secs(30));
        m.step(Input::Event(WatchInput::Modified { resource_version: "6" }), now);
        let step = m.step(Input::WatchEnded, now + Duration::from_secs(31));
        assert!(step.effects.contains(&Effect::Relist(RelistReason::Periodic)), "{step:?}");
        assert_eq!(list_params(&step.next).resource_version.as_deref(), Some("6"));
    }

    #[test]
    fn a_due_drift_check_runs_between_watches_and_relists_only_on_a_mismatch() {
        let config = paged().drift_check(Duration::from_secs(30));
        let (mut m, now) = watching(config, "5");
        m.step(Input::Event(WatchInput::Modified { resource_version: "6" }), now);
        // Not due yet: a plain re-watch.
        let step = m.step(Input::WatchEnded, now + Duration::from_secs(10));
        assert_eq!(watch_params(&step.next).resource_version.as_deref(), Some("6"));
        m.step(Input::WatchOpened, now + Duration::from_secs(10));
        let step = m.step(Input::WatchEnded, now + Duration::from_secs(31));
        let Next::DriftCheck { params, rv } = &step.next else { panic!("{step:?}") };
        assert_eq!((rv.as_str(), params.resource_version.as_deref()), ("6", Some("6")));
        assert_eq!((params.version_match, params.limit), (Some(VersionMatch::NotOlderThan), None));
        // In step: watch on, and the next check is a full interval away.
        let later = now + Duration::from_secs(32);
        let step = m.step(Input::DriftChecked(Ok(Checked { mismatched: 0, list: "7" })), later);
        assert_eq!(watch_params(&step.next).timeout, Duration::from_secs(30));
        m.step(Input::WatchOpened, later);
        let step = m.step(Input::WatchEnded, later + Duration::from_secs(30));
        assert!(matches!(&step.next, Next::DriftCheck { .. }), "{step:?}");
        // A mismatch relists; a failed check is reported and the watch goes on.
        let mut m2 = Machine::new(paged(), 1);
        m2.state = State::Checking { rv: "6".into() };
        let step = m2.step(Input::DriftChecked(Ok(Checked { mismatched: 2, list: "7" })), later);
        assert!(step.effects.contains(&Effect::Relist(RelistReason::Drift)), "{step:?}");
        m2.state = State::Checking { rv: "6".into() };
        let step = m2.step(Input::DriftChecked(Err(Error::transport("drift", "reset"))), later);
        assert!(matches!(step.effects[0], Effect::Report(_)), "{step:?}");
        assert_eq!(watch_params(&step.next).resource_version.as_deref(), Some("6"));
    }

    /// Without bookmarks a quiet scope's resume RV stays at its last own event, while the lists
    /// of its drift checks are at the cluster's version: its checks could never confirm a
    /// suspect. A watch opened after a check that ends cleanly has covered that check's list
    /// version, and the next check is made at it; a watch that failed covers nothing, and a
    /// sync forgets it.
    #[test]
    fn a_drift_check_is_made_at_what_a_clean_watch_after_the_last_one_covered() {
        let config = paged().drift_check(Duration::from_secs(30));
        let (mut m, now) = watching(config, "5");
        let at = |step: &Step| match &step.next {
            Next::DriftCheck { params, rv } => (rv.clone(), params.resource_version.clone().unwrap_or_default()),
            other => panic!("expected a drift check, got {other:?}"),
        };
        let t = |s: u64| now + Duration::from_secs(s);
        assert_eq!(at(&m.step(Input::WatchEnded, t(31))), ("5".into(), "5".into()));
        m.step(Input::DriftChecked(Ok(Checked { mismatched: 0, list: "20" })), t(31));
        // The next watch fails: it covered nothing.
        m.step(Input::WatchOpened, t(31));
        m.step(Input::WatchFailed(Error::transport("watch", "reset")), t(40));
        assert_eq!(at(&m.step(Input::Start, t(62))), ("5".into(), "5".into()));
        m.step(Input::DriftChecked(Ok(Checked { mismatched: 0, list: "21" })), t(62));
        // This one ends cleanly, without an event: it was sent everything up to 21.
        m.step(Input::WatchOpened, t(62));
        let step = m.step(Input::WatchEnded, t(93));
        assert_eq!(at(&step), ("21".into(), "5".into()), "compared at 21, watching on from 5");
        // A resume RV newer than what was covered wins.
        m.step(Input::DriftChecked(Ok(Checked { mismatched: 0, list: "22" })), t(93));
        m.step(Input::WatchOpened, t(93));
        m.step(Input::Event(WatchInput::Modified { resource_version: "25" }), t(94));
        assert_eq!(at(&m.step(Input::WatchEnded, t(124))), ("25".into(), "25".into()));
        // A mismatch relists; what was covered is of the store before it.
        m.step(Input::DriftChecked(Ok(Checked { mismatched: 1, list: "26" })), t(124));
        m.step(Input::Page { resource_version: Some("9"), continue_token: None }, t(125));
        m.step(Input::WatchOpened, t(125));
        assert_eq!(at(&m.step(Input::WatchEnded, t(156))), ("9".into(), "9".into()));
    }

    mod streaming {
        use super::*;

        fn start() -> (Machine, Instant, Step) {
            let mut m = Machine::new(Config::default().streaming_lists(), 1);
            let now = t0();
            let step = m.step(Input::Start, now);
            (m, now, step)
        }

        #[test]
        fn a_streaming_list_sends_initial_events_and_applies_them_at_the_marker() {
            let (mut m, now, step) = start();
            let w = watch_params(&step.next);
            assert!(w.send_initial_events && w.bookmarks);
            assert_eq!(m.step(Input::WatchOpened, now), read_on(&[Effect::BeginInit]));
            let step = m.step(Input::Event(WatchInput::Added { resource_version: "3" }), now);
            assert_eq!(step, read_on(&[Effect::InitApply]));
            let step =
                m.step(Input::Event(WatchInput::Bookmark { resource_version: "9", initial_events_end: true }), now);
            assert_eq!(step, read_on(&[Effect::InitDone(Some("9".into()))]));
            let step = m.step(Input::Event(WatchInput::Modified { resource_version: "10" }), now);
            assert_eq!(step, read_on(&[Effect::Apply, Effect::Reached("10".into())]));
            let step = m.step(Input::WatchEnded, now + Duration::from_secs(70));
            assert_eq!(watch_params(&step.next).resource_version.as_deref(), Some("10"));
            assert!(!watch_params(&step.next).send_initial_events);
        }

        /// A streaming list's watch goes on as the watch after its sync, so the drift check
        /// and the periodic relist count from its start: the first check is due an interval
        /// after it, not after its whole timeout, and a periodic relist's own streaming list
        /// gets a whole interval, not the second left of the last one.
        #[test]
        fn a_streaming_lists_watch_ends_when_the_next_check_or_relist_is_due() {
            let interval = Duration::from_secs(30);
            let config = Config::default().drift_check(interval).relist_interval(Duration::from_secs(300));
            let mut m = Machine::new(config, 1);
            let now = t0();
            let step = m.step(Input::Start, now);
            assert_eq!(watch_params(&step.next).timeout, interval, "{step:?}");
            m.step(Input::WatchOpened, now);
            m.step(Input::Event(WatchInput::Bookmark { resource_version: "9", initial_events_end: true }), now);
            let step = m.step(Input::WatchEnded, now + interval);
            assert!(matches!(&step.next, Next::DriftCheck { .. }), "{step:?}");
            // A periodic relist, due: its streaming list is not cut after a second.
            let mut m = Machine::new(Config::default().relist_interval(interval), 1);
            m.step(Input::Start, now);
            m.step(Input::WatchOpened, now);
            m.step(Input::Event(WatchInput::Bookmark { resource_version: "9", initial_events_end: true }), now);
            let step = m.step(Input::WatchEnded, now + interval);
            assert!(step.effects.contains(&Effect::Relist(RelistReason::Periodic)), "{step:?}");
            let w = watch_params(&step.next);
            assert!(w.send_initial_events && w.timeout == interval, "{step:?}");
        }

        #[test]
        fn a_rejected_streaming_list_falls_back_and_is_remembered() {
            let (mut m, now, _) = start();
            let step = m.step(Input::WatchFailed(api(422, "Invalid", false)), now);
            assert!(step.effects.contains(&Effect::Relist(RelistReason::StreamingFallback)), "{step:?}");
            assert!(matches!(&step.next, Next::List(_)));
            // A later relist does not probe again.
            m.step(Input::Page { resource_version: Some("5"), continue_token: None }, now);
            m.step(Input::WatchOpened, now);
            let step = m.step(Input::WatchFailed(api(410, "Expired", true)), now);
            assert!(matches!(&step.next, Next::List(_)), "{step:?}");
        }

        #[test]
        fn an_ignored_streaming_list_is_detected_by_a_modified_before_the_marker() {
            let (mut m, now, _) = start();
            m.step(Input::WatchOpened, now);
            m.step(Input::Event(WatchInput::Added { resource_version: "3" }), now);
            let step = m.step(Input::Event(WatchInput::Modified { resource_version: "4" }), now);
            assert!(step.effects.contains(&Effect::AbortInit));
            assert!(matches!(&step.next, Next::List(_)), "{step:?}");
        }

        #[test]
        fn an_ignored_streaming_list_is_detected_by_a_missing_marker() {
            let (mut m, now, _) = start();
            m.step(Input::WatchOpened, now);
            m.step(Input::Event(WatchInput::Added { resource_version: "3" }), now);
            assert_eq!(m.step(Input::Idle, now + Duration::from_secs(2)), read_on(&[]));
            let step = m.step(Input::Idle, now + Duration::from_secs(11));
            assert!(matches!(&step.next, Next::List(_)), "{step:?}");
        }

        #[test]
        fn throttling_retries_the_streaming_list() {
            let (mut m, now, _) = start();
            let step = m.step(Input::WatchFailed(api(429, "TooManyRequests", false)), now);
            assert!(matches!(&step.next, Next::Wait(_)));
            let step = m.step(Input::Start, now);
            assert!(watch_params(&step.next).send_initial_events);
        }

        /// A streaming list that the server refuses for who asks (401, 403) is reported and
        /// asked again, not given up: a paged list would meet the same refusal, and a
        /// permission granted later (a binding that comes after the program starts) is granted
        /// to both.
        #[test]
        fn a_forbidden_streaming_list_is_reported_and_asked_again_as_one() {
            for (code, reason) in [(403, "Forbidden"), (401, "Unauthorized")] {
                let (mut m, now, _) = start();
                let step = m.step(Input::WatchFailed(api(code, reason, false)), now);
                assert!(step.effects.iter().any(|e| matches!(e, Effect::Report(_))), "{code}: {step:?}");
                assert!(!step.effects.contains(&Effect::Relist(RelistReason::StreamingFallback)), "{code}: {step:?}");
                assert!(matches!(&step.next, Next::Wait(_)), "{code}: {step:?}");
                let step = m.step(Input::Start, now);
                assert!(watch_params(&step.next).send_initial_events, "{code}: {step:?}");
            }
        }

        /// A sharded watcher asks whether the server filters before its streaming list; when
        /// that fails (even with a refusal), the streaming list is retried, never given up.
        #[test]
        fn a_failed_shard_probe_retries_the_streaming_list_after_the_backoff() {
            let (mut m, now, _) = start();
            let step = m.step(Input::ProbeFailed(api(403, "Forbidden", false)), now);
            assert!(matches!(&step.next, Next::Wait(_)), "{step:?}");
            assert!(matches!(effects(&step)[..], [Effect::Report(_)]), "{step:?}");
            let step = m.step(Input::Start, now);
            assert!(watch_params(&step.next).send_initial_events, "{step:?}");
        }

        #[test]
        fn an_in_stream_error_before_the_marker_falls_back() {
            let (mut m, now, _) = start();
            m.step(Input::WatchOpened, now);
            let step = m.step(Input::WatchFailed(api(500, "InternalError", true)), now);
            assert!(matches!(&step.next, Next::List(_)), "{step:?}");
        }
    }
}
