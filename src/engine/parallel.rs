//! Parallel list decoding (`WatcherBuilder::parallel_sync`): helper threads prepare list items
//! ([`Prepare::item`]: decode, transform, index values) while the worker reads on, and the
//! worker applies them strictly in list order, exactly as the items it prepares itself.
//!
//! - The worker copies each item out of the body buffer into a job of up to [`JOB_ITEMS`]
//!   items (or [`JOB_BYTES`] bytes) and sends it to a channel all helpers take from. Each job
//!   carries its own reply channel; the worker keeps the replies in list order, so the next
//!   result in order is always the first reply's.
//! - At most [`JOBS_PER_THREAD`] jobs per helper (and, beyond one job, [`BYTES_IN_FLIGHT`]
//!   bytes) are in flight per list: past that the worker waits for the oldest reply, waking at
//!   once on stop.
//! - One pool per watcher: the threads of a multi-namespace watcher share it, so `threads`
//!   bounds the helpers however many namespaces there are (at most
//!   `max_concurrent_lists` of them list at once anyway).
//! - A list abandoned (stopped, interrupted, failed, a panic unwinding) cancels its jobs: the
//!   helpers skip their remaining items and nobody reads the replies.
//! - An error or a panic on a helper travels back as that item's result: the items before it
//!   are applied, then the error ends the list, or the panic goes on unwinding on the worker
//!   (`guard`'s label intact), which ends the watcher with `Error::Panicked` as usual.
//! - Helpers block on the channel (an idle watcher wakes none of them) and exit when the last
//!   worker has dropped its sender, that is when the watcher ends; `Engine::stop` joins them.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, TryRecvError, bounded, select, unbounded};

use crate::cache::Indexer;
use crate::codec::decode;
use crate::engine::gate::Stopped;
use crate::engine::prepare::{Prepare, Subject};
use crate::error::{Error, Result};
use crate::resource::Watchable;

/// The most helper threads `parallel_sync` accepts.
pub(crate) const MAX_THREADS: usize = 64;
/// Items in one job: a helper's reply wakes the worker once per this many items.
const JOB_ITEMS: usize = 32;
/// A job is sent once it holds this many bytes, whatever its number of items.
const JOB_BYTES: usize = 256 * 1024;
/// Jobs of one list in flight per helper thread: one being prepared, one waiting.
const JOBS_PER_THREAD: usize = 2;
/// Bytes of one list in flight beyond which the worker waits (items can be up to
/// `Config::max_line` long, so the job count alone does not bound memory).
const BYTES_IN_FLIGHT: usize = 16 << 20;

/// Why reading a list body ended before its end: an error (an item's, or the body's), or the
/// watcher stopping.
#[derive(Debug)]
pub(crate) enum Halt {
    Failed(Error),
    Stopped,
}

impl From<Error> for Halt {
    fn from(e: Error) -> Halt {
        Halt::Failed(e)
    }
}

impl From<Stopped> for Halt {
    fn from(_: Stopped) -> Halt {
        Halt::Stopped
    }
}

/// What a helper made of one item: prepared (or the error of the whole body), or the panic of
/// a callback, to resume on the worker.
type Prepared<K> = std::thread::Result<Result<Subject<K>>>;

/// Items copied out of one list body, for one helper.
struct Job<K> {
    bytes: Vec<u8>,
    /// Where each item ends in `bytes`, and whether it passed the syntax check.
    ends: Vec<(usize, bool)>,
    /// The encoding of the items (one for a whole list body).
    form: decode::Form,
    context: Arc<str>,
    /// Set when the list is abandoned: the rest of the job is not needed.
    cancel: Arc<AtomicBool>,
    reply: Sender<Vec<Prepared<K>>>,
}

/// A worker's way to the helpers.
pub(crate) struct Pool<K> {
    jobs: Sender<Job<K>>,
    max_jobs: usize,
}

impl<K> Clone for Pool<K> {
    fn clone(&self) -> Self {
        Pool { jobs: self.jobs.clone(), max_jobs: self.max_jobs }
    }
}

/// A helper thread, and a channel that closes when it exits.
pub(crate) type Helper = (JoinHandle<()>, Receiver<()>);

