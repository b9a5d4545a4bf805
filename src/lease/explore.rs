//! The exhaustive explorer: every interleaving, to a bounded depth, of two or three processes
//! (twins and restarts among them) that run the crate's own decisions: [`Candidate::step`] for
//! every Lease (an elector's, or a shard group member's), and for members [`Peers`],
//! [`decide`] and [`confirmed`] (over [`assign`](super::assign::assign)), with the glue of
//! `elector.rs` and `group.rs` mirrored step for step, and a watcher per member whose store
//! follows its share as `Config::shard_group` makes it, and reads as `Follow::dark` says.
//!
//! Each scenario names its processes (electors over one Lease, or members of a group), who
//! may start later, and a budget of faults. From its start (the world settled, every process
//! started and the leaders leading, or fresh), every one of these may come next, in any order:
//!
//! - a process's wake-up, whose step sends a request or waits;
//! - the server takes a request: answered, refused with a conflict (409), failed (not applied),
//!   or applied with its answer lost;
//! - an answer reaches its process;
//! - a member's watcher relists to its share, under the share's generation now (as
//!   `Follow::listed` records it); one that is not held up (below) drops what its share no
//!   longer covers before any time passes;
//! - time passes, to the next moment anything is due; with a request or an answer still on its
//!   way (a delay: a fault), which then comes late, past its sender's bound perhaps (the sender
//!   gave up on it; a request is applied all the same);
//! - faults, each within the budget: a process crashes (a request of its may still land), is
//!   stopped (`stop()`), has its lease thread paused past its renew deadline, or its watcher
//!   stopped (which empties its store, as `Writer::empty_at_end` does) or held up (stuck where
//!   no cut reaches it: a connect, a consumer that does not read, a starved thread): a held-up
//!   watcher neither relists nor stops, time passes whatever its store holds, and the store
//!   keeps what it held, counted in its member's claim (`Follow::holding`), until it is let go,
//!   at any later moment. Its `stop()` is not offered while it is held: it would take effect
//!   only once the watcher is let go and change nothing before, so a stop called while held is
//!   the let go followed at once by a stop, which is explored. A Lease is deleted (one that
//!   every running process has seen: the limit of docs/protocol.md §13.5); a process starts (a
//!   twin of a running one, or one restarted under a crashed one's identity).
//!
//! Each scenario has its timings: most have lease duration 2 s, renew deadline 1.5 s and retry
//! period 1 s; two have the library's default ratios (`LeaseTimings::default()`, 15 s / 10 s
//! / 2 s) scaled to 6 s / 4 s / 1 s, where a renew deadline of several retry periods lets a
//! stopped member's last lead outlast its release, and another member take its share
//! meanwhile. Each process's monotonic clock runs at its own rate (within the documented
//! bound: the ratio of two rates stays below lease duration / renew deadline, checked for
//! every scenario that must pass); wall clocks differ by offsets, which nothing compares. A
//! state is the whole world (every process, the server, the messages on their way, the faults
//! left); states reached by several interleavings are explored once.
//!
//! At every state it checks: at most one process believes it holds each Lease (leads) within
//! its renew deadline; no write of another process lands on a Lease while a process leads on
//! it; a process says it has a twin only when another process with its identity wrote its
//! Lease; leadership reports alternate; no hash point is in two members' stores as readers
//! see them (a stopped watcher's store included): a store reads empty while what it was listed
//! under outlived its lead (the lead ended, or lapsed before a renewal), by the library's own
//! rule, [`Lead::dark`], which `Follow::dark` applies at every read (docs/protocol.md §13.4).
//! The stores themselves hold no point twice either, but where a watcher was held up (from
//! then until it relists). At the leaves (the depth reached), the faults stop: the world runs
//! on, every request answered at once, a held-up watcher stays so for a lease duration and a
//! retry period more (by then another member may have taken its share), then is let go;
//! within a lease duration and a retry period (on the slowest clock) one process leads
//! each Lease that a running process wants, and the members' stores of each group split the
//! hash space between them, as readers see them, two lease durations and a retry period
//! after the last watcher was let go (a member whose own Lease was deleted waits a lease
//! duration before it creates it again, then waits out the others' Leases it finds).
//!
//! A violation panics with the counterexample: the shortest depth at which it appears, the
//! states explored at that depth, and the trace of actions, then of the fault-free run.
//! `KUBE_WATCHER_EXPLORE_DEPTH=n` adds `n` to every scenario's depth: `cargo test` explores
//! about 140,700 states in about 18 s of CPU; CONTRIBUTING.md has deeper runs, and what it
//! found with each of the protocol's fixes undone.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::decide::{Action, Candidate, Input, Now, Record};
use super::handover::{self, Peers, Ranges, Source, confirmed, decide};
use super::{Leadership, LeaseTimings, member_lease};
use crate::shard::{Lead, Shard};

/// A scenario's timings (µs): lease duration, renew deadline, retry period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Timings {
    ld: u64,
    rd: u64,
    rp: u64,
}

impl Timings {
    /// Most scenarios' timings: lease duration 2 s, renew deadline 1.5 s, retry period 1 s
    /// (client-go's rules hold: 2 > 1.5 > 1.2 × 1). A member stopped with its watcher held up
    /// releases a retry period after its stop, and the released claim lives a second more
    /// (`leaseDurationSeconds` 1): with a renew deadline shorter than a retry period and a
    /// second, the stopped member's last lead has ended before another member may take its
    /// share; only a twin, which takes the released Lease at once, comes before.
    const SHORT: Timings = Timings { ld: 2_000_000, rd: 1_500_000, rp: 1_000_000 };
    /// The library's default ratios (`LeaseTimings::default()`: 15 s, 10 s, 2 s), scaled down:
    /// lease duration 6 s, renew deadline 4 s, retry period 1 s. The renew deadline is four
    /// retry periods: a stopped member's last lead outlasts its release and the released
    /// claim's second, and another member may take its share while that lead lasts.
    const DEFAULT_LIKE: Timings = Timings { ld: 6_000_000, rd: 4_000_000, rp: 1_000_000 };

    fn lease(self) -> LeaseTimings {
        LeaseTimings {
            lease_duration: Duration::from_micros(self.ld),
            renew_deadline: Duration::from_micros(self.rd),
            retry_period: Duration::from_micros(self.rp),
        }
    }

    /// How long a pause freezes a process's lease thread: past its renew deadline.
    fn pause(self) -> u64 {
        self.ld
    }

    /// How long a stop waits for the release (`Worker`'s and `GroupHook`'s bound): a retry
    /// period, at most 5 s.
    fn release(self) -> u64 {
        self.rp.min(5_000_000)
    }

    /// Whether clocks at these rates keep within the documented bound: the ratio of the
    /// fastest to the slowest stays below lease duration / renew deadline.
    fn bounds(self, rates: impl Iterator<Item = Rate> + Clone) -> bool {
        rates.clone().all(|Rate(a, b)| {
            rates
                .clone()
                .all(|Rate(c, d)| u128::from(a * d) * u128::from(self.rd) < u128::from(c * b) * u128::from(self.ld))
        })
    }
}

/// The most steps a fault-free run takes (it is over in a few hundred).
const STEPS: u32 = 100_000;

/// A process's clock rate: its monotonic clock advances `.0 / .1` µs per µs of true time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Rate(u64, u64);

const TRUE: Rate = Rate(1, 1);
/// A clock 5/4 as fast: the ratio to a true one (1.25) is within lease duration / renew
/// deadline (1.33 with [`Timings::SHORT`]).
const FAST: Rate = Rate(5, 4);

/// What a process's lease thread is doing (`Worker::run` in `elector.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Thread {
    /// Waiting until then (true time), then `Tick`.
    Wait(u64),
    /// A request in flight, cut at `bound` (`Worker::bound`).
    Busy {
        bound: u64,
    },
    /// A stopping member waits for its watchers to drop their share, until then at most
    /// (`GroupHook::stopping`).
    Draining(u64),
    Ended,
}

/// A request on its way to the server.
#[derive(Debug, Clone, Hash)]
enum Op {
    Read,
    Create(Record),
    Update(Record),
    List,
}

#[derive(Debug, Clone, Hash)]
struct Request {
    from: usize,
    epoch: u64,
    op: Op,
    /// When it was sent, on its sender's clock.
    sent: Instant,
    /// The resourceVersion and uid of the Lease its sender last read or wrote (an update's
    /// preconditions).
    base: Option<(u64, u64)>,
    /// A member's label and claim (`GroupHook::decorate`).
    group: Option<String>,
    claim: Option<Ranges>,
}

#[derive(Debug, Clone, Hash)]
enum Reply {
    /// The Lease read: record, resourceVersion, uid, group label.
    Read(Option<(Record, u64, u64, Option<String>)>),
    Wrote(Record, u64, u64, Instant),
    Failed {
        conflict: bool,
    },
    Listed(Option<Vec<handover::Record>>),
}

