//! `DemoWorkload`: a fake cluster with a little life in it, for demos and examples.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
    Node, NodeCondition, NodeStatus, Pod, PodCondition, PodIP, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::{FakeApiServer, FakeError, Fault, Hold, Match};

/// Steps in one round of the script; the script then starts over with new names.
const ROUND: u64 = 36;

/// The demo's stand-in for graceful deletion: a deleted pod keeps this finalizer (and shows as
/// `Terminating`) for a step or two, until the workload removes it.
const GRACEFUL: &str = "demo.kube-watcher/graceful-termination";

/// The namespace every demo pod lives in: kubectl's (and kwatch's) default.
const NAMESPACE: &str = "default";

/// A [`FakeApiServer`] with a scripted workload: pods are created, scheduled, started, crash and
/// restart, complete and are deleted, on two nodes; once a round the API server has a short
/// outage and, later, compacts its history while a watch is away, so that watch gets 410 Gone.
///
/// For demos, examples and trying a program by hand. The workload advances one step each time
/// [`step`](Self::step) is called; the script is written for one step every [`Self::STEP`]
/// (a round takes 9 s), and repeats with fresh names for as long as it is called. It is
/// driven by the caller, so it has no thread of its own and does nothing between calls.
///
/// What a watcher sees in each round:
/// - a job pod goes `Pending` → `ContainerCreating` → `Running` → `Completed`, then is deleted;
/// - **an outage**: every watch is cut, the next one is reset and the request after that gets a
///   503; meanwhile a new web pod is created. The watcher retries with backoff and resumes from
///   its last resourceVersion: it gets the missed changes as ordinary events, with no relist;
/// - a web pod crashes (`Error`), backs off (`CrashLoopBackOff`, one more restart) and runs again;
/// - the oldest web pod is deleted (`Terminating`, then gone);
/// - **a 410**: every watch is cut and the next one is held while a debug pod is deleted and
///   the history is compacted; when it is let go it gets 410 Gone, so the watcher relists and
///   reports the debug pod's deletion from the difference.
///
/// ```
/// use kube_watcher::testing::DemoWorkload;
/// use k8s_openapi::api::core::v1::Pod;
///
/// let mut demo = DemoWorkload::start();
/// assert_eq!(demo.server().list::<Pod>().len(), 3); // web-0, web-1, web-2, running
/// for _ in 0..4 {
///     if let Some(note) = demo.step() {
///         println!("demo: {note}");
///     }
///     // std::thread::sleep(DemoWorkload::STEP) between steps in a real demo
/// }
/// assert_eq!(demo.server().list::<Pod>().len(), 4); // a job pod appeared
/// ```
#[derive(Debug)]
pub struct DemoWorkload {
    server: FakeApiServer,
    /// Steps taken so far.
    steps: u64,
    /// Every live pod as the workload last wrote it (without its resourceVersion).
    pods: BTreeMap<String, Pod>,
    /// Web replicas, oldest first.
    web: VecDeque<String>,
    /// The number for the next web replica's name.
    next_web: u32,
    /// A web replica being deleted (shown as `Terminating`).
    leaving: Option<String>,
    /// Holds a watch while the history is compacted (the 410 part of the script).
    hold: Option<Hold>,
}

impl DemoWorkload {
    /// The interval the script is written for: call [`step`](Self::step) about this often.
    pub const STEP: Duration = Duration::from_millis(250);

    /// Starts a fake API server with two ready nodes and three running web pods in namespace
    /// `default`.
    ///
    /// # Panics
    /// If the server cannot start (see [`FakeApiServer::start`]).
    #[must_use = "dropping the workload shuts its server down"]
    pub fn start() -> DemoWorkload {
        let mut demo = DemoWorkload {
            server: FakeApiServer::start(),
            steps: 0,
            pods: BTreeMap::new(),
            web: VecDeque::new(),
            next_web: 0,
            leaving: None,
            hold: None,
        };
        for node in ["node-1", "node-2"] {
            demo.report(demo.server.apply(&ready_node(node)).map(drop));
        }
        for _ in 0..3 {
            let name = demo.new_web_name();
            let node = if demo.web.len().is_multiple_of(2) { "node-1" } else { "node-2" };
            demo.create(&name, "web", |p| run(schedule(p, node)));
            demo.web.push_back(name);
        }
        demo
    }

