//! Where events and notices go: the consumers' channels, each with its slow-consumer policy.
//!
//! The worker applies a change to the store and takes the list of subscribers under the hub
//! lock, then sends outside it. So a consumer that subscribes at any moment gets either the
//! state before a change and then its event, or the state after it, never both; and a worker
//! waiting for a slow consumer never keeps anyone from subscribing.

use std::fmt;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, TrySendError, bounded, select};

use crate::engine::counters::{self, Counters};
pub(crate) use crate::engine::gate::Stopped;
use crate::engine::notices::Notices;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::notice::{Notice, SlowConsumer};

/// The item type of an event channel.
pub(crate) type Item<K> = Result<Event<K>>;

/// Items held back for their subscribers, in order (see [`Outbox::deliver_ready`]).
pub(crate) type Backlog<K> = Vec<(Arc<[Sub<K>]>, Item<K>)>;

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

    /// Delivers the items at the front of `backlog`, in order, as long as that never waits (no
    /// blocking consumer of the next item is full; lagging ones never wait); the rest stay, for
    /// [`deliver`](Self::deliver) later. Used while a response body is being read.
    pub(crate) fn deliver_ready(&self, backlog: &mut Backlog<K>) {
        let mut items = std::mem::take(backlog).into_iter();
        for (subs, item) in items.by_ref() {
            // Only this thread sends, so a channel that is not full now has room for the item.
            if subs.iter().all(|s| s.lag.is_some() || !s.tx.is_full()) {
                let _ = self.deliver(&subs, [item]);
            } else {
                backlog.push((subs, item));
                break;
            }
        }
        backlog.extend(items);
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
                counters::add(&self.counters.lagged, 1);
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
            counters::add(&self.counters.lagged, 1);
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
