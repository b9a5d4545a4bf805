//! The one decision every renewal goes through: [`Candidate::step`] takes what this replica
//! remembers, what it just learned ([`Input`]: a wake-up, the lease as read, a write's answer, a
//! stop) and the time ([`Now`]), and returns what to send next ([`Action`]) and whether
//! leadership changed. Pure: no I/O, no clock, no locks; `elector.rs` performs the actions.
//!
//! ```text
//!            Tick (standby)                 lease missing, and no live holder seen
//!   Wait ───────────────────> Read ───────────────────────────> Create
//!    ^ ^                       │ held by another, not expired     │
//!    │ └───────────────────────┘ (judged on our monotonic clock;  │
//!    │                         │  so is a deleted lease's holder) │
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
//! **Whose record it is.** Every process draws a random token when it starts, and every write
//! of its own carries a *mark*: that token and the `renewTime` it wrote ([`Record::mark`], the
//! annotation `kube-watcher.io/incarnation`). A record is this replica's only when it names its
//! identity *and* carries its mark for that very `renewTime`: nothing is inferred from what it
//! remembers sending. A record naming its identity without that mark was written by another
//! process (a twin with the same identity, a predecessor not yet dead, or a client-go replica
//! with that identity, which keeps the annotation as it read it but writes its own
//! `renewTime`): it is another holder's, and waits out its lease duration like any.
//!
//! Safety, in one paragraph: a leader leads (in its own view, [`Candidate::leading`]) until
//! `renew_deadline` after it *sent* the last write that succeeded; another replica takes the
//! lease only `leaseDurationSeconds` after it *received* the record as it last changed, and
//! that record was written after the leader sent it; a deletion does not shorten that wait.
//! Since the lease duration exceeds the renew deadline, the leader's view ends first, whatever
//! the clocks' offsets (their rates must agree, within that ratio). Every write carries the
//! resourceVersion it read, so of two replicas racing, one gets 409 Conflict and takes nothing.
//! docs/protocol.md §13 has the argument in full.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

use super::seen::Seen;
use super::{Leadership, LeaseTimings};

/// The time of a decision: the monotonic clock judges expiry and deadlines; the wall clock only
/// stamps `acquireTime` and `renewTime` for humans and other clients (never compared).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Now {
    pub(crate) mono: Instant,
    pub(crate) wall: Timestamp,
}

/// A Lease record: its spec, and the mark of the process that wrote it.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Record {
    pub(crate) spec: LeaseSpec,
    /// The annotation `kube-watcher.io/incarnation` as read (absent: `None`): the writer's token
    /// and the `renewTime` it wrote, `<token>/<microseconds since the epoch>`. A writer that
    /// keeps the annotation as it read it (client-go does) and writes a `renewTime` of its own
    /// leaves a mark that no longer matches the record.
    pub(crate) mark: Option<String>,
}

/// What the replica just learned.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(test, derive(Hash))]
pub(crate) enum Input {
    /// The wait of the last [`Action::Wait`] ended (or the thread just started).
    Tick,
    /// The lease as read (GET); `None` when it does not exist (404).
    Read(Option<Record>),
    /// A create or update was accepted: `record` is the lease as the server stored it, and
    /// `sent` when the request was sent (on the monotonic clock).
    Wrote { record: Record, sent: Instant },
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
    /// POST a new lease with this record (its spec, and its mark as the annotation).
    Create(Record),
    /// PUT the lease last read or written, with this record and that lease's resourceVersion.
    Update(Record),
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    /// This process's token, drawn when it started: the first part of its marks.
    token: String,
    timings: LeaseTimings,
    /// The lease record last seen (read or written), and when this replica first saw it as it
    /// is (monotonic): the start of its lease duration in our eyes. Its change is all we trust
    /// of it: the remote `renewTime` is never compared with our clock. A deletion leaves
    /// another holder's record here while it is live ([`Seen::deleted`]).
    observed: Option<Seen<Record>>,
    /// While we hold the lease: when we sent the last write that made or kept us its holder.
    /// We lead until `renew_deadline` after it.
    renewed: Option<Instant>,
    /// Whether we reported `Acquired` and not yet `Lost`.
    reported: bool,
    pending: Pending,
    stopping: bool,
    /// Whether another process was seen writing a record that names our identity: identities
    /// are not unique.
    twin: bool,
}

