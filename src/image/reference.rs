//! What `check --image` names: a path, or an image in the spelling of
//! skopeo and containers-transports(5), `TRANSPORT:DETAILS`. One parse
//! for every reader: the file readers here, and the network transports
//! (`docker://`, `docker-daemon:`), read by gpu-guard-admission
//! ([`ImageRef::is_remote`]).
//!
//! The split follows containers/image: `oci:PATH[:REFERENCE]` and
//! `oci-archive:PATH[:REFERENCE]` cut at the first `:` after the transport
//! (oci/internal/oci_util.go `SplitPathAndImage`: a path with a colon
//! cannot be named through the transport), and
//! `docker-archive:PATH[:REFERENCE|:@INDEX]` likewise
//! (docker/archive/transport.go `ParseReference`), where REFERENCE is a
//! docker reference (`busybox`, `busybox:1.36`, `quay.io/x/y:z`) compared
//! with the archive's `RepoTags` after docker's normalization
//! (`docker.io/library/`, `:latest`), and `@INDEX` picks the INDEX-th image
//! (from 0) of `manifest.json`.
//!
//! A bare path (anything else) keeps working, and its format is told from
//! what it holds. The transport spelling wins, as in skopeo: `oci:x` is the
//! layout `x`, even when a file named `oci:x` exists; `./oci:x` (or an
//! absolute path) names that file (docs/before-scheduling.md).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::Format;

/// An image `--image` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageRef {
    /// A path: an OCI layout directory, an OCI archive or a docker-archive,
    /// told from its content.
    Path(PathBuf),
    /// `oci:PATH[:REFERENCE]`: an OCI image layout directory.
    Oci {
        path: PathBuf,
        reference: Option<String>,
    },
    /// `oci-archive:PATH[:REFERENCE]`: a tar of an OCI image layout.
    OciArchive {
        path: PathBuf,
        reference: Option<String>,
    },
    /// `docker-archive:PATH[:REFERENCE|:@INDEX]`: a `docker save` tar.
    DockerArchive {
        path: PathBuf,
        select: Option<ArchiveSelect>,
    },
    /// `docker://HOST[:PORT]/REPO[:TAG|@DIGEST]`: a registry image (what
    /// follows `docker://`), read by gpu-guard-admission.
    Docker(String),
    /// `docker-daemon:NAME[:TAG]`: the local docker's image store, read by
    /// gpu-guard-admission.
    DockerDaemon(String),
}

/// Which image of a docker-archive holding several.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArchiveSelect {
    /// A docker reference, matched against `RepoTags`.
    Reference(String),
    /// `@N`: the N-th entry of `manifest.json`, from 0.
    Index(usize),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    #[error("`{0}:` names no file: write {0}:PATH")]
    NoPath(&'static str),
    #[error("{transport}:{details}: {why}")]
    Invalid {
        transport: &'static str,
        details: String,
        why: String,
    },
    #[error("the {0}: transport is not read by gpu-guard; copy the image to a file first (`skopeo copy {0}:... oci-archive:IMAGE.tar`) and pass that")]
    Unsupported(String),
    #[error("the image name is not UTF-8")]
    NotUtf8,
}

/// The transports of containers-transports(5) gpu-guard does not read:
/// named with a clear error rather than taken as a file name.
const UNREAD: [&str; 5] = ["containers-storage", "dir", "ostree", "sif", "tarball"];

