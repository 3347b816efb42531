//! The cluster's PKI: a self-signed CA, the API server's serving certificate (127.0.0.1,
//! localhost, the `kubernetes` Service's names and cluster IP), serving certificates for other
//! parts (kubelets) and an admin client certificate, all made with rcgen; and the rustls server configuration that
//! accepts (but does not require) client certificates signed by the CA.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Why the PKI or the TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("generating the {what} key or certificate")]
    Generate { what: &'static str, source: rcgen::Error },
    #[error("building the rustls server configuration")]
    ServerConfig(#[from] rustls::Error),
    #[error("building the client certificate verifier: {0}")]
    ClientVerifier(String),
    /// rcgen's PKCS#8 key did not have the shape of an EC key (it always should).
    #[error("rewriting the {what} key as SEC1: {reason}")]
    Sec1 { what: &'static str, reason: &'static str },
}

/// Certificates and keys, PEM-encoded, plus DER forms for rustls.
#[derive(Clone)]
pub struct Pki {
    pub ca_cert_pem: String,
    pub ca_cert_der: CertificateDer<'static>,
    /// The CA key, so other parts of the sim (webhook servers in tests, kubelets) can be issued
    /// certificates the cluster trusts.
    pub ca_key_pem: String,
    pub server_cert_der: CertificateDer<'static>,
    pub server_key_der: Vec<u8>,
    pub client_cert_pem: String,
    pub client_key_pem: String,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki").finish_non_exhaustive()
    }
}

/// Rewrites a PKCS#8 EC private key (what rcgen and ring produce) as a SEC1 `EC PRIVATE KEY` PEM,
/// the form Go's `x509.MarshalECPrivateKey` writes: `ECPrivateKey { version 1, privateKey,
/// [0] namedCurve, [1] publicKey }`. ring leaves the curve out of the inner ECPrivateKey (PKCS#8
/// carries it in the AlgorithmIdentifier), but a standalone SEC1 key must name it, so it is moved
/// in from there.
pub fn sec1_pem(pkcs8: &[u8]) -> Result<String, &'static str> {
    const SEQUENCE: u8 = 0x30;
    const INTEGER: u8 = 0x02;
    const OCTET_STRING: u8 = 0x04;
    const OID: u8 = 0x06;
    const PARAMETERS: u8 = 0xa0;
    const PUBLIC_KEY: u8 = 0xa1;
    const EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];

    let (info, _) = der_take(pkcs8, SEQUENCE)?;
    let (_version, rest) = der_take(info, INTEGER)?;
    let (algorithm, rest) = der_take(rest, SEQUENCE)?;
    let (ec_key, _) = der_take(rest, OCTET_STRING)?;
    let (algorithm_oid, params) = der_take(algorithm, OID)?;
    if algorithm_oid != EC_PUBLIC_KEY {
        return Err("not an EC key");
    }
    let (curve, _) = der_take(params, OID)?;

    let (inner, _) = der_take(ec_key, SEQUENCE)?;
    let (version, rest) = der_take(inner, INTEGER)?;
    if version != [1] {
        return Err("ECPrivateKey version is not 1");
    }
    let (secret, mut rest) = der_take(rest, OCTET_STRING)?;
    if rest.first() == Some(&PARAMETERS) {
        rest = der_take(rest, PARAMETERS)?.1;
    }
    let public_key = if rest.first() == Some(&PUBLIC_KEY) {
        Some(der_take(rest, PUBLIC_KEY)?.0)
    } else {
        None
    };

    let mut body = der_encode(INTEGER, &[1]);
    body.extend(der_encode(OCTET_STRING, secret));
    body.extend(der_encode(PARAMETERS, &der_encode(OID, curve)));
    if let Some(pk) = public_key {
        body.extend(der_encode(PUBLIC_KEY, pk));
    }
    let der = der_encode(SEQUENCE, &body);

    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN EC PRIVATE KEY-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END EC PRIVATE KEY-----\n");
    Ok(pem)
}

