//! The one CA every replica shares, kept in one Secret (cert-manager's `DynamicAuthority`, with the
//! two-phase rotation of Kubewarden's RFC-0018).
//!
//! The Secret holds the current CA (`ca.crt`, the same certificate in `tls.crt`, its key in `tls.key`),
//! during a rotation the staged successor (`next.crt`, `next.key`), and `ca-bundle.crt`: every CA still
//! trusted, which is what the webhook configurations' `caBundle` must hold. Two annotations time the
//! rotation: when the successor was staged, and after when the CAs other than the current one may leave
//! the bundle. Everything a replica needs to resume a rotation is in the Secret, so a restart in the
//! middle of one simply carries on.
//!
//! Every write is conditional: a create that finds the Secret already there, or an update whose
//! resourceVersion is stale, means another replica got there first, and the replica reads again. No
//! replica ever overwrites what another wrote, and no serving certificate is ever stored.
//!
//! This module is the pure part ([`CaState::read`], [`decide`], [`Ca::generate`]) and the writes; the
//! loop that drives them is in [`super::driver`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls_pki_types::CertificateDer;

use super::pem::{self, Facts};

pub const CA_CERT: &str = "ca.crt";
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const BUNDLE: &str = "ca-bundle.crt";
pub const NEXT_CERT: &str = "next.crt";
pub const NEXT_KEY: &str = "next.key";
/// When the successor CA was staged (RFC 3339).
pub const STAGED_AT: &str = "sparkoperator.k8s.io/ca-staged-at";
/// After when the CAs other than the current (and staged) one leave the bundle (RFC 3339).
pub const RETIRE_AFTER: &str = "sparkoperator.k8s.io/ca-retire-after";

