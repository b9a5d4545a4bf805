//! [`ShardGroup`]: replicas that split a resource's hash space among the members alive now.
//! Each member holds a Lease of its own on the elector's thread (`elector.rs`, with a
//! [`Hook`], which waits in the thread's place); it learns of the others from a [`Watcher`] of
//! the group's Leases and takes the decision of `handover.rs` at each change it shows, listing
//! the group only before it grows (or while that watch is not fresh). docs/protocol.md §13
//! ("Shard groups") states the protocol and why it is safe.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, after, never, select};
use k8s_openapi::api::coordination::v1::Lease;
use parking_lot::Mutex;

use super::LeaseTimings;
use super::elector::{Hook, Runner};
use super::handover::{Freshness, Peers, Ranges, Record, Source, confirmed, decide};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::notice::SlowConsumer;
use crate::shard::{Follow, FollowHandle, Shard};
use crate::watcher::Watcher;
use crate::wire::api::Api;
use crate::wire::http::Http;
use crate::wire::request::ListParams;

use super::GROUP_LABEL;

/// Room for the watch's events on their way to the group's thread (beyond it they are dropped:
/// the store still has them, and the thread looks at the store).
const WATCH_CHANNEL: usize = 64;
/// The annotation that holds a member's claim: the shard selector of every range its stores
/// may hold (or are about to), empty for none.
pub(crate) const CLAIM_ANNOTATION: &str = "kube-watcher.io/shard-claim";

/// A change of a shard group, as [`ShardGroup::changes`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupChange {
    /// The live members, in this member's eyes (sorted identities, itself included while its
    /// lease is renewed).
    Members(Vec<String>),
    /// This member's share now: `None` while it may hold nothing (it is joining, waiting for
    /// another member to let go, or could not renew its lease).
    Shard(Option<Shard>),
    /// This member cannot take part, and why: another process holds its Lease under the same
    /// identity (it was seen renewing it), or its Lease name
    /// ([`lease_name`](ShardGroup::lease_name)) is taken by a Lease that is not this group's (a
    /// [`LeaderElector`](crate::LeaderElector)'s, made with that very name). It holds nothing
    /// meanwhile (and keeps trying, in case the other goes away); sent once per reason, also
    /// logged as an error. A configuration error: stop, and give the identity (or the
    /// elector's Lease) another name.
    Conflict(String),
}

