//! The shard group's model test: members run the group's decisions ([`Peers`], [`decide`])
//! against a simulated API server, on a simulated clock, each with a simulated watcher that
//! follows its share as `Config::shard_group` does (it polls the share, drops it at the end of
//! the member's lead, and a relist takes time). Members join, stop cleanly, crash (no release:
//! their process and store are gone), pause (a frozen group thread that wakes up later, its
//! watcher still running), run their clocks at different offsets, and meet a server that delays
//! requests (past the retry period, sometimes past the renew deadline) or refuses a member's
//! writes. It checks, at every event of every seed:
//!
//! - no hash point is in two members' stores at once;
//! - once the trouble stops, every point is in exactly one live member's store within a lease
//!   duration, a few retry periods and a list;
//! - every stopped member's thread ends (its release is sent, or given up) within its bound.
//!
//! The member's rules mirror `group.rs` and `elector.rs`: a member's lead ends renew deadline
//! after it *sent* its last successful write; a read of the group follows each write; a new
//! claim is written at once; the watcher's store holds what it last listed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::handover::{Peers, Ranges, Record, decide};
use crate::shard::Shard;

const SEEDS: u64 = 40;
/// Lease duration, renew deadline, retry period (the defaults), in ms.
const LEASE: u64 = 15_000;
const RENEW: u64 = 10_000;
const RETRY: u64 = 2_000;
/// How often a watcher looks at its share while watching (`FOLLOW_POLL`).
const POLL: u64 = 500;
/// Trouble happens before this; the end check comes after.
const QUIET: u64 = 120_000;
const END: u64 = QUIET + LEASE + 4 * RETRY + 20_000;
/// How long a stopping member waits for its watcher to drop its share.
const RELEASE_WAIT: u64 = RETRY;

#[derive(Debug, Clone)]
enum Event {
    Tick { m: usize, epoch: u64 },
    WriteServe { m: usize, epoch: u64, claim: Ranges, release: bool, sent: u64 },
    WriteAnswer { m: usize, epoch: u64, ok: bool, claim: Ranges, release: bool, sent: u64 },
    ListServe { m: usize, epoch: u64 },
    ListAnswer { m: usize, epoch: u64, records: Vec<Record> },
    Poll { m: usize, epoch: u64 },
    RelistDone { m: usize, epoch: u64 },
    Join,
    Stop { m: usize },
    Crash { m: usize },
    Pause { m: usize, length: u64 },
    Refuse { m: usize, length: u64 },
}

#[derive(Debug)]
struct Member {
    name: String,
    /// Its monotonic clock: the simulated time plus this.
    offset: Duration,
    alive: bool,
    stopping: Option<u64>,
    done: bool,
    /// Bumped on crash and on stop: the group thread's events of an earlier epoch are dropped.
    epoch: u64,
    /// Bumped on crash only: the watcher's events (polls, relists) of an earlier one are
    /// dropped. A stop ends the group thread's work, not the watcher's relist in progress.
    watch_epoch: u64,
    paused_until: u64,
    refused_until: u64,
    /// When it sent its last successful write (simulated time).
    renewed: Option<u64>,
    written: Ranges,
    claim: Ranges,
    wrote: bool,
    peers: Peers,
    /// The share published to its watcher, and until when it is valid.
    allowed: Ranges,
    until: Option<u64>,
    /// The watcher: what its store holds, and the relist in progress (its target).
    store: Ranges,
    relisting: Option<Ranges>,
}

struct Lease {
    version: u64,
    holder: String,
    claim: Ranges,
    duration: Duration,
}

struct Sim {
    rng: SmallRng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
    events: Vec<Option<Event>>,
    members: Vec<Member>,
    server: std::collections::BTreeMap<String, Lease>,
    version: u64,
    base: Instant,
    points: Vec<u64>,
}

impl Sim {
    fn at(&mut self, t: u64, e: Event) {
        self.seq += 1;
        self.events.push(Some(e));
        self.queue.push(Reverse((t, self.seq, self.events.len() - 1)));
    }

