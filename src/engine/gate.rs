//! The list gate the threads of one watcher share: a limit on list requests in flight, and a
//! "not before" time that any thread's `Retry-After` sets for all.

use crossbeam_channel::{Receiver, Sender, bounded, select};

/// The worker was stopped while waiting (for a permit, a turn, or a consumer).
pub(crate) struct Stopped;

/// What the workers of one watcher share about the server's load: a limit on list requests in
/// flight, and a "not before" time set by any member's `Retry-After`.
pub(crate) struct Gate {
    /// A token per list allowed in flight; `None`: no limit.
    permits: Option<(Sender<()>, Receiver<()>)>,
    not_before: parking_lot::Mutex<Option<std::time::Instant>>,
}

impl Gate {
    pub(crate) fn new(max_lists: Option<usize>) -> Gate {
        let permits = max_lists.map(|n| {
            let (tx, rx) = bounded(n);
            for _ in 0..n {
                let _ = tx.try_send(());
            }
            (tx, rx)
        });
        Gate { permits, not_before: parking_lot::Mutex::new(None) }
    }

    /// Every member waits at least until `until` before its next request.
    pub(crate) fn delay_all(&self, until: std::time::Instant) {
        let mut nb = self.not_before.lock();
        if nb.is_none_or(|t| t < until) {
            *nb = Some(until);
        }
    }

    /// Waits (interruptibly) until the shared delay has passed: true then, false when `wake`
    /// woke it first (a follower's share changed: `engine/worker.rs`).
    pub(crate) fn wait_turn(&self, stop: &Receiver<()>, wake: &Wake) -> Result<bool, Stopped> {
        let until = *self.not_before.lock();
        let Some(left) = until.map(|t| t.saturating_duration_since(std::time::Instant::now())) else {
            return Ok(true);
        };
        if left.is_zero() {
            return Ok(true);
        }
        select! {
            recv(stop) -> _ => Err(Stopped),
            recv(crossbeam_channel::after(left)) -> _ => Ok(true),
            recv(wake.0) -> _ => Ok(false),
            recv(wake.1) -> _ => Ok(false),
        }
    }

    /// Takes a list permit (waiting, interruptibly, for one); it is returned when dropped.
    /// `None` when `wake` woke the wait first.
    pub(crate) fn list_permit(&self, stop: &Receiver<()>, wake: &Wake) -> Result<Option<Permit<'_>>, Stopped> {
        let Some((_, rx)) = &self.permits else { return Ok(Some(Permit(None))) };
        select! {
            recv(stop) -> _ => Err(Stopped),
            recv(rx) -> _ => Ok(Some(Permit(Some(self)))),
            recv(wake.0) -> _ => Ok(None),
            recv(wake.1) -> _ => Ok(None),
        }
    }
}

/// What else ends a worker's wait: for a follower of a shard group, its wake-up channel
/// (the share changed) and a timer at its member's lead's end; `never()` for others.
pub(crate) type Wake = (Receiver<()>, Receiver<std::time::Instant>);

/// A list permit of a [`Gate`]; returned on drop.
pub(crate) struct Permit<'a>(Option<&'a Gate>);

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if let Some((tx, _)) = self.0.and_then(|g| g.permits.as_ref()) {
            let _ = tx.try_send(());
        }
    }
}
