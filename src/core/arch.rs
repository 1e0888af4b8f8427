//! GPU architectures as fat binaries record them, and the rule the CUDA
//! driver uses to pick code for a device.
//!
//! Everything here is pure data and arithmetic, table-tested below.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What an embedded image holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Machine code (a cubin, fatbin entry kind 2).
    Sass,
    /// PTX the driver can JIT-compile (fatbin entry kind 1).
    Ptx,
}

/// The suffix nvcc puts on an architecture (`sm_90a`, `sm_100f`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// `sm_XY`: runs on X.z for z >= Y.
    Plain,
    /// `sm_XYa`: architecture-specific features, runs on exactly X.Y.
    Arch,
    /// `sm_XYf`: family-specific features, runs on X.z for z >= Y.
    Family,
}

/// An architecture number as the fatbin entry header stores it: 80 for
/// sm_80, 100 for sm_100, 121 for sm_121. The last digit is the minor
/// compute capability, the rest the major (LLVM NVPTX.td encodes it the same
/// way: "Arch := X * 10 + Y").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Arch {
    pub number: u32,
    pub variant: Variant,
}

impl Arch {
    pub fn new(number: u32, variant: Variant) -> Arch {
        Arch { number, variant }
    }

    pub fn major(self) -> u32 {
        self.number / 10
    }

    pub fn minor(self) -> u32 {
        self.number % 10
    }

    fn suffix(self) -> &'static str {
        match self.variant {
            Variant::Plain => "",
            Variant::Arch => "a",
            Variant::Family => "f",
        }
    }

    /// `sm_90a`: how nvcc spells a SASS target (docs/interfaces.md, "`gpu-guard scan`").
    pub fn sass_name(self) -> String {
        format!("sm_{}{}", self.number, self.suffix())
    }

    /// `compute_90a`: how nvcc spells a PTX (virtual) target.
    pub fn ptx_name(self) -> String {
        format!("compute_{}{}", self.number, self.suffix())
    }

    pub fn name(self, kind: Kind) -> String {
        match kind {
            Kind::Sass => self.sass_name(),
            Kind::Ptx => self.ptx_name(),
        }
    }
}

/// A device's compute capability `major.minor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cc {
    pub major: u32,
    pub minor: u32,
}

impl Cc {
    pub fn new(major: u32, minor: u32) -> Cc {
        Cc { major, minor }
    }

    /// Parses `8.6` as the host facts carry it. The minor must be one digit,
    /// as in every compute capability NVIDIA has shipped (sm_XY encodes it in
    /// one decimal digit).
    pub fn parse(s: &str) -> Option<Cc> {
        let (a, b) = s.trim().split_once('.')?;
        if a.is_empty() || b.len() != 1 || !a.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let major: u32 = a.parse().ok()?;
        let minor: u32 = b.parse().ok()?;
        if major == 0 || major > 99 {
            return None;
        }
        Some(Cc { major, minor })
    }

    /// The architecture number (`sm_XY` without suffix) of this capability.
    pub fn arch_number(self) -> u32 {
        self.major * 10 + self.minor
    }

    pub fn sm(self) -> String {
        format!("sm_{}", self.arch_number())
    }
}

impl fmt::Display for Cc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Compute capabilities of Tegra (Jetson/DRIVE) integrated GPUs: TK1 3.2,
/// TX1/Nano 5.3, TX2 6.2, Xavier 7.2, Orin 8.7, Thor 10.1 (renamed 11.0 in
/// CUDA 13.0). Sources: NVIDIA "CUDA GPU Compute Capability" and "Legacy CUDA
/// GPU Compute Capability" pages (Jetson column).
const TEGRA: &[(u32, u32)] = &[(3, 2), (5, 3), (6, 2), (7, 2), (8, 7), (10, 1), (11, 0)];

fn is_tegra(major: u32, minor: u32) -> bool {
    TEGRA.contains(&(major, minor))
}