/// A `MicroTime` as the server keeps it: whole microseconds.
fn micros(t: &MicroTime) -> i64 {
    t.0.as_microsecond()
}

/// `now` as the server keeps a `MicroTime`: whole microseconds (what we write is then what
/// we read back, to the digit, and our mark names it).
fn stamp(now: Now) -> MicroTime {
    MicroTime(Timestamp::from_microsecond(now.wall.as_microsecond()).unwrap_or(now.wall))
}

impl Candidate {
    /// A replica that has seen nothing yet, as `identity`, with this process's `token` (random,
    /// drawn at start: no other process may have it). `timings` are validated.
    pub(crate) fn new(identity: &str, token: &str, timings: LeaseTimings) -> Candidate {
        Candidate {
            identity: identity.to_owned(),
            token: token.to_owned(),
            timings,
            observed: None,
            renewed: None,
            reported: false,
            pending: Pending::Other,
            stopping: false,
            twin: false,
        }
    }

    /// Whether another process was seen writing a record that names this replica's identity
    /// (renewing it while we looked, or taking it from us): two processes run under one
    /// identity. Such records count as another holder's, as every record without our mark
    /// does: this replica never leads on them.
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
    pub(crate) fn observed(&self) -> Option<&Seen<Record>> {
        self.observed.as_ref()
    }

