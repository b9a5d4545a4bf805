//! The shard group's handover: which part of the hash space a member may hold now, and what it
//! claims in its own Lease, from what it last read of the others. Pure: plain values and an
//! injected clock (docs/protocol.md §13, "Shard groups").
//!
//! Each member's Lease carries its *claim*: every range its stores may hold, or are about to.
//! A member may hold (is *allowed*) a range only when
//! 1. it is in its *target* (its share of [`assign`] over the live members it sees),
//! 2. its own last successful write claimed it, and a read of the group *after* that write
//!    showed no live member claiming any of it (write, then read: of two members that claim
//!    the same range, the later reader sees the other's claim), and
//! 3. its own lease is renewed (within the renew deadline of the last write it sent).
//!
//! A claim only shrinks once the stores have dropped what it no longer covers, so it always
//! covers what they hold. A member whose lease expired in anyone's eyes passed its renew
//! deadline before (the deadline is shorter than the lease), so it already dropped everything.
//!
//! A member learns of the others from a watch of the group's Leases, and lists them only to
//! act ([`confirmed`]): a decision its watch alone supports may shrink what it holds, never
//! grow it; growing waits for a list read after its last accepted write (rule 2 above). While
//! its watch is not [`Freshness::fresh`] (not synced, failing, lagging or stalled, as its own
//! writes show), it lists after every renewal instead, as it would without a watch.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use super::assign::assign;
use super::seen::Seen;
use crate::shard::Shard;

/// Sorted, disjoint, non-empty half-open ranges of the hash space, none touching the next: a
/// part of it that may be empty (a [`Shard`] never is). Every operation keeps that form, so equal
/// parts are equal values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct Ranges(Vec<(u128, u128)>);

impl Ranges {
    /// A shard's ranges come sorted, non-empty and without overlaps; those that touch are
    /// joined here, so that equal parts of the space are equal `Ranges`.
    pub(crate) fn of(shard: Option<&Shard>) -> Ranges {
        let mut out = Vec::new();
        for (a, b) in shard.into_iter().flat_map(Shard::ranges) {
            join(&mut out, u128::from(a), b);
        }
        Ranges(out)
    }