/// Why a CA could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("generating a CA key")]
    GenerateKey(#[source] rcgen::Error),
    #[error("signing the CA certificate")]
    SignCa(#[source] rcgen::Error),
    #[error("the CA validity")]
    Validity(#[source] pem::Error),
    #[error("the Secret has no {key}")]
    Missing { key: &'static str },
    #[error("reading {key}")]
    Certificate {
        key: &'static str,
        #[source]
        source: pem::Error,
    },
    #[error("{key} holds no certificate")]
    Empty { key: &'static str },
    #[error("{key} is not valid UTF-8 PEM")]
    KeyText { key: &'static str },
    #[error("reading the private key in {key}")]
    Key {
        key: &'static str,
        #[source]
        source: rcgen::Error,
    },
    #[error("the certificate in {key} is not a CA")]
    NotCa { key: &'static str },
    #[error("the key in {key} does not belong to its certificate")]
    KeyMismatch { key: &'static str },
}

/// A CA: its certificate and its key. `Debug` leaves the key out.
#[derive(Clone)]
pub struct Ca {
    pub cert: CertificateDer<'static>,
    pub facts: Facts,
    /// PKCS#8 PEM of the key; never logged.
    key_pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("serial", &self.facts.serial)
            .field("not_after", &self.facts.not_after)
            .finish_non_exhaustive()
    }
}

impl Ca {
    /// A new self-signed ECDSA P-256 CA valid from a little before `now` (for clocks a little behind)
    /// for `lifetime`.
    pub fn generate(now: Timestamp, lifetime: Duration) -> Result<Self, Error> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(Error::GenerateKey)?;
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "spark-operator-webhook-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let (not_before, not_after) = validity(now, lifetime);
        params.not_before = pem::offset_date_time(not_before).map_err(Error::Validity)?;
        params.not_after = pem::offset_date_time(not_after).map_err(Error::Validity)?;
        let cert = params.self_signed(&key).map_err(Error::SignCa)?;
        let cert = cert.der().clone();
        let facts = pem::facts(&cert).map_err(Error::Validity)?;
        Ok(Self {
            cert,
            facts,
            key_pem: key.serialize_pem(),
        })
    }

    /// The CA stored under `cert_key` and `key_key`, checked: a CA certificate, and the key is its own.
    fn read(data: &BTreeMap<String, ByteString>, cert_key: &'static str, key_key: &'static str) -> Result<Self, Error> {
        let cert_pem = data.get(cert_key).ok_or(Error::Missing { key: cert_key })?;
        let key_pem = data.get(key_key).ok_or(Error::Missing { key: key_key })?;
        let cert = pem::certificates(&cert_pem.0)
            .map_err(|source| Error::Certificate { key: cert_key, source })?
            .into_iter()
            .next()
            .ok_or(Error::Empty { key: cert_key })?;
        let facts = pem::facts(&cert).map_err(|source| Error::Certificate { key: cert_key, source })?;
        if !facts.is_ca {
            return Err(Error::NotCa { key: cert_key });
        }
        let key_pem = String::from_utf8(key_pem.0.clone()).map_err(|_| Error::KeyText { key: key_key })?;
        let key = KeyPair::from_pem(&key_pem).map_err(|source| Error::Key { key: key_key, source })?;
        if key.public_key_raw() != facts.public_key.as_slice() {
            return Err(Error::KeyMismatch { key: key_key });
        }
        Ok(Self { cert, facts, key_pem })
    }

    /// The key, for signing serving certificates.
    pub fn key_pair(&self) -> Result<KeyPair, rcgen::Error> {
        KeyPair::from_pem(&self.key_pem)
    }

    /// The share of its lifetime left at `now` (0 once expired).
    pub fn remaining(&self, now: Timestamp) -> f64 {
        let total = self.facts.not_after.as_millisecond() - self.facts.not_before.as_millisecond();
        let left = self.facts.not_after.as_millisecond() - now.as_millisecond();
        if total <= 0 || left <= 0 {
            return 0.0;
        }
        left as f64 / total as f64
    }

    /// When a third of its lifetime is left: the rotation starts then.
    pub fn rotation_due(&self) -> Timestamp {
        let total = self.facts.not_after.as_millisecond() - self.facts.not_before.as_millisecond();
        pem::shift(self.facts.not_after, -(total / 3))
    }
}

/// From a little before `now` to `now + lifetime`: a tenth of the lifetime earlier, at most five
/// minutes, so a peer whose clock is a little behind already accepts it.
pub fn validity(now: Timestamp, lifetime: Duration) -> (Timestamp, Timestamp) {
    let back = pem::millis(lifetime / 10).min(5 * 60 * 1000);
    (pem::shift(now, -back), pem::shift(now, pem::millis(lifetime)))
}

/// The Secret as read, parsed. A CA that cannot be used is kept as its error, so the decision can
/// replace it.
#[derive(Debug)]
pub struct CaState {
    pub current: Result<Ca, Error>,
    pub next: Option<Result<Ca, Error>>,
    /// `ca-bundle.crt` as stored (unreadable entries dropped).
    pub bundle: Vec<CertificateDer<'static>>,
    pub staged_at: Option<Timestamp>,
    pub retire_after: Option<Timestamp>,
}

impl CaState {
    pub fn read(secret: &Secret) -> Self {
        let empty = BTreeMap::new();
        let data = secret.data.as_ref().unwrap_or(&empty);
        let annotation = |name: &str| {
            secret
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(name))
                .and_then(|v| v.parse::<Timestamp>().ok())
        };
        let next =
            (data.contains_key(NEXT_CERT) || data.contains_key(NEXT_KEY)).then(|| Ca::read(data, NEXT_CERT, NEXT_KEY));
        Self {
            current: Ca::read(data, CA_CERT, TLS_KEY),
            next,
            bundle: data
                .get(BUNDLE)
                .and_then(|b| pem::certificates(&b.0).ok())
                .unwrap_or_default(),
            staged_at: annotation(STAGED_AT),
            retire_after: annotation(RETIRE_AFTER),
        }
    }

    /// Every CA a client must trust now: the current and staged CAs and the bundle's unexpired ones.
    pub fn trusted(&self, now: Timestamp) -> Vec<CertificateDer<'static>> {
        let mut all: Vec<CertificateDer<'static>> = Vec::new();
        if let Ok(current) = &self.current {
            all.push(current.cert.clone());
        }
        all.extend(self.bundle.iter().cloned());
        if let Some(Ok(next)) = &self.next {
            all.push(next.cert.clone());
        }
        pem::unexpired_union(&all, now)
    }
}

/// How fast certificates live and rotate.
#[derive(Clone, Debug)]
pub struct Timing {
    /// CA validity (default one year). The rotation starts with a third of it left.
    pub ca_lifetime: Duration,
    /// Serving certificate validity (default 7 days), renewed at two thirds of it.
    pub leaf_lifetime: Duration,
    /// After the staged CA is confirmed in every webhook configuration, how long before the replicas
    /// switch to it: time for every API server to load the new `caBundle` (default 1 minute).
    pub propagation: Duration,
    /// After the switch, how long the old CA stays trusted: time for every replica to pick up a
    /// serving certificate from the new CA (default 1 hour).
    pub retire_grace: Duration,
    /// How often a replica looks again when nothing happens (default 1 minute).
    pub check_every: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            ca_lifetime: Duration::from_secs(365 * 24 * 3600),
            leaf_lifetime: Duration::from_secs(7 * 24 * 3600),
            propagation: Duration::from_secs(60),
            retire_grace: Duration::from_secs(3600),
            check_every: Duration::from_secs(60),
        }
    }
}

/// What the Secret needs next.
#[derive(Debug)]
pub enum Step {
    /// No Secret: create it with a new CA.
    Create,
    /// The current CA cannot be used (missing, unreadable, not a CA, a foreign key, expired): replace it.
    Replace,
    /// A third of the current CA's lifetime is left: stage a successor (phase 1).
    Stage,
    /// The staged successor is unusable: drop it (the next round stages another).
    DropNext,
    /// The successor is in every webhook configuration and had time to propagate: make it current
    /// (phase 2).
    Switch,
    /// The grace period is over, or a CA expired: shrink the bundle to what is still trusted (phase 3).
    Prune,
    /// Nothing to write before `until` (unless the Secret changes).
    Wait { until: Timestamp },
}

/// The next step for the Secret, given whether every webhook configuration holds `state.trusted`.
pub fn decide(state: Option<&CaState>, now: Timestamp, timing: &Timing, bundle_confirmed: bool) -> Step {
    let Some(state) = state else {
        return Step::Create;
    };
    let current = match &state.current {
        Ok(current) if current.facts.not_after > now => current,
        _ => return Step::Replace,
    };
    let mut until = pem::shift(now, pem::millis(timing.check_every));
    match &state.next {
        Some(Err(_)) => return Step::DropNext,
        Some(Ok(_)) => {
            let due = pem::shift(state.staged_at.unwrap_or(now), pem::millis(timing.propagation));
            if bundle_confirmed && now >= due {
                return Step::Switch;
            }
            until = until.min(due);
        }
        None => {
            if now >= current.rotation_due() {
                return Step::Stage;
            }
            until = until.min(current.rotation_due());
        }
    }
    // Compared as sets: the order of a bundle means nothing to a client.
    let stored: BTreeSet<&[u8]> = state.bundle.iter().map(|c| c.as_ref()).collect();
    let trusted = state.trusted(now);
    let wanted: BTreeSet<&[u8]> = match state.retire_after {
        Some(at) if now >= at => {
            let mut keep = BTreeSet::from([current.cert.as_ref()]);
            if let Some(Ok(next)) = &state.next {
                keep.insert(next.cert.as_ref());
            }
            keep
        }
        _ => trusted.iter().map(|c| c.as_ref()).collect(),
    };
    if stored != wanted {
        return Step::Prune;
    }
    if let Some(at) = state.retire_after {
        until = until.min(at);
    }
    // A bundle entry expiring is a change too.
    for cert in &state.bundle {
        if let Ok(facts) = pem::facts(cert) {
            until = until.min(facts.not_after);
        }
    }
    Step::Wait { until }
}

/// What a step writes into the Secret.
#[derive(Debug, Default)]
pub struct Contents {
    pub current: Option<Ca>,
    pub next: Option<Ca>,
    pub bundle: Vec<CertificateDer<'static>>,
    pub staged_at: Option<Timestamp>,
    pub retire_after: Option<Timestamp>,
}

impl Contents {
    /// The Secret's data and annotations set to these contents; everything else of `secret` (labels,
    /// owner references, other annotations) is left as it is.
    pub fn write_into(&self, secret: &mut Secret) {
        let data = secret.data.get_or_insert_with(BTreeMap::new);
        for key in [CA_CERT, TLS_CERT, TLS_KEY, NEXT_CERT, NEXT_KEY, BUNDLE] {
            data.remove(key);
        }
        if let Some(current) = &self.current {
            let cert = pem::encode(std::slice::from_ref(&current.cert)).into_bytes();
            data.insert(CA_CERT.into(), ByteString(cert.clone()));
            data.insert(TLS_CERT.into(), ByteString(cert));
            data.insert(TLS_KEY.into(), ByteString(current.key_pem.clone().into_bytes()));
        }
        if let Some(next) = &self.next {
            let cert = pem::encode(std::slice::from_ref(&next.cert)).into_bytes();
            data.insert(NEXT_CERT.into(), ByteString(cert));
            data.insert(NEXT_KEY.into(), ByteString(next.key_pem.clone().into_bytes()));
        }
        data.insert(BUNDLE.into(), ByteString(pem::encode(&self.bundle).into_bytes()));
        let annotations = secret.metadata.annotations.get_or_insert_with(BTreeMap::new);
        for (name, at) in [(STAGED_AT, self.staged_at), (RETIRE_AFTER, self.retire_after)] {
            match at {
                Some(at) => annotations.insert(name.into(), at.to_string()),
                None => annotations.remove(name),
            };
        }
        if secret.type_.is_none() {
            secret.type_ = Some("Opaque".into());
        }
    }
}

/// The contents a step leads to, from `state` (None: no Secret yet). `generate` makes a new CA when the
/// step needs one. None for [`Step::Wait`].
pub fn contents_after(
    step: &Step,
    state: Option<&CaState>,
    now: Timestamp,
    timing: &Timing,
) -> Result<Option<(Contents, bool)>, Error> {
    let usable = |ca: &Result<Ca, Error>| ca.as_ref().ok().filter(|ca| ca.facts.not_after > now).cloned();
    let current = state.and_then(|s| usable(&s.current));
    let next = state.and_then(|s| s.next.as_ref().and_then(usable));
    let trusted = state.map(|s| s.trusted(now)).unwrap_or_default();
    let with = |mut bundle: Vec<CertificateDer<'static>>, extra: &Ca| {
        bundle.push(extra.cert.clone());
        pem::unexpired_union(&bundle, now)
    };
    // The bool says whether a CA was generated (for the metric).
    Ok(Some(match step {
        Step::Create => {
            let ca = Ca::generate(now, timing.ca_lifetime)?;
            let bundle = vec![ca.cert.clone()];
            (
                Contents {
                    current: Some(ca),
                    bundle,
                    ..Contents::default()
                },
                true,
            )
        }
        Step::Replace => {
            // Clients that trust the old CAs keep trusting them until they expire or the grace ends;
            // the unusable current one goes at once (nothing can be signed with it).
            let ca = Ca::generate(now, timing.ca_lifetime)?;
            let bundle = with(trusted, &ca);
            (
                Contents {
                    current: Some(ca),
                    bundle,
                    retire_after: Some(pem::shift(now, pem::millis(timing.retire_grace))),
                    ..Contents::default()
                },
                true,
            )
        }
        Step::Stage => {
            let ca = Ca::generate(now, timing.ca_lifetime)?;
            let bundle = with(trusted, &ca);
            (
                Contents {
                    current,
                    next: Some(ca),
                    bundle,
                    staged_at: Some(now),
                    retire_after: state.and_then(|s| s.retire_after),
                },
                true,
            )
        }
        Step::DropNext => (
            Contents {
                current: current.clone(),
                bundle: current.map(|c| with(trusted, &c)).unwrap_or_default(),
                retire_after: state.and_then(|s| s.retire_after),
                ..Contents::default()
            },
            false,
        ),
        Step::Switch => (
            Contents {
                current: next,
                bundle: trusted,
                retire_after: Some(pem::shift(now, pem::millis(timing.retire_grace))),
                ..Contents::default()
            },
            false,
        ),
        Step::Prune => {
            let retired = state.and_then(|s| s.retire_after).is_some_and(|at| now >= at);
            let bundle = if retired {
                current.iter().chain(next.iter()).map(|c| c.cert.clone()).collect()
            } else {
                trusted
            };
            (
                Contents {
                    current,
                    next,
                    bundle,
                    staged_at: state.and_then(|s| s.staged_at),
                    retire_after: if retired {
                        None
                    } else {
                        state.and_then(|s| s.retire_after)
                    },
                },
                false,
            )
        }
        Step::Wait { .. } => return Ok(None),
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn secret_of(contents: &Contents) -> Secret {
        let mut secret = Secret::default();
        contents.write_into(&mut secret);
        secret
    }

    fn timing() -> Timing {
        Timing {
            ca_lifetime: Duration::from_secs(3000),
            leaf_lifetime: Duration::from_secs(300),
            propagation: Duration::from_secs(10),
            retire_grace: Duration::from_secs(60),
            check_every: Duration::from_secs(30),
        }
    }

    fn step_and_write(secret: &Secret, now: Timestamp, confirmed: bool) -> (Step, Secret) {
        let state = CaState::read(secret);
        let step = decide(Some(&state), now, &timing(), confirmed);
        let mut next = secret.clone();
        if let Some((contents, _)) = contents_after(&step, Some(&state), now, &timing()).unwrap() {
            contents.write_into(&mut next);
        }
        (step, next)
    }

    #[test]
    fn a_rotation_goes_through_its_three_phases() {
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        assert!(matches!(decide(None, t0, &timing(), true), Step::Create));
        let (contents, generated) = contents_after(&Step::Create, None, t0, &timing()).unwrap().unwrap();
        assert!(generated);
        let secret = secret_of(&contents);
        let a = CaState::read(&secret).current.unwrap();
        assert!(matches!(step_and_write(&secret, t0, true).0, Step::Wait { .. }));

        // Two thirds in: a successor is staged and trusted beside the current CA.
        let t1 = pem::shift(a.rotation_due(), 1000);
        let (step, secret) = step_and_write(&secret, t1, true);
        assert!(matches!(step, Step::Stage), "{step:?}");
        let staged = CaState::read(&secret);
        let b = staged.next.as_ref().unwrap().as_ref().unwrap().clone();
        assert_eq!(
            staged.current.as_ref().unwrap().cert,
            a.cert,
            "leaves still come from the old CA"
        );
        assert_eq!(staged.bundle, vec![a.cert.clone(), b.cert.clone()]);

        // Not before the bundle is confirmed and the propagation time has passed.
        assert!(matches!(
            step_and_write(&secret, pem::shift(t1, 20_000), false).0,
            Step::Wait { .. }
        ));
        assert!(matches!(
            step_and_write(&secret, pem::shift(t1, 5_000), true).0,
            Step::Wait { .. }
        ));
        let t2 = pem::shift(t1, 11_000);
        let (step, secret) = step_and_write(&secret, t2, true);
        assert!(matches!(step, Step::Switch), "{step:?}");
        let switched = CaState::read(&secret);
        assert_eq!(switched.current.as_ref().unwrap().cert, b.cert);
        assert!(switched.next.is_none());
        assert_eq!(
            switched.bundle,
            vec![a.cert.clone(), b.cert.clone()],
            "the old CA stays for the grace"
        );

        assert!(matches!(
            step_and_write(&secret, pem::shift(t2, 59_000), true).0,
            Step::Wait { .. }
        ));
        let (step, secret) = step_and_write(&secret, pem::shift(t2, 61_000), true);
        assert!(matches!(step, Step::Prune), "{step:?}");
        let pruned = CaState::read(&secret);
        assert_eq!(pruned.bundle, vec![b.cert.clone()]);
        assert!(pruned.retire_after.is_none());
        assert!(matches!(
            step_and_write(&secret, pem::shift(t2, 62_000), true).0,
            Step::Wait { .. }
        ));
    }

    #[test]
    fn an_unusable_current_ca_is_replaced_and_a_foreign_key_is_refused() {
        let now = Timestamp::now();
        let (contents, _) = contents_after(&Step::Create, None, now, &timing()).unwrap().unwrap();
        let mut secret = secret_of(&contents);
        let other = Ca::generate(now, Duration::from_secs(100)).unwrap();
        secret
            .data
            .as_mut()
            .unwrap()
            .insert(TLS_KEY.into(), ByteString(other.key_pem.clone().into_bytes()));
        let state = CaState::read(&secret);
        assert!(
            matches!(state.current, Err(Error::KeyMismatch { .. })),
            "{:?}",
            state.current
        );
        assert!(matches!(decide(Some(&state), now, &timing(), true), Step::Replace));

        let expired = Ca::generate(pem::shift(now, -10_000_000), Duration::from_secs(10)).unwrap();
        let secret = secret_of(&Contents {
            bundle: vec![expired.cert.clone()],
            current: Some(expired),
            ..Contents::default()
        });
        assert!(matches!(
            decide(Some(&CaState::read(&secret)), now, &timing(), true),
            Step::Replace
        ));
    }

    #[test]
    fn debug_never_shows_the_key() {
        let ca = Ca::generate(Timestamp::now(), Duration::from_secs(100)).unwrap();
        let shown = format!("{ca:?}");
        assert!(!shown.contains("PRIVATE"), "{shown}");
        assert!(shown.contains(&ca.facts.serial));
    }
}
