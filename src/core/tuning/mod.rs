//! Tuning from host policy (`[tuning]` in config.toml): environment
//! variables, rlimits (`memlock`, `stack`) and the size of `/dev/shm`
//! ([`shm`]).
//!
//! A variable the image or the user set is never touched: their value is a
//! decision someone made, ours is a default. A limit is only ever raised.

pub mod numa;
pub mod shm;

use crate::core::container::Container;
use crate::core::decision::Rlimit;
use crate::core::decision::{Check, Finding};
use crate::core::facts::Gpu;
use crate::core::policy::{TuningConfig, TuningRule};
use crate::core::version::Version;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The annotation values that switch tuning off for one container.
fn is_off(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "off" | "false" | "0" | "no" | "disabled"
    )
}

/// The version an image declares for a framework: the first variable of the
/// framework's list that is set, read up to the first non-version character
/// (`2.4.0a0+3bcc3cd` → 2.4.0). `Some(None)`: declared, version unreadable.
fn framework_version(c: &Container, vars: &[String]) -> Option<Option<Version>> {
    let value = vars.iter().find_map(|v| c.env.get(v))?;
    let prefix: String = value
        .trim()
        .trim_start_matches('v')
        .chars()
        .take_while(|ch| ch.is_ascii_digit() || *ch == '.')
        .collect();
    Some(Version::parse(prefix.trim_end_matches('.')).ok())
}

/// Lowest compute capability among the visible GPUs; None when no GPU is
/// visible or one is unknown (then capability-conditioned rules do not apply).
fn lowest_cc(gpus: &[&Gpu]) -> Option<Version> {
    if gpus.is_empty() {
        return None;
    }
    let mut low: Option<Version> = None;
    for g in gpus {
        let v = Version::parse(g.compute_capability.as_deref()?).ok()?;
        low = Some(match low {
            Some(l) if l <= v => l,
            _ => v,
        });
    }
    low
}

fn rule_applies(
    rule: &TuningRule,
    c: &Container,
    cfg: &TuningConfig,
    low_cc: Option<&Version>,
) -> bool {
    if rule.unless_env.iter().any(|v| c.env.contains(v)) {
        return false;
    }
    if let Some(min) = &rule.min_compute_capability {
        let Ok(min) = Version::parse(min) else {
            return false;
        };
        match low_cc {
            Some(have) if *have >= min => {}
            _ => return false,
        }
    }
    let declared = |fw: &str| {
        cfg.frameworks
            .get(fw)
            .and_then(|vars| framework_version(c, vars))
    };
    if !rule.frameworks.is_empty() && !rule.frameworks.iter().any(|fw| declared(fw).is_some()) {
        return false;
    }
    for (fw, min) in &rule.framework_min_version {
        if let (Some(Some(have)), Ok(min)) = (declared(fw), Version::parse(min)) {
            if have < min {
                return false;
            }
        }
    }
    true
}

/// The variables to add, in rule order, and findings (tuning switched off).
pub fn plan(
    c: &Container,
    gpus: &[&Gpu],
    cfg: &TuningConfig,
) -> (Map<String, Value>, Vec<Finding>) {
    let mut env = Map::new();
    if !cfg.enabled {
        return (env, Vec::new());
    }
    if let Some(v) = c.annotations.get(&cfg.disable_annotation) {
        if is_off(v) {
            return (
                env,
                vec![Finding::info(
                    Check::Tuning,
                    format!(
                        "tuning is off for this container (annotation {}={})",
                        cfg.disable_annotation,
                        crate::core::sanitize::esc(v)
                    ),
                )],
            );
        }
    }
    let low = lowest_cc(gpus);
    for rule in &cfg.env {
        if c.env.contains(&rule.name) || env.contains_key(&rule.name) {
            continue;
        }
        if rule_applies(rule, c, cfg, low.as_ref()) {
            env.insert(rule.name.clone(), Value::String(rule.value.clone()));
        }
    }
    (env, Vec::new())
}

/// The rlimit type the memlock rule sets (runtime-spec `process.rlimits`).
pub const MEMLOCK: &str = "RLIMIT_MEMLOCK";
/// The rlimit type the stack rule sets.
pub const STACK: &str = "RLIMIT_STACK";

/// Whether tuning is on for this container: `tuning.enabled`, and no
/// `<disable_annotation>=off` on it.
pub(crate) fn tuning_on(c: &Container, cfg: &TuningConfig) -> bool {
    cfg.enabled
        && !c
            .annotations
            .get(&cfg.disable_annotation)
            .is_some_and(|v| is_off(v))
}

