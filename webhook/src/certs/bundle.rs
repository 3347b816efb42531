//! The webhook configurations' `caBundle`: the only part of them the webhook owns. The configurations
//! themselves belong to whoever installs the operator (the chart, `dev`); the webhook writes nothing
//! but each webhook's `clientConfig.caBundle`, by server-side apply under its own field manager, so
//! `failurePolicy`, rules and selectors stay the installer's. `webhooks` is a list keyed by `name`
//! (`+listType=map`), so an apply names each webhook and its `caBundle` only.

use std::collections::BTreeSet;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use rustls_pki_types::CertificateDer;
use serde_json::json;

use super::pem;

/// The field manager of every `caBundle` write.
pub const FIELD_MANAGER: &str = "spark-operator-webhook-ca";

/// Which kind of configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Mutating,
    Validating,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Mutating => "MutatingWebhookConfiguration",
            Self::Validating => "ValidatingWebhookConfiguration",
        }
    }
}

/// One webhook configuration whose `caBundle` the webhook keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigurationRef {
    pub kind: Kind,
    pub name: String,
}

/// The ConfigMap that publishes the trusted CAs to the operator's clients outside the API server (the
/// node agents, which trust the report receiver's certificate through it): key [`CA_CONFIG_MAP_KEY`], the
/// same union of CAs as `caBundle`. Unlike the webhook configurations it is the operator's own, so it is
/// created when missing. It never holds a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaConfigMap {
    pub namespace: String,
    pub name: String,
}

/// The key of the CA bundle in [`CaConfigMap`].
pub const CA_CONFIG_MAP_KEY: &str = "ca.crt";

/// Why a configuration's `caBundle` could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading the {kind} {name}")]
    Read {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("applying caBundle to the {kind} {name}")]
    Apply {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Each webhook's name and `caBundle` (raw PEM bytes), or None when the configuration does not exist.
async fn read(client: &kube::Client, target: &ConfigurationRef) -> Result<Option<Vec<(String, Vec<u8>)>>, Error> {
    let failed = |source| Error::Read {
        kind: target.kind.name(),
        name: target.name.clone(),
        source,
    };
    let bundle = |b: Option<&ByteString>| b.map(|b| b.0.clone()).unwrap_or_default();
    Ok(match target.kind {
        Kind::Mutating => Api::<MutatingWebhookConfiguration>::all(client.clone())
            .get_opt(&target.name)
            .await
            .map_err(failed)?
            .map(|c| {
                c.webhooks
                    .unwrap_or_default()
                    .into_iter()
                    .map(|w| (w.name, bundle(w.client_config.ca_bundle.as_ref())))
                    .collect()
            }),
        Kind::Validating => Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .get_opt(&target.name)
            .await
            .map_err(failed)?
            .map(|c| {
                c.webhooks
                    .unwrap_or_default()
                    .into_iter()
                    .map(|w| (w.name, bundle(w.client_config.ca_bundle.as_ref())))
                    .collect()
            }),
    })
}

/// Whether a `caBundle` holds exactly `wanted` (as a set of certificates).
fn holds(bundle: &[u8], wanted: &BTreeSet<&[u8]>) -> bool {
    pem::certificates(bundle).is_ok_and(|certs| certs.iter().map(|c| c.as_ref()).collect::<BTreeSet<_>>() == *wanted)
}

/// The CA certificates every webhook of `target` trusts, read back; None when it does not exist.
pub async fn trusted(
    client: &kube::Client,
    target: &ConfigurationRef,
) -> Result<Option<Vec<Vec<CertificateDer<'static>>>>, Error> {
    Ok(read(client, target).await?.map(|webhooks| {
        webhooks
            .iter()
            .map(|(_, b)| pem::certificates(b).unwrap_or_default())
            .collect()
    }))
}

/// What [`sync`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Synced {
    /// Every configuration that exists was read back holding exactly the bundle.
    pub confirmed: bool,
    /// Applies sent.
    pub applied: u64,
}

