//! TEST ONLY: a stand-in for `libnvidia-ml.so.1` that answers from a host
//! facts JSON file (docs/interfaces.md, "Host facts JSON").
//!
//! It is built as `libfake_nvml.so`, a name no loader looks for, and is never
//! installed: gpu-guard only loads it when a test config names it in
//! `host.nvml_library`. Never ship it, never put it on a library path.
//!
//! Environment:
//! - `FAKE_NVML_FACTS=FILE`: the host facts JSON to answer from (required;
//!   without it `nvmlInit` fails with NVML_ERROR_UNKNOWN). A file whose
//!   `driver_version` is null makes `nvmlInit` answer
//!   NVML_ERROR_DRIVER_NOT_LOADED, as the real library does without the
//!   kernel module.
//! - `FAKE_NVML_INIT_DELAY_MS=N`: `nvmlInit*` sleeps N ms first (a slow or
//!   hung NVML).
//! - `FAKE_NVML_FAIL=F[,F...]` with F one of `init` (NVML_ERROR_UNKNOWN),
//!   `init:CODE` (any nvmlReturn_t), `lib_rm_version_mismatch`
//!   (NVML_ERROR_LIB_RM_VERSION_MISMATCH from `nvmlInit*`), `driver_not_loaded`,
//!   `gpu_lost:INDEX` (NVML_ERROR_GPU_IS_LOST for that GPU's handle),
//!   `hang` (`nvmlInit*` ignores SIGTERM and never returns: a GPU that
//!   fell off the bus and holds the driver in an uninterruptible ioctl.
//!   Only SIGKILL ends the process, which is what gpu-guard must send).
//! - `FAKE_NVML_LOAD_LOG=FILE`: when the library is loaded, and at each
//!   `nvmlInit*`, appends `load pid=P ppid=Q` / `init pid=P ppid=Q` to FILE,
//!   so tests can tell which process loaded NVML.
//!
//! The C signatures and codes follow nvml.h (as bound by nvml-wrapper-sys
//! 0.10, src/bindings.rs). Every exported function runs its body under
//! `catch_unwind`: a panic must never unwind into C (undefined behaviour);
//! it becomes NVML_ERROR_UNKNOWN.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;
use std::time::Duration;

pub type NvmlReturn = c_uint;
pub type NvmlDevice = *mut c_void;

// nvmlReturn_t values (nvml.h, nvmlReturn_enum).
pub const NVML_SUCCESS: NvmlReturn = 0;
pub const NVML_ERROR_UNINITIALIZED: NvmlReturn = 1;
pub const NVML_ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
pub const NVML_ERROR_NOT_SUPPORTED: NvmlReturn = 3;
pub const NVML_ERROR_NO_PERMISSION: NvmlReturn = 4;
pub const NVML_ERROR_NOT_FOUND: NvmlReturn = 6;
pub const NVML_ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
pub const NVML_ERROR_DRIVER_NOT_LOADED: NvmlReturn = 9;
pub const NVML_ERROR_GPU_IS_LOST: NvmlReturn = 15;
pub const NVML_ERROR_LIB_RM_VERSION_MISMATCH: NvmlReturn = 18;
pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: NvmlReturn = 25;
pub const NVML_ERROR_UNKNOWN: NvmlReturn = 999;

/// nvmlBrandType_t values (nvml.h), keyed by the lowercase names of the host facts JSON.
const BRANDS: &[(&str, c_uint)] = &[
    ("unknown", 0),
    ("quadro", 1),
    ("tesla", 2),
    ("nvs", 3),
    ("grid", 4),
    ("geforce", 5),
    ("titan", 6),
    ("vapps", 7),
    ("vpc", 8),
    ("vcs", 9),
    ("vws", 10),
    ("cloudgaming", 11),
    ("quadrortx", 12),
    ("nvidiartx", 13),
    ("nvidia", 14),
    ("geforcertx", 15),
    ("titanrtx", 16),
];