impl<K: Watchable> Pool<K> {
    /// Starts `threads` helpers (1 to [`MAX_THREADS`]), each preparing with its own copy of
    /// `prepare`. If one cannot start, those started exit as the returned error drops the
    /// channel; their handles are in `helpers`.
    pub(crate) fn start(
        threads: usize,
        prepare: &Prepare<K>,
        indexer: &Indexer<K>,
        name: &str,
        helpers: &mut Vec<Helper>,
    ) -> Result<Pool<K>> {
        let (tx, rx) = unbounded::<Job<K>>();
        for _ in 0..threads {
            let (done_tx, done_rx) = bounded::<()>(0);
            let (mut prepare, indexer, jobs) = (prepare.another(), indexer.clone(), rx.clone());
            let handle = std::thread::Builder::new()
                .name(name.to_owned())
                .spawn(move || {
                    let _done = done_tx; // dropped when the thread exits
                    for job in jobs {
                        help(&mut prepare, &indexer, job);
                    }
                })
                .map_err(|e| Error::Spawn(e.to_string().into()))?;
            helpers.push((handle, done_rx));
        }
        Ok(Pool { jobs: tx, max_jobs: threads.saturating_mul(JOBS_PER_THREAD) })
    }

    /// Starts a list body: its items are pushed as the body is read, then applied in order.
    pub(crate) fn run(&self, context: &str) -> Run<'_, K> {
        Run {
            pool: self,
            context: context.into(),
            cancel: Arc::default(),
            bytes: Vec::new(),
            ends: Vec::new(),
            form: decode::Form::Json,
            replies: VecDeque::new(),
            in_flight: 0,
            ended: false,
        }
    }
}

/// A helper prepares one job's items in order, up to the first that ends the list.
fn help<K: Watchable>(prepare: &mut Prepare<K>, indexer: &Indexer<K>, job: Job<K>) {
    let mut out = Vec::with_capacity(job.ends.len());
    let mut start = 0;
    for &(end, checked) in &job.ends {
        if job.cancel.load(Ordering::Relaxed) {
            return;
        }
        let item = decode::Item { bytes: &job.bytes[start..end], checked, form: job.form };
        let prepared = catch_unwind(AssertUnwindSafe(|| prepare.item(item, &job.context, indexer)));
        let last = !matches!(prepared, Ok(Ok(_)));
        out.push(prepared);
        if last {
            break; // the list ends at an error or a panic: what follows is not needed
        }
        start = end;
    }
    let _ = job.reply.send(out); // the worker may have abandoned the list
}

/// One list body's items on their way through the helpers. Dropping it abandons what is in
/// flight.
pub(crate) struct Run<'a, K> {
    pool: &'a Pool<K>,
    context: Arc<str>,
    cancel: Arc<AtomicBool>,
    /// The job being filled.
    bytes: Vec<u8>,
    ends: Vec<(usize, bool)>,
    /// The encoding of the items (one for a whole list body).
    form: decode::Form,
    /// The replies of the jobs sent, in list order, with the jobs' sizes.
    replies: VecDeque<(Receiver<Vec<Prepared<K>>>, usize)>,
    /// Bytes of the jobs sent and not yet applied.
    in_flight: usize,
    /// An item ended the list (an error, or the worker's `apply` refused): nothing more is
    /// applied.
    ended: bool,
}

