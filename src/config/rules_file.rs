//! `--rules FILE`: the operator's CEL rules, read and compiled once at start.

use std::path::Path;

use serde::Deserialize;

use crate::policy::{RuleError, UserRule, UserRules};

/// The largest rules file read.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// The most rules a file may hold: every CSR that passes the built-in checks runs them all.
const MAX_RULES: usize = 64;

/// The file: `rules:`, a list of named expressions.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    #[serde(default)]
    rules: Vec<RuleEntry>,
}

/// One rule as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleEntry {
    name: String,
    expression: String,
    message: String,
}

/// Why the rules file cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RulesFileError {
    /// The file cannot be read.
    #[error("cannot read: {0}")]
    Unreadable(#[from] std::io::Error),
    /// The file is larger than [`MAX_FILE_BYTES`].
    #[error("the file has {0} bytes, at most {MAX_FILE_BYTES} allowed")]
    TooLarge(u64),
    /// Not YAML of the file's shape (the message on one line).
    #[error("{}", crate::values::one_line(&.0.to_string()))]
    Yaml(Box<serde_saphyr::Error>),
    /// More than [`MAX_RULES`] rules.
    #[error("{0} rules, at most {MAX_RULES} allowed")]
    TooMany(usize),
    /// A rule that does not compile, or a name that is wrong or used twice.
    #[error(transparent)]
    Rule(#[from] RuleError),
}

/// Reads and compiles every rule of the file at `path`; the error names the rule and says why.
pub(super) fn read(path: &Path) -> Result<UserRules, RulesFileError> {
    let size = std::fs::metadata(path)?.len();
    if size > MAX_FILE_BYTES {
        return Err(RulesFileError::TooLarge(size));
    }
    parse(&std::fs::read_to_string(path)?)
}

/// Compiles the rules of a file's text.
fn parse(text: &str) -> Result<UserRules, RulesFileError> {
    if text.trim().is_empty() {
        return Ok(UserRules::default());
    }
    let file: RulesFile = serde_saphyr::from_str(text).map_err(|error| RulesFileError::Yaml(Box::new(error)))?;
    if file.rules.len() > MAX_RULES {
        return Err(RulesFileError::TooMany(file.rules.len()));
    }
    let rules = file.rules.iter().map(|rule| UserRule::compile(&rule.name, &rule.expression, &rule.message));
    Ok(UserRules::new(rules.collect::<Result<Vec<_>, _>>()?)?)
}

#[cfg(test)]
mod tests {
    use super::parse;

    fn rule(name: &str, expression: &str) -> String {
        format!("rules:\n  - name: {name}\n    expression: {expression:?}\n    message: m\n")
    }

    #[test]
    fn every_rule_compiles_or_the_error_names_it() {
        let rules = parse(
            &(rule("pool-a", "request.nodeName.startsWith('a')")
                + "  - name: pool-b\n    expression: node == null\n    message: m\n"),
        )
        .unwrap();
        assert_eq!(rules.iter().map(|r| r.name()).collect::<Vec<_>>(), ["pool-a", "pool-b"]);
        assert!(rules.read_node() && !rules.read_machine());
        let error = parse(&rule("broken", "request.nodeName ==")).unwrap_err().to_string();
        assert!(error.starts_with("rule \"broken\" does not compile: "), "{error}");
    }

    #[test]
    fn names_are_lowercase_words_and_unique() {
        for bad in ["Pool", "pool_a", "", "a b"] {
            assert!(
                parse(&rule(&format!("{bad:?}"), "true")).unwrap_err().to_string().contains("is not 1 to 63"),
                "{bad}"
            );
        }
        let twice = rule("a", "true") + &rule("a", "true")["rules:\n".len()..];
        assert_eq!(parse(&twice).unwrap_err().to_string(), "rule name \"a\" is used twice");
    }

    #[test]
    fn a_rule_needs_its_three_keys_and_no_others() {
        assert!(parse("rules:\n  - name: a\n    expression: 'true'\n").is_err());
        assert!(parse("rules:\n  - name: a\n    expression: 'true'\n    message: m\n    when: x\n").is_err());
        assert!(parse("").unwrap().is_empty());
    }

    #[test]
    fn a_file_holds_at_most_the_allowed_rules() {
        let many: String =
            (0..=super::MAX_RULES).map(|i| rule(&format!("r{i}"), "true")["rules:\n".len()..].to_owned()).collect();
        assert!(parse(&format!("rules:\n{many}")).unwrap_err().to_string().contains("at most 64"));
    }
}
