//! Test support shared across the workspace (not published): making io_uring unavailable
//! to a child process the way container runtimes do, so the epoll fallback is tested for
//! real on a kernel that has io_uring.

pub mod seccomp;
