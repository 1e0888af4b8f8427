//! The host policy an entry point decides under: the config, or, when the
//! config cannot be used, its error together with what still applies then.
//! One value, so every entry point (and the wrapper's create and exec
//! alike) treats an invalid config the same way: GPU containers are
//! refused, naming the error; other containers are none of its business.
//!
//! An invalid config never changes what a container gets: the chain of
//! each engine and the rules that recognise GPU containers are read from
//! the same files leniently ([`crate::config::Fallback`]), so a container
//! is classified as a valid config would classify it and the wrapper still
//! execs the engine's chained runtime (NVIDIA's, where install chained it),
//! never the first `runc` on PATH.

use crate::config::{self, ConfigError, Fallback};
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
    /// The chain, detection and log settings that could still be read,
    /// built-in defaults for the rest; its mode is enforce, so no GPU
    /// container starts under a policy nobody can read.
    fallback: Fallback,
}

impl Policy {
    /// Loads the config named by `--config`, `GPU_GUARD_CONFIG` or the
    /// default path (docs/configuration.md).
    pub fn load(flag: Option<&Path>) -> Policy {
        Policy::loaded(flag, config::load(flag))
    }

    /// The policy for the result of loading the config `flag` names: when
    /// it cannot be used, its chain and detection settings are read
    /// leniently from the same files.
    pub fn loaded(flag: Option<&Path>, r: Result<Config, ConfigError>) -> Policy {
        match r {
            Ok(c) => Policy::valid(c),
            Err(error) => Policy::invalid_with(error, config::fallback(flag)),
        }
    }

    /// A policy from a config in hand.
    pub fn valid(config: Config) -> Policy {
        Policy(Ok(config))
    }

    /// The policy when the config cannot be used and nothing of it could
    /// be read: built-in chain (PATH) and detection.
    pub fn invalid(error: ConfigError) -> Policy {
        Policy::invalid_with(error, Fallback::defaults())
    }

    /// The policy when the config cannot be used, with what could still be
    /// read of it.
    pub fn invalid_with(error: ConfigError, mut fallback: Fallback) -> Policy {
        fallback.config.mode = Mode::Enforce;
        Policy(Err(Unusable { error, fallback }))
    }

    pub fn config(&self) -> Result<&Config, &ConfigError> {
        self.0.as_ref().map_err(|u| &u.error)
    }

    /// The config the chain and the classification come from: the config,
    /// or under an invalid one what could still be read of it.
    pub fn effective(&self) -> &Config {
        match &self.0 {
            Ok(c) => c,
            Err(u) => &u.fallback.config,
        }
    }

    /// Under an invalid config: what of the chain and detection settings
    /// could not be read, as one line (None: all of it was, or the config
    /// is valid).
    pub fn unread(&self) -> Option<String> {
        match &self.0 {
            Ok(_) => None,
            Err(u) => config::describe_unread(&u.fallback),
        }
    }

    pub fn mode(&self) -> Mode {
        self.effective().mode
    }

    /// How GPU containers are recognised.
    pub fn detect(&self) -> &DetectConfig {
        &self.effective().detect
    }

    /// Where decisions are logged (an invalid config still logs: to the
    /// syslog its `[log]` names, else the system's).
    pub fn syslog(&self) -> Syslog {
        self.effective().log.target()
    }

    /// `[metrics]`: where decisions are counted (None under a config that
    /// cannot be used).
    pub fn metrics(&self) -> Option<&MetricsConfig> {
        self.0.as_ref().ok().map(|c| &c.metrics)
    }

    /// The per-engine runtime roots and chains (`[runtime.engines]`).
    pub fn engines(&self) -> &Engines {
        &self.effective().runtime.engines
    }

    /// The runtime the wrapper chains for `engine` (None: not known):
    /// `runtime.engines.ENGINE.path`, else `runtime.path`; `""`: search PATH.
    pub fn chained_runtime(&self, engine: Option<Engine>) -> &str {
        self.effective().chained_runtime(engine)
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
        assert_eq!(p.unread(), None);
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
