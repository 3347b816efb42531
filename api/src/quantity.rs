//! Spark memory strings (`512m`, `1g`, `1.5g`) and Kubernetes quantities (`500m`, `1.5`, `2Gi`, `1e3`).

use std::fmt;

/// Why a Spark memory string or a Kubernetes quantity did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error(
        "{input:?} is not a Spark memory size: use a whole or decimal number with an optional unit b, k, m, g, t or p (e.g. 512m, 1g, 1.5g)"
    )]
    SparkMemorySyntax { input: String },
    #[error("{input:?} has unknown unit {unit:?}: use b, k, m, g, t or p (or kb, mb, gb, tb, pb)")]
    SparkMemoryUnit { input: String, unit: String },
    #[error("{input:?} is too large")]
    SparkMemoryOverflow { input: String },
    #[error(
        "{input:?} is not a Kubernetes quantity: use a number with an optional suffix m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent (e.g. 500m, 1.5, 2Gi)"
    )]
    KubernetesSyntax { input: String },
}

/// The unit Spark assumes for a memory size given without one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SparkMemoryUnit {
    Bytes,
    KiB,
    MiB,
    GiB,
}

impl SparkMemoryUnit {
    fn bytes(self) -> u128 {
        match self {
            Self::Bytes => 1,
            Self::KiB => 1 << 10,
            Self::MiB => 1 << 20,
            Self::GiB => 1 << 30,
        }
    }
}

/// A parsed Spark memory size, in bytes.
///
/// Spark itself rejects fractions (`1.5g`: "Fractional values are not supported"); we accept them, as
/// Kubeflow's users expect, and [`SparkMemory::to_spark_string`] renders a whole number Spark accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SparkMemory {
    bytes: u64,
}

impl SparkMemory {
    /// Parses a Spark memory string; `default_unit` applies when none is given (Spark uses MiB for
    /// `spark.{driver,executor}.memory` and `memoryOverhead`).
    pub fn parse(input: &str, default_unit: SparkMemoryUnit) -> Result<Self, QuantityError> {
        let syntax = || QuantityError::SparkMemorySyntax {
            input: input.to_owned(),
        };
        let lower = input.trim().to_ascii_lowercase();
        let number_end = lower
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(lower.len());
        let (number, unit) = lower.split_at(number_end);
        let (whole, fraction) = match number.split_once('.') {
            Some((whole, fraction)) if !whole.is_empty() && !fraction.is_empty() => (whole, fraction),
            Some(_) => return Err(syntax()),
            None if !number.is_empty() => (number, ""),
            None => return Err(syntax()),
        };
        if fraction.contains('.') {
            return Err(syntax());
        }
        let unit_bytes: u128 = match unit {
            "" => default_unit.bytes(),
            "b" => 1,
            "k" | "kb" => 1 << 10,
            "m" | "mb" => 1 << 20,
            "g" | "gb" => 1 << 30,
            "t" | "tb" => 1 << 40,
            "p" | "pb" => 1 << 50,
            other if other.chars().all(|c| c.is_ascii_alphabetic()) => {
                return Err(QuantityError::SparkMemoryUnit {
                    input: input.to_owned(),
                    unit: other.to_owned(),
                });
            }
            _ => return Err(syntax()),
        };
        let overflow = || QuantityError::SparkMemoryOverflow {
            input: input.to_owned(),
        };
        let digits: u128 = format!("{whole}{fraction}").parse().map_err(|_| overflow())?;
        let scale = 10u128
            .checked_pow(u32::try_from(fraction.len()).map_err(|_| overflow())?)
            .ok_or_else(overflow)?;
        let scaled = digits.checked_mul(unit_bytes).ok_or_else(overflow)?;
        // A fraction that leaves part of a byte rounds up: asking for too little memory is the worse error.
        let bytes = scaled.div_ceil(scale);
        Ok(Self {
            bytes: u64::try_from(bytes).map_err(|_| overflow())?,
        })
    }

    pub fn from_bytes(bytes: u64) -> Self {
        Self { bytes }
    }

    pub fn bytes(self) -> u64 {
        self.bytes
    }

    /// Whole MiB, truncated as Spark does.
    pub fn mebibytes(self) -> u64 {
        self.bytes >> 20
    }

    /// A whole-number Spark memory string in the largest exact unit (`1.5g` -> `1536m`).
    pub fn to_spark_string(self) -> String {
        self.render(&["b", "k", "m", "g", "t", "p"])
    }

    /// A Kubernetes quantity with binary suffixes (`1.5g` -> `1536Mi`), for container limits.
    pub fn to_kubernetes_quantity(self) -> String {
        self.render(&["", "Ki", "Mi", "Gi", "Ti", "Pi"])
    }

    fn render(self, units: &[&str; 6]) -> String {
        let mut value = self.bytes;
        let mut unit = 0;
        while unit + 1 < units.len() && value != 0 && value.is_multiple_of(1024) {
            value /= 1024;
            unit += 1;
        }
        format!("{value}{}", units[unit])
    }
}

impl fmt::Display for SparkMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_spark_string())
    }
}