    /// The shard these ranges make; `None` when empty.
    pub(crate) fn shard(&self) -> Option<Shard> {
        if self.0.is_empty() {
            return None;
        }
        // OK: the ranges are disjoint, non-empty and within the space by construction.
        Shard::from_ranges(self.0.iter().copied()).ok()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Any ranges, made sorted, disjoint and non-empty (the form every operation below keeps
    /// without it): the tests' reference.
    #[cfg(test)]
    fn normalized(mut v: Vec<(u128, u128)>) -> Ranges {
        v.retain(|(a, b)| a < b);
        v.sort_unstable();
        let mut out = Vec::with_capacity(v.len());
        for (a, b) in v {
            join(&mut out, a, b);
        }
        Ranges(out)
    }

    /// Both are sorted and disjoint: merged in one pass, joining the ranges that
    /// meet or overlap as they come.
    pub(crate) fn union(&self, other: &Ranges) -> Ranges {
        if other.0.is_empty() {
            return self.clone();
        }
        if self.0.is_empty() {
            return other.clone();
        }
        let (a, b) = (&self.0, &other.0);
        let (mut out, mut i, mut j) = (Vec::with_capacity(a.len() + b.len()), 0, 0);
        loop {
            let (start, end) = match (a.get(i), b.get(j)) {
                (Some(&x), Some(&y)) if x.0 <= y.0 => {
                    i += 1;
                    x
                }
                (_, Some(&y)) => {
                    j += 1;
                    y
                }
                (Some(&x), None) => {
                    i += 1;
                    x
                }
                (None, None) => break,
            };
            join(&mut out, start, end);
        }
        Ranges(out)
    }

    /// Both are sorted and disjoint: one pass over the two, in order. The overlaps come out in
    /// order and disjoint: only empty ones are left out.
    pub(crate) fn intersect(&self, other: &Ranges) -> Ranges {
        let (mut out, mut i, mut j) = (Vec::new(), 0, 0);
        while let (Some(&(a1, b1)), Some(&(a2, b2))) = (self.0.get(i), other.0.get(j)) {
            let (a, b) = (a1.max(a2), b1.min(b2));
            if a < b {
                out.push((a, b));
            }
            // The range that ends first meets nothing further in the other.
            if b1 <= b2 {
                i += 1;
            } else {
                j += 1;
            }
        }
        Ranges(out)
    }

    /// Both are sorted and disjoint: the ranges of `other` that reach past a range of ours
    /// are the only ones the next range of ours may meet. What is left comes out in order and
    /// disjoint: only empty pieces are left out.
    pub(crate) fn minus(&self, other: &Ranges) -> Ranges {
        if self.0.is_empty() || other.0.is_empty() {
            return self.clone();
        }
        let (mut out, mut j) = (Vec::with_capacity(self.0.len()), 0);
        for &(mut a, b) in &self.0 {
            while other.0.get(j).is_some_and(|&(_, d)| d <= a) {
                j += 1;
            }
            for &(c, d) in other.0[j..].iter().take_while(|&&(c, _)| c < b) {
                if c > a {
                    out.push((a, c));
                }
                a = a.max(d);
            }
            if a < b {
                out.push((a, b));
            }
        }
        Ranges(out)
    }

    #[cfg(test)]
    pub(crate) fn contains(&self, point: u64) -> bool {
        // Sorted and disjoint: the one range that may hold it is the last that starts at or
        // before it.
        let p = u128::from(point);
        let after = self.0.partition_point(|&(a, _)| a <= p);
        after > 0 && p < self.0[after - 1].1
    }
}

/// Appends `[start, end)` to ranges in order, none starting after it: joined with the last one
/// when the two meet or overlap, so that none touches the next.
fn join(out: &mut Vec<(u128, u128)>, start: u128, end: u128) {
    match out.last_mut() {
        Some(last) if start <= last.1 => last.1 = last.1.max(end),
        _ => out.push((start, end)),
    }
}

/// What one member knows of the group's Leases, each judged on its own clock
/// ([`Seen`]: when this member first saw each as it is now, or found it missing).
#[derive(Debug, Clone, Hash)]
pub(crate) struct Peers {
    by_name: BTreeMap<String, Seen<Record>>,
    /// This member's own lease duration: how long a deleted Lease may still be held by a
    /// holder it never saw ([`Seen::duration`]).
    own: Duration,
}

/// One Lease of the group as read.
#[derive(Debug, Clone, PartialEq, Hash)]
pub(crate) struct Record {
    pub(crate) name: String,
    pub(crate) version: String,
    /// `holderIdentity`: empty once released.
    pub(crate) holder: String,
    /// `leaseDurationSeconds`, bounded (absent or negative: 0).
    pub(crate) duration: Duration,
    /// The claim annotation, parsed; a claim that does not parse counts as the whole space.
    pub(crate) claim: Ranges,
}

impl Peers {
    /// Nothing known yet, for a member whose lease duration is `own`.
    pub(crate) fn new(own: Duration) -> Peers {
        Peers { by_name: BTreeMap::new(), own }
    }

    /// The group's Leases as a list or the watch's store shows them at `now`. A version seen
    /// before keeps the time it was first seen; a new one is seen `now`. A Lease no longer
    /// shown was deleted (by hand, or by a cleanup job), which says nothing of its member, who
    /// may still hold its share, and may have written it after we last saw it: it is kept as
    /// last seen, live from when we first found it missing ([`Seen::gone`]), and while it is,
    /// nothing grows ([`Peers::frozen`]; docs/protocol.md §13.4).
    pub(crate) fn observe(&mut self, records: Vec<Record>, now: Instant) {
        let mut before = std::mem::take(&mut self.by_name);
        let mut next = BTreeMap::new();
        for r in records {
            let seen = Seen::next(before.remove(&r.name), r, now, |a, b| a.version == b.version);
            next.insert(seen.record.name.clone(), seen);
        }
        for (name, seen) in before {
            if let Some(gone) = Seen::gone(Some(seen), now).filter(|s| self.is_live(s, now)) {
                next.insert(name, gone);
            }
        }
        self.by_name = next;
    }

    fn is_live(&self, seen: &Seen<Record>, now: Instant) -> bool {
        seen.live(seen.duration(seen.record.duration, self.own), now)
    }

    /// The live members other than this one and their claims: a Lease with a holder, changed
    /// within its duration (in our eyes), other than `own` (the name of this member's Lease). A
    /// Lease of another name that names this member's identity (a predecessor's, under the
    /// name an older version gave it) is another holder's like any. Two Leases with one holder
    /// claim the union of their claims.
    pub(crate) fn live(&self, own: &str, now: Instant) -> BTreeMap<String, Ranges> {
        let mut live: BTreeMap<String, Ranges> = BTreeMap::new();
        for (name, s) in &self.by_name {
            if s.record.holder.is_empty() || name == own || !self.is_live(s, now) {
                continue;
            }
            let claim = live.entry(s.record.holder.clone()).or_default();
            *claim = claim.union(&s.record.claim);
        }
        live
    }

    /// The claims of released Leases (no holder) not yet expired in our eyes: a member that
    /// left before its watchers dropped everything keeps those ranges until then.
    pub(crate) fn released_claims(&self, now: Instant) -> Ranges {
        self.by_name
            .values()
            .filter(|s| s.record.holder.is_empty() && self.is_live(s, now))
            .fold(Ranges::default(), |acc, s| acc.union(&s.record.claim))
    }

    /// Whether a deleted Lease (other than `own`) may still be held, in our eyes: writes we
    /// never saw may have claimed anything, so nothing grows until it expires or comes back.
    pub(crate) fn frozen(&self, own: &str, now: Instant) -> bool {
        self.by_name.iter().any(|(name, s)| name != own && s.gone && self.is_live(s, now))
    }

    /// When the next Lease other than `own` expires in our eyes (to wake up then).
    pub(crate) fn next_expiry(&self, own: &str, now: Instant) -> Option<Instant> {
        self.by_name
            .iter()
            .filter(|(name, _)| *name != own)
            .filter_map(|(_, s)| s.expiry(s.duration(s.record.duration, self.own)))
            .filter(|end| *end > now)
            .min()
    }

    /// Whether this member knows of the Lease `name` (the explorer deletes only Leases every
    /// member has seen: docs/protocol.md §13.4 states the limit).
    #[cfg(test)]
    pub(crate) fn knows(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }
}

/// What a member may hold now and what it claims next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decision {
    /// The member's share of the live members (itself included).
    pub(crate) target: Ranges,
    /// What its stores may hold now.
    pub(crate) allowed: Ranges,
    /// What its next write claims: what it may hold, what it wants, and what its stores have
    /// not yet dropped.
    pub(crate) claim: Ranges,
}

/// The decision after a read of the group.
///
/// - `peers`: the live others and their claims (from [`Peers::live`]), and `blocked`: the
///   claims of released Leases not yet expired ([`Peers::released_claims`]), read after
/// - `written`: the claim of this member's last successful write;
/// - `applied`: what its stores may still hold (the allowed part they have not yet dropped);
/// - `renewed`: whether its own lease is renewed (within the renew deadline).
pub(crate) fn decide(
    me: &str,
    peers: &BTreeMap<String, Ranges>,
    blocked: &Ranges,
    written: &Ranges,
    applied: &Ranges,
    renewed: bool,
) -> Decision {
    let mut members: Vec<&str> = peers.keys().map(String::as_str).collect();
    members.push(me);
    let target = Ranges::of(assign(&members).get(me));
    if !renewed {
        return Decision { target, allowed: Ranges::default(), claim: applied.clone() };
    }
    // The target less every range another live member or a released Lease claims, one claim
    // at a time: what is left only shrinks, where a union of the claims would grow with each.
    let intent = peers.values().fold(target.minus(blocked), |left, claim| left.minus(claim));
    let allowed = intent.intersect(written);
    let claim = intent.union(applied);
    Decision { target, allowed, claim }
}

/// Where the view a decision was taken from came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The member's watch of the group's Leases: it may lag, or have stalled without a word.
    Watch,
    /// A list of the group's Leases sent after the member's last accepted write: a consistent
    /// read (docs/protocol.md §13.4).
    List,
}

