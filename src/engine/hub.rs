//! Where events and notices go: the consumers' channels, each with its slow-consumer policy.
//!
//! The worker applies a change to the store and takes the list of subscribers under the hub
//! lock, then sends outside it. So a consumer that subscribes at any moment gets either the
//! state before a change and then its event, or the state after it, never both; and a worker
//! waiting for a slow consumer never keeps anyone from subscribing.

use std::fmt;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Select, Sender, TrySendError, bounded, select, unbounded};

use crate::cache::{Decode, Json};
use crate::engine::counters::{self, Counters};
pub(crate) use crate::engine::gate::Stopped;
use crate::engine::notices::Notices;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::notice::{Notice, SlowConsumer};

/// The item type of an event channel.
pub(crate) type Item<K> = Result<Event<K>>;

/// Items held back for their subscribers, in order (see [`Outbox::deliver_ready`]).
pub(crate) type Backlog<K> = Vec<(Arc<[Sub<K>]>, Held<K>)>;

/// An item held back.
pub(crate) enum Held<K> {
    Item(Item<K>),
    /// An `InitApply` of a compact store mode, held as the store holds its object and decoded
    /// when it goes out: a list that a consumer is behind on holds no decoded objects.
    InitApply(Json, Decode<K>),
}

impl<K> Held<K> {
    /// The item to send; `None` only if a compact entry no longer decodes (a bug: it decoded
    /// when it was stored), which is logged.
    pub(crate) fn into_item(self) -> Option<Item<K>> {
        match self {
            Held::Item(item) => Some(item),
            Held::InitApply(json, decode) => match json.bytes().and_then(|bytes| decode(&bytes)) {
                Ok(obj) => Some(Ok(Event::InitApply(Arc::new(obj)))),
                Err(e) => {
                    log::error!("bug: a compact store entry no longer decodes: {e}");
                    None
                }
            },
        }
    }
}

/// One consumer's channel.
pub(crate) struct Sub<K> {
    id: u64,
    tx: Sender<Item<K>>,
    /// With the lag policy: the episode in progress, shared by every copy of this `Sub`.
    lag: Option<Arc<LagState>>,
}

/// A lagging consumer's state. Its channel holds up to `room` events, and beyond them the lag
/// marker and the terminal error, so neither ever waits for room (a blocking consumer's channel
/// has no such slots: it is read, so the terminal error waits its turn).
///
/// The channel itself is unbounded and the hub keeps to `room`: a lagging consumer is never
/// waited for, so nothing needs a bounded channel's wake-up, and an unbounded channel discards
/// its messages the moment its receiver is dropped. So a consumer that drops its receiver in
/// the middle of an episode leaves no queue behind and is found out (and forgotten) at the next
/// event, which a full bounded channel would hide for good. The hub holds no receiver of its
/// own, so dropping the consumer's disconnects the channel.
pub(crate) struct LagState {
    /// Events dropped in the episode in progress; 0: not lagging.
    dropped: std::sync::atomic::AtomicU64,
    /// Events the channel may hold (the capacity, and the replay it started with).
    room: usize,
}

impl<K> Sub<K> {
    /// Whether the consumer has dropped its receiver, as far as a look can tell, for counting
    /// only. A lagging consumer's channel is emptied at the drop (see [`LagState`]) and a
    /// look cannot tell it from an empty live one; a blocking consumer's full channel that is
    /// ready for a send has lost its receiver (a live one is ready only with room). A channel
    /// found gone by a send is removed from the hub, which a look never does (another thread may
    /// send in between).
    fn looks_gone(&self) -> bool {
        if self.lag.is_some() || !self.tx.is_full() {
            return false;
        }
        let mut probe = Select::new();
        probe.send(&self.tx);
        probe.try_ready().is_ok() && self.tx.is_full()
    }
}

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
    /// first (and, for a lagging consumer, room for the lag marker and the terminal error). Once the hub is closed the
    /// channel is already disconnected.
    pub(crate) fn subscribe(
        &mut self,
        replay: Vec<Event<K>>,
        capacity: usize,
        policy: SlowConsumer,
    ) -> Receiver<Item<K>> {
        let room = capacity.saturating_add(replay.len());
        let (tx, rx) = match policy {
            SlowConsumer::Lag => unbounded(),
            _ => bounded(room),
        };
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
        let lag = (policy == SlowConsumer::Lag).then(|| Arc::new(LagState { dropped: 0.into(), room }));
        let sub = Sub { id: self.next_id, tx, lag };
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

    /// Events waiting in the channels of consumers that are still there.
    pub(crate) fn queued(&self) -> usize {
        self.subs.iter().filter(|s| !s.looks_gone()).map(|s| s.tx.len()).sum()
    }

    /// Consumers that are still there.
    pub(crate) fn len(&self) -> usize {
        self.subs.iter().filter(|s| !s.looks_gone()).count()
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

    /// Delivers the items at the front of `backlog`, in order, as long as that never waits;
    /// the rest stay, for [`deliver`](Self::deliver) later. An item that some blocking consumer
    /// has no room for stays for those consumers only, and everything after it stays, so each
    /// consumer still gets its items in order; a consumer found gone is forgotten. Used while a
    /// response body is being read.
    pub(crate) fn deliver_ready(&self, backlog: &mut Backlog<K>) {
        let mut gone = Vec::new();
        let mut items = std::mem::take(backlog).into_iter();
        for (subs, held) in items.by_ref() {
            let Some(item) = held.into_item() else { continue };
            let mut waiting = Vec::new();
            for sub in subs.iter() {
                if gone.contains(&sub.id) {
                    continue;
                }
                if let Some(lag) = &sub.lag {
                    self.send_lagging(sub, lag, clone_item(&item), &mut gone);
                    continue;
                }
                match sub.tx.try_send(clone_item(&item)) {
                    Ok(()) => {}
                    Err(TrySendError::Disconnected(_)) => gone.push(sub.id),
                    Err(TrySendError::Full(_)) => waiting.push(sub.clone()),
                }
            }
            if !waiting.is_empty() {
                backlog.push((Arc::from(waiting), Held::Item(item)));
                break;
            }
        }
        backlog.extend(items);
        if !gone.is_empty() {
            self.hub.lock().remove(&gone);
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
            // Empty: the consumer received the marker (or dropped its receiver, which emptied
            // the channel: the send below finds that out).
            if !sub.tx.is_empty() {
                lag.dropped.store(dropped + 1, Relaxed);
                counters::add(&self.counters.lagged, 1);
                return;
            }
            lag.dropped.store(0, Relaxed);
        }
        let lagging = sub.tx.len() >= lag.room;
        let result = if lagging { sub.tx.try_send(Err(Error::Lagged { dropped: 1 })) } else { sub.tx.try_send(item) };
        if let Err(TrySendError::Disconnected(_)) = result {
            gone.push(sub.id);
            return;
        }
        if dropped > 0 {
            // The episode is over.
            self.notices.send(Notice::Lagged { dropped });
        }
        if lagging {
            lag.dropped.store(1, Relaxed);
            counters::add(&self.counters.lagged, 1);
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
