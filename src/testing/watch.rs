//! Watch streams: validation, the starting point (legacy, from a revision, streaming list),
//! selector transitions, bookmarks, deadlines, slow-watcher closes and watch faults.

use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::api::{
    self, Filter, Repr, Route, Rv, invalid_list_options, negotiate, parse_rv, render, send, status, status_response,
    wait_for_revision,
};
use super::http::{Conn, Request, Response, write_chunk, write_head, write_last_chunk};
use super::state::{Flow, ServerCore, peer_gone};
use super::store::{Change, with_rv};
use super::{Chunking, Fault, ResourceType, StreamingLists, Watch410};

/// How often an idle watch checks whether its client went away.
const PEER_POLL: Duration = Duration::from_millis(50);
/// Initial events are written in batches of this many.
const INITIAL_BATCH: usize = 100;

/// Counts a connected watch for as long as it lives.
struct OpenWatch<'a>(&'a ServerCore);

impl<'a> OpenWatch<'a> {
    fn new(shared: &'a ServerCore) -> Self {
        shared.open_watches.fetch_add(1, Ordering::SeqCst);
        OpenWatch(shared)
    }
}

impl Drop for OpenWatch<'_> {
    fn drop(&mut self) {
        self.0.open_watches.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Writes events with the configured chunking and enforces `CloseAfter`/`ResetAfter`.
struct Emitter<'a> {
    conn: &'a mut Conn,
    chunking: Chunking,
    sent: usize,
    /// `(events, reset?)` from a `CloseAfter`/`ResetAfter` fault.
    limit: Option<(usize, bool)>,
    /// Object events still to lose (`DropEvents` fault).
    drop: usize,
    /// The line to cut and pause in (`PauseInLine` fault), counted like `sent`.
    pause_at: Option<usize>,
    shared: &'a ServerCore,
    /// Events are protobuf frames: no blank keep-alive lines between them.
    protobuf: bool,
}

impl Emitter<'_> {
    /// If the fault limit is reached, ends the stream as the fault says.
    fn limit_reached(&mut self) -> io::Result<Option<Flow>> {
        match self.limit {
            Some((n, reset)) if self.sent >= n => {
                if reset && self.protobuf {
                    // A chunk that promises more than it delivers, inside a frame that does too.
                    self.conn.write_all(b"400\r\n\0\0\x04\0\x0a\x08MODIFIED\x12")?;
                    self.conn.flush()?;
                    Ok(Some(Flow::Reset))
                } else if reset {
                    // A chunk that promises more than it delivers, then a reset.
                    self.conn.write_all(b"400\r\n{\"type\":\"MODIFIED\",\"object\":{\"kind\":")?;
                    self.conn.flush()?;
                    Ok(Some(Flow::Reset))
                } else {
                    write_last_chunk(self.conn)?;
                    Ok(Some(Flow::KeepAlive))
                }
            }
            _ => Ok(None),
        }
    }

    /// Sends a batch of encoded events (each ending in `\n`).
    fn send(&mut self, events: Vec<Vec<u8>>) -> io::Result<Option<Flow>> {
        let mut coalesced = Vec::new();
        for ev in events {
            if self.limit.is_some_and(|(n, _)| self.sent >= n) {
                break;
            }
            if self.drop > 0 && !is_bookmark(&ev) {
                self.drop -= 1;
                continue;
            }
            if self.pause_at == Some(self.sent) {
                self.pause_at = None;
                write_chunk(self.conn, &std::mem::take(&mut coalesced))?;
                let half = ev.len() / 2;
                write_chunk(self.conn, &ev[..half])?;
                self.conn.flush()?;
                if let Some(flow) = self.pause() {
                    return Ok(Some(flow));
                }
                write_chunk(self.conn, &ev[half..])?;
                self.sent += 1;
                continue;
            }
            match self.chunking {
                Chunking::PerEvent => write_chunk(self.conn, &ev)?,
                Chunking::Coalesce => coalesced.extend_from_slice(&ev),
                Chunking::Split => {
                    let a = (ev.len() / 3).max(1);
                    let b = (2 * ev.len() / 3).max(a);
                    write_chunk(self.conn, &ev[..a])?;
                    write_chunk(self.conn, &ev[a..b])?;
                    write_chunk(self.conn, &ev[b..])?;
                }
                Chunking::BlankLines if self.protobuf => write_chunk(self.conn, &ev)?,
                Chunking::BlankLines => {
                    let blank: &[u8] = if self.sent.is_multiple_of(2) { b"\n" } else { b"\r\n" };
                    write_chunk(self.conn, &[ev.as_slice(), blank].concat())?;
                }
            }
            self.sent += 1;
        }
        write_chunk(self.conn, &coalesced)?;
        self.conn.flush()?;
        self.limit_reached()
    }
}