/// One replica's membership in a shard group: the replicas that run it split the hash space of
/// [`Shard`] among those alive now, and the split follows them as they come and go.
///
/// Each member holds a Lease of its own (named `<group>-<identity>-<tail>`:
/// [`lease_name`](Self::lease_name); labelled `kube-watcher.io/shard-group=<group>`), renewed
/// every retry period like a [`LeaderElector`](crate::LeaderElector)'s, on one thread
/// (`kw-shard-group`). It learns of
/// the others from a watch of the group's Leases (a [`Watcher`] of its own, thread
/// `kw-leases`): the members are those with a holder that changed within their lease duration,
/// judged on this process's monotonic clock from when the change arrived (clock skew between
/// machines does not matter). Each member's share comes from consistent hashing over the
/// sorted members, so a join or a leave moves about 1/n of the space, and nothing between
/// members that stay.
///
/// What the watch shows may shrink a member's share at once, never grow it: before it grows
/// (its first share, a range another member let go of, or the share of a member whose Lease
/// expired) it lists the group's Leases, after its own last write. While the watch is not
/// fresh (not synced yet, failing, or behind: it has not shown the member's own renewals of
/// the last lease duration − renew deadline, at least two retry periods), the member lists
/// after every renewal instead. At rest, a member sends one request per retry period, its
/// renewal, and the watch's own reconnections. It needs `get`, `list`, `watch`, `create` and
/// `update` on `leases` (without `watch` it lists after every renewal).
///
/// No hash is in two members' shares at once: a member takes a range only after the member
/// that had it wrote, into its own Lease, that it no longer holds it, or after that member's
/// Lease expired; a member that cannot renew its Lease holds nothing from its renew deadline
/// on, before its Lease can expire in anyone's eyes. Once the group stops changing, every hash
/// is in some member's share within about a lease duration and a few retry periods.
///
/// [`stop`](Self::stop) (also on drop) gives up the share and releases the Lease, so the
/// others take over at their next renewal.
///
/// # Examples
/// ```
/// # let server = kube_watcher::testing::FakeApiServer::start();
/// use std::time::Duration;
/// use k8s_openapi::api::coordination::v1::Lease;
/// use kube_watcher::{Api, Client, GroupChange, LeaseTimings, ShardGroup};
///
/// let leases: Api<Lease> = Api::namespaced(Client::from_url(&server.url())?, "default");
/// let group = ShardGroup::join(leases, "pods", "replica-1", LeaseTimings::default())?;
/// // Alone, it soon holds the whole space.
/// while let Ok(change) = group.changes().recv_timeout(Duration::from_secs(10)) {
///     if let GroupChange::Shard(Some(shard)) = change {
///         assert_eq!(shard, kube_watcher::Shard::of(0, 1)?);
///         break;
///     }
/// }
/// assert_eq!(group.members(), ["replica-1"]);
/// group.stop(); // releases the Lease
/// # Ok::<(), kube_watcher::Error>(())
/// ```
#[must_use = "dropping a ShardGroup leaves the group"]
pub struct ShardGroup {
    runner: Runner,
    /// The lead's timer thread (`lead_timer`): dropping the sender ends it.
    timer: Mutex<Option<(Sender<()>, std::thread::JoinHandle<()>)>>,
    view: Arc<Mutex<View>>,
    follow: Arc<Follow>,
    changes: Receiver<GroupChange>,
    group: String,
    identity: String,
    lease: String,
}

impl std::fmt::Debug for ShardGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardGroup")
            .field("group", &self.group)
            .field("identity", &self.identity)
            .field("members", &self.members())
            .field("shard", &self.shard())
            .finish_non_exhaustive()
    }
}

/// What the thread publishes.
#[derive(Debug, Default)]
struct View {
    members: Vec<String>,
    allowed: Ranges,
}

