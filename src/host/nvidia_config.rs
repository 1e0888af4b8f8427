//! NVIDIA's container toolkit config (`/etc/nvidia-container-runtime/config.toml`,
//! `detect.nvidia_config`): the settings that decide which device requests
//! NVIDIA's runtime and hook act on, so gpu-guard judges the requests NVIDIA
//! will honour and no others ([`NvidiaDeviceSettings`]).
//!
//! Keys and defaults: nvidia-container-toolkit api/config/v1/config.go
//! (`Config`: `accept-nvidia-visible-devices-envvar-when-unprivileged`,
//! `accept-nvidia-visible-devices-as-volume-mounts`; `GetDefault`: true and
//! false). A missing or unreadable file, one that is not TOML, or a key
//! that is not a boolean leaves NVIDIA's default for that key: NVIDIA's
//! own tools report such a file, and a container is never refused over it.

use std::path::Path;

use crate::core::policy::NvidiaDeviceSettings;

/// NVIDIA's config is a few KiB; past this it is not one.
const MAX_BYTES: u64 = 1 << 20;

const ACCEPT_MOUNTS: &str = "accept-nvidia-visible-devices-as-volume-mounts";
const ACCEPT_ENV_UNPRIVILEGED: &str = "accept-nvidia-visible-devices-envvar-when-unprivileged";

/// The settings from the file at `path` (`""`: NVIDIA's defaults).
pub fn read(path: &str) -> NvidiaDeviceSettings {
    read_text(path).as_deref().map(parse).unwrap_or_default()
}

/// The text of the file at `path`; None for `""` and for a file that
/// cannot be read as text (both mean NVIDIA's defaults).
pub fn read_text(path: &str) -> Option<String> {
    if path.is_empty() {
        return None;
    }
    crate::sys::fsutil::read_to_string_limited(Path::new(path), MAX_BYTES).ok()
}

/// The settings a config text gives, NVIDIA's defaults for the rest.
pub fn parse(text: &str) -> NvidiaDeviceSettings {
    let mut s = NvidiaDeviceSettings::default();
    let Ok(t) = text.parse::<toml::Table>() else {
        return s;
    };
    if let Some(b) = t.get(ACCEPT_MOUNTS).and_then(toml::Value::as_bool) {
        s.accept_volume_mounts = b;
    }
    if let Some(b) = t
        .get(ACCEPT_ENV_UNPRIVILEGED)
        .and_then(toml::Value::as_bool)
    {
        s.accept_envvar_unprivileged = b;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_defaults_are_nvidias() {
        assert_eq!(parse(""), NvidiaDeviceSettings::default());
        assert!(!parse("").accept_volume_mounts);
        assert!(parse("").accept_envvar_unprivileged);
        let s = parse(
            "disable-require = false\naccept-nvidia-visible-devices-as-volume-mounts = true\naccept-nvidia-visible-devices-envvar-when-unprivileged = false\n[nvidia-container-cli]\nldconfig = \"@/sbin/ldconfig\"\n",
        );
        assert!(s.accept_volume_mounts && !s.accept_envvar_unprivileged);
        // Commented out (as NVIDIA ships it), not TOML, or not a boolean:
        // the default for that key.
        assert_eq!(
            parse("#accept-nvidia-visible-devices-as-volume-mounts = true\n"),
            NvidiaDeviceSettings::default()
        );
        assert_eq!(parse("[[["), NvidiaDeviceSettings::default());
        assert_eq!(
            parse("accept-nvidia-visible-devices-envvar-when-unprivileged = \"false\"\n"),
            NvidiaDeviceSettings::default()
        );
        assert_eq!(read(""), NvidiaDeviceSettings::default());
        assert_eq!(
            read("/nonexistent/nvidia/config.toml"),
            NvidiaDeviceSettings::default()
        );
    }
}
