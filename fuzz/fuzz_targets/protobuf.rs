//! Protobuf on the wire. The input is read four ways: as a body (`k8s\0`, a `runtime.Unknown`
//! envelope and the object) decoded as a Pod, a list of Pods and as untyped JSON
//! (`fuzzing::protobuf_object` panics when reading straight into the type and reading through
//! JSON disagree); as a watch stream, split into length-delimited frames under a 64 KiB bound
//! (`fuzzing::protobuf_frames` panics when a frame breaks it), each decoded as a Pod watch event;
//! as the message of one watch event; and as a streamed `PodList` body (`fuzzing::protobuf_list`
//! panics when an item breaks its bound or the relist's identity peek disagrees with the decode).
//! Watch events and list items are also decoded with fields skipped, and the bytes a compact
//! store keeps of them without those fields (`codec/skip/proto.rs`) must read back as that
//! decode. Seeds: fuzz/seeds/protobuf.
#![no_main]

use k8s_openapi::List;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::fuzzing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = fuzzing::protobuf_object::<Pod>(data);
    let _ = fuzzing::protobuf_object::<List<Pod>>(data);
    let _ = fuzzing::protobuf_object::<serde_json::Value>(data);
    for frame in fuzzing::protobuf_frames(data, 64 * 1024) {
        let _ = fuzzing::protobuf_watch_event::<Pod>(&frame);
    }
    let _ = fuzzing::protobuf_watch_event::<Pod>(data);
    let _ = fuzzing::protobuf_list::<Pod, _>(data, 64 * 1024, ("v1", "Pod"));
});
