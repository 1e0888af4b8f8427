//! Plain clang offload bundles: the header, the entry table and the bundle
//! entry IDs.
//!
//! Layout (clang/docs/ClangOffloadBundler.rst, "Bundled Binary File
//! Layout"), little-endian: the 24-byte magic `__CLANG_OFFLOAD_BUNDLE__`,
//! u64 number of entries, then per entry u64 offset (from the start of the
//! bundle), u64 size, u64 ID length and the ID (not NUL-terminated); the
//! code objects follow. An ID is `<offload kind>-<target triple>[-<target
//! ID>]` ("Bundle Entry ID"); the HIP runtime takes `hip`, `hipv4` and `hcc`
//! entries for `amdgcn-amd-amdhsa` (ROCm CLR hip_code_object.cpp,
//! `getProcName`/`consume`), `hip` and `hipv4` being the same since code
//! objects carry their version (ClangOffloadBundler.rst, "hip and hipv4").

use crate::scan::read::u64_at;

pub const BUNDLE_MAGIC: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";
/// The most entries one bundle may list (real ones list a host entry and
/// one per target: a dozen or two).
pub const MAX_ENTRIES: u64 = 4096;
/// The longest entry ID accepted (real ones have about 40 bytes).
pub const MAX_ID_LEN: u64 = 1024;
/// The largest entry table read.
pub const MAX_TABLE_BYTES: u64 = 1 << 20;

/// One entry of a bundle's table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawEntry {
    pub id: String,
    /// From the start of the bundle.
    pub offset: u64,
    pub size: u64,
}

/// What the bytes so far give of a table.
#[derive(Debug, PartialEq, Eq)]
pub enum Table {
    Complete {
        entries: Vec<RawEntry>,
        /// Where the table ends, from the start of the bundle.
        end: u64,
    },
    /// The table runs past the bytes given.
    NeedMore,
}

/// Parses the table at the start of `bytes` (the first bytes of a bundle
/// of `bundle_size` bytes: every entry must lie inside it).
pub fn parse_table(bytes: &[u8], bundle_size: u64) -> Result<Table, String> {
    if bytes.len() < 32 {
        return Ok(Table::NeedMore);
    }
    if &bytes[..24] != BUNDLE_MAGIC {
        return Err("no offload bundle magic".into());
    }
    let count = u64_at(bytes, 24);
    if count > MAX_ENTRIES {
        return Err(format!(
            "lists {count} entries, more than the {MAX_ENTRIES} gpu-guard reads"
        ));
    }
    let mut at = 32u64;
    let mut entries = Vec::with_capacity(count as usize);
    for i in 0..count {
        if at + 24 > bytes.len() as u64 {
            return need_more(at + 24);
        }
        let p = at as usize;
        let (offset, size, id_len) = (
            u64_at(bytes, p),
            u64_at(bytes, p + 8),
            u64_at(bytes, p + 16),
        );
        if id_len > MAX_ID_LEN {
            return Err(format!("entry {i} has a {id_len}-byte ID"));
        }
        let id_end = at + 24 + id_len;
        if id_end > bytes.len() as u64 {
            return need_more(id_end);
        }
        match offset.checked_add(size) {
            Some(end) if end <= bundle_size => {}
            _ => {
                return Err(format!(
                    "entry {i} (offset {offset}, size {size}) runs past the end of the bundle ({bundle_size} bytes)"
                ))
            }
        }
        let id = String::from_utf8_lossy(&bytes[p + 24..id_end as usize]).into_owned();
        entries.push(RawEntry { id, offset, size });
        at = id_end;
    }
    Ok(Table::Complete { entries, end: at })
}

fn need_more(upto: u64) -> Result<Table, String> {
    if upto > MAX_TABLE_BYTES {
        return Err(format!(
            "its entry table is larger than the {MAX_TABLE_BYTES} bytes gpu-guard reads"
        ));
    }
    Ok(Table::NeedMore)
}

