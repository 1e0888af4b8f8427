//! Shared helpers for the probe and fake-NVML tests: the fake library, the
//! gpu-guard binary, temp trees that stand in for /proc/driver/nvidia and
//! /dev, and a child-process runner that bounds its own time.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const PROFILES: &[&str] = &[
    "a100",
    "h100x8",
    "t4-a10",
    "a100-mig",
    "driver-no-gpu",
    "no-driver",
    "geforce-545",
    "tesla-535",
    "l4x2-minor",
];

/// The binary reads the GPU_GUARD_PROC_NVIDIA, GPU_GUARD_DEV_DIR,
/// GPU_GUARD_BOOT_ID_FILE, GPU_GUARD_PROC_MODULES and GPU_GUARD_PROC_DEVICES
/// overrides only when built with the `test-hooks` feature. Without it the
/// tests that point the binary at a fake host would probe this machine
/// instead; Cargo builds this binary only with the feature
/// (`required-features`) and main.rs refuses to compile without it, so this
/// marks the tests that rely on it and checks nothing at run time.
pub fn require_test_hooks() {}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn gpu_guard() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gpu-guard"))
}

pub fn profile(name: &str) -> PathBuf {
    repo().join("tests/data/hosts").join(format!("{name}.json"))
}

pub fn profile_json(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(profile(name)).expect("read profile");
    serde_json::from_str(&text).expect("profile is JSON")
}

/// The facts `gpu-guard host --json` prints for a profile answered by the
/// fake NVML: the profile, with each GPU's health as NVML reports it
/// (every profile here is healthy: no `nvml_health`).
pub fn probed_json(name: &str) -> serde_json::Value {
    let mut v = profile_json(name);
    if let Some(gpus) = v["gpus"].as_array_mut() {
        for g in gpus {
            g["health"] = serde_json::json!({"state": "ok", "reasons": []});
        }
    }
    v
}

/// The fake libnvidia-ml (crates/fake-nvml), built once per test binary
/// into this build's target directory. `FAKE_NVML_LIB` names a prebuilt one.
pub fn fake_lib() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        if let Some(p) = std::env::var_os("FAKE_NVML_LIB").filter(|p| !p.is_empty()) {
            let p = PathBuf::from(p);
            assert!(p.is_file(), "FAKE_NVML_LIB={} does not exist", p.display());
            return p;
        }
        // target/<profile>/deps/<test exe> -> target/<profile>
        let exe = std::env::current_exe().expect("current_exe");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("test exe in target/<profile>/deps")
            .to_path_buf();
        let target_dir = profile_dir.parent().expect("target dir").to_path_buf();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "fake-nvml", "--target-dir"])
            .arg(&target_dir)
            .current_dir(repo());
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let out = cmd.output().expect("run cargo build -p fake-nvml");
        assert!(
            out.status.success(),
            "cargo build -p fake-nvml failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lib = profile_dir.join("libfake_nvml.so");
        assert!(lib.is_file(), "{} was not built", lib.display());
        lib
    })
    .clone()
}

/// Temp dirs and the skip rule come from the shared support module.
pub use crate::support::{skip_or_fail, TempDir};

