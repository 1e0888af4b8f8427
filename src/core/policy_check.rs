//! The checks of a [`Config`] that serde cannot make and that need no I/O:
//! capability and profile names, versions, framework names, limits.
//! [`crate::config::parse`] runs them on every file it reads and adds the
//! library globs. Apart from the types in [`crate::core::policy`] so that
//! the policy types depend on nothing that judges them (the profile checks
//! live in [`crate::core::profiles`], which reads those types).

use crate::core::capability;
use crate::core::policy::{Config, TuningRule};
use crate::core::profiles;
use crate::core::version::Version;

/// The longest probe deadline `host.probe_timeout_ms` accepts.
const MAX_PROBE_TIMEOUT_MS: u64 = 600_000;

impl Config {
    /// Checks what serde cannot and needs no I/O: capability names,
    /// versions, framework names, limits. [`crate::config::parse`] adds the
    /// library globs.
    pub fn validate(&self) -> Result<(), String> {
        for (i, cap) in self.security.capabilities.iter().flatten().enumerate() {
            if capability::parse(cap).is_none() {
                return Err(format!(
                    "key `security.capabilities[{i}]`: unknown capability `{cap}`"
                ));
            }
        }
        profiles::validate(&self.security)?;
        self.runtime.engines.validate()?;
        for (i, rule) in self.tuning.env.iter().enumerate() {
            self.check_tuning_rule(i, rule)?;
        }
        for (i, kind) in self.detect.cdi_kinds.iter().enumerate() {
            if !valid_cdi_kind(kind) {
                return Err(format!(
                    "key `detect.cdi_kinds[{i}]`: `{kind}` is not a CDI kind (vendor/class, e.g. nvidia.com/gpu)"
                ));
            }
        }
        self.check_paths()?;
        if self.host.probe_timeout_ms == 0 {
            return Err("key `host.probe_timeout_ms`: must be at least 1".into());
        }
        // A container start waits this long on a hung GPU: more than ten
        // minutes is a typo (seconds for milliseconds the other way round).
        if self.host.probe_timeout_ms > MAX_PROBE_TIMEOUT_MS {
            return Err(format!(
                "key `host.probe_timeout_ms`: must be at most {MAX_PROBE_TIMEOUT_MS} (10 minutes)"
            ));
        }
        Ok(())
    }

    /// The host tuning keys that name paths or sizes: `host.cdi_spec_dirs`
    /// and `metrics.textfile` are absolute (a hook's working directory is
    /// the bundle, so a relative path would name a file in every
    /// container's bundle); `tuning.shm_size` is not 0 (tmpfs reads
    /// `size=0` as unlimited, so "at least 0" means nothing).
    fn check_paths(&self) -> Result<(), String> {
        for (i, dir) in self.host.cdi_spec_dirs.iter().enumerate() {
            if !dir.starts_with('/') {
                return Err(format!(
                    "key `host.cdi_spec_dirs[{i}]`: `{dir}` is not an absolute path"
                ));
            }
        }
        let t = &self.metrics.textfile;
        if !t.is_empty() && (!t.starts_with('/') || t.ends_with('/')) {
            return Err(format!(
                "key `metrics.textfile`: `{t}` is not an absolute file path (e.g. /var/lib/node_exporter/textfile/gpu-guard.prom)"
            ));
        }
        let d = &self.metrics.state_dir;
        if !d.is_empty() && !d.starts_with('/') {
            return Err(format!(
                "key `metrics.state_dir`: `{d}` is not an absolute path"
            ));
        }
        if self.tuning.shm_size.bytes() == Some(0) {
            return Err(
                "key `tuning.shm_size`: must be more than 0 (\"\" leaves /dev/shm as it is)".into(),
            );
        }
        Ok(())
    }

    /// `tuning.env[i]`: its names, versions and the frameworks it names.
    fn check_tuning_rule(&self, i: usize, rule: &TuningRule) -> Result<(), String> {
        if !valid_env_name(&rule.name) {
            return Err(format!(
                "key `tuning.env[{i}].name`: `{}` is not an environment variable name",
                rule.name
            ));
        }
        if let Some(cc) = &rule.min_compute_capability {
            Version::parse(cc)
                .map_err(|e| format!("key `tuning.env[{i}].min_compute_capability`: {e}"))?;
        }
        for fw in rule.frameworks.iter() {
            if !self.tuning.frameworks.contains_key(fw) {
                return Err(format!(
                    "key `tuning.env[{i}].frameworks`: framework `{fw}` is not defined in [tuning.frameworks]"
                ));
            }
        }
        for (j, name) in rule.unless_env.iter().enumerate() {
            if !valid_env_name(name) {
                return Err(format!(
                    "key `tuning.env[{i}].unless_env[{j}]`: `{name}` is not an environment variable name"
                ));
            }
        }
        for (fw, v) in rule.framework_min_version.iter() {
            if !self.tuning.frameworks.contains_key(fw) {
                return Err(format!(
                    "key `tuning.env[{i}].framework_min_version`: framework `{fw}` is not defined in [tuning.frameworks]"
                ));
            }
            Version::parse(v)
                .map_err(|e| format!("key `tuning.env[{i}].framework_min_version.{fw}`: {e}"))?;
        }
        Ok(())
    }
}

/// A CDI kind `vendor/class` as the CDI parser accepts it
/// (tags.cncf.io/container-device-interface pkg/parser ValidateVendorName,
/// ValidateClassName): vendor a dotted name of letters, digits, `-`, `_`,
/// `.`; class letters, digits, `-`, `_`; both start with a letter or digit.
fn valid_cdi_kind(s: &str) -> bool {
    let Some((vendor, class)) = s.split_once('/') else {
        return false;
    };
    let ok = |part: &str, extra: &[char]| {
        part.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || extra.contains(&c))
    };
    ok(vendor, &['.']) && ok(class, &[])
}

fn valid_env_name(s: &str) -> bool {
    !s.is_empty() && !s.contains('=') && !s.bytes().any(|b| b.is_ascii_control() || b == b' ')
}
