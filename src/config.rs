//! Finds, reads and validates gpu-guard's config file
//! (`/etc/gpu-guard/config.toml`) into a [`Config`].

use std::path::{Path, PathBuf};

use crate::core::policy::{default_kernel_image_libraries, Config};

/// Where the config lives when neither `--config` nor `GPU_GUARD_CONFIG` says.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/gpu-guard/config.toml";
/// Environment variable naming the config file (design.md, global options).
pub const CONFIG_ENV: &str = "GPU_GUARD_CONFIG";
/// The shipped config, compiled in so a test can hold `Default` to it.
pub const SHIPPED_CONFIG: &str = include_str!("../config/config.toml");

/// A config that could not be used. The message names the file and the key.
#[derive(Debug, Clone, thiserror::Error)]
#[error("invalid gpu-guard config {}: {message}", path.display())]
pub struct ConfigError {
    pub path: PathBuf,
    pub message: String,
    /// The file could not be read at all (as opposed to read and rejected).
    pub unreadable: bool,
}

/// Resolves the config path: `--config`, then `GPU_GUARD_CONFIG`, then the default.
pub fn config_path(flag: Option<&Path>) -> (PathBuf, bool) {
    if let Some(p) = flag {
        return (p.to_path_buf(), true);
    }
    match std::env::var_os(CONFIG_ENV) {
        Some(p) if !p.is_empty() => (PathBuf::from(p), true),
        _ => (PathBuf::from(DEFAULT_CONFIG_PATH), false),
    }
}

/// The largest config file we accept; the shipped one is a few KiB.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Loads the config. A missing file at the default path means built-in
/// defaults (design: "a missing default file means built-in defaults"); a
/// missing file the operator named explicitly is an error, since they meant it.
pub fn load(flag: Option<&Path>) -> Result<Config, ConfigError> {
    let (path, explicit) = config_path(flag);
    let text = match crate::sys::fsutil::read_to_string_limited(&path, MAX_CONFIG_BYTES) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
            return Ok(Config::default())
        }
        Err(e) => {
            return Err(ConfigError {
                path,
                message: format!("cannot read it: {e}"),
                unreadable: true,
            })
        }
    };
    parse(&text).map_err(|message| ConfigError {
        path,
        message,
        unreadable: false,
    })
}

/// Parses and validates config text; the error is one line naming the key.
pub fn parse(text: &str) -> Result<Config, String> {
    let cfg = parse_unvalidated(text)?;
    cfg.validate()?;
    validate_globs(&cfg)?;
    Ok(cfg)
}

fn parse_unvalidated(text: &str) -> Result<Config, String> {
    let de = toml::Deserializer::parse(text).map_err(|e| one_line_toml_error(text, &e))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let msg = one_line_toml_error(text, &inner);
        if path.is_empty() || path == "." {
            msg
        } else {
            format!("key `{path}`: {msg}")
        }
    })
}

/// toml errors span several lines with a source excerpt; we want one line
/// with the line number.
fn one_line_toml_error(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {msg}")
        }
        None => msg,
    }
}

/// The library globs, which the core cannot parse (the glob language is the
/// rootfs walker's).
fn validate_globs(cfg: &Config) -> Result<(), String> {
    // Expanding and compiling the globs is most of the cost of loading
    // the config, which every container start pays, non-GPU ones too.
    // The shipped globs are checked by a test (shipped_globs_are_valid),
    // so only an admin's own list is checked here.
    if cfg.kernel_image.libraries != default_kernel_image_libraries() {
        for (i, g) in cfg.kernel_image.libraries.iter().enumerate() {
            crate::scan::glob::parse(g)
                .map_err(|e| format!("key `kernel_image.libraries[{i}]`: {e}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::Mode;

    #[test]
    fn shipped_file_parses_validates_and_is_default() {
        let shipped = parse(SHIPPED_CONFIG).expect("shipped config must be valid");
        assert_eq!(shipped, Config::default());
        assert_eq!(shipped.mode, Mode::Enforce);
        assert_eq!(shipped.host.facts_file, "");
        assert_eq!(shipped.host.nvml_library, "");
    }

    #[test]
    fn shipped_globs_are_valid() {
        for g in default_kernel_image_libraries() {
            crate::scan::glob::parse(&g).unwrap_or_else(|e| panic!("{g}: {e}"));
        }
        // and a custom list is still checked
        let e = parse("[kernel_image]\nlibraries = [\"usr/{lib\"]\n").unwrap_err();
        assert!(e.contains("kernel_image.libraries[0]"), "{e}");
    }

    #[test]
    fn empty_file_is_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c.mode, Mode::Enforce);
        assert_eq!(c.host.probe_timeout_ms, 5000);
    }

    #[test]
    fn errors_name_the_key() {
        let e = parse("mode = \"loud\"\n").unwrap_err();
        assert!(e.contains("mode"), "{e}");
        let e = parse("[host]\nfacts_fil = \"x\"\n").unwrap_err();
        assert!(e.contains("facts_fil"), "{e}");
        let e = parse("[security]\ncapabilities = [\"CAP_NOPE\"]\n").unwrap_err();
        assert!(e.contains("security.capabilities[0]"), "{e}");
        let e = parse("[host]\nprobe_timeout_ms = 600001\n").unwrap_err();
        assert!(e.contains("host.probe_timeout_ms"), "{e}");
        assert!(parse("[host]\nprobe_timeout_ms = 600000\n").is_ok());
        let e = parse("[host]\nprobe_timeout_ms = \"soon\"\n").unwrap_err();
        assert!(e.contains("host.probe_timeout_ms"), "{e}");
        assert!(!e.contains('\n'));
    }
}
