//! PEM in and out, and the few facts read from a certificate.

use base64::Engine as _;
use jiff::Timestamp;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;

/// Why a certificate or a bundle could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading PEM certificates")]
    Pem(#[source] rustls_pki_types::pem::Error),
    #[error("parsing an X.509 certificate")]
    X509(#[source] x509_parser::nom::Err<x509_parser::error::X509Error>),
    #[error("the certificate's validity is out of range")]
    Validity,
}

/// Every certificate in a PEM text, in order.
pub fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, Error> {
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(Error::Pem)
}

/// Certificates as one PEM text (a bundle, as `caBundle` and `ca-bundle.crt` hold it).
pub fn encode(certs: &[CertificateDer<'_>]) -> String {
    let mut out = String::new();
    for cert in certs {
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        let text = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        for line in text.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(line));
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out
}

/// What the machinery needs to know of a certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    pub not_before: Timestamp,
    pub not_after: Timestamp,
    pub is_ca: bool,
    /// The serial number in hex: how logs name a CA (never its key).
    pub serial: String,
    /// The subject public key's bits, to check a stored key belongs to the certificate.
    pub public_key: Vec<u8>,
}

pub fn facts(der: &CertificateDer<'_>) -> Result<Facts, Error> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).map_err(Error::X509)?;
    let validity = cert.validity();
    let time = |t: x509_parser::time::ASN1Time| Timestamp::from_second(t.timestamp()).map_err(|_| Error::Validity);
    Ok(Facts {
        not_before: time(validity.not_before)?,
        not_after: time(validity.not_after)?,
        is_ca: cert.is_ca(),
        serial: cert.raw_serial_as_string().replace(':', ""),
        public_key: cert.public_key().subject_public_key.data.to_vec(),
    })
}

/// The certificates of `certs` still valid at `now`, each once (by DER), in their order: the union
/// cert-manager's cainjector keeps in a `caBundle`. Unreadable ones are dropped too.
pub fn unexpired_union<'a>(
    certs: impl IntoIterator<Item = &'a CertificateDer<'static>>,
    now: Timestamp,
) -> Vec<CertificateDer<'static>> {
    let mut out: Vec<CertificateDer<'static>> = Vec::new();
    for cert in certs {
        if out.iter().any(|kept| kept.as_ref() == cert.as_ref()) {
            continue;
        }
        if facts(cert).is_ok_and(|facts| facts.not_after > now) {
            out.push(cert.clone());
        }
    }
    out
}

/// `at` moved by `by` (negative: earlier), in milliseconds, saturating at the representable range.
pub fn shift(at: Timestamp, by_millis: i64) -> Timestamp {
    Timestamp::from_millisecond(at.as_millisecond().saturating_add(by_millis)).unwrap_or(if by_millis < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

/// A std duration in milliseconds, saturating.
pub fn millis(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A jiff timestamp as rcgen's time type.
pub fn offset_date_time(at: Timestamp) -> Result<time::OffsetDateTime, Error> {
    time::OffsetDateTime::from_unix_timestamp(at.as_second()).map_err(|_| Error::Validity)
}
