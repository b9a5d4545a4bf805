//! The consumers of one watcher: their channels, each with its state for the delivery decision
//! (`consumer.rs`, which says what each consumer gets), and how the threads carry that decision
//! out: sending, waiting for room, holding back, dropping with a marker, the terminal error.
//!
//! The worker changes the store and takes the list of subscribers under their lock (see
//! `Delivery::send`), then sends outside it. So a consumer that subscribes at any moment gets
//! either the state before a change and then its event, or the state after it, never both; and
//! a worker waiting for a slow consumer never keeps anyone from subscribing.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use crossbeam_channel::{Receiver, Select, Sender, TrySendError, bounded, select, unbounded};
use parking_lot::{Mutex, MutexGuard};

use super::consumer::{self, Consumer, Decision, Kind, Moment, Policy};
use crate::cache::{Decode, Encoded, Replay, Store};
use crate::engine::gate::Stopped;
use crate::engine::notices::Notices;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::notice::{Notice, SlowConsumer};
use crate::resource::Watchable;
use crate::stats::Stats;

/// The item type of an event channel.
pub(crate) type Item<K> = Result<Event<K>>;

/// Items held back for their subscribers, in order (see [`Subscribers::deliver_ready`]): taken
/// from the front and put back there, never moved as a whole.
pub(super) type Backlog<K> = VecDeque<(Arc<[Sub<K>]>, Held<K>)>;

/// An item held back.
pub(super) enum Held<K> {
    Item(Item<K>),
    /// An `InitApply` of a compact store mode, held as the store holds its object and decoded
    /// when it goes out: a list that a consumer is behind on holds no decoded objects.
    InitApply(Encoded, Decode<K>),
    /// An `InitApply` of a compact store mode with the object decoded off the wire, held while
    /// a consumer keeps up (see [`decoded_soon`]), with the object's encoded length: it goes out
    /// as it is, not decoded again from the entry.
    Decoded(Arc<K>, usize),
}

impl<K> Held<K> {
    /// The item to send; `None` only if a compact entry no longer decodes (a bug: it decoded
    /// when it was stored), which is logged.
    pub(super) fn into_item(self) -> Option<Item<K>> {
        match self {
            Held::Item(item) => Some(item),
            Held::Decoded(obj, _) => Some(Ok(Event::InitApply(obj))),
            Held::InitApply(encoded, decode) => match encoded.bytes().and_then(|bytes| decode(&bytes)) {
                Ok(obj) => Some(Ok(Event::InitApply(Arc::new(obj)))),
                Err(e) => {
                    log::error!("bug: a compact store entry no longer decodes: {e}");
                    None
                }
            },
        }
    }
}

/// How many events a consumer's channel may hold before [`Subscribers::deliver_ready`] stops
/// decoding compact entries for it: the number of decoded objects the worker keeps a reference
/// to (`KEEP` in delivery/mod.rs), so that the consumer's drop of such an object is rarely the
/// last one (see `Kept` there).
const DECODED_WAITING: usize = 128;

/// Whether an `InitApply` of a compact store mode, put into a backlog behind `ahead` items, is
/// to be decoded for some consumer of `subs` when it goes out, as far as can be told now: a
/// lagging consumer takes every item at once, a blocking one while its channel holds fewer than
/// [`DECODED_WAITING`] events. Then the object decoded off the wire may wait in the backlog
/// instead of its entry ([`Held::Decoded`]), and the decode from the entry is saved.
pub(super) fn decoded_soon<K>(subs: &[Sub<K>], ahead: usize) -> bool {
    subs.iter().any(|s| s.lagging || s.tx.len().saturating_add(ahead) < DECODED_WAITING)
}

