//! Backend choice: io_uring blocked by seccomp (EPERM as Docker, ENOSYS as Podman), an old
//! kernel's feature profile, and explicit requests. The blocked cases run in a child
//! process under a real seccomp filter.

#[macro_use]
mod support;

use std::io::ErrorKind;
use std::process::Command;
use std::time::Duration;

use libtest_mimic::{Arguments, Completion, Trial};
use ring_rt::net::{TcpListener, TcpStream};
use ring_rt::{BackendKind, FeatureMask, Runtime};
use support::{bounded, pattern, Outcome};

const CHILD_ENV: &str = "RING_RT_FALLBACK_CHILD_ERRNO";

fn main() {
    let args = Arguments::from_args();
    let trials = vec![
        Trial::ignorable_test("seccomp_eperm_falls_back_to_epoll", || {
            blocked_in_child(libc::EPERM)
        }),
        Trial::ignorable_test("seccomp_enosys_falls_back_to_epoll", || {
            blocked_in_child(libc::ENOSYS)
        }),
        Trial::ignorable_test("child_under_seccomp", child_under_seccomp).with_ignored_flag(true),
        Trial::ignorable_test(
            "old_profile_without_needed_opcodes_uses_epoll",
            old_profile_uses_epoll,
        ),
        Trial::ignorable_test("every_profile_serves_echo", every_profile_serves_echo),
        Trial::ignorable_test("bad_backend_env_is_an_error", bad_backend_env_is_an_error),
        Trial::ignorable_test("child_bad_backend_env", child_bad_backend_env)
            .with_ignored_flag(true),
    ];
    libtest_mimic::run(&args, trials).exit()
}

