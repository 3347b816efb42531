//! The Services and Ingresses Kubeflow's controller makes to reach a driver (`web_ui.go`,
//! `driveringress.go`): the Spark UI Service `<app>-ui-svc` (with `--enable-ui-service`, on by default)
//! and its Ingress `<app>-ui-ingress` (with `--ingress-url-format`), and one Service `<app>-driver-<port>`
//! per `spec.driverIngressOptions` entry with its Ingress `<app>-ing-<port>`.
//!
//! They belong to the application, not to a submission: owned by the SparkApplication (so they go with it),
//! one name per application, and server-side applied at every submission, before the driver pod, so a
//! changed spec updates them (Kubeflow gets and updates them). Every field is Kubeflow's, value for value;
//! the only addition is the ports' `protocol: TCP`, which the API server would default anyway and which
//! server-side apply needs to merge the list by its keys.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule, IngressServiceBackend, IngressSpec,
    IngressTLS, ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use spark_operator_api::SparkApplication;
use spark_operator_api::application::DriverIngressConfiguration;
use spark_operator_api::labels::{
    LABEL_APP_NAME, LABEL_CREATED_BY_SPARK_OPERATOR, LABEL_SPARK_ROLE, LABEL_SUBMISSION_ID, LABEL_VALUE_TRUE,
};
use spark_operator_api::naming::{driver_ingress_name, ui_ingress_name, ui_service_name};

use super::application_owner;
use super::ingress_url::{IngressUrl, UrlError, ingress_url};

/// `spark.ui.port`, Spark's UI port key.
pub const SPARK_UI_PORT_KEY: &str = "spark.ui.port";
/// Spark's default UI port (Kubeflow's `DefaultSparkWebUIPort`).
pub const DEFAULT_UI_PORT: i32 = 4040;
/// Kubeflow's `DefaultSparkWebUIPortName`.
pub const DEFAULT_UI_PORT_NAME: &str = "spark-driver-ui-port";
/// Set for a UI Ingress with a path, unless the spec sets it (Kubeflow's `configWebUI`).
pub const SPARK_UI_PROXY_BASE_KEY: &str = "spark.ui.proxyBase";
/// Set with [`SPARK_UI_PROXY_BASE_KEY`] to `/`, unless the spec sets it.
pub const SPARK_UI_PROXY_REDIRECT_URI_KEY: &str = "spark.ui.proxyRedirectUri";
/// The annotation an Ingress with a path gets, so the nginx controller strips the path (the capture groups
/// Kubeflow appends to the path).
pub const NGINX_REWRITE_TARGET: &str = "nginx.ingress.kubernetes.io/rewrite-target";

/// The operator-wide UI settings (`--enable-ui-service`, `--ingress-url-format`, `--ingress-class-name`,
/// `--ingress-tls`, `--ingress-annotations`).
#[derive(Clone, Debug, PartialEq)]
pub struct UiOptions {
    /// Make the UI Service (and, with a URL format, its Ingress).
    pub enable_service: bool,
    /// The UI Ingress URL format; empty: no UI Ingress.
    pub ingress_url_format: String,
    /// `spec.ingressClassName` of every Ingress made (UI and `driverIngressOptions`); empty: unset.
    pub ingress_class_name: String,
    /// TLS of Ingresses whose spec sets none.
    pub ingress_tls: Vec<IngressTLS>,
    /// Annotations of Ingresses whose spec sets none.
    pub ingress_annotations: BTreeMap<String, String>,
}

impl Default for UiOptions {
    fn default() -> Self {
        Self {
            enable_service: true,
            ingress_url_format: String::new(),
            ingress_class_name: String::new(),
            ingress_tls: Vec::new(),
            ingress_annotations: BTreeMap::new(),
        }
    }
}

/// A Service to a driver port and, with a URL format, its Ingress.
#[derive(Clone, Debug, PartialEq)]
pub struct Exposure {
    pub service: Service,
    pub ingress: Option<Ingress>,
    /// The Ingress's URL (its host and path, and the address reported in status).
    pub url: Option<IngressUrl>,
}