impl<K> Run<'_, K> {
    /// Copies one item out of the body buffer; sends the job it fills.
    pub(crate) fn push(&mut self, item: decode::Item<'_>) {
        self.bytes.extend_from_slice(item.bytes);
        self.ends.push((self.bytes.len(), item.checked));
        self.form = item.form;
        if self.ends.len() >= JOB_ITEMS || self.bytes.len() >= JOB_BYTES {
            self.send();
        }
    }

    fn send(&mut self) {
        if self.ends.is_empty() {
            return;
        }
        let (reply, rx) = bounded(1);
        let job = Job {
            bytes: std::mem::take(&mut self.bytes),
            ends: std::mem::take(&mut self.ends),
            form: self.form,
            context: Arc::clone(&self.context),
            cancel: Arc::clone(&self.cancel),
            reply,
        };
        let size = job.bytes.len();
        self.in_flight = self.in_flight.saturating_add(size);
        self.replies.push_back((rx, size));
        // Cannot fail while this worker holds a sender; if it did, the reply channel closes
        // with the job and `apply` reports it.
        let _ = self.pool.jobs.send(job);
    }

    fn full(&self) -> bool {
        self.replies.len() >= self.pool.max_jobs || (self.replies.len() > 1 && self.in_flight >= BYTES_IN_FLIGHT)
    }

    /// Hands the items whose results are back to `apply`, in list order. Waits (waking at once
    /// on `stop`, then `Halt::Stopped`) while too much is in flight, or, with `all`, until
    /// every item pushed is applied. The first error (an item's, or `apply`'s) ends the run
    /// and is returned; a helper's panic resumes here, after the items before it.
    pub(crate) fn apply(
        &mut self,
        all: bool,
        stop: &Receiver<()>,
        mut apply: impl FnMut(Subject<K>) -> Result<(), Halt>,
    ) -> Result<(), Halt> {
        if all {
            self.send();
        }
        while !self.ended
            && let Some((rx, _)) = self.replies.front()
        {
            let reply = match rx.try_recv() {
                Ok(reply) => Ok(reply),
                Err(TryRecvError::Empty) if !all && !self.full() => return Ok(()),
                Err(TryRecvError::Empty) => select! {
                    recv(rx) -> reply => reply.map_err(|_| ()),
                    recv(stop) -> _ => {
                        self.ended = true;
                        return Err(Halt::Stopped);
                    }
                },
                Err(TryRecvError::Disconnected) => Err(()),
            };
            let Some((_, size)) = self.replies.pop_front() else { break };
            self.in_flight -= size;
            let Ok(reply) = reply else {
                self.ended = true;
                return Err(Halt::Failed(Error::Panicked {
                    callback: "a list decoding helper thread".into(),
                    message: "it exited without an answer".into(),
                }));
            };
            for prepared in reply {
                let result = match prepared {
                    Ok(result) => result.map_err(Halt::Failed).and_then(&mut apply),
                    Err(panic) => {
                        self.ended = true;
                        resume_unwind(panic)
                    }
                };
                if let Err(e) = result {
                    self.ended = true;
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

impl<K> Drop for Run<'_, K> {
    fn drop(&mut self) {
        // What is still in flight is not needed: helpers skip it.
        self.cancel.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Writer;
    use crate::engine::prepare::Transform;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::time::Duration;

    fn cm(name: &str) -> String {
        format!(r#"{{"metadata":{{"name":"{name}","resourceVersion":"1"}}}}"#)
    }

    /// Pushes `items` through a pool of `threads` helpers, applying as the worker does; returns
    /// what was applied, in order, and how the run ended. Checks that the helpers exit once
    /// the pool is dropped.
    fn run_items(
        threads: usize,
        transform: Option<Transform<ConfigMap>>,
        items: &[String],
        stop: &Receiver<()>,
    ) -> (Vec<String>, Result<(), Halt>) {
        let (writer, _store) = Writer::<ConfigMap>::new();
        let prepare = Prepare::new("test".into(), transform, None);
        let mut helpers = Vec::new();
        let pool = Pool::start(threads, &prepare, writer.indexer(), "kw-test", &mut helpers).unwrap();
        let mut seen = Vec::new();
        let mut apply = |s: Subject<ConfigMap>| {
            seen.push(match s {
                Subject::Object(i) => i.obj.metadata.name.clone().unwrap_or_default(),
                Subject::Skipped(s, _) => format!("skipped {}", s.key.map(|k| k.to_string()).unwrap_or_default()),
                Subject::Shared { key, .. } => format!("shared {key}"),
            });
            Ok(())
        };
        let mut run = pool.run("list configmaps");
        let mut result = Ok(());
        for item in items {
            run.push(decode::Item { bytes: item.as_bytes(), checked: false, form: decode::Form::Json });
            result = run.apply(false, stop, &mut apply);
            if result.is_err() {
                break;
            }
        }
        result = result.and_then(|()| run.apply(true, stop, &mut apply));
        drop(run);
        drop(pool);
        join(helpers);
        (seen, result)
    }

    /// Checks that the helpers exit (the pool is dropped) and joins them.
    fn join(helpers: Vec<Helper>) {
        for (handle, done) in helpers {
            let exited = done.recv_timeout(Duration::from_secs(20));
            assert!(matches!(exited, Err(crossbeam_channel::RecvTimeoutError::Disconnected)), "a helper did not exit");
            handle.join().unwrap();
        }
    }

    #[test]
    fn items_are_applied_in_list_order_with_the_undecodable_skipped_in_place() {
        let (_tx, stop) = bounded(1);
        let mut items: Vec<String> = (0..500).map(|i| cm(&format!("c{i}"))).collect();
        items[77] = r#"{"metadata":{"name":"bad"},"data":{"k":5}}"#.to_owned();
        // A big item fills a job alone.
        items[301] = format!(r#"{{"metadata":{{"name":"big"}},"data":{{"k":"{}"}}}}"#, "x".repeat(300_000));
        for threads in [1, 3] {
            let (seen, result) = run_items(threads, None, &items, &stop);
            result.unwrap();
            assert_eq!(seen.len(), 500);
            assert_eq!(seen[77], "skipped bad");
            assert_eq!(seen[301], "big");
            let mut expected: Vec<String> = (0..500).map(|i| format!("c{i}")).collect();
            expected[77] = "skipped bad".into();
            expected[301] = "big".into();
            assert_eq!(seen, expected, "threads={threads}");
        }
    }

    #[test]
    fn an_item_that_is_not_json_ends_the_list_after_the_items_before_it() {
        let (_tx, stop) = bounded(1);
        let mut items: Vec<String> = (0..100).map(|i| cm(&format!("c{i}"))).collect();
        items[40] = "5".into();
        let (seen, result) = run_items(2, None, &items, &stop);
        assert_eq!(seen, (0..40).map(|i| format!("c{i}")).collect::<Vec<_>>());
        assert!(matches!(result, Err(Halt::Failed(Error::Decode(_)))), "{result:?}");
    }

    #[test]
    fn a_callback_panic_on_a_helper_resumes_on_the_worker_after_the_items_before_it() {
        let (_tx, stop) = bounded(1);
        let items: Vec<String> = (0..100).map(|i| cm(&format!("c{i}"))).collect();
        let transform: Transform<ConfigMap> = Arc::new(|c: &mut ConfigMap| {
            if c.metadata.name.as_deref() == Some("c60") {
                panic!("boom");
            }
        });
        let (writer, _store) = Writer::<ConfigMap>::new();
        let prepare = Prepare::new("test".into(), Some(transform), None);
        let mut helpers = Vec::new();
        let pool = Pool::start(2, &prepare, writer.indexer(), "kw-test", &mut helpers).unwrap();
        let mut applied = 0;
        let payload = catch_unwind(AssertUnwindSafe(|| {
            let mut run = pool.run("list configmaps");
            for item in &items {
                run.push(decode::Item { bytes: item.as_bytes(), checked: false, form: decode::Form::Json });
                run.apply(false, &stop, |_| {
                    applied += 1;
                    Ok(())
                })
                .unwrap();
            }
            run.apply(true, &stop, |_| {
                applied += 1;
                Ok(())
            })
            .unwrap();
        }))
        .expect_err("the panic resumes on this thread");
        assert_eq!(applied, 60);
        let e = crate::guard::into_error(payload.as_ref());
        assert!(matches!(&e, Error::Panicked { callback, .. } if &**callback == "transform"), "{e}");
    }

    #[test]
    fn a_worker_waiting_for_a_helper_wakes_on_stop_and_the_helpers_exit() {
        let (stop_tx, stop) = bounded::<()>(1);
        let (gate_tx, gate) = bounded::<()>(0);
        // The helper is stuck in the transform of the first item until the gate closes.
        let transform: Transform<ConfigMap> = Arc::new(move |_: &mut ConfigMap| {
            let _ = gate.recv();
        });
        let (writer, _store) = Writer::<ConfigMap>::new();
        let prepare = Prepare::new("test".into(), Some(transform), None);
        let mut helpers = Vec::new();
        let pool = Pool::start(1, &prepare, writer.indexer(), "kw-test", &mut helpers).unwrap();
        let mut run = pool.run("list configmaps");
        for name in ["a", "b"] {
            run.push(decode::Item { bytes: cm(name).as_bytes(), checked: false, form: decode::Form::Json });
        }
        drop(stop_tx);
        let mut applied = 0;
        let result = run.apply(true, &stop, |_| {
            applied += 1;
            Ok(())
        });
        assert!(matches!(result, Err(Halt::Stopped)), "{result:?}");
        assert_eq!(applied, 0);
        drop(run); // abandons the list: the helper skips "b"
        drop(gate_tx);
        drop(pool);
        join(helpers);
    }
}
