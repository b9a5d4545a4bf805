//! Applying a step's effects: to the cache through its writer, then to the consumers through
//! the hub, in order, with the counters and notices that go with them.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::cache::{Json, Writer};
use crate::engine::counters::{self, Counters};
use crate::engine::hub::{self, Held, Stopped, Sub};
use crate::engine::prepare::Subject;
use crate::engine::shared::Control;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::machine::{Effect, Next, Step};
use crate::notice::{Notice, RelistReason};
use crate::resource::Watchable;

/// Events that may wait in the backlog beyond one per object of the relist in progress.
const DEFER_SLACK: usize = 1024;
/// Compact store modes: how many objects of delivered events the worker keeps a reference to
/// (see `Sink::kept`), and how many bytes of JSON they may come to.
const KEEP: usize = 2 * BATCH;
const KEEP_BYTES: usize = 1 << 20;
/// Events handed to consumers together: a consumer wakes once per batch, not once per event
/// (see `batching` and `deferring`).
const BATCH: usize = 64;

/// What the worker writes to: the store, the consumers, the counters.
pub(crate) struct Sink<K> {
    pub(crate) writer: Writer<K>,
    pub(crate) shared: Arc<Control<K>>,
    /// Compact store mode: events hold decoded objects the store does not (see `deferring`).
    compact: bool,
    out: Vec<Event<K>>,
    /// The reason of the relist in progress (for `Notice::Synced`).
    reason: RelistReason,
    /// False from the start and after each `Notice::Reconnecting` until a request succeeds.
    connected: bool,
    /// Set from `Init` to `InitDone` (or an abort): events are then delivered without waiting
    /// for blocking consumers, so that a slow consumer never slows a list download (which a
    /// server's request deadline could then cut, again and again). What does not fit waits in
    /// `backlog`, delivered in order before the next request or with `InitDone` (`flush`).
    /// Its objects are what the relist in progress holds anyway (`Arc`s, or in the compact
    /// modes the entries' JSON, decoded when it goes out: [`Held::InitApply`]), so it may grow
    /// to the relist's size plus [`DEFER_SLACK`] (a server repeating one key cannot make it
    /// hold more); beyond that, delivery waits for consumers as everywhere else.
    deferring: bool,
    /// Compact store modes: the JSON of the object being applied by `InitApply`, for its event
    /// to wait in the backlog as the store holds it.
    packed: Option<Json>,
    /// Compact store modes: the JSON of an unchanged object a relist shares with the live
    /// store (`Subject::Shared`): its `InitApply` is made from it, decoded only if it must go
    /// out at once.
    shared_json: Option<Json>,
    /// Compact store modes: the length of the JSON of the object being applied, to count what
    /// `kept` holds.
    len: usize,
    /// Set while a watch stream is read: events wait in `backlog` (up to [`BATCH`]) and go
    /// out together when the worker is about to wait for the network (`flush`). A consumer then
    /// wakes once per burst instead of once per event; nothing waits while the stream is quiet.
    pub(crate) batching: bool,
    backlog: hub::Backlog<K>,
    /// Objects in the relist in progress.
    pending: usize,
    /// Compact store modes: the objects of the last events delivered, with the length of
    /// their JSON. Their events hold the only decoded copy, so whoever drops the last
    /// reference frees a whole object; on the consumer's thread that is glibc freeing into the
    /// worker's arena, under the arena's lock, against the worker allocating the next objects
    /// (the consumer slept twice per event on that lock). Holding a reference a little longer
    /// lets a consumer that keeps up leave the freeing to the worker. Bounded by count
    /// ([`KEEP`]) and by their JSON's bytes ([`KEEP_BYTES`]: an object bigger than that is not
    /// kept); those the consumers let go are freed before each wait for the network, and all
    /// are let go when nothing is being delivered (`quiet`).
    kept: VecDeque<(Arc<K>, usize)>,
    kept_bytes: usize,
}

