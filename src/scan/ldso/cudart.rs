//! The CUDA runtimes an image ships: every `libcudart.so.*` (CUDA images
//! under `/usr/local/cuda*/`, distro packages, pip's `nvidia/*/lib` and
//! `nvidia/cu13/lib`, conda's `lib/`), each file once, with its version:
//! - pip: the `nvidia-cuda-runtime*` `.dist-info/METADATA` `Version:` of
//!   the site-packages directory that holds it (the wheel of the file's
//!   major; packaging's core metadata format);
//! - a CUDA toolkit directory (`/usr/local/cuda-X.Y`): its `version.json`
//!   (`cuda_cudart.version`, else `cuda.version`), as NVIDIA's installers
//!   write it;
//! - else the longest version its names give (`libcudart.so.12.4.127`);
//!   `libcudart.so.11.0` is the SONAME of every CUDA 11 runtime, so it
//!   gives the major only.

use super::content::Content;
use super::snapshot::{components, Idx, Kind, Snapshot};
use crate::core::cuda_tables;
use crate::core::libraries::{major_min_driver, CudaRuntime};
use crate::core::version::Version;
use std::collections::BTreeMap;

/// Runtimes reported (an image has a handful).
const MAX_RUNTIMES: usize = 32;
const MAX_META_BYTES: usize = 64 << 10;

/// The version a `libcudart.so.<suffix>` name gives: `(version, parts)`.
fn version_of_name(name: &str) -> Option<(String, usize)> {
    let suffix = name.strip_prefix("libcudart.so.")?;
    if suffix.is_empty() || !suffix.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    Version::parse(suffix).ok()?;
    if suffix == "11.0" {
        return Some(("11".into(), 1));
    }
    Some((suffix.to_string(), suffix.split('.').count()))
}

/// `major.minor` of a full version (`13.5.37` -> `13.5`).
fn major_minor(v: &str) -> String {
    let parts: Vec<&str> = v.split('.').collect();
    if parts.len() >= 2 {
        format!("{}.{}", parts[0], parts[1])
    } else {
        v.to_string()
    }
}

/// Every runtime file: (real node, the names it has, the real path).
fn runtime_files(snap: &Snapshot) -> BTreeMap<Idx, Vec<String>> {
    let mut by_file: BTreeMap<Idx, Vec<String>> = BTreeMap::new();
    for i in 0..snap.len() as Idx {
        let n = snap.node(i);
        if !n.name.starts_with("libcudart.so.") {
            continue;
        }
        let real = match &n.kind {
            Kind::File => i,
            Kind::Symlink(_) => match snap.lookup(&snap.path_of(i), true) {
                Ok(t) if snap.node(t).kind == Kind::File => t,
                _ => continue,
            },
            _ => continue,
        };
        if snap.virtual_info(real).is_some() {
            continue;
        }
        by_file.entry(real).or_default().push(n.name.to_string());
        if by_file.len() >= MAX_RUNTIMES {
            break;
        }
    }
    by_file
}

/// The runtimes of the tree.
pub fn find(snap: &Snapshot, content: &dyn Content) -> Vec<CudaRuntime> {
    let mut out = Vec::new();
    for (file, names) in runtime_files(snap) {
        let Some((from_name, _)) = names
            .iter()
            .filter_map(|n| version_of_name(n))
            .max_by_key(|(_, parts)| *parts)
        else {
            continue;
        };
        let path = snap.path_of(file);
        let major: u64 = from_name
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        let (version, source) = pip_version(snap, content, &path, major)
            .or_else(|| toolkit_version(snap, content, &path))
            .unwrap_or_else(|| (major_minor(&from_name), "file name".to_string()));
        let v = Version::parse(&version).ok();
        let minor = version
            .contains('.')
            .then(|| v.as_ref().map(|v| v.minor()))
            .flatten();
        out.push(CudaRuntime {
            path: path.trim_start_matches('/').to_string(),
            min_driver: major_min_driver(major, minor),
            toolkit_driver: v
                .as_ref()
                .filter(|_| minor.is_some())
                .and_then(cuda_tables::min_driver_for_cuda)
                .map(str::to_string),
            version,
            source,
        });
    }
    out
}

/// The site-packages (or dist-packages) directory a pip file lies in.
fn site_packages(path: &str) -> Option<String> {
    let mut acc = String::new();
    for c in components(path) {
        acc.push('/');
        acc.push_str(c);
        if c == "site-packages" || c == "dist-packages" {
            return Some(acc);
        }
    }
    None
}

fn metadata_field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .take_while(|l| !l.is_empty())
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
}

