//! The one decision every renewal goes through: [`Candidate::step`] takes what this replica
//! remembers, what it just learned ([`Input`]: a wake-up, the lease as read, a write's answer, a
//! stop) and the time ([`Now`]), and returns what to send next ([`Action`]) and whether
//! leadership changed. Pure: no I/O, no clock, no locks; `elector.rs` performs the actions.
//!
//! ```text
//!            Tick (standby)                 lease missing
//!   Wait ───────────────────> Read ───────────────────────────> Create
//!    ^ ^                       │ held by another, not expired     │
//!    │ └───────────────────────┘ (judged on our monotonic clock)  │
//!    │                         │ ours, free or expired            │
//!    │                         v                                  │
//!    │ answer / refusal     Update (carries the resourceVersion read)
//!    └──────────────────────────┘                                 │
//!    ^  Tick (leader, within the renew deadline): Update at once ─┘
//!    │  (its failure: Read at once, then as above)
//!   Stop: Update with the lease released (holder "", 1 s) if ours, else Done; a conflict
//!         reads again and releases if it is still ours.
//! ```
//!
//! Safety, in one paragraph: a leader leads (in its own view, [`Candidate::leading`]) until
//! `renew_deadline` after it *sent* the last write that succeeded; another replica takes the
//! lease only `leaseDurationSeconds` after it *received* the record as it last changed, and
//! that record was written after the leader sent it. Since the lease duration exceeds the renew
//! deadline, the leader's view ends first, whatever the clocks' offsets (their rates must
//! agree, within that ratio). Every write carries the resourceVersion it read, so of two
//! replicas racing, one gets 409 Conflict and takes nothing.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

use super::{Leadership, LeaseTimings};

/// The time of a decision: the monotonic clock judges expiry and deadlines; the wall clock only
/// stamps `acquireTime` and `renewTime` for humans and other clients (never compared).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Now {
    pub(crate) mono: Instant,
    pub(crate) wall: Timestamp,
}

/// What the replica just learned.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Input {
    /// The wait of the last [`Action::Wait`] ended (or the thread just started).
    Tick,
    /// The lease as read (GET); `None` when it does not exist (404).
    Read(Option<LeaseSpec>),
    /// A create or update was accepted: `spec` is the lease as the server stored it, and `sent`
    /// when the request was sent (on the monotonic clock).
    Wrote { spec: LeaseSpec, sent: Instant },
    /// A request failed: `conflict` when the server refused a write with 409 (the lease changed
    /// since it was read, or was created meanwhile); otherwise any other error.
    Failed { conflict: bool },
    /// The owner stops: release the lease if it is ours.
    Stop,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// GET the lease now.
    Read,
    /// POST a new lease with this spec.
    Create(LeaseSpec),
    /// PUT the lease last read or written, with this spec and that lease's resourceVersion.
    Update(LeaseSpec),
    /// Wait until then (or until stopped), then [`Input::Tick`].
    Wait(Instant),
    /// Stopping is over: the lease is released, was not ours, or the release failed.
    Done,
}

/// One decision: the next action, and a change of leadership to report, if any.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Step {
    pub(crate) action: Action,
    pub(crate) report: Option<Leadership>,
}

/// What was last asked of the server, so its answer is read in context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    /// Nothing, a read, a create, or an update from a fresh read.
    Other,
    /// The leader's renewal sent without reading first (client-go's fast path).
    FastRenewal,
}

/// One replica's memory of the election.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    identity: String,
    timings: LeaseTimings,
    /// The lease record last seen (read or written), and when this replica first saw it as it
    /// is (monotonic): the start of its lease duration in our eyes. Its change is all we trust
    /// of it: the remote `renewTime` is never compared with our clock.
    observed: Option<(LeaseSpec, Instant)>,
    /// While we hold the lease: when we sent the last write that made or kept us its holder.
    /// We lead until `renew_deadline` after it.
    renewed: Option<Instant>,
    /// Whether we reported `Acquired` and not yet `Lost`.
    reported: bool,
    pending: Pending,
    stopping: bool,
    /// The `renewTime`s (µs since the epoch) of this replica's last writes as holder: a
    /// record that names us as holder with another `renewTime` was written by another process
    /// under our identity (a record of ours whose answer was lost is among them).
    sent: VecDeque<i64>,
    /// Whether such a record was seen: identities are not unique.
    twin: bool,
    /// Before our first write, a live record naming us, as first read: ours (a restarted
    /// replica's) if it is unchanged a retry period later, a twin's if it changed.
    probation: Option<LeaseSpec>,
}

