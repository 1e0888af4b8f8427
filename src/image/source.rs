//! Where the image's files come from: an OCI layout directory, or the
//! entries of an uncompressed tar (docker-archive or OCI archive), read in
//! place at their offsets. Nothing is unpacked.
//!
//! Paths given here are layout paths (`index.json`, `blobs/sha256/<hex>`,
//! `<id>/layer.tar`) already normalized by [`super::tree::normalize`].

use super::budget::Budget;
use super::digest::Digest;
use super::error::ImageError;
use super::layer::take_name;
use super::tar_guard::TarGuard;
use super::tree::normalize;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An opened file of the layout and its size.
pub(crate) struct Opened {
    pub reader: Box<dyn Read + Send>,
    pub size: u64,
}

pub(crate) enum Entry {
    File { offset: u64, size: u64 },
    Link(String),
    Other,
}

/// Blobs addressed by digest: an image that is not a file (a registry's,
/// `docker://...`; the HTTP side lives in crates/registry, so the hook and
/// the runtime wrapper never link it).
pub trait BlobSource: Send + Sync {
    /// The blob's bytes as they arrive. The image reader checks digest and
    /// size; the source need not (it must not buffer the blob whole).
    fn open_blob(&self, digest: &Digest) -> io::Result<Box<dyn Read + Send>>;
    /// Where the blobs come from, for messages (`registry HOST/REPO`).
    fn describe(&self) -> String;
}

pub(crate) enum Source {
    Dir(PathBuf),
    /// Blobs fetched by digest (`blobs/sha256/<hex>` paths only).
    Remote(Box<dyn BlobSource>),
    Archive {
        file: Arc<File>,
        entries: HashMap<String, Entry>,
    },
}

/// Opens a regular file without following a symlink in its last component,
/// and without blocking on a FIFO; anything but a regular file is refused.
fn open_regular(path: &Path, shown: &str) -> Result<(File, u64), ImageError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            // ELOOP: the last component is a symlink (O_NOFOLLOW).
            if e.raw_os_error() == Some(libc::ELOOP) {
                ImageError::NotRegular(shown.to_string())
            } else {
                ImageError::Io {
                    what: shown.to_string(),
                    source: e,
                }
            }
        })?;
    let md = file.metadata().map_err(ImageError::io(shown))?;
    if !md.is_file() {
        return Err(ImageError::NotRegular(shown.to_string()));
    }
    Ok((file, md.len()))
}

/// A byte range of the archive file, read with pread so several can be open.
struct Section {
    file: Arc<File>,
    pos: u64,
    end: u64,
}

impl Read for Section {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.end.saturating_sub(self.pos);
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "archive ends inside an entry",
            ));
        }
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for Section {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let at = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
            SeekFrom::End(_) => None,
        };
        self.pos = at.ok_or_else(|| io::Error::other("seek outside the archive"))?;
        Ok(self.pos)
    }
}

/// The entries of the outer tar, by normalized path.
fn index_archive(
    ar: &mut tar::Archive<TarGuard<'_, Section>>,
    name: &str,
    budget: &Budget,
) -> Result<HashMap<String, Entry>, ImageError> {
    let max_entries = budget.limits().max_archive_entries;
    // What failed: the budget or guard that stopped a read, else the tar
    // stream, which is no archive at all when its first header is bad.
    let failed = |i: usize, e: io::Error| {
        budget.take_tripped().unwrap_or_else(|| match i {
            0 => ImageError::NotAnImage(name.to_string()),
            _ => ImageError::Corrupt {
                what: name.to_string(),
                source: e,
            },
        })
    };
    let mut entries = HashMap::new();
    for (i, e) in ar
        .entries_with_seek()
        .map_err(|e| failed(0, e))?
        .enumerate()
    {
        budget.deadline().check()?;
        if i as u64 >= max_entries {
            return Err(ImageError::EntryBudget(max_entries));
        }
        let e = e.map_err(|e| failed(i, e))?;
        let raw = e.path_bytes();
        take_name(budget, name, "entry path", raw.len())?;
        let raw = String::from_utf8_lossy(&raw).into_owned();
        // An archive entry that escapes is never looked up: layout
        // paths are normalized before lookup, so it cannot be reached.
        let Some(p) = normalize(&raw) else { continue };
        let kind = e.header().entry_type();
        let entry = if kind.is_file() || kind == tar::EntryType::Continuous {
            Entry::File {
                offset: e.raw_file_position(),
                size: e.size(),
            }
        } else if kind.is_symlink() || kind.is_hard_link() {
            let link = e.link_name_bytes().unwrap_or_default();
            take_name(budget, name, "link target", link.len())?;
            let link = String::from_utf8_lossy(&link).into_owned();
            if kind.is_symlink() {
                Entry::Link(link)
            } else {
                // Hard link names are relative to the archive root.
                Entry::Link(format!("/{link}"))
            }
        } else {
            Entry::Other
        };
        entries.insert(p, entry);
    }
    Ok(entries)
}