/// Does machine code for `arch` run on a device of capability `cc`?
///
/// CUDA C++ Programming Guide, "Binary Compatibility": a cubin for X.y runs
/// on X.z with z >= y; binary compatibility does not hold for Tegra, nor
/// between Tegra and desktop GPUs, so those need an exact match. The
/// architecture-specific `a` variants run only on exactly X.y; the family
/// `f` variants on the same major with an equal or higher minor (LLVM
/// NVPTX.td: "sm_100f ... compatible within same family"; family = major).
pub fn sass_runs_on(arch: Arch, cc: Cc) -> bool {
    let exact = arch.major() == cc.major && arch.minor() == cc.minor;
    match arch.variant {
        Variant::Arch => exact,
        Variant::Plain | Variant::Family => {
            if is_tegra(cc.major, cc.minor) || is_tegra(arch.major(), arch.minor()) {
                exact
            } else {
                arch.major() == cc.major && cc.minor >= arch.minor()
            }
        }
    }
}

/// Can the driver JIT-compile PTX for `arch` on a device of capability `cc`
/// (ignoring the PTX ISA version, see [`ptx_isa_supported`])?
///
/// Plain PTX `compute_XY` compiles for any device of capability >= X.Y.
/// `compute_XYa` PTX uses architecture-specific features and compiles only
/// for X.Y; `compute_XYf` only within the family, same major and a minor at
/// least Y (LLVM NVPTX.td: 'a' variants "incompatible across architectures",
/// 'f' variants "compatible within same family").
pub fn ptx_jits_on(arch: Arch, cc: Cc) -> bool {
    match arch.variant {
        Variant::Plain => (cc.major, cc.minor) >= (arch.major(), arch.minor()),
        Variant::Arch => arch.major() == cc.major && arch.minor() == cc.minor,
        Variant::Family => arch.major() == cc.major && cc.minor >= arch.minor(),
    }
}

/// A `(major, minor)` version pair.
type MajorMinor = (u16, u16);

/// PTX ISA version -> the CUDA release that introduced it, so the first
/// driver (by the CUDA version it reports) that can JIT it. Source: PTX ISA
/// "Release Notes" (PTX release history), as NVIDIA's cuda-python keeps it
/// (cuda/bindings/utils/_ptx_utils.py, `_ptx_to_cuda`), up to 9.1/13.1;
/// 9.4 = CUDA 13.4 and 9.5 = CUDA 13.5 from those releases' notes, and
/// nvcc 13.5 writes `.version 9.5` (checked with the nvidia-cuda-nvcc wheel);
/// 9.2 and 9.3 follow the same one-to-one 13.x numbering.
/// A driver too old for the ISA fails with CUDA_ERROR_UNSUPPORTED_PTX_VERSION.
pub(crate) const PTX_ISA_TO_CUDA: &[(MajorMinor, MajorMinor)] = &[
    ((1, 0), (1, 0)),
    ((1, 1), (1, 1)),
    ((1, 2), (2, 0)),
    ((1, 3), (2, 1)),
    ((1, 4), (2, 2)),
    ((2, 0), (3, 0)),
    ((2, 1), (3, 1)),
    ((2, 2), (3, 2)),
    ((2, 3), (4, 0)),
    ((3, 0), (4, 1)),
    ((3, 1), (5, 0)),
    ((3, 2), (5, 5)),
    ((4, 0), (6, 0)),
    ((4, 1), (6, 5)),
    ((4, 2), (7, 0)),
    ((4, 3), (7, 5)),
    ((5, 0), (8, 0)),
    ((6, 0), (9, 0)),
    ((6, 1), (9, 1)),
    ((6, 2), (9, 2)),
    ((6, 3), (10, 0)),
    ((6, 4), (10, 1)),
    ((6, 5), (10, 2)),
    ((7, 0), (11, 0)),
    ((7, 1), (11, 1)),
    ((7, 2), (11, 2)),
    ((7, 3), (11, 3)),
    ((7, 4), (11, 4)),
    ((7, 5), (11, 5)),
    ((7, 6), (11, 6)),
    ((7, 7), (11, 7)),
    ((7, 8), (11, 8)),
    ((8, 0), (12, 0)),
    ((8, 1), (12, 1)),
    ((8, 2), (12, 2)),
    ((8, 3), (12, 3)),
    ((8, 4), (12, 4)),
    ((8, 5), (12, 5)),
    ((8, 6), (12, 7)),
    ((8, 7), (12, 8)),
    ((8, 8), (12, 9)),
    ((9, 0), (13, 0)),
    ((9, 1), (13, 1)),
    ((9, 2), (13, 2)),
    ((9, 3), (13, 3)),
    ((9, 4), (13, 4)),
    ((9, 5), (13, 5)),
];

