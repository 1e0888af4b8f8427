//! A hostile registry on 127.0.0.1, for what a real one is never made to
//! do: stall after the request, drip a body a byte at a time, send more
//! than the descriptor says, hand out upload locations on another host or
//! over plain HTTP, answer 401 with a realm of its choosing. Plain or TLS;
//! every connection on its own thread; every request recorded, and every
//! byte of body written counted.
//!
//! Also a throttling TCP proxy, to put a real registry behind a slow link.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub at: Instant,
}

/// What the server does with one request.
pub enum Act {
    /// Status, headers, body; the connection is closed after it.
    Reply(u16, Vec<(String, String)>, Vec<u8>),
    /// Nothing, ever: the connection is held open (until the client goes).
    Stall,
    /// The status line and headers, then the body `chunk` bytes at a time
    /// every `every`.
    Drip(u16, Vec<(String, String)>, Vec<u8>, usize, Duration),
    /// A 200 declaring `declared` bytes: `prefix`, then bytes without end
    /// (until the client goes or `cap` bytes were sent).
    Endless(Vec<u8>, u64, u64),
}

impl Act {
    pub fn ok(ctype: &str, body: &[u8]) -> Act {
        Act::Reply(
            200,
            vec![("Content-Type".into(), ctype.into())],
            body.to_vec(),
        )
    }
    pub fn status(s: u16) -> Act {
        Act::Reply(s, Vec::new(), Vec::new())
    }
}

type Handler = dyn Fn(&Request) -> Act + Send + Sync;

pub struct Hostile {
    pub addr: String,
    pub requests: Arc<Mutex<Vec<Request>>>,
    /// Body bytes written, all connections.
    pub sent: Arc<AtomicU64>,
    /// Connections accepted, and those the client has closed.
    pub accepted: Arc<AtomicUsize>,
    pub closed: Arc<Mutex<Vec<Instant>>>,
    stop: Arc<AtomicBool>,
}

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

fn tls_config(cert: &Path, key: &Path) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .map(|c| c.unwrap())
        .collect();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap(),
    )
}

fn head(status: u16, headers: &[(String, String)], len: Option<u64>) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status} X\r\nConnection: close\r\n");
    if let Some(n) = len {
        out += &format!("Content-Length: {n}\r\n");
    }
    for (k, v) in headers {
        out += &format!("{k}: {v}\r\n");
    }
    out += "\r\n";
    out.into_bytes()
}

fn read_request(r: &mut BufReader<Box<dyn Stream>>) -> Option<Request> {
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len.min(64 << 20)];
    r.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        path,
        headers,
        at: Instant::now(),
    })
}

impl Hostile {
    /// Serves `handler` over plain HTTP, or TLS with `tls` (cert, key).
    pub fn start(tls: Option<(&Path, &Path)>, handler: Box<Handler>) -> Hostile {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let h = Hostile {
            addr,
            requests: Arc::default(),
            sent: Arc::default(),
            accepted: Arc::default(),
            closed: Arc::default(),
            stop: Arc::default(),
        };
        let tls = tls.map(|(c, k)| tls_config(c, k));
        let handler: Arc<Handler> = Arc::from(handler);
        let (rec, sent, acc, closed, stop) = (
            h.requests.clone(),
            h.sent.clone(),
            h.accepted.clone(),
            h.closed.clone(),
            h.stop.clone(),
        );
        std::thread::spawn(move || {
            for s in l.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(s) = s else { continue };
                acc.fetch_add(1, Ordering::SeqCst);
                let (handler, rec, sent, closed, tls) = (
                    handler.clone(),
                    rec.clone(),
                    sent.clone(),
                    closed.clone(),
                    tls.clone(),
                );
                std::thread::spawn(move || {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(120)));
                    let probe = s.try_clone().unwrap();
                    let stream: Box<dyn Stream> = match tls {
                        Some(cfg) => Box::new(rustls::StreamOwned::new(
                            rustls::ServerConnection::new(cfg).unwrap(),
                            s,
                        )),
                        None => Box::new(s),
                    };
                    let mut r = BufReader::new(stream);
                    let Some(req) = read_request(&mut r) else {
                        closed.lock().unwrap().push(Instant::now());
                        return;
                    };
                    rec.lock().unwrap().push(req.clone());
                    let act = handler(&req);
                    let mut w = r.into_inner();
                    serve(&mut w, &req, act, &sent, &probe);
                    let _ = w.flush();
                    closed.lock().unwrap().push(Instant::now());
                });
            }
        });
        h
    }

    pub fn seen(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    pub fn base(&self, tls: bool) -> String {
        format!("{}://{}", if tls { "https" } else { "http" }, self.addr)
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.addr);
    }
}