/// The /proc/driver/nvidia/version text of a driver.
pub fn version_text(driver: &str) -> String {
    format!(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {driver}  Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Feb 22 01:25:25 UTC 2024\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
}

/// A host under `root`: proc/ (as /proc/driver/nvidia, from the profile
/// unless `with_proc` is false), dev/ with the device nodes of the
/// profile's GPUs, boot_id, modules and devices (as /proc/modules and
/// /proc/devices: the nvidia module and its character devices when the
/// profile has a driver), and sys/ (as /sys, empty until `set_numa`).
pub struct FakeHost {
    pub dir: TempDir,
}

impl FakeHost {
    pub fn new(profile_name: &str, with_proc: bool) -> FakeHost {
        FakeHost::from_facts(&profile_json(profile_name), with_proc)
    }

    /// A host answering from `facts` (written to `facts.json` in its dir,
    /// [`FakeHost::facts_file`]): a profile a test changes.
    pub fn from_facts(facts: &serde_json::Value, with_proc: bool) -> FakeHost {
        let dir = TempDir::new("host");
        std::fs::write(dir.join("facts.json"), facts.to_string()).unwrap();
        std::fs::create_dir_all(dir.join("proc")).unwrap();
        std::fs::create_dir_all(dir.join("dev")).unwrap();
        std::fs::write(
            dir.join("boot_id"),
            "11111111-2222-3333-4444-555555555555\n",
        )
        .unwrap();
        let h = FakeHost { dir };
        // The module is loaded wherever NVML answers with a driver, with
        // /proc/driver/nvidia or without (a host whose /proc tree is
        // hidden): its character devices are registered either way.
        let loaded = facts["driver_version"].is_string();
        h.set_module_loaded(loaded);
        if let Some(driver) = facts["driver_version"].as_str() {
            if with_proc {
                h.set_driver(driver);
                for (i, g) in facts["gpus"].as_array().unwrap().iter().enumerate() {
                    // /proc spells the bus location with a 4-digit lowercase domain.
                    let bus = g["pci_bus_id"].as_str().unwrap_or("00000000:00:00.0");
                    let proc_bus = bus[4..].to_lowercase();
                    let d = h.dir.join("proc/gpus").join(&proc_bus);
                    std::fs::create_dir_all(&d).unwrap();
                    let minor = g["minor_number"].as_u64().unwrap_or(i as u64);
                    std::fs::write(
                        d.join("information"),
                        format!(
                            "Model:           {}\nIRQ:             10\nGPU UUID:        {}\nVideo BIOS:      96.00.99.00.01\nBus Type:        PCIe\nDMA Size:        52 bits\nDMA Mask:        0xfffffffffffff\nBus Location:    {proc_bus}\nDevice Minor:    {minor}\nGPU Excluded:    No\n",
                            g["name"].as_str().unwrap_or(""),
                            g["uuid"].as_str().unwrap_or(""),
                        ),
                    )
                    .unwrap();
                }
            }
            h.device_node("nvidiactl", 195, 255, 0o666);
            h.device_node("nvidia-uvm", 508, 0, 0o666);
            for (i, g) in facts["gpus"].as_array().unwrap().iter().enumerate() {
                let minor = g["minor_number"].as_u64().unwrap_or(i as u64) as u32;
                h.device_node(&format!("nvidia{minor}"), 195, minor, 0o666);
            }
        }
        std::fs::create_dir_all(h.sys()).unwrap();
        h
    }

    /// dev/NAME as the driver makes it: a character device MAJOR:MINOR
    /// with `mode` (mknod needs root, as the runc tests here do; without
    /// it a regular file stands in, which the device-node check reports as
    /// not a character device).
    pub fn device_node(&self, name: &str, major: u32, minor: u32, mode: u32) {
        use nix::sys::stat::{makedev, mknod, Mode, SFlag};
        let p = self.dev().join(name);
        let _ = std::fs::remove_file(&p);
        let perm = Mode::from_bits_truncate(mode);
        let made = mknod(
            &p,
            SFlag::S_IFCHR,
            perm,
            makedev(major.into(), minor.into()),
        );
        if made.is_err() {
            std::fs::write(&p, b"").unwrap();
        }
        // mknod applies the umask: set the mode asked for.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// sys/ (as /sys): the PCI device at `bus` (NVML's spelling) on NUMA
    /// node `node` (-1: none) with local CPUs `cpus`.
    pub fn set_numa(&self, bus: &str, node: i32, cpus: &str) {
        let id = bus.get(4..).unwrap_or(bus).to_lowercase();
        let d = self.sys().join("bus/pci/devices").join(id);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("numa_node"), format!("{node}\n")).unwrap();
        std::fs::write(d.join("local_cpulist"), format!("{cpus}\n")).unwrap();
    }

    /// sys/devices/system: the CPUs online and the nodes with memory.
    pub fn set_cpus(&self, online: &str, memory_nodes: &str) {
        let s = self.sys().join("devices/system");
        std::fs::create_dir_all(s.join("cpu")).unwrap();
        std::fs::create_dir_all(s.join("node")).unwrap();
        std::fs::write(s.join("cpu/online"), format!("{online}\n")).unwrap();
        std::fs::write(s.join("node/has_memory"), format!("{memory_nodes}\n")).unwrap();
    }

    pub fn sys(&self) -> PathBuf {
        self.dir.join("sys")
    }

    /// (Re)writes proc/version for `driver`, as a driver reload does.
    pub fn set_driver(&self, driver: &str) {
        std::fs::write(self.dir.join("proc/version"), version_text(driver)).unwrap();
    }

    /// (Re)writes modules and devices as the kernel shows them with the
    /// nvidia module loaded, or not.
    pub fn set_module_loaded(&self, loaded: bool) {
        let mut modules = String::from("loop 32768 0 - Live 0x0000000000000000\n");
        let mut devices = String::from("Character devices:\n  1 mem\n  5 /dev/tty\n");
        if loaded {
            modules.push_str("nvidia_uvm 1437696 0 - Live 0x0000000000000000 (POE)\nnvidia 56532992 2 nvidia_uvm, Live 0x0000000000000000 (POE)\n");
            devices.push_str("195 nvidia-frontend\n508 nvidia-uvm\n");
        }
        devices.push_str("\nBlock devices:\n  7 loop\n");
        std::fs::write(self.modules(), modules).unwrap();
        std::fs::write(self.devices(), devices).unwrap();
    }

    pub fn modules(&self) -> PathBuf {
        self.dir.join("modules")
    }

    pub fn devices(&self) -> PathBuf {
        self.dir.join("devices")
    }

    pub fn set_boot_id(&self, id: &str) {
        std::fs::write(self.dir.join("boot_id"), format!("{id}\n")).unwrap();
    }

    pub fn proc(&self) -> PathBuf {
        self.dir.join("proc")
    }

    pub fn dev(&self) -> PathBuf {
        self.dir.join("dev")
    }

    pub fn boot_id(&self) -> PathBuf {
        self.dir.join("boot_id")
    }

    pub fn paths(&self) -> gpu_guard::host::ProbePaths {
        gpu_guard::host::ProbePaths {
            proc_nvidia: self.proc(),
            dev: self.dev(),
            boot_id: Some(self.boot_id()),
            modules: Some(self.modules()),
            devices: Some(self.devices()),
            sys: self.sys(),
            // The library runs NVML in this binary (`gpu-guard __probe`),
            // not in the test executable.
            probe_exe: gpu_guard(),
            // No KFD topology or amdgpu module here: NVIDIA facts only.
            host_root: self.dir.join("host-root"),
        }
    }

    /// The facts the fake NVML answers from in [`FakeHost::command_own`].
    pub fn facts_file(&self) -> PathBuf {
        self.dir.join("facts.json")
    }

    /// [`FakeHost::command`] answering from this host's own facts file.
    pub fn command_own(&self, config: &Path) -> Command {
        let mut c = self.command("a100", config);
        c.env("FAKE_NVML_FACTS", self.facts_file());
        c
    }

    /// A gpu-guard config in this host's dir; `host_extra` lines go under [host].
    pub fn config(&self, lib: &Path, cache: Option<&Path>, host_extra: &str) -> PathBuf {
        let p = self.dir.join(format!(
            "config-{}.toml",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let cache = cache.map(|c| c.display().to_string()).unwrap_or_default();
        std::fs::write(
            &p,
            format!(
                "[host]\nnvml_library = \"{}\"\ncache_file = \"{cache}\"\n{host_extra}\n[log]\nsyslog = false\n",
                lib.display()
            ),
        )
        .unwrap();
        p
    }

    /// The test-only variables that point the binary at this host's fake
    /// paths (read only by a `test-hooks` build: see [`require_test_hooks`]).
    pub fn env(&self) -> Vec<(&'static str, PathBuf)> {
        require_test_hooks();
        vec![
            ("GPU_GUARD_PROC_NVIDIA", self.proc()),
            ("GPU_GUARD_DEV_DIR", self.dev()),
            ("GPU_GUARD_BOOT_ID_FILE", self.boot_id()),
            ("GPU_GUARD_PROC_MODULES", self.modules()),
            ("GPU_GUARD_PROC_DEVICES", self.devices()),
            ("GPU_GUARD_SYS_DIR", self.sys()),
        ]
    }

    /// A command for the gpu-guard binary with this host's fake paths and
    /// the fake NVML answering from `profile_name`; no inherited fault knobs.
    pub fn command(&self, profile_name: &str, config: &Path) -> Command {
        let mut c = Command::new(gpu_guard());
        c.arg("--config")
            .arg(config)
            .env("FAKE_NVML_FACTS", profile(profile_name))
            .envs(self.env())
            .env_remove("FAKE_NVML_FAIL")
            .env_remove("FAKE_NVML_INIT_DELAY_MS")
            .env_remove("GPU_GUARD_CONFIG")
            .stdin(Stdio::null());
        c
    }
}

/// Runs a command, killing it (and failing the test) past `limit`.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    loop {
        match child.try_wait().expect("try_wait") {
            Some(_) => break,
            None if start.elapsed() > limit => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("wait");
                panic!(
                    "command ran past {limit:?}: {cmd:?}\nstderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    let took = start.elapsed();
    (child.wait_with_output().expect("output"), took)
}

pub fn stdout_json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
