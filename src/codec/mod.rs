//! The codec: bytes in, values out.
//!
//! Owns decoding of list bodies, watch lines and frames and `Status` errors, and the shard peek
//! that reads an object's identity off its bytes ([`decode`]), the strict JSON check
//! ([`syntax`]), the protobuf reader, encoder and schema table ([`protobuf`]), and the fields
//! never decoded ([`skip`]: the path rule and its check against the watched type's shape, and
//! the JSON copy without those fields that the JSON decoders read; the protobuf decoder steps
//! over them itself, and `protobuf/prune.rs` copies an object's protobuf without them).
//!
//! No sockets, clocks, threads or locks: what reads a stream reads any `std::io::Read` it is
//! handed. It imports nothing of the wire, the engine, the store, the machine or auth, only the
//! crate's vocabulary; the wire imports it (`tests/integration/architecture.rs` keeps it so).

pub(crate) mod decode;
pub(crate) mod protobuf;
pub(crate) mod skip;
pub(crate) mod syntax;
