//! One replica of a program that runs as several: the replicas share the pods of a cluster (a
//! shard group: each watches its own share, without managedFields, in a compressed store), and
//! one of them, the leader, also runs what must run once. One `select!` loop; Ctrl-C or SIGTERM
//! stops it cleanly: the watcher first, then the group and the elector, which release their
//! Leases so that the others take over at once.
//!
//! ```text
//! # wherever kubectl points, as each replica of a Deployment (its identity: HOSTNAME, the pod's name)
//! cargo run --example scale_out
//! # three replicas on one machine, against the fake API server (docs/guide.md, "Shard groups")
//! cargo run --example scale_out -- --identity replica-a
//! ```

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::crossbeam_channel::{self, select, tick};
use kube_watcher::{Api, Client, Config, GroupChange, LeaderElector, Leadership, LeaseTimings, ShardGroup, Watcher};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // This replica's name, unique among the replicas: in a pod, its name (HOSTNAME).
    let args: Vec<String> = std::env::args().collect();
    let me = match args.iter().position(|a| a == "--identity") {
        Some(i) => args.get(i + 1).cloned().ok_or("--identity needs a value")?,
        None => std::env::var("HOSTNAME").map_err(|_| "set HOSTNAME or pass --identity NAME")?,
    };
    let stop = ctrl_c()?;

    let client = Client::try_default()?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    // A share of the pods, which follows the replicas alive now.
    let group = ShardGroup::join(leases.clone(), "pod-indexer", &me, LeaseTimings::default())?;
    let watcher = Watcher::builder(Api::<Pod>::all(client))
        .config(Config::default().shard_group(&group))
        .without_managed_fields() // never decoded, never stored
        .compressed_store() // decoded again by get() and state()
        .start()?;
    // One leader among the same replicas, on a Lease of its own (the members' Leases are
    // `pod-indexer-<identity>-<hash>`: a name like this one never meets them).
    let elector = LeaderElector::start(leases, "pod-indexer.leader", &me, LeaseTimings::default())?;

    let report = tick(Duration::from_secs(1));
    let (mut last, mut census) = (None, Vec::new());
    loop {
        select! {
            recv(group.changes()) -> change => match change {
                Ok(GroupChange::Shard(Some(share))) => println!("{me}: my share: {share}"),
                Ok(GroupChange::Shard(None)) => println!("{me}: no share"),
                Ok(GroupChange::Members(members)) => println!("{me}: members: {}", members.join(", ")),
                Ok(_) => {}
                Err(_) => break,
            },
            recv(elector.changes()) -> change => match change {
                Ok(Leadership::Acquired) => {
                    println!("{me}: leading");
                    census.clear(); // a new leader takes the census again
                }
                Ok(Leadership::Lost) => println!("{me}: no longer leading"),
                Err(_) => break,
            },
            recv(watcher.receiver()) -> event => match event {
                Ok(Ok(_)) => {} // the store has it; the report reads the store
                Ok(Err(e)) => eprintln!("{me}: {e} (retrying)"),
                Err(_) => break,
            },
            recv(report) -> _ => {
                // Caught up: the store holds exactly the share the group gives now.
                let stats = watcher.stats();
                let caught_up = stats.synced_shard.is_some() && stats.synced_shard == group.shard();
                let with_fields = watcher.store().state().iter().filter(|p| p.metadata.managed_fields.is_some()).count();
                let now = (stats.objects, caught_up, with_fields);
                if last != Some(now) {
                    last = Some(now);
                    let state = if caught_up { "caught up with my share" } else { "catching up" };
                    println!("{me}: {} pods in my store, {state}; {with_fields} with managedFields", stats.objects);
                }
                if elector.is_leader() && census != group.members() {
                    // The leader's task, done once for the whole group: here, a census.
                    census = group.members();
                    println!("{me}: leader's task: {} members: {}", census.len(), census.join(", "));
                }
            },
            recv(stop) -> _ => break,
        }
    }
    watcher.stop(); // first: the group then hands its share over at once
    group.stop();
    elector.stop();
    println!("{me}: stopped");
    Ok(())
}

/// A channel that receives `()` on Ctrl-C or SIGTERM (as a pod gets when it is scaled down).
fn ctrl_c() -> Result<crossbeam_channel::Receiver<()>, ctrlc::Error> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    ctrlc::set_handler(move || {
        let _ = tx.try_send(());
    })?;
    Ok(rx)
}
