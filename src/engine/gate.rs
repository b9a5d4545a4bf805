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

    /// Waits (interruptibly) until the shared delay has passed.
    pub(crate) fn wait_turn(&self, stop: &Receiver<()>) -> Result<(), Stopped> {
        let until = *self.not_before.lock();
        let Some(left) = until.map(|t| t.saturating_duration_since(std::time::Instant::now())) else { return Ok(()) };
        if left.is_zero() {
            return Ok(());
        }
        select! {
            recv(stop) -> _ => Err(Stopped),
            recv(crossbeam_channel::after(left)) -> _ => Ok(()),
        }
    }

    /// Takes a list permit (waiting, interruptibly, for one); it is returned when dropped.
    pub(crate) fn list_permit(&self, stop: &Receiver<()>) -> Result<Permit<'_>, Stopped> {
        let Some((_, rx)) = &self.permits else { return Ok(Permit(None)) };
        select! {
            recv(stop) -> _ => Err(Stopped),
            recv(rx) -> _ => Ok(Permit(Some(self))),
        }
    }
}

/// A list permit of a [`Gate`]; returned on drop.
pub(crate) struct Permit<'a>(Option<&'a Gate>);

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if let Some((tx, _)) = self.0.and_then(|g| g.permits.as_ref()) {
            let _ = tx.try_send(());
        }
    }
}
