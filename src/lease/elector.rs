//! [`LeaderElector`]: the handle users hold, and the one thread that performs
//! [`Candidate::step`]'s actions over HTTP, waits between them, and publishes leadership.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, after, select};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use parking_lot::{Condvar, Mutex};

use super::decide::{Action, Candidate, Input, Now, Record};
use super::{Leadership, LeaseTimings};
use crate::error::{Error, Result};
use crate::wire::api::Api;
use crate::wire::http::{Http, Interrupt};

/// The longest a stopping elector spends releasing its lease (at most one retry period).
const RELEASE_BOUND: Duration = Duration::from_secs(5);

/// One replica's part in electing a leader over a `Lease` (coordination.k8s.io/v1), with the
/// semantics of client-go's leader election: at most one replica leads at any instant, in its
/// own view, and a replica that stops or dies lets another take over.
///
/// A background thread (`kw-lease`) reads the lease every retry period while another replica
/// holds it, takes it when it is free or has not changed for its lease duration (judged on this
/// process's monotonic clock, so clock skew between machines does not matter), and, once
/// leading, renews it every retry period. Every write carries the resourceVersion it read, so
/// of two replicas racing for the lease one wins and the other is refused.
///
/// Leadership is [`is_leader`](Self::is_leader) (computed at the call, so it turns false at the
/// renew deadline even if the thread is stuck), [`changes`](Self::changes) (a channel for
/// `select!`) and [`wait_until_leader`](Self::wait_until_leader). A leader that cannot renew
/// within the renew deadline reports [`Leadership::Lost`] before any other replica can take the
/// lease: stop acting as the leader when you receive it. Leases give no fencing: a leader
/// that keeps acting after `Lost` (or while its process is frozen) is not stopped by them.
///
/// [`stop`](Self::stop) (also on drop) releases the lease, as client-go's `ReleaseOnCancel`
/// does, so a standby takes over at its next read, within one retry period.
///
/// Whose record the lease holds is told exactly: every write of this process carries its mark
/// (a random token drawn at start, and the `renewTime` written, in the annotation
/// `kube-watcher.io/incarnation`). A record naming this replica's identity without its mark
/// was written by another process (two processes given one identity, a restarted pod whose
/// old process is not dead yet): it is another holder's, waited out for its whole lease
/// duration like any, and never released by this one. A lease deleted while another held it
/// is created again only once it has stayed missing for a lease duration (its holder may lead
/// until its renew deadline, unaware). docs/protocol.md §13.5 has the invariants and why.
///
/// # Examples
/// ```
/// # let server = kube_watcher::testing::FakeApiServer::start();
/// use std::time::Duration;
/// use k8s_openapi::api::coordination::v1::Lease;
/// use kube_watcher::{Api, Client, LeaderElector, LeaseTimings, Leadership};
///
/// let leases: Api<Lease> = Api::namespaced(Client::from_url(&server.url())?, "default");
/// let elector = LeaderElector::start(leases, "my-controller", "replica-1", LeaseTimings::default())?;
/// if elector.wait_until_leader(Duration::from_secs(30)) {
///     // Lead, until `changes()` says `Lost`.
///     assert_eq!(elector.changes().recv_timeout(Duration::from_secs(5)), Ok(Leadership::Acquired));
/// }
/// elector.stop(); // releases the lease
/// # Ok::<(), kube_watcher::Error>(())
/// ```
#[must_use = "dropping a LeaderElector stops it and releases the lease"]
pub struct LeaderElector {
    runner: Runner,
    name: String,
    identity: String,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("lease", &self.name)
            .field("identity", &self.identity)
            .field("leader", &self.is_leader())
            .finish_non_exhaustive()
    }
}