impl ShardGroup {
    /// Joins the shard group `group` in `api`'s namespace as `identity` (unique per replica:
    /// a pod name). Returns at once; the share follows on [`changes`](Self::changes) (a lone
    /// member holds everything after a few requests: its Lease is read, created, listed with
    /// the group, written with its claim, and the group listed again).
    ///
    /// # Errors
    /// [`Error::Config`] when `timings` break client-go's rules (see [`LeaseTimings`]),
    /// `group` or `identity` is not an RFC 1123 subdomain as a Lease name must be (`group` at
    /// most 63 characters, as a label value; `identity` at most 253), or `api` has no namespace;
    /// [`Error::Spawn`] when its threads (the group's, its watch's and its lead's timer,
    /// `kw-shard-lead`) cannot start. Errors
    /// from the server do not end the membership: it retries every retry period.
    pub fn join(api: Api<Lease>, group: &str, identity: &str, timings: LeaseTimings) -> Result<ShardGroup> {
        timings.validate()?;
        super::check_name("group", group, 63)?;
        super::check_name("identity", identity, 253)?;
        if api.namespace().is_none() {
            return Err(Error::config("api", "leases are namespaced: use Api::namespaced"));
        }
        let view = Arc::new(Mutex::new(View::default()));
        let follow = Arc::new(Follow::default());
        let (changes_tx, changes) = crossbeam_channel::unbounded();
        let selector = format!("{GROUP_LABEL}={group}");
        let name = super::member_lease(group, identity);
        // The members learn of each other from this watch (its store is the view; its events
        // only wake the group's thread, which must never hold it up: `Lag`).
        let watch = Watcher::builder(api.clone())
            .config(Config::default().labels(&selector))
            .channel_capacity(WATCH_CHANNEL)
            .start()?;
        let news = watch.subscribe_with(SlowConsumer::Lag);
        let hook = GroupHook {
            follow: Arc::clone(&follow),
            release_bound: timings.retry_period.min(Duration::from_secs(5)),
            fresh_bound: (timings.lease_duration - timings.renew_deadline).max(timings.retry_period * 2),
            me: identity.to_owned(),
            lease: name.clone(),
            selector,
            group: group.to_owned(),
            view: Arc::clone(&view),
            changes: changes_tx,
            peers: Peers::new(timings.lease_duration),
            watch,
            news,
            freshness: Freshness::default(),
            written: Ranges::default(),
            pending: (Ranges::default(), Instant::now()),
            claim: Ranges::default(),
            published_until: None,
            wrote: false,
            list_failed: false,
        };
        let (timer_tx, timer_rx) = crossbeam_channel::bounded(0);
        let timed = Arc::clone(&follow);
        let timer = std::thread::Builder::new()
            .name("kw-shard-lead".to_owned())
            .spawn(move || lead_timer(&timed, &timer_rx))
            .map_err(|e| Error::Spawn(format!("shard group {group:?}: {e}").into()))?;
        let timer = Mutex::new(Some((timer_tx, timer)));
        let runner = match Runner::start(api, &name, identity, timings, Some(Box::new(hook)), "kw-shard-group") {
            Ok(runner) => runner,
            Err(e) => {
                stop_timer(&timer);
                return Err(e);
            }
        };
        Ok(ShardGroup {
            runner,
            timer,
            view,
            follow,
            changes,
            group: group.to_owned(),
            identity: identity.to_owned(),
            lease: name,
        })
    }

    /// The live members, in this member's eyes: sorted identities, itself included while its
    /// lease is renewed.
    #[must_use]
    pub fn members(&self) -> Vec<String> {
        self.view.lock().members.clone()
    }

    /// This member's share now: `None` while it may hold nothing. Computed at the call: it
    /// turns `None` at the renew deadline even when the group's thread is stuck.
    #[must_use]
    pub fn shard(&self) -> Option<Shard> {
        if !self.runner.shared.leader_at(Instant::now()) {
            return None;
        }
        self.view.lock().allowed.shard()
    }

    /// Each change of the members and of this member's share, as it happens. For `select!`
    /// alongside watchers. Disconnected once the group has stopped; changes wait in the
    /// channel until received.
    #[must_use]
    pub fn changes(&self) -> &Receiver<GroupChange> {
        &self.changes
    }

    /// The group's name.
    #[must_use]
    pub fn group(&self) -> &str {
        &self.group
    }

    /// This member's identity.
    #[must_use]
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The name of this member's Lease: `<group>-<identity>-<tail>`, the tail (the group's
    /// length and a hash) telling apart members whose names would otherwise read the same
    /// (member `b-c` of group `a`, member `c` of group `a-b`); a long identity is cut short in
    /// it. It depends on the group and the
    /// identity alone, so it is the same in every process (docs/protocol.md §13.4, "Lease
    /// names").
    ///
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// # use k8s_openapi::api::coordination::v1::Lease;
    /// # use kube_watcher::{Api, Client, LeaseTimings, ShardGroup};
    /// # let leases: Api<Lease> = Api::namespaced(Client::from_url(&server.url())?, "default");
    /// let group = ShardGroup::join(leases, "pods", "web-0", LeaseTimings::default())?;
    /// assert_eq!(group.lease_name(), "pods-web-0-040c131ea8086275");
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    #[must_use]
    pub fn lease_name(&self) -> &str {
        &self.lease
    }

