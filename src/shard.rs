//! `Shard`: a share of a resource's objects, chosen by a hash of each object's uid (or
//! namespace); the one place the shard rule lives: parse, format, hash, contains. The request
//! builder (`wire/request.rs`) sends [`Shard::selector`]; the decoders (`codec/decode/`) ask
//! [`Shard::contains`] of the uid or namespace they read off an object's bytes.
//!
//! The rule is the API server's (docs/protocol.md, "Sharded lists and watches"): FNV-1a 64 of
//! the field's bytes, kept when it falls in one of the shard's half-open ranges `[start, end)`
//! of the 64-bit hash space, whose end may be 2^64.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// 2^64: the end of the hash space, the exclusive end of the last shard.
const SPACE: u128 = 1 << 64;

/// FNV-1a 64 (offset basis and prime of the FNV specification).
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The metadata field a shard hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Field {
    Uid,
    Namespace,
}

impl Field {
    fn path(self) -> &'static str {
        match self {
            Field::Uid => "object.metadata.uid",
            Field::Namespace => "object.metadata.namespace",
        }
    }
}

/// A share of a resource's objects: those whose uid (or namespace) hashes into its ranges.
///
/// Set it with [`Config::shard`](crate::Config::shard): the watcher then lists and watches only
/// these objects. A server with sharded lists and watches (Kubernetes 1.36 and later with the
/// `ShardedListAndWatch` feature gate) sends only them; any other server sends everything, and
/// the watcher drops the others itself, reading only their uid (or namespace) before it
/// decodes anything ([`Stats::shard_filter`](crate::Stats::shard_filter) says which happened).
/// Either way the store and the events hold exactly this shard's objects.
///
/// A uid and a namespace never change, so an object stays in its shard for its whole life.
/// The shards of [`Shard::of`] for one `total` split every resource without overlap: each object
/// is in exactly one of them.
///
/// ```
/// use kube_watcher::Shard;
///
/// let shard = Shard::of(1, 4)?;
/// assert_eq!(
///     shard.selector(),
///     "shardRange(object.metadata.uid, '0x4000000000000000', '0x8000000000000000')"
/// );
/// let owner = (0..4).filter(|i| Shard::of(*i, 4).unwrap().contains("5b7d3c1e-uid")).count();
/// assert_eq!(owner, 1);
/// # Ok::<(), kube_watcher::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
#[must_use]
pub struct Shard {
    field: Field,
    /// Sorted by start, non-empty, each `start < end <= 2^64`, none overlapping.
    ranges: Vec<(u128, u128)>,
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Shard({})", self.selector())
    }
}

impl fmt::Display for Shard {
    /// A short human form: how many ranges and what fraction of the hash space, such as
    /// `1 range, 25.0% of the hash space` or `97 ranges, 33.6% of the hash space (by
    /// namespace)`. The alternate form (`{:#}`) is the selector ([`Shard::selector`]), as
    /// `{}` printed it before.
    ///
    /// ```
    /// use kube_watcher::Shard;
    ///
    /// let shard = Shard::of(1, 4)?;
    /// assert_eq!(shard.to_string(), "1 range, 25.0% of the hash space");
    /// assert_eq!(format!("{shard:#}"), shard.selector());
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return f.write_str(&self.selector());
        }
        let n = self.ranges.len();
        write!(f, "{n} range{}, {:.1}% of the hash space", if n == 1 { "" } else { "s" }, 100.0 * self.fraction())?;
        if self.is_by_namespace() {
            f.write_str(" (by namespace)")?;
        }
        Ok(())
    }
}

impl Shard {
    /// Shard `index` of `total` equal shares of the hash space, counted from 0.
    ///
    /// Shard `i` is `[i·⌊2^64/n⌋, (i+1)·⌊2^64/n⌋)`, and the last one ends at 2^64: the split
    /// the Kubernetes API documents for 2 and 4 shards. Every object is in exactly one shard
    /// of a given `total`.
    ///
    /// # Errors
    /// [`Error::Config`] (field `shard`) when `total` is 0 or `index` is not below `total`.
    pub fn of(index: u32, total: u32) -> Result<Shard> {
        if total == 0 {
            return Err(Error::config("shard", "the total number of shards must be at least 1, got 0"));
        }
        if index >= total {
            return Err(Error::config(
                "shard",
                format!("shard index {index} is out of range: shards of {total} are numbered 0 to {}", total - 1),
            ));
        }
        let step = SPACE / u128::from(total);
        let start = step * u128::from(index);
        let end = if index + 1 == total { SPACE } else { start + step };
        Ok(Shard { field: Field::Uid, ranges: vec![(start, end)] })
    }

