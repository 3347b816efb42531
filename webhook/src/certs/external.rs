//! Certificates supplied from outside (cert-manager, a mounted Secret): the certificate and key files
//! are read again every poll interval and served when their bytes change. Polling rather than inotify:
//! a Secret volume is updated by swapping a `..data` symlink, which inotify on the files never sees
//! (controller-runtime's certwatcher polls every 10 s for the same reason).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Where the files are and how often to look.
#[derive(Clone, Debug)]
pub struct Files {
    /// PEM: the serving certificate, then its chain.
    pub cert: PathBuf,
    /// PEM: its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    pub poll: Duration,
}

/// Why the files could not be served.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reading certificates from {path}")]
    Certificates {
        path: PathBuf,
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    #[error("{path} holds no certificate")]
    NoCertificate { path: PathBuf },
    #[error("reading the private key from {path}")]
    Key {
        path: PathBuf,
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    #[error("loading the private key from {path}")]
    LoadKey {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("the key in {key} does not belong to the certificate in {cert}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })
}

/// The files' bytes, to tell whether they changed.
pub fn snapshot(files: &Files) -> Result<(Vec<u8>, Vec<u8>), Error> {
    Ok((read(&files.cert)?, read(&files.key)?))
}

/// The certificate and key as rustls serves them, checked to belong together.
pub fn load(files: &Files, cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, Error> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| Error::Certificates {
            path: files.cert.clone(),
            source,
        })?;
    if chain.is_empty() {
        return Err(Error::NoCertificate {
            path: files.cert.clone(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|source| Error::Key {
        path: files.key.clone(),
        source,
    })?;
    let signing = rustls::crypto::ring::default_provider()
        .key_provider
        .load_private_key(key)
        .map_err(|source| Error::LoadKey {
            path: files.key.clone(),
            source,
        })?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|source| Error::Mismatch {
        cert: files.cert.clone(),
        key: files.key.clone(),
        source,
    })?;
    Ok(certified)
}