    /// Leaves the group: the share is given up at once (`Shard(None)` is sent, the stores of
    /// the watchers that follow the group read empty from then on, and the watchers empty
    /// them), the Lease is released with an empty claim, so the others take over as soon as
    /// their watches show it, and the threads end (the group's, and its watch of the group's
    /// Leases). Blocks until then: a request in flight is cut; the wait for the watchers (a
    /// watch notices within 500 ms) and the release are each bounded by the retry period (at
    /// most 5 s); if the watchers have not emptied their stores by then, the release claims
    /// what they may still hold, and the others wait for it to expire (1 s). Idempotent;
    /// dropping the group does the same.
    pub fn stop(&self) {
        self.runner.stop();
        stop_timer(&self.timer);
    }
}

/// The lead's timer (thread `kw-shard-lead`): at the end of the lead the share was published
/// for, the watchers that follow it are woken and their requests in flight cut
/// (`Follow::notify`), whether or not the group's thread is on time. Ends when `stop`
/// disconnects.
fn lead_timer(follow: &Follow, stop: &Receiver<()>) {
    loop {
        follow.notify();
        let now = Instant::now();
        let end = follow.valid_until().filter(|u| *u > now).map_or_else(never, |u| after(u - now));
        select! {
            recv(stop) -> _ => return,
            recv(follow.rearmed()) -> _ => {}
            recv(end) -> _ => {}
        }
    }
}

fn stop_timer(timer: &Mutex<Option<(Sender<()>, std::thread::JoinHandle<()>)>>) {
    if let Some((tx, thread)) = timer.lock().take() {
        drop(tx);
        let _ = thread.join();
    }
}

impl Drop for ShardGroup {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Config {
    /// Follow a shard group's share: the watcher lists and watches only the objects of
    /// [`ShardGroup::shard`], and follows it as members come and go (it overrides
    /// [`Config::shard`]).
    ///
    /// When the share changes, the watcher relists with the new shard
    /// ([`RelistReason::ShardChanged`](crate::RelistReason::ShardChanged)): objects of a grown
    /// range arrive as `InitApply`, objects that left the shard as `Delete` at its end. While
    /// the member holds no share (joining, waiting for another member to let go, or unable to
    /// renew its lease), the store is empty. So the store always holds exactly the current
    /// share, and the group claims in its Lease every range the store may still hold, so that
    /// no other member takes it before the store dropped it (docs/protocol.md §13, "Shard
    /// groups"). When the member's lead ends (it could not renew in time), the store reads
    /// empty from that instant, computed at each read, whatever the watcher's thread is doing
    /// (a request, a consumer that does not read); the watcher drops the objects themselves,
    /// and its consumers get their `Delete`s, when it gets to. When the watcher stops
    /// ([`Watcher::stop`], drop, or a terminal error), its store empties, every clone of it
    /// included, before the group stops counting it: the share it held may go to another
    /// member at once.
    ///
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// use k8s_openapi::api::coordination::v1::Lease;
    /// use k8s_openapi::api::core::v1::Pod;
    /// use kube_watcher::{Api, Client, Config, LeaseTimings, ShardGroup, Watcher};
    ///
    /// let client = Client::from_url(&server.url())?;
    /// let group = ShardGroup::join(Api::<Lease>::namespaced(client.clone(), "default"), "pods", "replica-1", LeaseTimings::default())?;
    /// let watcher = Watcher::new(Api::<Pod>::all(client), Config::default().shard_group(&group))?;
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn shard_group(mut self, group: &ShardGroup) -> Self {
        self.follow = Some(FollowHandle(Arc::clone(&group.follow)));
        self
    }
}

/// The group's part of the thread.
struct GroupHook {
    /// The share as the group's watchers follow it, and what their stores may hold.
    follow: Arc<Follow>,
    /// How long a stopping member waits for its watchers to drop their objects.
    release_bound: Duration,
    /// How long ago the newest write of this member's its watch shows may have been sent, for
    /// the watch to be acted on without a list (`Freshness`).
    fresh_bound: Duration,
    me: String,
    /// The name of this member's Lease.
    lease: String,
    group: String,
    selector: String,
    view: Arc<Mutex<View>>,
    changes: Sender<GroupChange>,
    peers: Peers,
    /// The watch of the group's Leases (its thread ends when the hook is dropped, with the
    /// group's thread), and its events: each one is a reason to look again.
    watch: Watcher<Lease>,
    news: Receiver<Result<Event<Lease>>>,
    freshness: Freshness,
    /// The claim of the last accepted write.
    written: Ranges,
    /// The claim of the write in flight, and when it was sent.
    pending: (Ranges, Instant),
    /// The claim the next write carries.
    claim: Ranges,
    /// The end of the lead the published share is valid for.
    published_until: Option<Instant>,
    /// A write was accepted since the last early wake-up (so a failing server is not asked
    /// again at once).
    wrote: bool,
    /// The last list failed: the next one waits for the next step (so that a failing server
    /// is not asked again at every change the watch shows).
    list_failed: bool,
}

/// When the hook wants the next step (a write) and the next look at the group.
struct Next {
    /// `None`: when the elector's step is due.
    step: Option<Instant>,
    /// When a peer's lease expires in our eyes.
    look: Option<Instant>,
}

impl GroupHook {
    /// Lists the group's Leases, and the list's resourceVersion; `None` when the list failed.
    fn list(&self, api: &Api<Lease>, http: &Http) -> Option<(Vec<Record>, Option<String>)> {
        let params = ListParams::default().labels(&self.selector);
        match api.list_on(http, &params) {
            Ok(list) => Some((list.items.iter().filter_map(record).collect(), list.resource_version)),
            Err(e) => {
                log::debug!("shard group {:?}: {e}", self.group);
                None
            }
        }
    }

