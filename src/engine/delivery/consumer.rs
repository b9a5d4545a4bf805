//! What one consumer is sent next: a pure decision over plain values ([`decide`]), which the
//! threads carry out (`subscribers.rs` sends what it says, `mod.rs` holds what it holds back).
//! Nothing here sends, locks or waits.
//!
//! # The rules, in one place
//!
//! **Blocking consumers** ([`SlowConsumer::Block`](crate::SlowConsumer::Block)) get every item,
//! in order. With room in the channel an item goes in at once. Without room, delivery waits for
//! the consumer, except while a list body is read: then the item is held back
//! ([`Decision::Hold`]), together with every item after it (so each consumer still gets its items
//! in order), and goes out before the next request or with the relist's `InitDone`.
//!
//! **Lagging consumers** ([`SlowConsumer::Lag`](crate::SlowConsumer::Lag)) are never waited for.
//! Their channel holds `room` events (the capacity, plus the replay it started with) and beyond
//! them the lag marker:
//!
//! 1. An item that finds the channel full is dropped, and the marker ([`Error::Lagged`] with
//!    `dropped: 1`) takes its place: an episode starts.
//! 2. While the marker is queued (the channel is not empty), every further item is dropped and
//!    counted in the episode. The first item that finds the channel empty (the consumer read the
//!    marker) ends the episode: it is sent, and the episode's total is announced.
//! 3. The consumer catches up from the store when it reads a marker: the store holds the effect
//!    of every item dropped before, with one exception, the items of a relist in progress, which
//!    reach the store only at that relist's `InitDone`. Catching up from the store loses them,
//!    the dropped ones and those the consumer was sent before the marker alike. So each consumer
//!    keeps, per part of the watcher (one namespace, or the whole resource), whether that part is
//!    relisting (from its `Init` to its `InitDone`; an abandoned relist's next attempt starts
//!    with `Init` again and keeps the part relisting), how many of its relist's items it was sent,
//!    and how many are uncovered: dropped during the relist, or sent before a marker that went
//!    out during it. If a marker is still queued when the part's `InitDone` is dropped behind it,
//!    it will be read after the store has the relist, and covers them. Otherwise the part's
//!    `InitDone` is followed by a second marker whose `dropped` counts the uncovered items; that
//!    marker is a marker like any other for the parts still relisting.
//! 4. A consumer that subscribes in the middle of a relist starts with that part relisting
//!    (its replay ends inside the relist), so rule 3 holds for it too.
//!
//! **Deletes** (the replay's rule, `Store::replay` in cache/mod.rs, and the writer's): a
//! consumer is sent a `Delete` only for an object it was shown, and one for every such object
//! that goes away. A consumer's replay shows it what the others were told, the objects of
//! abandoned relists included, so the deletes that every consumer gets are right for it too.
//!
//! **The end** (`Worker::run` in engine/worker.rs): the store's waiters learn that the watcher
//! ended, and why, first, at once; then the items held back go out to the consumers (waiting for
//! blocking ones, which the user's `stop()` cuts short); then the terminal error, after them.
//! A consumer that is not reading delays only its own channel.
//!
//! Work per item is constant: the decision reads one consumer's state and one channel length.

use crate::error::Error;

/// How a consumer takes what does not fit in its channel (the plain values of
/// [`SlowConsumer`](crate::SlowConsumer)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Policy {
    /// Wait for room (or hold the item back while a list body is read).
    Block,
    /// Never wait; drop, with a marker, beyond `room` events queued.
    Lag { room: usize },
}

/// One consumer's delivery state: all the decision knows of it besides its channel's length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Consumer {
    pub(super) policy: Policy,
    /// Lag: items dropped in the episode in progress; 0 when there is none.
    dropped: u64,
    /// Lag: per part, whether a relist is in progress as this consumer's items tell.
    relisting: Vec<bool>,
    /// Lag: per part, items of its relist in progress sent since the last marker went out.
    sent: Vec<u64>,
    /// Lag: per part, items of its relist in progress that catching up from a marker would
    /// lose (dropped, or sent before a marker went out), which no marker read after that
    /// relist ends covers yet.
    uncovered: Vec<u64>,
}

