//! The scans of an image's content that a decision may use, each read at
//! most once per container however many hosts it is judged on.
//!
//! A scan comes either made (the image reader's, for `check --image`: an
//! image is read as a stream, not from a rootfs) or from the container's
//! rootfs, read the first time a host needs it (a container that is not
//! judged on a GPU host never pays for a read). Each scan is one field of
//! [`Scans`] and one line of [`Scans::on_host`]: when a host needs it and
//! how a rootfs is read for it. Adding a scan is adding both, and the
//! field of `core::decide::Inputs` that carries it.

use crate::core::compat::CompatScan;
use crate::core::container::Container;
use crate::core::decide::{self, Declared};
use crate::core::decision::Finding;
use crate::core::detect::{self, Detection};
use crate::core::facts::HostFacts;
use crate::core::kernel_image::{self, Scanned};
use crate::core::libraries::{self, LibraryScan};
use crate::core::policy::{Config, Enforcement};
use std::cell::OnceCell;
use std::path::Path;

/// One scan's result: made by the caller, or read from the rootfs when a
/// host first needs it.
#[derive(Debug)]
enum ScanSlot<T> {
    /// In hand: every host is judged with it (None: not made).
    Given(Option<T>),
    /// Read from the rootfs on first need, then kept.
    Rootfs(OnceCell<T>),
}

impl<T> ScanSlot<T> {
    /// The scan for a host: a made one as it is; else, when there is a
    /// rootfs and `wanted` says this host needs it, the rootfs's, read once.
    fn get(
        &self,
        rootfs: Option<&Path>,
        wanted: impl FnOnce() -> bool,
        read: impl FnOnce(&Path) -> T,
    ) -> Option<&T> {
        match self {
            ScanSlot::Given(made) => made.as_ref(),
            ScanSlot::Rootfs(cell) => {
                let rootfs = rootfs?;
                wanted().then(|| cell.get_or_init(|| read(rootfs)))
            }
        }
    }

    /// The scan in hand: made, or read already.
    fn in_hand(&self) -> Option<&T> {
        match self {
            ScanSlot::Given(made) => made.as_ref(),
            ScanSlot::Rootfs(cell) => cell.get(),
        }
    }

    /// Given now: a rootfs scan is read (when `wanted`), a made one kept.
    fn read_now(
        self,
        rootfs: Option<&Path>,
        wanted: bool,
        read: impl FnOnce(&Path) -> T,
    ) -> ScanSlot<T> {
        match self {
            ScanSlot::Rootfs(cell) => {
                let done = cell.into_inner();
                ScanSlot::Given(done.or_else(|| rootfs.filter(|_| wanted).map(read)))
            }
            made => made,
        }
    }

    fn made_or_readable(&self, rootfs: Option<&Path>) -> bool {
        match self {
            ScanSlot::Given(made) => made.is_some(),
            ScanSlot::Rootfs(_) => rootfs.is_some(),
        }
    }
}

/// Every scan a decision may use.
#[derive(Debug)]
pub struct Scans {
    /// The GPU code of the configured libraries (`[kernel_image]`).
    kernel_image: ScanSlot<Scanned>,
    /// The CUDA forward-compatibility library (`usr/local/cuda/compat`).
    compat: ScanSlot<CompatScan>,
    /// What the container's libraries need at start (`[libraries]`).
    libraries: ScanSlot<LibraryScan>,
}

impl Default for Scans {
    /// Nothing made: each scan reads the container's rootfs when needed.
    fn default() -> Scans {
        Scans {
            kernel_image: ScanSlot::Rootfs(OnceCell::new()),
            compat: ScanSlot::Rootfs(OnceCell::new()),
            libraries: ScanSlot::Rootfs(OnceCell::new()),
        }
    }
}

/// The libraries scan of a GPU container's rootfs: its loader environment
/// from its env and working directory, judged as given GPUs (only GPU
/// containers are judged). Host-independent, so one scan serves every
/// host of a fleet.
fn read_libraries(rootfs: &Path, c: &Container, cfg: &Config) -> LibraryScan {
    let inputs = crate::scan::ldso::resolve::StartEnv::from_env(&c.env, c.cwd.as_deref(), true);
    crate::scan::ldso::scan_rootfs(rootfs, &inputs, &cfg.libraries, false).scan
}

/// What the scans give one host's decision.
pub(crate) struct OnHost<'a> {
    /// The `kernel-image` findings on the GPUs the container sees there.
    pub kernel_image: Vec<Finding>,
    pub scanned: Option<&'a Scanned>,
    pub compat: Option<&'a CompatScan>,
    /// The `library` and `cuda-runtime` findings on this host, and the scan.
    pub libraries: Vec<Finding>,
    pub library_scan: Option<&'a LibraryScan>,
}

impl Scans {
    /// Scans already made (the image reader's); None where none was made.
    pub fn made(kernel_image: Option<Scanned>, compat: Option<CompatScan>) -> Scans {
        Scans {
            kernel_image: ScanSlot::Given(kernel_image),
            compat: ScanSlot::Given(compat),
            libraries: ScanSlot::Given(None),
        }
    }

    /// With the libraries scan made (the image reader's).
    pub fn with_libraries(mut self, libraries: Option<LibraryScan>) -> Scans {
        self.libraries = ScanSlot::Given(libraries);
        self
    }