/// One consumer's channel, and its state for the delivery decision.
///
/// A lagging consumer's channel is unbounded and the decision keeps it to `room` events (the
/// capacity and the replay it started with), and beyond them the lag marker and the terminal
/// error, so neither ever waits for room (a blocking consumer's channel has no such slots: it
/// is read, so the terminal error waits its turn). A lagging consumer is never waited for, so
/// nothing needs a bounded channel's wake-up, and an unbounded channel discards its messages the
/// moment its receiver is dropped: a consumer that drops its receiver in the middle of an
/// episode leaves no queue behind and is found out (and forgotten) at the next event, which a
/// full bounded channel would hide for good. The roster holds no receiver of its own, so
/// dropping the consumer's disconnects the channel.
pub(super) struct Sub<K> {
    id: u64,
    tx: Sender<Item<K>>,
    /// A blocking consumer's channel capacity.
    capacity: usize,
    /// [`SlowConsumer::Lag`]: the policy, fixed at subscription (the decision's state holds it
    /// too; this copy is read without taking that lock).
    lagging: bool,
    /// Shared by every copy of this `Sub` (each worker of a watcher over several namespaces
    /// delivers to it); locked for one decision and the sends it makes, which never wait.
    consumer: Arc<Mutex<Consumer>>,
}

impl<K> Sub<K> {
    /// Whether the consumer has dropped its receiver, as far as a look can tell, for counting
    /// only. A lagging consumer's channel is emptied at the drop (see [`Sub`]) and a look
    /// cannot tell it from an empty live one; a blocking consumer's full channel that is ready
    /// for a send has lost its receiver (a live one is ready only with room). A channel found
    /// gone by a send is removed from the roster, which a look never does (another thread may
    /// send in between).
    fn looks_gone(&self) -> bool {
        if self.lagging || !self.tx.is_full() {
            return false;
        }
        let mut probe = Select::new();
        probe.send(&self.tx);
        probe.try_ready().is_ok() && self.tx.is_full()
    }
}

impl<K> Clone for Sub<K> {
    fn clone(&self) -> Self {
        Sub {
            id: self.id,
            tx: self.tx.clone(),
            capacity: self.capacity,
            lagging: self.lagging,
            consumer: Arc::clone(&self.consumer),
        }
    }
}

/// The consumers of one watcher, shared by its handle (subscribing, [`Stats`]) and its worker
/// threads (delivery, and the last one's [`close`](Self::close)).
pub(crate) struct Subscribers<K> {
    /// Subscribing and delivery synchronize on this lock (the worker holds it while it changes
    /// the store: see `Delivery::send`).
    roster: Mutex<Roster<K>>,
    /// Closed on stop: a send waiting for a slow consumer gives up.
    stop: Receiver<()>,
    notices: Arc<Notices>,
    /// Events dropped for lagging consumers ([`Stats::lagged`]).
    lagged: AtomicU64,
    /// Delivery's work so far: decisions made, and items put into and taken out of backlogs.
    /// It grows by a constant per event whatever the consumers do (tests/integration/model.rs checks it).
    work: AtomicU64,
}

/// The subscriber list. Only the workers send.
pub(super) struct Roster<K> {
    /// Rebuilt when a subscriber comes or goes, so taking it per event is one `Arc` clone.
    subs: Arc<[Sub<K>]>,
    /// The watcher's parts (namespaces watched apart), each of which relists on its own.
    parts: usize,
    next_id: u64,
    closed: bool,
    /// The terminal error the watcher ended with, for consumers that attach after the end.
    ended_with: Option<Error>,
    /// Per part, the error it waits to retry after, until it next reaches the server: a
    /// consumer that attaches meanwhile gets it after the replay, since the retries may not
    /// report again (a refused connection is reported once per run of refusals,
    /// docs/protocol.md §6.10).
    retrying: Vec<Option<Error>>,
}

impl<K> Subscribers<K> {
    /// No consumers yet, for a watcher of `parts` parts (each relists on its own); `stop`
    /// closes when the watcher stops; lag episodes are announced on `notices`.
    pub(crate) fn new(parts: usize, stop: Receiver<()>, notices: Arc<Notices>) -> Self {
        let parts = parts.max(1);
        let roster = Roster {
            subs: Arc::from(Vec::new()),
            parts,
            next_id: 0,
            closed: false,
            ended_with: None,
            retrying: vec![None; parts],
        };
        Subscribers { roster: Mutex::new(roster), stop, notices, lagged: AtomicU64::new(0), work: AtomicU64::new(0) }
    }