/// The rlimits to raise: `tuning.memlock` (RDMA and GPUDirect RDMA pin
/// memory with ibv_reg_mr, which fails past RLIMIT_MEMLOCK;
/// NVIDIA/nvidia-container-toolkit#2037) and `tuning.stack` (NGC images
/// ask for `--ulimit stack=67108864`: deep recursion in compilers and
/// data loaders). Only ever raises: soft and hard are compared separately
/// with what the container set, each kept when it is already at least as
/// high; a type is left out when both are. The container's value is the
/// entry runc applies, the last of its type (core::container). Like the
/// env rules, off when tuning is off or the container's annotation turns
/// it off.
pub fn rlimits(c: &Container, cfg: &TuningConfig) -> BTreeMap<String, Rlimit> {
    rlimits_over(c, cfg, &BTreeMap::new())
}

/// [`rlimits`] for a container whose spec, where it lists no entry of a
/// type, inherits the limit in `inherited` (crate::sys::limits: runc's
/// own): an added entry keeps the inherited soft or hard value where that
/// is higher, so writing it never lowers what the container would have had.
pub fn rlimits_over(
    c: &Container,
    cfg: &TuningConfig,
    inherited: &BTreeMap<String, Rlimit>,
) -> BTreeMap<String, Rlimit> {
    let mut out = BTreeMap::new();
    if !tuning_on(c, cfg) {
        return out;
    }
    for (kind, limit) in [(MEMLOCK, cfg.memlock), (STACK, cfg.stack)] {
        let Some(want) = limit.value() else {
            continue;
        };
        let r = match c.rlimits.get(kind) {
            None => match inherited.get(kind) {
                Some(have) => Rlimit {
                    soft: have.soft.max(want),
                    hard: have.hard.max(want),
                },
                None => Rlimit {
                    soft: want,
                    hard: want,
                },
            },
            Some(have) => {
                let r = Rlimit {
                    soft: have.soft.max(want),
                    hard: have.hard.max(want),
                };
                if r == *have {
                    continue;
                }
                r
            }
        };
        out.insert(kind.to_string(), r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::container::Env;
    use crate::core::policy::Config;

    fn gpu(cc: Option<&str>) -> Gpu {
        Gpu {
            compute_capability: cc.map(String::from),
            ..Default::default()
        }
    }

    fn names(m: &Map<String, Value>) -> Vec<&str> {
        m.keys().map(|k| k.as_str()).collect()
    }

    #[test]
    fn shipped_rules() {
        let cfg = Config::default().tuning;
        let a100 = gpu(Some("8.0"));
        let t4 = gpu(Some("7.5"));
        let c = Container::from_env(Env::from_entries(["CUDA_DEVICE_ORDER=FASTEST_FIRST"]));
        let (env, _) = plan(&c, &[&a100], &cfg);
        assert_eq!(
            names(&env),
            vec![
                "CUDA_DEVICE_MAX_CONNECTIONS",
                "TF_GPU_ALLOCATOR",
                "PYTORCH_CUDA_ALLOC_CONF",
                "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"
            ]
        );
        // one GPU below 8.0 among the visible ones: no TF32
        let (env, _) = plan(&c, &[&a100, &t4], &cfg);
        assert!(!env.contains_key("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"));
        // unknown capability or no GPU: no TF32
        let (env, _) = plan(&c, &[&gpu(None)], &cfg);
        assert!(!env.contains_key("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"));
        let (env, _) = plan(&c, &[], &cfg);
        assert!(!env.contains_key("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"));
    }

    #[test]
    fn framework_conditions() {
        let cfg = Config::default().tuning;
        let a100 = gpu(Some("8.0"));
        let old = Container::from_env(Env::from_entries(["PYTORCH_VERSION=1.13.1"]));
        let (env, _) = plan(&old, &[&a100], &cfg);
        assert!(!env.contains_key("PYTORCH_CUDA_ALLOC_CONF"));
        let new = Container::from_env(Env::from_entries(["PYTORCH_VERSION=2.4.0a0+3bcc3cd"]));
        let (env, _) = plan(&new, &[&a100], &cfg);
        assert!(env.contains_key("PYTORCH_CUDA_ALLOC_CONF"));
        let newer_name =
            Container::from_env(Env::from_entries(["PYTORCH_ALLOC_CONF=backend:native"]));
        let (env, _) = plan(&newer_name, &[&a100], &cfg);
        assert!(!env.contains_key("PYTORCH_CUDA_ALLOC_CONF"));

        let mut only_pt = cfg.clone();
        only_pt.env[0].frameworks = vec!["pytorch".into()];
        let (env, _) = plan(&Container::default(), &[&a100], &only_pt);
        assert!(!env.contains_key("CUDA_DEVICE_ORDER"));
        let (env, _) = plan(&new, &[&a100], &only_pt);
        assert!(env.contains_key("CUDA_DEVICE_ORDER"));
    }

    #[test]
    fn memlock_only_raises() {
        use crate::core::policy::Memlock;
        let mut cfg = Config::default().tuning;
        let c = Container::default();
        assert!(rlimits(&c, &cfg).is_empty(), "off by default");
        cfg.memlock = Memlock::Unlimited;
        let r = rlimits(&c, &cfg);
        assert_eq!(
            r[MEMLOCK],
            Rlimit {
                soft: u64::MAX,
                hard: u64::MAX
            }
        );
        cfg.memlock = Memlock::Bytes(1 << 30);
        let mut c = Container::default();
        // Soft lower, hard higher: only soft is raised.
        c.rlimits.insert(
            MEMLOCK.into(),
            Rlimit {
                soft: 65536,
                hard: 2 << 30,
            },
        );
        assert_eq!(
            rlimits(&c, &cfg)[MEMLOCK],
            Rlimit {
                soft: 1 << 30,
                hard: 2 << 30
            }
        );
        // Both already higher: nothing to do.
        c.rlimits.insert(
            MEMLOCK.into(),
            Rlimit {
                soft: 4 << 30,
                hard: u64::MAX,
            },
        );
        assert!(rlimits(&c, &cfg).is_empty());
        // The annotation turns it off.
        let mut c = Container::default();
        c.annotations
            .insert("gpu-guard.tuning".into(), "off".into());
        assert!(rlimits(&c, &cfg).is_empty());
    }

    #[test]
    fn stack_is_raised_like_memlock() {
        use crate::core::policy::Limit;
        let mut cfg = Config::default().tuning;
        cfg.stack = Limit::Bytes(64 << 20);
        let mut c = Container::default();
        assert_eq!(
            rlimits(&c, &cfg)[STACK],
            Rlimit {
                soft: 64 << 20,
                hard: 64 << 20
            }
        );
        // Docker's default: soft 8 MiB, hard unlimited; only soft is raised.
        c.rlimits.insert(
            STACK.into(),
            Rlimit {
                soft: 8 << 20,
                hard: u64::MAX,
            },
        );
        assert_eq!(
            rlimits(&c, &cfg)[STACK],
            Rlimit {
                soft: 64 << 20,
                hard: u64::MAX
            }
        );
        // Memlock off: only the stack; both set: both, separately.
        assert_eq!(rlimits(&c, &cfg).len(), 1);
        cfg.memlock = Limit::Unlimited;
        let r = rlimits(&c, &cfg);
        assert_eq!(r.len(), 2);
        assert_eq!(r[MEMLOCK].soft, u64::MAX);
        cfg.stack = Limit::Unlimited;
        assert_eq!(rlimits(&c, &cfg)[STACK].soft, u64::MAX);
        // Never lowered.
        cfg.stack = Limit::Bytes(1 << 20);
        assert!(!rlimits(&c, &cfg).contains_key(STACK));
        // No entry in the spec: the inherited limit is the floor, so the
        // added entry keeps an unlimited hard limit unlimited.
        cfg.stack = Limit::Bytes(64 << 20);
        let inherited = BTreeMap::from([(
            STACK.to_string(),
            Rlimit {
                soft: 8 << 20,
                hard: u64::MAX,
            },
        )]);
        let bare = Container::default();
        assert_eq!(
            rlimits_over(&bare, &cfg, &inherited)[STACK],
            Rlimit {
                soft: 64 << 20,
                hard: u64::MAX
            }
        );
        cfg.enabled = false;
        assert!(rlimits(&c, &cfg).is_empty());
    }

    #[test]
    fn annotation_turns_it_off() {
        let cfg = Config::default().tuning;
        let mut c = Container::default();
        c.annotations
            .insert("gpu-guard.tuning".into(), "off".into());
        let (env, findings) = plan(&c, &[&gpu(Some("9.0"))], &cfg);
        assert!(env.is_empty());
        assert_eq!(findings.len(), 1);
    }
}
