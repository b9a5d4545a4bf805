//! Micro-benchmarks for the per-object costs behind watch throughput and memory.
//!
//! `cargo bench --bench micro` prints the median of 15 runs for each operation on a realistic
//! ~6 KB pod. No framework: std timing keeps dev-dependencies lean. With `--features fuzzing` it
//! also times kube-watcher's strict syntax check, the identity scan of a relist and its protobuf
//! decoder (the hidden `fuzzing` entry points). Arguments after `--` keep only the lines whose
//! name contains one of them (`cargo bench --bench micro --features fuzzing -- decode`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use serde_json::value::RawValue;

#[path = "support/realistic_pod.rs"]
mod realistic_pod;

fn median(mut f: impl FnMut() -> Duration) -> Duration {
    let mut runs: Vec<Duration> = (0..15).map(|_| f()).collect();
    runs.sort();
    runs[runs.len() / 2]
}

fn per_op(name: &str, iters: u32, mut op: impl FnMut()) {
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
        return;
    }
    let d = median(|| {
        let t = Instant::now();
        for _ in 0..iters {
            op();
        }
        t.elapsed() / iters
    });
    println!("{name:<44} {:>9.2} µs", d.as_secs_f64() * 1e6);
}

fn main() {
    let json = realistic_pod::render_pod(7, 12345);
    let line = format!(r#"{{"type":"MODIFIED","object":{json}}}"#);
    let bytes = json.as_bytes();
    println!("pod JSON: {} bytes", bytes.len());
    let pod: Pod = serde_json::from_slice(bytes).unwrap();
    per_op("scan only (serde_json IgnoredAny)", 2000, || {
        black_box(serde_json::from_slice::<serde::de::IgnoredAny>(black_box(bytes)).unwrap());
    });
    #[cfg(feature = "fuzzing")]
    per_op("strict syntax check (before simd-json)", 2000, || {
        black_box(kube_watcher::fuzzing::strict_syntax(black_box(line.as_bytes())));
    });
    // What a relist reads of an item the store already holds (src/codec/decode/peek.rs).
    #[cfg(feature = "fuzzing")]
    per_op("identity of a listed item (relist peek)", 2000, || {
        assert!(kube_watcher::fuzzing::peek(black_box(bytes)));
    });
    // What a sharded watcher reads of each watch event before deciding whether to decode it
    // (`decode::event_in_shard`): the type and the object's uid, hashed.
    #[cfg(feature = "fuzzing")]
    {
        let shard = kube_watcher::Shard::of(0, 2).unwrap();
        per_op("shard test of a watch event (JSON line)", 2000, || {
            black_box(kube_watcher::fuzzing::event_in_shard(false, black_box(line.as_bytes()), &shard));
        });
    }
    per_op("envelope with RawValue object", 2000, || {
        #[derive(serde::Deserialize)]
        struct Env<'a> {
            #[serde(rename = "type")]
            _kind: &'a str,
            #[serde(borrow)]
            object: &'a RawValue,
        }
        black_box(serde_json::from_slice::<Env<'_>>(black_box(line.as_bytes())).unwrap().object);
    });
    per_op("decode typed Pod (serde_json)", 500, || {
        black_box(serde_json::from_slice::<Pod>(black_box(bytes)).unwrap());
    });
    // What the watcher's JSON path runs after the strict syntax check (src/codec/decode/object.rs):
    // simd-json over a copy of the input, its buffers reused.
    #[cfg(feature = "simd")]
    {
        use serde::Deserialize as _;
        let mut copy = Vec::new();
        let mut buffers = simd_json::Buffers::new(bytes.len());
        per_op("decode typed Pod (simd-json)", 500, || {
            copy.clear();
            copy.extend_from_slice(black_box(bytes));
            let mut de = simd_json::Deserializer::from_slice_with_buffers(&mut copy, &mut buffers).unwrap();
            black_box(Pod::deserialize(&mut de).unwrap());
        });
    }
    // The same pod as protobuf (written with the decoder's own table: src/fuzzing.rs).
    #[cfg(feature = "fuzzing")]
    {
        let mut value: serde_json::Value = serde_json::from_slice(bytes).unwrap();
        value["apiVersion"] = "v1".into();
        value["kind"] = "Pod".into();
        let proto = kube_watcher::fuzzing::protobuf_encode(&value).unwrap();
        println!("pod protobuf: {} bytes", proto.len());
        // A watch event frame: `WatchEvent` {1 type, 2 RawExtension {1 the enveloped pod}}.
        let field = |out: &mut Vec<u8>, n: u8, b: &[u8]| {
            out.push(n << 3 | 2);
            let mut len = b.len();
            while len >= 0x80 {
                out.push((len as u8) | 0x80);
                len >>= 7;
            }
            out.push(len as u8);
            out.extend_from_slice(b);
        };
        let (mut raw, mut frame) = (Vec::new(), Vec::new());
        field(&mut raw, 1, &proto);
        field(&mut frame, 1, b"MODIFIED");
        field(&mut frame, 2, &raw);
        let shard = kube_watcher::Shard::of(0, 2).unwrap();
        per_op("shard test of a watch event (protobuf frame)", 2000, || {
            black_box(kube_watcher::fuzzing::event_in_shard(true, black_box(&frame), &shard));
        });
        per_op("decode typed Pod (protobuf)", 500, || {
            black_box(kube_watcher::fuzzing::protobuf_decode::<Pod>(black_box(&proto)).unwrap());
        });
    }
    // A watch event's object the way a watcher decodes it (src/codec/decode/mod.rs `event`), with
    // nothing skipped (the decoder is not wrapped at all) and with managedFields skipped
    // (`without_managed_fields`: stepped over, never built), over JSON and protobuf; each line
    // includes dropping the object, as the event it replaces is dropped in a watch.
    #[cfg(feature = "fuzzing")]
    {
        use kube_watcher::fuzzing::{Skipping, event_object, protobuf_encode, protobuf_event};
        let nothing = Skipping::new::<Pod>(&[]).unwrap();
        let managed = Skipping::new::<Pod>(&["metadata.managedFields"]).unwrap();
        let mut value: serde_json::Value = serde_json::from_slice(bytes).unwrap();
        value["apiVersion"] = "v1".into();
        value["kind"] = "Pod".into();
        let frame = protobuf_event("MODIFIED", &protobuf_encode(&value).unwrap());
        for (name, protobuf, event) in [("JSON", false, line.as_bytes()), ("protobuf", true, &frame[..])] {
            per_op(&format!("event Pod ({name})"), 500, || {
                black_box(event_object::<Pod>(black_box(event), protobuf, &nothing).unwrap());
            });
            per_op(&format!("event Pod ({name}), managedFields skipped"), 500, || {
                black_box(event_object::<Pod>(black_box(event), protobuf, &managed).unwrap());
            });
        }
    }
    // What any decoder of this pod pays at least: the typed values built by k8s-openapi's
    // visitors from an already parsed tree (strings copied, maps and lists built), no parsing.
    let tree: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    per_op("typed Pod from a parsed serde_json::Value", 500, || {
        black_box(<Pod as serde::Deserialize>::deserialize(black_box(&tree)).unwrap());
    });
    per_op("decode serde_json::Value", 500, || {
        black_box(serde_json::from_slice::<serde_json::Value>(black_box(bytes)).unwrap());
    });
    per_op("clone typed Pod", 500, || {
        black_box(black_box(&pod).clone());
    });
    per_op("drop typed Pod", 500, || {
        let p = pod.clone();
        let t = Instant::now();
        drop(black_box(p));
        black_box(t.elapsed());
    });
    per_op("serialize typed Pod to compact JSON", 500, || {
        black_box(serde_json::to_vec(black_box(&pod)).unwrap());
    });
    // compressed_store(): LZ4 against a dictionary holding another pod (what the store's
    // dictionary holds for these pods after the first one).
    let dictionary = realistic_pod::render_pod(1, 99).into_bytes();
    let packed = lz4_flex::block::compress_with_dict(bytes, &dictionary);
    println!("compressed against another pod: {} bytes", packed.len());
    per_op("compress (lz4_flex, another pod as dictionary, hashed at each call)", 2000, || {
        black_box(lz4_flex::block::compress_with_dict(black_box(bytes), &dictionary));
    });
    // The store's own compressor: the dictionary hashed once (when it grows), then each object.
    #[cfg(feature = "fuzzing")]
    {
        let compressor = kube_watcher::fuzzing::Compressor::new(&dictionary);
        println!(
            "compressed by the store's compressor against another pod: {} bytes",
            compressor.compress(bytes).len()
        );
        per_op("compress (the store's, another pod as dictionary, hashed once)", 2000, || {
            black_box(compressor.compress(black_box(bytes)));
        });
    }
    per_op("decompress (LZ4, another pod as dictionary)", 2000, || {
        black_box(lz4_flex::block::decompress_with_dict(black_box(&packed), bytes.len(), &dictionary).unwrap());
    });
}
