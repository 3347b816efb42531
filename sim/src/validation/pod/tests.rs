//! Pod validation, each rule as kube-apiserver 1.37 words it (after the scheme defaults).

use super::*;
use serde_json::json;

/// The errors of a Pod with `spec`, after the scheme defaults (as the apiserver validates).
fn errors(spec: Value) -> Vec<String> {
    let mut pod = json!({ "spec": spec });
    crate::defaults::apply("", "Pod", &mut pod);
    let mut causes = Vec::new();
    super::pod("spec", pod.get("spec"), &mut causes);
    causes
        .into_iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect()
}

fn one(container: Value) -> Value {
    json!({ "containers": [container] })
}

#[test]
fn a_spark_like_pod_is_accepted() {
    let spec = json!({
        "restartPolicy": "Never",
        "volumes": [
            { "name": "spark-local-dir-1", "emptyDir": {} },
            { "name": "spark-conf-volume-driver", "configMap": { "name": "spark-drv-conf-map" } },
            { "name": "kube-api-access-abcde", "projected": { "sources": [] } }
        ],
        "containers": [{
            "name": "spark-kubernetes-driver", "image": "spark:4.0.0", "imagePullPolicy": "IfNotPresent",
            "terminationMessagePolicy": "File",
            "ports": [
                { "name": "driver-rpc-port", "containerPort": 7078, "protocol": "TCP" },
                { "name": "blockmanager", "containerPort": 7079, "protocol": "TCP" },
                { "name": "spark-ui", "containerPort": 4040, "protocol": "TCP" }
            ],
            "env": [
                { "name": "SPARK_USER", "value": "spark" },
                { "name": "SPARK_DRIVER_BIND_ADDRESS", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } },
                { "name": "my.env-name", "value": "x" },
                { "name": "1-relaxed name!", "value": "printable ASCII is fine in 1.33" },
                { "name": "PASSWORD", "valueFrom": { "secretKeyRef": { "name": "db", "key": "pass.word" } } }
            ],
            "volumeMounts": [
                { "name": "spark-local-dir-1", "mountPath": "/var/data/spark-1" },
                { "name": "spark-conf-volume-driver", "mountPath": "/opt/spark/conf" },
                { "name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount" }
            ]
        }],
        "initContainers": [{ "name": "init", "image": "busybox", "restartPolicy": "Always" }]
    });
    assert_eq!(errors(spec), Vec::<String>::new());
}

#[test]
fn enums_are_worded_as_kube_apiserver_words_them() {
    let errs = errors(json!({ "restartPolicy": "Sometimes",
        "containers": [{ "name": "c", "image": "i", "imagePullPolicy": "Sometimes", "terminationMessagePolicy": "Stdout" }] }));
    assert_eq!(
        errs,
        [
            "spec.containers[0].terminationMessagePolicy: Unsupported value: \"Stdout\": supported values: \"File\", \"FallbackToLogsOnError\"",
            "spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"",
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
        ]
    );
}

#[test]
fn env_names_follow_the_relaxed_rule_of_1_33() {
    let errs = errors(one(json!({ "name": "c", "image": "i",
        "env": [{ "name": "A=B" }, { "name": "tab\there" }, { "name": "é" }, { "name": "" }, { "name": "ok name.1-_" }] })));
    let msg = "a valid environment variable name must consist only of printable ASCII characters other than '='";
    assert_eq!(
        errs,
        [
            format!("spec.containers[0].env[0].name: Invalid value: \"A=B\": {msg}"),
            format!("spec.containers[0].env[1].name: Invalid value: \"tab\\there\": {msg}"),
            format!("spec.containers[0].env[2].name: Invalid value: \"é\": {msg}"),
            "spec.containers[0].env[3].name: Required value".to_string(),
        ]
    );
}

