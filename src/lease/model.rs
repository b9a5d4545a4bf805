//! The model test: replicas run [`Candidate::step`] against a simulated API server, on a
//! simulated clock, through joins, clean stops, crashes (no release), pauses (a frozen thread
//! that wakes up later), clocks at different offsets, and a server that delays requests past
//! the retry period or refuses them. It checks, at every event of every seed:
//!
//! - at most one replica leads at any instant, as each replica's own view says
//!   ([`Candidate::leading`], what `LeaderElector::is_leader` computes);
//! - each replica's reports alternate, starting with `Acquired`;
//! - once the trouble stops, exactly one live replica leads within a lease duration and a few
//!   retry periods;
//! - after a stop, every replica's loop ends (`Action::Done`, or its release bound), and
//!   so the threads of `elector.rs` end.
//!
//! The shell's own rules are mirrored: a stop is injected after the step in progress, a
//! request in flight when stopping is cut, and every request is bounded by the end of the lead
//! (or the renew deadline, or the release bound), as `Worker::bound` does.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::decide::{Action, Candidate, Input, Now, Record};
use super::{Leadership, LeaseTimings};

/// Seeds run in CI: each simulates about 12 minutes of three to six replicas.
const SEEDS: u64 = 60;

/// Simulated time, in microseconds since the start.
type Micros = u64;

