//! The test registry and cosign: an image pushed by digest, signed and attested, verifies with the
//! key that signed it, and fails to verify when signed by another key, changed after signing, or
//! when its attestation was tampered with. No cluster: a registry on loopback and the cosign CLI.

use std::path::{Path, PathBuf};
use std::time::Instant;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use testenv::{PushedImage, Registry, SigningKey, VerifyError};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A small image: Debian's static busybox, as an OCI image layout directory in `dir`.
fn layout(dir: &Path) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let archive = testenv::busybox_image("registry.example.com/test/busybox:1", &dir.join("busybox.tar"))?;
    let layout = dir.join("layout");
    std::fs::create_dir(&layout)?;
    let status = std::process::Command::new("tar").arg("-xf").arg(&archive).arg("-C").arg(&layout).status()?;
    assert!(status.success(), "unpacking {}", archive.display());
    Ok(layout)
}

/// A registry holding the busybox image, pushed as `test/busybox:1`, signed by a new key.
async fn signed(dir: &Path) -> Result<(Registry, PushedImage, SigningKey), Box<dyn std::error::Error>> {
    let registry = Registry::start().await?;
    let image = registry.push_layout(&layout(dir)?, "test/busybox", "1")?;
    let key = SigningKey::generate()?;
    key.sign(&image.reference())?;
    Ok((registry, image, key))
}

/// What cosign said when it rejected what `result` verified; empty when it did not reject it.
fn reason<T>(result: &Result<T, VerifyError>) -> &str {
    match result {
        Err(VerifyError::Rejected { output, .. }) => output,
        _ => "",
    }
}

#[tokio::test]
async fn an_image_pushed_by_digest_signed_and_attested_verifies_with_its_key() -> TestResult {
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let registry = Registry::start().await?;
    eprintln!("registry started in {:.2} s", started.elapsed().as_secs_f64());
    let started = Instant::now();
    let image = registry.push_layout(&layout(dir.path())?, "test/busybox", "1")?;
    eprintln!("pushed {} in {:.2} s", image.reference(), started.elapsed().as_secs_f64());
    assert!(image.digest.starts_with("sha256:") && image.digest.len() == 71, "{image:?}");
    assert_eq!(image.repository, format!("127.0.0.1:{}/test/busybox", registry.address().port()));
    assert_eq!(registry.platforms(&image)?, [("amd64".to_owned(), image.digest.clone())]);

    let key = SigningKey::generate()?;
    let started = Instant::now();
    key.sign(&image.reference())?;
    eprintln!("signed in {:.2} s", started.elapsed().as_secs_f64());
    let sbom = json!({"bomFormat": "CycloneDX", "specVersion": "1.5", "version": 1, "components": [
        {"type": "application", "name": "busybox", "version": "1"},
    ]});
    let predicate = dir.path().join("sbom.cdx.json");
    std::fs::write(&predicate, sbom.to_string())?;
    let started = Instant::now();
    key.attest(&image.reference(), "cyclonedx", &predicate)?;
    eprintln!("attested in {:.2} s", started.elapsed().as_secs_f64());

    let started = Instant::now();
    key.verify(&image.reference())?;
    eprintln!("verified in {:.2} s", started.elapsed().as_secs_f64());
    // By tag too: the tag names the signed digest.
    key.verify(&format!("{}:1", image.repository))?;
    let started = Instant::now();
    let predicates = key.verify_attestation(&image.reference(), "cyclonedx")?;
    eprintln!("attestation verified in {:.2} s", started.elapsed().as_secs_f64());
    assert_eq!(predicates, [sbom]);
    // An attestation of another type is not there.
    let result = key.verify_attestation(&image.reference(), "spdxjson");
    assert!(reason(&result).contains("none of the attestations matched the predicate type: spdxjson"), "{result:?}");

    let started = Instant::now();
    let chart =
        registry.push_chart(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/node-csr-approver"), "charts")?;
    eprintln!("chart pushed in {:.2} s: {chart:?}", started.elapsed().as_secs_f64());
    assert_eq!(chart.url, format!("oci://{}/charts/node-csr-approver", registry.host()));
    assert!(chart.digest.starts_with("sha256:"), "{chart:?}");
    assert!(registry.manifest(&format!("{}/charts/node-csr-approver:{}", registry.host(), chart.version)).is_ok());

    // Dropped, it is gone, and its port with it.
    let (pid, address) = (registry.process_id(), registry.address());
    drop(registry);
    assert!(!testenv::process_running(pid));
    assert!(std::net::TcpStream::connect(address).is_err());
    Ok(())
}

#[tokio::test]
async fn verify_fails_for_an_image_signed_by_another_key() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (_registry, image, key) = signed(dir.path()).await?;
    key.verify(&image.reference())?;
    let other = SigningKey::generate()?;
    let result = other.verify(&image.reference());
    assert!(reason(&result).contains("no matching attestations: failed to verify signature"), "{result:?}");
    Ok(())
}