#[test]
fn duplicate_names_are_refused() {
    let errs = errors(json!({
        "volumes": [{ "name": "v", "emptyDir": {} }, { "name": "v", "emptyDir": {} }],
        "containers": [{ "name": "c", "image": "i" }, { "name": "c", "image": "i" }],
        "initContainers": [{ "name": "c", "image": "i" }]
    }));
    assert_eq!(
        errs,
        [
            "spec.volumes[1].name: Duplicate value: \"v\"",
            "spec.containers[1].name: Duplicate value: \"c\"",
            "spec.initContainers[0].name: Duplicate value: \"c\"",
        ]
    );
}

#[test]
fn ports_are_in_range_named_and_unique() {
    let errs = errors(one(json!({ "name": "c", "image": "i", "ports": [
        { "name": "http", "containerPort": 70000 },
        { "name": "http", "containerPort": 80 },
        { "containerPort": 0 },
        { "containerPort": 8080, "hostPort": -1, "protocol": "HTTP" },
        { "name": "Bad--Name", "containerPort": 81 }
    ] })));
    assert_eq!(
        errs,
        [
            "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
            "spec.containers[0].ports[1].name: Duplicate value: \"http\"",
            "spec.containers[0].ports[2].containerPort: Required value",
            "spec.containers[0].ports[3].hostPort: Invalid value: -1: must be between 1 and 65535, inclusive",
            "spec.containers[0].ports[3].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            "spec.containers[0].ports[4].name: Invalid value: \"Bad--Name\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
            "spec.containers[0].ports[4].name: Invalid value: \"Bad--Name\": must not contain consecutive hyphens",
        ]
    );
}

#[test]
fn mounts_need_a_valid_volume_and_a_unique_path_but_may_be_relative_and_a_volume_without_source_is_an_empty_dir() {
    let errs = errors(json!({
        "volumes": [{ "name": "v", "emptyDir": {} }, { "name": "Bad_Vol", "emptyDir": {} }, { "name": "none" }],
        "containers": [{ "name": "c", "image": "i", "volumeMounts": [
            { "name": "v", "mountPath": "relative/is/accepted" },
            { "name": "v", "mountPath": "relative/is/accepted" },
            { "name": "missing", "mountPath": "/m" },
            { "name": "Bad_Vol", "mountPath": "/b", "subPath": "../up" }
        ] }]
    }));
    assert_eq!(
        errs,
        [
            "spec.volumes[1].name: Invalid value: \"Bad_Vol\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            "spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"relative/is/accepted\": must be unique",
            "spec.containers[0].volumeMounts[2].name: Not found: \"missing\"",
            "spec.containers[0].volumeMounts[3].name: Not found: \"Bad_Vol\"",
            "spec.containers[0].volumeMounts.subPath: Invalid value: \"../up\": must not contain '..'",
        ]
    );
}

#[test]
fn two_volume_sources_are_forbidden() {
    let errs = errors(json!({ "volumes": [{ "name": "v", "emptyDir": {}, "downwardAPI": {} }],
        "containers": [{ "name": "c", "image": "i" }] }));
    assert_eq!(
        errs,
        ["spec.volumes[0].downwarAPI: Forbidden: may not specify more than 1 volume type"]
    );
}

#[test]
fn secret_key_refs_need_a_name_and_a_valid_key() {
    let errs = errors(one(json!({ "name": "c", "image": "i", "env": [
        { "name": "A", "valueFrom": { "secretKeyRef": { "name": "db:pass", "key": "k" } } },
        { "name": "B", "valueFrom": { "configMapKeyRef": { "name": "cm", "key": "" } } },
        { "name": "C", "valueFrom": { "configMapKeyRef": { "name": "cm", "key": "a/b" } } }
    ] })));
    assert_eq!(errs.len(), 3, "{errs:?}");
    assert!(errs[0].starts_with("spec.containers[0].env[0].valueFrom.secretKeyRef.name: Invalid value: \"db:pass\": a lowercase RFC 1123 subdomain"));
    assert_eq!(
        errs[1],
        "spec.containers[0].env[1].valueFrom.configMapKeyRef.key: Required value"
    );
    assert!(errs[2].contains("a valid config key must consist of alphanumeric characters"));
}

