//! A standalone fake Kubernetes API server, for trying clients (kubectl, this library, your own
//! program) by hand or from a script.
//!
//! ```text
//! cargo run --features testing --example fake_apiserver -- --pods 50 --churn 5 --fault-rate 0.2
//! ```
//!
//! It runs until SIGINT (Ctrl-C) or SIGTERM, so it can be started as a service (`nohup
//! fake_apiserver --kubeconfig kc.yaml &`). The last line it prints at start-up holds its URL and
//! the path of its kubeconfig; a script can wait for that line. `--help` lists every option.

#[cfg(not(feature = "testing"))]
fn main() {
    eprintln!("this example needs the `testing` feature: cargo run --features testing --example fake_apiserver");
}

#[cfg(feature = "testing")]
fn main() {
    if let Err(e) = demo::run() {
        eprintln!("fake_apiserver: {e}");
        std::process::exit(2);
    }
}

#[cfg(feature = "testing")]
mod demo {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::thread;
    use std::time::{Duration, Instant};

    use k8s_openapi::api::core::v1::{
        Container, ContainerState, ContainerStateRunning, ContainerStatus, Node, NodeCondition, NodeStatus, Pod,
        PodCondition, PodSpec, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    use kube_watcher::testing::{FakeApiServer, Fault, Match};

    /// Command-line options.
    #[derive(Debug)]
    struct Options {
        port: u16,
        tls: bool,
        token: Option<String>,
        pods: usize,
        churn: f64,
        fault_rate: f64,
        seed: u64,
        kubeconfig: Option<std::path::PathBuf>,
        exit_on_eof: bool,
        shard_filter: bool,
    }

    const HELP: &str = "\
fake_apiserver: a fake Kubernetes API server for kubectl, kube-watcher and your own programs

usage: fake_apiserver [OPTIONS]

  --port N             listen on 127.0.0.1:N (default: a free port)
  --tls                serve HTTPS with a fresh self-signed CA (the kubeconfig trusts it)
  --token T            require `Authorization: Bearer T` (the kubeconfig carries it)
  --pods N             running pods to create at start, spread over namespaces default,
                       shop and ops and labelled app=web, api or db (default: 10), on two
                       nodes, node-1 and node-2
  --churn PER_SEC      random pod creates, relabellings and deletes per second (default: 0)
  --fault-rate PER_SEC random faults per second: 429s, 502s, expired watches, reset and
                       closed connections, truncated lists (default: 0)
  --seed N             seed for the churn and faults, to replay a run (default: 1)
  --kubeconfig PATH    write the kubeconfig to PATH and leave it there (default: a
                       temporary file, removed when the server stops)
  --exit-on-eof        also stop when standard input ends (for a parent that holds a pipe)
  --shard-filter       filter lists and watches by shardSelector, as Kubernetes 1.36+ with
                       the ShardedListAndWatch gate does (default: ignore it, as every other
                       server does, so that sharded clients filter on their side)
  -h, --help           print this help

It runs until SIGINT (Ctrl-C) or SIGTERM. The last line of start-up output is
  ready: url=<URL> kubeconfig=<PATH>
so a script can start it in the background and wait for that line.
";

    fn parse_args() -> Result<Options, String> {
        let mut opts = Options {
            port: 0,
            tls: false,
            token: None,
            pods: 10,
            churn: 0.0,
            fault_rate: 0.0,
            seed: 1,
            kubeconfig: None,
            exit_on_eof: false,
            shard_filter: false,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
            match arg.as_str() {
                "--port" => opts.port = value("--port")?.parse().map_err(|e| format!("--port: {e}"))?,
                "--tls" => opts.tls = true,
                "--token" => opts.token = Some(value("--token")?),
                "--pods" => {
                    opts.pods = match value("--pods")?.parse() {
                        Ok(n) if n <= MAX_PODS => n,
                        _ => return Err(format!("--pods: a number of pods from 0 to {MAX_PODS}")),
                    }
                }
                "--churn" => opts.churn = rate("--churn", &value("--churn")?)?,
                "--fault-rate" => opts.fault_rate = rate("--fault-rate", &value("--fault-rate")?)?,
                "--seed" => opts.seed = value("--seed")?.parse().map_err(|e| format!("--seed: {e}"))?,
                "--kubeconfig" => opts.kubeconfig = Some(value("--kubeconfig")?.into()),
                "--exit-on-eof" => opts.exit_on_eof = true,
                "--shard-filter" => opts.shard_filter = true,
                "-h" | "--help" => {
                    print!("{HELP}");
                    std::process::exit(0);
                }
                other => return Err(format!("unknown argument {other:?} (try --help)")),
            }
        }
        Ok(opts)
    }

    /// The most pods `--pods` creates (each is kept in memory, with its history).
    const MAX_PODS: usize = 1_000_000;

    /// A rate per second: finite, not negative, at most 10,000.
    fn rate(flag: &str, text: &str) -> Result<f64, String> {
        match text.parse::<f64>() {
            Ok(r) if r.is_finite() && (0.0..=10_000.0).contains(&r) => Ok(r),
            _ => Err(format!("{flag}: {text:?} is not a rate between 0 and 10000 per second")),
        }
    }

    /// A tiny xorshift generator, so the example needs nothing beyond std.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
    }

