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
//! The health calls (row remapping, page retirement, ECC) and P2P status
//! answer from each GPU's `nvml_health` and `p2p` in the facts file itself
//! (module `health`).
//!
//! The C signatures and codes follow nvml.h (as bound by nvml-wrapper-sys
//! 0.10, src/bindings.rs). Every exported function runs its body under
//! `catch_unwind`: a panic must never unwind into C (undefined behaviour);
//! it becomes NVML_ERROR_UNKNOWN.

use std::ffi::{c_char, c_int, c_uint, c_void};
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

/// The most MIG devices a GPU can hold (A100/H100: 7); slots without one
/// answer NVML_ERROR_NOT_FOUND, as on a real GPU.
pub(crate) const MAX_MIG_DEVICES: c_uint = 7;

mod device;
mod facts;
mod health;

use facts::{load_host, Host};
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
    fn panics_become_unknown() {
        let r = guard(|| panic!("boom"));
        assert_eq!(r, NVML_ERROR_UNKNOWN);
    }
}
