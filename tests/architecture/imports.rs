//! The import graph of a crate's modules, read from the paths its files name, and each module's
//! level in it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::{repo, rust_files};

/// The deepest import level a crate's modules may reach (level 1 imports nothing of the crate).
const MAX_LEVELS: usize = 6;

/// The module a file of `src` holds, as a path: `config::flags` for `src/config/flags.rs`.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    relative.components().map(|part| part.as_os_str().to_str().unwrap()).collect::<Vec<_>>().join("::")
}

/// The paths that start with `crate::`, `super::` or `node_csr_approver::` (the binary naming its
/// library) in `code`, a `{…}` group spread into one path per item (`crate::{a, b::c}` gives
/// `crate::a` and `crate::b::c`).
fn crate_paths(code: &str) -> Vec<String> {
    let is_path = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut paths = Vec::new();
    for start in ["crate::", "super::", "node_csr_approver::"] {
        for (at, _) in code.match_indices(start) {
            if code[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let rest = &code[at..];
            let path = &rest[..rest.find(|c: char| !is_path(c)).unwrap_or(rest.len())];
            let Some(group) = path.ends_with("::").then(|| rest[path.len()..].strip_prefix('{')).flatten() else {
                paths.push(path.trim_end_matches(':').to_owned());
                continue;
            };
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',').map(str::trim).filter(|item| !item.is_empty()) {
                let item = &item[..item.find(|c: char| !is_path(c)).unwrap_or(item.len())];
                paths.push(if item == "self" {
                    path.trim_end_matches(':').to_owned()
                } else {
                    format!("{path}{item}")
                });
            }
        }
    }
    paths
}

/// Every module of the crate in `src` with the modules it imports (test modules left out, and
/// a path that names no module of the crate counted as an import of the crate root, `lib`). A
/// child that names its parent's items imports its parent; a parent's `mod child;` is not an
/// import.
pub(super) fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = rust_files(src);
    let modules: BTreeSet<String> = files.iter().map(|file| module_of(src, file)).collect();
    let mut graph = BTreeMap::new();
    for file in &files {
        let this = module_of(src, file);
        let text = std::fs::read_to_string(file).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        let code: Vec<&str> = code.lines().map(|line| line.split("//").next().unwrap()).collect();
        let mut imported = BTreeSet::new();
        for path in crate_paths(&code.join("\n")) {
            let mut parts: Vec<&str> = path.split("::").collect();
            let mut base: Vec<&str> = this.split("::").collect();
            if parts[0] == "crate" || parts[0] == "node_csr_approver" {
                parts.remove(0);
            } else {
                while parts.first() == Some(&"super") {
                    parts.remove(0);
                    base.pop();
                }
                parts = base.into_iter().chain(parts).collect();
            }
            let target = (1..=parts.len())
                .rev()
                .map(|len| parts[..len].join("::"))
                .find(|module| modules.contains(module))
                .unwrap_or_else(|| "lib".to_owned());
            if target != this {
                imported.insert(target);
            }
        }
        graph.insert(this, imported);
    }
    graph
}

/// Each module's level: one more than the highest level of what it imports; `Err` names a
/// cycle.
fn levels(graph: &BTreeMap<String, BTreeSet<String>>) -> Result<BTreeMap<String, usize>, Vec<String>> {
    fn level(
        module: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeMap<String, usize>,
        path: &mut Vec<String>,
    ) -> Result<usize, Vec<String>> {
        if let Some(level) = done.get(module) {
            return Ok(*level);
        }
        if let Some(at) = path.iter().position(|on| on == module) {
            return Err([&path[at..], &[module.to_owned()]].concat());
        }
        path.push(module.to_owned());
        let mut highest = 0;
        for imported in graph.get(module).into_iter().flatten() {
            highest = highest.max(level(imported, graph, done, path)?);
        }
        path.pop();
        done.insert(module.to_owned(), highest + 1);
        Ok(highest + 1)
    }
    let mut done = BTreeMap::new();
    for module in graph.keys() {
        level(module, graph, &mut done, &mut Vec::new())?;
    }
    Ok(done)
}

/// The import graph of a crate's features: its top-level modules, each importing what any of its
/// modules imports outside it (`audit::periodic` importing `events` makes `audit` import `events`).
fn feature_graph(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let feature = |module: &str| module.split("::").next().unwrap().to_owned();
    let mut features: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, imports) in graph {
        let this = feature(module);
        let outside = imports.iter().map(|imported| feature(imported)).filter(|imported| *imported != this);
        features.entry(this.clone()).or_default().extend(outside);
    }
    features
}

#[test]
fn the_features_of_the_shell_and_of_the_core_import_each_other_in_no_cycle() {
    for src in [repo().join("src"), repo().join("core/src")] {
        let features = feature_graph(&import_graph(&src));
        assert!(features.len() > 1, "{features:#?}");
        if let Err(cycle) = levels(&features) {
            panic!("{}: the features import each other: {}", src.display(), cycle.join(" -> "));
        }
    }
}

#[test]
fn the_shell_and_the_core_import_in_no_cycle_and_at_most_six_levels_deep() {
    for src in [repo().join("src"), repo().join("core/src")] {
        let graph = import_graph(&src);
        assert!(graph.len() > 15 && graph.values().map(BTreeSet::len).sum::<usize>() > 30, "{graph:#?}");
        let levels =
            levels(&graph).unwrap_or_else(|cycle| panic!("{}: import cycle {}", src.display(), cycle.join(" -> ")));
        let deepest = levels.iter().max_by_key(|(_, level)| **level).unwrap();
        assert!(*deepest.1 <= MAX_LEVELS, "{}: {} is at level {}: {levels:#?}", src.display(), deepest.0, deepest.1);
        eprintln!("{}: {} modules, {} levels", src.display(), levels.len(), deepest.1);
    }
}

#[test]
fn imports_are_read_from_paths_groups_and_super() {
    let code = "use crate::config::{self, Settings};\nuse crate::{admin, kubernetes::leader};\nuse super::step::Step;\nlet x = crate::display::short_name(n);";
    let paths = crate_paths(code);
    for expected in [
        "crate::config",
        "crate::config::Settings",
        "crate::admin",
        "crate::kubernetes::leader",
        "super::step::Step",
        "crate::display::short_name",
    ] {
        assert!(paths.iter().any(|path| path == expected), "{expected}: {paths:?}");
    }
    let cyclic = BTreeMap::from([
        ("a".to_owned(), BTreeSet::from(["b".to_owned()])),
        ("b".to_owned(), BTreeSet::from(["a".to_owned()])),
    ]);
    assert!(levels(&cyclic).is_err());
    let across = BTreeMap::from([
        ("audit::periodic".to_owned(), BTreeSet::from(["events".to_owned()])),
        ("events".to_owned(), BTreeSet::from(["audit::states".to_owned()])),
        ("audit::states".to_owned(), BTreeSet::new()),
    ]);
    assert!(levels(&across).is_ok(), "no cycle between modules");
    assert!(levels(&feature_graph(&across)).is_err(), "a cycle between features");
    let chain = BTreeMap::from([("a".to_owned(), BTreeSet::from(["b".to_owned()])), ("b".to_owned(), BTreeSet::new())]);
    assert_eq!(levels(&chain).unwrap()["a"], 2);
}
