//! [`ShardGroup`]: replicas that split a resource's hash space among the members alive now.
//! Each member holds a Lease of its own on the elector's thread (`elector.rs`, with a
//! [`Hook`]); between renewals it lists the group's Leases and takes the decision of
//! `handover.rs`. docs/protocol.md §13 ("Shard groups") states the protocol and why it is safe.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use k8s_openapi::api::coordination::v1::Lease;
use parking_lot::Mutex;

use super::LeaseTimings;
use super::elector::{Hook, Runner};
use super::handover::{Peers, Ranges, Record, decide};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::shard::{Follow, FollowHandle, Shard};
use crate::wire::api::Api;
use crate::wire::http::Http;
use crate::wire::request::ListParams;

/// The label that names a member's group on its Lease.
pub(crate) const GROUP_LABEL: &str = "kube-watcher.io/shard-group";
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
}

/// One replica's membership in a shard group: the replicas that run it split the hash space of
/// [`Shard`] among those alive now, and the split follows them as they come and go.
///
/// Each member holds a Lease of its own (named `<group>-<identity>`, labelled
/// `kube-watcher.io/shard-group=<group>`), renewed every retry period like a
/// [`LeaderElector`](crate::LeaderElector)'s, on one thread (`kw-shard-group`). Between
/// renewals it lists the group's Leases: the members are those with a holder that changed
/// within their lease duration, judged on this process's monotonic clock (clock skew between
/// machines does not matter). Each member's share comes from consistent hashing over the sorted
/// members, so a join or a leave moves about 1/n of the space, and nothing between members
/// that stay.
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
    view: Arc<Mutex<View>>,
    follow: Arc<Follow>,
    changes: Receiver<GroupChange>,
    group: String,
    identity: String,
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

/// Checks a name part of a Lease name (RFC 1123: lower-case letters, digits, '-' and '.',
/// starting and ending with a letter or digit).
fn check_name(field: &str, value: &str, max: usize) -> Result<()> {
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let valid = !value.is_empty()
        && value.len() <= max
        && value.chars().all(|c| ok(c) || c == '-' || c == '.')
        && value.starts_with(ok)
        && value.ends_with(ok);
    if valid {
        return Ok(());
    }
    Err(Error::config(
        field,
        format!(
            "{value:?}: must be 1 to {max} lower-case letters, digits, '-' or '.', starting and ending with a letter or digit (it names a Lease)"
        ),
    ))
}

