//! What a release is made of, checked without the network: the workflows pass actionlint (with
//! shellcheck on their scripts) and it fails on seeded defects; a release's notes are
//! CHANGELOG.md's section of the chart's version; the chart's Artifact Hub metadata, its default
//! image, the README and the release workflow name the same published image.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The workflow files.
fn workflows() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(root().join(".github/workflows")).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files
}

/// actionlint's verdict on `files`: Ok, or Err with its report. shellcheck must be there: without
/// it actionlint would pass over every `run:` script.
fn actionlint(files: &[PathBuf]) -> Result<(), String> {
    let shellcheck = Command::new("shellcheck").arg("--version").output();
    assert!(
        shellcheck.is_ok_and(|o| o.status.success()),
        "shellcheck is missing: apt-get install shellcheck (scripts/test.sh installs it as root)"
    );
    let tool = testenv::tools_dir().unwrap().join("actionlint");
    let out = Command::new(&tool).args(["-shellcheck", "shellcheck", "-no-color"]).args(files).output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }
}

#[test]
fn the_workflows_pass_actionlint_and_it_fails_on_seeded_defects() {
    let files = workflows();
    let names: Vec<String> = files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["ci.yml", "release.yml"]);
    actionlint(&files).unwrap();

    let release = read(".github/workflows/release.yml");
    let dir = tempfile::tempdir().unwrap();
    let defects = [
        // A key no job has.
        ("    runs-on: ubuntu-24.04\n", "    runs-on: ubuntu-24.04\n    run-on: ubuntu-24.04\n", "unexpected key"),
        // An output of a step that does not exist.
        ("steps.image.outputs.digest }}\n", "steps.imagee.outputs.digest }}\n", "imagee"),
        // A variable left unquoted in a script (shellcheck SC2086).
        ("--destination \"${RUNNER_TEMP}/chart\"", "--destination ${RUNNER_TEMP}/chart", "SC2086"),
    ];
    for (from, to, finding) in defects {
        assert!(release.contains(from), "release.yml no longer contains {from:?}");
        let seeded = dir.path().join("release.yml");
        std::fs::write(&seeded, release.replacen(from, to, 1)).unwrap();
        let report = actionlint(&[seeded]).expect_err(&format!("actionlint passed {to:?}"));
        assert!(report.contains(finding), "want {finding}:\n{report}");
    }
}

#[test]
fn ci_runs_the_readmes_test_command_and_release_runs_on_version_tags_only() {
    let ci = read(".github/workflows/ci.yml");
    assert!(ci.contains("bash scripts/test.sh"), "ci.yml must run scripts/test.sh");
    let release = read(".github/workflows/release.yml");
    assert!(
        release.contains("on:\n  push:\n    tags: [\"v[0-9]+.[0-9]+.[0-9]+\"]\n\n"),
        "release.yml runs on tags only"
    );
    for step in
        ["cosign\" sign --yes", "cosign\" attest --yes --type cyclonedx", "attest-build-provenance", "helm\" push"]
    {
        assert!(release.contains(step), "release.yml lacks {step}");
    }
}

/// Runs scripts/release-notes.sh with `args`: Ok(stdout) or Err(stderr).
fn release_notes(args: &[&str]) -> Result<String, String> {
    let out = Command::new("bash").arg(root().join("scripts/release-notes.sh")).args(args).output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A field of Chart.yaml's top level.
fn chart_field(field: &str) -> String {
    let chart = read("charts/node-csr-approver/Chart.yaml");
    let line = chart.lines().find_map(|l| l.strip_prefix(&format!("{field}: "))).unwrap();
    line.trim_matches('"').to_owned()
}

#[test]
fn the_release_notes_are_changelogs_section_of_the_charts_version() {
    let version = chart_field("version");
    assert_eq!(chart_field("appVersion"), version, "a release tag names both");
    let notes = release_notes(&["--check-chart", &version]).unwrap();
    let changelog = read("CHANGELOG.md");
    let section = changelog.split(&format!("## [{version}]\n")).nth(1).unwrap();
    assert!(!notes.trim().is_empty() && section.starts_with(&format!("\n{}", notes.trim_end())), "{notes}");
    assert!(!notes.contains("## ["), "the notes stop at the next release: {notes}");

    let error = release_notes(&["99.0.0"]).unwrap_err();
    assert!(error.contains("no section '## [99.0.0]'"), "{error}");
    let error = release_notes(&["--check-chart", "99.0.0"]).unwrap_err();
    assert!(error.contains(&format!("Chart.yaml's version is '{version}', not 99.0.0")), "{error}");
    let error = release_notes(&["1.0"]).unwrap_err();
    assert!(error.contains("not a semantic version"), "{error}");
}

#[test]
fn the_chart_readme_and_release_name_the_same_published_image() {
    let registry = read(".github/workflows/release.yml")
        .lines()
        .find_map(|l| l.trim().strip_prefix("REGISTRY: ").map(str::to_owned))
        .unwrap();
    let image = format!("{registry}/node-csr-approver");
    let values = read("charts/node-csr-approver/values.yaml");
    assert!(values.contains(&format!("\n  repository: {image}\n")), "values.yaml's image.repository is not {image}");
    let chart = read("charts/node-csr-approver/Chart.yaml");
    let version = chart_field("appVersion");
    assert!(
        chart.contains(&format!("      image: {image}:{version}\n")),
        "artifacthub.io/images names {image}:{version}"
    );
    assert!(
        chart.contains("artifacthub.io/changes: |\n    - kind: "),
        "artifacthub.io/changes lists this version's changes"
    );
    let readme = read("README.md");
    assert!(
        readme.contains(&format!("oci://{registry}/charts/node-csr-approver --version {version}")),
        "README installs {version}"
    );
    assert!(readme.contains("cosign verify") && readme.contains(&image), "README verifies {image}");
}
