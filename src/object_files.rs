//! Reads Kubernetes objects from YAML or JSON files: a single object, a `List`, or several YAML
//! documents, as `kubectl get -o yaml|json` prints them.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Where objects are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Standard input (`-`).
    Stdin,
    /// A file.
    File(PathBuf),
}

impl Input {
    /// `-` means standard input; anything else is a path.
    pub fn from_arg(arg: &Path) -> Input {
        if arg == Path::new("-") { Input::Stdin } else { Input::File(arg.to_owned()) }
    }
}

impl std::fmt::Display for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Input::Stdin => f.write_str("<stdin>"),
            Input::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// An input that cannot be read or holds something other than what was asked for.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file or stdin could not be read.
    #[error("{input}: cannot read: {source}")]
    Read {
        /// The input.
        input: Input,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not YAML or JSON.
    #[error("{input}: not valid YAML or JSON: {message}")]
    Syntax {
        /// The input.
        input: Input,
        /// The parser's message.
        message: String,
    },
    /// A document is not an object of an accepted kind, or does not deserialize as one.
    #[error("{input}: document {document}: {message}")]
    Document {
        /// The input.
        input: Input,
        /// 1-based document number (items of a List are numbered in order).
        document: usize,
        /// What is wrong.
        message: String,
    },
}

/// One Kubernetes object from an input, with its position for messages.
#[derive(Debug, Clone)]
pub struct Object {
    /// 1-based position among the objects of the input.
    pub document: usize,
    /// The object's `kind`.
    pub kind: String,
    /// The object itself.
    pub value: Value,
}

impl Object {
    /// Deserializes the object as `T`, naming the input and document on failure.
    pub fn parse<T: serde::de::DeserializeOwned>(&self, input: &Input) -> Result<T, InputError> {
        serde_json::from_value(self.value.clone()).map_err(|e| InputError::Document {
            input: input.clone(),
            document: self.document,
            message: format!("not a valid {}: {e}", self.kind),
        })
    }
}

/// Reads every object of `input`, flattening `List`s.
pub fn read_objects(input: &Input) -> Result<Vec<Object>, InputError> {
    let text = read_text(input)?;
    let documents: Vec<Value> = if text.trim_start().starts_with(['{', '[']) {
        serde_json::from_str::<Value>(&text)
            .map(|v| vec![v])
            .map_err(|e| InputError::Syntax { input: input.clone(), message: e.to_string() })?
    } else {
        serde_saphyr::from_multiple(&text)
            .map_err(|e| InputError::Syntax { input: input.clone(), message: one_line(&e.to_string()) })?
    };
    let mut objects = Vec::new();
    for value in documents {
        flatten(input, value, &mut objects)?;
    }
    Ok(objects)
}

fn flatten(input: &Input, value: Value, out: &mut Vec<Object>) -> Result<(), InputError> {
    let document = out.len() + 1;
    let not_an_object =
        |message: &str| InputError::Document { input: input.clone(), document, message: message.to_owned() };
    let kind = match value.get("kind") {
        Some(Value::String(kind)) => kind.clone(),
        Some(_) => return Err(not_an_object("kind is not a string")),
        None => return Err(not_an_object("not a Kubernetes object: no kind")),
    };
    if kind == "List" || (kind.ends_with("List") && value.get("items").is_some()) {
        let Some(Value::Array(items)) = value.get("items") else {
            return Err(not_an_object("a List without an items array"));
        };
        for item in items.clone() {
            flatten(input, item, out)?;
        }
        return Ok(());
    }
    out.push(Object { document, kind, value });
    Ok(())
}

fn read_text(input: &Input) -> Result<String, InputError> {
    let read_error = |source| InputError::Read { input: input.clone(), source };
    match input {
        Input::Stdin => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).map_err(read_error)?;
            Ok(text)
        }
        Input::File(path) => std::fs::read_to_string(path).map_err(read_error),
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
