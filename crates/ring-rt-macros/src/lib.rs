//! The `#[ring_rt::main]` and `#[ring_rt::test]` attributes.
//!
//! Use them through ring-rt (its default feature `macros` re-exports both), not as a
//! dependency of their own: the code they expand to names `::ring_rt` (`crate = "..."`
//! names it otherwise, for a renamed dependency).
//!
//! Both take the same options, each optional, each a `ring_rt::Builder` call:
//!
//! | option | `Builder` call | default for `main` | default for `test` |
//! | --- | --- | --- | --- |
//! | `workers = N` (or `threads = N`), N ≥ 1 | `.threads(N)` | one worker per CPU | 1 |
//! | `backend = "uring"` or `"epoll"` | `.backend(..)`: that backend or an error, no fallback | chosen at run time (`RING_RT_BACKEND` honoured) | one test per backend |
//! | `entries = N`, N ≥ 1 | `.entries(N)` (SQ entries per ring) | 256 | 256 |
//! | `crate = "path"` | none: where ring-rt is | `::ring_rt` | `::ring_rt` |
//!
//! An unknown option, a bad value, a function that is not `async`, or one that takes
//! arguments or generic parameters is a compile error pointing at the mistake.

mod expand;
mod options;

use proc_macro::TokenStream;

use options::Options;

/// Runs an `async fn` on a ring-rt runtime: the function becomes a plain one that builds a
/// runtime with `ring_rt::Builder` and runs the body on it with `Runtime::block_on`.
///
/// `async fn main()` and `async fn main() -> Result<T, E>` (any return type) both work;
/// so does any other name without arguments (`#[ring_rt::main] async fn run()`, called
/// from a plain `main`). Options: see the [crate docs](crate); without any, the runtime has
/// one worker per CPU, the calling thread being worker 0, and picks its backend at run
/// time, so `RING_RT_BACKEND=epoll cargo run` runs it on epoll.
///
/// When the runtime cannot be built (`backend = "uring"` where io_uring is blocked, more
/// workers than `Builder::MAX_THREADS`), the program prints the error on stderr and exits
/// with status 1 before the body starts.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// #[ring_rt::main(workers = 2, entries = 128)]
/// async fn main() -> std::io::Result<()> {
///     assert_eq!(ring_rt::Handle::current().workers(), 2);
///     let (a, b) = ring_rt::net::UnixStream::pair()?;
///     ring_rt::spawn(async move {
///         ring_rt::time::sleep(Duration::from_millis(1)).await;
///         a.write_all(&b"hello"[..]).await.0
///     });
///     let (n, buf) = b.read(vec![0; 16]).await;
///     assert_eq!(&buf[..n?], b"hello");
///     Ok(())
/// }
/// ```
///
/// It expands to about this:
///
/// ```
/// fn main() -> std::io::Result<()> {
///     let rt = match ring_rt::Builder::new().threads(2).entries(128).build() {
///         Ok(rt) => rt,
///         Err(err) => {
///             eprintln!("error: cannot start the ring-rt runtime: {err}");
///             std::process::exit(1)
///         }
///     };
///     rt.block_on(async {
///         // the body
///         Ok(())
///     })
/// }
/// ```
#[proc_macro_attribute]
pub fn main(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand_main(attr.into(), item.into()).into()
}

/// Runs an `async fn` as a test on each backend: `#[ring_rt::test] async fn name()` makes
/// a module `name` with two `#[test]` functions, `uring` and `epoll`, so libtest runs and
/// lists `name::uring` and `name::epoll` (filter with `cargo test ::epoll`). Each builds
/// its own runtime forced onto its backend, with one worker unless `workers` says more.
///
/// Where a backend cannot run (io_uring blocked by seccomp or
/// `kernel.io_uring_disabled`, a kernel without it), its test **fails** with the reason
/// the runtime gives: a test that did not run never shows as passed.
/// `backend = "epoll"` (or `"uring"`) makes only that backend's test, still named
/// `name::epoll`, for code that is about one backend.
///
/// The function may return any type a `#[test]` may (`()`, `Result<(), E>` with
/// `E: Debug`); `#[ignore]` and `#[should_panic]` written below the attribute go to each
/// generated test. Like `#[test]`, use it on functions at module level (the generated
/// module reaches the function and its types through `super`).
///
/// # Examples
///
/// Compiled here, not run (doc tests are not built as tests); ring-rt's
/// `tests/tokio_users.rs` runs tests written this way.
///
/// ```no_run
/// use std::time::Duration;
///
/// #[ring_rt::test]
/// async fn a_read_times_out() -> std::io::Result<()> {
///     let (_a, b) = ring_rt::net::UnixStream::pair()?;
///     let read = ring_rt::time::timeout(Duration::from_millis(5), b.read(vec![0; 8]));
///     assert!(read.await.is_err());
///     Ok(())
/// }
///
/// // Two workers, io_uring only: one test, `spreads_over_workers::uring`.
/// #[ring_rt::test(workers = 2, backend = "uring")]
/// async fn spreads_over_workers() {
///     let task = ring_rt::Handle::current().spawn_on(1, async { 1 }).unwrap();
///     assert_eq!(task.await.unwrap(), 1);
/// }
/// # fn main() {}
/// ```
#[proc_macro_attribute]
pub fn test(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand_test(attr.into(), item.into()).into()
}

/// Parses `#[ring_rt::main]`'s input; its errors, all of them, with a stub `main` beside
/// them.
fn expand_main(
    attr: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> proc_macro2::TokenStream {
    const WHAT: &str = "#[ring_rt::main]";
    let parsed = parse(attr, item.clone(), WHAT);
    match parsed {
        Ok((opts, item)) => expand::main(&opts, item),
        Err(err) => {
            let mut out = err.to_compile_error();
            out.extend(expand::main_stub(&item));
            out
        }
    }
}

/// Parses `#[ring_rt::test]`'s input; its errors, all of them, and no tests.
fn expand_test(
    attr: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> proc_macro2::TokenStream {
    const WHAT: &str = "#[ring_rt::test]";
    match parse(attr, item, WHAT).and_then(|(opts, item)| expand::test(&opts, item)) {
        Ok(out) => out,
        Err(err) => err.to_compile_error(),
    }
}

/// The options and the function, or every error found in either.
fn parse(
    attr: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
    what: &str,
) -> syn::Result<(Options, syn::ItemFn)> {
    let opts = Options::parse(attr, what);
    let item = syn::parse2::<syn::ItemFn>(item)
        .map_err(|e| syn::Error::new(e.span(), format!("{what} goes on an `async fn`: {e}")));
    let sig = match &item {
        Ok(f) => expand::check_signature(&f.sig, what),
        Err(_) => Ok(()),
    };
    match (opts, item) {
        (Ok(opts), Ok(item)) => sig.map(|()| (opts, item)),
        // The signature was not checked: there was no function to check.
        (Ok(_), Err(item)) => Err(item),
        (Err(mut all), item) => {
            all.extend(item.err());
            all.extend(sig.err());
            Err(all)
        }
    }
}