    /// The decision: see the module docs.
    pub(crate) fn step(&mut self, input: Input, now: Now) -> Step {
        let pending = std::mem::replace(&mut self.pending, Pending::Other);
        let action = self.act(input, pending, now);
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
                Some(record) => {
                    self.pending = Pending::FastRenewal;
                    Action::Update(record)
                }
                None => Action::Read,
            },
            Input::Tick => Action::Read,
            Input::Read(None) => self.missing(now),
            Input::Read(Some(record)) => {
                self.observe(record, now.mono);
                self.acquire_or_renew(now)
            }
            Input::Wrote { record, sent } => {
                let ours = self.is_ours(&record);
                self.observe(record, now.mono);
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
            Input::Read(Some(record)) => {
                self.observe(record, now.mono);
                self.release_if_ours(now)
            }
            // Our release raced a renewal of ours that landed: read, and release that one.
            Input::Failed { conflict: true } => Action::Read,
            Input::Wrote { record, .. } => {
                self.observe(record, now.mono);
                Action::Done
            }
            Input::Read(None) | Input::Failed { conflict: false } | Input::Tick | Input::Stop => Action::Done,
        }
    }

    /// The update that releases the lease (client-go's `ReleaseOnCancel`): holder empty,
    /// `leaseDurationSeconds` 1, both times now, transitions kept. `Done` when the record last
    /// seen is not ours: a record naming us without our mark is another process's, never ours
    /// to release.
    fn release_if_ours(&self, now: Now) -> Action {
        match &self.observed {
            Some(seen) if !seen.gone && self.is_ours(&seen.record) => {
                let time = stamp(now);
                let spec = LeaseSpec {
                    holder_identity: Some(String::new()),
                    lease_duration_seconds: Some(1),
                    acquire_time: Some(time.clone()),
                    renew_time: Some(time),
                    lease_transitions: Some(transitions(&seen.record.spec)),
                    ..LeaseSpec::default()
                };
                Action::Update(self.marked(spec))
            }
            _ => Action::Done,
        }
    }

    /// The lease is missing (404). A deletion is a change, seen now: whoever wrote the Lease
    /// last (the holder we saw, or one that took it after our last read) may have renewed it
    /// after we last read it, and may lead until its renew deadline; the deletion hides that
    /// write. So, once we had seen the Lease, it is created again only after it stayed missing
    /// for a lease duration in our eyes (the longer of its last record's and our own); we wake
    /// up then. While we lead on it, it can only be our record that went: we create it again at
    /// once (whoever saw it waits out its lease duration from when they found it missing). A
    /// Lease this replica never saw is created at once: it cannot know of a holder.
    fn missing(&mut self, now: Now) -> Action {
        self.observed = Seen::gone(self.observed.take(), now.mono);
        if self.leading(now.mono) {
            return Action::Create(self.record(now, None, 0));
        }
        match &self.observed {
            Some(seen) if seen.live(self.duration(seen), now.mono) => self.wait(now),
            _ => Action::Create(self.record(now, None, 0)),
        }
    }

    /// After a fresh read: take the lease if it is free, expired in our eyes or ours; else
    /// wait.
    fn acquire_or_renew(&mut self, now: Now) -> Action {
        let Some(seen) = &self.observed else {
            return Action::Read;
        };
        let spec = &seen.record.spec;
        let ours = self.is_ours(&seen.record);
        if self.held_by_another(&seen.record) && seen.live(self.duration(seen), now.mono) {
            return self.wait(now);
        }
        let record =
            if ours { self.renewal(now) } else { Some(self.record(now, None, transitions(spec).saturating_add(1))) };
        record.map_or(Action::Read, Action::Update)
    }

    /// The leader's renewal of the lease last seen (none once it is gone: it is read, or
    /// created, first): acquire time and transitions kept.
    fn renewal(&self, now: Now) -> Option<Record> {
        let seen = self.observed.as_ref().filter(|seen| !seen.gone)?;
        Some(self.record(now, seen.record.spec.acquire_time.clone(), transitions(&seen.record.spec)))
    }

    /// The record this replica writes as holder, as client-go's `tryAcquireOrRenew` builds it:
    /// holder, lease duration in whole seconds, renew time now, acquire time now unless kept,
    /// transitions as given; `preferredHolder` and `strategy` are not written. Marked as ours.
    fn record(&self, now: Now, acquired: Option<MicroTime>, transitions: i32) -> Record {
        let time = stamp(now);
        self.marked(LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.timings.lease_seconds()),
            acquire_time: Some(acquired.unwrap_or_else(|| time.clone())),
            renew_time: Some(time),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        })
    }

    /// `spec` with our mark for its `renewTime`.
    fn marked(&self, spec: LeaseSpec) -> Record {
        let mark = self.mark(&spec);
        Record { spec, mark }
    }

    /// Our mark for a record with this `renewTime`: `<token>/<microseconds>`.
    fn mark(&self, spec: &LeaseSpec) -> Option<String> {
        spec.renew_time.as_ref().map(|t| format!("{}/{}", self.token, micros(t)))
    }

    /// Notes the record as seen at `now`: the clock of its lease duration restarts only when it
    /// changed. Another's record ends our lead; a record naming us that someone else wrote
    /// while we looked (it changed, and is not ours) tells of a twin.
    fn observe(&mut self, record: Record, now: Instant) {
        let ours = self.is_ours(&record);
        let before = self.observed.take();
        if before.as_ref().is_some_and(|seen| seen.record != record) && self.names_us(&record.spec) && !ours {
            self.twin = true;
        }
        if !ours {
            self.renewed = None;
        }
        self.observed = Some(Seen::next(before, record, now, |a, b| a == b));
    }

    /// Whether the record is ours: it names us as holder and carries our mark for its own
    /// `renewTime` (see the module docs).
    fn is_ours(&self, record: &Record) -> bool {
        self.names_us(&record.spec) && record.mark.is_some() && record.mark == self.mark(&record.spec)
    }

    fn names_us(&self, spec: &LeaseSpec) -> bool {
        spec.holder_identity.as_deref() == Some(self.identity.as_str())
    }

    /// Whether the record is held (a holder is named) by another process than this one.
    fn held_by_another(&self, record: &Record) -> bool {
        !record.spec.holder_identity.as_deref().unwrap_or_default().is_empty() && !self.is_ours(record)
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

    /// When the lease last seen expires in our eyes, if another process holds it (or it is
    /// gone: a holder we cannot see may).
    fn expiry(&self) -> Option<Instant> {
        let seen = self.observed.as_ref()?;
        if !seen.gone && !self.held_by_another(&seen.record) {
            return None;
        }
        seen.expiry(self.duration(seen))
    }

    /// The lease duration of the record last seen, in our eyes ([`Seen::duration`]).
    fn duration(&self, seen: &Seen<Record>) -> Duration {
        seen.duration(lease_duration(&seen.record.spec), self.timings.lease_duration)
    }
}

