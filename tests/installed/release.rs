//! The release the other tests install, checked before any cluster: its image index and each
//! platform's SBOM verify with the key that signed them, and the install step refuses it when the
//! image is signed by another key or changed after signing (no cluster: registry and cosign only).

use serde_json::json;
use testenv::{SigningKey, VerifyError};

use crate::support::release::{Release, SBOM_TYPE};

#[tokio::test]
async fn the_install_step_refuses_an_image_signed_by_another_key_or_changed_after_signing() {
    let dir = tempfile::tempdir().unwrap();
    let mut release = Release::publish(dir.path()).await;
    let args = release.install_args().unwrap();
    assert!(args.contains(&format!("image.digest={}", release.image.digest)), "{args:?}");
    assert_eq!(args[0], format!("oci://{}/charts/node-csr-approver", release.registry.host()));
    for (_, digest) in &release.platforms {
        let predicates = release.key.verify_attestation(&format!("{}@{digest}", release.image.repository), SBOM_TYPE);
        assert!(predicates.unwrap().iter().all(|predicate| predicate["bomFormat"] == "CycloneDX"));
    }

    // Changed after signing: the tag now names an index nobody signed.
    let signed = release.image.digest.clone();
    let tag = format!("{}:{}", release.image.repository, crate::support::release::app_version());
    let mut index = release.registry.manifest(&release.image.reference()).unwrap();
    index["annotations"] = json!({"changed": "after signing"});
    release.image.digest = release.registry.replace_manifest(&tag, &index).unwrap();
    assert_ne!(release.image.digest, signed);
    let refused = release.install_args();
    assert!(matches!(refused, Err(VerifyError::Rejected { .. })), "{refused:?}");

    // Signed by another key than the one the install step trusts.
    release.image.digest = signed;
    release.install_args().unwrap();
    release.key = SigningKey::generate().unwrap();
    let refused = release.install_args();
    assert!(matches!(refused, Err(VerifyError::Rejected { .. })), "{refused:?}");
}