#[test]
fn defaulted_enums_may_be_left_empty() {
    assert!(errors(one(json!({ "name": "c", "image": "i", "imagePullPolicy": "" }))).is_empty());
}

#[test]
fn container_restart_policies_follow_1_37() {
    let errs = errors(json!({
        "containers": [{ "name": "a", "image": "i", "restartPolicy": "Never" }, { "name": "b", "image": "i", "restartPolicy": "Sometimes" }],
        "initContainers": [
            { "name": "i1", "image": "i", "restartPolicy": "Never" },
            { "name": "i2", "image": "i", "restartPolicy": "Sometimes" },
            { "name": "i3", "image": "i", "restartPolicy": "OnFailure", "livenessProbe": { "exec": { "command": ["true"] } } },
            { "name": "sidecar", "image": "i", "restartPolicy": "Always", "livenessProbe": { "exec": { "command": ["true"] } } }
        ]
    }));
    assert_eq!(
        errs,
        [
            "spec.containers[1].restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"Never\", \"OnFailure\"",
            "spec.initContainers[1].restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"Never\", \"OnFailure\"",
            "spec.initContainers[2].livenessProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
        ]
    );
}

#[test]
fn resources_names_quantities_and_limits() {
    let errs = errors(one(json!({ "name": "c", "image": "i", "resources": {
        "requests": { "cpu": "-1", "memory": "2Gi", "nvidia.com/gpu": "1" },
        "limits": { "memory": "1Gi", "gpu": "1", "example.com/foo": "500m", "nvidia.com/gpu": "2" }
    } })));
    assert_eq!(
        errs,
        [
            // serde_json's maps are ordered by key (Go's by chance): the same set of errors.
            "spec.containers[0].resources.limits[example.com/foo]: Invalid value: \"500m\": must be an integer",
            "spec.containers[0].resources.limits[gpu]: Invalid value: \"gpu\": must be a standard resource type or fully qualified",
            "spec.containers[0].resources.limits[gpu]: Invalid value: \"gpu\": must be a standard resource for containers",
            "spec.containers[0].resources.requests[cpu]: Invalid value: \"-1\": must be greater than or equal to 0",
            // Defaulted from the limits (SetDefaults_Pod), so judged again as requests.
            "spec.containers[0].resources.requests[example.com/foo]: Invalid value: \"500m\": must be an integer",
            "spec.containers[0].resources.requests[gpu]: Invalid value: \"gpu\": must be a standard resource type or fully qualified",
            "spec.containers[0].resources.requests[gpu]: Invalid value: \"gpu\": must be a standard resource for containers",
            "spec.containers[0].resources.requests: Invalid value: \"2Gi\": must be less than or equal to memory limit of 1Gi",
            "spec.containers[0].resources.requests: Invalid value: \"1\": must be equal to nvidia.com/gpu limit of 2",
        ]
    );
    let errs = errors(one(
        json!({ "name": "c", "image": "i", "resources": { "requests": { "example.com/foo": "1" } } }),
    ));
    assert_eq!(
        errs,
        ["spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources"]
    );
    let errs = errors(one(
        json!({ "name": "c", "image": "i", "resources": { "limits": { "hugepages-2Mi": "3Mi" } } }),
    ));
    assert_eq!(errs.len(), 3, "{errs:?}");
    assert_eq!(
        errs[2],
        "spec.containers[0].resources: Forbidden: HugePages require cpu or memory"
    );
    assert!(
        errors(one(
            json!({ "name": "c", "image": "i", "resources": { "limits": { "cpu": "1.5", "memory": 1073741824 } } })
        ))
        .is_empty()
    );
}

