//! The uninstall steps of `spark-operator cleanup`: what the chart's pre-delete hook does before the release's objects go, in
//! this order:
//!
//! 1. delete the webhook configurations, so a fail-closed webhook whose backend is about to go cannot
//!    block every Spark pod's creation;
//! 2. stop the operator (scale its Deployment to zero and wait until its pods are gone): a running
//!    operator re-creates its CA Secret and ConfigMaps (the certificate manager creates a missing
//!    Secret and re-applies the ConfigMaps) and puts the driver-protection finalizer on every driver pod
//!    it creates;
//! 3. release the driver-protection finalizer of every pod the operator launched, so no pod is stranded;
//! 4. delete the CA Secret, the CA ConfigMap(s) and the leader-election Lease, which Helm does not own.
//!
//! A step that fails is reported with the object it was about and the command exits non-zero, but the
//! later steps still run, except step 4 after a failed step 2 (a still-running operator would re-create
//! what it deletes).

use std::io::Write;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use spark_operator_runtime::error_chain::ErrorChain;

/// `NAMESPACE/NAME` of a namespaced object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectName {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for ObjectName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

pub fn parse_object_name(value: &str) -> Result<ObjectName, String> {
    match value.trim().split_once('/') {
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() && !name.contains('/') => Ok(ObjectName {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }),
        _ => Err(format!(
            "{value:?} is not NAMESPACE/NAME; write it as spark-operator/spark-operator-webhook-certs"
        )),
    }
}

/// The steps to run, as `spark-operator cleanup`'s flags ask for them.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Where to release finalizers; empty: every namespace.
    pub namespaces: Vec<String>,
    pub mutating_webhook_configuration: Option<String>,
    pub validating_webhook_configuration: Option<String>,
    pub operator_deployment: Option<ObjectName>,
    /// How long to wait for the operator's pods to be gone, in seconds.
    pub timeout: u64,
    pub release_finalizers: bool,
    pub ca_secret: Option<ObjectName>,
    pub ca_config_map: Vec<ObjectName>,
    pub leader_election_lease: Option<ObjectName>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{failed} cleanup step(s) failed: {summary}")]
    Steps { failed: usize, summary: String },
    #[error("could not write the cleanup's report")]
    Output(#[source] std::io::Error),
}

/// One step's failure, naming the step and the object.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("step {step}: could not delete {kind} {name}")]
    Delete {
        step: &'static str,
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("step stop-operator: could not read Deployment {deployment}")]
    ReadDeployment {
        deployment: ObjectName,
        #[source]
        source: kube::Error,
    },
    #[error("step stop-operator: could not scale Deployment {deployment} to 0 replicas")]
    Scale {
        deployment: ObjectName,
        #[source]
        source: kube::Error,
    },
    #[error("step stop-operator: could not list the pods of Deployment {deployment}")]
    ListPods {
        deployment: ObjectName,
        #[source]
        source: kube::Error,
    },
    #[error(
        "step stop-operator: {left} pod(s) of Deployment {deployment} still exist after {waited:?} ({pods}); raise --timeout or check why they do not terminate"
    )]
    PodsRemain {
        deployment: ObjectName,
        left: usize,
        pods: String,
        waited: Duration,
    },
    #[error("step stop-operator: Deployment {deployment} has no pod selector")]
    NoSelector { deployment: ObjectName },
    #[error("step release-finalizers: could not release the driver-protection finalizers")]
    Release(#[source] crate::app::driver_finalizer::Error),
}

/// What the steps did, line by line, and what failed.
struct Report<'a, W: Write> {
    out: &'a mut W,
    failures: Vec<StepError>,
}

impl<W: Write> Report<'_, W> {
    fn done(&mut self, line: String) -> Result<(), Error> {
        tracing::info!("{line}");
        writeln!(self.out, "{line}").map_err(Error::Output)
    }

    fn failed(&mut self, error: StepError) -> Result<(), Error> {
        let line = ErrorChain(&error).to_string();
        tracing::error!("{line}");
        writeln!(self.out, "error: {line}").map_err(Error::Output)?;
        self.failures.push(error);
        Ok(())
    }
}

/// Deletes one object; Ok(false) when it was already gone.
async fn delete<K>(api: &Api<K>, name: &str) -> Result<bool, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(error) => Err(error),
    }
}

async fn delete_step<K, W: Write>(
    report: &mut Report<'_, W>,
    step: &'static str,
    kind: &'static str,
    api: Api<K>,
    shown: String,
    name: &str,
) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match delete(&api, name).await {
        Ok(true) => report.done(format!("{step}: deleted {kind} {shown}")),
        Ok(false) => report.done(format!("{step}: {kind} {shown} was already gone")),
        Err(source) => report.failed(StepError::Delete {
            step,
            kind,
            name: shown,
            source,
        }),
    }
}

/// A label selector as a list's `labelSelector` parameter.
fn selector_string(selector: &LabelSelector) -> String {
    let mut terms: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for expression in selector.match_expressions.iter().flatten() {
        let values = expression.values.clone().unwrap_or_default().join(",");
        terms.push(match expression.operator.as_str() {
            "In" => format!("{} in ({values})", expression.key),
            "NotIn" => format!("{} notin ({values})", expression.key),
            "DoesNotExist" => format!("!{}", expression.key),
            _ => expression.key.clone(),
        });
    }
    terms.join(",")
}

