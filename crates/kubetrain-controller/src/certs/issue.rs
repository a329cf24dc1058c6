//! Making and checking the certificates: a self-signed CA and a serving certificate it signs, and the
//! checks that decide when either must be renewed.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::client::danger::ServerCertVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

/// The CA's common name (upstream's cert-controller `CAName`).
pub(crate) const CA_NAME: &str = "kubeflow-trainer-ca";
/// The CA's organization (upstream's `CAOrganization`).
pub(crate) const CA_ORGANIZATION: &str = "kubeflow-trainer";

/// How far back certificates start, for clocks that lag (as cert-controller: one hour).
const BACKDATE: Duration = Duration::from_secs(3600);

/// A PEM certificate and its PEM private key.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Pair {
    pub cert: String,
    pub key: String,
}

impl std::fmt::Debug for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pair").finish_non_exhaustive()
    }
}

/// A new self-signed CA valid for `validity`.
pub(crate) fn new_ca(validity: Duration) -> Result<Pair, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, CA_NAME);
    name.push(DnType::OrganizationName, CA_ORGANIZATION);
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    let now = SystemTime::now();
    params.not_before = (now - BACKDATE).into();
    params.not_after = (now + validity).into();
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok(Pair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A serving certificate for `names` (IP addresses become IP SANs), signed by `ca`, valid for `validity`.
pub(crate) fn new_serving(
    ca: &Pair,
    names: &[String],
    validity: Duration,
) -> Result<Pair, rcgen::Error> {
    let ca_key = KeyPair::from_pem(&ca.key)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert, ca_key)?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut name = DistinguishedName::new();
    name.push(
        DnType::CommonName,
        names.first().cloned().unwrap_or_default(),
    );
    params.distinguished_name = name;
    params.subject_alt_names = names
        .iter()
        .map(|n| match n.parse::<std::net::IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => n.clone().try_into().map(SanType::DnsName),
        })
        .collect::<Result<_, _>>()?;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let now = SystemTime::now();
    params.not_before = (now - BACKDATE).into();
    params.not_after = (now + validity).into();
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Pair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// When the first certificate of a PEM text expires, if it parses.
pub(crate) fn not_after(pem: &str) -> Option<SystemTime> {
    let der = leaf_der(pem)?;
    expiry(&der)
}

pub(crate) fn expiry(der: &[u8]) -> Option<SystemTime> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let seconds = u64::try_from(cert.validity().not_after.timestamp()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds))
}

/// Whether `ca` can sign (its key loads) and stays valid past `until`.
pub(crate) fn ca_usable(ca: &Pair, until: SystemTime) -> bool {
    let Ok(key) = KeyPair::from_pem(&ca.key) else {
        return false;
    };
    Issuer::from_ca_cert_pem(&ca.cert, key).is_ok()
        && not_after(&ca.cert).is_some_and(|t| t > until)
}

/// Whether `serving` chains to `ca_pem`, names `name`, fits its key and stays valid at `until`.
pub(crate) fn serving_valid(
    ca_pem: &str,
    serving: &Pair,
    name: &str,
    until: SystemTime,
    provider: &Arc<CryptoProvider>,
) -> bool {
    let verify = || -> Option<()> {
        let mut roots = rustls::RootCertStore::empty();
        for der in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(der.ok()?).ok()?;
        }
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .ok()?;
        let chain = CertificateDer::pem_slice_iter(serving.cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        let (leaf, intermediates) = chain.split_first()?;
        let server = ServerName::try_from(name.to_owned()).ok()?;
        let at = UnixTime::since_unix_epoch(until.duration_since(SystemTime::UNIX_EPOCH).ok()?);
        verifier
            .verify_server_cert(leaf, intermediates, &server, &[], at)
            .ok()?;
        // The key must belong to the certificate.
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(serving.key.as_bytes()).ok()?;
        rustls::sign::CertifiedKey::from_der(chain.clone(), key, provider).ok()?;
        Some(())
    };
    verify().is_some()
}

/// The certificates of a PEM bundle that are CAs named [`CA_NAME`] and still valid at `at`, as PEM blocks.
pub(crate) fn our_valid_cas(bundle: &str, at: SystemTime) -> Vec<String> {
    CertificateDer::pem_slice_iter(bundle.as_bytes())
        .filter_map(Result::ok)
        .filter_map(|der| {
            let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
            let ours = cert
                .subject()
                .iter_common_name()
                .any(|cn| cn.as_str().is_ok_and(|cn| cn == CA_NAME));
            let alive = expiry(der.as_ref()).is_some_and(|end| end > at);
            (ours && alive).then(|| pem_block(der.as_ref()))
        })
        .collect()
}

/// One DER certificate as a PEM block.
pub(crate) fn pem_block(der: &[u8]) -> String {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// The DER of the first certificate of a PEM text.
pub(crate) fn leaf_der(pem: &str) -> Option<Vec<u8>> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .ok()
        .map(|d| d.as_ref().to_vec())
}

/// The DNS names and IP addresses (as text) of a certificate's first block.
pub(crate) fn serving_names(serving: &Pair) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Some(der) = leaf_der(&serving.cert) else {
        return Vec::new();
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(&der) else {
        return Vec::new();
    };
    let Ok(Some(sans)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    sans.value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(dns) => Some((*dns).to_owned()),
            GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => <[u8; 4]>::try_from(*bytes)
                    .ok()
                    .map(|b| std::net::IpAddr::from(b).to_string()),
                16 => <[u8; 16]>::try_from(*bytes)
                    .ok()
                    .map(|b| std::net::IpAddr::from(b).to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}