    /// The lock a store change is made under (`Delivery::send`).
    pub(super) fn lock(&self) -> MutexGuard<'_, Roster<K>> {
        self.roster.lock()
    }

    /// Counts `n` units of delivery's work (see `work`).
    pub(super) fn worked(&self, n: usize) {
        self.work.fetch_add(n as u64, Relaxed);
    }

    /// Fills in what the consumers count in `stats`: events waiting in their channels, how
    /// many are still there, and the events dropped for lagging ones.
    pub(crate) fn count(&self, stats: &mut Stats) {
        let roster = self.roster.lock();
        stats.queued = roster.queued();
        stats.subscribers = roster.len();
        stats.lagged = self.lagged.load(Relaxed);
        #[cfg(feature = "fuzzing")]
        {
            stats.delivery_work = self.work.load(Relaxed);
        }
    }

    /// No more events: the channels end once their consumers drained them, after `terminal`
    /// (if any), which is delivered behind every queued event (see
    /// [`deliver_final`](Self::deliver_final)). A consumer attaching later gets `terminal`.
    pub(crate) fn close(&self, terminal: Option<Error>, abandon: &Receiver<()>) {
        let subs = {
            let mut roster = self.roster.lock();
            let subs = roster.subscribers();
            roster.close(terminal.clone());
            subs
        };
        if let Some(e) = terminal {
            self.deliver_final(&subs, &e, abandon);
        }
    }
}

impl<K: Watchable> Subscribers<K> {
    /// A new consumer of `store`: its current state first, then live events.
    pub(crate) fn subscribe(&self, store: &Store<K>, capacity: usize, policy: SlowConsumer) -> Receiver<Item<K>> {
        let mut roster = self.roster.lock();
        // Under this lock no worker can change the store: the replay and the live events that
        // follow it fit together exactly.
        let replay =
            if roster.is_closed() { Replay { events: Vec::new(), relisting: Vec::new() } } else { store.replay() };
        roster.subscribe(replay, capacity, policy)
    }
}

impl<K> fmt::Debug for Roster<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Roster").field("subscribers", &self.subs.len()).field("closed", &self.closed).finish()
    }
}

impl<K> Roster<K> {
    /// The current subscribers, to deliver to after the lock is released.
    pub(super) fn subscribers(&self) -> Arc<[Sub<K>]> {
        Arc::clone(&self.subs)
    }

