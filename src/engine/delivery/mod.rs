//! Delivery: how the events of one worker reach the watcher's consumers. It knows events and
//! consumers, not the protocol: the worker turns the machine's effects into store changes and
//! hands each change to [`Delivery::send`], the one way in.
//!
//! - [`Delivery`] is a worker's side: the events of the change in hand, what is held back, and
//!   the mode in force: at once (the default), in batches while a watch stream has lines
//!   buffered ([`batching`](Delivery::batching)), or never waiting for a consumer while a
//!   relist's body is read ([`relist_begins`](Delivery::relist_begins)). Whatever is held back
//!   goes out before the worker waits for the network ([`before_read`](Delivery::before_read))
//!   and between requests ([`quiet`](Delivery::quiet)).
//! - [`Subscribers`] (`subscribers.rs`) is what the watcher's threads and its handle share: the
//!   consumers' channels and their delivery state, subscribing, and closing at the end with the
//!   terminal error. It carries out, for each consumer and item, what `consumer.rs` decides:
//!   the one pure decision (send, wait, hold back, drop with a lag marker, the second marker
//!   after a relist) whose documentation states every delivery rule.

mod consumer;
mod subscribers;

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::MutexGuard;

use self::subscribers::{Backlog, Held, Roster, Sub};
pub(crate) use self::subscribers::{Item, Subscribers};
use crate::cache::{Decode, Encoded};
use crate::engine::gate::Stopped;
use crate::error::Error;
use crate::event::Event;
use crate::resource::Watchable;

/// Events that may wait in the backlog beyond one per object of the relist in progress.
const DEFER_SLACK: usize = 1024;
/// Compact store modes: how many objects of delivered events the worker keeps a reference to
/// (see `Delivery::kept`), and how many bytes of encoded objects they may come to.
const KEEP: usize = 2 * BATCH;
const KEEP_BYTES: usize = 1 << 20;
/// Events handed to consumers together: a consumer wakes once per batch, not once per event
/// (see `batching` and `relist`).
const BATCH: usize = 64;

/// How the store holds the object of a change, in the compact store modes (its encoded bytes),
/// which delivery may use instead of the decoded object.
pub(crate) enum Form {
    /// Not a compact store mode, or a change that is not about one object.
    Decoded,
    /// The object's bytes as the store keeps them: while a relist is read, the change's
    /// `InitApply` may wait as these bytes (decoded when it goes out), and its length sizes what
    /// the worker keeps of delivered objects (`Delivery::kept`).
    Encoded(Encoded),
    /// The change's `InitApply` exists only as these bytes (a relist shares the live entry
    /// unchanged): it follows the change's events, decoded if and when it goes out, and only
    /// if a consumer takes it.
    InitApply(Encoded),
}

/// One change of the store on its way to the consumers (see [`Delivery::send`]).
pub(crate) struct Change<'a, K> {
    hold: Hold<'a, K>,
    /// The part the change is of.
    part: usize,
    events: &'a mut Vec<Event<K>>,
    error: Option<Error>,
    held: Option<usize>,
}

/// The consumers' lock while a change is made; then the consumers its events go to.
enum Hold<'a, K> {
    Locked(MutexGuard<'a, Roster<K>>),
    Settled(Arc<[Sub<K>]>),
}

impl<K> Change<'_, K> {
    /// Where the change appends its events, in order.
    pub(crate) fn events(&mut self) -> &mut Vec<Event<K>> {
        self.events
    }

    /// An error to deliver after the events.
    pub(crate) fn report(&mut self, e: Error) {
        self.error = Some(e);
    }

    /// An error to deliver after the events, which the worker waits to retry after: a
    /// consumer that attaches before it next reaches the server gets it too
    /// ([`Delivery::reached`] ends that).
    pub(crate) fn report_retrying(&mut self, e: Error) {
        if let Hold::Locked(roster) = &mut self.hold {
            roster.retrying(self.part, Some(e.clone()));
        }
        self.error = Some(e);
    }

    /// The relist in progress now holds `n` objects (which bounds what may wait for slow
    /// consumers while its body is read).
    pub(crate) fn relist_holds(&mut self, n: usize) {
        self.held = Some(n);
    }

    /// Lets go of the consumers' lock: who gets the events is settled. What follows may run
    /// user code (predicates); the store change must come before.
    pub(crate) fn unlock(&mut self) {
        if let Hold::Locked(roster) = &self.hold {
            self.hold = Hold::Settled(roster.subscribers());
        }
    }
}

