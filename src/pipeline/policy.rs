//! The host policy an entry point decides under: the config, or, when the
//! config cannot be used, its error together with the mode that applies
//! then. One value, so every entry point (and the wrapper's create and
//! exec alike) treats an invalid config the same way: GPU containers are
//! refused, naming the error; other containers are none of its business.

use crate::config::{self, ConfigError};
use crate::core::policy::{Config, DetectConfig, MetricsConfig, Mode, Syslog};
use crate::core::runtime_engines::{Engine, Engines};
use std::path::Path;

/// The config, or why there is none to use.
#[derive(Clone, Debug)]
pub struct Policy(Result<Config, Unusable>);

/// A config that could not be used, and what applies instead.
#[derive(Clone, Debug)]
struct Unusable {
    error: ConfigError,
    /// The mode applied: enforce, so no GPU container starts under a
    /// policy nobody can read.
    mode: Mode,
    /// GPU containers are recognised by the built-in detection rules.
    detect: DetectConfig,
    /// Engines are told apart by their default runtime roots.
    engines: Engines,
}

impl Policy {
    /// Loads the config named by `--config`, `GPU_GUARD_CONFIG` or the
    /// default path (README, "Configuration").
    pub fn load(flag: Option<&Path>) -> Policy {
        Policy::from(config::load(flag))
    }

    /// A policy from a config in hand.
    pub fn valid(config: Config) -> Policy {
        Policy(Ok(config))
    }

    /// The policy when the config cannot be used.
    pub fn invalid(error: ConfigError) -> Policy {
        Policy(Err(Unusable {
            error,
            mode: Mode::Enforce,
            detect: DetectConfig::default(),
            engines: Engines::default(),
        }))
    }

    pub fn config(&self) -> Result<&Config, &ConfigError> {
        self.0.as_ref().map_err(|u| &u.error)
    }

    pub fn mode(&self) -> Mode {
        match &self.0 {
            Ok(c) => c.mode,
            Err(u) => u.mode,
        }
    }

    /// How GPU containers are recognised.
    pub fn detect(&self) -> &DetectConfig {
        match &self.0 {
            Ok(c) => &c.detect,
            Err(u) => &u.detect,
        }
    }

    /// Where decisions are logged (an invalid config still logs, to the
    /// system's syslog).
    pub fn syslog(&self) -> Syslog {
        match &self.0 {
            Ok(c) => c.log.target(),
            Err(_) => Syslog::System,
        }
    }

    /// `[metrics]`: where decisions are counted (None under a config that
    /// cannot be used).
    pub fn metrics(&self) -> Option<&MetricsConfig> {
        self.0.as_ref().ok().map(|c| &c.metrics)
    }

    /// The per-engine runtime roots and chains (`[runtime.engines]`); the
    /// defaults under an invalid config.
    pub fn engines(&self) -> &Engines {
        match &self.0 {
            Ok(c) => &c.runtime.engines,
            Err(u) => &u.engines,
        }
    }

    /// The runtime the wrapper chains for `engine` (None: not known):
    /// `runtime.engines.ENGINE.path`, else `runtime.path`; `""` (and under
    /// an invalid config): search PATH.
    pub fn chained_runtime(&self, engine: Option<Engine>) -> &str {
        match &self.0 {
            Ok(c) => c.chained_runtime(engine),
            Err(_) => "",
        }
    }
}

impl From<Result<Config, ConfigError>> for Policy {
    fn from(r: Result<Config, ConfigError>) -> Policy {
        match r {
            Ok(c) => Policy::valid(c),
            Err(e) => Policy::invalid(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_config_enforces_with_the_built_in_detection() {
        let error = ConfigError {
            path: "/etc/gpu-guard/config.toml".into(),
            message: "line 1: bad".into(),
            unreadable: false,
        };
        let p = Policy::from(Err(error));
        assert_eq!(p.mode(), Mode::Enforce);
        assert_eq!(p.detect(), &DetectConfig::default());
        assert_eq!(p.syslog(), Syslog::System);
        assert_eq!(p.chained_runtime(None), "");
        assert_eq!(p.engines(), &Engines::default());
        assert!(p.config().is_err());
        let mut cfg = Config {
            mode: Mode::Warn,
            ..Config::default()
        };
        cfg.runtime.path = "/usr/bin/nvidia-container-runtime".into();
        let p = Policy::valid(cfg);
        assert_eq!(p.mode(), Mode::Warn);
        assert_eq!(p.chained_runtime(None), "/usr/bin/nvidia-container-runtime");
    }
}