/// What the driver needs to JIT a PTX ISA version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IsaNeed {
    /// The CUDA version that introduced it.
    Cuda(u16, u16),
    /// Newer than any version in `PTX_ISA_TO_CUDA`: only a driver newer
    /// than the newest CUDA we know can possibly have it.
    Unknown,
}

pub fn ptx_isa_needs(isa: (u16, u16)) -> IsaNeed {
    if let Some((_, cuda)) = PTX_ISA_TO_CUDA.iter().find(|(i, _)| *i == isa) {
        return IsaNeed::Cuda(cuda.0, cuda.1);
    }
    // An ISA missing between two known ones (8.6's neighbours skip 12.6, for
    // instance) is taken to need the CUDA of the next known ISA above it:
    // conservative, it never claims that JIT works when it may not.
    if let Some((_, cuda)) = PTX_ISA_TO_CUDA.iter().find(|(i, _)| *i > isa) {
        return IsaNeed::Cuda(cuda.0, cuda.1);
    }
    IsaNeed::Unknown
}

/// The newest CUDA version in the table.
fn newest_known_cuda() -> (u16, u16) {
    PTX_ISA_TO_CUDA.last().map(|(_, c)| *c).unwrap_or((0, 0))
}

/// Does a driver reporting CUDA `driver` (`major.minor`, as
/// `nvmlSystemGetCudaDriverVersion`) JIT PTX of ISA `isa`?
pub fn ptx_isa_supported(isa: (u16, u16), driver: (u64, u64)) -> bool {
    match ptx_isa_needs(isa) {
        IsaNeed::Cuda(a, b) => driver >= (a as u64, b as u64),
        IsaNeed::Unknown => {
            let (a, b) = newest_known_cuda();
            driver > (a as u64, b as u64)
        }
    }
}

/// The CUDA line that was the last to build for an architecture NVIDIA's
/// toolkits have since dropped: CUDA 11.0 dropped sm_30/32 (10.2 last),
/// 12.0 dropped sm_35/37 (11.8 last), 13.0 dropped sm_50..sm_72 (12.9 last).
/// Source: the CUDA Toolkit release notes of 11.0, 12.0 and 13.0 (deprecated
/// and dropped architectures).
pub fn last_toolkit_for(cc: Cc) -> Option<&'static str> {
    let n = cc.arch_number();
    if n < 35 {
        Some("10.2")
    } else if n < 50 {
        Some("11.8")
    } else if n < 75 {
        Some("12.9")
    } else {
        None
    }
}

