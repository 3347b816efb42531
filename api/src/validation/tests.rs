use serde::Deserialize;
use serde_json::{Value, json};

use super::*;
use crate::manifest::check_manifest;

const SPARK_PI: &str = include_str!("../../tests/fixtures/kubeflow-examples/spark-pi.yaml");
const SCHEDULED: &str = include_str!("../../tests/fixtures/kubeflow-examples/spark-pi-scheduled.yaml");
const FIVE_MISTAKES: &str = include_str!("../../tests/fixtures/invalid/five-mistakes.yaml");

fn yaml(text: &str) -> Value {
    Value::deserialize(serde_yaml::Deserializer::from_str(text)).unwrap()
}

fn app_with(change: impl FnOnce(&mut Value)) -> SparkApplication {
    let mut value = yaml(SPARK_PI);
    change(&mut value);
    serde_json::from_value(value).unwrap()
}

fn errors(app: &SparkApplication) -> Vec<String> {
    let report = validate_spark_application(app, &ValidationContext::default());
    report.errors.iter().map(|e| e.path.as_str().to_owned()).collect()
}

fn messages(app: &SparkApplication) -> String {
    let report = validate_spark_application(app, &ValidationContext::default());
    report
        .errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_base_example_is_valid() {
    assert_eq!(errors(&app_with(|_| {})), Vec::<String>::new());
}

#[test]
fn five_mistakes_give_five_errors_with_paths_in_one_run() {
    let check = check_manifest(&yaml(FIVE_MISTAKES), &ValidationContext::default())
        .unwrap()
        .unwrap();
    let mut paths: Vec<_> = check.report.errors.iter().map(|e| e.path.as_str()).collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "metadata.name",
            "spec.driver.memory",
            "spec.nodeSelector",
            "spec.restartPolicy.onFailureRetryInterval",
            "spec.sparkConf[spark.master]"
        ],
        "{:#?}",
        check.report.errors
    );
    for error in &check.report.errors {
        assert!(error.message.len() > 15, "say what to do: {error}");
    }
}

#[test]
fn name_must_be_a_dns1035_label() {
    let app = app_with(|v| v["metadata"]["name"] = json!("1-spark-pi"));
    assert_eq!(errors(&app), ["metadata.name"]);
    let long = app_with(|v| v["metadata"]["name"] = json!("a".repeat(64)));
    assert_eq!(errors(&long), ["metadata.name"]);
    let generated = app_with(|v| {
        v["metadata"].as_object_mut().unwrap().remove("name");
        v["metadata"]["generateName"] = json!("spark-pi-");
    });
    assert_eq!(errors(&generated), Vec::<String>::new());
    let unnamed = app_with(|v| {
        v["metadata"].as_object_mut().unwrap().remove("name");
    });
    assert_eq!(errors(&unnamed), ["metadata.name"]);
}

#[test]
fn name_is_first_checked_as_the_api_server_checks_it() {
    let app = app_with(|v| v["metadata"]["name"] = json!("Spark_Pi"));
    assert_eq!(errors(&app), ["metadata.name"]);
    assert!(
        messages(&app).starts_with(
            "metadata.name: Invalid value: \"Spark_Pi\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"
        ),
        "{}",
        messages(&app)
    );
    assert!(messages(&app).contains("starting with a letter"), "{}", messages(&app));
    let long = app_with(|v| v["metadata"]["name"] = json!("a".repeat(254)));
    assert_eq!(errors(&long), ["metadata.name"]);
    assert!(
        messages(&long).contains("\": must be no more than 253 characters; "),
        "{}",
        messages(&long)
    );
    // The API server takes a dotted name; the Service named after it could not be created.
    let dotted = app_with(|v| v["metadata"]["name"] = json!("spark.pi"));
    assert_eq!(errors(&dotted), ["metadata.name"]);
    assert!(!messages(&dotted).contains("Invalid value"), "{}", messages(&dotted));
}

