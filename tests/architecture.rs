//! The structure ARCHITECTURE.md and CONTRIBUTING.md describe, checked where the compiler does
//! not check it, and read from the documents where they state it:
//!
//! - the decision core's crate depends on no Kubernetes client, async runtime or DNS library, even
//!   indirectly;
//! - the modules of the shell and of the core import each other in no cycle and at most six levels
//!   deep;
//! - every module of the shell sits in a row of ARCHITECTURE.md's layer table and imports only what
//!   its row says it may;
//! - outside `kubernetes/`, only the files ARCHITECTURE.md names use the Kubernetes client crates;
//! - every path CONTRIBUTING.md's layout names exists, and every Rust file ARCHITECTURE.md,
//!   CONTRIBUTING.md and docs/ name;
//! - no Rust file of the workspace holds more than 500 lines of code (see [`code_lines`]): a
//!   file that grows past it likely does two jobs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Crates the decision core must never depend on, directly or through another crate.
const FORBIDDEN_IN_CORE: [&str; 7] =
    ["kube", "kube-runtime", "k8s-openapi", "tokio", "hickory-resolver", "hyper", "axum"];
/// The most lines of code (see [`code_lines`]) a Rust file may hold.
const MAX_CODE_LINES: usize = 500;
/// The deepest import level a crate's modules may reach (level 1 imports nothing of the crate).
const MAX_LEVELS: usize = 6;
/// The workspace's source folders (fuzz/ is built apart, by cargo-fuzz).
const SOURCE_DIRS: [&str; 10] =
    ["src", "core", "tests", "bench", "demo", "differential", "testdns", "testenv", "testkit", "fuzz"];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() && path.file_name().is_some_and(|name| name != "target") {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files
}

#[test]
fn the_decision_core_depends_on_no_io_crate() {
    let output = Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "--locked", "--offline", "-p", "node-csr-approver-core", "-e", "normal", "--prefix", "none"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let tree = String::from_utf8_lossy(&output.stdout);
    let crates: Vec<&str> = tree.lines().filter_map(|line| line.split_whitespace().next()).collect();
    assert!(crates.contains(&"x509-cert"), "the tree lists the core's dependencies: {tree}");
    for forbidden in FORBIDDEN_IN_CORE {
        assert!(!crates.contains(&forbidden), "the decision core depends on {forbidden}:\n{tree}");
    }
}

/// The lines of code of a Rust file: lines that are neither blank nor only a comment (`//`,
/// `///`, `//!`), outside the modules compiled only for tests (a `#[cfg(test)]` line followed by
/// `mod name {`, or `pub(…) mod name {`, up to the first `}` that starts a line, as rustfmt closes a
/// module of the file's top level). Tests in a file of their own are code of that file.
fn code_lines(text: &str) -> usize {
    let opens_module = |line: &str| {
        let declaration = line.strip_prefix("pub").map_or(line, |rest| rest.split_once(' ').map_or(rest, |(_, r)| r));
        declaration.starts_with("mod ") && line.ends_with('{')
    };
    let mut count = 0;
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line == "#[cfg(test)]" && lines.peek().is_some_and(|next| opens_module(next)) {
            lines.by_ref().find(|line| *line == "}");
            continue;
        }
        let line = line.trim();
        count += usize::from(!line.is_empty() && !line.starts_with("//"));
    }
    count
}

/// The files of `files` with more than [`MAX_CODE_LINES`] lines of code, each with its count.
fn over_limit(files: &[(PathBuf, String)]) -> Vec<String> {
    files
        .iter()
        .filter_map(|(file, text)| {
            let lines = code_lines(text);
            (lines > MAX_CODE_LINES).then(|| format!("{} has {lines} lines of code", file.display()))
        })
        .collect()
}

#[test]
fn no_rust_file_of_the_workspace_has_over_500_lines_of_code() {
    let files: Vec<(PathBuf, String)> = SOURCE_DIRS
        .iter()
        .flat_map(|dir| rust_files(&repo().join(dir)))
        .map(|file| {
            let text = read(&file);
            (file, text)
        })
        .collect();
    assert!(files.len() > 100, "{files:?}");
    let long = over_limit(&files);
    assert!(long.is_empty(), "at most {MAX_CODE_LINES} lines of code per file: {long:?}");
    let largest = files.iter().map(|(file, text)| (code_lines(text), file)).max().unwrap();
    eprintln!("the largest file, {}, has {} lines of code", largest.1.display(), largest.0);
}

