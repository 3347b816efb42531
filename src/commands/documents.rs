//! Reading manifests the way `kubectl apply -f` does: files or directories (their `.yaml`, `.yml` and
//! `.json` files), or `-` for standard input; several YAML documents or JSON values per file; `List`
//! objects expanded into their items.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    #[error("could not read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("could not read standard input")]
    Stdin(#[source] io::Error),
    #[error("document {index} is not valid YAML: {message}{hint}")]
    Yaml {
        index: usize,
        message: String,
        hint: &'static str,
    },
    #[error("value {index} is not valid JSON: {message}")]
    Json { index: usize, message: String },
}

/// A file to read, or standard input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    Stdin,
}

impl Source {
    pub fn name(&self) -> String {
        match self {
            Self::File(path) => path.display().to_string(),
            Self::Stdin => "<stdin>".to_owned(),
        }
    }
}

/// One document of a source; `index` counts from 1 in the order of the source.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    pub index: usize,
    pub value: Value,
}

/// The sources named on the command line, with directories replaced by their manifest files, sorted.
pub fn expand(paths: &[PathBuf]) -> Result<Vec<Source>, DocumentError> {
    let mut sources = Vec::new();
    for path in paths {
        if path.as_os_str() == "-" {
            sources.push(Source::Stdin);
        } else if path.is_dir() {
            let entries = std::fs::read_dir(path).map_err(|source| DocumentError::Read {
                path: path.clone(),
                source,
            })?;
            let mut files = Vec::new();
            for entry in entries {
                let entry = entry.map_err(|source| DocumentError::Read {
                    path: path.clone(),
                    source,
                })?;
                let file = entry.path();
                let manifest = file
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
                if manifest && file.is_file() {
                    files.push(file);
                }
            }
            files.sort();
            sources.extend(files.into_iter().map(Source::File));
        } else {
            sources.push(Source::File(path.clone()));
        }
    }
    Ok(sources)
}

/// Reads a source's text.
pub fn read(source: &Source, stdin: &mut impl Read) -> Result<String, DocumentError> {
    match source {
        Source::File(path) => read_file(path),
        Source::Stdin => {
            let mut text = String::new();
            stdin.read_to_string(&mut text).map_err(DocumentError::Stdin)?;
            Ok(text)
        }
    }
}

fn read_file(path: &Path) -> Result<String, DocumentError> {
    std::fs::read_to_string(path).map_err(|source| DocumentError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Looks like `{IMAGE_REGISTRY}`: a template placeholder, which is not YAML.
fn has_placeholder(text: &str) -> bool {
    text.split('{').skip(1).any(|rest| {
        rest.split_once('}').is_some_and(|(inside, _)| {
            !inside.is_empty()
                && inside
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        })
    })
}

/// The documents of a source's text, JSON when it starts like JSON, YAML otherwise; empty documents are
/// skipped and `List` objects expanded. Documents after a syntax error cannot be read.
pub fn parse(text: &str) -> Result<Vec<Document>, DocumentError> {
    let values = if text.trim_start().starts_with(['{', '[']) {
        let mut values = Vec::new();
        for (index, value) in serde_json::Deserializer::from_str(text)
            .into_iter::<Value>()
            .enumerate()
        {
            values.push(value.map_err(|e| DocumentError::Json {
                index: index + 1,
                message: e.to_string(),
            })?);
        }
        values
    } else {
        let mut values = Vec::new();
        for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let value = Value::deserialize(document).map_err(|e| DocumentError::Yaml {
                index: index + 1,
                message: e.to_string(),
                hint: if has_placeholder(text) {
                    " (the file contains template placeholders such as {IMAGE_REGISTRY}: substitute them first; kubectl cannot read it either)"
                } else {
                    ""
                },
            })?;
            values.push(value);
        }
        values
    };
    let mut documents = Vec::new();
    for (position, value) in values.into_iter().enumerate() {
        let index = position + 1;
        match value {
            Value::Null => {}
            Value::Object(ref object) if object.get("kind").and_then(Value::as_str) == Some("List") => {
                let items = object
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                documents.extend(items.into_iter().map(|value| Document { index, value }));
            }
            value => documents.push(Document { index, value }),
        }
    }
    Ok(documents)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn yaml_streams_skip_empty_documents() {
        let docs = parse("---\na: 1\n---\n---\nb: 2\n").unwrap();
        assert_eq!(
            docs.iter().map(|d| d.value.clone()).collect::<Vec<_>>(),
            [json!({"a": 1}), json!({"b": 2})]
        );
    }

    #[test]
    fn json_values_and_lists() {
        let docs = parse(r#"{"kind": "List", "items": [{"a": 1}, {"b": 2}]} {"c": 3}"#).unwrap();
        let indexes: Vec<_> = docs.iter().map(|d| d.index).collect();
        assert_eq!(indexes, [1, 1, 2]);
        assert_eq!(docs[2].value, json!({"c": 3}));
    }

    #[test]
    fn yaml_errors_name_the_document_and_spot_placeholders() {
        let error = parse("a: 1\n---\nimage: {REGISTRY}/spark:4\n").unwrap_err().to_string();
        assert!(error.starts_with("document 2 is not valid YAML"), "{error}");
        assert!(error.contains("placeholders"), "{error}");
        let plain = parse("a: [1\n").unwrap_err().to_string();
        assert!(!plain.contains("placeholders"), "{plain}");
    }

    #[test]
    fn directories_expand_to_their_manifests_sorted() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.yaml", "a.json", "notes.txt", "c.yml"] {
            std::fs::write(dir.path().join(name), "{}").unwrap();
        }
        let sources = expand(&[dir.path().to_owned(), PathBuf::from("-")]).unwrap();
        let names: Vec<_> = sources
            .iter()
            .map(|s| match s {
                Source::File(path) => path.file_name().unwrap().to_string_lossy().into_owned(),
                Source::Stdin => "-".to_owned(),
            })
            .collect();
        assert_eq!(names, ["a.json", "b.yaml", "c.yml", "-"]);
    }
}
