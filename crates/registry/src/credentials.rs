//! Registry credentials from the files docker, podman and skopeo write:
//! `$REGISTRY_AUTH_FILE` (containers-auth.json(5)), else
//! `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`. The files are
//! searched in that order and the first entry for the registry wins, as
//! containers/image's `pkg/docker/config` does.
//!
//! An `auths` entry holds `auth` (base64 of `user:password`), or `username`
//! and `password`, and may hold `identitytoken` (an OAuth2 refresh token,
//! docker/cli `types.AuthConfig.IdentityToken`) or `registrytoken` (a bearer
//! token sent as is). Keys may be `host[:port]`, `host/namespace`, or a URL
//! (`https://index.docker.io/v1/`): the scheme and path are ignored except
//! that a longer namespace match wins. Credential helpers (`credHelpers`,
//! `credsStore`) are never run: gpu-guard executes nothing the config names.

use crate::error::RegistryError;
use base64::Engine as _;
use std::path::{Path, PathBuf};

/// Credentials files over this size are refused (real ones are a few KiB).
const MAX_FILE_BYTES: u64 = 1 << 20;

#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    Basic {
        username: String,
        password: String,
    },
    /// An OAuth2 refresh token for the token endpoint (`grant_type=refresh_token`).
    IdentityToken {
        username: String,
        token: String,
    },
    /// A bearer token sent as is.
    RegistryToken(String),
}

// Never print secrets, even in a debug log.
impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Basic { username, .. } => write!(f, "Basic({username}, ***)"),
            Credential::IdentityToken { username, .. } => {
                write!(f, "IdentityToken({username}, ***)")
            }
            Credential::RegistryToken(_) => write!(f, "RegistryToken(***)"),
        }
    }
}

/// Where credentials were found, for messages.
#[derive(Clone, Debug)]
pub struct Found {
    pub credential: Credential,
    pub file: PathBuf,
}

/// The files to search, in order, from the environment given.
pub fn default_files(env: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(f) = env("REGISTRY_AUTH_FILE").filter(|s| !s.is_empty()) {
        v.push(PathBuf::from(f));
    }
    if let Some(d) = env("DOCKER_CONFIG").filter(|s| !s.is_empty()) {
        v.push(Path::new(&d).join("config.json"));
    } else if let Some(h) = env("HOME").filter(|s| !s.is_empty()) {
        v.push(Path::new(&h).join(".docker/config.json"));
    }
    v
}

/// The registry part of an `auths` key (`https://host:5000/v1/` → `host:5000`,
/// `host/ns` → `host/ns`), and whether it had a scheme (a URL's path is not a namespace).
fn key_target(key: &str) -> String {
    let (k, had_scheme) = match key.split_once("://") {
        Some((_, rest)) => (rest, true),
        None => (key, false),
    };
    let k = if had_scheme {
        k.split('/').next().unwrap_or(k)
    } else {
        k.trim_end_matches('/')
    };
    match k {
        "index.docker.io" | "registry-1.docker.io" => crate::reference::DOCKER_HUB.to_string(),
        _ => k.to_string(),
    }
}

/// How well `key` names `registry`/`repository`: the namespace length, or None.
fn key_match(key: &str, registry: &str, repository: &str) -> Option<usize> {
    let t = key_target(key);
    if t == registry {
        return Some(0);
    }
    let ns = t.strip_prefix(registry)?.strip_prefix('/')?;
    let full = format!("{repository}/");
    (full.starts_with(&format!("{ns}/"))).then_some(ns.len())
}

fn entry_credential(
    e: &serde_json::Value,
    path: &str,
) -> Result<Option<Credential>, RegistryError> {
    let field = |k: &str| e.get(k).and_then(|v| v.as_str()).filter(|s| !s.is_empty());
    let bad = |msg: &str| RegistryError::Credentials {
        path: path.to_string(),
        msg: msg.to_string(),
    };
    let (mut user, mut pass) = (
        field("username").map(str::to_string),
        field("password").map(str::to_string),
    );
    if let Some(a) = field("auth") {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(a.trim())
            .map_err(|_| bad("an `auth` value is not base64"))?;
        let s = String::from_utf8(raw).map_err(|_| bad("an `auth` value is not UTF-8"))?;
        let (u, p) = s
            .split_once(':')
            .ok_or_else(|| bad("an `auth` value is not user:password"))?;
        user = Some(u.to_string());
        pass = Some(p.to_string());
    }
    if let Some(t) = field("registrytoken") {
        return Ok(Some(Credential::RegistryToken(t.to_string())));
    }
    if let Some(t) = field("identitytoken") {
        return Ok(Some(Credential::IdentityToken {
            username: user.unwrap_or_default(),
            token: t.to_string(),
        }));
    }
    match (user, pass) {
        (Some(username), Some(password)) => Ok(Some(Credential::Basic { username, password })),
        _ => Ok(None),
    }
}

