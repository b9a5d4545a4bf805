//! Watch lines: the line splitter over arbitrary bytes, then every line as a Pod event and as
//! an untyped event.
#![no_main]

use k8s_openapi::api::core::v1::Pod;
use kube_watcher::fuzzing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Small buffers and a small limit exercise refills and the too-long path.
    let reader = std::io::BufReader::with_capacity(7, data);
    fuzzing::lines(reader, 256);
    for line in data.split(|b| *b == b'\n') {
        // The syntax check in front of simd-json never lets through what serde_json refuses.
        if fuzzing::strict_syntax(line) {
            assert!(serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok());
        }
        // Both decoding paths (straight into the type, and through the raw bytes) must agree.
        let (direct, raw) = fuzzing::watch_event_both::<Pod>(line);
        assert_eq!(direct.is_ok(), raw.is_ok(), "{direct:?} vs {raw:?}");
        let _ = fuzzing::watch_event_both::<serde_json::Value>(line);
    }
});