/// What a member may hold after `decision`, and whether a list must confirm more: from a
/// list, what the decision allows; from its watch, only what it allows of what the member
/// holds now (`holding`: the share it last published, while its lead lasts), and a list must
/// confirm the rest. A watch's view never grows a share; nor does any view while a deleted
/// Lease may still be held (`frozen`: [`Peers::frozen`]), and a list would not help then.
#[must_use]
pub(crate) fn confirmed(decision: &Decision, holding: &Ranges, source: Source, frozen: bool) -> (Ranges, bool) {
    if frozen {
        return (decision.allowed.intersect(holding), false);
    }
    match source {
        Source::List => (decision.allowed.clone(), false),
        Source::Watch => {
            let kept = decision.allowed.intersect(holding);
            let more = kept != decision.allowed;
            (kept, more)
        }
    }
}

/// The most writes of its own a member remembers the watch has not shown yet (one per
/// renewal: a watch this far behind is not fresh anyway).
const UNSEEN_WRITES: usize = 32;

/// Whether a member's watch of the group's Leases is fresh enough to act on without a list,
/// told by its own writes. A watch shows every change in order, so once it shows a write of
/// this member's, it shows everything written before that write was sent. It is fresh while
/// it shows a write sent within `bound`, and once it has reached the version of the member's
/// last list (until then the list shows a later state than the watch).
#[derive(Debug, Clone, Default)]
pub(crate) struct Freshness {
    /// Accepted writes of this member's the watch has not shown yet: their resourceVersions
    /// and when each was sent, oldest first.
    unseen: VecDeque<(String, Instant)>,
    /// When the newest write the watch has shown was sent.
    seen: Option<Instant>,
    /// The resourceVersion of the last list, until the watch has reached it (empty when the
    /// list had none: nothing reaches it, and the next list replaces it).
    listed: Option<String>,
}