/// The thread of an elector or a shard group, as its handle holds it.
pub(crate) struct Runner {
    pub(crate) shared: Arc<Shared>,
    changes: Receiver<Leadership>,
    /// Dropped by `stop`: wakes the thread's wait.
    stop_tx: Mutex<Option<Sender<()>>>,
    /// Cuts the request in flight, if any, when stopping.
    interrupt: Interrupt,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Runner {
    /// Starts the thread `thread` holding the Lease `name` as `identity`; checked by the
    /// caller. `hook`: what a shard group adds.
    pub(crate) fn start(
        api: Api<Lease>,
        name: &str,
        identity: &str,
        timings: LeaseTimings,
        hook: Option<Box<dyn Hook>>,
        thread: &str,
    ) -> Result<Runner> {
        let http = api.http();
        let interrupt = http.interrupt();
        let shared = Arc::new(Shared {
            leading_until: Mutex::new(None),
            changed: Condvar::new(),
            stopping: AtomicBool::new(false),
        });
        let (changes_tx, changes) = crossbeam_channel::unbounded();
        let (stop_tx, stop_rx) = crossbeam_channel::bounded(0);
        let worker = Worker {
            api,
            http,
            hook,
            name: name.to_owned(),
            lease: None,
            candidate: Candidate::new(identity, &super::incarnation(), timings),
            shared: Arc::clone(&shared),
            changes: changes_tx,
            stop: stop_rx,
            timings,
            told: false,
            refused: None,
        };
        let handle = std::thread::Builder::new()
            .name(thread.to_owned())
            .spawn(move || worker.run())
            .map_err(|e| Error::Spawn(format!("lease {name:?}: {e}").into()))?;
        Ok(Runner { shared, changes, stop_tx: Mutex::new(Some(stop_tx)), interrupt, thread: Mutex::new(Some(handle)) })
    }

    /// Stops the thread, which releases the lease; blocks until it ended. Idempotent.
    pub(crate) fn stop(&self) {
        {
            // Under the lock the thread publishes under, so that it cannot publish a lead after
            // this point.
            let mut until = self.shared.leading_until.lock();
            self.shared.stopping.store(true, Ordering::SeqCst);
            *until = None;
        }
        self.shared.changed.notify_all();
        self.stop_tx.lock().take();
        self.interrupt.interrupt();
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
    }
}

/// What the thread and the handle share.
pub(crate) struct Shared {
    /// Until when this replica leads, in its own view (`None`: it does not); the thread sets
    /// it after every decision, `stop` clears it.
    leading_until: Mutex<Option<Instant>>,
    /// Notified whenever `leading_until` changes.
    changed: Condvar,
    stopping: AtomicBool,
}

impl Shared {
    pub(crate) fn leader_at(&self, now: Instant) -> bool {
        self.leading_until.lock().is_some_and(|until| now < until)
    }
}

impl LeaderElector {
    /// Starts electing a leader over the Lease `name` in `api`'s namespace, as `identity`
    /// (unique per replica: a pod name, or a host name plus a random suffix).
    ///
    /// Returns at once; the thread reads (or creates) the lease right away, so a lone replica
    /// leads after one or two requests. The lease is created if missing.
    ///
    /// # Errors
    /// [`Error::Config`] when `timings` break client-go's rules (see [`LeaseTimings`]), `name`
    /// cannot name a Lease (an RFC 1123 subdomain: lower-case letters, digits, '-' and '.', at
    /// most 253 characters, as the API server requires), `identity` is empty, or `api` has no
    /// namespace; [`Error::Spawn`] when the thread
    /// cannot start. Errors from the server do not end the elector: it retries every retry
    /// period (and logs them at debug level).
    pub fn start(api: Api<Lease>, name: &str, identity: &str, timings: LeaseTimings) -> Result<LeaderElector> {
        timings.validate()?;
        super::check_name("name", name, 253)?;
        if identity.is_empty() {
            return Err(Error::config("identity", "must not be empty (an empty holder means a released lease)"));
        }
        if api.namespace().is_none() {
            return Err(Error::config("api", "leases are namespaced: use Api::namespaced"));
        }
        let runner = Runner::start(api, name, identity, timings, None, "kw-lease")?;
        Ok(LeaderElector { runner, name: name.to_owned(), identity: identity.to_owned() })
    }

    /// Whether this replica leads now, in its own view. Never blocks (beyond a short lock).
    ///
    /// Computed at the call from the time of the last successful renewal, so it turns false
    /// at the renew deadline even when the elector's thread is stuck or paused.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.runner.shared.leader_at(Instant::now())
    }

    /// Blocks until this replica leads or `timeout` passes; true when it leads.
    #[must_use]
    pub fn wait_until_leader(&self, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let shared = &self.runner.shared;
        let mut until = shared.leading_until.lock();
        loop {
            let now = Instant::now();
            if until.is_some_and(|u| now < u) {
                return true;
            }
            if shared.stopping.load(Ordering::Relaxed) || deadline.is_some_and(|d| now >= d) {
                return false;
            }
            match deadline {
                Some(d) => {
                    shared.changed.wait_until(&mut until, d);
                }
                None => shared.changed.wait(&mut until),
            }
        }
    }

