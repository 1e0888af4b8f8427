//! What depends on how the image's glibc and NVIDIA's stack were built:
//! the loader's default directories, `$LIB` and `$PLATFORM`, the
//! glibc-hwcaps subdirectories it searches, ldconfig's system directories
//! and where NVIDIA's runtime mounts the driver libraries.
//!
//! - Default directories (`SYSTEM_DIRS`, elf/dl-load.c) and `$LIB`
//!   (`DL_DST_LIB`, elf/Makefile: upstream the last component of
//!   `slibdir`): a Debian-style multiarch glibc (Debian, Ubuntu: `slibdir`
//!   is `/lib/<triplet>`, and Debian adds `/lib` and `/usr/lib`, as `ld.so
//!   --help` and nvidia-container-toolkit's `internal/ldconfig` show:
//!   `/lib/x86_64-linux-gnu/ /usr/lib/x86_64-linux-gnu/ /lib/ /usr/lib/`;
//!   its `$LIB` is `lib/<triplet>`, as `LD_DEBUG=libs` of Debian 12's
//!   glibc 2.36 shows), or upstream's layout (RHEL, Fedora: `/lib64/
//!   /usr/lib64/`, `$LIB` = `lib64`). Which one an image has is read from where its `libc.so.6`
//!   lives, else from `/etc/debian_version`.
//! - glibc-hwcaps (glibc 2.33+, elf/dl-hwcaps.c `_dl_important_hwcaps`):
//!   every search directory is tried with `glibc-hwcaps/<name>/` for each
//!   level the CPU supports, most demanding first, then itself; x86-64
//!   has `x86-64-v4`, `-v3`, `-v2` (sysdeps/x86_64/dl-hwcaps-subdirs.c),
//!   aarch64 none. The legacy hwcaps subdirectories of glibc 2.26 to 2.36
//!   (`tls/`, `haswell/`, `x86_64/`...) are not modelled: no CUDA
//!   distribution installs libraries there.
//! - `$PLATFORM` is `AT_PLATFORM`, which glibc replaces on Intel x86-64
//!   CPUs with `haswell` or `xeon_phi` (sysdeps/x86/cpu-features.c); it is
//!   worked out only when a path uses it. The CPU is the one gpu-guard
//!   runs on: exact for the hooks, a stand-in for `check --image`.
//! - ldconfig's own system directories: NVIDIA's `update-ldcache` writes
//!   the container's (toolkit `internal/ldconfig`: Debian-like
//!   `/lib/<triplet> /usr/lib/<triplet> /lib /usr/lib`, else `/lib
//!   /usr/lib /lib64 /usr/lib64` and, on x86-64, `/libx32 /usr/libx32`).
//! - The injected libraries' directory: libnvidia-container
//!   (`src/nvc_container.c` `copy_config`, `src/common.h`) uses
//!   `/usr/lib/<triplet>` when the rootfs has `/etc/debian_version`, else
//!   `/usr/lib64`.

use super::snapshot::{Kind, Snapshot};
use crate::scan::elf_dynamic::{ELFCLASS64, EM_AARCH64, EM_X86_64};
use std::cell::OnceCell;

/// The loader the image's programs run under, and the directories that
/// come with its build.
#[derive(Debug)]
pub struct Platform {
    pub class: u8,
    pub machine: u16,
    /// `SYSTEM_DIRS`, each with its trailing `/`.
    pub system_dirs: Vec<String>,
    /// ldconfig's system directories (no trailing `/`).
    pub ldconfig_system_dirs: Vec<String>,
    /// `$LIB`.
    pub lib: String,
    /// Active glibc-hwcaps subdirectory names, highest priority first.
    pub hwcaps: Vec<String>,
    /// The loader's own SONAME (always loaded) and its path.
    pub loader_soname: &'static str,
    pub loader_path: &'static str,
    /// Where NVIDIA's runtime mounts the driver libraries.
    pub injected_dir: String,
    platform: OnceCell<String>,
}

/// The multiarch triplet of a machine (Debian's names).
pub fn triplet(machine: u16) -> &'static str {
    match machine {
        EM_AARCH64 => "aarch64-linux-gnu",
        _ => "x86_64-linux-gnu",
    }
}