/// How many of our last writes' `renewTime`s are kept to tell ours from a twin's.
const SENT_KEPT: usize = 8;

/// A `MicroTime` as the server keeps it: whole microseconds.
fn micros(t: &MicroTime) -> i64 {
    t.0.as_microsecond()
}

impl Candidate {
    /// A replica that has seen nothing yet. `timings` are validated.
    pub(crate) fn new(identity: &str, timings: LeaseTimings) -> Candidate {
        Candidate {
            identity: identity.to_owned(),
            timings,
            observed: None,
            renewed: None,
            reported: false,
            pending: Pending::Other,
            stopping: false,
            sent: VecDeque::new(),
            twin: false,
            probation: None,
        }
    }

    /// Whether another process was seen holding the lease under this replica's identity (it
    /// wrote a record naming us that we did not write). Such a record counts as another
    /// holder's: this replica stops leading and waits for it to expire, as for anyone's.
    pub(crate) fn twin(&self) -> bool {
        self.twin
    }

    /// Until when this replica leads, in its own view: `None` when it does not.
    pub(crate) fn leading_until(&self) -> Option<Instant> {
        self.renewed.and_then(|sent| sent.checked_add(self.timings.renew_deadline))
    }

    /// Whether this replica leads at `now`, in its own view.
    pub(crate) fn leading(&self, now: Instant) -> bool {
        self.leading_until().is_some_and(|until| now < until)
    }

    /// The identity this replica holds the lease as.
    pub(crate) fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether [`Input::Stop`] was given.
    pub(crate) fn stopping(&self) -> bool {
        self.stopping
    }

    /// The lease record last seen, with the local time it was first seen as it is.
    #[cfg(test)]
    pub(crate) fn observed(&self) -> Option<&(LeaseSpec, Instant)> {
        self.observed.as_ref()
    }

    /// The decision: see the module docs.
    pub(crate) fn step(&mut self, input: Input, now: Now) -> Step {
        let pending = std::mem::replace(&mut self.pending, Pending::Other);
        let action = self.act(input, pending, now);
        if let Action::Create(spec) | Action::Update(spec) = &action {
            self.remember(spec);
        }
        let leading = self.leading(now.mono);
        let report = match (self.reported, leading) {
            (false, true) => Some(Leadership::Acquired),
            (true, false) => Some(Leadership::Lost),
            _ => None,
        };
        self.reported = leading;
        Step { action, report }
    }

    /// `pending`: what the input answers.
    fn act(&mut self, input: Input, pending: Pending, now: Now) -> Action {
        if self.stopping {
            return self.release(input, now);
        }
        match input {
            Input::Stop => {
                self.stopping = true;
                // We stop leading now, before the release is even sent.
                self.renewed = None;
                self.release_if_ours(now)
            }
            Input::Tick if self.leading(now.mono) => match self.renewal(now) {
                Some(spec) => {
                    self.pending = Pending::FastRenewal;
                    Action::Update(spec)
                }
                None => Action::Read,
            },
            Input::Tick => Action::Read,
            Input::Read(None) => Action::Create(self.record(now, None, 0)),
            Input::Read(Some(spec)) => {
                self.observe(spec, now.mono);
                self.acquire_or_renew(now)
            }
            Input::Wrote { spec, sent } => {
                // The answer to our own write: what it names is ours, whatever we remember.
                self.remember(&spec);
                let ours = self.is_ours(&spec);
                self.observe(spec, now.mono);
                if ours && self.renewed.is_none_or(|before| before < sent) {
                    self.renewed = Some(sent);
                }
                self.wait(now)
            }
            // The renewal sent without reading failed (the lease changed since our version, or
            // was deleted, or the server erred): read it, at once, as client-go falls back to
            // its slow path in the same try.
            Input::Failed { .. } if pending == Pending::FastRenewal => Action::Read,
            Input::Failed { .. } => self.wait(now),
        }
    }

