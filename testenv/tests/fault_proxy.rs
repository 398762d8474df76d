//! The fault proxy: requests pass through with their identity, and each fault does what it says.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use rcgen::{CertificateParams, DnType, KeyPair};
use testenv::{Block, ControlPlane, FaultProxy, WriteFault, is_forbidden};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A client of the proxy's kubeconfig, impersonating `user` in `groups` when given.
async fn through(proxy: &FaultProxy, user: Option<(&str, &[&str])>) -> Result<Client, Box<dyn std::error::Error>> {
    let kubeconfig = Kubeconfig::read_from(proxy.kubeconfig_path())?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    // kube retries a 503 up to 15 times over minutes by default: see each answer as it comes.
    config.default_retry = false;
    if let Some((user, groups)) = user {
        config.auth_info.impersonate = Some(user.to_owned());
        config.auth_info.impersonate_groups = Some(groups.iter().map(|group| (*group).to_owned()).collect());
    }
    Ok(Client::try_from(config)?)
}

fn serving_csr(name: &str, node: &str) -> Result<CertificateSigningRequest, rcgen::Error> {
    let mut params = CertificateParams::new(vec![node.to_owned()])?;
    params.distinguished_name.push(DnType::CommonName, format!("system:node:{node}"));
    params.distinguished_name.push(DnType::OrganizationName, "system:nodes");
    let pem = params.serialize_request(&KeyPair::generate()?)?.pem()?;
    Ok(CertificateSigningRequest {
        metadata: ObjectMeta { name: Some(name.to_owned()), ..ObjectMeta::default() },
        spec: CertificateSigningRequestSpec {
            request: ByteString(pem.into_bytes()),
            signer_name: "kubernetes.io/kubelet-serving".to_owned(),
            usages: Some(vec!["digital signature".to_owned(), "server auth".to_owned()]),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    })
}

fn approval(reason: &str) -> Patch<serde_json::Value> {
    Patch::Merge(serde_json::json!({"status": {"conditions": [
        {"type": "Approved", "status": "True", "reason": reason, "message": "by the proxy test"}
    ]}}))
}

#[tokio::test]
async fn requests_pass_through_with_their_identity() -> TestResult {
    let control_plane = ControlPlane::shared().await?;
    let proxy = FaultProxy::start(control_plane).await?;
    assert!(proxy.url().starts_with("http://127.0.0.1:"), "{}", proxy.url());
    let admin = through(&proxy, None).await?;
    let namespaces = Api::<Namespace>::all(admin.clone()).list(&ListParams::default()).await?;
    assert!(namespaces.items.iter().any(|namespace| namespace.metadata.name.as_deref() == Some("default")));

    let nobody = through(&proxy, Some(("nobody", &[]))).await?;
    let refused = Api::<Namespace>::all(nobody).list(&ListParams::default()).await;
    assert!(refused.as_ref().is_err_and(is_forbidden), "Impersonate-User was not passed on: {refused:?}");

    let node = through(&proxy, Some(("system:node:proxy-node", &["system:nodes"]))).await?;
    let csrs = Api::<CertificateSigningRequest>::all(node);
    let name = format!("proxy-identity-{}", proxy.address().port());
    csrs.create(&PostParams::default(), &serving_csr(&name, "proxy-node")?).await?;
    let stored = Api::<CertificateSigningRequest>::all(control_plane.admin_client().await?).get(&name).await?;
    assert_eq!(stored.spec.username.as_deref(), Some("system:node:proxy-node"));
    assert!(stored.spec.groups.unwrap_or_default().iter().any(|group| group == "system:nodes"));
    Ok(())
}

#[tokio::test]
async fn failed_writes_answer_503_or_reset_and_are_counted() -> TestResult {
    let control_plane = ControlPlane::shared().await?;
    let proxy = FaultProxy::start(control_plane).await?;
    let direct = Api::<CertificateSigningRequest>::all(control_plane.admin_client().await?);
    let name = format!("proxy-writes-{}", proxy.address().port());
    direct.create(&PostParams::default(), &serving_csr(&name, "proxy-node")?).await?;
    let csrs = Api::<CertificateSigningRequest>::all(through(&proxy, None).await?);
    let params = PatchParams::default();

    proxy.fail_writes(WriteFault::Unavailable);
    let unavailable = csrs.patch_approval(&name, &params, &approval("One")).await;
    assert!(matches!(&unavailable, Err(kube::Error::Api(status)) if status.code == 503), "{unavailable:?}");
    proxy.fail_writes(WriteFault::Reset);
    let reset = csrs.patch_approval(&name, &params, &approval("Two")).await;
    assert!(reset.is_err() && !matches!(reset, Err(kube::Error::Api(_))), "{reset:?}");
    assert!(direct.get(&name).await?.status.and_then(|status| status.conditions).is_none());
    // Reads pass while writes fail.
    csrs.get(&name).await?;

    proxy.fail_writes(WriteFault::Pass);
    csrs.patch_approval(&name, &params, &approval("Three")).await?;
    let conditions = direct.get(&name).await?.status.and_then(|status| status.conditions).unwrap_or_default();
    assert_eq!(conditions.iter().map(|c| c.reason.as_deref()).collect::<Vec<_>>(), [Some("Three")]);

    let writes = proxy.approval_writes();
    assert_eq!(proxy.writes().len(), 3, "no other write went through the proxy");
    let seen: Vec<_> = writes.iter().map(|write| (write.method.as_str(), write.status, write.injected)).collect();
    assert_eq!(seen, [("PATCH", Some(503), true), ("PATCH", None, true), ("PATCH", Some(200), false)]);
    let path = format!("/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}/approval");
    assert!(writes[0].target.starts_with(&path), "{}", writes[0].target);
    assert_eq!((proxy.approval_writes_by("PATCH"), proxy.approval_writes_by("PUT")), (3, 0));
    Ok(())
}

#[tokio::test]
async fn expired_watches_get_one_410_event_and_others_pass() -> TestResult {
    let control_plane = ControlPlane::shared().await?;
    let proxy = FaultProxy::start(control_plane).await?;
    let namespaces = Api::<Namespace>::all(through(&proxy, None).await?);
    let version = namespaces.list(&ListParams::default()).await?.metadata.resource_version.ok_or("no version")?;
    proxy.expire_watches(true);

    let mut expired = namespaces.watch(&WatchParams::default(), &version).await?.boxed();
    match expired.next().await {
        Some(Ok(WatchEvent::Error(status))) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"), "{status:?}");
        }
        other => panic!("expected a 410 event, got {other:?}"),
    }
    assert!(expired.next().await.is_none(), "the expired watch went on");

    // A watch from "0" (a fresh list) is not expired.
    let mut fresh = namespaces.watch(&WatchParams::default(), "0").await?.boxed();
    let first = tokio::time::timeout(Duration::from_secs(10), fresh.next()).await?;
    assert!(matches!(first, Some(Ok(WatchEvent::Added(_)))), "{first:?}");
    assert_eq!((proxy.watch_requests(), proxy.expired_watches()), (2, 1));

    // A cut ends the watch in flight; the client sees it end.
    proxy.cut_watches();
    let ended =
        tokio::time::timeout(Duration::from_secs(10), async { while let Some(Ok(_)) = fresh.next().await {} }).await;
    assert!(ended.is_ok(), "the watch survived the cut");
    Ok(())
}