fn micros(d: Duration) -> Micros {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A request on its way.
#[derive(Debug, Clone)]
enum Request {
    Read,
    Create(Record),
    /// The record, and the resourceVersion of the lease the replica last saw.
    Update(Record, Option<u64>),
}

#[derive(Debug)]
enum Event {
    /// An input reaches replica `r`, unless its `epoch` moved on (a cut request, a stop).
    Deliver {
        r: usize,
        epoch: u64,
        input: Input,
        rv: Option<u64>,
    },
    /// The server handles a request of replica `r`, sent at `sent` (its monotonic clock).
    Serve {
        r: usize,
        epoch: u64,
        request: Request,
        sent: Instant,
        back: Micros,
    },
    /// The request of replica `r` in flight times out.
    Timeout {
        r: usize,
        epoch: u64,
    },
    Stop {
        r: usize,
    },
    Crash {
        r: usize,
    },
    Pause {
        r: usize,
        length: Micros,
    },
    Join,
}

struct Replica {
    candidate: Candidate,
    /// Its monotonic clock reads `base + t`.
    base: Instant,
    /// Its wall clock runs this far from true time.
    wall_offset: SignedDuration,
    /// The resourceVersion of the lease it last read or wrote.
    rv: Option<u64>,
    epoch: u64,
    in_flight: bool,
    crashed: bool,
    stop_requested: bool,
    release_by: Option<Micros>,
    done: bool,
    paused_until: Micros,
    last_report: Option<Leadership>,
}

struct World {
    rng: SmallRng,
    timings: LeaseTimings,
    t: Micros,
    seq: u64,
    queue: BinaryHeap<Reverse<(Micros, u64, usize)>>,
    events: Vec<Option<Event>>,
    replicas: Vec<Replica>,
    /// The lease on the server and its resourceVersion.
    lease: Option<(Record, u64)>,
    revision: u64,
    /// Trouble: refusals, long delays, pauses.
    chaos: bool,
    refused: u64,
    conflicts: u64,
    takeovers: u64,
}

impl World {
    fn new(seed: u64, timings: LeaseTimings) -> World {
        World {
            rng: SmallRng::seed_from_u64(seed),
            timings,
            t: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: Vec::new(),
            replicas: Vec::new(),
            lease: None,
            revision: 0,
            chaos: true,
            refused: 0,
            conflicts: 0,
            takeovers: 0,
        }
    }

    fn at(&mut self, when: Micros, event: Event) {
        self.seq += 1;
        self.events.push(Some(event));
        self.queue.push(Reverse((when, self.seq, self.events.len() - 1)));
    }

    fn now(&self, r: usize) -> Now {
        let replica = &self.replicas[r];
        let elapsed = Duration::from_micros(self.t);
        let wall = Timestamp::UNIX_EPOCH
            .checked_add(SignedDuration::from_secs(1_800_000_000))
            .and_then(|w| w.checked_add(elapsed))
            .and_then(|w| w.checked_add(replica.wall_offset))
            .unwrap();
        Now { mono: replica.base + elapsed, wall }
    }

    fn join(&mut self) {
        let identity = format!("replica-{}", self.replicas.len());
        // Monotonic clocks start anywhere (boot times differ); wall clocks disagree by up to
        // an hour either way.
        let base = Instant::now() + Duration::from_secs(self.rng.random_range(0..3600));
        let wall_offset = SignedDuration::from_secs(self.rng.random_range(-3600..=3600));
        self.replicas.push(Replica {
            candidate: Candidate::new(&identity, &format!("token-{}", self.replicas.len()), self.timings),
            base,
            wall_offset,
            rv: None,
            epoch: 0,
            in_flight: false,
            crashed: false,
            stop_requested: false,
            release_by: None,
            done: false,
            paused_until: 0,
            last_report: None,
        });
        let r = self.replicas.len() - 1;
        self.at(self.t, Event::Deliver { r, epoch: 0, input: Input::Tick, rv: None });
    }

    fn run_until(&mut self, end: Micros) {
        while let Some(Reverse((when, _, i))) = self.queue.peek().copied() {
            if when > end {
                break;
            }
            self.queue.pop();
            self.t = when;
            let Some(event) = self.events[i].take() else { continue };
            self.handle(event);
            self.check_one_leader();
        }
        self.t = self.t.max(end);
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Deliver { r, epoch, input, rv } => {
                let replica = &self.replicas[r];
                if replica.crashed || replica.done || replica.epoch != epoch {
                    return;
                }
                if replica.paused_until > self.t {
                    // A frozen thread: it takes this in when it wakes up.
                    let when = replica.paused_until;
                    self.at(when, Event::Deliver { r, epoch, input, rv });
                    return;
                }
                self.deliver(r, input, rv);
            }
            Event::Serve { r, epoch, request, sent, back } => {
                let (input, rv) = self.serve(request, sent);
                self.at(self.t + back, Event::Deliver { r, epoch, input, rv });
            }
            Event::Timeout { r, epoch } => {
                if self.replicas[r].epoch == epoch && self.replicas[r].in_flight {
                    self.at(self.t, Event::Deliver { r, epoch, input: Input::Failed { conflict: false }, rv: None });
                }
            }
            Event::Stop { r } => {
                let replica = &mut self.replicas[r];
                if replica.crashed || replica.stop_requested || replica.done {
                    return;
                }
                // `stop()`: the owner's view ends now; a request in flight is cut, a wait
                // ends; the thread goes on (it may be frozen) to release.
                replica.stop_requested = true;
                replica.epoch += 1;
                let input = if replica.in_flight { Input::Failed { conflict: false } } else { Input::Tick };
                let epoch = replica.epoch;
                self.at(self.t, Event::Deliver { r, epoch, input, rv: None });
            }
            Event::Crash { r } => {
                let replica = &mut self.replicas[r];
                replica.crashed = true;
                replica.epoch += 1;
            }
            Event::Pause { r, length } => {
                let replica = &mut self.replicas[r];
                replica.paused_until = replica.paused_until.max(self.t + length);
            }
            Event::Join => self.join(),
        }
    }

    /// One turn of the elector's loop (`Worker::run`): step, inject a stop, perform.
    fn deliver(&mut self, r: usize, input: Input, rv: Option<u64>) {
        let now = self.now(r);
        let t = self.t;
        let timings = self.timings;
        let replica = &mut self.replicas[r];
        replica.in_flight = false;
        replica.epoch += 1;
        if matches!(input, Input::Read(_) | Input::Wrote { .. }) {
            replica.rv = rv;
        }
        let step = replica.candidate.step(input, now);
        let mut reports = vec![step.report];
        let mut action = step.action;
        if replica.stop_requested && !replica.candidate.stopping() {
            replica.release_by = Some(t + micros(timings.retry_period.min(Duration::from_secs(5))));
            let step = replica.candidate.step(Input::Stop, now);
            reports.push(step.report);
            action = step.action;
        }
        for report in reports.into_iter().flatten() {
            let expected = match replica.last_report {
                None | Some(Leadership::Lost) => Leadership::Acquired,
                Some(Leadership::Acquired) => Leadership::Lost,
            };
            assert_eq!(report, expected, "replica {r} at {t} µs: reports must alternate");
            replica.last_report = Some(report);
        }
        if replica.release_by.is_some_and(|by| t >= by) {
            replica.done = true;
            return;
        }
        let epoch = replica.epoch;
        let request = match action {
            Action::Done => {
                replica.done = true;
                return;
            }
            Action::Wait(until) => {
                let when = micros(until.saturating_duration_since(replica.base));
                assert!(when >= t, "a wait into the past");
                assert!(when - t <= micros(timings.retry_period), "an idle wait beyond the retry period");
                self.at(when, Event::Deliver { r, epoch, input: Input::Tick, rv: None });
                return;
            }
            Action::Read => Request::Read,
            Action::Create(spec) => Request::Create(spec),
            Action::Update(spec) => Request::Update(spec, replica.rv),
        };
        // The request's bound, as `Worker::bound` computes it.
        let end = replica
            .release_by
            .map(|by| by.saturating_sub(t))
            .or_else(|| replica.candidate.leading_until().and_then(|u| u.checked_duration_since(now.mono)).map(micros))
            .unwrap_or(micros(timings.renew_deadline))
            .max(1_000);
        replica.in_flight = true;
        let sent = now.mono;
        let (there, back) = self.latency();
        self.at(t + there, Event::Serve { r, epoch, request, sent, back });
        self.at(t + end, Event::Timeout { r, epoch });
    }

    /// How long a request takes to reach the server and its answer to come back: usually
    /// milliseconds; with trouble, up to 3 s each way (longer than the retry period).
    fn latency(&mut self) -> (Micros, Micros) {
        let slow = self.chaos && self.rng.random_bool(0.1);
        let max = if slow { 3_000_000 } else { 20_000 };
        (self.rng.random_range(100..max), self.rng.random_range(100..max))
    }

    fn serve(&mut self, request: Request, sent: Instant) -> (Input, Option<u64>) {
        if self.chaos && self.rng.random_bool(0.15) {
            self.refused += 1;
            return (Input::Failed { conflict: false }, None);
        }
        match request {
            Request::Read => {
                (Input::Read(self.lease.as_ref().map(|(s, _)| s.clone())), self.lease.as_ref().map(|l| l.1))
            }
            Request::Create(spec) => {
                if self.lease.is_some() {
                    self.conflicts += 1;
                    return (Input::Failed { conflict: true }, None);
                }
                self.store(spec, sent)
            }
            Request::Update(spec, rv) => match &self.lease {
                None => (Input::Failed { conflict: false }, None),
                Some((_, current)) if rv != Some(*current) => {
                    self.conflicts += 1;
                    (Input::Failed { conflict: true }, None)
                }
                Some((old, _)) => {
                    if old.spec.holder_identity != spec.spec.holder_identity {
                        self.takeovers += 1;
                    }
                    self.store(spec, sent)
                }
            },
        }
    }

    fn store(&mut self, record: Record, sent: Instant) -> (Input, Option<u64>) {
        self.revision += 1;
        self.lease = Some((record.clone(), self.revision));
        (Input::Wrote { record, sent }, Some(self.revision))
    }

    fn leaders(&self) -> Vec<usize> {
        (0..self.replicas.len())
            .filter(|&r| {
                let replica = &self.replicas[r];
                !replica.crashed && !replica.stop_requested && replica.candidate.leading(self.now(r).mono)
            })
            .collect()
    }

    fn check_one_leader(&self) {
        let leaders = self.leaders();
        assert!(leaders.len() <= 1, "at {} µs, replicas {leaders:?} all lead", self.t);
    }

    fn live(&self) -> Vec<usize> {
        (0..self.replicas.len()).filter(|&r| !self.replicas[r].crashed && !self.replicas[r].stop_requested).collect()
    }
}

