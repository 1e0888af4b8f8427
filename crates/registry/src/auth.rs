//! The registry's authentication flow (distribution `docs/spec/auth/token.md`,
//! `docs/spec/auth/oauth.md`): a request is sent with the token cached for
//! its scope (or none); a `401` from the registry itself carries a
//! `WWW-Authenticate` challenge:
//! - `Bearer realm,service,scope`: a token is fetched from the realm, with
//!   HTTP Basic credentials when there are some (GET), or with an identity
//!   token as an OAuth2 refresh token (POST `grant_type=refresh_token`), or
//!   anonymously; the request is retried once with it.
//! - `Basic`: the request is retried once with the credentials.
//!
//! Only the registry's own challenges are answered ([`Client::send`]), so
//! the realm that receives the credentials is always the one the registry
//! named; an `https` registry's realm must be `https` too. A second
//! `401`/`403` is an authentication error naming where the credentials
//! came from.

use crate::challenge::Challenge;
use crate::client::Client;
use crate::credentials::Credential;
use crate::error::RegistryError;
use base64::Engine as _;
use gpu_guard::core::sanitize::esc;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use ureq::http;

/// Tokens by scope, and whether the registry asked for Basic credentials;
/// shared by every read of one registry ([`Client::for_read`]).
#[derive(Default)]
pub(crate) struct AuthState {
    tokens: Mutex<HashMap<String, String>>,
    basic: AtomicBool,
}

/// Tokens kept per registry; past this the cache starts over (scopes are per repository).
const MAX_TOKENS: usize = 4096;

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

impl Client {
    pub(crate) fn cached_auth(&self, scope: &str) -> Option<String> {
        if let Some(t) = self.auth.tokens.lock().ok()?.get(scope) {
            return Some(format!("Bearer {t}"));
        }
        if self.auth.basic.load(Ordering::Relaxed) {
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

    pub(crate) fn auth_error(&self, msg: &str) -> RegistryError {
        let from = match (&self.options.credential, &self.options.credential_source) {
            (Some(_), Some(f)) => format!(" (credentials from {f})"),
            (Some(_), None) => " (credentials given)".to_string(),
            (None, _) => " (no credentials found for this registry)".to_string(),
        };
        RegistryError::Auth {
            registry: self.name().to_string(),
            msg: format!("{msg}{from}"),
        }
    }

    /// The Authorization header value that answers the registry's challenge.
    pub(crate) fn answer(
        &self,
        challenges: &[Challenge],
        scope: &str,
    ) -> Result<String, RegistryError> {
        if let Some(c) = challenges.iter().find(|c| c.scheme == "bearer") {
            if let Some(Credential::RegistryToken(t)) = &self.options.credential {
                return Ok(format!("Bearer {t}"));
            }
            let token = self.fetch_token(c, scope)?;
            if let Ok(mut m) = self.auth.tokens.lock() {
                if m.len() >= MAX_TOKENS {
                    m.clear();
                }
                m.insert(scope.to_string(), token.clone());
            }
            return Ok(format!("Bearer {token}"));
        }
        if challenges.iter().any(|c| c.scheme == "basic") {
            let h = self
                .basic_header()
                .ok_or_else(|| self.auth_error("the registry requires credentials"))?;
            self.auth.basic.store(true, Ordering::Relaxed);
            return Ok(h);
        }
        Err(self.auth_error("the registry answered 401 without a Bearer or Basic challenge"))
    }

    /// Sends the token request to `realm`: Basic credentials (GET) or a
    /// refresh token (POST) go with it.
    fn token_request(
        &self,
        realm: &str,
        service: &str,
        scope: &str,
        what: &str,
    ) -> Result<http::Response<ureq::Body>, RegistryError> {
        let bad = |e: http::Error| self.auth_error(&esc(&e.to_string()));
        if let Some(Credential::IdentityToken { token, .. }) = &self.options.credential {
            let form = format!(
                "grant_type=refresh_token&client_id=gpu-guard&service={}&scope={}&refresh_token={}",
                encode_query(service),
                encode_query(scope),
                encode_query(token)
            );
            let rq = http::Request::post(realm)
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body(form.into_bytes())
                .map_err(bad)?;
            return self.run_raw(rq, what);
        }
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
        self.run_raw(rq.body(()).map_err(bad)?, what)
    }

    /// Fetches a token from the challenge's realm (distribution `docs/spec/auth/token.md`).
    fn fetch_token(&self, c: &Challenge, scope: &str) -> Result<String, RegistryError> {
        self.stats
            .token_gets
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let realm = c
            .param("realm")
            .ok_or_else(|| self.auth_error("the Bearer challenge has no realm"))?;
        let realm_origin = crate::origin::Origin::of(realm);
        let allowed = match &realm_origin {
            Some(o) if o.scheme == "https" => true,
            Some(o) => o.scheme == "http" && self.origin().scheme == "http",
            None => false,
        };
        if !allowed {
            return Err(self.auth_error(&format!("the token realm {} is not HTTPS", esc(realm))));
        }
        let service = c.param("service").unwrap_or("");
        let scope = c.param("scope").unwrap_or(scope);
        let what = format!("token from {}", esc(realm));
        let resp = self.token_request(realm, service, scope, &what)?;
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
            self.auth_error(&format!(
                "the token service's answer: {}",
                crate::document::cause("token response", &e)
            ))
        })?;
        t.token
            .or(t.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| self.auth_error("the token service's answer holds no token"))
    }
}
