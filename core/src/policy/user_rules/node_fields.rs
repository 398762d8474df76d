//! Which fields of `node` a rule reads, and which of them the node writes itself: a kubelet
//! creates its own Node and updates it (labels, annotations, spec, all of status); NodeRestriction
//! only keeps it from the labels under `node-restriction.kubernetes.io/` and the
//! `kubernetes.io`/`k8s.io` labels outside the few the kubelet sets (and from changing its
//! taints once registered, though it chooses them when it registers). A rule that keys on a
//! field the node writes can be escaped by the node.

use cel::common::ast::{CallExpr, EntryExpr, Expr, LiteralValue, operators};
use cel::parser::Expression;

/// The labels a kubelet may set on its own Node although they are in the `kubernetes.io`
/// namespace (`k8s.io/kubelet/pkg/apis`, `kubeletLabels`).
const KUBELET_LABELS: [&str; 11] = [
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];

/// The label namespaces a kubelet may set (`kubeletLabelNamespaces`), themselves and their
/// subdomains.
const KUBELET_NAMESPACES: [&str; 2] = ["kubelet.kubernetes.io", "node.kubernetes.io"];

/// The fields of the Node a node cannot write (NodeRestriction, and the apiserver for the rest).
const FIXED_FIELDS: [&str; 3] = ["name", "uid", "creationTimestamp"];

/// One step of a path into `node`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// A field or a map key written as a literal.
    Key(String),
    /// A key known only when the rule runs.
    Any,
}

/// True when NodeRestriction keeps a kubelet from adding, changing or removing the label `key`
/// (`getForbiddenLabels` of the NodeRestriction admission plugin).
pub(crate) fn label_is_restricted(key: &str) -> bool {
    let Some((namespace, _)) = key.split_once('/') else { return false };
    let within = |domain: &str| namespace == domain || namespace.ends_with(&format!(".{domain}"));
    if within("node-restriction.kubernetes.io") {
        return true;
    }
    let kubernetes = within("kubernetes.io") || within("k8s.io");
    kubernetes && !KUBELET_LABELS.contains(&key) && !KUBELET_NAMESPACES.iter().any(|allowed| within(allowed))
}

/// The fields of `node` that `root` reads and the node writes itself, as they are written in a
/// rule (`node.metadata.labels["pool"]`, `node.status`, or `node` for an alias of all of it),
/// each once, in the order they appear.
pub(crate) fn node_writable_reads(root: &Expression) -> Vec<String> {
    let mut reads = Vec::new();
    collect(root, &mut reads);
    let mut shown: Vec<String> = reads.into_iter().filter(|path| writable(path)).map(|path| show(&path)).collect();
    let mut seen = Vec::new();
    shown.retain(|path| {
        let new = !seen.contains(path);
        seen.push(path.clone());
        new
    });
    shown
}

/// The path into `node` that `expr` reads, if it is one: `node`, a field of it, or an index of
/// it by a literal or another expression.
fn path(expr: &Expression) -> Option<Vec<Step>> {
    match &expr.expr {
        Expr::Ident(name) if name == "node" => Some(Vec::new()),
        Expr::Select(select) => {
            let mut path = path(&select.operand)?;
            path.push(Step::Key(select.field.clone()));
            Some(path)
        }
        Expr::Call(call) if call.func_name == operators::INDEX && call.args.len() == 2 => {
            let mut path = path(&call.args[0])?;
            path.push(key(&call.args[1]));
            Some(path)
        }
        _ => None,
    }
}

fn key(expr: &Expression) -> Step {
    match &expr.expr {
        Expr::Literal(LiteralValue::String(text)) => Step::Key(text.inner().to_owned()),
        _ => Step::Any,
    }
}

