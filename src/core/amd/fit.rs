//! Which code object the HIP runtime loads on a GPU, as ROCm decides it.
//!
//! The rule (ROCm CLR hipamd/src/hip_code_object.cpp,
//! `isCodeObjectCompatibleWithDevice`; LLVM's `isImageCompatibleWithEnv`
//! says the same; clang/docs/ClangOffloadBundler.rst, "Compatibility Rules
//! for Target ID"): the code object's processor equals the GPU's — or the
//! code object is for the generic target CLR maps the GPU's processor to —
//! and each of its `sramecc`/`xnack` settings is *any* or equal to the
//! GPU's mode.
//!
//! The GPU's target ID is the one the runtime builds (ROCR-Runtime
//! core/runtime/amd_gpu_agent.cpp, `GpuAgent::GpuAgent`): the processor of
//! KFD's `gfx_target_version`, or of `HSA_OVERRIDE_GFX_VERSION` when the
//! container sets it; `sramecc` from the node's capability bit unless
//! `HSA_ENABLE_SRAMECC` is `0`/`1`; `xnack` from the process's XNACK mode,
//! which `HSA_XNACK=1`/`0` sets on GPUs that switch it per process
//! (gfx90a, gfx94x, gfx950: the kernel's KFD_SUPPORT_XNACK_PER_PROCESS).
//! Features a processor does not have are left out of its target ID.

use super::target::{
    generic_of, parse_gfx_override, supported_features, Feature, GfxOverride, TargetId,
};
use crate::core::container::Env;

/// The container settings that change a GPU's target ID.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AmdEnv {
    /// `HSA_OVERRIDE_GFX_VERSION`.
    pub gfx_override: Option<String>,
    /// `HSA_XNACK`.
    pub hsa_xnack: Option<String>,
    /// `HSA_ENABLE_SRAMECC`.
    pub enable_sramecc: Option<String>,
    /// Names of `HSA_OVERRIDE_GFX_VERSION_<node>` variables: libhsakmt
    /// applies them to the node of that number in the container's own
    /// topology view, which the host facts cannot map.
    pub per_node_overrides: Vec<String>,
}

impl AmdEnv {
    pub fn from_env(env: &Env) -> AmdEnv {
        let vars = env.vars();
        AmdEnv {
            gfx_override: vars.get("HSA_OVERRIDE_GFX_VERSION").map(|v| v.to_string()),
            hsa_xnack: vars.get("HSA_XNACK").map(|v| v.to_string()),
            enable_sramecc: vars.get("HSA_ENABLE_SRAMECC").map(|v| v.to_string()),
            per_node_overrides: vars
                .keys()
                .filter(|k| {
                    k.strip_prefix("HSA_OVERRIDE_GFX_VERSION_")
                        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                })
                .map(|k| k.to_string())
                .collect(),
        }
    }
}

/// What the host facts say of one AMD GPU's target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostTarget {
    /// The host's target ID (its feature modes as a process gets them by default).
    pub target: TargetId,
    /// The GPU switches XNACK per process (`HSA_XNACK` decides).
    pub xnack_per_process: bool,
}

/// The target ID the runtime would use for a GPU in one container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Effective {
    pub target: TargetId,
    /// `HSA_OVERRIDE_GFX_VERSION` replaced the host's processor (the host's
    /// processor, to name in findings).
    pub overridden_from: Option<String>,
    /// Set when the target cannot be known for sure (a per-node override):
    /// a finding built on it must not refuse.
    pub uncertain: Option<String>,
}

/// Why the container cannot start on AMD GPUs whatever its code holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvError {
    /// libhsakmt rejects the value and the runtime finds no GPU.
    InvalidOverride(String),
}