    fn local(&self, m: usize, t: u64) -> Instant {
        self.base + self.members[m].offset + Duration::from_millis(t)
    }

    /// A request's way to the server or back: usually quick, sometimes slow, rarely past the
    /// renew deadline (only while there is trouble).
    fn delay(&mut self) -> u64 {
        let r: f64 = self.rng.random();
        if self.now < QUIET && r < 0.01 {
            self.rng.random_range(RETRY..RENEW + RETRY)
        } else if self.now < QUIET && r < 0.06 {
            self.rng.random_range(200..RETRY)
        } else {
            self.rng.random_range(1..50)
        }
    }

    fn renewed(&self, m: usize, t: u64) -> bool {
        self.members[m].renewed.is_some_and(|s| t < s + RENEW)
    }

    fn applied(&self, m: usize) -> Ranges {
        let mb = &self.members[m];
        mb.relisting.as_ref().map_or(mb.store.clone(), |r| r.union(&mb.store))
    }

    fn join(&mut self) {
        let m = self.members.len();
        let offset = Duration::from_millis(self.rng.random_range(0..3_600_000));
        self.members.push(Member {
            name: format!("m{m}"),
            offset,
            alive: true,
            stopping: None,
            done: false,
            epoch: 0,
            watch_epoch: 0,
            paused_until: 0,
            refused_until: 0,
            renewed: None,
            written: Ranges::default(),
            claim: Ranges::default(),
            wrote: false,
            peers: Peers::default(),
            allowed: Ranges::default(),
            until: None,
            store: Ranges::default(),
            relisting: None,
        });
        self.at(self.now, Event::Tick { m, epoch: 0 });
        self.at(self.now, Event::Poll { m, epoch: 0 });
    }

    /// The group thread writes its Lease (a renewal with its claim, or the release).
    fn write(&mut self, m: usize, release: bool) {
        let claim = if release { self.applied(m) } else { self.members[m].claim.clone() };
        let d = self.delay();
        let epoch = self.members[m].epoch;
        self.at(self.now + d, Event::WriteServe { m, epoch, claim, release, sent: self.now });
    }

    fn wait(&mut self, m: usize, until: u64) {
        let epoch = self.members[m].epoch;
        self.at(until.max(self.now), Event::Tick { m, epoch });
    }

    fn step(&mut self, e: Event) {
        let now = self.now;
        match e {
            Event::Join => self.join(),
            Event::Stop { m } => {
                if self.members[m].alive && self.members[m].stopping.is_none() {
                    let mb = &mut self.members[m];
                    mb.stopping = Some(now);
                    mb.allowed = Ranges::default();
                    mb.until = None;
                    mb.renewed = None;
                    mb.epoch += 1;
                    let epoch = mb.epoch;
                    self.at(now, Event::Tick { m, epoch });
                }
            }
            Event::Crash { m } => {
                let mb = &mut self.members[m];
                mb.alive = false;
                mb.epoch += 1;
                mb.watch_epoch += 1;
                mb.store = Ranges::default();
                mb.relisting = None;
            }
            Event::Pause { m, length } => self.members[m].paused_until = now + length,
            Event::Refuse { m, length } => self.members[m].refused_until = now + length,
            e => self.member_step(e),
        }
    }