    /// The apps pods belong to (label `app`): the README's quick start watches `app=web`.
    const APPS: [&str; 3] = ["web", "api", "db"];

    /// A running, ready pod of `app` on `node`. Churn writes whole pods, so every write carries
    /// this status: an update that left it out would blank kubectl's STATUS column.
    fn pod(namespace: &str, name: &str, app: &str, node: &str, generation: u64) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.to_string());
        p.metadata.namespace = Some(namespace.to_string());
        p.metadata.labels = Some(BTreeMap::from([
            ("app".to_string(), app.to_string()),
            ("generation".to_string(), generation.to_string()),
        ]));
        // Which client set which field, as a real server records it on every object.
        p.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("fake-churn".into()),
            operation: Some("Update".into()),
            api_version: Some("v1".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(serde_json::json!({
                "f:metadata": {"f:labels": {"f:app": {}, "f:generation": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"main\"}": {"f:image": {}}}, "f:nodeName": {}},
            }))),
            ..ManagedFieldsEntry::default()
        }]);
        p.spec = Some(PodSpec {
            containers: vec![Container { name: "main".into(), image: Some("busybox".into()), ..Container::default() }],
            node_name: Some(node.to_string()),
            ..PodSpec::default()
        });
        let condition =
            |kind: &str| PodCondition { type_: kind.to_string(), status: "True".into(), ..PodCondition::default() };
        p.status = Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![condition("PodScheduled"), condition("Initialized"), condition("Ready")]),
            container_statuses: Some(vec![ContainerStatus {
                name: "main".into(),
                image: "busybox".into(),
                ready: true,
                started: Some(true),
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..ContainerState::default()
                }),
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        });
        p
    }

    const NODES: [&str; 2] = ["node-1", "node-2"];

    fn node(name: &str) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.to_string());
        n.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        });
        n
    }

    const NAMESPACES: [&str; 3] = ["default", "shop", "ops"];

    fn churn_step(server: &FakeApiServer, rng: &mut Rng) {
        let ns = NAMESPACES[rng.below(3) as usize];
        let name = format!("pod-{}", rng.below(200));
        let generation = rng.below(1000);
        let (app, node) = (APPS[rng.below(3) as usize], NODES[rng.below(2) as usize]);
        let result = match rng.below(3) {
            1 => server.delete::<Pod>(Some(ns), &name),
            _ => server.apply(&pod(ns, &name, app, node, generation)).map(|_| ()),
        };
        // Deleting a pod that does not exist is part of the noise.
        let _ = result;
    }

    fn random_fault(rng: &mut Rng) -> (Match, Fault) {
        match rng.below(7) {
            0 => (
                Match::Any,
                Fault::PlainText {
                    code: 429,
                    body: "Too many requests, please try again later.".into(),
                    retry_after: Some(1),
                },
            ),
            1 => (
                Match::Any,
                Fault::PlainText {
                    code: 502,
                    body: "<html><body>502 Bad Gateway</body></html>".into(),
                    retry_after: None,
                },
            ),
            2 => (
                Match::Watch,
                Fault::InStreamError {
                    code: 410,
                    reason: "Expired".into(),
                    message: "too old resource version: 1 (2)".into(),
                },
            ),
            3 => (Match::Watch, Fault::ResetAfter { events: (rng.below(5)) as usize }),
            4 => (Match::Watch, Fault::CloseAfter { events: (rng.below(5)) as usize }),
            5 => (Match::List, Fault::TruncateBody),
            _ => (Match::Any, Fault::TooLargeResourceVersion),
        }
    }

    /// Runs `step` `per_sec` times a second until `stop` is set.
    fn ticker(
        name: &str,
        per_sec: f64,
        stop: Arc<AtomicBool>,
        mut step: impl FnMut() + Send + 'static,
    ) -> std::io::Result<Option<thread::JoinHandle<()>>> {
        if per_sec <= 0.0 {
            return Ok(None);
        }
        let period = Duration::from_secs_f64(1.0 / per_sec);
        thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let mut next = Instant::now();
                while !stop.load(Ordering::SeqCst) {
                    let now = Instant::now();
                    if now >= next {
                        step();
                        next += period;
                    } else {
                        thread::sleep((next - now).min(Duration::from_millis(100)));
                    }
                }
            })
            .map(Some)
    }

    pub fn run() -> Result<(), String> {
        let opts = parse_args()?;
        // Signals first, so a SIGTERM that arrives during start-up still stops us cleanly.
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<&'static str>(2);
        {
            let tx = stop_tx.clone();
            ctrlc::set_handler(move || {
                let _ = tx.try_send("signal");
            })
            .map_err(|e| format!("install the SIGINT/SIGTERM handler: {e}"))?;
        }
        let mut builder = FakeApiServer::builder()
            .port(opts.port)
            .tls(opts.tls)
            .seed(opts.seed)
            .sharded_list_and_watch(opts.shard_filter);
        if let Some(t) = &opts.token {
            builder = builder.token(t);
        }
        let server = Arc::new(builder.try_start().map_err(|e| format!("start: {e}"))?);
        let mut rng = Rng(opts.seed.max(1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        for name in NODES {
            server.create(&node(name)).map_err(|e| format!("create nodes: {e}"))?;
        }
        for i in 0..opts.pods {
            // pod-0 default/web, pod-1 shop/web, pod-2 ops/web, pod-3 default/api, ...
            let (ns, app, node) = (NAMESPACES[i % 3], APPS[(i / 3) % 3], NODES[i % 2]);
            let created = server.create(&pod(ns, &format!("pod-{i}"), app, node, rng.below(1000)));
            created.map_err(|e| format!("seed pods: {e}"))?;
        }
        let (kubeconfig, temporary) = match &opts.kubeconfig {
            Some(path) => (path.clone(), false),
            None => (std::env::temp_dir().join(format!("fake-apiserver-{}.kubeconfig", std::process::id())), true),
        };
        std::fs::write(&kubeconfig, server.kubeconfig()).map_err(|e| format!("write {}: {e}", kubeconfig.display()))?;

        let stop = Arc::new(AtomicBool::new(false));
        let churn = {
            let server = server.clone();
            let mut rng = Rng(rng.next() | 1);
            ticker("churn", opts.churn, stop.clone(), move || churn_step(&server, &mut rng))
                .map_err(|e| format!("spawn churn thread: {e}"))?
        };
        let faults = {
            let server = server.clone();
            let mut rng = Rng(rng.next() | 1);
            ticker("faults", opts.fault_rate, stop.clone(), move || {
                // Faults wait for the next matching request: while a client backs off they would
                // pile up and then starve it, so at most two wait at a time.
                if server.pending_faults() >= 2 {
                    return;
                }
                let (when, fault) = random_fault(&mut rng);
                let for_watches = when == Match::Watch;
                server.push_fault(when, fault);
                // A long-running watch would never meet a watch fault: end the open watches so
                // the clients' next watch request does.
                if for_watches {
                    server.end_watches();
                }
            })
            .map_err(|e| format!("spawn fault thread: {e}"))?
        };
        if opts.exit_on_eof {
            let tx = stop_tx.clone();
            thread::Builder::new()
                .name("stdin".into())
                .spawn(move || {
                    let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
                    let _ = tx.try_send("end of input");
                })
                .map_err(|e| format!("spawn stdin thread: {e}"))?;
        }

        println!(
            "fake api server: {} pods in namespaces {}; churn {}/s; faults {}/s",
            opts.pods,
            NAMESPACES.join(", "),
            opts.churn,
            opts.fault_rate
        );
        if opts.shard_filter {
            println!("shardSelector: lists and watches are filtered by it (ShardedListAndWatch)");
        }
        println!("try: KUBECONFIG={} kubectl get pods -A --watch", kubeconfig.display());
        println!("stop with Ctrl-C or SIGTERM{}", if opts.exit_on_eof { ", or by closing standard input" } else { "" });
        println!("ready: url={} kubeconfig={}", server.url(), kubeconfig.display());

        let why = stop_rx.recv().unwrap_or("channel closed");
        stop.store(true, Ordering::SeqCst);
        for handle in [churn, faults].into_iter().flatten() {
            let _ = handle.join();
        }
        if temporary {
            let _ = std::fs::remove_file(&kubeconfig);
        }
        println!("stopping ({why}): served {} connections", server.connections());
        Ok(())
    }
}
