//! List bodies: the streaming scanner, fed in small reads, with items decoded as Pods and as
//! untyped JSON, each item every way the watcher can (`fuzzing::list` panics when two ways
//! disagree on the verdict or the value).
#![no_main]

use std::io::Read;

use k8s_openapi::api::core::v1::Pod;
use kube_watcher::fuzzing;
use libfuzzer_sys::fuzz_target;

/// Hands out at most `step` bytes per read, so values straddle buffer refills.
struct Trickle<'a> {
    data: &'a [u8],
    step: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.step.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, body)) = data.split_first() else { return };
    let step = usize::from(first % 16) + 1;
    let _ = fuzzing::list::<Pod, _>(Trickle { data: body, step }, 4096);
    let _ = fuzzing::list::<serde_json::Value, _>(body, 1 << 20);
});
