//! The blocking registry client: one `ureq` agent per registry, the
//! registry's authentication flow ([`crate::auth`]), every request bounded
//! in time, and one-line errors.
//!
//! Time: a connection must be set up within `connect_timeout` and answer
//! within `response_timeout`; a small document (a manifest, a token, a
//! referrers index, a config, an attestation) must arrive whole within
//! `small_timeout`; and every request of one image read, layer bodies
//! included, ends by that read's deadline ([`Client::for_read`]). A read
//! can also be stopped from another thread ([`Cancel`]): the sockets it
//! uses are shut down, so a stalled read returns at once.
//!
//! Credentials go only to the registry's own origin ([`crate::origin`]):
//! a request to another host (an upload location there) is sent without
//! them and a challenge from it is not answered. Redirects (blob storage)
//! are followed by ureq, which never forwards the registry's
//! `Authorization` header on a redirect (ureq `RedirectAuthHeaders::Never`,
//! its default).

use crate::auth::AuthState;
use crate::challenge::{self, Challenge};
use crate::credentials::Credential;
use crate::error::RegistryError;
use crate::origin::Origin;
use gpu_guard::core::sanitize::esc;
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ureq::http::{self, Method};

/// Documents read whole (manifests, tokens, configs, attestations) are at most this.
pub const SMALL_MAX: u64 = 4 << 20;

/// How to reach one registry.
#[derive(Clone, Debug)]
pub struct Options {
    /// Plain HTTP instead of HTTPS (`--plain-http`).
    pub plain_http: bool,
    /// PEM files of extra trusted CAs (`--registry-ca`), besides the system's.
    pub ca_files: Vec<PathBuf>,
    pub credential: Option<Credential>,
    /// Where the credential was read, for error messages.
    pub credential_source: Option<String>,
    /// TCP and TLS connection setup, per connection.
    pub connect_timeout: Option<Duration>,
    /// From a request sent to its response's headers.
    pub response_timeout: Option<Duration>,
    /// A small document, from the request to its last byte.
    pub small_timeout: Option<Duration>,
    /// The most one socket read may wait: a body that stalls this long fails.
    pub stall_timeout: Option<Duration>,
    /// Every request ends by then, its body included (None: only the timeouts above).
    pub deadline: Option<Instant>,
}

impl Default for Options {
    /// Bounded: a registry that accepts connections and never answers, or
    /// sends a manifest a byte a second, fails in seconds, not never.
    fn default() -> Options {
        Options {
            plain_http: false,
            ca_files: Vec::new(),
            credential: None,
            credential_source: None,
            connect_timeout: Some(Duration::from_secs(15)),
            response_timeout: Some(Duration::from_secs(30)),
            small_timeout: Some(Duration::from_secs(60)),
            stall_timeout: Some(Duration::from_secs(30)),
            deadline: None,
        }
    }
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
    /// Read whole by the caller: bounded by `small_timeout` too.
    pub small: bool,
}

/// Stops one read's requests from another thread: the sockets of the
/// agent it was given ([`Client::for_read`]) are shut down, so a read
/// blocked on a stalled registry returns at once with an error.
#[derive(Clone)]
pub struct Cancel(ureq::Agent);

impl Cancel {
    pub fn cancel(&self) {
        self.0.clone().shutdown();
    }
}

pub struct Client {
    agent: ureq::Agent,
    base: String,
    origin: Origin,
    /// The registry as the reference names it, for messages.
    name: String,
    pub(crate) options: Options,
    pub(crate) auth: Arc<AuthState>,
    pub stats: Arc<Stats>,
}