fn simulate(seed: u64) -> World {
    let timings = LeaseTimings::default();
    let mut world = World::new(seed, timings);
    let initial = world.rng.random_range(2..=4);
    for _ in 0..initial {
        world.join();
    }
    // Ten minutes of trouble: every few seconds someone joins, stops, crashes or freezes.
    let trouble_end: Micros = 600_000_000;
    let mut t = 0;
    while t < trouble_end {
        t += world.rng.random_range(1_000_000..20_000_000);
        let n = world.replicas.len();
        let r = world.rng.random_range(0..n);
        let event = match world.rng.random_range(0..10) {
            0..=1 if n < 8 => Event::Join,
            2 => Event::Stop { r },
            3 => Event::Crash { r },
            _ => Event::Pause { r, length: world.rng.random_range(100_000..40_000_000) },
        };
        world.at(t, event);
    }
    world.run_until(trouble_end);
    // The trouble ends; frozen threads wake; a lone survivor is joined by a fresh replica.
    world.chaos = false;
    let t = world.t;
    for replica in &mut world.replicas {
        replica.paused_until = replica.paused_until.min(t);
    }
    if world.live().is_empty() {
        world.join();
    }
    let settle = micros(timings.lease_duration + timings.renew_deadline + 5 * timings.retry_period);
    world.run_until(t + settle);
    let leaders = world.leaders();
    assert_eq!(leaders.len(), 1, "seed {seed}: once settled, one of {:?} leads", world.live());
    // Everyone stops; every loop ends, nothing stays scheduled, and the lease is released.
    for r in world.live() {
        world.at(world.t, Event::Stop { r });
    }
    let t = world.t;
    world.run_until(t + 60_000_000);
    for (r, replica) in world.replicas.iter().enumerate() {
        assert!(replica.crashed || replica.done, "seed {seed}: replica {r} did not end after stop");
    }
    let holder = world.lease.as_ref().and_then(|(r, _)| r.spec.holder_identity.clone()).unwrap_or_default();
    assert_eq!(holder, "", "seed {seed}: the last leader released the lease");
    world
}