    /// The server, to point clients at ([`FakeApiServer::url`]) or to change by hand.
    #[must_use]
    pub fn server(&self) -> &FakeApiServer {
        &self.server
    }

    /// The server's base URL (`http://127.0.0.1:PORT`).
    #[must_use]
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Advances the workload by one step. Returns a sentence when the step starts one of the
    /// scripted faults (the outage or the 410), to show next to what the watcher does about it.
    pub fn step(&mut self) -> Option<&'static str> {
        let (round, at) = (self.steps / ROUND, self.steps % ROUND);
        self.steps += 1;
        let job = format!("job-{round}");
        let debug = format!("debug-{round}");
        let node = if round.is_multiple_of(2) { "node-1" } else { "node-2" };
        match at {
            0 => self.create(&job, "job", |p| p),
            1 => self.update(&job, |p| schedule(p, node)),
            3 => self.update(&job, run),
            6 => {
                // An outage: the watch is cut, the next one is reset, and the request after that
                // gets a 503. A new replica is created meanwhile.
                self.server.push_fault(Match::Watch, Fault::ResetAfter { events: 0 });
                self.server.push_fault(
                    Match::Any,
                    Fault::Status {
                        code: 503,
                        reason: "ServiceUnavailable".into(),
                        message: "the server is currently unable to handle the request".into(),
                        retry_after: None,
                    },
                );
                self.server.end_watches();
                return Some(
                    "outage: watches are cut, the next is reset, then a 503; \
                     the watcher backs off and resumes where it was, without a relist",
                );
            }
            7 => {
                let name = self.new_web_name();
                self.create(&name, "web", |p| p);
                self.web.push_back(name);
            }
            8 => self.update(&self.newest_web(), |p| schedule(p, node)),
            10 => self.update(&self.newest_web(), run),
            11 => self.update(&job, complete),
            12 => self.update(&self.crashing(round), crash),
            13 => self.update(&self.crashing(round), back_off),
            15 => self.update(&self.crashing(round), run),
            16 => self.delete(&job),
            17 => self.finish_delete(&job),
            18 => self.create(&debug, "debug", |p| schedule(p, node)),
            19 => self.update(&debug, run),
            20 => {
                if let Some(oldest) = self.web.pop_front() {
                    self.delete(&oldest);
                    self.leaving = Some(oldest);
                }
            }
            21 => {
                if let Some(name) = self.leaving.clone() {
                    self.update(&name, not_ready);
                }
            }
            22 => {
                if let Some(name) = self.leaving.take() {
                    self.finish_delete(&name);
                }
            }
            24 => {
                // The next watch waits at the gate while the history is compacted under it.
                self.hold = Some(self.server.hold(Match::Watch));
                self.server.end_watches();
                return Some(
                    "history compaction: watches are cut and the debug pod is deleted unseen; \
                     the resumed watch gets 410 Gone, the watcher relists and reports the deletion",
                );
            }
            25 => {
                self.delete(&debug);
                self.finish_delete(&debug);
                self.server.compact();
            }
            26 => drop(self.hold.take()),
            _ => {}
        }
        None
    }

    fn new_web_name(&mut self) -> String {
        self.next_web += 1;
        format!("web-{}", self.next_web - 1)
    }

    /// The web pod that crashes in `round`: never the oldest, which is replaced later in the
    /// round, so the restart stays visible. (`round` 0: web-1; 1: web-3.)
    fn crashing(&self, round: u64) -> String {
        let i = usize::try_from(round).unwrap_or(0).wrapping_add(1) % self.web.len().max(1);
        self.web.get(i).cloned().unwrap_or_default()
    }

    fn newest_web(&self) -> String {
        self.web.back().cloned().unwrap_or_default()
    }

    fn create(&mut self, name: &str, app: &str, f: impl FnOnce(Pod) -> Pod) {
        let pod = f(new_pod(name, app));
        self.report(self.server.create(&pod).map(drop));
        self.pods.insert(name.to_owned(), pod);
    }

    fn update(&mut self, name: &str, f: impl FnOnce(Pod) -> Pod) {
        let Some(pod) = self.pods.remove(name) else { return };
        let pod = f(pod);
        self.report(self.server.apply(&pod).map(drop));
        self.pods.insert(name.to_owned(), pod);
    }

    /// Deletes a pod: it keeps its finalizer, so it shows as `Terminating` until
    /// [`finish_delete`](Self::finish_delete).
    fn delete(&mut self, name: &str) {
        self.report(self.server.delete::<Pod>(Some(NAMESPACE), name));
    }

    /// Removes the finalizer of a pod being deleted: the server then removes the pod.
    fn finish_delete(&mut self, name: &str) {
        if let Some(mut pod) = self.pods.remove(name) {
            pod.metadata.finalizers = None;
            self.report(self.server.apply(&pod).map(drop));
        }
    }

    fn report(&self, result: Result<(), FakeError>) {
        if let Err(e) = result {
            // The script only writes its own objects, so this is a bug in the script (or someone
            // deleted a demo pod by hand); the demo goes on.
            log::error!("demo workload step {}: {e}", self.steps);
        }
    }
}

