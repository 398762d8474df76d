//! The multi-architecture image `scripts/build-image.sh` builds without Docker, against the
//! Dockerfile: per platform the same Rust target, jemalloc page size and cargo-auditable build, the
//! same file at the same path, the same user and entrypoint, no shell; the standard OCI annotations;
//! the same digest from the same binaries; an SBOM per architecture; each binary run here (the
//! arm64 one under QEMU) on the committed examples; and a real containerd imports the image under
//! the name the chart's default values pull.
//!
//! The binaries are `$NODE_CSR_APPROVER_BIN` and `$NODE_CSR_APPROVER_BIN_ARM64` (scripts/test.sh
//! sets both), else the ones `scripts/check-static-binary.sh` builds; the image and its SBOMs are
//! `$NODE_CSR_APPROVER_IMAGE_LAYOUT` and `$NODE_CSR_APPROVER_SBOM_DIR` (scripts/test.sh builds them
//! once), else built here. The containerd test needs root, `containerd` and `ctr` (Debian's
//! `containerd` package), and says why it skips without them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod binaries;
mod containerd;
mod dockerfile;
mod layout;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use binaries::{ARCHES, Arch, elf_section};
use dockerfile::{FinalStage, build_stage, final_stage};
use layout::{Entry, Image, Layout, run};
use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn dockerfile() -> String {
    std::fs::read_to_string(root().join("Dockerfile")).unwrap()
}

/// Builds the image into `layout` (and its archive at `archive`, when given) with the real script
/// and returns the path it printed.
fn build(layout: &Path, archive: Option<&Path>, extra: &[&str]) -> PathBuf {
    let mut command = Command::new(root().join("scripts/build-image.sh"));
    for arch in ARCHES {
        command.arg(format!("--binary-{}", arch.oci)).arg(arch.binary());
    }
    command.arg("--layout").arg(layout).args(extra);
    if let Some(archive) = archive {
        command.arg("--output").arg(archive);
    }
    let stdout = run(&mut command);
    let printed = PathBuf::from(String::from_utf8(stdout).unwrap().lines().last().unwrap());
    assert_eq!(printed, layout.canonicalize().unwrap(), "the last line of stdout is the layout");
    printed
}

/// The image layout and the directory of its SBOMs: scripts/test.sh's, else one built here once.
fn built() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        if let (Some(layout), Some(sboms)) =
            (std::env::var_os("NODE_CSR_APPROVER_IMAGE_LAYOUT"), std::env::var_os("NODE_CSR_APPROVER_SBOM_DIR"))
        {
            return (PathBuf::from(layout), PathBuf::from(sboms));
        }
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("image");
        let layout = build(&dir.join("node-csr-approver"), None, &[]);
        (layout, dir)
    })
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

/// The image of `arch` in `layout`.
fn image<'a>(layout: &'a Layout, arch: &Arch) -> &'a Image {
    let found = layout.images.iter().find(|image| image.descriptor["platform"]["architecture"] == arch.oci);
    found.unwrap_or_else(|| panic!("no {} image in {}", arch.oci, layout.index))
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
fn each_platforms_image_is_laid_out_as_the_dockerfiles_final_stage() {
    let dir = tempfile::tempdir().unwrap();
    let layout = layout::open(&built().0, dir.path());
    let dockerfile = dockerfile();
    let stage = final_stage(&dockerfile).unwrap_or_else(|e| panic!("the Dockerfile's final stage: {e}"));
    let platforms: Vec<&Value> = layout.images.iter().map(|image| &image.descriptor["platform"]).collect();
    let expected: Vec<Value> =
        ARCHES.iter().map(|arch| serde_json::json!({"architecture": arch.oci, "os": "linux"})).collect();
    assert_eq!(platforms, expected.iter().collect::<Vec<_>>(), "the index's platforms");
    let name = chart_image();
    let names = &layout.descriptor["annotations"];
    assert_eq!(names["io.containerd.image.name"], name.as_str(), "{names}");
    assert_eq!(names["org.opencontainers.image.ref.name"], name.rsplit(':').next().unwrap(), "{names}");
    for arch in ARCHES {
        let image = image(&layout, &arch);
        let binary = std::fs::read(arch.binary()).unwrap();
        let problems = disagreements(&stage, image, &binary);
        assert!(
            problems.is_empty(),
            "{}: build-image.sh and the Dockerfile disagree:\n{}",
            arch.oci,
            problems.join("\n")
        );
        assert!(!image.rootfs.join("bin/sh").exists());
        assert_eq!((&image.config["os"], &image.config["architecture"]), (&"linux".into(), &arch.oci.into()));

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
            assert!(!disagreements(&edited, image, &binary).is_empty(), "{to} went unnoticed");
        }
    }
    for (from, to) in [
        ("USER 65532:65532", "USER 65532:65532\nWORKDIR /home/nonroot"),
        ("ENTRYPOINT [\"/node-csr-approver\"]", "ENTRYPOINT /node-csr-approver"),
        ("COPY --from=build", "COPY --chown=65532 --from=build"),
    ] {
        assert!(final_stage(&dockerfile.replace(from, to)).is_err(), "{to} went unnoticed");
    }
}

