//! The approver released as users get it: the image index pushed by digest to a test registry,
//! signed, each platform's CycloneDX SBOM attached as a signed attestation, and the chart pushed as
//! an OCI artifact; verified with cosign before anything is installed from it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use testenv::{PushedChart, PushedImage, Registry, SigningKey, VerifyError};

use super::chart::{chart, root};

/// The image layout directory to push (scripts/test.sh sets it): an OCI image layout whose
/// `index.json` has one entry, the multi-architecture index. Unset: `scripts/build-image.sh` builds
/// it.
pub const IMAGE_LAYOUT_ENV: &str = "NODE_CSR_APPROVER_IMAGE_LAYOUT";

/// The directory holding `sbom-<architecture>.cdx.json` for each architecture of the image
/// (scripts/test.sh sets it). Unset: `scripts/build-image.sh`'s, `${CARGO_TARGET_DIR:-target}/image`.
pub const SBOM_DIR_ENV: &str = "NODE_CSR_APPROVER_SBOM_DIR";

/// The image's repository in the registry.
pub const REPOSITORY: &str = "node-csr-approver";

/// Where the chart is pushed in the registry: `oci://<registry>/charts/node-csr-approver`.
pub const CHART_PATH: &str = "charts";

/// cosign's predicate type of the SBOM attestations.
pub const SBOM_TYPE: &str = "cyclonedx";

/// The approver's release in a test registry, with the key that signed it.
pub struct Release {
    pub registry: Registry,
    pub key: SigningKey,
    /// The image index, by digest.
    pub image: PushedImage,
    /// Each platform's architecture and manifest digest, the SBOM attestations' subjects.
    pub platforms: Vec<(String, String)>,
    pub chart: PushedChart,
}

impl Release {
    /// Starts a registry and publishes the approver there: the image layout (see
    /// [`IMAGE_LAYOUT_ENV`]; `dir` holds what is built or unpacked for it), signed; each platform's
    /// SBOM attested on that platform's manifest; the chart. Prints how long each step took.
    pub async fn publish(dir: &Path) -> Release {
        let layout = image_layout(dir);
        let sboms = std::env::var_os(SBOM_DIR_ENV).map_or_else(|| target_dir().join("image"), PathBuf::from);
        let timer = Timer(std::cell::Cell::new(Instant::now()));
        let registry = Registry::start().await.unwrap();
        timer.lap("registry started");
        let image = registry.push_layout(&layout, REPOSITORY, &app_version()).unwrap();
        let platforms = registry.platforms(&image).unwrap();
        timer.lap(&format!("image pushed ({}, platforms {platforms:?})", image.reference()));
        let key = SigningKey::generate().unwrap();
        timer.lap("key pair generated");
        key.sign(&image.reference()).unwrap();
        timer.lap("index signed");
        for (architecture, digest) in &platforms {
            let sbom = sboms.join(format!("sbom-{architecture}.cdx.json"));
            assert!(sbom.is_file(), "no SBOM for {architecture}: {} (set {SBOM_DIR_ENV})", sbom.display());
            key.attest(&format!("{}@{digest}", image.repository), SBOM_TYPE, &sbom).unwrap();
        }
        timer.lap("SBOMs attested");
        let chart = registry.push_chart(&chart(), CHART_PATH).unwrap();
        timer.lap(&format!("chart pushed ({} {})", chart.url, chart.version));
        Release { registry, key, image, platforms, chart }
    }

    /// `cosign verify` of the image index and `cosign verify-attestation` of each platform's SBOM,
    /// with the release's public key, as a user runs them before installing.
    pub fn verify(&self) -> Result<(), VerifyError> {
        let started = Instant::now();
        self.key.verify(&self.image.reference())?;
        for (architecture, digest) in &self.platforms {
            let image = format!("{}@{digest}", self.image.repository);
            let predicates = self.key.verify_attestation(&image, SBOM_TYPE)?;
            if !predicates.iter().any(|predicate| predicate["bomFormat"] == "CycloneDX") {
                return Err(VerifyError::Rejected {
                    image,
                    output: format!("no CycloneDX SBOM attested for {architecture}: {predicates:?}"),
                });
            }
        }
        eprintln!("cosign verify and verify-attestation took {:.1} s", started.elapsed().as_secs_f64());
        Ok(())
    }

    /// What `helm install` (or `upgrade`) of this release takes after the release's name: the
    /// chart by `oci://` URL and version, the image pinned by digest. Only once [`Release::verify`]
    /// passes: an unverified image is never installed.
    pub fn install_args(&self) -> Result<Vec<String>, VerifyError> {
        self.verify()?;
        Ok(vec![
            self.chart.url.clone(),
            "--version".to_owned(),
            self.chart.version.clone(),
            "--plain-http".to_owned(),
            "--set".to_owned(),
            format!("image.repository={}", self.image.repository),
            "--set".to_owned(),
            format!("image.digest={}", self.image.digest),
        ])
    }
}

/// The OCI image layout of [`IMAGE_LAYOUT_ENV`], or else of `scripts/build-image.sh` (the last
/// line it prints): a directory is the layout; an archive is unpacked into `dir` first.
pub fn image_layout(dir: &Path) -> PathBuf {
    let built = std::env::var_os(IMAGE_LAYOUT_ENV).map_or_else(build_image, PathBuf::from);
    if built.is_dir() {
        return built;
    }
    let layout = dir.join("layout");
    std::fs::create_dir_all(&layout).unwrap();
    let status = Command::new("tar").arg("-xf").arg(&built).arg("-C").arg(&layout).status().unwrap();
    assert!(status.success(), "unpacking {}", built.display());
    layout
}

/// `scripts/build-image.sh`: the path it prints last.
fn build_image() -> PathBuf {
    let script = root().join("scripts/build-image.sh");
    let output = Command::new("bash").arg(&script).stdin(Stdio::null()).stderr(Stdio::inherit()).output().unwrap();
    assert!(output.status.success(), "{} failed", script.display());
    let stdout = String::from_utf8(output.stdout).unwrap();
    PathBuf::from(stdout.lines().rfind(|line| !line.trim().is_empty()).unwrap().trim())
}

/// `$CARGO_TARGET_DIR`, or the repository's `target`.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// The chart's `appVersion`, the image's tag.
pub fn app_version() -> String {
    let text = std::fs::read_to_string(chart().join("Chart.yaml")).unwrap();
    let line = text.lines().find_map(|line| line.strip_prefix("appVersion:")).unwrap();
    line.trim().trim_matches('"').to_owned()
}

/// Prints the time since it started or since the last lap.
struct Timer(std::cell::Cell<Instant>);

impl Timer {
    fn lap(&self, what: &str) {
        let now = Instant::now();
        let since = self.0.replace(now);
        eprintln!("release: {what} in {:.1} s", (now - since).as_secs_f64());
    }
}
