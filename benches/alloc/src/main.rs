//! `examples/bench.rs` with another global allocator: mimalloc (feature `mimalloc`) or jemalloc
//! (feature `jemalloc`, tikv-jemallocator); with both, jemalloc; with neither, glibc's malloc,
//! as `cargo run --release --example bench` in kube-watcher itself.
//!
//! ```text
//! cd benches/alloc && cargo build --release --features jemalloc   # target/release/bench
//! ```
//!
//! The bench's code is compiled from `examples/bench.rs` unchanged; only the allocator (and the
//! name the JSON line gives it) comes from here. `benches/compare.sh --alloc` builds every
//! allocator it is asked for from this project, glibc included, so all of them are the same build.

#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The global allocator this build uses, as the JSON line names it.
const ALLOCATOR: &str = if cfg!(feature = "jemalloc") {
    "jemalloc"
} else if cfg!(feature = "mimalloc") {
    "mimalloc"
} else {
    "glibc"
};

// Its `main` runs the bench with glibc's malloc named; `run` is the same with ours.
#[allow(dead_code)]
#[path = "../../../examples/bench.rs"]
mod bench;

fn main() {
    bench::run(ALLOCATOR);
}