impl<K: Watchable> Sink<K> {
    pub(crate) fn new(writer: Writer<K>, shared: Arc<Control<K>>, compact: bool) -> Self {
        Sink {
            writer,
            shared,
            compact,
            out: Vec::new(),
            reason: RelistReason::Initial,
            connected: false,
            deferring: false,
            packed: None,
            shared_json: None,
            len: 0,
            batching: false,
            backlog: Vec::new(),
            pending: 0,
            kept: VecDeque::new(),
            kept_bytes: 0,
        }
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Applies one effect, with the object of the current input, and publishes its events.
    pub(crate) fn effect(&mut self, effect: &Effect, input: &mut Option<Subject<K>>) -> Result<(), Stopped> {
        let mut error = None;
        // Apply and take the subscribers under the hub lock, so a consumer subscribing now sees
        // either the state before this change (and then the event) or after it, never both.
        // No user code runs under it (a callback may call `stats()` or `subscribe()`).
        let shared = Arc::clone(&self.shared);
        let mut hub = Some(shared.hub.lock());
        match (effect, input.as_mut()) {
            (Effect::BeginInit, _) => {
                self.deferring = true;
                self.writer.begin_init(&mut self.out);
            }
            (Effect::InitApply, Some(Subject::Skipped(s, e))) => {
                if self.writer.init_skip(s, &mut self.out) {
                    error = Some(self.report(e));
                }
            }
            (Effect::Apply, Some(Subject::Skipped(s, e))) => {
                if self.writer.skip(s, &mut self.out) {
                    error = Some(self.report(e));
                }
            }
            (Effect::Delete, Some(Subject::Skipped(s, e))) => {
                if s.key.is_none() {
                    error = Some(self.report(e));
                }
                self.writer.delete_skipped(s, &mut self.out);
            }
            (Effect::InitApply, Some(Subject::Object(i))) => {
                self.len = i.json.as_ref().map_or(0, Json::len);
                if self.deferring {
                    self.packed.clone_from(&i.json);
                }
                let values = std::mem::take(&mut i.values);
                self.pending = self.writer.init_apply(Arc::clone(&i.obj), i.json.take(), values, &mut self.out);
            }
            (Effect::InitDone(rv), _) => {
                self.deferring = false;
                let inferred = self.writer.init_done(rv.as_deref(), &mut self.out);
                counters::add(&self.shared.counters.inferred_deletes, inferred as u64);
                let objects = self.writer.store().len();
                self.shared.notices.send(Notice::Synced { reason: self.reason, objects, inferred_deletes: inferred });
            }
            (Effect::AbortInit, _) => {
                self.deferring = false;
                self.writer.abort_init();
            }
            (Effect::InitApply, Some(Subject::Shared { key, json, uid, rv, values })) => {
                let values = std::mem::take(values);
                let (key, uid, rv) = (key.clone(), std::mem::take(uid), std::mem::take(rv));
                self.pending = self.writer.init_share(key, json.clone(), uid, rv, values, &mut self.out);
                self.shared_json = Some(json.clone());
            }
            (Effect::Apply, Some(Subject::Object(i))) => {
                self.len = i.json.as_ref().map_or(0, Json::len);
                let old = self.writer.apply(&i.obj, i.json.take(), std::mem::take(&mut i.values));
                // The predicates compare outside the hub lock, after the subscribers are taken:
                // a consumer subscribing meanwhile gets the new state in its replay instead.
                let subs = hub.take().map(|h| h.subscribers());
                if !self.writer.applied(old, Arc::clone(&i.obj), &mut self.out) {
                    counters::add(&self.shared.counters.filtered, 1);
                }
                return self.publish(subs.unwrap_or_else(|| self.shared.hub.lock().subscribers()), None);
            }
            (Effect::Delete, Some(Subject::Object(i))) => {
                self.len = i.json.as_ref().map_or(0, Json::len);
                self.writer.delete(Arc::clone(&i.obj), &mut self.out);
            }
            (Effect::Report(e), _) => error = Some(self.report(e)),
            (Effect::Relist(reason), _) => {
                self.shared.counters.relist(*reason);
                self.reason = *reason;
                if *reason != RelistReason::Initial {
                    log::debug!("{}: relisting ({reason:?})", self.shared.name);
                }
                self.shared.notices.send(Notice::Relisting { reason: *reason });
            }
            (Effect::Reached(rv), _) => self.writer.reached(rv),
            (Effect::InitApply | Effect::Apply | Effect::Delete, None) => {
                log::error!("bug: {effect:?} without an object; ignored");
            }
            (Effect::Apply | Effect::Delete, Some(Subject::Shared { key, .. })) => {
                log::error!("bug: {effect:?} of a shared list item {key}; ignored");
            }
        }
        if self.out.is_empty() && error.is_none() && self.shared_json.is_none() {
            return Ok(());
        }
        let subs = hub.map_or_else(|| self.shared.hub.lock().subscribers(), |h| h.subscribers());
        self.publish(subs, error)
    }

    /// Counts a non-terminal error and keeps it for `wait_until_ready`; returns it to deliver.
    fn report(&self, e: &Error) -> Error {
        self.writer.set_last_error(e);
        self.shared.counters.error(e);
        e.clone()
    }

    /// Sends the events in `self.out` and then `error` to `subs` (behind any backlog).
    pub(crate) fn publish(&mut self, subs: Arc<[Sub<K>]>, error: Option<Error>) -> Result<(), Stopped> {
        let packed = self.packed.take();
        let shared = self.shared_json.take();
        if self.out.is_empty() && error.is_none() && shared.is_none() {
            return Ok(());
        }
        let mut events = std::mem::take(&mut self.out);
        let decode = self.writer.decoder();
        if self.deferring && self.backlog.len() < self.pending.saturating_add(DEFER_SLACK) {
            // A list body is being read: events go out in batches, and only as far as that never
            // waits for a consumer.
            let items = events.drain(..).map(|ev| match (ev, &packed) {
                (Event::InitApply(_), Some(json)) => Held::InitApply(json.clone(), decode),
                (ev, _) => Held::Item(Ok(ev)),
            });
            let shared = shared.map(|json| Held::InitApply(json, decode));
            let items = items.chain(shared).chain(error.map(|e| Held::Item(Err(e))));
            self.backlog.extend(items.map(|item| (Arc::clone(&subs), item)));
            if self.backlog.len() >= BATCH {
                self.shared.outbox().deliver_ready(&mut self.backlog);
            }
            self.out = events;
            return Ok(());
        }
        // Beyond the backlog's bound a shared entry's event is made now (if anyone takes it).
        if let Some(json) = shared
            && !subs.is_empty()
            && let Some(Ok(ev)) = Held::InitApply(json, decode).into_item()
        {
            events.push(ev);
        }
        if self.compact && !subs.is_empty() {
            for obj in events.iter().filter_map(Event::object) {
                self.keep(obj);
            }
        }
        if self.batching && self.backlog.len() < BATCH {
            let items = events.drain(..).map(Ok).chain(error.map(Err));
            self.backlog.extend(items.map(|item| (Arc::clone(&subs), Held::Item(item))));
            self.out = events;
            return Ok(());
        }
        self.flush()?;
        let items = events.drain(..).map(Ok).chain(error.map(Err));
        let delivered = self.shared.outbox().deliver(&subs, items);
        self.out = events;
        delivered
    }

    /// Keeps a reference to `obj`, delivered in a compact store mode (see `kept`).
    fn keep(&mut self, obj: &Arc<K>) {
        self.kept.push_back((Arc::clone(obj), self.len));
        self.kept_bytes = self.kept_bytes.saturating_add(self.len);
        while self.kept.len() > KEEP || self.kept_bytes > KEEP_BYTES {
            let Some((_, len)) = self.kept.pop_front() else { break };
            self.kept_bytes = self.kept_bytes.saturating_sub(len);
        }
    }

    /// Frees, here, the kept objects nobody else holds any more.
    fn free_kept(&mut self) {
        let mut freed = 0;
        self.kept.retain(|(obj, len)| {
            let held = Arc::strong_count(obj) > 1;
            if !held {
                freed += len;
            }
            held
        });
        self.kept_bytes = self.kept_bytes.saturating_sub(freed);
    }

    /// The worker is about to wait for the network: hand over what is held back. During a relist
    /// only as far as that never waits (a slow consumer must not slow the download); otherwise
    /// all of it, waiting for consumers.
    pub(crate) fn before_read(&mut self) -> Result<(), Stopped> {
        self.free_kept();
        if self.deferring {
            self.shared.outbox().deliver_ready(&mut self.backlog);
            return Ok(());
        }
        self.flush()
    }

    /// Nothing is being delivered for a while (between requests, before a backoff wait, at the
    /// end): hand over everything held back, waiting for consumers, and let go of every kept
    /// object.
    pub(crate) fn quiet(&mut self) -> Result<(), Stopped> {
        self.flush()?;
        self.kept.clear();
        self.kept_bytes = 0;
        Ok(())
    }

    /// Delivers the events held back while a body was read, in order, waiting for consumers.
    pub(crate) fn flush(&mut self) -> Result<(), Stopped> {
        let outbox = self.shared.outbox();
        for (subs, held) in self.backlog.drain(..) {
            if subs.is_empty() {
                continue;
            }
            if let Some(item) = held.into_item() {
                outbox.deliver(&subs, [item])?;
            }
        }
        Ok(())
    }

    /// Applies a step's effects, with the current input's object, and returns its next move.
    pub(crate) fn perform(&mut self, step: Step, mut input: Option<Subject<K>>) -> Result<Next, Stopped> {
        for e in &step.effects {
            self.effect(e, &mut input)?;
        }
        if let Next::Wait(delay) = &step.next
            && let Some(Effect::Report(error)) = step.effects.iter().find(|e| matches!(e, Effect::Report(_)))
        {
            self.connected = false;
            self.shared.notices.send(Notice::Reconnecting { error: error.clone(), delay: *delay });
        }
        Ok(step.next)
    }

    /// A request succeeded: announce it if it is the first since the start or a failure.
    pub(crate) fn connected(&mut self) {
        if !self.connected {
            self.connected = true;
            self.shared.notices.send(Notice::Connected);
        }
    }
}
