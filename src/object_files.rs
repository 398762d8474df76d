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
    /// The text starts as JSON and is not.
    #[error("{input}: not valid YAML or JSON: {source}")]
    Json {
        /// The input.
        input: Input,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// The text is not YAML.
    #[error("{input}: not valid YAML or JSON: {}", one_line(&source.to_string()))]
    Yaml {
        /// The input.
        input: Input,
        /// The parser's error.
        source: Box<serde_saphyr::Error>,
    },
    /// A document is not an object of an accepted kind, or does not deserialize as one.
    #[error("{input}: document {document}: {problem}")]
    Document {
        /// The input.
        input: Input,
        /// 1-based document number (items of a List are numbered in order).
        document: usize,
        /// What is wrong.
        problem: DocumentProblem,
    },
}

/// What is wrong with one document of an input.
#[derive(Debug, thiserror::Error)]
pub enum DocumentProblem {
    /// `kind` is there but not a string.
    #[error("kind is not a string")]
    KindNotString,
    /// No `kind`.
    #[error("not a Kubernetes object: no kind")]
    NoKind,
    /// A `List` whose `items` is not an array.
    #[error("a List without an items array")]
    ListWithoutItems,
    /// The object does not deserialize as its kind.
    #[error("not a valid {kind}: {source}")]
    Invalid {
        /// The object's kind.
        kind: String,
        /// The deserializer's error.
        source: serde_json::Error,
    },
    /// An object of a kind the input may not hold.
    #[error("a {found} where a {expected} was expected")]
    WrongKind {
        /// The object's kind.
        found: String,
        /// The kinds the input may hold.
        expected: &'static str,
    },
    /// A Service other than `default/kubernetes`, or an EndpointSlice not of it.
    #[error("{0}: only the default/kubernetes Service or its EndpointSlices may stand in for the cluster")]
    NotApiserver(NotApiserver),
    /// The chain of `--kubelet-certificate NODE=PEMFILE` cannot be read.
    #[error("--kubelet-certificate {node}: {source}")]
    KubeletCertificate {
        /// The node named.
        node: String,
        /// Why the file is not a chain.
        source: Box<crate::kubelet_tls::PemError>,
    },
}

/// A Service or EndpointSlice that is not the apiserver's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotApiserver {
    /// A Service other than `default/kubernetes`.
    #[error("a Service other than default/kubernetes")]
    Service,
    /// An EndpointSlice not labelled as the `default/kubernetes` Service's.
    #[error("an EndpointSlice not labelled kubernetes.io/service-name=kubernetes in default")]
    EndpointSlice,
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
        serde_json::from_value(self.value.clone())
            .map_err(|source| self.problem(input, DocumentProblem::Invalid { kind: self.kind.clone(), source }))
    }

    /// `problem`, as the error of this object of `input`.
    pub fn problem(&self, input: &Input, problem: DocumentProblem) -> InputError {
        InputError::Document { input: input.clone(), document: self.document, problem }
    }
}

/// Reads every object of `input`, flattening `List`s.
pub fn read_objects(input: &Input) -> Result<Vec<Object>, InputError> {
    let text = read_text(input)?;
    let documents: Vec<Value> = if text.trim_start().starts_with(['{', '[']) {
        serde_json::from_str::<Value>(&text)
            .map(|v| vec![v])
            .map_err(|source| InputError::Json { input: input.clone(), source })?
    } else {
        serde_saphyr::from_multiple(&text)
            .map_err(|source| InputError::Yaml { input: input.clone(), source: Box::new(source) })?
    };
    let mut objects = Vec::new();
    for value in documents {
        flatten(input, value, &mut objects)?;
    }
    Ok(objects)
}

fn flatten(input: &Input, value: Value, out: &mut Vec<Object>) -> Result<(), InputError> {
    let document = out.len() + 1;
    let not_an_object = |problem| InputError::Document { input: input.clone(), document, problem };
    let kind = match value.get("kind") {
        Some(Value::String(kind)) => kind.clone(),
        Some(_) => return Err(not_an_object(DocumentProblem::KindNotString)),
        None => return Err(not_an_object(DocumentProblem::NoKind)),
    };
    if kind == "List" || (kind.ends_with("List") && value.get("items").is_some()) {
        let Some(Value::Array(items)) = value.get("items") else {
            return Err(not_an_object(DocumentProblem::ListWithoutItems));
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