    fn member_step(&mut self, e: Event) {
        let now = self.now;
        let (m, epoch) = match &e {
            Event::Tick { m, epoch }
            | Event::WriteServe { m, epoch, .. }
            | Event::WriteAnswer { m, epoch, .. }
            | Event::ListServe { m, epoch }
            | Event::ListAnswer { m, epoch, .. }
            | Event::Poll { m, epoch }
            | Event::RelistDone { m, epoch } => (*m, *epoch),
            _ => return,
        };
        let watcher = matches!(e, Event::Poll { .. } | Event::RelistDone { .. });
        let current = if watcher { self.members[m].watch_epoch } else { self.members[m].epoch };
        if !self.members[m].alive || epoch != current || (self.members[m].done && !watcher) {
            return;
        }
        // A frozen group thread takes its inputs when it wakes; the server and the watcher
        // go on.
        let thread = matches!(e, Event::Tick { .. } | Event::WriteAnswer { .. } | Event::ListAnswer { .. });
        if thread && now < self.members[m].paused_until {
            let t = self.members[m].paused_until;
            self.at(t, e);
            return;
        }
        match e {
            Event::Tick { .. } => match self.members[m].stopping {
                Some(since) if self.applied(m).is_empty() || now >= since + RELEASE_WAIT => self.write(m, true),
                Some(_) => self.wait(m, now + 20),
                None => self.write(m, false),
            },
            Event::WriteServe { claim, release, sent, .. } => {
                let ok = now >= self.members[m].refused_until && self.rng.random::<f64>() > 0.02;
                if ok {
                    self.version += 1;
                    let holder = if release { String::new() } else { self.members[m].name.clone() };
                    let duration = Duration::from_millis(if release { 1000 } else { LEASE });
                    let lease = Lease { version: self.version, holder, claim: claim.clone(), duration };
                    self.server.insert(self.members[m].name.clone(), lease);
                }
                let d = self.delay();
                self.at(now + d, Event::WriteAnswer { m, epoch, ok, claim, release, sent });
            }
            Event::WriteAnswer { ok, claim, release, sent, .. } => {
                if release {
                    self.members[m].done = true;
                    return;
                }
                if ok {
                    let mb = &mut self.members[m];
                    mb.written = claim;
                    mb.wrote = true;
                    if mb.renewed.is_none_or(|r| r < sent) {
                        mb.renewed = Some(sent);
                    }
                }
                if self.renewed(m, now) {
                    let d = self.delay();
                    self.at(now + d, Event::ListServe { m, epoch });
                } else {
                    self.publish(m, Ranges::default(), None);
                    self.wait(m, now + RETRY);
                }
            }
            Event::ListServe { .. } => {
                let records = self
                    .server
                    .iter()
                    .map(|(name, l)| Record {
                        name: name.clone(),
                        version: l.version.to_string(),
                        holder: l.holder.clone(),
                        duration: l.duration,
                        claim: l.claim.clone(),
                    })
                    .collect();
                let d = self.delay();
                self.at(now + d, Event::ListAnswer { m, epoch, records });
            }
            Event::ListAnswer { records, .. } => {
                if !self.renewed(m, now) {
                    self.publish(m, Ranges::default(), None);
                    self.wait(m, now + RETRY);
                    return;
                }
                let local = self.local(m, now);
                let held = self.applied(m);
                let mb = &mut self.members[m];
                mb.peers.observe(records, local);
                let live = mb.peers.live(&mb.name, local);
                let blocked = mb.peers.released_claims(local);
                let d = decide(&mb.name, &live, &blocked, &mb.written, &held, true);
                mb.claim = d.claim;
                let until = mb.renewed.map(|r| r + RENEW);
                let mut wake = now + RETRY;
                if mb.claim != mb.written && mb.wrote {
                    mb.wrote = false;
                    wake = now;
                }
                if let Some(e) = mb.peers.next_expiry(&mb.name, local) {
                    let offset = u64::try_from((e - self.base - mb.offset).as_millis()).unwrap_or(u64::MAX);
                    wake = wake.min(offset);
                }
                self.publish(m, d.allowed, until);
                self.wait(m, wake);
            }
            Event::Poll { .. } => {
                let mb = &self.members[m];
                let share = if mb.until.is_some_and(|u| now < u) { mb.allowed.clone() } else { Ranges::default() };
                if mb.relisting.is_none() && share != mb.store {
                    let took =
                        if share.is_empty() { self.rng.random_range(0..50) } else { self.rng.random_range(50..1500) };
                    self.members[m].relisting = Some(share);
                    self.at(now + took, Event::RelistDone { m, epoch });
                }
                self.at(now + POLL, Event::Poll { m, epoch });
            }
            Event::RelistDone { .. } => {
                let mb = &mut self.members[m];
                if let Some(target) = mb.relisting.take() {
                    mb.store = target;
                }
            }
            _ => {}
        }
    }

