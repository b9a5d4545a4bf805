//! Protobuf bodies (`k8s\0`, a `runtime.Unknown` envelope and the object): decoded as a Pod, a
//! list of Pods and as untyped JSON (`fuzzing::protobuf_object` panics when reading straight
//! into the type and reading through JSON disagree). Seeds: fuzz/seeds/protobuf.
#![no_main]

use k8s_openapi::List;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::fuzzing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = fuzzing::protobuf_object::<Pod>(data);
    let _ = fuzzing::protobuf_object::<List<Pod>>(data);
    let _ = fuzzing::protobuf_object::<serde_json::Value>(data);
});
