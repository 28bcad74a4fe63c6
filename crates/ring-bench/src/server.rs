//! A server under test as a child process: started pinned to one CPU or not, optionally
//! under `strace -c` or callgrind ([`Wrap`]), ready once it prints its `listening` line, its
//! counters read through SIGUSR1, stopped by pid with SIGTERM.

use std::io::{self, BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use crate::stats::{proc_cpu, proc_rss_kib};
use crate::sys;

/// How long a server may take to print its listening line, to answer SIGUSR1, or to exit
/// after SIGTERM (times [`Wrap::slowdown`]).
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a stopped server's port may stay busy.
const PORT_FREE_TIMEOUT: Duration = Duration::from_secs(10);
/// What `--strace` counts: the wait calls, plus the socket I/O calls an epoll server makes
/// and an io_uring server should not.
const TRACED_SYSCALLS: &str = "trace=io_uring_enter,epoll_wait,epoll_pwait,epoll_pwait2,\
     read,write,readv,writev,recvfrom,sendto,recvmsg,sendmsg,accept4";

/// What a server runs under.
#[derive(Clone, Copy, Debug)]
pub enum Wrap<'a> {
    /// Nothing: the server itself.
    None,
    /// `strace -f -c` counting the wait and socket I/O calls, its summary written there.
    Strace(&'a Path),
    /// `strace -f -c` counting every call, its summary written there.
    StraceAll(&'a Path),
    /// `valgrind --tool=callgrind`, its profile written there and valgrind's messages to
    /// [`callgrind_log`]. The pid is the server's own
    /// (valgrind runs the program in its own process), so signals reach it directly.
    Callgrind(&'a Path),
}

impl Wrap<'_> {
    /// How many times slower than native a server starts and stops under this wrapper.
    fn slowdown(self) -> u32 {
        match self {
            Wrap::Callgrind(_) => 6,
            _ => 1,
        }
    }

    /// Where `strace -c` writes its summary, when tracing.
    fn strace_out(self) -> Option<PathBuf> {
        match self {
            Wrap::Strace(out) | Wrap::StraceAll(out) => Some(out.to_path_buf()),
            Wrap::None | Wrap::Callgrind(_) => None,
        }
    }
}

/// One server to benchmark.
#[derive(Clone, Debug)]
pub struct ServerSpec {
    /// Short name used in tables and file names (`ring-uring`, `tokio-ct`, ...).
    pub name: String,
    /// The binary.
    pub program: PathBuf,
    /// Its arguments, without `--addr` (appended by [`Server::start`]).
    pub args: Vec<String>,
    /// Whether it prints `metrics {...}` lines on SIGUSR1 (the ring-rt echo example does).
    pub has_metrics: bool,
    /// Runs on every CPU this process may use (a server with a worker per core), instead
    /// of pinned to the one CPU it is given.
    pub all_cpus: bool,
}

/// A running server.
pub struct Server {
    spec: ServerSpec,
    /// The process we started: the server itself, or strace when tracing.
    child: Child,
    /// The server's pid (under strace, the tracee, not strace).
    pid: u32,
    /// `metrics {...}` payloads from the server's stderr, in order.
    metrics: Receiver<String>,
    /// Where `strace -c` writes its summary, when tracing.
    strace_out: Option<PathBuf>,
    /// The line the server printed when ready.
    listening: String,
    /// How long it may take to start, answer and stop (see [`READY_TIMEOUT`]).
    timeout: Duration,
}

impl Server {
    /// Starts `spec` on `addr`, pinned to `cpu`, and waits for its listening line. With
    /// `strace_out`, runs it under `strace -f -c` writing the summary there.
    pub fn start(
        spec: &ServerSpec,
        addr: SocketAddr,
        cpu: usize,
        strace_out: Option<&Path>,
    ) -> io::Result<Server> {
        let wrap = strace_out.map_or(Wrap::None, Wrap::Strace);
        Server::start_wrapped(spec, addr, (!spec.all_cpus).then_some(cpu), wrap)
    }

    /// Starts `spec` on `addr` under `wrap`, pinned to `cpu` if given, and waits for its
    /// listening line.
    pub fn start_wrapped(
        spec: &ServerSpec,
        addr: SocketAddr,
        cpu: Option<usize>,
        wrap: Wrap,
    ) -> io::Result<Server> {
        wait_port_free(addr)?;
        let mut cmd = command(spec, addr, wrap);
        if let Some(cpu) = cpu {
            sys::pin_to_cpu(&mut cmd, cpu);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| annotate(e, &format!("starting {}", spec.program.display())))?;
        let lines = forward_lines(child.stdout.take(), None);
        let metrics = forward_lines(child.stderr.take(), Some(spec.name.clone()));
        let mut server = Server {
            spec: spec.clone(),
            pid: child.id(),
            child,
            metrics,
            strace_out: wrap.strace_out(),
            listening: String::new(),
            timeout: READY_TIMEOUT * wrap.slowdown(),
        };
        server.wait_listening(&lines)?;
        if server.strace_out.is_some() {
            server.pid = tracee_pid(server.child.id())?;
        }
        Ok(server)
    }

    fn wait_listening(&mut self, lines: &Receiver<String>) -> io::Result<()> {
        match lines.recv_timeout(self.timeout) {
            Ok(line) if line.contains("listening") => {
                eprintln!("[{}] {line}", self.spec.name);
                self.listening = line;
                Ok(())
            }
            Ok(line) => Err(self.fail(&format!("unexpected first line {line:?}"))),
            Err(_) => Err(self.fail("no listening line")),
        }
    }

    fn fail(&mut self, why: &str) -> io::Error {
        let _ = self.child.kill();
        let _ = self.child.wait();
        io::Error::other(format!("{}: {why}", self.spec.name))
    }

    /// The server's short name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The line it printed when ready (names the backend it really runs).
    pub fn listening(&self) -> &str {
        &self.listening
    }

    /// The server's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The server's CPU time (user + system, all threads) so far.
    pub fn cpu(&self) -> io::Result<Duration> {
        proc_cpu(self.pid)
    }

    /// The server's resident set, KiB.
    pub fn rss_kib(&self) -> io::Result<u64> {
        proc_rss_kib(self.pid)
    }

    /// The server's counters now (`None` if it has none): sends SIGUSR1 and waits for the
    /// `metrics {...}` line it answers with.
    pub fn metrics(&self) -> io::Result<Option<String>> {
        if !self.spec.has_metrics {
            return Ok(None);
        }
        while self.metrics.try_recv().is_ok() {}
        sys::kill(self.pid, libc::SIGUSR1)?;
        match self.metrics.recv_timeout(self.timeout) {
            Ok(line) => Ok(Some(line)),
            Err(RecvTimeoutError::Timeout) => Err(io::Error::other("no metrics line")),
            Err(RecvTimeoutError::Disconnected) => Err(io::Error::other("server exited")),
        }
    }

    /// Stops the server (SIGTERM, then SIGKILL after 10 s, 60 s under callgrind), waits for
    /// it and for `addr` to be free. Returns the last metrics line it printed (ring-rt prints one at shutdown)
    /// and the strace summary, when tracing.
    pub fn stop(self, addr: SocketAddr) -> io::Result<Stopped> {
        let mut this = self;
        this.terminate()?;
        let last_metrics = this.metrics.recv_timeout(Duration::from_secs(1)).ok();
        let strace = match &this.strace_out {
            Some(path) => Some(std::fs::read_to_string(path)?),
            None => None,
        };
        wait_port_free(addr)?;
        Ok(Stopped {
            last_metrics,
            strace,
        })
    }

    fn terminate(&mut self) -> io::Result<()> {
        sys::kill(self.pid, libc::SIGTERM)?;
        let deadline = Instant::now() + self.timeout;
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let secs = self.timeout.as_secs();
                eprintln!(
                    "[{}] no exit {secs} s after SIGTERM: SIGKILL",
                    self.spec.name
                );
                let _ = sys::kill(self.pid, libc::SIGKILL);
                self.child.wait()?;
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

impl Drop for Server {
    /// A server not stopped (the driver failed midway) is killed, so it cannot hold the
    /// port or the CPU after the driver exits.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = sys::kill(self.pid, libc::SIGKILL);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What a stopped server left behind.
pub struct Stopped {
    /// The last `metrics {...}` payload (printed at shutdown by ring-rt's echo).
    pub last_metrics: Option<String>,
    /// The `strace -c` summary table, when traced.
    pub strace: Option<String>,
}

fn command(spec: &ServerSpec, addr: SocketAddr, wrap: Wrap) -> Command {
    let mut cmd = match wrap {
        Wrap::None => Command::new(&spec.program),
        Wrap::Strace(out) | Wrap::StraceAll(out) => {
            let mut c = Command::new("strace");
            c.args(["-f", "-c"]);
            if let Wrap::Strace(_) = wrap {
                c.arg("-e").arg(TRACED_SYSCALLS);
            }
            c.arg("-o").arg(out).arg("--").arg(&spec.program);
            c
        }
        Wrap::Callgrind(out) => {
            // Valgrind's own messages (its unhandled-syscall warnings among them) go to a
            // log beside the profile, so the server's stderr carries only its own lines.
            let mut c = Command::new("valgrind");
            c.arg("--tool=callgrind")
                .arg(format!("--callgrind-out-file={}", out.display()))
                .arg(format!("--log-file={}", callgrind_log(out).display()))
                .arg(&spec.program);
            c
        }
    };
    cmd.args(&spec.args).arg("--addr").arg(addr.to_string());
    cmd
}

/// Where valgrind writes its messages for a server profiled into `profile`: beside it,
/// `.log` appended.
pub fn callgrind_log(profile: &Path) -> PathBuf {
    let mut name = profile.as_os_str().to_owned();
    name.push(".log");
    PathBuf::from(name)
}

/// Forwards a child's output lines: all of them (stdout), or, for stderr, the payload of
/// `metrics ` lines while echoing the rest prefixed with the server's name.
fn forward_lines<R: io::Read + Send + 'static>(
    pipe: Option<R>,
    stderr_of: Option<String>,
) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let Some(pipe) = pipe else { return rx };
    thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let payload = match &stderr_of {
                None => Some(line),
                Some(name) => match line.strip_prefix("metrics ") {
                    Some(json) => Some(json.to_string()),
                    None => {
                        eprintln!("[{name}] {line}");
                        None
                    }
                },
            };
            // The receiver may be gone (server stopped); keep draining so the child never
            // blocks on a full pipe.
            if let Some(p) = payload {
                let _ = tx.send(p);
            }
        }
    });
    rx
}

/// The single child strace started.
fn tracee_pid(strace_pid: u32) -> io::Result<u32> {
    let path = format!("/proc/{strace_pid}/task/{strace_pid}/children");
    let text = std::fs::read_to_string(&path)?;
    text.split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| io::Error::other(format!("strace {strace_pid} has no child")))
}

/// Waits until nothing accepts connections on `addr` (connect is refused).
pub fn wait_port_free(addr: SocketAddr) -> io::Result<()> {
    let deadline = Instant::now() + PORT_FREE_TIMEOUT;
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Ok(()),
            _ if Instant::now() > deadline => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{addr} still accepts connections: another server is running"),
                ))
            }
            _ => thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn annotate(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Builds ring-rt's echo example in the release profile, the one a bench target runs in
/// (cargo builds only this package's binaries for a bench), and returns its path under
/// `profile_dir`.
pub fn build_echo_example(profile_dir: &Path) -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "-p", "ring-rt", "--example", "echo"])
        .status()
        .map_err(|e| format!("cargo build --example echo: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build --example echo: {status}"));
    }
    Ok(profile_dir.join("examples").join("echo"))
}