/// Reads one credentials file: Ok(None) when it does not exist or has no entry.
pub fn lookup_in(
    file: &Path,
    registry: &str,
    repository: &str,
) -> Result<Option<Credential>, RegistryError> {
    let shown = file.display().to_string();
    let bad = |msg: String| RegistryError::Credentials {
        path: shown.clone(),
        msg,
    };
    let md = match std::fs::metadata(file) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(bad(e.to_string())),
    };
    if !md.is_file() {
        return Err(bad("not a regular file".to_string()));
    }
    if md.len() > MAX_FILE_BYTES {
        return Err(bad(format!("larger than {MAX_FILE_BYTES} bytes")));
    }
    let text = std::fs::read(file).map_err(|e| bad(e.to_string()))?;
    let v: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let Some(auths) = v.get("auths").and_then(|a| a.as_object()) else {
        return Ok(None);
    };
    let best = auths
        .iter()
        .filter_map(|(k, e)| key_match(k, registry, repository).map(|n| (n, e)))
        .max_by_key(|(n, _)| *n);
    match best {
        Some((_, e)) => entry_credential(e, &shown),
        None => Ok(None),
    }
}

/// Searches `files` in order; the first entry found wins.
pub fn lookup(
    files: &[PathBuf],
    registry: &str,
    repository: &str,
) -> Result<Option<Found>, RegistryError> {
    for f in files {
        if let Some(c) = lookup_in(f, registry, repository)? {
            return Ok(Some(Found {
                credential: c,
                file: f.clone(),
            }));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p
    }

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gg-cred-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn forms_and_order() {
        let d = tmp("forms");
        let b64 = base64::engine::general_purpose::STANDARD.encode("alice:s3:cret");
        let a = write(
            &d,
            "auth.json",
            &format!(
                r#"{{"auths":{{"reg.example:5000":{{"auth":"{b64}"}},
                "https://index.docker.io/v1/":{{"identitytoken":"tok","username":"u"}}}}}}"#
            ),
        );
        let b = write(
            &d,
            "config.json",
            r#"{"auths":{"reg.example:5000":{"username":"bob","password":"pw"},
                "other.example":{"username":"x","password":"y"},
                "other.example/team":{"registrytoken":"rt"}}}"#,
        );
        let files = vec![a.clone(), b.clone()];
        let f = lookup(&files, "reg.example:5000", "x/y").unwrap().unwrap();
        assert_eq!(f.file, a);
        assert_eq!(
            f.credential,
            Credential::Basic {
                username: "alice".into(),
                password: "s3:cret".into()
            }
        );
        let f = lookup(&files, "docker.io", "library/busybox")
            .unwrap()
            .unwrap();
        assert!(
            matches!(f.credential, Credential::IdentityToken { ref token, .. } if token == "tok")
        );
        // The longer namespace wins; another namespace gets the host entry.
        let f = lookup(&files, "other.example", "team/img")
            .unwrap()
            .unwrap();
        assert_eq!(f.credential, Credential::RegistryToken("rt".into()));
        let f = lookup(&files, "other.example", "teams/img")
            .unwrap()
            .unwrap();
        assert!(matches!(f.credential, Credential::Basic { ref username, .. } if username == "x"));
        assert!(lookup(&files, "none.example", "a").unwrap().is_none());
        assert!(format!("{:?}", f.credential).contains("***"));
        assert!(!format!("{:?}", f.credential).contains('y'));
    }

    #[test]
    fn bad_files_are_one_line_errors() {
        let d = tmp("bad");
        let a = write(&d, "a.json", "{not json");
        let e = lookup(&[a], "h", "r").unwrap_err().to_string();
        assert!(e.contains("a.json") && e.contains("not valid JSON"), "{e}");
        let b = write(&d, "b.json", r#"{"auths":{"h":{"auth":"!!!"}}}"#);
        let e = lookup(&[b], "h", "r").unwrap_err().to_string();
        assert!(e.contains("base64"), "{e}");
        assert!(lookup(&[d.join("missing.json")], "h", "r")
            .unwrap()
            .is_none());
        let env = |k: &str| match k {
            "DOCKER_CONFIG" => Some("/dc".to_string()),
            "REGISTRY_AUTH_FILE" => Some("/ra.json".to_string()),
            "HOME" => Some("/home/u".to_string()),
            _ => None,
        };
        assert_eq!(
            default_files(&env),
            vec![PathBuf::from("/ra.json"), PathBuf::from("/dc/config.json")]
        );
        let env = |k: &str| (k == "HOME").then(|| "/home/u".to_string());
        assert_eq!(
            default_files(&env),
            vec![PathBuf::from("/home/u/.docker/config.json")]
        );
    }
}