/// Step 2: scales the operator's Deployment to zero and waits until its pods are gone. Ok(false) when
/// the operator may still run.
async fn stop_operator<W: Write>(
    client: &kube::Client,
    report: &mut Report<'_, W>,
    deployment: &ObjectName,
    timeout: Duration,
) -> Result<bool, Error> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &deployment.namespace);
    let found = match deployments.get_opt(&deployment.name).await {
        Ok(found) => found,
        Err(source) => {
            report.failed(StepError::ReadDeployment {
                deployment: deployment.clone(),
                source,
            })?;
            return Ok(false);
        }
    };
    let Some(found) = found else {
        report.done(format!("stop-operator: Deployment {deployment} was already gone"))?;
        return Ok(true);
    };
    let Some(selector) = found
        .spec
        .as_ref()
        .map(|s| selector_string(&s.selector))
        .filter(|s| !s.is_empty())
    else {
        report.failed(StepError::NoSelector {
            deployment: deployment.clone(),
        })?;
        return Ok(false);
    };
    let scale = serde_json::json!({"spec": {"replicas": 0}});
    if let Err(source) = deployments
        .patch(&deployment.name, &PatchParams::default(), &Patch::Merge(&scale))
        .await
    {
        report.failed(StepError::Scale {
            deployment: deployment.clone(),
            source,
        })?;
        return Ok(false);
    }
    report.done(format!("stop-operator: scaled Deployment {deployment} to 0 replicas"))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &deployment.namespace);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let left = match pods.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => list.items,
            Err(source) => {
                report.failed(StepError::ListPods {
                    deployment: deployment.clone(),
                    source,
                })?;
                return Ok(false);
            }
        };
        if left.is_empty() {
            report.done(format!("stop-operator: the pods of Deployment {deployment} are gone"))?;
            return Ok(true);
        }
        if tokio::time::Instant::now() >= deadline {
            let names: Vec<String> = left.iter().filter_map(|p| p.metadata.name.clone()).collect();
            report.failed(StepError::PodsRemain {
                deployment: deployment.clone(),
                left: left.len(),
                pods: names.join(", "),
                waited: timeout,
            })?;
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Runs every requested step; says how many driver pods it released.
pub async fn run(client: &kube::Client, args: &Plan, out: &mut impl Write) -> Result<usize, Error> {
    let client = client.clone();
    let mut report = Report {
        out,
        failures: Vec::new(),
    };

    // 1. No webhook left to fail pod creations closed.
    if let Some(name) = &args.mutating_webhook_configuration {
        let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        delete_step(
            &mut report,
            "delete-webhooks",
            "MutatingWebhookConfiguration",
            api,
            name.clone(),
            name,
        )
        .await?;
    }
    if let Some(name) = &args.validating_webhook_configuration {
        let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        delete_step(
            &mut report,
            "delete-webhooks",
            "ValidatingWebhookConfiguration",
            api,
            name.clone(),
            name,
        )
        .await?;
    }

    // 2. Nothing left running to re-create what the next steps remove.
    let stopped = match &args.operator_deployment {
        Some(deployment) => stop_operator(&client, &mut report, deployment, Duration::from_secs(args.timeout)).await?,
        None => true,
    };

    // 3. Runs even when the operator could not be stopped: a stranded pod is the worse outcome.
    let mut released = 0;
    if args.release_finalizers {
        let namespaces: Vec<String> = args
            .namespaces
            .iter()
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .collect();
        match crate::app::driver_finalizer::cleanup(&client, &namespaces).await {
            Ok(count) => {
                released = count;
                report.done(format!(
                    "release-finalizers: released the driver-protection finalizer of {count} pod(s)"
                ))?;
            }
            Err(error) => report.failed(StepError::Release(error))?,
        }
    }

    // 4. A running operator would re-create these at once.
    let deletions = args.ca_secret.is_some() || !args.ca_config_map.is_empty() || args.leader_election_lease.is_some();
    if deletions && !stopped {
        report.done("delete-operator-state: skipped, the operator could not be stopped and would re-create the CA Secret, ConfigMaps and Lease".to_owned())?;
    } else {
        const STEP: &str = "delete-operator-state";
        if let Some(secret) = &args.ca_secret {
            let api: Api<Secret> = Api::namespaced(client.clone(), &secret.namespace);
            delete_step(&mut report, STEP, "Secret", api, secret.to_string(), &secret.name).await?;
        }
        for map in &args.ca_config_map {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), &map.namespace);
            delete_step(&mut report, STEP, "ConfigMap", api, map.to_string(), &map.name).await?;
        }
        if let Some(lease) = &args.leader_election_lease {
            let api: Api<Lease> = Api::namespaced(client.clone(), &lease.namespace);
            delete_step(&mut report, STEP, "Lease", api, lease.to_string(), &lease.name).await?;
        }
    }

    if report.failures.is_empty() {
        Ok(released)
    } else {
        let summary: Vec<String> = report.failures.iter().map(ToString::to_string).collect();
        Err(Error::Steps {
            failed: report.failures.len(),
            summary: summary.join("; "),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_need_a_namespace_and_a_name() {
        assert_eq!(
            parse_object_name("spark-operator/certs"),
            Ok(ObjectName {
                namespace: "spark-operator".into(),
                name: "certs".into()
            })
        );
        for wrong in ["certs", "/certs", "ns/", "a/b/c", ""] {
            let error = parse_object_name(wrong).unwrap_err();
            assert!(error.contains("NAMESPACE/NAME"), "{wrong}: {error}");
        }
    }

    #[test]
    fn a_selector_becomes_a_label_selector_parameter() {
        let selector: LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"app": "op", "tier": "x"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["a", "b"]},
                {"key": "gone", "operator": "DoesNotExist"}
            ]
        }))
        .unwrap();
        assert_eq!(selector_string(&selector), "app=op,tier=x,env in (a,b),!gone");
    }
}
