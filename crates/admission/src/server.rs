//! The webhook's HTTPS server: `POST /mutate` (AdmissionReview),
//! `GET /healthz` and `GET /metrics`, HTTP/1.1 over rustls, on hyper; and
//! optionally `/metrics` and `/healthz` alone over plain HTTP.
//!
//! Bounded, so that no client holds the webhook's memory or its slots:
//! - at most [`MAX_CONNECTIONS`] connections at once (the next ones wait
//!   in the kernel's backlog);
//! - the TLS handshake and each request's header within
//!   [`HANDSHAKE_TIMEOUT`] (hyper's header timeout also closes a
//!   keep-alive connection left idle that long), the body within
//!   [`BODY_TIMEOUT`] (HTTP 408);
//! - a body over `max_body_bytes` is refused with 413 as soon as its length
//!   (declared or read) passes the limit, and the bodies held at once are
//!   at most [`BODY_MEMORY`] bytes together: a request that finds no room
//!   within [`BODY_TIMEOUT`] gets 503, a failed call that the webhook's
//!   `failurePolicy: Ignore` admits (the node's check still decides).

use crate::judge::ImageJudge;
use crate::metrics::{Budget, Metrics, ReviewResult};
use crate::review::Reviewer;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
pub const MAX_CONNECTIONS: usize = 256;
/// Request bodies held at once, all connections together.
pub const BODY_MEMORY: u64 = 32 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

/// What the routes share.
pub struct Shared<J: ImageJudge> {
    pub reviewer: Arc<Reviewer<J>>,
    pub metrics: Arc<Metrics>,
    pub max_body: u64,
    /// [`BODY_MEMORY`] in KiB permits.
    body_memory: Arc<Semaphore>,
    connections: Arc<Semaphore>,
}

impl<J: ImageJudge> Shared<J> {
    pub fn new(reviewer: Arc<Reviewer<J>>, metrics: Arc<Metrics>, max_body: u64) -> Arc<Shared<J>> {
        Arc::new(Shared {
            reviewer,
            metrics,
            max_body,
            body_memory: Arc::new(Semaphore::new((BODY_MEMORY >> 10) as usize)),
            connections: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
        })
    }
}

fn reply(status: u16, body: Vec<u8>, ctype: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = ctype.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

fn text(status: u16, msg: String) -> Response<Full<Bytes>> {
    reply(status, msg.into_bytes(), "text/plain")
}

/// `GET /metrics`.
fn metrics_reply<J: ImageJudge>(sh: &Shared<J>) -> Response<Full<Bytes>> {
    let body = sh.metrics.render(sh.reviewer.reads.cache.len());
    reply(
        200,
        body.into_bytes(),
        "text/plain; version=0.0.4; charset=utf-8",
    )
}

/// `POST /mutate`: the body within its bounds, then the review.
async fn mutate<J: ImageJudge>(
    sh: Arc<Shared<J>>,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let max_body = sh.max_body;
    let too_large = || text(413, format!("the body is larger than {max_body} bytes\n"));
    let declared = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max_body) {
        sh.metrics.review(ReviewResult::Invalid, Duration::ZERO);
        return too_large();
    }
    // Room for the body among the bodies held now, reserved before reading it.
    // At most all of it: a max_body_bytes over BODY_MEMORY waits for an empty server.
    let all = BODY_MEMORY >> 10;
    let kib = u32::try_from(declared.unwrap_or(max_body).div_ceil(1024).clamp(1, all))
        .unwrap_or(u32::MAX);
    let room = tokio::time::timeout(BODY_TIMEOUT, sh.body_memory.clone().acquire_many_owned(kib));
    let _room = match room.await {
        Ok(Ok(p)) => p,
        _ => {
            sh.metrics.budget(Budget::Body);
            sh.metrics.review(ReviewResult::Invalid, Duration::ZERO);
            return text(
                503,
                "too many requests are being read; try again\n".to_string(),
            );
        }
    };
    let limit = usize::try_from(max_body).unwrap_or(usize::MAX);
    let body = tokio::time::timeout(BODY_TIMEOUT, Limited::new(req.into_body(), limit).collect());
    match body.await {
        Ok(Ok(b)) => {
            let (status, body) = sh.reviewer.review(&b.to_bytes()).await;
            reply(status, body, "application/json")
        }
        Err(_) => {
            sh.metrics.budget(Budget::Body);
            sh.metrics.review(ReviewResult::Invalid, Duration::ZERO);
            text(
                408,
                format!(
                    "the body did not arrive within {} s\n",
                    BODY_TIMEOUT.as_secs()
                ),
            )
        }
        Ok(Err(e))
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            sh.metrics.review(ReviewResult::Invalid, Duration::ZERO);
            too_large()
        }
        Ok(Err(e)) => text(400, format!("cannot read the body: {e}\n")),
    }
}

async fn route<J: ImageJudge>(
    sh: Arc<Shared<J>>,
    plain: bool,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let path = req.uri().path().to_string();
    Ok(match (req.method(), path.as_str(), plain) {
        (&Method::GET, "/healthz", _) => reply(200, b"ok\n".to_vec(), "text/plain"),
        (&Method::GET, "/metrics", _) => metrics_reply(&sh),
        (&Method::POST, "/mutate", false) => mutate(sh, req).await,
        (_, "/mutate" | "/healthz" | "/metrics", _) => {
            reply(405, b"method not allowed\n".to_vec(), "text/plain")
        }
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

/// A connection slot, waiting for one when all are taken.
async fn slot<J: ImageJudge>(sh: &Shared<J>) -> Option<tokio::sync::OwnedSemaphorePermit> {
    match sh.connections.clone().try_acquire_owned() {
        Ok(p) => Some(p),
        Err(_) => {
            sh.metrics.budget(Budget::Connections);
            sh.connections.clone().acquire_owned().await.ok()
        }
    }
}

async fn accept(listener: &TcpListener) -> (tokio::net::TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(x) => return x,
            Err(e) => {
                // EMFILE and the like: back off instead of spinning.
                log::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Serves HTTP/1.1 on `io` until the client is done or a timeout passes.
async fn serve_conn<J, I>(sh: Arc<Shared<J>>, plain: bool, io: I, peer: SocketAddr)
where
    J: ImageJudge,
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req| route(sh.clone(), plain, req));
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE_TIMEOUT)
        .max_buf_size(64 << 10)
        .serve_connection(TokioIo::new(io), svc);
    if let Err(e) = conn.await {
        log::debug!("connection from {peer}: {e}");
    }
}

/// Serves the webhook over TLS until the task is dropped.
pub async fn serve<J: ImageJudge>(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    sh: Arc<Shared<J>>,
) {
    let acceptor = TlsAcceptor::from(tls);
    loop {
        let Some(permit) = slot(&sh).await else {
            return;
        };
        let (tcp, peer) = accept(&listener).await;
        let (acceptor, sh) = (acceptor.clone(), sh.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    log::debug!("TLS handshake with {peer} failed: {e}");
                    return;
                }
                Err(_) => return,
            };
            serve_conn(sh, false, tls, peer).await;
        });
    }
}

/// Serves `/metrics` and `/healthz` over plain HTTP (`--metrics-listen`).
pub async fn serve_metrics<J: ImageJudge>(listener: TcpListener, sh: Arc<Shared<J>>) {
    let slots = Arc::new(Semaphore::new(16));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (tcp, peer) = accept(&listener).await;
        let sh = sh.clone();
        tokio::spawn(async move {
            let _permit = permit;
            serve_conn(sh, true, tcp, peer).await;
        });
    }
}