#[tokio::test]
async fn verify_fails_for_an_image_changed_after_signing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (registry, image, key) = signed(dir.path()).await?;
    let tag = format!("{}:1", image.repository);
    let mut manifest = registry.manifest(&image.reference())?;
    manifest["annotations"] = json!({"changed": "after signing"});
    let changed = registry.replace_manifest(&tag, &manifest)?;
    assert_ne!(changed, image.digest);
    let result = key.verify(&tag);
    assert!(reason(&result).contains("no signatures found"), "{result:?}");
    let result = key.verify(&format!("{}@{changed}", image.repository));
    assert!(reason(&result).contains("no signatures found"), "{result:?}");
    // What was signed still verifies by its digest.
    key.verify(&image.reference())?;
    Ok(())
}

#[tokio::test]
async fn verify_attestation_fails_for_a_tampered_attestation() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (registry, image, key) = signed(dir.path()).await?;
    let sbom = json!({"bomFormat": "CycloneDX", "specVersion": "1.5", "components": []});
    let predicate = dir.path().join("sbom.cdx.json");
    std::fs::write(&predicate, sbom.to_string())?;
    key.attest(&image.reference(), "cyclonedx", &predicate)?;

    // The attestation put back through the same steps with its statement intact (its manifest
    // annotated, so stored anew) still verifies: what fails below fails for the statement.
    replace_attestation(&registry, &image, &dir.path().join("intact"), |manifest, _| {
        manifest["annotations"]["stored"] = json!("anew");
    })?;
    assert_eq!(key.verify_attestation(&image.reference(), "cyclonedx")?, [sbom]);

    // Its statement now lists a component nobody signed; the signature is left as it was.
    replace_attestation(&registry, &image, &dir.path().join("tampered"), |_, statement| {
        statement["predicate"]["components"] = json!([{"type": "library", "name": "injected", "version": "1"}]);
    })?;
    let result = key.verify_attestation(&image.reference(), "cyclonedx");
    assert!(reason(&result).contains("none of the attestations matched the predicate type: cyclonedx"), "{result:?}");
    // The image's own signature, untouched, still verifies.
    key.verify(&image.reference())?;
    Ok(())
}

/// Replaces `image`'s CycloneDX attestation in the registry by one whose manifest and in-toto
/// statement `edit` changed (the DSSE signature kept), pushed from an OCI layout made in `layout`.
///
/// Without the registry's referrers API, cosign lists an image's bundles in an index tagged
/// `sha256-<digest>`; an attestation's bundle is the one layer of one of its manifests.
fn replace_attestation(
    registry: &Registry,
    image: &PushedImage,
    layout: &Path,
    edit: impl Fn(&mut Value, &mut Value),
) -> Result<(), Box<dyn std::error::Error>> {
    let referrers = format!("{}:{}", image.repository, image.digest.replace(':', "-"));
    let mut index = registry.manifest(&referrers)?;
    let entries = index["manifests"].as_array().cloned().unwrap_or_default();
    let (position, mut manifest) = entries
        .iter()
        .enumerate()
        .find_map(|(i, entry)| {
            let manifest = registry.manifest(&format!("{}@{}", image.repository, entry["digest"].as_str()?)).ok()?;
            let kind = manifest["annotations"]["dev.sigstore.bundle.predicateType"].as_str()?;
            kind.contains("cyclonedx").then_some((i, manifest))
        })
        .ok_or("no attestation bundle")?;
    let layer = manifest["layers"][0]["digest"].as_str().ok_or("no layer")?.to_owned();
    let mut bundle: Value = serde_json::from_str(&registry.blob(&format!("{}@{layer}", image.repository))?)?;
    let payload = bundle["dsseEnvelope"]["payload"].as_str().ok_or("no DSSE payload")?;
    let mut statement: Value = serde_json::from_slice(&STANDARD.decode(payload)?)?;
    let unchanged = statement.clone();
    edit(&mut manifest, &mut statement);
    if statement != unchanged {
        bundle["dsseEnvelope"]["payload"] = json!(STANDARD.encode(statement.to_string()));
    }

    let bundle = bundle.to_string();
    manifest["layers"][0]["digest"] = json!(write_blob(layout, bundle.as_bytes())?);
    manifest["layers"][0]["size"] = json!(bundle.len());
    write_blob(layout, b"{}")?;
    let manifest = manifest.to_string();
    let digest = write_blob(layout, manifest.as_bytes())?;
    let descriptor =
        json!({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest, "size": manifest.len()});
    std::fs::write(layout.join("index.json"), json!({"schemaVersion": 2, "manifests": [descriptor]}).to_string())?;
    std::fs::write(layout.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#)?;
    assert_eq!(registry.push_layout(layout, "test/busybox", "attestation")?.digest, digest);
    index["manifests"][position]["digest"] = json!(digest);
    index["manifests"][position]["size"] = json!(manifest.len());
    registry.replace_manifest(&referrers, &index)?;
    Ok(())
}

/// Writes `content` into the OCI layout `layout`'s blobs; returns its digest.
fn write_blob(layout: &Path, content: &[u8]) -> Result<String, Box<dyn std::error::Error>> {
    let blobs = layout.join("blobs/sha256");
    std::fs::create_dir_all(&blobs)?;
    let file = blobs.join("new");
    std::fs::write(&file, content)?;
    let sum = std::process::Command::new("sha256sum").arg(&file).output()?;
    let text = String::from_utf8(sum.stdout)?;
    let hex = text.split_whitespace().next().ok_or("sha256sum printed nothing")?.to_owned();
    std::fs::rename(&file, blobs.join(&hex))?;
    Ok(format!("sha256:{hex}"))
}