#[test]
fn host_ports_are_unique_per_protocol_and_ip() {
    let errs = errors(json!({
        "containers": [
            { "name": "a", "image": "i", "ports": [{ "containerPort": 80, "hostPort": 8080 }, { "containerPort": 80, "hostPort": 8080, "protocol": "UDP" }] },
            { "name": "b", "image": "i", "ports": [{ "containerPort": 81, "hostPort": 8080 }] }
        ],
        "initContainers": [{ "name": "c", "image": "i", "ports": [{ "containerPort": 81, "hostPort": 8080 }] },
            { "name": "d", "image": "i", "ports": [{ "containerPort": 1, "hostPort": 9 }, { "containerPort": 2, "hostPort": 9 }] }]
    }));
    assert_eq!(
        errs,
        [
            "spec.containers[1].ports[0].hostPort: Duplicate value: \"TCP//8080\"",
            // Each init container alone, named at index 0 as kube-apiserver names it.
            "spec.initContainers[0].ports[1].hostPort: Duplicate value: \"TCP//9\"",
        ]
    );
}

#[test]
fn tolerations() {
    let errs = errors(json!({ "containers": [{ "name": "c", "image": "i" }], "tolerations": [
        { "key": "k", "operator": "Exists", "value": "v" },
        { "key": "k", "operator": "Maybe", "effect": "Sometimes" },
        { "key": "k", "value": "v", "effect": "NoSchedule", "tolerationSeconds": 30 },
        { "operator": "Equal", "value": "v" },
        { "operator": "Exists" },
        { "key": "k", "operator": "Gt", "value": "1" }
    ] }));
    assert_eq!(
        errs,
        [
            "spec.tolerations[0].operator: Invalid value: \"v\": value must be empty when `operator` is 'Exists'",
            "spec.tolerations[1].operator: Unsupported value: \"Maybe\": supported values: \"Equal\", \"Exists\"",
            "spec.tolerations[1].effect: Unsupported value: \"Sometimes\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
            "spec.tolerations[2].effect: Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set",
            "spec.tolerations[3].operator: Invalid value: \"Equal\": operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            "spec.tolerations[5].operator: Unsupported value: \"Gt\": supported values: \"Equal\", \"Exists\", \"Lt\", \"Gt\"",
        ]
    );
}

#[test]
fn node_affinity() {
    let errs = errors(
        json!({ "containers": [{ "name": "c", "image": "i" }], "affinity": { "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": { "nodeSelectorTerms": [{ "matchExpressions": [
            { "key": "zone", "operator": "Near", "values": ["a"] },
            { "key": "zone", "operator": "In", "values": [] },
            { "key": "disk", "operator": "Exists", "values": ["ssd"] },
            { "key": "n", "operator": "Gt", "values": ["1", "2"] }
        ] }] },
        "preferredDuringSchedulingIgnoredDuringExecution": [{ "weight": 0, "preference": { "matchExpressions": [{ "key": "zone", "operator": "Gt", "values": ["a"] }] } }]
    } } }),
    );
    let req = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions";
    assert_eq!(
        errs,
        [
            format!("{req}[0].operator: Invalid value: \"Near\": not a valid selector operator"),
            format!("{req}[1].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"),
            format!("{req}[2].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"),
            format!("{req}[3].values: Required value: must be specified single value when `operator` is 'Lt' or 'Gt'"),
            "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: Invalid value: 0: must be in the range 1-100".to_string(),
        ]
    );
}

#[test]
fn security_context_ids() {
    let errs = errors(json!({
        "securityContext": { "runAsUser": -1, "runAsGroup": -2, "fsGroup": -3, "supplementalGroups": [-4, 5] },
        "containers": [{ "name": "c", "image": "i", "securityContext": { "runAsUser": 4294967296i64, "runAsGroup": 2147483647 } }]
    }));
    let range = "must be between 0 and 2147483647, inclusive";
    assert_eq!(
        errs,
        [
            format!("spec.containers[0].securityContext.runAsUser: Invalid value: 4294967296: {range}"),
            format!("spec.securityContext.fsGroup: Invalid value: -3: {range}"),
            format!("spec.securityContext.runAsUser: Invalid value: -1: {range}"),
            format!("spec.securityContext.runAsGroup: Invalid value: -2: {range}"),
            format!("spec.securityContext.supplementalGroups[0]: Invalid value: -4: {range}"),
        ]
    );
}

