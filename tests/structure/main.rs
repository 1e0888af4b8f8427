//! Test binary `structure`: checks that read the repository's sources
//! rather than run gpu-guard: the module graph (layering, no cycles, a pure
//! core), `unsafe` only at the audited place, and this test layout (at most
//! six test binaries, each named in Cargo.toml). It does not link the
//! gpu-guard library, so it builds in seconds.
//!
//! A new test file here is one more `mod` line below.
#[path = "../support/mod.rs"]
mod support;

mod module_graph;
mod no_unsafe;
mod test_layout;
