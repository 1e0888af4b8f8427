//! Judges scanned libraries against the visible GPUs, as the CUDA driver
//! would pick code for them, and words the `kernel-image` findings. Pure:
//! no I/O, table-tested. `fit` picks the code a device runs (the
//! driver's rules); `findings` turns that into findings a person can act
//! on.

use crate::core::arch::{Arch, Kind};
use crate::core::policy::Enforcement;
use serde::{Deserialize, Serialize};

mod findings;
mod fit;

pub use findings::{assess, assess_on_host};
pub use fit::{judge, CodeFit};

/// The most architectures named in one message.
const MAX_ARCHS_SHOWN: usize = 16;

/// One distinct image kind of a library, what the judgement needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Image {
    pub kind: Kind,
    pub arch: Arch,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ptx_isa: Option<(u16, u16)>,
}

/// What a library holds: its distinct images, or why it could not be read.
pub type Outcome = Result<Vec<Image>, String>;

/// One library found in the rootfs and what it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Library {
    /// The path inside the rootfs, as matched (e.g. `usr/lib/libfoo.so.1`).
    pub path: String,
    pub outcome: Outcome,
}

/// Everything the I/O side found for one container.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scanned {
    pub libraries: Vec<Library>,
    /// Why the scan stopped early (a budget), if it did.
    pub incomplete: Option<String>,
    /// Libraries matched but not judged because a budget ran out, in scan
    /// order (bounded: see `not_scanned_total`).
    pub not_scanned: Vec<String>,
    /// How many matched libraries were not judged in all (0: as many as
    /// `not_scanned` lists).
    pub not_scanned_total: usize,
    /// Bytes the scan read from the libraries (headers; what `max_bytes`
    /// counts), retried attempts included.
    pub bytes_read: u64,
    /// `kernel_image.on_incomplete` of the config the scan ran under, so
    /// whoever judges this scan applies the same policy to what it left.
    pub on_incomplete: Enforcement,
    /// The rootfs could not be opened at all.
    pub rootfs_error: Option<String>,
    /// The AMD side of the libraries that have any: their code objects and
    /// Tensile files (a library's read errors are in `libraries`).
    pub amd: Vec<crate::core::amd::AmdLibrary>,
    /// The ROCm user space the image ships, when one was found.
    pub rocm: Option<crate::core::amd::RocmUserSpace>,
}

#[cfg(test)]
mod test_images {
    use super::*;
    use crate::core::arch::Variant;

    pub fn sass(n: u32, v: Variant) -> Image {
        Image {
            kind: Kind::Sass,
            arch: Arch::new(n, v),
            ptx_isa: None,
        }
    }
    pub fn ptx(n: u32, isa: (u16, u16)) -> Image {
        Image {
            kind: Kind::Ptx,
            arch: Arch::new(n, Variant::Plain),
            ptx_isa: Some(isa),
        }
    }
}
