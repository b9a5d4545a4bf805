//! The background thread: runs the machine's actions through the HTTP layer, applies objects to
//! the store, publishes events, and stops promptly.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, select};

use crate::client::{Api, Http, StreamItem};
use crate::decode::{self, Change, WatchEvent};
use crate::drift;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::guard;
use crate::hub::{self, Notice, Stopped, Sub};
use crate::key::ObjectKey;
use crate::machine::{Effect, Input, Machine, Next, RelistReason, Step, WatchInput};
use crate::request::{ListParams, WatchParams};
use crate::resource::{PartialObjectMetadata, Watchable};
use crate::stats::{self, Counters};
use crate::store::{Skipped, Writer};
use crate::watcher::Shared;

/// A user transform applied to every object before it is stored.
pub(crate) type Transform<K> = Arc<dyn Fn(&mut K) + Send + Sync>;

/// Encodes an object as compact JSON (compact store mode, after a transform changed it).
pub(crate) type Encode<K> = fn(&K) -> serde_json::Result<Vec<u8>>;

/// Events that may wait in the backlog beyond one per object of the relist in progress.
const DEFER_SLACK: usize = 1024;

/// The object of the input being processed: decoded and transformed, its index values, and
/// its compact JSON in compact mode. Everything user code computes is here before any lock.
struct Incoming<K> {
    obj: Arc<K>,
    json: Option<Arc<[u8]>>,
    values: Vec<Vec<String>>,
}

/// What an object input carries: the object, or, when it does not decode as `K`, who it is
/// and the error that reports it (see [`Skipped`] for the policy).
enum Subject<K> {
    Object(Incoming<K>),
    Skipped(Skipped, Error),
}

/// What the worker writes to: the store, the consumers, the counters.
pub(crate) struct Sink<K> {
    pub(crate) writer: Writer<K>,
    pub(crate) shared: Arc<Shared<K>>,
    pub(crate) transform: Option<Transform<K>>,
    /// Compact store mode: keep objects as JSON (encoded with this after a transform).
    pub(crate) compact: Option<Encode<K>>,
    out: Vec<Event<K>>,
    scratch: decode::Scratch,
    /// Whether the "server ignored the metadata-only request" warning was logged (once).
    warned_kind: bool,
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
    backlog: hub::Backlog<K>,
    /// Objects in the relist in progress.
    pending: usize,
}

impl<K: Watchable> Sink<K> {
    pub(crate) fn new(
        writer: Writer<K>,
        shared: Arc<Shared<K>>,
        transform: Option<Transform<K>>,
        compact: Option<Encode<K>>,
    ) -> Self {
        Sink {
            writer,
            shared,
            transform,
            compact,
            out: Vec::new(),
            scratch: decode::Scratch::default(),
            warned_kind: false,
            reason: RelistReason::Initial,
            connected: false,
            deferring: false,
            backlog: Vec::new(),
            pending: 0,
        }
    }

    fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Applies one effect, with the object of the current input, and publishes its events.
    fn effect(&mut self, effect: &Effect, input: &mut Option<Subject<K>>) -> Result<(), Stopped> {
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
            (Effect::InitDone, _) => {
                self.deferring = false;
                let inferred = self.writer.init_done(&mut self.out);
                stats::add(&self.shared.counters.inferred_deletes, inferred as u64);
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
                    stats::add(&self.shared.counters.filtered, 1);
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
    fn publish(&mut self, subs: Arc<[Sub<K>]>, error: Option<Error>) -> Result<(), Stopped> {
        if self.out.is_empty() && error.is_none() {
            return Ok(());
        }
        let mut events = std::mem::take(&mut self.out);
        if self.deferring && self.compact.is_none() && self.backlog.len() < self.pending.saturating_add(DEFER_SLACK) {
            let items = events.drain(..).map(Ok).chain(error.map(Err));
            self.shared.outbox().deliver_or_defer(&subs, items, &mut self.backlog);
            self.out = events;
            return Ok(());
        }
        self.flush()?;
        let items = events.drain(..).map(Ok).chain(error.map(Err));
        let delivered = self.shared.outbox().deliver(&subs, items);
        self.out = events;
        delivered
    }

    /// Delivers the events held back while a body was read, in order, waiting for consumers.
    fn flush(&mut self) -> Result<(), Stopped> {
        let outbox = self.shared.outbox();
        for (subs, item) in self.backlog.drain(..) {
            outbox.deliver(&subs, [item])?;
        }
        Ok(())
    }

    /// Applies a step's effects, with the current input's object, and returns its next move.
    fn perform(&mut self, step: Step, mut input: Option<Subject<K>>) -> Result<Next, Stopped> {
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
    fn connected(&mut self) {
        if !self.connected {
            self.connected = true;
            self.shared.notices.send(Notice::Connected);
        }
    }

    /// Decodes and prepares one list item; one that does not decode as `K` is skipped (see
    /// [`Skipped`]), one that is not JSON at all is an error of the whole body.
    fn decode(&mut self, item: decode::Item<'_>, context: &str) -> Result<Subject<K>, Error> {
        let message = match decode::item::<K>(item, &mut self.scratch) {
            Ok(obj) => return self.prepare(obj, Some(item.bytes), (context, None)),
            Err(message) => message,
        };
        let error = |message: String| Error::Decode(Box::new(decode::decode_error(context, None, item.bytes, message)));
        match decode::identity(item.bytes) {
            Some(id) => Ok(self.skipped(id, error(message))),
            None => Err(error(message)),
        }
    }

    /// An object that does not decode as `K`, known by its metadata: the error that reports it
    /// names the object.
    fn skipped(&self, id: decode::Identity, error: Error) -> Subject<K> {
        let key = id.name.map(|name| ObjectKey { namespace: id.namespace.map(Into::into), name: name.into() });
        let what = match (&key, &id.resource_version) {
            (None, _) => "an object without metadata.name".to_owned(),
            (Some(k), Some(rv)) => format!("{k} at resourceVersion {rv}"),
            (Some(k), None) => k.to_string(),
        };
        let error = match error {
            Error::Decode(mut d) => {
                let action = if key.is_some() {
                    "the store keeps its last version that decoded, if any"
                } else {
                    "cannot be stored"
                };
                d.message = format!("{what} skipped ({action}): {}", d.message);
                Error::Decode(d)
            }
            other => other,
        };
        Subject::Skipped(Skipped { key, uid: id.uid, rv: id.resource_version }, error)
    }

    /// Runs the transform, and in compact mode keeps the object's JSON: the wire bytes as they
    /// are, or re-encoded when a transform may have changed the object.
    /// `at`: the context and line for errors.
    fn prepare(&mut self, mut obj: K, wire: Option<&[u8]>, at: (&str, Option<u64>)) -> Result<Subject<K>, Error> {
        if !self.warned_kind
            && let Some(kind) = obj.unexpected_kind()
        {
            // Decoding still keeps only the metadata, so the store is right; only bandwidth is lost.
            log::warn!(
                "{}: asked for metadata only (PartialObjectMetadata) but the server sent {kind:?} objects; \
                 keeping only their metadata",
                self.shared.name
            );
            self.warned_kind = true;
        }
        if let Some(t) = &self.transform {
            guard::call(|| "transform".to_owned(), || t(&mut obj));
        }
        let json = match (self.compact, wire) {
            (None, _) => None,
            (Some(_), Some(bytes)) if self.transform.is_none() => Some(bytes.into()),
            (Some(encode), _) => Some(
                encode(&obj)
                    .map_err(|e| {
                        Error::Decode(Box::new(decode::decode_error(
                            at.0,
                            at.1,
                            wire.unwrap_or_default(),
                            format!("re-encode for the compact store: {e}"),
                        )))
                    })?
                    .into(),
            ),
        };
        let Some(key) = ObjectKey::of(&obj) else {
            // Nothing without a name can be stored or deleted by key: report and skip it.
            let meta = obj.meta();
            let id = decode::Identity {
                namespace: meta.namespace.clone(),
                name: None,
                uid: meta.uid.clone(),
                resource_version: meta.resource_version.clone(),
            };
            let e = decode::decode_error(at.0, at.1, wire.unwrap_or_default(), "no metadata.name".into());
            return Ok(self.skipped(id, Error::Decode(Box::new(e))));
        };
        let values = self.writer.index_values(&key, &obj);
        Ok(Subject::Object(Incoming { obj: Arc::new(obj), json, values }))
    }
}

/// The watcher thread's state.
pub(crate) struct Worker<K> {
    pub(crate) api: Api<K>,
    pub(crate) http: Http,
    pub(crate) machine: Machine,
    pub(crate) sink: Sink<K>,
    pub(crate) max_line: usize,
    /// Objects a drift check could not yet judge (see `drift`).
    pub(crate) drift_suspects: drift::Suspects,
    /// Start after a random delay up to this (watchers over several namespaces).
    pub(crate) start_spread: Duration,
}

impl<K: Watchable> Worker<K> {
    /// Runs until stopped or a terminal error; then marks the store ended and closes the channel.
    pub(crate) fn run(mut self) {
        let spread = self.start_spread;
        let end = match self.pause(rand::random_range(Duration::ZERO..=spread)).and_then(|()| self.drive()) {
            // Events held back during an abandoned list go out before the terminal error.
            Ok(e) => self.sink.flush().map_or(Error::Stopped, |()| e),
            Err(Stopped) => Error::Stopped,
        };
        let shared = Arc::clone(&self.sink.shared);
        shared.finish(end);
        shared.exited();
        log::debug!("{}: watcher thread exits", shared.name);
    }

    fn stopping(&self) -> bool {
        self.sink.shared.stopping.load(Ordering::Acquire)
    }

    fn drive(&mut self) -> Result<Error, Stopped> {
        let mut step = self.machine.step(Input::Start, Instant::now());
        loop {
            if self.stopping() {
                return Err(Stopped);
            }
            let next = self.sink.perform(step, None)?;
            let shared = Arc::clone(&self.sink.shared);
            // Lists take a permit (a limit across the threads of a multi-namespace watcher),
            // held until the list returns; then every request waits out a `Retry-After` that
            // any of those threads was given.
            let _permit = match &next {
                Next::List(_) | Next::DriftCheck { .. } => Some(shared.gate.list_permit(&shared.stop_rx)?),
                _ => None,
            };
            if matches!(next, Next::List(_) | Next::DriftCheck { .. } | Next::Watch { .. }) {
                // Events held back while the last body was read wait for slow consumers here,
                // between two requests (a relist's last page publishes them with `InitDone`,
                // after the store is updated).
                self.sink.flush()?;
                shared.gate.wait_turn(&shared.stop_rx)?;
            }
            step = match next {
                Next::List(params) => self.list(&params)?,
                Next::DriftCheck { params, rv } => self.drift_check(&params, &rv)?,
                Next::Watch { params, idle } => self.watch(&params, idle)?,
                Next::Wait(delay) => {
                    self.wait(delay)?;
                    self.machine.step(Input::Start, Instant::now())
                }
                // Nothing is open to read on: the machine makes its next request.
                Next::ReadOn => self.machine.step(Input::Start, Instant::now()),
                Next::End(e) => return Ok(e),
            };
        }
    }

    /// A `Retry-After` from the server delays every thread of this watcher (set before this
    /// thread lets go of its list permit, so none slips through).
    fn note_retry_after(&self, e: &Error) {
        if let Some(until) = self.machine.server_wait(e).and_then(|after| Instant::now().checked_add(after)) {
            self.sink.shared.gate.delay_all(until);
        }
    }

    /// Sleeps `delay`, waking at once on stop. Never `thread::sleep`.
    fn wait(&self, delay: Duration) -> Result<(), Stopped> {
        self.sink.counters().backoff(delay);
        self.pause(delay)
    }

    /// Sleeps `delay`, waking at once on stop, without counting it as backoff.
    fn pause(&self, delay: Duration) -> Result<(), Stopped> {
        if delay.is_zero() {
            return Ok(());
        }
        select! {
            recv(self.sink.shared.stop_rx) -> _ => Err(Stopped),
            recv(after(delay)) -> _ => Ok(()),
        }
    }

    fn list(&mut self, params: &ListParams) -> Result<Step, Stopped> {
        stats::add(&self.sink.counters().lists, 1);
        let context = self.api.describe("list");
        let (sink, machine) = (&mut self.sink, &mut self.machine);
        let mut stopped = false;
        // A move other than reading on, made while reading (the machine's to decide).
        let mut interrupted = None;
        let result = self.http.list(&self.api, params, |item| {
            stats::add(&sink.shared.counters.bytes, item.bytes.len() as u64);
            // One object that is not a `K` must not block the whole cache: it is skipped.
            let subject = sink.decode(item, &context)?;
            match sink.perform(machine.step(Input::Item, Instant::now()), Some(subject)) {
                Ok(Next::ReadOn) => Ok(()),
                Ok(next) => {
                    interrupted = Some(next);
                    Err(Error::Stopped)
                }
                Err(Stopped) => {
                    stopped = true;
                    Err(Error::Stopped)
                }
            }
        });
        if stopped || self.stopping() {
            return Err(Stopped);
        }
        if let Some(next) = interrupted {
            return Ok(Step { effects: Vec::new(), next });
        }
        let now = Instant::now();
        Ok(match result {
            Ok(meta) => {
                self.sink.connected();
                log::debug!(
                    "{}: list page done at resourceVersion {:?} (more: {})",
                    self.sink.shared.name,
                    meta.resource_version,
                    meta.continue_token.is_some()
                );
                self.machine.step(
                    Input::Page {
                        resource_version: meta.resource_version.as_deref(),
                        continue_token: meta.continue_token.as_deref(),
                    },
                    now,
                )
            }
            Err(e) => {
                self.note_retry_after(&e);
                self.machine.step(Input::ListFailed(e), now)
            }
        })
    }

    /// Lists metadata only and compares it with the store (`Config::drift_check`).
    fn drift_check(&mut self, params: &ListParams, rv: &str) -> Result<Step, Stopped> {
        stats::add(&self.sink.counters().drift_checks, 1);
        let api = self.api.clone().into_metadata();
        let context = api.describe("drift check: list");
        let scratch = &mut self.sink.scratch;
        let mut listed = HashMap::new();
        let result = self.http.list(&api, params, |item| {
            let meta: PartialObjectMetadata<K> = decode::item(item, scratch)
                .map_err(|e| Error::Decode(Box::new(decode::decode_error(&context, None, item.bytes, e))))?;
            if let (Some(key), Some(rv)) = (ObjectKey::of(&meta), meta.metadata.resource_version) {
                listed.insert(key, rv.into_boxed_str());
            }
            Ok(())
        });
        if self.stopping() {
            return Err(Stopped);
        }
        if let Err(e) = &result {
            self.note_retry_after(e);
        }
        let outcome = result.map(|meta| {
            let list_rv = meta.resource_version.unwrap_or_default();
            let check = drift::Check::new(rv, &list_rv, listed, &mut self.drift_suspects);
            let mismatched = self.sink.writer.check_drift(check);
            log::debug!(
                "{}: drift check at {rv} against list at {list_rv}: {mismatched} out of step",
                self.sink.shared.name
            );
            self.sink.shared.notices.send(Notice::DriftChecked { mismatched });
            mismatched
        });
        Ok(self.machine.step(Input::DriftChecked(outcome), Instant::now()))
    }

    fn watch(&mut self, params: &WatchParams, idle: Duration) -> Result<Step, Stopped> {
        stats::add(&self.sink.counters().watches, 1);
        log::debug!(
            "{}: watch from resourceVersion {:?} (timeout {:?})",
            self.sink.shared.name,
            params.resource_version,
            params.timeout
        );
        let mut stream = match self.http.watch(&self.api, params, idle, self.max_line) {
            Ok(s) => s,
            Err(_) if self.stopping() => return Err(Stopped),
            Err(e) => {
                self.note_retry_after(&e);
                return Ok(self.machine.step(Input::WatchFailed(e), Instant::now()));
            }
        };
        self.sink.connected();
        let mut step = self.machine.step(Input::WatchOpened, Instant::now());
        let context = self.api.describe("watch");
        loop {
            match self.sink.perform(step, None)? {
                Next::ReadOn => {}
                // Anything else ends this stream (dropping it closes the connection).
                next => return Ok(Step { effects: Vec::new(), next }),
            }
            let item = stream.next_line();
            if self.stopping() {
                return Err(Stopped);
            }
            let now = Instant::now();
            step = match item {
                StreamItem::Line(bytes, line) => {
                    stats::add(&self.sink.counters().bytes, bytes.len() as u64 + 1);
                    let keep_raw = self.sink.compact.is_some();
                    match decode::watch_event::<K>(bytes, keep_raw, &mut self.sink.scratch)
                        .map_err(|message| {
                            Error::Decode(Box::new(decode::decode_error(&context, Some(line), bytes, message)))
                        })
                        .and_then(|(ev, raw)| self.on_event(ev, (bytes, raw), (&context, line), now))
                    {
                        Ok((input, step)) => Step { effects: Vec::new(), next: self.sink.perform(step, input)? },
                        Err(e) => self.machine.step(Input::WatchFailed(e), now),
                    }
                }
                StreamItem::End => self.machine.step(Input::WatchEnded, now),
                StreamItem::Idle => self.machine.step(Input::Idle, now),
                StreamItem::Failed(e) => self.machine.step(Input::WatchFailed(e), now),
            };
        }
    }

    /// Feeds one decoded event to the machine; returns the object (if any) and the actions.
    /// `bytes`: the line and the object's raw bytes if kept; `at`: context and line number.
    fn on_event(
        &mut self,
        ev: WatchEvent<K>,
        bytes: (&[u8], Option<&[u8]>),
        at: (&str, u64),
        now: Instant,
    ) -> Result<(Option<Subject<K>>, Step), Error> {
        let (line, raw) = bytes;
        let (context, n) = at;
        let counters = &self.sink.shared.counters;
        counters.event_seen(now);
        let object_event = |obj: K, make: fn(&str) -> WatchInput<'_>, this: &mut Self| {
            let rv = obj.meta().resource_version.clone().unwrap_or_default();
            let input = this.sink.prepare(obj, raw, (context, Some(n)))?;
            let actions = this.machine.step(Input::Event(make(&rv)), now);
            Ok((Some(input), actions))
        };
        match ev {
            WatchEvent::Added(o) => {
                stats::add(&counters.added, 1);
                object_event(o, |rv| WatchInput::Added { resource_version: rv }, self)
            }
            WatchEvent::Modified(o) => {
                stats::add(&counters.modified, 1);
                object_event(o, |rv| WatchInput::Modified { resource_version: rv }, self)
            }
            WatchEvent::Deleted(o) => {
                stats::add(&counters.deleted, 1);
                object_event(o, |rv| WatchInput::Deleted { resource_version: rv }, self)
            }
            WatchEvent::Bookmark { resource_version, initial_events_end } => {
                stats::add(&counters.bookmarks, 1);
                let input = WatchInput::Bookmark { resource_version: &resource_version, initial_events_end };
                Ok((None, self.machine.step(Input::Event(input), now)))
            }
            WatchEvent::Error(status) => {
                let e = Error::Api(Box::new(status.into_api_error(context)));
                Ok((None, self.machine.step(Input::WatchFailed(e), now)))
            }
            WatchEvent::Undecodable { kind, id, message } => {
                // The machine moves past it as past any event; the sink applies the policy.
                let rv = id.resource_version.clone().unwrap_or_default();
                let input = match kind {
                    Change::Added => WatchInput::Added { resource_version: &rv },
                    Change::Modified => WatchInput::Modified { resource_version: &rv },
                    Change::Deleted => WatchInput::Deleted { resource_version: &rv },
                };
                stats::add(
                    match kind {
                        Change::Added => &counters.added,
                        Change::Modified => &counters.modified,
                        Change::Deleted => &counters.deleted,
                    },
                    1,
                );
                let e = Error::Decode(Box::new(decode::decode_error(context, Some(n), line, message)));
                let subject = self.sink.skipped(id, e);
                Ok((Some(subject), self.machine.step(Input::Event(input), now)))
            }
        }
    }
}
