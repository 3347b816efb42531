//! Spark's configuration as the driver reads it: `java.util.Properties` parsing of
//! `spark.properties`, typed accessors with Spark's defaults, prefixed key/value groups and
//! Spark's size strings (`512m`, `2g`).

use std::collections::BTreeMap;

/// Parses the `.properties` format: `key=value`, `key:value` or `key value`; `#`/`!` comments;
/// backslash escapes (`\:`, `\=`, `\n`, `\uXXXX`) and line continuations.
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(first) = lines.next() {
        let mut logical = first.trim_start().to_string();
        if logical.is_empty() || logical.starts_with('#') || logical.starts_with('!') {
            continue;
        }
        // An odd number of trailing backslashes continues the line.
        while logical.chars().rev().take_while(|c| *c == '\\').count() % 2 == 1 {
            logical.pop();
            match lines.next() {
                Some(next) => logical.push_str(next.trim_start()),
                None => break,
            }
        }
        let chars: Vec<char> = logical.chars().collect();
        let mut i = 0;
        let mut key = String::new();
        while i < chars.len() {
            let c = chars[i];
            if c == '\\' && i + 1 < chars.len() {
                i += 1;
                key.push(unescape(&chars, &mut i));
                continue;
            }
            if c == '=' || c == ':' || c.is_whitespace() {
                break;
            }
            key.push(c);
            i += 1;
        }
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        if i < chars.len() && (chars[i] == '=' || chars[i] == ':') {
            i += 1;
        }
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        while i < chars.len() {
            if chars[i] == '\\' && i + 1 < chars.len() {
                i += 1;
                value.push(unescape(&chars, &mut i));
                continue;
            }
            value.push(chars[i]);
            i += 1;
        }
        out.insert(key, value);
    }
    out
}

/// The character after a backslash at `chars[*i]`; advances `i` past the escape.
fn unescape(chars: &[char], i: &mut usize) -> char {
    let c = chars[*i];
    *i += 1;
    match c {
        'n' => '\n',
        't' => '\t',
        'r' => '\r',
        'f' => '\u{c}',
        'u' => {
            let hex: String = chars.iter().skip(*i).take(4).collect();
            match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                Some(ch) if hex.len() == 4 => {
                    *i += 4;
                    ch
                }
                _ => 'u',
            }
        }
        other => other,
    }
}

/// A driver's Spark configuration.
#[derive(Debug, Clone, Default)]
pub struct SparkConf(pub BTreeMap<String, String>);

impl SparkConf {
    /// What the official images' entrypoint adds to spark-submit's command line in a driver pod: the pod's IP
    /// (`SPARK_DRIVER_BIND_ADDRESS`) as `spark.driver.bindAddress` and `spark.executorEnv.SPARK_DRIVER_POD_IP`.
    pub fn bind_to_pod_ip(&mut self, driver_pod: &serde_json::Value) {
        if let Some(ip) = driver_pod.pointer("/status/podIP").and_then(serde_json::Value::as_str) {
            for key in ["spark.driver.bindAddress", "spark.executorEnv.SPARK_DRIVER_POD_IP"] {
                self.0.insert(key.to_owned(), ip.to_owned());
            }
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    pub fn get_or<'a>(&'a self, key: &str, default: &'a str) -> &'a str {
        self.get(key).unwrap_or(default)
    }

    pub fn bool_or(&self, key: &str, default: bool) -> bool {
        self.get(key)
            .map(|v| v.trim().eq_ignore_ascii_case("true"))
            .unwrap_or(default)
    }

    pub fn int_or(&self, key: &str, default: i64) -> Result<i64, String> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse()
                .map_err(|_| format!("{key} should be int, but was {v}")),
        }
    }

    /// `KubernetesUtils.parsePrefixedKeyValuePairs`.
    pub fn with_prefix(&self, prefix: &str) -> BTreeMap<String, String> {
        self.0
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(prefix).map(|rest| (rest.to_string(), v.clone())))
            .collect()
    }
}

/// A Spark size in MiB (`Utils.memoryStringToMb`): `512m`, `2g`, `1024k`, `1t`, a bare number
/// is MiB.
pub fn memory_mib(s: &str) -> Option<i64> {
    let s = s.trim().to_ascii_lowercase();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: i64 = num.parse().ok()?;
    let unit = unit.trim_end_matches('b');
    Some(match unit {
        "" | "m" => n,
        "k" => n / 1024,
        "g" => n * 1024,
        "t" => n * 1024 * 1024,
        _ => return None,
    })
}

/// Where a Spark driver container reads `spark.properties` from: `--properties-file`, else
/// `$SPARK_CONF_DIR/spark.properties` (default `/opt/spark/conf`), as Spark's `SparkSubmit` does.
pub fn properties_path(container: &serde_json::Value) -> String {
    let args = super::spark_main::container_args(container);
    if let Some(i) = args.iter().position(|a| *a == "--properties-file")
        && let Some(p) = args.get(i + 1)
    {
        return p.to_string();
    }
    let conf_dir = container
        .get("env")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "SPARK_CONF_DIR")
        .and_then(|e| e["value"].as_str())
        .unwrap_or("/opt/spark/conf");
    format!("{conf_dir}/spark.properties")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_spark_submit_writes() {
        let text = "#Java properties built from Kubernetes config map\nspark.master=k8s\\://https\\://10.96.0.1\\:443\nspark.app.name = spark-pi\nspark.kubernetes.executor.label.a/b=c\nspark.x  long \\\n   continued\nempty=\n";
        let p = parse_properties(text);
        assert_eq!(p["spark.master"], "k8s://https://10.96.0.1:443");
        assert_eq!(p["spark.app.name"], "spark-pi");
        assert_eq!(p["spark.kubernetes.executor.label.a/b"], "c");
        assert_eq!(p["spark.x"], "long continued");
        assert_eq!(p["empty"], "");
        assert_eq!(memory_mib("512m"), Some(512));
        assert_eq!(memory_mib("2g"), Some(2048));
        assert_eq!(memory_mib("1024"), Some(1024));
    }
}