    /// The group's Leases as the watch shows them, if it is fresh enough to act on
    /// (`Freshness::fresh`): synced, at or past the last list, and showing a recent write of
    /// ours.
    fn watched(&mut self, now: Instant) -> Option<Vec<Record>> {
        let store = self.watch.store();
        if !store.is_ready() {
            return None;
        }
        let reached = |version: &str| match store.wait_for_version(version, Duration::ZERO) {
            Ok(()) => Some(true),
            Err(Error::VersionNotReached { .. }) => Some(false),
            Err(_) => None,
        };
        if !self.freshness.fresh(now, self.fresh_bound, reached) {
            return None;
        }
        Some(store.state().iter().filter_map(|lease| record(lease)).collect())
    }

    /// What the stores may hold: the followers' holdings, or with none, the published share
    /// (a program that reads `shard()` itself applies it at once).
    fn applied(&self) -> Ranges {
        match self.follow.holdings() {
            Some(held) => held.iter().fold(Ranges::default(), |acc, s| acc.union(&Ranges::of(Some(s)))),
            None => self.view.lock().allowed.clone(),
        }
    }

    /// The share published, while the lead it was published for lasts.
    fn holding(&self, now: Instant) -> Ranges {
        match self.published_until {
            Some(until) if now < until => self.view.lock().allowed.clone(),
            _ => Ranges::default(),
        }
    }

    /// `until`: the end of the lead the share is valid for (the watchers drop it then, even
    /// if this thread is stuck).
    fn publish(&mut self, members: Vec<String>, allowed: Ranges, until: Option<Instant>) {
        self.follow.set(allowed.shard(), until);
        self.published_until = until;
        let mut view = self.view.lock();
        if view.members != members {
            view.members.clone_from(&members);
            let _ = self.changes.send(GroupChange::Members(members));
        }
        if view.allowed != allowed {
            log::debug!("shard group {:?}: {} holds {:?}", self.group, self.me, allowed.shard());
            view.allowed = allowed;
            let _ = self.changes.send(GroupChange::Shard(view.allowed.shard()));
        }
    }

