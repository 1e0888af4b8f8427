//! AMD GPUs (ROCm), the pure part: target IDs and the rule the HIP runtime
//! loads code objects by, the `kernel-image` finding for an AMD GPU, and
//! the image's ROCm user space against the host's amdgpu driver.
//!
//! - [`target`]: LLVM target IDs (`gfx942:sramecc+:xnack-`), processors of
//!   KFD's `gfx_target_version`, `HSA_OVERRIDE_GFX_VERSION`;
//! - [`fit`]: a GPU's target in one container (its env applied) and the
//!   runtime's compatibility rule;
//! - [`code`]: what a scan found (code objects, Tensile files, ROCm);
//! - [`findings`]: the kernel-image finding; [`rocm`]: AMD's support
//!   matrix and the `rocm` finding;
//! - [`nodes`]: the host's `/dev/kfd` and render nodes, judged for `doctor`;
//! - [`visible`]: which AMD GPUs a container gets (its findings on a host
//!   are core::amd_judge's).

pub mod code;
pub mod findings;
pub mod fit;
pub mod nodes;
pub mod rocm;
pub mod target;
pub mod visible;

pub use code::{AmdCode, AmdLibrary, RocmSource, RocmUserSpace, Tensile};
pub use findings::{kernel_image_finding, AmdGpuRef};
pub use fit::{effective_target, loads_on, pick, AmdEnv, Effective, EnvError, HostTarget};
pub use target::{Feature, TargetId};
