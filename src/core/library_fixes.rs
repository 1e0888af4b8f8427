//! What ships a missing GPU library: the pip package, the Debian/Ubuntu
//! package of NVIDIA's CUDA repository, and the base image, kept as data.
//!
//! Sources: the package names on pypi.org (CUDA 12 wheels end in `-cu12`,
//! e.g. `nvidia-cuda-runtime-cu12`; CUDA 13 wheels drop the suffix, e.g.
//! `nvidia-cuda-runtime` 13.x, which installs `nvidia/cu13/lib`; cuDNN and
//! NCCL keep it: `nvidia-cudnn-cu13`), the package names of NVIDIA's CUDA
//! apt repository (`developer.download.nvidia.com/compute/cuda/repos`:
//! `cuda-cudart-12-8`, `libcublas-12-8`, `libcudnn9-cuda-12`, `libnccl2`,
//! `libnvinfer10`), and the `nvidia/cuda` image tags (`-runtime`,
//! `-cudnn-runtime`). The SONAME major of a library is not always the CUDA
//! major (`libcufft.so.11` is CUDA 12), so the table maps each SONAME.

/// Where to get one library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibraryFix {
    pub pip: Option<String>,
    pub deb: Option<String>,
    pub image: Option<String>,
}

impl LibraryFix {
    /// "pip install X, or apt-get install Y (NVIDIA's CUDA repository), or
    /// build FROM Z".
    pub fn text(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(p) = &self.pip {
            parts.push(format!("pip install {p}"));
        }
        if let Some(d) = &self.deb {
            parts.push(format!("apt-get install {d} (NVIDIA's CUDA repository)"));
        }
        if let Some(i) = &self.image {
            parts.push(format!("build FROM {i}"));
        }
        (!parts.is_empty()).then(|| parts.join(", or "))
    }
}

/// (library, SONAME version, CUDA major it belongs to).
const CUDA_MAJOR_OF: &[(&str, &str, u64)] = &[
    ("libcudart", "11.0", 11),
    ("libcudart", "12", 12),
    ("libcudart", "13", 13),
    ("libcublas", "11", 11),
    ("libcublas", "12", 12),
    ("libcublas", "13", 13),
    ("libcublasLt", "11", 11),
    ("libcublasLt", "12", 12),
    ("libcublasLt", "13", 13),
    ("libcufft", "10", 11),
    ("libcufft", "11", 12),
    ("libcufft", "12", 13),
    ("libcusolver", "11", 12),
    ("libcusolver", "12", 13),
    ("libcusparse", "11", 11),
    ("libcusparse", "12", 12),
    ("libnvrtc", "11.2", 11),
    ("libnvrtc", "12", 12),
    ("libnvrtc", "13", 13),
    ("libnvJitLink", "12", 12),
    ("libnvJitLink", "13", 13),
    ("libcupti", "12", 12),
    ("libcupti", "13", 13),
    ("libnvjpeg", "12", 12),
    ("libnvjpeg", "13", 13),
];

/// (library, pip name stem, deb name stem): the pip package is
/// `<stem>-cu<major>` (or `<stem>` for CUDA 13), the deb `<stem>-<major>-<minor>`.
const TOOLKIT_LIBS: &[(&str, &str, &str)] = &[
    ("libcudart", "nvidia-cuda-runtime", "cuda-cudart"),
    ("libcublas", "nvidia-cublas", "libcublas"),
    ("libcublasLt", "nvidia-cublas", "libcublas"),
    ("libcufft", "nvidia-cufft", "libcufft"),
    ("libcurand", "nvidia-curand", "libcurand"),
    ("libcusolver", "nvidia-cusolver", "libcusolver"),
    ("libcusparse", "nvidia-cusparse", "libcusparse"),
    ("libnvrtc", "nvidia-cuda-nvrtc", "cuda-nvrtc"),
    ("libnvJitLink", "nvidia-nvjitlink", "libnvjitlink"),
    ("libcupti", "nvidia-cuda-cupti", "cuda-cupti"),
    ("libnvToolsExt", "nvidia-nvtx", "cuda-nvtx"),
    ("libnvjpeg", "nvidia-nvjpeg", "libnvjpeg"),
    ("libnpp", "nvidia-npp", "libnpp"),
    ("libcufile", "nvidia-cufile", "libcufile"),
];

/// Splits `libcufft.so.11` into (`libcufft`, `11`).
fn split(soname: &str) -> (&str, &str) {
    match soname.split_once(".so") {
        Some((base, rest)) => (base, rest.trim_start_matches('.')),
        None => (soname, ""),
    }
}