/// Reads one DER element with the expected tag: its contents and what follows it.
fn der_take(input: &[u8], tag: u8) -> Result<(&[u8], &[u8]), &'static str> {
    let (&actual, rest) = input.split_first().ok_or("truncated DER")?;
    if actual != tag {
        return Err("unexpected DER tag");
    }
    let (&first, rest) = rest.split_first().ok_or("truncated DER")?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return Err("bad DER length");
        }
        let len = rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return Err("truncated DER");
    }
    Ok(rest.split_at(len))
}

fn der_encode(tag: u8, contents: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = contents.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len.to_be_bytes().into_iter().skip_while(|b| *b == 0).collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(contents);
    out
}

/// The CN and O of the admin client certificate (O is the group, as Kubernetes reads it).
pub const ADMIN_USER: &str = "kube-sim-admin";
pub const ADMIN_GROUP: &str = "system:masters";

impl Pki {
    /// A fresh CA, serving certificate and admin client certificate.
    pub fn generate() -> Result<Self, TlsError> {
        Self::generate_with_ips(&[])
    }

    /// Like [`Pki::generate`], the serving certificate also naming `ips` (the `kubernetes`
    /// Service's cluster IP, as kube-apiserver's certificate does).
    pub fn generate_with_ips(ips: &[std::net::IpAddr]) -> Result<Self, TlsError> {
        let gen_err = |what| move |source| TlsError::Generate { what, source };
        let ca_key = KeyPair::generate().map_err(gen_err("CA"))?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(gen_err("CA"))?;
        ca_params.distinguished_name.push(DnType::CommonName, "kube-sim-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key).map_err(gen_err("CA"))?;
        let ca_key_pem = ca_key.serialize_pem();
        let issuer = Issuer::new(ca_params, ca_key);

        let server_key = KeyPair::generate().map_err(gen_err("serving"))?;
        let sans: Vec<String> = [
            "localhost",
            "127.0.0.1",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(ips.iter().map(|ip| ip.to_string()))
        .collect();
        let mut server_params = CertificateParams::new(sans).map_err(gen_err("serving"))?;
        server_params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_cert = server_params
            .signed_by(&server_key, &issuer)
            .map_err(gen_err("serving"))?;

        let client_key = KeyPair::generate().map_err(gen_err("client"))?;
        let mut client_params = CertificateParams::new(Vec::<String>::new()).map_err(gen_err("client"))?;
        client_params.distinguished_name.push(DnType::CommonName, ADMIN_USER);
        client_params
            .distinguished_name
            .push(DnType::OrganizationName, ADMIN_GROUP);
        client_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_cert = client_params
            .signed_by(&client_key, &issuer)
            .map_err(gen_err("client"))?;

        Ok(Self {
            ca_cert_pem: ca_cert.pem(),
            ca_cert_der: ca_cert.der().clone(),
            ca_key_pem,
            server_cert_der: server_cert.der().clone(),
            server_key_der: server_key.serialize_der(),
            client_cert_pem: client_cert.pem(),
            // kubeadm writes ECDSA client keys as SEC1 (`EC PRIVATE KEY`); fabric8 (Spark's
            // spark-submit) reads only that form, not PKCS#8.
            client_key_pem: sec1_pem(&client_key.serialize_der())
                .map_err(|reason| TlsError::Sec1 { what: "client", reason })?,
        })
    }

    /// A serving certificate signed by the cluster CA for `common_name` with `sans` (DNS names
    /// or IP addresses): the certificate and its PKCS#8 key, DER.
    pub fn issue_serving_cert(
        &self,
        common_name: &str,
        sans: &[String],
    ) -> Result<(CertificateDer<'static>, Vec<u8>), TlsError> {
        let gen_err = |source| TlsError::Generate {
            what: "serving",
            source,
        };
        let ca_key = KeyPair::from_pem(&self.ca_key_pem).map_err(gen_err)?;
        // The issuer is the CA's name and key; the same parameters as in `generate`.
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(gen_err)?;
        ca_params.distinguished_name.push(DnType::CommonName, "kube-sim-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().map_err(gen_err)?;
        let mut params = CertificateParams::new(sans.to_vec()).map_err(gen_err)?;
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &issuer).map_err(gen_err)?;
        Ok((cert.der().clone(), key.serialize_der()))
    }

    /// A rustls server configuration (HTTP/2 and HTTP/1.1, no client certificates) for a
    /// certificate from [`Pki::issue_serving_cert`].
    pub fn plain_server_config(
        cert: CertificateDer<'static>,
        key: Vec<u8>,
    ) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key));
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// The rustls configuration of the API server: HTTP/2 and HTTP/1.1 by ALPN, client
    /// certificates optional (bearer tokens are the other way in).
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_cert_der.clone())?;
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .allow_unauthenticated()
            .build()
            .map_err(|e| TlsError::ClientVerifier(e.to_string()))?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key_der.clone()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![self.server_cert_der.clone()], key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// Accepts any server certificate but still checks the handshake signatures, as Go's
