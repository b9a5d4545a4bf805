//! The engine: the thread that runs one watcher, and the delivery of what it sees.
//!
//! The worker ([`worker`]) performs what the pure state machine ([`crate::machine`]) decides:
//! it makes the requests through [`crate::wire`], prepares each object ([`prepare`]: decode,
//! transform, index values), turns the machine's effects into changes of the cache
//! ([`crate::cache`]) and hands their events to [`delivery`], which gets them to the
//! consumers. The control block ([`control`]) is what the public handle and the threads
//! share. The engine never imports the public face ([`crate::watcher`]): the face builds an
//! [`Engine`] from a [`Spec`] and talks to it.

pub(crate) mod control;
pub(crate) mod counters;
pub(crate) mod delivery;
pub(crate) mod gate;
pub(crate) mod notices;
pub(crate) mod parallel;
pub(crate) mod prepare;
pub(crate) mod worker;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, bounded};
use parking_lot::Mutex;

use crate::cache::{IndexFn, PredicateFn, Store, Writer};
use crate::codec::decode;
use crate::codec::decode::Encoding;
use crate::config::Config;
use crate::config::WireFormat;
use crate::engine::control::{AgentSlot, Control};
use crate::engine::counters::Counters;
use crate::engine::delivery::{Delivery, Item, Subscribers};
use crate::engine::gate::Gate;
use crate::engine::notices::Notices;
use crate::engine::parallel::Pool;
use crate::engine::prepare::{Compaction, Prepare, Transform};
use crate::engine::worker::Worker;
use crate::error::{Error, Result};
use crate::guard;
use crate::machine::Machine;
use crate::notice::{Notice, RelistReason, SlowConsumer};
use crate::resource::Watchable;
use crate::stats::Stats;
use crate::wire::api::Api;
use crate::wire::http::{Http, Negotiation};

/// How long `stop()` waits for the threads. Only DNS and TCP connect cannot be interrupted
/// (bounded by the 10 s connect timeout); past this a thread finishes on its own.
const STOP_JOIN_LIMIT: Duration = Duration::from_secs(2);

/// What to run, as the builder settled it (validated).
pub(crate) struct Spec<K> {
    pub(crate) api: Api<K>,
    pub(crate) config: Config,
    /// One thread per namespace; empty: one thread for the whole `api`.
    pub(crate) namespaces: Vec<String>,
    pub(crate) indexes: Vec<(String, IndexFn<K>)>,
    pub(crate) predicates: Vec<PredicateFn<K>>,
    pub(crate) transform: Option<Transform<K>>,
    /// The fields never decoded (`WatcherBuilder::skip_fields`), checked.
    pub(crate) skip: crate::codec::skip::Paths,
    pub(crate) compact: Option<Compaction<K>>,
    pub(crate) max_lists: Option<usize>,
    pub(crate) start_spread: Duration,
    /// Helper threads that prepare list items; 0: none (`WatcherBuilder::parallel_sync`).
    pub(crate) parallel_sync: usize,
}

/// A running watcher: its control block, its store and its threads.
pub(crate) struct Engine<K> {
    control: Arc<Control<K>>,
    /// The worker threads, then the helper threads (which exit after the workers), each with a
    /// channel that closes when it exits.
    workers: Mutex<Vec<(JoinHandle<()>, Receiver<()>)>>,
    /// The encoding its requests negotiate, and the last one answered (for `stats()`).
    wire: Arc<Negotiation>,
}

