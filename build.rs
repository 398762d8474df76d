//! Gives `--version` the commit the binary was built from and its target: `NODE_CSR_APPROVER_COMMIT`
//! when set (a build without `.git`, such as the Dockerfile's, passes it), else `git rev-parse HEAD`
//! of the source tree, else `unknown` (a source tarball without git). Only git's own files of this
//! tree are read: no network.

use std::path::PathBuf;
use std::process::Command;

/// How many hexadecimal digits of the commit `--version` shows.
const SHORT: usize = 12;

fn main() {
    println!("cargo:rerun-if-env-changed=NODE_CSR_APPROVER_COMMIT");
    let commit = match std::env::var("NODE_CSR_APPROVER_COMMIT") {
        Ok(commit) if !commit.is_empty() => commit,
        _ => git_commit().unwrap_or_else(|| "unknown".to_owned()),
    };
    let commit: String = commit.chars().take(SHORT).collect();
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=NODE_CSR_APPROVER_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=NODE_CSR_APPROVER_BUILD_TARGET={target}");
}

/// Runs `git -C <this package> ARGS` and returns its trimmed stdout when it succeeds.
fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let output = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

/// The commit HEAD names, when this is a git work tree; asks cargo to run this script again when
/// this work tree's HEAD moves: its HEAD file, its reflog (a commit, reset or checkout appends to it)
/// and the branch's own ref file, never the other branches' refs.
fn git_commit() -> Option<String> {
    let commit = git(&["rev-parse", "--verify", "HEAD"])?;
    let git_path = |name: &str| git(&["rev-parse", "--path-format=absolute", "--git-path", name]).map(PathBuf::from);
    let mut watched = vec!["HEAD".to_owned(), "logs/HEAD".to_owned()];
    watched.extend(git(&["symbolic-ref", "--quiet", "HEAD"]));
    for path in watched.iter().filter_map(|name| git_path(name)).filter(|path| path.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    Some(commit)
}