#[test]
fn namespace_is_a_dns1123_label_as_the_api_server_says() {
    let bad = app_with(|v| v["metadata"]["namespace"] = json!("Bad_NS"));
    assert_eq!(errors(&bad), ["metadata.namespace"]);
    assert_eq!(
        messages(&bad),
        "metadata.namespace: Invalid value: \"Bad_NS\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
    );
    let long = app_with(|v| v["metadata"]["namespace"] = json!("a".repeat(64)));
    assert_eq!(
        messages(&long),
        format!(
            "metadata.namespace: Invalid value: {:?}: must be no more than 63 characters",
            "a".repeat(64)
        )
    );
    // Both of the API server's reasons, as it lists them.
    let both = app_with(|v| v["metadata"]["namespace"] = json!(format!("-{}", "a".repeat(63))));
    assert_eq!(errors(&both), ["metadata.namespace", "metadata.namespace"]);
    for good in [
        "default".to_owned(),
        "a".to_owned(),
        "0-x".to_owned(),
        "a".repeat(63),
        String::new(),
    ] {
        let app = app_with(|v| v["metadata"]["namespace"] = json!(good));
        assert_eq!(errors(&app), Vec::<String>::new(), "{good:?}");
    }
    // A ScheduledSparkApplication's too.
    let mut scheduled = yaml(SCHEDULED);
    scheduled["metadata"]["namespace"] = json!("Bad_NS");
    let scheduled: ScheduledSparkApplication = serde_json::from_value(scheduled).unwrap();
    let report = validate_scheduled_spark_application(&scheduled, &ValidationContext::default());
    let paths: Vec<_> = report.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["metadata.namespace"], "{:?}", report.errors);
}

#[test]
fn every_denied_spark_conf_key_is_rejected() {
    for (key, _) in DENIED_SPARK_CONF_KEYS {
        let app = app_with(|v| v["spec"]["sparkConf"] = json!({ key: "x", "spark.eventLog.enabled": "true" }));
        assert_eq!(errors(&app), [format!("spec.sparkConf[{key}]")]);
    }
}

#[test]
fn spark_conf_namespace_must_be_the_apps() {
    let same = app_with(|v| v["spec"]["sparkConf"] = json!({ NAMESPACE_KEY: "default" }));
    assert!(errors(&same).is_empty());
    let other = app_with(|v| v["spec"]["sparkConf"] = json!({ NAMESPACE_KEY: "prod" }));
    assert_eq!(errors(&other), [format!("spec.sparkConf[{NAMESPACE_KEY}]")]);
    assert!(messages(&other).contains("\"default\""));
}

#[test]
fn app_and_pod_node_selectors_are_exclusive() {
    let app = app_with(|v| {
        v["spec"]["nodeSelector"] = json!({"disk": "ssd"});
        v["spec"]["executor"]["nodeSelector"] = json!({"zone": "a"});
    });
    assert_eq!(errors(&app), ["spec.nodeSelector"]);
    let app_level_only = app_with(|v| v["spec"]["nodeSelector"] = json!({"disk": "ssd"}));
    assert!(errors(&app_level_only).is_empty());
}

#[test]
fn templates_need_spark_3() {
    let app = app_with(|v| {
        v["spec"]["sparkVersion"] = json!("2.4.8");
        v["spec"]["executor"]["template"] = json!({"metadata": {"labels": {"a": "b"}}});
    });
    assert_eq!(errors(&app), ["spec.executor.template"]);
    assert!(messages(&app).contains("3.0.0"));
    let ok = app_with(|v| v["spec"]["executor"]["template"] = json!({"metadata": {"labels": {"a": "b"}}}));
    assert!(errors(&ok).is_empty());
    let bad_version = app_with(|v| v["spec"]["sparkVersion"] = json!("latest"));
    assert_eq!(errors(&bad_version), ["spec.sparkVersion"]);
}

