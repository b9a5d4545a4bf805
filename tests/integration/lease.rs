//! `LeaderElector` against the fake server: one leader, handover on stop, takeover from a
//! crashed holder, the 409 race, a holder that cannot renew, and every thread ending.
#![cfg(feature = "testing")]

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube_watcher::testing::{FakeApiServer, Fault, Match};
use kube_watcher::{Api, Client, LeaderElector, Leadership, LeaseTimings};

const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/apps/leases/lock";

fn leases(server: &FakeApiServer) -> Api<Lease> {
    Api::namespaced(Client::from_url(&server.url()).unwrap(), "apps")
}

/// A quick retry period for quick handovers; a renew deadline long enough that a busy 2-core
/// machine does not miss a renewal (the tests that wait for it wait 5 s).
fn timings() -> LeaseTimings {
    LeaseTimings {
        lease_duration: Duration::from_secs(8),
        renew_deadline: Duration::from_secs(5),
        retry_period: ms(100),
    }
}

fn start(server: &FakeApiServer, identity: &str) -> LeaderElector {
    LeaderElector::start(leases(server), "lock", identity, timings()).unwrap()
}

fn spec(server: &FakeApiServer) -> LeaseSpec {
    server.get::<Lease>(Some("apps"), "lock").unwrap().spec.unwrap()
}

fn next(e: &LeaderElector) -> Leadership {
    e.changes().recv_timeout(WAIT).unwrap()
}

#[test]
fn a_lone_replica_creates_the_lease_leads_and_releases_it_on_stop() {
    let server = FakeApiServer::start();
    let a = start(&server, "a");
    assert!(a.wait_until_leader(WAIT));
    assert!(a.is_leader());
    assert_eq!(next(&a), Leadership::Acquired);
    let held = spec(&server);
    assert_eq!(held.holder_identity.as_deref(), Some("a"));
    assert_eq!(held.lease_duration_seconds, Some(8));
    assert_eq!(held.lease_transitions, Some(0));
    assert_eq!(held.acquire_time, held.renew_time, "a new lease is acquired when first renewed");
    // It renews: renewTime moves, acquireTime stays.
    eventually("a renewal", || spec(&server).renew_time != held.renew_time);
    assert_eq!(spec(&server).acquire_time, held.acquire_time);

    a.stop();
    assert!(!a.is_leader());
    assert_eq!(next(&a), Leadership::Lost);
    assert!(a.changes().recv_timeout(WAIT).is_err(), "disconnected once stopped");
    let released = spec(&server);
    assert_eq!(released.holder_identity.as_deref(), Some(""), "client-go's release");
    assert_eq!(released.lease_duration_seconds, Some(1));
    assert_eq!(released.lease_transitions, Some(0));
    assert!(released.renew_time > held.renew_time);
    assert!(!a.wait_until_leader(ms(10)), "a stopped elector never leads");
}

#[test]
fn stop_hands_the_lease_to_the_standby() {
    let server = FakeApiServer::start();
    let a = start(&server, "a");
    assert!(a.wait_until_leader(WAIT));
    let b = start(&server, "b");
    // b reads the lease at least twice and stays a standby while a renews.
    server.clear_requests();
    eventually("b's reads", || server.requests().iter().filter(|r| r.method == "GET").count() >= 2);
    assert!(!b.is_leader());
    assert!(b.changes().try_recv().is_err());
    let stopped = Instant::now();
    a.stop();
    assert!(b.wait_until_leader(WAIT));
    println!("takeover after stop: {:?}", stopped.elapsed());
    assert_eq!(next(&b), Leadership::Acquired);
    let taken = spec(&server);
    assert_eq!(taken.holder_identity.as_deref(), Some("b"));
    assert_eq!(taken.lease_transitions, Some(1));
    assert_eq!(taken.lease_duration_seconds, Some(8));
    assert_eq!(taken.acquire_time, taken.renew_time);
}

/// A holder that stopped renewing without releasing (a crash, as a client-go replica's
/// record): taken once it has not changed for its lease duration.
#[test]
fn a_crashed_holders_lease_is_taken_after_its_duration() {
    let server = FakeApiServer::start();
    let mut ghost = Lease::default();
    ghost.metadata.name = Some("lock".into());
    ghost.metadata.namespace = Some("apps".into());
    ghost.spec = Some(LeaseSpec {
        holder_identity: Some("crashed".into()),
        lease_duration_seconds: Some(1),
        // Renewed "in the future" by a skewed clock: irrelevant, only its change counts.
        renew_time: Some(MicroTime("2099-01-01T00:00:00Z".parse().unwrap())),
        acquire_time: Some(MicroTime("2099-01-01T00:00:00Z".parse().unwrap())),
        lease_transitions: Some(7),
        ..LeaseSpec::default()
    });
    server.create(&ghost).unwrap();
    let b = start(&server, "b");
    let started = Instant::now();
    assert!(b.wait_until_leader(WAIT));
    println!("takeover after a crash (lease duration 1 s): {:?}", started.elapsed());
    let taken = spec(&server);
    assert_eq!(taken.holder_identity.as_deref(), Some("b"));
    assert_eq!(taken.lease_transitions, Some(8));
}