/// A parsed Kubernetes quantity. The value is approximate (a float), for comparisons and messages only;
/// the original string is what goes into objects.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct KubernetesQuantity {
    value: f64,
}

impl KubernetesQuantity {
    /// Parses `<sign><number><suffix>` as the API server does.
    pub fn parse(input: &str) -> Result<Self, QuantityError> {
        let syntax = || QuantityError::KubernetesSyntax {
            input: input.to_owned(),
        };
        let (negative, rest) = match input.as_bytes().first() {
            Some(b'-') => (true, &input[1..]),
            Some(b'+') => (false, &input[1..]),
            _ => (false, input),
        };
        let number_end = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(syntax());
        }
        let mantissa: f64 = number.parse().map_err(|_| syntax())?;
        let multiplier = match suffix {
            "" => 1.0,
            "m" => 1e-3,
            "k" => 1e3,
            "M" => 1e6,
            "G" => 1e9,
            "T" => 1e12,
            "P" => 1e15,
            "E" => 1e18,
            "Ki" => 1024f64,
            "Mi" => 1024f64.powi(2),
            "Gi" => 1024f64.powi(3),
            "Ti" => 1024f64.powi(4),
            "Pi" => 1024f64.powi(5),
            "Ei" => 1024f64.powi(6),
            exponent if exponent.starts_with(['e', 'E']) => {
                let power = &exponent[1..];
                let digits = power.strip_prefix(['+', '-']).unwrap_or(power);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(syntax());
                }
                let power: i32 = power.parse().map_err(|_| syntax())?;
                10f64.powi(power)
            }
            _ => return Err(syntax()),
        };
        let value = mantissa * multiplier;
        Ok(Self {
            value: if negative { -value } else { value },
        })
    }

    pub fn value(self) -> f64 {
        self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mib(input: &str) -> u64 {
        SparkMemory::parse(input, SparkMemoryUnit::MiB).unwrap().bytes()
    }

    #[test]
    fn spark_memory_strings_parse_with_spark_units() {
        assert_eq!(mib("512m"), 512 << 20);
        assert_eq!(mib("1g"), 1 << 30);
        assert_eq!(mib("1G"), 1 << 30);
        assert_eq!(mib(" 2gb "), 2 << 30);
        assert_eq!(mib("100k"), 100 << 10);
        assert_eq!(mib("384"), 384 << 20, "no unit means MiB");
        assert_eq!(mib("1.5g"), 1536 << 20);
        assert_eq!(mib("0.5m"), 512 << 10);
        assert_eq!(SparkMemory::parse("10", SparkMemoryUnit::Bytes).unwrap().bytes(), 10);
    }

    #[test]
    fn bad_spark_memory_strings_say_what_is_allowed() {
        for bad in ["", "g", "1.g", ".5g", "1.5.2g", "-1g", "1 g", "lots"] {
            let err = SparkMemory::parse(bad, SparkMemoryUnit::MiB).unwrap_err();
            assert!(err.to_string().contains("512m"), "{bad}: {err}");
        }
        let err = SparkMemory::parse("1gi", SparkMemoryUnit::MiB).unwrap_err();
        assert_eq!(
            err,
            QuantityError::SparkMemoryUnit {
                input: "1gi".into(),
                unit: "gi".into()
            }
        );
        assert!(matches!(
            SparkMemory::parse("99999999999999999999999999p", SparkMemoryUnit::MiB),
            Err(QuantityError::SparkMemoryOverflow { .. })
        ));
    }

    #[test]
    fn spark_memory_renders_whole_numbers_spark_accepts() {
        let parse = |s| SparkMemory::parse(s, SparkMemoryUnit::MiB).unwrap();
        assert_eq!(parse("1.5g").to_spark_string(), "1536m");
        assert_eq!(parse("2048m").to_spark_string(), "2g");
        assert_eq!(parse("1.5g").to_kubernetes_quantity(), "1536Mi");
        assert_eq!(parse("1g").to_kubernetes_quantity(), "1Gi");
        assert_eq!(SparkMemory::from_bytes(1000).to_spark_string(), "1000b");
        assert_eq!(parse("1.5g").mebibytes(), 1536);
    }

    #[test]
    fn kubernetes_quantities_parse() {
        let value = |s| KubernetesQuantity::parse(s).unwrap().value();
        assert_eq!(value("500m"), 0.5);
        assert_eq!(value("1.5"), 1.5);
        assert_eq!(value("1200m"), 1.2);
        assert_eq!(value("2Gi"), 2.0 * 1024.0 * 1024.0 * 1024.0);
        assert_eq!(value("1e3"), 1000.0);
        assert_eq!(value("-1k"), -1000.0);
        assert_eq!(value(".5"), 0.5);
        assert_eq!(value("5."), 5.0);
    }

    #[test]
    fn bad_kubernetes_quantities_are_rejected() {
        for bad in ["", "m", "1.2.3", "1g", "1 Gi", "1e", "1ex", "one", "1Kib", "."] {
            assert!(KubernetesQuantity::parse(bad).is_err(), "{bad} should not parse");
        }
    }
}