/// The current time, to the second (as the API server writes timestamps).
fn now() -> Option<Time> {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    Timestamp::from_second(i64::try_from(secs).ok()?).ok().map(Time)
}

fn condition(kind: &str, status: bool, reason: Option<&str>) -> PodCondition {
    PodCondition {
        type_: kind.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.map(str::to_owned),
        last_transition_time: now(),
        ..PodCondition::default()
    }
}

fn set_condition(pod: &mut Pod, c: PodCondition) {
    let conditions = pod.status.get_or_insert_with(PodStatus::default).conditions.get_or_insert_with(Vec::new);
    conditions.retain(|old| old.type_ != c.type_);
    conditions.push(c);
}

/// A pending, unscheduled pod with one container.
fn new_pod(name: &str, app: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(NAMESPACE.to_owned()),
            labels: Some(BTreeMap::from([("app".to_owned(), app.to_owned())])),
            finalizers: Some(vec![GRACEFUL.to_owned()]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: app.to_owned(),
                image: Some(format!("registry.example/{app}:1.0")),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: Some(PodStatus { phase: Some("Pending".to_owned()), ..PodStatus::default() }),
    }
}

/// The container's status, created on first use.
fn container(pod: &mut Pod) -> &mut ContainerStatus {
    let image = pod.spec.as_ref().and_then(|s| s.containers.first()).and_then(|c| c.image.clone()).unwrap_or_default();
    let name = pod.metadata.labels.as_ref().and_then(|l| l.get("app")).cloned().unwrap_or_default();
    let statuses = pod.status.get_or_insert_with(PodStatus::default).container_statuses.get_or_insert_with(Vec::new);
    if statuses.is_empty() {
        statuses.push(ContainerStatus { name, image, ..ContainerStatus::default() });
    }
    &mut statuses[0]
}

fn waiting(reason: &str) -> Option<ContainerState> {
    Some(ContainerState {
        waiting: Some(ContainerStateWaiting { reason: Some(reason.to_owned()), ..ContainerStateWaiting::default() }),
        ..ContainerState::default()
    })
}

fn terminated(exit_code: i32, reason: &str) -> Option<ContainerState> {
    Some(ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code,
            reason: Some(reason.to_owned()),
            finished_at: now(),
            ..ContainerStateTerminated::default()
        }),
        ..ContainerState::default()
    })
}

/// Scheduled on `node`; the container is being created.
fn schedule(mut pod: Pod, node: &str) -> Pod {
    pod.spec.get_or_insert_with(PodSpec::default).node_name = Some(node.to_owned());
    set_condition(&mut pod, condition("PodScheduled", true, None));
    let c = container(&mut pod);
    c.state = waiting("ContainerCreating");
    c.ready = false;
    c.started = Some(false);
    pod
}