    /// Every scan made now, from `rootfs` where none was made: fleets scan
    /// once, up front, so every host is judged with the same scans and the
    /// label affinity is written from them. The kernel-image scan is read
    /// unless `[kernel_image]` is off.
    pub fn read_now(self, rootfs: Option<&Path>, c: &Container, cfg: &Config) -> Scans {
        let kernel = cfg.kernel_image.severity != Enforcement::Off;
        let libs = cfg.libraries.severity != Enforcement::Off;
        Scans {
            libraries: self
                .libraries
                .read_now(rootfs, libs, |r| read_libraries(r, c, cfg)),
            kernel_image: self.kernel_image.read_now(rootfs, kernel, |r| {
                crate::scan::libraries::scan_rootfs(r, &cfg.kernel_image)
            }),
            compat: self
                .compat
                .read_now(rootfs, true, crate::scan::compat_lib::scan_rootfs),
        }
    }

    /// The GPU code scan in hand (made, or read already).
    pub fn kernel_image(&self) -> Option<&Scanned> {
        self.kernel_image.in_hand()
    }

    /// The compat-library scan in hand (made, or read already).
    pub fn compat(&self) -> Option<&CompatScan> {
        self.compat.in_hand()
    }

    /// The libraries scan in hand (made, or read already).
    pub fn libraries(&self) -> Option<&LibraryScan> {
        self.libraries.in_hand()
    }

    /// True when the image's GPU code is (or will be) scanned: fleets say
    /// so in their affinity notes.
    pub fn reads_gpu_code(&self, rootfs: Option<&Path>, cfg: &Config) -> bool {
        cfg.kernel_image.severity != Enforcement::Off && self.kernel_image.made_or_readable(rootfs)
    }

    /// The scans a GPU container's decision on a host with these facts
    /// uses, with the kernel-image findings they give there.
    pub(crate) fn on_host<'a>(
        &'a self,
        c: &Container,
        declared: &Declared,
        det: &Detection,
        facts: &HostFacts,
        cfg: &Config,
    ) -> OnHost<'a> {
        let rootfs = c.rootfs.as_deref();
        if !self.kernel_image.made_or_readable(rootfs)
            && !self.compat.made_or_readable(rootfs)
            && !self.libraries.made_or_readable(rootfs)
        {
            // Nothing to scan (`check --env`, a spec without a rootfs): a
            // fleet's host costs no device resolution here.
            return OnHost {
                kernel_image: Vec::new(),
                scanned: None,
                compat: None,
                libraries: Vec::new(),
                library_scan: None,
            };
        }
        let severity = cfg.kernel_image.severity;
        let (idx, _) = detect::resolve(&det.request, facts);
        // The AMD GPUs it gets are judged from the same scan (core::amd).
        let amd = || {
            !crate::core::amd::visible::amd_gpus(c, det, facts)
                .gpus
                .is_empty()
        };
        let scanned = self.kernel_image.get(
            rootfs,
            || (!idx.is_empty() || amd()) && severity != Enforcement::Off,
            |r| crate::scan::libraries::scan_rootfs(r, &cfg.kernel_image),
        );
        let compat = self.compat.get(
            rootfs,
            || {
                let visible: Vec<_> = idx.iter().map(|i| &facts.gpus[*i]).collect();
                decide::forward_compat_need(c, declared, facts, &visible, cfg).is_some()
            },
            crate::scan::compat_lib::scan_rootfs,
        );
        let kernel_image = scanned
            .map(|s| kernel_image::assess_on_host(s, &det.request, facts, severity))
            .unwrap_or_default();
        let library_scan = self.libraries.get(
            rootfs,
            || cfg.libraries.severity != Enforcement::Off,
            |r| read_libraries(r, c, cfg),
        );
        let libraries = library_scan
            .map(|s| libraries::assess(s, Some(facts), &cfg.libraries))
            .unwrap_or_default();
        OnHost {
            kernel_image,
            scanned,
            compat,
            libraries,
            library_scan,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_rootfs_scan_is_read_once_and_only_for_hosts_that_need_it() {
        let slot: ScanSlot<u32> = ScanSlot::Rootfs(OnceCell::new());
        let reads = Cell::new(0);
        let read = |_: &Path| {
            reads.set(reads.get() + 1);
            7
        };
        let root = Some(Path::new("/r"));
        assert_eq!(slot.get(root, || false, read), None);
        assert_eq!(slot.get(root, || true, read), Some(&7));
        assert_eq!(slot.get(root, || true, read), Some(&7));
        // Read already, still not given to a host that does not need it.
        assert_eq!(slot.get(root, || false, read), None);
        assert_eq!(reads.get(), 1);
        assert_eq!(slot.get(None, || true, read), None);
    }

    #[test]
    fn read_now_makes_a_rootfs_scan_once() {
        let reads = Cell::new(0);
        let read = |_: &Path| {
            reads.set(reads.get() + 1);
            5
        };
        let root = Some(Path::new("/r"));
        let slot: ScanSlot<u32> = ScanSlot::Rootfs(OnceCell::new());
        assert_eq!(slot.get(root, || true, read), Some(&5));
        let made = slot.read_now(root, true, read);
        assert_eq!(made.in_hand(), Some(&5));
        assert_eq!(reads.get(), 1);
        let unwanted: ScanSlot<u32> = ScanSlot::Rootfs(OnceCell::new());
        assert_eq!(unwanted.read_now(root, false, read).in_hand(), None);
        let kept = ScanSlot::Given(Some(9)).read_now(root, true, read);
        assert_eq!(kept.in_hand(), Some(&9));
        assert_eq!(reads.get(), 1);
    }

    #[test]
    fn a_made_scan_is_given_to_every_host() {
        let slot = ScanSlot::Given(Some(3));
        assert_eq!(slot.get(None, || false, |_| 0), Some(&3));
        assert!(slot.made_or_readable(None));
        let none: ScanSlot<u32> = ScanSlot::Given(None);
        assert_eq!(none.get(Some(Path::new("/r")), || true, |_| 0), None);
        assert!(!none.made_or_readable(Some(Path::new("/r"))));
    }
}
