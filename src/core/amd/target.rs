//! LLVM target IDs for AMD GPUs: the processor (`gfx90a`) and the
//! `sramecc`/`xnack` feature settings a code object was built for, or a GPU
//! runs with.
//!
//! Spelling (clang/docs/ClangOffloadBundler.rst, "Target ID"):
//! `<processor>(:<feature>(+|-))*`, a feature left out meaning *any*;
//! canonical form lists features alphabetically (`sramecc` before `xnack`).
//! The HIP runtime parses a bundle entry's target ID in exactly that order
//! and rejects anything else (ROCm CLR hipamd/src/hip_code_object.cpp,
//! `getTargetIDValue`: it consumes `:sramecc`, then `:xnack`, and the code
//! object is incompatible when text is left), so [`TargetId::parse`] does
//! the same.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One target feature's setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Feature {
    /// Left out of the target ID: the code runs with the feature on or off.
    Any,
    /// `+`
    On,
    /// `-`
    Off,
}

impl Feature {
    fn suffix(self) -> &'static str {
        match self {
            Feature::Any => "",
            Feature::On => "+",
            Feature::Off => "-",
        }
    }

    /// `+` on, `-` off: how a GPU's mode is written.
    pub fn from_on(on: bool) -> Feature {
        if on {
            Feature::On
        } else {
            Feature::Off
        }
    }
}

/// A target ID: processor and feature settings.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TargetId {
    /// `gfx90a`, `gfx1100`, or a generic processor (`gfx9-4-generic`).
    pub processor: String,
    pub sramecc: Feature,
    pub xnack: Feature,
}

/// The longest processor name accepted (`gfx10-3-generic` has 15 bytes).
const MAX_PROCESSOR: usize = 32;

impl TargetId {
    pub fn new(processor: &str, sramecc: Feature, xnack: Feature) -> TargetId {
        TargetId {
            processor: processor.to_string(),
            sramecc,
            xnack,
        }
    }

    /// Parses a target ID as the HIP runtime does: the processor, then
    /// `:sramecc±`, then `:xnack±`, nothing else. None for anything the
    /// runtime would not load (a feature out of order or unknown, an empty
    /// or oversized processor name, a character outside `[0-9a-z-]`).
    pub fn parse(s: &str) -> Option<TargetId> {
        let (processor, mut rest) = match s.find(':') {
            Some(i) => (&s[..i], &s[i..]),
            None => (s, ""),
        };
        if !valid_processor(processor) {
            return None;
        }
        let mut take = |name: &str| -> Option<Feature> {
            let Some(after) = rest.strip_prefix(name) else {
                return Some(Feature::Any);
            };
            let f = match after.as_bytes().first() {
                Some(b'+') => Feature::On,
                Some(b'-') => Feature::Off,
                _ => return None,
            };
            rest = &after[1..];
            Some(f)
        };
        let sramecc = take(":sramecc")?;
        let xnack = take(":xnack")?;
        if !rest.is_empty() {
            return None;
        }
        Some(TargetId::new(processor, sramecc, xnack))
    }

    /// Is the processor one of LLVM's generic targets (`gfx11-generic`)?
    pub fn is_generic(&self) -> bool {
        self.processor.ends_with("-generic")
    }
}

fn valid_processor(p: &str) -> bool {
    p.len() > 3
        && p.len() <= MAX_PROCESSOR
        && p.starts_with("gfx")
        && p.bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-')
}

impl fmt::Display for TargetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.processor)?;
        if self.sramecc != Feature::Any {
            write!(f, ":sramecc{}", self.sramecc.suffix())?;
        }
        if self.xnack != Feature::Any {
            write!(f, ":xnack{}", self.xnack.suffix())?;
        }
        Ok(())
    }
}

/// The processor name of a `gfx_target_version` as KFD reports it
/// (major*10000 + minor*100 + stepping; ROCR-Runtime libhsakmt
/// topology.c, HSA_GET_GFX_VERSION_*): `gfx{major}{minor:x}{stepping:x}`,
/// so 90010 is gfx90a and 110502 is gfx1152. None for 0 (a CPU node) or
/// a minor or stepping that does not fit one hex digit.
pub fn processor_of_gfx_version(v: u32) -> Option<String> {
    let (major, minor, step) = (v / 10000, (v / 100) % 100, v % 100);
    if major == 0 || minor > 15 || step > 15 {
        return None;
    }
    Some(format!("gfx{major}{minor:x}{step:x}"))
}

