//! NVML's errors in words a person can act on, for the probe
//! (host::nvml) and the health calls (host::nvml_health) alike.

use nvml_wrapper::error::NvmlError;

/// An NVML error as a person can act on it: nvml-wrapper's own wording
/// names its Rust internals (`a libloading error occurred`, ``Nvml::init()``,
/// `Device.pci_info()`); the driver's conditions keep NVML's meaning
/// (nvml.h `nvmlReturn_t`).
pub fn describe(e: &NvmlError) -> String {
    match e {
        // dlopen's own message names the file and why (`cannot open shared
        // object file: No such file or directory`).
        NvmlError::LibloadingError(inner) => inner.to_string(),
        NvmlError::FailedToLoadSymbol(sym) => {
            format!("the library does not export {sym} (not an NVML library, or one older than this call)")
        }
        NvmlError::Utf8Error(_) | NvmlError::NulError(_) => {
            "NVML returned text that is not valid UTF-8".to_string()
        }
        NvmlError::UnexpectedVariant(v) => {
            format!(
                "NVML returned a value this gpu-guard does not know ({v}); the driver may be newer"
            )
        }
        NvmlError::IncorrectBits(_)
        | NvmlError::StringTooLong { .. }
        | NvmlError::SetReleaseFailed
        | NvmlError::GetPciInfoFailed
        | NvmlError::PciInfoToCFailed => "NVML returned data gpu-guard cannot read".to_string(),
        NvmlError::Uninitialized => "NVML is not initialized".to_string(),
        NvmlError::GpuLost => "the GPU fell off the bus or is otherwise inaccessible".to_string(),
        NvmlError::Unknown => "an internal driver error occurred (NVML_ERROR_UNKNOWN)".to_string(),
        other => other.to_string(),
    }
}
