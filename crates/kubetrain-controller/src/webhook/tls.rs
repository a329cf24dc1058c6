//! The webhook's serving certificate: PEM files in a directory (as cert-manager or controller-runtime lay
//! them out), picked up again when they change so that a rotated certificate needs no restart; or a pair
//! held in memory and replaced by the built-in certificate management ([`ReloadingCert::in_memory`],
//! [`crate::certs`]). [`TlsSettings`] are upstream's `tls` options (minimum version, cipher suites).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Where controller-runtime (and so upstream's Deployment) mounts the serving certificate.
pub const DEFAULT_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";
/// File name of the certificate chain inside the cert directory.
pub const CERT_FILE: &str = "tls.crt";
/// File name of the private key inside the cert directory.
pub const KEY_FILE: &str = "tls.key";

/// Why the serving certificate could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CertError {
    /// A file could not be read.
    #[error(
        "cannot read {path}: {source} (mount the webhook certificate Secret there, or set --webhook-cert-dir)"
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The certificate file holds no PEM `CERTIFICATE` block.
    #[error("{path}: no PEM certificate found")]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The file is not PEM or the key is not a PKCS#1, PKCS#8 or SEC1 private key.
    #[error("{path}: {message}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What the PEM parser said.
        message: String,
    },
    /// The key is of an unsupported type or does not belong to the certificate.
    #[error("{key} does not fit {cert}: {source}")]
    Key {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// The TLS library's reason.
        #[source]
        source: rustls::Error,
    },
}

/// A certificate/key pair on disk, served to TLS clients and reloaded when either file changes.
///
/// The files are checked (one `stat` each) at every handshake; a broken new pair is logged and the last good
/// one stays in use, so a half-written rotation never takes the webhook down.
pub struct ReloadingCert {
    /// `None`: held in memory, replaced with [`ReloadingCert::set_pem`].
    paths: Option<(PathBuf, PathBuf)>,
    provider: Arc<CryptoProvider>,
    current: RwLock<Option<Loaded>>,
}

struct Loaded {
    stamp: (Option<SystemTime>, Option<SystemTime>),
    key: Arc<CertifiedKey>,
}

impl ReloadingCert {
    /// Loads `tls.crt` and `tls.key` from `dir`; fails when they are missing, unreadable or do not match.
    pub fn from_dir(dir: &Path, provider: Arc<CryptoProvider>) -> Result<Self, CertError> {
        Self::from_files(dir.join(CERT_FILE), dir.join(KEY_FILE), provider)
    }

    /// Loads a certificate chain and its private key from two PEM files.
    pub fn from_files(
        cert_path: PathBuf,
        key_path: PathBuf,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, CertError> {
        let stamp = stamp(&cert_path, &key_path);
        let key = load(&cert_path, &key_path, &provider)?;
        Ok(Self {
            paths: Some((cert_path, key_path)),
            provider,
            current: RwLock::new(Some(Loaded { stamp, key })),
        })
    }

    /// A pair held in memory, empty until [`Self::set_pem`]: TLS handshakes fail until then (the operator
    /// stays not-ready meanwhile).
    pub fn in_memory(provider: Arc<CryptoProvider>) -> Self {
        Self {
            paths: None,
            provider,
            current: RwLock::new(None),
        }
    }

    /// Replaces the pair with PEM `cert` (chain) and `key`; later handshakes serve it, open connections keep
    /// theirs. On error the pair in use stays.
    ///
    /// # Errors
    ///
    /// [`CertError`] when the PEM does not parse or the key does not fit the certificate.
    pub fn set_pem(&self, cert: &[u8], key: &[u8]) -> Result<(), CertError> {
        let memory = Path::new("<memory>");
        let certified = certified_key(cert, memory, key, memory, &self.provider)?;
        let mut loaded = self.current.write().unwrap_or_else(|e| e.into_inner());
        *loaded = Some(Loaded {
            stamp: (None, None),
            key: certified,
        });
        Ok(())
    }

    /// The pair in use (reloading it first if its files changed since it was loaded); `None` while an
    /// in-memory pair has not been set.
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        let Some((cert_path, key_path)) = &self.paths else {
            let loaded = self.current.read().unwrap_or_else(|e| e.into_inner());
            return loaded.as_ref().map(|l| Arc::clone(&l.key));
        };
        let stamp = stamp(cert_path, key_path);
        {
            let loaded = self.current.read().unwrap_or_else(|e| e.into_inner());
            if let Some(loaded) = loaded.as_ref()
                && loaded.stamp == stamp
            {
                return Some(Arc::clone(&loaded.key));
            }
        }
        let mut guard = self.current.write().unwrap_or_else(|e| e.into_inner());
        let loaded = guard.as_mut()?;
        if loaded.stamp != stamp {
            // Remember the stamp even on failure so that a broken pair is reported once, not per handshake.
            loaded.stamp = stamp;
            match load(cert_path, key_path, &self.provider) {
                Ok(key) => {
                    tracing::info!(cert = %cert_path.display(), "reloaded the webhook serving certificate");
                    loaded.key = key;
                }
                Err(error) => {
                    tracing::warn!(%error, "new webhook certificate not usable; serving the previous one")
                }
            }
        }
        Some(Arc::clone(&loaded.key))
    }

