//! The machine's effects, turned into changes of the store (through the writer) whose events
//! go to the consumers (through delivery), and into counts and notices: the one place that
//! knows which effect changes what.

use std::time::Instant;

use crate::cache::{Seen, Skipped, Unchanged, Writer};
use crate::engine::counters::{self, Counters};
use crate::engine::delivery::{Delivery, Form};
use crate::engine::gate::Stopped;
use crate::engine::prepare::{Incoming, Subject};
use crate::engine::worker::Worker;
use crate::error::{DecodeError, Error};
use crate::machine::{Effect, Next, Step};
use crate::notice::{Notice, RelistReason};
use crate::resource::Watchable;

impl<K: Watchable> Worker<K> {
    /// Applies a step's effects, with the current input's object, and returns its next move.
    pub(super) fn perform(&mut self, step: Step, mut subject: Option<Subject<K>>) -> Result<Next, Stopped> {
        let retries = matches!(step.next, Next::Wait(_));
        for e in &step.effects {
            self.effect(e, &mut subject, retries)?;
        }
        if let Next::Wait(delay) = &step.next
            && let Some(Effect::Report(error)) = step.effects.iter().find(|e| matches!(e, Effect::Report(_)))
        {
            self.connected = false;
            self.control.notices.send(Notice::Reconnecting { error: error.clone(), delay: *delay });
        }
        Ok(step.next)
    }

    /// Applies one effect: a change of the store, through the writer, whose events go to the
    /// consumers through delivery; or a count, a notice, the version the store reflects.
    /// `subject`: the current input's object, taken by the effect that applies it; `retries`:
    /// the step's next move is a wait before a retry (an error it reports is kept for consumers
    /// that attach meanwhile).
    fn effect(&mut self, effect: &Effect, subject: &mut Option<Subject<K>>, retries: bool) -> Result<(), Stopped> {
        let (writer, counters) = (&mut self.writer, &self.control.counters);
        match effect {
            Effect::BeginInit => {
                self.delivery.relist_begins();
                self.delivery.send(Form::Decoded, |c| writer.begin_init(c.events()))
            }
            Effect::InitApply => match taken(effect, subject) {
                Some(subject) => Self::init_apply(writer, &mut self.delivery, counters, subject),
                None => Ok(()),
            },
            Effect::InitDone(rv) => {
                self.delivery.relist_ends();
                let (notices, reason) = (&self.control.notices, self.reason);
                let (part, shard) = (self.delivery.part(), self.api.shard.as_ref());
                self.delivery.send(Form::Decoded, |c| {
                    let inferred = writer.init_done(rv.as_deref(), c.events());
                    counters::add(&counters.inferred_deletes, inferred as u64);
                    // Before the `InitDone` goes out: a consumer that reads `stats()` on it
                    // sees the shard this sync was of.
                    counters.synced(part, shard);
                    let objects = writer.store().held();
                    notices.send(Notice::Synced { reason, objects, inferred_deletes: inferred });
                })?;
                self.synced();
                Ok(())
            }
            Effect::AbortInit => {
                self.delivery.relist_ends();
                // No events, but a change of what a subscriber's replay shows (the relist in
                // progress).
                self.delivery.send(Form::Decoded, |_| writer.abort_init())
            }
            Effect::Apply => match taken(effect, subject) {
                Some(Subject::Object(Incoming { key, obj, encoded, values })) => {
                    let form = encoded.clone().map_or(Form::Decoded, Form::Encoded);
                    self.delivery.send(form, |c| {
                        let old = writer.apply(key, &obj, encoded, values);
                        // The predicates compare outside the consumers' lock, after the
                        // subscribers are taken: one subscribing meanwhile gets the new state
                        // in its replay instead.
                        c.unlock();
                        if !writer.applied(old, obj, c.events()) {
                            counters::add(&counters.filtered, 1);
                        }
                    })
                }
                Some(Subject::Skipped(s, e)) => {
                    Self::undecodable(writer, &mut self.delivery, counters, Seen::Changed, &s, e)
                }
                Some(Subject::Shared { key, .. }) => {
                    log::error!("bug: {effect:?} of a shared list item {key}; ignored");
                    Ok(())
                }
                None => Ok(()),
            },
            Effect::Delete => match taken(effect, subject) {
                Some(Subject::Object(Incoming { key, obj, encoded, .. })) => {
                    let form = encoded.map_or(Form::Decoded, Form::Encoded);
                    self.delivery.send(form, |c| writer.delete(&key, obj, c.events()))
                }
                Some(Subject::Skipped(s, e)) => {
                    Self::undecodable(writer, &mut self.delivery, counters, Seen::Deleted, &s, e)
                }
                Some(Subject::Shared { key, .. }) => {
                    log::error!("bug: {effect:?} of a shared list item {key}; ignored");
                    Ok(())
                }
                None => Ok(()),
            },
            Effect::Report(e) => self.delivery.send(Form::Decoded, |c| {
                let e = noted(writer, counters, e.clone());
                if retries { c.report_retrying(e) } else { c.report(e) }
            }),
            Effect::Relist(reason) => {
                counters.relist(*reason);
                self.reason = *reason;
                if *reason != RelistReason::Initial {
                    log::debug!("{}: relisting ({reason:?})", self.control.name);
                }
                self.control.notices.send(Notice::Relisting { reason: *reason });
                Ok(())
            }
            Effect::Reached(rv) => {
                writer.reached(rv);
                Ok(())
            }
            Effect::Stale => {
                if let Some(since) = writer.stale(Instant::now()) {
                    log::debug!("{}: the store is stale", self.control.name);
                    self.control.notices.send(Notice::Stale { since });
                }
                Ok(())
            }
            Effect::Fresh => {
                if let Some(stale_for) = writer.fresh(Instant::now()) {
                    log::debug!("{}: the store is fresh again after {stale_for:?}", self.control.name);
                    self.control.notices.send(Notice::Fresh { stale_for });
                }
                Ok(())
            }
        }
    }

