//! Whether `--provider-regex` can only match whole names, decided from the parsed regex (not its
//! text), and which of its alternatives can match inside a longer name.

use regex_syntax::ast::{self, Ast};
use regex_syntax::hir::Look;

/// The alternatives of `pattern` that are not anchored at both ends (`^`/`\A` ... `$`/`\z`); empty
/// when every match of the whole regex spans the whole name. A pattern that does not parse is
/// returned whole (it is rejected elsewhere).
pub(super) fn unanchored_alternatives(pattern: &str) -> Vec<String> {
    if is_anchored(pattern) {
        return Vec::new();
    }
    let Ok(ast) = ast::parse::Parser::new().parse(pattern) else { return vec![pattern.to_owned()] };
    let named: Vec<String> = alternatives(&ast)
        .into_iter()
        .map(|span| pattern[span.start.offset..span.end.offset].to_owned())
        .filter(|alternative| !is_anchored(alternative))
        .collect();
    if named.is_empty() { vec![pattern.to_owned()] } else { named }
}

/// True when every match of `pattern` starts at the start and ends at the end of the text.
fn is_anchored(pattern: &str) -> bool {
    regex_syntax::parse(pattern).is_ok_and(|hir| {
        let properties = hir.properties();
        properties.look_set_prefix().contains(Look::Start) && properties.look_set_suffix().contains(Look::End)
    })
}

/// The spans of the top-level alternatives, looking through groups around an alternation.
fn alternatives(ast: &Ast) -> Vec<ast::Span> {
    match ast {
        Ast::Alternation(alternation) => alternation.asts.iter().flat_map(alternatives).collect(),
        Ast::Group(group) if matches!(*group.ast, Ast::Alternation(_) | Ast::Group(_)) => alternatives(&group.ast),
        other => vec![*other.span()],
    }
}

#[cfg(test)]
mod tests {
    use super::unanchored_alternatives;

    #[test]
    fn anchoring_is_read_from_the_parsed_regex() {
        for anchored in [r"^[a-z0-9-]+\.test\.ch$", r"\A.+\z", r"^a$|^b$", r"^(a|b)$", r"(?i)^a$", r"^(?:a$|b$)"] {
            assert!(unanchored_alternatives(anchored).is_empty(), "{anchored}");
        }
        let cases: [(&str, &[&str]); 6] = [
            (r"^[a-z0-9-]+\.test\.ch|^x$", &[r"^[a-z0-9-]+\.test\.ch"]),
            (r"^node.*", &[r"^node.*"]),
            (r"node\.example\.com$", &[r"node\.example\.com$"]),
            (r"^node\$", &[r"^node\$"]),
            (r"(^a$|b)", &["b"]),
            (r"(?m)^a$", &[r"(?m)^a$"]),
        ];
        for (pattern, named) in cases {
            assert_eq!(unanchored_alternatives(pattern), named.to_vec(), "{pattern}");
        }
    }
}
