//! The pure core: everything that decides, and nothing that reads a file,
//! probes a device or parses a command line. Every entry point builds a
//! [`container::Container`] and [`facts::HostFacts`], calls
//! [`decide`], and carries out the [`decision::Decision`].

pub mod admission;
pub mod amd;
pub mod amd_judge;
pub mod arch;
pub mod capability;
pub mod cdi;
pub mod compat;
pub mod compat_check;
pub mod container;
pub mod cpulist;
pub mod cri_facts;
pub mod cuda_tables;
pub mod decide;
pub mod decision;
pub mod detect;
pub mod device_access;
pub mod device_nodes;
pub mod device_table;
pub mod diagnosis;
pub mod dlopen_libs;
pub mod driver_libs;
pub mod enforcement;
pub mod exec_policy;
pub mod facts;
pub mod gpu_health;
pub mod health;
pub mod kernel_image;
pub mod libraries;
pub mod library_fixes;
pub mod library_scan;
pub mod logfmt;
pub mod policy;
pub mod policy_check;
pub mod profiles;
pub mod report;
pub mod requirement;
pub mod requirement_check;
pub mod runtime_engines;
pub mod sanitize;
pub mod security;
pub mod tuning;
pub mod tuning_config;
pub mod version;
pub mod workload;
