//! An OCI image layout as `scripts/oci-archive.sh` writes it (a directory, or unpacked from its
//! archive with GNU tar), read and checked against its own digests: index.json → image index →
//! each platform's manifest → config and layer (unpacked with gzip and tar).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The SHA-256 of `bytes` as `sha256:HEX`.
pub fn digest(bytes: &[u8]) -> String {
    let hash = ring::digest::digest(&ring::digest::SHA256, bytes);
    let hex: String = hash.as_ref().iter().map(|byte| format!("{byte:02x}")).collect();
    format!("sha256:{hex}")
}

/// Runs `command`, failing with its stderr unless it succeeds; returns its stdout.
pub fn run(command: &mut Command) -> Vec<u8> {
    let output = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(output.status.success(), "{command:?}: {}\n{}", output.status, String::from_utf8_lossy(&output.stderr));
    output.stdout
}

/// One entry of a layer, as `tar --list --verbose --numeric-owner` shows it.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    /// `ls -l` style type and permissions, e.g. `-rwxr-xr-x`.
    pub mode: String,
    /// `UID/GID`.
    pub owner: String,
    /// The path in the image, without a leading `/` (directories end with `/`).
    pub path: String,
}

/// One platform's image.
pub struct Image {
    /// Its descriptor in the image index (with its `platform`).
    pub descriptor: Value,
    /// Its manifest.
    pub manifest: Value,
    /// Its config.
    pub config: Value,
    /// The layer's entries in archive order.
    pub entries: Vec<Entry>,
    /// Where the layer was extracted.
    pub rootfs: PathBuf,
}

/// The layout: index.json's one entry, the image index it names and the images.
pub struct Layout {
    /// index.json's one descriptor (the image index's digest, the name annotations).
    pub descriptor: Value,
    /// The image index.
    pub index: Value,
    /// The images, in the index's order.
    pub images: Vec<Image>,
}

fn blob(layout: &Path, descriptor: &Value) -> Vec<u8> {
    let digest_text = descriptor["digest"].as_str().unwrap();
    let bytes = std::fs::read(layout.join("blobs/sha256").join(digest_text.strip_prefix("sha256:").unwrap())).unwrap();
    assert_eq!(digest(&bytes), digest_text, "a blob's content does not match its digest");
    assert_eq!(descriptor["size"], bytes.len(), "{descriptor}: wrong size");
    bytes
}

/// Unpacks the archive `archive` into `dir`/layout and returns that directory.
pub fn unpack(archive: &Path, dir: &Path) -> PathBuf {
    let layout = dir.join("layout");
    std::fs::create_dir_all(&layout).unwrap();
    run(Command::new("tar").arg("-xf").arg(archive).arg("-C").arg(&layout));
    layout
}

/// Reads the layout directory `layout`, unpacking each layer under `dir`, and checks every digest,
/// size and media type.
pub fn open(layout: &Path, dir: &Path) -> Layout {
    let layout_version: Value = serde_json::from_slice(&std::fs::read(layout.join("oci-layout")).unwrap()).unwrap();
    assert_eq!(layout_version["imageLayoutVersion"], "1.0.0");
    let top: Value = serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    assert_eq!(top["schemaVersion"], 2);
    let entries = top["manifests"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "index.json names one image index: {top}");
    let descriptor = entries[0].clone();
    assert_eq!(descriptor["mediaType"], "application/vnd.oci.image.index.v1+json");
    let index: Value = serde_json::from_slice(&blob(layout, &descriptor)).unwrap();
    assert_eq!(index["schemaVersion"], 2);
    assert_eq!(index["mediaType"], "application/vnd.oci.image.index.v1+json");
    let images = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|descriptor| {
            let architecture = descriptor["platform"]["architecture"].as_str().unwrap();
            image(layout, descriptor, &dir.join(architecture))
        })
        .collect();
    Layout { descriptor, index, images }
}

/// Reads the image `descriptor` names and unpacks its layer under `dir`.
fn image(layout: &Path, descriptor: &Value, dir: &Path) -> Image {
    assert_eq!(descriptor["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    let manifest: Value = serde_json::from_slice(&blob(layout, descriptor)).unwrap();
    assert_eq!(manifest["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    assert_eq!(manifest["config"]["mediaType"], "application/vnd.oci.image.config.v1+json");
    let config: Value = serde_json::from_slice(&blob(layout, &manifest["config"])).unwrap();
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{manifest}");
    assert_eq!(layers[0]["mediaType"], "application/vnd.oci.image.layer.v1.tar+gzip");
    std::fs::create_dir_all(dir).unwrap();
    let compressed = dir.join("layer.tar.gz");
    std::fs::write(&compressed, blob(layout, &layers[0])).unwrap();
    let layer = run(Command::new("gzip").arg("-dc").arg(&compressed));
    assert_eq!(config["rootfs"]["type"], "layers");
    assert_eq!(config["rootfs"]["diff_ids"], serde_json::json!([digest(&layer)]), "diff_ids is not the layer's digest");
    let layer_path = dir.join("layer.tar");
    std::fs::write(&layer_path, &layer).unwrap();
    let listing = run(Command::new("tar").args(["--list", "--verbose", "--numeric-owner", "--file"]).arg(&layer_path));
    let entries = String::from_utf8(listing)
        .unwrap()
        .lines()
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            assert!(words.len() >= 6, "{line}");
            Entry { mode: words[0].to_owned(), owner: words[1].to_owned(), path: words[5..].join(" ") }
        })
        .collect();
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    run(Command::new("tar").arg("-xf").arg(&layer_path).arg("-C").arg(&rootfs));
    Image { descriptor: descriptor.clone(), manifest, config, entries, rootfs }
}
