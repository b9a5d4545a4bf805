//! Watch pods and print every change: the README quick start.
//!
//! ```text
//! cargo run --example watch_pods --features testing                     # embedded fake cluster
//! cargo run --example watch_pods --features testing -- --cluster         # your kubeconfig / in-cluster
//! cargo run --example watch_pods --features testing -- http://127.0.0.1:8001   # kubectl proxy
//! ```
//!
//! With no URL it starts the in-process fake API server and a small simulated workload (pods
//! created, relabelled and deleted; a dropped connection and a 410 along the way), so you can
//! see the watcher work on a machine without a cluster. It stops after `--seconds` (default 10).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::{FakeApiServer, Fault, Match};
use kube_watcher::{Api, Client, Config, Event, Watcher};

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
            other => url = Some(other.to_owned()),
        }
    }
    let demo = (url.is_none() && !cluster).then(Demo::start);
    let (client, url) = match (&demo, url) {
        (Some(d), _) => (Client::from_url(&d.server.url())?, d.server.url()),
        (None, Some(url)) => (Client::from_url(&url)?, url),
        // KUBECONFIG or ~/.kube/config, else the in-cluster service account.
        (None, None) => (Client::try_default()?, "the cluster from your kubeconfig".to_owned()),
    };

    let pods: Api<Pod> = Api::all(client);
    // The demo restarts watches every 2 s so its scripted faults show up quickly.
    let config = if demo.is_some() { Config::default().timeout(Duration::from_secs(2)) } else { Config::default() };
    let watcher = Watcher::new(pods, config)?;
    println!("watching pods at {url} for {seconds} s");

    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut step = 0;
    while Instant::now() < deadline {
        if let Some(demo) = &demo {
            demo.tick(step);
            step += 1;
        }
        while let Ok(event) = watcher.recv_timeout(Duration::from_millis(200)) {
            match event {
                Ok(Event::Init) => println!("-- (re)list started"),
                Ok(Event::InitApply(pod)) => println!("   listed   {}", name(&pod)),
                Ok(Event::InitDone) => println!("-- in sync: {} pods cached", watcher.store().len()),
                Ok(Event::Apply(pod)) => println!("   applied  {}", name(&pod)),
                Ok(Event::Delete(pod)) => println!("   deleted  {}", name(&pod)),
                Err(e) => println!("   trouble (retrying): {e}"),
            }
        }
    }
    watcher.stop();
    println!("{:?}", watcher.stats());
    Ok(())
}

fn name(pod: &Pod) -> String {
    format!("{}/{}", pod.metadata.namespace.as_deref().unwrap_or(""), pod.metadata.name.as_deref().unwrap_or(""))
}

/// A fake cluster with a little life in it.
struct Demo {
    server: FakeApiServer,
}

impl Demo {
    fn start() -> Demo {
        let server = FakeApiServer::builder().bookmark_interval(Duration::from_secs(1)).start();
        for i in 0..3 {
            server.create(&demo_pod(&format!("web-{i}"))).expect("seed pod");
        }
        Demo { server }
    }

    /// One step of the simulated workload (every ~200 ms).
    fn tick(&self, step: u32) {
        let result = match step % 10 {
            2 => self.server.create(&demo_pod(&format!("job-{step}"))).map(drop),
            5 => self.server.delete::<Pod>(Some("demo"), &format!("job-{}", step - 3)),
            7 if step == 17 => {
                // The next watch drops its connection after one event: resumed, no relist.
                self.server.push_fault(Match::Watch, Fault::ResetAfter { events: 1 });
                Ok(())
            }
            7 if step == 27 => {
                // The next watch is told its resourceVersion is too old: relist.
                let message = "too old resource version".to_owned();
                self.server
                    .push_fault(Match::Watch, Fault::InStreamError { code: 410, reason: "Expired".into(), message });
                Ok(())
            }
            _ => Ok(()),
        };
        if let Err(e) = result {
            eprintln!("demo workload: {e}");
        }
    }
}

fn demo_pod(name: &str) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some(name.to_owned());
    pod.metadata.namespace = Some("demo".to_owned());
    pod
}