/// Everything in which the binaries differ from what the build stage of `dockerfile` builds.
fn build_disagreements(dockerfile: &str, facts: &BTreeMap<&str, BinaryFacts>) -> Vec<String> {
    let stage = build_stage(dockerfile).unwrap_or_else(|e| panic!("the Dockerfile's build stage: {e}"));
    let mut problems = Vec::new();
    let platforms: Vec<&str> = stage.targets.keys().map(String::as_str).collect();
    if platforms != facts.keys().copied().collect::<Vec<_>>() {
        problems.push(format!("the Dockerfile builds {platforms:?}, scripts/build-image.sh {:?}", facts.keys()));
    }
    for (oci, fact) in facts {
        if stage.targets.get(*oci).map(String::as_str) != Some(fact.target.as_str()) {
            problems.push(format!(
                "{oci}: the Dockerfile builds {:?}, the image's binary is {}",
                stage.targets.get(*oci),
                fact.target
            ));
        }
        // No flag: the build machine's page size, 4 KiB on both platforms' build machines.
        let page = 1u64 << stage.lg_page.get(*oci).copied().unwrap_or(12);
        if page != fact.page_size {
            problems.push(format!(
                "{oci}: the Dockerfile builds jemalloc for {page}-byte pages, the image's for {}",
                fact.page_size
            ));
        }
    }
    let tool = std::fs::read_to_string(root().join("scripts/cargo-tool.sh")).unwrap();
    let pinned = tool.split("[cargo-auditable]=").nth(1).and_then(|rest| rest.split_whitespace().next());
    if stage.auditable.as_deref() != pinned {
        problems.push(format!(
            "the Dockerfile builds with cargo-auditable {:?}, scripts/cargo-tool.sh pins {pinned:?}",
            stage.auditable
        ));
    }
    problems
}

/// What a binary says of itself when run.
struct BinaryFacts {
    /// The Rust target `--version` names.
    target: String,
    /// jemalloc's page size.
    page_size: u64,
}