/// `NVML_STRUCT_VERSION(Memory, 2)` = sizeof(nvmlMemory_v2_t) | 2 << 24 (nvml.h).
const NVML_MEMORY_V2: c_uint = (std::mem::size_of::<NvmlMemoryV2>() as c_uint) | (2 << 24);
/// The most MIG devices a GPU can hold (A100/H100: 7); slots without one
/// answer NVML_ERROR_NOT_FOUND, as on a real GPU.
const MAX_MIG_DEVICES: c_uint = 7;
/// Handle encoding: (gpu + 1) << 8 | slot, slot 0 the GPU, 1..=7 a MIG device.
/// Never null, and decodable without any pointer dereference.
const HANDLE_SHIFT: usize = 8;

#[repr(C)]
pub struct NvmlMemoryV2 {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

#[repr(C)]
pub struct NvmlMemory {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

#[repr(C)]
pub struct NvmlPciInfo {
    pub bus_id_legacy: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub bus_id: [c_char; 32],
}

#[derive(Debug, Clone, PartialEq)]
struct Gpu {
    uuid: String,
    name: String,
    brand: c_uint,
    cc: Option<(c_int, c_int)>,
    memory_bytes: Option<u64>,
    pci_bus_id: Option<String>,
    minor: Option<u32>,
    migs: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
struct Host {
    driver: String,
    /// nvmlSystemGetCudaDriverVersion's integer: major * 1000 + minor * 10.
    cuda: Option<c_int>,
    gpus: Vec<Gpu>,
}

#[derive(Debug, Default, Clone, PartialEq)]
struct Faults {
    init: Option<NvmlReturn>,
    lost: Vec<u32>,
    hang: bool,
}

struct State {
    refcount: u32,
    host: Option<Host>,
    faults: Faults,
}

static STATE: Mutex<State> = Mutex::new(State {
    refcount: 0,
    host: None,
    faults: Faults {
        init: None,
        lost: Vec::new(),
        hang: false,
    },
});

/// Runs an exported function's body: no panic crosses the C boundary.
fn guard(f: impl FnOnce() -> NvmlReturn) -> NvmlReturn {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(NVML_ERROR_UNKNOWN)
}

/// Runs `f` on the loaded host, or answers NVML_ERROR_UNINITIALIZED.
fn with_host(f: impl FnOnce(&Host, &Faults) -> NvmlReturn) -> NvmlReturn {
    guard(|| {
        let st = match STATE.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        match (&st.host, st.refcount) {
            (Some(h), n) if n > 0 => f(h, &st.faults),
            _ => NVML_ERROR_UNINITIALIZED,
        }
    })
}

fn parse_faults(spec: &str) -> Result<Faults, String> {
    let mut faults = Faults::default();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match item {
            "init" => faults.init = Some(NVML_ERROR_UNKNOWN),
            "lib_rm_version_mismatch" => faults.init = Some(NVML_ERROR_LIB_RM_VERSION_MISMATCH),
            "driver_not_loaded" => faults.init = Some(NVML_ERROR_DRIVER_NOT_LOADED),
            "hang" => faults.hang = true,
            _ => {
                if let Some(code) = item.strip_prefix("init:") {
                    let code = code
                        .parse::<NvmlReturn>()
                        .map_err(|_| format!("bad FAKE_NVML_FAIL item `{item}`"))?;
                    faults.init = Some(code);
                } else if let Some(idx) = item.strip_prefix("gpu_lost:") {
                    let idx = idx
                        .parse::<u32>()
                        .map_err(|_| format!("bad FAKE_NVML_FAIL item `{item}`"))?;
                    faults.lost.push(idx);
                } else {
                    return Err(format!("unknown FAKE_NVML_FAIL item `{item}`"));
                }
            }
        }
    }
    Ok(faults)
}

fn str_field(v: &serde_json::Value, key: &str) -> Result<Option<String>, String> {
    match v.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("`{key}` must be a string or null")),
    }
}

/// "12.4" -> 12040, the encoding of nvmlSystemGetCudaDriverVersion
/// (nvml.h NVML_CUDA_DRIVER_VERSION_MAJOR(v) = v / 1000,
/// NVML_CUDA_DRIVER_VERSION_MINOR(v) = (v % 1000) / 10).
fn cuda_int(s: &str) -> Result<c_int, String> {
    let (maj, min) = s.split_once('.').unwrap_or((s, "0"));
    let maj: c_int = maj.parse().map_err(|_| format!("bad CUDA version `{s}`"))?;
    let min: c_int = min.parse().map_err(|_| format!("bad CUDA version `{s}`"))?;
    if !(0..100).contains(&min) || !(0..2_000_000).contains(&maj) {
        return Err(format!("bad CUDA version `{s}`"));
    }
    Ok(maj * 1000 + min * 10)
}

