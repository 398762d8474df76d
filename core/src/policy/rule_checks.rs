//! The rules of `--rules` as checks: one row per rule, run after every built-in check passed,
//! so they can only narrow what is approved.

mod inputs;
mod values;

use cel::{Context, Value};

pub(crate) use inputs::RuleInputs;
pub use values::node_projection;

use super::reason::Reason;
use super::report::{CheckId, Failure, Report};
use super::user_rules::{self, UserRule, UserRules};

/// Records one row per rule (all run, the first failure decides): a failure of every rule when
/// the inputs could not be given (`inputs` is `Err`), else a failure for each rule that does not
/// evaluate to `true`.
pub(crate) fn record(rules: &UserRules, inputs: Result<RuleInputs, Failure>, report: &mut Report) {
    let env = user_rules::env().map_err(|error| Failure::deny(Reason::RuleFailed, error.to_string()));
    let context = inputs.and_then(|inputs| Ok(inputs.context(env?)));
    for rule in rules.iter() {
        let result = match &context {
            Ok(context) => check(rule, context),
            Err(failure) => {
                Err(Failure { message: format!("rule {:?}: {}", rule.name(), failure.message), ..failure.clone() })
            }
        };
        report.record(CheckId::Rule, result);
    }
}

/// Runs one rule: `Ok` when it evaluates to `true`; `false`, an error or a value of another type
/// is a failure naming the rule.
fn check(rule: &UserRule, context: &Context) -> Result<String, Failure> {
    let failed = |why: String| Failure::deny(Reason::RuleFailed, format!("rule {:?} {why}", rule.name()));
    match rule.execute(context) {
        Ok(Value::Bool(true)) => Ok(format!("{}: holds", rule.name())),
        Ok(Value::Bool(false)) => Err(failed(format!("failed: {}", rule.message()))),
        Ok(other) => Err(failed(format!("evaluated to {:?}, not a bool ({})", other.type_of(), rule.message()))),
        Err(error) => Err(failed(format!("could not be evaluated: {error} ({})", rule.message()))),
    }
}
