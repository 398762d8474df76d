//! kube-controller-manager's CSR signer: approved node CSRs get certificates of the cluster CA, and
//! what its own rules refuse is failed, not signed.

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
};
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};
use testenv::ControlPlane;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// How long the signer may take to issue a certificate or fail a CSR once it is approved.
const SIGN_TIMEOUT: Duration = Duration::from_secs(60);

const SERVING: &str = "kubernetes.io/kubelet-serving";
const CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// A PEM PKCS#10 request of node `node` (CN `system:node:<node>`, O `system:nodes`) with `sans`.
fn node_request(node: &str, sans: Vec<SanType>) -> Result<String, rcgen::Error> {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, format!("system:node:{node}"));
    params.distinguished_name.push(DnType::OrganizationName, "system:nodes");
    params.subject_alt_names = sans;
    params.serialize_request(&KeyPair::generate()?)?.pem()
}

/// Creates CSR `name` (replacing a leftover of an earlier run) through `api`, then approves it as
/// the admin through the approval subresource.
async fn create_and_approve(
    control_plane: &ControlPlane,
    api: Api<CertificateSigningRequest>,
    name: &str,
    spec: CertificateSigningRequestSpec,
) -> TestResult {
    let admin: Api<CertificateSigningRequest> = Api::all(control_plane.admin_client().await?);
    if admin.get_opt(name).await?.is_some() {
        admin.delete(name, &DeleteParams::default()).await?;
    }
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta { name: Some(name.to_owned()), ..ObjectMeta::default() },
        spec,
        status: None,
    };
    api.create(&PostParams::default(), &csr).await?;
    let approval = serde_json::json!({ "status": { "conditions": [{
        "type": "Approved",
        "status": "True",
        "reason": "TestenvApproved",
        "message": "approved by the signer test",
    }]}});
    admin.patch_approval(name, &PatchParams::default(), &Patch::Merge(&approval)).await?;
    Ok(())
}

/// Waits until CSR `name` carries a certificate or a `Failed` condition.
async fn signed_or_failed(control_plane: &ControlPlane, name: &str) -> Result<CertificateSigningRequest, String> {
    let admin: Api<CertificateSigningRequest> =
        Api::all(control_plane.admin_client().await.map_err(|error| error.to_string())?);
    let deadline = tokio::time::Instant::now() + SIGN_TIMEOUT;
    loop {
        let csr = admin.get(name).await.map_err(|error| error.to_string())?;
        let status = csr.status.as_ref();
        let signed = status.and_then(|status| status.certificate.as_ref()).is_some_and(|cert| !cert.0.is_empty());
        if signed || failed(&csr).is_some() {
            return Ok(csr);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("CSR {name} neither signed nor failed after {SIGN_TIMEOUT:?}: {:?}", csr.status));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The signer's `Failed` condition, if any.
fn failed(csr: &CertificateSigningRequest) -> Option<&CertificateSigningRequestCondition> {
    csr.status.as_ref()?.conditions.as_ref()?.iter().find(|condition| condition.type_ == "Failed")
}

/// The issued certificate's DER, from the PEM in `status.certificate`.
fn certificate_der(csr: &CertificateSigningRequest) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    if let Some(condition) = failed(csr) {
        return Err(format!("the signer failed the CSR: {condition:?}").into());
    }
    let pem = csr.status.as_ref().and_then(|status| status.certificate.as_ref()).ok_or("no certificate")?;
    let block = pem::parse(&pem.0)?;
    assert_eq!(block.tag(), "CERTIFICATE");
    Ok(block.into_contents())
}

/// Asserts that `cert` is issued by the cluster CA of `control_plane` and verifies with its key.
fn assert_issued_by_cluster_ca(control_plane: &ControlPlane, cert: &X509Certificate<'_>) -> TestResult {
    let ca_pem = pem::parse(control_plane.ca_cert_pem()?)?;
    let (_, ca) = X509Certificate::from_der(ca_pem.contents())?;
    assert_eq!(cert.issuer(), ca.subject());
    cert.verify_signature(Some(ca.public_key()))?;
    assert!(!cert.is_ca());
    Ok(())
}

fn subject_strings<'a>(
    values: impl Iterator<Item = &'a x509_parser::x509::AttributeTypeAndValue<'a>>,
) -> Result<Vec<String>, x509_parser::error::X509Error> {
    values.map(|value| value.as_str().map(str::to_owned)).collect()
}