impl Emitter<'_> {
    /// Waits for [`FakeApiServer::resume_lines`](super::FakeApiServer::resume_lines), counted
    /// in `paused_lines` meanwhile; `Some` when the client left or the server shuts down first.
    fn pause(&mut self) -> Option<Flow> {
        let shared = self.shared;
        let mut state = shared.lock();
        let resumes = state.line_resumes;
        state.paused_lines += 1;
        shared.notify();
        let flow = loop {
            if state.line_resumes != resumes {
                break None;
            }
            if shared.is_shutdown() {
                break Some(Flow::Close);
            }
            state = shared.wait(state, PEER_POLL);
            if peer_gone(self.conn) {
                break Some(Flow::Close);
            }
        };
        state.paused_lines -= 1;
        flow
    }
}

/// Whether an encoded event line (or protobuf frame: its type comes first) is a bookmark.
fn is_bookmark(line: &[u8]) -> bool {
    if line.get(4..).is_some_and(|event| event.starts_with(b"\x0a\x08BOOKMARK")) {
        return true;
    }
    let needle = br#""type":"BOOKMARK""#;
    line.windows(needle.len()).any(|w| w == needle)
}

/// One event: a JSON line, or for a protobuf watch (`Accepted::protobuf`) a frame.
fn encode(protobuf: bool, kind: &str, object: &Value) -> Vec<u8> {
    if protobuf {
        // A protobuf watch is only served for kinds with a protobuf form (`accept`), and the
        // Status of an ERROR event has one too: `frame` answers for all of them.
        return api::protobuf::frame(kind, object).unwrap_or_default();
    }
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    line.push(b'\n');
    line
}

fn bookmark(pb: bool, rt: &ResourceType, repr: Repr, rv: u64, initial_end: bool) -> Vec<u8> {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let object = match repr {
        Repr::Metadata => {
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata})
        }
        Repr::Full => {
            json!({"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": metadata})
        }
        Repr::Table { beta, .. } => {
            json!({"kind": "Table", "apiVersion": Repr::table_version(beta), "metadata": metadata})
        }
    };
    encode(pb, "BOOKMARK", &object)
}

/// The event a change produces for a watcher with this filter (§6.6 transition table).
fn event_for(pb: bool, rt: &ResourceType, change: &Change, filter: &Filter, repr: Repr) -> Option<Vec<u8>> {
    let old_m = change.old.as_ref().is_some_and(|o| filter.matches(o));
    let new_m = change.new.as_ref().is_some_and(|n| filter.matches(n));
    match (&change.old, &change.new) {
        (_, Some(new)) if new_m && !old_m => Some(encode(pb, "ADDED", &render(rt, new, repr))),
        (_, Some(new)) if new_m => Some(encode(pb, "MODIFIED", &render(rt, new, repr))),
        (Some(old), _) if old_m => Some(encode(pb, "DELETED", &render(rt, &with_rv(old, change.rv), repr))),
        _ => None,
    }
}

fn error_event(pb: bool, status_obj: &Value) -> Vec<u8> {
    encode(pb, "ERROR", status_obj)
}

/// Where a watch starts.
enum Start {
    /// Synthetic ADDED events for the current state first.
    Initial {
        /// Send the `initial-events-end` bookmark after them.
        marker: bool,
    },
    /// Every change after this revision.
    From(u64),
}

/// A watch request the server accepted: what to send, and from where.
struct Accepted {
    idx: usize,
    rt: ResourceType,
    filter: Filter,
    repr: Repr,
    timeout: Duration,
    bookmarks: bool,
    /// A streaming list (`sendInitialEvents=true`).
    streaming: bool,
    rv: Rv,
    start: Start,
    /// Events as protobuf frames (the client asked for protobuf first, for metadata or for full
    /// objects of a kind with a protobuf form), else JSON lines.
    protobuf: bool,
}