#[test]
fn templates_cannot_bring_their_own_controller() {
    let owner = |uid: &str, controller: bool| json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": uid, "controller": controller});
    let app = app_with(|v| {
        v["spec"]["driver"]["template"] =
            json!({"metadata": {"ownerReferences": [owner("a", false), owner("b", true)]}});
        v["spec"]["executor"]["template"] = json!({"metadata": {"ownerReferences": [owner("c", true)]}});
    });
    assert_eq!(
        errors(&app),
        [
            "spec.driver.template.metadata.ownerReferences[1].controller",
            "spec.executor.template.metadata.ownerReferences[0].controller"
        ]
    );
    let text = messages(&app);
    assert!(
        text.contains("the SparkApplication is the controller of its driver pod"),
        "{text}"
    );
    assert!(
        text.contains("the driver pod is the controller of its executor pods"),
        "{text}"
    );
    assert!(text.contains("set controller: false"), "{text}");
    // A plain owner is the template's business.
    let plain =
        app_with(|v| v["spec"]["driver"]["template"] = json!({"metadata": {"ownerReferences": [owner("a", false)]}}));
    assert!(errors(&plain).is_empty());
}

#[test]
fn memory_strings_and_quantities_must_parse() {
    let app = app_with(|v| {
        v["spec"]["driver"]["memory"] = json!("1.5g");
        v["spec"]["executor"]["memoryOverhead"] = json!("384");
        v["spec"]["driver"]["memoryLimit"] = json!("2Gi");
        v["spec"]["executor"]["coreLimit"] = json!("1500m");
        v["spec"]["driver"]["coreRequest"] = json!("0.5");
    });
    assert!(errors(&app).is_empty(), "{}", messages(&app));
    let bad = app_with(|v| {
        v["spec"]["driver"]["memory"] = json!("1.5 GB");
        v["spec"]["executor"]["memoryOverhead"] = json!("lots");
        v["spec"]["driver"]["memoryLimit"] = json!("two gigs");
        v["spec"]["executor"]["coreLimit"] = json!("1.5 cores");
        v["spec"]["driver"]["coreRequest"] = json!("0");
    });
    let mut got = errors(&bad);
    got.sort();
    assert_eq!(
        got,
        [
            "spec.driver.coreRequest",
            "spec.driver.memory",
            "spec.driver.memoryLimit",
            "spec.executor.coreLimit",
            "spec.executor.memoryOverhead"
        ]
    );
}

#[test]
fn restart_policy_ranges() {
    let app = app_with(|v| {
        v["spec"]["restartPolicy"] = json!({"type": "OnFailure", "onFailureRetries": -1, "onSubmissionFailureRetries": 0, "onFailureRetryInterval": 0, "onSubmissionFailureRetryInterval": 1});
    });
    let mut got = errors(&app);
    got.sort();
    assert_eq!(
        got,
        [
            "spec.restartPolicy.onFailureRetries",
            "spec.restartPolicy.onFailureRetryInterval"
        ]
    );
}

#[test]
fn driver_pod_name_must_be_a_dns_subdomain() {
    let ok = app_with(|v| v["spec"]["driver"]["podName"] = json!("my.driver-1"));
    assert!(errors(&ok).is_empty());
    let bad = app_with(|v| v["spec"]["driver"]["podName"] = json!("My_Driver"));
    assert_eq!(errors(&bad), ["spec.driver.podName"]);
    let conf = app_with(|v| v["spec"]["sparkConf"] = json!({"spark.kubernetes.driver.pod.name": "Bad Name"}));
    assert_eq!(errors(&conf), ["spec.sparkConf[spark.kubernetes.driver.pod.name]"]);
}