impl Source {
    /// An OCI layout directory.
    pub fn dir(path: &Path) -> Source {
        Source::Dir(path.to_path_buf())
    }

    /// Indexes the entries of an uncompressed tar, reading its headers
    /// only (entries' data is skipped by seeking), through the same header
    /// guard and name bounds as a layer's, on the image's budget.
    pub fn archive(path: &Path, budget: &Budget) -> Result<Source, ImageError> {
        let name = path.display().to_string();
        let (file, _) = open_regular(path, &name)?;
        let mut magic = [0u8; 4];
        let n = file.read_at(&mut magic, 0).map_err(ImageError::io(&name))?;
        if n >= 2 && magic[..2] == [0x1f, 0x8b] || n == 4 && magic == [0x28, 0xb5, 0x2f, 0xfd] {
            return Err(ImageError::CompressedArchive(name));
        }
        let file = Arc::new(file);
        let section = Section {
            file: file.clone(),
            pos: 0,
            end: u64::MAX,
        };
        let mut ar = tar::Archive::new(TarGuard::new(section, budget, &name));
        let entries = index_archive(&mut ar, &name, budget)?;
        if entries.is_empty() {
            return Err(ImageError::NotAnImage(name));
        }
        Ok(Source::Archive { file, entries })
    }

    pub fn has(&self, rel: &str) -> bool {
        match self {
            Source::Dir(d) => d.join(rel).symlink_metadata().is_ok(),
            Source::Archive { entries, .. } => entries.contains_key(rel),
            Source::Remote(_) => false,
        }
    }

    /// Opens a layout file. `rel` must be normalized. In a directory, no
    /// component may be a symlink (a blob linked to /etc/shadow or /dev/zero
    /// is refused); in an archive, symlinks between entries are followed
    /// (legacy `docker save` links duplicate layers) but never out of it.
    pub fn open(&self, rel: &str) -> Result<Opened, ImageError> {
        match self {
            Source::Remote(blobs) => {
                let d = super::Digest::from_path(rel)
                    .filter(|_| rel.starts_with("blobs/sha256/"))
                    .ok_or_else(|| ImageError::Missing(format!("file {rel}")))?;
                let reader = blobs.open_blob(&d).map_err(|e| ImageError::Io {
                    what: format!("{} blob {d}", blobs.describe()),
                    source: e,
                })?;
                // The size is unknown until the stream ends; read_small bounds it by reading.
                Ok(Opened { reader, size: 0 })
            }
            Source::Dir(root) => {
                let mut at = root.clone();
                let parts: Vec<&str> = rel.split('/').collect();
                for (i, part) in parts.iter().enumerate() {
                    at.push(part);
                    if i + 1 < parts.len() {
                        let md = at.symlink_metadata().map_err(ImageError::io(rel))?;
                        if !md.is_dir() {
                            return Err(ImageError::NotRegular(rel.to_string()));
                        }
                    }
                }
                let (file, size) = open_regular(&at, rel)?;
                Ok(Opened {
                    reader: Box::new(file),
                    size,
                })
            }
            Source::Archive { file, entries, .. } => {
                let mut cur = rel.to_string();
                for _ in 0..16 {
                    match entries.get(&cur) {
                        None => return Err(ImageError::Missing(format!("file {rel}"))),
                        Some(Entry::Other) => return Err(ImageError::NotRegular(rel.to_string())),
                        Some(Entry::File { offset, size }) => {
                            return Ok(Opened {
                                reader: Box::new(Section {
                                    file: file.clone(),
                                    pos: *offset,
                                    end: offset.saturating_add(*size),
                                }),
                                size: *size,
                            })
                        }
                        Some(Entry::Link(target)) => {
                            let joined = if let Some(abs) = target.strip_prefix('/') {
                                abs.to_string()
                            } else {
                                match cur.rsplit_once('/') {
                                    Some((dir, _)) => format!("{dir}/{target}"),
                                    None => target.clone(),
                                }
                            };
                            cur = normalize(&joined).ok_or_else(|| ImageError::PathOutside {
                                what: format!("archive link {cur}"),
                                path: target.clone(),
                            })?;
                        }
                    }
                }
                Err(ImageError::SymlinkLoop(rel.to_string()))
            }
        }
    }

    /// Reads a small file whole, refusing it over `limit` bytes.
    pub fn read_small(&self, rel: &str, limit: u64) -> Result<Vec<u8>, ImageError> {
        let o = self.open(rel)?;
        if o.size > limit {
            return Err(ImageError::TooLarge {
                what: rel.to_string(),
                limit,
            });
        }
        let mut v = Vec::with_capacity(o.size as usize);
        o.reader
            .take(limit + 1)
            .read_to_end(&mut v)
            .map_err(ImageError::io(rel))?;
        if v.len() as u64 > limit {
            return Err(ImageError::TooLarge {
                what: rel.to_string(),
                limit,
            });
        }
        Ok(v)
    }
}
