//! Which character devices are which vendor's GPU devices, by number, not
//! by name: a container gets a GPU through a node of the GPU driver's major
//! number whatever path the node has (`--device /dev/nvidia0:/dev/g0`), or
//! through a device cgroup rule that lets it create one
//! ([`crate::core::device_access`]).
//!
//! One table, vendor-neutral: each row is a vendor, the role of its
//! nodes, and the major number, fixed or as the driver registers it in the
//! host's `/proc/devices` (a dynamic major, drawn at module load:
//! `alloc_chrdev_region`). The names are read once per decision from the
//! host ([`HostMajors`], `host::device_nodes`).
//!
//! NVIDIA (open-gpu-kernel-modules kernel-open/common/inc/nv-chardev-numbers.h;
//! nvidia-container-toolkit internal/info/proc/devices/devices.go):
//! - major 195 (`nvidia`, before driver 550 `nvidia-frontend`): minors
//!   0..=247 are the GPUs (`/dev/nvidiaN`, the GPU whose `minor_number`
//!   is N), 254 `/dev/nvidia-modeset`, 255 `/dev/nvidiactl`;
//! - `nvidia-uvm` (minor 0 `/dev/nvidia-uvm`, 1 `/dev/nvidia-uvm-tools`),
//!   `nvidia-caps` (`/dev/nvidia-caps/nvidia-capN`, MIG access),
//!   `nvidia-caps-imex-channels`, `nvidia-nvswitch`, `nvidia-nvlink`: dynamic
//!   majors, by name; like the toolkit, any other `/proc/devices` name
//!   beginning with `nvidia` is NVIDIA's too.
//!
//! AMD (Linux include/uapi/drm/drm.h and drivers/gpu/drm/drm_drv.c,
//! `DRM_MAJOR` 226, render minors from 128; amdkfd kfd_chardev.c registers
//! `kfd` with a dynamic major): `/dev/kfd` and the DRM render nodes. They
//! are recorded as AMD device signals in the detection and make a GPU
//! container of AMD GPUs (core::amd::visible says which).

/// Whose device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Vendor {
    Nvidia,
    Amd,
}

impl Vendor {
    pub fn name(self) -> &'static str {
        match self {
            Vendor::Nvidia => "nvidia",
            Vendor::Amd => "amd",
        }
    }
}

/// What a node of the class gives the container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// One GPU, named by the minor number (`/dev/nvidiaN`).
    Gpu,
    /// A node every GPU of the vendor is used through, naming none
    /// (`/dev/nvidiactl`, `/dev/nvidia-uvm`, `/dev/nvidia-caps/*`).
    Shared,
    /// AMD's compute interface, shared by all its GPUs (`/dev/kfd`).
    Compute,
    /// A DRM render node (`/dev/dri/renderD128` and on).
    Render,
}

/// How the class's major number is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Major {
    /// Reserved for the driver (LANANA's devices.txt; the driver's headers).
    Fixed(u32),
    /// Drawn at module load: the `/proc/devices` line with this name.
    Named(&'static str),
    /// Any `/proc/devices` name beginning with this.
    NamePrefix(&'static str),
}

/// One row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceClass {
    pub vendor: Vendor,
    pub role: Role,
    pub major: Major,
    /// The minors of the class, inclusive.
    pub minors: (u32, u32),
    /// The nodes' usual names, for messages.
    pub nodes: &'static str,
}

const ALL_MINORS: (u32, u32) = (0, u32::MAX);

/// NVIDIA's GPU minors (nv-chardev-numbers.h `NV_MINOR_DEVICE_NUMBER_REGULAR_MAX`).
pub const NVIDIA_GPU_MINORS: (u32, u32) = (0, 247);
/// NVIDIA's reserved major (nv-chardev-numbers.h `NV_MAJOR_DEVICE_NUMBER`).
pub const NVIDIA_MAJOR: u32 = 195;
/// The DRM major (include/uapi/drm/drm.h `DRM_MAJOR`).
pub const DRM_MAJOR: u32 = 226;

/// The classes, first match wins.
pub const TABLE: &[DeviceClass] = &[
    DeviceClass {
        vendor: Vendor::Nvidia,
        role: Role::Gpu,
        major: Major::Fixed(NVIDIA_MAJOR),
        minors: NVIDIA_GPU_MINORS,
        nodes: "/dev/nvidiaN",
    },
    DeviceClass {
        vendor: Vendor::Nvidia,
        role: Role::Shared,
        major: Major::Fixed(NVIDIA_MAJOR),
        minors: (248, 255),
        nodes: "/dev/nvidiactl, /dev/nvidia-modeset",
    },
    DeviceClass {
        vendor: Vendor::Nvidia,
        role: Role::Shared,
        major: Major::Named("nvidia-uvm"),
        minors: ALL_MINORS,
        nodes: "/dev/nvidia-uvm, /dev/nvidia-uvm-tools",
    },
    DeviceClass {
        vendor: Vendor::Nvidia,
        role: Role::Shared,
        major: Major::Named("nvidia-caps"),
        minors: ALL_MINORS,
        nodes: "/dev/nvidia-caps/nvidia-capN",
    },
    DeviceClass {
        vendor: Vendor::Nvidia,
        role: Role::Shared,
        major: Major::Named("nvidia-caps-imex-channels"),
        minors: ALL_MINORS,
        nodes: "/dev/nvidia-caps-imex-channels/channelN",
    },
    DeviceClass {
        vendor: Vendor::Nvidia,
        role: Role::Shared,
        major: Major::Named("nvidia-nvswitch"),
        minors: ALL_MINORS,
        nodes: "/dev/nvidia-nvswitchN",
    },
    DeviceClass {
        vendor: Vendor::Nvidia,
        role: Role::Shared,
        major: Major::Named("nvidia-nvlink"),
        minors: ALL_MINORS,
        nodes: "/dev/nvidia-nvlink",
    },
    DeviceClass {
        vendor: Vendor::Nvidia,
        role: Role::Shared,
        major: Major::NamePrefix("nvidia"),
        minors: ALL_MINORS,
        nodes: "/dev/nvidia-*",
    },
    DeviceClass {
        vendor: Vendor::Amd,
        role: Role::Compute,
        major: Major::Named("kfd"),
        minors: ALL_MINORS,
        nodes: "/dev/kfd",
    },
    DeviceClass {
        vendor: Vendor::Amd,
        role: Role::Render,
        major: Major::Fixed(DRM_MAJOR),
        minors: (128, u32::MAX),
        nodes: "/dev/dri/renderD*",
    },
];

