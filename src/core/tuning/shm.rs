//! `/dev/shm` for GPU containers (`tuning.shm_size`).
//!
//! PyTorch's DataLoader workers and NCCL's shared-memory transport live in
//! `/dev/shm`; with the 64 MiB engines give by default they die with `bus
//! error` (pytorch/pytorch#5040, #16979), which is why NGC images ask for
//! `--shm-size=1g`.
//!
//! - A `/dev/shm` the spec mounts as its own tmpfs (runc's default spec,
//!   docker's default IPC mode `private`, `--tmpfs /dev/shm`) gets its
//!   `size=` raised, never lowered, every other option
//!   kept. Without `size=`, tmpfs takes half of the host's RAM (the
//!   kernel's Documentation/filesystems/tmpfs.rst); gpu-guard counts that
//!   as half of this host's RAM, so it raises such a mount only on a host
//!   where half the RAM is below `shm_size`. `size=N%` is N percent of the
//!   RAM; `size=0` (and `nr_blocks=0`) is unlimited, never raised.
//! - A `/dev/shm` that is a bind mount (podman's per-container shm,
//!   docker's with `--ipc=shareable`, a Kubernetes pod's sandbox shm,
//!   `--ipc` shared with another container or the host)
//!   belongs to the engine, and other containers may share it: it is never
//!   touched. When its size (read on the host by the caller) is below
//!   `shm_size`, a `tuning` warning names the engine's fix.
//!
//! Pure: the caller reads the host's RAM and the bind source's size
//! ([`ShmHost`]) when [`needs`] says they matter.

use crate::core::container::{Container, Mount};
use crate::core::decision::{Check, Finding, MountEdit};
use crate::core::policy::TuningConfig;
use crate::core::sanitize::esc;
use crate::core::security::SpecAccess;

/// The destination this rule is about.
pub const SHM: &str = "/dev/shm";

/// A mount destination as runc resolves it: absolute, with `//`, `.` and
/// a trailing `/` gone and `..` taken lexically (Go's filepath.Clean, which
/// runc applies to destinations in libcontainer/rootfs_linux.go).
pub fn clean_destination(d: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in d.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The entry that is `/dev/shm` in the container: runc mounts in order,
/// so the last one with that destination covers the others.
pub fn shm_mount(c: &Container) -> Option<&Mount> {
    c.mounts
        .iter()
        .rev()
        .find(|m| clean_destination(&m.destination) == SHM)
}

/// What a tmpfs's options make its size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TmpfsSize {
    Bytes(u64),
    /// `size=0` or `nr_blocks=0`.
    Unlimited,
    /// No `size=`: the kernel's default, half of the RAM.
    Default,
    /// `size=N%`: N percent of the RAM.
    Percent(u64),
    /// An option whose size gpu-guard cannot tell (as written).
    Unknown(String),
}

/// The size the kernel gives a tmpfs mounted with `options`: the last
/// `size=` or `nr_blocks=` wins, as mm/shmem.c shmem_parse_one applies
/// them in order. `nr_blocks` counts pages, whose size depends on the
/// host, so only its `0` is read.
pub fn tmpfs_size(options: &[String]) -> TmpfsSize {
    let mut size = TmpfsSize::Default;
    for o in options {
        if let Some(v) = o.strip_prefix("size=") {
            size = match memparse(v) {
                Some((0, _)) => TmpfsSize::Unlimited,
                Some((n, false)) => TmpfsSize::Bytes(n),
                Some((n, true)) => TmpfsSize::Percent(n),
                None => TmpfsSize::Unknown(o.clone()),
            };
        } else if let Some(v) = o.strip_prefix("nr_blocks=") {
            size = match memparse(v) {
                Some((0, false)) => TmpfsSize::Unlimited,
                _ => TmpfsSize::Unknown(o.clone()),
            };
        }
    }
    size
}

