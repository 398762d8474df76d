//! The image `scripts/build-image.sh` builds without Docker against the Dockerfile's final stage:
//! the same file at the same path, the same user and entrypoint, no shell; the same bytes from the
//! same binary; and a real containerd imports it under the name the chart's default values pull.
//!
//! The binary is `$NODE_CSR_APPROVER_BIN` (scripts/test.sh sets it to the static one), else the
//! one `scripts/check-static-binary.sh` builds. The containerd test needs root, `containerd` and
//! `ctr` (Debian's `containerd` package), and says why it skips without them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod archive;
mod containerd;
mod dockerfile;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use archive::{Entry, Image, digest, run};
use dockerfile::{FinalStage, final_stage};
use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The static binary the image carries.
fn binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| match std::env::var_os(testkit::approver::BINARY_ENV) {
        Some(path) => PathBuf::from(path),
        None => {
            let stdout = run(&mut Command::new(root().join("scripts/check-static-binary.sh")));
            PathBuf::from(String::from_utf8(stdout).unwrap().lines().last().unwrap())
        }
    })
}

/// Builds the archive at `output` with the real script and returns the path it printed.
fn build(output: &Path) -> PathBuf {
    let stdout = run(Command::new(root().join("scripts/build-image.sh"))
        .arg("--binary")
        .arg(binary())
        .arg("--output")
        .arg(output));
    let printed = PathBuf::from(String::from_utf8(stdout).unwrap().lines().last().unwrap());
    assert_eq!(printed, output.canonicalize().unwrap(), "the last line of stdout is the archive");
    printed
}

/// The name the chart's default values pull: `image.repository`, then the chart's appVersion.
fn chart_image() -> String {
    let chart = root().join("charts/node-csr-approver");
    let read =
        |file: &str| -> Value { serde_saphyr::from_str(&std::fs::read_to_string(chart.join(file)).unwrap()).unwrap() };
    let (metadata, values) = (read("Chart.yaml"), read("values.yaml"));
    assert_eq!(values["image"]["tag"], "", "the default tag is the appVersion");
    format!("{}:{}", values["image"]["repository"].as_str().unwrap(), metadata["appVersion"].as_str().unwrap())
}

/// Everything in which `image` differs from what `stage` makes of a distroless static base.
fn disagreements(stage: &FinalStage, image: &Image, binary: &[u8]) -> Vec<String> {
    let mut problems = Vec::new();
    if !stage.base.starts_with("gcr.io/distroless/static") {
        problems.push(format!(
            "the final stage is FROM {}: scripts/build-image.sh stands in for distroless static only (see its header)",
            stage.base
        ));
    }
    let config = &image.config["config"];
    let strings = |value: &Value| {
        value.as_array().map(|items| items.iter().map(|item| item.as_str().unwrap().to_owned()).collect())
    };
    let user = config["User"].as_str().map(str::to_owned);
    if user != stage.user {
        problems.push(format!("USER {:?} in the Dockerfile, {user:?} in the image", stage.user));
    }
    let entrypoint: Option<Vec<String>> = strings(&config["Entrypoint"]);
    if entrypoint != stage.entrypoint {
        problems.push(format!("ENTRYPOINT {:?} in the Dockerfile, {entrypoint:?} in the image", stage.entrypoint));
    }
    let cmd: Option<Vec<String>> = strings(&config["Cmd"]);
    if cmd != stage.cmd {
        problems.push(format!("CMD {:?} in the Dockerfile, {cmd:?} in the image", stage.cmd));
    }
    if let Some(key) = ["Shell", "WorkingDir", "Volumes", "ExposedPorts"].iter().find(|key| !config[**key].is_null()) {
        problems.push(format!("the image config sets {key}, which the Dockerfile does not: {config}"));
    }
    // The layer holds the copied file and the directories leading to it, owned by root as COPY
    // without --chown leaves them: no shell or anything else.
    let destination = stage.copy_destination.trim_start_matches('/');
    let components: Vec<&str> = destination.split('/').collect();
    let mut expected: Vec<Entry> = (1..components.len())
        .map(|depth| Entry {
            mode: "drwxr-xr-x".to_owned(),
            owner: "0/0".to_owned(),
            path: format!("{}/", components[..depth].join("/")),
        })
        .collect();
    expected.push(Entry { mode: "-rwxr-xr-x".to_owned(), owner: "0/0".to_owned(), path: destination.to_owned() });
    if image.entries != expected {
        problems.push(format!("the layer holds {:?}, the Dockerfile copies {:?}", image.entries, expected));
    }
    if std::fs::read(image.rootfs.join(destination)).ok().as_deref() != Some(binary) {
        problems.push(format!("{} in the image is not the binary's bytes", stage.copy_destination));
    }
    problems
}