/// Which features a processor's target ID can carry: (sramecc, xnack).
/// ROCR-Runtime core/runtime/isa.cpp registers each processor with its
/// features as `any` or `unsupported`; gfx950 (newer than that registry) as
/// LLVM AMDGPUUsage lists it (sramecc and xnack). A processor not listed
/// carries neither, as ROCR's registry does for gfx10.3 and later.
pub fn supported_features(processor: &str) -> (bool, bool) {
    match processor {
        "gfx906" | "gfx908" | "gfx90a" | "gfx940" | "gfx941" | "gfx942" | "gfx950" => (true, true),
        "gfx801" | "gfx810" | "gfx900" | "gfx902" | "gfx904" | "gfx909" | "gfx90c" | "gfx1010"
        | "gfx1011" | "gfx1012" | "gfx1013" => (false, true),
        _ => (false, false),
    }
}

/// The generic target a processor's code objects may also come from: ROCm
/// CLR hipamd/src/hiprtc/hip_comgr_helper.cpp, `GenericTargetMapping`
/// (the HIP runtime loads a `gfx11-generic` code object on a gfx1100 only
/// through this table).
pub fn generic_of(processor: &str) -> Option<&'static str> {
    Some(match processor {
        "gfx900" | "gfx902" | "gfx904" | "gfx906" | "gfx909" | "gfx90c" => "gfx9-generic",
        "gfx942" | "gfx950" => "gfx9-4-generic",
        "gfx1010" | "gfx1011" | "gfx1012" | "gfx1013" => "gfx10-1-generic",
        "gfx1030" | "gfx1031" | "gfx1032" | "gfx1033" | "gfx1034" | "gfx1035" | "gfx1036" => {
            "gfx10-3-generic"
        }
        "gfx1100" | "gfx1101" | "gfx1102" | "gfx1103" | "gfx1150" | "gfx1151" => "gfx11-generic",
        "gfx1200" | "gfx1201" => "gfx12-generic",
        _ => return None,
    })
}

/// `HSA_OVERRIDE_GFX_VERSION` as libhsakmt reads it (ROCR-Runtime
/// libhsakmt/src/topology.c, `topology_sysfs_get_node_props`): exactly
/// `major.minor.stepping` in decimal (`sscanf("%u.%u.%u%c")` must match
/// three numbers and nothing after), major at most 63, minor and stepping
/// at most 255. The processor is then named from those numbers as from
/// `gfx_target_version` ("10.3.0" is gfx1030, "9.0.10" is gfx90a).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GfxOverride {
    /// A valid value, and the processor it names.
    Processor(String),
    /// libhsakmt refuses the value and the runtime fails to start
    /// ("HSA_OVERRIDE_GFX_VERSION ... is invalid").
    Invalid(String),
}

pub fn parse_gfx_override(value: &str) -> GfxOverride {
    let invalid = || GfxOverride::Invalid(value.to_string());
    let parts: Vec<&str> = value.split('.').collect();
    if parts.len() != 3 {
        return invalid();
    }
    let mut n = [0u32; 3];
    for (i, p) in parts.iter().enumerate() {
        // %u takes leading whitespace and a sign; images spell plain digits.
        if p.is_empty() || p.len() > 9 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return invalid();
        }
        n[i] = p.parse().unwrap_or(u32::MAX);
    }
    if n[0] > 63 || n[1] > 255 || n[2] > 255 || n[0] == 0 {
        return invalid();
    }
    // libhsakmt names the ISA from the numbers; minor and stepping print
    // as hex (one digit each for every processor there is).
    GfxOverride::Processor(format!("gfx{}{:x}{:x}", n[0], n[1], n[2]))
}

/// HSA_CAP_SRAM_EDCSUPPORTED (linux include/uapi/linux/kfd_sysfs.h): SRAM
/// ECC is on for the node.
pub const HSA_CAP_SRAM_EDCSUPPORTED: u64 = 0x0400_0000;

/// Whether retry (XNACK) is off on a processor: the parameter, or the
/// driver's default (amdgpu_gmc.c, `amdgpu_gmc_noretry_set`: on for the
/// dGPUs gfx900, gfx906, gfx908, gfx90a, gfx94x, gfx950 and GFX10+, off
/// for the GFX9 APUs and Vega12).
fn noretry(processor: &str, major: u32, param: i64) -> bool {
    if param >= 0 {
        return param != 0;
    }
    major >= 10
        || matches!(
            processor,
            "gfx900" | "gfx906" | "gfx908" | "gfx90a" | "gfx940" | "gfx941" | "gfx942" | "gfx950"
        )
}