/// The kernel's memparse (lib/cmdline.c) as tmpfs reads `size=`: an
/// unsigned number in C's notation (`0x` hex, a leading `0` octal, else
/// decimal), one optional binary suffix `k m g t p e` in either case, then
/// an optional `%`, then nothing. Returns the value and whether it is a
/// percentage; None for anything else or an overflow.
fn memparse(v: &str) -> Option<(u64, bool)> {
    let (radix, digits) = if let Some(h) = v.strip_prefix("0x").or(v.strip_prefix("0X")) {
        (16, h)
    } else if v.len() > 1 && v.starts_with('0') {
        (8, &v[1..])
    } else {
        (10, v)
    };
    let end = digits
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits.len());
    if end == 0 && radix != 8 {
        return None;
    }
    let n = if end == 0 {
        0
    } else {
        u64::from_str_radix(&digits[..end], radix).ok()?
    };
    let mut rest = &digits[end..];
    let shift = match rest.chars().next().map(|c| c.to_ascii_lowercase()) {
        Some('k') => 10,
        Some('m') => 20,
        Some('g') => 30,
        Some('t') => 40,
        Some('p') => 50,
        Some('e') => 60,
        _ => 0,
    };
    if shift > 0 {
        rest = &rest[1..];
    }
    let n = n.checked_mul(1u64 << shift)?;
    match rest {
        "" => Some((n, false)),
        "%" => Some((n, true)),
        _ => None,
    }
}

/// `options` with the tmpfs size set to `size` bytes: the option the
/// kernel applies (the last `size=` or `nr_blocks=`) replaced in place,
/// else `size=` appended; every other option kept as it is.
pub fn with_size(options: &[String], size: u64) -> Vec<String> {
    let written = if size % 1024 == 0 {
        format!("size={}k", size / 1024)
    } else {
        format!("size={size}")
    };
    let mut out = options.to_vec();
    match out
        .iter()
        .rposition(|o| o.starts_with("size=") || o.starts_with("nr_blocks="))
    {
        Some(i) => out[i] = written,
        None => out.push(written),
    }
    out
}

/// What the caller reads on the host for [`plan`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShmHost {
    /// The host's RAM in bytes (a tmpfs without `size=` gets half).
    pub ram: Option<u64>,
    /// The size of the filesystem a bind-mounted `/dev/shm` comes from
    /// (statfs of its source), or why it could not be read.
    pub bind_size: Option<Result<u64, String>>,
}

/// What the caller should read for [`plan`]: the host's RAM, and the
/// source of a bind-mounted `/dev/shm` to measure. Nothing when the rule
/// is off for this container.
pub fn needs<'a>(c: &'a Container, cfg: &TuningConfig) -> (bool, Option<&'a str>) {
    if cfg.shm_size.bytes().is_none() || !super::tuning_on(c, cfg) {
        return (false, None);
    }
    match shm_mount(c) {
        Some(m) if m.is_bind() => (false, Some(m.source.as_str())),
        Some(m) if m.kind == "tmpfs" => {
            let ram = matches!(
                tmpfs_size(&m.options),
                TmpfsSize::Default | TmpfsSize::Percent(_)
            );
            (ram, None)
        }
        _ => (false, None),
    }
}

/// The plan for one container: the edit (`/dev/shm` and its new size) and
/// the findings. Edits only at [`SpecAccess::Edit`]; the prestart hook can only
/// warn.
pub fn plan(
    c: &Container,
    cfg: &TuningConfig,
    stage: SpecAccess,
    host: &ShmHost,
) -> (Option<(String, MountEdit)>, Vec<Finding>) {
    let Some(want) = cfg.shm_size.bytes() else {
        return (None, Vec::new());
    };
    if !super::tuning_on(c, cfg) {
        return (None, Vec::new());
    }
    let Some(m) = shm_mount(c) else {
        return (None, Vec::new());
    };
    if m.is_bind() {
        return (None, bind_findings(m, want, host).into_iter().collect());
    }
    if m.kind != "tmpfs" {
        return (None, Vec::new());
    }
    let have = match tmpfs_size(&m.options) {
        TmpfsSize::Bytes(n) => n,
        TmpfsSize::Unlimited => return (None, Vec::new()),
        TmpfsSize::Default => match host.ram {
            Some(ram) => ram / 2,
            None => {
                return (
                    None,
                    vec![unknown_size("no size= option (half of the RAM)")],
                )
            }
        },
        TmpfsSize::Percent(p) => match host.ram {
            Some(ram) => ((u128::from(ram) * u128::from(p)) / 100).min(u128::from(u64::MAX)) as u64,
            None => return (None, vec![unknown_size(&format!("size={p}%"))]),
        },
        TmpfsSize::Unknown(o) => return (None, vec![unknown_size(&o)]),
    };
    if have >= want {
        return (None, Vec::new());
    }
    let small = format!(
        "/dev/shm is a {} tmpfs, smaller than tuning.shm_size ({})",
        human(have),
        human(want)
    );
    if stage == SpecAccess::Verify {
        let f = Finding::warning(
            Check::Tuning,
            format!("{small}; the prestart hook cannot change it"),
        )
        .with_fix(format!(
            "start GPU containers through gpu-guard-runtime or podman's precreate hook, or run with --shm-size={}",
            engine_size(want)
        ));
        return (None, vec![f]);
    }
    if !m.patchable {
        let f = Finding::warning(
            Check::Tuning,
            format!("{small}, and the spec repeats its mounts list or the entry's options, so gpu-guard does not rewrite it"),
        )
        .with_fix(format!("run with --shm-size={}", engine_size(want)));
        return (None, vec![f]);
    }
    (
        Some((SHM.to_string(), MountEdit { size: want })),
        Vec::new(),
    )
}