/// Parses what `--image` was given.
pub fn parse(arg: &OsStr) -> Result<ImageRef, ReferenceError> {
    let bytes = arg.as_bytes();
    let Some(colon) = bytes.iter().position(|b| *b == b':') else {
        return Ok(ImageRef::Path(PathBuf::from(arg)));
    };
    let transport = &bytes[..colon];
    if transport.is_empty() || transport.contains(&b'/') {
        // `./oci:x`, `/images/oci:x`: a path whatever its name.
        return Ok(ImageRef::Path(PathBuf::from(arg)));
    }
    let rest = || std::str::from_utf8(&bytes[colon + 1..]).map_err(|_| ReferenceError::NotUtf8);
    match transport {
        b"docker" if bytes[colon + 1..].starts_with(b"//") => {
            let name = rest()?.trim_start_matches('/');
            match name.is_empty() {
                true => Err(ReferenceError::NoPath("docker")),
                false => Ok(ImageRef::Docker(name.to_string())),
            }
        }
        b"docker-daemon" => match rest()? {
            "" => Err(ReferenceError::NoPath("docker-daemon")),
            name => Ok(ImageRef::DockerDaemon(name.to_string())),
        },
        b"oci" => {
            let (path, reference) = split(rest()?, "oci")?;
            Ok(ImageRef::Oci { path, reference })
        }
        b"oci-archive" => {
            let (path, reference) = split(rest()?, "oci-archive")?;
            Ok(ImageRef::OciArchive { path, reference })
        }
        b"docker-archive" => {
            let (path, sel) = split(rest()?, "docker-archive")?;
            let select = sel.map(|s| archive_select(&s)).transpose()?;
            Ok(ImageRef::DockerArchive { path, select })
        }
        t => match std::str::from_utf8(t) {
            Ok(name) if UNREAD.contains(&name) => Err(ReferenceError::Unsupported(name.into())),
            // Not a transport: a file name with a colon.
            _ => Ok(ImageRef::Path(PathBuf::from(arg))),
        },
    }
}

/// `PATH[:REFERENCE]`, cut at the first colon.
fn split(
    details: &str,
    transport: &'static str,
) -> Result<(PathBuf, Option<String>), ReferenceError> {
    let (path, reference) = match details.split_once(':') {
        Some((p, r)) => (p, Some(r)),
        None => (details, None),
    };
    if path.is_empty() {
        return Err(ReferenceError::NoPath(transport));
    }
    let invalid = |why: &str| ReferenceError::Invalid {
        transport,
        details: crate::core::sanitize::esc(details),
        why: why.to_string(),
    };
    match reference {
        Some("") => Err(invalid("the reference after the path is empty")),
        Some(r) if r.chars().any(|c| c.is_whitespace() || c.is_control()) => {
            Err(invalid("the reference has a space or a control character"))
        }
        r => Ok((PathBuf::from(path), r.map(str::to_string))),
    }
}

fn archive_select(s: &str) -> Result<ArchiveSelect, ReferenceError> {
    let invalid = |why: String| ReferenceError::Invalid {
        transport: "docker-archive",
        details: crate::core::sanitize::esc(s),
        why,
    };
    if let Some(n) = s.strip_prefix('@') {
        return n.parse::<usize>().map(ArchiveSelect::Index).map_err(|_| {
            invalid("`@` takes the index of an image in the archive (0, 1, ...)".into())
        });
    }
    if s.contains('@') {
        // docker/archive/transport.go: "doesn't support digest references".
        return Err(invalid(
            "a docker-archive is named by tag, not by digest".into(),
        ));
    }
    Ok(ArchiveSelect::Reference(s.to_string()))
}

/// A docker reference as docker normalizes it (distribution/reference
/// `ParseNormalizedNamed` then `TagNameOnly`): `busybox` →
/// `docker.io/library/busybox:latest`, `me/app:1` → `docker.io/me/app:1`;
/// a first component with a `.` or `:`, or `localhost`, is a registry.
pub fn normalize_docker(reference: &str) -> String {
    let (name, tag) = match reference.rfind(':') {
        Some(i) if !reference[i + 1..].contains('/') => (&reference[..i], &reference[i..]),
        _ => (reference, ":latest"),
    };
    let full = match name.split_once('/') {
        None => format!("docker.io/library/{name}"),
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            name.to_string()
        }
        Some(_) => format!("docker.io/{name}"),
    };
    format!("{full}{tag}")
}

