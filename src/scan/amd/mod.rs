//! Reads the AMD GPU code compiled into files: HIP offload bundles (plain
//! `__CLANG_OFFLOAD_BUNDLE__` and compressed `CCOB`) in `.hip_fatbin`
//! sections or found through `.hipFatBinSegment` wrappers, and the AMDGPU
//! code objects inside; the per-chip Tensile files of rocBLAS and
//! hipBLASLt; the ROCm release an image ships.
//!
//! - [`bundle`] and [`ccob`] parse the two bundle formats, [`code_object`]
//!   the code object's ELF header;
//! - [`walk`] lists a file's code objects with positioned reads, [`stream`]
//!   while a layer streams by, with the same result;
//! - [`tensile`] and [`rootfs`] look at file names and small files only.
//!
//! Bounded like the CUDA fatbin reader: every entry takes from the same
//! entry budget, every read is metered by the caller, tables and IDs have
//! fixed maxima, and a compressed bundle is decompressed only as far as its
//! entry table (at most [`ccob::PREFIX_MAX`] bytes).

pub mod bundle;
pub mod ccob;
pub mod code_object;
pub mod rootfs;
pub mod stream;
pub mod tensile;
pub mod walk;

pub use walk::{codes_of, scan_image};

#[cfg(test)]
mod tests;
