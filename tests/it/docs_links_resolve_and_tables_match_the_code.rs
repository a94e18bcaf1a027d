//! The user guide stays true to the code: every relative link and `#anchor` in the README,
//! the guide (`docs/`), ARCHITECTURE.md and BENCHMARKS.md resolves, and the guide's tables
//! of span names, attributes, events and metrics list exactly the names of
//! `gpuspan::names` (src/names.rs), the memory attributes of a span's table
//! (src/figures/columns.rs) among them. No network: only the repository's files are read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Markdown files whose links are checked.
fn markdown_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = [
        "README.md",
        "ARCHITECTURE.md",
        "BENCHMARKS.md",
        "collector/README.md",
        "python/README.md",
    ]
    .iter()
    .map(|f| root().join(f))
    .filter(|p| p.exists())
    .collect();
    let mut guide: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("the guide's folder, docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    guide.sort();
    assert!(guide.len() >= 10, "the guide has only {guide:?}");
    files.extend(guide);
    files
}

/// The lines of `text` outside fenced code blocks, with their line numbers (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (at, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            lines.push((at + 1, line));
        }
    }
    lines
}

/// `line` without its inline code spans.
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// A heading's anchor as GitHub makes it: the text as rendered (code marks gone, a link's
/// text kept), lowercased, punctuation dropped, each space a hyphen.
fn slug(heading: &str) -> String {
    let text = link_texts(heading).replace('`', "");
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// `text` with each `[label](target)` replaced by its label.
fn link_texts(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|c| open + c) else {
            break;
        };
        let Some(end) = rest[close..].find(')').map(|e| close + e) else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Every anchor the headings of `text` give, duplicates numbered as GitHub numbers them.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let count = seen.entry(base.clone()).or_insert(0);
        anchors.insert(if *count == 0 {
            base.clone()
        } else {
            format!("{base}-{count}")
        });
        *count += 1;
    }
    anchors
}