#[tokio::test]
async fn blocked_requests_hang_until_lifted_or_are_refused() -> TestResult {
    let control_plane = ControlPlane::shared().await?;
    let proxy = FaultProxy::start(control_plane).await?;
    let namespaces = Api::<Namespace>::all(through(&proxy, None).await?);

    proxy.block(Block::HangWatches);
    namespaces.list(&ListParams::default()).await?;
    let params = WatchParams::default();
    let watch = namespaces.watch(&params, "0");
    tokio::pin!(watch);
    assert!(tokio::time::timeout(Duration::from_secs(1), &mut watch).await.is_err(), "the watch was answered");
    proxy.block(Block::Off);
    let mut stream = tokio::time::timeout(Duration::from_secs(10), watch).await??.boxed();
    assert!(matches!(stream.next().await, Some(Ok(WatchEvent::Added(_)))));

    proxy.block(Block::RefuseAll);
    let refused = namespaces.list(&ListParams::default()).await;
    assert!(refused.is_err() && !matches!(refused, Err(kube::Error::Api(_))), "{refused:?}");
    proxy.block(Block::Off);
    namespaces.list(&ListParams::default()).await?;
    Ok(())
}

/// Reads `stream` until the bookmark ending its initial events; how many objects came before it,
/// each with when it came (since `started`), and when the bookmark came.
async fn until_initial_events_end(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<Namespace>>> + Unpin),
    started: Instant,
) -> Result<(Vec<Duration>, Duration), Box<dyn std::error::Error>> {
    let mut added = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(20), stream.next()).await? {
            Some(Ok(WatchEvent::Added(_))) => added.push(started.elapsed()),
            Some(Ok(WatchEvent::Bookmark(bookmark)))
                if bookmark.metadata.annotations.get("k8s.io/initial-events-end").is_some_and(|v| v == "true") =>
            {
                return Ok((added, started.elapsed()));
            }
            Some(Ok(WatchEvent::Bookmark(_))) => {}
            other => return Err(format!("expected the initial events, got {other:?}").into()),
        }
    }
}

#[tokio::test]
async fn slow_initial_events_hold_back_the_end_of_a_streaming_list() -> TestResult {
    let control_plane = ControlPlane::shared().await?;
    let proxy = FaultProxy::start(control_plane).await?;
    let namespaces = Api::<Namespace>::all(through(&proxy, None).await?);
    let delay = Duration::from_secs(3);
    proxy.slow_initial_events(Some(delay));

    // The objects come at once, the bookmark ending them only after the delay.
    let started = Instant::now();
    let mut slow = namespaces.watch(&WatchParams::streaming_lists(), "0").await?.boxed();
    let (added, end) = until_initial_events_end(&mut slow, started).await?;
    assert!(!added.is_empty(), "no initial event");
    assert!(added.iter().all(|at| *at < delay), "initial events held: {added:?}");
    assert!(end >= delay, "the initial-events-end bookmark came after {end:?}");
    assert_eq!(proxy.held_initial_events_ends(), 1);

    // Once it is off, a streaming list is not held; neither is a watch that asks for no initial
    // events while it is on.
    proxy.slow_initial_events(None);
    let started = Instant::now();
    let mut fast = namespaces.watch(&WatchParams::streaming_lists(), "0").await?.boxed();
    let (_, end) = until_initial_events_end(&mut fast, started).await?;
    assert!(end < delay, "the initial-events-end bookmark came after {end:?} with the switch off");
    proxy.slow_initial_events(Some(delay));
    let mut plain = namespaces.watch(&WatchParams::default(), "0").await?.boxed();
    let first = tokio::time::timeout(delay / 2, plain.next()).await?;
    assert!(matches!(first, Some(Ok(WatchEvent::Added(_)))), "{first:?}");
    assert_eq!(proxy.held_initial_events_ends(), 1);
    Ok(())
}