/// Every Service and Ingress an application gets to reach its driver.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DriverAccess {
    /// The Spark UI's.
    pub ui: Option<Exposure>,
    /// One per `spec.driverIngressOptions` entry, in order.
    pub driver_ingresses: Vec<Exposure>,
}

impl DriverAccess {
    /// The Services, then the Ingresses, in the order Kubeflow makes them.
    pub fn services_and_ingresses(&self) -> (Vec<&Service>, Vec<&Ingress>) {
        let all: Vec<&Exposure> = self.ui.iter().chain(&self.driver_ingresses).collect();
        (
            all.iter().map(|e| &e.service).collect(),
            all.iter().filter_map(|e| e.ingress.as_ref()).collect(),
        )
    }
}

/// Why the UI objects cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WebUiError {
    #[error("the operator's --ingress-url-format {format:?} gives no valid URL for this application")]
    UiIngressUrl {
        format: String,
        #[source]
        source: UrlError,
    },
    #[error("spec.driverIngressOptions[{index}].ingressURLFormat: {format:?} gives no valid URL")]
    DriverIngressUrl {
        index: usize,
        format: String,
        #[source]
        source: UrlError,
    },
    #[error("spec.driverIngressOptions[{index}].servicePort: is required: the driver port to expose")]
    MissingServicePort { index: usize },
}

/// What one application's UI objects depend on.
#[derive(Clone, Copy, Debug)]
pub struct WebUiInput<'a> {
    /// The SparkApplication, defaults applied.
    pub app: &'a SparkApplication,
    /// The submission these objects are applied for (their `submission-id` label, as Kubeflow's
    /// `GetResourceLabels` after submission).
    pub submission_id: &'a str,
    /// Spark's application id of the submission (`{{$appId}}`).
    pub app_id: &'a str,
    pub options: &'a UiOptions,
}

impl WebUiInput<'_> {
    fn name(&self) -> &str {
        self.app.metadata.name.as_deref().unwrap_or_default()
    }

    fn namespace(&self) -> &str {
        self.app.metadata.namespace.as_deref().unwrap_or_default()
    }

    fn url(&self, format: &str) -> Result<IngressUrl, UrlError> {
        ingress_url(format, self.name(), self.namespace(), self.app_id)
    }

    /// The UI Ingress's URL, when there is one.
    fn ui_url(&self) -> Result<Option<IngressUrl>, WebUiError> {
        let format = &self.options.ingress_url_format;
        if !self.options.enable_service || format.is_empty() {
            return Ok(None);
        }
        self.url(format).map(Some).map_err(|source| WebUiError::UiIngressUrl {
            format: format.clone(),
            source,
        })
    }

    /// Kubeflow's `GetResourceLabels`: the app name, and the submission id once there is one.
    fn resource_labels(&self) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([(LABEL_APP_NAME.to_owned(), self.name().to_owned())]);
        if !self.submission_id.is_empty() {
            labels.insert(LABEL_SUBMISSION_ID.to_owned(), self.submission_id.to_owned());
        }
        labels
    }

    fn meta(
        &self,
        name: String,
        labels: BTreeMap<String, String>,
        annotations: BTreeMap<String, String>,
    ) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace().to_owned()),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: application_owner(self.app).map(|o| vec![o]),
            ..Default::default()
        }
    }
}

/// `spark.ui.proxyBase` for the submission: the UI Ingress's path, when it has one (Kubeflow's
/// `configWebUI`); the caller sets it, and `spark.ui.proxyRedirectUri=/`, unless the spec sets them.
pub fn proxy_base(input: &WebUiInput<'_>) -> Result<Option<String>, WebUiError> {
    Ok(input.ui_url()?.map(|url| url.path).filter(|path| !path.is_empty()))
}

