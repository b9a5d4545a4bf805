//! Leases (coordination.k8s.io/v1): one leader among replicas, and shard groups. Above the
//! client (it reads and writes a `Lease` through `wire/`) and above the watcher (a shard
//! group's members watch each other's Leases with a `Watcher<Lease>`); the watcher knows
//! nothing of it.
//!
//! - [`decide`]: the one pure decision every renewal goes through (what this replica remembers +
//!   what it just learned + the time → what to send next, and whether it leads). No I/O, no
//!   clock, no locks: tested with plain values and an injected clock, like `machine/`.
//! - [`elector`]: [`LeaderElector`], the thread that performs those decisions over HTTP and the
//!   handle users hold (`is_leader`, `changes`, `wait_until_leader`, `stop`).
//! - [`group`]: [`ShardGroup`](crate::ShardGroup), a member of a shard group: its own Lease on the
//!   elector's thread, a watch of the group's Leases to learn of the others, and a list of them
//!   before it grows; [`assign`] (each live member's share: consistent hashing) and
//!   [`handover`] (what a member may hold and claim now, and when its watch is enough, pure)
//!   decide.
//!
//! The protocol (client-go's `tools/leaderelection`, what we took and what we changed) is in
//! docs/protocol.md §13; ARCHITECTURE.md walks through one takeover.

pub(crate) mod assign;
pub(crate) mod decide;
pub(crate) mod elector;
pub(crate) mod group;
pub(crate) mod handover;
pub(crate) mod seen;

#[cfg(test)]
mod explore;
#[cfg(test)]
mod group_model;
#[cfg(test)]
mod model;

use std::time::Duration;

use crate::error::{Error, Result};

/// The label that names a shard group member's group on its Lease (an elector's Lease never
/// carries it).
pub(crate) const GROUP_LABEL: &str = "kube-watcher.io/shard-group";

/// The annotation every write of a Lease of ours carries: the writing process's token and the
/// `renewTime` it wrote (`decide.rs`, "Whose record it is").
pub(crate) const MARK_ANNOTATION: &str = "kube-watcher.io/incarnation";

/// How many hex digits end a member's Lease name ([`member_lease`]): two of the group's
/// length, fourteen of the hash.
const NAME_HASH_DIGITS: usize = 16;

/// client-go's `JitterFactor`: the renew deadline must exceed 1.2 retry periods.
const JITTER_FACTOR: f64 = 1.2;

/// How long a lease lasts, how long its holder keeps trying to renew it, and how often
/// replicas act: the three durations of client-go's leader election.
///
/// ```
/// use std::time::Duration;
/// use kube_watcher::LeaseTimings;
///
/// let timings = LeaseTimings::default();
/// assert_eq!(timings.lease_duration, Duration::from_secs(15));
/// assert_eq!(timings.renew_deadline, Duration::from_secs(10));
/// assert_eq!(timings.retry_period, Duration::from_secs(2));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    /// How long after this replica last saw the lease change a standby may take it: written
    /// into the lease as `leaseDurationSeconds`, so it must be a whole number of seconds (at
    /// least 1). Defaults to 15 s (Kubernetes components' default).
    pub lease_duration: Duration,
    /// How long the leader keeps leading without a successful renewal, counted from when it
    /// sent the last one that succeeded; past it, it reports [`Leadership::Lost`]. Must be
    /// shorter than `lease_duration`, so the leader knows it lost before anyone can take the
    /// lease. Defaults to 10 s.
    pub renew_deadline: Duration,
    /// How often the leader renews and a standby reads the lease. Must be shorter than
    /// `renew_deadline` / 1.2 (client-go's rule). Defaults to 2 s.
    pub retry_period: Duration,
}

