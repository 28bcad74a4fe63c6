//! The attributes' options (`workers = 2, backend = "epoll", entries = 512, crate = "..."`),
//! parsed and checked; each mistake is a compile error at the option that made it.

use proc_macro2::TokenStream;
use quote::quote;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, Lit, LitInt, LitStr, Meta, MetaNameValue, Token};

/// The options both attributes take, as the user wrote them.
pub struct Options {
    /// `workers = N` (or `threads = N`): the worker count, at least 1.
    pub workers: Option<usize>,
    /// `backend = "uring" | "epoll"`.
    pub backend: Option<Backend>,
    /// `entries = N`: SQ entries per ring, at least 1.
    pub entries: Option<u32>,
    /// `crate = "path"`: where ring-rt is, for a renamed dependency (default `::ring_rt`).
    pub krate: syn::Path,
}

/// A backend an option names.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Uring,
    Epoll,
}

impl Backend {
    /// Both, in the order the test attribute makes their tests.
    pub const BOTH: [Backend; 2] = [Backend::Uring, Backend::Epoll];

    /// The name of the option value, of the test function and of `BackendKind`'s display.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Uring => "uring",
            Backend::Epoll => "epoll",
        }
    }

    /// `ring_rt::BackendKind::Uring` or `::Epoll`, under `krate`.
    pub fn kind_path(self, krate: &syn::Path) -> TokenStream {
        match self {
            Backend::Uring => quote!(#krate::BackendKind::Uring),
            Backend::Epoll => quote!(#krate::BackendKind::Epoll),
        }
    }
}

/// The option names, for messages.
const KNOWN: &str = "expected `workers`, `threads`, `backend`, `entries` or `crate`";

impl Options {
    /// Parses the attribute's arguments, reporting every bad option, not only the first;
    /// `what` names the attribute in messages.
    pub fn parse(attr: TokenStream, what: &str) -> syn::Result<Options> {
        let metas = Punctuated::<Meta, Token![,]>::parse_terminated.parse2(attr)?;
        let mut opts = Options {
            workers: None,
            backend: None,
            entries: None,
            krate: syn::parse_quote!(::ring_rt),
        };
        let mut seen: Vec<String> = Vec::new();
        let mut errors: Option<syn::Error> = None;
        for meta in metas {
            if let Err(e) = opts.apply(&meta, &mut seen, what) {
                match &mut errors {
                    Some(all) => all.combine(e),
                    None => errors = Some(e),
                }
            }
        }
        match errors {
            Some(e) => Err(e),
            None => Ok(opts),
        }
    }

    /// Takes one `name = value` option.
    fn apply(&mut self, meta: &Meta, seen: &mut Vec<String>, what: &str) -> syn::Result<()> {
        let Meta::NameValue(nv) = meta else {
            return Err(syn::Error::new_spanned(
                meta,
                format!("{what} takes `name = value` options: {KNOWN}"),
            ));
        };
        let name = option_name(nv)?;
        // `threads` is `workers` by another name (Builder::threads): one of them, once.
        let key = if name == "threads" { "workers" } else { &name };
        if seen.iter().any(|s| s == key) {
            let option = match key {
                "workers" => "the worker count (`workers` or `threads`)".to_string(),
                _ => format!("`{key}`"),
            };
            return Err(syn::Error::new_spanned(
                &nv.path,
                format!("{option} is given twice"),
            ));
        }
        seen.push(key.to_string());
        match key {
            "workers" => self.workers = Some(positive(&nv.value, &name, WORKERS_HINT)?),
            "entries" => self.entries = Some(positive(&nv.value, &name, ENTRIES_HINT)?),
            "backend" => self.backend = Some(backend(&nv.value)?),
            "crate" => self.krate = string(&nv.value, "crate")?.parse()?,
            _ => {
                return Err(syn::Error::new_spanned(
                    &nv.path,
                    format!("unknown option `{name}`: {KNOWN}"),
                ))
            }
        }
        Ok(())
    }
}

const WORKERS_HINT: &str = "leave it out for the default";
const ENTRIES_HINT: &str = "SQ entries per ring, rounded up to a power of two";

/// The option's name: one identifier (or `crate`).
fn option_name(nv: &MetaNameValue) -> syn::Result<String> {
    match nv.path.segments.first() {
        Some(seg) if nv.path.segments.len() == 1 && nv.path.leading_colon.is_none() => {
            Ok(seg.ident.to_string())
        }
        _ => Err(syn::Error::new_spanned(
            &nv.path,
            format!("an option is one name: {KNOWN}"),
        )),
    }
}

/// An integer literal of at least 1 that fits `T`.
fn positive<T>(value: &Expr, name: &str, hint: &str) -> syn::Result<T>
where
    T: std::str::FromStr + TryFrom<u8> + PartialOrd,
    T::Err: std::fmt::Display,
{
    let Expr::Lit(ExprLit {
        lit: Lit::Int(int), ..
    }) = value
    else {
        return Err(syn::Error::new_spanned(
            value,
            format!("`{name}` takes an integer literal, e.g. `{name} = 2`"),
        ));
    };
    let n = parse_int::<T>(int, name)?;
    match T::try_from(1u8) {
        Ok(one) if n >= one => Ok(n),
        _ => Err(syn::Error::new_spanned(
            int,
            format!("`{name}` must be at least 1 ({hint})"),
        )),
    }
}

fn parse_int<T>(int: &LitInt, name: &str) -> syn::Result<T>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    int.base10_parse::<T>().map_err(|e| {
        syn::Error::new(
            int.span(),
            format!("`{name} = {}`: {e}", int.base10_digits()),
        )
    })
}

/// A string literal's value.
fn string(value: &Expr, name: &str) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Ok(s.clone()),
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`{name}` takes a string literal, e.g. `{name} = \"...\"`"),
        )),
    }
}

/// `"uring"` or `"epoll"` (the names `RING_RT_BACKEND` takes).
fn backend(value: &Expr) -> syn::Result<Backend> {
    let s = string(value, "backend")?;
    match s.value().as_str() {
        "uring" => Ok(Backend::Uring),
        "epoll" => Ok(Backend::Epoll),
        other => Err(syn::Error::new(
            s.span(),
            format!("unknown backend {other:?}: expected \"uring\" or \"epoll\""),
        )),
    }
}