#[test]
fn driver_ingress_options_need_unique_ports_and_urls() {
    let app = app_with(|v| {
        v["spec"]["driverIngressOptions"] = json!([
            {"servicePort": 4041, "ingressURLFormat": "a.example.com"},
            {"servicePort": 4041, "ingressURLFormat": "a.example.com"},
            {"ingressURLFormat": ""}
        ]);
    });
    let mut got = errors(&app);
    got.sort();
    assert_eq!(
        got,
        [
            "spec.driverIngressOptions[1].ingressURLFormat",
            "spec.driverIngressOptions[1].servicePort",
            "spec.driverIngressOptions[2].ingressURLFormat",
            "spec.driverIngressOptions[2].servicePort",
        ]
    );
}

#[test]
fn cores_and_instances() {
    let app = app_with(|v| {
        v["spec"]["driver"]["cores"] = json!(0);
        v["spec"]["executor"]["instances"] = json!(0);
    });
    let mut got = errors(&app);
    got.sort();
    assert_eq!(got, ["spec.driver.cores", "spec.executor.instances"]);
    let dynamic = app_with(|v| {
        v["spec"]["executor"]["instances"] = json!(0);
        v["spec"]["dynamicAllocation"] = json!({"enabled": true, "maxExecutors": 4});
    });
    assert!(errors(&dynamic).is_empty(), "{}", messages(&dynamic));
}

#[test]
fn dynamic_allocation_bounds_are_ordered() {
    let inverted =
        app_with(|v| v["spec"]["dynamicAllocation"] = json!({"enabled": true, "minExecutors": 5, "maxExecutors": 2}));
    assert_eq!(errors(&inverted), ["spec.dynamicAllocation.minExecutors"]);
    let initial_too_high = app_with(|v| {
        v["spec"]["dynamicAllocation"] = json!({"enabled": true, "initialExecutors": 9, "maxExecutors": 4})
    });
    assert_eq!(errors(&initial_too_high), ["spec.dynamicAllocation.initialExecutors"]);
    let instances_too_high = app_with(|v| {
        v["spec"]["executor"]["instances"] = json!(8);
        v["spec"]["dynamicAllocation"] = json!({"enabled": true, "maxExecutors": 4});
    });
    assert_eq!(errors(&instances_too_high), ["spec.executor.instances"]);
    let from_conf = app_with(|v| {
        v["spec"]["sparkConf"] = json!({"spark.dynamicAllocation.enabled": "true", "spark.dynamicAllocation.minExecutors": "3", "spark.dynamicAllocation.maxExecutors": "x"});
    });
    assert_eq!(
        errors(&from_conf),
        ["spec.sparkConf[spark.dynamicAllocation.maxExecutors]"]
    );
    let below_min = app_with(|v| {
        v["spec"]["dynamicAllocation"] =
            json!({"enabled": true, "minExecutors": 2, "initialExecutors": 1, "maxExecutors": 4})
    });
    let report = validate_spark_application(&below_min, &ValidationContext::default());
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(
        report.warnings.len(),
        1,
        "initial below min is Spark's max(), only worth a warning"
    );
    let disabled =
        app_with(|v| v["spec"]["dynamicAllocation"] = json!({"enabled": false, "minExecutors": 5, "maxExecutors": 2}));
    assert!(
        errors(&disabled).is_empty(),
        "bounds of disabled dynamic allocation are not used"
    );
}

#[test]
fn reserved_and_malformed_labels() {
    let app = app_with(|v| {
        v["spec"]["driver"]["labels"] = json!({"spark-role": "x", "ok": "fine"});
        v["spec"]["executor"]["labels"] = json!({"spark-exec-id": "1", "bad key!": "v", "k": "bad value!"});
    });
    let mut got = errors(&app);
    got.sort();
    assert_eq!(
        got,
        [
            "spec.driver.labels[spark-role]",
            "spec.executor.labels[bad key!]",
            "spec.executor.labels[k]",
            "spec.executor.labels[spark-exec-id]"
        ]
    );
}

