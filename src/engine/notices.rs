//! The lifecycle notices channel of one watcher.

use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};
use parking_lot::Mutex;

use crate::notice::Notice;

/// How many notices wait for a reader before the oldest are dropped.
const NOTICE_CAPACITY: usize = 256;

/// The lifecycle notices channel: it keeps the latest notices (the oldest are dropped when it
/// is full), so a reader that starts late still sees how the watcher started. It ends (readers
/// drain it, then see it disconnected) once the watcher has ended: [`close`](Self::close).
pub(crate) struct Notices {
    /// `None` once closed.
    tx: Mutex<Option<Sender<Notice>>>,
    rx: Receiver<Notice>,
}

impl Default for Notices {
    fn default() -> Self {
        let (tx, rx) = bounded(NOTICE_CAPACITY);
        Notices { tx: Mutex::new(Some(tx)), rx }
    }
}

impl Notices {
    /// Queues `notice`, dropping the oldest if the channel is full; never blocks. Ignored once
    /// closed.
    pub(crate) fn send(&self, notice: Notice) {
        let tx = self.tx.lock();
        let Some(tx) = tx.as_ref() else { return };
        if let Err(TrySendError::Full(notice)) = tx.try_send(notice) {
            let _ = self.rx.try_recv();
            let _ = tx.try_send(notice);
        }
    }

    /// No more notices: readers get what is queued, then the channel ends.
    pub(crate) fn close(&self) {
        self.tx.lock().take();
    }

    /// The receiving end.
    pub(crate) fn receiver(&self) -> Receiver<Notice> {
        self.rx.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_channel_ends_after_what_is_queued() {
        let notices = Notices::default();
        notices.send(Notice::Connected);
        notices.close();
        notices.send(Notice::Connected);
        let rx = notices.receiver();
        assert_eq!(rx.iter().count(), 1);
    }

    #[test]
    fn a_full_channel_keeps_the_latest() {
        let notices = Notices::default();
        for dropped in 0..NOTICE_CAPACITY as u64 + 10 {
            notices.send(Notice::Lagged { dropped });
        }
        notices.close();
        let all: Vec<Notice> = notices.receiver().iter().collect();
        assert_eq!(all.len(), NOTICE_CAPACITY);
        assert!(matches!(all.last(), Some(Notice::Lagged { dropped }) if *dropped == NOTICE_CAPACITY as u64 + 9));
    }
}
