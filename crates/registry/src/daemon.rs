//! `docker-daemon:NAME[:TAG]`: the local docker's image, streamed from its
//! API socket as `docker save` writes it (Engine API `GET /images/{name}/get`,
//! a tar: docker 20.10, Debian 12's docker.io, writes the legacy layout with
//! `manifest.json`; Engine 25+ an OCI layout beside it).
//!
//! The socket is `$DOCKER_HOST` when it is `unix://PATH`, else
//! `/var/run/docker.sock`. One HTTP/1.1 request with `Connection: close`;
//! the body is read as it arrives (chunked or not), never stored.

use crate::error::RegistryError;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub const DEFAULT_SOCKET: &str = "/var/run/docker.sock";
const MAX_HEAD_BYTES: usize = 64 << 10;

/// The socket from `$DOCKER_HOST` (given as `docker_host`), else the default.
pub fn socket_path(docker_host: Option<&str>) -> Result<PathBuf, RegistryError> {
    match docker_host.filter(|h| !h.is_empty()) {
        None => Ok(PathBuf::from(DEFAULT_SOCKET)),
        Some(h) => match h.strip_prefix("unix://") {
            Some(p) if !p.is_empty() => Ok(PathBuf::from(p)),
            _ => Err(RegistryError::Daemon {
                socket: gpu_guard::core::sanitize::esc(h),
                msg: "only a unix:// DOCKER_HOST is supported".to_string(),
            }),
        },
    }
}

/// Percent-encodes an image name for the request path (`/` kept: the
/// Engine API routes `/images/{name:.*}/get`).
fn encode_path(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/:@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The most one read of the socket may wait: a daemon that stops sending this long fails.
const STALL: Duration = Duration::from_secs(30);

/// The socket, each read bounded by the stall timeout and the deadline.
struct Bounded {
    s: UnixStream,
    deadline: Option<Instant>,
}

impl Read for Bounded {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let wait = match self.deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the read's deadline passed",
                    ));
                }
                left.min(STALL)
            }
            None => STALL,
        };
        self.s.set_read_timeout(Some(wait))?;
        self.s.read(buf).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
                io::ErrorKind::TimedOut,
                "the daemon stopped sending (or the read's deadline passed)",
            ),
            _ => e,
        })
    }
}

/// The body of a chunked response (RFC 9112 section 7.1), trailers skipped.
struct Chunked<R> {
    inner: R,
    left: u64,
    done: bool,
}

impl<R: BufRead> Chunked<R> {
    fn next_size(&mut self) -> io::Result<u64> {
        let mut line = String::new();
        (&mut self.inner).take(1024).read_line(&mut line)?;
        let hex = line.split(';').next().unwrap_or("").trim();
        u64::from_str_radix(hex, 16)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size"))
    }
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            self.left = self.next_size()?;
            if self.left == 0 {
                self.done = true;
                return Ok(0);
            }
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the daemon closed the stream inside a chunk",
            ));
        }
        self.left -= n as u64;
        if self.left == 0 {
            let mut crlf = [0u8; 2];
            self.inner.read_exact(&mut crlf)?;
        }
        Ok(n)
    }
}

/// Streams `docker save NAME` from the daemon at `socket`; every read ends
/// by `deadline`, and one that waits more than 30 s fails.
pub fn export(
    socket: &std::path::Path,
    name: &str,
    deadline: Option<Instant>,
) -> Result<Box<dyn Read + Send>, RegistryError> {
    let shown = socket.display().to_string();
    let err = |msg: String| RegistryError::Daemon {
        socket: shown.clone(),
        msg: gpu_guard::core::sanitize::esc(&msg),
    };
    let mut s = UnixStream::connect(socket).map_err(|e| err(format!("cannot connect: {e}")))?;
    s.set_write_timeout(Some(STALL))
        .map_err(|e| err(e.to_string()))?;
    let req = format!("GET /images/{}/get HTTP/1.1\r\nHost: docker\r\nUser-Agent: gpu-guard\r\nConnection: close\r\n\r\n", encode_path(name));
    s.write_all(req.as_bytes())
        .map_err(|e| err(format!("cannot send the request: {e}")))?;
    let mut r = BufReader::with_capacity(64 << 10, Bounded { s, deadline });
    let mut head = Vec::new();
    loop {
        let before = head.len();
        (&mut r)
            .take(4096)
            .read_until(b'\n', &mut head)
            .map_err(|e| err(format!("reading the answer: {e}")))?;
        if head.len() == before {
            return Err(err(
                "the daemon closed the connection before answering".to_string()
            ));
        }
        if head.ends_with(b"\r\n\r\n") || head.ends_with(b"\n\n") {
            break;
        }
        if head.len() > MAX_HEAD_BYTES {
            return Err(err("the answer's header is too large".to_string()));
        }
    }
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| err("not an HTTP answer".to_string()))?;
    let mut chunked = false;
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            if k.trim().eq_ignore_ascii_case("transfer-encoding")
                && v.to_ascii_lowercase().contains("chunked")
            {
                chunked = true;
            }
        }
    }
    let body: Box<dyn Read + Send> = if chunked {
        Box::new(Chunked {
            inner: r,
            left: 0,
            done: false,
        })
    } else {
        Box::new(r)
    };
    if status != 200 {
        let mut v = Vec::new();
        let _ = body.take(64 << 10).read_to_end(&mut v);
        let msg = serde_json::from_slice::<serde_json::Value>(&v)
            .ok()
            .and_then(|j| {
                j.get("message")
                    .and_then(|m| m.as_str())
                    .map(str::to_string)
            })
            .unwrap_or_else(|| String::from_utf8_lossy(&v).trim().to_string());
        return Err(err(format!("image {name}: HTTP {status}: {msg}")));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_and_chunks() {
        assert_eq!(socket_path(None).unwrap(), PathBuf::from(DEFAULT_SOCKET));
        assert_eq!(
            socket_path(Some("unix:///run/d.sock")).unwrap(),
            PathBuf::from("/run/d.sock")
        );
        assert!(socket_path(Some("tcp://1.2.3.4:2375")).is_err());
        let raw = b"5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n";
        let mut c = Chunked {
            inner: &raw[..],
            left: 0,
            done: false,
        };
        let mut s = String::new();
        c.read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello world");
        let mut c = Chunked {
            inner: &b"zz\r\n"[..],
            left: 0,
            done: false,
        };
        assert!(c.read_to_string(&mut String::new()).is_err());
        assert_eq!(encode_path("a b/c:d"), "a%20b/c:d");
    }
}