impl Consumer {
    /// A consumer of a watcher of `parts` parts; `relisting`: the parts whose relist is in
    /// progress at the moment it subscribes (its replay ends inside them), each with the number
    /// of that relist's items the replay sent.
    pub(super) fn new(policy: Policy, parts: usize, relisting: &[(usize, u64)]) -> Self {
        let parts = parts.max(1);
        let mut c = Consumer {
            policy,
            dropped: 0,
            relisting: vec![false; parts],
            sent: vec![0; parts],
            uncovered: vec![0; parts],
        };
        for &(part, sent) in relisting {
            if part < parts {
                c.relisting[part] = true;
                c.sent[part] = sent;
            }
        }
        c
    }
}

/// What the decision needs to know of an item: what it does to its part's relist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// `Event::Init`: the part's relist starts (or starts again).
    Init,
    /// `Event::InitDone`: the part's relist is in the store now.
    InitDone,
    /// Anything else (an object event, an error).
    Other,
}

impl Kind {
    /// The kind of a channel item.
    pub(super) fn of<K>(item: &crate::error::Result<crate::event::Event<K>>) -> Kind {
        match item {
            Ok(crate::event::Event::Init) => Kind::Init,
            Ok(crate::event::Event::InitDone) => Kind::InitDone,
            _ => Kind::Other,
        }
    }
}

/// Where an item is on its way (the inputs besides the consumer and the item).
#[derive(Clone, Copy, Debug)]
pub(super) struct Moment {
    /// The part of the watcher the item comes from.
    pub(super) part: usize,
    /// Items queued in the consumer's channel now.
    pub(super) queued: usize,
    /// A blocking consumer's channel capacity.
    pub(super) capacity: usize,
    /// Whether delivery may wait for a blocking consumer now (not while a list body is read).
    pub(super) may_wait: bool,
}

/// What to do with an item for one consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Decision {
    /// Put the item in the channel; then, if `Some(n)`, a lag marker for `n` uncovered items.
    Send { then_marker: Option<u64> },
    /// Blocking consumer without room: wait until it makes room, then send.
    Wait,
    /// Blocking consumer without room while waiting is not allowed: hold the item back for it.
    Hold,
    /// Lag: drop the item; a lag marker for one item takes its place (an episode starts).
    Marker,
    /// Lag: drop the item (the episode's marker is still queued).
    Drop,
}

/// The outcome of [`decide`]: what to do, and what to report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Outcome {
    pub(super) decision: Decision,
    /// A lag episode ended before this item, with this many items dropped (a notice says so).
    pub(super) episode_ended: Option<u64>,
}

impl Outcome {
    /// Whether the item was dropped (counted in `Stats::lagged`).
    pub(super) fn dropped(&self) -> bool {
        matches!(self.decision, Decision::Marker | Decision::Drop)
    }
}

/// The one decision, per consumer and item: given the consumer's state, the item's kind and the
/// moment, what to do, and the consumer's new state (updated in place). Pure; the module
/// documentation states the rules.
pub(super) fn decide(consumer: &mut Consumer, kind: Kind, at: Moment) -> Outcome {
    let room = match consumer.policy {
        Policy::Block => {
            let decision = if at.queued < at.capacity {
                Decision::Send { then_marker: None }
            } else if at.may_wait {
                Decision::Wait
            } else {
                Decision::Hold
            };
            return Outcome { decision, episode_ended: None };
        }
        Policy::Lag { room } => room,
    };
    let part = at.part.min(consumer.relisting.len() - 1);
    let relist_ended = kind == Kind::InitDone;
    match kind {
        Kind::Init => consumer.relisting[part] = true,
        Kind::InitDone => consumer.relisting[part] = false,
        Kind::Other => {}
    }
    let mut episode_ended = None;
    if consumer.dropped > 0 {
        if at.queued > 0 {
            // The marker is still queued: this item is dropped too.
            consumer.dropped = consumer.dropped.saturating_add(1);
            uncover(consumer, part, relist_ended);
            return Outcome { decision: Decision::Drop, episode_ended: None };
        }
        // The consumer read the marker.
        episode_ended = Some(consumer.dropped);
        consumer.dropped = 0;
    }
    if at.queued >= room {
        consumer.dropped = 1;
        uncover(consumer, part, relist_ended);
        marker_sent(consumer);
        return Outcome { decision: Decision::Marker, episode_ended };
    }
    if kind == Kind::Other && consumer.relisting[part] {
        consumer.sent[part] = consumer.sent[part].saturating_add(1);
    }
    let mut then_marker = None;
    if relist_ended {
        consumer.sent[part] = 0;
        then_marker = Some(std::mem::take(&mut consumer.uncovered[part])).filter(|n| *n > 0);
        if then_marker.is_some() {
            marker_sent(consumer);
        }
    }
    Outcome { decision: Decision::Send { then_marker }, episode_ended }
}

