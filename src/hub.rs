//! Where events and notices go: the consumers' channels, each with its slow-consumer policy.
//!
//! The worker applies a change to the store and takes the list of subscribers under the hub
//! lock, then sends outside it. So a consumer that subscribes at any moment gets either the
//! state before a change and then its event, or the state after it, never both; and a worker
//! waiting for a slow consumer never keeps anyone from subscribing.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TrySendError, bounded, select};

use crate::error::{Error, Result};
use crate::event::Event;
use crate::machine::RelistReason;
use crate::stats::{self, Counters};

/// The item type of an event channel.
pub(crate) type Item<K> = Result<Event<K>>;

/// Items held back for their subscribers, in order (see [`Outbox::deliver_or_defer`]).
pub(crate) type Backlog<K> = Vec<(Arc<[Sub<K>]>, Item<K>)>;

/// How many notices wait for a reader before the oldest are dropped.
const NOTICE_CAPACITY: usize = 256;

/// What the watcher does when a consumer's channel is full.
///
/// ```
/// # let server = kube_watcher::testing::FakeApiServer::start();
/// use kube_watcher::{Api, Client, Config, Error, SlowConsumer, Watcher};
/// use k8s_openapi::api::core::v1::Pod;
///
/// let watcher = Watcher::new(Api::<Pod>::all(Client::from_url(&server.url())?), Config::default())?;
/// let dashboard = watcher.subscribe_with(SlowConsumer::Lag); // never holds the watcher up
/// for event in dashboard.try_iter() {
///     if let Err(Error::Lagged { .. }) = event {
///         let _all = watcher.store().state(); // fell behind: catch up from the store
///     }
/// }
/// # Ok::<(), kube_watcher::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlowConsumer {
    /// Wait until the consumer makes room (backpressure): nothing is ever lost, and the
    /// watcher, its store and every other consumer wait for the slowest one. The default.
    #[default]
    Block,
    /// Never wait: an event that does not fit in the channel is dropped, and one
    /// [`Error::Lagged`] marker is queued after the last event that fitted. Events that arrive
    /// while the marker is still queued are dropped too; once the consumer has received the
    /// marker, events flow again. The store stays exact, so a consumer that reads the store
    /// after the marker has the effect of every event it missed. A dropped subscription is
    /// forgotten at the next event.
    Lag,
}

/// A change in a watcher's health: for logs, dashboards and status lines
/// (see [`Watcher::notices`](crate::Watcher::notices)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Notice {
    /// A request succeeded: the first one, and the first after each [`Notice::Reconnecting`].
    Connected,
    /// A request failed or a connection dropped; the watcher tries again after `delay`.
    Reconnecting {
        /// What went wrong (also delivered on the event channel).
        error: Error,
        /// The backoff before the next attempt.
        delay: Duration,
    },
    /// A full sync (relist) starts.
    Relisting {
        /// Why.
        reason: RelistReason,
    },
    /// A full sync completed: the store now holds `objects` objects.
    Synced {
        /// Why the sync happened.
        reason: RelistReason,
        /// Objects in the store.
        objects: usize,
        /// Objects that vanished while the watcher was not watching, each reported as an
        /// inferred `Delete` right after `InitDone`.
        inferred_deletes: usize,
    },
    /// A drift check compared the store with the server.
    DriftChecked {
        /// Objects found out of step (0: in step; otherwise a relist follows).
        mismatched: usize,
    },
    /// A consumer with [`SlowConsumer::Lag`] fell behind and caught up again: `dropped` events
    /// were dropped meanwhile (sent when the consumer has received its marker and the next
    /// event arrives).
    Lagged {
        /// How many events were dropped.
        dropped: u64,
    },
    /// The watcher ended with a terminal error (for instance [`Error::GaveUp`]).
    GaveUp {
        /// The terminal error.
        error: Error,
    },
}

/// One consumer's channel.
pub(crate) struct Sub<K> {
    id: u64,
    tx: Sender<Item<K>>,
    /// With the lag policy: the episode in progress, shared by every copy of this `Sub`.
    lag: Option<Arc<LagState>>,
}

