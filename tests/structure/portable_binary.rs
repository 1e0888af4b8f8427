//! The release binaries run on every distribution NVIDIA's container
//! toolkit packages for, and older enterprise hosts: none needs a glibc
//! symbol version newer than 2.17, and NVML is loaded at run time, never
//! linked. The release build (packaging/build-release.sh, cargo-zigbuild
//! for x86_64-unknown-linux-gnu.2.17) is what the packages, the DaemonSet
//! image and the integration scripts use; this reads its ELF files.
//!
//! glibc's loader refuses a binary whose `.gnu.version_r` (the versions
//! each needed library must define, ELF gABI "Symbol Versioning", glibc
//! elf/dl-version.c `match_symbol`) names a version the host's libc lacks:
//! "version `GLIBC_2.34' not found". That section is read here directly.

use std::path::{Path, PathBuf};

/// The newest glibc symbol version a release binary may need.
const MAX_GLIBC: (u32, u32) = (2, 17);
/// The release build's output directory under the target directory.
const RELEASE_DIR: &str = "x86_64-unknown-linux-gnu/release";
/// The binaries the packages and the image ship.
const BINARIES: [&str; 3] = ["gpu-guard", "gpu-guard-admission", "gpu-guard-node-agent"];

const SHT_DYNAMIC: u32 = 6;
const SHT_GNU_VERNEED: u32 = 0x6fff_fffe;
const DT_NEEDED: u64 = 1;

struct Section {
    kind: u32,
    offset: usize,
    size: usize,
    link: usize,
    info: usize,
}

fn u16_at(b: &[u8], o: usize) -> Result<u16, String> {
    b.get(o..o + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or_else(|| format!("truncated at {o}"))
}

fn u32_at(b: &[u8], o: usize) -> Result<u32, String> {
    b.get(o..o + 4)
        .map(|s| u32::from_le_bytes(s.try_into().unwrap()))
        .ok_or_else(|| format!("truncated at {o}"))
}

fn u64_at(b: &[u8], o: usize) -> Result<u64, String> {
    b.get(o..o + 8)
        .map(|s| u64::from_le_bytes(s.try_into().unwrap()))
        .ok_or_else(|| format!("truncated at {o}"))
}

fn sections(b: &[u8]) -> Result<Vec<Section>, String> {
    if b.get(..4) != Some(b"\x7fELF".as_slice()) || b.get(4) != Some(&2) || b.get(5) != Some(&1) {
        return Err("not a little-endian ELF64 file".into());
    }
    let shoff = u64_at(b, 0x28)? as usize;
    let shentsize = u16_at(b, 0x3a)? as usize;
    let shnum = u16_at(b, 0x3c)? as usize;
    (0..shnum)
        .map(|i| {
            let h = shoff + i * shentsize;
            Ok(Section {
                kind: u32_at(b, h + 4)?,
                offset: u64_at(b, h + 0x18)? as usize,
                size: u64_at(b, h + 0x20)? as usize,
                link: u32_at(b, h + 0x28)? as usize,
                info: u32_at(b, h + 0x2c)? as usize,
            })
        })
        .collect()
}

fn c_str(b: &[u8], o: usize) -> Result<String, String> {
    let rest = b.get(o..).ok_or("string offset out of range")?;
    let end = rest
        .iter()
        .position(|&c| c == 0)
        .ok_or("unterminated string")?;
    Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
}

/// What an ELF file needs of the loader.
struct Needs {
    /// (library, version) pairs of `.gnu.version_r`.
    versions: Vec<(String, String)>,
    /// `DT_NEEDED` libraries.
    libraries: Vec<String>,
}

/// Every (library, version) the file's `.gnu.version_r` needs, and its
/// `DT_NEEDED` libraries.
fn needs(b: &[u8]) -> Result<Needs, String> {
    let secs = sections(b)?;
    let strtab = |s: &Section| secs.get(s.link).map(|t| t.offset).ok_or("bad sh_link");
    let mut versions = Vec::new();
    for s in secs.iter().filter(|s| s.kind == SHT_GNU_VERNEED) {
        let str_off = strtab(s)?;
        let mut vn = s.offset;
        for _ in 0..s.info {
            let cnt = u16_at(b, vn + 2)? as usize;
            let file = c_str(b, str_off + u32_at(b, vn + 4)? as usize)?;
            let mut aux = vn + u32_at(b, vn + 8)? as usize;
            for _ in 0..cnt {
                let name = c_str(b, str_off + u32_at(b, aux + 8)? as usize)?;
                versions.push((file.clone(), name));
                aux += u32_at(b, aux + 12)? as usize;
            }
            let next = u32_at(b, vn + 12)? as usize;
            if next == 0 {
                break;
            }
            vn += next;
        }
    }
    let mut needed = Vec::new();
    for s in secs.iter().filter(|s| s.kind == SHT_DYNAMIC) {
        let str_off = strtab(s)?;
        for e in (s.offset..s.offset + s.size).step_by(16) {
            if u64_at(b, e)? == DT_NEEDED {
                needed.push(c_str(b, str_off + u64_at(b, e + 8)? as usize)?);
            }
        }
    }
    Ok(Needs {
        versions,
        libraries: needed,
    })
}

/// `GLIBC_2.34` as (2, 34); `None` for other version names.
fn glibc_version(name: &str) -> Option<(u32, u32)> {
    let v = name.strip_prefix("GLIBC_")?;
    let mut parts = v.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().map_or(Some(0), |m| m.parse().ok())?;
    Some((major, minor))
}

/// What in `path` needs more than [`MAX_GLIBC`] or links NVML; empty
/// when nothing does.
fn problems(path: &Path) -> Result<Vec<String>, String> {
    let b = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let Needs {
        versions,
        libraries: needed,
    } = needs(&b)?;
    if versions.is_empty() {
        return Err(format!(
            "{}: no .gnu.version_r (not a dynamically linked glibc binary?)",
            path.display()
        ));
    }
    let mut out: Vec<String> = versions
        .iter()
        .filter(|(_, v)| glibc_version(v).is_some_and(|g| g > MAX_GLIBC))
        .map(|(f, v)| format!("{}: {f} {v}", path.display()))
        .collect();
    out.extend(
        needed
            .iter()
            .filter(|n| n.starts_with("libnvidia-ml"))
            .map(|n| {
                format!(
                    "{}: links {n} (NVML must be loaded at run time)",
                    path.display()
                )
            }),
    );
    out.sort();
    out.dedup();
    Ok(out)
}

fn release_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join(RELEASE_DIR)
}

