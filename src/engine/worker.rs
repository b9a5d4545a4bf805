//! The background thread: performs the machine's next moves through the wire (lists, drift
//! checks, watches), turns its effects into changes of the store whose events it hands to
//! delivery (`worker/effects.rs`), feeds back what happened, and stops promptly.

mod effects;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use crossbeam_channel::{after, select};
use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng as _};

use crate::cache::Writer;
use crate::codec::decode::{self, Change, WatchEvent};
use crate::engine::control::{AgentSlot, Control};
use crate::engine::counters;
use crate::engine::delivery::{Delivery, Form};
use crate::engine::gate::{Stopped, Wake};
use crate::engine::parallel::{Halt, Pool};
use crate::engine::prepare::{Prepare, Subject};
use crate::error::{DecodeError, Error, snippet};
use crate::guard;
use crate::key::ObjectKey;
use crate::machine::drift;
use crate::machine::{Checked, Effect, Input, Machine, Next, Step, WatchInput};
use crate::notice::{Notice, RelistReason};
use crate::resource::{PartialObjectMetadata, Watchable};
use crate::shard::{Follow, Follower, Shard, ShardFilter};
use crate::wire::api::Api;
use crate::wire::http::Http;
use crate::wire::request::{ListParams, Target, WatchParams};
use crate::wire::stream::StreamItem;

/// The watcher thread's state.
pub(crate) struct Worker<K> {
    pub(crate) api: Api<K>,
    pub(crate) http: Http,
    pub(crate) machine: Machine,
    /// What the watcher's handle and threads share: the stop signal, counters, notices, the
    /// list gate, the end path.
    pub(crate) control: Arc<Control<K>>,
    /// This thread's part of the store.
    pub(crate) writer: Writer<K>,
    /// How the events of the store's changes reach the consumers.
    pub(crate) delivery: Delivery<K>,
    pub(crate) prepare: Prepare<K>,
    /// Helper threads that prepare list items (`WatcherBuilder::parallel_sync`); none: this
    /// thread prepares them.
    pub(crate) pool: Option<Pool<K>>,
    /// Objects a drift check could not yet judge (see `drift`).
    pub(crate) drift_suspects: drift::Suspects,
    /// Start after a random delay up to this (watchers over several namespaces).
    pub(crate) start_spread: Duration,
    /// The reason of the relist in progress (for `Notice::Synced`).
    pub(crate) reason: RelistReason,
    /// False from the start and after each `Notice::Reconnecting` until a request succeeds.
    pub(crate) connected: bool,
    /// A filtering server's objects of other shards were logged (once per worker).
    pub(crate) shard_warned: bool,
    /// The server was asked whether it filters the shard (before the first streaming list).
    pub(crate) shard_probed: bool,
    /// The shard group this watcher follows (`Config::shard_group`), with this thread's
    /// registration, the generation of the shard it last took, and the shards its part of the
    /// store may hold (the one of its last complete sync, and those of relists since).
    pub(crate) follow: Option<Following>,
}

/// A worker following a shard group's share.
pub(crate) struct Following {
    pub(crate) follow: Arc<Follow>,
    pub(crate) me: Follower,
    pub(crate) seen: u64,
    pub(crate) held: Vec<Shard>,
    /// This worker's agent, which the group shuts down to cut a request in flight when the
    /// share changes (`Follow::notify`).
    pub(crate) slot: Arc<AgentSlot>,
}

/// While following a shard group, a watch wakes at least this often to see whether the shard
/// changed (a change is otherwise taken between two requests).
const FOLLOW_POLL: Duration = Duration::from_millis(500);