#[derive(Debug, Clone, Hash)]
struct Answer {
    to: usize,
    epoch: u64,
    reply: Reply,
}

/// A Lease on the server.
#[derive(Debug, Clone, Hash)]
struct Stored {
    record: Record,
    group: Option<String>,
    claim: Ranges,
    rv: u64,
    uid: u64,
}

/// A member's part: `GroupHook`'s state, and its watcher's store.
#[derive(Debug, Clone, Hash)]
struct Member {
    written: Ranges,
    pending: Ranges,
    claim: Ranges,
    /// The share published, and the end (true time) of the lead it is valid for.
    allowed: Ranges,
    until: Option<u64>,
    peers: Peers,
    wrote: bool,
    list_failed: bool,
    /// A follower's holding changed while the thread was busy: its next wait returns at once.
    holdings_news: bool,
    /// The look a list in flight belongs to: the elector's next step, the lead's end, and what
    /// the stores held when it began.
    look: Option<(u64, Instant, Ranges)>,
    /// The watcher's store, and whether the watcher still runs (is counted in the claim).
    store: Ranges,
    registered: bool,
    /// The share's generations and leads as the watcher follows them (`Follow`'s own
    /// [`Lead`]), and the generation the store was listed under (`None`: it holds nothing).
    lead: Lead,
    listed: Option<u64>,
    hold: Hold,
}

/// Whether a member's watcher is held up (a fault): stuck where no cut reaches it (a name
/// lookup or a TCP connect, a consumer that does not read, a starved thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Hold {
    Free,
    /// It neither relists nor stops; its store keeps what it holds, and counts in the claim.
    Held,
    /// Let go, and not relisted since: its store may still hold what it kept.
    Released,
}

#[derive(Debug, Clone, Hash)]
struct Proc {
    /// The name traces use.
    name: String,
    identity: String,
    token: String,
    lease: String,
    group: Option<String>,
    rate: Rate,
    wall_offset: i64,
    cand: Candidate,
    alive: bool,
    /// `stop()` was called: `is_leader()` is false from then on.
    stop: bool,
    done: bool,
    release_by: Option<u64>,
    paused_until: u64,
    /// The Lease last read or written (`Worker::lease`): its resourceVersion and uid.
    read: Option<(u64, u64)>,
    thread: Thread,
    epoch: u64,
    last_report: Option<Leadership>,
    member: Option<Member>,
}

/// A process a scenario starts, at once or on a `Start` fault.
#[derive(Debug, Clone, Hash)]
struct Spawn {
    name: &'static str,
    identity: &'static str,
    /// A member of this group, or an elector over the Lease `lease`.
    group: Option<&'static str>,
    lease: &'static str,
    rate: Rate,
}

/// How many faults of each kind a scenario may still inject.
#[derive(Debug, Clone, Copy, Default, Hash)]
struct Budget {
    /// Time passes while a request or its answer is on its way (it comes late: past its
    /// sender's bound, perhaps, which then gives up on it).
    delay: u8,
    crash: u8,
    stop: u8,
    watcher: u8,
    /// A member's watcher is held up ([`Hold`]), until let go (at the latest a while after the
    /// faults stop).
    hold: u8,
    pause: u8,
    delete: u8,
    start: u8,
    fail: u8,
    lost: u8,
    conflict: u8,
}

/// What the server does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Answered,
    Failed,
    Lost,
    Refused,
}

#[derive(Debug, Clone)]
enum Act {
    Tick(usize),
    Serve(usize, Outcome),
    Deliver(usize),
    /// Serve a request and deliver its answer at once (a quick round trip).
    RoundTrip(usize),
    Cut(usize),
    Drain(usize),
    Relist(usize),
    /// A held-up watcher is let go.
    Release(usize),
    Advance,
    Crash(usize),
    Stop(usize),
    StopWatcher(usize),
    Hold(usize),
    Pause(usize),
    Delete(String),
    Start(usize),
}

#[derive(Debug, Clone, Hash)]
struct World {
    base: Instant,
    t: u64,
    procs: Vec<Proc>,
    server: BTreeMap<String, Stored>,
    rv: u64,
    uid: u64,
    net: Vec<Request>,
    answers: Vec<Answer>,
    budget: Budget,
    /// Only writes are refused (`Budget::fail`): a server that answers reads.
    writes_only: bool,
    later: Vec<Option<Spawn>>,
    deleted: bool,
    /// The tokens of the processes whose writes landed, by identity.
    writers: BTreeMap<String, BTreeSet<String>>,
    timings: Timings,
}

type Checked = Result<(), String>;

fn all() -> Ranges {
    // OK: the equal split into one shard is the whole space.
    Ranges::of(Shard::of(0, 1).ok().as_ref())
}

impl World {
    fn new(spawns: &[Spawn], later: &[Spawn], budget: Budget, timings: Timings) -> World {
        let mut w = World {
            base: Instant::now() + Duration::from_secs(3600),
            t: 0,
            procs: Vec::new(),
            server: BTreeMap::new(),
            rv: 0,
            uid: 0,
            net: Vec::new(),
            answers: Vec::new(),
            budget,
            writes_only: false,
            later: later.iter().cloned().map(Some).collect(),
            deleted: false,
            writers: BTreeMap::new(),
            timings,
        };
        for s in spawns {
            w.spawn(s);
        }
        w
    }

    fn spawn(&mut self, s: &Spawn) {
        let n = self.procs.len();
        let token = format!("token{n}");
        let lease = match s.group {
            Some(group) => member_lease(group, s.identity),
            None => s.lease.to_owned(),
        };
        let member = s.group.map(|_| Member {
            written: Ranges::default(),
            pending: Ranges::default(),
            claim: Ranges::default(),
            allowed: Ranges::default(),
            until: None,
            peers: Peers::new(Duration::from_micros(self.timings.ld)),
            wrote: false,
            list_failed: false,
            holdings_news: false,
            look: None,
            store: Ranges::default(),
            registered: true,
            lead: Lead::default(),
            listed: None,
            hold: Hold::Free,
        });
        self.procs.push(Proc {
            name: s.name.to_owned(),
            identity: s.identity.to_owned(),
            cand: Candidate::new(s.identity, &token, self.timings.lease()),
            token,
            lease,
            group: s.group.map(str::to_owned),
            rate: s.rate,
            // Wall clocks an hour apart, each way: nothing compares them.
            wall_offset: [0, 3600, -3600][n % 3],
            alive: true,
            stop: false,
            done: false,
            release_by: None,
            paused_until: 0,
            read: None,
            // The thread starts with `Tick`.
            thread: Thread::Wait(self.t),
            epoch: 0,
            last_report: None,
            member,
        });
    }

    fn local(&self, p: usize, t: u64) -> Instant {
        let Rate(num, den) = self.procs[p].rate;
        self.base + Duration::from_micros(t * num / den)
    }

    /// The first true time at which process `p`'s clock reads `x` or later.
    fn global(&self, p: usize, x: Instant) -> u64 {
        let Rate(num, den) = self.procs[p].rate;
        let local = u64::try_from(x.saturating_duration_since(self.base).as_micros()).unwrap_or(u64::MAX / 8);
        (local * den).div_ceil(num)
    }

    /// True time `local` µs of `p`'s clock from now.
    fn later_by(&self, p: usize, local: u64) -> u64 {
        let Rate(num, den) = self.procs[p].rate;
        self.t + (local * den).div_ceil(num)
    }

    fn now(&self, p: usize) -> Now {
        let wall = Timestamp::UNIX_EPOCH
            .checked_add(SignedDuration::from_secs(1_800_000_000 + self.procs[p].wall_offset))
            .and_then(|w| w.checked_add(SignedDuration::from_micros(i64::try_from(self.t).unwrap_or(0))))
            .unwrap_or(Timestamp::UNIX_EPOCH);
        Now { mono: self.local(p, self.t), wall }
    }

    fn paused(&self, p: usize) -> bool {
        self.procs[p].paused_until > self.t
    }

    /// Whether `p`'s lease thread can act now.
    fn running(&self, p: usize) -> bool {
        let proc = &self.procs[p];
        proc.alive && !proc.done && !self.paused(p)
    }

    /// `Worker::step`: one decision, its reports checked.
    fn step(&mut self, p: usize, input: Input) -> Result<Action, String> {
        let now = self.now(p);
        let proc = &mut self.procs[p];
        let step = proc.cand.step(input, now);
        if let Some(report) = step.report {
            let expected = match proc.last_report {
                None | Some(Leadership::Lost) => Leadership::Acquired,
                Some(Leadership::Acquired) => Leadership::Lost,
            };
            if report != expected {
                return Err(format!("{} reported {report:?} after {:?}", proc.name, proc.last_report));
            }
            proc.last_report = Some(report);
        }
        Ok(step.action)
    }

