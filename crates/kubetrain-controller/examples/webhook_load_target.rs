//! The admission webhook server alone, for load tests on loopback: HTTPS on `127.0.0.1:<port>` with a fresh
//! self-signed certificate, runtimes and JobSets read from the in-memory API server
//! (`kubetrain_test_support::FakeApiServer`) holding the built-in runtimes. Prints `listening <addr>` once it
//! accepts connections and serves until stdin closes.
//!
//! Used by `benches/webhook-slowloris.sh`:
//!
//! ```sh
//! cargo run --release -p kubetrain-controller --example webhook_load_target -- 9443
//! ```

use std::io::Read as _;
use std::net::SocketAddr;
use std::sync::Arc;

use kubetrain_controller::webhook::tls::{CERT_FILE, KEY_FILE, ReloadingCert};
use kubetrain_controller::webhook::{Admission, WebhookServer};
use kubetrain_test_support::FakeApiServer;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = std::env::args()
        .nth(1)
        .map(|p| p.parse())
        .transpose()?
        .unwrap_or(0);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = tempfile::tempdir()?;
    let pair = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])?;
    std::fs::write(certs.path().join(CERT_FILE), pair.cert.pem())?;
    std::fs::write(
        certs.path().join(KEY_FILE),
        pair.signing_key.serialize_pem(),
    )?;
    let cert = Arc::new(ReloadingCert::from_dir(certs.path(), provider.clone())?);

    let apiserver = FakeApiServer::start();
    for runtime in kubetrain_jobset::builtin::runtimes() {
        apiserver.insert(serde_json::to_value(runtime)?);
    }
    let admission = Admission::new(apiserver.client());
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let server = WebhookServer::bind(addr, cert, provider, admission).await?;
    println!("listening {}", server.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // Stdin closing (the load script ending) stops the server.
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        let _ = stop.send(());
    });
    server
        .serve(async {
            let _ = stopped.await;
        })
        .await;
    Ok(())
}