impl<K: Watchable> Worker<K> {
    /// Runs until stopped or a terminal error; then marks the store ended and closes the channel.
    pub(crate) fn run(mut self) {
        let spread = self.start_spread;
        let driven = catch_unwind(AssertUnwindSafe(|| {
            let delay = SmallRng::seed_from_u64(super::seed()).random_range(Duration::ZERO..=spread);
            self.pause(delay).and_then(|()| self.drive())
        }));
        if let Some(f) = &self.follow {
            // A follower's part of the store ends empty: once unregistered, its holdings no
            // longer count in its member's claim, so another member may take that share; no
            // store of this member may hold it then (docs/protocol.md §13.4). Consumers are
            // told nothing more: the watcher has ended.
            self.writer.empty_at_end();
            f.follow.unregister(f.me.id);
        }
        let end = match driven {
            Ok(Ok(e)) => e,
            Ok(Err(Stopped)) => Error::Stopped,
            // A user callback panicked (see `guard`): it ends the watcher, after what was
            // applied before it. Any other panic is a bug, for the thread's top frame.
            Err(panic) if guard::is_callback(panic.as_ref()) => {
                let e = guard::into_error(panic.as_ref());
                log::warn!("{}: {e}", self.control.name);
                e
            }
            Err(panic) => resume_unwind(panic),
        };
        // The store's waiters learn the end first; then the events held back (a batch, or an
        // abandoned list's) go out, waiting for consumers; the terminal error follows them
        // (`Control::exited`). The order of an end: engine/delivery/consumer.rs.
        self.control.ending(&end);
        let end = match end {
            Error::Stopped => end,
            e => self.delivery.quiet().map_or(Error::Stopped, |()| e),
        };
        self.control.finish(end);
        self.control.exited();
        log::debug!("{}: watcher thread exits", self.control.name);
    }

    fn stopping(&self) -> bool {
        self.control.stopping.load(Ordering::Acquire)
    }