/// A worker's delivery to the consumers (see the module documentation).
pub(crate) struct Delivery<K> {
    subscribers: Arc<Subscribers<K>>,
    /// The part of the watcher this worker fills (one namespace, or the whole resource).
    part: usize,
    /// How the store decodes a compact entry, for the events held encoded.
    decode: Decode<K>,
    /// Compact store mode: events hold decoded objects the store does not (see `kept`).
    compact: bool,
    /// The events of the change in hand (a buffer reused from change to change).
    out: Vec<Event<K>>,
    /// Set from the start of a relist to its end or abandonment: events are then delivered
    /// without waiting for blocking consumers, so that a slow consumer never slows a list
    /// download (which a server's request deadline could then cut, again and again). What does
    /// not fit waits in `backlog`, delivered in order before the next request or with the
    /// relist's `InitDone` (`flush`). Its objects are what the relist in progress holds anyway
    /// (`Arc`s, or in the compact modes the entries' bytes, decoded when it goes out:
    /// [`Form::Encoded`]), so it may grow to the relist's size (`pending`) plus [`DEFER_SLACK`] (a
    /// server repeating one key cannot make it hold more); beyond that, delivery waits for
    /// consumers as everywhere else.
    relist: bool,
    /// Objects in the relist in progress.
    pending: usize,
    /// Set while a watch stream is read: events wait in `backlog` (up to [`BATCH`]) and go
    /// out together when the worker is about to wait for the network (`before_read`). A
    /// consumer then wakes once per burst instead of once per event; nothing waits while the
    /// stream is quiet.
    batching: bool,
    backlog: Backlog<K>,
    /// Compact store modes: the length of the encoded object being delivered, to count
    /// what `kept` holds.
    len: usize,
    /// Compact store modes: the objects of the last events delivered (see [`Kept`]).
    kept: Kept<K>,
}

/// Compact store modes: the objects of the last events delivered, with their encoded length.
/// Their events hold the only decoded copy, so whoever drops the last reference frees a whole
/// object; on the consumer's thread that is glibc freeing into the worker's arena, under the
/// arena's lock, against the worker allocating the next objects (the consumer slept twice per
/// event on that lock; in a relist, where every `InitApply` is decoded for the consumers, the
/// lock took a fifth of the client's time in `perf`). Holding a reference a little longer lets a
/// consumer that keeps up leave the freeing to the worker. Bounded by count ([`KEEP`]) and by
/// their encoded bytes ([`KEEP_BYTES`]: an object bigger than that is not kept); those the
/// consumers let go are freed before each wait for the network and before each batch of a
/// relist, and all are let go when nothing is being delivered (`quiet`).
struct Kept<K> {
    objects: VecDeque<(Arc<K>, usize)>,
    bytes: usize,
}

impl<K> Kept<K> {
    /// Keeps a reference to `obj`, delivered with `len` bytes encoded.
    fn keep(&mut self, obj: &Arc<K>, len: usize) {
        self.objects.push_back((Arc::clone(obj), len));
        self.bytes = self.bytes.saturating_add(len);
        while self.objects.len() > KEEP || self.bytes > KEEP_BYTES {
            let Some((_, len)) = self.objects.pop_front() else { break };
            self.bytes = self.bytes.saturating_sub(len);
        }
    }

    /// Frees, here, up to `n` of the oldest kept objects, as far as nobody else holds them any
    /// more: called for each object decoded off the wire that a list hands over, so that freeing
    /// goes along with decoding, one object out for one in, as without a consumer. Freed in a
    /// batch (`free`), the pods of 64 events overflowed glibc's per-size caches and made it
    /// sort and merge the chunks (`malloc_consolidate`, `unlink_chunk`; docs/performance.md, "A
    /// replica of a 1M-pod cluster").
    fn free_oldest(&mut self, n: usize) {
        for _ in 0..n {
            match self.objects.front() {
                Some((obj, len)) if Arc::strong_count(obj) == 1 => {
                    self.bytes = self.bytes.saturating_sub(*len);
                    self.objects.pop_front();
                }
                _ => break,
            }
        }
    }

