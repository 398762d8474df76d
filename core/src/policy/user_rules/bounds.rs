//! The compile-time bounds on a rule. The CEL implementation has no cost limit of its own, so
//! the cost of one evaluation is bounded by the shape of the expression: its length (and the
//! parser's nesting limit), the number of nodes of its tree, and how deeply comprehensions
//! (`all`, `exists`, `exists_one`, `map`, `filter`) run inside each other's bodies. With the
//! inputs bounded too (`--allowed-dns-names`, `--allowed-ip-addresses`, a Node or Machine the
//! apiserver accepted), an evaluation visits at most [`MAX_NODES`] nodes times the product of
//! [`MAX_LOOP_DEPTH`] list sizes.

use cel::common::ast::{EntryExpr, Expr};
use cel::parser::Expression;

/// The longest expression, in bytes.
pub const MAX_SOURCE_BYTES: usize = 4096;
/// The most nodes of an expression's tree after its macros are expanded.
pub const MAX_NODES: usize = 1000;
/// The deepest nesting of comprehension bodies: a loop inside a loop, no deeper.
pub const MAX_LOOP_DEPTH: usize = 2;

/// Which bound an expression breaks, and by how much.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleBound {
    /// The source has this many bytes.
    #[error("the expression has {0} bytes, at most {MAX_SOURCE_BYTES} allowed")]
    SourceBytes(usize),
    /// The tree has this many nodes.
    #[error("the expression has {0} nodes, at most {MAX_NODES} allowed")]
    Nodes(usize),
    /// Comprehension bodies are nested this deep.
    #[error(
        "comprehensions (all, exists, exists_one, map, filter) are nested {0} deep, at most {MAX_LOOP_DEPTH} allowed"
    )]
    LoopDepth(usize),
}

/// Refuses a source longer than [`MAX_SOURCE_BYTES`].
pub(super) fn source(expression: &str) -> Result<(), RuleBound> {
    if expression.len() > MAX_SOURCE_BYTES {
        return Err(RuleBound::SourceBytes(expression.len()));
    }
    Ok(())
}

/// Refuses a tree of more than [`MAX_NODES`] nodes or loops nested deeper than [`MAX_LOOP_DEPTH`].
pub(super) fn tree(root: &Expression) -> Result<(), RuleBound> {
    let mut shape = Shape::default();
    shape.visit(root, 0);
    if shape.nodes > MAX_NODES {
        return Err(RuleBound::Nodes(shape.nodes));
    }
    if shape.loop_depth > MAX_LOOP_DEPTH {
        return Err(RuleBound::LoopDepth(shape.loop_depth));
    }
    Ok(())
}

#[derive(Default)]
struct Shape {
    nodes: usize,
    loop_depth: usize,
}

impl Shape {
    /// Counts `expr`'s nodes; `depth` is how many comprehension bodies it runs in.
    fn visit(&mut self, expr: &Expression, depth: usize) {
        self.nodes += 1;
        self.loop_depth = self.loop_depth.max(depth);
        match &expr.expr {
            Expr::Call(call) => {
                if let Some(target) = &call.target {
                    self.visit(target, depth);
                }
                call.args.iter().for_each(|arg| self.visit(arg, depth));
            }
            Expr::Comprehension(loop_) => {
                for once in [&loop_.iter_range, &loop_.accu_init, &loop_.result] {
                    self.visit(once, depth);
                }
                for body in [&loop_.loop_cond, &loop_.loop_step] {
                    self.visit(body, depth + 1);
                }
            }
            Expr::List(list) => list.elements.iter().for_each(|element| self.visit(element, depth)),
            Expr::Map(map) => map.entries.iter().for_each(|entry| self.entry(&entry.expr, depth)),
            Expr::Struct(object) => object.entries.iter().for_each(|entry| self.entry(&entry.expr, depth)),
            Expr::Select(select) => self.visit(&select.operand, depth),
            Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => {}
        }
    }

    fn entry(&mut self, entry: &EntryExpr, depth: usize) {
        match entry {
            EntryExpr::MapEntry(pair) => {
                self.visit(&pair.key, depth);
                self.visit(&pair.value, depth);
            }
            EntryExpr::StructField(field) => self.visit(&field.value, depth),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{RuleError, UserRule};

    fn compile(expression: &str) -> Result<UserRule, RuleError> {
        UserRule::compile("r", expression, "m")
    }

    fn bound(expression: &str) -> String {
        match compile(expression) {
            Err(RuleError::Bound { problem, .. }) => problem.to_string(),
            other => panic!("{expression:.60}: {other:?}"),
        }
    }

    #[test]
    fn the_source_is_at_most_4096_bytes() {
        let literal = |bytes: usize| format!("'{}' != ''", "a".repeat(bytes - 8));
        assert!(compile(&literal(4096)).is_ok());
        assert_eq!(bound(&literal(4097)), "the expression has 4097 bytes, at most 4096 allowed");
    }

    #[test]
    fn the_tree_has_at_most_1000_nodes() {
        let list = |elements: usize| format!("[{}]", vec!["1"; elements].join(","));
        assert!(compile(&list(999)).is_ok());
        assert_eq!(bound(&list(1000)), "the expression has 1001 nodes, at most 1000 allowed");
        let map = |entries: usize| format!("{{{}}}", vec!["1:1"; entries].join(","));
        assert!(compile(&map(499)).is_ok());
        assert_eq!(bound(&map(500)), "the expression has 1001 nodes, at most 1000 allowed");
        let object = |fields: usize| format!("T{{{}}}", vec!["a:1"; fields].join(","));
        assert!(compile(&object(999)).is_ok());
        assert_eq!(bound(&object(1000)), "the expression has 1001 nodes, at most 1000 allowed");
        let calls = |args: usize| format!("'a'.startsWith({})", vec!["'a'"; args].join(" + "));
        assert!(bound(&calls(500)).starts_with("the expression has 1001 nodes"));
        let fields = |n: usize| format!("request{}", ".a".repeat(n));
        assert!(bound(&fields(1000)).starts_with("the expression has 1001 nodes"));
    }

    #[test]
    fn loops_nest_at_most_two_deep_in_their_bodies() {
        assert!(compile("request.dnsNames.all(a, request.dnsNames.exists(b, a == b))").is_ok());
        let three = "request.dnsNames.all(a, request.dnsNames.all(b, request.dnsNames.exists(c, a == c)))";
        assert_eq!(
            bound(three),
            "comprehensions (all, exists, exists_one, map, filter) are nested 3 deep, at most 2 allowed"
        );
        let in_condition = "[1].exists(a, [2].exists(b, [3].exists(c, true)))";
        assert!(bound(in_condition).contains("nested 3 deep"));
        // A loop over what another loop returned runs after it, not inside it.
        assert!(compile("[1].map(a, [2].map(b, b)).all(c, c == [2])").is_ok());
        assert!(compile("[1].map(a, [2].map(b, b)).all(c, c.all(d, d == 2))").is_ok());
    }

    #[test]
    fn a_rule_name_is_1_to_63_lowercase_letters_digits_and_dashes() {
        assert!(UserRule::compile(&"a".repeat(63), "true", "m").is_ok());
        assert!(UserRule::compile("gpu-pool-2", "true", "m").is_ok());
        for bad in ["a".repeat(64), String::new(), "Gpu".into(), "gpu_pool".into(), "gpu.pool".into()] {
            assert_eq!(UserRule::compile(&bad, "true", "m").unwrap_err(), RuleError::Name(bad.clone()));
        }
    }
}