fn parse_cc(s: &str) -> Result<(c_int, c_int), String> {
    let (maj, min) = s
        .split_once('.')
        .ok_or_else(|| format!("bad compute capability `{s}`"))?;
    match (maj.parse(), min.parse()) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        _ => Err(format!("bad compute capability `{s}`")),
    }
}

/// Parses the facts JSON. `Ok(None)`: no driver (driver_version null).
fn parse_host(text: &str) -> Result<Option<Host>, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let Some(driver) = str_field(&v, "driver_version")? else {
        return Ok(None);
    };
    let cuda = str_field(&v, "cuda_driver_version")?
        .map(|s| cuda_int(&s))
        .transpose()?;
    let mut gpus = Vec::new();
    let empty = Vec::new();
    let list = match v.get("gpus") {
        None | Some(serde_json::Value::Null) => &empty,
        Some(serde_json::Value::Array(a)) => a,
        Some(_) => return Err("`gpus` must be an array".into()),
    };
    for (i, g) in list.iter().enumerate() {
        // The real NVML numbers GPUs 0..count; a profile must list them so.
        let index = g.get("index").and_then(|x| x.as_u64());
        if index != Some(i as u64) {
            return Err(format!("gpus[{i}].index must be {i}"));
        }
        let brand_name = str_field(g, "brand")?.unwrap_or_else(|| "unknown".into());
        let brand = BRANDS
            .iter()
            .find(|(n, _)| *n == brand_name)
            .map(|(_, b)| *b)
            .ok_or_else(|| format!("gpus[{i}].brand `{brand_name}` is not an NVML brand"))?;
        let migs = match g.get("mig_devices") {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .map(|m| {
                    str_field(m, "uuid")?.ok_or_else(|| format!("gpus[{i}].mig_devices: uuid"))
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(_) => return Err(format!("gpus[{i}].mig_devices must be an array")),
        };
        if migs.len() > MAX_MIG_DEVICES as usize {
            return Err(format!(
                "gpus[{i}] has more than {MAX_MIG_DEVICES} MIG devices"
            ));
        }
        gpus.push(Gpu {
            uuid: str_field(g, "uuid")?.unwrap_or_default(),
            name: str_field(g, "name")?.unwrap_or_default(),
            brand,
            cc: str_field(g, "compute_capability")?
                .map(|s| parse_cc(&s))
                .transpose()?,
            memory_bytes: g
                .get("memory_mib")
                .and_then(|m| m.as_u64())
                .map(|m| m.saturating_mul(1 << 20)),
            pci_bus_id: str_field(g, "pci_bus_id")?,
            minor: g
                .get("minor_number")
                .and_then(|m| m.as_u64())
                .and_then(|m| u32::try_from(m).ok()),
            migs,
        });
    }
    Ok(Some(Host { driver, cuda, gpus }))
}

fn load_host() -> Result<Option<Host>, String> {
    let path = std::env::var_os("FAKE_NVML_FACTS").ok_or("FAKE_NVML_FACTS is not set")?;
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", std::path::Path::new(&path).display()))?;
    parse_host(&text)
}

fn init() -> NvmlReturn {
    guard(|| {
        // Sleep before taking the lock: a "hung" init must not block other
        // threads' calls.
        if let Some(ms) = std::env::var("FAKE_NVML_INIT_DELAY_MS")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
        {
            std::thread::sleep(Duration::from_millis(ms));
        }
        record("init");
        let faults = match parse_faults(&std::env::var("FAKE_NVML_FAIL").unwrap_or_default()) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("fake-nvml: {e}");
                return NVML_ERROR_UNKNOWN;
            }
        };
        if faults.hang {
            hang_forever();
        }
        if let Some(code) = faults.init {
            return code;
        }
        let mut st = match STATE.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        if st.refcount == 0 {
            // Read afresh on each first init, so one process can switch profiles.
            match load_host() {
                Ok(Some(h)) => st.host = Some(h),
                Ok(None) => return NVML_ERROR_DRIVER_NOT_LOADED,
                Err(e) => {
                    eprintln!("fake-nvml: {e}");
                    return NVML_ERROR_UNKNOWN;
                }
            }
            st.faults = faults;
        }
        st.refcount += 1;
        NVML_SUCCESS
    })
}