/// A lagging consumer's state. Its channel has [`RESERVED`] slots beyond what events may fill:
/// one for the lag marker, one for the terminal error, so neither ever waits for room (a
/// blocking consumer's channel has none: it is read, so the terminal error waits its turn). The hub
/// holds no receiver of its own, so a consumer that drops its receiver disconnects the channel
/// and is forgotten at the next send.
#[derive(Default)]
pub(crate) struct LagState {
    /// Events dropped in the episode in progress; 0: not lagging.
    dropped: std::sync::atomic::AtomicU64,
}

/// Slots of a lagging consumer's channel kept free for the lag marker and the terminal error.
const RESERVED: usize = 2;

impl<K> Clone for Sub<K> {
    fn clone(&self) -> Self {
        Sub { id: self.id, tx: self.tx.clone(), lag: self.lag.clone() }
    }
}

/// The subscribers. Only the worker sends; subscribing and delivery synchronize on this lock.
pub(crate) struct Hub<K> {
    /// Rebuilt when a subscriber comes or goes, so taking it per event is one `Arc` clone.
    subs: Arc<[Sub<K>]>,
    next_id: u64,
    closed: bool,
    /// The terminal error the watcher ended with, for consumers that attach after the end.
    ended_with: Option<Error>,
}

impl<K> Default for Hub<K> {
    fn default() -> Self {
        Hub { subs: Arc::from(Vec::new()), next_id: 0, closed: false, ended_with: None }
    }
}

impl<K> fmt::Debug for Hub<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hub").field("subscribers", &self.subs.len()).field("closed", &self.closed).finish()
    }
}

impl<K> Hub<K> {
    /// The current subscribers, to deliver to after the lock is released.
    pub(crate) fn subscribers(&self) -> Arc<[Sub<K>]> {
        Arc::clone(&self.subs)
    }

    /// A new consumer: a channel with room for `capacity` events beyond `replay`, which it gets
    /// first (and, for a lagging consumer, the [`RESERVED`] slots). Once the hub is closed the
    /// channel is already disconnected.
    pub(crate) fn subscribe(
        &mut self,
        replay: Vec<Event<K>>,
        capacity: usize,
        policy: SlowConsumer,
    ) -> Receiver<Item<K>> {
        let reserved = if policy == SlowConsumer::Lag { RESERVED } else { 0 };
        let (tx, rx) = bounded(capacity.saturating_add(replay.len()).saturating_add(reserved));
        if self.closed {
            // Already ended: the channel holds only why, then is closed.
            if let Some(e) = &self.ended_with {
                let _ = tx.try_send(Err(e.clone()));
            }
            return rx;
        }
        for ev in replay {
            // Cannot fail: the channel has room for the whole replay and nobody else sends yet.
            let _ = tx.try_send(Ok(ev));
        }
        let sub = Sub { id: self.next_id, tx, lag: (policy == SlowConsumer::Lag).then(Arc::default) };
        self.next_id += 1;
        self.subs = self.subs.iter().cloned().chain([sub]).collect();
        rx
    }

    /// Forgets consumers whose receivers are gone.
    fn remove(&mut self, gone: &[u64]) {
        self.subs = self.subs.iter().filter(|s| !gone.contains(&s.id)).cloned().collect();
    }

    /// No more events: consumers see their channel end once they drain it (and once the caller
    /// drops the subscribers it took). A consumer attaching later gets `ended_with`, if any.
    pub(crate) fn close(&mut self, ended_with: Option<Error>) {
        self.closed = true;
        self.ended_with = ended_with;
        self.subs = Arc::from(Vec::new());
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }

    /// Events waiting in all channels.
    pub(crate) fn queued(&self) -> usize {
        self.subs.iter().map(|s| s.tx.len()).sum()
    }

    pub(crate) fn len(&self) -> usize {
        self.subs.len()
    }
}

/// The worker was stopped while delivering.
pub(crate) struct Stopped;

