//! The blocking registry client: one `ureq` agent per registry, the
//! registry's authentication flow, and one-line errors.
//!
//! Authentication follows distribution's token specification
//! (`docs/spec/auth/token.md`, `docs/spec/auth/oauth.md`): a request is sent
//! with the token cached for its scope (or none); a `401` carries a
//! `WWW-Authenticate` challenge:
//! - `Bearer realm,service,scope`: a token is fetched from the realm, with
//!   HTTP Basic credentials when there are some (GET), or with an identity
//!   token as an OAuth2 refresh token (POST `grant_type=refresh_token`), or
//!   anonymously; the request is retried once with it.
//! - `Basic`: the request is retried once with the credentials.
//!
//! A second `401`/`403` is an authentication error naming where the
//! credentials came from. Redirects (blob storage) are followed by ureq,
//! which never forwards the registry's `Authorization` header on a redirect
//! (ureq `RedirectAuthHeaders::Never`, its default).

use crate::challenge::{self, Challenge};
use crate::credentials::Credential;
use crate::error::RegistryError;
use base64::Engine as _;
use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use ureq::http::{self, Method};

/// How to reach one registry.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Plain HTTP instead of HTTPS (`--plain-http`).
    pub plain_http: bool,
    /// PEM files of extra trusted CAs (`--registry-ca`), besides the system's.
    pub ca_files: Vec<PathBuf>,
    pub credential: Option<Credential>,
    /// Where the credential was read, for error messages.
    pub credential_source: Option<String>,
    /// Connect and response-header timeout; body reads are bounded by the caller's budget.
    pub timeout: Option<Duration>,
    /// The most one request may take, body included (the webhook's deadline);
    /// None for `check`, where a layer may take minutes.
    pub call_timeout: Option<Duration>,
}

/// Requests sent, by kind, so tests and the benchmark can see what a read cost.
#[derive(Debug, Default)]
pub struct Stats {
    pub requests: AtomicU64,
    pub manifest_gets: AtomicU64,
    pub blob_gets: AtomicU64,
    pub token_gets: AtomicU64,
}

impl Stats {
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// A request the client may send twice (once more after a challenge).
pub(crate) struct Req<'a> {
    pub method: Method,
    /// A path under the registry (`/v2/...`) or an absolute URL (an upload location).
    pub target: &'a str,
    pub accept: Option<&'a str>,
    pub body: Option<(&'a [u8], &'a str)>,
    /// `repository:<name>:pull` or `...:pull,push`.
    pub scope: String,
    /// For messages: `manifest x:y`, `blob sha256:...`.
    pub what: &'a str,
}

pub struct Client {
    agent: ureq::Agent,
    base: String,
    /// The registry as the reference names it, for messages.
    name: String,
    options: Options,
    tokens: Mutex<HashMap<String, String>>,
    /// The registry answered a Basic challenge: send Basic credentials at once.
    basic: Mutex<bool>,
    pub stats: Arc<Stats>,
}

/// Control characters, bidi overrides and line separators as `?`, at most
/// 300 characters: registry text goes into one-line messages.
pub(crate) fn clean(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}') {
                '?'
            } else {
                c
            }
        })
        .take(300)
        .collect()
}

fn encode_query(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn load_roots(files: &[PathBuf]) -> Result<Vec<ureq::tls::Certificate<'static>>, RegistryError> {
    // A missing or partly unreadable system store is not fatal: the private CA may be all
    // that is needed (rustls-native-certs reports per-file errors in `errors`).
    let native = rustls_native_certs::load_native_certs();
    let mut roots: Vec<ureq::tls::Certificate<'static>> = native
        .certs
        .iter()
        .map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned())
        .collect();
    for f in files {
        let shown = f.display().to_string();
        let bad = |msg: String| RegistryError::CaFile {
            path: shown.clone(),
            msg,
        };
        let pem = std::fs::read(f).map_err(|e| bad(e.to_string()))?;
        let mut n = 0;
        for item in ureq::tls::parse_pem(&pem) {
            if let ureq::tls::PemItem::Certificate(c) = item.map_err(|e| bad(e.to_string()))? {
                roots.push(c);
                n += 1;
            }
        }
        if n == 0 {
            return Err(bad("no PEM certificate in the file".to_string()));
        }
    }
    Ok(roots)
}

