//! Field checks several kinds share (apimachinery's generic validators and
//! `LabelSelectorAsSelector`), with kube-apiserver's field paths and messages.

use serde_json::Value;

use super::{label_value_errors, labels, max_len_error, qualified_name_errors};
use crate::selectors::LabelSelector;
use crate::status::FieldCause;

/// `validation.IsNegativeErrorMsg`.
pub(super) const IS_NEGATIVE: &str = "must be greater than or equal to 0";
/// `IsValidPortNum`'s message.
pub(super) const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";
const PERCENT_MSG: &str = "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')";

/// `field.Required` with a detail: `Required value: detail`.
pub(super) fn required_because(field: impl Into<String>, detail: &str) -> FieldCause {
    FieldCause {
        reason: "FieldValueRequired".into(),
        field: field.into(),
        message: format!("Required value: {detail}"),
    }
}

/// `field.Duplicate`: `Duplicate value: <value>`.
pub(super) fn duplicate(field: impl Into<String>, value: &Value) -> FieldCause {
    let shown = match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    };
    FieldCause {
        reason: "FieldValueDuplicate".into(),
        field: field.into(),
        message: format!("Duplicate value: {shown}"),
    }
}

/// A string field, `""` when absent or not a string.
pub(super) fn str_at<'a>(v: Option<&'a Value>, pointer: &str) -> &'a str {
    v.and_then(|v| v.pointer(pointer)).and_then(Value::as_str).unwrap_or("")
}

/// An array field, empty when absent.
pub(super) fn array_at<'a>(v: Option<&'a Value>, pointer: &str) -> &'a [Value] {
    v.and_then(|v| v.pointer(pointer))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A set field: present and not `null`.
pub(super) fn set_at<'a>(v: Option<&'a Value>, pointer: &str) -> Option<&'a Value> {
    v.and_then(|v| v.pointer(pointer)).filter(|v| !v.is_null())
}

/// `ValidateNonnegativeField` on an optional integer field.
pub(super) fn nonnegative(field: &str, value: Option<&Value>, causes: &mut Vec<FieldCause>) {
    if let Some(v) = value
        && v.as_i64().is_some_and(|n| n < 0)
    {
        causes.push(FieldCause::invalid(field, v, IS_NEGATIVE));
    }
}

/// Drops what Go's semantic equality does not see: `null` fields and empty lists and maps
/// (a nil and an empty map are equal there).
fn normalized(v: Option<&Value>) -> Value {
    match v {
        None | Some(Value::Null) => Value::Null,
        Some(Value::Object(m)) => {
            let m: serde_json::Map<String, Value> = m
                .iter()
                .map(|(k, v)| (k.clone(), normalized(Some(v))))
                .filter(|(_, v)| !v.is_null())
                .collect();
            if m.is_empty() { Value::Null } else { Value::Object(m) }
        }
        Some(Value::Array(a)) if a.is_empty() => Value::Null,
        Some(Value::Array(a)) => Value::Array(a.iter().map(|v| normalized(Some(v))).collect()),
        Some(other) => other.clone(),
    }
}

/// `ValidateImmutableField`: `field: Invalid value: <new>: field is immutable`.
pub(super) fn immutable(field: &str, old: Option<&Value>, new: Option<&Value>, causes: &mut Vec<FieldCause>) {
    if normalized(old) != normalized(new) {
        causes.push(FieldCause::invalid(
            field,
            new.unwrap_or(&Value::Null),
            "field is immutable",
        ));
    }
}

/// What `LabelSelectorAsSelector` makes of a `metav1.LabelSelector`.
pub(super) enum Selector {
    /// No selector at all (`labels.Nothing()`): matches nothing, and is not "empty".
    Nothing,
    /// A selector that did not convert (its errors are already reported).
    Invalid,
    /// A valid one; without requirements it is `labels.Everything()`.
    Valid(LabelSelector),
}

impl Selector {
    /// `selector.Empty()`: a selector without requirements (not `Nothing`).
    pub(super) fn is_empty(&self) -> bool {
        matches!(self, Selector::Valid(s) if s.is_empty())
    }

    /// Whether a set of labels (a template's) is selected; `Nothing` selects none.
    pub(super) fn matches(&self, labels: Option<&Value>) -> bool {
        match self {
            Selector::Valid(s) => s.matches(labels.and_then(Value::as_object)),
            Selector::Nothing | Selector::Invalid => false,
        }
    }
}

