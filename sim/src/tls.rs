//! The cluster's PKI: a self-signed CA, the serving certificate for 127.0.0.1/localhost and an
//! admin client certificate, all made with rcgen; and the rustls server configuration that
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

/// The CN and O of the admin client certificate (O is the group, as Kubernetes reads it).
pub const ADMIN_USER: &str = "kube-sim-admin";
pub const ADMIN_GROUP: &str = "system:masters";

impl Pki {
    /// A fresh CA, serving certificate and admin client certificate.
    pub fn generate() -> Result<Self, TlsError> {
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
            client_key_pem: client_key.serialize_pem(),
        })
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