impl Platform {
    /// The platform of a 64-bit image of `machine` (x86-64 or aarch64),
    /// from its file tree; `hwcaps`: the active subdirectories (see
    /// [`cpu_hwcaps`]).
    pub fn detect(snap: &Snapshot, machine: u16, hwcaps: Vec<String>) -> Platform {
        let t = triplet(machine);
        let is_file = |p: &str| {
            snap.lookup(p, true)
                .is_ok_and(|i| snap.node(i).kind == Kind::File)
        };
        let debian_version = is_file("/etc/debian_version");
        let multiarch = is_file(&format!("/lib/{t}/libc.so.6"))
            || is_file(&format!("/usr/lib/{t}/libc.so.6"))
            || (debian_version && !is_file("/lib64/libc.so.6") && !is_file("/usr/lib64/libc.so.6"));
        let (system_dirs, lib) = if multiarch {
            (
                vec![
                    format!("/lib/{t}/"),
                    format!("/usr/lib/{t}/"),
                    "/lib/".into(),
                    "/usr/lib/".into(),
                ],
                format!("lib/{t}"),
            )
        } else {
            (vec!["/lib64/".into(), "/usr/lib64/".into()], "lib64".into())
        };
        let ldconfig_system_dirs = if debian_version {
            vec![
                format!("/lib/{t}"),
                format!("/usr/lib/{t}"),
                "/lib".into(),
                "/usr/lib".into(),
            ]
        } else {
            let mut v: Vec<String> = ["/lib", "/usr/lib", "/lib64", "/usr/lib64"]
                .into_iter()
                .map(String::from)
                .collect();
            if machine == EM_X86_64 {
                v.extend(["/libx32".to_string(), "/usr/libx32".to_string()]);
            }
            v
        };
        let injected_dir = if debian_version {
            format!("/usr/lib/{t}")
        } else {
            "/usr/lib64".into()
        };
        let (loader_soname, loader_path) = match machine {
            EM_AARCH64 => ("ld-linux-aarch64.so.1", "/lib/ld-linux-aarch64.so.1"),
            _ => ("ld-linux-x86-64.so.2", "/lib64/ld-linux-x86-64.so.2"),
        };
        Platform {
            class: ELFCLASS64,
            machine,
            system_dirs,
            ldconfig_system_dirs,
            lib,
            hwcaps,
            loader_soname,
            loader_path,
            injected_dir,
            platform: OnceCell::new(),
        }
    }

    /// `$PLATFORM`.
    pub fn platform(&self) -> &str {
        self.platform.get_or_init(|| at_platform(self.machine))
    }

    /// Sets `$PLATFORM` (the differential test uses the host loader's).
    pub fn with_platform(self, p: &str) -> Platform {
        let _ = self.platform.set(p.to_string());
        self
    }

    /// The search strings tried in each directory: every active
    /// `glibc-hwcaps/<name>/`, then the directory itself.
    pub fn capstrs(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .hwcaps
            .iter()
            .map(|h| format!("glibc-hwcaps/{h}/"))
            .collect();
        v.push(String::new());
        v
    }

    /// The priority of a glibc-hwcaps subdirectory (lower is better); None
    /// when this CPU cannot use it (elf/dl-cache.c `search_cache`).
    pub fn hwcaps_priority(&self, name: &str) -> Option<usize> {
        self.hwcaps.iter().position(|h| h == name)
    }
}

/// The glibc-hwcaps levels of the CPU gpu-guard runs on, as
/// sysdeps/x86_64/dl-hwcaps-subdirs.c ranks them (x86-64 psABI levels:
/// v2 SSE3, SSSE3, SSE4.1/4.2, POPCNT, CMPXCHG16B; v3 adds AVX, AVX2,
/// BMI1/2, F16C, FMA, LZCNT, MOVBE, XSAVE; v4 adds AVX-512 F, BW, CD, DQ,
/// VL). Other machines have none.
pub fn cpu_hwcaps(machine: u16) -> Vec<String> {
    if machine != EM_X86_64 {
        return Vec::new();
    }
    x86_levels()
}

