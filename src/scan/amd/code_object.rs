//! The header of an AMDGPU code object: an ELF file with `e_machine` 224
//! (EM_AMDGPU) whose `e_flags` name the processor and the xnack/sramecc
//! settings it was built for.
//!
//! Layout (llvm/include/llvm/BinaryFormat/ELF.h, "AMDGPU specific
//! e_flags"; llvm/docs/AMDGPUUsage.rst, "ELF Header"): `EI_OSABI` 64
//! (ELFOSABI_AMDGPU_HSA), `EI_ABIVERSION` 1..4 for code object v3..v6 (v2,
//! 0, names its processor in a note only: its bundle entry ID is used);
//! `e_flags & 0xff` the processor (EF_AMDGPU_MACH_*); v3: bit 0x100 xnack on,
//! 0x200 sramecc on; v4 and later: 0x300 the xnack setting and 0xc00 the
//! sramecc setting (unsupported, any, off, on); v6: bits 24-31 the generic
//! version of a generic target.

use crate::core::amd::{Feature, TargetId};
use crate::scan::read::{u16_at, u32_at};

pub const EM_AMDGPU: u16 = 224;
const ELFOSABI_AMDGPU_HSA: u8 = 64;

/// What a code object's header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeObjectHeader {
    pub target: TargetId,
    /// 3..6.
    pub version: u8,
}

/// EF_AMDGPU_MACH values of AMDGCN processors (ELF.h).
const MACH: &[(u32, &str)] = &[
    (0x020, "gfx600"),
    (0x021, "gfx601"),
    (0x022, "gfx700"),
    (0x023, "gfx701"),
    (0x024, "gfx702"),
    (0x025, "gfx703"),
    (0x026, "gfx704"),
    (0x028, "gfx801"),
    (0x029, "gfx802"),
    (0x02a, "gfx803"),
    (0x02b, "gfx810"),
    (0x02c, "gfx900"),
    (0x02d, "gfx902"),
    (0x02e, "gfx904"),
    (0x02f, "gfx906"),
    (0x030, "gfx908"),
    (0x031, "gfx909"),
    (0x032, "gfx90c"),
    (0x033, "gfx1010"),
    (0x034, "gfx1011"),
    (0x035, "gfx1012"),
    (0x036, "gfx1030"),
    (0x037, "gfx1031"),
    (0x038, "gfx1032"),
    (0x039, "gfx1033"),
    (0x03a, "gfx602"),
    (0x03b, "gfx705"),
    (0x03c, "gfx805"),
    (0x03d, "gfx1035"),
    (0x03e, "gfx1034"),
    (0x03f, "gfx90a"),
    (0x041, "gfx1100"),
    (0x042, "gfx1013"),
    (0x043, "gfx1150"),
    (0x044, "gfx1103"),
    (0x045, "gfx1036"),
    (0x046, "gfx1101"),
    (0x047, "gfx1102"),
    (0x048, "gfx1200"),
    (0x04a, "gfx1151"),
    (0x04c, "gfx942"),
    (0x04e, "gfx1201"),
    (0x04f, "gfx950"),
    (0x051, "gfx9-generic"),
    (0x052, "gfx10-1-generic"),
    (0x053, "gfx10-3-generic"),
    (0x054, "gfx11-generic"),
    (0x055, "gfx1152"),
    (0x058, "gfx1153"),
    (0x059, "gfx12-generic"),
    (0x05f, "gfx9-4-generic"),
];

/// Why 64 bytes are not an AMDGPU code object header.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodeObjectError {
    #[error("not an ELF file")]
    NotElf,
    #[error("not a 64-bit little-endian ELF file")]
    Class,
    #[error("not an AMDGPU code object (e_machine {0})")]
    Machine(u16),
    #[error("not an HSA code object (EI_OSABI {0})")]
    OsAbi(u8),
    #[error("unknown code object version (EI_ABIVERSION {0})")]
    Version(u8),
    #[error("unknown AMDGPU processor (EF_AMDGPU_MACH {0:#x})")]
    Processor(u32),
}

/// Is this the header of an AMDGPU ELF (whatever else it says)?
pub fn is_amdgpu_elf(h: &[u8]) -> bool {
    h.len() >= 20 && h[..4] == crate::scan::elf::ELF_MAGIC && u16_at(h, 18) == EM_AMDGPU
}