/// Makes every webhook of every configuration in `targets` trust exactly `cas`, and reads each back.
/// A configuration that does not exist is not the webhook's to create (it has nothing to protect
/// yet); it is skipped and the next round looks again.
pub async fn sync(
    client: &kube::Client,
    targets: &[ConfigurationRef],
    cas: &[CertificateDer<'static>],
) -> Result<Synced, Error> {
    let wanted: BTreeSet<&[u8]> = cas.iter().map(|c| c.as_ref()).collect();
    let text = pem::encode(cas).into_bytes();
    let mut synced = Synced {
        confirmed: true,
        applied: 0,
    };
    for target in targets {
        let Some(webhooks) = read(client, target).await? else {
            tracing::warn!(kind = target.kind.name(), name = %target.name, "webhook configuration not found; its caBundle is set once it exists");
            continue;
        };
        if webhooks.iter().all(|(_, bundle)| holds(bundle, &wanted)) {
            continue;
        }
        let patch = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": target.kind.name(),
            "metadata": { "name": target.name },
            "webhooks": webhooks.iter().map(|(name, _)| json!({
                "name": name,
                "clientConfig": { "caBundle": ByteString(text.clone()) },
            })).collect::<Vec<_>>(),
        });
        // Forced: `caBundle` is the webhook's alone, whoever wrote it before (an installer that rendered
        // a placeholder). Only `caBundle` is in the apply, so nothing else changes hands.
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let applied = match target.kind {
            Kind::Mutating => Api::<MutatingWebhookConfiguration>::all(client.clone())
                .patch(&target.name, &params, &Patch::Apply(&patch))
                .await
                .map(|_| ()),
            Kind::Validating => Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .patch(&target.name, &params, &Patch::Apply(&patch))
                .await
                .map(|_| ()),
        };
        applied.map_err(|source| Error::Apply {
            kind: target.kind.name(),
            name: target.name.clone(),
            source,
        })?;
        synced.applied += 1;
        // Read back, as the rotation's first phase requires: the switch waits for this.
        let back = read(client, target).await?;
        if !back.is_some_and(|webhooks| webhooks.iter().all(|(_, bundle)| holds(bundle, &wanted))) {
            synced.confirmed = false;
        }
    }
    Ok(synced)
}

/// Makes the CA ConfigMap hold exactly `cas`, creating it if needed, and reads it back; the result is
/// confirmed only when the read-back holds them (the rotation's switch waits for that, as for `caBundle`).
pub async fn sync_config_map(
    client: &kube::Client,
    target: &CaConfigMap,
    cas: &[CertificateDer<'static>],
) -> Result<Synced, Error> {
    const KIND: &str = "ConfigMap";
    let wanted: BTreeSet<&[u8]> = cas.iter().map(|c| c.as_ref()).collect();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &target.namespace);
    let name = || format!("{}/{}", target.namespace, target.name);
    let read = || async {
        api.get_opt(&target.name)
            .await
            .map_err(|source| Error::Read {
                kind: KIND,
                name: name(),
                source,
            })
            .map(|c| {
                c.and_then(|c| c.data)
                    .and_then(|mut d| d.remove(CA_CONFIG_MAP_KEY))
                    .unwrap_or_default()
            })
    };
    if holds(read().await?.as_bytes(), &wanted) {
        return Ok(Synced {
            confirmed: true,
            applied: 0,
        });
    }
    let patch = json!({
        "apiVersion": "v1",
        "kind": KIND,
        "metadata": { "name": target.name, "namespace": target.namespace },
        "data": { CA_CONFIG_MAP_KEY: pem::encode(cas) },
    });
    api.patch(
        &target.name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(|source| Error::Apply {
        kind: KIND,
        name: name(),
        source,
    })?;
    Ok(Synced {
        confirmed: holds(read().await?.as_bytes(), &wanted),
        applied: 1,
    })
}
