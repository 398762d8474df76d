//! [`Registry`]: an OCI registry on loopback (`crane registry serve`), and what the tests push to
//! it: an image from an OCI image layout (by digest) and a Helm chart (`helm push`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;
use tokio::time::Instant;

use crate::Error;
use crate::process::Supervised;
use crate::tool_command::run;
use crate::tools::{existing, tools_dir};

/// How long the registry may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The registry's line naming its port (`crane registry serve` logs `serving on port N`).
const LISTENING: &str = "serving on port ";

/// An OCI registry (go-containerregistry's, served by `crane registry serve`) on `127.0.0.1` and a
/// port of its own, plain HTTP, its blobs in a directory of its own. Dropping it ends it and removes
/// that directory. Clients on this machine reach it at [`Registry::host`] (crane, cosign and helm
/// take loopback registries as plain HTTP); a container node reaches it through a relay on its
/// link (`ContainerNodeOptions::registry`).
#[derive(Debug)]
pub struct Registry {
    process: Supervised,
    address: SocketAddr,
    crane: PathBuf,
    helm: PathBuf,
    dir: TempDir,
}

/// An image pushed by digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushedImage {
    /// `<host>/<repository>`.
    pub repository: String,
    /// Its manifest's (or index's) digest, `sha256:...`.
    pub digest: String,
}

impl PushedImage {
    /// `<host>/<repository>@<digest>`.
    pub fn reference(&self) -> String {
        format!("{}@{}", self.repository, self.digest)
    }
}

/// A chart pushed with `helm push`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushedChart {
    /// `oci://<host>/<path>/<chart name>`, what `helm install` takes.
    pub url: String,
    /// The chart's version (`--version`).
    pub version: String,
    /// The digest of its OCI manifest.
    pub digest: String,
}