fn unknown_size(what: &str) -> Finding {
    Finding::info(
        Check::Tuning,
        format!(
            "gpu-guard cannot tell the size of /dev/shm ({}); it is left as it is",
            esc(what)
        ),
    )
}

/// The warning for a bind-mounted `/dev/shm` smaller than `want` (or
/// whose size could not be read), with the fix of the engine its source
/// belongs to.
fn bind_findings(m: &Mount, want: u64, host: &ShmHost) -> Option<Finding> {
    let source = esc(&m.source);
    match host.bind_size.as_ref()? {
        Err(e) => Some(Finding::info(
            Check::Tuning,
            format!(
                "cannot read the size of /dev/shm's source {source}: {}; not checked against tuning.shm_size",
                esc(e)
            ),
        )),
        Ok(have) if *have >= want => None,
        Ok(have) => Some(
            Finding::warning(
                Check::Tuning,
                format!(
                    "/dev/shm is {} (a bind mount of {source}), smaller than tuning.shm_size ({}); gpu-guard does not resize a /dev/shm the engine provides",
                    human(*have),
                    human(want)
                ),
            )
            .with_fix(bind_fix(&m.source, want)),
        ),
    }
}

/// The fix for a small bind-mounted `/dev/shm`, by the engine that made
/// it: docker keeps it at `<data-root>/containers/<id>/mounts/shm` (moby
/// container.ShmResourcePath); containerd's CRI plugin under its
/// sandboxes (a pod's containers share the sandbox's 64 MiB); podman and
/// CRI-O under containers/storage's `userdata/shm`.
fn bind_fix(source: &str, want: u64) -> String {
    let flag = format!("--shm-size={}", engine_size(want));
    let k8s = format!(
        "mount an emptyDir volume with medium: Memory (sizeLimit: {}) at /dev/shm in the pod",
        kube_size(want)
    );
    if source.contains("/containers/") && source.ends_with("/mounts/shm") {
        format!("docker run {flag} (docker's default is 64 MiB)")
    } else if source.contains("io.containerd.grpc.v1.cri") || source.contains("/kubelet/pods/") {
        format!("Kubernetes: {k8s} (a pod's /dev/shm is 64 MiB)")
    } else if source.contains("/containers/storage/") || source.ends_with("userdata/shm") {
        format!("podman run {flag}; a Kubernetes pod under CRI-O: {k8s}")
    } else {
        format!("docker or podman: run with {flag}; Kubernetes: {k8s}")
    }
}

/// A size as people read it: `64 MiB`, `1 GiB`, `1000 bytes`.
pub fn human(n: u64) -> String {
    const UNITS: [(u32, &str); 4] = [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")];
    for (shift, unit) in UNITS {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{} {unit}", n >> shift);
        }
    }
    for (shift, unit) in UNITS {
        if n >= 1 << shift {
            return format!("{:.1} {unit}", n as f64 / (1u64 << shift) as f64);
        }
    }
    format!("{n} bytes")
}

/// A size as docker's and podman's `--shm-size` take it (`1g`, `512m`).
fn engine_size(n: u64) -> String {
    suffixed(n, ["t", "g", "m", "k"])
}

/// A size as a Kubernetes quantity (`1Gi`, `512Mi`).
fn kube_size(n: u64) -> String {
    suffixed(n, ["Ti", "Gi", "Mi", "Ki"])
}

