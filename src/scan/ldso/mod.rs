//! What an image's libraries need at start, resolved as glibc's ld.so
//! will resolve them in the GPU container (issue 18).
//!
//! - [`snapshot`]: the container's file tree in memory, paths resolved
//!   inside it; [`walk`] reads it from a rootfs;
//! - [`content`]: ELF facts and small files, read through the safe resolver;
//! - [`platform`]: default directories, `$LIB`, `$PLATFORM`, glibc-hwcaps;
//! - [`conf`], [`ldconfig`]: the loader cache as NVIDIA's ldconfig rerun
//!   rebuilds it;
//! - [`loader`]: ld.so's search and breadth-first loading.

pub mod conf;
pub mod content;
pub mod ldconfig;
pub mod loader;
pub mod platform;
pub mod snapshot;
