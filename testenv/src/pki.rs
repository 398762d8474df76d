//! Keys and certificates of a control plane, written as PEM files.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

use crate::Error;

/// The names the apiserver's serving certificate holds: the loopback address it listens on, and
/// what pods reach it at, the first address of the Service range and the `kubernetes` Service's
/// names.
const SERVING_NAMES: [&str; 7] = [
    "127.0.0.1",
    "localhost",
    "10.0.0.1",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// Paths of the PEM files written by [`write`].
#[derive(Debug, Clone)]
pub(crate) struct PkiFiles {
    /// CA that signs the serving certificate and the client certificates, and with which
    /// kube-controller-manager signs approved CSRs.
    pub(crate) ca_cert: PathBuf,
    pub(crate) ca_key: PathBuf,
    /// kube-apiserver serving certificate for [`SERVING_NAMES`].
    pub(crate) serving_cert: PathBuf,
    pub(crate) serving_key: PathBuf,
    /// Client certificate of the admin, in group `system:masters`.
    pub(crate) admin_cert: PathBuf,
    pub(crate) admin_key: PathBuf,
    /// Key that signs ServiceAccount tokens, and its public half that verifies them.
    pub(crate) service_account_key: PathBuf,
    pub(crate) service_account_public_key: PathBuf,
}

/// Common name of the admin client certificate.
pub(crate) const ADMIN_USER: &str = "testenv-admin";

/// Generates a CA (certificate and key), a serving certificate, an admin client certificate and a ServiceAccount signing
/// key, and writes them into `dir`.
pub(crate) fn write(dir: &Path) -> Result<PkiFiles, Error> {
    let ca_key = KeyPair::generate()?;
    let ca_params = ca_params()?;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let ca_key_pem = ca_key.serialize_pem();
    let ca = Issuer::new(ca_params, ca_key);

    let serving_key = KeyPair::generate()?;
    let mut serving = CertificateParams::new(SERVING_NAMES.map(str::to_owned).to_vec())?;
    serving.distinguished_name.push(DnType::CommonName, "kube-apiserver");
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving_cert = serving.signed_by(&serving_key, &ca)?;

    let admin_key = KeyPair::generate()?;
    let mut admin = CertificateParams::new(Vec::<String>::new())?;
    admin.distinguished_name.push(DnType::CommonName, ADMIN_USER);
    admin.distinguished_name.push(DnType::OrganizationName, "system:masters");
    admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let admin_cert = admin.signed_by(&admin_key, &ca)?;

    let service_account_key = KeyPair::generate()?;

    let files = PkiFiles {
        ca_cert: dir.join("ca.crt"),
        ca_key: dir.join("ca.key"),
        serving_cert: dir.join("serving.crt"),
        serving_key: dir.join("serving.key"),
        admin_cert: dir.join("admin.crt"),
        admin_key: dir.join("admin.key"),
        service_account_key: dir.join("service-account.key"),
        service_account_public_key: dir.join("service-account.pub"),
    };
    for (path, pem) in [
        (&files.ca_cert, ca_cert.pem()),
        (&files.ca_key, ca_key_pem),
        (&files.serving_cert, serving_cert.pem()),
        (&files.serving_key, serving_key.serialize_pem()),
        (&files.admin_cert, admin_cert.pem()),
        (&files.admin_key, admin_key.serialize_pem()),
        (&files.service_account_key, service_account_key.serialize_pem()),
        (&files.service_account_public_key, service_account_key.public_key_pem()),
    ] {
        std::fs::write(path, pem).map_err(Error::io(format!("writing {}", path.display())))?;
    }
    Ok(files)
}

/// The parameters of the cluster CA certificate: the same every time, so an issuer can be rebuilt
/// from them and the CA key.
fn ca_params() -> Result<CertificateParams, Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, "testenv-ca");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    Ok(params)
}

/// A client certificate of the cluster CA for `common_name` in group `organization`, as PEM
/// (certificate, key).
pub(crate) fn client_certificate(
    pki: &PkiFiles,
    common_name: &str,
    organization: &str,
) -> Result<(String, String), Error> {
    let ca_key_pem =
        std::fs::read_to_string(&pki.ca_key).map_err(Error::io(format!("reading {}", pki.ca_key.display())))?;
    let ca = Issuer::new(ca_params()?, KeyPair::from_pem(&ca_key_pem)?);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, common_name);
    params.distinguished_name.push(DnType::OrganizationName, organization);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &ca)?;
    Ok((cert.pem(), key.serialize_pem()))
}
