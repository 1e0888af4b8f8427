//! The checks that read the repository's sources rather than run
//! gpu-guard: the module graph and the size rules (`module_graph`),
//! `unsafe` only at the audited place, the release binaries' glibc
//! versions, and the test layout. They are modules of the `decide` test
//! binary (`cargo test --test decide structure::`); a new source-reading
//! check is one more `mod` line here.

mod design_diagram;
mod module_graph;
mod no_unsafe;
mod portable_binary;
mod test_layout;