    /// Decides from what `peers` knows at `now` and publishes what `source` confirms (the
    /// lead ends at `end`); true when a list must confirm more.
    fn decide(&mut self, now: Instant, end: Instant, held: &Ranges, source: Source) -> bool {
        let live = self.peers.live(&self.lease, now);
        let blocked = self.peers.released_claims(now);
        let decision = decide(&self.me, &live, &blocked, &self.written, held, true);
        let frozen = self.peers.frozen(&self.lease, now);
        let (allowed, more) = confirmed(&decision, &self.holding(now), source, frozen);
        let mut members: Vec<String> = live.into_keys().collect();
        members.push(self.me.clone());
        members.sort_unstable();
        members.dedup();
        self.claim = decision.claim;
        self.publish(members, allowed, Some(end));
        more
    }

    /// No view of the group to decide from (the watch not fresh, the list failed or not
    /// due): what is held is kept, for the lead renewed now (`end`), as far as the last
    /// accepted write claims it. Keeping needs nothing new: the others read that claim before
    /// they grow (docs/protocol.md §13.4); only growing needs a view.
    fn keep(&mut self, end: Instant) {
        let now = Instant::now();
        let kept = self.holding(now).intersect(&self.written);
        let members = self.view.lock().members.clone();
        self.publish(members, kept, Some(end));
    }

    /// One look at the group: from the watch when it is fresh, shrinking at most; a list when
    /// growing needs one, or, after a step (`stepped`), when the watch is not fresh. `renewed`:
    /// the end of our lead, if we lead.
    fn look(&mut self, api: &Api<Lease>, http: &mut Http, renewed: Option<Instant>, stepped: bool) -> Next {
        // Each event is only a reason to look: the watch's store is the view.
        while let Ok(news) = self.news.try_recv() {
            if let Err(e) = news {
                log::debug!("shard group {:?}: watch: {e}", self.group);
            }
        }
        let now = Instant::now();
        let Some(end) = renewed.filter(|end| *end > now) else {
            // Not renewed within the renew deadline: hold nothing, before anyone can see the
            // lease expire.
            self.publish(Vec::new(), Ranges::default(), None);
            return Next { step: None, look: None };
        };
        let held = self.applied();
        let mut decided = false;
        let list = match self.watched(now) {
            Some(records) => {
                self.peers.observe(records, now);
                decided = true;
                self.decide(now, end, &held, Source::Watch)
            }
            // Not fresh: list after each renewal, as without a watch; between them, wait.
            None => stepped,
        };
        if list && (stepped || !self.list_failed) {
            // Bounded like a renewal: a list answered after the lead ended is worth nothing.
            http.set_timeout(Some(end.saturating_duration_since(now).max(Duration::from_millis(1))));
            // On failure the group is unknown: grow nothing (a lease that seems to expire
            // meanwhile may have been renewed with a claim we did not see).
            let listed = self.list(api, http);
            self.list_failed = listed.is_none();
            if let Some((records, version)) = listed {
                let now = Instant::now();
                self.freshness.listed(version);
                self.peers.observe(records, now);
                decided = true;
                self.decide(now, end, &held, Source::List);
            }
        }
        if !decided {
            self.keep(end);
        }
        let now = Instant::now();
        let mut step = None;
        if self.claim != self.written && self.wrote {
            // A new claim goes out at once, not a retry period later.
            self.wrote = false;
            step = Some(now);
        }
        Next { step, look: self.peers.next_expiry(&self.lease, now) }
    }
}

/// A Lease as the handover reads it.
fn record(lease: &Lease) -> Option<Record> {
    let name = lease.metadata.name.clone()?;
    let spec = lease.spec.clone().unwrap_or_default();
    let seconds = u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0);
    let claim = match lease.metadata.annotations.as_ref().and_then(|a| a.get(CLAIM_ANNOTATION)) {
        None => Ranges::default(),
        Some(s) if s.is_empty() => Ranges::default(),
        Some(s) => match Shard::parse(s) {
            Ok(shard) => Ranges::of(Some(&shard)),
            // A claim we cannot read may cover anything.
            Err(e) => {
                log::debug!("lease {name:?}: {e}; counted as claiming everything");
                Ranges::of(Some(&Shard::of(0, 1).ok()?))
            }
        },
    };
    Some(Record {
        name,
        version: lease.metadata.resource_version.clone().unwrap_or_default(),
        holder: spec.holder_identity.unwrap_or_default(),
        duration: Duration::from_secs(seconds),
        claim,
    })
}

