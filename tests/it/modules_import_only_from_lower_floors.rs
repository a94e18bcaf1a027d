//! The modules of both crates stand on floors (ARCHITECTURE.md lists them): a module imports
//! only from floors below its own, and no files import each other in a circle. The SDK's
//! modules (`src/`) are listed by name, the command's (`cli/src/`) as `gpuspan_cli::name`,
//! every one of them above every module of the SDK, which never imports the command. Read
//! from the source as text, as a reviewer would: every `crate::` path outside comments and
//! tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The floor of each top-level module, from ARCHITECTURE.md's table (`| 3 | `a`, `b` |`).
fn floors() -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(Path::new(ROOT).join("ARCHITECTURE.md"))
        .expect("ARCHITECTURE.md at the repository root");
    let mut floors = BTreeMap::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, floor, rooms, ..] = cells.as_slice() else {
            continue;
        };
        let Ok(floor) = floor.parse::<usize>() else {
            continue;
        };
        for room in rooms.split(',') {
            let room = room.trim().trim_matches('`').trim_end_matches('/');
            let room = room.trim_end_matches(".rs");
            assert!(!room.is_empty(), "an empty room on floor {floor}");
            assert!(
                floors.insert(room.to_owned(), floor).is_none(),
                "{room} is on two floors"
            );
        }
    }
    assert!(
        floors.len() > 10,
        "ARCHITECTURE.md's floor table lists too few modules"
    );
    floors
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The two crates: the name their rooms carry in the floor table, and their sources.
const CRATES: [(&str, &str); 2] = [("", "src"), ("gpuspan_cli::", "cli/src")];

/// `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`; `src/lib.rs` is the root.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = relative
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The code of a file without its comments and its unit tests.
fn code(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start() == "#[cfg(test)]" {
            break;
        }
        let line = match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Every path that follows `crate::` (or `$crate::`), with `crate::{a::b, c}` groups spread;
/// `super::` paths are made absolute from `me`.
fn crate_paths(code: &str, me: &[String]) -> Vec<Vec<String>> {
    let mut paths = crate_relative(code, "crate::", &[]);
    if let Some((_, parent)) = me.split_last() {
        paths.extend(crate_relative(code, "super::", parent));
    }
    paths
}

fn crate_relative(code: &str, anchor: &str, base: &[String]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(anchor) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + anchor.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let base = base.to_vec();
        let absolute = |tail: Vec<String>| [base.clone(), tail].concat();
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                paths.push(absolute(segments(item.trim())));
            }
        } else {
            paths.push(absolute(segments(rest)));
        }
    }
    paths.retain(|p| !p.is_empty() && p.first().is_some_and(|s| s != "super"));
    paths
}

fn segments(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        out.push(rest[..end].to_owned());
        match rest[end..].strip_prefix("::") {
            Some(next) => rest = next,
            None => break,
        }
    }
    out
}

/// Names the crate root re-exports, and the module each comes from (`Telemetry` -> `telemetry`).
fn root_reexports(src: &Path) -> BTreeMap<String, String> {
    let lib = code(&src.join("lib.rs"));
    let mut names = BTreeMap::new();
    for statement in lib.split(';') {
        let Some(path) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let module = segments(path).into_iter().next().unwrap_or_default();
        let items = match (path.find('{'), path.find('}')) {
            (Some(a), Some(b)) => path[a + 1..b].split(',').map(str::trim).collect(),
            _ => vec![path.rsplit("::").next().unwrap_or_default().trim()],
        };
        for item in items {
            let name = item.rsplit(" as ").next().unwrap_or(item).trim();
            if !name.is_empty() {
                names.insert(name.to_owned(), module.clone());
            }
        }
    }
    names
}

#[test]
fn every_module_imports_only_from_lower_floors_and_no_files_import_each_other_in_a_circle() {
    let floors = floors();
    let sdk_top = floors
        .iter()
        .filter(|(room, _)| !room.contains("::"))
        .map(|(_, f)| *f);
    let cli_bottom = floors
        .iter()
        .filter(|(room, _)| room.contains("::"))
        .map(|(_, f)| *f);
    if let (Some(top), Some(bottom)) = (sdk_top.max(), cli_bottom.min()) {
        assert!(
            bottom > top,
            "the command's lowest floor ({bottom}) is not above the SDK's highest ({top})"
        );
    }
    let mut upward = Vec::new();
    let mut unplaced = BTreeSet::new();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (prefix, src) in CRATES {
        let src = Path::new(ROOT).join(src);
        let reexports = root_reexports(&src);
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let named = |path: Vec<String>| -> Vec<String> {
            match path.split_first() {
                Some((room, rest)) => [vec![format!("{prefix}{room}")], rest.to_vec()].concat(),
                None => path,
            }
        };
        let modules: BTreeSet<Vec<String>> =
            files.iter().map(|f| named(module_path(&src, f))).collect();
        for file in &files {
            let me = module_path(&src, file);
            if matches!(me.first().map(String::as_str), Some("bin" | "main") | None) {
                continue;
            }
            let mine = named(me.clone());
            let room = &mine[0];
            let Some(&floor) = floors.get(room) else {
                unplaced.insert(room.clone());
                continue;
            };
            for mut path in crate_paths(&code(file), &me) {
                if let Some(module) = reexports.get(&path[0]) {
                    path.insert(0, module.clone());
                }
                let path = named(path);
                let target = (1..=path.len())
                    .rev()
                    .map(|n| path[..n].to_vec())
                    .find(|p| modules.contains(p));
                let Some(target) = target else { continue };
                if target[0] == *room {
                    if target != mine {
                        edges.entry(mine.clone()).or_default().insert(target);
                    }
                    continue;
                }
                match floors.get(&target[0]) {
                    Some(&theirs) if theirs < floor => {}
                    Some(&theirs) => upward.push(format!(
                        "{} (floor {floor}) imports {} (floor {theirs})",
                        mine.join("::"),
                        path.join("::")
                    )),
                    None => {
                        unplaced.insert(target[0].clone());
                    }
                }
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules missing from ARCHITECTURE.md's floor table: {unplaced:?}"
    );
    upward.sort();
    upward.dedup();
    assert!(
        upward.is_empty(),
        "imports that run back up:\n{}",
        upward.join("\n")
    );

    // Circles inside a room, between its files (a file and the module it declares in are
    // one file here when the child reaches the parent with `super::`).
    for start in edges.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((at, trail)) = stack.pop() {
            for next in edges.get(&at).into_iter().flatten() {
                if next == start {
                    let names: Vec<String> = trail.iter().map(|m| m.join("::")).collect();
                    panic!(
                        "files import each other in a circle: {}",
                        names.join(" -> ")
                    );
                }
                if seen.insert(next.clone()) {
                    let mut trail = trail.clone();
                    trail.push(next.clone());
                    stack.push((next.clone(), trail));
                }
            }
        }
    }
}
