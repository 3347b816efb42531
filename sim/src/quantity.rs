//! `resource.Quantity` as kube-apiserver parses it when it decodes a request
//! (`k8s.io/apimachinery/pkg/api/resource`, `ParseQuantity`): the same accepted forms and the same
//! errors, and the value exactly enough to compare quantities and take their sign. The nodes
//! (`node::quantity`) read quantities through it too.

use std::cmp::Ordering;

/// `resource.ErrFormatWrong`.
pub const FORMAT_WRONG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
/// `resource.ErrSuffix`.
pub const SUFFIX: &str = "unable to parse quantity's suffix";
/// `resource.ErrNumeric`.
pub const NUMERIC: &str = "unable to parse numeric part of quantity";

/// A parsed quantity: its value in nano-units, rounded away from zero as `ParseQuantity` rounds
/// (to 10^-9), saturating far beyond anything a resource list holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity {
    nanos: i128,
}

impl Quantity {
    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// `Quantity.MilliValue()`: thousandths, rounded up (away from zero).
    pub fn milli_value(&self) -> i128 {
        div_away_from_zero(self.nanos, 1_000_000)
    }

    /// `Quantity.Value()`: whole units, rounded up (away from zero).
    pub fn value(&self) -> i128 {
        div_away_from_zero(self.nanos, 1_000_000_000)
    }

    /// The value after `SetDefaults_ResourceList`'s `RoundUp(-3)` (milli scale), for comparing
    /// defaulted resource lists as the validation after defaulting does.
    pub fn rounded_to_milli(&self) -> Quantity {
        Quantity {
            nanos: self.milli_value().saturating_mul(1_000_000),
        }
    }

    pub fn cmp_value(&self, other: &Quantity) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

fn div_away_from_zero(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d == 0 {
        q
    } else if n > 0 {
        q + 1
    } else {
        q - 1
    }
}

/// `parseQuantityString`: sign, numerator, denominator and suffix, or `ErrFormatWrong`.
fn split(s: &str) -> Result<(bool, &str, &str, &str), &'static str> {
    let b = s.as_bytes();
    let end = b.len();
    let mut pos = 0;
    let mut positive = true;
    if let Some(&c) = b.first() {
        if c == b'-' {
            positive = false;
            pos += 1;
        } else if c == b'+' {
            pos += 1;
        }
    }
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        return Ok((positive, "0", "", ""));
    }
    let num_start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    let num = if pos == num_start { "0" } else { &s[num_start..pos] };
    if pos >= end {
        return Ok((positive, num, "", ""));
    }
    let mut denom = "";
    if b[pos] == b'.' {
        pos += 1;
        let start = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[start..pos];
        if pos >= end {
            return Ok((positive, num, denom, ""));
        }
    }
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < end {
        return Err(FORMAT_WRONG);
    }
    Ok((positive, num, denom, &s[suffix_start..]))
}

/// The suffix's base and exponent (`suffixHandler.interpret`).
fn interpret(suffix: &str) -> Option<(u32, i64)> {
    Some(match suffix {
        "" => (10, 0),
        "n" => (10, -9),
        "u" => (10, -6),
        "m" => (10, -3),
        "k" => (10, 3),
        "M" => (10, 6),
        "G" => (10, 9),
        "T" => (10, 12),
        "P" => (10, 15),
        "E" => (10, 18),
        "Ki" => (2, 10),
        "Mi" => (2, 20),
        "Gi" => (2, 30),
        "Ti" => (2, 40),
        "Pi" => (2, 50),
        "Ei" => (2, 60),
        s if s.len() > 1 && (s.starts_with('e') || s.starts_with('E')) => (10, s[1..].parse::<i64>().ok()?),
        _ => return None,
    })
}

/// `resource.ParseQuantity` of a request's value (after the `strings.TrimSpace` of
/// `Quantity.UnmarshalJSON`).
pub fn parse(s: &str) -> Result<Quantity, &'static str> {
    if s.is_empty() {
        return Err(FORMAT_WRONG);
    }
    let (positive, num, denom, suffix) = split(s)?;
    let (base, exponent) = interpret(suffix).ok_or(SUFFIX)?;
    // digits = num.denom as an integer, scaled by 10^-len(denom).
    let digits: String = format!("{num}{denom}");
    let mut scale10: i64 = -(denom.len() as i64);
    let mut units: i128 = 0;
    for d in digits.bytes() {
        match units.checked_mul(10).and_then(|u| u.checked_add(i128::from(d - b'0'))) {
            Some(u) => units = u,
            // Beyond i128: drop the digit and keep the magnitude.
            None => scale10 += 1,
        }
    }
    if base == 2 {
        units = units.saturating_mul(1i128.checked_shl(exponent as u32).unwrap_or(i128::MAX));
    } else {
        scale10 += exponent;
    }
    // To nano-units, rounding away from zero.
    let shift = scale10 + 9;
    let nanos = if shift >= 0 {
        let mut v = units;
        for _ in 0..shift.min(64) {
            v = v.saturating_mul(10);
        }
        v
    } else {
        let mut v = units;
        let mut rem = false;
        for _ in 0..(-shift).min(64) {
            rem |= v % 10 != 0;
            v /= 10;
        }
        if rem { v + 1 } else { v }
    };
    Ok(Quantity {
        nanos: if positive { nanos } else { -nanos },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn milli(s: &str) -> i128 {
        parse(s).map(|q| q.milli_value()).unwrap_or(i128::MIN)
    }

    #[test]
    fn the_forms_kubernetes_accepts() {
        assert_eq!(milli("500m"), 500);
        assert_eq!(milli("1"), 1000);
        assert_eq!(milli("0"), 0);
        assert_eq!(milli("+1.5"), 1500);
        assert_eq!(milli(".5"), 500);
        assert_eq!(milli("1."), 1000);
        assert_eq!(milli("1e3"), 1_000_000);
        assert_eq!(milli("1E-3"), 1);
        assert_eq!(milli("1Ki"), 1_024_000);
        assert_eq!(milli("1.5Gi"), 1536 * 1024 * 1024 * 1000);
        assert_eq!(milli("-1Gi"), -(1 << 30) * 1000);
        assert_eq!(milli("1n"), 1, "rounded up");
        assert_eq!(parse("2").map(|q| q.value()), Ok(2));
    }

    #[test]
    fn and_the_ones_it_refuses() {
        assert_eq!(parse("one"), Err(FORMAT_WRONG));
        assert_eq!(parse(""), Err(FORMAT_WRONG));
        assert_eq!(parse("1 Gi"), Err(FORMAT_WRONG));
        assert_eq!(parse("1Xi"), Err(FORMAT_WRONG));
        assert_eq!(parse("1iK"), Err(SUFFIX));
        assert_eq!(parse("1e"), Err(SUFFIX));
        assert_eq!(parse("true"), Err(FORMAT_WRONG));
    }

    #[test]
    fn comparisons_are_exact() {
        let a = parse("1Gi").ok();
        let b = parse("1073741824").ok();
        assert_eq!(a, b);
        assert!(parse("2").ok() > parse("1999m").ok());
    }
}