#[test]
fn each_platforms_binary_is_built_as_the_dockerfiles_build_stage_builds_it() {
    let dir = tempfile::tempdir().unwrap();
    let layout = layout::open(&built().0, dir.path());
    let mut facts = BTreeMap::new();
    for arch in ARCHES {
        let binary = image(&layout, &arch).rootfs.join("node-csr-approver");
        let version = String::from_utf8(run(arch.command(&binary).arg("--version"))).unwrap();
        let target = version.trim().rsplit(", ").next().unwrap().trim_end_matches(')').to_owned();
        assert_eq!(target, arch.target, "{}: --version says {version}", arch.oci);
        facts.insert(arch.oci, BinaryFacts { target, page_size: arch.jemalloc_page_size(&binary) });
        // The dependency list cargo-auditable embeds: zlib-compressed JSON.
        let section = elf_section(&std::fs::read(&binary).unwrap(), ".dep-v0");
        let section = section.unwrap_or_else(|| panic!("{}: the binary has no .dep-v0 section", arch.oci));
        assert!(
            section.len() > 100 && section[0] == 0x78,
            "{}: .dep-v0 is not zlib data: {:?}",
            arch.oci,
            &section[..8]
        );
    }
    let dockerfile = dockerfile();
    let problems = build_disagreements(&dockerfile, &facts);
    assert!(problems.is_empty(), "the binaries and the Dockerfile's build stage disagree:\n{}", problems.join("\n"));

    // The comparison holds the Dockerfile: each of these edits makes it fail.
    for (from, to) in [
        ("arm64) echo aarch64-unknown-linux-musl ;;", "arm64) echo aarch64-unknown-linux-gnu ;;"),
        (
            "arm64) echo aarch64-unknown-linux-musl ;;",
            "arm64) echo aarch64-unknown-linux-musl ;; riscv64) echo riscv64gc-unknown-linux-musl ;;",
        ),
        ("JEMALLOC_SYS_WITH_LG_PAGE=16", "JEMALLOC_SYS_WITH_LG_PAGE=14"),
        ("= arm64 ]; then export JEMALLOC", "= amd64 ]; then export JEMALLOC"),
        ("cargo auditable build", "cargo build"),
        ("cargo-auditable@", "cargo-auditable@0."),
    ] {
        assert!(dockerfile.contains(from), "the Dockerfile no longer has {from}: update this test");
        assert!(!build_disagreements(&dockerfile.replace(from, to), &facts).is_empty(), "{to} went unnoticed");
    }
}

#[test]
fn the_index_and_each_manifest_carry_the_oci_annotations() {
    let dir = tempfile::tempdir().unwrap();
    let source = "https://example.com/node-csr-approver";
    let built = build(&dir.path().join("layout"), None, &["--source", source]);
    let layout = layout::open(&built, &dir.path().join("open"));
    let git = |args: &[&str]| String::from_utf8(run(Command::new("git").arg("-C").arg(root()).args(args))).unwrap();
    let epoch: i64 = git(&["log", "-1", "--format=%ct"]).trim().parse().unwrap();
    let created = jiff::Timestamp::from_second(epoch).unwrap().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let chart: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(root().join("charts/node-csr-approver/Chart.yaml")).unwrap())
            .unwrap();
    let expected = serde_json::json!({
        "org.opencontainers.image.title": "node-csr-approver",
        "org.opencontainers.image.version": chart["appVersion"],
        "org.opencontainers.image.licenses": env!("CARGO_PKG_LICENSE"),
        "org.opencontainers.image.revision": git(&["rev-parse", "HEAD"]).trim(),
        "org.opencontainers.image.source": source,
        "org.opencontainers.image.created": created,
    });
    assert_eq!(layout.index["annotations"], expected, "the image index");
    for image in &layout.images {
        assert_eq!(image.manifest["annotations"], expected, "{}", image.descriptor);
        assert_eq!(image.config["created"], created.as_str(), "{}", image.descriptor);
    }
}

#[test]
fn two_builds_give_the_same_index_digest() {
    let dir = tempfile::tempdir().unwrap();
    let first = layout::open(&built().0, &dir.path().join("first"));
    let again = build(&dir.path().join("again/layout"), Some(&dir.path().join("again/image.tar")), &[]);
    let second = layout::open(&again, &dir.path().join("second"));
    assert_eq!(first.descriptor["digest"], second.descriptor["digest"], "two builds of the same binaries differ");
    // The archive holds the same layout.
    let unpacked = layout::unpack(&dir.path().join("again/image.tar"), &dir.path().join("unpacked"));
    let third = layout::open(&unpacked, &dir.path().join("third"));
    assert_eq!(first.descriptor, third.descriptor, "the archive's index.json");
}