#[test]
fn the_check_sees_a_binary_built_against_this_host_s_glibc() {
    // This test binary is built for the build machine's glibc (2.36 on
    // Debian 12): the check must find what it needs beyond 2.17, or a
    // pass below means nothing.
    let me = std::env::current_exe().unwrap();
    let b = std::fs::read(&me).unwrap();
    let Needs {
        versions,
        libraries: needed,
    } = needs(&b).unwrap();
    assert!(
        needed.iter().any(|n| n.starts_with("libc.so")),
        "{needed:?}"
    );
    assert!(versions
        .iter()
        .any(|(f, v)| f.starts_with("libc.so") && v.starts_with("GLIBC_2.")));
    let host_glibc = versions
        .iter()
        .filter_map(|(_, v)| glibc_version(v))
        .max()
        .unwrap();
    if host_glibc > MAX_GLIBC {
        assert!(!problems(&me).unwrap().is_empty());
    }
    assert_eq!(glibc_version("GLIBC_2.34"), Some((2, 34)));
    assert_eq!(glibc_version("GLIBC_2.2.5"), Some((2, 2)));
    assert_eq!(glibc_version("GLIBC_PRIVATE"), None);
    assert!(sections(b"not an elf").is_err());
}

#[test]
fn release_binaries_need_at_most_glibc_2_17() {
    let dir = release_dir();
    let mut found = Vec::new();
    for name in BINARIES {
        let p = dir.join(name);
        if !p.is_file() {
            crate::support::skip_or_fail(&format!(
                "{} is not built: run packaging/build-release.sh (the release build)",
                p.display()
            ));
            return;
        }
        found.extend(problems(&p).unwrap());
    }
    assert!(
        found.is_empty(),
        "needs a newer glibc than {}.{} (or links NVML):\n{}",
        MAX_GLIBC.0,
        MAX_GLIBC.1,
        found.join("\n")
    );
}