/// A client-go replica (here: the test) takes the lease while we lead (an operator's edit, or
/// our long pause): our renewal is refused with 409, we read, and report `Lost`; we never
/// overwrite its record, and take the lease back only after it expires in our eyes.
#[test]
fn a_renewal_refused_with_409_reads_again_and_yields() {
    let server = FakeApiServer::start();
    let a = start(&server, "a");
    assert!(a.wait_until_leader(WAIT));
    assert_eq!(next(&a), Leadership::Acquired);
    let api = leases(&server);
    let mut theirs = api.get("lock").unwrap();
    let spec = theirs.spec.as_mut().unwrap();
    spec.holder_identity = Some("client-go".into());
    spec.lease_duration_seconds = Some(3600);
    spec.lease_transitions = Some(1);
    api.replace(&theirs).unwrap();
    assert_eq!(next(&a), Leadership::Lost);
    assert!(!a.is_leader());
    server.clear_requests();
    eventually("a's reads", || server.requests().iter().filter(|r| r.method == "GET").count() >= 3);
    assert!(server.requests().iter().all(|r| r.method == "GET"), "only reads: {:?}", server.requests());
    assert_eq!(api.get("lock").unwrap().spec.unwrap().holder_identity.as_deref(), Some("client-go"));
}

/// A leader whose renewals fail reports `Lost` at the renew deadline, before the lease could
/// expire for anyone (the last renewal is still on the server).
#[test]
fn a_leader_that_cannot_renew_says_so_before_the_lease_expires() {
    let server = FakeApiServer::start();
    let a = start(&server, "a");
    assert!(a.wait_until_leader(WAIT));
    assert_eq!(next(&a), Leadership::Acquired);
    for _ in 0..1000 {
        let message = "etcd leader changed".to_owned();
        server.push_fault(
            Match::Path(PATH.into()),
            Fault::Status { code: 500, reason: "InternalError".into(), message, retry_after: None },
        );
    }
    let last = spec(&server).renew_time;
    assert_eq!(next(&a), Leadership::Lost);
    assert!(!a.is_leader());
    assert_eq!(spec(&server).renew_time, last, "not renewed since");
    server.clear_faults();
    // Once the server answers again, the lease (still ours) is renewed and we lead again.
    assert_eq!(next(&a), Leadership::Acquired);
}

/// A renewal that hangs (the server never answers): the request is cut at the renew deadline
/// and `Lost` is reported then, not when some HTTP timeout ends.
#[test]
fn a_hanging_renewal_is_cut_at_the_renew_deadline() {
    let server = FakeApiServer::start();
    let a = start(&server, "a");
    assert!(a.wait_until_leader(WAIT));
    assert_eq!(next(&a), Leadership::Acquired);
    let hold = server.hold(Match::Path(PATH.into()));
    assert!(hold.wait_until_held(WAIT));
    assert_eq!(next(&a), Leadership::Lost);
    drop(hold);
    a.stop();
}

/// Replicas racing for a free lease: exactly one wins (each write carries the resourceVersion
/// its replica read, so the losers' are refused), and at no moment seen here do two consider
/// themselves leader; each stop hands over to one survivor.
#[test]
fn replicas_racing_for_the_lease_elect_one() {
    let server = FakeApiServer::start();
    let electors: Vec<LeaderElector> = (0..4).map(|i| start(&server, &format!("r{i}"))).collect();
    let deadline = Instant::now() + WAIT;
    loop {
        let leaders = electors.iter().filter(|e| e.is_leader()).count();
        assert!(leaders <= 1, "{leaders} leaders at once");
        if leaders == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "nobody leads");
        std::thread::sleep(ms(5));
    }
    for _ in 0..50 {
        assert_eq!(electors.iter().filter(|e| e.is_leader()).count(), 1);
        std::thread::sleep(ms(10));
    }
    let holder = spec(&server).holder_identity.unwrap();
    let leader = electors.iter().find(|e| e.is_leader()).unwrap();
    assert_eq!(leader.identity(), holder);
    // Each stop hands over to a survivor, until none is left.
    let mut electors = electors;
    while let Some(i) = electors.iter().position(LeaderElector::is_leader) {
        electors.remove(i).stop();
        if electors.is_empty() {
            break;
        }
        let deadline = Instant::now() + WAIT;
        while electors.iter().filter(|e| e.is_leader()).count() != 1 {
            assert!(electors.iter().filter(|e| e.is_leader()).count() <= 1);
            assert!(Instant::now() < deadline, "no takeover");
            std::thread::sleep(ms(5));
        }
    }
    assert_eq!(spec(&server).holder_identity.as_deref(), Some(""));
}

