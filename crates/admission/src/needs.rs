//! What an image needs, as the JSON of an attestation
//! (`application/vnd.gpu-guard.needs.v1+json`; docs/before-scheduling.md, "Attestations").
//!
//! It holds what the decision takes from an image so that a reader with it
//! reads no layers: the config's env (the requirements: `NVIDIA_REQUIRE_*`,
//! `CUDA_VERSION`, ...), the GPU code of each library in the `scan --json`
//! entry spelling (`sass sm_90a`, `ptx compute_90` with its PTX ISA), the
//! forward-compatibility libraries with their notes, how complete the
//! scan was, and what the image's libraries need of the loader (the
//! Decision's `libraries` object: missing libraries and shipped CUDA
//! runtimes; docs/interfaces.md, "Container content"). An attestation is a cache, not a trust boundary: anyone who
//! can push to the repository can write one, so the node's own check still
//! decides at container start.

use gpu_guard::core::amd::{AmdLibrary, RocmUserSpace};
use gpu_guard::core::arch::{Arch, Kind, Variant};
use gpu_guard::core::compat::{CompatLib, CompatNote, CompatScan};
use gpu_guard::core::kernel_image::{Image, Library, Scanned};
use gpu_guard::core::libraries::LibraryScan;
use serde::{Deserialize, Serialize};

pub const MEDIA_TYPE: &str = "application/vnd.gpu-guard.needs.v1+json";
/// The largest needs document read back (one with thousands of libraries is a few hundred KiB).
pub const MAX_BYTES: u64 = 4 << 20;
const SCHEMA: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Needs {
    pub schema: u32,
    /// The image manifest these needs are about (the artifact's `subject`).
    pub manifest_digest: String,
    pub config_digest: String,
    pub platform: String,
    /// The image config's `Env`.
    pub env: Vec<String>,
    /// The configured libraries (`[kernel_image] libraries`), scanned.
    pub libraries: Vec<LibraryCode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_scanned: Vec<String>,
    #[serde(default)]
    pub compat: Vec<CompatEntry>,
    #[serde(default)]
    pub compat_truncated: bool,
    /// Lines about how the image was read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The libraries scan (`[libraries]`), when it ran. An attestation
    /// without it is not used where that scan is on: the layers are read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library_scan: Option<LibraryScan>,
    /// `gpu-guard <version>`: which scanner wrote it.
    pub producer: String,
    /// The AMD side of the libraries (their code objects as `scan --json`
    /// spells their `arch`, Tensile processors); absent in attestations of
    /// a gpu-guard before AMD support.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amd: Vec<AmdLibrary>,
    /// The ROCm release the image ships, when one was found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rocm: Option<RocmUserSpace>,
}

/// One library: its entries as `scan --json` spells them, or why not read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LibraryCode {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<Vec<Entry>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub kind: String,
    pub arch: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ptx_isa: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompatEntry {
    pub path: String,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<Note>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    pub format: Option<i64>,
    pub cuda_version: Option<String>,
    pub driver: Option<Vec<i64>>,
    pub device: Option<Vec<i64>>,
}

