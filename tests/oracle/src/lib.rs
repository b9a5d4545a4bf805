//! Nothing to use: this package holds tests/protobuf_oracle.rs, the protobuf decoder of
//! kube-watcher checked against k8s-pb's prost encoder (see this package's Cargo.toml for why it
//! is a package of its own).