#[test]
fn image_and_main_file_are_required() {
    let app = app_with(|v| {
        let spec = v["spec"].as_object_mut().unwrap();
        spec.remove("image");
        spec.remove("mainApplicationFile");
    });
    let mut got = errors(&app);
    got.sort();
    assert_eq!(got, ["spec.image", "spec.mainApplicationFile"]);
    let per_role = app_with(|v| {
        v["spec"].as_object_mut().unwrap().remove("image");
        v["spec"]["driver"]["image"] = json!("spark:4");
    });
    assert_eq!(errors(&per_role), ["spec.executor.image"]);
    let both_roles = app_with(|v| {
        v["spec"].as_object_mut().unwrap().remove("image");
        v["spec"]["driver"]["image"] = json!("spark:4");
        v["spec"]["executor"]["image"] = json!("spark:4");
    });
    assert!(errors(&both_roles).is_empty());
}

#[test]
fn mounts_of_missing_volumes_are_warned_about() {
    let app = app_with(|v| {
        v["spec"]["driver"]["volumeMounts"] =
            json!([{"name": "data", "mountPath": "/data"}, {"name": "spark-local-dir-1", "mountPath": "/tmp"}]);
    });
    let report = validate_spark_application(&app, &ValidationContext::default());
    assert!(report.errors.is_empty());
    let warned: Vec<_> = report.warnings.iter().map(|w| w.path.as_str()).collect();
    assert_eq!(warned, ["spec.driver.volumeMounts[0].name"]);
}

#[test]
fn embedded_container_quantities_are_checked() {
    let app = app_with(|v| {
        v["spec"]["driver"]["sidecars"] = json!([{"name": "s", "resources": {"limits": {"cpu": "half"}}}]);
    });
    assert_eq!(errors(&app), ["spec.driver.sidecars[0].resources.limits[cpu]"]);
}

#[test]
fn structural_errors_in_embedded_objects_have_exact_paths() {
    let mut value = yaml(SPARK_PI);
    value["spec"]["driver"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "not-a-list"}}});
    value["spec"]["executor"]["tolerations"] = json!([{"key": "a", "tolerationSeconds": "10"}]);
    value["spec"]["volumes"] = json!([{"configMap": {"name": "x"}}]);
    let check = check_manifest(&value, &ValidationContext::default()).unwrap().unwrap();
    let mut paths: Vec<_> = check.report.errors.iter().map(|e| e.path.as_str()).collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "spec.driver.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
            "spec.executor.tolerations[0].tolerationSeconds",
            "spec.volumes[0].name",
        ]
    );
    assert!(
        check.object.is_none(),
        "a manifest with structural errors is not handed out as an object"
    );
}

#[test]
fn scheduled_applications_validate_their_template_too() {
    let mut value = yaml(SCHEDULED);
    value["spec"]["schedule"] = json!("every three minutes");
    value["spec"]["template"]["driver"]["memory"] = json!("lots");
    let check = check_manifest(&value, &ValidationContext::default()).unwrap().unwrap();
    let mut paths: Vec<_> = check.report.errors.iter().map(|e| e.path.as_str()).collect();
    paths.sort();
    assert_eq!(paths, ["spec.schedule", "spec.template.driver.memory"]);
}

#[test]
fn long_scheduled_names_are_warned_about() {
    let mut value = yaml(SCHEDULED);
    value["metadata"]["name"] = json!("a".repeat(50));
    let check = check_manifest(&value, &ValidationContext::default()).unwrap().unwrap();
    assert!(check.report.errors.is_empty());
    assert_eq!(check.report.warnings.len(), 1);
}

#[test]
fn namespace_from_the_context_applies_when_metadata_has_none() {
    let app = app_with(|v| {
        v["metadata"].as_object_mut().unwrap().remove("namespace");
        v["spec"]["sparkConf"] = json!({NAMESPACE_KEY: "team-a"});
    });
    let report = validate_spark_application(
        &app,
        &ValidationContext {
            namespace: Some("team-b"),
        },
    );
    assert_eq!(report.errors.len(), 1);
    let report = validate_spark_application(
        &app,
        &ValidationContext {
            namespace: Some("team-a"),
        },
    );
    assert!(report.errors.is_empty());
}