extern "C" {
    // signal(2) from the C library every process here links: the fake has
    // no libc crate dependency, and needs only this one call.
    fn signal(signum: c_int, handler: usize) -> usize;
}
const SIGTERM: c_int = 15;
const SIG_IGN: usize = 1;

/// FAKE_NVML_FAIL=hang: as close as user space gets to a thread stuck in an
/// uninterruptible NVIDIA ioctl: SIGTERM is ignored and the call never
/// returns; SIGKILL still ends the process.
fn hang_forever() -> ! {
    // SAFETY: installs SIG_IGN for SIGTERM; no handler code runs.
    unsafe {
        signal(SIGTERM, SIG_IGN);
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Appends `what pid=P ppid=Q` to FAKE_NVML_LOAD_LOG, if set. One short
/// `write` per line in append mode: lines from several processes do not mix.
fn record(what: &str) {
    use std::io::Write;
    let Some(path) = std::env::var_os("FAKE_NVML_LOAD_LOG").filter(|p| !p.is_empty()) else {
        return;
    };
    let line = format!(
        "{what} pid={} ppid={}\n",
        std::process::id(),
        std::os::unix::process::parent_id()
    );
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(line.as_bytes());
    }
}

/// Runs when the library is loaded (dlopen), before any NVML call: records
/// the loading process even when nothing calls nvmlInit.
extern "C" fn on_load() {
    let _ = catch_unwind(|| record("load"));
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

/// nvml.h nvmlInit_v2: reference-counted; each success needs one nvmlShutdown.
#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> NvmlReturn {
    init()
}

/// The pre-v2 entry point, kept by NVML for old binaries.
#[no_mangle]
pub extern "C" fn nvmlInit() -> NvmlReturn {
    init()
}

#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> NvmlReturn {
    init()
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> NvmlReturn {
    guard(|| {
        let mut st = match STATE.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        if st.refcount == 0 {
            return NVML_ERROR_UNINITIALIZED;
        }
        st.refcount -= 1;
        if st.refcount == 0 {
            st.host = None;
        }
        NVML_SUCCESS
    })
}

/// Static strings, as the real nvmlErrorString returns.
#[no_mangle]
pub extern "C" fn nvmlErrorString(result: NvmlReturn) -> *const c_char {
    catch_unwind(|| error_string(result))
        .unwrap_or(b"Unknown Error\0")
        .as_ptr()
        .cast()
}

fn error_string(result: NvmlReturn) -> &'static [u8] {
    match result {
        NVML_SUCCESS => b"Success\0",
        NVML_ERROR_UNINITIALIZED => b"Uninitialized\0",
        NVML_ERROR_INVALID_ARGUMENT => b"Invalid Argument\0",
        NVML_ERROR_NOT_SUPPORTED => b"Not Supported\0",
        NVML_ERROR_NO_PERMISSION => b"Insufficient Permissions\0",
        NVML_ERROR_NOT_FOUND => b"Not Found\0",
        NVML_ERROR_INSUFFICIENT_SIZE => b"Insufficient Size\0",
        NVML_ERROR_DRIVER_NOT_LOADED => b"Driver Not Loaded\0",
        NVML_ERROR_GPU_IS_LOST => b"GPU is lost\0",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH => b"Driver/library version mismatch\0",
        NVML_ERROR_ARGUMENT_VERSION_MISMATCH => b"Argument version mismatch\0",
        _ => b"Unknown Error\0",
    }
}

/// Copies `s` NUL-terminated into a C buffer of `len` bytes, as NVML's
/// string getters do; too small a buffer is NVML_ERROR_INSUFFICIENT_SIZE.
///
/// # Safety
/// `buf` must be valid for `len` bytes (the caller's contract in nvml.h).
unsafe fn copy_cstr(s: &str, buf: *mut c_char, len: c_uint) -> NvmlReturn {
    if buf.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    let bytes = s.as_bytes();
    if bytes.len() + 1 > len as usize {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, bytes.len());
    *buf.add(bytes.len()) = 0;
    NVML_SUCCESS
}