    /// Applies one object to the relist in progress: a list item as it is read, or a
    /// streaming list's initial event (`Effect::InitApply`).
    pub(super) fn init_apply(
        writer: &mut Writer<K>,
        delivery: &mut Delivery<K>,
        counters: &Counters,
        subject: Subject<K>,
    ) -> Result<(), Stopped> {
        match subject {
            Subject::Object(Incoming { key, obj, encoded, values }) => {
                let form = encoded.clone().map_or(Form::Decoded, Form::Encoded);
                delivery.send(form, |c| {
                    let held = writer.init_apply(key, obj, encoded, values, c.events());
                    c.relist_holds(held);
                })
            }
            Subject::Shared { key, unchanged } => {
                let form = match &unchanged {
                    Unchanged::Object(_) => Form::Decoded,
                    Unchanged::Compact(encoded) => Form::InitApply(encoded.clone()),
                };
                delivery.send(form, |c| {
                    let held = writer.init_share(key, unchanged, c.events());
                    c.relist_holds(held);
                })
            }
            Subject::Skipped(s, e) => Self::undecodable(writer, delivery, counters, Seen::Listed, &s, e),
        }
    }

    /// Hands an object that does not decode as `K` to the writer, which applies the policy
    /// (see `Skipped`) and says whether to report it.
    fn undecodable(
        writer: &mut Writer<K>,
        delivery: &mut Delivery<K>,
        counters: &Counters,
        seen: Seen,
        s: &Skipped,
        error: DecodeError,
    ) -> Result<(), Stopped> {
        delivery.send(Form::Decoded, |c| {
            if let Some(e) = writer.undecodable(seen, s, error, c.events()) {
                c.report(noted(writer, counters, e));
            }
        })
    }
}

/// The object `effect` applies, taken from the current input; `None` (a bug of the machine,
/// logged) when the input has none.
fn taken<K>(effect: &Effect, subject: &mut Option<Subject<K>>) -> Option<Subject<K>> {
    let taken = subject.take();
    if taken.is_none() {
        log::error!("bug: {effect:?} without an object; ignored");
    }
    taken
}

/// A non-terminal error to deliver: counted, and kept for `wait_until_ready` to explain itself.
pub(super) fn noted<K: Watchable>(writer: &Writer<K>, counters: &Counters, e: Error) -> Error {
    writer.set_last_error(&e);
    counters.error(&e);
    e
}
