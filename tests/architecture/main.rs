//! The structure ARCHITECTURE.md and CONTRIBUTING.md describe, checked where the compiler does
//! not check it, and read from the documents where they state it:
//!
//! - the decision core's crate depends on no Kubernetes client, async runtime or DNS library, even
//!   indirectly;
//! - the modules of the shell and of the core import each other in no cycle and at most six levels
//!   deep, and their features (top-level modules) in no cycle either;
//! - every module of the shell sits in a row of ARCHITECTURE.md's layer table and imports only what
//!   its row says it may;
//! - outside `kubernetes/`, only the files ARCHITECTURE.md names use the Kubernetes client crates;
//! - every path CONTRIBUTING.md's layout names exists, and every Rust file ARCHITECTURE.md,
//!   CONTRIBUTING.md and docs/ name;
//! - ARCHITECTURE.md's map names every crate and folder, and its path of one CSR is a chain of
//!   calls the code makes (see [`map`]);
//! - no Rust file of the workspace holds more than 500 lines of code (see [`code_lines`]): a
//!   file that grows past it likely does two jobs.
//!
//! The imports are read in [`imports`], the documents in [`documents`].

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod documents;
mod imports;
mod map;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Crates the decision core must never depend on, directly or through another crate.
const FORBIDDEN_IN_CORE: [&str; 7] =
    ["kube", "kube-runtime", "k8s-openapi", "tokio", "hickory-resolver", "hyper", "axum"];
/// The most lines of code (see [`code_lines`]) a Rust file may hold.
const MAX_CODE_LINES: usize = 500;
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