fn copy_into_array<const N: usize>(s: &str, out: &mut [c_char; N]) -> bool {
    let b = s.as_bytes();
    if b.len() + 1 > N {
        return false;
    }
    for (i, c) in b.iter().enumerate() {
        out[i] = *c as c_char;
    }
    out[b.len()] = 0;
    true
}

/// # Safety
/// `version` must be valid for `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    with_host(|h, _| copy_cstr(&h.driver, version, length))
}

/// # Safety
/// `v` must be a valid pointer or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(v: *mut c_int) -> NvmlReturn {
    nvmlSystemGetCudaDriverVersion_v2(v)
}

/// # Safety
/// `v` must be a valid pointer or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(v: *mut c_int) -> NvmlReturn {
    with_host(|h, _| {
        if v.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        match h.cuda {
            Some(c) => {
                *v = c;
                NVML_SUCCESS
            }
            // The real call fails this way when libcuda.so.1 is missing.
            None => NVML_ERROR_NOT_SUPPORTED,
        }
    })
}

/// # Safety
/// `count` must be a valid pointer or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> NvmlReturn {
    with_host(|h, _| {
        if count.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        *count = h.gpus.len() as c_uint;
        NVML_SUCCESS
    })
}

/// # Safety
/// `count` must be a valid pointer or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount(count: *mut c_uint) -> NvmlReturn {
    nvmlDeviceGetCount_v2(count)
}

fn encode(gpu: usize, slot: usize) -> NvmlDevice {
    (((gpu + 1) << HANDLE_SHIFT) | slot) as NvmlDevice
}

/// Decodes a handle into (gpu, None) or (gpu, Some(mig index)).
fn decode(h: &Host, dev: NvmlDevice) -> Option<(usize, Option<usize>)> {
    let raw = dev as usize;
    let gpu = (raw >> HANDLE_SHIFT).checked_sub(1)?;
    let slot = raw & ((1 << HANDLE_SHIFT) - 1);
    let g = h.gpus.get(gpu)?;
    match slot {
        0 => Some((gpu, None)),
        s if s <= g.migs.len() => Some((gpu, Some(s - 1))),
        _ => None,
    }
}

/// # Safety
/// `device` must be a valid pointer or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    with_host(|h, f| {
        if device.is_null() || index as usize >= h.gpus.len() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // nvml.h: NVML_ERROR_GPU_IS_LOST "if the target GPU has fallen off
        // the bus or is otherwise inaccessible".
        if f.lost.contains(&index) {
            return NVML_ERROR_GPU_IS_LOST;
        }
        *device = encode(index as usize, 0);
        NVML_SUCCESS
    })
}

/// # Safety
/// `device` must be a valid pointer or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(
    index: c_uint,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    nvmlDeviceGetHandleByIndex_v2(index, device)
}

/// Runs `f` on the GPU a (non-MIG or MIG) handle names.
fn with_device(dev: NvmlDevice, f: impl FnOnce(&Gpu, Option<usize>) -> NvmlReturn) -> NvmlReturn {
    with_host(|h, _| match decode(h, dev) {
        Some((g, mig)) => f(&h.gpus[g], mig),
        None => NVML_ERROR_INVALID_ARGUMENT,
    })
}

/// # Safety
/// `uuid` must be valid for `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: NvmlDevice,
    uuid: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    with_device(device, |g, mig| match mig {
        None => copy_cstr(&g.uuid, uuid, length),
        Some(m) => copy_cstr(&g.migs[m], uuid, length),
    })
}

/// # Safety
/// `name` must be valid for `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: NvmlDevice,
    name: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    with_device(device, |g, _| copy_cstr(&g.name, name, length))
}

/// # Safety
/// `brand` must be a valid pointer or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetBrand(device: NvmlDevice, brand: *mut c_uint) -> NvmlReturn {
    with_device(device, |g, _| {
        if brand.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        *brand = g.brand;
        NVML_SUCCESS
    })
}

/// # Safety
/// `major` and `minor` must be valid pointers or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: NvmlDevice,
    major: *mut c_int,
    minor: *mut c_int,
) -> NvmlReturn {
    with_device(device, |g, _| {
        if major.is_null() || minor.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        match g.cc {
            Some((a, b)) => {
                *major = a;
                *minor = b;
                NVML_SUCCESS
            }
            None => NVML_ERROR_NOT_SUPPORTED,
        }
    })
}