/// Serves one watch request until its deadline, a fault, the client leaving, shutdown, or an
/// end of watches after `epoch` (the `watch_epoch` when the request arrived: see `Admitted` in
/// server.rs).
pub(crate) fn serve(
    shared: &Arc<ServerCore>,
    conn: &mut Conn,
    req: &Request,
    route: &Route,
    fault: Option<Fault>,
    epoch: u64,
) -> io::Result<Flow> {
    let started = Instant::now();
    let mut w = match accept(shared, req, route) {
        Ok(w) => w,
        Err(resp) => {
            send(conn, req, resp)?;
            return Ok(Flow::KeepAlive);
        }
    };
    // These faults write JSON text into the stream: a watch that carries one answers JSON.
    if matches!(fault, Some(Fault::Line(_) | Fault::MalformedLine | Fault::OversizedLine { .. } | Fault::EndlessLine)) {
        w.protobuf = false;
    }
    let content_type =
        if w.protobuf { format!("{};stream=watch", api::protobuf::MEDIA_TYPE) } else { "application/json".to_string() };
    let headers = vec![
        ("Content-Type".to_string(), content_type),
        ("Cache-Control".to_string(), "no-cache, private".to_string()),
        ("Transfer-Encoding".to_string(), "chunked".to_string()),
    ];
    write_head(conn, 200, &headers)?;
    conn.flush()?;
    let _open = OpenWatch::new(shared);
    let limit = match fault {
        Some(Fault::CloseAfter { events }) => Some((events, false)),
        Some(Fault::ResetAfter { events }) => Some((events, true)),
        _ => None,
    };
    let lose = match fault {
        Some(Fault::DropEvents { events }) => events,
        _ => 0,
    };
    let pause_at = match fault {
        Some(Fault::PauseInLine { after }) => Some(after),
        _ => None,
    };
    let mut out = Emitter {
        conn,
        chunking: shared.settings.chunking,
        sent: 0,
        limit,
        drop: lose,
        pause_at,
        shared,
        protobuf: w.protobuf,
    };
    if let Some(flow) = opening_fault(&mut out, fault)? {
        return Ok(flow);
    }
    if let Some(flow) = out.limit_reached()? {
        return Ok(flow);
    }
    let (pos, sent_rv) = match initial(shared, &mut out, &w)? {
        Ok(at) => at,
        Err(flow) => return Ok(flow),
    };
    live(shared, &mut out, &w, (started, epoch), (pos, sent_rv))
}

/// Checks the request as the API server does; the answer to send when it refuses.
fn accept(shared: &Arc<ServerCore>, req: &Request, route: &Route) -> Result<Accepted, Response> {
    let (idx, ns, name) = match route {
        Route::Collection { idx, ns, .. } => (*idx, ns.clone(), None),
        Route::Object { idx, ns, name, sub: None, .. } => (*idx, ns.clone(), Some(name.clone())),
        _ => {
            return Err(status_response(
                404,
                "NotFound",
                "the server could not find the requested resource",
                Some(json!({})),
            ));
        }
    };
    let rt = shared.lock().store.types[idx].rt.clone();
    let rv = parse_rv(req)?;
    let mode = shared.settings.streaming_lists;
    let (sie, rvm) = if mode == StreamingLists::Ignored {
        (None, None)
    } else {
        (req.flag("sendInitialEvents"), req.param("resourceVersionMatch").filter(|s| !s.is_empty()))
    };
    let mut causes: Vec<(&str, &str, String)> = Vec::new();
    if sie.is_some() && mode == StreamingLists::Rejected {
        causes.push((
            "sendInitialEvents",
            "FieldValueForbidden",
            "Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled".into(),
        ));
    } else if sie.is_some() && rvm != Some("NotOlderThan") {
        causes.push((
            "resourceVersionMatch",
            "FieldValueForbidden",
            "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan".into(),
        ));
    }
    if rvm.is_some() && sie.is_none() {
        causes.push((
            "resourceVersionMatch",
            "FieldValueForbidden",
            "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided".into(),
        ));
    }
    if let Some(other) = rvm.filter(|m| *m != "NotOlderThan" && *m != "Exact") {
        causes.push((
            "resourceVersionMatch",
            "FieldValueNotSupported",
            format!("Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\""),
        ));
    }
    if !causes.is_empty() {
        return Err(invalid_list_options(&causes));
    }
    let filter = Filter::parse(req, &rt, ns.as_deref(), name.as_deref(), shared.settings.sharded_list_and_watch)?;
    let repr = negotiate(req, false)?;
    let timeout = {
        let mut state = shared.lock();
        api::watch_duration(shared, req, &mut state)?
    };
    let bookmarks = req.flag("allowWatchBookmarks") == Some(true);
    let streaming = sie == Some(true);
    let start = match (sie, rv) {
        (Some(true), _) => Start::Initial { marker: bookmarks },
        (Some(false), Rv::At(n)) | (None, Rv::At(n)) => Start::From(n),
        (Some(false), _) => Start::From(shared.lock().store.revision),
        (None, _) => Start::Initial { marker: bookmarks && shared.settings.legacy_watch_marker },
    };
    // A too-old revision as an HTTP status, when configured so.
    if let Start::From(n) = start {
        let horizon = shared.lock().store.types[idx].horizon;
        if n < horizon && shared.settings.watch_410 == Watch410::Http {
            let msg = format!("too old resource version: {n} ({horizon})");
            return Err(status_response(410, "Expired", &msg, None));
        }
    }
    // Metadata has its protobuf form (`meta.k8s.io/v1` PartialObjectMetadata) for every
    // resource, custom ones included; full objects only for the kinds of the table.
    let protobuf = req.protobuf
        && match repr {
            Repr::Full => api::protobuf::encode(&json!({"apiVersion": rt.api_version(), "kind": rt.kind})).is_some(),
            Repr::Metadata => true,
            Repr::Table { .. } => false,
        };
    Ok(Accepted { idx, rt, filter, repr, timeout, bookmarks, streaming, rv, start, protobuf })
}