impl Client {
    /// A client for the registry at `api_host` (`host[:port]`), named `name` in messages.
    pub fn new(api_host: &str, name: &str, options: Options) -> Result<Client, RegistryError> {
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .root_certs(ureq::tls::RootCerts::Specific(Arc::new(load_roots(
                &options.ca_files,
            )?)))
            .build();
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(8)
            .tls_config(tls)
            .user_agent(concat!("gpu-guard/", env!("CARGO_PKG_VERSION")))
            .timeout_connect(options.timeout)
            .timeout_recv_response(options.timeout)
            .timeout_global(options.call_timeout)
            .build()
            .new_agent();
        let scheme = if options.plain_http { "http" } else { "https" };
        Ok(Client {
            agent,
            base: format!("{scheme}://{api_host}"),
            name: name.to_string(),
            options,
            tokens: Mutex::new(HashMap::new()),
            basic: Mutex::new(false),
            stats: Arc::new(Stats::default()),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn url(&self, target: &str) -> String {
        if target.starts_with("http://") || target.starts_with("https://") {
            target.to_string()
        } else {
            format!("{}{target}", self.base)
        }
    }

    /// Maps a transport error to one line naming the registry and the cause.
    pub(crate) fn transport_error(&self, what: &str, e: ureq::Error) -> RegistryError {
        let registry = self.name.clone();
        let msg = clean(&e.to_string());
        let tls = matches!(e, ureq::Error::Rustls(_) | ureq::Error::Tls(_))
            || msg.contains("certificate")
            || msg.contains("Certificate");
        match e {
            _ if tls => RegistryError::Tls { registry, msg },
            ureq::Error::Io(ref io)
                if io.kind() == std::io::ErrorKind::InvalidData && msg.contains("tls") =>
            {
                RegistryError::Tls { registry, msg }
            }
            ureq::Error::HostNotFound
            | ureq::Error::ConnectionFailed
            | ureq::Error::Timeout(_)
            | ureq::Error::Io(_) => RegistryError::Connect { registry, msg },
            _ => RegistryError::Protocol {
                registry,
                what: what.to_string(),
                msg,
            },
        }
    }

    fn run_once(
        &self,
        req: &Req,
        auth: Option<&str>,
    ) -> Result<http::Response<ureq::Body>, RegistryError> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let mut b = http::Request::builder()
            .method(req.method.clone())
            .uri(self.url(req.target));
        if let Some(a) = req.accept {
            b = b.header("Accept", a);
        }
        if let Some(a) = auth {
            b = b.header("Authorization", a);
        }
        let bad = |e: http::Error| RegistryError::Protocol {
            registry: self.name.clone(),
            what: req.what.to_string(),
            msg: clean(&e.to_string()),
        };
        let r = match req.body {
            Some((bytes, ctype)) => {
                let rq = b
                    .header("Content-Type", ctype)
                    .body(bytes.to_vec())
                    .map_err(bad)?;
                self.agent.run(rq)
            }
            None => self.agent.run(b.body(()).map_err(bad)?),
        };
        r.map_err(|e| self.transport_error(req.what, e))
    }

    fn cached_auth(&self, scope: &str) -> Option<String> {
        if let Some(t) = self.tokens.lock().ok()?.get(scope) {
            return Some(format!("Bearer {t}"));
        }
        if *self.basic.lock().ok()? {
            return self.basic_header();
        }
        None
    }

    fn basic_header(&self) -> Option<String> {
        match &self.options.credential {
            Some(Credential::Basic { username, password }) => {
                let raw = format!("{username}:{password}");
                Some(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(raw)
                ))
            }
            _ => None,
        }
    }

    fn auth_error(&self, msg: &str) -> RegistryError {
        let from = match (&self.options.credential, &self.options.credential_source) {
            (Some(_), Some(f)) => format!(" (credentials from {f})"),
            (Some(_), None) => " (credentials given)".to_string(),
            (None, _) => " (no credentials found for this registry)".to_string(),
        };
        RegistryError::Auth {
            registry: self.name.clone(),
            msg: format!("{msg}{from}"),
        }
    }

    /// Sends `req`, answering one authentication challenge.
    pub(crate) fn send(&self, req: &Req) -> Result<http::Response<ureq::Body>, RegistryError> {
        let resp = self.run_once(req, self.cached_auth(&req.scope).as_deref())?;
        if resp.status() != 401 {
            return self.forbidden(resp);
        }
        let challenges: Vec<Challenge> = resp
            .headers()
            .get_all("www-authenticate")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(challenge::parse)
            .collect();
        let auth = self.answer(&challenges, &req.scope)?;
        let resp = self.run_once(req, Some(&auth))?;
        if resp.status() == 401 {
            return Err(self.auth_error("the registry refused the credentials"));
        }
        self.forbidden(resp)
    }

    fn forbidden(
        &self,
        resp: http::Response<ureq::Body>,
    ) -> Result<http::Response<ureq::Body>, RegistryError> {
        if resp.status() == 403 {
            return Err(self.auth_error("access denied (HTTP 403)"));
        }
        Ok(resp)
    }

    /// The Authorization header value that answers a challenge.
    fn answer(&self, challenges: &[Challenge], scope: &str) -> Result<String, RegistryError> {
        if let Some(c) = challenges.iter().find(|c| c.scheme == "bearer") {
            if let Some(Credential::RegistryToken(t)) = &self.options.credential {
                return Ok(format!("Bearer {t}"));
            }
            let token = self.fetch_token(c, scope)?;
            if let Ok(mut m) = self.tokens.lock() {
                m.insert(scope.to_string(), token.clone());
            }
            return Ok(format!("Bearer {token}"));
        }
        if challenges.iter().any(|c| c.scheme == "basic") {
            let h = self
                .basic_header()
                .ok_or_else(|| self.auth_error("the registry requires credentials"))?;
            if let Ok(mut b) = self.basic.lock() {
                *b = true;
            }
            return Ok(h);
        }
        Err(self.auth_error("the registry answered 401 without a Bearer or Basic challenge"))
    }

    /// Fetches a token from the challenge's realm (distribution `docs/spec/auth/token.md`).
    fn fetch_token(&self, c: &Challenge, scope: &str) -> Result<String, RegistryError> {
        self.stats.token_gets.fetch_add(1, Ordering::Relaxed);
        let realm = c
            .param("realm")
            .ok_or_else(|| self.auth_error("the Bearer challenge has no realm"))?;
        let allowed = realm.starts_with("https://")
            || (realm.starts_with("http://") && self.options.plain_http);
        if !allowed {
            return Err(self.auth_error(&format!("the token realm {} is not HTTPS", clean(realm))));
        }
        let service = c.param("service").unwrap_or("");
        let scope = c.param("scope").unwrap_or(scope);
        let what = format!("token from {}", clean(realm));
        let resp = match &self.options.credential {
            Some(Credential::IdentityToken { token, .. }) => {
                let form = format!(
                    "grant_type=refresh_token&client_id=gpu-guard&service={}&scope={}&refresh_token={}",
                    encode_query(service),
                    encode_query(scope),
                    encode_query(token)
                );
                let rq = http::Request::post(realm)
                    .header("Content-Type", "application/x-www-form-urlencoded")
                    .body(form.into_bytes());
                rq.map_err(|e| self.auth_error(&clean(&e.to_string())))
                    .and_then(|rq| {
                        self.agent
                            .run(rq)
                            .map_err(|e| self.transport_error(&what, e))
                    })?
            }
            _ => {
                let sep = if realm.contains('?') { '&' } else { '?' };
                let url = format!(
                    "{realm}{sep}service={}&scope={}",
                    encode_query(service),
                    encode_query(scope)
                );
                let mut rq = http::Request::get(url);
                if let Some(h) = self.basic_header() {
                    rq = rq.header("Authorization", h);
                }
                let rq = rq
                    .body(())
                    .map_err(|e| self.auth_error(&clean(&e.to_string())))?;
                self.agent
                    .run(rq)
                    .map_err(|e| self.transport_error(&what, e))?
            }
        };
        if resp.status() == 401 || resp.status() == 403 {
            return Err(self.auth_error(&format!(
                "the token service refused the credentials (HTTP {})",
                resp.status()
            )));
        }
        if resp.status() != 200 {
            return Err(self.auth_error(&format!(
                "the token service answered HTTP {}",
                resp.status()
            )));
        }
        let body = self.read_small(resp, &what, 1 << 20)?;
        #[derive(serde::Deserialize)]
        struct Tok {
            token: Option<String>,
            access_token: Option<String>,
        }
        let t: Tok = serde_json::from_slice(&body).map_err(|e| {
            self.auth_error(&format!("the token service's answer is not valid: {e}"))
        })?;
        t.token
            .or(t.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| self.auth_error("the token service's answer holds no token"))
    }

    /// Reads a whole body, refusing it over `limit` bytes.
    pub(crate) fn read_small(
        &self,
        resp: http::Response<ureq::Body>,
        what: &str,
        limit: u64,
    ) -> Result<Vec<u8>, RegistryError> {
        let mut v = Vec::new();
        resp.into_body()
            .into_reader()
            .take(limit + 1)
            .read_to_end(&mut v)
            .map_err(|source| RegistryError::Io {
                registry: self.name.clone(),
                what: what.to_string(),
                source,
            })?;
        if v.len() as u64 > limit {
            return Err(RegistryError::TooLarge {
                registry: self.name.clone(),
                what: what.to_string(),
                limit,
            });
        }
        Ok(v)
    }

    /// The error for an unexpected status: the registry's own error code and
    /// message (distribution `docs/spec/api.md`, "Errors") when it sent one.
    pub(crate) fn status_error(
        &self,
        resp: http::Response<ureq::Body>,
        what: &str,
    ) -> RegistryError {
        let status = resp.status().as_u16();
        if status == 404 {
            return RegistryError::NotFound {
                registry: self.name.clone(),
                what: what.to_string(),
            };
        }
        let body = self.read_small(resp, what, 64 << 10).unwrap_or_default();
        #[derive(serde::Deserialize)]
        struct Errs {
            errors: Vec<E>,
        }
        #[derive(serde::Deserialize)]
        struct E {
            code: Option<String>,
            message: Option<String>,
        }
        let detail = serde_json::from_slice::<Errs>(&body)
            .ok()
            .and_then(|e| e.errors.into_iter().next())
            .map(|e| {
                format!(
                    ": {} {}",
                    clean(&e.code.unwrap_or_default()),
                    clean(&e.message.unwrap_or_default())
                )
            })
            .unwrap_or_default();
        RegistryError::Status {
            registry: self.name.clone(),
            what: what.to_string(),
            status,
            detail,
        }
    }
}
