//! What one [`Machine::step`](super::Machine::step) takes and gives back: the [`Input`] the
//! worker saw (a page, a watch event, a failure, …) and the [`Step`] it answers with: the
//! [`Effect`]s to apply, in order, then one [`Next`] move. Plain data, shared with the engine.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::notice::RelistReason;
use crate::wire::request::{ListParams, WatchParams};

/// What happened, as the worker saw it.
#[derive(Debug)]
pub(crate) enum Input<'a> {
    /// The worker starts (or finished waiting): make the next request.
    Start,
    /// A list page was read to its end, and its items were applied to the relist in progress
    /// (each as `Effect::InitApply` would; the machine has nothing to decide per item).
    Page { resource_version: Option<&'a str>, continue_token: Option<&'a str> },
    /// A list request failed.
    ListFailed(Error),
    /// A watch (or streaming list) answered 200.
    WatchOpened,
    /// One watch event.
    Event(WatchInput<'a>),
    /// The watch stream ended cleanly.
    WatchEnded,
    /// No byte arrived within the requested idle time; the stream is still usable.
    Idle,
    /// The watch request or stream failed.
    WatchFailed(Error),
    /// A list, streaming list or watch request never reached a server: its host refused the
    /// connection (nothing listens on the port). Recovered from as `ListFailed` or
    /// `WatchFailed` would be, but the backoff does not grow (docs/protocol.md §6.10).
    Refused(Error),
    /// A sharded watcher's streaming list was not requested: the list that asks first whether
    /// the server filters the shard failed. It says nothing about streaming lists: they are
    /// retried after the backoff.
    ProbeFailed(Error),
    /// A drift check finished: how many objects were out of step and the version of the list
    /// it compared with, or why it could not tell.
    DriftChecked(Result<Checked<'a>, Error>),
}

/// A watch event, reduced to what the machine needs; the worker keeps the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchInput<'a> {
    Added {
        resource_version: &'a str,
    },
    Modified {
        resource_version: &'a str,
    },
    Deleted {
        resource_version: &'a str,
    },
    Bookmark {
        resource_version: &'a str,
        initial_events_end: bool,
    },
    /// An object event a sharded watcher dropped unread (another shard's object: `Config::shard`
    /// with a server that does not filter). The store does not change, but the watch has come
    /// this far: like a bookmark, it moves the resume RV and the version the store reflects
    /// (every change of the shard's objects up to it has arrived) (docs/protocol.md §14.4).
    Dropped {
        resource_version: &'a str,
    },
}

/// What a drift check found (`Input::DriftChecked`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checked<'a> {
    /// Objects out of step with the server.
    pub(crate) mismatched: usize,
    /// The resourceVersion of the list the store was compared with (empty: none sent).
    pub(crate) list: &'a str,
}

/// What one [`Machine::step`](super::Machine::step) asks of the worker: effects to apply in order, then one next move.
#[derive(Debug, PartialEq)]
pub(crate) struct Step {
    pub(crate) effects: Vec<Effect>,
    pub(crate) next: Next,
}

/// Something to apply to the store, the consumers or the counters, with the current input's
/// object where it names one.
#[derive(Debug, Clone)]
pub(crate) enum Effect {
    /// A relist starts (emit `Init`).
    BeginInit,
    /// Apply the current event's object to the relist in progress: a streaming list's initial
    /// events (a paged list's items go to the relist as they are read: see [`Next::List`]).
    InitApply,
    /// The relist is complete (emit `InitDone`); the store then reflects this resourceVersion
    /// (`None`: the server sent none).
    InitDone(Option<String>),
    /// Forget the relist in progress.
    AbortInit,
    /// Apply the current input's object (added or modified).
    Apply,
    /// Delete the current input's object.
    Delete,
    /// Report a non-terminal error to consumers.
    Report(Error),
    /// Count a relist and its reason.
    Relist(RelistReason),
    /// The store now reflects the server at this resourceVersion: after the `Apply` or
    /// `Delete` before it in the same step, or a bookmark (docs/protocol.md §2.3).
    Reached(String),
    /// The store, in step with the server until now, no longer is: a request failed or a
    /// drift check found it out of step (docs/protocol.md §6.10).
    Stale,
    /// The store is in step with the server again: a relist completed, or a watch resumed
    /// from its resourceVersion took hold.
    Fresh,
}

/// What the worker does next, after the effects.
#[derive(Debug, Clone)]
pub(crate) enum Next {
    /// Request one list page, apply each of its items to the relist in progress (as
    /// `Effect::InitApply` does), then feed back `Input::Page` or `Input::ListFailed`.
    List(ListParams),
    /// Compare the store with a metadata-only list made with these parameters; `rv` is how far
    /// the watch is known to have come (`src/machine/drift.rs`): the resume RV, or the list
    /// version of the last check once a later watch covered it. Feed back `Input::DriftChecked`.
    DriftCheck { params: ListParams, rv: String },
    /// Open a watch; `idle` is the per-read timeout to use.
    Watch { params: WatchParams, idle: Duration },
    /// Keep reading the open list body or stream.
    ReadOn,
    /// Wait (interruptibly), then feed `Input::Start`.
    Wait(Duration),
    /// The watcher ends with this error (`Error::Stopped` for a normal end).
    End(Error),
}

/// Errors compare by message: enough for tests and for spotting a repeated step.
fn same_error(a: &Error, b: &Error) -> bool {
    a.to_string() == b.to_string()
}

impl PartialEq for Effect {
    fn eq(&self, other: &Effect) -> bool {
        match (self, other) {
            (Effect::Report(a), Effect::Report(b)) => same_error(a, b),
            (Effect::Relist(a), Effect::Relist(b)) => a == b,
            (Effect::Reached(a), Effect::Reached(b)) => a == b,
            (Effect::InitDone(a), Effect::InitDone(b)) => a == b,
            (a, b) => {
                std::mem::discriminant(a) == std::mem::discriminant(b)
                    && !matches!(a, Effect::Report(_) | Effect::Relist(_) | Effect::Reached(_) | Effect::InitDone(_))
            }
        }
    }
}

impl PartialEq for Next {
    fn eq(&self, other: &Next) -> bool {
        match (self, other) {
            (Next::List(a), Next::List(b)) => a == b,
            (Next::DriftCheck { params: a, rv: x }, Next::DriftCheck { params: b, rv: y }) => a == b && x == y,
            (Next::Watch { params: a, idle: x }, Next::Watch { params: b, idle: y }) => a == b && x == y,
            (Next::ReadOn, Next::ReadOn) => true,
            (Next::Wait(a), Next::Wait(b)) => a == b,
            (Next::End(a), Next::End(b)) => same_error(a, b),
            _ => false,
        }
    }
}
