//! The UI Service and Ingress, the `driverIngressOptions` Services and Ingresses and the driver
//! PodDisruptionBudget, each compared with the object Kubeflow's controller makes for the same
//! application and flags, written out from its code (`internal/controller/sparkapplication/web_ui.go`,
//! `driveringress.go`, `driver_pdb.go`, `pkg/util/sparkapplication.go`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use serde_json::{Value, json};
use spark_operator_api::SparkApplication;

use crate::submission::driver_pdb::{self, DriverPdb};
use crate::submission::web_ui::{UiOptions, WebUiStatus};
use crate::submission::{
    Submission, SubmissionError, SubmissionIds, SubmissionInput, SubmissionOptions, build_submission,
};

fn app(name: &str, spark_conf: &[(&str, &str)], extra_spec: Value) -> SparkApplication {
    let mut spec = json!({
        "type": "Scala",
        "sparkVersion": "3.5.0",
        "image": "spark:3.5.0",
        "mainClass": "org.apache.spark.examples.SparkPi",
        "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
        "sparkConf": spark_conf.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "driver": {"serviceAccount": "spark"},
        "executor": {"instances": 1},
    });
    if let (Value::Object(spec), Value::Object(extra)) = (&mut spec, extra_spec) {
        spec.extend(extra);
    }
    serde_json::from_value(json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": name, "namespace": "jobs", "uid": "app-uid"},
        "spec": spec,
    }))
    .unwrap()
}

const APP_ID: &str = "spark-abababababababababababababababab";

fn submit_with(app: &SparkApplication, options: &SubmissionOptions) -> Result<Submission, SubmissionError> {
    let ids = SubmissionIds::from_random(
        [0xab; 16],
        [0x2c; 16],
        [[1, 2, 3], [4, 5, 6], [7, 8, 9]],
        0xa2_0165_ad86,
    );
    assert_eq!(ids.app_id, APP_ID);
    build_submission(&SubmissionInput {
        app,
        submission_id: "sub-1",
        ids: &ids,
        submit_time: jiff::Timestamp::from_millisecond(1_795_319_770_368).unwrap(),
        spark_master_url: "k8s://https://10.0.0.1:443",
        spark_user: "spark",
        options,
    })
}

fn submit(app: &SparkApplication, options: &SubmissionOptions) -> Submission {
    submit_with(app, options).unwrap_or_else(|e| panic!("{e}"))
}

fn with_ui(ui: UiOptions) -> SubmissionOptions {
    SubmissionOptions {
        ui,
        ..SubmissionOptions::default()
    }
}

fn owner(name: &str) -> Value {
    json!([{
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication", "name": name, "uid": "app-uid",
        "controller": true, "blockOwnerDeletion": true,
    }])
}

fn to_json<T: serde::Serialize>(object: &T) -> Value {
    serde_json::to_value(object).unwrap()
}

/// The driver's `spark.properties` as key → value.
fn properties(submission: &Submission) -> BTreeMap<String, String> {
    let text = submission.config_map.data.as_ref().unwrap()["spark.properties"].clone();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.replace("\\:", ":"), v.replace("\\:", ":").replace("\\=", "=")))
        .collect()
}

#[test]
fn the_default_ui_service_is_kubeflows() {
    // createWebUIService with no sparkUIOptions: getWebUIServicePort falls back to the target port,
    // spark.ui.port or 4040; GetResourceLabels (app name, submission id) plus the created-by label.
    let submission = submit(&app("sink", &[], json!({})), &SubmissionOptions::default());
    let ui = submission.driver_access.ui.as_ref().unwrap();
    assert_eq!(
        to_json(&ui.service),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {
                "name": "sink-ui-svc", "namespace": "jobs",
                "labels": {
                    "sparkoperator.k8s.io/app-name": "sink",
                    "sparkoperator.k8s.io/submission-id": "sub-1",
                    "sparkoperator.k8s.io/created-by-spark-operator": "true",
                },
                "ownerReferences": owner("sink"),
            },
            "spec": {
                "ports": [{"name": "spark-driver-ui-port", "port": 4040, "targetPort": 4040, "protocol": "TCP"}],
                "selector": {"sparkoperator.k8s.io/app-name": "sink", "spark-role": "driver"},
                "type": "ClusterIP",
            },
        })
    );
    assert!(ui.ingress.is_none() && ui.url.is_none());
    assert!(submission.driver_access.driver_ingresses.is_empty());
    assert_eq!(submission.driver_pdb, DriverPdb::Unmanaged);
    let props = properties(&submission);
    assert!(!props.contains_key("spark.ui.proxyBase"), "{props:?}");
}

