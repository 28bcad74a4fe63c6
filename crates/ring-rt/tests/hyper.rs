//! The hyper example's server (examples/hyper.rs) on both backends, driven by a real HTTP
//! client: curl. Without curl the tests are reported ignored (apt-get install -y curl).

#[macro_use]
mod support;

/// The example itself, so the test exercises the server that ships.
#[allow(dead_code)]
#[path = "../../../examples/hyper.rs"]
mod example;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use libtest_mimic::{Completion, Failed};
use ring_rt::net::TcpListener;
use ring_rt::BackendKind;
use support::{pattern, Outcome};

fn main() {
    support::run(&[
        ("root_status_and_headers", root_status_and_headers),
        ("echo_post_1mib_byte_for_byte", echo_post_1mib_byte_for_byte),
        (
            "big_16mib_length_and_checksum",
            big_16mib_length_and_checksum,
        ),
        (
            "keep_alive_two_urls_one_connection",
            keep_alive_two_urls_one_connection,
        ),
    ])
}

/// What the server thread reports once it is listening (or why it is not).
enum Started {
    Listening(SocketAddr),
    Skip(Completion),
    Failed(String),
}

/// The example's `serve` on a runtime of one backend, in its own thread; stopped on drop.
struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    fn start(kind: BackendKind) -> Result<Server, Outcome> {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || serve_until(kind, &tx, &stopping));
        let addr = match rx.recv() {
            Ok(Started::Listening(addr)) => addr,
            Ok(Started::Skip(skip)) => return Err(Ok(skip)),
            Ok(Started::Failed(e)) => return Err(Err(e.into())),
            Err(_) => return Err(Err("the server thread died before listening".into())),
        };
        Ok(Server {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Runs the server until `stop` is set; dropping the runtime then drops every connection.
fn serve_until(kind: BackendKind, started: &mpsc::Sender<Started>, stop: &AtomicBool) {
    let rt = match support::runtime(kind) {
        Ok(rt) => rt,
        Err(skip) => return drop(started.send(Started::Skip(skip))),
    };
    rt.block_on(async {
        let listener = match TcpListener::bind("127.0.0.1:0") {
            Ok(l) => l,
            Err(e) => return drop(started.send(Started::Failed(format!("bind: {e}")))),
        };
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        ring_rt::spawn(example::serve(listener));
        let _ = started.send(Started::Listening(addr));
        while !stop.load(Ordering::Acquire) {
            ring_rt::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

/// Starts the server, or returns the test's outcome (ignored: no curl or no backend).
macro_rules! server {
    ($kind:expr) => {{
        if let Some(skip) = missing_curl() {
            return Ok(skip);
        }
        match Server::start($kind) {
            Ok(server) => server,
            Err(outcome) => return outcome,
        }
    }};
}

fn missing_curl() -> Option<Completion> {
    match Command::new("curl").arg("--version").output() {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(Completion::ignored_with(format!(
            "curl --version failed: {}",
            out.status
        ))),
        Err(e) => Some(Completion::ignored_with(format!(
            "curl not runnable ({e}): apt-get install -y curl"
        ))),
    }
}

/// Runs curl (silent, errors shown, bounded) and returns its stdout.
fn curl(args: &[&str]) -> Result<Vec<u8>, Failed> {
    let out = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "60"])
        .args(args)
        .output()?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("curl {args:?}: {}: {stderr}", out.status).into());
    }
    Ok(out.stdout)
}

/// FNV-1a, 64 bit: a checksum that notices reordered as well as changed bytes.
fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn root_status_and_headers(kind: BackendKind) -> Outcome {
    let server = server!(kind);
    let out = String::from_utf8(curl(&["--include", &server.url("/")])?)?;
    let (head, body) = out
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no end of headers in {out:?}"))?;
    let mut lines = head.lines();
    check!(
        lines.next() == Some("HTTP/1.1 200 OK"),
        "status line in {head:?}"
    );
    let headers: Vec<String> = lines.map(str::to_ascii_lowercase).collect();
    for want in ["content-type: text/plain", "content-length: 19"] {
        check!(
            headers.iter().any(|h| h == want),
            "no {want:?} in {headers:?}"
        );
    }
    check!(body == "hello from ring-rt\n", "body {body:?}");
    let code = curl(&[
        "--output",
        "/dev/null",
        "--write-out",
        "%{http_code}",
        &server.url("/nope"),
    ])?;
    check!(
        code == b"404",
        "/nope gave {:?}",
        String::from_utf8_lossy(&code)
    );
    Ok(Completion::Completed)
}

fn echo_post_1mib_byte_for_byte(kind: BackendKind) -> Outcome {
    let server = server!(kind);
    let data = pattern(42, 1 << 20);
    let path = std::env::temp_dir().join(format!(
        "ring-rt-hyper-echo-{}-{kind}.bin",
        std::process::id()
    ));
    std::fs::write(&path, &data)?;
    let body_arg = format!("@{}", path.display());
    let out = curl(&[
        "--data-binary",
        &body_arg,
        "--header",
        "Content-Type: application/octet-stream",
        &server.url("/echo"),
    ]);
    let _ = std::fs::remove_file(&path);
    let out = out?;
    check!(
        out.len() == data.len(),
        "echoed {} of {} bytes",
        out.len(),
        data.len()
    );
    let first_diff = out.iter().zip(&data).position(|(a, b)| a != b);
    check!(first_diff.is_none(), "echo differs at byte {first_diff:?}");
    Ok(Completion::Completed)
}

fn big_16mib_length_and_checksum(kind: BackendKind) -> Outcome {
    const LEN: u64 = 16 << 20;
    let server = server!(kind);
    let out = curl(&[&server.url(&format!("/big?n={LEN}"))])?;
    check!(
        out.len() as u64 == LEN,
        "downloaded {} of {LEN} bytes",
        out.len()
    );
    let expected = fnv1a((0..LEN).map(example::big_byte));
    check!(fnv1a(out.iter().copied()) == expected, "checksum mismatch");
    Ok(Completion::Completed)
}

/// Two URLs in one curl run: the second request reuses the first one's connection.
fn keep_alive_two_urls_one_connection(kind: BackendKind) -> Outcome {
    let server = server!(kind);
    let out = curl(&[
        "--output",
        "/dev/null",
        "--output",
        "/dev/null",
        "--write-out",
        "%{num_connects} %{http_code}\\n",
        &server.url("/"),
        &server.url("/big?n=100000"),
    ])?;
    let out = String::from_utf8(out)?;
    let lines: Vec<&str> = out.lines().collect();
    check!(
        lines == ["1 200", "0 200"],
        "connects and codes per URL: {lines:?}"
    );
    Ok(Completion::Completed)
}