impl<K: Watchable> Engine<K> {
    /// Builds the store, the control block and one worker per part, and starts the threads.
    pub(crate) fn start(spec: Spec<K>) -> Result<Engine<K>> {
        // One part per namespace, or one for the whole `api`.
        let parts: Vec<Option<Box<str>>> = if spec.namespaces.is_empty() {
            vec![None]
        } else {
            spec.namespaces.iter().map(|n| Some(n.as_str().into())).collect()
        };
        let (writers, store) = Writer::partitioned(spec.indexes, spec.predicates, parts.clone(), decode::compact::<K>);
        let (stop_tx, stop_rx) = bounded(1);
        let (abandon_tx, abandon_rx) = bounded(1);
        // Protobuf where the type has it, and for metadata-only requests (this watcher's, or
        // its drift checks), unless the settings say JSON (docs/protocol.md §12.1); one
        // negotiation for all the threads, so a refusal is remembered by all.
        let protobuf = spec.config.wire_format == WireFormat::Protobuf;
        let wire = Negotiation::new::<K>(spec.api.target(), protobuf);
        let https: Vec<Http> = parts
            .iter()
            .map(|_| {
                Http::with_max_line(Arc::clone(&spec.api.client.conn), spec.config.max_line)
                    .negotiating(Arc::clone(&wire))
            })
            .collect();
        let name = thread_name("kw-", &spec.api.resource.plural);
        let notices = Arc::new(Notices::default());
        let control = Arc::new(Control {
            name: name.clone(),
            stopping: AtomicBool::new(false),
            stop_tx: Mutex::new(Some(stop_tx)),
            stop_rx: stop_rx.clone(),
            abandon_tx: Mutex::new(Some(abandon_tx)),
            abandon_rx,
            terminal: Mutex::new(None),
            store: store.clone(),
            subscribers: Arc::new(Subscribers::new(parts.len(), stop_rx, Arc::clone(&notices))),
            counters: Counters::default().with_parts(parts.len()),
            notices,
            gate: Gate::new(spec.max_lists),
            running: AtomicUsize::new(parts.len()),
            agents: https.iter().map(|h| AgentSlot::new(h.agent().clone())).collect(),
        });
        let prepare = Prepare::new(name.clone(), spec.transform, spec.compact).skipping(spec.skip);
        let plural = &spec.api.resource.plural;
        // One pool of helpers for all the namespaces' workers (`engine/parallel.rs`).
        let mut helpers = Vec::new();
        let pool = match spec.parallel_sync {
            0 => None,
            n => match Pool::start(n, &prepare, writers[0].indexer(), &thread_name("kwd-", plural), &mut helpers) {
                Ok(pool) => Some(pool),
                Err(e) => {
                    join(helpers, &name);
                    return Err(e);
                }
            },
        };
        // A follower of a shard group registers before any thread starts, and its store reads
        // empty once what its followers listed outlived its member's lead (`Follow::dark`).
        let mut followers: Vec<Option<crate::shard::Follower>> = (0..parts.len())
            .map(|index| {
                let f = spec.config.follow.as_ref()?;
                let cutting = Arc::clone(&control.agents[index]);
                Some(f.0.register(crate::shard::Cut(Arc::new(move || cutting.cut()))))
            })
            .collect();
        if let Some(f) = &spec.config.follow {
            let (follow, ids) = (Arc::clone(&f.0), followers.iter().flatten().map(|f| f.id).collect::<Vec<_>>());
            store.set_dark(Box::new(move || follow.dark(&ids)));
        }
        let mut workers = Vec::with_capacity(parts.len() + helpers.len());
        for (index, ((part, writer), http)) in parts.into_iter().zip(writers).zip(https).enumerate() {
            let mut api = spec.api.clone();
            // Every request of the worker's (lists, watches, drift checks) sends the shard.
            api.shard.clone_from(&spec.config.shard);
            if let Some(ns) = part {
                api.namespace = Some(ns.into());
            }
            let delivery =
                Delivery::new(Arc::clone(&control.subscribers), index, writer.decoder(), spec.compact.is_some());
            let worker = Worker {
                api,
                http,
                machine: Machine::new(spec.config.clone(), seed()),
                control: Arc::clone(&control),
                writer,
                delivery,
                prepare: prepare.another(),
                pool: pool.clone(),
                drift_suspects: Default::default(),
                start_spread: spec.start_spread,
                reason: RelistReason::Initial,
                connected: false,
                shard_warned: false,
                shard_probed: false,
                follow: spec.config.follow.as_ref().zip(followers[index].take()).map(|(f, me)| {
                    crate::engine::worker::Following {
                        follow: Arc::clone(&f.0),
                        me,
                        seen: 0,
                        held: Vec::new(),
                        slot: Arc::clone(&control.agents[index]),
                    }
                }),
            };
            match spawn(worker, &name, &control) {
                Ok(w) => workers.push(w),
                Err(e) => {
                    // Those already started stop; report why.
                    control.request_stop();
                    drop(pool);
                    workers.extend(helpers);
                    join(workers, &name);
                    return Err(e);
                }
            }
        }
        // The helpers exit once every worker has dropped its copy of the pool.
        drop(pool);
        workers.extend(helpers);
        Ok(Engine { control, workers: Mutex::new(workers), wire })
    }