    fn drive(&mut self) -> Result<Error, Stopped> {
        if self.follow.is_some() {
            // The first sync lists the shard the group gives now (once it gives one).
            self.take_shard()?;
        }
        let mut step = self.machine.step(Input::Start, Instant::now());
        loop {
            if self.stopping() {
                return Err(Stopped);
            }
            let next = self.perform(step, None)?;
            if self.follow_changed() {
                // The group moved this member's share (or its lead ended): what was under way
                // is dropped, and a relist with the new shard follows (docs/protocol.md §13,
                // "Shard groups").
                step = self.refollow()?;
                continue;
            }
            let control = Arc::clone(&self.control);
            // Lists take a permit (a limit across the threads of a multi-namespace watcher),
            // held until the list returns; then every request waits out a `Retry-After` that
            // any of those threads was given. A follower's waits end when its share changes.
            let _permit = match &next {
                Next::List(_) | Next::DriftCheck { .. } => loop {
                    match control.gate.list_permit(&control.stop_rx, &self.follow_wake())? {
                        Some(permit) => break Some(permit),
                        None if self.follow_changed() => break None,
                        None => {}
                    }
                },
                _ => None,
            };
            if matches!(next, Next::List(_) | Next::DriftCheck { .. }) && _permit.is_none() {
                step = self.refollow()?;
                continue;
            }
            if matches!(next, Next::List(_) | Next::DriftCheck { .. } | Next::Watch { .. } | Next::Wait(_)) {
                // Events held back while the last body was read wait for slow consumers here,
                // between two requests or before a backoff wait (a relist's last page publishes
                // them with `InitDone`, after the store is updated).
                self.delivery.quiet()?;
            }
            if matches!(next, Next::List(_) | Next::DriftCheck { .. } | Next::Watch { .. }) {
                while !control.gate.wait_turn(&control.stop_rx, &self.follow_wake())? {
                    if self.follow_changed() {
                        break;
                    }
                }
                if self.follow_changed() {
                    step = self.refollow()?;
                    continue;
                }
            }
            step = match next {
                Next::List(params) => self.list(&params)?,
                Next::DriftCheck { params, rv } => self.drift_check(&params, &rv)?,
                Next::Watch { params, idle } => {
                    let idle = if self.follow.is_some() { idle.min(FOLLOW_POLL) } else { idle };
                    self.watch(&params, idle)?
                }
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

    /// Whether the share this follower took changed since (or its request was cut for it).
    fn follow_changed(&self) -> bool {
        self.follow.as_ref().is_some_and(|f| f.follow.moved(f.seen) || f.slot.was_cut())
    }

    /// What ends a follower's waits besides stop: its share changing, its lead ending.
    fn follow_wake(&self) -> Wake {
        let never = (crossbeam_channel::never(), crossbeam_channel::never());
        let Some(f) = &self.follow else { return never };
        let now = Instant::now();
        let end = match f.follow.valid_until().filter(|u| *u > now) {
            Some(u) => after(u - now),
            None => crossbeam_channel::never(),
        };
        (f.me.wake.clone(), end)
    }

    /// A request of a follower's ended (failed, or cut by its group): when the share changed,
    /// what the machine would make of the failure does not matter, a relist follows (`drive`).
    fn cut_short(&self) -> Option<Step> {
        self.follow_changed().then(read_on)
    }

    /// The share changed: a relist with the new one (or an empty store) follows.
    fn refollow(&mut self) -> Result<Step, Stopped> {
        let relisting = self.take_shard()?;
        Ok(self.machine.resync(RelistReason::ShardChanged, relisting, Instant::now()))
    }

    /// Takes the group's shard for the next relist. While the group gives none, empties this
    /// thread's part of the store (every object arrives as `Delete`) and waits for one.
    /// Returns whether a relist was still in progress (to abort).
    fn take_shard(&mut self) -> Result<bool, Stopped> {
        let mut relisting = self.delivery.relisting();
        loop {
            if let Some(f) = &self.follow
                && f.slot.was_cut()
            {
                // The group cut a request: the agent is shut for good; go on with a new one.
                self.http = self.http.fresh();
                f.slot.replace(self.http.agent().clone());
                if self.stopping() {
                    return Err(Stopped);
                }
            }
            let Some(f) = &mut self.follow else { return Ok(relisting) };
            let (generation, shard) = f.follow.current();
            f.seen = generation;
            if let Some(shard) = shard {
                // Until the relist ends, the store may hold the old shards and the new one.
                if !f.held.contains(&shard) {
                    f.held.push(shard.clone());
                }
                f.follow.holding(f.me.id, f.held.clone());
                log::debug!("{}: following the shard group: {shard}", self.control.name);
                self.api.shard = Some(shard);
                return Ok(relisting);
            }
            let wake = f.me.wake.clone();
            if !f.held.is_empty() {
                log::debug!("{}: the shard group gives no share: emptying the store", self.control.name);
                self.api.shard = None;
                let mut effects = Vec::new();
                if relisting {
                    effects.push(Effect::AbortInit);
                }
                effects.extend([Effect::BeginInit, Effect::InitDone(None)]);
                self.perform(Step { effects, next: Next::ReadOn }, None)?;
                relisting = false;
            }
            select! {
                recv(self.control.stop_rx) -> _ => return Err(Stopped),
                recv(wake) -> _ => {}
            }
        }
    }

    /// A sync ended: this thread's part of the store holds exactly the shard it listed (the
    /// counters were told before its `InitDone` went out).
    fn synced(&mut self) {
        if let Some(f) = &mut self.follow {
            f.held = self.api.shard.iter().cloned().collect();
            f.follow.holding(f.me.id, f.held.clone());
            // Listed for the share of `seen`: its reads show it while that share's lead lasts.
            f.follow.listed(f.me.id, self.api.shard.as_ref().map(|_| f.seen));
        }
    }

    /// A request succeeded: announce it if it is the first since the start or a failure.
    fn connected(&mut self) {
        if !self.connected {
            self.connected = true;
            self.delivery.reached();
            self.control.notices.send(Notice::Connected);
        }
    }

    /// The machine's step after a list or watch request failed with `e`: a refused connection
    /// (`Http::refused`) is its own input, whatever the request; any other failure is
    /// `failed(e)`. A `Retry-After` is noted first.
    fn request_failed(&mut self, e: Error, failed: fn(Error) -> Input<'static>, now: Instant) -> Step {
        self.note_retry_after(&e);
        let input = if self.http.refused() { Input::Refused(e) } else { failed(e) };
        self.machine.step(input, now)
    }

    /// A `Retry-After` from the server delays every thread of this watcher (set before this
    /// thread lets go of its list permit, so none slips through).
    fn note_retry_after(&self, e: &Error) {
        if let Some(until) = self.machine.server_wait(e).and_then(|after| Instant::now().checked_add(after)) {
            self.control.gate.delay_all(until);
        }
    }

    /// Sleeps `delay`, waking at once on stop. Never `thread::sleep`.
    fn wait(&self, delay: Duration) -> Result<(), Stopped> {
        self.control.counters.backoff(delay);
        self.pause(delay)
    }

    /// Sleeps `delay`, waking at once on stop, without counting it as backoff.
    fn pause(&self, delay: Duration) -> Result<(), Stopped> {
        if delay.is_zero() {
            return Ok(());
        }
        // A follower's wait also ends when its share changes or its member's lead ends, so
        // that it drops what it may no longer hold within the lead's margin (`drive` checks).
        let (wake, lead_end) = self.follow_wake();
        select! {
            recv(self.control.stop_rx) -> _ => Err(Stopped),
            recv(after(delay)) -> _ => Ok(()),
            recv(wake) -> _ => Ok(()),
            recv(lead_end) -> _ => Ok(()),
        }
    }

    /// Reads one list page: each item goes to the relist in progress as it arrives (prepared
    /// here or on the helper threads); then the machine learns how the page ended.
    fn list(&mut self, params: &ListParams) -> Result<Step, Stopped> {
        let metadata_only = self.api.target().metadata_only;
        if self.api.shard.is_some() && metadata_only && !self.shard_probed {
            // A metadata-only list cannot say whether the server filtered the shard (no
            // `shardInfo`: docs/protocol.md, "Sharded lists and watches"): a list of at most one
            // full object asks first, as before a streaming list, so that `Stats::shard_filter`
            // is known once the list completes. A probe that failed fails this attempt.
            if let Err(Probe::Refused(e) | Probe::Failed(e)) = self.shard_probe() {
                if self.stopping() {
                    return Err(Stopped);
                }
                if let Some(step) = self.cut_short() {
                    return Ok(step);
                }
                return Ok(self.machine.step(Input::ListFailed(e), Instant::now()));
            }
        }
        let control = Arc::clone(&self.control);
        counters::add(&control.counters.lists, 1);
        let context = self.api.describe("list");
        let (writer, delivery, prepare) = (&mut self.writer, &mut self.delivery, &mut self.prepare);
        let counters = &control.counters;
        // Items of other shards are dropped here, before any decode (`Config::shard`).
        let shard = self.api.shard.as_ref();
        let mut foreign = 0u64;
        let mut ours = |item: decode::Item<'_>| {
            let keep = shard.is_none_or(|s| decode::item_in_shard(item, s));
            foreign += u64::from(!keep);
            keep
        };
        let result = match &self.pool {
            // One object that is not a `K` must not block the whole cache: it is skipped.
            None => self.http.list::<Halt>(self.api.target(), params, |item| {
                counters::add(&counters.bytes, item.bytes.len() as u64);
                if !ours(item) {
                    return Ok(());
                }
                let subject = prepare.item(item, &context, writer.indexer())?;
                Ok(Self::init_apply(writer, delivery, counters, subject)?)
            }),
            // The same, with the items prepared on helper threads and applied here in order.
            Some(pool) => {
                let mut run = pool.run(&context);
                let result = self.http.list(self.api.target(), params, |item| {
                    counters::add(&counters.bytes, item.bytes.len() as u64);
                    if !ours(item) {
                        return Ok(());
                    }
                    run.push(item);
                    run.apply(false, &control.stop_rx, |s| Ok(Self::init_apply(writer, delivery, counters, s)?))
                });
                // The items read before the body ended (or failed) are applied, as above: the
                // first error among them is the list's.
                run.apply(true, &control.stop_rx, |s| Ok(Self::init_apply(writer, delivery, counters, s)?)).and(result)
            }
        };
        if self.stopping() {
            return Err(Stopped);
        }
        let now = Instant::now();
        let answered = |this: &mut Self, meta: decode::ListMeta| {
            this.shard_answered(&meta, Told { by_absence: !metadata_only, foreign }, &context)?;
            Ok(meta)
        };
        let result = result.and_then(|meta| answered(self, meta));
        if result.is_ok() {
            self.foreign_from_filtering_server(foreign, &context)?;
        }
        Ok(match result {
            Ok(meta) => {
                self.connected();
                log::debug!(
                    "{}: list page done at resourceVersion {:?} (more: {})",
                    control.name,
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
            Err(Halt::Stopped) => return Err(Stopped),
            Err(Halt::Failed(_)) if self.follow_changed() => return Ok(read_on()),
            Err(Halt::Failed(e)) => self.request_failed(e, Input::ListFailed, now),
        })
    }

    /// Lists metadata only and compares it with the store (`Config::drift_check`).
    fn drift_check(&mut self, params: &ListParams, rv: &str) -> Result<Step, Stopped> {
        counters::add(&self.control.counters.drift_checks, 1);
        let api = self.api.clone().into_metadata();
        let context = api.describe("drift check: list");
        let scratch = &mut self.prepare.scratch;
        let mut listed = HashMap::new();
        let shard = self.api.shard.as_ref();
        let result = self.http.list::<Error>(api.target(), params, |item| {
            if shard.is_some_and(|s| !decode::item_in_shard(item, s)) {
                return Ok(());
            }
            let meta: PartialObjectMetadata<K> = decode::item(item, scratch, None)
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
            if let Some(step) = self.cut_short() {
                return Ok(step);
            }
            self.note_retry_after(e);
        }
        let list_rv = result.as_ref().ok().and_then(|meta| meta.resource_version.clone()).unwrap_or_default();
        let outcome = result.map(|_| {
            let mut check = drift::Check::new(rv, &list_rv, listed, &mut self.drift_suspects);
            self.writer.versions(|key, rv| check.stored(key, rv));
            let mismatched = check.finish();
            log::debug!(
                "{}: drift check at {rv} against list at {list_rv}: {mismatched} out of step",
                self.control.name
            );
            self.control.notices.send(Notice::DriftChecked { mismatched });
            Checked { mismatched, list: &list_rv }
        });
        Ok(self.machine.step(Input::DriftChecked(outcome), Instant::now()))
    }

    fn watch(&mut self, params: &WatchParams, idle: Duration) -> Result<Step, Stopped> {
        counters::add(&self.control.counters.watches, 1);
        log::debug!(
            "{}: watch from resourceVersion {:?} (timeout {:?})",
            self.control.name,
            params.resource_version,
            params.timeout
        );
        let untold = self.control.counters.snapshot_shard_filter().is_none();
        if self.api.shard.is_some() && !self.shard_probed && (params.send_initial_events || untold) {
            // A streaming list carries no list metadata, so nothing in it says whether the
            // server filters the shard: one metadata-only list of at most one object asks,
            // once per worker, before its first streaming list (docs/protocol.md, "Sharded
            // lists and watches"). A streaming list waits for the answer, so that
            // `Stats::shard_filter` is known once it completes: a probe that failed fails
            // this attempt, which is retried after the backoff. Before a plain watch (a
            // filter still untold), a failed probe is only asked again next time.
            let failed = match self.shard_probe() {
                Ok(()) => None,
                Err(Probe::Refused(e)) => Some(Input::WatchFailed(e)),
                Err(Probe::Failed(e)) if params.send_initial_events => Some(Input::ProbeFailed(e)),
                Err(Probe::Failed(_)) => None,
            };
            if let Some(input) = failed {
                if self.stopping() {
                    return Err(Stopped);
                }
                if let Some(step) = self.cut_short() {
                    return Ok(step);
                }
                return Ok(self.machine.step(input, Instant::now()));
            }
        }
        let mut stream = match self.http.watch(self.api.target(), params, idle) {
            Ok(s) => s,
            Err(_) if self.stopping() => return Err(Stopped),
            Err(_) if self.follow_changed() => return Ok(read_on()),
            Err(e) => return Ok(self.request_failed(e, Input::WatchFailed, Instant::now())),
        };
        self.connected();
        let mut step = self.machine.step(Input::WatchOpened, Instant::now());
        let context = self.api.describe("watch");
        // Events of a burst go out together (see `Delivery::batching`); whatever is held back
        // goes out before any wait for the network and when the stream ends.
        self.delivery.batching(true);
        let (encoding, overhead) = (stream.encoding(), stream.overhead());
        // An object of another shard among a streaming list's initial events says for sure
        // that the server does not filter (say, the probe's list was served by a filtering
        // server and this watch by another, behind one load balancer).
        let streaming = params.send_initial_events && self.api.shard.is_some();
        let mut foreign_initial = false;
        loop {
            match self.perform(step, None)? {
                Next::ReadOn => {}
                // Anything else ends this stream (dropping it closes the connection).
                next => {
                    self.delivery.batching(false);
                    self.delivery.quiet()?;
                    return Ok(Step { effects: Vec::new(), next });
                }
            }
            if self.follow_changed() {
                // The shard changed: `drive` relists with the new one.
                self.delivery.batching(false);
                self.delivery.quiet()?;
                return Ok(Step { effects: Vec::new(), next: Next::ReadOn });
            }
            if !stream.line_ready() {
                self.delivery.before_read()?;
            }
            let item = stream.next_line();
            if self.stopping() {
                return Err(Stopped);
            }
            if self.follow_changed() {
                // Cut by the group, or the share changed while reading: `drive` relists.
                self.delivery.batching(false);
                self.delivery.quiet()?;
                return Ok(Step { effects: Vec::new(), next: Next::ReadOn });
            }
            let now = Instant::now();
            step = match item {
                StreamItem::Line(bytes, line) => {
                    counters::add(&self.control.counters.bytes, bytes.len() as u64 + overhead);
                    let relisting = self.delivery.relisting();
                    if let Some(shard) = &self.api.shard
                        && let Some(outside) = decode::event_outside_shard(encoding, bytes, shard)
                    {
                        // Another shard's object: it never arrives, but the watch has come as
                        // far as its version (the machine takes it as a bookmark).
                        if streaming && relisting && !foreign_initial {
                            foreign_initial = true;
                            self.shard_filtered_by(ShardFilter::Client);
                        } else {
                            self.foreign_from_filtering_server(1, &context)?;
                        }
                        self.control.counters.event_seen(now);
                        let rv = outside.resource_version.as_deref().unwrap_or_default();
                        step = self.machine.step(Input::Event(WatchInput::Dropped { resource_version: rv }), now);
                        continue;
                    }
                    if relisting
                        && let Some((shared, rv)) = Prepare::unchanged_event(encoding, bytes, self.writer.indexer())
                    {
                        // A streaming relist's initial event for an object the store holds at
                        // that version: not decoded again, as an unchanged list item is not.
                        self.control.counters.event_seen(now);
                        counters::add(&self.control.counters.added, 1);
                        let added = self.machine.step(Input::Event(WatchInput::Added { resource_version: rv }), now);
                        step = Step { effects: Vec::new(), next: self.perform(added, Some(shared))? };
                        continue;
                    }
                    match self
                        .prepare
                        .event(encoding, bytes, relisting)
                        .map_err(|message| {
                            Error::Decode(Box::new(decode::decode_error(&context, Some(line), bytes, message)))
                        })
                        .and_then(|(ev, raw)| self.on_event(ev, (bytes, raw), (&context, line), now))
                    {
                        Ok((input, step)) => Step { effects: Vec::new(), next: self.perform(step, input)? },
                        Err(e) => self.machine.step(Input::WatchFailed(e), now),
                    }
                }
                StreamItem::End => self.machine.step(Input::WatchEnded, now),
                StreamItem::Idle => self.machine.step(Input::Idle, now),
                StreamItem::Failed(e) => self.machine.step(Input::WatchFailed(e), now),
            };
        }
    }

    /// A list page of a sharded watcher ended: who filtered it, by its `shardInfo`
    /// (docs/protocol.md, "Sharded lists and watches"). A server that filtered by another
    /// selector than the one sent is an error: the page is refused. Only a list of full
    /// objects tells by leaving `shardInfo` out that nobody filtered: kube-apiserver leaves it
    /// out of every metadata-only list, where only objects of other shards among the items
    /// say it.
    fn shard_answered(&mut self, meta: &decode::ListMeta, told: Told, context: &str) -> Result<(), Error> {
        let Some(shard) = &self.api.shard else { return Ok(()) };
        match &meta.shard_selector {
            None if told.by_absence || told.foreign > 0 => self.shard_filtered_by(ShardFilter::Client),
            None => {}
            Some(echo) if Shard::parse(echo).ok().as_ref() == Some(shard) => {
                self.shard_filtered_by(ShardFilter::Server);
            }
            Some(echo) => {
                return Err(Error::Decode(Box::new(DecodeError {
                    context: context.to_owned(),
                    line: None,
                    len: echo.len(),
                    message: format!(
                        "the server filtered the list by another shard selector than the one sent ({})",
                        shard.selector()
                    ),
                    snippet: snippet(echo.as_bytes()),
                })));
            }
        }
        Ok(())
    }

    /// Asks the server whether it filters the shard, for a streaming list or a metadata-only
    /// one: a list of at most one full object, whose `shardInfo` says it (a metadata-only list
    /// would not: kube-apiserver leaves `shardInfo` out of it). A server that filtered by
    /// another selector refused it (`Probe::Refused`); one that could not be asked
    /// (`Probe::Failed`) is asked again before the next list or watch that needs it.
    fn shard_probe(&mut self) -> Result<(), Probe> {
        counters::add(&self.control.counters.lists, 1);
        let target = Target { metadata_only: false, ..self.api.target() };
        let context = target.describe("list (does the server filter the shard?)");
        let params = ListParams { limit: Some(1), ..ListParams::default() };
        match self.http.list::<Error>(target, &params, |_| Ok(())) {
            Ok(meta) => {
                self.shard_probed = true;
                self.shard_answered(&meta, Told { by_absence: true, foreign: 0 }, &context).map_err(Probe::Refused)
            }
            Err(e) => {
                log::debug!("{}: {e}", self.control.name);
                self.note_retry_after(&e);
                Err(Probe::Failed(e))
            }
        }
    }

    /// Records who filters the shard; a change (the first time, or a server that started or
    /// stopped filtering) is announced.
    fn shard_filtered_by(&mut self, by: ShardFilter) {
        if self.control.counters.shard_filter(by) {
            log::debug!("{}: the shard's objects are filtered by the {by:?}", self.control.name);
            self.control.notices.send(Notice::ShardFilter { by });
        }
    }

    /// Objects of other shards from a server that said it filtered: dropped all the same, and
    /// reported once to the consumers (an `Err` on the channel, counted as a decode error; a
    /// server bug, or a selector it reads differently), so the store never silently holds
    /// another shard's objects nor silently misses its own.
    fn foreign_from_filtering_server(&mut self, foreign: u64, context: &str) -> Result<(), Stopped> {
        if foreign == 0
            || self.shard_warned
            || self.control.counters.snapshot_shard_filter() != Some(ShardFilter::Server)
        {
            return Ok(());
        }
        self.shard_warned = true;
        let selector = self.api.shard.as_ref().map(Shard::selector).unwrap_or_default();
        let e = Error::Decode(Box::new(DecodeError {
            context: context.to_owned(),
            line: None,
            len: 0,
            message: format!(
                "the server said it filtered by the shard's selector but sent {foreign} object(s) of other shards; \
                 they were dropped (told once)"
            ),
            snippet: snippet(selector.as_bytes()),
        }));
        log::warn!("{}: {e}", self.control.name);
        let e = effects::noted(&self.writer, &self.control.counters, e);
        self.delivery.send(Form::Decoded, |c| c.report(e))
    }

    /// Feeds one decoded event to the machine; returns the object (if any) and the actions.
    /// `bytes`: the line and the object's raw bytes if kept; `at`: context and line number.
    fn on_event(
        &mut self,
        ev: WatchEvent<K>,
        bytes: (&[u8], Option<decode::Raw<'_>>),
        at: (&str, u64),
        now: Instant,
    ) -> Result<(Option<Subject<K>>, Step), Error> {
        let (line, raw) = bytes;
        let (context, n) = at;
        let counters = &self.control.counters;
        counters.event_seen(now);
        let object_event = |obj: K, make: fn(&str) -> WatchInput<'_>, this: &mut Self| {
            // The machine follows the version the server sent, which a transform may change: it
            // is copied only then, and otherwise read off the prepared object.
            let sent = this.prepare.transforms().then(|| obj.meta().resource_version.clone());
            let input = this.prepare.object(obj, raw, (context, Some(n)), this.writer.indexer())?;
            let rv = match &sent {
                Some(rv) => rv.as_deref(),
                None => input.resource_version(),
            };
            let actions = this.machine.step(Input::Event(make(rv.unwrap_or_default())), now);
            Ok((Some(input), actions))
        };
        match ev {
            WatchEvent::Added(o) => {
                counters::add(&counters.added, 1);
                object_event(o, |rv| WatchInput::Added { resource_version: rv }, self)
            }
            WatchEvent::Modified(o) => {
                counters::add(&counters.modified, 1);
                object_event(o, |rv| WatchInput::Modified { resource_version: rv }, self)
            }
            WatchEvent::Deleted(o) => {
                counters::add(&counters.deleted, 1);
                object_event(o, |rv| WatchInput::Deleted { resource_version: rv }, self)
            }
            WatchEvent::Bookmark { resource_version, initial_events_end } => {
                counters::add(&counters.bookmarks, 1);
                let input = WatchInput::Bookmark { resource_version: &resource_version, initial_events_end };
                Ok((None, self.machine.step(Input::Event(input), now)))
            }
            WatchEvent::Error(status) => {
                let e = Error::Api(Box::new(status.into_api_error(context)));
                Ok((None, self.machine.step(Input::WatchFailed(e), now)))
            }
            WatchEvent::Undecodable { kind, id, message } => {
                // The machine moves past it as past any event; the writer applies the policy.
                let rv = id.resource_version.clone().unwrap_or_default();
                let (input, counter) = match kind {
                    Change::Added => (WatchInput::Added { resource_version: &rv }, &counters.added),
                    Change::Modified => (WatchInput::Modified { resource_version: &rv }, &counters.modified),
                    Change::Deleted => (WatchInput::Deleted { resource_version: &rv }, &counters.deleted),
                };
                counters::add(counter, 1);
                let subject = self.prepare.skipped(id, decode::decode_error(context, Some(n), line, message));
                Ok((Some(subject), self.machine.step(Input::Event(input), now)))
            }
        }
    }
}

/// What a list page can tell of who filtered the shard besides its `shardInfo`
/// (`Worker::shard_answered`).
#[derive(Clone, Copy)]
struct Told {
    /// A list without `shardInfo` was not filtered: true of full objects, not of metadata only.
    by_absence: bool,
    /// Items of other shards the page held.
    foreign: u64,
}

/// Why the question whether the server filters the shard went unanswered
/// (`Worker::shard_probe`).
enum Probe {
    /// The server answered that it filtered by another selector than the one sent.
    Refused(Error),
    /// The request failed.
    Failed(Error),
}

/// A step that does nothing and asks for the next move: what a request a follower's group cut
/// short ends with (`drive` then relists).
fn read_on() -> Step {
    Step { effects: Vec::new(), next: Next::ReadOn }
}
