//! Applying a step's effects: to the cache through its writer, then to the consumers through
//! the hub, in order, with the counters and notices that go with them.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::cache::Writer;
use crate::engine::counters::{self, Counters};
use crate::engine::hub::{self, Stopped, Sub};
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
/// (see `Sink::kept`).
const KEEP: usize = 2 * BATCH;
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
    /// Its objects are `Arc`s the relist in progress holds anyway, so it may grow to the
    /// relist's size plus [`DEFER_SLACK`] (a server repeating one key cannot make it hold more);
    /// beyond that, and in compact mode (whose events hold decoded objects the store does not),
    /// delivery waits for consumers as everywhere else.
    deferring: bool,
    /// Set while a watch stream is read: events wait in `backlog` (up to [`BATCH`]) and go
    /// out together when the worker is about to wait for the network (`flush`). A consumer then
    /// wakes once per burst instead of once per event; nothing waits while the stream is quiet.
    pub(crate) batching: bool,
    backlog: hub::Backlog<K>,
    /// Objects in the relist in progress.
    pending: usize,
    /// Compact store modes: the objects of the last [`KEEP`] events delivered. Their events
    /// hold the only decoded copy, so whoever drops the last reference frees a whole object;
    /// on the consumer's thread that is glibc freeing into the worker's arena, under the
    /// arena's lock, against the worker allocating the next objects (the consumer slept twice
    /// per event on that lock). Holding a reference a little longer lets a consumer that keeps
    /// up leave the freeing to the worker. Bounded: about 5 MB of realistic 6 KB pods.
    kept: VecDeque<Arc<K>>,
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
            batching: false,
            backlog: Vec::new(),
            pending: 0,
            kept: VecDeque::new(),
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
            (Effect::Apply, Some(Subject::Object(i))) => {
                let old = self.writer.apply(&i.obj, i.json.take(), std::mem::take(&mut i.values));
                // The predicates compare outside the hub lock, after the subscribers are taken:
                // a consumer subscribing meanwhile gets the new state in its replay instead.
                let subs = hub.take().map(|h| h.subscribers());
                if !self.writer.applied(old, Arc::clone(&i.obj), &mut self.out) {
                    counters::add(&self.shared.counters.filtered, 1);
                }
                return self.publish(subs.unwrap_or_else(|| self.shared.hub.lock().subscribers()), None);
            }
            (Effect::Delete, Some(Subject::Object(i))) => self.writer.delete(Arc::clone(&i.obj), &mut self.out),
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
        }
        if self.out.is_empty() && error.is_none() {
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
        if self.out.is_empty() && error.is_none() {
            return Ok(());
        }
        let mut events = std::mem::take(&mut self.out);
        if self.compact && !subs.is_empty() {
            for obj in events.iter().filter_map(Event::object) {
                if self.kept.len() == KEEP {
                    self.kept.pop_front();
                }
                self.kept.push_back(Arc::clone(obj));
            }
        }
        if self.deferring && !self.compact && self.backlog.len() < self.pending.saturating_add(DEFER_SLACK) {
            // A list body is being read: events go out in batches, and only as far as that never
            // waits for a consumer.
            let items = events.drain(..).map(Ok).chain(error.map(Err));
            self.backlog.extend(items.map(|item| (Arc::clone(&subs), item)));
            if self.backlog.len() >= BATCH {
                self.shared.outbox().deliver_ready(&mut self.backlog);
            }
            self.out = events;
            return Ok(());
        }
        if self.batching && self.backlog.len() < BATCH {
            let items = events.drain(..).map(Ok).chain(error.map(Err));
            self.backlog.extend(items.map(|item| (Arc::clone(&subs), item)));
            self.out = events;
            return Ok(());
        }
        self.flush()?;
        let items = events.drain(..).map(Ok).chain(error.map(Err));
        let delivered = self.shared.outbox().deliver(&subs, items);
        self.out = events;
        delivered
    }

    /// The worker is about to wait for the network: hand over what is held back. During a relist
    /// only as far as that never waits (a slow consumer must not slow the download); otherwise
    /// all of it, waiting for consumers.
    pub(crate) fn before_read(&mut self) -> Result<(), Stopped> {
        if self.deferring {
            self.shared.outbox().deliver_ready(&mut self.backlog);
            return Ok(());
        }
        self.flush()
    }

    /// Delivers the events held back while a body was read, in order, waiting for consumers.
    pub(crate) fn flush(&mut self) -> Result<(), Stopped> {
        let outbox = self.shared.outbox();
        for (subs, item) in self.backlog.drain(..) {
            outbox.deliver(&subs, [item])?;
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
