//! What the attributes expand to: the function is checked (an `async fn` without arguments
//! or generics), then `main` gets a runtime around its body, and `test` a module with one
//! `#[test]` per backend.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{Attribute, Ident, ItemFn, ReturnType, Signature};

use crate::options::{Backend, Options};

/// Every problem with the function's signature, or none: it must be an `async fn` that
/// takes no arguments and has no generic parameters.
pub fn check_signature(sig: &Signature, what: &str) -> syn::Result<()> {
    let mut errors = Vec::new();
    if sig.asyncness.is_none() {
        errors.push(syn::Error::new_spanned(
            sig.fn_token,
            format!("{what} goes on an `async fn`: add `async` before `fn`"),
        ));
    }
    if !sig.inputs.is_empty() {
        errors.push(syn::Error::new_spanned(
            &sig.inputs,
            format!("{what} takes a function without arguments"),
        ));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.push(syn::Error::new_spanned(
            &sig.generics,
            format!("{what} takes a function without generic parameters"),
        ));
    }
    combine(errors)
}

/// One error carrying all of `errors`, or `Ok` when there are none.
pub fn combine(errors: impl IntoIterator<Item = syn::Error>) -> syn::Result<()> {
    let mut errors = errors.into_iter();
    let Some(mut first) = errors.next() else {
        return Ok(());
    };
    first.extend(errors);
    Err(first)
}

/// `ring_rt::Builder::new()` with the options' calls; `backend` and `default_workers`
/// are what this expansion asks for beyond them.
fn builder(
    opts: &Options,
    backend: Option<Backend>,
    default_workers: Option<usize>,
) -> TokenStream {
    let krate = &opts.krate;
    let mut calls = quote!(#krate::Builder::new());
    if let Some(n) = opts.workers.or(default_workers) {
        calls.extend(quote!(.threads(#n)));
    }
    if let Some(n) = opts.entries {
        calls.extend(quote!(.entries(#n)));
    }
    if let Some(kind) = backend {
        let kind = kind.kind_path(krate);
        calls.extend(quote!(.backend(#kind)));
    }
    calls
}

/// `#[ring_rt::main]`: the same function, no longer `async`, building the runtime and
/// running the body on it. A runtime that cannot be built is reported on stderr and the
/// process exits with status 1 (the body never started, so there is nothing to unwind).
pub fn main(opts: &Options, item: ItemFn) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        mut sig,
        block,
    } = item;
    sig.asyncness = None;
    let output = match &sig.output {
        ReturnType::Default => quote!(()),
        ReturnType::Type(_, ty) => quote!(#ty),
    };
    let builder = builder(opts, opts.backend, None);
    quote! {
        #(#attrs)*
        #vis #sig {
            let rt = match #builder.build() {
                ::core::result::Result::Ok(rt) => rt,
                ::core::result::Result::Err(err) => {
                    ::std::eprintln!("error: cannot start the ring-rt runtime: {err}");
                    ::std::process::exit(1)
                }
            };
            // Declared after the runtime, so dropped before it: the body's I/O is cancelled
            // while the runtime still runs. The explicit output type lets `?` in the body
            // know what it converts into.
            let body = ::core::pin::pin!(async #block);
            let body: ::core::pin::Pin<&mut dyn ::core::future::Future<Output = #output>> = body;
            rt.block_on(body)
        }
    }
}

/// What a bad `#[ring_rt::main]` leaves beside its errors: a plain function of the same
/// name, so the only errors are the attribute's (no "`main` function not found" after them).
pub fn main_stub(item: &TokenStream) -> TokenStream {
    match syn::parse2::<ItemFn>(item.clone()) {
        Ok(f) => {
            let (vis, ident) = (&f.vis, &f.sig.ident);
            quote!(#vis fn #ident() {})
        }
        Err(_) => TokenStream::new(),
    }
}

/// The function's attributes sorted for the test expansion.
struct TestAttrs {
    /// `#[ignore]`, `#[should_panic]`: onto each generated test.
    tests: Vec<Attribute>,
    /// `#[cfg(..)]`: onto the function and the module alike.
    cfgs: Vec<Attribute>,
    /// Everything else (docs, lints): stays on the function.
    rest: Vec<Attribute>,
}

fn sort_attrs(attrs: Vec<Attribute>) -> syn::Result<TestAttrs> {
    let mut sorted = TestAttrs {
        tests: Vec::new(),
        cfgs: Vec::new(),
        rest: Vec::new(),
    };
    for attr in attrs {
        let path = attr.path();
        if path.is_ident("test") {
            return Err(syn::Error::new_spanned(
                attr,
                "#[ring_rt::test] makes the `#[test]` functions itself: remove this `#[test]`",
            ));
        } else if path.is_ident("ignore") || path.is_ident("should_panic") {
            sorted.tests.push(attr);
        } else if path.is_ident("cfg") {
            sorted.cfgs.push(attr);
        } else {
            sorted.rest.push(attr);
        }
    }
    Ok(sorted)
}

/// `#[ring_rt::test]`: the function stays as written (the tests call it), and a module
/// of the same name holds one `#[test]` per backend, named `uring` and `epoll`, so libtest
/// lists `name::uring` and `name::epoll`.
pub fn test(opts: &Options, item: ItemFn) -> syn::Result<TokenStream> {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = item;
    let attrs = sort_attrs(attrs)?;
    let backends = match opts.backend {
        Some(one) => vec![one],
        None => Backend::BOTH.to_vec(),
    };
    let tests = backends
        .into_iter()
        .map(|backend| test_fn(opts, backend, &sig, &attrs.tests));
    let (name, cfgs, rest) = (&sig.ident, &attrs.cfgs, &attrs.rest);
    Ok(quote! {
        #(#cfgs)*
        #(#rest)*
        // Called only by the tests below, which exist only when building tests.
        #[allow(dead_code)]
        #vis #sig #block

        #(#cfgs)*
        mod #name {
            // The test functions' return type is written in the parent module's terms.
            #[allow(unused_imports)]
            use super::*;

            #(#tests)*
        }
    })
}

/// One backend's test: a runtime forced onto that backend, or a failure saying why it
/// cannot be built here (a test that could not run must not pass).
fn test_fn(opts: &Options, backend: Backend, sig: &Signature, attrs: &[Attribute]) -> TokenStream {
    let test_name: Ident = format_ident!("{}", backend.name());
    let (name, output) = (&sig.ident, &sig.output);
    let builder = builder(opts, Some(backend), Some(1));
    let label = backend.name();
    // A test that expects a panic would take the builder's as the one it expected and
    // pass: it fails by returning instead (libtest: "did not panic as expected").
    let cannot_run = if attrs.iter().any(|a| a.path().is_ident("should_panic")) {
        quote! {{
            ::std::eprintln!(
                "the {0} backend cannot run on this machine, so this test fails \
                 instead of passing (`--skip ::{0}` leaves such tests out): {1}",
                #label,
                err
            );
            return;
        }}
    } else {
        quote! {
            ::core::panic!(
                "the {0} backend cannot run on this machine, so this test fails \
                 instead of passing (`--skip ::{0}` leaves such tests out): {1}",
                #label,
                err
            )
        }
    };
    quote! {
        #[::core::prelude::v1::test]
        #(#attrs)*
        fn #test_name() #output {
            let rt = match #builder.build() {
                ::core::result::Result::Ok(rt) => rt,
                ::core::result::Result::Err(err) => #cannot_run,
            };
            rt.block_on(super::#name())
        }
    }
}