    /// `Worker::run`'s loop body: a step, the stop injected after it, the release bound, the
    /// action performed.
    fn run(&mut self, p: usize, input: Input) -> Checked {
        let mut action = self.step(p, input)?;
        let proc = &self.procs[p];
        if proc.stop && !proc.cand.stopping() {
            if proc.member.is_some() {
                // `GroupHook::stopping`: no share from now on, the lead ended now; the release
                // waits (at most a retry period) for the watchers to drop theirs (the `Drain`
                // action goes on).
                let now = self.now(p).mono;
                self.publish(p, Ranges::default(), Some(now));
                let until = self.later_by(p, self.timings.release());
                self.procs[p].thread = Thread::Draining(until);
                return Ok(());
            }
            self.procs[p].release_by = Some(self.later_by(p, self.timings.release()));
            action = self.step(p, Input::Stop)?;
        }
        self.perform(p, action)
    }

    fn perform(&mut self, p: usize, action: Action) -> Checked {
        if self.procs[p].release_by.is_some_and(|by| self.t >= by) {
            self.end(p);
            return Ok(());
        }
        match action {
            Action::Done => self.end(p),
            Action::Wait(until) => {
                let until = self.global(p, until);
                self.wait(p, until);
            }
            Action::Read => self.send(p, Op::Read),
            Action::Create(record) => self.send(p, Op::Create(record)),
            // `Worker::write`: an update without a Lease read first is refused as a conflict.
            Action::Update(_) if self.procs[p].read.is_none() => return self.run(p, Input::Failed { conflict: true }),
            Action::Update(record) => self.send(p, Op::Update(record)),
        }
        Ok(())
    }

    fn end(&mut self, p: usize) {
        let proc = &mut self.procs[p];
        proc.done = true;
        proc.thread = Thread::Ended;
    }

    /// Sends a request; the thread waits for it until its bound (`Worker::bound`: the end of
    /// the lead, or of the release, or the renew deadline).
    fn send(&mut self, p: usize, op: Op) {
        let now = self.now(p).mono;
        let proc = &self.procs[p];
        let end = proc.release_by.or_else(|| proc.cand.leading_until().filter(|u| *u > now).map(|u| self.global(p, u)));
        let bound = end.unwrap_or_else(|| self.later_by(p, self.timings.rd)).max(self.t + 1);
        let (group, claim) = match (&op, &proc.member) {
            (Op::Create(_) | Op::Update(_), Some(m)) => (proc.group.clone(), Some(m.claim.clone())),
            _ => (proc.group.clone(), None),
        };
        let request = Request { from: p, epoch: proc.epoch, op, sent: now, base: proc.read, group, claim };
        if let (Some(claim), Some(m)) = (&request.claim, &mut self.procs[p].member) {
            m.pending = claim.clone();
        }
        self.net.push(request);
        self.procs[p].thread = Thread::Busy { bound };
    }

    /// `Worker::wait`: an elector waits; a member's hook looks at the group first (a list,
    /// after every step: the explorer's members have no watch), then waits.
    fn wait(&mut self, p: usize, until: u64) {
        if self.procs[p].member.is_none() {
            self.procs[p].thread = Thread::Wait(until);
            return;
        }
        let now = self.now(p).mono;
        let Some(end) = self.procs[p].cand.leading_until().filter(|u| *u > now) else {
            self.publish(p, Ranges::default(), None);
            self.member_wait(p, until);
            return;
        };
        let held = self.applied(p);
        if let Some(m) = &mut self.procs[p].member {
            m.look = Some((until, end, held));
        }
        let bound = self.global(p, end).max(self.t + 1);
        let proc = &self.procs[p];
        let request = Request {
            from: p,
            epoch: proc.epoch,
            op: Op::List,
            sent: now,
            base: None,
            group: proc.group.clone(),
            claim: None,
        };
        self.net.push(request);
        self.procs[p].thread = Thread::Busy { bound };
    }

    /// The hook's wait: until the elector's step, or at once after a holding changed.
    fn member_wait(&mut self, p: usize, until: u64) {
        let t = self.t;
        let proc = &mut self.procs[p];
        let news = proc.member.as_mut().is_some_and(|m| std::mem::take(&mut m.holdings_news));
        proc.thread = Thread::Wait(if news { t } else { until });
    }

    /// The rest of `GroupHook::look`, when the list answers (`None`: it failed or was cut).
    fn listed(&mut self, p: usize, records: Option<Vec<handover::Record>>) {
        let now = self.now(p).mono;
        let Some((until, end, held)) = self.procs[p].member.as_mut().and_then(|m| m.look.take()) else { return };
        match records {
            Some(records) => {
                // `GroupHook::decide`, from the list.
                let holding = self.holding(p);
                let proc = &mut self.procs[p];
                let Some(m) = &mut proc.member else { return };
                m.list_failed = false;
                m.peers.observe(records, now);
                let live = m.peers.live(&proc.lease, now);
                let blocked = m.peers.released_claims(now);
                let decision = decide(&proc.identity, &live, &blocked, &m.written, &held, true);
                let frozen = m.peers.frozen(&proc.lease, now);
                let (allowed, _) = confirmed(&decision, &holding, Source::List, frozen);
                m.claim = decision.claim;
                self.publish(p, allowed, Some(end));
            }
            None => {
                // `GroupHook::keep`: what is held, as far as the last accepted write claims it.
                let holding = self.holding(p);
                let Some(m) = &mut self.procs[p].member else { return };
                m.list_failed = true;
                let kept = holding.intersect(&m.written);
                self.publish(p, kept, Some(end));
            }
        }
        let mut step = until;
        if let Some(m) = &mut self.procs[p].member
            && m.claim != m.written
            && m.wrote
        {
            m.wrote = false;
            step = self.t;
        }
        self.member_wait(p, step.min(until));
    }

    /// `GroupHook::publish`: the share, valid until `until` (the end of the lead, on `p`'s
    /// clock), and `Follow::set`.
    fn publish(&mut self, p: usize, allowed: Ranges, until: Option<Instant>) {
        let (now, until_t) = (self.now(p).mono, until.map(|u| self.global(p, u)));
        if let Some(m) = &mut self.procs[p].member {
            m.lead.set(!allowed.is_empty(), m.allowed != allowed, until, now);
            m.allowed = allowed;
            m.until = until_t;
        }
    }

    /// The share published, while its lead lasts (`GroupHook::holding`).
    fn holding(&self, p: usize) -> Ranges {
        match &self.procs[p].member {
            Some(m) if m.until.is_some_and(|u| self.t < u) => m.allowed.clone(),
            _ => Ranges::default(),
        }
    }

    /// The share as the watcher sees it (`Follow::current`): none once its lead ended.
    fn effective(&self, p: usize) -> Ranges {
        match &self.procs[p].member {
            Some(m) if m.until.is_none() || m.until.is_some_and(|u| self.t < u) => m.allowed.clone(),
            _ => Ranges::default(),
        }
    }

    /// What a member holds: its watcher's store, or with its watcher stopped, its share
    /// (`ShardGroup::shard`, which a program may read itself).
    fn holds(&self, p: usize) -> Ranges {
        match &self.procs[p].member {
            Some(m) if m.registered => m.store.clone(),
            Some(m) => m.store.union(&self.effective(p)),
            None => Ranges::default(),
        }
    }

    /// What a member holds in its readers' eyes: as `holds`, but a store reads empty while
    /// what it was listed under outlived its lead (`Follow::dark`, by `Lead::dark` itself).
    fn visible(&self, p: usize) -> Ranges {
        match &self.procs[p].member {
            Some(m) if m.registered && m.lead.dark(m.listed, self.now(p).mono) => Ranges::default(),
            _ => self.holds(p),
        }
    }

    /// What the member's stores may hold (`GroupHook::applied`).
    fn applied(&self, p: usize) -> Ranges {
        match &self.procs[p].member {
            Some(m) if m.registered => m.store.clone(),
            Some(m) => m.allowed.clone(),
            None => Ranges::default(),
        }
    }