#[test]
fn at_most_one_replica_leads_through_joins_stops_crashes_pauses_and_a_faulty_server() {
    let (mut refused, mut conflicts, mut takeovers) = (0, 0, 0);
    for seed in 0..SEEDS {
        let world = simulate(seed);
        refused += world.refused;
        conflicts += world.conflicts;
        takeovers += world.takeovers;
    }
    // The model exercised what it claims to: refusals, 409s, and many changes of holder.
    assert!(refused > 100 && conflicts > 10 && takeovers > SEEDS, "{refused} {conflicts} {takeovers}");
}

/// The same world with a server that never misbehaves and nobody paused: a stop hands over
/// within one retry period (plus the request's own time), and a crash within lease duration
/// plus one retry period, every time.
#[test]
fn takeover_times_meet_their_targets_on_a_healthy_server() {
    for seed in 0..20 {
        let timings = LeaseTimings::default();
        let mut world = World::new(seed, timings);
        world.chaos = false;
        world.join();
        world.join();
        world.run_until(5_000_000);
        let [leader] = world.leaders()[..] else { panic!("seed {seed}: {:?}", world.leaders()) };
        let crash = seed % 2 == 0;
        let t0 = world.t;
        world.at(t0, if crash { Event::Crash { r: leader } } else { Event::Stop { r: leader } });
        let mut taken = None;
        while taken.is_none() && world.t < t0 + 60_000_000 {
            let next = world.t + 1_000;
            world.run_until(next);
            if world.leaders().len() == 1 {
                taken = Some(world.t - t0);
            }
        }
        let taken = Duration::from_micros(taken.expect("a takeover"));
        let bound = if crash { timings.lease_duration + timings.retry_period } else { timings.retry_period };
        // Each request takes up to 40 ms here; a takeover is a read then a write.
        assert!(taken <= bound + Duration::from_millis(100), "seed {seed}: crash {crash}: {taken:?} > {bound:?}");
    }
}
