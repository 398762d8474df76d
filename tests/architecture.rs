//! The layering ARCHITECTURE.md describes, checked on the source: the decision core imports no
//! I/O module, and no file under `src/` outgrows 400 lines.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// Paths the decision core must never name.
const FORBIDDEN_IN_POLICY: [&str; 9] = [
    "crate::dns",
    "crate::cluster",
    "crate::machines",
    "crate::config",
    "crate::controller",
    "crate::connect",
    "kube::",
    "hickory",
    "tokio",
];
const MAX_LINES: usize = 400;

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_decision_core_imports_no_io_module() {
    let mut files = rust_files(&src().join("policy"));
    files.push(src().join("policy.rs"));
    assert!(files.len() > 5, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for forbidden in FORBIDDEN_IN_POLICY {
                assert!(
                    !code.contains(forbidden),
                    "{}:{}: {forbidden} in the decision core: {line}",
                    file.display(),
                    number + 1
                );
            }
        }
    }
}

#[test]
fn no_source_file_is_over_400_lines() {
    let files = rust_files(&src());
    assert!(files.len() > 20, "{files:?}");
    for file in files {
        let lines = std::fs::read_to_string(&file).unwrap().lines().count();
        assert!(lines <= MAX_LINES, "{} has {lines} lines, at most {MAX_LINES}", file.display());
    }
}
