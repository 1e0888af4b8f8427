//! Image references in the spelling of skopeo and containers-transports(5):
//! `docker://HOST[:PORT]/REPO[:TAG|@DIGEST]`, and the short forms a pod spec
//! uses (`nvidia/cuda:12.4.1-base-ubuntu22.04`, `busybox`), normalized the
//! way docker does it (distribution/reference `normalize.go`: a first
//! component without `.` or `:` that is not `localhost` is a Docker Hub
//! repository, and a one-component Hub name gets `library/`); the grammar
//! is oci-spec's (`oci_spec::distribution::Reference`).

use crate::error::RegistryError;
use std::fmt;

/// Docker Hub's name in references, and the host its API is served from
/// (distribution/reference `normalize.go`: `defaultDomain`, `legacyDefaultDomain`).
pub const DOCKER_HUB: &str = "docker.io";
const DOCKER_HUB_API: &str = "registry-1.docker.io";

/// A parsed reference. `tag` and `digest` may both be set (`repo:tag@digest`);
/// the digest then decides what is read.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reference {
    /// `host[:port]` as written (`docker.io` for Docker Hub).
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

fn bad(reference: &str, msg: &str) -> RegistryError {
    RegistryError::BadReference {
        reference: reference.chars().take(300).collect(),
        msg: msg.to_string(),
    }
}

/// `sha256:<64 lowercase hex>`: the only algorithm accepted, as in the image reader.
pub fn valid_digest(d: &str) -> bool {
    d.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// `repo:tag` or `repo@digest`, as docker and skopeo print a reference:
/// a tag never holds a `:` and a digest always does (distribution
/// `reference/regexp.go`: `tag` is `[\w][\w.-]{0,127}`, `digest` is
/// `algorithm:encoded`). The reference is escaped: it may be a registry's.
pub fn repo_ref(repo: &str, reference: &str) -> String {
    let sep = if reference.contains(':') { '@' } else { ':' };
    format!("{repo}{sep}{}", gpu_guard::core::sanitize::esc(reference))
}

impl Reference {
    /// Parses `docker://...` or a bare reference with oci-spec's parser
    /// (distribution/reference's grammar), then holds the digest to sha256.
    /// Without a tag or digest the tag is `latest`, as docker and skopeo take it.
    pub fn parse(input: &str) -> Result<Reference, RegistryError> {
        let s = input.strip_prefix("docker://").unwrap_or(input);
        if s.len() > 512 {
            return Err(bad(input, "longer than 512 characters"));
        }
        let r = oci_spec::distribution::Reference::try_from(s)
            .map_err(|e| bad(input, &e.to_string()))?;
        if let Some(d) = r.digest() {
            if !valid_digest(d) {
                return Err(bad(
                    input,
                    "the digest must be sha256:<64 lowercase hex digits>",
                ));
            }
        }
        if let Some((_, port)) = r.registry().rsplit_once(':') {
            if port.parse::<u16>().map_or(true, |p| p == 0) {
                return Err(bad(input, "the registry port must be 1-65535"));
            }
        }
        let registry = match r.registry() {
            "index.docker.io" | "registry-1.docker.io" => DOCKER_HUB.to_string(),
            other => other.to_string(),
        };
        Ok(Reference {
            registry,
            repository: r.repository().to_string(),
            tag: r.tag().map(str::to_string),
            digest: r.digest().map(str::to_string),
        })
    }

    /// The host (and port) the registry API is served from.
    pub fn api_host(&self) -> &str {
        if self.registry == DOCKER_HUB {
            DOCKER_HUB_API
        } else {
            &self.registry
        }
    }

    /// What `GET /v2/<name>/manifests/<reference>` takes: the digest when
    /// there is one, else the tag.
    pub fn manifest_ref(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }

    /// The same repository at another digest.
    pub fn with_digest(&self, digest: &str) -> Reference {
        Reference {
            digest: Some(digest.to_string()),
            ..self.clone()
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn repo_ref_spells_a_digest_with_an_at_sign() {
        let d = format!("sha256:{}", "a".repeat(64));
        assert_eq!(repo_ref("team/app", &d), format!("team/app@{d}"));
        assert_eq!(repo_ref("team/app", "1.2-rc"), "team/app:1.2-rc");
        assert_eq!(repo_ref("x", "sha256-abc"), "x:sha256-abc");
        assert_eq!(repo_ref("x", "a\x1bb"), "x:a\\x1bb");
    }

    use super::*;

    #[test]
    fn normalizes_like_docker() {
        let r = Reference::parse("busybox").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("docker.io", "library/busybox", Some("latest"))
        );
        assert_eq!(r.api_host(), "registry-1.docker.io");
        let r = Reference::parse("docker://nvidia/cuda:12.4.1-base-ubuntu22.04").unwrap();
        assert_eq!(r.repository, "nvidia/cuda");
        assert_eq!(r.tag.as_deref(), Some("12.4.1-base-ubuntu22.04"));
        let r = Reference::parse("docker://127.0.0.1:5000/a/b-c__d.e:v1").unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "a/b-c__d.e");
        assert_eq!(r.to_string(), "127.0.0.1:5000/a/b-c__d.e:v1");
        let d = format!("sha256:{}", "a".repeat(64));
        let r = Reference::parse(&format!("localhost:5000/x@{d}")).unwrap();
        assert_eq!(r.digest.as_deref(), Some(d.as_str()));
        assert_eq!(r.tag, None);
        assert_eq!(r.manifest_ref(), d);
        let r = Reference::parse(&format!("localhost/x:t@{d}")).unwrap();
        assert_eq!(
            (r.tag.as_deref(), r.manifest_ref()),
            (Some("t"), d.as_str())
        );
    }

    #[test]
    fn refuses_bad_spellings() {
        for bad in [
            "",
            "docker://",
            "Host.example/UPPER",
            "h.example/a//b",
            "h.example/a:bad tag",
            "h.example/a@sha256:abc",
            "h.example/a@md5:00",
            "h.example:99999999/a",
            "h.example/-a",
            "h.example/a:",
            "h.example/../etc",
            "h.example/a\u{202e}b",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad:?}");
        }
    }
}