/// The targets of the inline links (and images) on `line`, code spans left out.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code(line);
    let mut targets = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        targets.push(after[..end].trim().to_owned());
        rest = &after[end..];
    }
    targets
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = read(&file);
        let dir = file.parent().expect("a file's folder");
        for (number, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (path, anchor) = match target.split_once('#') {
                    Some((path, anchor)) => (path, Some(anchor)),
                    None => (target.as_str(), None),
                };
                let resolved = if path.is_empty() {
                    file.clone()
                } else {
                    dir.join(path)
                };
                let shown = format!(
                    "{}:{number}: {target}",
                    file.strip_prefix(root()).unwrap_or(&file).display()
                );
                if !resolved.exists() {
                    broken.push(format!("{shown}: no such file"));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if resolved.extension().is_some_and(|x| x == "md")
                    && !anchors(&read(&resolved)).contains(anchor)
                {
                    broken.push(format!("{shown}: no heading with that anchor"));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the parser blind?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The `pub const X: &str = "value"` of each `pub mod` of src/names.rs, by module.
fn code_names() -> BTreeMap<String, BTreeMap<String, String>> {
    let text = read(&root().join("src/names.rs"));
    let mut modules: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut module = String::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("pub mod ") {
            module = name.trim_end_matches(" {").trim().to_owned();
            continue;
        }
        let Some(rest) = line.trim().strip_prefix("pub const ") else {
            continue;
        };
        let Some((constant, value)) = rest.split_once(": &str = ") else {
            continue;
        };
        let value = value
            .trim_end_matches(';')
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or_else(|| panic!("src/names.rs: {constant} is not one quoted string"));
        modules
            .entry(module.clone())
            .or_default()
            .insert(constant.to_owned(), value.to_owned());
    }
    modules
}

fn code_module(module: &str) -> BTreeSet<String> {
    let names = code_names();
    let values: BTreeSet<String> = names
        .get(module)
        .unwrap_or_else(|| panic!("no `pub mod {module}` in src/names.rs"))
        .values()
        .cloned()
        .collect();
    assert!(!values.is_empty(), "no names in names::{module}");
    values
}

/// names::attribute, less the prefixes keys are built from (`gpu.`, `gpu.memory.`, `.memory.`).
fn code_attributes() -> BTreeSet<String> {
    code_module("attribute")
        .into_iter()
        .filter(|name| !name.starts_with('.') && !name.ends_with('.'))
        .collect()
}

/// One Markdown table: its header's cells and its rows' cells, and where it is.
struct Table {
    file: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = vec![String::new()];
    let mut escaped = false;
    for c in inner.chars() {
        match c {
            '|' if !escaped => cells.push(String::new()),
            _ => cells.last_mut().expect("a cell").push(c),
        }
        escaped = c == '\\';
    }
    cells.iter().map(|c| c.trim().to_owned()).collect()
}

/// Every table of the guide.
fn guide_tables() -> Vec<Table> {
    let mut tables = Vec::new();
    for file in markdown_files()
        .into_iter()
        .filter(|f| f.starts_with(root().join("docs")))
    {
        let text = read(&file);
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let mut current: Option<Table> = None;
        for (_, line) in prose_lines(&text) {
            if !line.trim_start().starts_with('|') {
                tables.extend(current.take());
                continue;
            }
            let row = cells(line);
            let separator = row.iter().all(|c| c.chars().all(|c| "-: ".contains(c)));
            match current.as_mut() {
                None => {
                    current = Some(Table {
                        file: name.clone(),
                        header: row,
                        rows: Vec::new(),
                    })
                }
                Some(_) if separator => {}
                Some(table) => table.rows.push(row),
            }
        }
        tables.extend(current);
    }
    tables
}

fn tables_headed(first: &str) -> Vec<Table> {
    let tables: Vec<Table> = guide_tables()
        .into_iter()
        .filter(|t| t.header.first().is_some_and(|h| h == first))
        .collect();
    assert!(!tables.is_empty(), "no table headed `| {first} |` in docs/");
    tables
}

/// The names in backquotes in `cell`: `.end` after `gpu.memory.start` is `gpu.memory.end`;
/// a pattern (`gpu.<i>.memory.peak`) and anything that is not a name are left out. With
/// `dotted`, only names with a dot count (a cell that also holds values such as `ratio`).
fn names_in(cell: &str, dotted: bool) -> Vec<String> {
    let mut names = Vec::new();
    let mut last_full: Option<String> = None;
    for (at, piece) in cell.split('`').enumerate() {
        if at % 2 == 0 {
            continue;
        }
        let name = match piece.strip_prefix('.') {
            Some(suffix) => match &last_full {
                Some(full) => match full.rsplit_once('.') {
                    Some((stem, _)) => format!("{stem}.{suffix}"),
                    None => continue,
                },
                None => continue,
            },
            None => piece.to_owned(),
        };
        let is_name = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._<>".contains(c));
        if !is_name {
            continue;
        }
        if !piece.starts_with('.') {
            last_full = Some(name.clone());
        }
        if name.contains('<') || (dotted && !name.contains('.')) {
            continue;
        }
        names.push(name);
    }
    names
}

/// The names of column `column` of every table headed `first`, with where each is.
fn documented(first: &str, column: usize, dotted: bool) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for table in tables_headed(first) {
        for row in &table.rows {
            let Some(cell) = row.get(column) else {
                continue;
            };
            for name in names_in(cell, dotted) {
                names.entry(name).or_insert_with(|| table.file.clone());
            }
        }
    }
    names
}

/// Both ways: a name of the code the docs lack, and a documented name the code lacks.
fn assert_same(what: &str, code: &BTreeSet<String>, docs: &BTreeMap<String, String>) {
    let undocumented: Vec<_> = code.iter().filter(|n| !docs.contains_key(*n)).collect();
    let unknown: Vec<_> = docs
        .iter()
        .filter(|(n, _)| !code.contains(*n))
        .map(|(n, file)| format!("{n} (docs/{file})"))
        .collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "{what}: in src/names.rs but in no table of docs/: {undocumented:?}; \
         in the docs' tables but not in src/names.rs: {unknown:?}"
    );
}

