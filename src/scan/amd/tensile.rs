//! rocBLAS and hipBLASLt keep their GEMM kernels in per-chip files beside
//! the library: `<libdir>/rocblas/library/TensileLibrary_lazy_gfx942.dat`,
//! `TensileLibrary_Type_..._gfx90a.co` (hipBLASLt likewise under
//! `hipblaslt/library/`; PyTorch wheels under `torch/lib/rocblas/library/`).
//! rocBLAS loads the files of the GPU's processor at start and fails
//! without them ("Cannot read TensileLibrary.dat: Illegal seek for GPU arch
//! : gfx1103"), so the processors those names carry count as the library's
//! targets. Names only: no file is read.

/// The Tensile directory of a library at `path`, relative to the rootfs,
/// when the library is rocBLAS or hipBLASLt.
pub fn dir_of(path: &str) -> Option<String> {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    let sub = if name.starts_with("librocblas.so") {
        "rocblas"
    } else if name.starts_with("libhipblaslt.so") {
        "hipblaslt"
    } else {
        return None;
    };
    Some(if dir.is_empty() {
        format!("{sub}/library")
    } else {
        format!("{dir}/{sub}/library")
    })
}

/// The processor a Tensile file name is for (`TensileLibrary_lazy_gfx90a.dat`
/// is gfx90a): the `gfx` word after the last `_gfx` of a name starting
/// with `TensileLibrary`.
pub fn processor_of(name: &str) -> Option<String> {
    if !name.starts_with("TensileLibrary") {
        return None;
    }
    let at = name.rfind("_gfx")? + 1;
    let word: String = name[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
        .collect();
    (word.len() > 3 && word.len() <= 16).then_some(word)
}

/// The distinct processors of a directory's file names, sorted.
pub fn processors<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = names.into_iter().filter_map(processor_of).collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensile_names() {
        let names = [
            "TensileLibrary_lazy_gfx90a.dat",
            "TensileLibrary_lazy_gfx942.dat",
            "TensileLibrary_Type_HH_Contraction_l_Ailk_Bljk_Cijk_Dijk_gfx90a.co",
            "TensileLibrary_Type_SS_Contraction_l_Alik_Bljk_Cijk_Dijk_fallback_gfx1100.hsaco",
            "TensileLibrary_gfx1030-xnack-.dat",
            "Kernels.so-000-gfx90a.hsaco",
            "TensileManifest.txt",
            "TensileLibrary.dat",
        ];
        assert_eq!(
            processors(names),
            ["gfx1030", "gfx1100", "gfx90a", "gfx942"]
        );
        assert_eq!(
            dir_of("opt/rocm-6.4.0/lib/librocblas.so.4.4").as_deref(),
            Some("opt/rocm-6.4.0/lib/rocblas/library")
        );
        assert_eq!(
            dir_of("usr/lib/python3/dist-packages/torch/lib/libhipblaslt.so").as_deref(),
            Some("usr/lib/python3/dist-packages/torch/lib/hipblaslt/library")
        );
        assert_eq!(dir_of("opt/rocm/lib/librocsparse.so.1"), None);
    }
}
