//! The axum example's server (examples/axum.rs) on two workers, both backends, driven by
//! curl: handlers that read a file, sleep and call another TCP service through ring-rt,
//! and requests served by every worker. Without curl these tests are reported ignored
//! (apt-get install -y curl).

#[macro_use]
mod support;

/// The example itself, so the test exercises the server that ships.
#[allow(dead_code)]
#[path = "../../../examples/axum.rs"]
mod example;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use libtest_mimic::Completion;
use ring_rt::{BackendKind, Builder};
use support::Outcome;

fn main() {
    support::run(&[
        (
            "handlers_read_a_file_sleep_and_call_upstream",
            handlers_read_a_file_sleep_and_call_upstream,
        ),
        (
            "requests_are_served_by_every_worker",
            requests_are_served_by_every_worker,
        ),
    ])
}

/// The example's router on a two-worker runtime in its own thread; stopped on drop.
struct Server {
    addr: SocketAddr,
    file: std::path::PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

const FILE_TEXT: &str = "served through ring-rt's fs::read\n";

impl Server {
    fn start(kind: BackendKind) -> Result<Server, Outcome> {
        let file =
            std::env::temp_dir().join(format!("ring-rt-axum-test-{}-{kind}", std::process::id()));
        std::fs::write(&file, FILE_TEXT).map_err(|e| Err(e.to_string().into()))?;
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let (stopping, path) = (stop.clone(), file.clone());
        let thread = std::thread::spawn(move || {
            let rt = match Builder::default().threads(2).backend(kind).build() {
                Ok(rt) => rt,
                Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                    let _ = tx.send(Err(Ok(Completion::ignored_with(format!(
                        "{kind} backend unavailable here: {e}"
                    )))));
                    return;
                }
                Err(e) => {
                    let _ = tx.send(Err(Err(e.to_string())));
                    return;
                }
            };
            let started = rt.block_on(async {
                let upstream = ring_rt::net::TcpListener::bind("127.0.0.1:0")?;
                let upstream_addr = upstream.local_addr()?;
                drop(ring_rt::spawn(example::upstream_echo(upstream)));
                let first = example::bind_shared("127.0.0.1:0".parse().expect("addr"))?;
                std::io::Result::Ok((first, upstream_addr))
            });
            let (first, upstream) = match started {
                Ok(s) => s,
                Err(e) => {
                    let _ = tx.send(Err(Err(e.to_string())));
                    return;
                }
            };
            let addr = first.local_addr().expect("bound");
            let app = example::router(example::AppState {
                file: path,
                upstream,
            });
            drop(rt.spawn(example::serve(first, app.clone())));
            // Every other worker binds its own listener on the same port.
            let bound = rt.spawn_on_all(move |worker| {
                let app = app.clone();
                async move {
                    if worker == 0 {
                        return Ok(());
                    }
                    let listener = example::bind_shared(addr)?;
                    drop(ring_rt::spawn(example::serve(listener, app)));
                    std::io::Result::Ok(())
                }
            });
            let bound = rt.block_on(async {
                for b in bound {
                    b.await.map_err(std::io::Error::from)??;
                }
                std::io::Result::Ok(())
            });
            if let Err(e) = bound {
                let _ = tx.send(Err(Err(e.to_string())));
                return;
            }
            let _ = tx.send(Ok(addr));
            rt.block_on(async {
                while !stopping.load(Ordering::Acquire) {
                    ring_rt::time::sleep(Duration::from_millis(5)).await;
                }
            });
        });
        let addr = match rx.recv() {
            Ok(Ok(addr)) => addr,
            Ok(Err(outcome)) => return Err(outcome.map_err(|e: String| e.into())),
            Err(_) => return Err(Err("the server thread died before listening".into())),
        };
        Ok(Server {
            addr,
            file,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.file);
    }
}

fn have_curl() -> bool {
    Command::new("curl").arg("--version").output().is_ok()
}

/// `curl -s URL`: the status and the body.
fn get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10", "-w", "\n%{http_code}"])
        .arg(format!("http://{addr}{path}"))
        .output()
        .map_err(|e| format!("curl: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text
        .rsplit_once('\n')
        .ok_or_else(|| format!("curl printed {text:?}"))?;
    let code = code
        .trim()
        .parse()
        .map_err(|_| format!("status {code:?}"))?;
    Ok((code, body.to_string()))
}

macro_rules! server {
    ($kind:expr) => {{
        if !have_curl() {
            return Ok(Completion::ignored_with("curl is not installed"));
        }
        match Server::start($kind) {
            Ok(server) => server,
            Err(outcome) => return outcome,
        }
    }};
}

/// Every route answers: the file's bytes, a sleep that takes its time, the upstream's
/// echo through a ring-rt socket, 404 for the rest.
fn handlers_read_a_file_sleep_and_call_upstream(kind: BackendKind) -> Outcome {
    let server = server!(kind);
    let root = get(server.addr, "/")?;
    check!(
        root == (200, "hello from axum on ring-rt\n".into()),
        "/ gave {root:?}"
    );
    let file = get(server.addr, "/file")?;
    check!(file == (200, FILE_TEXT.into()), "/file gave {file:?}");
    let started = Instant::now();
    let slept = get(server.addr, "/sleep/60")?;
    check!(
        slept == (200, "slept 60 ms\n".into()),
        "/sleep/60 gave {slept:?}"
    );
    check!(
        started.elapsed() >= Duration::from_millis(60),
        "/sleep/60 answered after {:?}",
        started.elapsed()
    );
    let upstream = get(server.addr, "/upstream")?;
    check!(
        upstream == (200, "upstream said: ping\n".into()),
        "/upstream gave {upstream:?}"
    );
    let missing = get(server.addr, "/missing")?;
    check!(missing.0 == 404, "/missing gave {missing:?}");
    Ok(Completion::Completed)
}

/// With a listener per worker, connections hash over both: 40 requests (each its own curl
/// connection) are served by both worker threads (the odds that the hash puts all 40 on
/// one are 2^-39).
fn requests_are_served_by_every_worker(kind: BackendKind) -> Outcome {
    let server = server!(kind);
    let mut workers = HashSet::new();
    for _ in 0..40 {
        let (code, name) = get(server.addr, "/worker")?;
        check!(code == 200, "/worker gave {code}");
        workers.insert(name);
        if workers.len() == 2 {
            break;
        }
    }
    check!(workers.len() == 2, "only {workers:?} served");
    Ok(Completion::Completed)
}