impl Freshness {
    /// A write of this member's was accepted: the Lease is now at `version`; it was sent at
    /// `sent`.
    pub(crate) fn wrote(&mut self, version: String, sent: Instant) {
        if self.unseen.len() == UNSEEN_WRITES {
            self.unseen.pop_front();
        }
        self.unseen.push_back((version, sent));
    }

    /// A list of the group answered, at `version` (its `metadata.resourceVersion`).
    pub(crate) fn listed(&mut self, version: Option<String>) {
        self.listed = Some(version.unwrap_or_default());
    }

    /// Whether the watch may be acted on at `now`. `reached(v)` tells whether the watch has
    /// shown resourceVersion `v` or a later one (`None`: it cannot tell, so not fresh).
    pub(crate) fn fresh(&mut self, now: Instant, bound: Duration, reached: impl Fn(&str) -> Option<bool>) -> bool {
        while let Some((version, sent)) = self.unseen.front() {
            match reached(version) {
                Some(true) => {
                    self.seen = Some(*sent);
                    self.unseen.pop_front();
                }
                Some(false) => break,
                None => return false,
            }
        }
        if let Some(version) = &self.listed {
            if reached(version) != Some(true) {
                return false;
            }
            self.listed = None;
        }
        self.seen.and_then(|sent| sent.checked_add(bound)).is_some_and(|until| now < until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPACE: u128 = 1 << 64;

    fn r(v: &[(u128, u128)]) -> Ranges {
        Ranges::normalized(v.to_vec())
    }

    fn all() -> Ranges {
        r(&[(0, SPACE)])
    }

    fn record(name: &str, version: &str, holder: &str, claim: Ranges) -> Record {
        Record {
            name: name.into(),
            version: version.into(),
            holder: holder.into(),
            duration: Duration::from_secs(15),
            claim,
        }
    }

    /// Union, intersection and difference, point by point, on many touching, nested and disjoint
    /// ranges (every bound and the points next to it).
    #[test]
    fn intersect_and_minus_agree_with_membership() {
        let mut state = 1u64;
        let mut next = |below: u64| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % below
        };
        for _ in 0..300 {
            let mut ranges = || {
                let n = next(6);
                let v: Vec<(u128, u128)> =
                    (0..n).map(|_| (next(40), next(8))).map(|(a, l)| (u128::from(a), u128::from(a + l))).collect();
                Ranges::normalized(v)
            };
            let (a, b) = (ranges(), ranges());
            let (both, only_a, either) = (a.intersect(&b), a.minus(&b), a.union(&b));
            for p in 0..50 {
                assert_eq!(either.contains(p), a.contains(p) || b.contains(p), "{a:?} ∪ {b:?} at {p}");
                assert_eq!(both.contains(p), a.contains(p) && b.contains(p), "{a:?} ∩ {b:?} at {p}");
                assert_eq!(only_a.contains(p), a.contains(p) && !b.contains(p), "{a:?} − {b:?} at {p}");
            }
            assert_eq!(either, Ranges::normalized(either.0.clone()), "normalized");
            assert_eq!(both, Ranges::normalized(both.0.clone()), "normalized");
            assert_eq!(only_a, Ranges::normalized(only_a.0.clone()), "normalized");
        }
    }

    #[test]
    fn range_arithmetic() {
        let a = r(&[(0, 10), (20, 30)]);
        let b = r(&[(5, 25)]);
        assert_eq!(a.union(&b), r(&[(0, 30)]));
        assert_eq!(a.intersect(&b), r(&[(5, 10), (20, 25)]));
        assert_eq!(a.minus(&b), r(&[(0, 5), (25, 30)]));
        assert_eq!(b.minus(&a), r(&[(10, 20)]));
        assert_eq!(a.minus(&all()), Ranges::default());
        assert_eq!(Ranges::default().shard(), None);
        assert_eq!(Ranges::of(all().shard().as_ref()), all());
        assert!(a.contains(29) && !a.contains(30) && !a.contains(15));
        // A shard may list ranges that touch; as Ranges they are one, and stay equal to the
        // same part of the space made any other way.
        let touching = Shard::from_ranges([(0u64, 10u128), (10, 20), (30, 40)]).unwrap();
        assert_eq!(Ranges::of(Some(&touching)), r(&[(0, 20), (30, 40)]));
        assert_eq!(Ranges::of(Some(&touching)).minus(&r(&[(5, 35)])), r(&[(0, 5), (35, 40)]));
        assert_eq!(r(&[(0, 5)]).union(&r(&[(5, 10)])), r(&[(0, 10)]));
    }

    /// Alone, a member first claims everything, and holds it only after that claim was
    /// written and read back with nobody else claiming.
    #[test]
    fn a_lone_member_holds_everything_once_its_claim_is_written() {
        let none = BTreeMap::new();
        let first = decide("a", &none, &Ranges::default(), &Ranges::default(), &Ranges::default(), true);
        assert_eq!(
            (first.target.clone(), first.allowed.clone(), first.claim.clone()),
            (all(), Ranges::default(), all())
        );
        let then = decide("a", &none, &Ranges::default(), &first.claim, &Ranges::default(), true);
        assert_eq!(then.allowed, all());
    }

    /// A newcomer takes only what the holder no longer claims: the holder first shrinks what
    /// it holds, keeps claiming it until its stores dropped it, then lets go.
    #[test]
    fn a_join_hands_over_only_after_the_holder_released() {
        // b wants its share, but a claims everything: b holds nothing, and claims its share.
        let b1 = decide(
            "b",
            &[("a".to_owned(), all())].into(),
            &Ranges::default(),
            &Ranges::default(),
            &Ranges::default(),
            true,
        );
        assert_eq!(b1.allowed, Ranges::default());
        assert_eq!(b1.claim, Ranges::default(), "all of its share is claimed by a");
        let b_target = b1.target.clone();
        // a sees b (claiming nothing yet): a's target shrinks, it holds only that at once,
        // and claims what its stores still hold.
        let a1 = decide("a", &[("b".to_owned(), Ranges::default())].into(), &Ranges::default(), &all(), &all(), true);
        assert_eq!(a1.allowed, all().minus(&b_target));
        assert_eq!(a1.claim, all(), "the stores have not dropped b's share yet");
        // Once they did, a's claim is its share alone; b then claims, and holds after its write.
        let a2 =
            decide("a", &[("b".to_owned(), Ranges::default())].into(), &Ranges::default(), &all(), &a1.allowed, true);
        assert_eq!(a2.claim, a1.allowed);
        let b2 = decide(
            "b",
            &[("a".to_owned(), a2.claim.clone())].into(),
            &Ranges::default(),
            &b1.claim,
            &Ranges::default(),
            true,
        );
        assert_eq!((b2.allowed.clone(), b2.claim.clone()), (Ranges::default(), b_target.clone()));
        let b3 = decide(
            "b",
            &[("a".to_owned(), a2.claim.clone())].into(),
            &Ranges::default(),
            &b2.claim,
            &Ranges::default(),
            true,
        );
        assert_eq!(b3.allowed, b_target);
        assert_eq!(b3.allowed.intersect(&a2.allowed), Ranges::default());
    }

    /// Two members that both want a range and both see the other's claim both yield: neither
    /// holds it until their views of the group agree.
    #[test]
    fn two_claims_on_one_range_both_yield() {
        let x = r(&[(0, 100)]);
        let a = decide("a", &[("b".to_owned(), x.clone())].into(), &Ranges::default(), &x, &Ranges::default(), true);
        assert_eq!(a.allowed.intersect(&x), Ranges::default());
    }

    /// A member whose lease is not renewed holds nothing, and keeps claiming what its stores
    /// may still hold.
    #[test]
    fn an_unrenewed_member_holds_nothing() {
        let d = decide("a", &BTreeMap::new(), &Ranges::default(), &all(), &all(), false);
        assert_eq!((d.allowed, d.claim), (Ranges::default(), all()));
    }

    /// A member that left before its stores dropped everything released its Lease with a
    /// claim: nobody takes those ranges until that Lease expires in their eyes.
    #[test]
    fn a_released_claim_blocks_until_it_expires() {
        let left = r(&[(0, 100)]);
        let d = decide("a", &BTreeMap::new(), &left, &all(), &all(), true);
        assert_eq!(d.allowed, all().minus(&left));
        let t0 = Instant::now();
        let mut peers = Peers::new(Duration::from_secs(15));
        peers.observe(vec![Record { duration: Duration::from_secs(1), ..record("g-b", "5", "", left.clone()) }], t0);
        assert_eq!(peers.released_claims(t0), left);
        assert!(peers.live("g-a", t0).is_empty());
        assert_eq!(peers.released_claims(t0 + Duration::from_secs(1)), Ranges::default());
    }

    /// A peer is live for its lease duration after we saw its record change, whatever it says
    /// of the time; a released lease (no holder) is not a member; our own lease is not a peer.
    #[test]
    fn peers_expire_on_our_clock_from_when_we_saw_them_change() {
        let t0 = Instant::now();
        let mut peers = Peers::new(Duration::from_secs(15));
        peers.observe(
            vec![record("g-b", "1", "b", all()), record("g-c", "7", "", all()), record("g-a", "3", "a", all())],
            t0,
        );
        assert_eq!(peers.live("g-a", t0).keys().collect::<Vec<_>>(), ["b"]);
        let later = t0 + Duration::from_secs(14);
        peers.observe(vec![record("g-b", "1", "b", all())], later);
        assert!(peers.live("g-a", later).contains_key("b"));
        assert_eq!(peers.next_expiry("g-a", later), Some(t0 + Duration::from_secs(15)));
        let expired = t0 + Duration::from_secs(15);
        assert!(peers.live("g-a", expired).is_empty(), "unchanged for its duration");
        // A change restarts the count.
        peers.observe(vec![record("g-b", "2", "b", Ranges::default())], expired);
        assert_eq!(peers.live("g-a", expired + Duration::from_secs(14))["b"], Ranges::default());
    }

    /// A Lease deleted while its member lives (by hand, by a cleanup job) is not a member that
    /// let go: it stays live, with its claim, for its duration from when it last changed.
    #[test]
    fn a_deleted_lease_stays_live_a_lease_duration_from_its_deletion() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut peers = Peers::new(s(15));
        let half = r(&[(0, SPACE / 2)]);
        peers.observe(vec![record("g-b", "1", "b", half.clone()), record("g-c", "2", "c", all())], t0);
        let later = t0 + s(10);
        // g-b is gone from the list (or the watch's store): b may have renewed it since we
        // saw it, so it is live for a lease duration from now, and nothing grows meanwhile.
        peers.observe(vec![record("g-c", "3", "c", Ranges::default())], later);
        assert_eq!(peers.live("g-a", later).get("b"), Some(&half), "still live, still claiming");
        assert!(peers.frozen("g-a", later));
        assert_eq!(peers.next_expiry("g-a", later), Some(later + s(15)));
        let d = decide("a", &peers.live("g-a", later), &peers.released_claims(later), &all(), &all(), true);
        assert!(d.allowed.intersect(&half).is_empty(), "its claim is not taken: {d:?}");
        let seen_again = later + s(14);
        peers.observe(vec![record("g-c", "3", "c", Ranges::default())], seen_again);
        assert!(peers.live("g-a", seen_again).contains_key("b"), "still since the deletion was first seen");
        let expired = later + s(15);
        peers.observe(vec![record("g-c", "3", "c", Ranges::default())], expired);
        assert!(!peers.live("g-a", expired).contains_key("b"));
        assert!(!peers.frozen("g-a", expired));
        // Recreated by its member: live again from then.
        peers.observe(vec![record("g-b", "9", "b", half.clone())], expired);
        assert_eq!(peers.live("g-a", expired).get("b"), Some(&half));
        // A released Lease, deleted: its member may have come back unseen; our duration.
        let mut peers = Peers::new(s(15));
        peers.observe(vec![Record { duration: s(1), ..record("g-d", "4", "", half.clone()) }], t0);
        peers.observe(vec![], t0 + s(5));
        assert!(peers.frozen("g-a", t0 + s(19)) && !peers.frozen("g-a", t0 + s(20)));
    }

