//! The NVIDIA driver libraries the GPU stack mounts into a GPU container,
//! by driver capability, kept as data.
//!
//! Source: libnvidia-container `src/nvc_info.c` (`utility_libs`,
//! `compute_libs`, `video_libs`, `graphics_libs`, `graphics_libs_glvnd`,
//! `graphics_libs_compat`, `ngx_libs`): each is mounted as the host's
//! `<name>.<driver version>` file, and ldconfig then creates its SONAME
//! link. The capabilities come from `NVIDIA_DRIVER_CAPABILITIES`
//! (comma-separated; `all` is every one; unset or empty is
//! `utility,compute`: nvidia-container-toolkit
//! `internal/config/image/capabilities.go`). A capability brings more
//! library sets than its own name: libnvidia-container `src/options.h`
//! (`container_opts`) maps `video` to `OPT_VIDEO_LIBS|OPT_COMPUTE_LIBS` and
//! `display` to `OPT_DISPLAY|OPT_GRAPHICS_LIBS` (with `OPT_DISPLAY_LIBS` in
//! newer releases, which `match_library_flags` in `src/nvc_info.c` does not
//! read), and `nvc_mount.c` (`mount_files`) mounts a driver library only
//! when `match_library_flags` matches it against those flags
//! ([`library_sets`]). `compat32` mounts only the 32-bit copies, so no
//! 64-bit library. CDI mode also
//! links `libcuda.so` to `libcuda.so.1` (toolkit
//! `internal/discover/symlinks.go`), kept here with the compute libraries.
//! A container that is not given GPUs gets none of them.
//!
//! The SONAME is `<name>.1` for most (`libnvidia-nvvm.so.4`, the GLVND
//! vendor libraries `.0`/`.1`/`.2`); the driver-internal ones carry the
//! full driver version as their SONAME (`Soname::DriverVersion`), so only
//! the driver's own libraries name them.

use std::collections::BTreeSet;

/// How a library's SONAME is spelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Soname {
    /// `<name>.<N>`.
    Major(&'static str),
    /// `<name>.<driver version>`.
    DriverVersion,
}

/// A driver capability (NVIDIA's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    Utility,
    Compute,
    Video,
    Graphics,
    Display,
    Ngx,
    Compat32,
}

impl Capability {
    pub const ALL: [Capability; 7] = [
        Capability::Utility,
        Capability::Compute,
        Capability::Video,
        Capability::Graphics,
        Capability::Display,
        Capability::Ngx,
        Capability::Compat32,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Capability::Utility => "utility",
            Capability::Compute => "compute",
            Capability::Video => "video",
            Capability::Graphics => "graphics",
            Capability::Display => "display",
            Capability::Ngx => "ngx",
            Capability::Compat32 => "compat32",
        }
    }

    fn parse(s: &str) -> Option<Capability> {
        Capability::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// One injected library: its file name up to `.so`, its SONAME, the
/// capability that brings it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverLib {
    /// `libcuda.so`.
    pub name: &'static str,
    pub soname: Soname,
    pub capability: Capability,
}

const fn lib(name: &'static str, soname: Soname, capability: Capability) -> DriverLib {
    DriverLib {
        name,
        soname,
        capability,
    }
}

use Capability::{Compute, Graphics, Ngx, Utility, Video};
use Soname::{DriverVersion as V, Major as M};