/// Builds the application's Services and Ingresses to its driver.
pub fn build(input: &WebUiInput<'_>) -> Result<DriverAccess, WebUiError> {
    let mut access = DriverAccess::default();
    if input.options.enable_service {
        let ui = input.app.spec.spark_ui_options.as_ref();
        let service = service(
            input,
            ServiceParts {
                name: ui_service_name(input.name()),
                port_name: ui
                    .and_then(|u| u.service_port_name.clone())
                    .unwrap_or_else(|| DEFAULT_UI_PORT_NAME.to_owned()),
                // Kubeflow's getWebUIServicePort: without sparkUIOptions the target port, with them their
                // servicePort or 4040 (not spark.ui.port).
                port: match ui {
                    None => ui_target_port(input.app),
                    Some(ui) => ui.service_port.unwrap_or(DEFAULT_UI_PORT),
                },
                target_port: ui_target_port(input.app),
                type_: ui.and_then(|u| u.service_type.clone()),
                labels: ui.map(|u| u.service_labels.clone()).unwrap_or_default(),
                annotations: ui.map(|u| u.service_annotations.clone()).unwrap_or_default(),
            },
        );
        let url = input.ui_url()?;
        let ingress = url.as_ref().map(|url| {
            ingress(
                input,
                ui_ingress_name(input.name()),
                &service,
                url,
                ui.map(|u| u.ingress_annotations.clone()).unwrap_or_default(),
                ui.map(|u| u.ingress_tls.clone()).unwrap_or_default(),
            )
        });
        access.ui = Some(Exposure { service, ingress, url });
    }
    for (index, option) in input.app.spec.driver_ingress_options.iter().enumerate() {
        access.driver_ingresses.push(driver_ingress(input, index, option)?);
    }
    Ok(access)
}

/// Kubeflow's `getWebUITargetPort`: `spark.ui.port` from `sparkConf` when it is a 32-bit integer, else 4040.
pub fn ui_target_port(app: &SparkApplication) -> i32 {
    app.spec
        .spark_conf
        .get(SPARK_UI_PORT_KEY)
        .and_then(|p| p.parse::<i32>().ok())
        .unwrap_or(DEFAULT_UI_PORT)
}

fn driver_ingress(
    input: &WebUiInput<'_>,
    index: usize,
    option: &DriverIngressConfiguration,
) -> Result<Exposure, WebUiError> {
    let port = option.service_port.ok_or(WebUiError::MissingServicePort { index })?;
    let service = service(
        input,
        ServiceParts {
            name: driver_ingress_name(input.name(), port),
            port_name: option
                .service_port_name
                .clone()
                .unwrap_or_else(|| format!("driver-ing-{port}")),
            port,
            target_port: port,
            type_: option.service_type.clone(),
            labels: option.service_labels.clone(),
            annotations: option.service_annotations.clone(),
        },
    );
    if option.ingress_url_format.is_empty() {
        return Ok(Exposure {
            service,
            ingress: None,
            url: None,
        });
    }
    let url = input
        .url(&option.ingress_url_format)
        .map_err(|source| WebUiError::DriverIngressUrl {
            index,
            format: option.ingress_url_format.clone(),
            source,
        })?;
    let ingress = ingress(
        input,
        format!("{}-ing-{port}", input.name()),
        &service,
        &url,
        option.ingress_annotations.clone(),
        option.ingress_tls.clone(),
    );
    Ok(Exposure {
        service,
        ingress: Some(ingress),
        url: Some(url),
    })
}

struct ServiceParts {
    name: String,
    port_name: String,
    port: i32,
    target_port: i32,
    type_: Option<String>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

/// Kubeflow's `createDriverIngressService`: the spec's labels replace the resource labels (when there are
/// any), and the created-by label is added either way.
fn service(input: &WebUiInput<'_>, parts: ServiceParts) -> Service {
    let mut labels = if parts.labels.is_empty() {
        input.resource_labels()
    } else {
        parts.labels
    };
    labels.insert(LABEL_CREATED_BY_SPARK_OPERATOR.to_owned(), LABEL_VALUE_TRUE.to_owned());
    Service {
        metadata: input.meta(parts.name, labels, parts.annotations),
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                name: Some(parts.port_name),
                port: parts.port,
                target_port: Some(IntOrString::Int(parts.target_port)),
                protocol: Some("TCP".to_owned()),
                ..Default::default()
            }]),
            selector: Some(BTreeMap::from([
                (LABEL_APP_NAME.to_owned(), input.name().to_owned()),
                (LABEL_SPARK_ROLE.to_owned(), "driver".to_owned()),
            ])),
            type_: Some(parts.type_.unwrap_or_else(|| "ClusterIP".to_owned())),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Kubeflow's `createDriverIngressV1`: one rule for the URL's host to the Service's port; a path other