#[test]
fn lines_of_code_leave_out_in_file_tests_comments_and_blank_lines() {
    let text = "//! A module.\n\nuse std::fmt;\n\n/// Doc.\nfn a() {\n    // why\n    b();\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() {}\n}\n\n#[cfg(test)]\npub(super) mod reading {\n    fn r() {}\n}\n";
    assert_eq!(code_lines(text), 4, "use, fn a, b(), the closing brace");
    // A `#[cfg(test)]` item that is not a module of its own is code.
    assert_eq!(code_lines("#[cfg(test)]\nfn only_in_tests() {}\n"), 2);
    let at_limit = "x();\n".repeat(MAX_CODE_LINES) + "#[cfg(test)]\nmod tests {\n" + &"t();\n".repeat(900) + "}\n";
    let over = format!("{at_limit}{}", "// c\n\n".repeat(900) + "y();\n");
    let files = [(PathBuf::from("at_limit.rs"), at_limit), (PathBuf::from("over.rs"), over)];
    assert_eq!(over_limit(&files), ["over.rs has 501 lines of code"]);
}

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
fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
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

#[test]
fn the_shell_and_the_core_import_in_no_cycle_and_at_most_six_levels_deep() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for src in [root.join("src"), root.join("core/src")] {
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
    let chain = BTreeMap::from([("a".to_owned(), BTreeSet::from(["b".to_owned()])), ("b".to_owned(), BTreeSet::new())]);
    assert_eq!(levels(&chain).unwrap()["a"], 2);
}

/// The section of `document` under the heading `heading`, up to the next heading of its level.
fn section<'a>(document: &'a str, heading: &str) -> &'a str {
    let start = document.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("no {heading:?}"));
    let rest = &document[start + heading.len() + 2..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

/// The texts between backticks in `text`.
fn quoted(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// `text` without what it says in parentheses (the descriptions of the layer table's modules).
fn outside_parentheses(text: &str) -> String {
    let mut depth = 0_usize;
    text.chars()
        .filter(|c| {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ => return depth == 0,
            }
            false
        })
        .collect()
}

/// The module a path of the layer table names: `kubernetes::leader` for `kubernetes/leader.rs`
/// and for the folder `kubernetes/leader/`, `lib` for `lib.rs`.
fn module_named(path: &str) -> String {
    path.trim_end_matches('/').trim_end_matches(".rs").replace('/', "::")
}

/// One row of the layer table: its level, the modules it places there (a file with its folder's
/// modules, unless the table places them apart), and what they may import of the crate.
#[derive(Debug)]
struct Row {
    level: usize,
    modules: Vec<String>,
    /// "none" (nothing), "the core" (the crate root, `lib`, which re-exports it), "levels 1–N",
    /// "everything" (what sits lower), and modules named by their files; without what it says in
    /// parentheses.
    may_import: String,
}

/// The rows of ARCHITECTURE.md's layer table of the shell.
fn layer_table(architecture: &str) -> Vec<Row> {
    let layers = section(architecture, "## Layers and what each may import");
    let table = layers.split("\n| level (shell) |").nth(1).expect("the shell's layer table");
    table
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            let [level, modules, may_import] = cells[..] else { panic!("a row of three cells: {line}") };
            let modules = quoted(&outside_parentheses(modules))
                .into_iter()
                .filter(|path| path.ends_with(".rs") || path.ends_with('/'))
                .map(module_named)
                .collect();
            Row { level: level.parse().unwrap(), modules, may_import: outside_parentheses(may_import) }
        })
        .collect()
}

/// Where the table places `module`: the row naming it or its nearest ancestor, and that name.
fn placed<'a>(rows: &'a [Row], module: &str) -> Option<(&'a Row, &'a str)> {
    rows.iter()
        .flat_map(|row| row.modules.iter().map(move |named| (row, named.as_str())))
        .filter(|(_, named)| module == *named || module.starts_with(&format!("{named}::")))
        .max_by_key(|(_, named)| named.len())
}

/// Whether a module of `row` may import `imported`, placed in `imported_row` (a module's own
/// group, and its parent when that sits no higher, aside).
fn may_import(row: &Row, imported: &str, imported_row: &Row) -> bool {
    let rule = row.may_import.as_str();
    let named = quoted(rule)
        .into_iter()
        .map(module_named)
        .any(|module| imported == module || imported.starts_with(&format!("{module}::")));
    let up_to = rule.split_once("levels 1–").map(|(_, n)| n.trim_end_matches(|c: char| !c.is_ascii_digit()));
    let up_to: Option<usize> = up_to.map(|n| n.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap());
    imported_row.level < row.level
        && (named
            || rule.contains("everything")
            || (rule.contains("the core") && imported == "lib")
            || up_to.is_some_and(|top| imported_row.level <= top))
}

