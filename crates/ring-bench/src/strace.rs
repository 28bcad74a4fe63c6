//! The `strace -c` cross-check: each cell on a fresh server traced from start to exit, so
//! the kernel-side count of `io_uring_enter` / `epoll_wait` calls can be set against
//! ring-rt's own `enters` counter over exactly the same lifetime.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::cell::{run_load, Shape};
use crate::json::{self, Object};
use crate::server::{Server, ServerSpec};

/// One traced cell.
#[derive(Clone, Debug)]
pub struct StraceCell {
    /// The server's name.
    pub server: String,
    /// Connections and message length.
    pub shape: Shape,
    /// Requests served (under strace, so the rate means little).
    pub requests: f64,
    /// `io_uring_enter` calls strace counted over the server's life.
    pub io_uring_enter: u64,
    /// `epoll_wait` + `epoll_pwait` + `epoll_pwait2` calls strace counted.
    pub epoll_wait: u64,
    /// Every traced call (waits plus socket reads, writes, accepts).
    pub all_traced: u64,
    /// The server's own `enters` counter at shutdown (ring-rt only).
    pub own_enters: Option<f64>,
}

impl StraceCell {
    /// One JSON object.
    pub fn to_json(&self) -> String {
        let per_req = |n: u64| n as f64 / self.requests.max(1.0);
        Object::default()
            .str("server", &self.server)
            .num("conns", self.shape.conns as f64)
            .num("len", self.shape.len as f64)
            .num("requests", self.requests)
            .num("strace_io_uring_enter", self.io_uring_enter as f64)
            .num("strace_epoll_wait", self.epoll_wait as f64)
            .num("io_uring_enter_per_req", per_req(self.io_uring_enter))
            .num("epoll_wait_per_req", per_req(self.epoll_wait))
            .num("strace_all_traced", self.all_traced as f64)
            .num("all_traced_per_req", per_req(self.all_traced))
            .opt("own_enters", self.own_enters)
            .finish()
    }

    /// One markdown table row.
    pub fn markdown_row(&self) -> String {
        let per_req = |n: u64| n as f64 / self.requests.max(1.0);
        let own = self
            .own_enters
            .map_or("-".to_string(), |e| format!("{e:.0}"));
        format!(
            "| {} | {} | {} | {:.0} | {} | {:.3} | {} | {:.3} | {:.3} | {} |",
            self.server,
            self.shape.conns,
            self.shape.len,
            self.requests,
            self.io_uring_enter,
            per_req(self.io_uring_enter),
            self.epoll_wait,
            per_req(self.epoll_wait),
            per_req(self.all_traced),
            own
        )
    }
}

/// The markdown table header matching [`StraceCell::markdown_row`].
pub const MARKDOWN_HEADER: &str = "| server | conns | bytes | requests | io_uring_enter (strace) | per req | epoll_wait (strace) | per req | all traced syscalls per req | enters (own counter) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|";

/// Where a traced cell's pieces live.
pub struct Traced<'a> {
    /// The server.
    pub spec: &'a ServerSpec,
    /// The load generator binary.
    pub echo_load: &'a Path,
    /// Where the server listens.
    pub addr: SocketAddr,
    /// The directory for strace's summaries.
    pub out_dir: &'a Path,
}

/// Runs one cell on a fresh traced server.
pub fn run_cell(t: &Traced, shape: Shape, duration: Duration) -> io::Result<StraceCell> {
    let out = t.out_dir.join(format!(
        "strace-{}-{}x{}.txt",
        t.spec.name, shape.conns, shape.len
    ));
    let server = Server::start(t.spec, t.addr, 0, Some(&out))?;
    let load = run_load(t.echo_load, t.addr, shape, duration, 1);
    let stopped = server.stop(t.addr)?;
    let load = load?;
    let summary = stopped.strace.unwrap_or_default();
    let calls = |name: &str| crate::cell::strace_calls(&summary, name);
    Ok(StraceCell {
        server: t.spec.name.clone(),
        shape,
        requests: load.requests,
        io_uring_enter: calls("io_uring_enter"),
        epoll_wait: calls("epoll_wait") + calls("epoll_pwait") + calls("epoll_pwait2"),
        all_traced: calls("total"),
        own_enters: stopped
            .last_metrics
            .and_then(|m| json::number(&m, "enters")),
    })
}
