//! This replica's own serving certificate, signed in memory by the shared CA and never stored: each
//! replica has its own key, and nothing but the CA crosses the API server (cert-manager's
//! `DynamicSource`).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose, SanType};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::sign::CertifiedKey;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};

use super::authority::{self, Ca};
use super::pem;

/// Why no serving certificate could be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the serving certificate names neither a DNS name nor an IP address")]
    NoNames,
    #[error("{name:?} is not a valid DNS name for a certificate")]
    DnsName {
        name: String,
        #[source]
        source: rcgen::Error,
    },
    #[error("reading the CA key")]
    CaKey(#[source] rcgen::Error),
    #[error("reading the CA certificate as an issuer")]
    Issuer(#[source] rcgen::Error),
    #[error("generating the serving key")]
    GenerateKey(#[source] rcgen::Error),
    #[error("the serving certificate validity")]
    Validity(#[source] pem::Error),
    #[error("signing the serving certificate")]
    Sign(#[source] rcgen::Error),
    #[error("loading the serving key into rustls")]
    LoadKey(#[source] rustls::Error),
    #[error("the new serving certificate does not verify against its CA")]
    Verify(#[source] rustls::Error),
}

/// The names a serving certificate is for: the Service's DNS names (`<service>.<namespace>.svc`, and
/// with `.cluster.local`) and addresses (loopback for tests and `dev`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subject {
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
}

impl Subject {
    /// `<service>.<namespace>.svc` and `<service>.<namespace>.svc.cluster.local`.
    pub fn for_service(service: &str, namespace: &str) -> Self {
        Self {
            dns_names: vec![
                format!("{service}.{namespace}.svc"),
                format!("{service}.{namespace}.svc.cluster.local"),
            ],
            ip_addresses: Vec::new(),
        }
    }

    /// The name a client checks first: the first DNS name, else the first address.
    fn first_name(&self) -> Option<ServerName<'static>> {
        match self.dns_names.first() {
            Some(name) => ServerName::try_from(name.clone()).ok(),
            None => self.ip_addresses.first().map(|ip| ServerName::IpAddress((*ip).into())),
        }
    }
}

/// A signed serving certificate and when to replace it.
#[derive(Clone, Debug)]
pub struct Leaf {
    pub key: Arc<CertifiedKey>,
    /// The CA that signed it.
    pub issuer: CertificateDer<'static>,
    pub not_after: Timestamp,
    /// Two thirds into its life.
    pub renew_at: Timestamp,
}

/// Signs a serving certificate for `subject` with `ca`, valid for `lifetime` but never past the CA, and
/// checks it verifies against the CA before anyone is served it.
pub fn sign(ca: &Ca, subject: &Subject, now: Timestamp, lifetime: Duration) -> Result<Leaf, Error> {
    if subject.dns_names.is_empty() && subject.ip_addresses.is_empty() {
        return Err(Error::NoNames);
    }
    let mut params = CertificateParams::default();
    params.distinguished_name.push(
        DnType::CommonName,
        subject.dns_names.first().cloned().unwrap_or_default(),
    );
    for name in &subject.dns_names {
        let dns = name.clone().try_into().map_err(|source| Error::DnsName {
            name: name.clone(),
            source,
        })?;
        params.subject_alt_names.push(SanType::DnsName(dns));
    }
    for ip in &subject.ip_addresses {
        params.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let (not_before, not_after) = authority::validity(now, lifetime);
    let not_before = not_before.max(ca.facts.not_before);
    let not_after = not_after.min(ca.facts.not_after);
    params.not_before = pem::offset_date_time(not_before).map_err(Error::Validity)?;
    params.not_after = pem::offset_date_time(not_after).map_err(Error::Validity)?;

    let ca_key = ca.key_pair().map_err(Error::CaKey)?;
    let issuer = Issuer::from_ca_cert_der(&ca.cert, ca_key).map_err(Error::Issuer)?;
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(Error::GenerateKey)?;
    let cert = params.signed_by(&key, &issuer).map_err(Error::Sign)?;
    let provider = rustls::crypto::ring::default_provider();
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let signing = provider.key_provider.load_private_key(der).map_err(Error::LoadKey)?;
    let certified = CertifiedKey::new(vec![cert.der().clone()], signing);
    verify(&certified, std::slice::from_ref(&ca.cert), subject).map_err(Error::Verify)?;

    let life = not_after.as_millisecond() - now.as_millisecond();
    Ok(Leaf {
        key: Arc::new(certified),
        issuer: ca.cert.clone(),
        not_after,
        renew_at: pem::shift(now, life * 2 / 3),
    })
}

/// Whether a client trusting `roots` accepts `key`'s certificate for the subject's first name: what
/// the API server will check, done before serving it.
pub fn verify(key: &CertifiedKey, roots: &[CertificateDer<'static>], subject: &Subject) -> Result<(), rustls::Error> {
    let mut store = rustls::RootCertStore::empty();
    for root in roots {
        store.add(root.clone())?;
    }
    let verifier = WebPkiServerVerifier::builder_with_provider(
        Arc::new(store),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|error| rustls::Error::General(error.to_string()))?;
    let name = subject
        .first_name()
        .ok_or_else(|| rustls::Error::General("no name to verify".into()))?;
    let (end_entity, intermediates) = key.cert.split_first().ok_or(rustls::Error::NoCertificatesPresented)?;
    verifier.verify_server_cert(end_entity, intermediates, &name, &[], UnixTime::now())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_leaf_verifies_against_its_ca_only_and_never_outlives_it() {
        let now = Timestamp::now();
        let ca = Ca::generate(now, Duration::from_secs(3600)).unwrap();
        let other = Ca::generate(now, Duration::from_secs(3600)).unwrap();
        let subject = Subject {
            dns_names: vec!["webhook.spark.svc".into()],
            ip_addresses: vec!["127.0.0.2".parse().unwrap()],
        };
        let leaf = sign(&ca, &subject, now, Duration::from_secs(7 * 24 * 3600)).unwrap();
        assert!(leaf.not_after <= ca.facts.not_after);
        assert!(leaf.renew_at < leaf.not_after);
        verify(&leaf.key, std::slice::from_ref(&ca.cert), &subject).unwrap();
        assert!(verify(&leaf.key, std::slice::from_ref(&other.cert), &subject).is_err());
        let by_ip = Subject {
            dns_names: vec![],
            ip_addresses: vec!["127.0.0.2".parse().unwrap()],
        };
        verify(&leaf.key, std::slice::from_ref(&ca.cert), &by_ip).unwrap();
        assert!(matches!(
            sign(&ca, &Subject::default(), now, Duration::from_secs(60)),
            Err(Error::NoNames)
        ));
    }
}