#[test]
fn ui_ports_follow_getwebuiserviceport() {
    let port = |spark_conf: &[(&str, &str)], extra: Value| {
        let submission = submit(&app("sink", spark_conf, extra), &SubmissionOptions::default());
        let service = submission.driver_access.ui.unwrap().service;
        let port = service.spec.unwrap().ports.unwrap().remove(0);
        (port.name.unwrap(), port.port, to_json(&port.target_port))
    };
    // Without sparkUIOptions: spark.ui.port on both sides.
    assert_eq!(
        port(&[("spark.ui.port", "4041")], json!({})),
        ("spark-driver-ui-port".into(), 4041, json!(4041))
    );
    // Not a number: 4040, as getWebUITargetPort (spark-submit itself refuses such a port first).
    assert_eq!(
        crate::submission::web_ui::ui_target_port(&app("sink", &[("spark.ui.port", "x")], json!({}))),
        4040
    );
    // sparkUIOptions without servicePort: 4040 in front of spark.ui.port (Kubeflow's asymmetry).
    assert_eq!(
        port(
            &[("spark.ui.port", "4041")],
            json!({"sparkUIOptions": {"serviceType": "NodePort"}})
        ),
        ("spark-driver-ui-port".into(), 4040, json!(4041))
    );
    assert_eq!(
        port(
            &[],
            json!({"sparkUIOptions": {"servicePort": 80, "servicePortName": "http"}})
        ),
        ("http".into(), 80, json!(4040))
    );
}

#[test]
fn spark_ui_options_label_annotate_and_type_the_service() {
    let spec = json!({"sparkUIOptions": {
        "serviceType": "NodePort",
        "serviceLabels": {"team": "a"},
        "serviceAnnotations": {"cloud.example.com/lb": "internal"},
    }});
    let submission = submit(&app("sink", &[], spec), &SubmissionOptions::default());
    let service = to_json(&submission.driver_access.ui.unwrap().service);
    // The spec's labels replace the resource labels (createDriverIngressService); created-by stays.
    assert_eq!(
        service["metadata"]["labels"],
        json!({"team": "a", "sparkoperator.k8s.io/created-by-spark-operator": "true"})
    );
    assert_eq!(
        service["metadata"]["annotations"],
        json!({"cloud.example.com/lb": "internal"})
    );
    assert_eq!(service["spec"]["type"], "NodePort");
}

#[test]
fn the_ui_ingress_is_kubeflows() {
    let options = with_ui(UiOptions {
        ingress_url_format: "{{$appName}}.{{$appNamespace}}.example.com".into(),
        ingress_class_name: "nginx".into(),
        ingress_tls: serde_json::from_value(json!([{"hosts": ["*.example.com"], "secretName": "wildcard"}])).unwrap(),
        ingress_annotations: BTreeMap::from([("cert-manager.io/cluster-issuer".into(), "letsencrypt".into())]),
        ..UiOptions::default()
    });
    let submission = submit(&app("sink", &[], json!({})), &options);
    let ui = submission.driver_access.ui.as_ref().unwrap();
    // createDriverIngressV1: GetResourceLabels, no path → no capture groups, no rewrite.
    assert_eq!(
        to_json(ui.ingress.as_ref().unwrap()),
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {
                "name": "sink-ui-ingress", "namespace": "jobs",
                "labels": {"sparkoperator.k8s.io/app-name": "sink", "sparkoperator.k8s.io/submission-id": "sub-1"},
                "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
                "ownerReferences": owner("sink"),
            },
            "spec": {
                "ingressClassName": "nginx",
                "rules": [{
                    "host": "sink.jobs.example.com",
                    "http": {"paths": [{
                        "backend": {"service": {"name": "sink-ui-svc", "port": {"number": 4040}}},
                        "pathType": "ImplementationSpecific",
                    }]},
                }],
                "tls": [{"hosts": ["*.example.com"], "secretName": "wildcard"}],
            },
        })
    );
    assert_eq!(ui.url.as_ref().unwrap().address, "http://sink.jobs.example.com");
    assert!(!properties(&submission).contains_key("spark.ui.proxyBase"));

    // The spec's ingressAnnotations and ingressTLS win over the operator's, whole.
    let spec = json!({"sparkUIOptions": {
        "ingressAnnotations": {"a": "b"},
        "ingressTLS": [{"hosts": ["sink.jobs.example.com"], "secretName": "own"}],
    }});
    let submission = submit(&app("sink", &[], spec), &options);
    let ingress = to_json(submission.driver_access.ui.unwrap().ingress.as_ref().unwrap());
    assert_eq!(ingress["metadata"]["annotations"], json!({"a": "b"}));
    assert_eq!(
        ingress["spec"]["tls"],
        json!([{"hosts": ["sink.jobs.example.com"], "secretName": "own"}])
    );
}