    /// A Lease of another name naming this member's identity (its predecessor's, under the name
    /// an older version gave it, or a twin's) is another holder's: its claim counts. Only the
    /// member's own Lease is left out.
    #[test]
    fn a_lease_naming_us_under_another_name_is_a_peer() {
        let t0 = Instant::now();
        let mut peers = Peers::new(Duration::from_secs(15));
        let half = r(&[(0, SPACE / 2)]);
        peers.observe(vec![record("g-a", "1", "a", all()), record("g-a-old", "2", "a", half.clone())], t0);
        assert_eq!(peers.live("g-a", t0).get("a"), Some(&half));
        let d = decide("a", &peers.live("g-a", t0), &peers.released_claims(t0), &all(), &Ranges::default(), true);
        assert_eq!(d.allowed, all().minus(&half));
        assert_eq!(peers.next_expiry("g-a", t0), Some(t0 + Duration::from_secs(15)));
    }

    /// Two Leases with one holder claim the union of their claims.
    #[test]
    fn two_leases_of_one_holder_claim_both() {
        let t0 = Instant::now();
        let mut peers = Peers::new(Duration::from_secs(15));
        let (low, high) = (r(&[(0, 100)]), r(&[(100, 200)]));
        peers.observe(vec![record("g-b", "1", "b", low.clone()), record("old-b", "2", "b", high.clone())], t0);
        assert_eq!(peers.live("g-a", t0)["b"], low.union(&high));
    }

