//! The OCI side: the container view read from a runtime spec, the edits
//! patched back into config.json, the hook state and the runtime's argv.
//!
//! This layer uses only `core` and `sys` (and itself), never `commands`.

pub mod cpuset_patch;
pub(crate) mod go_merge;
pub mod gojson;
pub mod marker;
pub mod mount_patch;
pub mod runtime_args;
pub mod spec;
mod spec_decode;
mod spec_devices;
pub mod spec_file;
pub mod state;