    /// Each change of leadership as it happens: [`Leadership::Acquired`], then
    /// [`Leadership::Lost`], and so on (they alternate, starting with `Acquired`). For
    /// `select!` alongside watchers and timers. Disconnected once the elector has stopped.
    /// Changes wait in the channel until received (one small value per change of leader; a
    /// program that only calls [`is_leader`](Self::is_leader) may leave them).
    ///
    /// `Lost` is sent at the renew deadline, before any other replica can take the lease; on
    /// [`stop`](Self::stop) while leading, `Lost` is sent before the lease is released.
    #[must_use]
    pub fn changes(&self) -> &Receiver<Leadership> {
        &self.runner.changes
    }

    /// The name of the lease.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This replica's identity (the lease's `holderIdentity` while it leads).
    #[must_use]
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Stops the elector: it stops leading at once ([`is_leader`](Self::is_leader) turns
    /// false, `Lost` is sent if it led), releases the lease if it holds it (holder emptied, so
    /// a standby takes over at its next read), and its thread ends. Blocks until then: a
    /// request in flight is cut; the release is one or two requests, bounded by the retry
    /// period (at most 5 s). Idempotent; dropping the elector does the same.
    pub fn stop(&self) {
        self.runner.stop();
    }
}

impl Drop for LeaderElector {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a shard group adds to the elector's thread (`group.rs`): its own label and claim on
/// every write, and what it learns of the group (and does about it) while the thread waits.
pub(crate) trait Hook: Send {
    /// Sets the labels and annotations of a lease about to be created or updated.
    fn decorate(&mut self, lease: &mut Lease);
    /// A create or update was accepted; `lease` is as the server stored it.
    fn wrote(&mut self, lease: &Lease);
    /// Waits in the thread's place, after each step, until `until` (or earlier, for a step
    /// at once), or until `stop` disconnects; its own requests go on `http`. `renewed`: the
    /// end of this replica's lead, if it holds its lease.
    fn wait(
        &mut self,
        api: &Api<Lease>,
        http: &mut Http,
        stop: &Receiver<()>,
        renewed: Option<Instant>,
        until: Instant,
    );
    /// Stopping, before the release is sent.
    fn stopping(&mut self);
    /// Why `lease` (as read) is not this member's to hold, if it is not: a Lease of another
    /// group, or an elector's, under the name this member's would have.
    fn foreign(&self, lease: &Lease) -> Option<String>;
    /// This member cannot take part, and why (said once per reason; it holds nothing
    /// meanwhile).
    fn refused(&mut self, why: &str);
}

/// The elector's thread (and a shard group's: `group.rs`).
pub(crate) struct Worker {
    api: Api<Lease>,
    http: Http,
    hook: Option<Box<dyn Hook>>,
    name: String,
    /// The lease last read or written: what an update replaces (its metadata and
    /// resourceVersion stay; its spec is the decision's).
    lease: Option<Lease>,
    candidate: Candidate,
    shared: Arc<Shared>,
    changes: Sender<Leadership>,
    stop: Receiver<()>,
    timings: LeaseTimings,
    /// Whether the owner was last told `Acquired`.
    told: bool,
    /// The last reason this replica could not take part, as said (once per reason).
    refused: Option<String>,
}

impl Worker {
    fn run(mut self) {
        let mut input = Input::Tick;
        let mut release_by = None;
        loop {
            let mut action = self.step(input);
            if self.shared.stopping.load(Ordering::SeqCst) && !self.candidate.stopping() {
                // The agent was shut down to cut a request: release on a fresh one. The hook
                // waits first (bounded on its own); the release's bound starts after it.
                self.http = self.api.http();
                if let Some(hook) = &mut self.hook {
                    hook.stopping();
                }
                let bound = self.timings.retry_period.min(RELEASE_BOUND);
                release_by = Some(Instant::now() + bound);
                action = self.step(Input::Stop);
            }
            if release_by.is_some_and(|by| Instant::now() >= by) {
                log::debug!("lease {:?}: could not release it in time; it expires on its own", self.name);
                break;
            }
            input = match action {
                Action::Done => break,
                Action::Wait(until) => self.wait(until),
                Action::Read => self.read(release_by),
                Action::Create(spec) => self.write(spec, true, release_by),
                Action::Update(spec) => self.write(spec, false, release_by),
            };
        }
        log::debug!("lease {:?}: elector stopped", self.name);
    }

