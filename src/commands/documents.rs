//! Reading manifests the way `kubectl apply -f` does: files or directories (their `.yaml`, `.yml` and
//! `.json` files), or `-` for standard input; several YAML documents or JSON values per file; `List`
//! objects expanded into their items. A key set twice in one mapping is an error (see [`unique_keys`]).
//!
//! Inputs are bounded before any parsing: at most [`MAX_INPUT_BYTES`] per file, and at most
//! [`MAX_NESTING_DEPTH`] levels of nesting, found by a linear byte scan (a YAML or JSON parser can take
//! quadratic time on deeply nested input before its own limit applies). A file that is not text gets a
//! reason (binary, not UTF-8, the I/O error).

pub mod unique_keys;

use std::cell::RefCell;
use std::io::{self, Read};
use std::path::PathBuf;

use serde_json::Value;

use unique_keys::Duplicate;

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
    /// Worded as go-yaml's strict mode, which the API server uses under strict field validation.
    #[error(
        "{unit} {index}, line {line}: key {:?} already set in map at {}: a key may appear only once in a mapping (kubectl would silently keep the last value): remove one of them",
        duplicate.key,
        duplicate.path
    )]
    DuplicateKey {
        /// `document` (YAML) or `value` (JSON).
        unit: &'static str,
        index: usize,
        line: usize,
        duplicate: Duplicate,
    },
    #[error(
        "is larger than {MAX_INPUT_BYTES} bytes (the API server's request limit): no manifest is this large; split the file"
    )]
    TooLarge,
    #[error(
        "nesting is deeper than {MAX_NESTING_DEPTH} levels at line {line}: refused before parsing (no Kubernetes object nests this deep)"
    )]
    TooDeep { line: usize },
    #[error("is a binary file (a NUL byte at offset {offset}), not a YAML or JSON manifest")]
    Binary { offset: usize },
    #[error("is not UTF-8 text (an invalid byte at offset {offset}): save it as UTF-8")]
    NotUtf8 { offset: usize },
}

/// The largest input read: kube-apiserver's limit on a request body (3 MiB), so nothing larger could be
/// applied anyway.
pub const MAX_INPUT_BYTES: usize = 3 * 1024 * 1024;
/// The deepest nesting accepted. The deepest field of a SparkApplication (a pod template's affinity
/// match expressions) is about 15 levels down; 64 leaves room for any real manifest.
pub const MAX_NESTING_DEPTH: usize = 64;

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

/// Reads a source's text: at most [`MAX_INPUT_BYTES`], and text only.
pub fn read(source: &Source, stdin: &mut impl Read) -> Result<String, DocumentError> {
    let bytes = match source {
        Source::File(path) => {
            let read_error = |source| DocumentError::Read {
                path: path.clone(),
                source,
            };
            let file = std::fs::File::open(path).map_err(read_error)?;
            read_bounded(file).map_err(read_error)?
        }
        Source::Stdin => read_bounded(stdin).map_err(DocumentError::Stdin)?,
    };
    text_of(bytes)
}

