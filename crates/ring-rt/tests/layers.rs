//! The import rules of docs/ARCHITECTURE.md, checked on the source: a module of ring-rt
//! imports only modules of its own layer or below, and ring-core imports nothing of
//! ring-rt. (Not a runtime test: it reads files, so it runs once, not per backend.)

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// ring-rt's layers, ground floor first: a module may use `crate::m` only for an `m` of
/// its own layer or a lower one.
const LAYERS: &[&[&str]] = &[
    &["sys", "unpark", "buf"],
    &["backend", "executor"],
    &["worker"],
    &["op", "pool"],
    &["net", "fs", "time", "signal"],
    &["runtime", "compat"],
    &["builder"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a line, without its comment (doc links are not imports).
fn code(line: &str) -> &str {
    line.split("//").next().unwrap_or("")
}

/// Names the crate root re-exports (`pub use m::{A, B}` in lib.rs), mapped to `m`, so a
/// `crate::Runtime` counts as the import of `runtime` it is.
fn root_reexports(lib: &str) -> HashMap<String, String> {
    let mut names = HashMap::new();
    for line in lib.lines().map(code) {
        let Some(rest) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, items)) = rest.split_once("::") else {
            continue;
        };
        let items = items.trim_end_matches(';');
        let items = items.trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let name = item.rsplit("::").next().unwrap_or("").trim();
            if !name.is_empty() {
                names.insert(name.to_string(), module.trim().to_string());
            }
        }
    }
    names
}

/// Every `crate::x` a file names in code, as the module `x` stands for.
fn crate_paths(text: &str, reexports: &HashMap<String, String>) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut rest = code(line);
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let module = reexports.get(&name).cloned().unwrap_or(name);
            found.push((n + 1, module));
        }
    }
    found
}

#[test]
fn ring_rt_modules_import_only_their_layer_or_below() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let reexports = root_reexports(&fs::read_to_string(src.join("lib.rs")).expect("lib.rs"));
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src");
        let first = rel.components().next().expect("a path");
        let module = first.as_os_str().to_string_lossy();
        let module = module.trim_end_matches(".rs");
        if module == "lib" {
            continue; // the crate root declares and re-exports everything
        }
        let from = layer_of(module).unwrap_or_else(|| {
            panic!("{} is in no layer: add `{module}` to LAYERS", rel.display())
        });
        let text = fs::read_to_string(file).expect("read");
        for (line, target) in crate_paths(&text, &reexports) {
            let Some(to) = layer_of(&target) else {
                continue; // a root item of no module (a macro, a type defined in lib.rs)
            };
            if to > from {
                wrong.push(format!(
                    "{}:{line}: {module} (layer {from}) imports {target} (layer {to})",
                    rel.display()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports from a lower layer up:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn ring_core_imports_nothing_of_ring_rt() {
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ring-core/src");
    let mut files = Vec::new();
    rust_files(&core, &mut files);
    let wrong: Vec<String> = files
        .iter()
        .flat_map(|file| {
            let text = fs::read_to_string(file).expect("read");
            text.lines()
                .enumerate()
                .filter(|(_, line)| code(line).contains("ring_rt"))
                .map(|(n, _)| format!("{}:{}", file.display(), n + 1))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "ring-core names ring-rt:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_rule_catches_an_upward_import() {
    let reexports = root_reexports("pub use runtime::{spawn, Runtime};\npub use builder::Builder;");
    let found = crate_paths(
        "use crate::Runtime;\n// crate::builder in a comment\nlet b = crate::builder::x();",
        &reexports,
    );
    let modules: Vec<&str> = found.iter().map(|(_, m)| m.as_str()).collect();
    assert_eq!(modules, ["runtime", "builder"]);
    assert!(layer_of("runtime") > layer_of("op"));
}