#[test]
fn each_architecture_has_an_sbom_of_its_binarys_dependencies() {
    let sboms = &built().1;
    for arch in ARCHES {
        let path = sboms.join(format!("sbom-{}.cdx.json", arch.oci));
        let sbom: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(sbom["bomFormat"], "CycloneDX", "{}", path.display());
        assert_eq!(sbom["metadata"]["component"]["name"], "node-csr-approver");
        let properties = sbom["metadata"]["properties"].as_array().unwrap();
        let triple = properties.iter().find(|property| property["name"] == "cdx:rustc:sbom:target:triple");
        assert_eq!(triple.map(|property| &property["value"]), Some(&arch.target.into()), "{}", path.display());
        let components: Vec<&str> = sbom["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|component| component["name"].as_str().unwrap())
            .collect();
        for linked in ["ring", "tikv-jemalloc-sys", "kube-client", "node-csr-approver-core"] {
            assert!(components.contains(&linked), "{}: no {linked} in {components:?}", path.display());
        }
        for dev_only in ["rcgen", "testkit", "testenv"] {
            assert!(!components.contains(&dev_only), "{}: the dev-dependency {dev_only} is listed", path.display());
        }
    }
}

/// The `| name | decision | reason |` rows of the examples table of docs/check.md.
fn documented_decisions() -> BTreeMap<String, (String, String)> {
    let text = std::fs::read_to_string(root().join("docs/check.md")).unwrap();
    let table = text.split("<!-- examples-decisions -->").nth(1).expect("docs/check.md marks the examples table");
    let rows = table.split("<!-- end -->").next().unwrap().lines().filter(|line| line.starts_with("| `"));
    rows.map(|line| {
        let cells: Vec<String> = line.split('|').map(|cell| cell.trim().trim_matches('`').to_owned()).collect();
        (cells[1].clone(), (cells[2].clone(), cells[3].clone()))
    })
    .collect()
}

/// Each binary, the arm64 one under QEMU, prints its version and decides the committed examples as
/// docs/check.md says: the cross build's C code (ring's signatures, jemalloc) and Rust code run.
#[test]
fn each_binary_runs_and_decides_the_examples_as_documented() {
    let documented = documented_decisions();
    assert_eq!(documented.len(), 7, "docs/check.md table rows: {documented:?}");
    for arch in ARCHES {
        let version = String::from_utf8(run(arch.command(arch.binary()).arg("--version"))).unwrap();
        let prefix = format!("node-csr-approver {} (commit ", env!("CARGO_PKG_VERSION"));
        assert!(
            version.starts_with(&prefix) && version.trim_end().ends_with(&format!(", {})", arch.target)),
            "{version}"
        );
        let mut check = arch.command(arch.binary());
        check.args(["check", "-o", "json", "--file"]).arg(root().join("examples/csrs.yaml"));
        check.arg("--objects").arg(root().join("examples/nodes.yaml"));
        check.args(["--provider-regex", testkit::policy::REGEX, "--provider-ip-prefixes", "10.0.0.0/16"]);
        check.args(["--bypass-dns-resolution", "--verify-node-addresses", "--now", "2026-01-01T00:01:00Z"]);
        let stdout = String::from_utf8(run(&mut check)).unwrap();
        let decided: BTreeMap<String, (String, String)> = stdout
            .lines()
            .map(|line| {
                let report: Value = serde_json::from_str(line).unwrap();
                let text = |key: &str| report[key].as_str().unwrap().to_owned();
                (text("name"), (text("decision"), text("reason")))
            })
            .collect();
        assert_eq!(decided, documented, "{}", arch.oci);
    }
}

#[test]
fn containerd_imports_the_image_under_the_charts_name() {
    if let Some(reason) = containerd::unavailable() {
        // Straight to stderr, past the test harness's capture: a skip must be seen.
        writeln!(std::io::stderr(), "SKIPPED containerd_imports_the_image_under_the_charts_name: {reason}").unwrap();
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("image.tar");
    build(&dir.path().join("layout"), Some(&archive), &[]);
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
    // This machine's platform unpacked for the default snapshotter, as a kubelet's pod would need it.
    let snapshots = String::from_utf8(run(containerd.ctr().args(["snapshots", "ls"]))).unwrap();
    let layout = layout::open(&dir.path().join("layout"), &dir.path().join("open"));
    let diff_id = image(&layout, &ARCHES[0]).config["rootfs"]["diff_ids"][0].as_str().unwrap().to_owned();
    assert!(
        snapshots.lines().any(|line| line.starts_with(&diff_id)),
        "no snapshot of the layer {diff_id}:\n{snapshots}"
    );
    drop(containerd);
    assert_eq!(containerd::mounts_under(&state), Vec::<PathBuf>::new(), "containerd left mounts behind");
    assert!(!state.exists(), "{} was not removed", state.display());
}
