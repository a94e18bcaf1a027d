//! Lists the plug-in folders, so that a new diagnosis rule or exporter is a file dropped in
//! its folder (plus its public name in `names.rs` or `config/kinds.rs`) and nothing else:
//! every `.rs` file of `src/diagnose/rules/` becomes a module whose `KIND` joins the rules'
//! list, and every file of `src/destinations/kinds/` one whose `KIND` joins the exporters'.
//! The lists are in file-name order.
//!
//! `cargo fmt` does not reach modules declared in generated code; `.ci/run` checks those
//! files with `rustfmt` directly.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A plug-in folder: where its files are, the file to generate, and the list's declaration.
struct Folder {
    dir: &'static str,
    out: &'static str,
    list: &'static str,
}

const FOLDERS: [Folder; 2] = [
    Folder {
        dir: "src/diagnose/rules",
        out: "diagnosis_rules.rs",
        list: "pub(crate) const KINDS: &[&dyn FindingKind]",
    },
    Folder {
        dir: "src/destinations/kinds",
        out: "exporter_kinds.rs",
        list: "const KINDS: &[&dyn ExporterKind]",
    },
];

fn main() {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    for folder in &FOLDERS {
        let dir = root.join(folder.dir);
        println!("cargo:rerun-if-changed={}", folder.dir);
        let code = generate(&dir, folder.list).unwrap_or_else(|e| {
            panic!("cannot list the plug-ins in {}: {e}", dir.display());
        });
        std::fs::write(out_dir.join(folder.out), code).expect("OUT_DIR is writable");
    }
}

/// One `#[path] mod` per plug-in file (`mod.rs` is the folder's own), then the list.
fn generate(dir: &Path, list: &str) -> std::io::Result<String> {
    let mut modules: Vec<(String, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "rs") && stem != "mod" {
            modules.push((stem.to_owned(), path.clone()));
        }
    }
    modules.sort();
    let mut code = String::new();
    for (name, path) in &modules {
        let path = path.display().to_string().escape_default().to_string();
        let _ = writeln!(code, "#[path = \"{path}\"]\nmod {name};");
    }
    let kinds: Vec<String> = modules.iter().map(|(m, _)| format!("{m}::KIND")).collect();
    let _ = writeln!(code, "{list} = &[{}];", kinds.join(", "));
    Ok(code)
}