/// libnvidia-container src/nvc_info.c, in its order.
pub const DRIVER_LIBS: &[DriverLib] = &[
    lib("libnvidia-ml.so", M("1"), Utility),
    lib("libnvidia-cfg.so", M("1"), Utility),
    lib("libnvidia-nscq.so", V, Utility),
    lib("libcuda.so", M("1"), Compute),
    lib("libcudadebugger.so", M("1"), Compute),
    lib("libnvidia-opencl.so", M("1"), Compute),
    lib("libnvidia-gpucomp.so", V, Compute),
    lib("libnvidia-ptxjitcompiler.so", M("1"), Compute),
    lib("libnvidia-fatbinaryloader.so", V, Compute),
    lib("libnvidia-allocator.so", M("1"), Compute),
    lib("libnvidia-compiler.so", V, Compute),
    lib("libnvidia-pkcs11.so", V, Compute),
    lib("libnvidia-pkcs11-openssl3.so", V, Compute),
    lib("libnvidia-nvvm.so", M("4"), Compute),
    lib("libnvidia-tileiras.so", V, Compute),
    lib("libvdpau_nvidia.so", M("1"), Video),
    lib("libnvidia-encode.so", M("1"), Video),
    lib("libnvidia-opticalflow.so", M("1"), Video),
    lib("libnvcuvid.so", M("1"), Video),
    lib("libnvidia-eglcore.so", V, Graphics),
    lib("libnvidia-glcore.so", V, Graphics),
    lib("libnvidia-tls.so", V, Graphics),
    lib("libnvidia-glsi.so", V, Graphics),
    lib("libnvidia-fbc.so", M("1"), Graphics),
    lib("libnvidia-ifr.so", M("1"), Graphics),
    lib("libnvidia-rtcore.so", V, Graphics),
    lib("libnvoptix.so", M("1"), Graphics),
    lib("libGLX_nvidia.so", M("0"), Graphics),
    lib("libEGL_nvidia.so", M("0"), Graphics),
    lib("libGLESv2_nvidia.so", M("2"), Graphics),
    lib("libGLESv1_CM_nvidia.so", M("1"), Graphics),
    lib("libnvidia-glvkspirv.so", V, Graphics),
    lib("libnvidia-cbl.so", V, Graphics),
    lib("libnvidia-ngx.so", M("1"), Ngx),
];

/// The driver version used for `<name>.<version>` names when the host's is
/// not known (the scan is made once per container, before any host): high,
/// so ldconfig ranks the injected file above an image's older copy, as it
/// ranks the real `<name>.<version>` file.
pub const UNKNOWN_DRIVER: &str = "999.99.99";

impl DriverLib {
    /// The SONAME for a driver version.
    pub fn soname(&self, driver: &str) -> String {
        match self.soname {
            Soname::Major(m) => format!("{}.{m}", self.name),
            Soname::DriverVersion => format!("{}.{driver}", self.name),
        }
    }

    /// The injected file's name.
    pub fn file_name(&self, driver: &str) -> String {
        format!("{}.{driver}", self.name)
    }

    /// Does a `DT_NEEDED` name mean this library (any version)?
    pub fn names(&self, needed: &str) -> bool {
        needed
            .strip_prefix(self.name)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    }
}

/// The capabilities `NVIDIA_DRIVER_CAPABILITIES` asks for (None: unset).
/// Unknown words are ignored, as the toolkit ignores them.
pub fn capabilities(env_value: Option<&str>) -> BTreeSet<Capability> {
    let v = env_value.map(str::trim).unwrap_or("");
    if v.is_empty() {
        return [Capability::Utility, Capability::Compute].into();
    }
    let mut out = BTreeSet::new();
    for word in v.split(',').map(str::trim) {
        if word == "all" {
            return Capability::ALL.into_iter().collect();
        }
        if let Some(c) = Capability::parse(word) {
            out.insert(c);
        }
    }
    out
}