/// The explorer (`explore.rs`) tells states apart by this: every field of the replica's
/// memory. Keep the pattern exhaustive, so that a new field needs a decision here.
#[cfg(test)]
impl std::hash::Hash for Candidate {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let Candidate { identity, token, timings: _, observed, renewed, reported, pending, stopping, twin } = self;
        (identity, token, observed, renewed, reported, pending, stopping, twin).hash(h);
    }
}

/// The fields of a record this crate writes and reads (the explorer's states hold no others).
#[cfg(test)]
impl std::hash::Hash for Record {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let s = &self.spec;
        let time = |t: &Option<MicroTime>| t.as_ref().map(micros);
        (&s.holder_identity, s.lease_duration_seconds, time(&s.acquire_time), time(&s.renew_time)).hash(h);
        (s.lease_transitions, &self.mark).hash(h);
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

    /// A clock the tests move by hand.
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

    /// A replica of process `token-<identity>`.
    fn candidate(identity: &str) -> Candidate {
        Candidate::new(identity, &format!("token-{identity}"), LeaseTimings::default())
    }

    /// Another process with the same identity (a twin, or a restarted replica).
    fn twin_of(identity: &str) -> Candidate {
        Candidate::new(identity, &format!("other-{identity}"), LeaseTimings::default())
    }