/// Does the GPU switch XNACK per process (KFD_SUPPORT_XNACK_PER_PROCESS:
/// GC 9.4.2, 9.4.3, 9.4.4, 9.5.0)?
pub fn xnack_per_process(processor: &str) -> bool {
    matches!(
        processor,
        "gfx90a" | "gfx940" | "gfx941" | "gfx942" | "gfx950"
    )
}

/// The target ID of a GPU node as the kernel sets its modes (linux
/// drivers/gpu/drm/amd/amdkfd), from its KFD `capability` and amdgpu's
/// `noretry` parameter (-1: the driver's default); host::kfd reads both.
pub fn target_of(processor: &str, major: u32, capability: u64, noretry_param: i64) -> TargetId {
    let (has_sramecc, has_xnack) = supported_features(processor);
    let sramecc = if has_sramecc {
        Feature::from_on(capability & HSA_CAP_SRAM_EDCSUPPORTED != 0)
    } else {
        Feature::Any
    };
    // kfd_process_xnack_mode: GFX10+ never; GFX9 unless noretry; older
    // GPUs are not considered (on).
    let xnack = if !has_xnack {
        Feature::Any
    } else if major >= 10 {
        Feature::Off
    } else if major == 9 {
        Feature::from_on(!noretry(processor, major, noretry_param))
    } else {
        Feature::On
    };
    TargetId::new(processor, sramecc, xnack)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_ids_parse_as_the_runtime_does() {
        type Case<'a> = (&'a str, Option<(&'a str, Feature, Feature)>);
        let cases: &[Case] = &[
            ("gfx90a", Some(("gfx90a", Feature::Any, Feature::Any))),
            (
                "gfx90a:xnack-",
                Some(("gfx90a", Feature::Any, Feature::Off)),
            ),
            (
                "gfx942:sramecc+:xnack-",
                Some(("gfx942", Feature::On, Feature::Off)),
            ),
            (
                "gfx906:sramecc-",
                Some(("gfx906", Feature::Off, Feature::Any)),
            ),
            (
                "gfx9-4-generic:xnack+",
                Some(("gfx9-4-generic", Feature::Any, Feature::On)),
            ),
            // Out of canonical order: CLR leaves text and rejects it.
            ("gfx906:xnack-:sramecc+", None),
            ("gfx906:xnack", None),
            ("gfx906:foo+", None),
            ("gfx", None),
            ("sm_90", None),
            ("gfx90a:xnack-:xnack-", None),
            ("GFX90A", None),
        ];
        for (s, want) in cases {
            let got = TargetId::parse(s);
            let want = want.map(|(p, a, b)| TargetId::new(p, a, b));
            assert_eq!(got, want, "{s}");
            if let Some(t) = got {
                assert_eq!(t.to_string(), *s, "round trip");
            }
        }
        assert!(TargetId::parse("gfx11-generic").unwrap().is_generic());
    }

    #[test]
    fn gfx_target_versions_name_processors() {
        for (v, p) in [
            (90010, Some("gfx90a")),
            (90402, Some("gfx942")),
            (110502, Some("gfx1152")),
            (110000, Some("gfx1100")),
            (100300, Some("gfx1030")),
            (90012, Some("gfx90c")),
            (0, None),
            (91600, None),
        ] {
            assert_eq!(processor_of_gfx_version(v).as_deref(), p, "{v}");
        }
    }

    #[test]
    fn gfx_overrides_are_read_as_libhsakmt_reads_them() {
        let p = |s: &str| GfxOverride::Processor(s.into());
        assert_eq!(parse_gfx_override("10.3.0"), p("gfx1030"));
        assert_eq!(parse_gfx_override("11.0.0"), p("gfx1100"));
        assert_eq!(parse_gfx_override("9.0.10"), p("gfx90a"));
        assert_eq!(parse_gfx_override("9.4.2"), p("gfx942"));
        for bad in [
            "10.3", "10.3.0.1", "10.3.0 ", "a.b.c", "64.0.0", "9.256.0", "", "0.0.0",
        ] {
            assert!(
                matches!(parse_gfx_override(bad), GfxOverride::Invalid(_)),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn features_and_generic_targets() {
        assert_eq!(supported_features("gfx90a"), (true, true));
        assert_eq!(supported_features("gfx900"), (false, true));
        assert_eq!(supported_features("gfx1100"), (false, false));
        assert_eq!(generic_of("gfx1103"), Some("gfx11-generic"));
        assert_eq!(generic_of("gfx90a"), None);
    }
}