/// Running and ready, with an IP.
fn run(mut pod: Pod) -> Pod {
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let c = container(&mut pod);
    c.state = Some(ContainerState {
        running: Some(ContainerStateRunning { started_at: now() }),
        ..ContainerState::default()
    });
    c.ready = true;
    c.started = Some(true);
    let status = pod.status.get_or_insert_with(PodStatus::default);
    status.phase = Some("Running".to_owned());
    // A made-up but stable address: 10.244.<node>.<a byte of the name>.
    let host = name.bytes().fold(7u8, |h, b| h.wrapping_mul(31).wrapping_add(b)) | 1;
    let ip = format!("10.244.{}.{host}", if node == "node-1" { 1 } else { 2 });
    status.pod_ip = Some(ip.clone());
    status.pod_ips = Some(vec![PodIP { ip }]);
    for kind in ["Initialized", "ContainersReady", "Ready"] {
        set_condition(&mut pod, condition(kind, true, None));
    }
    pod
}

fn not_ready(mut pod: Pod) -> Pod {
    container(&mut pod).ready = false;
    for kind in ["ContainersReady", "Ready"] {
        set_condition(&mut pod, condition(kind, false, Some("ContainersNotReady")));
    }
    pod
}

/// The container exited 0; the pod succeeded.
fn complete(mut pod: Pod) -> Pod {
    let c = container(&mut pod);
    c.state = terminated(0, "Completed");
    c.ready = false;
    c.started = Some(false);
    pod.status.get_or_insert_with(PodStatus::default).phase = Some("Succeeded".to_owned());
    for kind in ["ContainersReady", "Ready"] {
        set_condition(&mut pod, condition(kind, false, Some("PodCompleted")));
    }
    pod
}

/// The container exited 1.
fn crash(mut pod: Pod) -> Pod {
    let c = container(&mut pod);
    c.state = terminated(1, "Error");
    c.started = Some(false);
    not_ready(pod)
}

/// The kubelet waits before restarting the crashed container: one more restart counted.
fn back_off(mut pod: Pod) -> Pod {
    let c = container(&mut pod);
    c.last_state = c.state.take();
    c.state = waiting("CrashLoopBackOff");
    c.restart_count += 1;
    pod
}

fn ready_node(name: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([("kubernetes.io/hostname".to_owned(), name.to_owned())])),
            ..ObjectMeta::default()
        },
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".to_owned(),
                status: "True".to_owned(),
                reason: Some("KubeletReady".to_owned()),
                last_transition_time: now(),
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        }),
        ..Node::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(demo: &DemoWorkload, name: &str) -> Option<String> {
        let pod: Pod = demo.server().get(Some(NAMESPACE), name)?;
        pod.status?.phase
    }

    #[test]
    fn a_round_creates_runs_completes_and_deletes_a_job_and_restarts_a_web_pod() {
        let mut demo = DemoWorkload::start();
        assert_eq!(demo.server().list::<Node>().len(), 2);
        let notes: Vec<&str> = (0..ROUND).filter_map(|_| demo.step()).collect();
        assert_eq!(notes.len(), 2, "the outage and the 410: {notes:?}");
        assert_eq!(phase(&demo, "job-0"), None, "the job is gone");
        assert_eq!(phase(&demo, "debug-0"), None, "the debug pod is gone");
        let pods = demo.server().list::<Pod>();
        let names: Vec<&str> = pods.iter().filter_map(|p| p.metadata.name.as_deref()).collect();
        assert_eq!(names, ["web-1", "web-2", "web-3"], "web-0 replaced by web-3");
        let restarts: i32 = pods
            .iter()
            .flat_map(|p| p.status.iter().flat_map(|s| s.container_statuses.iter().flatten()))
            .map(|c| c.restart_count)
            .sum();
        assert_eq!(restarts, 1, "web-1 crashed and restarted once");
        assert!(pods.iter().all(|p| p.metadata.deletion_timestamp.is_none()));
        assert_eq!(demo.hold.as_ref().map(|h| h.is_held()), None, "the gate is released");

        // The next round adds web-4 and crashes web-3.
        for _ in 0..16 {
            demo.step();
        }
        let web3: Pod = demo.server().get(Some(NAMESPACE), "web-3").unwrap_or_default();
        let status = web3.status.unwrap_or_default().container_statuses.unwrap_or_default();
        assert_eq!(status[0].restart_count, 1);
        assert_eq!(phase(&demo, "job-1"), Some("Succeeded".to_owned()));
    }
}
