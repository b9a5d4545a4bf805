//! The lifecycle notices channel of one watcher.

use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};

use crate::notice::Notice;

/// How many notices wait for a reader before the oldest are dropped.
const NOTICE_CAPACITY: usize = 256;

/// The lifecycle notices channel: it keeps the latest notices (the oldest are dropped when it
/// is full), so a reader that starts late still sees how the watcher started.
pub(crate) struct Notices {
    tx: Sender<Notice>,
    rx: Receiver<Notice>,
}

impl Default for Notices {
    fn default() -> Self {
        let (tx, rx) = bounded(NOTICE_CAPACITY);
        Notices { tx, rx }
    }
}

impl Notices {
    /// Queues `notice`, dropping the oldest if the channel is full; never blocks.
    pub(crate) fn send(&self, notice: Notice) {
        if let Err(TrySendError::Full(notice)) = self.tx.try_send(notice) {
            let _ = self.rx.try_recv();
            let _ = self.tx.try_send(notice);
        }
    }

    /// The receiving end.
    pub(crate) fn receiver(&self) -> Receiver<Notice> {
        self.rx.clone()
    }
}