/// Faults that replace or open the stream; `Some` when the stream is over.
fn opening_fault(out: &mut Emitter<'_>, fault: Option<Fault>) -> io::Result<Option<Flow>> {
    match fault {
        Some(Fault::InStreamError { code, reason, message }) => {
            out.send(vec![error_event(out.protobuf, &status(code, &reason, &message, None))])?;
            write_last_chunk(out.conn)?;
            return Ok(Some(Flow::KeepAlive));
        }
        Some(Fault::MalformedLine) => {
            write_chunk(out.conn, b"<html>oops</html>\n")?;
            out.conn.flush()?;
        }
        Some(Fault::Line(line)) => {
            write_chunk(out.conn, format!("{line}\n").as_bytes())?;
            out.conn.flush()?;
        }
        Some(Fault::OversizedLine { bytes }) => {
            let head = br#"{"type":"ADDED","object":{"data":""#;
            let mut remaining = bytes;
            let first = &head[..head.len().min(remaining)];
            write_chunk(out.conn, first)?;
            remaining -= first.len();
            let filler = vec![b'x'; 64 * 1024];
            while remaining > 0 {
                let n = remaining.min(filler.len());
                write_chunk(out.conn, &filler[..n])?;
                remaining -= n;
            }
            write_last_chunk(out.conn)?;
            return Ok(Some(Flow::KeepAlive));
        }
        _ => {}
    }
    Ok(None)
}

/// Sends the initial state (or checks the starting revision); the position and the last RV
/// sent, or how the stream ended.
fn initial(shared: &Arc<ServerCore>, out: &mut Emitter<'_>, w: &Accepted) -> io::Result<Result<(u64, u64), Flow>> {
    let (idx, rt, filter, repr, streaming, rv) = (w.idx, &w.rt, &w.filter, w.repr, w.streaming, w.rv);
    if streaming && shared.settings.streaming_lists == StreamingLists::InStreamError {
        let st = status(
            500,
            "InternalError",
            "Internal error occurred: the watch-list feature requires storage support for progress notifications",
            None,
        );
        out.send(vec![error_event(out.protobuf, &st)])?;
        write_last_chunk(out.conn)?;
        return Ok(Err(Flow::KeepAlive));
    }
    Ok(Ok(match w.start {
        Start::From(n) => {
            let horizon = shared.lock().store.types[idx].horizon;
            if n < horizon {
                let msg = format!("too old resource version: {n} ({horizon})");
                if let Some(flow) = out.send(vec![error_event(out.protobuf, &status(410, "Expired", &msg, None))])? {
                    return Ok(Err(flow));
                }
                write_last_chunk(out.conn)?;
                return Ok(Err(Flow::KeepAlive));
            }
            (n, n)
        }
        Start::Initial { marker } => {
            if let (true, Rv::At(n)) = (streaming, rv)
                && !wait_for_revision(shared, n)
            {
                let current = shared.lock().store.revision;
                if let Some(flow) =
                    out.send(vec![error_event(out.protobuf, &api::too_large_status(&n.to_string(), current))])?
                {
                    return Ok(Err(flow));
                }
                write_last_chunk(out.conn)?;
                return Ok(Err(Flow::KeepAlive));
            }
            let (snapshot, snap_rv) = {
                let state = shared.lock();
                let snap: Vec<Arc<Value>> =
                    state.store.types[idx].objects.values().filter(|o| filter.matches(o)).cloned().collect();
                (snap, state.store.revision)
            };
            for batch in snapshot.chunks(INITIAL_BATCH) {
                let events = batch.iter().map(|o| encode(out.protobuf, "ADDED", &render(rt, o, repr))).collect();
                if let Some(flow) = out.send(events)? {
                    return Ok(Err(flow));
                }
            }
            if marker && let Some(flow) = out.send(vec![bookmark(out.protobuf, rt, repr, snap_rv, true)])? {
                return Ok(Err(flow));
            }
            (snap_rv, snap_rv)
        }
    }))
}

