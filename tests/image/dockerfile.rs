//! The Dockerfile, read as far as `scripts/build-image.sh` reproduces it: of its build stage, each
//! platform's Rust target and jemalloc page-size flag and the cargo-auditable it builds with; of its
//! final stage, its base, the one file it copies, its user, entrypoint and command. Any other
//! instruction in the final stage is an error, so a Dockerfile that grows one fails the test until
//! the script does the same.

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::Value;

/// What the build stage does for each platform (`TARGETARCH`).
#[derive(Debug)]
pub struct BuildStage {
    /// The Rust target each `TARGETARCH` builds, e.g. `arm64` → `aarch64-unknown-linux-musl`.
    pub targets: BTreeMap<String, String>,
    /// `JEMALLOC_SYS_WITH_LG_PAGE` for the `TARGETARCH`s that set it.
    pub lg_page: BTreeMap<String, u32>,
    /// The cargo-auditable version it installs, when the binary is built with `cargo auditable`.
    pub auditable: Option<String>,
}

/// Reads the stage named `build` of `text`.
pub fn build_stage(text: &str) -> Result<BuildStage, String> {
    let all = instructions(text);
    let start = all
        .iter()
        .position(|(keyword, rest)| keyword == "FROM" && rest.ends_with(" AS build"))
        .ok_or("the Dockerfile has no stage `AS build`")?;
    let end =
        all[start + 1..].iter().position(|(keyword, _)| keyword == "FROM").map_or(all.len(), |end| start + 1 + end);
    let runs: Vec<&str> =
        all[start + 1..end].iter().filter(|(keyword, _)| keyword == "RUN").map(|(_, rest)| rest.as_str()).collect();
    let runs = runs.join("\n");
    let captures = |pattern: &str| -> Vec<(String, String)> {
        Regex::new(pattern)
            .unwrap()
            .captures_iter(&runs)
            .map(|found| (found[1].to_owned(), found[2].to_owned()))
            .collect()
    };
    let targets: BTreeMap<String, String> = captures(r"(\w+)\) echo ([\w-]+) ;;").into_iter().collect();
    if targets.is_empty() {
        return Err("the build stage maps no TARGETARCH to a Rust target (`amd64) echo TARGET ;;`)".to_owned());
    }
    let lg_page = captures(r#"if \[ "\$\{TARGETARCH\}" = (\w+) \]; then export JEMALLOC_SYS_WITH_LG_PAGE=(\d+); fi"#)
        .into_iter()
        .map(|(arch, lg)| (arch, lg.parse().unwrap_or(0)))
        .collect();
    let installed = captures(r"cargo install --locked (cargo-auditable)@([\d.]+)");
    let auditable = installed
        .first()
        .filter(|_| runs.contains("cargo auditable build --release"))
        .map(|(_, version)| version.clone());
    Ok(BuildStage { targets, lg_page, auditable })
}

/// What the final stage of the Dockerfile makes of its base image.
#[derive(Debug)]
pub struct FinalStage {
    /// The `FROM` image.
    pub base: String,
    /// Where the one `COPY` puts the file, in the image.
    pub copy_destination: String,
    /// `USER`, as written.
    pub user: Option<String>,
    /// `ENTRYPOINT`, in exec (JSON) form.
    pub entrypoint: Option<Vec<String>>,
    /// `CMD`, in exec (JSON) form.
    pub cmd: Option<Vec<String>>,
}

/// The Dockerfile's instructions: continuation lines joined, comments, parser directives and blank
/// lines dropped, each as (keyword in upper case, the rest).
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut joined = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                joined.push(std::mem::take(&mut current));
            }
        }
    }
    joined
        .into_iter()
        .map(|instruction| {
            let (keyword, rest) = instruction.split_once(char::is_whitespace).unwrap_or((&instruction, ""));
            (keyword.to_ascii_uppercase(), rest.trim().to_owned())
        })
        .collect()
}

/// An exec-form (JSON array) `ENTRYPOINT` or `CMD`; a shell form would need a shell, which the
/// image has not.
fn exec_form(keyword: &str, rest: &str) -> Result<Vec<String>, String> {
    let parsed: Result<Vec<String>, _> = serde_json::from_str(rest);
    parsed.map_err(|_| format!("{keyword} {rest}: only the exec form [\"...\"] runs in an image without a shell"))
}

/// Reads the final stage of `text`.
pub fn final_stage(text: &str) -> Result<FinalStage, String> {
    let all = instructions(text);
    let start = all.iter().rposition(|(keyword, _)| keyword == "FROM").ok_or("the Dockerfile has no FROM")?;
    let from: Vec<&str> = all[start].1.split_whitespace().filter(|word| !word.starts_with("--")).collect();
    let mut stage = FinalStage {
        base: from[0].to_owned(),
        copy_destination: String::new(),
        user: None,
        entrypoint: None,
        cmd: None,
    };
    let mut copies = 0;
    for (keyword, rest) in &all[start + 1..] {
        match keyword.as_str() {
            "COPY" => {
                copies += 1;
                let words: Vec<String> = match serde_json::from_str::<Value>(rest) {
                    Ok(Value::Array(items)) => {
                        items.iter().map(|item| item.as_str().unwrap_or("").to_owned()).collect()
                    }
                    _ => rest.split_whitespace().map(str::to_owned).collect(),
                };
                let (flags, paths): (Vec<&String>, Vec<&String>) =
                    words.iter().partition(|word| word.starts_with("--"));
                if let Some(flag) = flags.iter().find(|flag| !flag.starts_with("--from=")) {
                    return Err(format!("COPY {rest}: {flag} is not what scripts/build-image.sh does (files of 0:0)"));
                }
                let [source, destination] = paths.as_slice() else {
                    return Err(format!("COPY {rest}: scripts/build-image.sh copies exactly one file"));
                };
                stage.copy_destination = match destination.strip_suffix('/') {
                    Some(directory) => format!("{directory}/{}", source.rsplit('/').next().unwrap_or(source)),
                    None => (*destination).clone(),
                };
            }
            "USER" => stage.user = Some(rest.clone()),
            "ENTRYPOINT" => stage.entrypoint = Some(exec_form(keyword, rest)?),
            "CMD" => stage.cmd = Some(exec_form(keyword, rest)?),
            other => return Err(format!("{other} {rest}: scripts/build-image.sh does not reproduce {other}")),
        }
    }
    if copies != 1 {
        return Err(format!("the final stage has {copies} COPY: scripts/build-image.sh lays out exactly one file"));
    }
    Ok(stage)
}
