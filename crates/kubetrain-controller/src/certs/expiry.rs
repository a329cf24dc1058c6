//! The gauge `kubetrain_webhook_certificate_expiry_timestamp_seconds`: when the certificate the webhook
//! server serves right now expires, read from the served pair at each scrape. It follows every source of
//! that pair: the built-in certificates (after each rotation) and a certificate directory (cert-manager, or
//! a hand-made Secret: the files are re-read when they change), so one alert covers both modes.

use std::sync::Arc;
use std::time::SystemTime;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::webhook::tls::ReloadingCert;

/// Registers the expiry gauge of `cert` (the webhook and status servers' pair). No sample is exported
/// while no certificate is loaded (built-in certificates before the first one is served).
pub(crate) fn register_expiry_gauge(registry: &mut Registry, cert: Arc<ReloadingCert>) {
    registry.register_collector(Box::new(ExpiryGauge(cert)));
}

#[derive(Debug)]
struct ExpiryGauge(Arc<ReloadingCert>);

/// The serving certificate's `notAfter` in seconds since the Unix epoch, if a certificate is served and
/// parses.
fn served_expiry(cert: &ReloadingCert) -> Option<i64> {
    let der = cert.serving_leaf()?;
    let not_after = super::issue::expiry(&der)?;
    let seconds = not_after.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    i64::try_from(seconds.as_secs()).ok()
}

impl Collector for ExpiryGauge {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(expiry) = served_expiry(&self.0) else {
            return Ok(());
        };
        let gauge = ConstGauge::new(expiry);
        let metric = encoder.encode_descriptor(
            // The literal on its own line: scripts/check-chart.py reads registered names this way.
            "kubetrain_webhook_certificate_expiry_timestamp_seconds",
            "When the webhook serving certificate in use expires (notAfter), in seconds since the Unix epoch",
            None,
            gauge.metric_type(),
        )?;
        gauge.encode(metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPIRY_METRIC: &str = "kubetrain_webhook_certificate_expiry_timestamp_seconds";

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    /// A self-signed pair (PEM certificate, PEM key) that expires at `year`-01-01T00:00:00Z.
    fn pair_expiring(year: i32) -> (String, String) {
        let mut params = rcgen::CertificateParams::new(vec!["webhook.example".to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(year, 1, 1);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn scrape(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    fn sample(text: &str) -> Option<&str> {
        text.lines()
            .find(|line| line.starts_with(&format!("{EXPIRY_METRIC} ")))
            .and_then(|line| line.split(' ').nth(1))
    }

    #[test]
    fn the_gauge_follows_the_served_certificate() {
        let cert = Arc::new(ReloadingCert::in_memory(provider()));
        let mut registry = Registry::default();
        register_expiry_gauge(&mut registry, cert.clone());
        let text = scrape(&registry);
        assert!(
            !text.contains(EXPIRY_METRIC),
            "no certificate served yet, so no sample and no descriptor: {text}"
        );

        let (pem, key) = pair_expiring(2031);
        cert.set_pem(pem.as_bytes(), key.as_bytes()).unwrap();
        let text = scrape(&registry);
        assert!(
            text.contains(&format!("# TYPE {EXPIRY_METRIC} gauge")),
            "{text}"
        );
        // 2031-01-01T00:00:00Z
        assert_eq!(sample(&text), Some("1924992000"), "{text}");

        // A rotation: the next scrape reports the new certificate's expiry.
        let (pem, key) = pair_expiring(2032);
        cert.set_pem(pem.as_bytes(), key.as_bytes()).unwrap();
        assert_eq!(sample(&scrape(&registry)), Some("1956528000"));
    }

    #[test]
    fn a_certificate_directory_is_followed_when_its_files_change() {
        let dir = tempfile::tempdir().unwrap();
        // Each pair gets its own modification time (some filesystems keep mtimes at one-second resolution).
        let write = |year, modified: SystemTime| {
            let (pem, key) = pair_expiring(year);
            for (name, text) in [("tls.crt", pem), ("tls.key", key)] {
                let path = dir.path().join(name);
                std::fs::write(&path, text).unwrap();
                let file = std::fs::File::options().write(true).open(&path).unwrap();
                file.set_modified(modified).unwrap();
            }
        };
        let now = SystemTime::now();
        write(2031, now);
        let cert = Arc::new(ReloadingCert::from_dir(dir.path(), provider()).unwrap());
        let mut registry = Registry::default();
        register_expiry_gauge(&mut registry, cert);
        assert_eq!(sample(&scrape(&registry)), Some("1924992000"));
        // cert-manager renews the Secret: the files change (their modification time with them).
        write(2032, now + std::time::Duration::from_secs(5));
        let text = scrape(&registry);
        assert_eq!(sample(&text), Some("1956528000"), "{text}");
    }
}