/// The target ID of `gpu` as the runtime sees it in a container with `env`.
pub fn effective_target(gpu: &HostTarget, env: &AmdEnv) -> Result<Effective, EnvError> {
    let host = &gpu.target;
    let (processor, overridden_from) = match env.gfx_override.as_deref() {
        None => (host.processor.clone(), None),
        Some(v) => match parse_gfx_override(v) {
            GfxOverride::Invalid(v) => return Err(EnvError::InvalidOverride(v)),
            GfxOverride::Processor(p) if p == host.processor => (p, None),
            GfxOverride::Processor(p) => (p, Some(host.processor.clone())),
        },
    };
    let (has_sramecc, has_xnack) = supported_features(&processor);
    // A feature the host's own processor lacks has no recorded mode: off,
    // as the kernel leaves SRAM ECC and XNACK on processors without them.
    let host_mode = |f: Feature| {
        if f == Feature::On {
            Feature::On
        } else {
            Feature::Off
        }
    };
    let sramecc = match (has_sramecc, env.enable_sramecc.as_deref()) {
        (false, _) => Feature::Any,
        (true, Some("1")) => Feature::On,
        (true, Some("0")) => Feature::Off,
        (true, _) => host_mode(host.sramecc),
    };
    let xnack = match (has_xnack, gpu.xnack_per_process, env.hsa_xnack.as_deref()) {
        (false, _, _) => Feature::Any,
        // ROCR reads exactly "1" or "0"; anything else leaves the mode
        // (core/util/flag.h, HSA_XNACK).
        (true, true, Some("1")) => Feature::On,
        (true, true, Some("0")) => Feature::Off,
        (true, _, _) => host_mode(host.xnack),
    };
    let uncertain = (!env.per_node_overrides.is_empty()).then(|| {
        format!(
            "{} set: libhsakmt applies it to a node of the container's own topology, which gpu-guard cannot map",
            env.per_node_overrides.join(", ")
        )
    });
    Ok(Effective {
        target: TargetId {
            processor,
            sramecc,
            xnack,
        },
        overridden_from,
        uncertain,
    })
}

/// Does a code object for `code` load on a GPU whose target is `gpu`?
pub fn loads_on(code: &TargetId, gpu: &TargetId) -> bool {
    let processor_ok = if code.is_generic() {
        generic_of(&gpu.processor) == Some(code.processor.as_str())
    } else {
        code.processor == gpu.processor
    };
    let feature_ok = |c: Feature, g: Feature| c == Feature::Any || c == g;
    processor_ok && feature_ok(code.sramecc, gpu.sramecc) && feature_ok(code.xnack, gpu.xnack)
}

/// The code object the runtime picks for `gpu` among `codes`: a specific
/// one before a generic one (CLR keeps looking past a generic match for a
/// specific one). None: `hipErrorNoBinaryForGpu`.
pub fn pick<'a>(codes: &'a [TargetId], gpu: &TargetId) -> Option<&'a TargetId> {
    let mut generic = None;
    for c in codes.iter().filter(|c| loads_on(c, gpu)) {
        if !c.is_generic() {
            return Some(c);
        }
        generic.get_or_insert(c);
    }
    generic
}