/// The first CUDA release that builds code for a capability, when newer than
/// CUDA 11.0. Source: the CUDA Toolkit release notes of each release
/// ("11.1 sm_86; 11.4 sm_87; 11.8 sm_89, sm_90; 12.8 sm_100/101/120; 12.9
/// sm_103/121; 13.0 sm_110, sm_88").
pub fn first_toolkit_for(cc: Cc) -> Option<&'static str> {
    match cc.arch_number() {
        86 => Some("11.1"),
        87 => Some("11.4"),
        88 => Some("13.0"),
        89 | 90 => Some("11.8"),
        100 | 101 | 120 => Some("12.8"),
        103 | 121 => Some("12.9"),
        110 => Some("13.0"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(n: u32) -> Arch {
        Arch::new(n, Variant::Plain)
    }
    fn aa(n: u32) -> Arch {
        Arch::new(n, Variant::Arch)
    }
    fn af(n: u32) -> Arch {
        Arch::new(n, Variant::Family)
    }
    fn cc(s: &str) -> Cc {
        Cc::parse(s).unwrap()
    }

    #[test]
    fn names() {
        assert_eq!(a(80).sass_name(), "sm_80");
        assert_eq!(aa(90).sass_name(), "sm_90a");
        assert_eq!(af(100).sass_name(), "sm_100f");
        assert_eq!(af(120).ptx_name(), "compute_120f");
        assert_eq!(a(75).ptx_name(), "compute_75");
        assert_eq!(af(103).major(), 10);
        assert_eq!(af(103).minor(), 3);
    }

    #[test]
    fn parses_capabilities() {
        assert_eq!(Cc::parse("8.6"), Some(Cc::new(8, 6)));
        assert_eq!(Cc::parse("12.1"), Some(Cc::new(12, 1)));
        for bad in ["", "8", "8.", ".6", "8.10", "x.1", "0.0", "8.6.1", "-8.6"] {
            assert_eq!(Cc::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn sass_rule_table() {
        // (arch, device, runs)
        let cases = [
            (a(80), "8.0", true),
            (a(80), "8.6", true),
            (a(80), "8.9", true),
            (a(86), "8.0", false),
            (a(80), "9.0", false),
            (a(90), "10.0", false),
            (a(75), "8.0", false),
            (a(100), "10.3", true),
            (a(120), "12.1", true),
            // Tegra: exact only, and never across Tegra/desktop.
            (a(80), "8.7", false),
            (a(87), "8.7", true),
            (a(87), "8.9", false),
            (a(72), "7.5", false),
            (a(110), "11.0", true),
            // arch-specific
            (aa(90), "9.0", true),
            (aa(100), "10.3", false),
            (aa(100), "10.0", true),
            (aa(120), "12.1", false),
            // family
            (af(100), "10.0", true),
            (af(100), "10.3", true),
            (af(103), "10.0", false),
            (af(120), "12.1", true),
            (af(100), "12.0", false),
            (af(100), "11.0", false),
        ];
        for (arch, dev, want) in cases {
            assert_eq!(
                sass_runs_on(arch, cc(dev)),
                want,
                "{} on {dev}",
                arch.sass_name()
            );
        }
    }

    #[test]
    fn ptx_rule_table() {
        let cases = [
            (a(70), "7.0", true),
            (a(70), "8.0", true),
            (a(70), "12.0", true),
            (a(80), "7.5", false),
            (a(90), "8.9", false),
            (a(80), "8.7", true),
            (aa(90), "9.0", true),
            (aa(90), "10.0", false),
            (af(100), "10.3", true),
            (af(100), "12.0", false),
            (af(103), "10.0", false),
        ];
        for (arch, dev, want) in cases {
            assert_eq!(
                ptx_jits_on(arch, cc(dev)),
                want,
                "{} on {dev}",
                arch.ptx_name()
            );
        }
    }

    #[test]
    fn ptx_isa_against_driver() {
        let cases = [
            ((8, 5), (12, 5), true),
            ((8, 5), (12, 6), true),
            ((8, 6), (12, 6), false),
            ((8, 7), (12, 8), true),
            ((8, 8), (12, 8), false),
            ((9, 0), (12, 9), false),
            ((9, 0), (13, 0), true),
            ((7, 0), (11, 0), true),
            ((7, 8), (11, 7), false),
            ((9, 5), (13, 4), false),
            ((9, 5), (13, 5), true),
            // Unknown newer ISA: no driver up to the newest known CUDA has it.
            ((9, 9), (13, 5), false),
            ((9, 9), (14, 0), true),
        ];
        for (isa, drv, want) in cases {
            assert_eq!(ptx_isa_supported(isa, drv), want, "{isa:?} on {drv:?}");
        }
        assert_eq!(ptx_isa_needs((8, 8)), IsaNeed::Cuda(12, 9));
        assert_eq!(ptx_isa_needs((10, 0)), IsaNeed::Unknown);
        // The table is sorted (ptx_isa_needs relies on it).
        for w in PTX_ISA_TO_CUDA.windows(2) {
            assert!(w[0].0 < w[1].0 && w[0].1 <= w[1].1, "{w:?}");
        }
    }

    #[test]
    fn toolkit_lines() {
        assert_eq!(last_toolkit_for(cc("3.7")), Some("11.8"));
        assert_eq!(last_toolkit_for(cc("3.0")), Some("10.2"));
        assert_eq!(last_toolkit_for(cc("6.1")), Some("12.9"));
        assert_eq!(last_toolkit_for(cc("7.0")), Some("12.9"));
        assert_eq!(last_toolkit_for(cc("7.5")), None);
        assert_eq!(first_toolkit_for(cc("10.0")), Some("12.8"));
        assert_eq!(first_toolkit_for(cc("9.0")), Some("11.8"));
        assert_eq!(first_toolkit_for(cc("8.0")), None);
    }
}
