//! The OCI side: the container view read from a runtime spec, the edits
//! patched back into config.json, the hook state and the runtime's argv.

pub mod spec;
pub mod spec_file;
