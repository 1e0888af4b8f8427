//! SIGTERM: uninstall on a DaemonSet deletion, keep everything on a
//! rolling upgrade (the DaemonSet still there, same uid) or when the
//! DaemonSet was recreated (another uid). The API server is a stand-in on
//! 127.0.0.1 over TLS (python3's ssl, a certificate made with openssl) that
//! checks the bearer token and answers the DaemonSet's GET from a file the
//! test writes.

use crate::support::{have_tool, TempDir};
use crate::{agent_bin, wait_for};
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

const SERVER: &str = r#"
import http.server, ssl, sys, os
state = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.headers.get("Authorization") != "Bearer test-token":
            self.send_response(401); self.end_headers(); return
        if self.path != "/apis/apps/v1/namespaces/gpu-guard/daemonsets/gpu-guard-installer":
            self.send_response(404); self.end_headers(); return
        body = open(state).read().strip()
        if body == "gone":
            self.send_response(404); self.end_headers(); self.wfile.write(b'{"kind":"Status","code":404}'); return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())
    def log_message(self, *a): pass
srv = http.server.HTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[2], sys.argv[3])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The stand-in API server; its port.
fn api_server(dir: &Path) -> (Proc, u16) {
    // A CA (the service account's ca.crt) and the server's certificate
    // it signed, for 127.0.0.1.
    let sh = format!(
        "set -e; cd {}; \
         openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=test-ca \
           -addext basicConstraints=critical,CA:TRUE -keyout ca.key -out ca.crt; \
         openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout key.pem -out srv.csr; \
         printf 'subjectAltName=IP:127.0.0.1\\nbasicConstraints=CA:FALSE\\n' > ext; \
         openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile ext -out srv.crt",
        dir.display()
    );
    let st = Command::new("sh")
        .args(["-c", &sh])
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    fs::write(dir.join("server.py"), SERVER).unwrap();
    fs::write(dir.join("token"), "test-token\n").unwrap();
    let mut child = Command::new("python3")
        .arg(dir.join("server.py"))
        .arg(dir.join("ds"))
        .arg(dir.join("srv.crt"))
        .arg(dir.join("key.pem"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line.trim().parse().unwrap();
    (Proc(child), port)
}

fn set_ds(dir: &Path, what: &str) {
    let body = match what {
        "gone" => "gone".to_string(),
        "deleting" => {
            r#"{"metadata":{"uid":"uid-1","deletionTimestamp":"2025-01-01T00:00:00Z"}}"#.into()
        }
        uid => format!(r#"{{"metadata":{{"uid":"{uid}"}}}}"#),
    };
    fs::write(dir.join("ds"), body).unwrap();
}

fn start(t: &TempDir, port: u16) -> Proc {
    let root = t.join("host");
    let child = agent_bin()
        .arg("--host-root")
        .arg(&root)
        .args([
            "--bin-dir",
            "/usr/bin",
            "--labels-file",
            "",
            "--interval-ms",
            "100",
        ])
        .args(["--api-server", &format!("https://127.0.0.1:{port}")])
        .arg("--api-token-file")
        .arg(t.join("token"))
        .arg("--api-ca-file")
        .arg(t.join("ca.crt"))
        .args(["--restart-mode", "none"])
        .arg("--status-file")
        .arg(t.join("status"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Proc(child)
}

fn registered(root: &Path) -> bool {
    fs::read_to_string(root.join("etc/containerd/config.toml"))
        .is_ok_and(|t| t.contains("runtimes.gpu-guard"))
}

/// SIGTERM once the agent has registered and read its DaemonSet's uid.
fn stop(mut p: Proc, root: &Path) -> (Output, String) {
    assert!(wait_for(20.0, || registered(root)).is_some());
    // Give it a round to read the uid.
    std::thread::sleep(std::time::Duration::from_millis(500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(p.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let child = std::mem::replace(&mut p.0, Command::new("true").spawn().unwrap());
    let out = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, log)
}

#[test]
fn only_a_deleted_daemonset_uninstalls() {
    if !have_tool("openssl") || !have_tool("python3") {
        return;
    }
    let t = TempDir::new("agent-deletion");
    let root = t.join("host");
    fs::create_dir_all(root.join("usr/bin")).unwrap();
    fs::write(root.join("usr/bin/gpu-guard"), b"#!/bin/sh\n").unwrap();
    std::os::unix::fs::symlink("gpu-guard", root.join("usr/bin/gpu-guard-runtime")).unwrap();
    set_ds(t.path(), "uid-1");
    let (_api, port) = api_server(t.path());

    // A rolling upgrade (the DaemonSet is there, same uid): kept.
    let (out, log) = stop(start(&t, port), &root);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(log.contains("DaemonSet has uid uid-1"), "{log}");
    assert!(log.contains("keeping gpu-guard registered"), "{log}");
    assert!(registered(&root), "{log}");

    // The DaemonSet deleted and created anew while this pod stopped: kept
    // for the new DaemonSet's pod.
    let p = start(&t, port);
    assert!(wait_for(20.0, || registered(&root)).is_some());
    std::thread::sleep(std::time::Duration::from_millis(500));
    set_ds(t.path(), "uid-2");
    let (_, log) = stop(p, &root);
    assert!(log.contains("a new DaemonSet of the same name"), "{log}");
    assert!(registered(&root), "{log}");

    // Deleted (kubectl's background propagation: the object is gone): the
    // node is unregistered and nothing of gpu-guard's is left in the
    // engine's configuration.
    set_ds(t.path(), "uid-1");
    let p = start(&t, port);
    assert!(wait_for(20.0, || registered(&root)).is_some());
    std::thread::sleep(std::time::Duration::from_millis(500));
    set_ds(t.path(), "gone");
    let (out, log) = stop(p, &root);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(
        log.contains("uninstalling gpu-guard from this node"),
        "{log}"
    );
    assert!(!registered(&root), "{log}");
    assert!(!root
        .join("var/lib/gpu-guard/engines/containerd.json")
        .exists());
    assert!(
        log.contains("restart containerd on this node to apply"),
        "{log}"
    );
    assert!(
        !root
            .join("var/lib/gpu-guard/metrics/gpu-guard-node-agent.prom")
            .exists(),
        "{log}"
    );
}