    /// A decision from the watch keeps what is held and drops what it no longer allows, but
    /// never adds: a list must confirm what it would add. A list's decision is taken whole.
    #[test]
    fn a_watch_never_grows_a_share_and_a_list_may() {
        let held = r(&[(0, 100)]);
        let decision = |allowed: Ranges| Decision { target: all(), allowed, claim: all() };
        let grows = decision(r(&[(50, 200)]));
        assert_eq!(confirmed(&grows, &held, Source::Watch, false), (r(&[(50, 100)]), true));
        assert_eq!(confirmed(&grows, &held, Source::List, false), (r(&[(50, 200)]), false));
        let shrinks = decision(r(&[(0, 40)]));
        assert_eq!(confirmed(&shrinks, &held, Source::Watch, false), (r(&[(0, 40)]), false));
        // Nothing held (joining, or after the lead ended): whatever the watch allows waits.
        assert_eq!(confirmed(&shrinks, &Ranges::default(), Source::Watch, false), (Ranges::default(), true));
        assert_eq!(confirmed(&decision(Ranges::default()), &held, Source::Watch, false), (Ranges::default(), false));
        // While a deleted Lease may be held, nothing grows, whatever the view.
        assert_eq!(confirmed(&grows, &held, Source::List, true), (r(&[(50, 100)]), false));
        assert_eq!(confirmed(&shrinks, &held, Source::List, true), (r(&[(0, 40)]), false));
    }