impl ImageRef {
    /// The file or directory the image is read from; None for an image
    /// read over the network.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            ImageRef::Path(p)
            | ImageRef::Oci { path: p, .. }
            | ImageRef::OciArchive { path: p, .. }
            | ImageRef::DockerArchive { path: p, .. } => Some(p),
            ImageRef::Docker(_) | ImageRef::DockerDaemon(_) => None,
        }
    }

    /// Read over the network (a registry, the docker daemon's socket): by
    /// gpu-guard-admission, never by the binary that serves container
    /// starts (commands/network.rs).
    pub fn is_remote(&self) -> bool {
        self.path().is_none()
    }

    /// The format the transport names (None: told from the content).
    pub fn format(&self) -> Option<Format> {
        match self {
            ImageRef::Path(_) | ImageRef::Docker(_) | ImageRef::DockerDaemon(_) => None,
            ImageRef::Oci { .. } => Some(Format::OciLayout),
            ImageRef::OciArchive { .. } => Some(Format::OciArchive),
            ImageRef::DockerArchive { .. } => Some(Format::DockerArchive),
        }
    }

    /// The image chosen inside, as [`super::Options`] takes it.
    pub fn selection(&self) -> (Option<String>, Option<usize>) {
        match self {
            ImageRef::Path(_) | ImageRef::Docker(_) | ImageRef::DockerDaemon(_) => (None, None),
            ImageRef::Oci { reference, .. } | ImageRef::OciArchive { reference, .. } => {
                (reference.clone(), None)
            }
            ImageRef::DockerArchive { select, .. } => match select {
                None => (None, None),
                Some(ArchiveSelect::Reference(r)) => (Some(r.clone()), None),
                Some(ArchiveSelect::Index(i)) => (None, Some(*i)),
            },
        }
    }
}

/// Whether a bare `--image` value that names no file reads as a docker
/// reference (`nvidia/cuda:12.4.1-base-ubuntu22.04`, `ubuntu`,
/// `localhost:5000/x@sha256:...`) rather than a path, by distribution's
/// grammar (distribution `reference/regexp.go`): path components of
/// lowercase alphanumerics joined by `.`, `_`, `__` or `-`, the first
/// optionally a registry host (with a `.` or a port, or `localhost`), then
/// an optional `:TAG` (`[\w][\w.-]{0,127}`) and `@ALGORITHM:HEX`. A path
/// that starts with `/`, `.` or `~`, or ends in `.tar`, is not one.
pub fn is_docker_reference(s: &str) -> bool {
    if s.starts_with(['/', '.', '~']) || s.ends_with(".tar") || s.len() > 255 + 150 {
        return false;
    }
    let (name_tag, digest_ok) = match s.split_once('@') {
        Some((n, d)) => (
            n,
            d.split_once(':').is_some_and(|(a, h)| {
                !a.is_empty()
                    && a.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b"+._-".contains(&b)
                    })
                    && h.len() >= 32
                    && h.bytes().all(|b| b.is_ascii_hexdigit())
            }),
        ),
        None => (s, true),
    };
    let (name, tag) = match name_tag.rsplit_once(':') {
        Some((n, t)) if !t.contains('/') => (n, Some(t)),
        _ => (name_tag, None),
    };
    let tag_ok = tag.map_or(true, |t| {
        t.len() <= 128
            && t.bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    });
    let mut parts = name.split('/').peekable();
    let first = parts.next().unwrap_or("");
    let has_host =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let host_ok = !has_host
        || first
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b));
    let component = |c: &str| {
        !c.is_empty()
            && c.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
            && c.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && c.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
    };
    let path_ok = if has_host {
        parts.peek().is_some() && parts.all(component)
    } else {
        component(first) && parts.all(component)
    };
    digest_ok && tag_ok && host_ok && path_ok
}

