//! `cargo xtask layers`: the import rules of docs/ARCHITECTURE.md, checked on the source. A
//! module of ring-rt imports only modules of its own layer or below (every `crate::` path in
//! code, crate-root re-exports resolved to their module), and ring-core names nothing of
//! ring-rt. Exits 1 naming each import that points up. `cargo test -p xtask` runs the same
//! check on this tree (so `cargo test --workspace` does), and CI runs the command.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// ring-rt's layers, ground floor first: a module may use `crate::m` only for an `m` of
/// its own layer or a lower one.
const LAYERS: &[&[&str]] = &[
    &["sys", "unpark", "buf", "waiters", "completion"],
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

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The code of a line, without its comment (doc links are not imports).
fn code(line: &str) -> &str {
    line.split("//").next().unwrap_or("")
}

/// Names the crate root re-exports (`pub use m::{A, B}` in lib.rs), mapped to `m`, so a
/// `crate::Runtime` counts as the import of `runtime` it is.
fn root_reexports(lib: &str) -> HashMap<String, String> {
    let mut names = HashMap::new();
    let mut statement = String::new();
    for line in lib.lines().map(code) {
        statement.push_str(line.trim());
        if !statement.ends_with(';') {
            if !statement.starts_with("pub use ") {
                statement.clear();
            }
            continue;
        }
        if let Some(rest) = statement.strip_prefix("pub use ") {
            if let Some((module, items)) = rest.split_once("::") {
                let items = items.trim_end_matches(';');
                let items = items.trim_start_matches('{').trim_end_matches('}');
                for item in items.split(',') {
                    let name = item.rsplit("::").next().unwrap_or("").trim();
                    if !name.is_empty() {
                        names.insert(name.to_string(), module.trim().to_string());
                    }
                }
            }
        }
        statement.clear();
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

/// The workspace root (xtask sits one level below it).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every import in ring-rt's `src` that points up a layer, and every module in no layer.
fn upward_imports(rt_src: &Path) -> std::io::Result<Vec<String>> {
    let reexports = root_reexports(&fs::read_to_string(rt_src.join("lib.rs"))?);
    let mut files = Vec::new();
    rust_files(rt_src, &mut files)?;
    let mut wrong = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(rt_src).unwrap_or(file);
        let Some(first) = rel.components().next() else {
            continue;
        };
        let module = first.as_os_str().to_string_lossy();
        let module = module.trim_end_matches(".rs");
        if module == "lib" {
            continue; // the crate root declares and re-exports everything
        }
        let Some(from) = layer_of(module) else {
            wrong.push(format!(
                "{}: module `{module}` is in no layer (add it to LAYERS)",
                rel.display()
            ));
            continue;
        };
        let text = fs::read_to_string(file)?;
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
    Ok(wrong)
}

/// Every line of ring-core's `src` that names ring-rt in code.
fn core_naming_rt(core_src: &Path) -> std::io::Result<Vec<String>> {
    let mut files = Vec::new();
    rust_files(core_src, &mut files)?;
    let mut wrong = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file)?;
        for (n, line) in text.lines().enumerate() {
            if code(line).contains("ring_rt") {
                wrong.push(format!(
                    "{}:{}: ring-core names ring-rt",
                    file.display(),
                    n + 1
                ));
            }
        }
    }
    Ok(wrong)
}

fn check() -> std::io::Result<Vec<String>> {
    let root = workspace();
    let mut wrong = upward_imports(&root.join("crates/ring-rt/src"))?;
    wrong.extend(core_naming_rt(&root.join("crates/ring-core/src"))?);
    Ok(wrong)
}

pub fn run(_args: &[String]) -> ExitCode {
    match check() {
        Ok(wrong) if wrong.is_empty() => {
            println!(
                "layers: every import of ring-rt points down a layer; ring-core names no ring-rt"
            );
            ExitCode::SUCCESS
        }
        Ok(wrong) => {
            eprintln!(
                "layers: imports that break docs/ARCHITECTURE.md's rules:\n{}",
                wrong.join("\n")
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("layers: reading the source tree: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_tree_keeps_its_layers() {
        let wrong = check().expect("the source tree");
        assert!(
            wrong.is_empty(),
            "imports from a lower layer up:\n{}",
            wrong.join("\n")
        );
    }

    #[test]
    fn the_rule_catches_an_upward_import() {
        let reexports = root_reexports(
            "pub use runtime::{spawn, Runtime};\npub use builder::Builder;\npub use runtime::{\n    Handle,\n};",
        );
        let found = crate_paths(
            "use crate::Runtime;\n// crate::builder in a comment\nlet b = crate::builder::x();\nlet h = crate::Handle;",
            &reexports,
        );
        let modules: Vec<&str> = found.iter().map(|(_, m)| m.as_str()).collect();
        assert_eq!(modules, ["runtime", "builder", "runtime"]);
        assert!(layer_of("runtime") > layer_of("op"));
    }
}