    /// A new consumer: a channel with room for `capacity` events beyond the replay, which it
    /// gets first (and, for a lagging consumer, room for the lag marker and the terminal
    /// error). Its delivery state starts where the replay leaves it: inside the relists in
    /// progress. Once the roster is closed the channel is already disconnected.
    fn subscribe(&mut self, replay: Replay<K>, capacity: usize, policy: SlowConsumer) -> Receiver<Item<K>> {
        let retrying: Vec<Error> = self.retrying.iter().flatten().cloned().collect();
        let room = capacity.saturating_add(replay.events.len()).saturating_add(retrying.len());
        let (tx, rx, policy) = match policy {
            SlowConsumer::Lag => {
                let (tx, rx) = unbounded();
                (tx, rx, Policy::Lag { room })
            }
            _ => {
                let (tx, rx) = bounded(room);
                (tx, rx, Policy::Block)
            }
        };
        if self.closed {
            // Already ended: the channel holds only why, then is closed.
            if let Some(e) = &self.ended_with {
                let _ = tx.try_send(Err(e.clone()));
            }
            return rx;
        }
        // Cannot fail: the channel has room for the whole replay and the errors, and nobody
        // else sends yet.
        for ev in replay.events {
            let _ = tx.try_send(Ok(ev));
        }
        for e in retrying {
            let _ = tx.try_send(Err(e));
        }
        let consumer = Arc::new(Mutex::new(Consumer::new(policy, self.parts, &replay.relisting)));
        let lagging = matches!(policy, Policy::Lag { .. });
        let sub = Sub { id: self.next_id, tx, capacity: room, lagging, consumer };
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
    fn close(&mut self, ended_with: Option<Error>) {
        self.closed = true;
        self.ended_with = ended_with;
        self.subs = Arc::from(Vec::new());
    }

    /// Part `part` now waits to retry after `error` (`Some`), or reached the server (`None`).
    pub(super) fn retrying(&mut self, part: usize, error: Option<Error>) {
        if let Some(slot) = self.retrying.get_mut(part) {
            *slot = error;
        }
    }

    fn is_closed(&self) -> bool {
        self.closed
    }

    /// Events waiting in the channels of consumers that are still there.
    fn queued(&self) -> usize {
        self.subs.iter().filter(|s| !s.looks_gone()).map(|s| s.tx.len()).sum()
    }

    /// Consumers that are still there.
    fn len(&self) -> usize {
        self.subs.iter().filter(|s| !s.looks_gone()).count()
    }
}

/// What carrying out a decision left to do.
enum Sent<K> {
    /// Done (sent, dropped, or the consumer is gone).
    Done,
    /// A blocking consumer has no room: the item, to wait with or to hold back.
    NoRoom(Item<K>),
}

impl<K> Subscribers<K> {
    /// Sends each item of `part` to every subscriber in `subs`, waiting for room where the
    /// decision says so; forgets those that went away. Fails only when the watcher is stopping.
    pub(super) fn deliver(
        &self,
        subs: &[Sub<K>],
        part: usize,
        items: impl IntoIterator<Item = Item<K>>,
    ) -> Result<(), Stopped> {
        let mut gone = Vec::new();
        for item in items {
            let Some((last, rest)) = subs.split_last() else { return Ok(()) };
            for sub in rest {
                self.send(sub, part, clone_item(&item), &mut gone)?;
            }
            self.send(last, part, item, &mut gone)?;
        }
        if !gone.is_empty() {
            self.roster.lock().remove(&gone);
        }
        Ok(())
    }

    /// Delivers the items of `part` at the front of `backlog`, in order, as long as that never
    /// waits; the rest stay, for [`deliver`](Self::deliver) later. An item that some blocking
    /// consumer has no room for stays at the front for those consumers only, and everything
    /// after it stays, so each consumer still gets its items in order; a consumer found gone is
    /// forgotten. Each call's work is the items it delivers plus one (the backlog is never
    /// moved as a whole), so a consumer that is behind costs nothing per event. Used while a
    /// response body is being read. `decoded` is shown the object of each compact store mode's
    /// `InitApply` sent here (decoded here from its entry, or held decoded), with its encoded
    /// length.
    pub(super) fn deliver_ready(&self, backlog: &mut Backlog<K>, part: usize, decoded: &mut dyn FnMut(&Arc<K>, usize)) {
        let mut gone = Vec::new();
        while let Some((subs, held)) = backlog.pop_front() {
            self.worked(1);
            // Nobody to decode an entry for.
            if subs.is_empty() {
                continue;
            }
            let (encoded, decoded_here) = match &held {
                Held::InitApply(encoded, _) => (Some(encoded.len()), true),
                Held::Decoded(_, len) => (Some(*len), false),
                Held::Item(_) => (None, false),
            };
            // An entry is decoded only for a consumer whose channel holds few events: decoded
            // objects waiting in a channel are memory the compact store modes do not have
            // otherwise, and the channel may hold a thousand of them. It waits here, as the
            // entry, for the next call. (An object already decoded is memory either way.)
            if decoded_here && subs.iter().all(|s| !s.lagging && s.tx.len() >= DECODED_WAITING) {
                backlog.push_front((subs, held));
                self.worked(1);
                break;
            }
            let Some(item) = held.into_item() else { continue };
            if let (Some(len), Ok(Event::InitApply(obj))) = (encoded, &item) {
                decoded(obj, len);
            }
            let mut waiting = Vec::new();
            for sub in subs.iter() {
                if gone.contains(&sub.id) {
                    continue;
                }
                if let Sent::NoRoom(_) = self.carry_out(sub, part, clone_item(&item), false, &mut gone) {
                    waiting.push(sub.clone());
                }
            }
            if !waiting.is_empty() {
                backlog.push_front((Arc::from(waiting), Held::Item(item)));
                self.worked(1);
                break;
            }
        }
        if !gone.is_empty() {
            self.roster.lock().remove(&gone);
        }
    }

