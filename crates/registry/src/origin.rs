//! Where a request goes, and whether the registry's credentials may go
//! with it.
//!
//! Credentials belong to one origin (scheme, host and port: RFC 6454), the
//! registry's. A URL the registry hands back (an upload `Location`,
//! distribution `docs/spec/api.md`, "Starting An Upload": "the Location
//! header [...] may be an absolute or relative URL") is resolved against
//! the request's URL (RFC 3986 section 5.2) and gets the registry's
//! `Authorization` header only when it has the registry's origin. Another
//! host gets none (docker's registry client does the same: distribution
//! `registry/client/auth` only authorizes requests to the endpoint the
//! challenge came from). An `https` registry never sends a request over
//! plain `http`, with or without credentials.

use ureq::http::Uri;

/// An origin: lowercased scheme and host, and the port (the scheme's default when absent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub scheme: String,
    pub host: String,
    pub port: u16,
}

impl Origin {
    /// The origin of an absolute `http`/`https` URL; None for anything else.
    pub fn of(url: &str) -> Option<Origin> {
        let u: Uri = url.parse().ok()?;
        let scheme = u.scheme_str()?.to_ascii_lowercase();
        let default = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => return None,
        };
        let auth = u.authority()?;
        // Userinfo in a URL the registry hands back is never used.
        if auth.as_str().contains('@') {
            return None;
        }
        Some(Origin {
            scheme,
            host: auth.host().to_ascii_lowercase(),
            port: auth.port_u16().unwrap_or(default),
        })
    }
}

/// Where a URL from the registry leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    /// The registry itself: the absolute URL, sent with its credentials.
    Registry(String),
    /// Another host over the same or a stronger scheme: sent without credentials.
    Elsewhere(String),
}

/// Why a URL from the registry is not followed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// `https` to `http`.
    Downgrade(String),
    /// Not a URL this client sends requests to (another scheme, userinfo, garbage).
    Invalid(String),
}

/// Resolves `location` against `request_url` (which has `registry`'s origin).
pub fn resolve(
    registry: &Origin,
    request_url: &str,
    location: &str,
) -> Result<Destination, Refused> {
    let loc = location.trim();
    let lower = loc.to_ascii_lowercase();
    let absolute = if lower.starts_with("http://") || lower.starts_with("https://") {
        loc.to_string()
    } else if let Some(rest) = loc.strip_prefix("//") {
        format!("{}://{rest}", registry.scheme)
    } else if loc.starts_with('/') {
        format!("{}{loc}", base_of(request_url))
    } else if loc.contains(':') && !loc.contains('/') || lower.contains("://") {
        // `mailto:x`, `ftp://...`: a scheme this client does not speak.
        return Err(Refused::Invalid(loc.to_string()));
    } else {
        // A relative path: beside the request's last segment (RFC 3986 5.2.3).
        let path_end = request_url.find('?').unwrap_or(request_url.len());
        let dir = match request_url[..path_end].rfind('/') {
            Some(i) => &request_url[..=i],
            None => request_url,
        };
        format!("{dir}{loc}")
    };
    let o = Origin::of(&absolute).ok_or_else(|| Refused::Invalid(loc.to_string()))?;
    if registry.scheme == "https" && o.scheme == "http" {
        return Err(Refused::Downgrade(absolute));
    }
    if o == *registry {
        Ok(Destination::Registry(absolute))
    } else {
        Ok(Destination::Elsewhere(absolute))
    }
}

/// `scheme://authority` of an absolute URL.
fn base_of(url: &str) -> &str {
    let after = url.find("://").map(|i| i + 3).unwrap_or(0);
    match url[after..].find('/') {
        Some(i) => &url[..after + i],
        None => url,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations() {
        let reg = Origin::of("https://reg.example:5000").unwrap();
        let req = "https://reg.example:5000/v2/a/b/blobs/uploads/";
        let r = |l: &str| resolve(&reg, req, l);
        assert_eq!(
            r("/v2/a/b/blobs/uploads/u1?_state=x"),
            Ok(Destination::Registry(
                "https://reg.example:5000/v2/a/b/blobs/uploads/u1?_state=x".into()
            ))
        );
        assert_eq!(
            r("u2"),
            Ok(Destination::Registry(
                "https://reg.example:5000/v2/a/b/blobs/uploads/u2".into()
            ))
        );
        assert_eq!(
            r("HTTPS://REG.example:5000/x"),
            Ok(Destination::Registry("HTTPS://REG.example:5000/x".into()))
        );
        assert!(matches!(
            r("https://storage.example/up"),
            Ok(Destination::Elsewhere(_))
        ));
        // Same host, other port: another origin.
        assert!(matches!(
            r("https://reg.example/up"),
            Ok(Destination::Elsewhere(_))
        ));
        assert!(matches!(
            r("//evil.example/up"),
            Ok(Destination::Elsewhere(_))
        ));
        assert!(matches!(
            r("http://reg.example:5000/up"),
            Err(Refused::Downgrade(_))
        ));
        assert!(matches!(
            r("https://user:pw@reg.example:5000/up"),
            Err(Refused::Invalid(_))
        ));
        assert!(matches!(r("ftp://x/y"), Err(Refused::Invalid(_))));
        // Default ports.
        assert_eq!(Origin::of("https://h/x"), Origin::of("https://H:443/y"));
        let plain = Origin::of("http://127.0.0.1:5000").unwrap();
        assert!(matches!(
            resolve(
                &plain,
                "http://127.0.0.1:5000/v2/",
                "https://127.0.0.1:5000/u"
            ),
            Ok(Destination::Elsewhere(_))
        ));
    }
}