/// Reads one byte more than the limit, so a larger input is recognised without reading all of it.
fn read_bounded(reader: impl Read) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    reader.take(MAX_INPUT_BYTES as u64 + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn text_of(bytes: Vec<u8>) -> Result<String, DocumentError> {
    if bytes.len() > MAX_INPUT_BYTES {
        return Err(DocumentError::TooLarge);
    }
    if let Some(offset) = bytes.iter().position(|b| *b == 0) {
        return Err(DocumentError::Binary { offset });
    }
    String::from_utf8(bytes).map_err(|error| DocumentError::NotUtf8 {
        offset: error.utf8_error().valid_up_to(),
    })
}

/// Finds nesting deeper than [`MAX_NESTING_DEPTH`] in one pass over the bytes, without parsing: JSON and
/// YAML flow brackets outside quoted strings and comments, plus YAML block levels (each deeper indentation
/// and each `- ` that opens a list item on a line).
pub fn check_nesting(text: &str) -> Result<(), DocumentError> {
    let mut flow: usize = 0;
    // Indentations of the open block levels.
    let mut indents: Vec<usize> = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let too_deep = || DocumentError::TooDeep { line: number + 1 };
        let bytes = line.as_bytes();
        let indent = bytes.iter().take_while(|b| **b == b' ').count();
        let rest = &bytes[indent..];
        let blank = rest.is_empty() || rest[0] == b'#';
        if flow == 0 && !blank {
            while indents.last().is_some_and(|last| *last >= indent) {
                indents.pop();
            }
            indents.push(indent);
            let mut dashes = 0;
            let mut at = 0;
            while rest.get(at) == Some(&b'-') && matches!(rest.get(at + 1), Some(b' ') | None) {
                dashes += 1;
                at += 2;
                while rest.get(at) == Some(&b' ') {
                    at += 1;
                }
            }
            if indents.len() + dashes > MAX_NESTING_DEPTH {
                return Err(too_deep());
            }
        }
        let mut quote: Option<u8> = None;
        let mut escaped = false;
        for (index, byte) in bytes.iter().enumerate() {
            match quote {
                Some(b'"') if escaped => escaped = false,
                Some(b'"') if *byte == b'\\' => escaped = true,
                Some(open) if *byte == open => quote = None,
                Some(_) => {}
                None => match byte {
                    b'"' | b'\'' => quote = Some(*byte),
                    b'#' if index == 0 || bytes[index - 1] == b' ' => break,
                    b'[' | b'{' => {
                        flow += 1;
                        if flow + indents.len() > MAX_NESTING_DEPTH {
                            return Err(too_deep());
                        }
                    }
                    b']' | b'}' => flow = flow.saturating_sub(1),
                    _ => {}
                },
            }
        }
        // A YAML single-quoted or plain scalar ends with its line inside flow collections only when
        // closed; a JSON string never spans lines. Either way an open quote does not carry over.
    }
    Ok(())
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

/// The documents of a source's text, each read or the reason it could not be: JSON values when the text
/// starts like JSON, YAML documents otherwise; empty documents are skipped and `List` objects expanded.
/// A syntax error ends the source (no parser can find where the next document starts; the documents before
/// it are still returned); a key set twice in one mapping fails only its own document.
pub fn parse(text: &str) -> Vec<Result<Document, DocumentError>> {
    let mut documents = Vec::new();
    if let Err(error) = check_nesting(text) {
        documents.push(Err(error));
        return documents;
    }
    if text.trim_start().starts_with(['{', '[']) {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        // `end` only skips whitespace: anything else is the next value.
        for index in 1.. {
            if deserializer.end().is_ok() {
                break;
            }
            let found = RefCell::new(None);
            match unique_keys::deserialize(&mut deserializer, &found) {
                Ok(value) => push_objects(index, value, &mut documents),
                Err(error) => {
                    documents.push(Err(match found.into_inner() {
                        Some(duplicate) => DocumentError::DuplicateKey {
                            unit: "value",
                            index,
                            line: error.line(),
                            duplicate,
                        },
                        None => DocumentError::Json {
                            index,
                            message: error.to_string(),
                        },
                    }));
                    // A JSON stream cannot be resumed after an error.
                    break;
                }
            }
        }
    } else {
        for (position, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let index = position + 1;
            let found = RefCell::new(None);
            match unique_keys::deserialize(document, &found) {
                Ok(value) => push_objects(index, value, &mut documents),
                Err(error) => {
                    if let Some(duplicate) = found.into_inner() {
                        // The document's events were all read before it was deserialized: the next one
                        // is still found.
                        documents.push(Err(DocumentError::DuplicateKey {
                            unit: "document",
                            index,
                            line: error.location().map_or(0, |location| location.line()),
                            duplicate,
                        }));
                        continue;
                    }
                    documents.push(Err(DocumentError::Yaml {
                        index,
                        message: error.to_string(),
                        hint: if has_placeholder(text) {
                            " (the file contains template placeholders such as {IMAGE_REGISTRY}: substitute them first; kubectl cannot read it either)"
                        } else {
                            ""
                        },
                    }));
                    break;
                }
            }
        }
    }
    documents
}

/// The objects of one document: none for an empty one, a `List`'s items, or the value itself.
fn push_objects(index: usize, value: Value, documents: &mut Vec<Result<Document, DocumentError>>) {
    match value {
        Value::Null => {}
        Value::Object(ref object) if object.get("kind").and_then(Value::as_str) == Some("List") => {
            let items = object
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            documents.extend(items.into_iter().map(|value| Ok(Document { index, value })));
        }
        value => documents.push(Ok(Document { index, value })),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Every document, or the first error.
    fn all(text: &str) -> Result<Vec<Document>, DocumentError> {
        parse(text).into_iter().collect()
    }

    #[test]
    fn yaml_streams_skip_empty_documents() {
        let docs = all("---\na: 1\n---\n---\nb: 2\n").unwrap();
        assert_eq!(
            docs.iter().map(|d| d.value.clone()).collect::<Vec<_>>(),
            [json!({"a": 1}), json!({"b": 2})]
        );
    }

    #[test]
    fn json_values_and_lists() {
        let docs = all(r#"{"kind": "List", "items": [{"a": 1}, {"b": 2}]} {"c": 3}"#).unwrap();
        let indexes: Vec<_> = docs.iter().map(|d| d.index).collect();
        assert_eq!(indexes, [1, 1, 2]);
        assert_eq!(docs[2].value, json!({"c": 3}));
    }

    #[test]
    fn yaml_errors_name_the_document_and_spot_placeholders() {
        let error = all("a: 1\n---\nimage: {REGISTRY}/spark:4\n").unwrap_err().to_string();
        assert!(error.starts_with("document 2 is not valid YAML"), "{error}");
        assert!(error.contains("placeholders"), "{error}");
        let plain = all("a: [1\n").unwrap_err().to_string();
        assert!(!plain.contains("placeholders"), "{plain}");
    }

    #[test]
    fn deep_nesting_is_refused_by_the_scan_before_parsing() {
        // A few hundred KB, under the size cap: refused by the depth limit, not by a parser.
        let brackets = format!("{}{}", "[".repeat(150_000), "]".repeat(150_000));
        assert!(brackets.len() < MAX_INPUT_BYTES);
        assert!(matches!(
            check_nesting(&brackets),
            Err(DocumentError::TooDeep { line: 1 })
        ));
        let error = all(&brackets).unwrap_err().to_string();
        assert!(error.contains("nesting is deeper than 64 levels"), "{error}");
        assert!(error.contains("refused before parsing"), "{error}");
        let mut block = String::new();
        for depth in 0..100 {
            block.push_str(&format!("{}k{depth}:\n", "  ".repeat(depth)));
        }
        assert!(matches!(all(&block), Err(DocumentError::TooDeep { line: 65 })));
        let dashes = format!("{}x\n", "- ".repeat(80));
        assert!(matches!(all(&dashes), Err(DocumentError::TooDeep { .. })));
        // Brackets inside strings and comments do not count.
        let quoted = format!(
            "a: \"{}\"\nb: '{}' # {}\n",
            "[".repeat(100),
            "{".repeat(100),
            "[".repeat(100)
        );
        assert!(all(&quoted).is_ok());
    }

    #[test]
    fn unreadable_inputs_say_why() {
        assert!(matches!(
            text_of(vec![b'a', 0, b'b']),
            Err(DocumentError::Binary { offset: 1 })
        ));
        assert!(matches!(
            text_of(b"name: caf\xe9\n".to_vec()),
            Err(DocumentError::NotUtf8 { offset: 9 })
        ));
        assert!(matches!(
            text_of(vec![b' '; MAX_INPUT_BYTES + 1]),
            Err(DocumentError::TooLarge)
        ));
        let mut big = std::io::repeat(b' ').take(10 * MAX_INPUT_BYTES as u64);
        assert!(matches!(read(&Source::Stdin, &mut big), Err(DocumentError::TooLarge)));
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

    #[test]
    fn a_duplicated_key_fails_its_document_only() {
        let parsed = parse("a: 1\n---\nb:\n  c: 1\n  c: 2\n---\nd: 1\n");
        assert_eq!(parsed.len(), 3, "{parsed:?}");
        assert_eq!(parsed[0].as_ref().unwrap().value, json!({"a": 1}));
        let error = parsed[1].as_ref().unwrap_err();
        assert!(
            matches!(error, DocumentError::DuplicateKey { unit: "document", index: 2, line: 5, duplicate } if duplicate.key == "c"),
            "{error:?}"
        );
        assert!(
            error
                .to_string()
                .starts_with("document 2, line 5: key \"c\" already set in map at b.c: "),
            "{error}"
        );
        let third = parsed[2].as_ref().unwrap();
        assert_eq!((third.index, &third.value), (3, &json!({"d": 1})));
    }

    #[test]
    fn a_syntax_error_ends_the_source_after_the_documents_before_it() {
        let parsed = parse("a: 1\n---\nb: [1\n---\nc: 1\n");
        assert_eq!(parsed.len(), 2, "{parsed:?}");
        assert!(parsed[0].is_ok());
        assert!(matches!(parsed[1], Err(DocumentError::Yaml { index: 2, .. })));
    }

    #[test]
    fn a_duplicated_key_in_json_is_an_error_too() {
        let parsed = parse("{\"a\": 1}\n{\"b\": 1,\n \"b\": 2}\n{\"c\": 1}");
        assert_eq!(parsed.len(), 2, "{parsed:?}");
        assert!(
            matches!(
                &parsed[1],
                Err(DocumentError::DuplicateKey {
                    unit: "value",
                    index: 2,
                    line: 3,
                    ..
                })
            ),
            "{parsed:?}"
        );
    }
}
