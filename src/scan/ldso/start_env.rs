//! What the container's spec gives the loader (its env, working directory,
//! whether NVIDIA's runtime injects driver libraries): the input of every
//! libraries scan.

/// What the container's spec says that the loader depends on.
#[derive(Clone, Debug, Default)]
pub struct StartEnv {
    pub ld_library_path: Option<String>,
    /// `process.cwd` (absolute; `/` when unset).
    pub cwd: String,
    /// The container is given GPUs: NVIDIA's runtime injects its libraries.
    pub gpu: bool,
    /// `NVIDIA_DRIVER_CAPABILITIES`, as set.
    pub capabilities: Option<String>,
    /// The host driver's version, for the injected files' names.
    pub driver_version: Option<String>,
    /// The image's machine (`EM_*`); None: from its loader, else this host's.
    pub machine: Option<u16>,
}

impl StartEnv {
    /// What a container's env and working directory give the loader; `gpu`:
    /// the container is given GPUs (NVIDIA's runtime injects its libraries).
    pub fn from_env(env: &crate::core::container::Env, cwd: Option<&str>, gpu: bool) -> StartEnv {
        StartEnv {
            ld_library_path: env.get("LD_LIBRARY_PATH").map(String::from),
            cwd: cwd
                .filter(|c| c.starts_with('/'))
                .unwrap_or("/")
                .to_string(),
            gpu,
            capabilities: env.get("NVIDIA_DRIVER_CAPABILITIES").map(String::from),
            driver_version: None,
            machine: None,
        }
    }
}