/// Whether the client has gone (a read returns EOF or an error at once).
fn gone(probe: &TcpStream) -> bool {
    let _ = probe.set_nonblocking(true);
    let mut b = [0u8; 1];
    let r = probe.peek(&mut b);
    let _ = probe.set_nonblocking(false);
    match r {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

fn serve(w: &mut Box<dyn Stream>, req: &Request, act: Act, sent: &AtomicU64, probe: &TcpStream) {
    match act {
        Act::Reply(status, headers, body) => {
            let _ = w.write_all(&head(status, &headers, Some(body.len() as u64)));
            if req.method != "HEAD" && w.write_all(&body).is_ok() {
                sent.fetch_add(body.len() as u64, Ordering::SeqCst);
            }
        }
        Act::Stall => {
            while !gone(probe) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Act::Drip(status, headers, body, chunk, every) => {
            let _ = w.write_all(&head(status, &headers, Some(body.len() as u64)));
            let _ = w.flush();
            for c in body.chunks(chunk.max(1)) {
                if w.write_all(c).and_then(|_| w.flush()).is_err() || gone(probe) {
                    return;
                }
                sent.fetch_add(c.len() as u64, Ordering::SeqCst);
                std::thread::sleep(every);
            }
        }
        Act::Endless(prefix, declared, cap) => {
            let _ = w.write_all(&head(200, &[], Some(declared)));
            if w.write_all(&prefix).is_err() {
                return;
            }
            let buf = vec![0x5au8; 64 << 10];
            let mut n = prefix.len() as u64;
            while n < cap {
                if w.write_all(&buf).is_err() {
                    return;
                }
                n += buf.len() as u64;
                sent.fetch_add(buf.len() as u64, Ordering::SeqCst);
            }
        }
    }
}

/// A TCP proxy to `target` that sends the server's bytes to the client at
/// `bytes_per_s` (the client's bytes go through at once).
pub struct Throttle {
    pub addr: String,
}

impl Throttle {
    pub fn start(target: &str, bytes_per_s: u64) -> Throttle {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let target = target.to_string();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { continue };
                let Ok(s) = TcpStream::connect(&target) else {
                    continue;
                };
                let (mut c2, mut s2) = (c.try_clone().unwrap(), s.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c2, &mut s2);
                    let _ = s2.shutdown(std::net::Shutdown::Write);
                });
                let (mut c, mut s) = (c, s);
                std::thread::spawn(move || {
                    let chunk = (bytes_per_s / 20).max(1) as usize;
                    let mut buf = vec![0u8; chunk];
                    loop {
                        let n = match s.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if c.write_all(&buf[..n]).is_err() {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    let _ = c.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        Throttle { addr }
    }
}

/// An image held in memory: an OCI layout's blobs served by path, the
/// manifest at any tag.
#[derive(Clone)]
pub struct MiniImage {
    pub manifest: Vec<u8>,
    pub digest: String,
    pub blobs: BTreeMap<String, Vec<u8>>,
}

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

impl MiniImage {
    /// From an OCI layout written by `support::oci_layout`.
    pub fn from_layout(dir: &Path, digest: &str) -> MiniImage {
        let mut blobs = BTreeMap::new();
        for e in std::fs::read_dir(dir.join("blobs/sha256")).unwrap() {
            let e = e.unwrap();
            let d = format!("sha256:{}", e.file_name().to_string_lossy());
            blobs.insert(d, std::fs::read(e.path()).unwrap());
        }
        MiniImage {
            manifest: blobs[digest].clone(),
            digest: digest.to_string(),
            blobs,
        }
    }

    /// The answer for a read of this image (manifests, blobs), or None.
    pub fn answer(&self, req: &Request) -> Option<Act> {
        if req.method != "GET" && req.method != "HEAD" {
            return None;
        }
        if req.path.contains("/manifests/") && !req.path.contains("/manifests/sha256-") {
            return Some(Act::Reply(
                200,
                vec![
                    ("Content-Type".into(), OCI_MANIFEST.into()),
                    ("Docker-Content-Digest".into(), self.digest.clone()),
                ],
                self.manifest.clone(),
            ));
        }
        let d = req.path.split("/blobs/").nth(1)?;
        self.blobs
            .get(d)
            .map(|b| Act::ok("application/octet-stream", b))
    }
}