#[test]
fn a_ui_ingress_with_a_path_rewrites_and_sets_the_proxy_base() {
    let options = with_ui(UiOptions {
        ingress_url_format: "spark.example.com/{{$appNamespace}}/{{$appName}}".into(),
        ..UiOptions::default()
    });
    let submission = submit(&app("sink", &[], json!({})), &options);
    let ui = submission.driver_access.ui.as_ref().unwrap();
    let ingress = to_json(ui.ingress.as_ref().unwrap());
    assert_eq!(
        ingress["metadata"]["annotations"],
        json!({"nginx.ingress.kubernetes.io/rewrite-target": "/$2"})
    );
    assert_eq!(ingress["spec"]["rules"][0]["host"], "spark.example.com");
    assert_eq!(
        ingress["spec"]["rules"][0]["http"]["paths"][0]["path"],
        "/jobs/sink(/|$)(.*)"
    );
    assert!(ingress["spec"].get("ingressClassName").is_none());
    assert!(ingress["spec"].get("tls").is_none());
    assert_eq!(ui.url.as_ref().unwrap().address, "http://spark.example.com/jobs/sink");
    // configWebUI: the path is the UI's proxy base, the redirect URI `/`.
    let props = properties(&submission);
    assert_eq!(props["spark.ui.proxyBase"], "/jobs/sink");
    assert_eq!(props["spark.ui.proxyRedirectUri"], "/");
    // ... unless the spec sets them (SetIfNotExists).
    let own = app("sink", &[("spark.ui.proxyBase", "/mine")], json!({}));
    let props = properties(&submit(&own, &options));
    assert_eq!(props["spark.ui.proxyBase"], "/mine");
    assert_eq!(props["spark.ui.proxyRedirectUri"], "/");
    // {{$appId}} is the submission's Spark application id (spark-app-selector).
    let options = with_ui(UiOptions {
        ingress_url_format: "spark.example.com/{{$appId}}".into(),
        ..UiOptions::default()
    });
    let props = properties(&submit(&app("sink", &[], json!({})), &options));
    assert_eq!(props["spark.ui.proxyBase"], format!("/{APP_ID}"));
}

#[test]
fn without_the_ui_service_there_is_no_ui_ingress_nor_proxy_base() {
    let options = with_ui(UiOptions {
        enable_service: false,
        ingress_url_format: "spark.example.com/{{$appName}}".into(),
        ..UiOptions::default()
    });
    let submission = submit(&app("sink", &[], json!({})), &options);
    assert!(submission.driver_access.ui.is_none());
    assert!(!properties(&submission).contains_key("spark.ui.proxyBase"));
}

