//! The request each state leads to: [`Machine::request`] turns where the machine goes next into
//! a list page, a streaming list, a watch or a drift check, with its parameters (the selectors,
//! the resourceVersion, the watch's timeout and stall limit), and starts the periodic relist and
//! the drift check when they are due.

use std::time::{Duration, Instant};

use rand::Rng;

use super::recovery::Freshness;
use super::{Effect, Machine, Next, State, Then};
use crate::config::{DEFAULT_TIMEOUT_SECS, ListSemantic, STALL_MARGIN};
use crate::error::Error;
use crate::notice::RelistReason;
use crate::wire::request::{ListParams, VersionMatch, WatchParams};

/// The server-side timeout of a watch resumed while the store is stale: the server ends it
/// cleanly after this long if it accepted the resourceVersion (it answers one it no longer has
/// with an error at once), which makes the store fresh again even on a quiet resource whose
/// watch delivers nothing (docs/protocol.md §6.10). Long enough that its clean end is never
/// taken for a very short watch (`SHORT_WATCH`).
pub(super) const CONFIRM: Duration = Duration::from_secs(2);

impl Machine {
    /// Turns "what to do next" into a request.
    pub(super) fn request(&mut self, state: State, now: Instant, fx: &mut Vec<Effect>) -> Then {
        match state {
            State::Sync { resume, reason } => {
                fx.push(Effect::Relist(reason));
                // What a watch covered is of the store before the sync.
                self.checked_at = None;
                self.covered = None;
                if self.config.wants_streaming() && !self.streaming_unsupported {
                    let rv = resume.clone().or_else(|| self.any_rv());
                    let timeout = self.watch_timeout(now, true);
                    let params =
                        WatchParams { resource_version: rv, send_initial_events: true, ..self.watch_params(timeout) };
                    let next = Next::Watch { params, idle: self.config.streaming_marker_timeout };
                    (State::StreamInit { resume, opened: now, last_seen: now }, next)
                } else {
                    let next = self.first_page(resume);
                    fx.push(Effect::BeginInit);
                    (State::List { next: next.clone() }, Next::List(next))
                }
            }
            State::List { next } => {
                fx.push(Effect::BeginInit);
                (State::List { next: next.clone() }, Next::List(next))
            }
            State::Watch { rv } => {
                if self.relist_due(now) {
                    return self.request(State::Sync { resume: Some(rv), reason: RelistReason::Periodic }, now, fx);
                }
                if self.due(self.config.drift_check, self.last_verified, now) {
                    let params = ListParams {
                        label_selector: self.config.label_selector.clone(),
                        field_selector: self.config.field_selector.clone(),
                        resource_version: Some(rv.clone()),
                        version_match: Some(VersionMatch::NotOlderThan),
                        ..ListParams::default()
                    };
                    let at = self.drift_position(&rv);
                    return (State::Checking { rv }, Next::DriftCheck { params, rv: at });
                }
                let mut timeout = self.watch_timeout(now, false);
                if self.freshness == Freshness::Stale {
                    // Its clean end says the server took it, even on a quiet resource.
                    timeout = timeout.min(CONFIRM);
                }
                let stall = self.stall_for(timeout);
                let params = WatchParams { resource_version: Some(rv.clone()), ..self.watch_params(timeout) };
                (
                    State::Watching { rv, events: 0, opened: now, last_seen: now, stall },
                    Next::Watch { params, idle: stall },
                )
            }
            State::StreamInit { resume, .. } => {
                self.request(State::Sync { resume, reason: RelistReason::Error }, now, fx)
            }
            State::Watching { rv, .. } | State::Checking { rv } => self.request(State::Watch { rv }, now, fx),
            State::Ended => (State::Ended, Next::End(Error::Stopped)),
        }
    }

    /// The first page of a full list.
    fn first_page(&self, resume: Option<String>) -> ListParams {
        let base = ListParams {
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            ..ListParams::default()
        };
        match resume {
            // Relist "not older than" what we had, unpaged: a paged list at an RV would be an
            // exact (etcd) read under the legacy rules (docs/protocol.md §3.4, client-go reflector).
            Some(rv) => ListParams { resource_version: Some(rv), ..base },
            None => ListParams {
                limit: Some(self.config.page_size).filter(|l| *l > 0),
                resource_version: self.any_rv(),
                ..base
            },
        }
    }

    fn any_rv(&self) -> Option<String> {
        match self.config.list_semantic {
            ListSemantic::Any => Some("0".to_owned()),
            ListSemantic::MostRecent => None,
        }
    }

    fn watch_params(&self, timeout: Duration) -> WatchParams {
        WatchParams {
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            resource_version: None,
            timeout,
            bookmarks: self.config.bookmarks,
            send_initial_events: false,
        }
    }

    /// The server-side timeout of the next watch: configured or jittered, and no later than a
    /// due periodic relist or drift check (so they happen without interrupting a read).
    /// `streaming`: the watch of a streaming list, which goes on as the watch after the sync it
    /// makes; that sync restarts both intervals, so they count from `now` (from the last sync,
    /// the first watch would run its whole timeout before the first check, and a relist's would
    /// be cut after a second, before its end marker).
    fn watch_timeout(&mut self, now: Instant, streaming: bool) -> Duration {
        let base = self.config.timeout.unwrap_or_else(|| {
            let (lo, hi) = DEFAULT_TIMEOUT_SECS;
            Duration::from_secs(self.rng.random_range(lo..hi))
        });
        let since = |last: Option<Instant>| if streaming { Some(now) } else { last };
        let left = |interval: Option<Duration>, last: Option<Instant>| match (interval, since(last)) {
            // `None` from `checked_add`: so far ahead that it is never due.
            (Some(interval), Some(last)) => {
                last.checked_add(interval).map_or(Duration::MAX, |due| due.saturating_duration_since(now))
            }
            _ => Duration::MAX,
        };
        let next =
            left(self.config.relist_interval, self.last_sync).min(left(self.config.drift_check, self.last_verified));
        if next == Duration::MAX { base } else { base.min(next).max(Duration::from_secs(1)) }
    }

    /// How far the watch is known to have come, for a drift check: its resume RV, or what it
    /// covered (`covered`) when that is newer. The resume RV moves only with the events and
    /// bookmarks of the watch's scope, so without bookmarks a quiet scope (a namespace of a
    /// watcher over several, say) stays behind the lists' versions, which are the whole
    /// cluster's: its checks could then never confirm a suspect (`drift.rs`). Numeric
    /// versions only, as `drift.rs` compares them.
    fn drift_position(&self, rv: &str) -> String {
        match (&self.covered, rv.parse::<u64>()) {
            (Some(covered), Ok(at)) if covered.parse::<u64>().is_ok_and(|c| c > at) => covered.clone(),
            _ => rv.to_owned(),
        }
    }

    pub(super) fn stall_for(&self, timeout: Duration) -> Duration {
        self.config.stall_timeout.unwrap_or(timeout.saturating_add(STALL_MARGIN))
    }

    fn relist_due(&self, now: Instant) -> bool {
        self.due(self.config.relist_interval, self.last_sync, now)
    }

    /// Whether `interval` has passed since `last` (never when either is unset).
    fn due(&self, interval: Option<Duration>, last: Option<Instant>, now: Instant) -> bool {
        match (interval, last) {
            (Some(interval), Some(last)) => now.saturating_duration_since(last) >= interval,
            _ => false,
        }
    }
}