#[test]
fn the_shell_imports_as_the_layer_table_of_architecture_md_says() {
    let rows = layer_table(&read(&repo().join("ARCHITECTURE.md")));
    assert!(rows.len() >= 5 && rows.iter().enumerate().all(|(i, row)| row.level == i + 1), "{rows:#?}");
    let src = repo().join("src");
    for row in &rows {
        for module in &row.modules {
            let path = src.join(module.replace("::", "/"));
            assert!(
                path.with_extension("rs").is_file() || path.is_dir(),
                "the layer table places {module} at level {}, but src/ has no such module",
                row.level
            );
        }
    }
    let graph = import_graph(&src);
    let mut wrong = Vec::new();
    for (module, imports) in &graph {
        let Some((row, group)) = placed(&rows, module) else {
            wrong.push(format!("{module} is in no row of the layer table"));
            continue;
        };
        for imported in imports {
            let Some((imported_row, imported_group)) = placed(&rows, imported) else { continue };
            let parent = module.starts_with(&format!("{imported}::")) && imported_row.level <= row.level;
            if group != imported_group && !parent && !may_import(row, imported, imported_row) {
                wrong.push(format!(
                    "{module} (level {}, may import {}) imports {imported} (level {})",
                    row.level, row.may_import, imported_row.level
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "ARCHITECTURE.md's layer table is not what src/ does:\n{}", wrong.join("\n"));
}

/// The files of `src/` outside `kubernetes/` whose code names the Kubernetes client crates.
fn kubernetes_client_users(src: &Path) -> BTreeSet<String> {
    rust_files(src)
        .into_iter()
        .filter(|file| !file.starts_with(src.join("kubernetes")) && file != &src.join("kubernetes.rs"))
        .filter(|file| {
            read(file)
                .lines()
                .map(|line| line.split("//").next().unwrap())
                .any(|code| code.contains("kube::") || code.contains("k8s_openapi::"))
        })
        .map(|file| file.strip_prefix(src).unwrap().to_str().unwrap().to_owned())
        .collect()
}

#[test]
fn outside_kubernetes_only_the_files_architecture_md_names_use_the_kubernetes_client() {
    let architecture = read(&repo().join("ARCHITECTURE.md"));
    let layers = section(&architecture, "## Layers and what each may import");
    let claim = layers.split("Outside `kubernetes/`, only ").nth(1).expect("the statement on the client's users");
    let claim = &claim[..claim.find(" themselves").expect("the end of the statement")];
    let named: BTreeSet<String> =
        quoted(claim).into_iter().filter(|path| path.ends_with(".rs")).map(str::to_owned).collect();
    assert_eq!(named, kubernetes_client_users(&repo().join("src")), "ARCHITECTURE.md: {claim}");
}

#[test]
fn every_path_of_contributing_md_s_layout_exists() {
    let contributing = read(&repo().join("CONTRIBUTING.md"));
    let layout = contributing.split("\nLayout: ").nth(1).expect("the layout paragraph");
    let layout = &layout[..layout.find("\n\n").unwrap_or(layout.len())];
    let paths: Vec<&str> =
        quoted(layout).into_iter().filter(|text| text.contains('/') || text.ends_with(".rs")).collect();
    assert!(paths.len() > 10, "{paths:?}");
    for path in paths {
        assert!(repo().join(path).exists(), "CONTRIBUTING.md's layout names {path}, which does not exist");
    }
}

/// The workspace's files, as paths from its root (`target/` and `.git/` left out).
fn workspace_files(dir: &Path, files: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap();
        if path.is_dir() && name != "target" && name != ".git" {
            workspace_files(&path, files);
        } else if path.is_file() {
            files.push(path.strip_prefix(repo()).unwrap().to_str().unwrap().to_owned());
        }
    }
}

/// Every Rust file ARCHITECTURE.md, CONTRIBUTING.md and docs/ name between backticks exists: a
/// name is read from wherever its text places it (`core/src/policy/report.rs`, `leader/fence.rs`,
/// `step.rs`), so it must end the path of a file of the workspace.
#[test]
fn every_rust_file_the_documents_name_exists() {
    let mut files = Vec::new();
    workspace_files(repo(), &mut files);
    let mut documents = vec![repo().join("ARCHITECTURE.md"), repo().join("CONTRIBUTING.md")];
    documents.extend(std::fs::read_dir(repo().join("docs")).unwrap().map(|entry| entry.unwrap().path()));
    let mut missing = Vec::new();
    for document in documents.iter().filter(|path| path.extension().is_some_and(|ext| ext == "md")) {
        let text = read(document);
        for name in quoted(&text).into_iter().filter(|name| name.ends_with(".rs") && !name.contains([' ', '*'])) {
            if !files.iter().any(|file| file == name || file.ends_with(&format!("/{name}"))) {
                missing.push(format!("{}: {name}", document.display()));
            }
        }
    }
    assert!(documents.len() > 5 && files.len() > 200, "{documents:?}");
    assert!(missing.is_empty(), "the documents name Rust files that do not exist: {missing:#?}");
}