/// The library sets the capabilities bring, as libnvidia-container's
/// `container_opts` (src/options.h) maps each capability to flags:
/// `utility` `OPT_UTILITY_LIBS`, `compute` `OPT_COMPUTE_LIBS`, `video`
/// `OPT_VIDEO_LIBS|OPT_COMPUTE_LIBS`, `graphics` `OPT_GRAPHICS_LIBS`,
/// `display` `OPT_DISPLAY|OPT_GRAPHICS_LIBS`, `ngx` `OPT_NGX_LIBS`,
/// `compat32` `OPT_COMPAT32` (32-bit copies only: no set here). A set is
/// named by the capability whose own libraries it holds.
pub fn library_sets(caps: &BTreeSet<Capability>) -> BTreeSet<Capability> {
    let mut out = BTreeSet::new();
    for c in caps {
        match c {
            Capability::Utility | Capability::Compute | Capability::Graphics | Capability::Ngx => {
                out.insert(*c);
            }
            Capability::Video => {
                out.insert(Capability::Video);
                out.insert(Capability::Compute);
            }
            Capability::Display => {
                out.insert(Capability::Graphics);
            }
            Capability::Compat32 => {}
        }
    }
    out
}

/// The injected libraries for these capabilities: every library of the
/// sets they bring ([`library_sets`]).
pub fn injected(caps: &BTreeSet<Capability>) -> Vec<&'static DriverLib> {
    let sets = library_sets(caps);
    DRIVER_LIBS
        .iter()
        .filter(|l| sets.contains(&l.capability))
        .collect()
}

/// The driver library a needed name means, whatever the capabilities.
pub fn driver_lib_for(needed: &str) -> Option<&'static DriverLib> {
    DRIVER_LIBS.iter().find(|l| l.names(needed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_default_all_and_words() {
        let d = capabilities(None);
        assert_eq!(d, [Capability::Utility, Capability::Compute].into());
        assert_eq!(capabilities(Some("")), d);
        assert_eq!(capabilities(Some("all")).len(), Capability::ALL.len());
        assert_eq!(
            capabilities(Some("utility, video,bogus")),
            [Capability::Utility, Capability::Video].into()
        );
    }

    /// libnvidia-container src/options.h `container_opts`: video brings
    /// the compute libraries, display the graphics ones; ngx and graphics
    /// only their own; compat32 no 64-bit library.
    #[test]
    fn capabilities_bring_the_sets_libnvidia_container_mounts() {
        let names = |caps: &str| -> Vec<&'static str> {
            injected(&capabilities(Some(caps)))
                .iter()
                .map(|l| l.name)
                .collect()
        };
        let video = names("video");
        for lib in ["libcuda.so", "libnvidia-ptxjitcompiler.so", "libnvcuvid.so"] {
            assert!(video.contains(&lib), "video: {lib}");
        }
        assert!(!video.contains(&"libnvidia-ml.so"));
        let display = names("display");
        assert!(display.contains(&"libGLX_nvidia.so") && display.contains(&"libnvidia-glcore.so"));
        assert!(!display.contains(&"libcuda.so"));
        assert_eq!(names("graphics"), display);
        assert_eq!(names("ngx"), ["libnvidia-ngx.so"]);
        assert!(names("compat32").is_empty());
        assert!(!names("utility").contains(&"libcuda.so"));
        assert_eq!(names("all").len(), DRIVER_LIBS.len());
        assert_eq!(
            library_sets(&capabilities(Some("video,display"))),
            [Capability::Compute, Capability::Video, Capability::Graphics].into()
        );
    }

    #[test]
    fn utility_has_no_libcuda_compute_has() {
        let util = injected(&capabilities(Some("utility")));
        assert!(util.iter().all(|l| !l.names("libcuda.so.1")));
        assert!(util.iter().any(|l| l.names("libnvidia-ml.so.1")));
        let comp = injected(&capabilities(Some("compute")));
        let cuda = comp.iter().find(|l| l.names("libcuda.so.1")).unwrap();
        assert_eq!(cuda.soname("580.65.06"), "libcuda.so.1");
        assert_eq!(cuda.file_name("580.65.06"), "libcuda.so.580.65.06");
        assert!(!cuda.names("libcudart.so.12"));
        let glcore = driver_lib_for("libnvidia-glcore.so.580.65.06").unwrap();
        assert_eq!(glcore.soname("580.65.06"), "libnvidia-glcore.so.580.65.06");
        assert_eq!(glcore.capability, Capability::Graphics);
    }
}