    /// One decision, published: `leading_until` first, then the report, so that a consumer
    /// told `Acquired` finds `is_leader()` true.
    fn step(&mut self, input: Input) -> Action {
        let step = self.candidate.step(input, now());
        if self.candidate.twin() {
            let why = format!(
                "lease {:?}: another process holds it as {:?}: each replica needs an identity of its own; this one leads only when that process's lease expires",
                self.name,
                self.candidate.identity()
            );
            self.refuse(why);
        }
        {
            let mut until = self.shared.leading_until.lock();
            // Once stopping, `stop` has cleared it for good.
            if !self.shared.stopping.load(Ordering::SeqCst) {
                *until = self.candidate.leading_until();
            }
        }
        self.shared.changed.notify_all();
        let stopping = self.shared.stopping.load(Ordering::SeqCst);
        match step.report {
            // Once stopping, the owner is told only that it lost what it was told it had.
            Some(Leadership::Acquired) if !stopping => self.tell(Leadership::Acquired),
            Some(Leadership::Lost) if self.told => self.tell(Leadership::Lost),
            Some(Leadership::Acquired | Leadership::Lost) | None => {}
        }
        step.action
    }

    fn tell(&mut self, change: Leadership) {
        log::debug!("lease {:?}: {change:?}", self.name);
        self.told = change == Leadership::Acquired;
        // A consumer that dropped its receiver wants no reports.
        let _ = self.changes.send(change);
    }

    /// Waits until `until`, or until stopped; a shard group's hook waits instead (it may end
    /// the wait earlier, and takes what it learns on the way).
    fn wait(&mut self, until: Instant) -> Input {
        if let Some(hook) = &mut self.hook {
            let now = Instant::now();
            let renewed = self.candidate.leading_until().filter(|u| *u > now);
            hook.wait(&self.api, &mut self.http, &self.stop, renewed, until);
            return Input::Tick;
        }
        let Some(left) = until.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else {
            return Input::Tick;
        };
        select! {
            recv(self.stop) -> _ => Input::Tick,
            recv(after(left)) -> _ => Input::Tick,
        }
    }

    /// Bounds the next request: while leading, by the end of the lead (a renewal that answers
    /// later is worth nothing); while stopping, by the release's bound; else by the renew
    /// deadline.
    fn bound(&mut self, release_by: Option<Instant>) {
        let now = Instant::now();
        let end = release_by.or_else(|| self.candidate.leading_until().filter(|u| *u > now));
        let timeout = end.map_or(self.timings.renew_deadline, |end| end.saturating_duration_since(now));
        self.http.set_timeout(Some(timeout.max(Duration::from_millis(1))));
    }

    /// Says once why this replica cannot take part (an error in the log, and the group's
    /// changes).
    fn refuse(&mut self, why: String) {
        if self.refused.as_ref() == Some(&why) {
            return;
        }
        log::error!("{why}");
        if let Some(hook) = &mut self.hook {
            hook.refused(&why);
        }
        self.refused = Some(why);
    }

    /// Why a Lease read is not this replica's to hold, if it is not: an elector never takes
    /// a shard group member's Lease; a member, only its own group's.
    fn foreign(&self, lease: &Lease) -> Option<String> {
        match &self.hook {
            Some(hook) => hook.foreign(lease),
            None => {
                let group = lease.metadata.labels.as_ref()?.get(super::GROUP_LABEL)?;
                Some(format!(
                    "lease {:?} belongs to a member of the shard group {group:?} (label {}): give the elector's Lease a name of its own",
                    self.name,
                    super::GROUP_LABEL
                ))
            }
        }
    }

    fn read(&mut self, release_by: Option<Instant>) -> Input {
        self.bound(release_by);
        match self.api.get_on(&self.http, &self.name) {
            Ok(lease) => {
                if let Some(why) = self.foreign(&lease) {
                    // Never written: it is someone else's, whoever holds it.
                    self.lease = None;
                    self.refuse(why);
                    return Input::Failed { conflict: false };
                }
                let record = marked(&lease);
                self.lease = Some(lease);
                Input::Read(Some(record))
            }
            Err(e) if e.is_not_found() => {
                self.lease = None;
                Input::Read(None)
            }
            Err(e) => self.failed(&e),
        }
    }

