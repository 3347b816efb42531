//! Resource quantities (`500m`, `2`, `896Mi`, `1G`, `1e3`) as the scheduler compares them:
//! CPU in millicores, everything else in whole units (bytes, pods), rounded up as
//! `resource.Quantity` does for `MilliValue()` / `Value()`.

/// Parses a quantity into thousandths of its unit (so `1` is 1000 and `250m` is 250), or None
/// when it is not a valid Kubernetes quantity.
pub fn parse_milli(s: &str) -> Option<i128> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (mantissa_milli, exp10): (i128, i32) = parse_decimal_milli(number)?;
    let (base2, base10): (u32, i32) = match suffix {
        "" => (0, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        e if e.starts_with(['e', 'E']) => (0, e[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    let mut v = mantissa_milli.checked_mul(1i128.checked_shl(base2)?)?;
    let exp = exp10 + base10;
    if exp >= 0 {
        v = v.checked_mul(10i128.checked_pow(exp as u32)?)?;
    } else {
        let div = 10i128.checked_pow((-exp) as u32)?;
        // Round up, as Kubernetes does when a quantity has more precision than asked for.
        v = if v >= 0 { (v + div - 1) / div } else { v / div };
    }
    Some(v)
}

/// `1.5` → (1500, 0) with the decimals folded into the milli value; more than 3 decimals are
/// kept by shifting the exponent.
fn parse_decimal_milli(number: &str) -> Option<(i128, i32)> {
    let (neg, digits) = match number.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, number.strip_prefix('+').unwrap_or(number)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
        return None;
    }
    let all: String = format!("{int}{frac}");
    let mut v: i128 = if all.is_empty() { 0 } else { all.parse().ok()? };
    // v is the number times 10^frac.len(); make it thousandths times 10^exp.
    let mut exp = 3 - frac.len() as i32;
    if exp > 0 {
        v = v.checked_mul(10i128.pow(exp as u32))?;
        exp = 0;
    }
    Some((if neg { -v } else { v }, exp))
}

/// A quantity in whole units, rounded up (`Quantity.Value()`).
pub fn parse_units(s: &str) -> Option<i128> {
    parse_milli(s).map(|m| if m >= 0 { (m + 999) / 1000 } else { m / 1000 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_and_memory_like_kubernetes() {
        assert_eq!(parse_milli("500m"), Some(500));
        assert_eq!(parse_milli("1"), Some(1000));
        assert_eq!(parse_milli("0.5"), Some(500));
        assert_eq!(parse_milli("2.25"), Some(2250));
        assert_eq!(parse_units("896Mi"), Some(896 * 1024 * 1024));
        assert_eq!(parse_units("1G"), Some(1_000_000_000));
        assert_eq!(parse_units("1e3"), Some(1000));
        assert_eq!(parse_units("1.5Gi"), Some(1536 * 1024 * 1024));
        assert_eq!(parse_milli("1n"), Some(1));
        assert_eq!(parse_milli("abc"), None);
        assert_eq!(parse_milli("1Xi"), None);
    }
}