/// than `/` gets nginx capture groups and the rewrite annotation. The spec's annotations and TLS, else
/// the operator's.
fn ingress(
    input: &WebUiInput<'_>,
    name: String,
    service: &Service,
    url: &IngressUrl,
    annotations: BTreeMap<String, String>,
    tls: Vec<IngressTLS>,
) -> Ingress {
    let options = input.options;
    let mut annotations = if annotations.is_empty() {
        options.ingress_annotations.clone()
    } else {
        annotations
    };
    let tls = if tls.is_empty() {
        options.ingress_tls.clone()
    } else {
        tls
    };
    let sub_path = !url.path.is_empty() && url.path != "/";
    let path = if sub_path {
        format!("{}(/|$)(.*)", url.path)
    } else {
        url.path.clone()
    };
    if sub_path {
        annotations.insert(NGINX_REWRITE_TARGET.to_owned(), "/$2".to_owned());
    }
    let port = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|p| p.first())
        .map_or(0, |p| p.port);
    Ingress {
        metadata: input.meta(name, input.resource_labels(), annotations),
        spec: Some(IngressSpec {
            ingress_class_name: (!options.ingress_class_name.is_empty()).then(|| options.ingress_class_name.clone()),
            rules: Some(vec![IngressRule {
                host: (!url.host.is_empty()).then(|| url.host.clone()),
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        backend: IngressBackend {
                            service: Some(IngressServiceBackend {
                                name: service.metadata.name.clone().unwrap_or_default(),
                                port: Some(ServiceBackendPort {
                                    number: Some(port),
                                    name: None,
                                }),
                            }),
                            resource: None,
                        },
                        path: (!path.is_empty()).then_some(path),
                        path_type: "ImplementationSpecific".to_owned(),
                    }],
                }),
            }]),
            tls: (!tls.is_empty()).then_some(tls),
            default_backend: None,
        }),
        status: None,
    }
}

/// What `status.driverInfo` records of the UI (Kubeflow's `reconcileSubmittedSparkApplication`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WebUiStatus {
    pub service_name: String,
    pub port: i32,
    /// `<clusterIP>:<port>`.
    pub address: String,
    pub ingress_name: String,
    pub ingress_address: String,
}

impl WebUiStatus {
    /// From the UI objects as the API server returned them (the Service's allocated cluster IP).
    pub fn of(ui: &Exposure, stored_service: &Service) -> Self {
        let spec = stored_service.spec.as_ref();
        let port = spec
            .and_then(|s| s.ports.as_ref())
            .and_then(|p| p.first())
            .map_or(0, |p| p.port);
        let ip = spec.and_then(|s| s.cluster_ip.clone()).unwrap_or_default();
        Self {
            service_name: stored_service.metadata.name.clone().unwrap_or_default(),
            port,
            address: format!("{ip}:{port}"),
            ingress_name: ui
                .ingress
                .as_ref()
                .and_then(|i| i.metadata.name.clone())
                .unwrap_or_default(),
            ingress_address: ui.url.as_ref().map(|u| u.address.clone()).unwrap_or_default(),
        }
    }

    /// Writes it into a status's `driverInfo`.
    pub fn record(&self, info: &mut spark_operator_api::status::DriverInfo) {
        info.web_ui_service_name = self.service_name.clone();
        info.web_ui_port = self.port;
        info.web_ui_address = self.address.clone();
        info.web_ui_ingress_name = self.ingress_name.clone();
        info.web_ui_ingress_address = self.ingress_address.clone();
    }
}

#[cfg(test)]
#[path = "web_ui_tests.rs"]
mod tests;
