//! Leader election: two replicas share one Lease; one leads, the other stands by. The leader
//! stops (releasing the lease) and the other takes over within one retry period. With
//! `--crash`, a third replica joins and the new leader then "crashes" (the server refuses it from
//! then on, so it can neither renew nor release): the takeover waits for the lease to expire.
//!
//! ```text
//! cargo run --example leader --features testing              # embedded fake cluster
//! cargo run --example leader --features testing -- --crash   # and a crashed leader
//! ```

use std::thread;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube_watcher::crossbeam_channel::{self, Receiver, Sender, select, tick};
use kube_watcher::testing::FakeApiServer;
use kube_watcher::{Api, Client, LeaderElector, Leadership, LeaseTimings};

/// One replica of a program: it does its work only while it leads.
fn replica(elector: LeaderElector, done: Receiver<()>, events: Sender<(String, Leadership)>) {
    let me = elector.identity().to_owned();
    let work = tick(Duration::from_millis(500));
    let mut rounds = 0;
    loop {
        select! {
            recv(elector.changes()) -> change => match change {
                Ok(change) => {
                    println!("{me}: {}", if change == Leadership::Acquired { "leading" } else { "no longer leading" });
                    let _ = events.send((me.clone(), change));
                }
                Err(_) => break, // the elector stopped
            },
            recv(work) -> _ => if elector.is_leader() {
                rounds += 1; // the leader's work goes here
            },
            recv(done) -> _ => {
                println!("{me}: stopping after {rounds} rounds of work (releases the lease if held)");
                elector.stop();
            }
        }
    }
}

struct Replica {
    done: Sender<()>,
    thread: thread::JoinHandle<()>,
}

fn start(server: &FakeApiServer, identity: &str, events: &Sender<(String, Leadership)>) -> Replica {
    // Each replica authenticates with a token of its own, so the server can tell them apart
    // (and, for --crash, refuse one of them).
    server.add_token(identity, identity);
    let client = Client::from_kubeconfig_yaml(&server.kubeconfig(), &Default::default())
        .and_then(|c| c.with_token(identity))
        .unwrap();
    let leases: Api<Lease> = Api::namespaced(client, "default");
    let elector = LeaderElector::start(leases, "example-controller", identity, LeaseTimings::default()).unwrap();
    let (done, done_rx) = crossbeam_channel::bounded(1);
    let events = events.clone();
    let thread = thread::spawn(move || replica(elector, done_rx, events));
    Replica { done, thread }
}

impl Replica {
    fn stop(self) {
        let _ = self.done.send(());
        self.thread.join().unwrap();
    }
}

/// Waits for `who` to report `change`.
fn wait_for(events: &Receiver<(String, Leadership)>, who: &str, change: Leadership) -> Duration {
    let start = Instant::now();
    loop {
        let (id, c) = events.recv_timeout(Duration::from_secs(60)).expect("no leadership change within 60 s");
        if id == who && c == change {
            return start.elapsed();
        }
    }
}

fn holder(server: &FakeApiServer) -> String {
    let lease: Lease = server.get(Some("default"), "example-controller").unwrap();
    let spec = lease.spec.unwrap_or_default();
    format!(
        "holder {:?}, transitions {}",
        spec.holder_identity.unwrap_or_default(),
        spec.lease_transitions.unwrap_or_default()
    )
}

fn main() {
    let crash = std::env::args().any(|a| a == "--crash");
    // `--rounds N`: hand over N times, stopping each leader at a different moment of the
    // standby's retry period, and print the takeover times.
    let rounds: usize =
        std::env::args().skip_while(|a| a != "--rounds").nth(1).and_then(|n| n.parse().ok()).unwrap_or(1);
    // TLS: a bearer token is never sent over plain HTTP.
    let server = FakeApiServer::builder().tls(true).token("admin").start();
    let (events_tx, events) = crossbeam_channel::unbounded();

    let mut leader = start(&server, "replica-a", &events_tx);
    wait_for(&events, "replica-a", Leadership::Acquired);
    let mut takeovers = Vec::new();
    for round in 0..rounds {
        let next = if round == 0 { "replica-b".to_owned() } else { format!("replica-b{round}") };
        let standby = start(&server, &next, &events_tx);
        println!("{next}: standing by");
        if round == 0 {
            // At rest: the leader renews once per retry period; the standby reads once per period.
            server.clear_requests();
            let rest = Duration::from_secs(6);
            thread::sleep(rest);
            for who in [leader_name(&server), next.clone()] {
                let n = server.requests().iter().filter(|r| r.user.as_deref() == Some(who.as_str())).count();
                println!("{who} at rest: {:.2} requests per second", n as f64 / rest.as_secs_f64());
            }
            println!("lease: {}", holder(&server));
        } else {
            // A moment somewhere in the standby's 2 s retry period.
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
            thread::sleep(Duration::from_millis(2000 + u64::from(nanos % 2000)));
        }
        leader.stop();
        let took = wait_for(&events, &next, Leadership::Acquired);
        println!("takeover after stop: {} ms", took.as_millis());
        takeovers.push(took);
        println!("lease: {}", holder(&server));
        leader = standby;
    }
    if rounds > 1 {
        takeovers.sort();
        println!(
            "takeover after stop, {rounds} rounds: min {} ms, median {} ms, max {} ms",
            takeovers[0].as_millis(),
            takeovers[rounds / 2].as_millis(),
            takeovers[rounds - 1].as_millis()
        );
    }

    if crash {
        let standby = start(&server, "replica-c", &events_tx);
        thread::sleep(Duration::from_secs(3));
        let crashed = leader_name(&server);
        println!("{crashed}: crashes (the server refuses it from now on)");
        server.revoke_token(&crashed);
        let took = wait_for(&events, "replica-c", Leadership::Acquired);
        println!("takeover after crash: {:.1} s", took.as_secs_f64());
        println!("lease: {}", holder(&server));
        leader.stop();
        leader = standby;
    }
    leader.stop();
    println!("lease: {}", holder(&server));
}

fn leader_name(server: &FakeApiServer) -> String {
    let lease: Lease = server.get(Some("default"), "example-controller").unwrap();
    lease.spec.and_then(|s| s.holder_identity).unwrap_or_default()
}