/// Records every path into `node` that `expr` reads, longest first: `'k' in node.x` reads
/// `node.x["k"]`.
fn collect(expr: &Expression, reads: &mut Vec<Vec<Step>>) {
    if let Some(found) = path(expr) {
        reads.push(found);
        keys_of(expr, reads);
        return;
    }
    match &expr.expr {
        Expr::Call(call) => {
            if is_null_test(call) {
                return;
            }
            if call.func_name == operators::IN
                && let [needle, haystack] = call.args.as_slice()
                && let Some(mut found) = path(haystack)
            {
                found.push(key(needle));
                reads.push(found);
                return collect(needle, reads);
            }
            call.target.iter().for_each(|target| collect(target, reads));
            call.args.iter().for_each(|arg| collect(arg, reads));
        }
        Expr::Comprehension(loop_) => {
            for part in [&loop_.iter_range, &loop_.accu_init, &loop_.loop_cond, &loop_.loop_step, &loop_.result] {
                collect(part, reads);
            }
        }
        Expr::List(list) => list.elements.iter().for_each(|element| collect(element, reads)),
        Expr::Map(map) => map.entries.iter().for_each(|entry| entry_of(&entry.expr, reads)),
        Expr::Struct(object) => object.entries.iter().for_each(|entry| entry_of(&entry.expr, reads)),
        Expr::Select(select) => collect(&select.operand, reads),
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => {}
    }
}

/// True for `node == null`, `node != null` and the same with `null` first: the only use of `node`
/// itself, outside a path into it, that reads nothing the node writes.
fn is_null_test(call: &CallExpr) -> bool {
    let node = |e: &Expression| matches!(&e.expr, Expr::Ident(name) if name == "node");
    let null = |e: &Expression| matches!(e.expr, Expr::Literal(LiteralValue::Null));
    let equality = call.func_name == operators::EQUALS || call.func_name == operators::NOT_EQUALS;
    match call.args.as_slice() {
        [a, b] => equality && ((node(a) && null(b)) || (null(a) && node(b))),
        _ => false,
    }
}

/// Records what the keys of the path `expr` read (`node.metadata.labels[node.metadata.name]`).
fn keys_of(expr: &Expression, reads: &mut Vec<Vec<Step>>) {
    match &expr.expr {
        Expr::Select(select) => keys_of(&select.operand, reads),
        Expr::Call(call) => {
            if let [container, key] = call.args.as_slice() {
                collect(key, reads);
                keys_of(container, reads);
            }
        }
        _ => {}
    }
}

fn entry_of(entry: &EntryExpr, reads: &mut Vec<Vec<Step>>) {
    match entry {
        EntryExpr::MapEntry(pair) => {
            collect(&pair.key, reads);
            collect(&pair.value, reads);
        }
        EntryExpr::StructField(field) => collect(&field.value, reads),
    }
}

/// True when the node writes some of what `path` reads: anything but its fixed metadata and a
/// restricted label read by its key. The empty path is `node` itself used other than in a path
/// or a null test (an alias: `[node][0]`, `dyn(node)`, a conditional or a macro over it), which
/// may read anything of it.
fn writable(path: &[Step]) -> bool {
    let key = |index: usize| match path.get(index) {
        Some(Step::Key(key)) => Some(key.as_str()),
        _ => None,
    };
    match (path.len(), key(0), key(1)) {
        (2.., Some("metadata"), Some(field)) if FIXED_FIELDS.contains(&field) => false,
        (3.., Some("metadata"), Some("labels")) => !key(2).is_some_and(label_is_restricted),
        _ => true,
    }
}