/// The character-device majors this host's kernel registered, by name
/// (`/proc/devices`, "Character devices:"). Empty when not read (then only
/// the fixed majors are known).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostMajors {
    names: Vec<(String, u32)>,
}

impl HostMajors {
    /// The registrations of `names` that the table can use: those with a
    /// name it looks up, or a major it fixes (kept small: a config holds
    /// it, and every container start reads it).
    pub fn new(names: impl IntoIterator<Item = (String, u32)>) -> HostMajors {
        let used = |n: &str, m: u32| {
            TABLE.iter().any(|c| match c.major {
                Major::Fixed(f) => f == m,
                Major::Named(x) => x == n,
                Major::NamePrefix(p) => n.starts_with(p),
            })
        };
        HostMajors {
            names: names.into_iter().filter(|(n, m)| used(n, *m)).collect(),
        }
    }

    /// The majors registered under `name`.
    fn named(&self, name: &str) -> impl Iterator<Item = u32> + '_ {
        let name = name.to_string();
        self.names
            .iter()
            .filter(move |(n, _)| *n == name)
            .map(|(_, m)| *m)
    }

    /// Whether `vendor`'s driver registered a device on this host: what a
    /// rule naming every device ([`crate::core::device_access`]) can give.
    pub fn has(&self, vendor: Vendor) -> bool {
        let majors = vendor_majors(vendor, self);
        self.names.iter().any(|(_, m)| majors.contains(m))
    }
}

/// The majors of `class` on a host.
pub fn majors_of(class: &DeviceClass, host: &HostMajors) -> Vec<u32> {
    match class.major {
        Major::Fixed(m) => vec![m],
        Major::Named(n) => host.named(n).collect(),
        Major::NamePrefix(p) => host
            .names
            .iter()
            .filter(|(n, _)| n.starts_with(p))
            .map(|(_, m)| *m)
            .collect(),
    }
}

/// Every major of `vendor`'s classes on a host, once each, ascending.
pub fn vendor_majors(vendor: Vendor, host: &HostMajors) -> Vec<u32> {
    let mut out: Vec<u32> = TABLE
        .iter()
        .filter(|c| c.vendor == vendor)
        .flat_map(|c| majors_of(c, host))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The class of the character device `major:minor` on a host, if it is a
/// GPU vendor's.
pub fn class_of(major: u32, minor: u32, host: &HostMajors) -> Option<&'static DeviceClass> {
    TABLE
        .iter()
        .find(|c| minor >= c.minors.0 && minor <= c.minors.1 && majors_of(c, host).contains(&major))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_by_number_and_names_from_the_host() {
        let none = HostMajors::default();
        let host = HostMajors::new([
            ("nvidia".to_string(), 195),
            ("nvidia-uvm".to_string(), 508),
            ("nvidia-caps".to_string(), 511),
            ("nvidia-nvswitch".to_string(), 507),
            ("kfd".to_string(), 235),
            ("fuse".to_string(), 10),
        ]);
        let role = |maj, min, h: &HostMajors| class_of(maj, min, h).map(|c| (c.vendor, c.role));
        assert_eq!(role(195, 0, &none), Some((Vendor::Nvidia, Role::Gpu)));
        assert_eq!(role(195, 247, &none), Some((Vendor::Nvidia, Role::Gpu)));
        assert_eq!(role(195, 255, &none), Some((Vendor::Nvidia, Role::Shared)));
        assert_eq!(role(195, 254, &none), Some((Vendor::Nvidia, Role::Shared)));
        // A dynamic major is NVIDIA's only where this host registered it so.
        assert_eq!(role(508, 0, &none), None);
        assert_eq!(role(508, 1, &host), Some((Vendor::Nvidia, Role::Shared)));
        assert_eq!(role(511, 3, &host), Some((Vendor::Nvidia, Role::Shared)));
        assert_eq!(role(507, 0, &host), Some((Vendor::Nvidia, Role::Shared)));
        assert_eq!(role(10, 229, &host), None);
        assert_eq!(role(235, 0, &host), Some((Vendor::Amd, Role::Compute)));
        assert_eq!(role(226, 128, &none), Some((Vendor::Amd, Role::Render)));
        assert_eq!(role(226, 0, &none), None);
        assert!(host.has(Vendor::Nvidia) && host.has(Vendor::Amd));
        assert!(!none.has(Vendor::Nvidia));
        assert!(!HostMajors::new([("fuse".to_string(), 10)]).has(Vendor::Nvidia));
        assert_eq!(
            vendor_majors(Vendor::Nvidia, &host),
            vec![195, 507, 508, 511]
        );
    }
}