/// `stop` ends the thread (the changes channel disconnects) promptly, leader or standby, and a
/// request in flight is cut.
#[test]
fn every_thread_ends_after_stop() {
    let server = FakeApiServer::start();
    let a = start(&server, "a");
    assert!(a.wait_until_leader(WAIT));
    let b = start(&server, "b");
    let c = start(&server, "c");
    let hold = server.hold(Match::Path(PATH.into()));
    assert!(hold.wait_until_held(WAIT));
    for e in [a, b, c] {
        let rx = e.changes().clone();
        let started = Instant::now();
        drop(e);
        println!("stopped in {:?}", started.elapsed());
        while rx.recv_timeout(WAIT).is_ok() {}
        assert!(rx.recv_timeout(ms(0)).unwrap_err().is_disconnected());
    }
    drop(hold);
}

#[test]
fn bad_settings_are_refused_naming_the_field() {
    let server = FakeApiServer::start();
    let bad = LeaseTimings { renew_deadline: Duration::from_secs(20), ..LeaseTimings::default() };
    let e = LeaderElector::start(leases(&server), "lock", "a", bad).unwrap_err();
    assert!(e.to_string().contains("LeaseTimings::renew_deadline"), "{e}");
    let e = LeaderElector::start(leases(&server), "lock", "", LeaseTimings::default()).unwrap_err();
    assert!(e.to_string().contains("identity"), "{e}");
    let all = Api::<Lease>::all(Client::from_url(&server.url()).unwrap());
    let e = LeaderElector::start(all, "lock", "a", LeaseTimings::default()).unwrap_err();
    assert!(e.to_string().contains("Api::namespaced"), "{e}");
    // A name the API server would refuse (422) is refused at once, not retried forever.
    for name in ["", "a..b", "Lock", "lock-"] {
        let e = LeaderElector::start(leases(&server), name, "a", LeaseTimings::default()).unwrap_err();
        assert!(matches!(e, kube_watcher::Error::Config { .. }) && e.to_string().contains(&format!("{name:?}")), "{e}");
    }
}

/// Two electors with one identity (a copy-pasted name, `$HOSTNAME` shared in a container):
/// each would take the other's renewals for its own and both would lead. The newcomer finds
/// its identity's Lease renewed by someone else within a retry period, says so (an error in
/// the log) and stays a standby; it takes over once the first lets go.
#[test]
fn two_electors_with_one_identity_do_not_both_lead() {
    let server = FakeApiServer::start();
    let first = start(&server, "same");
    assert!(first.wait_until_leader(WAIT));
    let second = start(&server, "same");
    // Many of the first's renewals later (each a chance for the second to take the Lease).
    let renewals = |n: i32| {
        let since = spec(&server).renew_time.unwrap().0;
        eventually("the first renews", || {
            assert!(!second.is_leader(), "both lead");
            spec(&server).renew_time.unwrap().0.as_millisecond() >= since.as_millisecond() + i64::from(n) * 100
        });
    };
    renewals(20);
    assert!(first.is_leader() && !second.is_leader());
    first.stop();
    assert!(second.wait_until_leader(WAIT), "the second takes over the released Lease");
}

/// Leases are listed and watched like any type, in protobuf (the fake answers it for Leases)
/// and in JSON: a watcher follows the election, MicroTimes included.
#[test]
fn a_watcher_of_leases_follows_the_election_in_both_encodings() {
    use kube_watcher::{Config, ListParams, ObjectRef, Watcher, WireFormat};
    for wire in [WireFormat::Protobuf, WireFormat::Json] {
        let server = FakeApiServer::start();
        let w = Watcher::new(leases(&server), Config::default().wire_format(wire)).unwrap();
        collect_until(&w, |seen| seen.last().is_some_and(|s| s == "InitDone"));
        let a = start(&server, "a");
        assert!(a.wait_until_leader(WAIT));
        let key = ObjectRef::new("lock").within("apps");
        let seen = |w: &Watcher<Lease>| w.store().get(&key).and_then(|l| l.spec.clone()).unwrap_or_default();
        eventually("the watcher sees a hold the lease", || seen(&w).holder_identity.as_deref() == Some("a"));
        a.stop();
        eventually("the watcher sees the release", || seen(&w).holder_identity.as_deref() == Some(""));
        assert_eq!(seen(&w), spec(&server), "{wire:?}: renewTime and acquireTime to the microsecond");
        assert_eq!(w.stats().wire_format, Some(wire));
        let listed = leases(&server).list(&ListParams::default()).unwrap();
        assert_eq!(listed.items.len(), 1);
        assert_eq!(listed.items[0].spec, Some(spec(&server)));
    }
}

