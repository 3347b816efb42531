//! Resource quantities (`500m`, `2`, `896Mi`, `1G`, `1e3`) as the scheduler compares them: CPU in
//! millicores, everything else in whole units (bytes, pods), rounded up as `resource.Quantity` does for
//! `MilliValue()` / `Value()`. Parsing is the API server's (`crate::quantity`), so the nodes accept exactly
//! the quantities the API server admitted.

/// A quantity in thousandths of its unit (so `1` is 1000 and `250m` is 250), or None when it is not a
/// valid Kubernetes quantity.
pub fn parse_milli(s: &str) -> Option<i128> {
    crate::quantity::parse(s.trim()).ok().map(|q| q.milli_value())
}

/// A quantity in whole units, rounded up (`Quantity.Value()`).
pub fn parse_units(s: &str) -> Option<i128> {
    crate::quantity::parse(s.trim()).ok().map(|q| q.value())
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