/// `n` in the largest binary unit that divides it, else in bytes.
fn suffixed(n: u64, units: [&str; 4]) -> String {
    for (shift, unit) in [40u32, 30, 20, 10].into_iter().zip(units) {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::{Config, ShmSize};

    fn container(m: Mount) -> Container {
        Container {
            mounts: vec![
                Mount {
                    destination: "/proc".into(),
                    kind: "proc".into(),
                    ..Default::default()
                },
                m,
            ],
            ..Default::default()
        }
    }

    fn tmpfs(options: &[&str]) -> Mount {
        Mount {
            destination: "/dev/shm".into(),
            source: "shm".into(),
            kind: "tmpfs".into(),
            options: options.iter().map(|s| s.to_string()).collect(),
            patchable: true,
            host: None,
        }
    }

    fn cfg(size: u64) -> TuningConfig {
        let mut t = Config::default().tuning;
        t.shm_size = ShmSize::Bytes(size);
        t
    }

    #[test]
    fn memparse_reads_as_the_kernel_does() {
        assert_eq!(memparse("65536k"), Some((64 << 20, false)));
        assert_eq!(memparse("64M"), Some((64 << 20, false)));
        assert_eq!(memparse("1g"), Some((1 << 30, false)));
        assert_eq!(memparse("1048576"), Some((1 << 20, false)));
        assert_eq!(memparse("0x100000"), Some((1 << 20, false)));
        assert_eq!(memparse("010"), Some((8, false)));
        assert_eq!(memparse("0"), Some((0, false)));
        assert_eq!(memparse("50%"), Some((50, true)));
        for bad in ["", "k", "1x", "1gb", "1.5g", "-1", "99999999999e"] {
            assert_eq!(memparse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_last_size_option_counts() {
        let o = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(tmpfs_size(&o(&["nosuid"])), TmpfsSize::Default);
        assert_eq!(
            tmpfs_size(&o(&["size=1g", "mode=1777", "size=65536k"])),
            TmpfsSize::Bytes(64 << 20)
        );
        assert_eq!(tmpfs_size(&o(&["size=0"])), TmpfsSize::Unlimited);
        assert_eq!(tmpfs_size(&o(&["nr_blocks=0"])), TmpfsSize::Unlimited);
        assert_eq!(tmpfs_size(&o(&["size=25%"])), TmpfsSize::Percent(25));
        assert!(matches!(
            tmpfs_size(&o(&["nr_blocks=100"])),
            TmpfsSize::Unknown(_)
        ));
        assert_eq!(
            with_size(
                &o(&["nosuid", "size=1m", "mode=1777", "size=65536k"]),
                1 << 30
            ),
            o(&["nosuid", "size=1m", "mode=1777", "size=1048576k"])
        );
        assert_eq!(
            with_size(&o(&["nosuid"]), 1000),
            o(&["nosuid", "size=1000"])
        );
    }

    #[test]
    fn an_own_tmpfs_is_raised_never_lowered() {
        let host = ShmHost::default();
        // runc's default spec: 64 MiB.
        let c = container(tmpfs(&[
            "nosuid",
            "noexec",
            "nodev",
            "mode=1777",
            "size=65536k",
        ]));
        let (edit, f) = plan(&c, &cfg(1 << 30), SpecAccess::Edit, &host);
        assert_eq!(edit, Some(("/dev/shm".into(), MountEdit { size: 1 << 30 })));
        assert!(f.is_empty());
        // Already large enough, or unlimited: nothing.
        let (edit, _) = plan(&c, &cfg(32 << 20), SpecAccess::Edit, &host);
        assert_eq!(edit, None);
        let c = container(tmpfs(&["size=0"]));
        assert_eq!(plan(&c, &cfg(1 << 30), SpecAccess::Edit, &host).0, None);
        // Off by default, off by annotation.
        let c = container(tmpfs(&["size=65536k"]));
        let off = Config::default().tuning;
        assert_eq!(plan(&c, &off, SpecAccess::Edit, &host), (None, Vec::new()));
        let mut c2 = c.clone();
        c2.annotations
            .insert("gpu-guard.tuning".into(), "off".into());
        assert_eq!(plan(&c2, &cfg(1 << 30), SpecAccess::Edit, &host).0, None);
        // The prestart hook cannot edit: a warning.
        let (edit, f) = plan(&c, &cfg(1 << 30), SpecAccess::Verify, &host);
        assert_eq!(edit, None);
        assert_eq!(f.len(), 1);
        assert!(f[0].message.contains("64 MiB tmpfs"), "{}", f[0].message);
        // A mount the spec writes twice is not rewritten.
        let mut m = tmpfs(&["size=65536k"]);
        m.patchable = false;
        let (edit, f) = plan(&container(m), &cfg(1 << 30), SpecAccess::Edit, &host);
        assert_eq!((edit, f.len()), (None, 1));
        // A later mount covers an earlier one; a trailing slash is the same place.
        let mut c = container(tmpfs(&["size=2g"]));
        let mut late = tmpfs(&["size=1m"]);
        late.destination = "/dev//shm/".into();
        c.mounts.push(late);
        assert_eq!(
            plan(&c, &cfg(1 << 30), SpecAccess::Edit, &host).0,
            Some(("/dev/shm".into(), MountEdit { size: 1 << 30 }))
        );
    }

    #[test]
    fn no_size_is_half_the_ram() {
        let c = container(tmpfs(&["nosuid", "mode=1777"]));
        assert_eq!(needs(&c, &cfg(1 << 30)), (true, None));
        let big = ShmHost {
            ram: Some(64 << 30),
            bind_size: None,
        };
        assert_eq!(
            plan(&c, &cfg(1 << 30), SpecAccess::Edit, &big),
            (None, Vec::new())
        );
        let small = ShmHost {
            ram: Some(1 << 30),
            bind_size: None,
        };
        assert_eq!(
            plan(&c, &cfg(1 << 30), SpecAccess::Edit, &small).0,
            Some(("/dev/shm".into(), MountEdit { size: 1 << 30 }))
        );
        // RAM unknown: left as it is, and said so.
        let (edit, f) = plan(&c, &cfg(1 << 30), SpecAccess::Edit, &ShmHost::default());
        assert_eq!(edit, None);
        assert_eq!(f[0].severity, crate::core::decision::Severity::Info);
        let pct = container(tmpfs(&["size=10%"]));
        assert_eq!(
            plan(&pct, &cfg(1 << 30), SpecAccess::Edit, &big).0,
            None,
            "6.4 GiB is enough"
        );
    }

    #[test]
    fn a_bind_mount_is_never_touched() {
        let docker = Mount {
            destination: "/dev/shm".into(),
            source: "/var/lib/docker/containers/abc/mounts/shm".into(),
            kind: "bind".into(),
            options: vec!["rbind".into(), "rprivate".into()],
            patchable: true,
            host: None,
        };
        let c = container(docker);
        assert_eq!(
            needs(&c, &cfg(1 << 30)),
            (false, Some("/var/lib/docker/containers/abc/mounts/shm"))
        );
        let small = ShmHost {
            ram: None,
            bind_size: Some(Ok(64 << 20)),
        };
        let (edit, f) = plan(&c, &cfg(1 << 30), SpecAccess::Edit, &small);
        assert_eq!(edit, None);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].check, Check::Tuning);
        assert!(f[0].message.contains("64 MiB"), "{}", f[0].message);
        let fix = f[0].fix.as_deref().unwrap();
        assert!(fix.contains("docker run --shm-size=1g"), "{fix}");
        let big = ShmHost {
            ram: None,
            bind_size: Some(Ok(2 << 30)),
        };
        assert_eq!(
            plan(&c, &cfg(1 << 30), SpecAccess::Edit, &big),
            (None, Vec::new())
        );
        // A pod's sandbox shm: the Kubernetes fix.
        let mut k = c.clone();
        k.mounts[1].source = "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/abc/shm".into();
        let (_, f) = plan(&k, &cfg(1 << 30), SpecAccess::Edit, &small);
        let fix = f[0].fix.as_deref().unwrap();
        assert!(
            fix.contains("emptyDir") && fix.contains("medium: Memory") && fix.contains("1Gi"),
            "{fix}"
        );
        // Unreadable source: said so, nothing else.
        let err = ShmHost {
            ram: None,
            bind_size: Some(Err("permission denied".into())),
        };
        let (_, f) = plan(&c, &cfg(1 << 30), SpecAccess::Edit, &err);
        assert_eq!(f[0].severity, crate::core::decision::Severity::Info);
    }

    #[test]
    fn sizes_for_people_and_engines() {
        assert_eq!(human(64 << 20), "64 MiB");
        assert_eq!(human(1 << 30), "1 GiB");
        assert_eq!(human(1500), "1.5 KiB");
        assert_eq!(human(10), "10 bytes");
        assert_eq!(engine_size(512 << 20), "512m");
        assert_eq!(kube_size(1 << 30), "1Gi");
        assert_eq!(engine_size(1000), "1000");
    }
}