    /// The server takes request `i`.
    fn serve(&mut self, i: usize, outcome: Outcome) -> Result<Option<Answer>, String> {
        let r = self.net.remove(i);
        let lease = self.procs[r.from].lease.clone();
        match outcome {
            Outcome::Failed => return Ok(Some(self.answer(&r, Reply::Failed { conflict: false }))),
            Outcome::Refused => return Ok(Some(self.answer(&r, Reply::Failed { conflict: true }))),
            Outcome::Answered | Outcome::Lost => {}
        }
        let reply = match &r.op {
            Op::Read => Reply::Read(self.server.get(&lease).map(|s| (s.record.clone(), s.rv, s.uid, s.group.clone()))),
            Op::List => Reply::Listed(Some(
                self.server
                    .iter()
                    .filter(|(_, s)| s.group.is_some() && s.group == r.group)
                    .map(|(name, s)| handover::Record {
                        name: name.clone(),
                        version: s.rv.to_string(),
                        holder: s.record.spec.holder_identity.clone().unwrap_or_default(),
                        duration: Duration::from_secs(
                            u64::try_from(s.record.spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
                        ),
                        claim: s.claim.clone(),
                    })
                    .collect(),
            )),
            Op::Create(record) => {
                if self.server.contains_key(&lease) {
                    Reply::Failed { conflict: true }
                } else {
                    self.landed(r.from, &lease)?;
                    self.rv += 1;
                    self.uid += 1;
                    let stored = Stored {
                        record: record.clone(),
                        group: r.group.clone(),
                        claim: r.claim.clone().unwrap_or_default(),
                        rv: self.rv,
                        uid: self.uid,
                    };
                    self.server.insert(lease, stored);
                    Reply::Wrote(record.clone(), self.rv, self.uid, r.sent)
                }
            }
            Op::Update(record) => match self.server.get(&lease) {
                // A PUT carries the uid of the Lease read: after a deletion, 409 (protocol.md §13.1).
                Some(s) if Some((s.rv, s.uid)) == r.base => {
                    self.landed(r.from, &lease)?;
                    self.rv += 1;
                    let rv = self.rv;
                    let Some(s) = self.server.get_mut(&lease) else { unreachable!("just read") };
                    s.record = record.clone();
                    s.rv = rv;
                    s.group = r.group.clone().or_else(|| s.group.clone());
                    if let Some(claim) = &r.claim {
                        s.claim = claim.clone();
                    }
                    Reply::Wrote(record.clone(), rv, s.uid, r.sent)
                }
                _ => Reply::Failed { conflict: true },
            },
        };
        if outcome == Outcome::Lost {
            return Ok(Some(self.answer(&r, Reply::Failed { conflict: false })));
        }
        Ok(Some(self.answer(&r, reply)))
    }

    fn answer(&self, r: &Request, reply: Reply) -> Answer {
        Answer { to: r.from, epoch: r.epoch, reply }
    }

    /// A write of `from` lands on `lease`: no other process may lead on it now.
    fn landed(&mut self, from: usize, lease: &str) -> Checked {
        for (q, proc) in self.procs.iter().enumerate() {
            if q != from && proc.lease == lease && proc.alive && !proc.stop && proc.cand.leading(self.local(q, self.t))
            {
                return Err(format!(
                    "a write of {} landed on Lease {lease:?} while {} leads on it",
                    self.procs[from].name, proc.name
                ));
            }
        }
        let writer = &self.procs[from];
        self.writers.entry(writer.identity.clone()).or_default().insert(writer.token.clone());
        Ok(())
    }

    /// Answer `i` reaches its process (`Worker::read` and `Worker::write`'s ends).
    fn deliver(&mut self, i: usize) -> Checked {
        let a = self.answers.remove(i);
        let p = a.to;
        let input = match a.reply {
            Reply::Listed(records) => {
                self.listed(p, records);
                return Ok(());
            }
            Reply::Read(Some((record, rv, uid, group))) => {
                if group != self.procs[p].group {
                    // `foreign`: never written; someone else's, whoever holds it.
                    self.procs[p].read = None;
                    Input::Failed { conflict: false }
                } else {
                    self.procs[p].read = Some((rv, uid));
                    Input::Read(Some(record))
                }
            }
            Reply::Read(None) => {
                self.procs[p].read = None;
                Input::Read(None)
            }
            Reply::Wrote(record, rv, uid, sent) => {
                self.procs[p].read = Some((rv, uid));
                if let Some(m) = &mut self.procs[p].member {
                    m.written = m.pending.clone();
                    m.wrote = true;
                }
                Input::Wrote { record, sent }
            }
            Reply::Failed { conflict } => Input::Failed { conflict },
        };
        self.procs[p].epoch += 1;
        self.run(p, input)
    }

    /// The request in flight is cut at its bound (or by `stop()`).
    fn cut(&mut self, p: usize) -> Checked {
        self.procs[p].epoch += 1;
        if self.procs[p].member.as_ref().is_some_and(|m| m.look.is_some()) {
            self.listed(p, None);
            return Ok(());
        }
        self.run(p, Input::Failed { conflict: false })
    }

    /// A stopping member's watchers dropped their share, or the wait's bound passed: the
    /// release, claiming what they may still hold.
    fn drain(&mut self, p: usize) -> Checked {
        let applied = self.applied(p);
        if let Some(m) = &mut self.procs[p].member {
            m.claim = applied;
        }
        self.procs[p].release_by = Some(self.later_by(p, self.timings.release()));
        let action = self.step(p, Input::Stop)?;
        self.perform(p, action)
    }

    /// A member's watcher relists to its share (`Worker::refollow`), which it lists under the
    /// generation now (`Follow::listed`).
    fn relist(&mut self, p: usize) {
        let share = self.effective(p);
        if let Some(m) = &mut self.procs[p].member {
            m.listed = (!share.is_empty()).then_some(m.lead.generation);
            m.store = share;
            m.hold = Hold::Free;
        }
        self.holdings_changed(p);
    }

    /// A held-up watcher is let go; until it relists, its store may still hold what it kept.
    fn release(&mut self, p: usize) {
        if let Some(m) = &mut self.procs[p].member {
            m.hold = Hold::Released;
        }
        let due = self.relist_due(p);
        if let Some(m) = &mut self.procs[p].member
            && !due
        {
            m.hold = Hold::Free;
        }
    }

    /// The group's thread learns that a watcher's holding changed (`Follow::holdings_changed`):
    /// its wait ends (a new claim goes out), or the next one does.
    fn holdings_changed(&mut self, p: usize) {
        let t = self.t;
        let proc = &mut self.procs[p];
        let stopping = proc.stop;
        let Some(m) = &mut proc.member else { return };
        match proc.thread {
            Thread::Wait(_) if !stopping => proc.thread = Thread::Wait(t),
            _ => m.holdings_news = true,
        }
    }

    /// Whether a member's watcher, not held up, must drop part of its store (its share shrank
    /// or ended): it does before any time passes.
    fn must_drop(&self, p: usize) -> bool {
        self.follows(p) && self.procs[p].member.as_ref().is_some_and(|m| !m.store.minus(&self.effective(p)).is_empty())
    }

    /// Whether a member's watcher, not held up, is to relist: its store is not its share, or
    /// was listed under another generation of it (`Follow::moved`).
    fn relist_due(&self, p: usize) -> bool {
        self.follows(p)
            && self.procs[p].member.as_ref().is_some_and(|m| {
                m.store != self.effective(p) || (!m.store.is_empty() && m.listed != Some(m.lead.generation))
            })
    }

    /// Whether `p` has a watcher that runs and is not held up.
    fn follows(&self, p: usize) -> bool {
        let proc = &self.procs[p];
        proc.alive && proc.member.as_ref().is_some_and(|m| m.registered && m.hold != Hold::Held)
    }

    fn drain_due(&self, p: usize) -> bool {
        matches!(self.procs[p].thread, Thread::Draining(u) if u <= self.t || self.applied(p).is_empty())
    }

    /// Whether a request or an answer is on its way to a running process that waits for it:
    /// it arrives before any time passes, unless delayed (a fault).
    fn in_flight(&self) -> bool {
        let waits = |p: usize, epoch: u64| self.running(p) && self.procs[p].epoch == epoch;
        self.net.iter().any(|r| waits(r.from, r.epoch)) || self.answers.iter().any(|a| waits(a.to, a.epoch))
    }

    /// Whether something must happen before time may pass.
    fn urgent(&self) -> bool {
        (0..self.procs.len()).any(|p| {
            self.must_drop(p)
                || (self.running(p)
                    && match self.procs[p].thread {
                        Thread::Wait(u) | Thread::Busy { bound: u } => u <= self.t,
                        Thread::Draining(_) => self.drain_due(p),
                        Thread::Ended => false,
                    })
        })
    }

    /// The next moment anything is due.
    fn next_time(&self) -> Option<u64> {
        let mut times = Vec::new();
        for proc in &self.procs {
            if !proc.alive {
                continue;
            }
            if !proc.done {
                match proc.thread {
                    Thread::Wait(u) | Thread::Busy { bound: u } | Thread::Draining(u) => {
                        times.push(u.max(proc.paused_until));
                    }
                    Thread::Ended => {}
                }
            }
            times.push(proc.paused_until);
            if let Some(u) = proc.member.as_ref().and_then(|m| m.until) {
                times.push(u);
            }
        }
        times.into_iter().filter(|u| *u > self.t).min()
    }

    /// Drops answers no thread waits for (cut, or its process gone).
    fn tidy(&mut self) {
        let procs = &self.procs;
        self.answers.retain(|a| {
            let proc = &procs[a.to];
            proc.alive && !proc.done && proc.epoch == a.epoch && matches!(proc.thread, Thread::Busy { .. })
        });
    }

    /// Every action possible now; `faults`: the scenario's budget may be spent.
    fn actions(&self, faults: bool) -> Vec<Act> {
        let mut acts = Vec::new();
        let b = self.budget;
        for (i, r) in self.net.iter().enumerate() {
            let write = matches!(r.op, Op::Create(_) | Op::Update(_));
            acts.push(Act::Serve(i, Outcome::Answered));
            if self.running(r.from) && self.procs[r.from].epoch == r.epoch {
                acts.push(Act::RoundTrip(i));
            }
            if faults && b.fail > 0 && (write || !self.writes_only) {
                acts.push(Act::Serve(i, Outcome::Failed));
            }
            if faults && write && b.lost > 0 {
                acts.push(Act::Serve(i, Outcome::Lost));
            }
            if faults && write && b.conflict > 0 {
                acts.push(Act::Serve(i, Outcome::Refused));
            }
        }
        for (i, a) in self.answers.iter().enumerate() {
            if self.running(a.to) {
                acts.push(Act::Deliver(i));
            }
        }
        for p in 0..self.procs.len() {
            if self.running(p) {
                match self.procs[p].thread {
                    Thread::Wait(u) if u <= self.t => acts.push(Act::Tick(p)),
                    Thread::Busy { bound } if bound <= self.t => acts.push(Act::Cut(p)),
                    Thread::Draining(_) if self.drain_due(p) => acts.push(Act::Drain(p)),
                    _ => {}
                }
            }
            if self.relist_due(p) {
                acts.push(Act::Relist(p));
            }
        }
        if !self.urgent() && self.next_time().is_some() && (!self.in_flight() || (faults && b.delay > 0)) {
            acts.push(Act::Advance);
        }
        if !faults {
            return acts;
        }
        for (p, proc) in self.procs.iter().enumerate() {
            if !proc.alive || proc.done {
                continue;
            }
            if b.crash > 0 {
                acts.push(Act::Crash(p));
            }
            if b.stop > 0 && !proc.stop {
                acts.push(Act::Stop(p));
            }
            // A held-up watcher's `stop()` takes effect once it is let go: it is not offered
            // while it is held (the stop itself changes nothing until then).
            let watcher = proc.member.as_ref().filter(|m| m.registered);
            if b.watcher > 0 && watcher.is_some_and(|m| m.hold != Hold::Held) {
                acts.push(Act::StopWatcher(p));
            }
            if b.hold > 0 && watcher.is_some_and(|m| m.hold != Hold::Held) {
                acts.push(Act::Hold(p));
            }
            // Let go at any moment (once the faults stop, a while later: `liveness_run`).
            if watcher.is_some_and(|m| m.hold == Hold::Held) {
                acts.push(Act::Release(p));
            }
            if b.pause > 0 && !self.paused(p) {
                acts.push(Act::Pause(p));
            }
        }
        if b.delete > 0 {
            // Only a Lease every running process has seen: one that never saw it cannot know
            // of its holder (the limit docs/protocol.md §13.5 states).
            for (name, stored) in &self.server {
                let known = self.procs.iter().all(|p| {
                    let knows = if p.lease == *name {
                        p.cand.observed().is_some()
                    } else if p.group.is_some() && p.group == stored.group {
                        p.member.as_ref().is_some_and(|m| m.peers.knows(name))
                    } else {
                        true
                    };
                    !p.alive || p.done || knows
                });
                if known {
                    acts.push(Act::Delete(name.clone()));
                }
            }
        }
        if b.start > 0 && !self.deleted {
            acts.extend(self.later.iter().enumerate().filter(|(_, s)| s.is_some()).map(|(i, _)| Act::Start(i)));
        }
        acts
    }

    /// What an action is, in a trace.
    fn label(&self, act: &Act) -> String {
        let name = |p: usize| self.procs[p].name.clone();
        let what = match act {
            Act::Tick(p) => format!("{} wakes up", name(*p)),
            Act::Serve(i, _) | Act::RoundTrip(i) => {
                let outcome = if let Act::Serve(_, o) = act { *o } else { Outcome::Answered };
                let r = &self.net[*i];
                let op = match &r.op {
                    Op::Read => "read".to_owned(),
                    Op::List => "list of the group".to_owned(),
                    Op::Create(rec) | Op::Update(rec) => format!(
                        "{} (holder {:?})",
                        if matches!(r.op, Op::Create(_)) { "create" } else { "update" },
                        rec.spec.holder_identity.as_deref().unwrap_or_default()
                    ),
                };
                match (act, outcome) {
                    (Act::RoundTrip(_), _) => format!("{}'s {op} is answered at once", name(r.from)),
                    (_, Outcome::Answered) => format!("the server takes {}'s {op}", name(r.from)),
                    (_, Outcome::Failed) => format!("{}'s {op} fails", name(r.from)),
                    (_, Outcome::Lost) => format!("{}'s {op} lands, its answer lost", name(r.from)),
                    (_, Outcome::Refused) => format!("{}'s {op} is refused (409)", name(r.from)),
                }
            }
            Act::Deliver(i) => {
                let a = &self.answers[*i];
                let what = match &a.reply {
                    Reply::Read(Some((rec, ..))) => {
                        format!("the Lease held by {:?}", rec.spec.holder_identity.as_deref().unwrap_or_default())
                    }
                    Reply::Read(None) => "404".to_owned(),
                    Reply::Wrote(..) => "its write accepted".to_owned(),
                    Reply::Failed { conflict: true } => "409".to_owned(),
                    Reply::Failed { conflict: false } => "an error".to_owned(),
                    Reply::Listed(Some(r)) => format!("a list of {} Leases", r.len()),
                    Reply::Listed(None) => "a failed list".to_owned(),
                };
                format!("{} gets {what}", name(a.to))
            }
            Act::Cut(p) => format!("{}'s request is cut at its bound", name(*p)),
            Act::Drain(p) => format!("{} releases its Lease", name(*p)),
            Act::Relist(p) => format!("{}'s watcher relists to its share", name(*p)),
            Act::Release(p) => format!("{}'s watcher is let go", name(*p)),
            Act::Advance if self.in_flight() => "time passes, a request or answer on its way".to_owned(),
            Act::Advance => "time passes".to_owned(),
            Act::Crash(p) => format!("{} crashes", name(*p)),
            Act::Stop(p) => format!("{}.stop()", name(*p)),
            Act::StopWatcher(p) => format!("{}'s watcher.stop()", name(*p)),
            Act::Hold(p) => format!("{}'s watcher is held up", name(*p)),
            Act::Pause(p) => format!("{}'s lease thread pauses", name(*p)),
            Act::Delete(lease) => format!("the Lease {lease:?} is deleted"),
            Act::Start(i) => format!("{} starts", self.later[*i].as_ref().map_or("?", |s| s.name)),
        };
        format!("{:>8.3} s  {what}", self.t as f64 / 1e6)
    }

    fn apply(&mut self, act: Act) -> Checked {
        match act {
            Act::Tick(p) => {
                self.procs[p].epoch += 1;
                self.run(p, Input::Tick)?;
            }
            Act::Serve(i, outcome) => {
                match outcome {
                    Outcome::Answered => {}
                    Outcome::Failed => self.budget.fail -= 1,
                    Outcome::Lost => self.budget.lost -= 1,
                    Outcome::Refused => self.budget.conflict -= 1,
                }
                if let Some(a) = self.serve(i, outcome)? {
                    self.answers.push(a);
                }
            }
            Act::RoundTrip(i) => {
                if let Some(a) = self.serve(i, Outcome::Answered)? {
                    self.answers.push(a);
                    let n = self.answers.len() - 1;
                    self.deliver(n)?;
                }
            }
            Act::Deliver(i) => self.deliver(i)?,
            Act::Cut(p) => self.cut(p)?,
            Act::Drain(p) => self.drain(p)?,
            Act::Relist(p) => self.relist(p),
            Act::Release(p) => self.release(p),
            Act::Advance => {
                if self.in_flight() {
                    self.budget.delay -= 1;
                }
                if let Some(t) = self.next_time() {
                    self.t = t;
                }
            }
            Act::Crash(p) => {
                self.budget.crash -= 1;
                let proc = &mut self.procs[p];
                proc.alive = false;
                proc.thread = Thread::Ended;
                if let Some(m) = &mut proc.member {
                    // The process is gone, and its store with it.
                    m.store = Ranges::default();
                    m.listed = None;
                    m.registered = false;
                    m.hold = Hold::Free;
                }
            }
            Act::Stop(p) => {
                self.budget.stop -= 1;
                let t = self.t;
                let proc = &mut self.procs[p];
                proc.stop = true;
                // `Runner::stop`: the wait ends, a request in flight is cut.
                match proc.thread {
                    Thread::Wait(_) => proc.thread = Thread::Wait(t),
                    Thread::Busy { .. } => proc.thread = Thread::Busy { bound: t },
                    Thread::Draining(_) | Thread::Ended => {}
                }
            }
            Act::StopWatcher(p) => {
                self.budget.watcher -= 1;
                if let Some(m) = &mut self.procs[p].member {
                    // `watcher.stop()`: the follower's part of the store ends empty
                    // (`Writer::empty_at_end`), then it no longer counts.
                    m.store = Ranges::default();
                    m.listed = None;
                    m.registered = false;
                    m.hold = Hold::Free;
                }
                self.holdings_changed(p);
            }
            Act::Hold(p) => {
                self.budget.hold -= 1;
                if let Some(m) = &mut self.procs[p].member {
                    m.hold = Hold::Held;
                }
            }
            Act::Pause(p) => {
                self.budget.pause -= 1;
                self.procs[p].paused_until = self.t + self.timings.pause();
            }
            Act::Delete(lease) => {
                self.budget.delete -= 1;
                self.server.remove(&lease);
                self.deleted = true;
            }
            Act::Start(i) => {
                self.budget.start -= 1;
                if let Some(s) = self.later[i].take() {
                    self.spawn(&s);
                }
            }
        }
        self.tidy();
        self.check()
    }

    /// The invariants of every state (the module docs).
    fn check(&self) -> Checked {
        let mut leading: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (p, proc) in self.procs.iter().enumerate() {
            if proc.alive && !proc.stop && proc.cand.leading(self.local(p, self.t)) {
                leading.entry(&proc.lease).or_default().push(&proc.name);
            }
            if proc.alive && proc.cand.twin() {
                let others = self.writers.get(&proc.identity).is_some_and(|t| t.iter().any(|t| *t != proc.token));
                if !others {
                    return Err(format!(
                        "{} says a twin holds its Lease, but no other process with its identity wrote it",
                        proc.name
                    ));
                }
            }
        }
        if let Some((lease, who)) = leading.iter().find(|(_, who)| who.len() > 1) {
            return Err(format!("{who:?} all lead on Lease {lease:?}"));
        }
        // What readers see is the promise; the stores themselves are right too, but where a
        // watcher was held up (it keeps what it held, read as empty, until it relists).
        let free = |proc: &Proc| proc.member.as_ref().is_some_and(|m| m.hold == Hold::Free);
        for (p, a) in self.procs.iter().enumerate() {
            for (q, b) in self.procs.iter().enumerate().skip(p + 1) {
                if a.member.is_none() || a.group != b.group || !a.alive || !b.alive {
                    continue;
                }
                let seen = self.visible(p).intersect(&self.visible(q));
                if !seen.is_empty() {
                    let seen = seen.shard().map(|s| s.to_string()).unwrap_or_default();
                    return Err(format!("{} and {} both hold {seen}, as readers see them", a.name, b.name));
                }
                let both = self.holds(p).intersect(&self.holds(q));
                if free(a) && free(b) && !both.is_empty() {
                    let both = both.shard().map(|s| s.to_string()).unwrap_or_default();
                    return Err(format!("{} and {} both hold {both} in their stores", a.name, b.name));
                }
            }
        }
        Ok(())
    }

    /// Runs without faults (every request answered at once, every answer delivered, every
    /// watcher relisted, nobody paused) until `end` (true time).
    fn heal(&mut self, end: u64) -> Checked {
        self.unpause();
        self.let_go();
        for _ in 0..STEPS {
            if !self.heal_step(end, &mut None)? {
                return self.check();
            }
        }
        Err("the world never quiets down".into())
    }

    fn unpause(&mut self) {
        for proc in &mut self.procs {
            proc.paused_until = proc.paused_until.min(self.t);
        }
    }

    /// Whether a member's watcher is held up.
    fn held(&self) -> bool {
        self.procs.iter().any(|p| p.member.as_ref().is_some_and(|m| m.hold == Hold::Held))
    }

    /// Every held-up watcher is let go.
    fn let_go(&mut self) {
        for p in 0..self.procs.len() {
            if self.procs[p].member.as_ref().is_some_and(|m| m.hold == Hold::Held) {
                self.release(p);
            }
        }
    }

    /// One step of a world without faults: the first answer, the first request, anything
    /// due now; else time passes, up to `end`. False once `end` is reached with nothing due.
    /// Each action's label goes to `log`, if given.
    fn heal_step(&mut self, end: u64, log: &mut Option<Vec<String>>) -> Result<bool, String> {
        let acts = self.actions(false);
        let pick = acts
            .iter()
            .find(|a| matches!(a, Act::Deliver(_)))
            .or_else(|| acts.iter().find(|a| matches!(a, Act::Serve(_, Outcome::Answered))))
            .or_else(|| acts.iter().find(|a| !matches!(a, Act::Advance | Act::RoundTrip(_))));
        if let Some(act) = pick {
            if let Some(log) = log {
                log.push(self.label(act));
            }
            self.apply(act.clone())?;
            return Ok(true);
        }
        match self.next_time() {
            Some(t) if t <= end => {
                self.t = t;
                Ok(true)
            }
            _ => {
                self.t = self.t.max(end);
                Ok(false)
            }
        }
    }

    /// Liveness: once the faults stop, every Lease a running process wants has one leader
    /// within a lease duration and a retry period (on the slowest clock), and the stores of
    /// each group split the hash space within two lease durations and a retry period (from
    /// when the held-up watchers, if any, were let go: a lease duration and a retry period
    /// on). The world runs on without faults; each state it passes on the way is remembered in
    /// `memo` with the outcome (the run is deterministic), so that the next leaf whose run
    /// meets one of them stops there.
    fn liveness(&self, memo: &mut Memo) -> Checked {
        self.liveness_run(&mut Some(memo), &mut None).map_err(|e| {
            let mut log = Some(vec!["    (the faults stop)".to_owned()]);
            let _ = self.liveness_run(&mut None, &mut log);
            format!("{e}\n{}", log.unwrap_or_default().join("\n"))
        })
    }

    fn liveness_run(&self, memo: &mut Option<&mut Memo>, log: &mut Option<Vec<String>>) -> Checked {
        let mut w = self.clone();
        w.unpause();
        let start = w.t;
        // The slowest clock: true time for a local duration is longest there.
        let slowest = |local: u64| w.procs.iter().map(|p| (local * p.rate.1).div_ceil(p.rate.0)).max().unwrap_or(local);
        // A held-up watcher is let go a lease duration and a retry period on (by then another
        // member may have taken its share), and the stores split the space in two lease
        // durations and a retry period from then: the slowest way back is a member whose own
        // Lease was deleted, which waits a lease duration before it creates it again, and then
        // finds the others' Leases in versions it never saw, each live a lease duration in its
        // eyes. (With the 2/1.5/1 timings that is a lease duration and three retry periods.)
        let Timings { ld, rp, .. } = w.timings;
        let let_go = if w.held() { start + slowest(ld + rp) } else { start };
        let (lead_by, split_by) = (start + slowest(ld + rp), let_go + slowest(2 * ld + rp));
        let mut path = Vec::new();
        let outcome = (|| {
            for (phase, end) in [(1u8, lead_by), (3, let_go), (2, split_by)] {
                for step in 0.. {
                    if step == STEPS {
                        return Err("the world never quiets down".into());
                    }
                    if let Some(memo) = memo {
                        let key =
                            (fingerprint(&w, false), phase, lead_by.saturating_sub(w.t), split_by.saturating_sub(w.t));
                        if let Some(known) = memo.get(&key) {
                            return known.clone();
                        }
                        path.push(key);
                    }
                    if !w.heal_step(end, log).map_err(|e| format!("after the faults stopped: {e}"))? {
                        break;
                    }
                }
                match phase {
                    1 => w.leaders_once(start)?,
                    3 => w.let_go(),
                    _ => w.covered(let_go)?,
                }
            }
            Ok(())
        })();
        if let Some(memo) = memo {
            if memo.len() > 4_000_000 {
                memo.clear();
            }
            for key in path {
                memo.insert(key, outcome.clone());
            }
        }
        outcome
    }

    /// Every Lease a running process wants has exactly one leader now.
    fn leaders_once(&self, start: u64) -> Checked {
        let wanted: BTreeSet<&str> =
            self.procs.iter().filter(|p| p.alive && !p.stop).map(|p| p.lease.as_str()).collect();
        for lease in wanted {
            let leaders = self
                .procs
                .iter()
                .enumerate()
                .filter(|(q, p)| p.lease == lease && p.alive && !p.stop && p.cand.leading(self.local(*q, self.t)))
                .count();
            if leaders != 1 {
                return Err(format!(
                    "{leaders} leaders of Lease {lease:?} {:.3} s after the faults stopped",
                    (self.t - start) as f64 / 1e6
                ));
            }
        }
        Ok(())
    }

    /// The running members of each group hold the whole space between them now.
    fn covered(&self, start: u64) -> Checked {
        let groups: BTreeSet<&String> = self.procs.iter().filter_map(|p| p.group.as_ref()).collect();
        for group in groups {
            let members: Vec<usize> = (0..self.procs.len())
                .filter(|q| {
                    let p = &self.procs[*q];
                    p.group.as_ref() == Some(group) && p.alive && !p.stop
                })
                .collect();
            if members.is_empty() {
                continue;
            }
            let covered = members.iter().fold(Ranges::default(), |acc, q| acc.union(&self.visible(*q)));
            if covered != all() {
                return Err(format!(
                    "group {group:?}: the stores hold {:?} of the space {:.3} s after the faults stopped \
                     (and the watchers were let go)",
                    covered.shard().map(|s| s.fraction()),
                    (self.t - start) as f64 / 1e6
                ));
            }
        }
        Ok(())
    }
}

/// Outcomes of fault-free runs, by the state met on the way (its fingerprint, the phase, and
/// how far each deadline lay ahead).
type Memo = HashMap<(u64, u8, u64, u64), Checked>;

/// A state's fingerprint: 64 bits of everything that decides what may follow. Counters are
/// hashed by what they decide: an epoch by whether it is its process's current one, a
/// resourceVersion or uid by its rank among those in the state (equality is all that counts).
/// `budget`: whether the faults left count (a fault-free run does not look at them). Two
/// states with one fingerprint are taken for one (a wrong merge has about one chance in
/// 2^64 / states²: nil at these sizes).
fn fingerprint(w: &World, budget: bool) -> u64 {
    let mut h = Mix(0x9e37_79b9_7f4a_7c15);
    let World {
        base: _,
        t,
        procs,
        server,
        rv: _,
        uid: _,
        net,
        answers,
        budget: b,
        writes_only,
        later,
        deleted,
        writers,
        timings: _,
    } = w;
    // Every resourceVersion and uid the state holds, sorted: each is hashed as its rank.
    let mut versions: Vec<u64> = server.values().flat_map(|s| [s.rv, s.uid]).collect();
    versions.extend(procs.iter().filter_map(|p| p.read).flat_map(|(rv, uid)| [rv, uid]));
    versions.extend(net.iter().filter_map(|r| r.base).flat_map(|(rv, uid)| [rv, uid]));
    for a in answers {
        match &a.reply {
            Reply::Read(Some((_, rv, uid, _))) | Reply::Wrote(_, rv, uid, _) => versions.extend([*rv, *uid]),
            Reply::Read(None) | Reply::Failed { .. } | Reply::Listed(_) => {}
        }
    }
    versions.sort_unstable();
    versions.dedup();
    let rank = |v: u64| versions.partition_point(|x| *x < v);
    let pair = |p: Option<(u64, u64)>| p.map(|(rv, uid)| (rank(rv), rank(uid)));
    (t, writes_only, later, deleted, writers).hash(&mut h);
    if budget {
        b.hash(&mut h);
    }
    for (name, s) in server {
        let Stored { record, group, claim, rv, uid } = s;
        (name, record, group, claim, rank(*rv), rank(*uid)).hash(&mut h);
    }
    for p in procs {
        let Proc {
            name,
            identity,
            token,
            lease,
            group,
            rate,
            wall_offset,
            cand,
            alive,
            stop,
            done,
            release_by,
            paused_until,
            read,
            thread,
            epoch: _,
            last_report,
            member,
        } = p;
        (name, identity, token, lease, group, rate, wall_offset, cand, alive, stop, done).hash(&mut h);
        (release_by, paused_until, pair(*read), thread, last_report).hash(&mut h);
        member.is_some().hash(&mut h);
        if let Some(m) = member {
            let Member {
                written,
                pending,
                claim,
                allowed,
                until,
                peers,
                wrote,
                list_failed,
                holdings_news,
                look,
                store,
                registered,
                lead,
                listed,
                hold,
            } = m;
            (written, pending, claim, allowed, until, peers, wrote, list_failed, holdings_news).hash(&mut h);
            (look, store, registered, lead.standing(*listed), hold).hash(&mut h);
        }
    }
    for r in net {
        let Request { from, epoch, op, sent, base, group, claim } = r;
        (from, *epoch == procs[*from].epoch, op, sent, pair(*base), group, claim).hash(&mut h);
    }
    for a in answers {
        let Answer { to, epoch, reply } = a;
        (to, *epoch == procs[*to].epoch).hash(&mut h);
        match reply {
            Reply::Read(Some((record, rv, uid, group))) => (0u8, record, rank(*rv), rank(*uid), group).hash(&mut h),
            Reply::Wrote(record, rv, uid, sent) => (1u8, record, rank(*rv), rank(*uid), sent).hash(&mut h),
            other => (2u8, other).hash(&mut h),
        }
    }
    h.finish()
}

/// A fast hasher for fingerprints (std's SipHash costs most of an unoptimized test's time
/// here): a word at a time, multiply and rotate, and SplitMix64's finalizer at the end.
struct Mix(u64);

impl Mix {
    fn word(&mut self, w: u64) {
        self.0 = (self.0 ^ w).wrapping_mul(0x9fb2_1c65_1e98_df25).rotate_left(29);
    }
}

impl Hasher for Mix {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.word(u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
        }
        let mut last = [0u8; 8];
        last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        self.word(u64::from_le_bytes(last) ^ (bytes.len() as u64) << 56);
    }
    fn write_u64(&mut self, w: u64) {
        self.word(w);
    }
    fn write_u128(&mut self, w: u128) {
        self.word(w as u64);
        self.word((w >> 64) as u64);
    }
    fn write_usize(&mut self, w: usize) {
        self.word(w as u64);
    }
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// One scenario: who runs from the start (and has settled, unless `fresh`), who may start
/// later, and the faults it may inject.
struct Scenario {
    name: &'static str,
    procs: Vec<Spawn>,
    later: Vec<Spawn>,
    budget: Budget,
    writes_only: bool,
    /// Explore from the start instead of from the settled world.
    fresh: bool,
    timings: Timings,
    depth: u32,
}

impl Default for Scenario {
    /// What most scenarios share, so that each says only how it differs: no faults, every
    /// request may fail (not only writes), from the settled world, the short timings.
    fn default() -> Self {
        Scenario {
            name: "",
            procs: Vec::new(),
            later: Vec::new(),
            budget: Budget::default(),
            writes_only: false,
            fresh: false,
            timings: Timings::SHORT,
            depth: 0,
        }
    }
}

/// What a run explored.
#[derive(Debug)]
struct Explored {
    states: u64,
    depth: u32,
}

/// The depth-first search, each state once per depth left (a state seen with more depth
/// left is not explored again).
struct Search {
    seen: HashMap<u64, u32>,
    states: u64,
    trace: Vec<String>,
    memo: Memo,
}

impl Search {
    fn visit(&mut self, w: &World, left: u32) -> Result<(), String> {
        let fp = fingerprint(w, true);
        if self.seen.get(&fp).is_some_and(|l| *l >= left) {
            return Ok(());
        }
        self.seen.insert(fp, left);
        self.states += 1;
        let acts = w.actions(true);
        if left == 0 || acts.is_empty() || self.states == 1 {
            w.liveness(&mut self.memo)?;
        }
        if left == 0 {
            return Ok(());
        }
        for act in acts {
            let mut next = w.clone();
            self.trace.push(w.label(&act));
            next.apply(act)?;
            self.visit(&next, left - 1)?;
            self.trace.pop();
        }
        Ok(())
    }
}

/// The world a scenario starts from.
fn start(s: &Scenario) -> Result<World, String> {
    let mut w = World::new(&s.procs, &s.later, s.budget, s.timings);
    w.writes_only = s.writes_only;
    if !s.fresh {
        // Settled: everyone has started, read, and the leaders lead (the members hold their
        // shares).
        w.heal(s.timings.ld + 4 * s.timings.rp).map_err(|e| format!("{}: while settling: {e}", s.name))?;
    }
    Ok(w)
}

/// Explores `s` to its depth (plus `KUBE_WATCHER_EXPLORE_DEPTH`); on a violation, finds the
/// smallest depth that shows it and panics with that run's counterexample.
fn explore(s: &Scenario) -> Explored {
    let extra: i64 = std::env::var("KUBE_WATCHER_EXPLORE_DEPTH").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    let depth = u32::try_from((i64::from(s.depth) + extra).max(0)).unwrap_or(0);
    let w = start(s).unwrap_or_else(|e| panic!("{e}"));
    let run = |depth: u32| {
        let mut search = Search { seen: HashMap::new(), states: 0, trace: Vec::new(), memo: Memo::new() };
        let found = search.visit(&w, depth);
        (search, found)
    };
    let (search, found) = run(depth);
    let Err(_) = found else {
        let explored = Explored { states: search.states, depth };
        println!("{}: {} states to depth {}, no violation", s.name, explored.states, explored.depth);
        return explored;
    };
    // The shallowest depth that shows it.
    let (shallowest, search, why) = (0..=depth)
        .find_map(|d| match run(d) {
            (search, Err(why)) => Some((d, search, why)),
            _ => None,
        })
        .unwrap_or_else(|| unreachable!("depth {depth} found it"));
    let (why, after) = why.split_once('\n').unwrap_or((&why, ""));
    panic!(
        "{}: violation at depth {shallowest} ({} states explored): {why}\n{}\n{after}",
        s.name,
        search.states,
        search.trace.join("\n")
    );
}

/// Explores `s`, which must not find a violation, and checks that it explored more than
/// `at_least` states (its faults were possible).
fn explores(s: Scenario, at_least: u64) {
    let rates = s.procs.iter().chain(&s.later).map(|p| p.rate);
    assert!(s.timings.bounds(rates), "{}: clocks beyond lease duration / renew deadline", s.name);
    let explored = explore(&s);
    assert!(explored.states > at_least, "{}: {explored:?}", s.name);
}

fn elector(name: &'static str, identity: &'static str, rate: Rate) -> Spawn {
    Spawn { name, identity, group: None, lease: "lock", rate }
}

fn member(name: &'static str, group: &'static str, identity: &'static str) -> Spawn {
    Spawn { name, identity, group: Some(group), lease: "", rate: TRUE }
}

/// A leader, and a second process with its identity that starts at any moment (a twin, or a
/// restarted pod whose old process is not dead yet): they never both lead, and the second
/// never releases the first's Lease.
#[test]
fn twins_never_lead_together_nor_release_each_others_lease() {
    explores(
        Scenario {
            name: "twins",
            procs: vec![elector("x", "x", TRUE)],
            later: vec![elector("x'", "x", FAST)],
            budget: Budget { start: 1, stop: 1, crash: 1, pause: 1, fail: 1, lost: 1, delay: 1, ..Budget::default() },
            depth: 9,
            ..Scenario::default()
        },
        1000,
    );
}

/// A leader and a standby on a fast clock, with a deleted Lease, a crash and a restart under
/// the crashed identity, failing and lost writes, a pause and a stop.
#[test]
fn a_leader_and_a_standby_through_deletion_crash_restart_and_faults() {
    explores(
        Scenario {
            name: "leader and standby",
            procs: vec![elector("x", "x", TRUE), elector("y", "y", FAST)],
            later: vec![elector("x2", "x", TRUE)],
            budget: Budget {
                delete: 1,
                crash: 1,
                start: 1,
                stop: 1,
                pause: 1,
                fail: 1,
                lost: 1,
                conflict: 1,
                delay: 1,
                ..Budget::default()
            },
            depth: 8,
            ..Scenario::default()
        },
        1000,
    );
}

/// A lone leader whose writes are refused, again and again (reads work): it keeps knowing
/// its record as its own, and never says it has a twin.
#[test]
fn a_leader_whose_writes_keep_failing_keeps_its_record() {
    explores(
        Scenario {
            name: "refused writes",
            procs: vec![elector("x", "x", TRUE)],
            budget: Budget { fail: 12, ..Budget::default() },
            writes_only: true,
            depth: 44,
            ..Scenario::default()
        },
        100,
    );
}

/// The faults of the group scenarios: a watcher stopped, a watcher held up, a stop, a crash,
/// a deleted Lease, a failed, a lost and a delayed request.
fn group_faults() -> Budget {
    Budget { watcher: 1, hold: 1, stop: 1, crash: 1, delete: 1, fail: 1, lost: 1, delay: 1, ..Budget::default() }
}

/// Two members of a group, with their watchers, through a watcher stopped before its
/// member, a watcher held up, a stop, a crash, a deleted Lease, a failing and a lost write: no
/// point is ever in both stores as readers see them, and the space is covered again once the
/// faults stop.
#[test]
fn two_members_never_hold_a_point_twice() {
    explores(
        Scenario {
            name: "group",
            procs: vec![member("a", "g", "a"), member("b", "g", "b")],
            budget: group_faults(),
            depth: 6,
            ..Scenario::default()
        },
        1000,
    );
}

/// A member and a twin of it that starts at any moment, beside another member.
#[test]
fn a_members_twin_never_holds_its_share() {
    explores(
        Scenario {
            name: "group with a twin",
            procs: vec![member("a", "g", "a"), member("b", "g", "b")],
            later: vec![member("a'", "g", "a")],
            budget: Budget { start: 1, stop: 1, crash: 1, pause: 1, delay: 1, ..Budget::default() },
            depth: 6,
            ..Scenario::default()
        },
        1000,
    );
}

/// A member that stops with its watcher held up, beside a twin that starts at any moment:
/// the twin takes the released Lease, and with it the share, at once, while the held-up
/// watcher still holds it; no reader sees it in both stores (the stopped member's reads empty
/// from its stop).
#[test]
fn a_stopped_members_held_up_store_reads_empty_when_its_twin_takes_over() {
    explores(
        Scenario {
            name: "held up, stopped, and a twin",
            procs: vec![member("a", "g", "a"), member("b", "g", "b")],
            later: vec![member("a'", "g", "a")],
            budget: Budget { hold: 1, stop: 1, start: 1, delay: 1, ..Budget::default() },
            depth: 6,
            ..Scenario::default()
        },
        1000,
    );
}

/// With the library's default ratios (a renew deadline of four retry periods), a member that
/// stops with its watcher held up: its last lead outlasts its release and the released
/// claim, and the other member takes its share while the held-up store still holds it; no
/// reader sees it in both stores (the stopped member's reads empty from its stop).
#[test]
fn a_stopped_members_held_up_store_reads_empty_when_another_member_takes_over() {
    explores(
        Scenario {
            name: "held up and stopped, default ratios",
            procs: vec![member("a", "g", "a"), member("b", "g", "b")],
            budget: Budget { hold: 1, stop: 1, delay: 1, ..Budget::default() },
            timings: Timings::DEFAULT_LIKE,
            depth: 6,
            ..Scenario::default()
        },
        100,
    );
}

/// The group above, with the library's default ratios and a paused lease thread too (to a
/// shallower depth: each state costs more, the runs being longer).
#[test]
fn two_members_never_hold_a_point_twice_with_the_default_ratios() {
    explores(
        Scenario {
            name: "group, default ratios",
            procs: vec![member("a", "g", "a"), member("b", "g", "b")],
            budget: Budget { pause: 1, ..group_faults() },
            timings: Timings::DEFAULT_LIKE,
            depth: 4,
            ..Scenario::default()
        },
        100,
    );
}

/// Member `c` of group `a-b` and member `b-c` of group `a`, from their start: both groups'
/// spaces are covered (their Leases have names of their own).
#[test]
fn groups_whose_member_names_read_alike_both_hold_their_space() {
    explores(
        Scenario {
            name: "groups named alike",
            procs: vec![member("c", "a-b", "c"), member("b-c", "a", "b-c")],
            budget: Budget { stop: 1, ..Budget::default() },
            fresh: true,
            depth: 6,
            ..Scenario::default()
        },
        10,
    );
}

/// Clocks whose rates differ by more than the documented bound (lease duration / renew
/// deadline) are not safe: the explorer finds the two leaders. (Its checks bite.)
#[test]
fn clocks_beyond_the_documented_rate_bound_are_caught() {
    let s = Scenario {
        name: "clocks beyond the bound",
        procs: vec![elector("x", "x", TRUE), elector("y", "y", Rate(3, 2))],
        budget: Budget { fail: 2, delay: 1, ..Budget::default() },
        depth: 10,
        ..Scenario::default()
    };
    assert!(!s.timings.bounds(s.procs.iter().map(|p| p.rate)), "the clocks are within the bound");
    let found = std::panic::catch_unwind(|| explore(&s)).expect_err("two leaders");
    let text = found.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.contains("all lead on Lease \"lock\"") || text.contains("while x leads"), "{text}");
}