    fn write(&mut self, record: Record, create: bool, release_by: Option<Instant>) -> Input {
        self.bound(release_by);
        let Record { spec, mark } = record;
        let lease = match (&self.lease, create) {
            (Some(read), false) => Lease { spec: Some(spec), ..read.clone() },
            (None, false) => {
                // The decision updates only a lease it saw, and every lease seen is kept here.
                log::error!("lease {:?}: an update without a lease read first (a bug); reading it", self.name);
                return Input::Failed { conflict: true };
            }
            (_, true) => {
                let mut lease = Lease { spec: Some(spec), ..Lease::default() };
                lease.metadata.name = Some(self.name.clone());
                lease.metadata.namespace = self.api.namespace().map(str::to_owned);
                lease
            }
        };
        let mut lease = lease;
        let annotations = lease.metadata.annotations.get_or_insert_with(Default::default);
        match mark {
            Some(mark) => annotations.insert(super::MARK_ANNOTATION.to_owned(), mark),
            None => annotations.remove(super::MARK_ANNOTATION),
        };
        if let Some(hook) = &mut self.hook {
            hook.decorate(&mut lease);
        }
        let sent = Instant::now();
        let written =
            if create { self.api.create_on(&self.http, &lease) } else { self.api.replace_on(&self.http, &lease) };
        match written {
            Ok(lease) => {
                let record = marked(&lease);
                if let Some(hook) = &mut self.hook {
                    hook.wrote(&lease);
                }
                self.lease = Some(lease);
                Input::Wrote { record, sent }
            }
            Err(e) => self.failed(&e),
        }
    }

    fn failed(&self, e: &Error) -> Input {
        let conflict = e.is_conflict() || e.is_already_exists();
        if !self.shared.stopping.load(Ordering::Relaxed) {
            log::debug!("lease {:?}: {e}", self.name);
        }
        Input::Failed { conflict }
    }
}

/// A Lease as the decision reads it: its spec and its mark.
fn marked(lease: &Lease) -> Record {
    let mark = lease.metadata.annotations.as_ref().and_then(|a| a.get(super::MARK_ANNOTATION)).cloned();
    Record { spec: lease.spec.clone().unwrap_or_default(), mark }
}

fn now() -> Now {
    Now { mono: Instant::now(), wall: wall_now() }
}

/// The wall clock, as a timestamp for `acquireTime` and `renewTime` (k8s-openapi's jiff has no
/// `now()` without its `std` feature). A clock before 1970 stamps 1970: the stamps are for
/// humans and other clients, never compared here.
fn wall_now() -> Timestamp {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = i64::try_from(since.as_secs()).unwrap_or(i64::MAX);
    Timestamp::new(secs, since.subsec_nanos().try_into().unwrap_or(0)).unwrap_or(Timestamp::UNIX_EPOCH)
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
    use crate::testing::FakeApiServer;
    use crate::wire::client::Client;

    /// A hook whose `stopping` takes as long as a shard group's may (it waits up to a retry
    /// period for its watchers to empty their stores).
    struct SlowToStop(Duration);

    impl Hook for SlowToStop {
        fn decorate(&mut self, _: &mut Lease) {}
        fn wrote(&mut self, _: &Lease) {}
        fn wait(&mut self, _: &Api<Lease>, _: &mut Http, stop: &Receiver<()>, _: Option<Instant>, until: Instant) {
            select! {
                recv(stop) -> _ => {}
                recv(after(until.saturating_duration_since(Instant::now()))) -> _ => {}
            }
        }
        fn stopping(&mut self) {
            std::thread::sleep(self.0);
        }
        fn foreign(&self, _: &Lease) -> Option<String> {
            None
        }
        fn refused(&mut self, _: &str) {}
    }

    /// The release is bounded from when it starts, after the hook's wait: a hook that waits
    /// its whole bound does not leave the release without time (it was skipped, and the
    /// others waited for the Lease to expire).
    #[test]
    fn the_release_goes_out_after_a_hook_that_waits_its_whole_bound() {
        let server = FakeApiServer::start();
        let api: Api<Lease> = Api::namespaced(Client::from_url(&server.url()).unwrap(), "default");
        // The release's bound is the retry period: client-go's default of 2 s, not a shorter
        // one, so that a release answered late on a loaded machine is still in time (with
        // 200 ms, an answer 300 ms late left the Lease held).
        let timings = LeaseTimings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        };
        let hook = Box::new(SlowToStop(timings.retry_period));
        let runner = Runner::start(api, "slow", "me", timings, Some(hook), "kw-test-lease").unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !runner.shared.leader_at(Instant::now()) {
            assert!(Instant::now() < deadline, "never led");
            std::thread::sleep(Duration::from_millis(10));
        }
        runner.stop();
        let lease = server.get::<Lease>(Some("default"), "slow").unwrap();
        let holder = lease.spec.and_then(|s| s.holder_identity).unwrap_or_default();
        assert_eq!(holder, "", "the Lease was released");
    }
}
