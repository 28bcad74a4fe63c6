//! `#[ring_rt::test]` and `#[ring_rt::main]` as a user sees them (libtest's own harness):
//! one test per backend named `name::uring` and `name::epoll`, a backend that cannot run
//! failing its test with the reason, options reaching the runtime, `#[should_panic]` and
//! `#[ignore]` reaching each test, and `main` exiting with the builder's error. The
//! checks of what libtest reports run this binary again as a child, under a seccomp
//! filter that blocks io_uring as Docker's profile does.

use std::process::{Command, Output};
use std::time::Duration;

use ring_rt::net::UnixStream;
use ring_rt::Handle;

/// Runs this test binary again with `args` (io_uring blocked with EPERM when `blocked`).
fn rerun(args: &[&str], blocked: bool) -> Output {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args(args).env_remove("RING_RT_BACKEND");
    if blocked {
        ring_testkit::seccomp::block_io_uring(&mut cmd, libc::EPERM);
    }
    cmd.output().expect("running the test binary again")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[ring_rt::test]
async fn a_pair_talks() -> std::io::Result<()> {
    let (a, b) = UnixStream::pair()?;
    let writer = ring_rt::spawn(async move { a.write_all(&b"both backends"[..]).await.0 });
    let (n, buf) = b.read(vec![0; 32]).await;
    assert_eq!(&buf[..n?], b"both backends");
    writer.await.expect("the writer task")?;
    Ok(())
}

#[test]
fn each_test_is_listed_once_per_backend() {
    let out = rerun(&["--list"], false);
    let listed = text(&out);
    for name in ["a_pair_talks::uring: test", "a_pair_talks::epoll: test"] {
        assert!(listed.contains(name), "{name} not in:\n{listed}");
    }
    assert!(listed.contains("on_epoll_only::epoll: test"), "{listed}");
    assert!(!listed.contains("on_epoll_only::uring"), "{listed}");
}

#[test]
fn a_blocked_backend_fails_its_test_with_the_reason() {
    let out = rerun(
        &["--exact", "a_pair_talks::uring", "--test-threads", "1"],
        true,
    );
    let report = text(&out);
    assert!(
        !out.status.success(),
        "passed with io_uring blocked:\n{report}"
    );
    assert!(
        report.contains("test a_pair_talks::uring ... FAILED"),
        "{report}"
    );
    assert!(
        report.contains("the uring backend cannot run on this machine"),
        "{report}"
    );
    // The builder's reason: io_uring_setup's errno under the filter.
    assert!(report.contains("EPERM"), "{report}");

    let out = rerun(&["--exact", "a_pair_talks::epoll"], true);
    assert!(out.status.success(), "epoll failed:\n{}", text(&out));
    assert!(text(&out).contains("1 passed"), "{}", text(&out));
}

#[ring_rt::test(backend = "epoll")]
async fn on_epoll_only() {
    ring_rt::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(Handle::current().workers(), 1);
}

#[test]
fn a_one_backend_test_runs_where_io_uring_is_blocked() {
    let out = rerun(&["--exact", "on_epoll_only::epoll"], true);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("1 passed"), "{}", text(&out));
}

#[ring_rt::test(workers = 3, entries = 64)]
async fn options_reach_the_runtime() {
    let handle = Handle::current();
    assert_eq!(handle.workers(), 3);
    let name = handle
        .spawn_on(2, async { std::thread::current().name().map(String::from) })
        .expect("worker 2 exists")
        .await
        .expect("the task");
    assert_eq!(name.as_deref(), Some("ring-rt-worker-2"));
}

#[ring_rt::test(threads = 2)]
async fn threads_is_another_name_for_workers() {
    assert_eq!(Handle::current().workers(), 2);
}

#[ring_rt::test]
#[should_panic(expected = "a panic in the body")]
async fn should_panic_reaches_each_test() {
    ring_rt::time::sleep(Duration::from_millis(1)).await;
    panic!("a panic in the body");
}

#[ring_rt::test]
#[should_panic]
async fn should_panic_without_a_message() {
    panic!("any panic");
}

/// Review: a `#[should_panic]` test took the panic that reports a backend it cannot run
/// on as the one it expected, and passed with io_uring blocked. It fails instead.
#[test]
fn a_should_panic_test_fails_where_its_backend_cannot_run() {
    for name in [
        "should_panic_without_a_message::uring",
        "should_panic_reaches_each_test::uring",
    ] {
        let out = rerun(&["--exact", name, "--test-threads", "1"], true);
        let report = text(&out);
        assert!(
            !out.status.success(),
            "{name} passed with io_uring blocked:\n{report}"
        );
        assert!(
            report.contains(&format!("test {name} - should panic ... FAILED")),
            "{report}"
        );
        assert!(
            report.contains("the uring backend cannot run on this machine"),
            "{report}"
        );
    }
    let out = rerun(&["--exact", "should_panic_without_a_message::epoll"], true);
    assert!(out.status.success(), "epoll failed:\n{}", text(&out));
}

#[ring_rt::test]
#[ignore = "checked by ignore_reaches_each_test"]
async fn ignored_on_both() {
    // Run with --include-ignored, it passes: a test's runtime has one worker by default.
    assert_eq!(Handle::current().workers(), 1);
}

#[test]
fn ignore_reaches_each_test() {
    let listed = text(&rerun(&["--list", "--ignored"], false));
    for name in [
        "ignored_on_both::uring: test",
        "ignored_on_both::epoll: test",
    ] {
        assert!(listed.contains(name), "{name} not ignored:\n{listed}");
    }
    assert!(!listed.contains("a_pair_talks::"), "{listed}");
}

/// A `#[ring_rt::main]` function other than `main` (any name without arguments works),
/// returning what its body returns, `?` included.
#[ring_rt::main(backend = "epoll", workers = 2)]
async fn epoll_main() -> std::io::Result<usize> {
    assert_eq!(Handle::current().workers(), 2);
    let (a, b) = UnixStream::pair()?;
    a.write_all(&b"main"[..]).await.0?;
    let (n, _) = b.read(vec![0; 8]).await;
    n
}

#[test]
fn main_runs_its_body_and_returns_its_output() {
    // A plain function after expansion: it builds its runtime on the calling thread.
    assert_eq!(epoll_main().expect("the body's result"), 4);
}

#[test]
fn main_exits_with_the_builders_error() {
    // An unknown RING_FEATURES name makes every build fail (InvalidInput), on any kernel.
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        // --nocapture: the message goes to stderr before the exit, not to libtest's capture.
        .args([
            "--exact",
            "main_runs_its_body_and_returns_its_output",
            "--nocapture",
        ])
        .env("RING_FEATURES", "no_such_feature")
        .output()
        .expect("running the test binary again");
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains("error: cannot start the ring-rt runtime: RING_FEATURES: unknown feature"),
        "{report}"
    );
}