    /// A record held by `holder`, written by a process whose mark we do not know (another
    /// kube-watcher process, or a client-go replica, which writes no mark).
    fn held_by(holder: &str, renewed: &str) -> Record {
        Record {
            spec: LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(15),
                acquire_time: Some(MicroTime("2026-11-26T10:00:00Z".parse().unwrap())),
                renew_time: Some(MicroTime(renewed.parse().unwrap())),
                lease_transitions: Some(3),
                ..LeaseSpec::default()
            },
            mark: None,
        }
    }

    fn update(step: &Step) -> &Record {
        match &step.action {
            Action::Update(record) | Action::Create(record) => record,
            other => panic!("not a write: {other:?}"),
        }
    }

    /// The server accepts the write `step` asked for, as sent at `now`: the answer.
    fn accepted(step: &Step, now: Now) -> Input {
        Input::Wrote { record: update(step).clone(), sent: now.mono }
    }

    /// A lone replica takes a missing lease and leads: its record and when it was stored.
    fn leading(clock: &Clock, a: &mut Candidate) -> Record {
        a.step(Input::Tick, clock.now());
        let step = a.step(Input::Read(None), clock.now());
        let step = a.step(accepted(&step, clock.now()), clock.now());
        assert_eq!(step.report, Some(Leadership::Acquired));
        a.observed().unwrap().record.clone()
    }

    /// The first replica creates the lease, with the fields client-go writes and its mark.
    #[test]
    fn a_missing_lease_is_created_with_client_gos_fields_and_our_mark() {
        let clock = Clock::new("2026-11-26T12:00:00.123456789Z");
        let mut a = candidate("a");
        assert_eq!(a.step(Input::Tick, clock.now()), Step { action: Action::Read, report: None });
        let step = a.step(Input::Read(None), clock.now());
        let Action::Create(record) = &step.action else { panic!("{step:?}") };
        let spec = &record.spec;
        // Microseconds, as the server keeps a MicroTime: what we read back is what we wrote.
        let now = MicroTime("2026-11-26T12:00:00.123456Z".parse().unwrap());
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!((spec.acquire_time.as_ref(), spec.renew_time.as_ref()), (Some(&now), Some(&now)));
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!((spec.preferred_holder.as_ref(), spec.strategy.as_ref()), (None, None));
        assert_eq!(record.mark.as_deref(), Some("token-a/1795694400123456"));
        assert_eq!(step.report, None, "not the leader until the server said yes");
        let wrote = a.step(accepted(&step, clock.now()), clock.now());
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
            let spec = &update(&step).spec;
            assert_eq!(spec.holder_identity.as_deref(), Some("b"));
            assert_eq!(spec.lease_transitions, Some(4));
            assert_eq!(spec.acquire_time, Some(MicroTime(now.wall)));
            assert_eq!(spec.renew_time, Some(MicroTime(now.wall)));
        }
    }

    /// A record naming our identity that this process did not write (a restarted replica's
    /// predecessor, not known to be dead, or a twin) is another holder's: it waits out its
    /// whole lease duration, then takes it as a new holder. It took it after one retry period
    /// unchanged before, while a predecessor one renewal late still led.
    #[test]
    fn a_record_naming_us_that_we_did_not_write_waits_its_whole_lease_duration() {
        let mut clock = Clock::new("2026-11-26T12:00:00Z");
        for predecessor in [held_by("a", "2026-11-26T11:59:59Z"), {
            // Marked by another process with our identity.
            let mut r = held_by("a", "2026-11-26T11:59:59Z");
            r.mark = Some("other-a/1795694399000000".into());
            r
        }] {
            let mut a = candidate("a");
            let start = clock.now().mono;
            a.step(Input::Tick, clock.now());
            let step = a.step(Input::Read(Some(predecessor.clone())), clock.now());
            assert_eq!(step, Step { action: Action::Wait(start + ms(2000)), report: None });
            for _ in 0..7 {
                let now = clock.advance(ms(2000));
                assert_eq!(a.step(Input::Tick, now).action, Action::Read);
                let step = a.step(Input::Read(Some(predecessor.clone())), now);
                assert!(matches!(step.action, Action::Wait(_)), "{step:?}");
                assert!(!a.leading(now.mono));
            }
            let now = clock.advance(ms(1000));
            let step = a.step(Input::Read(Some(predecessor)), now);
            assert_eq!(now.mono - start, ms(15_000));
            let record = update(&step);
            assert_eq!(record.spec.holder_identity.as_deref(), Some("a"));
            assert_eq!(record.spec.lease_transitions, Some(4), "a new holder: one transition more");
            assert_eq!(record.spec.acquire_time, Some(MicroTime(now.wall)));
            assert!(!a.twin(), "unchanged all along: a predecessor, not a twin");
        }
    }

    /// A newcomer whose identity's lease is renewed by another process meanwhile is a twin:
    /// it says so and waits as a standby, never writing while the other renews.
    #[test]
    fn a_newcomer_that_sees_its_identitys_lease_renewed_is_a_twin() {
        let mut clock = Clock::new("2026-11-26T12:00:00Z");
        let mut first = candidate("a");
        let mut second = twin_of("a");
        let mut record = leading(&clock, &mut first);
        second.step(Input::Tick, clock.now());
        second.step(Input::Read(Some(record.clone())), clock.now());
        assert!(!second.twin());
        for _ in 0..20 {
            let now = clock.advance(ms(2000));
            let step = first.step(Input::Tick, now);
            first.step(accepted(&step, now), now);
            record = update(&step).clone();
            second.step(Input::Tick, now);
            let step = second.step(Input::Read(Some(record.clone())), now);
            assert!(matches!(step.action, Action::Wait(_)), "{step:?}");
            assert!(second.twin() && !second.leading(now.mono) && first.leading(now.mono));
        }
    }

    /// A record naming us that another process wrote over ours: we stop leading, say so, and
    /// wait for it to expire as for anyone's; then we take it as a new holder.
    #[test]
    fn a_record_naming_us_written_by_another_process_ends_our_lead() {
        let mut clock = Clock::new("2026-11-26T12:00:00Z");
        let mut a = candidate("a");
        leading(&clock, &mut a);
        // The fast renewal is refused: another process wrote the lease, naming "a".
        let now = clock.advance(ms(2000));
        assert!(matches!(a.step(Input::Tick, now).action, Action::Update(_)));
        assert_eq!(a.step(Input::Failed { conflict: true }, now).action, Action::Read);
        let mut theirs = held_by("a", "2026-11-26T12:00:01.5Z");
        theirs.mark = Some("other-a/1795694401500000".into());
        let step = a.step(Input::Read(Some(theirs.clone())), now);
        assert_eq!(step, Step { action: Action::Wait(now.mono + ms(2000)), report: Some(Leadership::Lost) });
        assert!(a.twin());
        // Renewed by the twin no more: 15 s after we saw it, ours to take, as a new holder.
        let now = clock.advance(ms(15_000));
        let step = a.step(Input::Read(Some(theirs)), now);
        let spec = &update(&step).spec;
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_transitions, Some(4), "a new holder: one transition more");
        assert_eq!(spec.acquire_time, Some(MicroTime(now.wall)));
    }

    /// A writer that keeps our annotation as it read it (client-go's Update replaces the spec
    /// of the Lease it read) and writes its own renewTime under our identity: its record is not
    /// ours, though it names us and carries our token.
    #[test]
    fn a_record_keeping_our_mark_for_another_renew_time_is_not_ours() {
        let mut clock = Clock::new("2026-11-26T12:00:00Z");
        let mut a = candidate("a");
        let ours = leading(&clock, &mut a);
        let now = clock.advance(ms(2000));
        a.step(Input::Tick, now);
        a.step(Input::Failed { conflict: true }, now);
        let mut kept = ours.clone();
        kept.spec.renew_time = Some(MicroTime("2026-11-26T12:00:01.5Z".parse().unwrap()));
        let step = a.step(Input::Read(Some(kept)), now);
        assert_eq!(step.report, Some(Leadership::Lost));
        assert!(matches!(step.action, Action::Wait(_)) && a.twin());
    }

    /// Our own renewal whose answer was lost (a timeout) is ours when read back: no twin.
    #[test]
    fn our_own_write_whose_answer_was_lost_is_ours() {
        let mut clock = Clock::new("2026-11-26T12:00:00.123456789Z");
        let mut a = candidate("a");
        leading(&clock, &mut a);
        let now = clock.advance(ms(2000));
        let step = a.step(Input::Tick, now);
        let landed = update(&step).clone();
        assert_eq!(a.step(Input::Failed { conflict: false }, now).action, Action::Read);
        let step = a.step(Input::Read(Some(landed)), now);
        assert_eq!(update(&step).spec.holder_identity.as_deref(), Some("a"));
        assert!(a.leading(now.mono));
        assert!(!a.twin());
    }

    /// A leader whose writes are refused for a long while (an etcd out of space, a webhook
    /// down: reads work, writes do not) still knows the record on the server as its own: when
    /// writes work again it renews at once, and says nothing of a twin. It remembered only its
    /// last eight renewTimes before, and took its own record for a twin's after eight refusals.
    #[test]
    fn a_replica_whose_writes_fail_for_long_keeps_knowing_its_record() {
        let mut clock = Clock::new("2026-11-26T12:00:00Z");
        let mut a = candidate("a");
        let stored = leading(&clock, &mut a);
        let mut writes = 0;
        let mut now = clock.now();
        for _ in 0..20 {
            now = clock.advance(ms(2000));
            let mut step = a.step(Input::Tick, now);
            // Every write refused; every read answered with the record stored before.
            loop {
                step = match step.action {
                    Action::Update(_) | Action::Create(_) => {
                        writes += 1;
                        a.step(Input::Failed { conflict: false }, now)
                    }
                    Action::Read => a.step(Input::Read(Some(stored.clone())), now),
                    Action::Wait(_) | Action::Done => break,
                };
            }
            assert!(!a.twin());
        }
        assert!(writes > 20, "{writes} writes refused");
        assert!(!a.leading(now.mono), "past the renew deadline");
        // Writes work again: the record read is ours, renewed at once.
        now = clock.advance(ms(2000));
        assert_eq!(a.step(Input::Tick, now).action, Action::Read);
        let step = a.step(Input::Read(Some(stored.clone())), now);
        let renewal = update(&step);
        assert_eq!(renewal.spec.acquire_time, stored.spec.acquire_time, "a renewal of ours, not a new holder");
        let step = a.step(accepted(&step, now), now);
        assert_eq!(step.report, Some(Leadership::Acquired));
        assert!(!a.twin());
    }

    /// A twin stopped before it ever wrote (in its first retry period) has nothing to release:
    /// the record names its identity, but it is the live holder's. It released it before, and
    /// again after a 409, and a standby took over while that holder still led.
    #[test]
    fn a_twin_stopped_before_it_wrote_releases_nothing() {
        let mut clock = Clock::new("2026-11-26T12:00:00Z");
        let mut first = candidate("a");
        let held = leading(&clock, &mut first);
        let mut second = twin_of("a");
        second.step(Input::Tick, clock.now());
        second.step(Input::Read(Some(held.clone())), clock.now());
        let now = clock.advance(ms(500));
        assert_eq!(second.step(Input::Stop, now), Step { action: Action::Done, report: None });
        // Nor after a 409 and a read, whatever it read.
        let mut second = twin_of("a");
        second.step(Input::Read(Some(held.clone())), now);
        second.step(Input::Stop, now);
        assert_eq!(second.step(Input::Read(Some(held)), now).action, Action::Done);
        assert!(first.leading(now.mono));
    }

    /// A Lease deleted while another holds it (by hand, by a cleanup job) says nothing of its
    /// holder, who may have renewed it after we last read it and lead until its renew
    /// deadline: a standby that saw it recreates it only once it has stayed missing for a
    /// lease duration. It created it at once before, and led beside the holder until the
    /// holder's next renewal.
    #[test]
    fn a_deleted_lease_is_recreated_only_once_it_stayed_missing_a_lease_duration() {
        let mut clock = Clock::new("2026-11-26T12:00:00Z");
        let mut b = candidate("b");
        b.step(Input::Tick, clock.now());
        b.step(Input::Read(Some(held_by("a", "2026-11-26T11:59:59Z"))), clock.now());
        // Gone from the first 404 on, 14 s after b last saw it change: renewed since, maybe.
        let now = clock.advance(ms(14_000));
        let gone = now.mono;
        assert_eq!(b.step(Input::Tick, now).action, Action::Read);
        assert_eq!(b.step(Input::Read(None), now).action, Action::Wait(now.mono + ms(2000)));
        let now = clock.advance(ms(13_000));
        assert_eq!(b.step(Input::Read(None), now).action, Action::Wait(gone + ms(15_000)), "woken at its expiry");
        let now = clock.advance(ms(2000));
        b.step(Input::Tick, now);
        let step = b.step(Input::Read(None), now);
        assert!(matches!(step.action, Action::Create(_)), "{step:?}");
        // Recreated meanwhile by its holder: seen changing again, held again.
        let mut b = candidate("b");
        b.step(Input::Read(Some(held_by("a", "2026-11-26T11:59:59Z"))), now);
        b.step(Input::Read(None), now);
        let step = b.step(Input::Read(Some(held_by("a", "2026-11-26T11:59:59Z"))), now);
        assert!(matches!(step.action, Action::Wait(_)), "{step:?}");
        // A released Lease, deleted: someone may have taken it since; our lease duration.
        let mut c = candidate("c");
        let mut released = held_by("", "2026-11-26T11:59:59Z");
        released.spec.lease_duration_seconds = Some(1);
        c.step(Input::Read(Some(released)), now);
        assert_eq!(c.step(Input::Read(None), now).action, Action::Wait(now.mono + ms(2000)));
        let later = clock.advance(ms(15_000));
        assert!(matches!(c.step(Input::Read(None), later).action, Action::Create(_)));
        // Never seen: nothing to wait for.
        assert!(matches!(candidate("d").step(Input::Read(None), later).action, Action::Create(_)));
    }

    /// Our own Lease deleted under us: whoever saw it waits out its lease duration, so we
    /// create it again at once, and lead on.
    #[test]
    fn our_own_deleted_lease_is_created_again_at_once() {
        let mut clock = Clock::new("2026-11-26T12:00:00Z");
        let mut a = candidate("a");
        leading(&clock, &mut a);
        let now = clock.advance(ms(2000));
        assert!(matches!(a.step(Input::Tick, now).action, Action::Update(_)));
        // The PUT carries the deleted Lease's uid: 409, then a read finds nothing.
        assert_eq!(a.step(Input::Failed { conflict: true }, now).action, Action::Read);
        let step = a.step(Input::Read(None), now);
        assert!(matches!(step.action, Action::Create(_)), "{step:?}");
        assert!(a.leading(now.mono));
        let step = a.step(accepted(&step, now), now);
        assert_eq!(step.report, None, "led all along");
        assert!(a.leading(now.mono + ms(9_999)));
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
        assert_eq!(b.observed().unwrap().since, now.mono);
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
            let mut record = held_by("a", "2026-11-26T12:00:00Z");
            record.spec.lease_duration_seconds = duration;
            record.spec.lease_transitions = Some(-7);
            let step = b.step(Input::Read(Some(record.clone())), clock.now());
            if expired_after.is_zero() {
                assert_eq!(
                    update(&step).spec.lease_transitions,
                    Some(1),
                    "{duration:?}: negative transitions read as 0"
                );
                continue;
            }
            assert!(matches!(step.action, Action::Wait(_)), "{duration:?}");
            if expired_after < ms(60_000) {
                let now = clock.advance(expired_after);
                assert!(matches!(b.step(Input::Read(Some(record)), now).action, Action::Update(_)), "{duration:?}");
            }
        }
    }

    /// A released lease (empty holder) is taken at once.
    #[test]
    fn a_released_lease_is_taken_at_once() {
        let clock = Clock::new("2026-11-26T12:00:00Z");
        let mut b = candidate("b");
        let mut released = held_by("", "2026-11-26T12:00:00Z");
        released.spec.lease_duration_seconds = Some(1);
        let step = b.step(Input::Read(Some(released)), clock.now());
        assert_eq!(update(&step).spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(update(&step).spec.lease_transitions, Some(4));
    }

    /// Leading: renew every retry period without reading first, keeping acquireTime and
    /// transitions; the lead lasts renew deadline after the last renewal *sent*.
    #[test]
    fn the_leader_renews_each_retry_period_and_leads_until_the_renew_deadline() {
        let mut clock = Clock::new("2026-11-26T12:00:00Z");
        let mut a = candidate("a");
        let step = a.step(Input::Read(Some(held_by("", "2026-11-26T11:59:58Z"))), clock.now());
        let mine = update(&step).clone();
        let sent = clock.now().mono;
        let now = clock.advance(ms(300));
        let step = a.step(Input::Wrote { record: mine.clone(), sent }, now);
        assert_eq!(step, Step { action: Action::Wait(now.mono + ms(2000)), report: Some(Leadership::Acquired) });
        let now = clock.advance(ms(2000));
        let step = a.step(Input::Tick, now);
        let spec = &update(&step).spec;
        assert_eq!(spec.acquire_time, mine.spec.acquire_time, "kept");
        assert_eq!(spec.lease_transitions, Some(4), "kept");
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
        leading(&clock, &mut a);
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
        let step = a.step(Input::Read(Some(held_by("", "2026-11-26T11:59:58Z"))), clock.now());
        let now = clock.advance(ms(10_000));
        let step = a.step(Input::Wrote { record: update(&step).clone(), sent }, now);
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
        let held = leading(&clock, &mut a);
        let now = clock.advance(ms(500));
        let step = a.step(Input::Stop, now);
        assert_eq!(step.report, Some(Leadership::Lost));
        assert!(a.stopping() && !a.leading(now.mono));
        let released = update(&step).clone();
        let spec = &released.spec;
        assert_eq!(spec.holder_identity.as_deref(), Some(""));
        assert_eq!(spec.lease_duration_seconds, Some(1));
        assert_eq!(spec.acquire_time, Some(MicroTime(now.wall)));
        assert_eq!(spec.renew_time, Some(MicroTime(now.wall)));
        assert_eq!(spec.lease_transitions, Some(0));
        // Raced by our own renewal that landed: read, release again; then done.
        assert_eq!(a.step(Input::Failed { conflict: true }, now).action, Action::Read);
        let again = a.step(Input::Read(Some(held)), now);
        assert!(matches!(again.action, Action::Update(_)));
        assert_eq!(again.report, None);
        assert_eq!(a.step(Input::Wrote { record: released, sent: now.mono }, now).action, Action::Done);
        // A standby has nothing to release.
        let mut b = candidate("b");
        b.step(Input::Read(Some(held_by("a", "2026-11-26T11:59:58Z"))), now);
        assert_eq!(b.step(Input::Stop, now), Step { action: Action::Done, report: None });
        // Once someone else took it, a conflicting release gives up.
        let mut a = candidate("a");
        leading(&clock, &mut a);
        a.step(Input::Stop, now);
        a.step(Input::Failed { conflict: true }, now);
        assert_eq!(a.step(Input::Read(Some(held_by("c", "2026-11-26T12:00:01Z"))), now).action, Action::Done);
    }
}