    /// DER of the leaf certificate in use, if any.
    pub fn serving_leaf(&self) -> Option<Vec<u8>> {
        self.current()
            .and_then(|k| k.cert.first().map(|c| c.as_ref().to_vec()))
    }
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current()
    }
}

fn stamp(cert: &Path, key: &Path) -> (Option<SystemTime>, Option<SystemTime>) {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    (modified(cert), modified(key))
}

fn load(
    cert_path: &Path,
    key_path: &Path,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, CertError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| CertError::Read {
            path: path.to_owned(),
            source,
        })
    };
    let cert_pem = read(cert_path)?;
    let key_pem = read(key_path)?;
    certified_key(&cert_pem, cert_path, &key_pem, key_path, provider)
}

/// A certificate chain and key from PEM bytes (`cert_path`/`key_path` name them in errors).
fn certified_key(
    cert_pem: &[u8],
    cert_path: &Path,
    key_pem: &[u8],
    key_path: &Path,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, CertError> {
    let pem_error = |path: &Path, error: rustls::pki_types::pem::Error| CertError::Pem {
        path: path.to_owned(),
        message: error.to_string(),
    };
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(cert_path, e))?;
    if chain.is_empty() {
        return Err(CertError::NoCertificate {
            path: cert_path.to_owned(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| pem_error(key_path, e))?;
    let certified =
        CertifiedKey::from_der(chain, key, provider).map_err(|source| CertError::Key {
            cert: cert_path.to_owned(),
            key: key_path.to_owned(),
            source,
        })?;
    Ok(Arc::new(certified))
}

/// Upstream's `tls` options as the HTTPS servers apply them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// Serve TLS 1.3 only (`minVersion: "1.3"`); otherwise TLS 1.2 and 1.3 (rustls has no 1.0 or 1.1).
    pub tls13_only: bool,
    /// TLS 1.2 cipher suites allowed, by IANA name; empty for the provider's defaults. TLS 1.3 suites are
    /// always on, as in Go.
    pub cipher_suites: Vec<String>,
}

impl TlsSettings {
    /// The settings for `tls.minVersion` and `tls.cipherSuites` (unknown names are skipped: the
    /// configuration reader refuses them before this point).
    pub fn new(min_version: &str, cipher_suites: &[String]) -> Self {
        Self {
            tls13_only: min_version == "1.3",
            cipher_suites: cipher_suites.to_vec(),
        }
    }
}

/// The IANA name of a rustls cipher suite (rustls's `Debug` form, Go's spelling for TLS 1.3).
fn suite_name(suite: rustls::SupportedCipherSuite) -> String {
    format!("{:?}", suite.suite()).replacen("TLS13_", "TLS_", 1)
}

/// Whether `name` is a cipher suite this build can serve (IANA names, as Go's `tls.CipherSuiteName`).
pub(crate) fn cipher_suite_known(name: &str) -> bool {
    crate::default_crypto_provider().is_none_or(|provider| {
        provider
            .cipher_suites
            .iter()
            .any(|suite| suite_name(*suite) == name)
    })
}

/// A TLS server configuration (HTTP/1.1) that serves `cert`, using `provider` for all cryptography.
pub(crate) fn server_config(
    cert: Arc<ReloadingCert>,
    provider: Arc<CryptoProvider>,
) -> Result<rustls::ServerConfig, rustls::Error> {
    server_config_with(cert, provider, &TlsSettings::default())
}

/// [`server_config`] with upstream's `tls` options applied.
pub(crate) fn server_config_with(
    cert: Arc<ReloadingCert>,
    provider: Arc<CryptoProvider>,
    settings: &TlsSettings,
) -> Result<rustls::ServerConfig, rustls::Error> {
    let mut provider = (*provider).clone();
    if !settings.cipher_suites.is_empty() {
        provider.cipher_suites.retain(|suite| {
            suite.tls13().is_some() || settings.cipher_suites.contains(&suite_name(*suite))
        });
    }
    let builder = rustls::ServerConfig::builder_with_provider(Arc::new(provider));
    let builder = if settings.tls13_only {
        builder.with_protocol_versions(&[&rustls::version::TLS13])?
    } else {
        builder.with_safe_default_protocol_versions()?
    };
    let mut config = builder.with_no_client_auth().with_cert_resolver(cert);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider() -> Arc<CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    fn write_pair(dir: &Path, names: &[&str]) -> rcgen::CertifiedKey<rcgen::KeyPair> {
        let pair = rcgen::generate_simple_self_signed(
            names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        )
        .unwrap();
        std::fs::write(dir.join(CERT_FILE), pair.cert.pem()).unwrap();
        std::fs::write(dir.join(KEY_FILE), pair.signing_key.serialize_pem()).unwrap();
        pair
    }

    #[test]
    fn missing_files_name_the_path_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let error = ReloadingCert::from_dir(dir.path(), provider()).unwrap_err();
        let shown = error.to_string();
        assert!(shown.contains("tls.crt"), "{shown}");
        assert!(shown.contains("--webhook-cert-dir"), "{shown}");
    }

    #[test]
    fn garbage_and_mismatched_keys_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CERT_FILE), "not pem").unwrap();
        std::fs::write(dir.path().join(KEY_FILE), "not pem").unwrap();
        assert!(matches!(
            ReloadingCert::from_dir(dir.path(), provider()),
            Err(CertError::NoCertificate { .. })
        ));

        write_pair(dir.path(), &["a.example"]);
        let other = rcgen::KeyPair::generate().unwrap();
        std::fs::write(dir.path().join(KEY_FILE), other.serialize_pem()).unwrap();
        let error = ReloadingCert::from_dir(dir.path(), provider()).unwrap_err();
        assert!(matches!(error, CertError::Key { .. }), "{error}");
    }

    #[test]
    fn reloads_a_rotated_pair_and_keeps_the_old_one_when_the_new_is_broken() {
        let dir = tempfile::tempdir().unwrap();
        let first = write_pair(dir.path(), &["first.example"]);
        let cert = ReloadingCert::from_dir(dir.path(), provider()).unwrap();
        assert_eq!(
            cert.current().unwrap().cert[0].as_ref(),
            first.cert.der().as_ref()
        );

        // Some filesystems keep mtimes at one-second resolution: make the change visible.
        let later = SystemTime::now() + std::time::Duration::from_secs(5);
        let second = write_pair(dir.path(), &["second.example"]);
        for name in [CERT_FILE, KEY_FILE] {
            std::fs::File::options()
                .write(true)
                .open(dir.path().join(name))
                .unwrap()
                .set_modified(later)
                .unwrap();
        }
        assert_eq!(
            cert.current().unwrap().cert[0].as_ref(),
            second.cert.der().as_ref()
        );

        std::fs::write(dir.path().join(KEY_FILE), "broken").unwrap();
        let even_later = later + std::time::Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(dir.path().join(KEY_FILE))
            .unwrap()
            .set_modified(even_later)
            .unwrap();
        assert_eq!(
            cert.current().unwrap().cert[0].as_ref(),
            second.cert.der().as_ref()
        );
    }
}