#[cfg(target_arch = "x86_64")]
fn x86_levels() -> Vec<String> {
    use std::arch::is_x86_feature_detected as has;
    let v2 = has!("sse3")
        && has!("ssse3")
        && has!("sse4.1")
        && has!("sse4.2")
        && has!("popcnt")
        && has!("cmpxchg16b");
    let v3 = v2
        && has!("avx")
        && has!("avx2")
        && has!("bmi1")
        && has!("bmi2")
        && has!("f16c")
        && has!("fma")
        && has!("lzcnt")
        && has!("movbe")
        && has!("xsave");
    let v4 = v3
        && has!("avx512f")
        && has!("avx512bw")
        && has!("avx512cd")
        && has!("avx512dq")
        && has!("avx512vl");
    [(v4, "x86-64-v4"), (v3, "x86-64-v3"), (v2, "x86-64-v2")]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, n)| n.to_string())
        .collect()
}

#[cfg(not(target_arch = "x86_64"))]
fn x86_levels() -> Vec<String> {
    Vec::new()
}

/// `$PLATFORM` for this CPU: aarch64's AT_PLATFORM; on x86-64 glibc's
/// choice for Intel CPUs (xeon_phi with AVX512ER/PF, haswell with AVX2,
/// FMA, BMI1/2, LZCNT, MOVBE, POPCNT), else AT_PLATFORM `x86_64`.
fn at_platform(machine: u16) -> String {
    if machine == EM_AARCH64 {
        return "aarch64".into();
    }
    let intel = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("vendor_id"))
                .map(|l| l.contains("GenuineIntel"))
        })
        .unwrap_or(false);
    if intel && haswell_features() {
        return "haswell".into();
    }
    "x86_64".into()
}

#[cfg(target_arch = "x86_64")]
fn haswell_features() -> bool {
    use std::arch::is_x86_feature_detected as has;
    let phi = has!("avx512cd") && has!("avx512er") && has!("avx512pf");
    !phi && has!("avx2")
        && has!("fma")
        && has!("bmi1")
        && has!("bmi2")
        && has!("lzcnt")
        && has!("movbe")
        && has!("popcnt")
}

#[cfg(not(target_arch = "x86_64"))]
fn haswell_features() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::ldso::snapshot::tests::tree;

    #[test]
    fn debian_and_rhel_layouts() {
        let deb = tree(&[
            ("etc/debian_version", "f"),
            ("usr/lib/x86_64-linux-gnu/libc.so.6", "f"),
            ("lib", "l:usr/lib"),
        ]);
        let p = Platform::detect(&deb, EM_X86_64, vec![]);
        assert_eq!(p.lib, "lib/x86_64-linux-gnu");
        assert_eq!(p.system_dirs[0], "/lib/x86_64-linux-gnu/");
        assert_eq!(p.system_dirs.len(), 4);
        assert_eq!(p.injected_dir, "/usr/lib/x86_64-linux-gnu");
        assert_eq!(p.ldconfig_system_dirs[3], "/usr/lib");
        let rhel = tree(&[("usr/lib64/libc.so.6", "f"), ("lib64", "l:usr/lib64")]);
        let p = Platform::detect(&rhel, EM_X86_64, vec!["x86-64-v2".into()]);
        assert_eq!(p.lib, "lib64");
        assert_eq!(p.system_dirs, ["/lib64/", "/usr/lib64/"]);
        assert_eq!(p.injected_dir, "/usr/lib64");
        assert!(p.ldconfig_system_dirs.contains(&"/usr/libx32".to_string()));
        assert_eq!(p.capstrs(), ["glibc-hwcaps/x86-64-v2/", ""]);
        assert_eq!(p.hwcaps_priority("x86-64-v2"), Some(0));
        assert_eq!(p.hwcaps_priority("x86-64-v4"), None);
        let arm = Platform::detect(&rhel, EM_AARCH64, cpu_hwcaps(EM_AARCH64));
        assert!(arm.hwcaps.is_empty());
        assert_eq!(arm.loader_soname, "ld-linux-aarch64.so.1");
        assert_eq!(arm.platform(), "aarch64");
    }
}