    /// Sends `item` to `sub` as the decision says, waiting for room if it says so.
    fn send(&self, sub: &Sub<K>, part: usize, item: Item<K>, gone: &mut Vec<u64>) -> Result<(), Stopped> {
        if gone.contains(&sub.id) {
            return Ok(());
        }
        let Sent::NoRoom(item) = self.carry_out(sub, part, item, true, gone) else { return Ok(()) };
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

    /// Decides what `sub` gets of `item` (`consumer::decide`) and does all of it that never
    /// waits, under the consumer's lock: a send, a marker, a drop, the counters and the notice.
    /// A blocking consumer without room gets the item back (to wait with, or to hold back when
    /// `may_wait` is false).
    fn carry_out(&self, sub: &Sub<K>, part: usize, item: Item<K>, may_wait: bool, gone: &mut Vec<u64>) -> Sent<K> {
        self.worked(1);
        let mut state = sub.consumer.lock();
        let at = Moment { part, queued: sub.tx.len(), capacity: sub.capacity, may_wait };
        let outcome = consumer::decide(&mut state, Kind::of(&item), at);
        if outcome.dropped() {
            self.lagged.fetch_add(1, Relaxed);
        }
        let sent = match outcome.decision {
            Decision::Send { then_marker } => match sub.tx.try_send(item) {
                Ok(()) => {
                    if let Some(n) = then_marker {
                        // The channel has a slot for it (see `Sub`): it never fails for room.
                        let _ = sub.tx.try_send(Err(consumer::marker(n)));
                    }
                    Sent::Done
                }
                Err(TrySendError::Disconnected(_)) => {
                    gone.push(sub.id);
                    Sent::Done
                }
                // A blocking consumer another worker filled meanwhile.
                Err(TrySendError::Full(item)) => Sent::NoRoom(item),
            },
            Decision::Wait | Decision::Hold => Sent::NoRoom(item),
            Decision::Marker => {
                if let Err(TrySendError::Disconnected(_)) = sub.tx.try_send(Err(consumer::marker(1))) {
                    gone.push(sub.id);
                }
                Sent::Done
            }
            Decision::Drop => Sent::Done,
        };
        drop(state);
        if let Some(dropped) = outcome.episode_ended {
            self.notices.send(Notice::Lagged { dropped });
        }
        sent
    }

    /// Delivers the watcher's terminal error to every consumer after what is already queued,
    /// and never drops it: a consumer that is behind gets it once it has caught up. Gives up
    /// only when the user stops the watcher (`abandon` closes) or the consumer went away.
    fn deliver_final(&self, subs: &[Sub<K>], error: &Error, abandon: &Receiver<()>) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// What a consumer's channel holds, briefly.
    fn drain(rx: &Receiver<Item<String>>) -> Vec<String> {
        rx.try_iter()
            .map(|i| match i {
                Ok(Event::Init) => "Init".to_owned(),
                Ok(Event::InitApply(o)) => format!("InitApply({o})"),
                Ok(Event::InitDone) => "InitDone".to_owned(),
                Ok(Event::Apply(o)) => format!("Apply({o})"),
                Ok(Event::Delete(o)) => format!("Delete({o})"),
                Err(Error::Lagged { dropped }) => format!("Lagged({dropped})"),
                Err(e) => format!("Err({e})"),
            })
            .collect()
    }

    struct Bench {
        subscribers: Subscribers<String>,
        /// Held: the watcher is not stopping.
        _stop: Sender<()>,
    }

    impl Bench {
        fn new() -> Self {
            let (stop_tx, stop_rx) = bounded(1);
            Bench { subscribers: Subscribers::new(1, stop_rx, Arc::default()), _stop: stop_tx }
        }

        fn subscribe(&self, capacity: usize, policy: SlowConsumer) -> Receiver<Item<String>> {
            self.subscribers.roster.lock().subscribe(no_replay(), capacity, policy)
        }

        fn send(&self, ev: Event<String>) {
            let subs = self.subscribers.roster.lock().subscribers();
            assert!(self.subscribers.deliver(&subs, 0, [Ok(ev)]).is_ok());
        }
    }

    fn no_replay() -> Replay<String> {
        Replay { events: Vec::new(), relisting: Vec::new() }
    }

    fn obj(name: &str) -> Arc<String> {
        Arc::new(name.to_owned())
    }

    #[test]
    fn a_lagging_consumer_that_caught_up_during_a_relist_is_told_again_when_it_ends() {
        let bench = Bench::new();
        let rx = bench.subscribe(2, SlowConsumer::Lag);
        bench.send(Event::Init);
        bench.send(Event::InitApply(obj("a")));
        bench.send(Event::InitApply(obj("b"))); // no room: dropped, the marker is queued
        bench.send(Event::InitApply(obj("c"))); // dropped: the marker is not read yet
        assert_eq!(drain(&rx), ["Init", "InitApply(a)", "Lagged(1)"]);
        // The consumer read the store before the relist ended: b and c were not in it.
        bench.send(Event::InitApply(obj("d")));
        bench.send(Event::InitDone);
        // Catching up lost a (sent before the marker), b and c (dropped); d came after.
        assert_eq!(drain(&rx), ["InitApply(d)", "InitDone", "Lagged(3)"]);
        // The next relist, with nothing dropped: no marker.
        bench.send(Event::Init);
        bench.send(Event::InitDone);
        assert_eq!(drain(&rx), ["Init", "InitDone"]);
    }

    #[test]
    fn a_marker_read_after_the_relist_ended_covers_it() {
        let bench = Bench::new();
        let rx = bench.subscribe(1, SlowConsumer::Lag);
        bench.send(Event::Init);
        bench.send(Event::InitApply(obj("a"))); // dropped, marker queued
        bench.send(Event::InitDone); // dropped: the store now has everything
        assert_eq!(drain(&rx), ["Init", "Lagged(1)"]);
        bench.send(Event::Apply(obj("b")));
        assert_eq!(drain(&rx), ["Apply(b)"]);
    }

    /// A lagging consumer that subscribes in the middle of a relist (its replay ends inside it)
    /// and reads its marker before the relist ends gets a second marker after `InitDone`. Its
    /// count of relists used to start at zero, so the drops were never counted as uncovered.
    #[test]
    fn a_lagging_consumer_that_subscribed_mid_relist_is_told_again_when_it_ends() {
        let bench = Bench::new();
        let replay = Replay { events: vec![Event::Init, Event::InitApply(obj("a"))], relisting: vec![(0, 1)] };
        let rx = bench.subscribers.roster.lock().subscribe(replay, 1, SlowConsumer::Lag);
        bench.send(Event::InitApply(obj("b")));
        bench.send(Event::InitApply(obj("c"))); // no room: the marker
        bench.send(Event::InitApply(obj("d"))); // dropped
        assert_eq!(drain(&rx), ["Init", "InitApply(a)", "InitApply(b)", "Lagged(1)"]);
        bench.send(Event::InitDone);
        assert_eq!(drain(&rx), ["InitDone", "Lagged(4)"], "a to d reach the store only now");
    }

    #[test]
    fn a_dropped_lagging_consumer_leaves_no_queue_and_is_forgotten_at_the_next_event() {
        let bench = Bench::new();
        let rx = bench.subscribe(1, SlowConsumer::Lag);
        for name in ["a", "b", "c"] {
            bench.send(Event::Apply(obj(name)));
        }
        let kept = Arc::new("kept".to_owned());
        bench.send(Event::Apply(Arc::clone(&kept)));
        drop(rx);
        assert_eq!(Arc::strong_count(&kept), 1, "the dropped channel let go of what it held");
        bench.send(Event::Apply(obj("d")));
        assert_eq!(bench.subscribers.roster.lock().len(), 0);
    }

    /// The objects it decodes from compact entries are shown to the caller (the worker keeps a
    /// reference to them, so that it, not the consumer, frees them: `Kept` in delivery/mod.rs);
    /// objects that were decoded already are not.
    #[test]
    fn delivery_that_never_waits_shows_the_objects_it_decodes() {
        fn decode(bytes: &[u8]) -> Result<String, String> {
            String::from_utf8(bytes.to_vec()).map_err(|e| e.to_string())
        }
        let bench = Bench::new();
        let rx = bench.subscribe(8, SlowConsumer::Block);
        let subs = bench.subscribers.roster.lock().subscribers();
        let entry = crate::cache::Encoded::plain(None, None, b"from-entry");
        let mut backlog: Backlog<String> = VecDeque::from([
            (Arc::clone(&subs), Held::Item(Ok(Event::InitApply(obj("decoded"))))),
            (Arc::clone(&subs), Held::InitApply(entry, decode)),
        ]);
        let mut shown = Vec::new();
        bench.subscribers.deliver_ready(&mut backlog, 0, &mut |o, len| shown.push((Arc::clone(o), len)));
        assert_eq!(drain(&rx), ["InitApply(decoded)", "InitApply(from-entry)"]);
        assert_eq!(shown.len(), 1, "{shown:?}");
        assert_eq!((shown[0].0.as_str(), shown[0].1), ("from-entry", 10));
    }

    /// A compact entry is not decoded for a consumer whose channel already holds
    /// `DECODED_WAITING` events: it waits, undecoded, until the consumer has read them.
    #[test]
    fn delivery_that_never_waits_decodes_no_entry_for_a_consumer_far_behind() {
        static DECODED: AtomicUsize = AtomicUsize::new(0);
        fn decode(bytes: &[u8]) -> Result<String, String> {
            DECODED.fetch_add(1, Relaxed);
            String::from_utf8(bytes.to_vec()).map_err(|e| e.to_string())
        }
        let bench = Bench::new();
        let rx = bench.subscribe(2 * DECODED_WAITING, SlowConsumer::Block);
        for i in 0..DECODED_WAITING {
            bench.send(Event::Apply(obj(&i.to_string())));
        }
        let subs = bench.subscribers.roster.lock().subscribers();
        let entry = crate::cache::Encoded::plain(None, None, b"entry");
        let mut backlog: Backlog<String> = VecDeque::from([(Arc::clone(&subs), Held::InitApply(entry, decode))]);
        bench.subscribers.deliver_ready(&mut backlog, 0, &mut |_, _| {});
        assert_eq!((backlog.len(), DECODED.load(Relaxed)), (1, 0), "waits as the entry");
        assert_eq!(drain(&rx).len(), DECODED_WAITING);
        bench.subscribers.deliver_ready(&mut backlog, 0, &mut |_, _| {});
        assert_eq!((backlog.len(), DECODED.load(Relaxed)), (0, 1));
        assert_eq!(drain(&rx), ["InitApply(entry)"]);
    }

    #[test]
    fn delivery_that_never_waits_skips_a_full_consumer_and_keeps_its_items_in_order() {
        let bench = Bench::new();
        let (full, free) = {
            let mut roster = bench.subscribers.roster.lock();
            (
                roster.subscribe(no_replay(), 1, SlowConsumer::Block),
                roster.subscribe(no_replay(), 8, SlowConsumer::Block),
            )
        };
        let subs = bench.subscribers.roster.lock().subscribers();
        let mut backlog: Backlog<String> =
            ["a", "b", "c"].iter().map(|n| (Arc::clone(&subs), Held::Item(Ok(Event::Apply(obj(n)))))).collect();
        bench.subscribers.deliver_ready(&mut backlog, 0, &mut |_, _| {});
        assert_eq!(drain(&free), ["Apply(a)", "Apply(b)"], "b went to the consumer with room");
        assert_eq!(drain(&full), ["Apply(a)"]);
        assert_eq!(backlog.len(), 2, "b (for the full one only) and c stay");
        // A full consumer that is gone holds nobody back.
        drop(full);
        bench.subscribers.deliver_ready(&mut backlog, 0, &mut |_, _| {});
        assert!(backlog.is_empty());
        assert_eq!(drain(&free), ["Apply(c)"]);
        assert_eq!(bench.subscribers.roster.lock().len(), 1);
    }
}