/// The version of the `nvidia-cuda-runtime*` wheel of this major.
fn pip_version(
    snap: &Snapshot,
    content: &dyn Content,
    path: &str,
    major: u64,
) -> Option<(String, String)> {
    if !path.contains("/nvidia/") {
        return None;
    }
    let site = site_packages(path)?;
    let dir = snap.lookup_dir(&site).ok()?;
    for &c in &snap.node(dir).children {
        let name = &*snap.node(c).name;
        if !(name.starts_with("nvidia_cuda_runtime") && name.ends_with(".dist-info")) {
            continue;
        }
        let meta = format!("{site}/{name}/METADATA");
        let Ok(m) = snap.lookup(&meta, true) else {
            continue;
        };
        let Ok(bytes) = content.read_small(snap, m, MAX_META_BYTES) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        let (Some(pkg), Some(ver)) = (
            metadata_field(&text, "Name:"),
            metadata_field(&text, "Version:"),
        ) else {
            continue;
        };
        let vmajor = ver.split('.').next().and_then(|m| m.parse::<u64>().ok());
        if vmajor == Some(major) && Version::parse(ver).is_ok() {
            return Some((major_minor(ver), format!("pip {pkg} {ver}")));
        }
    }
    None
}

/// The version.json of the CUDA toolkit directory the file is under.
fn toolkit_version(snap: &Snapshot, content: &dyn Content, path: &str) -> Option<(String, String)> {
    let rest = path.strip_prefix("/usr/local/")?;
    let top = rest.split('/').next()?;
    if !top.starts_with("cuda") {
        return None;
    }
    let vj = format!("/usr/local/{top}/version.json");
    let i = snap.lookup(&vj, true).ok()?;
    let bytes = content.read_small(snap, i, MAX_META_BYTES).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let ver = v["cuda_cudart"]["version"]
        .as_str()
        .or_else(|| v["cuda"]["version"].as_str())?;
    Version::parse(ver).ok()?;
    Some((
        major_minor(ver),
        format!("usr/local/{top}/version.json: {ver}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::ldso::content::tests::TextContent;
    use crate::scan::ldso::snapshot::tests::tree;

    #[test]
    fn versions_from_names_pip_and_toolkit() {
        let sp = "usr/local/lib/python3.11/site-packages";
        let snap = tree(&[
            (&format!("{sp}/nvidia/cu13/lib/libcudart.so.13"), "f"),
            (
                &format!("{sp}/nvidia_cuda_runtime-13.5.37.dist-info/METADATA"),
                "f",
            ),
            (
                "usr/local/cuda-12.4/targets/x86_64-linux/lib/libcudart.so.12.4.127",
                "f",
            ),
            (
                "usr/local/cuda-12.4/targets/x86_64-linux/lib/libcudart.so.12",
                "l:libcudart.so.12.4.127",
            ),
            ("usr/local/cuda-12.4/version.json", "f"),
            ("usr/local/cuda", "l:cuda-12.4"),
            ("opt/conda/lib/libcudart.so.11.0", "f"),
            ("usr/lib/x86_64-linux-gnu/libcudart.so.12.0.146", "f"),
        ]);
        let content = TextContent::new(&[
            (
                &format!("/{sp}/nvidia_cuda_runtime-13.5.37.dist-info/METADATA"),
                "Metadata-Version: 2.4\nName: nvidia-cuda-runtime\nVersion: 13.5.37\n\nbody\n",
            ),
            (
                "/usr/local/cuda-12.4/version.json",
                r#"{"cuda": {"version": "12.4.1"}, "cuda_cudart": {"version": "12.4.127"}}"#,
            ),
        ]);
        let rts = find(&snap, &content);
        let by_path: BTreeMap<&str, &CudaRuntime> =
            rts.iter().map(|r| (r.path.as_str(), r)).collect();
        let pip = by_path[format!("{sp}/nvidia/cu13/lib/libcudart.so.13").as_str()];
        assert_eq!(pip.version, "13.5");
        assert_eq!(pip.source, "pip nvidia-cuda-runtime 13.5.37");
        assert_eq!(pip.min_driver.as_deref(), Some("580.65.06"));
        let tk = by_path["usr/local/cuda-12.4/targets/x86_64-linux/lib/libcudart.so.12.4.127"];
        assert_eq!(tk.version, "12.4");
        assert!(tk.source.contains("version.json"), "{}", tk.source);
        assert_eq!(tk.min_driver.as_deref(), Some("525.60.13"));
        assert_eq!(tk.toolkit_driver.as_deref(), Some("550.54.14"));
        let conda = by_path["opt/conda/lib/libcudart.so.11.0"];
        assert_eq!(conda.version, "11");
        assert_eq!(conda.min_driver.as_deref(), Some("450.80.02"));
        let distro = by_path["usr/lib/x86_64-linux-gnu/libcudart.so.12.0.146"];
        assert_eq!(distro.version, "12.0");
        assert_eq!(distro.source, "file name");
        assert_eq!(rts.len(), 4, "{rts:?}");
    }
}