#[test]
fn driver_ingress_options_are_kubeflows() {
    let options = with_ui(UiOptions {
        enable_service: false,
        ingress_class_name: "nginx".into(),
        ingress_annotations: BTreeMap::from([("default".into(), "yes".into())]),
        ..UiOptions::default()
    });
    let spec = json!({"driverIngressOptions": [
        {
            "servicePort": 8080,
            "ingressURLFormat": "{{$appName}}-api.example.com/v1",
            "serviceLabels": {"team": "a"},
        },
        {
            "servicePort": 15002,
            "servicePortName": "connect",
            "serviceType": "LoadBalancer",
            "serviceAnnotations": {"x": "y"},
            "ingressURLFormat": "connect.example.com",
            "ingressAnnotations": {"own": "1"},
            "ingressTLS": [{"hosts": ["connect.example.com"], "secretName": "c"}],
        },
    ]});
    let submission = submit(&app("sink", &[], spec), &options);
    let [api, connect] = &submission.driver_access.driver_ingresses[..] else {
        panic!("two entries");
    };
    // createDriverIngressServiceFromConfiguration: `<app>-driver-<port>`, `driver-ing-<port>`, port = target.
    assert_eq!(
        to_json(&api.service),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {
                "name": "sink-driver-8080", "namespace": "jobs",
                "labels": {"team": "a", "sparkoperator.k8s.io/created-by-spark-operator": "true"},
                "ownerReferences": owner("sink"),
            },
            "spec": {
                "ports": [{"name": "driver-ing-8080", "port": 8080, "targetPort": 8080, "protocol": "TCP"}],
                "selector": {"sparkoperator.k8s.io/app-name": "sink", "spark-role": "driver"},
                "type": "ClusterIP",
            },
        })
    );
    // createDriverIngress: `<app>-ing-<port>`, the operator's class and (the entry sets none) annotations.
    assert_eq!(
        to_json(api.ingress.as_ref().unwrap()),
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {
                "name": "sink-ing-8080", "namespace": "jobs",
                "labels": {"sparkoperator.k8s.io/app-name": "sink", "sparkoperator.k8s.io/submission-id": "sub-1"},
                "annotations": {"default": "yes", "nginx.ingress.kubernetes.io/rewrite-target": "/$2"},
                "ownerReferences": owner("sink"),
            },
            "spec": {
                "ingressClassName": "nginx",
                "rules": [{
                    "host": "sink-api.example.com",
                    "http": {"paths": [{
                        "backend": {"service": {"name": "sink-driver-8080", "port": {"number": 8080}}},
                        "path": "/v1(/|$)(.*)",
                        "pathType": "ImplementationSpecific",
                    }]},
                }],
            },
        })
    );
    let service = to_json(&connect.service);
    assert_eq!(service["metadata"]["name"], "sink-driver-15002");
    assert_eq!(service["metadata"]["annotations"], json!({"x": "y"}));
    assert_eq!(service["spec"]["type"], "LoadBalancer");
    assert_eq!(service["spec"]["ports"][0]["name"], "connect");
    let ingress = to_json(connect.ingress.as_ref().unwrap());
    assert_eq!(ingress["metadata"]["annotations"], json!({"own": "1"}));
    assert_eq!(
        ingress["spec"]["tls"],
        json!([{"hosts": ["connect.example.com"], "secretName": "c"}])
    );
    // Driver ingresses never touch the UI's proxy base.
    assert!(!properties(&submission).contains_key("spark.ui.proxyBase"));
}

#[test]
fn long_names_are_bounded_as_kubeflows_generatename() {
    let name = "a-sixty-character-application-name-for-the-spark-ui-servicex";
    assert_eq!(name.len(), 60);
    let options = with_ui(UiOptions {
        ingress_url_format: "{{$appName}}.example.com".into(),
        ..UiOptions::default()
    });
    let submission = submit(&app(name, &[], json!({})), &options);
    let ui = submission.driver_access.ui.unwrap();
    let service = ui.service.metadata.name.unwrap();
    let ingress = ui.ingress.unwrap().metadata.name.unwrap();
    assert_eq!(service.len(), 63);
    assert!(
        service.ends_with("-ui-svc") && service.starts_with(&name[..47]),
        "{service}"
    );
    assert_eq!(ingress.len(), 63);
    assert!(ingress.ends_with("-ui-ingress"), "{ingress}");
    assert_eq!(service, spark_operator_api::naming::ui_service_name(name));
}