    /// The shard made of these half-open ranges `[start, end)` of the hash space (in any
    /// order). Bounds are `u64` or `u128`, so that an end may be 2^64 (`1u128 << 64`).
    ///
    /// ```
    /// use kube_watcher::Shard;
    ///
    /// // The first and last eighths of the hash space.
    /// let shard = Shard::from_ranges([(0u64, 1u128 << 61), (7u64 << 61, 1u128 << 64)])?;
    /// assert_eq!(shard.ranges().count(), 2);
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Config`] (field `shard`) when there is no range, a range is empty
    /// (`start >= end`), ends past 2^64, or overlaps another.
    pub fn from_ranges<S, E>(ranges: impl IntoIterator<Item = (S, E)>) -> Result<Shard>
    where
        S: Into<u128>,
        E: Into<u128>,
    {
        let ranges = ranges.into_iter().map(|(s, e)| (s.into(), e.into())).collect();
        Shard::checked(Field::Uid, ranges)
    }

    fn checked(field: Field, mut ranges: Vec<(u128, u128)>) -> Result<Shard> {
        if ranges.is_empty() {
            return Err(Error::config("shard", "a shard needs at least one range"));
        }
        for &(start, end) in &ranges {
            if start >= end {
                return Err(Error::config(
                    "shard",
                    format!("range [{}, {}) is empty: its start must be below its end", hex(start), hex(end)),
                ));
            }
            if end > SPACE {
                return Err(Error::config(
                    "shard",
                    format!("range [{}, {}) ends past 2^64, the end of the hash space", hex(start), hex(end)),
                ));
            }
        }
        ranges.sort_unstable();
        for pair in ranges.windows(2) {
            let ((s1, e1), (s2, e2)) = (pair[0], pair[1]);
            if s2 < e1 {
                return Err(Error::config(
                    "shard",
                    format!("ranges [{}, {}) and [{}, {}) overlap", hex(s1), hex(e1), hex(s2), hex(e2)),
                ));
            }
        }
        Ok(Shard { field, ranges })
    }

    fn with_field(mut self, field: Field) -> Shard {
        self.field = field;
        self
    }

    /// The same ranges over `metadata.namespace` instead of `metadata.uid`: every object of a
    /// namespace is in the same shard. Cluster-scoped objects have no namespace: they hash as
    /// the empty string, so they are all in the one shard that holds that hash.
    pub fn by_namespace(self) -> Shard {
        self.with_field(Field::Namespace)
    }

    /// Whether the shard hashes `metadata.namespace` ([`Shard::by_namespace`]) rather than
    /// `metadata.uid`.
    #[must_use]
    pub fn is_by_namespace(&self) -> bool {
        self.field == Field::Namespace
    }

    /// The `shardSelector` query parameter the API server gets: one
    /// `shardRange(object.metadata.uid, '0x…', '0x…')` per range, in order, joined with `||`.
    /// Bounds are 16 lower-case hex digits, but for the end 2^64, `'0x10000000000000000'`.
    #[must_use]
    pub fn selector(&self) -> String {
        let mut out = String::with_capacity(self.ranges.len() * 80);
        for (i, &(start, end)) in self.ranges.iter().enumerate() {
            if i > 0 {
                out.push_str(" || ");
            }
            out.push_str("shardRange(");
            out.push_str(self.field.path());
            out.push_str(", '");
            out.push_str(&hex(start));
            out.push_str("', '");
            out.push_str(&hex(end));
            out.push_str("')");
        }
        out
    }

    /// The fraction of the hash space the shard covers, from 0 (exclusive) to 1: about the
    /// fraction of a resource's objects it holds (by uid; by namespace, only as well as the
    /// namespaces balance).
    ///
    /// ```
    /// use kube_watcher::Shard;
    ///
    /// assert_eq!(Shard::of(0, 4)?.fraction(), 0.25);
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    #[must_use]
    pub fn fraction(&self) -> f64 {
        let covered: u128 = self.ranges.iter().map(|&(start, end)| end - start).sum();
        // Exact to f64's precision: both sides are at most 2^64.
        covered as f64 / SPACE as f64
    }

