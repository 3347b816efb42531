//! Field paths and the errors and warnings that point at them.
//!
//! Paths are rendered the way `kubectl` and the API server render them: dots between fields,
//! `[0]` for list items and `[key]` for map keys (`spec.sparkConf[spark.master]`).

use std::fmt;

/// A path to a field inside a manifest, e.g. `spec.driver.memory`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldPath(String);

impl FieldPath {
    /// The path of the whole object.
    pub fn root() -> Self {
        Self(String::new())
    }

    /// A path starting at a top-level field (`spec`, `metadata`, ...).
    pub fn new(field: &str) -> Self {
        Self(field.to_owned())
    }

    /// The path of a named field below this one.
    #[must_use]
    pub fn child(&self, field: &str) -> Self {
        if self.0.is_empty() {
            Self(field.to_owned())
        } else {
            Self(format!("{}.{field}", self.0))
        }
    }

    /// The path of a list item below this one.
    #[must_use]
    pub fn index(&self, index: usize) -> Self {
        Self(format!("{}[{index}]", self.0))
    }

    /// The path of a map entry below this one.
    #[must_use]
    pub fn key(&self, key: &str) -> Self {
        Self(format!("{}[{key}]", self.0))
    }

    /// The rendered path; empty for the whole object.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for the path of the whole object.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("<object>")
        } else {
            f.write_str(&self.0)
        }
    }
}

/// One problem with one field: where it is and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub path: FieldPath,
    pub message: String,
}

impl FieldError {
    pub fn new(path: FieldPath, message: impl Into<String>) -> Self {
        Self {
            path,
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Everything found wrong with one object: errors reject it, warnings do not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValidationReport {
    pub errors: Vec<FieldError>,
    pub warnings: Vec<FieldError>,
}

impl ValidationReport {
    /// True when nothing would make the object be rejected.
    pub fn is_valid(&self) -> bool {
        self.errors.is_empty()
    }

    pub fn error(&mut self, path: FieldPath, message: impl Into<String>) {
        self.errors.push(FieldError::new(path, message));
    }

    pub fn warning(&mut self, path: FieldPath, message: impl Into<String>) {
        self.warnings.push(FieldError::new(path, message));
    }

    /// Appends another report's findings to this one.
    pub fn extend(&mut self, other: ValidationReport) {
        self.errors.extend(other.errors);
        self.warnings.extend(other.warnings);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_render_like_kubectl() {
        let spec = FieldPath::new("spec");
        assert_eq!(spec.child("driver").child("memory").as_str(), "spec.driver.memory");
        assert_eq!(
            spec.child("volumes").index(2).child("name").as_str(),
            "spec.volumes[2].name"
        );
        assert_eq!(
            spec.child("sparkConf").key("spark.master").as_str(),
            "spec.sparkConf[spark.master]"
        );
        assert_eq!(FieldPath::root().child("metadata").as_str(), "metadata");
        assert_eq!(FieldPath::root().to_string(), "<object>");
    }
}
