//! What well-known libraries open with `dlopen` at run time, kept as data.
//! A program may never take such a path, so what these find missing is
//! reported with `"via": "dlopen"` and at most a warning.
//!
//! Sources:
//! - the CUDA runtime loads the driver: `libcuda.so.1` is named in
//!   `libcudart.so` and is not among its `DT_NEEDED` (checked in
//!   nvidia-cuda-runtime 13.5.37's `libcudart.so.13`);
//! - cuDNN 8 and 9: `libcudnn.so.N` is a shim that loads the
//!   sub-libraries beside it (NVIDIA cuDNN documentation, "API overview";
//!   nvidia-container-toolkit#254 for the failures it gives);
//! - TensorFlow: tsl `platform/default/dso_loader.cc` opens `libcuda.so.1`
//!   and `lib{cudart,cublas,cublasLt,cufft,cusolver,cusparse,cudnn}.so.V`
//!   with the versions TensorFlow was built with (tensorflow/docs
//!   `site/en/install/source.md`, "Tested build configurations": 2.4 to
//!   2.14 CUDA 11 and cuDNN 8, 2.15 to 2.17 CUDA 12 and cuDNN 8.9, 2.18 on
//!   CUDA 12 and cuDNN 9); the SONAMEs of each CUDA major are CUDA's own
//!   (`libcudart.so.11.0`, `libcufft.so.10` in CUDA 11; `libcudart.so.12`,
//!   `libcufft.so.11` in CUDA 12);
//! - PyTorch: `libtorch_cuda.so` opens `libcaffe2_nvrtc.so`
//!   (aten/src/ATen/cuda/detail/CUDAHooks.cpp `getNVRTC`), which needs
//!   NVRTC; `libc10_cuda.so` opens `libcuda.so.1` (c10/cuda/driver_api.cpp);
//! - onnxruntime: its Python binding and `libonnxruntime.so` open the
//!   execution providers from their own directory
//!   (onnxruntime/core/session/provider_bridge_ort.cc): the shared bridge,
//!   CUDA, and TensorRT, which only sessions asking for TensorRT load;
//! - JAX: the CUDA PJRT plugin (`jax_plugins/xla_cuda12`, `xla_cuda13`)
//!   opens the driver and the CUDA libraries of its major through XLA's
//!   copy of the same tsl `dso_loader.cc`.

/// Which objects a rule applies to.
#[derive(Clone, Copy, Debug)]
pub enum Opener {
    /// An object whose SONAME starts with this.
    SonamePrefix(&'static str),
    /// An object with this file name.
    FileName(&'static str),
    /// An object whose file name starts with this (a Python extension:
    /// `onnxruntime_pybind11_state.cpython-311-x86_64-linux-gnu.so`).
    FilePrefix(&'static str),
}

/// What it opens.
#[derive(Clone, Copy, Debug)]
pub enum Opens {
    /// These names, searched as the opener's dependencies are.
    Names(&'static [&'static str]),
    /// These files of the opener's own directory (opened by path).
    SameDir(&'static [&'static str]),
    /// TensorFlow's CUDA libraries for its version.
    TensorFlow,
    /// JAX's CUDA plugin: its major is in its directory's name.
    JaxPlugin,
}

#[derive(Clone, Copy, Debug)]
pub struct Rule {
    pub opener: Opener,
    pub opens: Opens,
    /// Opened names whose failures are only for some uses (a TensorRT
    /// provider): even their own `DT_NEEDED` misses stay warnings.
    pub optional: &'static [&'static str],
    /// When the program takes that path, for people.
    pub when: &'static str,
}

const CUDNN9: &[&str] = &[
    "libcudnn_graph.so.9",
    "libcudnn_engines_precompiled.so.9",
    "libcudnn_engines_runtime_compiled.so.9",
    "libcudnn_heuristic.so.9",
    "libcudnn_ops.so.9",
    "libcudnn_cnn.so.9",
    "libcudnn_adv.so.9",
];
const CUDNN8: &[&str] = &[
    "libcudnn_ops_infer.so.8",
    "libcudnn_ops_train.so.8",
    "libcudnn_cnn_infer.so.8",
    "libcudnn_cnn_train.so.8",
    "libcudnn_adv_infer.so.8",
    "libcudnn_adv_train.so.8",
];
const ORT_PROVIDERS: &[&str] = &[
    "libonnxruntime_providers_shared.so",
    "libonnxruntime_providers_cuda.so",
    "libonnxruntime_providers_tensorrt.so",
];

