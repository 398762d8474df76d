//! Rules of the operator's own: CEL expressions (`--rules`), compiled once at start with the
//! bounds that keep one evaluation cheap. They run in `rule_checks`, after every built-in check.

mod bounds;
mod net;
mod node_fields;

use std::sync::{Arc, LazyLock};

use cel::{Context, DeclarationError, Env, ParseErrors, Program, ResolveResult};

pub use bounds::RuleBound;

/// The environment every rule is compiled and evaluated with: CEL's standard library and macros,
/// and the IP and CIDR functions of Kubernetes ([`net`]).
static ENV: LazyLock<Result<Arc<Env>, NotCompiled>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    env.add_extension(net::library).map_err(NotCompiled::Library)?;
    Ok(Arc::new(env))
});

/// The environment to evaluate rules in, or why it could not be built.
pub(crate) fn env() -> Result<Arc<Env>, NotCompiled> {
    ENV.clone()
}

/// Why a rule cannot be used; the program stops at start naming the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// The name is not `[a-z0-9-]+` of at most 63 characters.
    #[error("rule name {0:?} is not 1 to 63 characters of a-z, 0-9 and '-'")]
    Name(String),
    /// Two rules share a name.
    #[error("rule name {0:?} is used twice")]
    Duplicate(String),
    /// The expression breaks a compile-time bound ([`bounds`]).
    #[error("rule {name:?}: {problem}")]
    Bound {
        /// The rule.
        name: String,
        /// Which bound, and by how much.
        problem: RuleBound,
    },
    /// The expression does not parse.
    #[error("rule {name:?} does not compile: {error}")]
    Compile {
        /// The rule.
        name: String,
        /// Why.
        error: NotCompiled,
    },
}

/// Why an expression does not compile.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NotCompiled {
    /// The environment's IP and CIDR functions cannot be declared.
    #[error("the IP and CIDR functions cannot be declared: {0}")]
    Library(DeclarationError),
    /// The parser's errors, said on one line.
    #[error("{}", .0.to_string().split_whitespace().collect::<Vec<_>>().join(" "))]
    Parse(Arc<ParseErrors>),
}

impl PartialEq for NotCompiled {
    fn eq(&self, other: &NotCompiled) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for NotCompiled {}

/// One compiled rule.
#[derive(Debug, Clone)]
pub struct UserRule {
    name: String,
    message: String,
    program: Arc<Program>,
    /// The fields of `node` the rule reads that the node writes itself, as written in the rule.
    node_writable: Vec<String>,
}

impl UserRule {
    /// Compiles `expression` under `name` (`[a-z0-9-]+`); `message` says what a failure means.
    pub fn compile(name: &str, expression: &str, message: &str) -> Result<UserRule, RuleError> {
        let valid_name = (1..=63).contains(&name.len())
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !valid_name {
            return Err(RuleError::Name(name.to_owned()));
        }
        let bound = |problem: RuleBound| RuleError::Bound { name: name.to_owned(), problem };
        bounds::source(expression).map_err(bound)?;
        let env = env().map_err(|error| RuleError::Compile { name: name.to_owned(), error })?;
        let program = env
            .compile(expression)
            .map_err(|e| RuleError::Compile { name: name.to_owned(), error: NotCompiled::Parse(Arc::new(e)) })?;
        bounds::tree(program.expression()).map_err(bound)?;
        let node_writable = node_fields::node_writable_reads(program.expression());
        Ok(UserRule { name: name.to_owned(), message: message.to_owned(), program: Arc::new(program), node_writable })
    }

    /// The rule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What a failure of the rule means.
    pub(crate) fn message(&self) -> &str {
        &self.message
    }

    /// Evaluates the rule in `context`.
    pub(crate) fn execute(&self, context: &Context) -> ResolveResult {
        self.program.execute(context)
    }
}

/// A Kubernetes object as the rules see it: as the apiserver returns it, less
/// `metadata.managedFields` (the apiserver's record of who wrote which field).
pub fn object_for_rules(mut object: serde_json::Value) -> Arc<serde_json::Value> {
    if let Some(metadata) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        metadata.remove("managedFields");
    }
    Arc::new(object)
}

/// The rules, in file order; none by default.
#[derive(Debug, Clone, Default)]
pub struct UserRules {
    rules: Arc<[UserRule]>,
    read_node: bool,
    read_machine: bool,
}

impl UserRules {
    /// The rules, refused when two share a name.
    pub fn new(rules: Vec<UserRule>) -> Result<UserRules, RuleError> {
        for (index, rule) in rules.iter().enumerate() {
            if rules[..index].iter().any(|earlier| earlier.name == rule.name) {
                return Err(RuleError::Duplicate(rule.name.clone()));
            }
        }
        let reads = |variable: &str| rules.iter().any(|rule| rule.program.references().has_variable(variable));
        let (read_node, read_machine) = (reads("node"), reads("machine"));
        Ok(UserRules { rules: rules.into(), read_node, read_machine })
    }

    /// True when there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules, in order.
    pub fn iter(&self) -> impl Iterator<Item = &UserRule> {
        self.rules.iter()
    }

    /// True when some rule reads `node`: only then is the Node read (a comprehension variable
    /// named `node` counts too, which reads it when not needed, never the other way).
    pub fn read_node(&self) -> bool {
        self.read_node
    }

    /// A warning for every field of `node` a rule reads that the node writes itself: a node can
    /// change such a field to escape the rule.
    pub fn warnings(&self) -> Vec<String> {
        let reads = self.rules.iter().flat_map(|rule| rule.node_writable.iter().map(move |field| (rule.name(), field)));
        reads
            .map(|(rule, field)| {
                format!(
                    "rule {rule:?} reads {field}, which the node writes itself and can change to escape the rule: key \
                     it on a label under node-restriction.kubernetes.io/ or on the Machine (docs/rules.md)"
                )
            })
            .collect()
    }

    /// True when some rule reads `machine` (and so the Machines' objects are kept).
    pub fn read_machine(&self) -> bool {
        self.read_machine
    }
}