/// The target of an AMD GPU entry of the HIP runtime, from its ID:
/// `Some(Some(target))`, `Some(None)` for an entry whose ID names no target
/// (old `hip-amdgcn-amd-amdhsa` entries: the runtime reads the code object
/// instead), None for entries that are not HIP code objects (`host-...`,
/// `openmp-...`, other triples).
pub fn hip_target(id: &str) -> Option<Option<&str>> {
    let (kind, rest) = id.split_once('-')?;
    if !matches!(kind, "hip" | "hipv4" | "hcc") {
        return None;
    }
    let rest = rest.strip_prefix("amdgcn-amd-amdhsa")?;
    // The 4-field triple (empty environment) then `-target`, or the
    // 3-field triple then `-target`.
    let target = rest
        .strip_prefix("--")
        .or_else(|| rest.strip_prefix('-'))
        .unwrap_or(rest);
    Some((!target.is_empty()).then_some(target))
}

/// Does `b` start with either bundle magic?
pub fn starts_bundle(b: &[u8]) -> bool {
    b.starts_with(BUNDLE_MAGIC) || b.starts_with(super::ccob::CCOB_MAGIC)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A plain bundle: (ID, code object bytes) entries, objects 8-aligned.
    pub fn bundle(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut table_len = 32;
        for (id, _) in entries {
            table_len += 24 + id.len();
        }
        let mut at = table_len.div_ceil(8) * 8;
        let mut head = BUNDLE_MAGIC.to_vec();
        head.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        let mut body = Vec::new();
        for (id, data) in entries {
            head.extend_from_slice(&(at as u64).to_le_bytes());
            head.extend_from_slice(&(data.len() as u64).to_le_bytes());
            head.extend_from_slice(&(id.len() as u64).to_le_bytes());
            head.extend_from_slice(id.as_bytes());
            body.push((at, data.to_vec()));
            at = (at + data.len()).div_ceil(8) * 8;
        }
        let mut out = head;
        for (pos, data) in body {
            out.resize(pos, 0);
            out.extend_from_slice(&data);
        }
        out
    }

    #[test]
    fn entry_ids_as_the_runtime_reads_them() {
        let cases: &[(&str, Option<Option<&str>>)] = &[
            (
                "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-",
                Some(Some("gfx90a:xnack-")),
            ),
            ("hip-amdgcn-amd-amdhsa--gfx1030", Some(Some("gfx1030"))),
            ("hip-amdgcn-amd-amdhsa-gfx906", Some(Some("gfx906"))),
            ("hcc-amdgcn-amd-amdhsa--gfx803", Some(Some("gfx803"))),
            (
                "hipv4-amdgcn-amd-amdhsa--gfx9-4-generic",
                Some(Some("gfx9-4-generic")),
            ),
            ("hip-amdgcn-amd-amdhsa", Some(None)),
            ("hip-amdgcn-amd-amdhsa-", Some(None)),
            ("host-x86_64-unknown-linux", None),
            ("host-x86_64-unknown-linux-gnu", None),
            ("openmp-amdgcn-amd-amdhsa--gfx90a", None),
            ("hipv4-spirv64-amd-amdhsa--amdgcnspirv", None),
            ("junk", None),
        ];
        for (id, want) in cases {
            assert_eq!(hip_target(id), *want, "{id}");
        }
    }

    #[test]
    fn tables_parse_and_hostile_ones_fail() {
        let b = bundle(&[
            ("host-x86_64-unknown-linux", b""),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a", b"12345678"),
        ]);
        let Table::Complete { entries, end } = parse_table(&b, b.len() as u64).unwrap() else {
            panic!("incomplete");
        };
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].size, 8);
        assert!(end <= entries[1].offset);
        assert_eq!(
            parse_table(&b[..40], b.len() as u64).unwrap(),
            Table::NeedMore
        );
        // A million entries: refused before anything is read.
        let mut m = b.clone();
        m[24..32].copy_from_slice(&1_000_000u64.to_le_bytes());
        assert!(parse_table(&m, m.len() as u64)
            .unwrap_err()
            .contains("1000000 entries"));
        // An entry past the end, an overflowing one, a huge ID.
        let mut p = b.clone();
        let e1 = 32 + 24 + "host-x86_64-unknown-linux".len();
        p[e1..e1 + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(parse_table(&p, p.len() as u64)
            .unwrap_err()
            .contains("past the end"));
        p[e1..e1 + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(parse_table(&p, p.len() as u64).is_err());
        let mut h = b.clone();
        h[48..56].copy_from_slice(&(1u64 << 33).to_le_bytes());
        assert!(parse_table(&h, h.len() as u64)
            .unwrap_err()
            .contains("-byte ID"));
        assert!(parse_table(&[0u8; 40], 40).is_err());
    }
}
