//! A registry reached with the wrong scheme: HTTPS to a server that speaks
//! plain HTTP, or `--plain-http` to one that speaks HTTPS. Both fail deep in
//! a protocol stack (rustls: `received corrupt message of type
//! InvalidContentType`; the server: HTTP 400), so they are recognised here
//! and told in the words a person acts on, naming the switch to change.

use crate::client::Client;
use gpu_guard::core::sanitize::esc;
use std::time::Duration;

/// How long the plain-HTTP look at a server that did not speak TLS may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What to change, for both entry points that read registries.
pub(crate) fn plain_http_fix(registry: &str) -> String {
    let registry = esc(registry);
    format!(
        "an HTTP-only registry is read with --plain-http (the admission webhook: list \"{registry}\" in [admission] plain_http_registries)"
    )
}

/// rustls read a first record whose content type is no TLS one: the
/// server answered the ClientHello with something else. rustls reports it
/// as `InvalidMessage::InvalidContentType` (rustls `msgs/deframer`,
/// `DeframerIter::next`), which ureq passes on inside an `io::Error`.
pub(crate) fn not_tls(e: &ureq::Error) -> bool {
    let inner = match e {
        ureq::Error::Rustls(r) => Some(r),
        ureq::Error::Io(io) => io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()),
        _ => None,
    };
    matches!(
        inner,
        Some(rustls::Error::InvalidMessage(
            rustls::InvalidMessage::InvalidContentType
        ))
    )
}

/// The message for a server that did not speak TLS. Go's client tells an
/// HTTP answer from other non-TLS bytes by the record's first five bytes
/// being `HTTP/` (net/http `transport.go`, "server gave HTTP response to
/// HTTPS client"); rustls keeps no such bytes, so the same question is
/// asked once in plain HTTP, bounded, on this error path only.
pub(crate) fn not_tls_message(client: &Client) -> String {
    let fix = plain_http_fix(client.name());
    if speaks_plain_http(client) {
        format!("the server gave an HTTP response to an HTTPS client; {fix}")
    } else {
        format!("the server does not speak TLS (its first bytes are no TLS record); {fix}")
    }
}

fn speaks_plain_http(client: &Client) -> bool {
    let url = client.url("/v2/");
    let Some(rest) = url.strip_prefix("https://") else {
        return false;
    };
    let mut limit = PROBE_TIMEOUT;
    if let Some(d) = client.options.deadline {
        limit = limit.min(d.saturating_duration_since(std::time::Instant::now()));
    }
    let Ok(rq) = ureq::http::Request::get(format!("http://{rest}")).body(()) else {
        return false;
    };
    let rq = client
        .agent()
        .configure_request(rq)
        .timeout_global(Some(limit))
        .build();
    client.agent().run(rq).is_ok()
}

/// A registry read with `--plain-http` that answered HTTP 400 because it
/// speaks HTTPS: Go's server writes `Client sent an HTTP request to an
/// HTTPS server.` (net/http `server.go`, `serve`), nginx `The plain HTTP
/// request was sent to HTTPS port` (its error page for code 497).
pub(crate) fn https_only(status: u16, body: &[u8]) -> bool {
    if status != 400 {
        return false;
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(4096)]);
    text.contains("HTTP request to an HTTPS server")
        || text.contains("plain HTTP request was sent to HTTPS port")
}

/// The message for [`https_only`].
pub(crate) fn https_only_message(registry: &str) -> String {
    let registry = esc(registry);
    format!(
        "the server speaks HTTPS, not plain HTTP: read it without --plain-http (the admission webhook: remove \"{registry}\" from [admission] plain_http_registries)"
    )
}