impl Registry {
    /// Starts the registry (the tools directory's `crane`) and waits until it listens.
    pub async fn start() -> Result<Registry, Error> {
        let tools = tools_dir()?;
        let crane = existing(&tools, "crane")?;
        let helm = existing(&tools, "helm")?;
        let dir = tempfile::Builder::new()
            .prefix("testenv-registry-")
            .tempdir()
            .map_err(Error::io("creating the registry's directory"))?;
        let blobs = dir.path().join("blobs");
        std::fs::create_dir(&blobs).map_err(Error::io(format!("creating {}", blobs.display())))?;
        let log = dir.path().join("registry.log");
        let args = ["registry", "serve", "--address", "127.0.0.1:0", "--disk"].map(str::to_owned);
        let mut args = args.to_vec();
        args.push(blobs.display().to_string());
        let mut process = Supervised::spawn("registry", &crane, &args, &log, Some(dir.path()))?;
        let deadline = Instant::now() + START_TIMEOUT;
        let port = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(port) = text.lines().find_map(|line| Some(line.split_once(LISTENING)?.1.trim().parse::<u16>()))
            {
                break port.map_err(|error| process.start_error(format!("unreadable port: {error}")))?;
            }
            if let Some(status) = process.exited() {
                return Err(process.start_error(format!("exited with {status}")));
            }
            if Instant::now() >= deadline {
                return Err(process.start_error(format!("no port logged after {START_TIMEOUT:?}")));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        Ok(Registry { process, address, crane, helm, dir })
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The registry's host as image references name it: `127.0.0.1:<port>`.
    pub fn host(&self) -> String {
        self.address.to_string()
    }

    /// Process id of the registry, for leak checks.
    pub fn process_id(&self) -> u32 {
        self.process.id()
    }

    /// Pushes the one image or image index of the OCI image layout `layout` (a directory whose
    /// `index.json` has one entry) as `<host>/<repository>:<tag>` (`crane push`).
    pub fn push_layout(&self, layout: &Path, repository: &str, tag: &str) -> Result<PushedImage, Error> {
        let refs = self.dir.path().join("pushed-refs");
        let reference = format!("{}/{repository}:{tag}", self.host());
        let layout = layout.display().to_string();
        let image_refs = refs.display().to_string();
        run(&self.crane, &["push", &layout, &reference, "--image-refs", &image_refs], &[], None)?;
        let pushed = std::fs::read_to_string(&refs).map_err(Error::io(format!("reading {}", refs.display())))?;
        let digest = pushed
            .lines()
            .find_map(|line| line.trim().rsplit_once('@'))
            .map(|(_, digest)| digest.to_owned())
            .ok_or_else(|| Error::Unexpected(format!("crane push wrote no digest reference: {pushed:?}")))?;
        Ok(PushedImage { repository: format!("{}/{repository}", self.host()), digest })
    }

    /// The manifest (or index) `reference` names, parsed (`crane manifest`).
    pub fn manifest(&self, reference: &str) -> Result<Value, Error> {
        let text = run(&self.crane, &["manifest", reference], &[], None)?.stdout;
        serde_json::from_str(&text).map_err(|error| Error::Unexpected(format!("manifest of {reference}: {error}")))
    }

    /// The blob `reference` (`<host>/<repository>@<digest>`) names, as text (`crane blob`).
    pub fn blob(&self, reference: &str) -> Result<String, Error> {
        Ok(run(&self.crane, &["blob", reference], &[], None)?.stdout)
    }

    /// The architecture and digest of each image of `image`: each platform manifest of an index,
    /// or the image itself with its configuration's architecture.
    pub fn platforms(&self, image: &PushedImage) -> Result<Vec<(String, String)>, Error> {
        let manifest = self.manifest(&image.reference())?;
        let Some(manifests) = manifest["manifests"].as_array() else {
            let config = run(&self.crane, &["config", &image.reference()], &[], None)?.stdout;
            let config: Value = serde_json::from_str(&config)
                .map_err(|error| Error::Unexpected(format!("configuration of {}: {error}", image.reference())))?;
            let architecture = config["architecture"].as_str().unwrap_or_default().to_owned();
            return Ok(vec![(architecture, image.digest.clone())]);
        };
        Ok(manifests
            .iter()
            .filter_map(|entry| {
                let architecture = entry["platform"]["architecture"].as_str()?;
                Some((architecture.to_owned(), entry["digest"].as_str()?.to_owned()))
            })
            .collect())
    }

    /// Replaces what `reference` (`<host>/<repository>:<tag>`) names by `manifest` (`crane edit
    /// manifest`); returns its digest. The blobs it names must be in the repository already.
    pub fn replace_manifest(&self, reference: &str, manifest: &Value) -> Result<String, Error> {
        run(&self.crane, &["edit", "manifest", reference], &[], Some(&manifest.to_string()))?;
        Ok(run(&self.crane, &["digest", reference], &[], None)?.stdout.trim().to_owned())
    }

    /// Packages the chart in `chart_dir` (`helm package`) and pushes it under `oci://<host>/<path>`
    /// (`helm push --plain-http`).
    pub fn push_chart(&self, chart_dir: &Path, path: &str) -> Result<PushedChart, Error> {
        let packages = self.dir.path().join("charts");
        let packages_arg = packages.display().to_string();
        let chart = chart_dir.display().to_string();
        let packaged = run(&self.helm, &["package", &chart, "--destination", &packages_arg], &[], None)?.stdout;
        let archive = packaged
            .lines()
            .find_map(|line| line.split_once("saved it to: "))
            .map(|(_, path)| path.trim().to_owned())
            .ok_or_else(|| Error::Unexpected(format!("helm package named no archive: {packaged}")))?;
        let destination = format!("oci://{}/{path}", self.host());
        // helm prints what it pushed on stderr: `Pushed: <ref>:<version>` and `Digest: sha256:...`.
        let pushed = run(&self.helm, &["push", &archive, &destination, "--plain-http"], &[], None)?;
        let output = format!("{}{}", pushed.stderr, pushed.stdout);
        let field = |name: &str| output.lines().find_map(|line| line.strip_prefix(name)).map(str::trim);
        let (Some(pushed), Some(digest)) = (field("Pushed:"), field("Digest:")) else {
            return Err(Error::Unexpected(format!("helm push said neither what nor which digest: {output}")));
        };
        let (name, version) = pushed
            .rsplit_once(':')
            .ok_or_else(|| Error::Unexpected(format!("helm push pushed no version: {pushed}")))?;
        Ok(PushedChart { url: format!("oci://{name}"), version: version.to_owned(), digest: digest.to_owned() })
    }
}