/// Holds the next PUT of the Lease `lock` (a renewal, a takeover) until the hold is dropped:
/// its sender waits, and leads, until its renew deadline.
fn hold_next_write(server: &FakeApiServer) -> kube_watcher::testing::Hold {
    let hold = server.hold(Match::Method { method: "PUT".into(), path: PATH.into() });
    assert!(hold.wait_until_held(WAIT), "a write to hold");
    hold
}

/// Samples `a` and `b` until `done`, checking at every sample that they do not both lead.
fn never_both_until(what: &str, a: &LeaderElector, b: &LeaderElector, mut done: impl FnMut() -> bool) {
    eventually(what, || {
        let both = a.is_leader() && b.is_leader();
        assert!(!both, "{} and {} both lead", a.identity(), b.identity());
        done()
    });
}

/// A second process started under the leader's identity (a restarted pod whose old process
/// is not dead yet, two containers given one HOSTNAME) while the leader is one renewal late:
/// it waits out the leader's whole lease, as for anyone's, and never leads beside it. It took
/// the Lease one retry period after it first read it before, and both led until the first's
/// renew deadline.
#[test]
fn a_second_process_with_the_leaders_identity_never_leads_beside_it() {
    let server = FakeApiServer::start();
    let first = start(&server, "same");
    assert!(first.wait_until_leader(WAIT));
    assert_eq!(next(&first), Leadership::Acquired);
    // The first's next renewal hangs: it leads on until its renew deadline (5 s).
    let hold = hold_next_write(&server);
    let second = start(&server, "same");
    never_both_until("the late leader reaches its renew deadline", &first, &second, || {
        first.changes().try_recv() == Ok(Leadership::Lost)
    });
    assert!(!second.is_leader());
    drop(hold);
    // The first leads again (its own record, renewed); the second still stands by, and takes
    // over once the first lets go.
    never_both_until("the first leads again", &first, &second, || first.is_leader());
    first.stop();
    assert!(second.wait_until_leader(WAIT), "the second takes the released Lease");
}

/// A Lease deleted while its leader leads (by hand, by a cleanup job) is not recreated by a
/// standby that saw it held until that holder's lease has run out in its eyes: the leader,
/// which learns of the deletion only at its next write, may lead until its renew deadline.
/// The standby created it at once before, and both led.
#[test]
fn a_deleted_lease_is_not_recreated_while_its_holder_may_lead() {
    let server = FakeApiServer::start();
    let a = start(&server, "a");
    assert!(a.wait_until_leader(WAIT));
    assert_eq!(next(&a), Leadership::Acquired);
    let b = start(&server, "b");
    server.clear_requests();
    eventually("b reads the lease", || server.requests().iter().filter(|r| r.method == "GET").count() >= 2);
    // a's next renewal hangs; the Lease goes.
    let hold = hold_next_write(&server);
    server.delete::<Lease>(Some("apps"), "lock").unwrap();
    never_both_until("a reaches its renew deadline", &a, &b, || a.changes().try_recv() == Ok(Leadership::Lost));
    // a creates its own Lease again at once (whoever saw it waits out its lease); b did not.
    let holder = server.get::<Lease>(Some("apps"), "lock").and_then(|l| l.spec?.holder_identity);
    assert!(holder.is_none() || holder.as_deref() == Some("a"), "{holder:?}");
    drop(hold);
    // a creates its Lease again (it was its own), or b does once a's expired: one leader.
    never_both_until("someone leads again", &a, &b, || a.is_leader() || b.is_leader());
    a.stop();
    assert!(b.wait_until_leader(WAIT));
}

/// A second process with the leader's identity, stopped in its first retry period (before it
/// ever wrote), releases nothing: the record names its identity but is the live leader's. It
/// released it before, and a standby took over while the leader still led.
#[test]
fn a_twin_stopped_before_it_wrote_does_not_release_the_leaders_lease() {
    let server = FakeApiServer::start();
    // A retry period long enough to stop the twin inside its first one.
    let slow = LeaseTimings { retry_period: ms(1500), renew_deadline: Duration::from_secs(5), ..timings() };
    let first = LeaderElector::start(leases(&server), "lock", "same", slow).unwrap();
    assert!(first.wait_until_leader(WAIT));
    let before = server.requests().len();
    let second = LeaderElector::start(leases(&server), "lock", "same", slow).unwrap();
    // The leader only writes (its renewals): a read is the twin's.
    eventually("the twin reads the Lease", || server.requests()[before..].iter().any(|r| r.method == "GET"));
    second.stop();
    assert!(first.is_leader());
    let held = spec(&server);
    assert_eq!(held.holder_identity.as_deref(), Some("same"), "not released by the twin");
    assert_eq!(held.lease_duration_seconds, Some(8));
}