pub const RULES: &[Rule] = &[
    Rule {
        opener: Opener::SonamePrefix("libcudart.so."),
        opens: Opens::Names(&["libcuda.so.1"]),
        optional: &[],
        when: "at the first CUDA runtime call",
    },
    Rule {
        opener: Opener::SonamePrefix("libcudnn.so.9"),
        opens: Opens::Names(CUDNN9),
        optional: &[],
        when: "when cuDNN runs the operations of that sub-library",
    },
    Rule {
        opener: Opener::SonamePrefix("libcudnn.so.8"),
        opens: Opens::Names(CUDNN8),
        optional: &[],
        when: "when cuDNN runs the operations of that sub-library",
    },
    Rule {
        opener: Opener::FileName("libtensorflow_framework.so.2"),
        opens: Opens::TensorFlow,
        optional: &[],
        when: "when TensorFlow initializes its GPU support",
    },
    Rule {
        opener: Opener::FileName("libtorch_cuda.so"),
        opens: Opens::Names(&["libcaffe2_nvrtc.so"]),
        optional: &[],
        when: "when PyTorch compiles a kernel at run time (NVRTC, torch.jit, jiterator)",
    },
    Rule {
        opener: Opener::FileName("libc10_cuda.so"),
        opens: Opens::Names(&["libcuda.so.1"]),
        optional: &[],
        when: "when PyTorch calls the CUDA driver API",
    },
    Rule {
        opener: Opener::FilePrefix("onnxruntime_pybind11_state."),
        opens: Opens::SameDir(ORT_PROVIDERS),
        optional: &["libonnxruntime_providers_tensorrt.so"],
        when: "when a session asks for that execution provider",
    },
    Rule {
        opener: Opener::SonamePrefix("libonnxruntime.so"),
        opens: Opens::SameDir(ORT_PROVIDERS),
        optional: &["libonnxruntime_providers_tensorrt.so"],
        when: "when a session asks for that execution provider",
    },
    Rule {
        opener: Opener::FileName("xla_cuda_plugin.so"),
        opens: Opens::JaxPlugin,
        optional: &[],
        when: "when JAX initializes its CUDA backend",
    },
];

impl Rule {
    /// Does the rule apply to an object with this file name and SONAME?
    pub fn applies(&self, file_name: &str, soname: Option<&str>) -> bool {
        match self.opener {
            Opener::SonamePrefix(p) => soname.unwrap_or(file_name).starts_with(p),
            Opener::FileName(f) => file_name == f,
            Opener::FilePrefix(f) => file_name.starts_with(f),
        }
    }
}

/// The CUDA libraries TensorFlow `version` (`major.minor`) opens; None for
/// versions the table does not cover (before 2.4).
pub fn tensorflow_libs(major: u64, minor: u64) -> Option<Vec<String>> {
    if major != 2 || minor < 4 {
        return None;
    }
    let (cuda, cudnn) = match minor {
        4..=14 => (11, 8),
        15..=17 => (12, 8),
        _ => (12, 9),
    };
    let mut v = vec!["libcuda.so.1".to_string()];
    v.extend(cuda_libs(cuda));
    v.push(format!("libcudnn.so.{cudnn}"));
    Some(v)
}

/// The CUDA libraries of one CUDA major, by their SONAMEs.
pub fn cuda_libs(cuda: u64) -> Vec<String> {
    let names: &[&str] = match cuda {
        11 => &[
            "libcudart.so.11.0",
            "libcublas.so.11",
            "libcublasLt.so.11",
            "libcufft.so.10",
            "libcusolver.so.11",
            "libcusparse.so.11",
        ],
        12 => &[
            "libcudart.so.12",
            "libcublas.so.12",
            "libcublasLt.so.12",
            "libcufft.so.11",
            "libcusolver.so.11",
            "libcusparse.so.12",
        ],
        _ => &[],
    };
    names.iter().map(|s| s.to_string()).collect()
}

/// What JAX's CUDA plugin in directory `dir_name` (`xla_cuda12`) opens.
pub fn jax_plugin_libs(dir_name: &str) -> Option<Vec<String>> {
    let major: u64 = dir_name.strip_prefix("xla_cuda")?.parse().ok()?;
    if !(12..=13).contains(&major) {
        return None;
    }
    Some(vec![
        "libcuda.so.1".to_string(),
        format!("libcudart.so.{major}"),
        format!("libcublas.so.{major}"),
        format!("libcublasLt.so.{major}"),
        "libcudnn.so.9".to_string(),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensorflow_by_version() {
        let v = tensorflow_libs(2, 11).unwrap();
        assert!(v.contains(&"libcudart.so.11.0".to_string()));
        assert!(v.contains(&"libcudnn.so.8".to_string()));
        let v = tensorflow_libs(2, 15).unwrap();
        assert!(v.contains(&"libcufft.so.11".to_string()));
        assert!(v.contains(&"libcudnn.so.8".to_string()));
        assert!(tensorflow_libs(2, 18)
            .unwrap()
            .contains(&"libcudnn.so.9".to_string()));
        assert_eq!(tensorflow_libs(1, 15), None);
    }

    #[test]
    fn openers() {
        let cudart = &RULES[0];
        assert!(cudart.applies("libcudart.so.12.4.127", Some("libcudart.so.12")));
        assert!(!cudart.applies("libcudart_static.a", None));
        let ort = RULES
            .iter()
            .find(|r| {
                r.applies(
                    "onnxruntime_pybind11_state.cpython-311-x86_64-linux-gnu.so",
                    None,
                )
            })
            .unwrap();
        assert!(ort
            .optional
            .contains(&"libonnxruntime_providers_tensorrt.so"));
        assert_eq!(jax_plugin_libs("xla_cuda13").unwrap()[1], "libcudart.so.13");
        assert_eq!(jax_plugin_libs("xla_cuda9"), None);
    }
}