    /// The watch is fresh while it shows a write of this member's sent within the bound, and
    /// not before it reached the last list's version; a version it cannot compare makes it
    /// stale.
    #[test]
    fn a_watch_is_fresh_while_it_shows_this_members_recent_writes() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let bound = s(5);
        let at = |v: u64| move |x: &str| x.parse::<u64>().ok().map(|x| x <= v);
        let mut f = Freshness::default();
        assert!(!f.fresh(t0, bound, at(100)), "no write shown yet");
        f.wrote("10".into(), t0);
        assert!(!f.fresh(t0, bound, at(9)), "the write not shown yet");
        assert!(f.fresh(t0 + s(1), bound, at(10)));
        // The next renewals are not shown: fresh until the last one shown is `bound` old.
        f.wrote("12".into(), t0 + s(2));
        f.wrote("14".into(), t0 + s(4));
        assert!(f.fresh(t0 + s(4), bound, at(10)));
        assert!(!f.fresh(t0 + s(5), bound, at(11)), "stalled since the write sent at t0");
        assert!(f.fresh(t0 + s(5), bound, at(12)), "caught up to the write sent at t0 + 2 s");
        // A list at version 20: not fresh until the watch reached it.
        f.listed(Some("20".into()));
        assert!(!f.fresh(t0 + s(5), bound, at(19)));
        assert!(f.fresh(t0 + s(5), bound, at(20)));
        assert!(f.fresh(t0 + s(5), bound, at(19)), "reached once is enough");
        // A list without a version: nothing reaches it until the next list.
        f.listed(None);
        assert!(!f.fresh(t0 + s(5), bound, at(1000)));
        f.listed(Some("21".into()));
        assert!(f.fresh(t0 + s(5), bound, at(21)));
        f.wrote("x".into(), t0 + s(6));
        assert!(!f.fresh(t0 + s(6), bound, at(100)), "a version that cannot be compared");
    }
}