#[test]
fn dns_policy_and_config() {
    let c = json!([{ "name": "c", "image": "i" }]);
    assert_eq!(
        errors(json!({ "dnsPolicy": "None", "containers": c })),
        ["spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None"]
    );
    assert_eq!(
        errors(json!({ "dnsPolicy": "Everywhere", "containers": c })),
        [
            "spec.dnsPolicy: Unsupported value: \"Everywhere\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\""
        ]
    );
    assert_eq!(
        errors(
            json!({ "dnsConfig": { "nameservers": ["not-an-ip", "1.2.3.4", "010.1.1.1"], "searches": ["ns.svc.cluster.local.", "_srv.example.com", "Bad"] }, "containers": c })
        ),
        [
            "spec.dnsConfig.nameservers[0]: Invalid value: \"not-an-ip\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            "spec.dnsConfig.nameservers[2]: Invalid value: \"010.1.1.1\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            "spec.dnsConfig.searches[2]: Invalid value: \"Bad\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '_?[a-z0-9]([-_a-z0-9]*[a-z0-9])?(\\._?[a-z0-9]([-_a-z0-9]*[a-z0-9])?)*')",
        ]
    );
    assert!(
        errors(json!({ "dnsPolicy": "None", "dnsConfig": { "nameservers": ["1.2.3.4"] }, "containers": c })).is_empty()
    );
}

#[test]
fn probes_and_lifecycle_handlers() {
    let errs = errors(json!({ "containers": [{ "name": "c", "image": "i",
        "livenessProbe": { "periodSeconds": 10 },
        "readinessProbe": { "exec": { "command": ["true"] }, "tcpSocket": { "port": 80 }, "timeoutSeconds": -1 },
        "startupProbe": { "httpGet": { "port": "no-such-port" }, "successThreshold": 2 },
        "lifecycle": { "preStop": {}, "postStart": { "httpGet": { "port": 0 } } }
    }] }));
    let c = "spec.containers[0]";
    assert_eq!(
        errs,
        [
            format!("{c}.lifecycle.postStart.httpGet.port: Invalid value: 0: must be between 1 and 65535, inclusive"),
            format!("{c}.lifecycle.preStop: Required value: must specify a handler type"),
            format!("{c}.livenessProbe: Required value: must specify a handler type"),
            format!("{c}.readinessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type"),
            format!("{c}.readinessProbe.timeoutSeconds: Invalid value: -1: must be greater than or equal to 0"),
            // A named port that no container port has is accepted (the kubelet fails the probe).
            format!("{c}.startupProbe.successThreshold: Invalid value: 2: must be 1"),
        ]
    );
}

#[test]
fn pod_level_fields() {
    let errs = errors(json!({
        "containers": [{ "name": "c", "image": " padded" }],
        "nodeSelector": { "bad key": "x", "ok": "-bad-value" },
        "activeDeadlineSeconds": 0,
        "serviceAccountName": "Bad_SA",
        "volumes": [{ "name": "h", "hostPath": { "path": "" } }, { "name": "cm", "configMap": {} }, { "name": "s", "secret": {} },
            { "name": "e", "emptyDir": { "sizeLimit": "-1Gi" } }]
    }));
    assert_eq!(
        errs,
        [
            "spec.volumes[0].hostPath.path: Required value",
            "spec.volumes[1].configMap.name: Required value",
            "spec.volumes[2].secret.secretName: Required value",
            "spec.volumes[3].emptyDir.sizeLimit: Forbidden: SizeLimit field must be a valid resource quantity",
            "spec.nodeSelector: Invalid value: \"bad key\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            "spec.nodeSelector: Invalid value: \"-bad-value\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
            "spec.serviceAccountName: Invalid value: \"Bad_SA\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            "spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive",
            "spec.containers[0].image: Invalid value: \" padded\": must not have leading or trailing whitespace",
        ]
    );
}
