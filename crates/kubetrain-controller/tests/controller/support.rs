//! Helpers the modules share: a self-signed TLS setup for the loopback servers, the fake API server's request
//! log as lines, and waiting on a condition (the built-in runtimes and TrainJob fixtures come from
//! kubetrain-test-support).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubetrain_controller::webhook::tls::{CERT_FILE, KEY_FILE, ReloadingCert};
use kubetrain_test_support::FakeApiServer;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// A self-signed certificate for `localhost` in a temporary directory (as cert-manager would mount it), the
/// server's reloading view of it, and a client that trusts it.
pub struct Tls {
    /// The ring provider both sides use.
    pub provider: Arc<CryptoProvider>,
    /// The server's certificate, read from the directory.
    pub cert: Arc<ReloadingCert>,
    /// A client trusting only this certificate.
    pub connector: TlsConnector,
    _dir: tempfile::TempDir,
}

impl Tls {
    /// A fresh certificate and key.
    pub fn self_signed() -> Self {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let dir = tempfile::tempdir().unwrap();
        let pair = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(dir.path().join(CERT_FILE), pair.cert.pem()).unwrap();
        std::fs::write(dir.path().join(KEY_FILE), pair.signing_key.serialize_pem()).unwrap();
        let cert = Arc::new(ReloadingCert::from_dir(dir.path(), provider.clone()).unwrap());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(pair.cert.der().clone()).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        Self {
            provider,
            cert,
            connector: TlsConnector::from(Arc::new(config)),
            _dir: dir,
        }
    }

    /// A TLS connection to `addr`, checked against the certificate; gives up after `patience`.
    pub async fn connect(&self, addr: SocketAddr, patience: Duration) -> TlsStream<TcpStream> {
        let tcp = TcpStream::connect(addr).await.unwrap();
        tokio::time::timeout(
            patience,
            self.connector
                .connect(ServerName::try_from("localhost").unwrap(), tcp),
        )
        .await
        .expect("TLS handshake in time")
        .expect("TLS handshake with the server's self-signed certificate")
    }
}

/// The requests `server` recorded since the last call, as `METHOD uri` lines (see
/// `FakeApiServer::record_requests`): a test checks the requests of each step in turn.
pub fn sent(server: &FakeApiServer) -> Vec<String> {
    server
        .take_requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.uri))
        .collect()
}

/// Polls `done` until it holds; fails naming `what` after `timeout`. For conditions only visible by
/// polling (counters of a running controller), never as a sleep.
pub async fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `n` clients that each open a TLS connection to `addr`, send a request head one byte every `every` that
/// never ends, and reconnect as soon as the server closes the connection (the slow-head attack of issue
/// 39). They stop when this is dropped.
pub struct Tricklers {
    _clients: tokio::task::JoinSet<()>,
    opened: Arc<std::sync::atomic::AtomicUsize>,
}

impl Tricklers {
    /// Starts the clients.
    pub fn start(tls: &Tls, addr: SocketAddr, n: usize, every: Duration) -> Self {
        let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut clients = tokio::task::JoinSet::new();
        for _ in 0..n {
            let connector = tls.connector.clone();
            let opened = opened.clone();
            clients.spawn(async move {
                loop {
                    trickle_once(&connector, addr, every, &opened).await;
                }
            });
        }
        Self {
            _clients: clients,
            opened,
        }
    }

    /// Connections whose TLS handshake succeeded so far.
    pub fn opened(&self) -> usize {
        self.opened.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// One connection of [`Tricklers`], until the server closes it.
async fn trickle_once(
    connector: &TlsConnector,
    addr: SocketAddr,
    every: Duration,
    opened: &std::sync::atomic::AtomicUsize,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(tcp) = TcpStream::connect(addr).await else {
        tokio::time::sleep(every).await;
        return;
    };
    let name = ServerName::try_from("localhost").unwrap();
    let Ok(mut tls) = connector.connect(name, tcp).await else {
        return;
    };
    opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let head = b"POST /validate HTTP/1.1\r\nHost: localhost\r\nX-Slow: ";
    let mut buf = [0u8; 64];
    for i in 0.. {
        let byte = head.get(i).copied().unwrap_or(b'a');
        if tls.write_all(&[byte]).await.is_err() || tls.flush().await.is_err() {
            return;
        }
        tokio::select! {
            _ = tls.read(&mut buf) => return, // closed (or answered): reconnect
            () = tokio::time::sleep(every) => {}
        }
    }
}