/// What delivery needs besides the subscribers: the stop signal, counters and notices.
pub(crate) struct Outbox<'a, K> {
    pub(crate) hub: &'a parking_lot::Mutex<Hub<K>>,
    pub(crate) stop: &'a Receiver<()>,
    pub(crate) counters: &'a Counters,
    pub(crate) notices: &'a Notices,
}

impl<K> Outbox<'_, K> {
    /// Sends each item to every subscriber in `subs`, by its policy; forgets those that went
    /// away. Fails only when the watcher is stopping.
    pub(crate) fn deliver(&self, subs: &[Sub<K>], items: impl IntoIterator<Item = Item<K>>) -> Result<(), Stopped> {
        let mut gone = Vec::new();
        for item in items {
            let Some((last, rest)) = subs.split_last() else { return Ok(()) };
            for sub in rest {
                self.send(sub, clone_item(&item), &mut gone)?;
            }
            self.send(last, item, &mut gone)?;
        }
        if !gone.is_empty() {
            self.hub.lock().remove(&gone);
        }
        Ok(())
    }

    /// Like [`deliver`](Self::deliver), but never waits: while a blocking consumer is full (or
    /// items are already held back), items go to `backlog` with their subscribers, in order,
    /// for [`deliver`](Self::deliver) later. Used while a response body is being read.
    pub(crate) fn deliver_or_defer(
        &self,
        subs: &Arc<[Sub<K>]>,
        items: impl IntoIterator<Item = Item<K>>,
        backlog: &mut Backlog<K>,
    ) {
        for item in items {
            // Only this thread sends, so a channel that is not full now has room for the item.
            if backlog.is_empty() && subs.iter().all(|s| s.lag.is_some() || !s.tx.is_full()) {
                // Cannot wait: no blocking consumer is full, and lagging ones never wait.
                let _ = self.deliver(subs, [item]);
            } else {
                backlog.push((Arc::clone(subs), item));
            }
        }
    }

    fn send(&self, sub: &Sub<K>, item: Item<K>, gone: &mut Vec<u64>) -> Result<(), Stopped> {
        if gone.contains(&sub.id) {
            return Ok(());
        }
        if let Some(lag) = &sub.lag {
            self.send_lagging(sub, lag, item, gone);
            return Ok(());
        }
        let item = match sub.tx.try_send(item) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Disconnected(_)) => {
                gone.push(sub.id);
                return Ok(());
            }
            Err(TrySendError::Full(item)) => item,
        };
        select! {
            send(sub.tx, item) -> res => {
                if res.is_err() {
                    gone.push(sub.id);
                }
                Ok(())
            }
            recv(self.stop) -> _ => Err(Stopped),
        }
    }

    /// [`SlowConsumer::Lag`]: never wait. An event that does not fit is dropped and the lag
    /// marker takes the reserved slot after the last event that fitted; later events are
    /// dropped too until the consumer has received the marker (its queue is empty again), so
    /// reading the store after the marker covers every dropped event. The notice and the
    /// counter report each episode's total when it ends.
    fn send_lagging(&self, sub: &Sub<K>, lag: &LagState, item: Item<K>, gone: &mut Vec<u64>) {
        use std::sync::atomic::Ordering::Relaxed;
        let dropped = lag.dropped.load(Relaxed);
        if dropped > 0 {
            if !sub.tx.is_empty() {
                lag.dropped.store(dropped + 1, Relaxed);
                stats::add(&self.counters.lagged, 1);
                return;
            }
            // The consumer received the marker: the episode is over.
            lag.dropped.store(0, Relaxed);
            self.notices.send(Notice::Lagged { dropped });
        }
        let room = sub.tx.capacity().unwrap_or(usize::MAX).saturating_sub(RESERVED);
        let result = if sub.tx.len() < room {
            sub.tx.try_send(item)
        } else {
            lag.dropped.store(1, Relaxed);
            stats::add(&self.counters.lagged, 1);
            sub.tx.try_send(Err(Error::Lagged { dropped: 1 }))
        };
        if let Err(TrySendError::Disconnected(_)) = result {
            gone.push(sub.id);
        }
    }

    /// Delivers the watcher's terminal error to every consumer after what is already queued,
    /// and never drops it: a consumer that is behind gets it once it has caught up. Gives up
    /// only when the user stops the watcher (`abandon` closes) or the consumer went away.
    pub(crate) fn deliver_final(&self, subs: &[Sub<K>], error: &Error, abandon: &Receiver<()>) {
        for sub in subs {
            let item = Err(error.clone());
            // A lagging consumer's reserved slot takes it at once; a blocking one may be behind.
            let item = match sub.tx.try_send(item) {
                Ok(()) | Err(TrySendError::Disconnected(_)) => continue,
                Err(TrySendError::Full(item)) => item,
            };
            select! {
                send(sub.tx, item) -> _ => {}
                recv(abandon) -> _ => return,
            }
        }
    }
}