/// The library's family name for the tables (`libcudnn_ops` is cuDNN,
/// `libnppif` is NPP).
fn family(base: &str) -> &str {
    if base.starts_with("libcudnn") {
        "libcudnn"
    } else if base.starts_with("libnpp") {
        "libnpp"
    } else {
        base
    }
}

/// The CUDA major a SONAME belongs to; `fallback` (the image's CUDA) where
/// the SONAME does not tell (`libcurand.so.10` is in CUDA 11, 12 and 13).
fn cuda_major(base: &str, ver: &str, fallback: Option<u64>) -> Option<u64> {
    let major_of_ver = ver.split('.').next().unwrap_or("");
    CUDA_MAJOR_OF
        .iter()
        .find(|(b, v, _)| *b == base && (*v == ver || *v == major_of_ver))
        .map(|(_, _, m)| *m)
        .or(fallback)
}

fn pip_name(stem: &str, cuda: u64) -> String {
    if cuda >= 13 {
        stem.to_string()
    } else {
        format!("{stem}-cu{cuda}")
    }
}

/// Where to get `soname`; `image_cuda`: the image's CUDA major, when known.
pub fn fix_for(soname: &str, image_cuda: Option<u64>) -> Option<LibraryFix> {
    let (base, ver) = split(soname);
    let fam = family(base);
    if fam == "libcudnn" {
        return cudnn_fix(ver, image_cuda);
    }
    if fam == "libnccl" {
        let cuda = image_cuda.unwrap_or(12);
        return Some(LibraryFix {
            pip: Some(format!("nvidia-nccl-cu{cuda}")),
            deb: Some("libnccl2".into()),
            image: None,
        });
    }
    if fam.starts_with("libnvinfer") {
        return Some(LibraryFix {
            pip: Some(format!("tensorrt-cu{}", image_cuda.unwrap_or(12))),
            deb: Some(format!("{base}{}", ver.split('.').next().unwrap_or(""))),
            image: None,
        });
    }
    let (_, stem, deb) = TOOLKIT_LIBS.iter().find(|(b, _, _)| *b == fam)?;
    let cuda = cuda_major(fam, ver, image_cuda)?;
    Some(LibraryFix {
        pip: Some(pip_name(stem, cuda)),
        deb: Some(format!("{deb}-{cuda}-<minor>")),
        image: Some(format!(
            "nvidia/cuda:{cuda}.<minor>-runtime-<os> (or -base with the library)"
        )),
    })
}

fn cudnn_fix(ver: &str, image_cuda: Option<u64>) -> Option<LibraryFix> {
    let major = ver.split('.').next().filter(|m| !m.is_empty())?;
    let cuda = image_cuda.unwrap_or(12);
    Some(LibraryFix {
        pip: Some(format!("nvidia-cudnn-cu{cuda}")),
        deb: Some(format!("libcudnn{major}-cuda-{cuda}")),
        image: Some(format!("nvidia/cuda:{cuda}.<minor>-cudnn-runtime-<os>")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pip_deb_and_image() {
        let f = fix_for("libcudnn.so.9", Some(12)).unwrap();
        assert_eq!(f.pip.as_deref(), Some("nvidia-cudnn-cu12"));
        assert_eq!(f.deb.as_deref(), Some("libcudnn9-cuda-12"));
        let f = fix_for("libcudnn_ops.so.9", Some(13)).unwrap();
        assert_eq!(f.pip.as_deref(), Some("nvidia-cudnn-cu13"));
        let f = fix_for("libcufft.so.11", None).unwrap();
        assert_eq!(f.pip.as_deref(), Some("nvidia-cufft-cu12"));
        let f = fix_for("libcudart.so.13", None).unwrap();
        assert_eq!(f.pip.as_deref(), Some("nvidia-cuda-runtime"));
        assert!(f
            .text()
            .unwrap()
            .starts_with("pip install nvidia-cuda-runtime, or apt-get"));
        let f = fix_for("libcudart.so.11.0", None).unwrap();
        assert_eq!(f.pip.as_deref(), Some("nvidia-cuda-runtime-cu11"));
        // The SONAME does not tell the CUDA major: the image's does.
        assert_eq!(
            fix_for("libcurand.so.10", Some(13)).unwrap().pip.as_deref(),
            Some("nvidia-curand")
        );
        assert_eq!(fix_for("libcurand.so.10", None), None);
        assert_eq!(
            fix_for("libnccl.so.2", None).unwrap().deb.as_deref(),
            Some("libnccl2")
        );
        assert_eq!(
            fix_for("libnvinfer.so.10", Some(12))
                .unwrap()
                .deb
                .as_deref(),
            Some("libnvinfer10")
        );
        assert_eq!(fix_for("libfoo.so.1", Some(12)), None);
    }
}
