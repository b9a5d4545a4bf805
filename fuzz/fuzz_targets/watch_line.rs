//! Watch lines: the line splitter over arbitrary bytes (read at once, and again with a read
//! timeout before every other read), then every line as a Pod event and as an untyped event,
//! decoded every way the watcher can (`fuzzing::watch_line` panics when two ways disagree on the
//! verdict or the value).
#![no_main]

use std::io::{self, Read};

use k8s_openapi::api::core::v1::Pod;
use kube_watcher::fuzzing;
use libfuzzer_sys::fuzz_target;

/// Fails every other read with a timeout, as a socket with a read timeout does when the
/// server pauses; hands out at most 5 bytes per read otherwise.
struct Pausing<'a> {
    data: &'a [u8],
    pause: bool,
}

impl Read for Pausing<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.pause = !self.pause;
        if self.pause && !self.data.is_empty() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let n = buf.len().min(self.data.len()).min(5);
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

fuzz_target!(|data: &[u8]| {
    // Small buffers and a small limit exercise refills and the too-long path.
    let whole = fuzzing::lines(io::BufReader::with_capacity(7, data), 256);
    // A line interrupted by a read timeout comes out whole.
    let paused = fuzzing::lines(io::BufReader::with_capacity(7, Pausing { data, pause: false }), 256);
    assert_eq!(whole, paused);
    for line in data.split(|b| *b == b'\n') {
        // The syntax check in front of simd-json never lets through what serde_json refuses.
        // The walk that copies a line without skipped fields agrees with it (it panics if not).
        fuzzing::pruned_json(line);
        if fuzzing::strict_syntax(line) {
            assert!(serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok());
        }
        let _ = fuzzing::watch_line::<Pod>(line);
        let _ = fuzzing::watch_line::<serde_json::Value>(line);
    }
});
