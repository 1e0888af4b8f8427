//! The device and system calls: driver and CUDA versions, handles, names,
//! PCI info, memory, MIG (nvml.h; the structs as nvml-wrapper-sys 0.10
//! binds them).

use std::ffi::{c_char, c_int, c_uint, c_ulonglong};

use crate::facts::{Gpu, Host};
use crate::*;

const NVML_MEMORY_V2: c_uint = (std::mem::size_of::<NvmlMemoryV2>() as c_uint) | (2 << 24);
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
pub(crate) fn decode(h: &Host, dev: NvmlDevice) -> Option<(usize, Option<usize>)> {
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
        if f.lost.contains(&index) || h.gpus[index as usize].health.lost {
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
pub(crate) fn with_device(
    dev: NvmlDevice,
    f: impl FnOnce(&Gpu, Option<usize>) -> NvmlReturn,
) -> NvmlReturn {
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
    use crate::facts::parse_host;

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
}