#[test]
fn a_url_format_that_gives_no_url_fails_the_submission_with_the_field() {
    let options = with_ui(UiOptions {
        ingress_url_format: "10.0.0.1:8080/{{$appName}}".into(),
        ..UiOptions::default()
    });
    // As the status shows it (the whole chain).
    let chain = |e: SubmissionError| spark_operator_runtime::error_chain::ErrorChain(&e).to_string();
    let err = chain(submit_with(&app("sink", &[], json!({})), &options).unwrap_err());
    assert_eq!(
        err,
        "the operator's --ingress-url-format \"10.0.0.1:8080/{{$appName}}\" gives no valid URL for this application: \
         parse \"10.0.0.1:8080/sink\": first path segment in URL cannot contain colon"
    );
    let spec = json!({"driverIngressOptions": [{"servicePort": 80, "ingressURLFormat": "{{$nope}}.example.com"}]});
    let err = chain(submit_with(&app("sink", &[], spec), &SubmissionOptions::default()).unwrap_err());
    assert_eq!(
        err,
        "spec.driverIngressOptions[0].ingressURLFormat: \"{{$nope}}.example.com\" gives no valid URL: \
         parse \"http://{{$nope}}.example.com\": invalid character \"{\" in host name"
    );
}

#[test]
fn the_web_ui_status_is_read_from_the_stored_service() {
    let options = with_ui(UiOptions {
        ingress_url_format: "{{$appName}}.example.com".into(),
        ..UiOptions::default()
    });
    let submission = submit(&app("sink", &[], json!({})), &options);
    let ui = submission.driver_access.ui.unwrap();
    let mut stored: Service = ui.service.clone();
    stored.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.12".into());
    let status = WebUiStatus::of(&ui, &stored);
    assert_eq!(
        status,
        WebUiStatus {
            service_name: "sink-ui-svc".into(),
            port: 4040,
            address: "10.96.0.12:4040".into(),
            ingress_name: "sink-ui-ingress".into(),
            ingress_address: "http://sink.example.com".into(),
        }
    );
}

#[test]
fn the_driver_pdb_is_kubeflows_and_gated() {
    let wants = app("sink", &[], json!({"driverPodDisruptionBudget": true}));
    let gated = SubmissionOptions {
        driver_pdb: true,
        ..SubmissionOptions::default()
    };
    // The gate off: nothing, whatever the spec says (ensureDriverPDB).
    assert_eq!(
        submit(&wants, &SubmissionOptions::default()).driver_pdb,
        DriverPdb::Unmanaged
    );
    let DriverPdb::Apply(pdb) = submit(&wants, &gated).driver_pdb else {
        panic!("a PodDisruptionBudget");
    };
    // createDriverPDBObject + SetControllerReference.
    assert_eq!(
        to_json(&pdb),
        json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {
                "name": "sink-driver", "namespace": "jobs",
                "labels": {
                    "sparkoperator.k8s.io/launched-by-spark-operator": "true",
                    "sparkoperator.k8s.io/app-name": "sink",
                },
                "ownerReferences": owner("sink"),
            },
            "spec": {
                "minAvailable": 1,
                "selector": {"matchLabels": {"sparkoperator.k8s.io/app-name": "sink", "spark-role": "driver"}},
            },
        })
    );
    // Named after the driver pod (GetDriverPodName).
    let named = app(
        "sink",
        &[],
        json!({"driverPodDisruptionBudget": true, "driver": {"podName": "my-driver"}}),
    );
    assert_eq!(driver_pdb::name(&named), "my-driver");
    // The gate on and the spec not asking: delete any left over (ensureDriverPDB → deleteDriverPDB).
    for spec in [json!({}), json!({"driverPodDisruptionBudget": false})] {
        assert_eq!(
            submit(&app("sink", &[], spec), &gated).driver_pdb,
            DriverPdb::Delete {
                name: "sink-driver".into()
            }
        );
    }
}

#[test]
fn the_driver_pdb_goes_when_the_application_ends() {
    let mut app = app("sink", &[], json!({"driverPodDisruptionBudget": true}));
    let at = |app: &SparkApplication, gate| driver_pdb::to_delete_at_end(app, gate);
    assert_eq!(at(&app, true), None, "a new application keeps it");
    for (state, end) in [("RUNNING", false), ("COMPLETED", true), ("FAILED", true)] {
        app.status = Some(serde_json::from_value(json!({"applicationState": {"state": state}})).unwrap());
        assert_eq!(at(&app, true).is_some(), end, "{state}");
        assert_eq!(at(&app, false), None, "{state}: the gate off deletes nothing");
    }
    app.spec.driver_pod_disruption_budget = None;
    assert_eq!(at(&app, true), None, "never asked for");
}