fn show(path: &[Step]) -> String {
    let mut text = String::from("node");
    for step in path {
        match step {
            Step::Key(key) if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                text.push('.');
                text.push_str(key);
            }
            Step::Key(key) => text.push_str(&format!("[{key:?}]")),
            Step::Any => text.push_str("[…]"),
        }
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn reads(expression: &str) -> Vec<String> {
        node_writable_reads(super::super::env().unwrap().compile(expression).unwrap().expression())
    }

    #[test]
    fn labels_nodes_cannot_write_are_those_noderestriction_forbids() {
        for restricted in [
            "node-restriction.kubernetes.io/pool",
            "pool.node-restriction.kubernetes.io/x",
            "kubernetes.io/role",
            "node-role.kubernetes.io/worker",
            "example.k8s.io/x",
        ] {
            assert!(label_is_restricted(restricted), "{restricted}");
        }
        for writable in [
            "pool",
            "example.com/pool",
            "kubernetes.io/hostname",
            "topology.kubernetes.io/zone",
            "node.kubernetes.io/instance-type",
            "node.kubernetes.io/anything",
            "x.kubelet.kubernetes.io/y",
            "kubernetes.io.example.com/x",
        ] {
            assert!(!label_is_restricted(writable), "{writable}");
        }
    }

    #[test]
    fn every_read_of_a_field_the_node_writes_is_named_once() {
        assert_eq!(
            reads("node.metadata.labels['pool'] == 'gpu' || node.metadata.labels.pool == 'x'"),
            ["node.metadata.labels.pool"]
        );
        assert_eq!(reads("'pool' in node.metadata.labels"), ["node.metadata.labels.pool"]);
        assert_eq!(reads("node.metadata.labels.exists(k, k == 'a')"), ["node.metadata.labels"]);
        assert_eq!(reads("request.nodeName in node.metadata.labels"), ["node.metadata.labels[…]"]);
        assert_eq!(
            reads("has(node.metadata.annotations.a) && node.status.addresses.size() > 0 && node.spec.taints == []"),
            ["node.metadata.annotations.a", "node.status.addresses", "node.spec.taints"]
        );
        assert_eq!(reads("[node.metadata].size() == 1"), ["node.metadata"]);
        assert_eq!(reads("node.metadata.labels[request.nodeName] == ''"), ["node.metadata.labels[…]"]);
        assert_eq!(
            reads("node.status.addresses[node.metadata.annotations.i].address == ''"),
            ["node.status.addresses[…].address", "node.metadata.annotations.i"]
        );
        assert_eq!(
            reads("{'a': node.metadata.annotations.x, node.spec.providerID: 1}.size() == 2"),
            ["node.metadata.annotations.x", "node.spec.providerID"]
        );
        assert_eq!(
            reads("node.metadata.labels['example.com/pool'] == node.metadata.annotations['my_key']"),
            ["node.metadata.labels[\"example.com/pool\"]", "node.metadata.annotations.my_key"]
        );
        assert_eq!(reads("node.metadata.labels[''] == ''"), ["node.metadata.labels[\"\"]"]);
        assert_eq!(
            reads("node.metadata.labels[node.metadata.annotations['k']]['x'] == ''"),
            ["node.metadata.labels[…].x", "node.metadata.annotations.k"]
        );
    }

    #[test]
    fn node_read_through_an_alias_is_named_whole() {
        let aliased = [
            "[node][0].metadata.labels['node-restriction.kubernetes.io/pool'] == 'gpu'",
            "dyn(node).metadata.labels.pool == 'gpu'",
            "{'n': node}.n.metadata.labels.pool == 'gpu'",
            "(true ? node : node).status.addresses.size() > 0",
            "[node].all(n, n.metadata.labels['x'] == 'y')",
            "node.metadata.labels[string(node)] == ''",
            "node == request",
            "request == node",
            "node + null == null",
        ];
        let missed: Vec<&str> = aliased.into_iter().filter(|e| !reads(e).contains(&"node".to_owned())).collect();
        assert_eq!(missed, Vec::<&str>::new());
    }

    #[test]
    fn restricted_labels_fixed_metadata_and_other_variables_are_not_named() {
        let safe = "node == null || null != node || node.metadata.name == request.nodeName && \
                    node.metadata.labels['node-restriction.kubernetes.io/pool'] == 'gpu' && \
                    'node-role.kubernetes.io/worker' in node.metadata.labels && machine.metadata.labels.pool == 'a' && \
                    has(node.metadata.uid) && request.dnsNames.all(n, n.endsWith('.example.com'))";
        assert_eq!(reads(safe), Vec::<String>::new());
    }
}