    fn publish(&mut self, m: usize, allowed: Ranges, until: Option<u64>) {
        let mb = &mut self.members[m];
        if mb.stopping.is_some() {
            return;
        }
        mb.allowed = allowed;
        mb.until = until;
    }

    /// No point in two stores.
    fn check(&self, seed: u64) {
        for &p in &self.points {
            let holders: Vec<&str> =
                self.members.iter().filter(|mb| mb.alive && mb.store.contains(p)).map(|mb| mb.name.as_str()).collect();
            assert!(holders.len() <= 1, "seed {seed} at {} ms: point {p:#x} in the stores of {holders:?}", self.now);
        }
    }
}

fn run(seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut points: Vec<u64> = (0..256).map(|_| rng.random()).collect();
    points.extend([0, u64::MAX]);
    let mut sim = Sim {
        rng,
        now: 0,
        seq: 0,
        queue: BinaryHeap::new(),
        events: Vec::new(),
        members: Vec::new(),
        server: Default::default(),
        version: 0,
        base: Instant::now(),
        points,
    };
    let first = sim.rng.random_range(1..=4);
    for _ in 0..first {
        sim.at(0, Event::Join);
    }
    // Trouble: joins, stops, crashes, pauses and refusals before QUIET; member 0 only pauses.
    for _ in 0..sim.rng.random_range(2..6) {
        let t = sim.rng.random_range(0..QUIET);
        sim.at(t, Event::Join);
    }
    for _ in 0..sim.rng.random_range(2..8) {
        let t = sim.rng.random_range(0..QUIET - RENEW);
        let m = sim.rng.random_range(0..first + 2);
        let e = match sim.rng.random_range(0..4) {
            0 if m > 0 => Event::Stop { m },
            1 if m > 0 => Event::Crash { m },
            2 => Event::Pause { m, length: sim.rng.random_range(RETRY..3 * LEASE) },
            _ => Event::Refuse { m, length: sim.rng.random_range(RETRY..2 * LEASE) },
        };
        sim.at(t, e);
    }
    while let Some(Reverse((t, _, i))) = sim.queue.pop() {
        if t > END {
            break;
        }
        sim.now = t;
        let Some(e) = sim.events[i].take() else { continue };
        if let Event::Stop { m } | Event::Crash { m } | Event::Pause { m, .. } | Event::Refuse { m, .. } = e
            && m >= sim.members.len()
        {
            continue;
        }
        sim.step(e);
        sim.check(seed);
    }
    // Settled: every point in exactly one store of a live, running member.
    for &p in &sim.points {
        let n = sim.members.iter().filter(|mb| mb.alive && mb.stopping.is_none() && mb.store.contains(p)).count();
        assert_eq!(n, 1, "seed {seed}: point {p:#x} in {n} stores after the group settled");
    }
    // Every stopped member's thread ended within its bound (its release wait and two trips).
    for mb in &sim.members {
        if let Some(since) = mb.stopping
            && mb.alive
            && since + RELEASE_WAIT + 2 * (RENEW + RETRY) < END
        {
            assert!(mb.done, "seed {seed}: {} did not end after stop", mb.name);
        }
    }
}

#[test]
fn shard_groups_never_hold_a_point_twice_and_cover_everything_once_settled() {
    for seed in 0..SEEDS {
        run(seed);
    }
}

/// The sample points really are spread: a shard of half the space holds about half of them.
#[test]
fn sample_points_spread() {
    let mut rng = SmallRng::seed_from_u64(1);
    let half = Ranges::of(Some(&Shard::of(0, 2).unwrap()));
    let n = (0..256).filter(|_| half.contains(rng.random())).count();
    assert!((80..176).contains(&n), "{n}");
}
