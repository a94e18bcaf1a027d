//! The settings table lists every setting once; the builder has each row's setter and no
//! setting outside the table, `gpuspan.init()` takes each row as a keyword (its stub says
//! so, with the row's variable, doc and default in `init`'s docstring, and python/tests
//! checks the module itself), and the guide's table of variables
//! (docs/configuration.md, or wherever the reference keeps it) names every row's variables,
//! with the default the row says.

use std::collections::BTreeSet;
use std::path::Path;

use gpuspan::settings::{settings, Setting, Vars};

fn source(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The names of the `pub fn name(mut self, ...)` methods in `text`: the builder's setters.
fn setters_in(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("pub fn "))
        .filter(|rest| rest.contains("(mut self"))
        .filter_map(|rest| rest.split(['(', '<']).next())
        .map(str::to_owned)
        .collect()
}

/// The lines of the variables' table, wherever the reference keeps it: the README or a
/// page under docs/.
fn table_lines() -> Vec<String> {
    let mut pages = vec![source("README.md")];
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let mut dirs = vec![docs];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    pages
        .iter()
        .flat_map(|page| page.lines())
        .filter(|line| line.starts_with("| `GPUSPAN_") || line.starts_with("| `OTEL_"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_row_has_a_name_of_its_own() {
    let names: Vec<_> = settings().map(|s| s.name).collect();
    let unique: BTreeSet<_> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "a name twice in {names:?}");
    assert!(names.len() >= 28, "{names:?}");
}

#[test]
fn the_builder_has_a_setter_for_every_row_and_no_other_setting() {
    let mut setters: BTreeSet<String> = BTreeSet::new();
    for file in [
        "src/telemetry/builder.rs",
        "src/telemetry/diagnose_setters.rs",
    ] {
        setters.extend(setters_in(&source(file)));
    }
    // Not a setting: where memory is read from, an object rather than a value.
    setters.remove("memory_source");
    // Not a setting: a collector's observer of the sampler's ticks (`pipeline`).
    setters.remove("tick_observer");
    let rows: BTreeSet<String> = settings()
        .filter(|s| s.in_code())
        .map(|s| s.setter.to_owned())
        .collect();
    assert_eq!(
        rows, setters,
        "settings table (left) against Builder setters (right)"
    );
}

#[test]
fn python_init_takes_every_row_as_a_keyword() {
    let stub = source("python/gpuspan/__init__.pyi");
    let start = stub.find("def init(").expect("init in the stub");
    let end = start + stub[start..].find(") -> Telemetry").expect("init's end");
    let keywords: BTreeSet<String> = stub[start..end]
        .lines()
        .filter_map(|line| line.trim().split_once(':'))
        .map(|(name, _)| name.to_owned())
        .filter(|name| name != "allocator")
        .collect();
    let rows: BTreeSet<String> = settings()
        .filter(|s| s.in_code())
        .map(|s| s.name.to_owned())
        .collect();
    assert_eq!(
        rows, keywords,
        "settings table (left) against gpuspan.init (right)"
    );
}

/// The entries of the list of keywords in `init`'s docstring in the stub, each with its
/// lines joined.
fn stub_keyword_entries() -> Vec<String> {
    let stub = source("python/gpuspan/__init__.pyi");
    let init = &stub[stub.find("def init(").expect("init in the stub")..];
    let doc = &init[init.find("\"\"\"").expect("init's docstring") + 3..];
    let doc = &doc[..doc.find("\"\"\"").expect("the docstring's end")];
    doc.split("\n    - ")
        .skip(1)
        .map(|entry| entry.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// A keyword as `init`'s docstring lists it: its variable, its doc, its default.
fn keyword_entry(setting: &Setting) -> String {
    let head = match setting.vars.primary() {
        Some(var) => format!("{} ({var})", setting.name),
        None => setting.name.to_owned(),
    };
    format!("{head}: {} Default: {}.", setting.doc, setting.default)
}

#[test]
fn the_stub_gives_every_keyword_its_row_s_variable_doc_and_default() {
    let rows: Vec<String> = settings()
        .filter(|s| s.in_code())
        .map(keyword_entry)
        .collect();
    assert_eq!(
        stub_keyword_entries(),
        rows,
        "init's docstring in python/gpuspan/__init__.pyi (left) against the settings table (right)"
    );
}

#[test]
fn the_guide_names_every_variable_of_every_row() {
    let table = table_lines();
    for setting in settings() {
        for var in setting.vars.names() {
            let documented = match setting.vars {
                // Per-signal variables are documented as "also per signal".
                Vars::PerSignal { every, .. } => table.iter().any(|l| l.contains(every)),
                _ => table.iter().any(|l| l.contains(&format!("`{var}`"))),
            };
            assert!(
                documented,
                "{var} ({}) is not in the table of docs/configuration.md",
                setting.name
            );
        }
    }
}

/// A row whose default is one value (`5ms`, `false`, `65536`) is documented with that
/// value: the table's last cell, where its first cell names only that row's variable.
#[test]
fn the_guide_states_each_row_s_default_as_the_row_does() {
    let table = table_lines();
    let mut checked = 0;
    for setting in settings() {
        if setting.default.contains(' ') {
            continue;
        }
        let var = match setting.vars {
            Vars::CodeOnly => continue,
            Vars::Ordered(vars) => vars[0],
            Vars::PerSignal { every, .. } => every,
        };
        for line in &table {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            if cells[0] != format!("`{var}`") {
                continue;
            }
            let stated = cells.last().unwrap().trim_matches('`');
            if stated.is_empty() {
                continue;
            }
            assert_eq!(
                stated, setting.default,
                "{var}: the table states a default other than the setting's"
            );
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} defaults compared");
}
