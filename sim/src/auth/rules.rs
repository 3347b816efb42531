//! RBAC policy rules and subjects, and how kube-apiserver matches them (`rbac/v1` helpers
//! `RuleAllows`, `appliesTo`) and compares them for escalation (`Covers`, `BreakdownRule`,
//! `CompactRules`, `PolicyRule.CompactString`).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Attributes;
use crate::admission_seam::UserInfo;

/// `rbac.authorization.k8s.io/v1` PolicyRule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
    #[serde(default, rename = "nonResourceURLs", skip_serializing_if = "Vec::is_empty")]
    pub non_resource_urls: Vec<String>,
}

/// The rules of a Role or ClusterRole object (malformed entries are skipped, as they could
/// never have passed validation).
pub fn rules_of(role: &Value) -> Vec<PolicyRule> {
    role.get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| serde_json::from_value(r.clone()).ok())
        .collect()
}

fn has(set: &[String], s: &str) -> bool {
    set.iter().any(|x| x == s)
}

fn has_all(set: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| has(set, w))
}

impl PolicyRule {
    /// `RuleAllows`: whether this rule permits the request.
    pub fn allows(&self, a: &Attributes) -> bool {
        if !(has(&self.verbs, "*") || has(&self.verbs, &a.verb)) {
            return false;
        }
        if !a.resource_request {
            return self.non_resource_url_matches(&a.path);
        }
        (has(&self.api_groups, "*") || has(&self.api_groups, &a.api_group))
            && self.resource_matches(a)
            && (self.resource_names.is_empty() || has(&self.resource_names, &a.name))
    }

    fn resource_matches(&self, a: &Attributes) -> bool {
        let combined = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        self.resources.iter().any(|r| {
            r == "*"
                || *r == combined
                // `*/scale` matches the scale subresource of every resource.
                || (!a.subresource.is_empty()
                    && r.len() == a.subresource.len() + 2
                    && r.starts_with("*/")
                    && r.ends_with(&a.subresource))
        })
    }

    fn non_resource_url_matches(&self, path: &str) -> bool {
        self.non_resource_urls
            .iter()
            .any(|u| u == "*" || u == path || (u.ends_with('*') && path.starts_with(u.trim_end_matches('*'))))
    }

    /// `ruleCovers`: whether an owner holding this rule holds all of `sub` (a broken-down rule).
    fn covers(&self, sub: &PolicyRule) -> bool {
        let verbs = has(&self.verbs, "*") || has_all(&self.verbs, &sub.verbs);
        let groups = has(&self.api_groups, "*") || has_all(&self.api_groups, &sub.api_groups);
        let resources = has(&self.resources, "*")
            || sub.resources.iter().all(|r| {
                has(&self.resources, r)
                    || r.find('/')
                        .is_some_and(|i| has(&self.resources, &format!("*{}", &r[i..])))
            });
        let urls = sub.non_resource_urls.iter().all(|p| {
            self.non_resource_urls
                .iter()
                .any(|o| o == p || (o.ends_with('*') && p.starts_with(o.trim_end_matches('*'))))
        });
        let names = if sub.resource_names.is_empty() {
            self.resource_names.is_empty()
        } else {
            self.resource_names.is_empty() || has_all(&self.resource_names, &sub.resource_names)
        };
        verbs && groups && resources && urls && names
    }

    /// `BreakdownRule`: one rule per group × resource × verb (× name), and per URL × verb.
    fn breakdown(&self) -> Vec<PolicyRule> {
        let mut out = Vec::new();
        for g in &self.api_groups {
            for r in &self.resources {
                for v in &self.verbs {
                    let one = |names: Vec<String>| PolicyRule {
                        verbs: vec![v.clone()],
                        api_groups: vec![g.clone()],
                        resources: vec![r.clone()],
                        resource_names: names,
                        non_resource_urls: vec![],
                    };
                    if self.resource_names.is_empty() {
                        out.push(one(vec![]));
                    } else {
                        out.extend(self.resource_names.iter().map(|n| one(vec![n.clone()])));
                    }
                }
            }
        }
        for u in &self.non_resource_urls {
            for v in &self.verbs {
                out.push(PolicyRule {
                    verbs: vec![v.clone()],
                    non_resource_urls: vec![u.clone()],
                    ..Default::default()
                });
            }
        }
        out
    }

    /// `PolicyRule.CompactString`, e.g. `{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}`.
    pub fn compact_string(&self) -> String {
        let q = |v: &[String]| {
            let items: Vec<String> = v.iter().map(|s| go_quote(s)).collect();
            format!("[{}]", items.join(" "))
        };
        let mut parts = Vec::new();
        if !self.api_groups.is_empty() {
            parts.push(format!("APIGroups:{}", q(&self.api_groups)));
        }
        if !self.resources.is_empty() {
            parts.push(format!("Resources:{}", q(&self.resources)));
        }
        if !self.non_resource_urls.is_empty() {
            parts.push(format!("NonResourceURLs:{}", q(&self.non_resource_urls)));
        }
        if !self.resource_names.is_empty() {
            parts.push(format!("ResourceNames:{}", q(&self.resource_names)));
        }
        if !self.verbs.is_empty() {
            parts.push(format!("Verbs:{}", q(&self.verbs)));
        }
        format!("{{{}}}", parts.join(", "))
    }
}

