//! The statements ARCHITECTURE.md, CONTRIBUTING.md and docs/ make about the structure, read from
//! them and held to the tree.

use std::collections::BTreeSet;
use std::path::Path;

use super::imports::import_graph;
use super::{read, repo, rust_files};

/// The section of `document` under the heading `heading`, up to the next heading of its level.
pub(super) fn section<'a>(document: &'a str, heading: &str) -> &'a str {
    let start = document.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("no {heading:?}"));
    let rest = &document[start + heading.len() + 2..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

/// The texts between backticks in `text`.
pub(super) fn quoted(text: &str) -> Vec<&str> {
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

/// The files of `src/` outside `kubernetes/` whose code names the Kubernetes client crates (their
/// test modules left out).
fn kubernetes_client_users(src: &Path) -> BTreeSet<String> {
    rust_files(src)
        .into_iter()
        .filter(|file| !file.starts_with(src.join("kubernetes")) && file != &src.join("kubernetes.rs"))
        .filter(|file| {
            let text = read(file);
            text.split("#[cfg(test)]\nmod tests")
                .next()
                .unwrap_or_default()
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