/// `ValidateLabelSelector` at `path`, then the conversion (which fails exactly when a
/// requirement is invalid: an unknown operator, values where none may be, a bad key or value).
pub(super) fn label_selector(selector: Option<&Value>, path: &str, causes: &mut Vec<FieldCause>) -> Selector {
    let Some(sel) = selector.filter(|s| !s.is_null()) else {
        return Selector::Nothing;
    };
    let before = causes.len();
    labels(sel.get("matchLabels"), &format!("{path}.matchLabels"), causes);
    for (i, e) in array_at(Some(sel), "/matchExpressions").iter().enumerate() {
        let at = format!("{path}.matchExpressions[{i}]");
        let values = array_at(Some(e), "/values");
        let op = e.get("operator").cloned().unwrap_or(Value::String(String::new()));
        match op.as_str() {
            Some("In" | "NotIn") => {
                if values.is_empty() {
                    causes.push(required_because(
                        format!("{at}.values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    ));
                }
            }
            Some("Exists" | "DoesNotExist") => {
                if !values.is_empty() {
                    causes.push(FieldCause::forbidden(
                        format!("{at}.values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ));
                }
            }
            _ => causes.push(FieldCause::invalid(
                format!("{at}.operator"),
                &op,
                "not a valid selector operator",
            )),
        }
        let key = str_at(Some(e), "/key");
        for msg in qualified_name_errors(key) {
            causes.push(FieldCause::invalid(
                format!("{at}.key"),
                &Value::String(key.into()),
                msg,
            ));
        }
        for (j, v) in values.iter().enumerate() {
            let v = v.as_str().unwrap_or_default();
            for msg in label_value_errors(v) {
                causes.push(FieldCause::invalid(
                    format!("{at}.values[{j}]"),
                    &Value::String(v.into()),
                    msg,
                ));
            }
        }
    }
    if causes.len() != before {
        return Selector::Invalid;
    }
    match LabelSelector::from_object(sel) {
        Ok(s) => Selector::Valid(s),
        Err(_) => Selector::Invalid,
    }
}

/// A selector with neither `matchLabels` nor `matchExpressions` entries.
pub(super) fn selector_has_no_terms(selector: &Value) -> bool {
    let n = |k: &str| {
        selector.get(k).map_or(0, |v| {
            v.as_object().map_or(0, |m| m.len()) + v.as_array().map_or(0, Vec::len)
        })
    };
    n("matchLabels") + n("matchExpressions") == 0
}

/// `validation.IsValidPortNum` for a port that must be set.
pub(super) fn port_num(field: &str, value: Option<&Value>, causes: &mut Vec<FieldCause>) {
    let v = value.cloned().unwrap_or(Value::from(0));
    if !v.as_i64().is_some_and(|n| (1..=65535).contains(&n)) {
        causes.push(FieldCause::invalid(field, &v, PORT_RANGE));
    }
}

/// `validation.IsValidPortName` (an IANA service name).
pub(super) fn port_name_errors(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.len() > 15 {
        errs.push(max_len_error(15));
    }
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into());
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".into());
    }
    if name.contains("--") {
        errs.push("must not contain consecutive hyphens".into());
    }
    if name.starts_with('-') || name.ends_with('-') {
        errs.push("must not begin or end with a hyphen".into());
    }
    errs
}

/// `ValidatePortNumOrName`: a number in range or a valid port name.
pub(super) fn port_num_or_name(field: &str, value: Option<&Value>, causes: &mut Vec<FieldCause>) {
    match value {
        Some(Value::String(s)) => {
            for msg in port_name_errors(s) {
                causes.push(FieldCause::invalid(field, &Value::String(s.clone()), msg));
            }
        }
        other => port_num(field, other, causes),
    }
}

/// An int-or-string's value when it is a valid percentage (`getPercentValue`).
fn percent(v: &Value) -> Option<i64> {
    let s = v.as_str()?;
    let digits = s.strip_suffix('%')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `getIntOrPercentValue`: the percentage or the integer (0 for anything else).
pub(super) fn int_or_percent_value(v: Option<&Value>) -> i64 {
    v.map_or(0, |v| percent(v).or_else(|| v.as_i64()).unwrap_or(0))
}

/// `ValidatePositiveIntOrPercent`.
pub(super) fn positive_int_or_percent(field: &str, value: Option<&Value>, causes: &mut Vec<FieldCause>) {
    match value {
        Some(v @ Value::String(_)) if percent(v).is_none() => {
            causes.push(FieldCause::invalid(field, v, PERCENT_MSG));
        }
        Some(Value::String(_)) => {}
        Some(v) => nonnegative(field, Some(v), causes),
        None => {}
    }
}

/// `IsNotMoreThan100Percent`.
pub(super) fn not_more_than_100_percent(field: &str, value: Option<&Value>, causes: &mut Vec<FieldCause>) {
    if let Some(v) = value
        && percent(v).is_some_and(|p| p > 100)
    {
        causes.push(FieldCause::invalid(field, v, "must not be greater than 100%"));
    }
}