#[derive(Debug, thiserror::Error)]
pub enum NeedsError {
    #[error("the attestation is not {what}: {0}", what = if .0.is_data() { "a gpu-guard needs document" } else { "valid JSON" })]
    Json(#[from] serde_json::Error),
    #[error("the attestation has schema {0}, this gpu-guard reads schema {SCHEMA}")]
    Schema(u32),
    #[error("the attestation is about {found}, not {wanted}")]
    Subject { found: String, wanted: String },
    #[error("the attestation's library {path:?} has an unknown entry {entry:?}")]
    Entry { path: String, entry: String },
}

fn entry_of(i: &Image) -> Entry {
    Entry {
        kind: match i.kind {
            Kind::Sass => "sass",
            Kind::Ptx => "ptx",
        }
        .to_string(),
        arch: i.arch.name(i.kind),
        ptx_isa: i.ptx_isa.map(|(a, b)| format!("{a}.{b}")),
    }
}

/// `sm_90a` / `compute_90` back to the architecture (the spelling of
/// [`Arch::name`]); the kind must agree with the prefix.
fn image_of(e: &Entry) -> Option<Image> {
    let (kind, rest) = match e.kind.as_str() {
        "sass" => (Kind::Sass, e.arch.strip_prefix("sm_")?),
        "ptx" => (Kind::Ptx, e.arch.strip_prefix("compute_")?),
        _ => return None,
    };
    let (digits, variant) = match rest.as_bytes().last()? {
        b'a' => (&rest[..rest.len() - 1], Variant::Arch),
        b'f' => (&rest[..rest.len() - 1], Variant::Family),
        _ => (rest, Variant::Plain),
    };
    if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let arch = Arch::new(digits.parse().ok()?, variant);
    let ptx_isa = match &e.ptx_isa {
        None => None,
        Some(s) => {
            let (a, b) = s.split_once('.')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        }
    };
    let img = Image {
        kind,
        arch,
        ptx_isa,
    };
    (entry_of(&img) == *e).then_some(img)
}

impl Needs {
    /// The needs of an image read now.
    pub fn from_scan(
        manifest_digest: &str,
        config_digest: &str,
        platform: &str,
        env: Vec<String>,
        scanned: &Scanned,
        compat: &CompatScan,
        notes: &[String],
    ) -> Needs {
        let libraries = scanned
            .libraries
            .iter()
            .map(|l| match &l.outcome {
                Ok(images) => LibraryCode {
                    path: l.path.clone(),
                    entries: Some(images.iter().map(entry_of).collect()),
                    error: None,
                },
                Err(e) => LibraryCode {
                    path: l.path.clone(),
                    entries: None,
                    error: Some(e.clone()),
                },
            })
            .collect();
        let compat_entries = compat
            .libs
            .iter()
            .map(|c| CompatEntry {
                path: c.path.clone(),
                version: c.version.clone(),
                note: c.note.as_ref().ok().map(|n| Note {
                    format: n.format,
                    cuda_version: n.cuda_version.clone(),
                    driver: n.driver.clone(),
                    device: n.device.clone(),
                }),
                error: c.note.as_ref().err().cloned(),
            })
            .collect();
        Needs {
            schema: SCHEMA,
            manifest_digest: manifest_digest.to_string(),
            config_digest: config_digest.to_string(),
            platform: platform.to_string(),
            env,
            libraries,
            incomplete: scanned.incomplete.clone(),
            not_scanned: scanned.not_scanned.clone(),
            compat: compat_entries,
            compat_truncated: compat.truncated,
            notes: notes.to_vec(),
            library_scan: None,
            producer: format!("gpu-guard {}", env!("CARGO_PKG_VERSION")),
            amd: scanned.amd.clone(),
            rocm: scanned.rocm.clone(),
        }
    }

    /// With the libraries scan of the same read.
    pub fn with_library_scan(mut self, scan: Option<LibraryScan>) -> Needs {
        self.library_scan = scan;
        self
    }

