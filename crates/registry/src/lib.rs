//! gpu-guard's registry side: a blocking OCI distribution client
//! (manifests, indexes and platforms, streamed and verified blobs, the
//! registry's authentication, artifacts attached to images) and the docker
//! daemon's image export. It knows nothing of GPUs: the image reader and
//! the admission webhook of gpu-guard sit on top.

mod auth;
pub mod blob;
pub mod challenge;
pub mod client;
pub mod credentials;
pub mod daemon;
pub mod document;
pub mod error;
pub mod manifest;
pub mod origin;
pub mod reference;
pub mod referrers;
mod scheme;

pub use client::{Cancel, Client, Options, Stats};
pub use credentials::Credential;
pub use error::RegistryError;
pub use manifest::{Manifest, Platform, Resolved};
pub use reference::Reference;
pub use referrers::{Artifact, Found, ReferrersSource};

/// A client for the registry a reference names, with credentials looked up
/// in `cred_files` (see [`credentials`]) unless `options` has some.
pub fn client_for(
    r: &Reference,
    mut options: Options,
    cred_files: &[std::path::PathBuf],
) -> Result<Client, RegistryError> {
    if options.credential.is_none() {
        if let Some(f) = credentials::lookup(cred_files, &r.registry, &r.repository)? {
            options.credential = Some(f.credential);
            options.credential_source = Some(f.file.display().to_string());
        }
    }
    Client::new(r.api_host(), &r.registry, options)
}