/// Go's `%q` for the strings RBAC deals in.
pub fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
pub fn go_quote_list(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| go_quote(s)).collect();
    format!("[{}]", items.join(" "))
}

/// `Covers`: the broken-down parts of `wanted` that `owner` does not hold, compacted
/// (`CompactRules`) and described, sorted.
pub fn uncovered(owner: &[PolicyRule], wanted: &[PolicyRule]) -> Vec<String> {
    let missing: Vec<PolicyRule> = wanted
        .iter()
        .flat_map(PolicyRule::breakdown)
        .filter(|sub| !owner.iter().any(|o| o.covers(sub)))
        .collect();
    // CompactRules: simple rules (one group, one resource, at most one name) merge their verbs.
    let mut compacted: Vec<PolicyRule> = Vec::new();
    let mut simple: Vec<PolicyRule> = Vec::new();
    for rule in missing {
        let is_simple = rule.non_resource_urls.is_empty()
            && rule.resource_names.len() <= 1
            && rule.api_groups.len() == 1
            && rule.resources.len() == 1;
        if !is_simple {
            compacted.push(rule);
            continue;
        }
        match simple.iter_mut().find(|s| {
            s.api_groups == rule.api_groups && s.resources == rule.resources && s.resource_names == rule.resource_names
        }) {
            Some(s) => s.verbs.extend(rule.verbs),
            None => simple.push(rule),
        }
    }
    compacted.extend(simple);
    let set: BTreeSet<String> = compacted.iter().map(PolicyRule::compact_string).collect();
    set.into_iter().collect()
}

/// `rbac/v1` Subject.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

impl Subject {
    /// `appliesToUser`: a ServiceAccount subject without a namespace takes the binding's.
    pub fn applies_to(&self, user: &UserInfo, binding_namespace: &str) -> bool {
        match self.kind.as_str() {
            "User" => self.name == user.username,
            "Group" => user.groups.contains(&self.name),
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    binding_namespace
                } else {
                    &self.namespace
                };
                !ns.is_empty() && user.username == format!("system:serviceaccount:{ns}:{}", self.name)
            }
            _ => false,
        }
    }

    /// `describeSubject`, for the reason of an allowed request.
    pub fn describe(&self, binding_namespace: &str) -> String {
        match self.kind.as_str() {
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    binding_namespace
                } else {
                    &self.namespace
                };
                format!("{} {}", self.kind, go_quote(&format!("{}/{ns}", self.name)))
            }
            _ => format!("{} {}", self.kind, go_quote(&self.name)),
        }
    }
}

/// The subjects of a binding object.
pub fn subjects_of(binding: &Value) -> Vec<Subject> {
    binding
        .get("subjects")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| serde_json::from_value(s.clone()).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
        PolicyRule {
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            api_groups: groups.iter().map(|s| s.to_string()).collect(),
            resources: resources.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn attrs(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            api_group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            resource_request: true,
            ..Default::default()
        }
    }

    #[test]
    fn matching_as_rbac_does() {
        let r = rule(&[""], &["pods"], &["get"]);
        assert!(r.allows(&attrs("get", "", "pods", "", "p")));
        assert!(
            !r.allows(&attrs("get", "", "pods", "log", "p")),
            "a subresource is not its resource"
        );
        assert!(!r.allows(&attrs("list", "", "pods", "", "")));
        assert!(!r.allows(&attrs("get", "apps", "pods", "", "p")));
        let scale = rule(&["*"], &["*/scale"], &["get"]);
        assert!(scale.allows(&attrs("get", "apps", "deployments", "scale", "d")));
        assert!(!scale.allows(&attrs("get", "apps", "deployments", "", "d")));
        let mut named = rule(&[""], &["configmaps"], &["get"]);
        named.resource_names = vec!["a".into()];
        assert!(named.allows(&attrs("get", "", "configmaps", "", "a")));
        assert!(!named.allows(&attrs("get", "", "configmaps", "", "b")));
        let urls = PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: vec!["/apis/*".into(), "/healthz".into()],
            ..Default::default()
        };
        let mut a = Attributes {
            verb: "get".into(),
            path: "/apis/apps/v1".into(),
            ..Default::default()
        };
        assert!(urls.allows(&a));
        a.path = "/healthz/etcd".into();
        assert!(!urls.allows(&a));
    }

    #[test]
    fn escalation_description_is_compacted_and_sorted() {
        let owner = vec![rule(&[""], &["pods"], &["get"])];
        let wanted = vec![rule(&["", "apps"], &["pods"], &["get", "list", "watch"])];
        assert_eq!(
            uncovered(&owner, &wanted),
            vec![
                r#"{APIGroups:[""], Resources:["pods"], Verbs:["list" "watch"]}"#.to_string(),
                r#"{APIGroups:["apps"], Resources:["pods"], Verbs:["get" "list" "watch"]}"#.to_string(),
            ]
        );
        let star = vec![rule(&["*"], &["*"], &["*"])];
        assert!(uncovered(&star, &wanted).is_empty());
        let sub = vec![rule(&[""], &["*/status"], &["update"])];
        assert!(uncovered(&sub, &[rule(&[""], &["pods/status"], &["update"])]).is_empty());
    }
}