    /// Can these needs stand for the layers under `cfg`? Not when the
    /// libraries scan is on and they lack it (an attestation written with
    /// that scan off, or by a gpu-guard before it).
    pub fn usable(&self, cfg: &gpu_guard::core::policy::Config) -> bool {
        self.library_scan.is_some()
            || cfg.libraries.severity == gpu_guard::core::policy::Enforcement::Off
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads an attestation's layer, which must be about `subject`.
    pub fn parse(bytes: &[u8], subject: &str) -> Result<Needs, NeedsError> {
        let n: Needs = serde_json::from_slice(bytes)?;
        if n.schema != SCHEMA {
            return Err(NeedsError::Schema(n.schema));
        }
        if n.manifest_digest != subject {
            return Err(NeedsError::Subject {
                found: n.manifest_digest,
                wanted: subject.to_string(),
            });
        }
        for l in &n.libraries {
            for e in l.entries.iter().flatten() {
                if image_of(e).is_none() {
                    return Err(NeedsError::Entry {
                        path: l.path.clone(),
                        entry: format!("{} {}", e.kind, e.arch),
                    });
                }
            }
        }
        Ok(n)
    }

    /// The scan results as the decision takes them.
    pub fn scanned(&self) -> (Scanned, CompatScan) {
        let libraries = self
            .libraries
            .iter()
            .map(|l| Library {
                path: l.path.clone(),
                outcome: match (&l.entries, &l.error) {
                    (Some(es), _) => Ok(es.iter().filter_map(image_of).collect()),
                    (None, e) => Err(e.clone().unwrap_or_else(|| "not read".to_string())),
                },
            })
            .collect();
        let scanned = Scanned {
            libraries,
            incomplete: self.incomplete.clone(),
            not_scanned: self.not_scanned.clone(),
            amd: self.amd.clone(),
            rocm: self.rocm.clone(),
            ..Scanned::default()
        };
        let compat = CompatScan {
            libs: self
                .compat
                .iter()
                .map(|c| CompatLib {
                    path: c.path.clone(),
                    version: c.version.clone(),
                    note: match &c.note {
                        Some(n) => Ok(CompatNote {
                            format: n.format,
                            cuda_version: n.cuda_version.clone(),
                            driver: n.driver.clone(),
                            device: n.device.clone(),
                        }),
                        None => Err(c.error.clone().unwrap_or_else(|| "not read".to_string())),
                    },
                })
                .collect(),
            truncated: self.compat_truncated,
            error: None,
        };
        (scanned, compat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let imgs = vec![
            Image {
                kind: Kind::Sass,
                arch: Arch::new(90, Variant::Arch),
                ptx_isa: None,
            },
            Image {
                kind: Kind::Sass,
                arch: Arch::new(80, Variant::Plain),
                ptx_isa: None,
            },
            Image {
                kind: Kind::Ptx,
                arch: Arch::new(90, Variant::Plain),
                ptx_isa: Some((8, 4)),
            },
            Image {
                kind: Kind::Sass,
                arch: Arch::new(100, Variant::Family),
                ptx_isa: None,
            },
        ];
        let scanned = Scanned {
            libraries: vec![
                Library {
                    path: "usr/lib/libx.so".into(),
                    outcome: Ok(imgs.clone()),
                },
                Library {
                    path: "usr/lib/liby.so".into(),
                    outcome: Err("not an ELF file".into()),
                },
            ],
            incomplete: Some("budget".into()),
            not_scanned: vec!["usr/lib/libz.so".into()],
            ..Scanned::default()
        };
        let compat = CompatScan {
            libs: vec![CompatLib {
                path: "usr/local/cuda/compat/libcuda.so.575.57.08".into(),
                version: "575.57.08".into(),
                note: Ok(CompatNote {
                    format: Some(1),
                    cuda_version: Some("12.9".into()),
                    driver: Some(vec![535, 550]),
                    device: Some(vec![2]),
                }),
            }],
            truncated: false,
            error: None,
        };
        let d = format!("sha256:{}", "a".repeat(64));
        let n = Needs::from_scan(
            &d,
            &d,
            "linux/amd64",
            vec!["CUDA_VERSION=12.9".into()],
            &scanned,
            &compat,
            &[],
        );
        let j = n.to_json();
        let text = String::from_utf8_lossy(&j).to_string();
        assert!(
            text.contains(r#""arch":"sm_90a""#)
                && text.contains(r#""arch":"compute_90","ptx_isa":"8.4""#),
            "{text}"
        );
        let back = Needs::parse(&j, &d).unwrap();
        let (s2, c2) = back.scanned();
        assert_eq!(s2.libraries, scanned.libraries);
        assert_eq!(
            (s2.incomplete, s2.not_scanned),
            (scanned.incomplete, scanned.not_scanned)
        );
        assert_eq!(c2, compat);
        // Another subject, another schema, a made-up architecture: refused.
        assert!(matches!(
            Needs::parse(&j, "sha256:other"),
            Err(NeedsError::Subject { .. })
        ));
        let bad = text.replace(r#""schema":1"#, r#""schema":9"#);
        assert!(matches!(
            Needs::parse(bad.as_bytes(), &d),
            Err(NeedsError::Schema(9))
        ));
        let bad = text.replace("sm_90a", "sm_9x");
        assert!(matches!(
            Needs::parse(bad.as_bytes(), &d),
            Err(NeedsError::Entry { .. })
        ));
        assert!(Needs::parse(b"nope", &d).is_err());
    }
}
