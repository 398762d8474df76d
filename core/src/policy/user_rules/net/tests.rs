//! The functions against Go's answers (`core/tests/fixtures/cel_ip_corpus.jsonl`, printed by
//! `tools/cel-ip-oracle` from the Kubernetes library's own code), and the examples of the
//! library's documentation.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use cel::{Context, Value};
use serde_json::Value as Json;

/// Evaluates `expression` with the rules' environment and `s` (and `t`) bound to strings.
fn eval(expression: &str, s: &str, t: &str) -> Result<Value, String> {
    let env = super::super::env().unwrap();
    let program = env.compile(expression).map_err(|e| e.to_string())?;
    let mut context = Context::with_env(env);
    context.add_variable_from_value("s", s);
    context.add_variable_from_value("t", t);
    program.execute(&context).map_err(|e| e.to_string())
}

fn corpus() -> Vec<Json> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cel_ip_corpus.jsonl");
    std::fs::read_to_string(path).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

fn go(value: &Json) -> Value {
    match value {
        Json::Bool(flag) => Value::Bool(*flag),
        Json::Number(n) => Value::Int(n.as_i64().unwrap()),
        Json::String(text) => Value::String(text.clone().into()),
        other => panic!("{other}"),
    }
}

#[test]
fn every_function_answers_as_the_kubernetes_library_does() {
    let rows = corpus();
    assert!(rows.len() > 100, "{}", rows.len());
    let mut compared = 0;
    for row in rows {
        let (input, other) = (row["input"].as_str().or(row["cidr"].as_str()).unwrap(), row["other"].as_str());
        let ok = row["ok"].as_bool().unwrap();
        let checks: Vec<(&str, &str)> = match row["kind"].as_str().unwrap() {
            "ip" => vec![
                ("isIP(s)", "ok"),
                ("string(ip(s))", "string"),
                ("ip(s).family()", "family"),
                ("ip.isCanonical(s)", "isCanonical"),
                ("ip(s).isUnspecified()", "isUnspecified"),
                ("ip(s).isLoopback()", "isLoopback"),
                ("ip(s).isLinkLocalMulticast()", "isLinkLocalMulticast"),
                ("ip(s).isLinkLocalUnicast()", "isLinkLocalUnicast"),
                ("ip(s).isGlobalUnicast()", "isGlobalUnicast"),
                ("ip(s) == ip(s) && ip(string(ip(s))) == ip(s) && ip(s) != ip('0.0.0.1')", "same"),
            ],
            "cidr" => vec![
                ("isCIDR(s)", "ok"),
                ("string(cidr(s))", "string"),
                ("string(cidr(s).ip())", "ip"),
                ("string(cidr(s).masked())", "masked"),
                ("cidr(s).prefixLength()", "prefixLength"),
                (
                    "cidr(s) == cidr(s) && cidr(string(cidr(s))) == cidr(s) && cidr(s).masked() == cidr(string(cidr(s).masked()))",
                    "same",
                ),
            ],
            "containsIP" => vec![("cidr(s).containsIP(t)", "result"), ("cidr(s).containsIP(ip(t))", "result")],
            _ => vec![("cidr(s).containsCIDR(t)", "result"), ("cidr(s).containsCIDR(cidr(t))", "result")],
        };
        for (expression, field) in checks {
            let got = eval(expression, input, other.unwrap_or_default());
            let want = match field {
                "ok" => Some(Json::Bool(ok)),
                "same" => ok.then_some(Json::Bool(true)),
                field => ok.then(|| row[field].clone()),
            };
            match want {
                Some(want) => assert_eq!(got, Ok(go(&want)), "{expression} with {input:?} {other:?}"),
                None if expression.starts_with("is") => {}
                None => assert!(got.is_err(), "{expression} with {input:?} {other:?}: {got:?}, Go errs"),
            }
            compared += 1;
        }
    }
    assert!(compared > 500, "{compared}");
}

#[test]
fn the_examples_of_the_kubernetes_documentation_hold() {
    for example in [
        "ip('127.0.0.1').family() == 4 && ip('::1').family() == 6",
        "!isIP('127.0.0.256') && !isIP(':::1') && isIP('::1')",
        "ip.isCanonical('2001:db8::abcd') && !ip.isCanonical('2001:DB8::ABCD')",
        "!ip.isCanonical('2001:db8::0:0:0:abcd')",
        "ip('0.0.0.0').isUnspecified() && ip('::').isUnspecified() && !ip('::1').isUnspecified()",
        "ip('224.0.0.1').isLinkLocalMulticast() && ip('ff02::1').isLinkLocalMulticast()",
        "!ip('fd00::1').isLinkLocalMulticast() && ip('fe80::1').isLinkLocalUnicast()",
        "ip('192.168.0.1').isGlobalUnicast() && !ip('255.255.255.255').isGlobalUnicast()",
        "cidr('192.168.0.0/24').containsIP(ip('192.168.0.1')) && !cidr('192.168.0.0/24').containsIP('192.168.1.1')",
        "cidr('192.168.0.0/16').containsCIDR('192.168.10.0/24') && !cidr('192.168.1.0/24').containsCIDR(cidr('192.168.2.0/24'))",
        "cidr('192.168.0.1/24').ip() == ip('192.168.0.1') && cidr('192.168.0.1/24').masked() == cidr('192.168.0.0/24')",
        "cidr('192.168.0.0/24') == cidr('192.168.0.0/24').masked() && cidr('192.168.0.1/24') != cidr('192.168.0.1/24').masked()",
        "cidr('192.168.0.0/16').prefixLength() == 16 && cidr('::1/128').prefixLength() == 128",
        "type(ip('::1')) == net.IP && type(cidr('::/0')) == net.CIDR && ip('::1') != cidr('::1/128').masked().ip() == false",
    ] {
        assert_eq!(eval(example, "", ""), Ok(Value::Bool(true)), "{example}");
    }
}

#[test]
fn a_string_that_is_not_an_address_is_an_error_naming_it() {
    let error = eval("ip(s)", "::ffff:1.2.3.4", "").unwrap_err();
    assert!(error.contains("IPv4-mapped IPv6 address \"::ffff:1.2.3.4\" is not allowed"), "{error}");
    let error = eval("cidr('10.0.0.0/8').containsIP(s)", "10.0.0.01", "").unwrap_err();
    assert!(error.contains("\"10.0.0.01\""), "{error}");
    let error = eval("cidr(s)", "10.0.0.0/08", "").unwrap_err();
    assert!(error.contains("bad bits after slash"), "{error}");
}