/// An item of `part` was dropped while a marker is queued (or is being queued): during that
/// part's relist the store does not hold it yet; when the item is the relist's `InitDone`, the
/// queued marker is read after the store has the relist, and covers it all.
fn uncover(consumer: &mut Consumer, part: usize, relist_ended: bool) {
    if relist_ended {
        consumer.uncovered[part] = 0;
        consumer.sent[part] = 0;
    } else if consumer.relisting[part] {
        consumer.uncovered[part] = consumer.uncovered[part].saturating_add(1);
    }
}

/// A marker goes out: the consumer will catch up from a store that lacks what the relists in
/// progress sent it so far.
fn marker_sent(consumer: &mut Consumer) {
    for (part, relisting) in consumer.relisting.iter().enumerate() {
        if *relisting {
            let sent = std::mem::take(&mut consumer.sent[part]);
            consumer.uncovered[part] = consumer.uncovered[part].saturating_add(sent);
        }
    }
}

/// The lag marker for `dropped` items.
pub(super) fn marker(dropped: u64) -> Error {
    Error::Lagged { dropped }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A consumer and its channel, as plain values: what it would hold, and what it read.
    struct Line {
        consumer: Consumer,
        channel: Vec<String>,
        read: Vec<String>,
        notices: Vec<u64>,
    }

    impl Line {
        fn lag(room: usize, parts: usize, relisting: &[(usize, u64)]) -> Self {
            Line {
                consumer: Consumer::new(Policy::Lag { room }, parts, relisting),
                channel: Vec::new(),
                read: Vec::new(),
                notices: Vec::new(),
            }
        }

        /// Offers item `what` of `part` (`Init`, `InitDone`, anything else).
        fn offer(&mut self, part: usize, what: &str) -> Decision {
            let kind = match what {
                "Init" => Kind::Init,
                "InitDone" => Kind::InitDone,
                _ => Kind::Other,
            };
            let at = Moment { part, queued: self.channel.len(), capacity: 0, may_wait: false };
            let out = decide(&mut self.consumer, kind, at);
            self.notices.extend(out.episode_ended);
            match out.decision {
                Decision::Send { then_marker } => {
                    self.channel.push(format!("{what}@{part}"));
                    self.channel.extend(then_marker.map(|n| format!("Lagged({n})")));
                }
                Decision::Marker => self.channel.push("Lagged(1)".to_owned()),
                Decision::Drop | Decision::Wait | Decision::Hold => {}
            }
            out.decision
        }

        fn read_all(&mut self) -> Vec<String> {
            let read: Vec<String> = std::mem::take(&mut self.channel);
            self.read.extend(read.iter().cloned());
            read
        }
    }

    #[test]
    fn a_blocking_consumer_is_sent_with_room_waited_for_without_and_held_while_a_list_is_read() {
        let mut c = Consumer::new(Policy::Block, 1, &[]);
        let at = |queued, may_wait| Moment { part: 0, queued, capacity: 2, may_wait };
        assert_eq!(decide(&mut c, Kind::Other, at(1, true)).decision, Decision::Send { then_marker: None });
        assert_eq!(decide(&mut c, Kind::Other, at(2, true)).decision, Decision::Wait);
        assert_eq!(decide(&mut c, Kind::InitDone, at(2, false)).decision, Decision::Hold);
    }

    #[test]
    fn a_full_lagging_consumer_gets_one_marker_and_the_episode_ends_when_it_has_read_it() {
        let mut l = Line::lag(2, 1, &[]);
        for name in ["a", "b", "c", "d"] {
            l.offer(0, name);
        }
        assert_eq!(l.read_all(), ["a@0", "b@0", "Lagged(1)"]);
        assert_eq!(l.offer(0, "e"), Decision::Send { then_marker: None });
        assert_eq!(l.notices, [2], "c and d were dropped");
    }

    /// A consumer that subscribed in the middle of a relist (its replay ended inside it) and
    /// read its marker before the relist ended gets a second marker after `InitDone`. Its state
    /// used to start with no relist in progress, so nothing was uncovered.
    #[test]
    fn a_consumer_that_subscribed_mid_relist_gets_the_second_marker() {
        let mut l = Line::lag(1, 1, &[(0, 1)]); // the replay sent one of its items
        l.offer(0, "a");
        l.offer(0, "b"); // no room: marker
        l.offer(0, "c"); // dropped
        assert_eq!(l.read_all(), ["a@0", "Lagged(1)"]);
        l.offer(0, "d");
        l.read_all();
        // Catching up lost the replayed item and a (sent before the marker), b and c
        // (dropped); d came after it.
        assert_eq!(l.offer(0, "InitDone"), Decision::Send { then_marker: Some(4) });
        assert_eq!(l.read_all(), ["InitDone@0", "Lagged(4)"]);
    }

    /// Over several parts, an abandoned relist (its next attempt starts with `Init` again) does
    /// not keep any part relisting after its `InitDone`: a count of relists capped at the number
    /// of parts used to stay above zero for good, and no second marker came again.
    #[test]
    fn an_abandoned_relist_of_one_part_leaves_the_second_marker_exact() {
        let mut l = Line::lag(1, 2, &[]);
        for (part, what) in [(0, "Init"), (0, "Init"), (0, "InitDone"), (1, "Init"), (1, "InitDone")] {
            l.offer(part, what);
            l.read_all();
        }
        // Part 1 relists again; the consumer falls behind and reads its marker in the middle.
        l.offer(1, "Init");
        l.offer(1, "x"); // no room
        l.offer(1, "y"); // dropped
        assert_eq!(l.read_all(), ["Init@1", "Lagged(1)"]);
        // Part 0's events go through (they are in the store at once).
        l.offer(0, "z");
        assert_eq!(l.read_all(), ["z@0"]);
        assert_eq!(l.offer(0, "InitDone"), Decision::Send { then_marker: None }, "part 0 dropped nothing");
        l.read_all();
        assert_eq!(l.offer(1, "InitDone"), Decision::Send { then_marker: Some(2) });
        assert_eq!(l.read_all(), ["InitDone@1", "Lagged(2)"]);
        // Nothing is relisting now: a drop and a marker read cover everything.
        l.offer(0, "p");
        l.offer(0, "q");
        l.read_all();
        l.offer(0, "r");
        assert_eq!(l.consumer.uncovered, [0, 0]);
    }

    /// A marker still queued when a relist's `InitDone` is dropped behind it is read after the
    /// store has the relist: no second marker.
    #[test]
    fn a_marker_queued_behind_a_dropped_init_done_covers_the_relist() {
        let mut l = Line::lag(1, 1, &[]);
        l.offer(0, "Init");
        l.offer(0, "a"); // marker
        l.offer(0, "InitDone"); // dropped
        assert_eq!(l.read_all(), ["Init@0", "Lagged(1)"]);
        assert_eq!(l.offer(0, "b"), Decision::Send { then_marker: None });
        assert_eq!(l.consumer.uncovered, [0]);
    }

    /// Whatever the order of items over one to three parts, a lagging consumer that reads at
    /// random moments, applies what it reads and rebuilds from the store at each marker ends
    /// equal to the store once every relist has ended and it has read everything. The store is
    /// modelled as plain sets: an object outside a relist is in it at once, one inside only at
    /// its part's `InitDone` (an abandoned relist's objects are listed again by the next
    /// attempt, so they stay pending).
    #[test]
    fn a_lagging_consumer_that_rebuilds_at_each_marker_ends_equal_to_the_store() {
        use std::collections::BTreeSet;
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..2000 {
            let parts = 1 + next(3) as usize;
            // The consumer subscribes in the middle of some parts' relists: its replay gave it
            // their objects so far (ids from 1000 on).
            let start: Vec<usize> = (0..parts).filter(|_| next(2) == 0).collect();
            let mut pending: Vec<Option<BTreeSet<u64>>> = vec![None; parts];
            let mut picture: BTreeSet<u64> = BTreeSet::new();
            let mut replayed = Vec::new();
            for &p in &start {
                let ids: BTreeSet<u64> = (0..next(3)).map(|i| 1000 + 10 * p as u64 + i).collect();
                picture.extend(&ids);
                replayed.push((p, ids.len() as u64));
                pending[p] = Some(ids);
            }
            let mut consumer = Consumer::new(Policy::Lag { room: 1 + next(3) as usize }, parts, &replayed);
            let mut store: BTreeSet<u64> = BTreeSet::new();
            let mut channel: Vec<Option<(usize, Kind, u64)>> = Vec::new(); // None: a marker
            let mut consume = |channel: &mut Vec<Option<(usize, Kind, u64)>>, store: &BTreeSet<u64>| {
                for item in channel.drain(..) {
                    match item {
                        None => picture = store.clone(),
                        Some((_, Kind::Other, id)) => {
                            picture.insert(id);
                        }
                        Some(_) => {}
                    }
                }
            };
            for id in 0..80u64 {
                let part = next(parts as u64) as usize;
                let kind = match next(8) {
                    0 => Kind::Init,
                    1 if pending[part].is_some() => Kind::InitDone,
                    _ => Kind::Other,
                };
                // The store changes first, then the item is delivered (Delivery::send).
                match kind {
                    Kind::Init => {
                        pending[part].get_or_insert_with(BTreeSet::new);
                    }
                    Kind::InitDone => store.extend(pending[part].take().unwrap_or_default()),
                    Kind::Other => match &mut pending[part] {
                        Some(p) => {
                            p.insert(id);
                        }
                        None => {
                            store.insert(id);
                        }
                    },
                }
                let at = Moment { part, queued: channel.len(), capacity: 0, may_wait: false };
                match decide(&mut consumer, kind, at).decision {
                    Decision::Send { then_marker } => {
                        channel.push(Some((part, kind, id)));
                        channel.extend(then_marker.map(|_| None));
                    }
                    Decision::Marker => channel.push(None),
                    Decision::Drop | Decision::Wait | Decision::Hold => {}
                }
                if next(4) == 0 {
                    consume(&mut channel, &store);
                }
            }
            for (part, pending) in pending.iter_mut().enumerate() {
                if let Some(p) = pending.take() {
                    store.extend(p);
                    let at = Moment { part, queued: channel.len(), capacity: 0, may_wait: false };
                    match decide(&mut consumer, Kind::InitDone, at).decision {
                        Decision::Send { then_marker } => channel.extend(then_marker.map(|_| None)),
                        Decision::Marker => channel.push(None),
                        Decision::Drop | Decision::Wait | Decision::Hold => {}
                    }
                }
            }
            consume(&mut channel, &store);
            // One more item after the consumer caught up: it ends any episode in progress.
            let at = Moment { part: 0, queued: 0, capacity: 0, may_wait: false };
            assert!(matches!(decide(&mut consumer, Kind::Other, at).decision, Decision::Send { .. }));
            assert_eq!(picture, store, "round {round}");
        }
    }
}
