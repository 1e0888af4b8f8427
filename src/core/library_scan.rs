//! What the libraries scan found in a rootfs (scan::ldso), as data: the
//! Decision JSON's `libraries` object (docs/interfaces.md, "Container
//! content"). The judgement of it is core::libraries.

use serde::{Deserialize, Serialize};

/// How a missing library was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RequestKind {
    #[serde(rename = "DT_NEEDED")]
    Needed,
    #[serde(rename = "dlopen")]
    Dlopen,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A library the loader will not find (or will refuse).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Missing {
    pub name: String,
    /// The object that needs it, relative to the rootfs.
    pub needed_by: String,
    pub via: RequestKind,
    /// The objects from the one the program loads to `needed_by`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<String>,
    /// The loader's error when a file was found but refused ("invalid ELF
    /// header", "wrong ELF class: ELFCLASS32"); None: not found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Only some uses load it (a dlopen, an optional plugin's dependency).
    #[serde(default, skip_serializing_if = "is_false")]
    pub optional: bool,
    /// When the program takes that path (dlopen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// An NVIDIA driver library the runtime injects only with this driver
    /// capability, which the container does not ask for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability: Option<String>,
    /// A file of that name the image has outside the loader's search
    /// (relative to the rootfs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elsewhere: Option<String>,
}

/// A CUDA runtime the image ships.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaRuntime {
    /// Relative to the rootfs.
    pub path: String,
    /// `13.5`, `12.4.127`, or the major alone when nothing says more.
    pub version: String,
    /// The driver its major needs (minor-version compatibility).
    pub min_driver: Option<String>,
    /// The driver its own toolkit release needs, when the table has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toolkit_driver: Option<String>,
    /// Where the version was read ("file name", "pip nvidia-cuda-runtime
    /// 13.5.37", "usr/local/cuda-12.4/version.json").
    pub source: String,
}

/// The libraries scan of one rootfs (the Decision JSON's `libraries`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibraryScan {
    pub missing: Vec<Missing>,
    pub cuda_runtimes: Vec<CudaRuntime>,
    /// Objects judged as a program loads them.
    #[serde(default)]
    pub judged: u64,
    /// Files not judged (bounded list) and how many in all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_judged: Vec<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub not_judged_total: u64,
    /// Why the scan stopped before the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
    /// The rootfs could not be read at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