    /// The decisions while stopping: release the lease if it is still ours.
    fn release(&mut self, input: Input, now: Now) -> Action {
        match input {
            Input::Read(Some(spec)) => {
                self.observe(spec, now.mono);
                self.release_if_ours(now)
            }
            // Our release raced a renewal of ours that landed: read, and release that one.
            Input::Failed { conflict: true } => Action::Read,
            Input::Wrote { spec, .. } => {
                self.observe(spec, now.mono);
                Action::Done
            }
            Input::Read(None) | Input::Failed { conflict: false } | Input::Tick | Input::Stop => Action::Done,
        }
    }

    /// The update that releases the lease (client-go's `ReleaseOnCancel`): holder empty,
    /// `leaseDurationSeconds` 1, both times now, transitions kept. `Done` when it is not ours.
    fn release_if_ours(&self, now: Now) -> Action {
        match &self.observed {
            Some((spec, _)) if self.is_ours(spec) => Action::Update(LeaseSpec {
                holder_identity: Some(String::new()),
                lease_duration_seconds: Some(1),
                acquire_time: Some(MicroTime(now.wall)),
                renew_time: Some(MicroTime(now.wall)),
                lease_transitions: Some(transitions(spec)),
                ..LeaseSpec::default()
            }),
            _ => Action::Done,
        }
    }

    /// After a fresh read: take the lease if it is free, expired in our eyes or already ours;
    /// else wait.
    fn acquire_or_renew(&mut self, now: Now) -> Action {
        let Some((spec, seen)) = &self.observed else {
            return Action::Read;
        };
        let holder = spec.holder_identity.as_deref().unwrap_or_default();
        if self.sent.is_empty() && !self.twin && self.names_us(spec) {
            // Ours from a past life, or a twin's that it renews: look again a retry period on.
            match &self.probation {
                None => {
                    self.probation = Some(spec.clone());
                    return Action::Wait(now.mono + self.timings.retry_period);
                }
                Some(first) if first == spec => {}
                Some(_) => self.twin = true,
            }
        }
        let ours = self.is_ours(spec);
        if !holder.is_empty() && !ours && now.mono.saturating_duration_since(*seen) < lease_duration(spec) {
            return self.wait(now);
        }
        let spec =
            if ours { self.renewal(now) } else { Some(self.record(now, None, transitions(spec).saturating_add(1))) };
        spec.map_or(Action::Read, Action::Update)
    }

    /// The leader's renewal of the lease last seen: acquire time and transitions kept.
    fn renewal(&self, now: Now) -> Option<LeaseSpec> {
        let (spec, _) = self.observed.as_ref()?;
        Some(self.record(now, spec.acquire_time.clone(), transitions(spec)))
    }

    /// The record this replica writes as holder, as client-go's `tryAcquireOrRenew` builds it:
    /// holder, lease duration in whole seconds, renew time now, acquire time now unless kept,
    /// transitions as given; `preferredHolder` and `strategy` are not written.
    fn record(&self, now: Now, acquired: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.timings.lease_seconds()),
            acquire_time: Some(acquired.unwrap_or(MicroTime(now.wall))),
            renew_time: Some(MicroTime(now.wall)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Notes the record as seen at `now`: the clock of its lease duration restarts only when it
    /// changed. Someone else's record ends our lead.
    fn observe(&mut self, spec: LeaseSpec, now: Instant) {
        self.twin |= self.by_twin(&spec);
        if !self.is_ours(&spec) {
            self.renewed = None;
        }
        if self.observed.as_ref().is_none_or(|(seen, _)| *seen != spec) {
            self.observed = Some((spec, now));
        }
    }

    /// Remembers a record of ours (one we send, or the server's answer to one) as ours: its
    /// `renewTime`, among the last [`SENT_KEPT`].
    fn remember(&mut self, spec: &LeaseSpec) {
        let Some(renewed) = spec.renew_time.as_ref().filter(|_| self.names_us(spec)).map(micros) else { return };
        if self.sent.contains(&renewed) {
            return;
        }
        if self.sent.len() == SENT_KEPT {
            self.sent.pop_front();
        }
        self.sent.push_back(renewed);
    }

    /// Whether the record names us as holder and was written by us: before our first write,
    /// a record naming us is ours unless a twin was seen (a restarted replica takes its lease
    /// back once it saw it unchanged for a retry period).
    fn is_ours(&self, spec: &LeaseSpec) -> bool {
        self.names_us(spec) && !self.by_twin(spec)
    }

    fn names_us(&self, spec: &LeaseSpec) -> bool {
        spec.holder_identity.as_deref() == Some(self.identity.as_str())
    }

    /// Whether the record names us as holder but is not one of our writes (before our first
    /// write: once a twin was seen, any record naming us).
    fn by_twin(&self, spec: &LeaseSpec) -> bool {
        let not_sent = || spec.renew_time.as_ref().is_none_or(|t| !self.sent.contains(&micros(t)));
        self.names_us(spec) && if self.sent.is_empty() { self.twin } else { not_sent() }
    }

    /// The next try: one retry period on, or earlier: at the end of our lead, so that `Lost` is
    /// reported when it is due, or when another's lease expires in our eyes, so that a crashed
    /// holder's lease is taken within its duration plus one retry period of its last renewal.
    fn wait(&self, now: Now) -> Action {
        let mut next = now.mono + self.timings.retry_period;
        let ends = [self.leading_until(), self.expiry()];
        for end in ends.into_iter().flatten().filter(|end| *end > now.mono) {
            next = next.min(end);
        }
        Action::Wait(next)
    }

    /// When the lease last seen expires in our eyes, if someone else holds it.
    fn expiry(&self) -> Option<Instant> {
        let (spec, seen) = self.observed.as_ref()?;
        let holder = spec.holder_identity.as_deref().unwrap_or_default();
        if holder.is_empty() || self.is_ours(spec) {
            return None;
        }
        seen.checked_add(lease_duration(spec))
    }
}

/// The lease duration a record states: a negative or absent value counts as 0 (expired as
/// soon as seen), as in client-go.
fn lease_duration(spec: &LeaseSpec) -> Duration {
    Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0))
}

