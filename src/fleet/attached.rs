//! The container `check` judges when no spec says how GPUs attach: `check
//! --image`, and `check --env` alone (one host or a fleet) when the env
//! says anything about GPUs, are judged as `docker run --gpus all` would
//! start them (design.md, "`gpu-guard check` before scheduling"; `check
//! --help`): a requirement checked alone is never a skip that would count
//! as runnable on every host.
//!
//! `--gpus all` makes moby's NVIDIA device driver add
//! `NVIDIA_VISIBLE_DEVICES=all` and NVIDIA's hook to the spec (moby
//! daemon/nvidia_linux.go). So the variable is set to `all` when neither the
//! image nor `--env` sets it, except for a legacy CUDA image (`CUDA_VERSION`
//! without `NVIDIA_REQUIRE_CUDA`), whose unset variable already means every
//! GPU to NVIDIA's toolkit (internal/config/image/cuda_image.go) and keeps
//! that wording; a value that is set (`void`, `none`, a list) is kept. The
//! GPUs count as attached (an env request alone need not be one).
//!
//! A container whose env asks for AMD GPUs (`AMD_VISIBLE_DEVICES`, as AMD's
//! runtime reads it) and sets no `NVIDIA_VISIBLE_DEVICES` is the one AMD's
//! instructions start (`docker run --device=/dev/kfd --device=/dev/dri`, or
//! `--runtime=amd` with `AMD_VISIBLE_DEVICES`): AMD GPUs only, so no NVIDIA
//! request is added; a ROCm image is then judged on AMD nodes, not refused
//! there for the NVIDIA driver they lack.

use crate::core::container::Container;

/// `check --env` without `--spec`/`--bundle` (one host and fleets): an env
/// that says anything about GPUs (an `NVIDIA_*` variable, `CUDA_VERSION`)
/// describes a CUDA image, judged as [`as_run_with_all_gpus`]; an env that
/// says nothing about them (`--env PATH=/bin`) describes no GPU container
/// and stays a skip, as before.
pub fn env_alone_as_run_with_gpus(c: &mut Container) {
    let gpu_env = c
        .env
        .vars()
        .keys()
        .any(|k| k.starts_with("NVIDIA_") || *k == "CUDA_VERSION");
    if gpu_env {
        as_run_with_all_gpus(c);
    }
}

/// Makes `c` the container `docker run --gpus all` with its env would be.
/// Callers: `check --image`, and [`env_alone_as_run_with_gpus`].
pub fn as_run_with_all_gpus(c: &mut Container) {
    let legacy = !c.env.get("CUDA_VERSION").unwrap_or("").is_empty()
        && c.env.get("NVIDIA_REQUIRE_CUDA").unwrap_or("").is_empty();
    let amd = crate::core::detect::amd_env_request(c).is_some();
    if !c.env.contains("NVIDIA_VISIBLE_DEVICES") && !legacy && !amd {
        c.env.set("NVIDIA_VISIBLE_DEVICES", "all");
    }
    c.assume_attached = true;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::container::Env;

    fn env(pairs: &[&str]) -> Container {
        Container::from_env(Env::from_entries(pairs))
    }

    #[test]
    fn a_requirement_alone_asks_for_every_gpu() {
        let mut c = env(&["NVIDIA_REQUIRE_CUDA=cuda>=12.6"]);
        as_run_with_all_gpus(&mut c);
        assert_eq!(c.env.get("NVIDIA_VISIBLE_DEVICES"), Some("all"));
        assert!(crate::core::detect::classify(&c).gpu);
        let mut void = env(&["NVIDIA_VISIBLE_DEVICES=void"]);
        as_run_with_all_gpus(&mut void);
        assert_eq!(void.env.get("NVIDIA_VISIBLE_DEVICES"), Some("void"));
        let mut legacy = env(&["CUDA_VERSION=11.8.0"]);
        as_run_with_all_gpus(&mut legacy);
        assert!(!legacy.env.contains("NVIDIA_VISIBLE_DEVICES"));
        assert!(crate::core::detect::classify(&legacy).gpu);
        let mut plain = env(&["PATH=/bin"]);
        env_alone_as_run_with_gpus(&mut plain);
        assert!(!plain.env.contains("NVIDIA_VISIBLE_DEVICES"));
        let mut req = env(&["NVIDIA_REQUIRE_CUDA=cuda>=12.6"]);
        env_alone_as_run_with_gpus(&mut req);
        assert_eq!(req.env.get("NVIDIA_VISIBLE_DEVICES"), Some("all"));
        // AMD GPUs asked for: AMD's only.
        let mut rocm = env(&["AMD_VISIBLE_DEVICES=all"]);
        as_run_with_all_gpus(&mut rocm);
        assert!(!rocm.env.contains("NVIDIA_VISIBLE_DEVICES"));
        let d = crate::core::detect::classify(&rocm);
        assert!(d.gpu && d.amd_only, "{d:?}");
        let mut none = env(&["AMD_VISIBLE_DEVICES=none"]);
        as_run_with_all_gpus(&mut none);
        assert_eq!(none.env.get("NVIDIA_VISIBLE_DEVICES"), Some("all"));
    }
}