#[cfg(test)]
mod tests {
    #[test]
    fn docker_references_are_told_from_paths() {
        let d = format!("sha256:{}", "ab".repeat(32));
        for r in [
            "nvidia/cuda:12.4.1-base-ubuntu22.04",
            "ubuntu",
            "ubuntu:22.04",
            "nvcr.io/nvidia/pytorch:24.05-py3",
            "localhost:5000/team/app",
            "localhost/app:1",
            &format!("team/app@{d}"),
            &format!("reg.example:5000/team/app:v1@{d}"),
        ] {
            assert!(is_docker_reference(r), "{r}");
        }
        for p in [
            "/images/cuda.tar",
            "./layout",
            "../x",
            "~/x",
            "image.tar",
            "Images/Cuda",
            "team/app:",
            "team//app",
            "team/app@sha256:xyz",
            "team/app:-bad",
            "a b",
            "",
        ] {
            assert!(!is_docker_reference(p), "{p}");
        }
    }

    use super::*;

    fn p(s: &str) -> Result<ImageRef, ReferenceError> {
        parse(OsStr::new(s))
    }

    #[test]
    fn transports_and_paths() {
        assert_eq!(p("img.tar").unwrap(), ImageRef::Path("img.tar".into()));
        assert_eq!(p("./oci:x").unwrap(), ImageRef::Path("./oci:x".into()));
        assert_eq!(p("/a/oci:x").unwrap(), ImageRef::Path("/a/oci:x".into()));
        assert_eq!(
            p("weird:name").unwrap(),
            ImageRef::Path("weird:name".into())
        );
        assert_eq!(
            p("oci:/l:v1").unwrap(),
            ImageRef::Oci {
                path: "/l".into(),
                reference: Some("v1".into())
            }
        );
        assert_eq!(
            p("oci-archive:a.tar").unwrap(),
            ImageRef::OciArchive {
                path: "a.tar".into(),
                reference: None
            }
        );
        assert_eq!(
            p("docker-archive:a.tar:busybox:1").unwrap(),
            ImageRef::DockerArchive {
                path: "a.tar".into(),
                select: Some(ArchiveSelect::Reference("busybox:1".into()))
            }
        );
        assert_eq!(
            p("docker-archive:a.tar:@2").unwrap().selection(),
            (None, Some(2))
        );
        assert!(matches!(p("oci:"), Err(ReferenceError::NoPath("oci"))));
        assert!(p("oci:x:").is_err());
        assert!(p("docker-archive:a.tar:@x").is_err());
        assert!(p("docker-archive:a.tar:b@sha256:00").is_err());
        assert!(matches!(p("dir:/x"), Err(ReferenceError::Unsupported(_))));
        assert_eq!(
            p("docker://localhost:5000/a/b:1").unwrap(),
            ImageRef::Docker("localhost:5000/a/b:1".into())
        );
        assert_eq!(
            p("docker-daemon:busybox:1").unwrap(),
            ImageRef::DockerDaemon("busybox:1".into())
        );
        assert!(p("docker-daemon:x").unwrap().is_remote());
        assert!(!p("oci:x").unwrap().is_remote());
        // `docker:` without `//` is no transport spelling: a file name.
        assert_eq!(p("docker:x").unwrap(), ImageRef::Path("docker:x".into()));
        assert!(p("docker://").is_err());
    }

    #[test]
    fn docker_names_normalize() {
        assert_eq!(
            normalize_docker("busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(
            normalize_docker("busybox:1.36"),
            "docker.io/library/busybox:1.36"
        );
        assert_eq!(normalize_docker("me/app"), "docker.io/me/app:latest");
        assert_eq!(
            normalize_docker("localhost:5000/a"),
            "localhost:5000/a:latest"
        );
        assert_eq!(normalize_docker("quay.io/x/y:z"), "quay.io/x/y:z");
        assert_eq!(
            normalize_docker("docker.io/library/busybox:latest"),
            normalize_docker("busybox")
        );
    }
}
