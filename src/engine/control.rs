//! The control block one watcher's handle and threads share: the stop signal, the consumers,
//! the counters, the notices, the list gate, and the one end path every thread takes
//! ([`Control::finish`], then [`Control::exited`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::cache::Store;
use crate::engine::counters::Counters;
use crate::engine::delivery::Subscribers;
use crate::engine::gate::Gate;
use crate::engine::notices::Notices;
use crate::error::Error;
use crate::notice::Notice;

/// The control block: what the public handle and the worker threads share.
pub(crate) struct Control<K> {
    /// `kw-<plural>`: the thread name, also used in logs.
    pub(crate) name: String,
    pub(crate) stopping: AtomicBool,
    /// Dropped on stop: every `recv(stop_rx)` in a `select!` wakes at once.
    pub(crate) stop_tx: Mutex<Option<Sender<()>>>,
    pub(crate) stop_rx: Receiver<()>,
    /// Dropped when the user stops the watcher (`stop`, `Drop`), not when it ends by itself: the
    /// terminal error waits for a consumer that is behind until then.
    pub(crate) abandon_tx: Mutex<Option<Sender<()>>>,
    pub(crate) abandon_rx: Receiver<()>,
    /// The terminal error a thread ended with; the last thread to exit delivers it after every
    /// event, so nothing follows it.
    pub(crate) terminal: Mutex<Option<Error>>,
    /// The store, to wake `wait_until_ready` callers at once when the watcher ends.
    pub(crate) store: Store<K>,
    /// The consumers; each worker's `Delivery` holds them too.
    pub(crate) subscribers: Arc<Subscribers<K>>,
    pub(crate) counters: Counters,
    pub(crate) notices: Arc<Notices>,
    /// List limit and shared `Retry-After` across the workers.
    pub(crate) gate: Gate,
    /// Workers still running; the last one to end closes the consumers' channels.
    pub(crate) running: AtomicUsize,
    /// Each worker's agent: shutting it down interrupts a blocked read.
    pub(crate) agents: Vec<Arc<AgentSlot>>,
}

/// One worker's agent, as `stop` and its shard group reach it. A shut down agent stays shut,
/// so a worker whose request its group cut ([`cut`](Self::cut)) goes on with a fresh one
/// ([`replace`](Self::replace)).
pub(crate) struct AgentSlot {
    agent: Mutex<ureq::Agent>,
    /// A cut since the last `replace`.
    cut: AtomicBool,
}

impl AgentSlot {
    pub(crate) fn new(agent: ureq::Agent) -> Arc<AgentSlot> {
        Arc::new(AgentSlot { agent: Mutex::new(agent), cut: AtomicBool::new(false) })
    }

    /// Interrupts the request in flight and every later one on this agent.
    fn shutdown(&self) {
        self.agent.lock().clone().shutdown();
    }

    /// The worker's shard group cuts its request in flight: the share it follows changed.
    pub(crate) fn cut(&self) {
        let agent = self.agent.lock();
        self.cut.store(true, Ordering::Release);
        agent.clone().shutdown();
    }

    /// Whether a cut happened since the last [`replace`](Self::replace).
    pub(crate) fn was_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }

    /// The worker goes on with `agent` after a cut. Its owner checks for a stop after this
    /// (a stop that shut the old agent down has set the stopping flag before).
    pub(crate) fn replace(&self, agent: ureq::Agent) {
        let mut slot = self.agent.lock();
        *slot = agent;
        self.cut.store(false, Ordering::Release);
    }
}

impl<K> Control<K> {
    pub(crate) fn request_stop(&self) {
        if !self.stopping.swap(true, Ordering::AcqRel) {
            self.stop_tx.lock().take();
            for agent in &self.agents {
                agent.shutdown();
            }
        }
    }

    /// The user stops the watcher: stop, and give up delivering a terminal error.
    pub(crate) fn abandon(&self) {
        self.request_stop();
        self.abandon_tx.lock().take();
    }

    /// A worker thread is ending with `end`, before it hands over the events it held back:
    /// `wait_until_ready` and `wait_for_version` callers learn it, and why, at once (a consumer
    /// that is not reading must not hide it); a terminal error (the first, when several threads
    /// end) is announced by a `GaveUp` notice and kept for [`exited`](Self::exited) to deliver.
    pub(crate) fn ending(&self, end: &Error) {
        if matches!(end, Error::Stopped) {
            return;
        }
        let mut terminal = self.terminal.lock();
        if terminal.is_none() {
            log::debug!("{}: watcher ended: {end}", self.name);
            *terminal = Some(end.clone());
            self.notices.send(Notice::GaveUp { error: end.clone() });
        }
        drop(terminal);
        self.store.set_ended(end.clone());
    }

    /// A worker thread ends with `end`, its held-back events handed over: a terminal error
    /// stops the sibling threads (other namespaces); `wait_until_ready` callers learn the end
    /// (already, through [`ending`](Self::ending), unless the watcher was stopped). The one end
    /// path: a normal end, a terminal error and a panic all come here.
    pub(crate) fn finish(&self, end: Error) {
        match end {
            Error::Stopped => self.store.set_ended(end),
            end => {
                self.ending(&end);
                self.request_stop();
            }
        }
    }

    /// A worker thread exits; the last one closes the consumers' channels, after delivering the
    /// terminal error (if any) behind every queued event, and then the notices channel.
    pub(crate) fn exited(&self) {
        if self.running.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let terminal = self.terminal.lock().take();
        self.subscribers.close(terminal, &self.abandon_rx);
        // Every channel a watcher hands out ends with it.
        self.notices.close();
    }
}