impl Default for LeaseTimings {
    fn default() -> Self {
        LeaseTimings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaseTimings {
    /// Checks client-go's rules (lease duration > renew deadline > 1.2 × retry period > 0)
    /// and that the lease duration is a whole number of seconds that fits the lease.
    pub(crate) fn validate(&self) -> Result<()> {
        let field = |name: &str, message: String| Err(Error::config(&format!("LeaseTimings::{name}"), message));
        if self.retry_period.is_zero() {
            return field("retry_period", "must be greater than zero".into());
        }
        if self.lease_duration.subsec_nanos() != 0 || self.lease_duration.is_zero() {
            return field(
                "lease_duration",
                format!(
                    "{:?}: must be a whole number of seconds, at least 1 (the lease stores leaseDurationSeconds)",
                    self.lease_duration
                ),
            );
        }
        if self.lease_duration.as_secs() > i32::MAX as u64 {
            return field(
                "lease_duration",
                format!("{:?}: larger than leaseDurationSeconds holds", self.lease_duration),
            );
        }
        if self.lease_duration <= self.renew_deadline {
            return field(
                "renew_deadline",
                format!("{:?} must be shorter than lease_duration ({:?})", self.renew_deadline, self.lease_duration),
            );
        }
        if self.renew_deadline.as_secs_f64() <= self.retry_period.as_secs_f64() * JITTER_FACTOR {
            return field(
                "renew_deadline",
                format!("{:?} must be longer than 1.2 × retry_period ({:?})", self.renew_deadline, self.retry_period),
            );
        }
        Ok(())
    }

    /// `leaseDurationSeconds`: validated to fit.
    pub(crate) fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// Checks a Lease name, or a part of one, as kube-apiserver checks object names: an RFC 1123
/// subdomain (dot-separated parts of lower-case letters, digits and '-', each starting and
/// ending with a letter or digit), here at most `max` characters. Two such parts joined by a
/// '-' make one too.
fn check_name(field: &str, value: &str, max: usize) -> Result<()> {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let part = |p: &str| {
        !p.is_empty() && p.chars().all(|c| alnum(c) || c == '-') && p.starts_with(alnum) && p.ends_with(alnum)
    };
    if !value.is_empty() && value.len() <= max && value.split('.').all(part) {
        return Ok(());
    }
    Err(Error::config(
        field,
        format!(
            "{value:?}: must be 1 to {max} characters, dot-separated parts of lower-case letters, digits and '-', each starting and ending with a letter or digit (it names a Lease; the API server would refuse it)"
        ),
    ))
}

/// The Lease of member `identity` of shard group `group`: `<group>-<identity>-<tail>`, where the
/// tail is 16 hex digits: two of the group's length (at most 63), then fourteen of FNV-1a 64
/// over `<group>/<identity>` (no group holds a '/'). The identity is cut short (at a letter or
/// digit) when the whole would pass 253 characters.
///
/// A name that was not cut short gives back its group and identity (the tail's length of the
/// group says where the group ends), so two members' names differ whenever their groups or
/// identities do, whatever '-' either holds: member `b-c` of group `a` (`a-b-c-01…`) and member
/// `c` of group `a-b` (`a-b-c-03…`) never share a name. Identities long enough to be cut short
/// are told apart by the hash of the whole (up to a 56-bit collision; with identities of up to
/// 253 characters no 253-character scheme can do better for all of them). An elector's Lease,
/// whose name its user picks, could match one only by copying such a tail; the group label
/// tells them apart even then (docs/protocol.md §13.4, "Lease names").
///
/// `group` (at most 63 characters) and `identity` are RFC 1123 subdomains, checked by
/// `ShardGroup::join`, so the name is one too.
pub(crate) fn member_lease(group: &str, identity: &str) -> String {
    let hash = crate::shard::Shard::hash(&format!("{group}/{identity}")) & ((1 << 56) - 1);
    // `<group>-` + `-<tail>` around the identity.
    let room = 253usize.saturating_sub(group.len() + 2 + NAME_HASH_DIGITS);
    // ASCII (checked), so any byte is a boundary; a cut part ends with a letter or digit.
    let kept = identity[..identity.len().min(room)].trim_end_matches(['-', '.']);
    format!("{group}-{kept}-{:02x}{hash:014x}", group.len())
}

/// A token no other process draws: 128 random bits, in hex. From the operating system; should
/// that fail, from the clock, the process and the thread through std's randomly keyed hasher.
pub(crate) fn incarnation() -> String {
    use rand::TryRngCore as _;
    let mut os = rand::rngs::OsRng;
    let bits = match (os.try_next_u64(), os.try_next_u64()) {
        (Ok(a), Ok(b)) => (u128::from(a) << 64) | u128::from(b),
        _ => {
            use std::hash::BuildHasher as _;
            let half = |salt: u8| {
                let seed = (salt, std::time::SystemTime::now(), std::process::id(), std::thread::current().id());
                std::collections::hash_map::RandomState::new().hash_one(seed)
            };
            (u128::from(half(0)) << 64) | u128::from(half(1))
        }
    };
    format!("{bits:032x}")
}

/// A change of leadership, as [`LeaderElector::changes`](crate::LeaderElector::changes) reports
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Leadership {
    /// This replica now holds the lease: it leads until it reports `Lost`.
    Acquired,
    /// This replica no longer leads: it could not renew within the renew deadline, another
    /// replica holds the lease, or it was stopped. Stop acting as the leader at once.
    Lost,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn timings(lease: f64, renew: f64, retry: f64) -> LeaseTimings {
        LeaseTimings { lease_duration: secs(lease), renew_deadline: secs(renew), retry_period: secs(retry) }
    }

    #[test]
    fn the_public_types_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<crate::LeaderElector>();
        assert_send_sync::<crate::ShardGroup>();
        assert_send_sync::<crate::GroupChange>();
        assert_send_sync::<LeaseTimings>();
        assert_send_sync::<Leadership>();
    }

    #[test]
    fn the_defaults_are_kubernetes_components_and_pass() {
        assert_eq!(LeaseTimings::default(), timings(15.0, 10.0, 2.0));
        LeaseTimings::default().validate().unwrap();
        assert_eq!(LeaseTimings::default().lease_seconds(), 15);
    }

    /// Names kube-apiserver refuses (as tests/real checks for the same rule) are refused
    /// before any request.
    #[test]
    fn lease_names_are_rfc_1123_subdomains() {
        for good in ["a", "pod-indexer", "web-0", "a.b", "a-b.c-d.e", "0"] {
            check_name("identity", good, 253).unwrap();
        }
        for bad in ["", "a..b", ".a", "a.", "-a", "a-", "a.-b", "a-.b", "A", "a_b", "a b", "ä"] {
            let e = check_name("identity", bad, 253).unwrap_err().to_string();
            assert!(e.contains("identity") && e.contains(&format!("{bad:?}")), "{bad:?}: {e}");
        }
        assert!(check_name("group", &"a".repeat(64), 63).is_err());
        check_name("group", &"a".repeat(63), 63).unwrap();
    }

    /// Member names never collide, whatever '-' the group or identity holds, and stay valid
    /// Lease names for identities of any allowed length.
    #[test]
    fn member_lease_names_never_collide_and_stay_valid() {
        let a = member_lease("a-b", "c");
        let b = member_lease("a", "b-c");
        assert!(a.starts_with("a-b-c-03") && b.starts_with("a-b-c-01") && a != b, "{a} {b}");
        assert_eq!(a.len(), "a-b-c-".len() + 16);
        assert_eq!(member_lease("pods", "web-0"), member_lease("pods", "web-0"), "stable");
        // The tail is the group's length, then FNV-1a 64 of "pods/web-0" cut to 56 bits: the
        // same in every version and process.
        let hash = crate::shard::Shard::hash("pods/web-0") & ((1 << 56) - 1);
        assert_eq!(member_lease("pods", "web-0"), format!("pods-web-0-04{hash:014x}"));
        for (group, identity) in [
            ("g".repeat(63), "i".repeat(253)),
            ("g".repeat(63), format!("{}.{}", "a".repeat(171), "b".repeat(81))),
            ("g".to_owned(), format!("{}-{}", "a".repeat(234), "b".repeat(18))),
        ] {
            let name = member_lease(&group, &identity);
            check_name("lease", &name, 253).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_ne!(name, member_lease(&group, &identity[..identity.len() - 1]), "cut short, still apart");
        }
    }

    /// Every valid group and identity of up to four characters over `a`, `-` and `.` (where
    /// collisions would hide: names that '-' and '.' can split in several ways), each pair's
    /// name given back by reading the group's length off its tail: no two pairs share a name,
    /// by construction rather than by the hash.
    #[test]
    fn member_lease_names_give_back_their_group_and_identity() {
        let mut words = vec![String::new()];
        for _ in 0..4 {
            let longer: Vec<String> = words.iter().flat_map(|w| ["a", "-", "."].map(|c| format!("{w}{c}"))).collect();
            words.extend(longer);
        }
        words.sort();
        words.dedup();
        words.retain(|w| check_name("name", w, 63).is_ok());
        assert!(words.len() > 10, "{words:?}");
        let mut seen = std::collections::BTreeSet::new();
        for group in &words {
            for identity in &words {
                let name = member_lease(group, identity);
                check_name("lease", &name, 253).unwrap_or_else(|e| panic!("{name}: {e}"));
                let (front, tail) = name.split_at(name.len() - NAME_HASH_DIGITS);
                let length = usize::from_str_radix(&tail[..2], 16).unwrap();
                assert_eq!((&front[..length], &front[length + 1..front.len() - 1]), (&group[..], &identity[..]));
                assert!(seen.insert(name), "{group} {identity}");
            }
        }
    }

    #[test]
    fn incarnations_differ() {
        let (a, b) = (incarnation(), incarnation());
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
    }

    #[test]
    fn validation_names_the_field_at_fault() {
        let cases = [
            (timings(10.0, 10.0, 2.0), "LeaseTimings::renew_deadline: 10s must be shorter than lease_duration"),
            (timings(15.0, 2.4, 2.0), "LeaseTimings::renew_deadline: 2.4s must be longer than 1.2 × retry_period"),
            (timings(15.0, 10.0, 0.0), "LeaseTimings::retry_period: must be greater than zero"),
            (timings(1.5, 1.0, 0.5), "LeaseTimings::lease_duration: 1.5s: must be a whole number of seconds"),
            (timings(0.0, 0.0, 0.0), "LeaseTimings::retry_period"),
            (timings(1e10, 10.0, 2.0), "LeaseTimings::lease_duration: 10000000000s: larger than"),
        ];
        for (t, want) in cases {
            let e = t.validate().unwrap_err().to_string();
            assert!(e.contains(want), "{t:?}: {e}");
        }
        timings(1.0, 0.5, 0.4).validate().unwrap();
    }
}