impl ShardGroup {
    /// Joins the shard group `group` in `api`'s namespace as `identity` (unique per replica:
    /// a pod name). Returns at once; the share follows on [`changes`](Self::changes) (a lone
    /// member holds everything after two or three requests).
    ///
    /// # Errors
    /// [`Error::Config`] when `timings` break client-go's rules (see [`LeaseTimings`]),
    /// `group` or `identity` cannot name a Lease (`group` at most 63 characters, as a label
    /// value; the two with a '-' between at most 253), or `api` has no namespace;
    /// [`Error::Spawn`] when the thread cannot start. Errors from the server do not end the
    /// membership: it retries every retry period.
    pub fn join(api: Api<Lease>, group: &str, identity: &str, timings: LeaseTimings) -> Result<ShardGroup> {
        timings.validate()?;
        check_name("group", group, 63)?;
        check_name("identity", identity, 253 - 1 - group.len())?;
        if api.namespace().is_none() {
            return Err(Error::config("api", "leases are namespaced: use Api::namespaced"));
        }
        let view = Arc::new(Mutex::new(View::default()));
        let follow = Arc::new(Follow::default());
        let (changes_tx, changes) = crossbeam_channel::unbounded();
        let hook = GroupHook {
            follow: Arc::clone(&follow),
            release_bound: timings.retry_period.min(Duration::from_secs(5)),
            me: identity.to_owned(),
            selector: format!("{GROUP_LABEL}={group}"),
            group: group.to_owned(),
            view: Arc::clone(&view),
            changes: changes_tx,
            peers: Peers::default(),
            written: Ranges::default(),
            pending: Ranges::default(),
            claim: Ranges::default(),
            wrote: false,
        };
        let name = format!("{group}-{identity}");
        let runner = Runner::start(api, &name, identity, timings, Some(Box::new(hook)), "kw-shard-group")?;
        Ok(ShardGroup { runner, view, follow, changes, group: group.to_owned(), identity: identity.to_owned() })
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

    /// Leaves the group: the share is given up at once (`Shard(None)` is sent, and the
    /// watchers that follow the group empty their stores), the Lease is released with an empty
    /// claim, so the others take over at their next read, and the thread ends. Blocks until
    /// then: a request in flight is cut; the wait for the watchers (a watch notices within
    /// 500 ms) and the release are each bounded by the retry period (at most 5 s); if the
    /// watchers have not emptied their stores by then, the release claims what they may still
    /// hold, and the others wait for it to expire (1 s). Idempotent; dropping the group does the
    /// same.
    pub fn stop(&self) {
        self.runner.stop();
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
    /// groups").
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
    me: String,
    group: String,
    selector: String,
    view: Arc<Mutex<View>>,
    changes: Sender<GroupChange>,
    peers: Peers,
    /// The claim of the last accepted write.
    written: Ranges,
    /// The claim of the write in flight.
    pending: Ranges,
    /// The claim the next write carries.
    claim: Ranges,
    /// A write was accepted since the last early wake-up (so a failing server is not asked
    /// again at once).
    wrote: bool,
}

impl GroupHook {
    /// Reads the group's Leases; `None` when the list failed.
    fn read(&self, api: &Api<Lease>, http: &Http) -> Option<Vec<Record>> {
        let params = ListParams::default().labels(&self.selector);
        match api.list_on(http, &params) {
            Ok(list) => Some(list.items.iter().filter_map(record).collect()),
            Err(e) => {
                log::debug!("shard group {:?}: {e}", self.group);
                None
            }
        }
    }

    /// What the stores may hold: the followers' holdings, or with none, the published share
    /// (a program that reads `shard()` itself applies it at once).
    fn applied(&self) -> Ranges {
        match self.follow.holdings() {
            Some(held) => held.iter().fold(Ranges::default(), |acc, s| acc.union(&Ranges::of(Some(s)))),
            None => self.view.lock().allowed.clone(),
        }
    }

    /// `until`: the end of the lead the share is valid for (the watchers drop it then, even
    /// if this thread is stuck).
    fn publish(&self, members: Vec<String>, allowed: Ranges, until: Option<Instant>) {
        self.follow.set(allowed.shard(), until);
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
        self.pending = self.claim.clone();
    }

    fn wrote(&mut self, _lease: &Lease) {
        self.written = self.pending.clone();
        self.wrote = true;
    }

    fn before_wait(&mut self, api: &Api<Lease>, http: &Http, renewed: Option<Instant>, until: Instant) -> Instant {
        let Some(renewed) = renewed else {
            // Not renewed within the renew deadline: hold nothing, before anyone can see the
            // lease expire.
            self.publish(Vec::new(), Ranges::default(), None);
            return until;
        };
        let held = self.applied();
        let Some(records) = self.read(api, http) else {
            // The group is unknown: grow nothing (a lease that seems to expire meanwhile may
            // have been renewed with a claim we did not see).
            return until;
        };
        let now = Instant::now();
        self.peers.observe(records, now);
        let live = self.peers.live(&self.me, now);
        // What the stores may still hold: with no watcher following, what was published.
        let blocked = self.peers.released_claims(now);
        let decision = decide(&self.me, &live, &blocked, &self.written, &held, true);
        let mut members: Vec<String> = live.keys().cloned().collect();
        members.push(self.me.clone());
        members.sort_unstable();
        self.claim = decision.claim.clone();
        self.publish(members, decision.allowed, Some(renewed));
        let mut wake = until;
        if self.claim != self.written && self.wrote {
            // A new claim goes out at once, not a retry period later.
            self.wrote = false;
            wake = now;
        }
        self.peers.next_expiry(&self.me, now).map_or(wake, |e| wake.min(e))
    }

    fn wake(&self) -> Option<Receiver<()>> {
        Some(self.follow.holdings_changed().clone())
    }

    fn stopping(&mut self) {
        self.publish(Vec::new(), Ranges::default(), None);
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