#[test]
fn the_image_is_laid_out_as_the_dockerfiles_final_stage() {
    let dir = tempfile::tempdir().unwrap();
    let archive = build(&dir.path().join("image.tar"));
    let image = archive::open(&archive, &dir.path().join("open"));
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let stage = final_stage(&dockerfile).unwrap_or_else(|e| panic!("the Dockerfile's final stage: {e}"));
    let binary = std::fs::read(binary()).unwrap();
    let problems = disagreements(&stage, &image, &binary);
    assert!(problems.is_empty(), "scripts/build-image.sh and the Dockerfile disagree:\n{}", problems.join("\n"));
    assert!(!image.rootfs.join("bin/sh").exists());
    assert_eq!(image.config["os"], "linux");
    let architecture = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    assert_eq!(image.config["architecture"], architecture);
    let annotations = &image.descriptor["annotations"];
    let name = chart_image();
    assert_eq!(annotations["io.containerd.image.name"], name.as_str(), "{annotations}");
    assert_eq!(annotations["org.opencontainers.image.ref.name"], name.rsplit(':').next().unwrap(), "{annotations}");

    // The comparison holds the Dockerfile: each of these edits makes it fail.
    for (from, to) in [
        ("USER 65532:65532", "USER 65533:65532"),
        ("ENTRYPOINT [\"/node-csr-approver\"]", "ENTRYPOINT [\"/node-csr-approver\", \"--log-format\", \"json\"]"),
        ("ENTRYPOINT [\"/node-csr-approver\"]", "ENTRYPOINT [\"/node-csr-approver\"]\nCMD [\"--help\"]"),
        ("/node-csr-approver /node-csr-approver", "/node-csr-approver /usr/bin/node-csr-approver"),
        ("FROM gcr.io/distroless/static-debian12:nonroot", "FROM docker.io/library/alpine:3.22"),
    ] {
        assert!(dockerfile.contains(from), "the Dockerfile no longer has {from}: update this test");
        let edited = final_stage(&dockerfile.replace(from, to)).unwrap();
        assert!(!disagreements(&edited, &image, &binary).is_empty(), "{to} went unnoticed");
    }
    for (from, to) in [
        ("USER 65532:65532", "USER 65532:65532\nWORKDIR /home/nonroot"),
        ("ENTRYPOINT [\"/node-csr-approver\"]", "ENTRYPOINT /node-csr-approver"),
        ("COPY --from=build", "COPY --chown=65532 --from=build"),
    ] {
        assert!(final_stage(&dockerfile.replace(from, to)).is_err(), "{to} went unnoticed");
    }
}

#[test]
fn the_image_archive_is_reproducible() {
    let dir = tempfile::tempdir().unwrap();
    let first = std::fs::read(build(&dir.path().join("first.tar"))).unwrap();
    let second = std::fs::read(build(&dir.path().join("again/second.tar"))).unwrap();
    assert_eq!(digest(&first), digest(&second), "two builds of the same binary differ");
}

#[test]
fn containerd_imports_the_image_under_the_charts_name() {
    if let Some(reason) = containerd::unavailable() {
        // Straight to stderr, past the test harness's capture: a skip must be seen.
        writeln!(std::io::stderr(), "SKIPPED containerd_imports_the_image_under_the_charts_name: {reason}").unwrap();
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let archive = build(&dir.path().join("image.tar"));
    let containerd = containerd::Containerd::start();
    let state = containerd.dir().to_owned();
    let output = containerd.ctr().args(["images", "import"]).arg(&archive).output().unwrap();
    assert!(
        output.status.success(),
        "ctr images import: {}\n{}",
        String::from_utf8_lossy(&output.stderr),
        containerd.log()
    );
    let listed = String::from_utf8(run(containerd.ctr().args(["images", "ls", "--quiet"]))).unwrap();
    assert_eq!(listed.lines().collect::<Vec<_>>(), [chart_image()], "ctr images ls");
    // Unpacked for the default snapshotter, as a kubelet's pod would need it.
    let snapshots = String::from_utf8(run(containerd.ctr().args(["snapshots", "ls"]))).unwrap();
    let image = archive::open(&archive, &dir.path().join("open"));
    let diff_id = image.config["rootfs"]["diff_ids"][0].as_str().unwrap();
    assert!(
        snapshots.lines().any(|line| line.starts_with(diff_id)),
        "no snapshot of the layer {diff_id}:\n{snapshots}"
    );
    drop(containerd);
    assert_eq!(containerd::mounts_under(&state), Vec::<PathBuf>::new(), "containerd left mounts behind");
    assert!(!state.exists(), "{} was not removed", state.display());
}
