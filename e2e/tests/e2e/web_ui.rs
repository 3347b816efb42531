//! The Spark UI as Kubeflow's operator exposes it, on the simulated cluster: with `--ingress-url-format`
//! and `--enable-driver-pdb`, an application gets its UI Service (whose endpoints are its running driver),
//! its UI Ingress, a `driverIngressOptions` Service and Ingress, `status.driverInfo.webUI*`, and a driver
//! PodDisruptionBudget that is gone once the application ends. An application that does not ask for a
//! PodDisruptionBudget gets none; Services and Ingresses stay until the application is deleted.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams};
use spark_operator_api::ApplicationStateType as S;
use spark_operator_e2e::{Cluster, ClusterOptions, Poll, app_yaml, poll, state};

const LIMIT: Duration = Duration::from_secs(90);

/// Waits until `get` no longer finds the object.
async fn gone<K, F, Fut>(what: &str, mut get: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<K>>,
{
    poll(LIMIT, || {
        let found = get();
        async move {
            match found.await {
                None => Poll::Done(()),
                Some(_) => Poll::Pending(()),
            }
        }
    })
    .await
    .unwrap_or_else(|()| panic!("{what}: still there after {LIMIT:?}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ui_service_ingress_and_driver_pdb_follow_the_application() {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    let _controller = cluster.controller(cluster.args(&[
        "--ingress-url-format=spark.example.com/{{$appNamespace}}/{{$appName}}",
        "--ingress-class-name=nginx",
        "--enable-driver-pdb=true",
    ]));
    let extra = "  driverPodDisruptionBudget: true\n  driverIngressOptions:\n    - servicePort: 4041\n      \
                 ingressURLFormat: \"{{$appName}}-api.example.com\"\n";
    cluster.create_app(&app_yaml("ui", "6s", 0, 1, extra)).await;
    cluster.create_app(&app_yaml("plain", "1s", 0, 1, "")).await;
    let client = &cluster.client;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    let app = cluster
        .wait_app("default", "ui", LIMIT, |a| state(a) == S::Running)
        .await;
    let uid = app.metadata.uid.clone().unwrap_or_default();
    let info = app.status.clone().unwrap_or_default().driver_info;

    // The UI Service: recorded in status with its cluster IP, and selecting the running driver.
    let service = services.get("ui-ui-svc").await.expect("the UI Service");
    let ip = service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.clone())
        .unwrap_or_default();
    assert!(!ip.is_empty() && ip != "None", "a ClusterIP Service: {ip:?}");
    assert_eq!(info.web_ui_service_name, "ui-ui-svc");
    assert_eq!(info.web_ui_port, 4040);
    assert_eq!(info.web_ui_address, format!("{ip}:4040"));
    assert_eq!(info.web_ui_ingress_name, "ui-ui-ingress");
    assert_eq!(info.web_ui_ingress_address, "http://spark.example.com/default/ui");
    assert_eq!(
        service.metadata.owner_references.unwrap_or_default()[0].uid,
        uid,
        "owned by the application"
    );
    let driver_ip = pods
        .get("ui-driver")
        .await
        .expect("the driver pod")
        .status
        .and_then(|s| s.pod_ip)
        .unwrap_or_default();
    let selected = ListParams::default().labels("kubernetes.io/service-name=ui-ui-svc");
    poll(LIMIT, || async {
        let addresses: Vec<String> = slices
            .list(&selected)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .flat_map(|s| s.endpoints)
            .flat_map(|e| e.addresses)
            .collect();
        if addresses == [driver_ip.clone()] {
            Poll::Done(())
        } else {
            Poll::Pending(addresses)
        }
    })
    .await
    .unwrap_or_else(|last| panic!("the UI Service's endpoints are not the driver {driver_ip}: {last:?}"));

    // The UI Ingress, its path rewritten for nginx; the driverIngressOptions Service and Ingress.
    let ingress = ingresses.get("ui-ui-ingress").await.expect("the UI Ingress");
    let spec = ingress.spec.unwrap_or_default();
    assert_eq!(spec.ingress_class_name.as_deref(), Some("nginx"));
    let rule = &spec.rules.unwrap_or_default()[0];
    assert_eq!(rule.host.as_deref(), Some("spark.example.com"));
    let path = &rule.http.as_ref().unwrap().paths[0];
    assert_eq!(path.path.as_deref(), Some("/default/ui(/|$)(.*)"));
    assert_eq!(
        path.backend.service.as_ref().map(|s| s.name.as_str()),
        Some("ui-ui-svc")
    );
    let api_service = services
        .get("ui-driver-4041")
        .await
        .expect("the driverIngressOptions Service");
    assert_eq!(
        api_service.spec.unwrap().ports.unwrap()[0].target_port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(4041))
    );
    let api_ingress = ingresses
        .get("ui-ing-4041")
        .await
        .expect("the driverIngressOptions Ingress");
    assert_eq!(
        api_ingress.spec.unwrap().rules.unwrap()[0].host.as_deref(),
        Some("ui-api.example.com")
    );

    // The PodDisruptionBudget while the driver runs, for the application that asked only.
    let pdb = pdbs.get("ui-driver").await.expect("the driver PodDisruptionBudget");
    assert_eq!(pdb.metadata.owner_references.unwrap_or_default()[0].uid, uid);
    let plain = cluster
        .wait_app("default", "plain", LIMIT, |a| state(a).is_terminal())
        .await;
    assert_eq!(state(&plain), S::Completed, "{:#?}", plain.status);
    assert!(pdbs.get_opt("plain-driver").await.unwrap().is_none(), "not asked for");
    assert!(
        services.get_opt("plain-ui-svc").await.unwrap().is_some(),
        "every application has its UI Service"
    );

    // The application ends: its PodDisruptionBudget goes, its Services and Ingresses stay (Kubeflow's
    // cleanUpOnTermination deletes only the PodDisruptionBudget).
    let app = cluster
        .wait_app("default", "ui", LIMIT, |a| state(a).is_terminal())
        .await;
    assert_eq!(state(&app), S::Completed, "{:#?}", app.status);
    gone("the driver PodDisruptionBudget", || async {
        pdbs.get_opt("ui-driver").await.unwrap()
    })
    .await;
    assert!(services.get_opt("ui-ui-svc").await.unwrap().is_some());
    assert!(ingresses.get_opt("ui-ui-ingress").await.unwrap().is_some());

    // Deleted with the application (owner references, the garbage collector).
    cluster
        .apps("default")
        .delete("ui", &DeleteParams::default())
        .await
        .expect("the application is deleted");
    for name in ["ui-ui-svc", "ui-driver-4041"] {
        gone(name, || async { services.get_opt(name).await.unwrap() }).await;
    }
    for name in ["ui-ui-ingress", "ui-ing-4041"] {
        gone(name, || async { ingresses.get_opt(name).await.unwrap() }).await;
    }
}