impl Hook for GroupHook {
    fn decorate(&mut self, lease: &mut Lease) {
        lease.metadata.labels.get_or_insert_with(BTreeMap::new).insert(GROUP_LABEL.to_owned(), self.group.clone());
        let claim = self.claim.shard().map(|s| s.selector()).unwrap_or_default();
        lease.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(CLAIM_ANNOTATION.to_owned(), claim);
        self.pending = (self.claim.clone(), Instant::now());
    }

    fn wrote(&mut self, lease: &Lease) {
        self.written = self.pending.0.clone();
        self.wrote = true;
        if let Some(version) = &lease.metadata.resource_version {
            self.freshness.wrote(version.clone(), self.pending.1);
        }
    }

    fn wait(
        &mut self,
        api: &Api<Lease>,
        http: &mut Http,
        stop: &Receiver<()>,
        renewed: Option<Instant>,
        until: Instant,
    ) {
        let mut next = self.look(api, http, renewed, true);
        // Owned handles: the arms below look again, which borrows the hook mutably.
        let news = self.news.clone();
        let holdings = self.follow.holdings_changed().clone();
        loop {
            let now = Instant::now();
            let step = next.step.map_or(until, |s| s.min(until));
            let Some(left) = step.checked_duration_since(now).filter(|d| !d.is_zero()) else { return };
            let look = next.look.map_or_else(never, |t| after(t.saturating_duration_since(now)));
            select! {
                recv(stop) -> _ => return,
                recv(after(left)) -> _ => return,
                // A watcher dropped (or took) a range: the next write claims what they hold.
                recv(holdings) -> _ => return,
                recv(news) -> _ => {}
                recv(look) -> _ => {}
            }
            next = self.look(api, http, renewed, false);
        }
    }

    fn foreign(&self, lease: &Lease) -> Option<String> {
        let name = lease.metadata.name.as_deref().unwrap_or_default();
        let label = lease.metadata.labels.as_ref().and_then(|l| l.get(GROUP_LABEL));
        let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()).unwrap_or_default();
        match label {
            Some(group) if *group == self.group => None,
            Some(group) => Some(format!(
                "lease {name:?} belongs to the shard group {group:?} (its member {holder:?}), not to {:?}: member {:?} of {:?} would have the same Lease name; give the group or the identity another name",
                self.group, self.me, self.group
            )),
            None => Some(format!(
                "lease {name:?} is not a shard group's (no label {GROUP_LABEL}; a LeaderElector's, held by {holder:?}?): member {:?} of {:?} would have the same Lease name; give the group, the identity or the elector's Lease another name",
                self.me, self.group
            )),
        }
    }

    fn refused(&mut self, why: &str) {
        let _ = self.changes.send(GroupChange::Conflict(why.to_owned()));
    }

    fn stopping(&mut self) {
        // The lead ends now (`stop()` ended it): the stores read empty from here, whatever
        // their followers do (a twin may take the released Lease, and the share, at once).
        self.publish(Vec::new(), Ranges::default(), Some(Instant::now()));
        // The watchers drop their objects (a local relist of nothing), then the release says
        // so; if they do not in time, the claim keeps what they may hold.
        let deadline = Instant::now() + self.release_bound;
        while !self.applied().is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.follow.holdings_changed().recv_timeout(left).is_err() {
                break;
            }
        }
        self.claim = self.applied();
    }
}
