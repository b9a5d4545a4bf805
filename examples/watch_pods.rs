//! Watch pods and print every change: the README quick start, runnable.
//!
//! ```text
//! cargo run --example watch_pods --features testing                     # embedded fake cluster
//! cargo run --example watch_pods --features testing -- --cluster         # your kubeconfig / in-cluster
//! cargo run --example watch_pods --features testing -- http://127.0.0.1:8001   # kubectl proxy
//! ```
//!
//! With no URL it starts [`DemoWorkload`]: a fake API server where pods are created, start,
//! crash, restart and are deleted, with an outage and a 410 along the way, so you can see the
//! watcher recover on a machine without a cluster. It stops after `--seconds` (default 10).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::DemoWorkload;
use kube_watcher::{Api, Client, Config, Event, RecvTimeoutError, Watcher};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut url = None;
    let mut cluster = false;
    let mut seconds = 10u64;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => seconds = args.next().ok_or("--seconds needs a value")?.parse()?,
            "--cluster" => cluster = true,
            "-h" | "--help" => {
                println!("usage: watch_pods [URL | --cluster] [--seconds N]");
                return Ok(());
            }
            flag if flag.starts_with('-') => return Err(format!("unknown flag {flag:?} (try --help)").into()),
            other => url = Some(other.to_owned()),
        }
    }
    let mut demo = (url.is_none() && !cluster).then(DemoWorkload::start);
    let (client, url) = match (&demo, url) {
        (Some(demo), _) => (Client::from_url(&demo.url())?, demo.url()),
        (None, Some(url)) => (Client::from_url(&url)?, url),
        // KUBECONFIG or ~/.kube/config, else the in-cluster service account.
        (None, None) => (Client::try_default()?, "the cluster from your kubeconfig".to_owned()),
    };

    let pods: Api<Pod> = Api::all(client);
    let watcher = Watcher::new(pods, Config::default())?;
    println!("watching pods at {url} for {seconds} s");

    let deadline = Instant::now() + Duration::from_secs(seconds);
    'run: while Instant::now() < deadline {
        // One step of the simulated workload, then the events it caused.
        if let Some(note) = demo.as_mut().and_then(DemoWorkload::step) {
            println!("-- demo: {note}");
        }
        let step_end = Instant::now() + DemoWorkload::STEP;
        loop {
            match watcher.recv_timeout(step_end.saturating_duration_since(Instant::now())) {
                Ok(Ok(Event::Init)) => println!("-- (re)list started"),
                Ok(Ok(Event::InitApply(pod))) => println!("   listed   {}", name(&pod)),
                Ok(Ok(Event::InitDone)) => println!("-- in sync: {} pods cached", watcher.store().len()),
                Ok(Ok(Event::Apply(pod))) => println!("   applied  {} ({})", name(&pod), phase(&pod)),
                Ok(Ok(Event::Delete(pod))) => println!("   deleted  {}", name(&pod)),
                Ok(Err(e)) => println!("   trouble (retrying): {e}"),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => break 'run, // the watcher ended
            }
        }
    }
    watcher.stop();
    let stats = watcher.stats();
    let (relists, errors) = (stats.relists.total(), stats.errors.total());
    println!(
        "done: {} watches, {relists} relists ({} after a 410), {errors} errors",
        stats.watches, stats.relists.expired
    );
    Ok(())
}

fn name(pod: &Pod) -> String {
    format!("{}/{}", pod.metadata.namespace.as_deref().unwrap_or(""), pod.metadata.name.as_deref().unwrap_or(""))
}

fn phase(pod: &Pod) -> &str {
    let deleting = pod.metadata.deletion_timestamp.is_some();
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Unknown");
    if deleting { "Terminating" } else { phase }
}