/// The processors among `codes` that would load if only the features
/// differed: the targets that match the GPU's processor but not its modes
/// (the finding then says which mode to change).
pub fn near_misses<'a>(codes: &'a [TargetId], gpu: &TargetId) -> Vec<&'a TargetId> {
    codes
        .iter()
        .filter(|c| c.processor == gpu.processor && !loads_on(c, gpu))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> TargetId {
        TargetId::parse(s).unwrap()
    }

    #[test]
    fn the_runtime_rule_table() {
        // (code object, GPU, loads)
        let cases = [
            ("gfx90a", "gfx90a:sramecc+:xnack-", true),
            ("gfx90a:xnack-", "gfx90a:sramecc+:xnack-", true),
            ("gfx90a:xnack+", "gfx90a:sramecc+:xnack-", false),
            ("gfx90a:sramecc-", "gfx90a:sramecc+:xnack-", false),
            ("gfx90a:sramecc+:xnack-", "gfx90a:sramecc+:xnack-", true),
            ("gfx908", "gfx90a:sramecc+:xnack-", false),
            ("gfx1030", "gfx1030", true),
            ("gfx1030", "gfx1031", false),
            ("gfx11-generic", "gfx1103", true),
            ("gfx11-generic", "gfx1030", false),
            ("gfx9-4-generic:xnack-", "gfx942:sramecc+:xnack-", true),
            ("gfx9-4-generic:xnack+", "gfx942:sramecc+:xnack-", false),
            ("gfx9-generic", "gfx90a:sramecc+:xnack-", false),
        ];
        for (code, gpu, want) in cases {
            assert_eq!(loads_on(&t(code), &t(gpu)), want, "{code} on {gpu}");
        }
    }

    #[test]
    fn a_specific_object_is_picked_before_a_generic_one() {
        let codes = [t("gfx11-generic"), t("gfx1100")];
        assert_eq!(pick(&codes, &t("gfx1100")), Some(&codes[1]));
        assert_eq!(pick(&codes, &t("gfx1101")), Some(&codes[0]));
        assert_eq!(pick(&codes, &t("gfx942:sramecc+:xnack-")), None);
        let codes = [t("gfx90a:xnack+"), t("gfx908")];
        assert_eq!(
            near_misses(&codes, &t("gfx90a:sramecc+:xnack-")),
            vec![&codes[0]]
        );
    }

    fn host(s: &str, per_process: bool) -> HostTarget {
        HostTarget {
            target: t(s),
            xnack_per_process: per_process,
        }
    }

    fn env(pairs: &[&str]) -> AmdEnv {
        AmdEnv::from_env(&Env::from_entries(pairs))
    }

    #[test]
    fn the_container_env_changes_the_target() {
        // (host target, per process, env, effective target, overridden from)
        type Case<'a> = (&'a str, bool, &'a [&'a str], &'a str, Option<&'a str>);
        let cases: &[Case] = &[
            (
                "gfx90a:sramecc+:xnack-",
                true,
                &[],
                "gfx90a:sramecc+:xnack-",
                None,
            ),
            (
                "gfx90a:sramecc+:xnack-",
                true,
                &["HSA_XNACK=1"],
                "gfx90a:sramecc+:xnack+",
                None,
            ),
            (
                "gfx90a:sramecc+:xnack+",
                true,
                &["HSA_XNACK=0"],
                "gfx90a:sramecc+:xnack-",
                None,
            ),
            // Only "1" and "0" count.
            (
                "gfx90a:sramecc+:xnack-",
                true,
                &["HSA_XNACK=yes"],
                "gfx90a:sramecc+:xnack-",
                None,
            ),
            // gfx908 cannot switch per process: the boot-time mode stays.
            (
                "gfx908:sramecc+:xnack-",
                false,
                &["HSA_XNACK=1"],
                "gfx908:sramecc+:xnack-",
                None,
            ),
            (
                "gfx942:sramecc+:xnack-",
                true,
                &["HSA_ENABLE_SRAMECC=0"],
                "gfx942:sramecc-:xnack-",
                None,
            ),
            (
                "gfx1101",
                false,
                &["HSA_OVERRIDE_GFX_VERSION=11.0.0"],
                "gfx1100",
                Some("gfx1101"),
            ),
            (
                "gfx1030",
                false,
                &["HSA_OVERRIDE_GFX_VERSION=10.3.0"],
                "gfx1030",
                None,
            ),
            // Onto a processor with features the host's lacks: off.
            (
                "gfx1100",
                false,
                &["HSA_OVERRIDE_GFX_VERSION=9.0.6"],
                "gfx906:sramecc-:xnack-",
                Some("gfx1100"),
            ),
            ("gfx1100", false, &["HSA_XNACK=1"], "gfx1100", None),
        ];
        for (h, pp, e, want, from) in cases {
            let got = effective_target(&host(h, *pp), &env(e)).unwrap();
            assert_eq!(got.target.to_string(), *want, "{h} {e:?}");
            assert_eq!(got.overridden_from.as_deref(), *from, "{h} {e:?}");
            assert_eq!(got.uncertain, None);
        }
        assert_eq!(
            effective_target(
                &host("gfx1100", false),
                &env(&["HSA_OVERRIDE_GFX_VERSION=11"])
            ),
            Err(EnvError::InvalidOverride("11".into()))
        );
        let e = effective_target(
            &host("gfx1100", false),
            &env(&["HSA_OVERRIDE_GFX_VERSION_1=10.3.0"]),
        )
        .unwrap();
        assert!(e.uncertain.unwrap().contains("HSA_OVERRIDE_GFX_VERSION_1"));
    }
}