    /// Frees, here, the kept objects nobody else holds any more.
    fn free(&mut self) {
        let mut freed = 0;
        self.objects.retain(|(obj, len)| {
            let held = Arc::strong_count(obj) > 1;
            if !held {
                freed += len;
            }
            held
        });
        self.bytes = self.bytes.saturating_sub(freed);
    }

    fn clear(&mut self) {
        self.objects.clear();
        self.bytes = 0;
    }
}

impl<K: Watchable> Delivery<K> {
    /// Delivery of part `part`'s events to `subscribers`; `decode`: how the store decodes a
    /// compact entry; `compact`: a compact store mode.
    pub(crate) fn new(subscribers: Arc<Subscribers<K>>, part: usize, decode: Decode<K>, compact: bool) -> Self {
        Delivery {
            subscribers,
            part,
            decode,
            compact,
            out: Vec::new(),
            relist: false,
            pending: 0,
            batching: false,
            backlog: VecDeque::new(),
            len: 0,
            kept: Kept { objects: VecDeque::new(), bytes: 0 },
        }
    }

    /// The worker reached the server again: a consumer that attaches from now on no longer
    /// gets the error it retried after ([`Change::report_retrying`]).
    pub(crate) fn reached(&self) {
        self.subscribers.lock().retrying(self.part, None);
    }

    /// The part of the watcher this delivery serves.
    pub(crate) fn part(&self) -> usize {
        self.part
    }