#[tokio::test]
async fn approved_kubelet_serving_csr_is_signed_as_requested() -> TestResult {
    const NODE: &str = "signer-worker-1";
    const CSR: &str = "testenv-signer-serving";
    let control_plane = ControlPlane::shared_with_signer().await?;
    let request = node_request(
        NODE,
        vec![
            SanType::DnsName(format!("{NODE}.example.com").try_into()?),
            SanType::IpAddress("10.0.0.7".parse()?),
            SanType::IpAddress("fd00::7".parse()?),
        ],
    )?;
    let node = control_plane.impersonated_client(&format!("system:node:{NODE}"), &["system:nodes"]).await?;
    let spec = CertificateSigningRequestSpec {
        request: ByteString(request.into_bytes()),
        signer_name: SERVING.to_owned(),
        usages: Some(vec!["digital signature".to_owned(), "server auth".to_owned()]),
        ..CertificateSigningRequestSpec::default()
    };
    create_and_approve(control_plane, Api::all(node), CSR, spec).await?;

    let csr = signed_or_failed(control_plane, CSR).await?;
    let der = certificate_der(&csr)?;
    let (_, cert) = X509Certificate::from_der(&der)?;
    assert_eq!(subject_strings(cert.subject().iter_common_name())?, [format!("system:node:{NODE}")]);
    assert_eq!(subject_strings(cert.subject().iter_organization())?, ["system:nodes"]);
    let sans = cert.subject_alternative_name()?.ok_or("no SubjectAltName")?;
    let mut dns_names = Vec::new();
    let mut ips = Vec::new();
    for name in &sans.value.general_names {
        match name {
            GeneralName::DNSName(dns) => dns_names.push((*dns).to_owned()),
            GeneralName::IPAddress(bytes) => ips.push(match <[u8; 4]>::try_from(*bytes) {
                Ok(v4) => IpAddr::from(v4),
                Err(_) => IpAddr::from(<[u8; 16]>::try_from(*bytes)?),
            }),
            other => return Err(format!("unexpected SAN {other:?}").into()),
        }
    }
    assert_eq!(dns_names, [format!("{NODE}.example.com")]);
    assert_eq!(ips, ["10.0.0.7".parse::<IpAddr>()?, "fd00::7".parse()?]);
    let usages = cert.extended_key_usage()?.ok_or("no extended key usage")?;
    assert!(usages.value.server_auth && !usages.value.client_auth, "{usages:?}");
    assert_issued_by_cluster_ca(control_plane, &cert)?;

    Api::<CertificateSigningRequest>::all(control_plane.admin_client().await?)
        .delete(CSR, &DeleteParams::default())
        .await?;
    Ok(())
}

#[tokio::test]
async fn approved_node_client_csr_is_signed() -> TestResult {
    const NODE: &str = "signer-worker-2";
    const CSR: &str = "testenv-signer-client";
    let control_plane = ControlPlane::shared_with_signer().await?;
    let spec = CertificateSigningRequestSpec {
        request: ByteString(node_request(NODE, Vec::new())?.into_bytes()),
        signer_name: CLIENT.to_owned(),
        usages: Some(vec!["digital signature".to_owned(), "client auth".to_owned()]),
        ..CertificateSigningRequestSpec::default()
    };
    let admin = control_plane.admin_client().await?;
    create_and_approve(control_plane, Api::all(admin.clone()), CSR, spec).await?;

    let csr = signed_or_failed(control_plane, CSR).await?;
    let der = certificate_der(&csr)?;
    let (_, cert) = X509Certificate::from_der(&der)?;
    assert_eq!(subject_strings(cert.subject().iter_common_name())?, [format!("system:node:{NODE}")]);
    assert_eq!(subject_strings(cert.subject().iter_organization())?, ["system:nodes"]);
    assert!(cert.subject_alternative_name()?.is_none());
    let usages = cert.extended_key_usage()?.ok_or("no extended key usage")?;
    assert!(usages.value.client_auth && !usages.value.server_auth, "{usages:?}");
    assert_issued_by_cluster_ca(control_plane, &cert)?;

    Api::<CertificateSigningRequest>::all(admin).delete(CSR, &DeleteParams::default()).await?;
    Ok(())
}

#[tokio::test]
async fn signer_fails_an_approved_serving_csr_its_rules_refuse() -> TestResult {
    const NODE: &str = "signer-worker-3";
    const CSR: &str = "testenv-signer-refused";
    let control_plane = ControlPlane::shared_with_signer().await?;
    let request = node_request(NODE, vec![SanType::DnsName(NODE.try_into()?)])?;
    let node = control_plane.impersonated_client(&format!("system:node:{NODE}"), &["system:nodes"]).await?;
    // "client auth" is not a kubelet serving usage: ValidateKubeletServingCSR refuses it.
    let spec = CertificateSigningRequestSpec {
        request: ByteString(request.into_bytes()),
        signer_name: SERVING.to_owned(),
        usages: Some(vec!["digital signature".to_owned(), "server auth".to_owned(), "client auth".to_owned()]),
        ..CertificateSigningRequestSpec::default()
    };
    create_and_approve(control_plane, Api::all(node), CSR, spec).await?;

    let csr = signed_or_failed(control_plane, CSR).await?;
    let condition = failed(&csr).ok_or("the signer issued a certificate for a client usage")?;
    assert_eq!(condition.reason.as_deref(), Some("SignerValidationFailure"), "{condition:?}");
    assert!(csr.status.as_ref().and_then(|status| status.certificate.as_ref()).is_none_or(|cert| cert.0.is_empty()));

    Api::<CertificateSigningRequest>::all(control_plane.admin_client().await?)
        .delete(CSR, &DeleteParams::default())
        .await?;
    Ok(())
}