/// Reads the first 64 bytes of a code object.
pub fn parse_header(h: &[u8]) -> Result<CodeObjectHeader, CodeObjectError> {
    if h.len() < 4 || h[..4] != crate::scan::elf::ELF_MAGIC {
        return Err(CodeObjectError::NotElf);
    }
    if h.len() < 64 || h[4] != 2 || h[5] != 1 {
        return Err(CodeObjectError::Class);
    }
    let machine = u16_at(h, 18);
    if machine != EM_AMDGPU {
        return Err(CodeObjectError::Machine(machine));
    }
    if h[7] != ELFOSABI_AMDGPU_HSA {
        return Err(CodeObjectError::OsAbi(h[7]));
    }
    let abi = h[8];
    // v2 (EI_ABIVERSION 0) names its processor in a note, not in e_flags.
    if abi == 0 || abi > 4 {
        return Err(CodeObjectError::Version(abi));
    }
    let version = abi + 2;
    let flags = u32_at(h, 48);
    let mach = flags & 0xff;
    let processor = MACH
        .iter()
        .find(|(m, _)| *m == mach)
        .map(|(_, p)| *p)
        .ok_or(CodeObjectError::Processor(mach))?;
    let (sramecc, xnack) = match version {
        // v3 has one "on" bit per feature.
        3 => (on_off(flags & 0x200 != 0), on_off(flags & 0x100 != 0)),
        _ => (
            v4_feature(flags & 0xc00, 0x400),
            v4_feature(flags & 0x300, 0x100),
        ),
    };
    let (has_sramecc, has_xnack) = crate::core::amd::target::supported_features(processor);
    // A v2/v3 object cannot say "any": a feature its processor lacks is left out.
    let keep = |f: Feature, has: bool| if has || version >= 4 { f } else { Feature::Any };
    Ok(CodeObjectHeader {
        target: TargetId::new(
            processor,
            keep(sramecc, has_sramecc),
            keep(xnack, has_xnack),
        ),
        version,
    })
}

fn on_off(on: bool) -> Feature {
    Feature::from_on(on)
}

/// A v4+ two-bit setting (`any` is `unit`, off `2*unit`, on `3*unit`;
/// unsupported leaves the feature out, as *any* does).
fn v4_feature(bits: u32, unit: u32) -> Feature {
    match bits / unit {
        2 => Feature::Off,
        3 => Feature::On,
        _ => Feature::Any,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A 64-byte AMDGPU ELF header.
    pub fn header(abi: u8, flags: u32) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(&crate::scan::elf::ELF_MAGIC);
        h[4] = 2;
        h[5] = 1;
        h[6] = 1;
        h[7] = 64;
        h[8] = abi;
        h[16] = 3;
        h[18..20].copy_from_slice(&EM_AMDGPU.to_le_bytes());
        h[48..52].copy_from_slice(&flags.to_le_bytes());
        h
    }

    #[test]
    fn e_flags_name_processor_and_features() {
        let cases: &[(u8, u32, &str, u8)] = &[
            (2, 0x03f | 0x200, "gfx90a:xnack-", 4),
            (2, 0x03f | 0x300 | 0xc00, "gfx90a:sramecc+:xnack+", 4),
            (3, 0x04c | 0x100 | 0x400, "gfx942", 5),
            (3, 0x041, "gfx1100", 5),
            (4, 0x054 | (1 << 24), "gfx11-generic", 6),
            (1, 0x02f | 0x100, "gfx906:sramecc-:xnack+", 3),
            (1, 0x036, "gfx1030", 3),
        ];
        for (abi, flags, want, version) in cases {
            let got = parse_header(&header(*abi, *flags)).unwrap();
            assert_eq!(got.target.to_string(), *want, "{abi} {flags:#x}");
            assert_eq!(got.version, *version);
        }
    }

    #[test]
    fn other_files_are_told_apart() {
        let mut h = header(2, 0x03f);
        h[18] = 62;
        assert_eq!(parse_header(&h), Err(CodeObjectError::Machine(62)));
        assert!(!is_amdgpu_elf(&h));
        assert_eq!(
            parse_header(&header(9, 0x03f)),
            Err(CodeObjectError::Version(9))
        );
        assert_eq!(
            parse_header(&header(0, 0x03f)),
            Err(CodeObjectError::Version(0))
        );
        assert_eq!(
            parse_header(&header(2, 0x0ff)),
            Err(CodeObjectError::Processor(0xff))
        );
        assert_eq!(parse_header(b"BC\xc0\xde"), Err(CodeObjectError::NotElf));
        let mut h = header(2, 0x03f);
        h[7] = 0;
        assert_eq!(parse_header(&h), Err(CodeObjectError::OsAbi(0)));
        assert!(is_amdgpu_elf(&header(2, 0x03f)));
    }
}
