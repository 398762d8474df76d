//! Helm chart helpers: `helm template`/`helm lint` runs and the `ci/` values files, a small
//! kustomize for `deploy/`, the normalization both are compared under, server-side apply of
//! rendered objects (with the monitoring CRDs and a restricted namespace), and the real binary
//! started exactly as a rendered Deployment's container.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::{Scope, pinned_kind};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::cluster::unique;

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The chart directory.
pub fn chart() -> PathBuf {
    root().join("charts/node-csr-approver")
}

/// The values files in the chart's `ci/`, which the tests render.
pub const VALUES_FILES: [&str; 4] =
    ["standalone-values.yaml", "ha-values.yaml", "go-chart-values.yaml", "all-features-values.yaml"];

/// The path of `ci/<name>`.
pub fn values_file(name: &str) -> String {
    chart().join("ci").join(name).to_str().unwrap().to_owned()
}

/// The `helm` binary that `scripts/build-tools.sh` builds.
pub fn helm() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| testenv::tools_dir().unwrap().join("helm"))
}

/// Runs helm with `args`; `Ok(stdout)` on success, `Err(stderr)` on failure.
pub fn run_helm(args: &[&str]) -> Result<String, String> {
    let output = Command::new(helm()).args(args).stdin(Stdio::null()).output().unwrap();
    if output.status.success() {
        Ok(String::from_utf8(output.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// `helm template RELEASE chart --namespace NAMESPACE ARGS…`, parsed into objects.
pub fn render(release: &str, namespace: &str, args: &[&str]) -> Result<Vec<Value>, String> {
    let chart = chart();
    let mut all = vec!["template", release, chart.to_str().unwrap(), "--namespace", namespace];
    all.extend_from_slice(args);
    run_helm(&all).map(|text| parse_documents(&text))
}

/// Every YAML document of `text` that is not empty.
pub fn parse_documents(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text).unwrap().into_iter().filter(|doc| !doc.is_null()).collect()
}

/// Renders release `approver` in namespace csr-system with the required regex given literally and
/// `args`.
pub fn render_with(args: &[&str]) -> Result<Vec<Value>, String> {
    let mut all = vec!["--set-literal", "providerRegex=^[a-z0-9-]+\\.nodes\\.example\\.com$"];
    all.extend_from_slice(args);
    render("approver", "csr-system", &all)
}

/// The kind of each object, in order.
pub fn kinds(objects: &[Value]) -> Vec<&str> {
    objects.iter().map(|o| o["kind"].as_str().unwrap()).collect()
}

/// The first object of `kind`, if any.
pub fn find<'a>(objects: &'a [Value], kind: &str) -> Option<&'a Value> {
    objects.iter().find(|o| o["kind"] == kind)
}

/// The single container of the rendered Deployment.
pub fn container(objects: &[Value]) -> &Value {
    &find(objects, "Deployment").expect("a Deployment")["spec"]["template"]["spec"]["containers"][0]
}

/// The container's plain `env` values by name (entries with `valueFrom` are left out).
pub fn env(objects: &[Value]) -> BTreeMap<String, String> {
    container(objects)["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| Some((e["name"].as_str()?.to_owned(), e["value"].as_str()?.to_owned())))
        .collect()
}

/// Builds a kustomization the way `kustomize build` does for the subset `deploy/` uses:
/// `resources` (files and kustomization directories) and `patches` given by `path`, applied as
/// strategic-merge patches to the object with the patch's kind, name and namespace. Lists of
/// objects with a `name` (containers, env) merge by name; other lists are replaced. Any other
/// field fails, so `deploy/` cannot outgrow what this check understands.
pub fn kustomize(dir: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap();
    let kustomization: Value = serde_saphyr::from_str(&text).unwrap();
    for key in kustomization.as_object().unwrap().keys() {
        assert!(
            ["apiVersion", "kind", "resources", "patches"].contains(&key.as_str()),
            "{}: `{key}` is not understood by the drift check in tests/support/chart.rs",
            dir.display()
        );
    }
    let mut objects = Vec::new();
    for resource in kustomization["resources"].as_array().into_iter().flatten() {
        let path = dir.join(resource.as_str().unwrap());
        if path.is_dir() {
            objects.extend(kustomize(&path));
        } else {
            objects.extend(parse_documents(&std::fs::read_to_string(&path).unwrap()));
        }
    }
    for patch in kustomization["patches"].as_array().into_iter().flatten() {
        assert_eq!(patch.as_object().unwrap().len(), 1, "{}: patches take only `path`", dir.display());
        let path = dir.join(patch["path"].as_str().unwrap());
        for patch in parse_documents(&std::fs::read_to_string(&path).unwrap()) {
            let key = identity(&patch);
            let target = objects
                .iter_mut()
                .find(|o| identity(o) == key)
                .unwrap_or_else(|| panic!("{}: no object {key:?} to patch", path.display()));
            merge(target, &patch);
        }
    }
    objects
}

fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else if let Some(existing) = target.get_mut(key) {
                    merge(existing, value);
                } else {
                    target.insert(key.clone(), value.clone());
                }
            }
        }
        (Value::Array(target), Value::Array(patch)) if patch.iter().all(|item| item["name"].is_string()) => {
            for item in patch {
                match target.iter_mut().find(|t| t["name"] == item["name"]) {
                    Some(existing) => merge(existing, item),
                    None => target.push(item.clone()),
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

/// (kind, namespace, name) of an object.
pub fn identity(object: &Value) -> (String, String, String) {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (text(&object["kind"]), text(&object["metadata"]["namespace"]), text(&object["metadata"]["name"]))
}

/// Objects keyed by identity, without `helm test` hooks and without what only says which tool
/// made them (the `helm.sh/chart` and `app.kubernetes.io/managed-by` labels); env lists are
/// sorted by name, whose order means nothing to the controller.
pub fn normalize(objects: &[Value]) -> BTreeMap<(String, String, String), Value> {
    objects
        .iter()
        .filter(|o| o["metadata"]["annotations"]["helm.sh/hook"].is_null())
        .map(|object| {
            let mut object = object.clone();
            if let Some(labels) = object["metadata"]["labels"].as_object_mut() {
                labels.remove("helm.sh/chart");
                labels.remove("app.kubernetes.io/managed-by");
            }
            if let Some(containers) = object["spec"]["template"]["spec"]["containers"].as_array_mut() {
                for container in containers {
                    if let Some(env) = container["env"].as_array_mut() {
                        env.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
                    }
                }
            }
            (identity(&object), object)
        })
        .collect()
}

/// Server-side applies `object` (as a dry run when `dry_run`), with strict field validation.
pub async fn apply(client: &Client, object: &Value, dry_run: bool) -> Result<(), String> {
    let (group, version) = match object["apiVersion"].as_str().unwrap().split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", object["apiVersion"].as_str().unwrap()),
    };
    let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().unwrap());
    let (resource, capabilities) = pinned_kind(client, &gvk).await.map_err(|e| format!("{gvk:?}: {e}"))?;
    let api: Api<DynamicObject> = match capabilities.scope {
        Scope::Namespaced => {
            Api::namespaced_with(client.clone(), object["metadata"]["namespace"].as_str().unwrap(), &resource)
        }
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let mut params = PatchParams::apply("node-csr-approver-chart-tests").force().validation_strict();
    if dry_run {
        params = params.dry_run();
    }
    let name = object["metadata"]["name"].as_str().unwrap();
    api.patch(name, &params, &Patch::Apply(object)).await.map(drop).map_err(|e| format!("{:?}: {e}", identity(object)))
}

/// A permissive monitoring.coreos.com/v1 CRD of `kind` (ServiceMonitor, PrometheusRule), so the
/// apiserver knows the kind (its fields are not checked).
pub fn monitoring_crd(kind: &str) -> CustomResourceDefinition {
    let singular = kind.to_lowercase();
    let plural = format!("{singular}s");
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.monitoring.coreos.com")},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": singular, "listKind": format!("{kind}List")},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap()
}

/// A namespace where the restricted Pod Security Standard is enforced.
pub async fn restricted_namespace(admin: &kube::Client) -> String {
    let name = unique("chart");
    let namespace = json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}
    });
    apply(admin, &namespace, false).await.unwrap();
    name
}