/// # Safety
/// `memory` must be a valid pointer or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: NvmlDevice,
    memory: *mut NvmlMemoryV2,
) -> NvmlReturn {
    with_device(device, |g, _| {
        if memory.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // Versioned structs carry their version; a mismatch is its own error.
        if (*memory).version != NVML_MEMORY_V2 {
            return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        }
        match g.memory_bytes {
            Some(total) => {
                (*memory).total = total;
                (*memory).reserved = 0;
                (*memory).free = total;
                (*memory).used = 0;
                NVML_SUCCESS
            }
            None => NVML_ERROR_NOT_SUPPORTED,
        }
    })
}

/// # Safety
/// `memory` must be a valid pointer or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: NvmlDevice,
    memory: *mut NvmlMemory,
) -> NvmlReturn {
    with_device(device, |g, _| {
        if memory.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        match g.memory_bytes {
            Some(total) => {
                (*memory).total = total;
                (*memory).free = total;
                (*memory).used = 0;
                NVML_SUCCESS
            }
            None => NVML_ERROR_NOT_SUPPORTED,
        }
    })
}

/// Splits "00000000:07:00.0" into (domain, bus, device).
fn pci_parts(id: &str) -> Option<(c_uint, c_uint, c_uint)> {
    let mut it = id.split(':');
    let domain = c_uint::from_str_radix(it.next()?, 16).ok()?;
    let bus = c_uint::from_str_radix(it.next()?, 16).ok()?;
    let dev = it.next()?.split('.').next()?;
    let dev = c_uint::from_str_radix(dev, 16).ok()?;
    Some((domain, bus, dev))
}

/// # Safety
/// `pci` must be a valid pointer or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: NvmlDevice,
    pci: *mut NvmlPciInfo,
) -> NvmlReturn {
    with_device(device, |g, _| {
        if pci.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        let Some(id) = &g.pci_bus_id else {
            return NVML_ERROR_NOT_SUPPORTED;
        };
        let out = &mut *pci;
        if !copy_into_array(id, &mut out.bus_id) {
            return NVML_ERROR_UNKNOWN;
        }
        // busIdLegacy is the 16-byte "0000:07:00.0" form (nvml.h nvmlPciInfo_t).
        let legacy = id.get(4..).unwrap_or(id);
        copy_into_array(legacy, &mut out.bus_id_legacy);
        let (d, b, dv) = pci_parts(id).unwrap_or((0, 0, 0));
        out.domain = d;
        out.bus = b;
        out.device = dv;
        out.pci_device_id = 0;
        out.pci_sub_system_id = 0;
        NVML_SUCCESS
    })
}

/// # Safety
/// `minor` must be a valid pointer or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(
    device: NvmlDevice,
    minor: *mut c_uint,
) -> NvmlReturn {
    with_device(device, |g, mig| {
        if minor.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        match (g.minor, mig) {
            (Some(m), None) => {
                *minor = m;
                NVML_SUCCESS
            }
            _ => NVML_ERROR_NOT_SUPPORTED,
        }
    })
}

/// MIG mode: enabled when the profile lists MIG devices, else disabled
/// (both current and pending).
///
/// # Safety
/// `current` and `pending` must be valid pointers or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: NvmlDevice,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> NvmlReturn {
    with_device(device, |g, mig| {
        if current.is_null() || pending.is_null() || mig.is_some() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        let mode = c_uint::from(!g.migs.is_empty());
        *current = mode;
        *pending = mode;
        NVML_SUCCESS
    })
}

/// # Safety
/// `count` must be a valid pointer or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: NvmlDevice,
    count: *mut c_uint,
) -> NvmlReturn {
    with_device(device, |g, mig| {
        if count.is_null() || mig.is_some() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        *count = if g.migs.is_empty() {
            0
        } else {
            MAX_MIG_DEVICES
        };
        NVML_SUCCESS
    })
}

