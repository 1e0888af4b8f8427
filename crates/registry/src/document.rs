//! Registry documents (image manifests, image indexes, referrers indexes)
//! decoded with serde_json directly: oci-spec's `from_reader` wraps every
//! decode error as `serde failed` (oci-spec `src/error.rs`, `SerDe`), which
//! names neither the document nor what is wrong in it.

use crate::client::Client;
use crate::error::RegistryError;
use gpu_guard::core::sanitize::esc;
use serde::de::DeserializeOwned;

/// `bytes` as a `kind` (`OCI image index`, ...), or one line naming the
/// document (`what`), its kind and serde_json's cause with its position,
/// escaped: the text quotes the registry's bytes.
pub(crate) fn decode<T: DeserializeOwned>(
    c: &Client,
    what: &str,
    kind: &str,
    bytes: &[u8],
) -> Result<T, RegistryError> {
    serde_json::from_slice(bytes).map_err(|e| RegistryError::Protocol {
        registry: c.name().to_string(),
        what: what.to_string(),
        msg: cause(kind, &e),
    })
}

/// What is wrong, from serde_json's category: JSON that does not parse, or
/// JSON that is not a `kind` (a field missing or of the wrong type).
pub fn cause(kind: &str, e: &serde_json::Error) -> String {
    let text = esc(&e.to_string());
    match e.classify() {
        serde_json::error::Category::Data => format!("not a valid {kind}: {text}"),
        _ => format!("not valid JSON ({kind} expected): {text}"),
    }
}