/// Which of ureq's timers ran out, for messages.
fn timeout_name(t: ureq::Timeout) -> &'static str {
    match t {
        ureq::Timeout::Connect | ureq::Timeout::Resolve => "no connection in time",
        ureq::Timeout::RecvResponse | ureq::Timeout::SendRequest => "no answer in time",
        ureq::Timeout::RecvBody => "the body did not arrive in time",
        ureq::Timeout::PerRead => "the registry stopped sending",
        _ => "the read's deadline or the document's time limit passed",
    }
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
            .timeout_connect(options.connect_timeout)
            .timeout_recv_response(options.response_timeout)
            .timeout_per_read(options.stall_timeout)
            .build()
            .new_agent();
        let scheme = if options.plain_http { "http" } else { "https" };
        let base = format!("{scheme}://{api_host}");
        let origin = Origin::of(&base).ok_or_else(|| RegistryError::BadReference {
            reference: esc(api_host),
            msg: "not a host[:port]".to_string(),
        })?;
        Ok(Client {
            agent,
            base,
            origin,
            name: name.to_string(),
            options,
            auth: Arc::new(AuthState::default()),
            stats: Arc::new(Stats::default()),
        })
    }

    /// The same registry for one image read: its own connections (which
    /// [`Cancel`] shuts down without touching other reads), the tokens and
    /// counters shared with `self`, and every request ending by `deadline`.
    pub fn for_read(&self, deadline: Option<Instant>) -> (Client, Cancel) {
        let agent = ureq::Agent::new_with_config(self.agent.config().clone());
        let mut options = self.options.clone();
        options.deadline = match (options.deadline, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let c = Client {
            agent: agent.clone(),
            base: self.base.clone(),
            origin: self.origin.clone(),
            name: self.name.clone(),
            options,
            auth: self.auth.clone(),
            stats: self.stats.clone(),
        };
        (c, Cancel(agent))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn origin(&self) -> &Origin {
        &self.origin
    }

    pub(crate) fn agent(&self) -> &ureq::Agent {
        &self.agent
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
        if crate::scheme::not_tls(&e) {
            let msg = crate::scheme::not_tls_message(self);
            return RegistryError::Tls { registry, msg };
        }
        let msg = esc(&e.to_string());
        let tls = matches!(e, ureq::Error::Rustls(_) | ureq::Error::Tls(_))
            || msg.contains("certificate")
            || msg.contains("Certificate");
        match e {
            _ if tls => RegistryError::Tls { registry, msg },
            ureq::Error::Timeout(t) => RegistryError::TimedOut {
                registry,
                what: what.to_string(),
                msg: timeout_name(t).to_string(),
            },
            ureq::Error::Io(ref io) if io.kind() == std::io::ErrorKind::TimedOut => {
                RegistryError::TimedOut {
                    registry,
                    what: what.to_string(),
                    msg,
                }
            }
            ureq::Error::Io(ref io)
                if io.kind() == std::io::ErrorKind::InvalidData && msg.contains("tls") =>
            {
                RegistryError::Tls { registry, msg }
            }
            ureq::Error::HostNotFound | ureq::Error::ConnectionFailed | ureq::Error::Io(_) => {
                RegistryError::Connect { registry, msg }
            }
            _ => RegistryError::Protocol {
                registry,
                what: what.to_string(),
                msg,
            },
        }
    }

    /// The deadline's error, once it has passed.
    pub(crate) fn past_deadline(&self, what: &str) -> Option<RegistryError> {
        let d = self.options.deadline?;
        (Instant::now() >= d).then(|| RegistryError::TimedOut {
            registry: self.name.clone(),
            what: what.to_string(),
            msg: "the read's deadline passed".to_string(),
        })
    }

    /// `rq` with its whole-request bound: the read's deadline, and
    /// `small_timeout` for a document read whole.
    pub(crate) fn bounded<S: ureq::AsSendBody>(
        &self,
        rq: http::Request<S>,
        small: bool,
        what: &str,
    ) -> Result<http::Request<S>, RegistryError> {
        if let Some(e) = self.past_deadline(what) {
            return Err(e);
        }
        let mut global = if small {
            self.options.small_timeout
        } else {
            None
        };
        if let Some(d) = self.options.deadline {
            let left = d.saturating_duration_since(Instant::now());
            global = Some(global.map_or(left, |g| g.min(left)));
        }
        Ok(self
            .agent
            .configure_request(rq)
            .timeout_global(global)
            .build())
    }

    /// Runs a request built elsewhere (the token service's) with the agent.
    pub(crate) fn run_raw<S: ureq::AsSendBody>(
        &self,
        rq: http::Request<S>,
        what: &str,
    ) -> Result<http::Response<ureq::Body>, RegistryError> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let rq = self.bounded(rq, true, what)?;
        self.agent
            .run(rq)
            .map_err(|e| self.transport_error(what, e))
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
            msg: esc(&e.to_string()),
        };
        let r = match req.body {
            Some((bytes, ctype)) => {
                let rq = b
                    .header("Content-Type", ctype)
                    .body(bytes.to_vec())
                    .map_err(bad)?;
                self.agent.run(self.bounded(rq, req.small, req.what)?)
            }
            None => self
                .agent
                .run(self.bounded(b.body(()).map_err(bad)?, req.small, req.what)?),
        };
        r.map_err(|e| self.transport_error(req.what, e))
    }

    /// Whether `target` is the registry's own (credentials may go with it).
    fn own(&self, target: &str) -> Result<bool, RegistryError> {
        if target.starts_with('/') {
            return Ok(true);
        }
        let o = Origin::of(target).ok_or_else(|| RegistryError::Protocol {
            registry: self.name.clone(),
            what: "request".to_string(),
            msg: format!("not an http(s) URL: {}", esc(target)),
        })?;
        if self.origin.scheme == "https" && o.scheme == "http" {
            return Err(RegistryError::Protocol {
                registry: self.name.clone(),
                what: "request".to_string(),
                msg: format!(
                    "refusing plain HTTP from an HTTPS registry: {}",
                    esc(target)
                ),
            });
        }
        Ok(o == self.origin)
    }

    /// Sends `req`, answering one authentication challenge from the
    /// registry itself. A request to another origin carries no credentials,
    /// and its challenge is an error: credentials are never sent there.
    pub(crate) fn send(&self, req: &Req) -> Result<http::Response<ureq::Body>, RegistryError> {
        if !self.own(req.target)? {
            let resp = self.run_once(req, None)?;
            if resp.status() == 401 || resp.status() == 403 {
                return Err(self.auth_error(&format!(
                    "{} answered HTTP {} at another host than the registry; its credentials are not sent there",
                    esc(req.target),
                    resp.status()
                )));
            }
            return Ok(resp);
        }
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
            .map_err(|source| self.io_error(what, source))?;
        if v.len() as u64 > limit {
            return Err(RegistryError::TooLarge {
                registry: self.name.clone(),
                what: what.to_string(),
                limit,
            });
        }
        Ok(v)
    }

    /// A body read that failed: a timeout says so, anything else is I/O.
    pub(crate) fn io_error(&self, what: &str, source: std::io::Error) -> RegistryError {
        let text = source.to_string();
        if source.kind() == std::io::ErrorKind::TimedOut || text.contains("timeout") {
            return RegistryError::TimedOut {
                registry: self.name.clone(),
                what: what.to_string(),
                msg: esc(&text),
            };
        }
        RegistryError::Io {
            registry: self.name.clone(),
            what: what.to_string(),
            source,
        }
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
        if self.options.plain_http && crate::scheme::https_only(status, &body) {
            return RegistryError::Protocol {
                registry: self.name.clone(),
                what: what.to_string(),
                msg: crate::scheme::https_only_message(&self.name),
            };
        }
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
                    esc(&e.code.unwrap_or_default()),
                    esc(&e.message.unwrap_or_default())
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
