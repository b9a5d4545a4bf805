//! kubeconfig YAML: parsing and context resolution (nothing is sent, no plugin runs).
#![no_main]

use kube_watcher::fuzzing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        // Files named by the input are read: keep the fuzzer away from devices and FIFOs.
        if text.contains("/dev/") || text.contains("/proc/") || text.contains("/sys/") {
            return;
        }
        let _ = fuzzing::kubeconfig(text);
    }
});
