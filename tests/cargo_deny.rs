//! cargo-deny's licenses, bans and sources checks (deny.toml, run by scripts/cargo-deny.sh as
//! scripts/test.sh does) pass on the workspace, and each fails on a seeded defect: a license no
//! longer allowed, a crate of the tree banned, crates.io no longer an allowed source.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs scripts/cargo-deny.sh with `args`; returns whether it passed and its combined output.
fn cargo_deny(args: &[&str]) -> (bool, String) {
    let out = Command::new("bash").arg(root().join("scripts/cargo-deny.sh")).args(args).output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// deny.toml with `from` replaced by `to` (which must occur), written into `dir`.
fn seeded(dir: &Path, from: &str, to: &str) -> String {
    let text = std::fs::read_to_string(root().join("deny.toml")).unwrap();
    assert!(text.contains(from), "deny.toml no longer contains {from:?}");
    let path = dir.join(format!("deny-{}.toml", text.len() + to.len()));
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    path.display().to_string()
}

#[test]
fn licenses_bans_and_sources_pass_and_each_fails_on_a_seeded_defect() {
    let (passed, output) = cargo_deny(&[]);
    assert!(passed, "{output}");
    assert!(output.contains("bans ok, licenses ok, sources ok"), "{output}");

    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("licenses FAILED", seeded(dir.path(), "\n  \"Unicode-3.0\",", "")),
        ("bans FAILED", seeded(dir.path(), "deny = [", "deny = [{ crate = \"serde_json\", reason = \"seeded\" },")),
        (
            "sources FAILED",
            seeded(
                dir.path(),
                "allow-registry = [\"https://github.com/rust-lang/crates.io-index\"]",
                "allow-registry = []",
            ),
        ),
    ];
    for (verdict, config) in cases {
        let (passed, output) =
            cargo_deny(&["--config", &config, "check", "--hide-inclusion-graph", "licenses", "bans", "sources"]);
        assert!(!passed && output.contains(verdict), "{config}: want {verdict}:\n{output}");
    }
}