    /// A new consumer: the current state first, then live events.
    pub(crate) fn subscribe(&self, store: &Store<K>, capacity: usize, policy: SlowConsumer) -> Receiver<Item<K>> {
        self.control.subscribers.subscribe(store, capacity, policy)
    }
}

impl<K> Engine<K> {
    /// `kw-<plural>`: the threads' name, also used in logs.
    pub(crate) fn name(&self) -> &str {
        &self.control.name
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.control.stopping.load(Ordering::Relaxed)
    }

    pub(crate) fn store(&self) -> Store<K> {
        self.control.store.clone()
    }

    pub(crate) fn notices(&self) -> Receiver<Notice> {
        self.control.notices.receiver()
    }

    pub(crate) fn stats(&self) -> Stats {
        let mut s = self.control.counters.snapshot();
        s.objects = self.control.store.len();
        s.undecodable = self.control.store.undecodable();
        s.wire_format = self.wire.in_use().map(|e| match e {
            Encoding::Json => WireFormat::Json,
            Encoding::Protobuf => WireFormat::Protobuf,
        });
        self.control.subscribers.count(&mut s);
        s
    }

    /// Stops the threads and waits for them (bounded). Idempotent.
    pub(crate) fn stop(&self) {
        self.control.abandon();
        join(std::mem::take(&mut *self.workers.lock()), &self.control.name);
    }
}

/// Starts one worker thread; the receiver disconnects when it exits.
fn spawn<K: Watchable>(
    worker: Worker<K>,
    name: &str,
    control: &Arc<Control<K>>,
) -> Result<(JoinHandle<()>, Receiver<()>)> {
    let (done_tx, done_rx) = bounded::<()>(0);
    let thread_control = Arc::clone(control);
    let handle = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let _done = done_tx; // dropped when the thread exits, even by panic
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| worker.run())) {
                let e = guard::into_error(panic.as_ref());
                if guard::is_callback(panic.as_ref()) {
                    log::warn!("{}: {e}", thread_control.name);
                } else {
                    log::error!("bug: {}: {e}", thread_control.name);
                }
                thread_control.finish(e);
                thread_control.exited();
            }
        })
        .map_err(|e| Error::Spawn(e.to_string().into()))?;
    Ok((handle, done_rx))
}

/// A seed for a worker's jitter (backoff, start spread): from the operating system, or, should
/// that fail, from the clock and the thread (jitter spreads load; it guards nothing).
pub(crate) fn seed() -> u64 {
    use rand::TryRngCore as _;
    rand::rngs::OsRng.try_next_u64().unwrap_or_else(|_| {
        use std::hash::{DefaultHasher, Hash as _, Hasher as _};
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let mut hasher = DefaultHasher::new();
        (now, std::thread::current().id()).hash(&mut hasher);
        hasher.finish()
    })
}

/// Joins stopped worker threads, waiting at most `STOP_JOIN_LIMIT` in all: a thread still in a
/// connect (which cannot be interrupted) is left to finish when the connect times out.
fn join(workers: Vec<(JoinHandle<()>, Receiver<()>)>, name: &str) {
    let deadline = std::time::Instant::now() + STOP_JOIN_LIMIT;
    for (handle, done) in workers {
        match done.recv_deadline(deadline) {
            Err(RecvTimeoutError::Disconnected) | Ok(()) => {
                let _ = handle.join();
            }
            Err(RecvTimeoutError::Timeout) => {
                log::debug!("{name}: thread still connecting; it exits when the connect times out");
            }
        }
    }
}

/// `kw-<plural>` (workers) or `kwd-<plural>` (helpers that decode lists), cut to the 15 bytes
/// Linux shows.
fn thread_name(prefix: &str, plural: &str) -> String {
    let mut name = format!("{prefix}{plural}");
    let mut cut = name.len().min(15);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    name.truncate(cut);
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_names_fit_in_fifteen_bytes() {
        assert_eq!(thread_name("kw-", "pods"), "kw-pods");
        assert_eq!(thread_name("kw-", "customresourcedefinitions"), "kw-customresour");
        assert_eq!(thread_name("kwd-", "customresourcedefinitions"), "kwd-customresou");
    }
}