    /// Whether an object whose uid (or, [`by_namespace`](Shard::by_namespace), namespace) is
    /// `value` belongs to the shard: the server's own test, FNV-1a 64 of `value` in a range.
    /// A missing uid or namespace is the empty string.
    #[must_use]
    pub fn contains(&self, value: &str) -> bool {
        let h = u128::from(Shard::hash(value));
        self.ranges.iter().any(|&(start, end)| start <= h && h < end)
    }

    /// FNV-1a 64 of `value`'s bytes: where `value` falls in the hash space.
    #[must_use]
    pub fn hash(value: &str) -> u64 {
        value.bytes().fold(FNV_OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
    }

    /// The shard's ranges `[start, end)`, in order; an end may be 2^64.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u128)> + '_ {
        // OK: every start is below its end, which is at most 2^64, so it fits in a u64.
        self.ranges.iter().map(|&(s, e)| (u64::try_from(s).unwrap_or(u64::MAX), e))
    }

    /// Reads a selector as [`Shard::selector`] writes it (spaces around the parts are free).
    ///
    /// ```
    /// use kube_watcher::Shard;
    ///
    /// let shard = Shard::parse("shardRange(object.metadata.namespace, '0x0000000000000000', '0x8000000000000000')")?;
    /// assert_eq!(shard, Shard::of(0, 2)?.by_namespace());
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Config`] (field `shard`) naming what is wrong: an unknown function or field,
    /// a bound that is not `'0x'` and 16 lower-case hex digits (or `'0x10000000000000000'`),
    /// ranges on two fields, an empty or overlapping range.
    pub fn parse(selector: &str) -> Result<Shard> {
        let bad = |what: String| Error::config("shard", format!("selector {}: {what}", quote(selector)));
        let mut field = None;
        let mut ranges = Vec::new();
        for part in selector.split("||") {
            let (f, start, end) = parse_range(part.trim()).map_err(bad)?;
            match field {
                None => field = Some(f),
                Some(first) if first != f => {
                    return Err(bad(format!(
                        "every range must hash the same field, got {} and {}",
                        first.path(),
                        f.path()
                    )));
                }
                Some(_) => {}
            }
            ranges.push((start, end));
        }
        // OK: `split` yields at least one part, and each part set the field or returned.
        let field = field.unwrap_or(Field::Uid);
        Shard::checked(field, ranges)
    }
}

impl FromStr for Shard {
    type Err = Error;

    /// [`Shard::parse`].
    fn from_str(s: &str) -> Result<Shard> {
        Shard::parse(s)
    }
}

/// One `shardRange(field, 'start', 'end')`.
fn parse_range(part: &str) -> Result<(Field, u128, u128), String> {
    let args = part
        .strip_prefix("shardRange")
        .map(str::trim_start)
        .and_then(|p| p.strip_prefix('('))
        .and_then(|p| p.strip_suffix(')'))
        .ok_or_else(|| format!("expected shardRange(field, 'start', 'end'), got {}", quote(part)))?;
    let args: Vec<&str> = args.split(',').map(str::trim).collect();
    let [field, start, end] = args[..] else {
        return Err(format!("shardRange takes 3 arguments, got {}", args.len()));
    };
    let field = match field {
        "object.metadata.uid" => Field::Uid,
        "object.metadata.namespace" => Field::Namespace,
        other => {
            return Err(format!("unknown field {}: object.metadata.uid or object.metadata.namespace", quote(other)));
        }
    };
    Ok((field, bound(start)?, bound(end)?))
}

/// `'0x'` and 16 lower-case hex digits, or `'0x10000000000000000'` (2^64).
fn bound(quoted: &str) -> Result<u128, String> {
    let digits = quoted
        .strip_prefix('\'')
        .and_then(|q| q.strip_suffix('\''))
        .and_then(|q| q.strip_prefix("0x"))
        .ok_or_else(|| format!("bound {} is not a quoted '0x…' value", quote(quoted)))?;
    if digits == "10000000000000000" {
        return Ok(SPACE);
    }
    if digits.len() != 16 || !digits.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(format!("bound {} must be '0x' and 16 lower-case hex digits", quote(quoted)));
    }
    u64::from_str_radix(digits, 16).map(u128::from).map_err(|e| format!("bound {}: {e}", quote(quoted)))
}

/// A bound as the selector writes it: `0x` and 16 digits, or 17 for 2^64.
fn hex(v: u128) -> String {
    format!("0x{v:016x}")
}

fn quote(s: &str) -> String {
    format!("\"{}\"", crate::error::snippet(s.as_bytes()))
}

/// Who dropped the objects of other shards (see [`Stats::shard_filter`](crate::Stats::shard_filter)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ShardFilter {
    /// The API server filtered: its list answered with the shard's selector in
    /// `metadata.shardInfo`.
    Server,
    /// The server sent every object (its list had no `metadata.shardInfo`: a server without
    /// sharded lists and watches, or with the feature gate off); the watcher dropped those of
    /// other shards itself, before decoding them.
    Client,
}

/// The shard a shard group gives its member, shared with the watchers that follow it
/// (`Config::shard_group`). The group sets it; each watcher thread (a *follower*) notices a
/// new generation, relists with it, and reports what its store may hold, so that the group
/// claims no less (docs/protocol.md §13, "Shard groups").
///
/// Every change of the share as followers see it (a new share, or the end of the member's
/// lead) wakes each follower and cuts its request in flight ([`Cut`]), whatever it was
/// doing: [`notify`](Self::notify) does it, called by [`set`](Self::set) and, at the lead's
/// end, by the group's own timer thread (`lease/group.rs`), which does not depend on the
/// group's thread being on time.
#[derive(Debug)]
pub(crate) struct Follow {
    inner: parking_lot::Mutex<FollowInner>,
    /// Wakes the group's thread when a follower's holding changes (so that it writes a
    /// smaller claim at once).
    changed: (crossbeam_channel::Sender<()>, crossbeam_channel::Receiver<()>),
    /// Wakes the group's timer thread when the share or its lead's end changed.
    rearm: (crossbeam_channel::Sender<()>, crossbeam_channel::Receiver<()>),
}

impl Default for Follow {
    fn default() -> Self {
        Follow {
            inner: Default::default(),
            changed: crossbeam_channel::bounded(1),
            rearm: crossbeam_channel::bounded(1),
        }
    }
}

/// How a follower's request in flight is cut (its agent shut down: `engine/control.rs`).
#[derive(Clone)]
pub(crate) struct Cut(pub(crate) std::sync::Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cut")
    }
}

#[derive(Debug, Default)]
struct FollowInner {
    /// The generations of the share and the leads they were given for.
    lead: Lead,
    /// `None`: hold nothing.
    shard: Option<Shard>,
    /// The share is valid until then (the end of the member's lead); after it, none.
    until: Option<std::time::Instant>,
    /// The generation (`effective`) the followers were last woken and cut for.
    notified: u64,
    next_id: u64,
    followers: std::collections::BTreeMap<u64, Followed>,
}

/// One follower, as its group sees it.
#[derive(Debug)]
struct Followed {
    /// What its store may hold.
    held: Vec<Shard>,
    /// The generation of the share its store's objects were listed under (its last complete
    /// sync); `None` while it holds nothing.
    listed: Option<u64>,
    /// Wakes it.
    wake: crossbeam_channel::Sender<()>,
    /// Cuts its request in flight.
    cut: Cut,
}

/// A follower's registration: its id and the channel that wakes it on a change.
pub(crate) struct Follower {
    pub(crate) id: u64,
    pub(crate) wake: crossbeam_channel::Receiver<()>,
}

impl Follow {
    /// The group's side: the member's share now, valid until `until` (its lead's end). Wakes
    /// (and cuts) every follower when the share, as they see it, changes (also when a
    /// renewal revives a share whose lead had ended).
    pub(crate) fn set(&self, shard: Option<Shard>, until: Option<std::time::Instant>) {
        {
            let mut inner = self.inner.lock();
            let changed = inner.shard != shard;
            inner.lead.set(shard.is_some(), changed, until, std::time::Instant::now());
            inner.shard = shard;
            inner.until = until;
        }
        let _ = self.rearm.0.try_send(());
        self.notify();
    }

    /// Wakes every follower and cuts its request in flight if the share as they see it
    /// changed since they were last told (the cuts run after the lock is let go).
    pub(crate) fn notify(&self) {
        let told: Vec<(crossbeam_channel::Sender<()>, Cut)> = {
            let mut inner = self.inner.lock();
            let now = effective(&inner).0;
            if now == inner.notified {
                return;
            }
            inner.notified = now;
            inner.followers.values().map(|f| (f.wake.clone(), f.cut.clone())).collect()
        };
        for (wake, cut) in told {
            let _ = wake.try_send(());
            (cut.0)();
        }
    }

    /// The group's timer thread: a message whenever the share or its lead's end was set.
    pub(crate) fn rearmed(&self) -> &crossbeam_channel::Receiver<()> {
        &self.rearm.1
    }

    /// When the share ends unless renewed (none when there is no share).
    pub(crate) fn valid_until(&self) -> Option<std::time::Instant> {
        let inner = self.inner.lock();
        inner.shard.as_ref().and(inner.until)
    }

    /// The group's side: every range the followers' stores may hold; `None` when no watcher
    /// follows.
    pub(crate) fn holdings(&self) -> Option<Vec<Shard>> {
        let inner = self.inner.lock();
        if inner.followers.is_empty() {
            return None;
        }
        Some(inner.followers.values().flat_map(|f| f.held.iter().cloned()).collect())
    }

    /// A watcher thread starts following: it holds nothing yet; `cut` cuts its request in
    /// flight.
    pub(crate) fn register(&self, cut: Cut) -> Follower {
        let mut inner = self.inner.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        let (tx, wake) = crossbeam_channel::bounded(1);
        inner.followers.insert(id, Followed { held: Vec::new(), listed: None, wake: tx, cut });
        Follower { id, wake }
    }

    /// A watcher thread ends: its store no longer changes (and is not counted).
    pub(crate) fn unregister(&self, id: u64) {
        self.inner.lock().followers.remove(&id);
        // The group's thread writes a claim without it.
        let _ = self.changed.0.try_send(());
    }

    /// The shard now and its generation: none once its lead ended, even if the group's
    /// thread has not said so (it may be stuck), with a generation of its own.
    pub(crate) fn current(&self) -> (u64, Option<Shard>) {
        effective(&self.inner.lock())
    }

    /// Whether the shard changed since `generation`.
    pub(crate) fn moved(&self, generation: u64) -> bool {
        self.current().0 != generation
    }

    /// A follower's store may hold `held` (the shards' union).
    pub(crate) fn holding(&self, id: u64, held: Vec<Shard>) {
        if let Some(entry) = self.inner.lock().followers.get_mut(&id)
            && entry.held != held
        {
            entry.held = held;
            let _ = self.changed.0.try_send(());
        }
    }

    /// A follower's sync ended: its store holds what it listed under the share of
    /// `generation` (`None`: nothing, the share was none).
    pub(crate) fn listed(&self, id: u64, generation: Option<u64>) {
        if let Some(entry) = self.inner.lock().followers.get_mut(&id) {
            entry.listed = generation;
        }
    }

    /// Whether the stores of followers `ids` must look empty now: one of them holds objects
    /// listed for a lead that has ended (now, computed at the call, or before a renewal gave
    /// a share again). No thread has to run for it, so a follower held up anywhere (a request
    /// no cut reaches, a consumer that does not read, a starved thread) holds nothing past
    /// its member's lead in any reader's eyes; the follower drops the objects themselves when
    /// it gets to (docs/protocol.md §13.4).
    pub(crate) fn dark(&self, ids: &[u64]) -> bool {
        let inner = self.inner.lock();
        inner.lead.dark(ids.iter().filter_map(|id| inner.followers.get(id)?.listed), std::time::Instant::now())
    }

    /// The group's side: a message whenever a follower's holding changed.
    pub(crate) fn holdings_changed(&self) -> &crossbeam_channel::Receiver<()> {
        &self.changed.1
    }
}

/// The share as followers see it: none, with a generation of its own, once its lead ended.
fn effective(inner: &FollowInner) -> (u64, Option<Shard>) {
    if inner.shard.is_some() && inner.until.is_some_and(|u| std::time::Instant::now() >= u) {
        return (inner.lead.generation + 1, None);
    }
    (inner.lead.generation, inner.shard.clone())
}

/// The part of a [`Follow`] that decides, from the time alone, under which generation the
/// share is listed and whether what the followers listed reads empty ([`Follow::dark`]).
/// Pure (the time is given), so that the lease explorer (`src/lease/explore.rs`) runs this very
/// rule on its own clocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(crate) struct Lead {
    /// Bumped at every change of the share, and when a lead that had ended is renewed. Even:
    /// a share; odd (`effective`): the same generation, its lead ended.
    pub(crate) generation: u64,
    /// The end of the last lead a share was given for: what the followers' stores hold is
    /// hidden from then on. A share withdrawn (none) leaves it, or brings it forward to the
    /// `until` it is withdrawn with: a stopping member's lead ends at once.
    end: Option<std::time::Instant>,
    /// What was listed under this generation or an earlier one outlived its lead: hidden for
    /// good, even once a renewal gives a share again.
    lapsed: Option<u64>,
}

impl Lead {
    /// A share (`given`), or none, set at `now`, valid until `until`; `changed`: it is not the
    /// share set last.
    pub(crate) fn set(
        &mut self,
        given: bool,
        changed: bool,
        until: Option<std::time::Instant>,
        now: std::time::Instant,
    ) {
        let lapsed = self.end.is_some_and(|end| now >= end);
        if lapsed {
            // What the stores hold now outlived its lead: it stays hidden, and a share given
            // again (even the same) is a new generation, listed afresh.
            self.lapsed = Some(self.generation);
            self.end = None;
        }
        if given {
            self.end = until;
        } else if let (Some(end), Some(until)) = (self.end, until) {
            self.end = Some(end.min(until));
        }
        if changed || lapsed {
            self.generation += 2;
        }
    }

    /// Whether stores listed under the generations `listed` must look empty at `now`: one of
    /// them was listed for a lead that has ended (by now, or before a renewal gave a share
    /// again).
    pub(crate) fn dark(&self, listed: impl IntoIterator<Item = u64>, now: std::time::Instant) -> bool {
        let ended = self.end.is_some_and(|end| now >= end);
        listed.into_iter().any(|listed| ended || self.lapsed.is_some_and(|lapsed| listed <= lapsed))
    }

    /// How a store listed under `listed` stands, for the explorer's fingerprints (generations
    /// count only by how they compare): the lead's end; whether it was listed under the
    /// generation now, and under one that lapsed.
    #[cfg(test)]
    pub(crate) fn standing(&self, listed: Option<u64>) -> (Option<std::time::Instant>, Option<(bool, bool)>) {
        let rank = |listed: u64| (listed == self.generation, self.lapsed.is_some_and(|lapsed| listed <= lapsed));
        (self.end, listed.map(rank))
    }
}

/// `Config`'s handle on a [`Follow`]: equal when it is the same group.
#[derive(Debug, Clone)]
pub(crate) struct FollowHandle(pub(crate) std::sync::Arc<Follow>);

impl PartialEq for FollowHandle {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_pow_64() -> u128 {
        1 << 64
    }

    #[test]
    fn equal_split_matches_the_documented_two_and_four_shard_selectors() {
        let uid = |s: &str| format!("shardRange(object.metadata.uid, {s})");
        assert_eq!(Shard::of(0, 2).unwrap().selector(), uid("'0x0000000000000000', '0x8000000000000000'"));
        assert_eq!(Shard::of(1, 2).unwrap().selector(), uid("'0x8000000000000000', '0x10000000000000000'"));
        let four = [
            "'0x0000000000000000', '0x4000000000000000'",
            "'0x4000000000000000', '0x8000000000000000'",
            "'0x8000000000000000', '0xc000000000000000'",
            "'0xc000000000000000', '0x10000000000000000'",
        ];
        for (i, want) in four.iter().enumerate() {
            assert_eq!(Shard::of(i as u32, 4).unwrap().selector(), uid(want));
        }
    }

    #[test]
    fn one_shard_is_the_whole_space_and_the_last_shard_ends_at_two_to_the_64() {
        assert_eq!(Shard::of(0, 1).unwrap().ranges().collect::<Vec<_>>(), [(0, two_pow_64())]);
        let last = Shard::of(2, 3).unwrap();
        let (start, end) = last.ranges().next().unwrap();
        assert_eq!(start, 2 * (u64::MAX / 3));
        assert_eq!(end, two_pow_64());
        assert!(last.selector().ends_with("'0x10000000000000000')"), "{}", last.selector());
        // The top hash value is in the last shard, 0 in the first.
        let max = |s: &Shard| s.ranges.iter().any(|&(a, b)| a <= u128::from(u64::MAX) && u128::from(u64::MAX) < b);
        assert!(max(&last));
        assert!(!max(&Shard::of(0, 3).unwrap()));
    }

    #[test]
    fn hash_is_fnv1a_64() {
        // The FNV-1a test vectors of the FNV specification.
        assert_eq!(Shard::hash(""), 0xcbf29ce484222325);
        assert_eq!(Shard::hash("a"), 0xaf63dc4c8601ec8c);
        assert_eq!(Shard::hash("foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn every_value_is_in_exactly_one_shard_of_a_split() {
        for total in [1u32, 2, 3, 4, 7, 16] {
            let shards: Vec<Shard> = (0..total).map(|i| Shard::of(i, total).unwrap()).collect();
            for n in 0..500 {
                let value = format!("uid-{n}-{total}");
                assert_eq!(shards.iter().filter(|s| s.contains(&value)).count(), 1, "{value} of {total}");
            }
        }
    }

    #[test]
    fn contains_tests_the_hash_against_half_open_ranges() {
        let h = u128::from(Shard::hash("x"));
        assert!(Shard::from_ranges([(h, h + 1)]).unwrap().contains("x"));
        assert!(!Shard::from_ranges([(h + 1, h + 2)]).unwrap().contains("x"));
        // The end is exclusive.
        assert!(!Shard::from_ranges([(0u64, h)]).unwrap().contains("x"));
        // Cluster-scoped objects by namespace: all in the shard holding the hash of "".
        let empty = u128::from(Shard::hash(""));
        assert!(Shard::from_ranges([(empty, empty + 1)]).unwrap().by_namespace().contains(""));
    }

    #[test]
    fn bad_splits_and_ranges_are_refused_with_what_is_wrong() {
        let msg = |r: Result<Shard>| r.unwrap_err().to_string();
        assert!(msg(Shard::of(0, 0)).contains("at least 1"), "{}", msg(Shard::of(0, 0)));
        assert!(msg(Shard::of(4, 4)).contains("0 to 3"), "{}", msg(Shard::of(4, 4)));
        let none: [(u64, u64); 0] = [];
        assert!(msg(Shard::from_ranges(none)).contains("at least one range"));
        assert!(msg(Shard::from_ranges([(5u64, 5u64)])).contains("is empty"));
        assert!(msg(Shard::from_ranges([(5u64, 4u64)])).contains("is empty"));
        assert!(msg(Shard::from_ranges([(0u128, two_pow_64() + 1)])).contains("past 2^64"));
        let e = msg(Shard::from_ranges([(0u64, 10u64), (5u64, 20u64)]));
        assert!(e.contains("overlap") && e.starts_with("invalid configuration: shard:"), "{e}");
        // Adjacent ranges do not overlap.
        assert_eq!(Shard::from_ranges([(10u64, 20u64), (0u64, 10u64)]).unwrap().ranges().count(), 2);
    }

    #[test]
    fn selectors_round_trip_and_sort_their_ranges() {
        let shard = Shard::from_ranges([(3u128 << 62, two_pow_64()), (0u128, 1u128 << 62)]).unwrap().by_namespace();
        let s = shard.selector();
        assert_eq!(
            s,
            "shardRange(object.metadata.namespace, '0x0000000000000000', '0x4000000000000000') || \
             shardRange(object.metadata.namespace, '0xc000000000000000', '0x10000000000000000')"
        );
        assert_eq!(Shard::parse(&s).unwrap(), shard);
        assert_eq!(s.parse::<Shard>().unwrap(), shard);
        assert_eq!(format!("{shard:#}"), s);
        assert_eq!(shard.to_string(), "2 ranges, 50.0% of the hash space (by namespace)");
        for i in 0..5 {
            let s = Shard::of(i, 5).unwrap();
            assert_eq!(Shard::parse(&s.selector()).unwrap(), s);
        }
    }

    #[test]
    fn malformed_selectors_are_refused_by_what_is_wrong() {
        let msg = |s: &str| Shard::parse(s).unwrap_err().to_string();
        let r = |a: &str, b: &str| format!("shardRange(object.metadata.uid, {a}, {b})");
        assert!(msg(&r("'0x0'", "'0x8000000000000000'")).contains("16 lower-case hex digits"));
        assert!(msg(&r("'0x000000000000000A'", "'0x8000000000000000'")).contains("16 lower-case"));
        assert!(msg(&r("'0000000000000000'", "'0x8000000000000000'")).contains("not a quoted"));
        assert!(msg(&r("'0x0000000000000000'", "'0x10000000000000001'")).contains("16 lower-case"));
        assert!(msg(&r("'0x8000000000000000'", "'0x0000000000000000'")).contains("is empty"));
        assert!(
            msg("shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')")
                .contains("unknown field")
        );
        assert!(
            msg("hashRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')")
                .contains("expected shardRange")
        );
        assert!(msg("shardRange(object.metadata.uid, '0x0000000000000000')").contains("3 arguments"));
        assert!(msg("").contains("expected shardRange"));
        let mixed = format!(
            "{} || shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')",
            r("'0x0000000000000000'", "'0x8000000000000000'")
        );
        assert!(msg(&mixed).contains("same field"), "{}", msg(&mixed));
    }

    /// A followed share ends with the member's lead, even if the group's thread never says
    /// so: the follower sees a change, and no share.
    #[test]
    fn a_followed_share_ends_with_the_lead() {
        use std::time::{Duration, Instant};
        let follow = Follow::default();
        let cuts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&cuts);
        let me = follow.register(Cut(std::sync::Arc::new(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        })));
        assert_eq!(follow.current(), (0, None));
        let now = Instant::now();
        follow.set(Some(Shard::of(0, 2).unwrap()), Some(now + Duration::from_secs(3600)));
        let (generation, shard) = follow.current();
        assert_eq!(shard, Some(Shard::of(0, 2).unwrap()));
        assert!(me.wake.try_recv().is_ok(), "the follower is woken");
        assert_eq!(cuts.load(std::sync::atomic::Ordering::SeqCst), 1, "and its request cut");
        follow.holding(me.id, vec![Shard::of(0, 2).unwrap()]);
        assert_eq!(follow.holdings(), Some(vec![Shard::of(0, 2).unwrap()]));
        assert!(!follow.dark(&[me.id]), "nothing listed yet");
        follow.listed(me.id, Some(generation));
        assert!(!follow.dark(&[me.id]), "listed for a lead that lasts");
        // The group renews: same share, longer lead, no change.
        follow.set(Some(Shard::of(0, 2).unwrap()), Some(now + Duration::from_secs(7200)));
        assert!(!follow.moved(generation));
        assert!(!follow.dark(&[me.id]));
        // The lead ended.
        while me.wake.try_recv().is_ok() {}
        follow.set(Some(Shard::of(0, 2).unwrap()), Some(now));
        assert!(follow.moved(generation));
        assert_eq!(follow.current().1, None);
        assert!(me.wake.try_recv().is_ok(), "woken: the share it follows is none now");
        assert_eq!(cuts.load(std::sync::atomic::Ordering::SeqCst), 2, "and its request cut");
        assert!(follow.dark(&[me.id]), "what it listed outlived its lead");
        assert!(!follow.dark(&[]), "a store that follows nothing of it");
        // A renewal revives it: the follower is woken to take it again, as a new generation;
        // what it listed before stays hidden until it lists again.
        follow.set(Some(Shard::of(0, 2).unwrap()), Some(now + Duration::from_secs(60)));
        assert!(me.wake.try_recv().is_ok());
        let (again, shard) = follow.current();
        assert!(again > generation);
        assert_eq!(shard, Some(Shard::of(0, 2).unwrap()));
        assert!(follow.dark(&[me.id]), "listed before the lead ended");
        follow.listed(me.id, Some(again));
        assert!(!follow.dark(&[me.id]), "listed for the new lead");
        // A share withdrawn while the lead lasts: what it holds shows until the lead ends (its
        // member still claims it), then no longer.
        follow.set(None, None);
        assert!(!follow.dark(&[me.id]));
        follow.set(Some(Shard::of(0, 2).unwrap()), Some(Instant::now()));
        follow.set(None, None);
        assert!(follow.dark(&[me.id]));
        follow.listed(me.id, None);
        assert!(!follow.dark(&[me.id]), "it holds nothing");
        // A share withdrawn with its lead ending now (a member that stops): hidden at once,
        // though the lead last given lasts.
        follow.set(Some(Shard::of(0, 2).unwrap()), Some(Instant::now() + Duration::from_secs(60)));
        follow.listed(me.id, Some(follow.current().0));
        assert!(!follow.dark(&[me.id]));
        follow.set(None, Some(Instant::now()));
        assert!(follow.dark(&[me.id]), "the stop ended its lead");
        follow.unregister(me.id);
        assert_eq!(follow.holdings(), None);
        assert!(!follow.dark(&[me.id]), "gone: its store ended empty");
    }
}
