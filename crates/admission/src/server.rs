//! The webhook's HTTPS server: `POST /mutate` (AdmissionReview) and
//! `GET /healthz`, HTTP/1.1 over rustls, on hyper.
//!
//! Bounded: the TLS handshake and the request header must arrive within
//! [`HANDSHAKE_TIMEOUT`]; a body over `max_body_bytes` is refused with 413
//! as soon as its length (declared or read) passes the limit; connections
//! are served concurrently, each on its own task, so a slow or hostile
//! client never holds up the API server's calls.

use crate::judge::ImageJudge;
use crate::review::Reviewer;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {msg}")]
    Pem { path: String, msg: String },
    #[error("the TLS certificate and key do not fit: {0}")]
    Tls(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

/// A rustls server config from PEM files (a chain and its key).
pub fn tls_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, ServerError> {
    let read = |p: &Path| {
        std::fs::read(p).map_err(|source| ServerError::Read {
            path: p.display().to_string(),
            source,
        })
    };
    let pem = |p: &Path, msg: &str| ServerError::Pem {
        path: p.display().to_string(),
        msg: msg.to_string(),
    };
    let cert_pem = read(cert)?;
    let chain: Vec<_> = rustls_pemfile::certs(&mut cert_pem.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|e| pem(cert, &e.to_string()))?;
    if chain.is_empty() {
        return Err(pem(cert, "no PEM certificate in the file"));
    }
    let key_pem = read(key)?;
    let key_der = rustls_pemfile::private_key(&mut key_pem.as_slice())
        .map_err(|e| pem(key, &e.to_string()))?
        .ok_or_else(|| pem(key, "no PEM private key in the file"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ServerError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| ServerError::Tls(e.to_string()))?;
    Ok(Arc::new(cfg))
}

fn reply(status: u16, body: Vec<u8>, ctype: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = ctype.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

async fn route<J: ImageJudge>(
    rv: Arc<Reviewer<J>>,
    max_body: u64,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let path = req.uri().path().to_string();
    Ok(match (req.method(), path.as_str()) {
        (&Method::GET, "/healthz") => reply(200, b"ok\n".to_vec(), "text/plain"),
        (&Method::POST, "/mutate") => {
            let declared = req
                .headers()
                .get(hyper::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if declared.is_some_and(|n| n > max_body) {
                return Ok(reply(
                    413,
                    format!("the body is larger than {max_body} bytes\n").into_bytes(),
                    "text/plain",
                ));
            }
            let limit = usize::try_from(max_body).unwrap_or(usize::MAX);
            match Limited::new(req.into_body(), limit).collect().await {
                Ok(b) => {
                    let (status, body) = rv.review(&b.to_bytes()).await;
                    reply(status, body, "application/json")
                }
                Err(e)
                    if e.downcast_ref::<http_body_util::LengthLimitError>()
                        .is_some() =>
                {
                    reply(
                        413,
                        format!("the body is larger than {max_body} bytes\n").into_bytes(),
                        "text/plain",
                    )
                }
                Err(e) => reply(
                    400,
                    format!("cannot read the body: {e}\n").into_bytes(),
                    "text/plain",
                ),
            }
        }
        (_, "/mutate" | "/healthz") => reply(405, b"method not allowed\n".to_vec(), "text/plain"),
        _ => reply(404, b"not found\n".to_vec(), "text/plain"),
    })
}

/// Binds `addr` (before anything is served, so a bad address fails at once).
pub async fn bind(addr: &str) -> Result<TcpListener, ServerError> {
    let a: SocketAddr =
        addr.parse()
            .map_err(|e: std::net::AddrParseError| ServerError::Listen {
                addr: addr.to_string(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()),
            })?;
    TcpListener::bind(a)
        .await
        .map_err(|source| ServerError::Listen {
            addr: addr.to_string(),
            source,
        })
}

/// Serves until the listener fails (never, in practice) or the task is dropped.
pub async fn serve<J: ImageJudge>(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    rv: Arc<Reviewer<J>>,
    max_body: u64,
) {
    let acceptor = TlsAcceptor::from(tls);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and the like: back off instead of spinning.
                log::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, rv) = (acceptor.clone(), rv.clone());
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    log::debug!("TLS handshake with {peer} failed: {e}");
                    return;
                }
                Err(_) => return,
            };
            let svc = hyper::service::service_fn(move |req| route(rv.clone(), max_body, req));
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HANDSHAKE_TIMEOUT)
                .max_buf_size(64 << 10)
                .serve_connection(TokioIo::new(tls), svc);
            if let Err(e) = conn.await {
                log::debug!("connection from {peer}: {e}");
            }
        });
    }
}