/// Live events until the deadline, an end of watches, the client leaving or shutdown.
fn live(
    shared: &Arc<ServerCore>,
    out: &mut Emitter<'_>,
    w: &Accepted,
    (started, epoch): (Instant, u64),
    (mut pos, mut sent_rv): (u64, u64),
) -> io::Result<Flow> {
    let (idx, rt, filter, repr, timeout, bookmarks) = (w.idx, &w.rt, &w.filter, w.repr, w.timeout, w.bookmarks);
    let deadline = started + timeout;
    let interval = shared.settings.bookmark_interval.max(Duration::from_millis(1));
    let pre_deadline = deadline - (timeout / 4).min(Duration::from_secs(2));
    let mut pre_deadline_done = false;
    let mut next_bookmark = started + interval;
    let buffer = shared.settings.watcher_buffer;
    // The first catch-up from a resource version is served from history, like the real watch
    // cache's initial events; only a watcher that falls behind afterwards is closed as slow.
    let mut catching_up = matches!(w.start, Start::From(_));
    loop {
        let now = Instant::now();
        if now >= deadline {
            write_last_chunk(out.conn)?;
            return Ok(Flow::KeepAlive);
        }
        let state = shared.lock();
        if shared.is_shutdown() {
            return Ok(Flow::Close);
        }
        if state.watch_epoch != epoch {
            drop(state);
            write_last_chunk(out.conn)?;
            return Ok(Flow::KeepAlive);
        }
        let changes = match state.store.changes_after(idx, pos) {
            Ok(c) => c,
            Err(_) => {
                // History moved past this watcher: the real cache closes such watchers.
                drop(state);
                write_last_chunk(out.conn)?;
                return Ok(Flow::KeepAlive);
            }
        };
        let slow = changes.len() > buffer && !catching_up;
        catching_up = false;
        if slow {
            drop(state);
            log::debug!("fake api server: closing slow watcher of {} ({} events behind)", rt.plural, changes.len());
            write_last_chunk(out.conn)?;
            return Ok(Flow::KeepAlive);
        }
        let revision = state.store.revision;
        if !changes.is_empty() {
            drop(state);
            let events: Vec<Vec<u8>> =
                changes.iter().filter_map(|c| event_for(out.protobuf, rt, c, filter, repr)).collect();
            pos = pos.max(revision);
            if let Some(last) = changes.last()
                && !events.is_empty()
            {
                sent_rv = sent_rv.max(last.rv);
            }
            if let Some(flow) = out.send(events)? {
                return Ok(flow);
            }
            continue;
        }
        pos = pos.max(revision);
        let pre_due = !pre_deadline_done && now >= pre_deadline;
        if bookmarks && (now >= next_bookmark || pre_due) {
            if now >= next_bookmark {
                next_bookmark = now + interval;
            }
            if pre_due {
                pre_deadline_done = true;
            }
            if revision > sent_rv {
                drop(state);
                sent_rv = revision;
                if let Some(flow) = out.send(vec![bookmark(out.protobuf, rt, repr, revision, false)])? {
                    return Ok(flow);
                }
            }
            continue;
        }
        let mut wake = deadline.min(now + PEER_POLL);
        if bookmarks {
            wake = wake.min(next_bookmark);
            if !pre_deadline_done {
                wake = wake.min(pre_deadline);
            }
        }
        drop(shared.wait(state, wake.saturating_duration_since(now)));
        if peer_gone(out.conn) {
            return Ok(Flow::Close);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookmarks_are_minimal_objects_of_the_watched_kind() {
        let rt = ResourceType::new("example.com", "v1", "widgets", "Widget", true);
        let line = bookmark(false, &rt, Repr::Full, 42, true);
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["object"]["kind"], "Widget");
        assert_eq!(v["object"]["metadata"]["resourceVersion"], "42");
        assert_eq!(v["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
        assert!(line.ends_with(b"\n"));
    }
}
