//! [`SigningKey`]: a cosign key pair made for a test, the signatures and attestations it puts in a
//! [`crate::Registry`], and cosign's verification of them.

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;
use tempfile::TempDir;

use crate::Error;
use crate::tool_command::run;
use crate::tools::{existing, tools_dir};

/// The password of every test key (`COSIGN_PASSWORD`).
const PASSWORD: &str = "testenv-signing-key";

/// What makes `cosign sign` and `cosign attest` work without the public Sigstore services, which
/// cannot be reached here: no transparency log, no signing configuration or trusted root from
/// Sigstore's TUF repository; plain HTTP to the test registry.
const SIGN_FLAGS: [&str; 4] = ["--tlog-upload=false", "--use-signing-config=false", "--allow-http-registry", "--yes"];
/// The same for `cosign verify` and `cosign verify-attestation`: no transparency log entry looked
/// for (the signature is checked against the key alone).
const VERIFY_FLAGS: [&str; 2] = ["--insecure-ignore-tlog=true", "--allow-http-registry"];

/// Why a verification failed.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// cosign ran and found no signature (or attestation) of this key on that image: none was made,
    /// another key made it, or the image or the attestation changed since.
    #[error("cosign rejected {image}: {output}")]
    Rejected {
        /// The image reference verified.
        image: String,
        /// What cosign said.
        output: String,
    },
    /// cosign could not be run, or printed what cannot be read.
    #[error(transparent)]
    Failed(#[from] Error),
}

/// A cosign key pair (`cosign generate-key-pair`), in a directory of its own removed when dropped.
#[derive(Debug)]
pub struct SigningKey {
    cosign: PathBuf,
    dir: TempDir,
    tuf_root: String,
}

impl SigningKey {
    /// Makes a new key pair with the tools directory's `cosign`.
    pub fn generate() -> Result<SigningKey, Error> {
        let cosign = existing(&tools_dir()?, "cosign")?;
        let dir = tempfile::Builder::new()
            .prefix("testenv-cosign-")
            .tempdir()
            .map_err(Error::io("creating the key pair's directory"))?;
        let prefix = dir.path().join("cosign").display().to_string();
        let tuf_root = dir.path().join("tuf").display().to_string();
        let key = SigningKey { cosign, dir, tuf_root };
        run(&key.cosign, &["generate-key-pair", "--output-key-prefix", &prefix], &key.env(), None)?;
        Ok(key)
    }

    /// The public key's file (PEM), what users verify with.
    pub fn public_key(&self) -> PathBuf {
        self.dir.path().join("cosign.pub")
    }

    fn private_key(&self) -> String {
        self.dir.path().join("cosign.key").display().to_string()
    }

    /// Signs `image` (`<registry>/<repository>@sha256:...`): `cosign sign`, the signature stored in
    /// the image's registry.
    pub fn sign(&self, image: &str) -> Result<(), Error> {
        let key = self.private_key();
        let mut args = vec!["sign", "--key", &key];
        args.extend(SIGN_FLAGS);
        args.push(image);
        run(&self.cosign, &args, &self.env(), None).map(drop)
    }

    /// Attaches `predicate` (a file) to `image` as an attestation of `predicate_type` (cosign's
    /// `--type`, such as `cyclonedx`) signed by this key: `cosign attest`.
    pub fn attest(&self, image: &str, predicate_type: &str, predicate: &Path) -> Result<(), Error> {
        let (key, predicate) = (self.private_key(), predicate.display().to_string());
        let mut args = vec!["attest", "--key", &key, "--type", predicate_type, "--predicate", &predicate];
        args.extend(SIGN_FLAGS);
        args.push(image);
        run(&self.cosign, &args, &self.env(), None).map(drop)
    }

    /// `cosign verify --key <this public key> image`: whether `image` carries a signature of this
    /// key over exactly what it names now.
    pub fn verify(&self, image: &str) -> Result<(), VerifyError> {
        let key = self.public_key().display().to_string();
        let mut args = vec!["verify", "--key", &key];
        args.extend(VERIFY_FLAGS);
        args.push(image);
        self.verification(image, &args).map(drop)
    }

    /// `cosign verify-attestation --key <this public key> --type predicate_type image`: the
    /// predicates of the attestations of that type this key signed for `image`, each verified.
    pub fn verify_attestation(&self, image: &str, predicate_type: &str) -> Result<Vec<Value>, VerifyError> {
        let key = self.public_key().display().to_string();
        let mut args = vec!["verify-attestation", "--key", &key, "--type", predicate_type];
        args.extend(VERIFY_FLAGS);
        args.push(image);
        let stdout = self.verification(image, &args)?;
        stdout.lines().filter(|line| !line.trim().is_empty()).map(|line| predicate(image, line)).collect()
    }

    /// Runs a verification; its standard output when it passes.
    fn verification(&self, image: &str, args: &[&str]) -> Result<String, VerifyError> {
        match run(&self.cosign, args, &self.env(), None) {
            Ok(ran) => Ok(ran.stdout),
            Err(Error::ToolFailed { output, .. }) => Err(VerifyError::Rejected { image: image.to_owned(), output }),
            Err(error) => Err(VerifyError::Failed(error)),
        }
    }

    /// The key's password, and cosign's caches in the key's directory, not the user's home.
    fn env(&self) -> [(&str, &str); 2] {
        [("COSIGN_PASSWORD", PASSWORD), ("TUF_ROOT", &self.tuf_root)]
    }
}

/// The predicate of one line of `cosign verify-attestation`'s output: a DSSE envelope whose
/// payload is an in-toto statement.
fn predicate(image: &str, line: &str) -> Result<Value, VerifyError> {
    let unreadable = |what: String| VerifyError::Failed(Error::Unexpected(format!("attestation of {image}: {what}")));
    let envelope: Value = serde_json::from_str(line).map_err(|error| unreadable(error.to_string()))?;
    let payload = envelope["payload"].as_str().ok_or_else(|| unreadable(format!("no payload in {line}")))?;
    let statement = STANDARD.decode(payload).map_err(|error| unreadable(error.to_string()))?;
    let statement: Value = serde_json::from_slice(&statement).map_err(|error| unreadable(error.to_string()))?;
    Ok(statement["predicate"].clone())
}
