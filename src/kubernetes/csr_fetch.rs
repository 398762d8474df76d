//! `check NAME…`: the named CertificateSigningRequests read from the cluster.

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

use crate::kubernetes::csr_object::CsrObject;
use crate::policy::Submission;

/// Fetches the named CSRs from the cluster, in the order given.
pub async fn fetch(client: kube::Client, names: &[String]) -> Result<Vec<Submission>, kube::Error> {
    let api: kube::Api<CertificateSigningRequest> = kube::Api::all(client);
    let mut csrs = Vec::with_capacity(names.len());
    for name in names {
        csrs.push(CsrObject::from(api.get(name).await?).submission());
    }
    Ok(csrs)
}