    /// The one way events reach consumers: `change` changes the store while the consumers'
    /// lock is held (until [`Change::unlock`], or its end) and appends the events that change
    /// makes; they go out by the mode in force, followed by the error it reports, if any. So a
    /// consumer subscribing at any moment gets either the state before a change and then its
    /// events, or the state after it, never both. User code that compares (predicates) runs
    /// after [`Change::unlock`] (ARCHITECTURE.md, "Locks, and their order", says what runs
    /// under the lock). `form`: how the store holds the change's object.
    pub(crate) fn send<T>(&mut self, form: Form, change: impl FnOnce(&mut Change<'_, K>) -> T) -> Result<T, Stopped> {
        let subscribers = Arc::clone(&self.subscribers);
        let (done, subs, error, held) = {
            let mut c = Change {
                hold: Hold::Locked(subscribers.lock()),
                part: self.part,
                events: &mut self.out,
                error: None,
                held: None,
            };
            let done = change(&mut c);
            let subs = match c.hold {
                Hold::Locked(roster) => roster.subscribers(),
                Hold::Settled(subs) => subs,
            };
            (done, subs, c.error, c.held)
        };
        if let Some(n) = held {
            self.pending = n;
        }
        let (encoded, only_encoded) = match form {
            Form::Decoded => (None, None),
            Form::Encoded(encoded) => (Some(encoded), None),
            Form::InitApply(encoded) => (None, Some(encoded)),
        };
        self.len = encoded.as_ref().map_or(0, Encoded::len);
        if self.out.is_empty() && error.is_none() && only_encoded.is_none() {
            return Ok(done);
        }
        self.publish(subs, encoded, only_encoded, error)?;
        Ok(done)
    }

    /// A relist starts: from now until [`relist_ends`](Self::relist_ends), delivery never
    /// waits for a consumer (see `relist`).
    pub(crate) fn relist_begins(&mut self) {
        self.relist = true;
    }

    /// Whether a relist is in progress (from its `BeginInit` to its end or abandonment).
    pub(crate) fn relisting(&self) -> bool {
        self.relist
    }

    /// The relist in progress ends (its `InitDone` is the next change) or is abandoned.
    pub(crate) fn relist_ends(&mut self) {
        self.relist = false;
    }

    /// Whether events may wait to go out together, while a watch stream is read (see
    /// `batching`).
    pub(crate) fn batching(&mut self, on: bool) {
        self.batching = on;
    }

    /// Sends the events in `self.out` and then `error` to `subs` (behind any backlog).
    /// `encoded`: the encoded object of those events; `only_encoded`: an `InitApply`
    /// made from these bytes follows them (see [`Form`]).
    fn publish(
        &mut self,
        subs: Arc<[Sub<K>]>,
        encoded: Option<Encoded>,
        only_encoded: Option<Encoded>,
        error: Option<Error>,
    ) -> Result<(), Stopped> {
        let mut events = std::mem::take(&mut self.out);
        let decode = self.decode;
        if self.relist && self.backlog.len() < self.pending.saturating_add(DEFER_SLACK) {
            // A list body is being read: events go out in batches, and only as far as that never
            // waits for a consumer. In the compact modes an `InitApply` keeps the object decoded
            // off the wire while it is to be decoded for a consumer when it goes out anyway (its
            // batch is not full and a consumer keeps up: `decoded_soon`); otherwise it waits as
            // its entry, decoded again if and when it goes out, so a list that the consumers are
            // behind on holds no decoded objects (docs/performance.md, "A replica of a 1M-pod
            // cluster", has both measured).
            let ahead = self.backlog.len();
            let decoded = ahead < BATCH && subscribers::decoded_soon(&subs, ahead);
            if decoded {
                self.kept.free_oldest(2);
            }
            let items = events.drain(..).map(|ev| match (ev, &encoded) {
                (Event::InitApply(obj), Some(encoded)) if decoded => Held::Decoded(obj, encoded.len()),
                (Event::InitApply(_), Some(encoded)) => Held::InitApply(encoded.clone(), decode),
                (ev, _) => Held::Item(Ok(ev)),
            });
            let shared = only_encoded.map(|encoded| Held::InitApply(encoded, decode));
            let items = items.chain(shared).chain(error.map(|e| Held::Item(Err(e))));
            let before = self.backlog.len();
            self.backlog.extend(items.map(|item| (Arc::clone(&subs), item)));
            self.subscribers.worked(self.backlog.len() - before);
            if self.backlog.len() >= BATCH {
                self.deliver_ready();
            }
            self.out = events;
            return Ok(());
        }
        // Beyond the backlog's bound a shared entry's event is made now (if anyone takes it).
        if let Some(encoded) = only_encoded
            && !subs.is_empty()
            && let Some(Ok(ev)) = Held::InitApply(encoded, decode).into_item()
        {
            events.push(ev);
        }
        if self.compact && !subs.is_empty() {
            for obj in events.iter().filter_map(Event::object) {
                self.kept.keep(obj, self.len);
            }
        }
        if self.batching && self.backlog.len() < BATCH {
            let items = events.drain(..).map(Ok).chain(error.map(Err));
            let before = self.backlog.len();
            self.backlog.extend(items.map(|item| (Arc::clone(&subs), Held::Item(item))));
            self.subscribers.worked(self.backlog.len() - before);
            self.out = events;
            return Ok(());
        }
        self.flush()?;
        let items = events.drain(..).map(Ok).chain(error.map(Err));
        let delivered = self.subscribers.deliver(&subs, self.part, items);
        self.out = events;
        delivered
    }
}

impl<K> Delivery<K> {
    /// Delivers what is held back as far as that never waits (see
    /// [`Subscribers::deliver_ready`]); the objects it decodes for consumers are kept (see
    /// [`Kept`]), after those already let go are freed.
    fn deliver_ready(&mut self) {
        self.kept.free();
        let kept = &mut self.kept;
        self.subscribers.deliver_ready(&mut self.backlog, self.part, &mut |obj, len| kept.keep(obj, len));
    }

    /// The worker is about to wait for the network: hand over what is held back. During a relist
    /// only as far as that never waits (a slow consumer must not slow the download); otherwise
    /// all of it, waiting for consumers.
    pub(crate) fn before_read(&mut self) -> Result<(), Stopped> {
        if self.relist {
            self.deliver_ready();
            return Ok(());
        }
        self.kept.free();
        self.flush()
    }

    /// Nothing is being delivered for a while (between requests, before a backoff wait, at the
    /// end): hand over everything held back, waiting for consumers, and let go of every kept
    /// object.
    pub(crate) fn quiet(&mut self) -> Result<(), Stopped> {
        self.flush()?;
        self.kept.clear();
        Ok(())
    }

    /// Delivers the events held back, in order, waiting for consumers.
    fn flush(&mut self) -> Result<(), Stopped> {
        while let Some((subs, held)) = self.backlog.pop_front() {
            self.subscribers.worked(1);
            if subs.is_empty() {
                continue;
            }
            if let Some(item) = held.into_item() {
                self.subscribers.deliver(&subs, self.part, [item])?;
            }
        }
        Ok(())
    }
}