/// `leaseTransitions`, absent or negative read as 0.
fn transitions(spec: &LeaseSpec) -> i32 {
    spec.lease_transitions.unwrap_or(0).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A clock the tests move by hand; the wall clock runs `skew` apart from the monotonic one.
    struct Clock {
        start: Instant,
        wall: Timestamp,
        elapsed: Duration,
    }

    impl Clock {
        fn new(wall: &str) -> Clock {
            Clock { start: Instant::now(), wall: wall.parse().unwrap(), elapsed: Duration::ZERO }
        }
        fn now(&self) -> Now {
            Now { mono: self.start + self.elapsed, wall: self.wall.checked_add(self.elapsed).unwrap() }
        }
        fn at(&self, d: Duration) -> Instant {
            self.start + d
        }
        fn advance(&mut self, d: Duration) -> Now {
            self.elapsed += d;
            self.now()
        }
    }

    fn candidate(identity: &str) -> Candidate {
        Candidate::new(identity, LeaseTimings::default())
    }

    fn held_by(holder: &str, renewed: &str) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(MicroTime("2026-11-26T10:00:00Z".parse().unwrap())),
            renew_time: Some(MicroTime(renewed.parse().unwrap())),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    fn update(step: &Step) -> &LeaseSpec {
        match &step.action {
            Action::Update(spec) | Action::Create(spec) => spec,
            other => panic!("not a write: {other:?}"),
        }
    }

    /// The first replica creates the lease, with the fields client-go writes.
    #[test]
    fn a_missing_lease_is_created_with_client_gos_fields() {
        let clock = Clock::new("2026-11-26T12:00:00.123456789Z");
        let mut a = candidate("a");
        assert_eq!(a.step(Input::Tick, clock.now()), Step { action: Action::Read, report: None });
        let step = a.step(Input::Read(None), clock.now());
        let Action::Create(spec) = &step.action else { panic!("{step:?}") };
        let now = MicroTime(clock.now().wall);
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!((spec.acquire_time.as_ref(), spec.renew_time.as_ref()), (Some(&now), Some(&now)));
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!((spec.preferred_holder.as_ref(), spec.strategy.as_ref()), (None, None));
        assert_eq!(step.report, None, "not the leader until the server said yes");
        let wrote = a.step(Input::Wrote { spec: spec.clone(), sent: clock.now().mono }, clock.now());
        assert_eq!(wrote, Step { action: Action::Wait(clock.at(ms(2000))), report: Some(Leadership::Acquired) });
        assert!(a.leading(clock.now().mono));
    }

    /// A lease held by another is expired only a lease duration after *we* saw it change,
    /// however old its renewTime says it is: a replica whose wall clock runs an hour ahead
    /// (or behind) decides the same.
    #[test]
    fn expiry_is_judged_on_our_clock_from_when_we_saw_the_lease_change() {
        for renewed in ["2026-11-26T09:00:00Z", "2026-11-26T13:00:00Z", "1970-01-01T00:00:00Z"] {
            let mut clock = Clock::new("2026-11-26T12:00:00Z");
            let mut b = candidate("b");
            b.step(Input::Tick, clock.now());
            let step = b.step(Input::Read(Some(held_by("a", renewed))), clock.now());
            assert_eq!(step.action, Action::Wait(clock.at(ms(2000))), "renewTime {renewed}");
            // Unchanged for 14.999 s: still held.
            let now = clock.advance(ms(14_999));
            assert!(matches!(b.step(Input::Read(Some(held_by("a", renewed))), now).action, Action::Wait(_)));
            // 15 s after we first saw it: ours to take, one transition more, acquired now.
            let now = clock.advance(ms(1));
            let step = b.step(Input::Read(Some(held_by("a", renewed))), now);
            let spec = update(&step);
            assert_eq!(spec.holder_identity.as_deref(), Some("b"));
            assert_eq!(spec.lease_transitions, Some(4));
            assert_eq!(spec.acquire_time, Some(MicroTime(now.wall)));
            assert_eq!(spec.renew_time, Some(MicroTime(now.wall)));
        }
    }

    /// A replica restarted under its old identity finds the lease naming it, written by its
    /// previous life: unchanged a retry period later, it takes it back (client-go takes it at
    /// once; the retry period tells a past life from a twin that renews it).
    #[test]
    fn a_restarted_replica_takes_its_lease_back_after_a_retry_period() {
        let mut clock = Clock::new("2026-11-26T12:00:00Z");
        let mut a = candidate("a");
        a.step(Input::Tick, clock.now());
        let old = held_by("a", "2026-11-26T11:59:59Z");
        let step = a.step(Input::Read(Some(old.clone())), clock.now());
        assert_eq!(step, Step { action: Action::Wait(clock.at(ms(2000))), report: None });
        let now = clock.advance(ms(2000));
        assert_eq!(a.step(Input::Tick, now).action, Action::Read);
        let step = a.step(Input::Read(Some(old)), now);
        assert_eq!(update(&step).holder_identity.as_deref(), Some("a"));
        assert_eq!(update(&step).lease_transitions, Some(3), "the same holder: no transition");
        assert!(!a.twin());
    }

    /// A newcomer whose identity's lease is renewed by another process meanwhile is a twin:
    /// it says so and waits as a standby, never writing while the other renews.
    #[test]
    fn a_newcomer_that_sees_its_identitys_lease_renewed_is_a_twin() {
        let mut clock = Clock::new("2026-11-26T12:00:00Z");
        let mut b = candidate("a");
        b.step(Input::Tick, clock.now());
        b.step(Input::Read(Some(held_by("a", "2026-11-26T11:59:59Z"))), clock.now());
        let now = clock.advance(ms(2000));
        b.step(Input::Tick, now);
        let step = b.step(Input::Read(Some(held_by("a", "2026-11-26T12:00:01Z"))), now);
        assert!(matches!(step.action, Action::Wait(_)), "{step:?}");
        assert!(b.twin());
        for i in 0..20 {
            let now = clock.advance(ms(2000));
            b.step(Input::Tick, now);
            let renewed = format!("2026-11-26T12:00:{:02}Z", 3 + 2 * i);
            let step = b.step(Input::Read(Some(held_by("a", &renewed))), now);
            assert!(matches!(step.action, Action::Wait(_)), "{step:?}");
        }
    }

    /// A record naming us that we did not write is a twin's (another process with our
    /// identity): we stop leading, say so, and wait for it to expire as for anyone's; then
    /// we take it as a new holder.
    #[test]
    fn a_record_of_ours_we_did_not_write_is_a_twins() {
        let mut clock = Clock::new("2026-11-26T12:00:00Z");
        let mut a = candidate("a");
        a.step(Input::Tick, clock.now());
        let step = a.step(Input::Read(None), clock.now());
        let created = update(&step).clone();
        let step = a.step(Input::Wrote { spec: created, sent: clock.now().mono }, clock.now());
        assert_eq!(step.report, Some(Leadership::Acquired));
        // The fast renewal is refused: another process wrote the lease, naming "a".
        let now = clock.advance(ms(2000));
        assert!(matches!(a.step(Input::Tick, now).action, Action::Update(_)));
        assert_eq!(a.step(Input::Failed { conflict: true }, now).action, Action::Read);
        let twins = held_by("a", "2026-11-26T12:00:01.5Z");
        let step = a.step(Input::Read(Some(twins.clone())), now);
        assert_eq!(step, Step { action: Action::Wait(now.mono + ms(2000)), report: Some(Leadership::Lost) });
        assert!(a.twin());
        // Renewed by the twin no more: 15 s after we saw it, ours to take, as a new holder.
        let now = clock.advance(ms(15_000));
        let step = a.step(Input::Read(Some(twins)), now);
        let spec = update(&step);
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_transitions, Some(4));
        assert_eq!(spec.acquire_time, Some(MicroTime(now.wall)));
    }

    /// Our own renewal whose answer was lost (a timeout) is still ours when read back: no twin.
    #[test]
    fn our_own_write_whose_answer_was_lost_is_ours() {
        let mut clock = Clock::new("2026-11-26T12:00:00.123456789Z");
        let mut a = candidate("a");
        a.step(Input::Tick, clock.now());
        let step = a.step(Input::Read(None), clock.now());
        let created = update(&step).clone();
        a.step(Input::Wrote { spec: created, sent: clock.now().mono }, clock.now());
        let now = clock.advance(ms(2000));
        let step = a.step(Input::Tick, now);
        // The server keeps microseconds: the record read back is ours, truncated.
        let mut landed = update(&step).clone();
        let sent = landed.renew_time.clone().unwrap().0;
        landed.renew_time = Some(MicroTime(Timestamp::from_microsecond(sent.as_microsecond()).unwrap()));
        assert_eq!(a.step(Input::Failed { conflict: false }, now).action, Action::Read);
        let step = a.step(Input::Read(Some(landed)), now);
        assert_eq!(update(&step).holder_identity.as_deref(), Some("a"));
        assert!(a.leading(now.mono));
        assert!(!a.twin());
    }

    /// A standby wakes at the moment the holder's lease expires in its eyes, not up to a retry
    /// period later.
    #[test]
    fn a_standby_wakes_when_the_lease_expires() {
        let mut clock = Clock::new("2026-11-26T12:00:00Z");
        let mut b = candidate("b");
        let seen = clock.now().mono;
        b.step(Input::Read(Some(held_by("a", "2026-11-26T11:59:59Z"))), clock.now());
        let now = clock.advance(ms(14_000));
        let step = b.step(Input::Read(Some(held_by("a", "2026-11-26T11:59:59Z"))), now);
        assert_eq!(step.action, Action::Wait(seen + ms(15_000)));
        let now = clock.advance(ms(1_000));
        assert_eq!(b.step(Input::Tick, now).action, Action::Read);
        assert!(matches!(
            b.step(Input::Read(Some(held_by("a", "2026-11-26T11:59:59Z"))), now).action,
            Action::Update(_)
        ));
    }

    /// Every change restarts the count, even one whose renewTime went backwards.
    #[test]
    fn a_renewal_seen_restarts_the_lease_duration() {
        let mut clock = Clock::new("2026-11-26T12:00:00Z");
        let mut b = candidate("b");
        b.step(Input::Read(Some(held_by("a", "2026-11-26T11:00:10Z"))), clock.now());
        let now = clock.advance(ms(10_000));
        b.step(Input::Read(Some(held_by("a", "2026-11-26T11:00:05Z"))), now);
        assert_eq!(b.observed().unwrap().1, now.mono);
        let now = clock.advance(ms(14_000));
        assert!(matches!(b.step(Input::Read(Some(held_by("a", "2026-11-26T11:00:05Z"))), now).action, Action::Wait(_)));
    }

    /// The record's own leaseDurationSeconds decides, not ours; garbage reads as expired.
    #[test]
    fn the_records_own_duration_counts_and_bad_values_read_as_zero() {
        for (duration, expired_after) in
            [(Some(3), ms(3000)), (Some(-5), ms(0)), (None, ms(0)), (Some(i32::MAX), ms(u64::MAX / 4))]
        {
            let mut clock = Clock::new("2026-11-26T12:00:00Z");
            let mut b = candidate("b");
            let spec = LeaseSpec {
                lease_duration_seconds: duration,
                lease_transitions: Some(-7),
                ..held_by("a", "2026-11-26T12:00:00Z")
            };
            let step = b.step(Input::Read(Some(spec.clone())), clock.now());
            if expired_after.is_zero() {
                assert_eq!(update(&step).lease_transitions, Some(1), "{duration:?}: negative transitions read as 0");
                continue;
            }
            assert!(matches!(step.action, Action::Wait(_)), "{duration:?}");
            if expired_after < ms(60_000) {
                let now = clock.advance(expired_after);
                assert!(matches!(b.step(Input::Read(Some(spec)), now).action, Action::Update(_)), "{duration:?}");
            }
        }
    }

    /// A released lease (empty holder) is taken at once.
    #[test]
    fn a_released_lease_is_taken_at_once() {
        let clock = Clock::new("2026-11-26T12:00:00Z");
        let mut b = candidate("b");
        let released = LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            ..held_by("", "2026-11-26T12:00:00Z")
        };
        let step = b.step(Input::Read(Some(released)), clock.now());
        assert_eq!(update(&step).holder_identity.as_deref(), Some("b"));
        assert_eq!(update(&step).lease_transitions, Some(4));
    }

    /// Leading: renew every retry period without reading first, keeping acquireTime and
    /// transitions; the lead lasts renew deadline after the last renewal *sent*.
    #[test]
    fn the_leader_renews_each_retry_period_and_leads_until_the_renew_deadline() {
        let mut clock = Clock::new("2026-11-26T12:00:00Z");
        let mut a = candidate("a");
        let mine = held_by("a", "2026-11-26T11:59:58Z");
        a.step(Input::Read(Some(mine.clone())), clock.now());
        let sent = clock.now().mono;
        let now = clock.advance(ms(300));
        let step = a.step(Input::Wrote { spec: mine.clone(), sent }, now);
        assert_eq!(step, Step { action: Action::Wait(now.mono + ms(2000)), report: Some(Leadership::Acquired) });
        let now = clock.advance(ms(2000));
        let step = a.step(Input::Tick, now);
        let spec = update(&step);
        assert_eq!(spec.acquire_time, mine.acquire_time, "kept");
        assert_eq!(spec.lease_transitions, Some(3), "kept");
        assert_eq!(spec.renew_time, Some(MicroTime(now.wall)));
        // The renewal fails (the server is down): retry each period, and lose at exactly
        // 10 s after the last successful renewal was sent.
        let mut now = now;
        let mut lost_at = None;
        for _ in 0..10 {
            // The fast renewal fails: a read at once, which fails too.
            let step = a.step(Input::Failed { conflict: false }, now);
            if step.report == Some(Leadership::Lost) {
                lost_at = Some(now.mono);
                break;
            }
            assert_eq!(step.action, Action::Read);
            let step = a.step(Input::Failed { conflict: false }, now);
            if step.report == Some(Leadership::Lost) {
                lost_at = Some(now.mono);
                break;
            }
            let Action::Wait(until) = step.action else { panic!("{step:?}") };
            assert!(until <= sent + ms(10_000), "the wait never passes the deadline");
            now = clock.advance(until - now.mono);
            let step = a.step(Input::Tick, now);
            if step.report == Some(Leadership::Lost) {
                lost_at = Some(now.mono);
                break;
            }
        }
        assert_eq!(lost_at, Some(sent + ms(10_000)));
        assert!(!a.leading(sent + ms(10_000)));
        assert!(a.leading(sent + ms(9_999)));
    }

    /// A conflict on the fast renewal reads again at once; it never overwrites.
    #[test]
    fn a_conflicting_renewal_reads_again_and_yields_to_a_new_holder() {
        let mut clock = Clock::new("2026-11-26T12:00:00Z");
        let mut a = candidate("a");
        a.step(Input::Read(Some(held_by("a", "2026-11-26T11:59:58Z"))), clock.now());
        a.step(Input::Wrote { spec: held_by("a", "2026-11-26T12:00:00Z"), sent: clock.now().mono }, clock.now());
        let now = clock.advance(ms(2000));
        assert!(matches!(a.step(Input::Tick, now).action, Action::Update(_)));
        assert_eq!(a.step(Input::Failed { conflict: true }, now), Step { action: Action::Read, report: None });
        // Someone else holds it now (an operator moved it, or we were paused): we lost.
        let step = a.step(Input::Read(Some(held_by("b", "2026-11-26T12:00:01Z"))), now);
        assert_eq!(step, Step { action: Action::Wait(now.mono + ms(2000)), report: Some(Leadership::Lost) });
        // A conflict on a slow-path write waits a retry period.
        let mut c = candidate("c");
        let step = c.step(Input::Read(Some(held_by("", "2026-11-26T12:00:00Z"))), now);
        assert!(matches!(step.action, Action::Update(_)));
        assert_eq!(c.step(Input::Failed { conflict: true }, now).action, Action::Wait(now.mono + ms(2000)));
    }

    /// A thread paused past its deadline: the late answer of a renewal sent long ago does not
    /// make it the leader again.
    #[test]
    fn a_renewal_answered_after_the_deadline_does_not_lead() {
        let mut clock = Clock::new("2026-11-26T12:00:00Z");
        let mut a = candidate("a");
        let sent = clock.now().mono;
        a.step(Input::Read(Some(held_by("a", "2026-11-26T11:59:58Z"))), clock.now());
        let now = clock.advance(ms(10_000));
        let step = a.step(Input::Wrote { spec: held_by("a", "2026-11-26T12:00:00Z"), sent }, now);
        assert_eq!(step.report, None);
        assert!(!a.leading(now.mono));
        // The next tick renews from a fresh read, and leads again once that is written.
        assert_eq!(a.step(Input::Tick, now).action, Action::Read);
    }

    /// Stop: the lead ends at once, and the release is client-go's.
    #[test]
    fn stop_releases_a_held_lease_with_client_gos_fields() {
        let mut clock = Clock::new("2026-11-26T12:00:00Z");
        let mut a = candidate("a");
        a.step(Input::Read(Some(held_by("a", "2026-11-26T11:59:58Z"))), clock.now());
        a.step(Input::Wrote { spec: held_by("a", "2026-11-26T12:00:00Z"), sent: clock.now().mono }, clock.now());
        let now = clock.advance(ms(500));
        let step = a.step(Input::Stop, now);
        assert_eq!(step.report, Some(Leadership::Lost));
        assert!(a.stopping() && !a.leading(now.mono));
        let spec = update(&step);
        assert_eq!(spec.holder_identity.as_deref(), Some(""));
        assert_eq!(spec.lease_duration_seconds, Some(1));
        assert_eq!(spec.acquire_time, Some(MicroTime(now.wall)));
        assert_eq!(spec.renew_time, Some(MicroTime(now.wall)));
        assert_eq!(spec.lease_transitions, Some(3));
        // Raced by our own renewal: read, release again; then done.
        assert_eq!(a.step(Input::Failed { conflict: true }, now).action, Action::Read);
        let again = a.step(Input::Read(Some(held_by("a", "2026-11-26T12:00:00Z"))), now);
        assert!(matches!(again.action, Action::Update(_)));
        assert_eq!(again.report, None);
        assert_eq!(a.step(Input::Wrote { spec: spec.clone(), sent: now.mono }, now).action, Action::Done);
        // Raced by a twin (another process named "a"): its lease is not ours to release.
        let mut twin = candidate("a");
        twin.step(Input::Read(Some(held_by("a", "2026-11-26T11:59:58Z"))), clock.now());
        twin.step(Input::Wrote { spec: held_by("a", "2026-11-26T12:00:00Z"), sent: clock.now().mono }, clock.now());
        assert!(matches!(twin.step(Input::Stop, now).action, Action::Update(_)));
        assert_eq!(twin.step(Input::Failed { conflict: true }, now).action, Action::Read);
        let raced = twin.step(Input::Read(Some(held_by("a", "2026-11-26T12:00:00.7Z"))), now);
        assert_eq!(raced.action, Action::Done);
        // A standby has nothing to release.
        let mut b = candidate("b");
        b.step(Input::Read(Some(held_by("a", "2026-11-26T11:59:58Z"))), now);
        assert_eq!(b.step(Input::Stop, now), Step { action: Action::Done, report: None });
        // Once someone else took it, a conflicting release gives up.
        assert_eq!(a.step(Input::Read(Some(held_by("c", "2026-11-26T12:00:01Z"))), now).action, Action::Done);
    }
}