#[test]
fn the_span_name_table_lists_exactly_the_span_names() {
    assert_same(
        "span names",
        &code_module("span"),
        &documented("span", 0, false),
    );
}

#[test]
fn the_event_table_lists_exactly_the_events() {
    assert_same(
        "events",
        &code_module("event"),
        &documented("event (on a span)", 0, false),
    );
}

#[test]
fn the_metric_table_lists_every_instrument_and_a_counter_per_finding() {
    let mut instruments = code_module("metric");
    // Each finding is also counted in an observable counter of its own name.
    instruments.extend(code_module("event"));
    assert_same("metrics", &instruments, &documented("instrument", 0, false));
}

#[test]
fn the_attribute_tables_list_exactly_the_attributes() {
    let mut docs = documented("attribute", 0, false);
    docs.extend(documented("resource attribute", 0, false));
    // The events' own attributes are listed with each event.
    docs.extend(documented("event (on a span)", 2, true));
    assert_same("attributes", &code_attributes(), &docs);
}

#[test]
fn the_span_attribute_table_has_every_memory_figure_a_span_carries() {
    let constants = code_names().remove("attribute").expect("names::attribute");
    let columns = read(&root().join("src/figures/columns.rs"));
    let start = columns
        .find("TRACED")
        .expect("the TRACED table in columns.rs");
    let end = start + columns[start..].find("];").expect("the TRACED table's end");
    let keys: Vec<&String> = columns[start..end]
        .split("attr::")
        .skip(1)
        .map(|rest| {
            let constant: String = rest
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            constants
                .get(&constant)
                .unwrap_or_else(|| panic!("columns.rs: attr::{constant} is not in names.rs"))
        })
        .collect();
    assert!(keys.len() >= 13, "{keys:?}");
    let table: Vec<Table> = tables_headed("attribute")
        .into_iter()
        .filter(|t| t.file == "spans.md")
        .collect();
    let documented: BTreeSet<String> = table
        .iter()
        .flat_map(|t| &t.rows)
        .filter_map(|row| row.first())
        .flat_map(|cell| names_in(cell, false))
        .collect();
    let missing: Vec<_> = keys.iter().filter(|k| !documented.contains(**k)).collect();
    assert!(
        missing.is_empty(),
        "span figures not in docs/spans.md's attribute table: {missing:?}"
    );
}

#[test]
fn anchors_and_names_are_read_as_github_and_the_tables_write_them() {
    assert_eq!(
        slug(" Many nodes (agent → gateway)"),
        "many-nodes-agent--gateway"
    );
    assert_eq!(
        slug(" Proving the peak on your own GPUs: `gpuspan selftest`"),
        "proving-the-peak-on-your-own-gpus-gpuspan-selftest"
    );
    assert_eq!(slug(" The queue's memory bound"), "the-queues-memory-bound");
    assert_eq!(
        anchors("# A\n```\n# not a heading\n```\n## A\n"),
        BTreeSet::from(["a".to_owned(), "a-1".to_owned()])
    );
    assert_eq!(
        names_in(
            "`gpu.memory.start` / `.end` / `.peak`, `gpu.<i>.memory.peak`",
            false
        ),
        ["gpu.memory.start", "gpu.memory.end", "gpu.memory.peak"]
    );
    assert_eq!(
        names_in("`gpu.memory.leak.rule` (`ratio`, `trend`)", true),
        ["gpu.memory.leak.rule"]
    );
    assert_eq!(
        link_targets("see [a](b.md#c) and `[d](e)` and ![f](g.png)"),
        ["b.md#c", "g.png"]
    );
}