/// Re-runs this binary's `child_under_seccomp` trial with io_uring's syscalls failing.
fn blocked_in_child(errno: i32) -> Outcome {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.args([
        "child_under_seccomp",
        "--exact",
        "--ignored",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, errno.to_string())
    .env_remove("RING_RT_BACKEND")
    .env_remove("RING_FEATURES");
    ring_testkit::seccomp::block_io_uring(&mut cmd, errno);
    let out = cmd.output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    check!(
        out.status.success() && stdout.contains("1 passed"),
        "child under seccomp ({errno}) failed:\n{stdout}\n{stderr}"
    );
    Ok(Completion::Completed)
}

fn child_under_seccomp() -> Outcome {
    let Ok(errno) = std::env::var(CHILD_ENV) else {
        return Ok(Completion::ignored_with(
            "runs only as the child of the seccomp tests",
        ));
    };
    let name = if errno == libc::EPERM.to_string() {
        "EPERM"
    } else {
        "ENOSYS"
    };
    let rt = Runtime::new()?;
    let choice = rt.backend();
    eprintln!("backend under seccomp {name}: {choice}");
    check!(choice.kind == BackendKind::Epoll, "picked {choice}");
    check!(
        choice.setup_error.is_some() && choice.is_fallback(),
        "no setup error recorded: {choice}"
    );
    check!(
        choice.reason.contains(name),
        "reason does not name {name}: {choice}"
    );
    check!(
        choice.reason.to_lowercase().contains("seccomp"),
        "reason names no cause: {choice}"
    );
    let err = Runtime::builder()
        .backend(BackendKind::Uring)
        .build()
        .unwrap_err();
    check!(
        err.kind() == ErrorKind::Unsupported,
        "forcing io_uring: {err:?}"
    );
    echo_500(&rt)?;
    Ok(Completion::Completed)
}

/// 500 concurrent connections, 20 verified round trips each, on `rt`.
fn echo_500(rt: &Runtime) -> Result<(), libtest_mimic::Failed> {
    rt.block_on(bounded(Duration::from_secs(60), async {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let addr = l.local_addr()?;
        ring_rt::spawn(async move {
            let mut incoming = l.incoming();
            while let Some(Ok(s)) = incoming.next().await {
                ring_rt::spawn(async move {
                    let mut rx = s.recv_stream();
                    while let Some(Ok(buf)) = rx.next().await {
                        if s.write_all(buf).await.0.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let clients: Vec<_> = (0..500u64)
            .map(|i| ring_rt::spawn(client(addr, i)))
            .collect();
        for c in clients {
            c.await??;
        }
        Ok::<(), std::io::Error>(())
    }))??;
    Ok(())
}

async fn client(addr: std::net::SocketAddr, seed: u64) -> std::io::Result<()> {
    let c = TcpStream::connect(addr).await?;
    for round in 0..20 {
        let data = pattern(
            seed * 100 + round,
            1 + (seed as usize * 37 + round as usize * 101) % 4000,
        );
        let (res, data) = c.write_all(data).await;
        res?;
        let mut got = Vec::new();
        while got.len() < data.len() {
            let (res, buf) = c.read(Vec::with_capacity(8192)).await;
            let n = res?;
            if n == 0 {
                return Err(ErrorKind::UnexpectedEof.into());
            }
            got.extend_from_slice(&buf[..n]);
        }
        if got != data {
            return Err(std::io::Error::other("echoed bytes differ"));
        }
    }
    Ok(())
}

fn old_profile_uses_epoll() -> Outcome {
    let mask = FeatureMask::parse("5.1")?;
    let rt = Runtime::builder().feature_mask(mask).build()?;
    let choice = rt.backend();
    if choice.kind == BackendKind::Epoll && choice.setup_error.is_some() {
        return Ok(Completion::ignored_with(format!(
            "io_uring unavailable here: {choice}"
        )));
    }
    check!(
        choice.kind == BackendKind::Epoll,
        "5.1 profile picked {choice}"
    );
    check!(choice.reason.contains("lacks opcodes"), "reason: {choice}");
    let err = Runtime::builder()
        .feature_mask(FeatureMask::parse("5.1")?)
        .backend(BackendKind::Uring)
        .build()
        .unwrap_err();
    check!(
        err.kind() == ErrorKind::Unsupported,
        "forcing io_uring on 5.1: {err:?}"
    );
    Ok(Completion::Completed)
}

fn every_profile_serves_echo() -> Outcome {
    for profile in ["5.6", "5.11", "5.19", "6.0", "6.1"] {
        let rt = Runtime::builder()
            .feature_mask(FeatureMask::parse(profile)?)
            .build()?;
        if rt.backend().setup_error.is_some() {
            return Ok(Completion::ignored_with(format!(
                "io_uring unavailable here: {}",
                rt.backend()
            )));
        }
        check!(
            rt.backend().kind == BackendKind::Uring,
            "profile {profile} picked {}",
            rt.backend()
        );
        echo_500(&rt).map_err(|e| format!("profile {profile}: {}", e.message().unwrap_or("")))?;
    }
    Ok(Completion::Completed)
}

fn bad_backend_env_is_an_error() -> Outcome {
    let exe = std::env::current_exe()?;
    let out = Command::new(exe)
        .args([
            "child_bad_backend_env",
            "--exact",
            "--ignored",
            "--test-threads=1",
        ])
        .env("RING_RT_BACKEND", "kqueue")
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    check!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(Completion::Completed)
}

fn child_bad_backend_env() -> Outcome {
    if std::env::var("RING_RT_BACKEND").as_deref() != Ok("kqueue") {
        return Ok(Completion::ignored_with(
            "runs only as the child of bad_backend_env_is_an_error",
        ));
    }
    let Err(err) = Runtime::new() else {
        return Err("RING_RT_BACKEND=kqueue was accepted".into());
    };
    check!(
        err.kind() == ErrorKind::InvalidInput,
        "kind {:?}",
        err.kind()
    );
    check!(
        err.to_string().contains("RING_RT_BACKEND"),
        "message: {err}"
    );
    Ok(Completion::Completed)
}