/// `InsecureSkipVerify` does.
#[derive(Debug)]
struct SkipVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for SkipVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls_pki_types::CertificateDer<'_>,
        _intermediates: &[rustls_pki_types::CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The client TLS configuration of everything in the sim that connects to a workload without verifying
/// its certificate, as Go's `InsecureSkipVerify`: the API server's proxy (kube-apiserver without
/// `--kubelet-certificate-authority`) and the kubelet's HTTPS probes. HTTP/1.1 only, no client
/// certificate; built once.
pub(crate) fn skip_verify_client_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: std::sync::OnceLock<Result<Arc<rustls::ClientConfig>, String>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("tls: {e}"))?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(SkipVerify(provider)))
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(Arc::new(config))
        })
        .clone()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use rustls::client::danger::ServerCertVerifier as _;
    use rustls_pki_types::pem::PemObject as _;

    #[test]
    fn client_key_is_sec1_with_its_curve_and_still_signs() {
        let pki = Pki::generate().unwrap();
        assert!(pki.client_key_pem.starts_with("-----BEGIN EC PRIVATE KEY-----\n"));
        let key = PrivateKeyDer::from_pem_slice(pki.client_key_pem.as_bytes()).unwrap();
        let PrivateKeyDer::Sec1(sec1) = &key else {
            panic!("not SEC1: {key:?}");
        };
        // [0] { OID prime256v1 }: a standalone SEC1 key names its curve (Go and BouncyCastle need it).
        let p256 = [0xa0, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
        assert!(sec1.secret_sec1_der().windows(p256.len()).any(|w| w == p256));
        // rustls (kube-rs) loads it as an ECDSA signing key.
        rustls::crypto::ring::sign::any_ecdsa_type(&key).unwrap();
    }

    #[test]
    fn serving_certificates_name_their_ips_and_chain_to_the_ca() {
        let ip: std::net::IpAddr = "127.5.0.1".parse().unwrap();
        let pki = Pki::generate_with_ips(&[ip]).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(pki.ca_cert_der.clone()).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let now = rustls_pki_types::UnixTime::now();
        let name = |s: &str| rustls_pki_types::ServerName::try_from(s.to_string()).unwrap();
        verifier
            .verify_server_cert(&pki.server_cert_der, &[], &name("127.5.0.1"), &[], now)
            .unwrap();
        verifier
            .verify_server_cert(&pki.server_cert_der, &[], &name("kubernetes.default.svc"), &[], now)
            .unwrap();
        let (cert, key) = pki
            .issue_serving_cert("sim-node-1", &["sim-node-1".into(), "127.5.64.1".into()])
            .unwrap();
        verifier
            .verify_server_cert(&cert, &[], &name("127.5.64.1"), &[], now)
            .unwrap();
        assert!(
            verifier
                .verify_server_cert(&cert, &[], &name("127.5.64.2"), &[], now)
                .is_err()
        );
        Pki::plain_server_config(cert, key).unwrap();
    }

    #[test]
    fn sec1_refuses_what_is_not_a_pkcs8_ec_key() {
        assert!(sec1_pem(&[]).is_err());
        assert!(sec1_pem(&[0x30, 0x05, 0x02, 0x01, 0x00]).is_err());
        let ed = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        assert_eq!(sec1_pem(&ed.serialize_der()), Err("not an EC key"));
    }
}
