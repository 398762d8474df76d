//! The layering ARCHITECTURE.md describes, checked where the compiler does not check it: the
//! decision core's crate depends on no Kubernetes client, async runtime or DNS library, even
//! indirectly, and no Rust file of the workspace outgrows 400 lines.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Crates the decision core must never depend on, directly or through another crate.
const FORBIDDEN_IN_CORE: [&str; 7] =
    ["kube", "kube-runtime", "k8s-openapi", "tokio", "hickory-resolver", "hyper", "axum"];
const MAX_LINES: usize = 400;
/// The workspace's source folders (fuzz/ is built apart, by cargo-fuzz).
const SOURCE_DIRS: [&str; 10] =
    ["src", "core", "tests", "bench", "demo", "differential", "testdns", "testenv", "testkit", "fuzz"];

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

#[test]
fn no_rust_file_of_the_workspace_is_over_400_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files: Vec<PathBuf> = SOURCE_DIRS.iter().flat_map(|dir| rust_files(&root.join(dir))).collect();
    assert!(files.len() > 100, "{files:?}");
    let long: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let lines = std::fs::read_to_string(file).unwrap().lines().count();
            (lines > MAX_LINES).then(|| format!("{} has {lines} lines", file.display()))
        })
        .collect();
    assert!(long.is_empty(), "at most {MAX_LINES} lines per file: {long:?}");
}