fn clone_item<K>(item: &Item<K>) -> Item<K> {
    match item {
        Ok(ev) => Ok(ev.clone()),
        Err(e) => Err(e.clone()),
    }
}

/// The lifecycle notices channel: it keeps the latest notices (the oldest are dropped when it
/// is full), so a reader that starts late still sees how the watcher started.
pub(crate) struct Notices {
    tx: Sender<Notice>,
    rx: Receiver<Notice>,
}

impl Default for Notices {
    fn default() -> Self {
        let (tx, rx) = bounded(NOTICE_CAPACITY);
        Notices { tx, rx }
    }
}

impl Notices {
    /// Queues `notice`, dropping the oldest if the channel is full; never blocks.
    pub(crate) fn send(&self, notice: Notice) {
        if let Err(TrySendError::Full(notice)) = self.tx.try_send(notice) {
            let _ = self.rx.try_recv();
            let _ = self.tx.try_send(notice);
        }
    }

    /// The receiving end.
    pub(crate) fn receiver(&self) -> Receiver<Notice> {
        self.rx.clone()
    }
}

/// What the workers of one watcher share about the server's load: a limit on list requests in
/// flight, and a "not before" time set by any member's `Retry-After`.
pub(crate) struct Gate {
    /// A token per list allowed in flight; `None`: no limit.
    permits: Option<(Sender<()>, Receiver<()>)>,
    not_before: parking_lot::Mutex<Option<std::time::Instant>>,
}

impl Gate {
    pub(crate) fn new(max_lists: Option<usize>) -> Gate {
        let permits = max_lists.map(|n| {
            let (tx, rx) = bounded(n);
            for _ in 0..n {
                let _ = tx.try_send(());
            }
            (tx, rx)
        });
        Gate { permits, not_before: parking_lot::Mutex::new(None) }
    }

    /// Every member waits at least until `until` before its next request.
    pub(crate) fn delay_all(&self, until: std::time::Instant) {
        let mut nb = self.not_before.lock();
        if nb.is_none_or(|t| t < until) {
            *nb = Some(until);
        }
    }

    /// Waits (interruptibly) until the shared delay has passed.
    pub(crate) fn wait_turn(&self, stop: &Receiver<()>) -> Result<(), Stopped> {
        let until = *self.not_before.lock();
        let Some(left) = until.map(|t| t.saturating_duration_since(std::time::Instant::now())) else { return Ok(()) };
        if left.is_zero() {
            return Ok(());
        }
        select! {
            recv(stop) -> _ => Err(Stopped),
            recv(crossbeam_channel::after(left)) -> _ => Ok(()),
        }
    }

    /// Takes a list permit (waiting, interruptibly, for one); it is returned when dropped.
    pub(crate) fn list_permit(&self, stop: &Receiver<()>) -> Result<Permit<'_>, Stopped> {
        let Some((_, rx)) = &self.permits else { return Ok(Permit(None)) };
        select! {
            recv(stop) -> _ => Err(Stopped),
            recv(rx) -> _ => Ok(Permit(Some(self))),
        }
    }
}

/// A list permit of a [`Gate`]; returned on drop.
pub(crate) struct Permit<'a>(Option<&'a Gate>);

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if let Some((tx, _)) = self.0.and_then(|g| g.permits.as_ref()) {
            let _ = tx.try_send(());
        }
    }
}