/// # Safety
/// `mig` must be a valid pointer or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: NvmlDevice,
    index: c_uint,
    mig: *mut NvmlDevice,
) -> NvmlReturn {
    with_host(|h, _| {
        if mig.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        let Some((g, None)) = decode(h, device) else {
            return NVML_ERROR_INVALID_ARGUMENT;
        };
        let gpu = &h.gpus[g];
        if gpu.migs.is_empty() || index >= MAX_MIG_DEVICES {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        if index as usize >= gpu.migs.len() {
            // An empty slot, as on a partly partitioned GPU.
            return NVML_ERROR_NOT_FOUND;
        }
        *mig = encode(g, index as usize + 1);
        NVML_SUCCESS
    })
}

/// # Safety
/// `is_mig` must be a valid pointer or null.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: NvmlDevice,
    is_mig: *mut c_uint,
) -> NvmlReturn {
    with_device(device, |_, mig| {
        if is_mig.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        *is_mig = c_uint::from(mig.is_some());
        NVML_SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse() {
        assert_eq!(parse_faults("").unwrap(), Faults::default());
        let f = parse_faults("gpu_lost:1, gpu_lost:3").unwrap();
        assert_eq!(f.lost, vec![1, 3]);
        assert_eq!(f.init, None);
        assert_eq!(
            parse_faults("lib_rm_version_mismatch").unwrap().init,
            Some(NVML_ERROR_LIB_RM_VERSION_MISMATCH)
        );
        assert_eq!(parse_faults("init:4").unwrap().init, Some(4));
        assert!(parse_faults("gpu_lost:x").is_err());
        assert!(parse_faults("explode").is_err());
        assert!(parse_faults("hang").unwrap().hang);
    }

    #[test]
    fn host_parse() {
        let h = parse_host(
            r#"{"driver_version":"550.54.14","cuda_driver_version":"12.10","gpus":[
              {"index":0,"uuid":"GPU-1","name":"NVIDIA A100","brand":"tesla",
               "compute_capability":"8.0","memory_mib":40960,"pci_bus_id":"00000000:07:00.0",
               "mig_devices":[{"uuid":"MIG-1"}],"minor_number":3}]}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.cuda, Some(12100));
        assert_eq!(h.gpus[0].brand, 2);
        assert_eq!(h.gpus[0].cc, Some((8, 0)));
        assert_eq!(h.gpus[0].memory_bytes, Some(40960 << 20));
        assert_eq!(h.gpus[0].minor, Some(3));
        assert_eq!(h.gpus[0].migs, vec!["MIG-1".to_string()]);
        assert_eq!(
            parse_host(r#"{"driver_version":null,"cuda_driver_version":null,"gpus":[]}"#).unwrap(),
            None
        );
        assert!(parse_host(r#"{"driver_version":"1","gpus":[{"index":1}]}"#).is_err());
        assert!(
            parse_host(r#"{"driver_version":"1","gpus":[{"index":0,"brand":"acme"}]}"#).is_err()
        );
        assert!(parse_host("{").is_err());
    }

    #[test]
    fn handles_round_trip_and_reject_garbage() {
        let h = parse_host(
            r#"{"driver_version":"1","gpus":[{"index":0,"mig_devices":[{"uuid":"M"}]},{"index":1}]}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(decode(&h, encode(1, 0)), Some((1, None)));
        assert_eq!(decode(&h, encode(0, 1)), Some((0, Some(0))));
        assert_eq!(decode(&h, encode(0, 2)), None);
        assert_eq!(decode(&h, encode(1, 1)), None);
        assert_eq!(decode(&h, encode(2, 0)), None);
        assert_eq!(decode(&h, std::ptr::null_mut()), None);
    }

    #[test]
    fn strings_respect_buffer_size() {
        let mut buf = [0 as c_char; 4];
        unsafe {
            assert_eq!(copy_cstr("abc", buf.as_mut_ptr(), 4), NVML_SUCCESS);
            assert_eq!(buf[3], 0);
            assert_eq!(
                copy_cstr("abcd", buf.as_mut_ptr(), 4),
                NVML_ERROR_INSUFFICIENT_SIZE
            );
            assert_eq!(
                copy_cstr("a", std::ptr::null_mut(), 4),
                NVML_ERROR_INVALID_ARGUMENT
            );
        }
    }

    #[test]
    fn panics_become_unknown() {
        let r = guard(|| panic!("boom"));
        assert_eq!(r, NVML_ERROR_UNKNOWN);
    }
}
