//! Spark versions as written in `spec.sparkVersion` (`4.0.4`, `3.5`, `3.4.1-amzn-0`).

use std::fmt;

/// A Spark version: major, minor and patch; a suffix after `-` or `+` is ignored for ordering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SparkVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl SparkVersion {
    /// Spark 3.0.0: pod templates, `request.cores` for the driver, `deleteOnTermination`.
    pub const POD_TEMPLATES: SparkVersion = SparkVersion {
        major: 3,
        minor: 0,
        patch: 0,
    };

    /// Parses `major.minor[.patch][-suffix]`, with an optional leading `v`.
    pub fn parse(input: &str) -> Option<Self> {
        let trimmed = input.trim();
        let trimmed = trimmed.strip_prefix(['v', 'V']).unwrap_or(trimmed);
        let core = trimmed.split(['-', '+']).next()?;
        let mut parts = core.split('.');
        let mut number = |required: bool| -> Option<u32> {
            match parts.next() {
                Some(part) if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) => part.parse().ok(),
                None if !required => Some(0),
                _ => None,
            }
        };
        let major = number(true)?;
        let minor = number(true)?;
        let patch = number(false)?;
        if parts.next().is_some() {
            return None;
        }
        Some(Self { major, minor, patch })
    }
}

impl fmt::Display for SparkVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_order() {
        let v = |s| SparkVersion::parse(s).unwrap_or_else(|| panic!("{s} should parse"));
        assert_eq!(
            v("4.0.4"),
            SparkVersion {
                major: 4,
                minor: 0,
                patch: 4
            }
        );
        assert_eq!(
            v("3.5"),
            SparkVersion {
                major: 3,
                minor: 5,
                patch: 0
            }
        );
        assert_eq!(
            v("v3.4.1-amzn-0"),
            SparkVersion {
                major: 3,
                minor: 4,
                patch: 1
            }
        );
        assert!(v("2.4.8") < SparkVersion::POD_TEMPLATES);
        assert!(v("3.0.0") >= SparkVersion::POD_TEMPLATES);
        assert!(v("3.10.0") > v("3.9.9"));
    }

    #[test]
    fn non_versions_do_not_parse() {
        for bad in ["", "4", "latest", "4.x", "4.0.0.1", "4..0", "-1.0"] {
            assert_eq!(SparkVersion::parse(bad), None, "{bad}");
        }
    }
}