/// The real binary started as the rendered Deployment's container would be: its `command`/`args`
/// and its `env`, with the downward-API values of pod `pod` in `namespace` filled in, plus
/// `KUBECONFIG` standing in for the in-cluster config.
pub struct Container {
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Container {
    pub fn start(objects: &[Value], pod: &str, namespace: &str, kubeconfig: &Path) -> Container {
        let spec = container(objects);
        let mut command = Command::new(env!("CARGO_BIN_EXE_node-csr-approver"));
        command.env_clear().env("KUBECONFIG", kubeconfig);
        for arg in spec["command"].as_array().into_iter().chain(spec["args"].as_array()).flatten() {
            command.arg(arg.as_str().unwrap());
        }
        for entry in spec["env"].as_array().unwrap() {
            let name = entry["name"].as_str().unwrap();
            let value = match (&entry["value"], entry["valueFrom"]["fieldRef"]["fieldPath"].as_str()) {
                (Value::String(value), _) => value.as_str(),
                (_, Some("metadata.name")) => pod,
                (_, Some("metadata.namespace")) => namespace,
                _ => panic!("env {name}: no value this test can fill in: {entry}"),
            };
            command.env(name, value);
        }
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("approver.log");
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Container { child, log, _dir: dir }
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// Everything the process logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
