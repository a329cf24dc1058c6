//! The whole operator in one call: [`Operator`] runs leader election, the TrainJob, OptimizationJob and runtime
//! controllers, the admission webhooks, the TrainJob status server and the probe/metrics endpoints side by
//! side, and stops them together (servers drain, the leader releases its Lease) on SIGTERM, Ctrl-C or a future
//! of the caller's choosing.
//!
//! `kubetrain-operator` is flag parsing plus [`Operator::run`]; a custom operator builds the same thing with
//! its own settings, metrics, shutdown signal or render plugins ([`Operator::plugin`]; writing one:
//! [docs/plugins.md](https://github.com/kubetrain/kubetrain/blob/main/docs/plugins.md)).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use kubetrain_test_support::FakeApiServer;
//! use kubetrain_controller::{Operator, Settings};
//!
//! let server = FakeApiServer::start();
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let operator = Operator::new(Settings::default())
//!     // Port 0: any free port; `Running` reports the one bound.
//!     .endpoints("127.0.0.1:0".parse().unwrap(), "127.0.0.1:0".parse().unwrap())
//!     .shutdown_on(async move { let _ = stopped.await; });
//! let running = operator.start(server.client()).await.unwrap();
//! assert_eq!(running.endpoint_addrs().len(), 1);
//! assert!(running.webhook_addr().is_none());
//!
//! stop.send(()).unwrap();
//! running.wait().await.unwrap();
//! # }
//! ```

use std::future::Future;
use std::net::{Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use kube::Client;
use kubetrain_jobset::plugins::RenderPlugin;
use kubetrain_merge::plugins::DuplicatePlugin;
use prometheus_client::registry::Registry;
use rustls::crypto::CryptoProvider;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::election::{ElectionConfig, ElectionError, LeaderElector, register_leader_gauge};
use crate::http::{Endpoints, Health};
use crate::status_server::{StatusMetrics, StatusServer, StatusServerError};
use crate::webhook::tls::{CertError, ReloadingCert};
use crate::webhook::{Admission, RuntimeCache, WebhookError, WebhookMetrics, WebhookServer};
use crate::{ControllerMetrics, Leadership, Settings};

/// Why the operator could not start, or what stopped it.
///
/// Every message names the setting to change (as a `kubetrain-operator` flag where there is one).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorError {
    /// The leader election settings are unsafe or incomplete.
    #[error(transparent)]
    Election(#[from] ElectionError),
    /// The webhook serving certificate could not be loaded.
    #[error(transparent)]
    Certificate(#[from] CertError),
    /// Settings that contradict each other.
    #[error("{0}")]
    Config(String),
    /// Two plugins given to [`Operator::plugin`] (or one and a built-in) share a name.
    #[error("Operator::plugin: {0}")]
    Plugin(#[from] DuplicatePlugin),
    /// `--trainjob-status`: the status server's CA certificate could not be read.
    #[error(
        "--trainjob-status: cannot read the status server's CA certificate {path}: {source} (set --status-server-ca-file)"
    )]
    StatusCa {
        /// The CA file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The first request to the API server failed.
    #[error("cannot reach the Kubernetes API server: {0}")]
    ApiServer(#[source] kube::Error),
    /// The webhook server could not start.
    #[error(transparent)]
    Webhook(#[from] WebhookError),
    /// The status server could not start.
    #[error(transparent)]
    StatusServer(#[from] StatusServerError),
    /// A probe/metrics address could not be bound.
    #[error("{0}")]
    Endpoints(#[source] std::io::Error),
    /// The TrainJob controller failed to start or stopped with an error.
    #[error("the TrainJob controller stopped: {0}")]
    Controller(#[from] crate::Error),
    /// A part of the operator panicked.
    #[error("a task of the operator failed: {0}")]
    Task(String),
}

/// Where trainer pods reach the status server (upstream's `TrainJobStatus` feature gate).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusServerSettings {
    /// The Service in front of the status server, in the pods' status URL.
    pub service: String,
    /// The Service's namespace; `None` uses the election namespace, else the client's default namespace.
    pub namespace: Option<String>,
    /// CA certificate copied into each TrainJob's `<job>-tls-config`, read once at start-up. `None`: with
    /// built-in certificates ([`Operator::webhooks_with_cert_management`]) the certificate Secret's `ca.crt`,
    /// followed as it is renewed (upstream reads that Secret at every build); otherwise `ca.crt` of the
    /// webhook certificate directory, as cert-manager's Secret holds it.
    pub ca_file: Option<PathBuf>,
}

/// The shutdown trigger: SIGTERM or Ctrl-C unless the caller gives another.
type Shutdown = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A builder for the operator's parts; [`Operator::run`] (or [`Operator::start`]) runs them.
///
/// Defaults: no leader election (this replica writes), no webhooks and so no status server, no probe/metrics
/// endpoints, ring for TLS, stop on SIGTERM or Ctrl-C. The fallible steps that need no cluster (election
/// timings, loading the certificate) fail in the builder, before anything talks to the API server.
pub struct Operator {
    settings: Settings,
    election: Option<ElectionConfig>,
    /// Port, certificate directory, the loaded certificate and the provider it was loaded with.
    webhooks: Option<(u16, PathBuf, Arc<ReloadingCert>, Arc<CryptoProvider>)>,
    status_port: u16,
    trainjob_status: Option<StatusServerSettings>,
    endpoints: Vec<SocketAddr>,
    registry: Registry,
    /// The embedder's render plugins, run after the built-ins in registration order.
    plugins: Vec<Arc<dyn RenderPlugin>>,
    provider: Option<Arc<CryptoProvider>>,
    shutdown: Option<Shutdown>,
    /// Built-in certificates, TLS options, the webhook host and HTTPS metrics.
    serving: crate::certs::Serving,
    /// The training policy's source and the audit log of the admission webhooks (issue 40).
    admission: crate::webhook::AdmissionSetup,
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator")
            .field("settings", &self.settings)
            .field("election", &self.election)
            .field("webhook_port", &self.webhooks.as_ref().map(|w| w.0))
            .field("status_port", &self.status_port)
            .field("trainjob_status", &self.trainjob_status)
            .field("endpoints", &self.endpoints)
            .field(
                "plugins",
                &self.plugins.iter().map(|p| p.name()).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Operator {
    /// An operator running the TrainJob controller (and the runtime controllers) with `settings`.
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            election: None,
            webhooks: None,
            status_port: crate::status_server::DEFAULT_PORT,
            trainjob_status: None,
            endpoints: Vec::new(),
            registry: Registry::default(),
            plugins: Vec::new(),
            provider: crate::default_crypto_provider(),
            shutdown: None,
            serving: crate::certs::Serving::default(),
            admission: crate::webhook::AdmissionSetup::default(),
        }
    }

    /// Serves the admission webhooks on `port` with built-in certificates (upstream's
    /// `certManagement.enable`): see [`crate::certs`]. The replica is not ready until it serves the
    /// Secret's current certificate. This also enables the status server.
    ///
    /// # Errors
    ///
    /// [`OperatorError::Config`] without a rustls crypto provider.
    pub fn webhooks_with_cert_management(
        mut self,
        port: u16,
        certs: crate::certs::CertManagement,
    ) -> Result<Self, OperatorError> {
        let provider = self.provider.clone().ok_or_else(|| {
            OperatorError::Config("no rustls crypto provider for the webhook server".into())
        })?;
        let cert = Arc::new(ReloadingCert::in_memory(provider.clone()));
        self.webhooks = Some((port, PathBuf::new(), cert, provider));
        self.serving.cert_management = Some(certs);
        Ok(self)
    }

    /// Binds the webhook server to `host` only (upstream's `webhook.host`; default all interfaces).
    pub fn webhook_host(mut self, host: std::net::IpAddr) -> Self {
        self.serving.webhook_host = Some(host);
        self
    }

    /// Upstream's `tls` options for the webhook and metrics servers.
    pub fn tls_settings(mut self, tls: crate::webhook::tls::TlsSettings) -> Self {
        self.serving.tls = tls;
        self
    }

    /// Serves the metrics address over HTTPS (upstream's `metrics.secureServing`) with a self-signed
    /// certificate; with `auth`, `/metrics` only for tokens RBAC allows ([`crate::metrics_auth`]).
    pub fn secure_metrics(mut self, auth: bool) -> Self {
        self.serving.secure_metrics = Some(auth);
        self
    }

    /// TLS cryptography of the webhook and status servers (default: [`crate::default_crypto_provider`]).
    /// Call before [`Self::webhooks`].
    pub fn crypto_provider(mut self, provider: Arc<CryptoProvider>) -> Self {
        self.provider = Some(provider);
        self
    }

    /// Elects a leader with `config`'s Lease; only the leader writes. An empty `config.namespace` means the
    /// client's default namespace (the service account's in a pod).
    ///
    /// # Errors
    ///
    /// [`OperatorError::Election`] when the timings cannot hand over safely or the identity is empty.
    pub fn leader_election(mut self, config: ElectionConfig) -> Result<Self, OperatorError> {
        config.validate()?;
        self.election = Some(config);
        Ok(self)
    }

    /// Serves the admission webhooks over HTTPS on `port` (all interfaces) with the certificate in `cert_dir`
    /// (`tls.crt`, `tls.key`; reloaded when they change). This also enables the status server.
    ///
    /// # Errors
    ///
    /// [`OperatorError::Certificate`] when the certificate cannot be loaded (read at once, so a missing
    /// Secret mount is reported before the cluster is contacted).
    pub fn webhooks(mut self, port: u16, cert_dir: &Path) -> Result<Self, OperatorError> {
        let provider = self.provider.clone().ok_or_else(|| {
            OperatorError::Config(
                "no rustls crypto provider for the webhook server: enable kubetrain-controller's ring or aws-lc-rs feature, or call Operator::crypto_provider".into(),
            )
        })?;
        let cert = ReloadingCert::from_dir(cert_dir, provider.clone())?;
        self.webhooks = Some((port, cert_dir.to_owned(), Arc::new(cert), provider));
        Ok(self)
    }

    /// Port of the TrainJob status server (default [`crate::status_server::DEFAULT_PORT`]; 0 = off). It serves
    /// the webhook certificate, so it runs only with [`Self::webhooks`].
    pub fn status_server_port(mut self, port: u16) -> Self {
        self.status_port = port;
        self
    }

    /// Gives trainer pods the status server's URL, CA and a token (needs the status server).
    pub fn trainjob_status(mut self, status: StatusServerSettings) -> Self {
        self.trainjob_status = Some(status);
        self
    }

    /// Serves `/healthz`, `/readyz` and `/metrics` on `metrics`, and again on `probes` when it differs.
    pub fn endpoints(mut self, metrics: SocketAddr, probes: SocketAddr) -> Self {
        self.endpoints = vec![metrics];
        if probes != metrics {
            self.endpoints.push(probes);
        }
        self
    }

    /// Starts from `registry` (with the embedder's own metrics); the operator adds its metrics to it.
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = registry;
        self
    }

    /// Registers a render plugin: the controller runs it after the built-ins (and after the plugins registered
    /// before it) in every phase of every render, and the admission webhook runs its
    /// [`CustomValidation`](kubetrain_merge::plugins::CustomValidation) on TrainJobs. Objects its
    /// [`ComponentBuilder`](kubetrain_jobset::plugins::ComponentBuilder) returns are applied like the
    /// built-in companions, so the operator's ClusterRole must allow their kinds (docs/plugins.md).
    ///
    /// A name already taken (by a built-in or an earlier plugin) makes [`Self::start`] fail with
    /// [`OperatorError::Plugin`] before the cluster is contacted.
    pub fn plugin(mut self, plugin: impl RenderPlugin + 'static) -> Self {
        self.plugins.push(Arc::new(plugin));
        self
    }

    /// Where the webhooks read the training policy from (default: the ConfigMap
    /// `kubetrain-training-policy` in the operator's namespace, watched; docs/training-policy.md).
    pub fn training_policy(mut self, source: crate::webhook::TrainingPolicySource) -> Self {
        self.admission.policy = source;
        self
    }

    /// Writes an audit line for every TrainJob submission, admission decision, runtime change and Secret
    /// reference the webhooks review ([`crate::audit`]).
    pub fn audit_log(mut self, log: crate::audit::AuditLog) -> Self {
        self.admission.audit_log = Some(Arc::new(log));
        self
    }

    /// Whether every admitted TrainJob gets a `TrainJobSubmitted` event. Off by default: the event is kept
    /// only for TrainJobs whose pods reference Secrets, so a TrainJob costs no more API writes than upstream's;
    /// denials, runtime changes and audit lines are the same either way.
    pub fn submission_events(mut self, on: bool) -> Self {
        self.admission.all_submission_events = on;
        self
    }

    /// Stops when `signal` completes instead of on SIGTERM or Ctrl-C.
    pub fn shutdown_on(mut self, signal: impl Future<Output = ()> + Send + 'static) -> Self {
        self.shutdown = Some(Box::pin(signal));
        self
    }

    /// Runs every part until shutdown or until the TrainJob controller stops; then stops the rest and waits
    /// for it. Returns the first error.
    ///
    /// # Errors
    ///
    /// See [`OperatorError`]: start-up failures, or what stopped the controller.
    pub async fn run(self, client: Client) -> Result<(), OperatorError> {
        self.start(client).await?.wait().await
    }

    /// The TrainJobStatus render options, when asked for and the webhooks (hence the status server) are on.
    /// With built-in certificates their CA is shared with the certificate management, which keeps it current.
    fn trainjob_status_options(
        &mut self,
        client: &Client,
        status_port: u16,
    ) -> Result<Option<kubetrain_jobset::TrainJobStatusOptions>, OperatorError> {
        let (Some(status), Some((_, cert_dir, ..))) = (self.trainjob_status.take(), &self.webhooks)
        else {
            return Ok(None);
        };
        let namespace = status
            .namespace
            .clone()
            .or_else(|| self.election.as_ref().map(|c| c.namespace.clone()))
            .filter(|namespace| !namespace.is_empty())
            .unwrap_or_else(|| client.default_namespace().to_owned());
        let built_in_certs = self.serving.cert_management.is_some();
        let options = trainjob_status(status, namespace, cert_dir, status_port, built_in_certs)?;
        if built_in_certs {
            self.serving.status_ca = Some(options.ca_cert.clone());
        }
        Ok(Some(options))
    }

    /// Checks the API server, binds every server and spawns every part; [`Running::wait`] waits for the end.
    ///
    /// # Errors
    ///
    /// [`OperatorError`] when a setting is contradictory, the API server cannot be reached or a port cannot be
    /// bound.
    pub async fn start(mut self, client: Client) -> Result<Running, OperatorError> {
        let tls = self
            .webhooks
            .as_ref()
            .map(|(_, _, cert, provider)| (cert.clone(), provider.clone()));
        // The status server serves the webhook certificate, so it runs only with the webhooks.
        let status_port = if tls.is_some() { self.status_port } else { 0 };
        let (settings, plugins) = self.controller_settings(&client, status_port)?;
        let version = client
            .apiserver_version()
            .await
            .map_err(OperatorError::ApiServer)?;
        tracing::info!(
            server = %format!("{}.{}", version.major, version.minor),
            namespace = settings.namespace.as_deref().unwrap_or("<all>"),
            "connected to the API server"
        );

        let mut launch = Launch {
            client,
            stop: Stop(watch::channel(false).0),
            tasks: JoinSet::new(),
            health: Health::new(),
        };
        let signal = self
            .shutdown
            .take()
            .unwrap_or_else(|| Box::pin(shutdown_signal()));
        launch.tasks.spawn(launch.stop.on(signal));

        let mut registry = std::mem::take(&mut self.registry);
        let metrics = ControllerMetrics::register(&mut registry);
        let webhook_metrics = WebhookMetrics::register(&mut registry);
        let status_metrics = StatusMetrics::register(&mut registry);
        let optimization_metrics =
            crate::optimization::OptimizationMetrics::register(&mut registry);
        // The training policy ConfigMap lives in the operator's namespace (the election's, else the client's).
        let own_namespace = self
            .election
            .as_ref()
            .map(|c| c.namespace.clone())
            .filter(|namespace| !namespace.is_empty())
            .unwrap_or_else(|| launch.client.default_namespace().to_owned());
        let leadership = start_leadership(self.election.take(), &mut launch);
        register_leader_gauge(&mut registry, leadership.clone());
        if let Some((_, _, cert, _)) = &self.webhooks {
            crate::certs::register_expiry_gauge(&mut registry, cert.clone());
        }
        let registry = Arc::new(registry);

        let webhook_addr = self
            .start_webhooks(
                &mut launch,
                &settings,
                webhook_metrics,
                &plugins,
                &leadership,
                &own_namespace,
            )
            .await?;
        // Upstream's status server: training pods report progress into status.trainerStatus, over TLS with the
        // webhook certificate (so it needs the webhooks on).
        let status_addr =
            start_status_server(&mut launch, tls, status_port, status_metrics).await?;
        let endpoint_addrs = self.start_endpoints(&mut launch, registry).await?;

        let Launch {
            client,
            stop,
            mut tasks,
            health,
        } = launch;
        // Upstream v2.3's runtime controllers: drop the legacy resource-in-use finalizer from runtimes.
        tasks.spawn(ok(crate::runtime_finalizer::run(
            client.clone(),
            settings.clone(),
            leadership.clone(),
            stop.signalled(),
        )));
        // OptimizationJobs: trials are TrainJobs (off, with a warning, where the CRD is not installed).
        tasks.spawn(ok(crate::optimization::run(
            client.clone(),
            settings.clone(),
            leadership.clone(),
            optimization_metrics,
            stop.signalled(),
        )));
        let controller = tokio::spawn(crate::controller::run_with_plugins(
            client,
            settings,
            plugins,
            leadership,
            metrics,
            stop.signalled(),
        ));
        Ok(Running {
            webhook_addr,
            status_addr,
            endpoint_addrs,
            health,
            stop,
            controller,
            tasks,
        })
    }

    /// The controller's settings, with the status server's render options when `--trainjob-status` is on,
    /// and its render plugins (the built-ins, then the embedder's); fails on contradictory settings.
    fn controller_settings(
        &mut self,
        client: &Client,
        status_port: u16,
    ) -> Result<(Settings, Arc<kubetrain_jobset::plugins::Registry>), OperatorError> {
        if self.trainjob_status.is_some() && status_port == 0 {
            return Err(OperatorError::Config(
                "--trainjob-status needs the status server: drop --disable-webhooks and --status-server-port 0"
                    .into(),
            ));
        }
        let status_options = self.trainjob_status_options(client, status_port)?;
        let mut settings = std::mem::take(&mut self.settings);
        if status_options.is_some() {
            settings.render.trainjob_status = status_options;
        }
        let plugins = render_plugins(&settings, std::mem::take(&mut self.plugins))?;
        Ok((settings, Arc::new(plugins)))
    }

    /// Binds the admission webhooks, with the runtime cache, training policy and certificate manager they
    /// use, and spawns them; `None` when webhooks are off.
    async fn start_webhooks(
        &self,
        launch: &mut Launch,
        settings: &Settings,
        metrics: Arc<WebhookMetrics>,
        plugins: &Arc<kubetrain_jobset::plugins::Registry>,
        leadership: &Leadership,
        own_namespace: &str,
    ) -> Result<Option<SocketAddr>, OperatorError> {
        let Some((port, _, cert, provider)) = &self.webhooks else {
            return Ok(None);
        };
        let Launch {
            client,
            stop,
            tasks,
            health,
        } = launch;
        let ready = health.check("webhook");
        // Runtimes for reviews come from watches, not a GET per review.
        let (runtimes, watches) = RuntimeCache::new(client.clone());
        tasks.spawn(stop.until(watches));
        let reporter = kube::runtime::events::Reporter {
            controller: settings.event_reporter.clone(),
            instance: settings.event_instance.clone(),
        };
        let (policy, policy_watch, audit) = self
            .admission
            .start(client, own_namespace, reporter)
            .map_err(OperatorError::Config)?;
        if let Some(policy_watch) = policy_watch {
            tasks.spawn(stop.until(policy_watch));
        }
        let admission = || {
            Admission::new(client.clone())
                .with_cache(runtimes.clone())
                .with_metrics(metrics.clone())
                .with_plugins(plugins.clone())
                .with_policy(policy.clone())
                .with_audit(audit.clone())
        };
        // The host, else all IPv6 interfaces, else (hosts without IPv6) all IPv4 ones.
        let mut bound = Err(OperatorError::Config("no webhook address".into()));
        for addr in self.serving.webhook_addrs(*port) {
            let tls = &self.serving.tls;
            bound =
                WebhookServer::bind_with(addr, cert.clone(), provider.clone(), admission(), tls)
                    .await
                    .map_err(OperatorError::from);
            if bound.is_ok() {
                break;
            }
        }
        let server = bound?;
        if let Some(manager) =
            self.serving
                .cert_manager(client, cert, provider, leadership, health, stop.signalled())
        {
            tasks.spawn(ok(manager));
        }
        let addr = server.local_addr().map_err(OperatorError::Endpoints)?;
        tracing::info!(%addr, "serving admission webhooks");
        ready.set(true);
        tasks.spawn(ok(server.serve(stop.signalled())));
        Ok(Some(addr))
    }

    /// Binds `/healthz`, `/readyz` and `/metrics` on every endpoint address (the first one is the metrics
    /// address: HTTPS and the scrape filter when asked) and spawns them.
    async fn start_endpoints(
        &self,
        launch: &mut Launch,
        registry: Arc<Registry>,
    ) -> Result<Vec<SocketAddr>, OperatorError> {
        let mut addrs = Vec::new();
        for (i, addr) in self.endpoints.iter().enumerate() {
            let mut endpoints = Endpoints::bind(*addr, registry.clone(), launch.health.clone())
                .await
                .map_err(OperatorError::Endpoints)?;
            if i == 0 {
                endpoints = self
                    .serving
                    .metrics_endpoint(endpoints, &launch.client, self.provider.as_ref())
                    .map_err(OperatorError::Config)?;
            }
            let addr = endpoints.local_addr().map_err(OperatorError::Endpoints)?;
            tracing::info!(%addr, "serving /healthz, /readyz and /metrics");
            addrs.push(addr);
            launch
                .tasks
                .spawn(ok(endpoints.serve(launch.stop.signalled())));
        }
        Ok(addrs)
    }
}

/// What the parts [`Operator::start`] starts share: the client, the stop signal, the task set they run in
/// and the readiness checks.
struct Launch {
    client: Client,
    stop: Stop,
    tasks: JoinSet<Result<(), OperatorError>>,
    health: Health,
}

/// Binds upstream's TrainJob status server with the webhook certificate `tls` on `port` and spawns it;
/// `None` when it is off (no webhooks, or port 0).
async fn start_status_server(
    launch: &mut Launch,
    tls: Option<(Arc<ReloadingCert>, Arc<CryptoProvider>)>,
    port: u16,
    metrics: Arc<StatusMetrics>,
) -> Result<Option<SocketAddr>, OperatorError> {
    let Some((cert, provider)) = tls else {
        tracing::info!(
            "status server off: it serves the webhook certificate, and webhooks are disabled"
        );
        return Ok(None);
    };
    if port == 0 {
        tracing::info!("status server off (--status-server-port 0)");
        return Ok(None);
    }
    let server = bind_status_server(port, &cert, &provider, &launch.client).await?;
    let server = server.with_metrics(metrics);
    let addr = server.local_addr().map_err(OperatorError::Endpoints)?;
    tracing::info!(%addr, "serving the TrainJob status server");
    launch
        .tasks
        .spawn(ok(server.serve(launch.stop.signalled())));
    Ok(Some(addr))
}

/// A started operator: its addresses, and [`Running::wait`] for its end.
#[derive(Debug)]
pub struct Running {
    webhook_addr: Option<SocketAddr>,
    status_addr: Option<SocketAddr>,
    endpoint_addrs: Vec<SocketAddr>,
    health: Health,
    stop: Stop,
    controller: tokio::task::JoinHandle<crate::Result<()>>,
    tasks: JoinSet<Result<(), OperatorError>>,
}

impl Running {
    /// Where the webhook server listens, when it runs.
    pub fn webhook_addr(&self) -> Option<SocketAddr> {
        self.webhook_addr
    }

    /// Where the status server listens, when it runs.
    pub fn status_server_addr(&self) -> Option<SocketAddr> {
        self.status_addr
    }

    /// Where `/healthz`, `/readyz` and `/metrics` are served (the metrics address first).
    pub fn endpoint_addrs(&self) -> &[SocketAddr] {
        &self.endpoint_addrs
    }

    /// The readiness checks `/readyz` answers with; add checks of your own to it.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Stops every part, as the shutdown signal does ([`Running::wait`] then returns).
    pub fn stop(&self) {
        self.stop.trigger();
    }

    /// Waits until the TrainJob controller ends (after the shutdown signal, or on its own), then stops the
    /// rest and waits for it: servers drain, the leader releases its Lease.
    ///
    /// # Errors
    ///
    /// The controller's error, else the first error of another part.
    pub async fn wait(mut self) -> Result<(), OperatorError> {
        let outcome = match self.controller.await {
            Ok(result) => result.map_err(OperatorError::from),
            Err(error) => Err(OperatorError::Task(error.to_string())),
        };
        // Whatever ended the controller ends the rest.
        self.stop.trigger();
        let mut first_error = outcome.err();
        while let Some(joined) = self.tasks.join_next().await {
            let result = joined
                .map_err(|error| OperatorError::Task(error.to_string()))
                .and_then(|r| r);
            if let Err(error) = result {
                tracing::warn!("{error}");
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// The TrainJobStatus render options: where pods reach the status server, and the CA they trust: the file
/// (read once), else with built-in certificates the certificate Secret's (empty until the certificate
/// management's first pass fills it; renders fail as upstream's do until then).
fn trainjob_status(
    status: StatusServerSettings,
    namespace: String,
    cert_dir: &Path,
    port: u16,
    built_in_certs: bool,
) -> Result<kubetrain_jobset::TrainJobStatusOptions, OperatorError> {
    let ca_cert = match status.ca_file {
        None if built_in_certs => kubetrain_jobset::CaCert::default(),
        file => {
            let path = file.unwrap_or_else(|| cert_dir.join("ca.crt"));
            std::fs::read_to_string(&path)
                .map_err(|source| OperatorError::StatusCa { path, source })?
                .into()
        }
    };
    let server = kubetrain_jobset::StatusServerAddress {
        service_name: status.service,
        operator_namespace: namespace,
        port: i32::from(port),
    };
    tracing::info!(url = %server.status_url("<namespace>", "<name>"), "trainer pods report to the status server");
    Ok(kubetrain_jobset::TrainJobStatusOptions { server, ca_cert })
}

/// The registry every render and review runs: the built-ins `settings` enables, then the embedder's plugins.
fn render_plugins(
    settings: &Settings,
    plugins: Vec<Arc<dyn RenderPlugin>>,
) -> Result<kubetrain_jobset::plugins::Registry, OperatorError> {
    let mut registry = kubetrain_jobset::plugins::Registry::builtin(&settings.render);
    for plugin in plugins {
        registry.register_shared(plugin)?;
    }
    Ok(registry)
}

fn any_v6(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv6Addr::UNSPECIFIED, port))
}

fn any_v4(port: u16) -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], port))
}

/// Leader election as configured (a task of `launch` that ends with its stop), or a replica that always leads.
fn start_leadership(election: Option<ElectionConfig>, launch: &mut Launch) -> Leadership {
    let Launch {
        client,
        stop,
        tasks,
        ..
    } = launch;
    let Some(mut config) = election else {
        tracing::info!("leader election off: this replica writes");
        return Leadership::always();
    };
    if config.namespace.is_empty() {
        client.default_namespace().clone_into(&mut config.namespace);
    }
    tracing::info!(lease = %format!("{}/{}", config.namespace, config.name), identity = %config.identity, "leader election on");
    let (elected, leadership) = Leadership::channel();
    let elector = LeaderElector::new(client.clone(), config);
    let stopped = stop.signalled();
    tasks.spawn(async move { Ok(elector.run(elected, stopped).await?) });
    leadership
}

/// The status server on all IPv6 interfaces of `port`, else (hosts without IPv6) all IPv4 ones.
async fn bind_status_server(
    port: u16,
    cert: &Arc<ReloadingCert>,
    provider: &Arc<CryptoProvider>,
    client: &Client,
) -> Result<StatusServer, OperatorError> {
    let bind = |addr| StatusServer::bind(addr, cert.clone(), provider.clone(), client.clone());
    match bind(any_v6(port)).await {
        Ok(server) => Ok(server),
        Err(_) => Ok(bind(any_v4(port)).await?),
    }
}

/// A stop signal every task can wait on (set once by the shutdown signal, or when the controller ends).
#[derive(Clone, Debug)]
struct Stop(watch::Sender<bool>);

impl Stop {
    fn trigger(&self) {
        self.0.send_replace(true);
    }

    /// Triggers the stop when `signal` comes; ends quietly when stopped otherwise (the controller ended).
    fn on(
        &self,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = Result<(), OperatorError>> + Send + 'static {
        let stop = self.clone();
        self.until(async move {
            signal.await;
            tracing::info!("shutting down");
            stop.trigger();
        })
    }

    /// Runs `task` until it ends or the stop comes, whichever is first.
    fn until(
        &self,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = Result<(), OperatorError>> + Send + 'static {
        let stopped = self.signalled();
        async move {
            tokio::select! {
                () = task => {}
                () = stopped => {}
            }
            Ok(())
        }
    }

    fn signalled(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut stopped = self.0.subscribe();
        async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }
    }
}

/// A task that ends without an error of its own.
async fn ok(task: impl Future<Output = ()>) -> Result<(), OperatorError> {
    task.await;
    Ok(())
}

/// SIGTERM (the kubelet's stop) or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for SIGTERM; Ctrl-C only");
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Empty};

    use super::*;
    use crate::webhook::tls::{CERT_FILE, KEY_FILE};
    use kubetrain_test_support::FakeApiServer;

    async fn get(addr: SocketAddr, path: &str) -> (http::StatusCode, String) {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                .await
                .unwrap();
        tokio::spawn(connection);
        let request = http::Request::get(path)
            .header("host", "localhost")
            .body(Empty::<Bytes>::new())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    fn certificate() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let pair = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(dir.path().join(CERT_FILE), pair.cert.pem()).unwrap();
        std::fs::write(dir.path().join(KEY_FILE), pair.signing_key.serialize_pem()).unwrap();
        dir
    }

    fn loopback() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 0))
    }

    #[tokio::test]
    async fn every_part_serves_until_the_shutdown_signal_then_all_stop() {
        let server = FakeApiServer::start();
        let certs = certificate();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let mut registry = Registry::default();
        let own = prometheus_client::metrics::counter::Counter::<u64>::default();
        registry.register("embedder_things", "A metric of the embedder", own.clone());
        let running = Operator::new(Settings::default())
            .webhooks(0, certs.path())
            .unwrap()
            .status_server_port(0)
            .endpoints(loopback(), loopback())
            .registry(registry)
            .shutdown_on(async move {
                let _ = stopped.await;
            })
            .start(server.client())
            .await
            .unwrap();
        assert!(running.webhook_addr().is_some());
        assert_eq!(running.status_server_addr(), None);
        let &[endpoint] = running.endpoint_addrs() else {
            panic!("one endpoint: {:?}", running.endpoint_addrs());
        };
        // The webhook server listens before start returns, so the pod is ready at once.
        assert_eq!(get(endpoint, "/readyz").await.0, http::StatusCode::OK);
        let (status, metrics) = get(endpoint, "/metrics").await;
        assert_eq!(status, http::StatusCode::OK);
        for name in [
            "embedder_things_total",
            "kubetrain_trainjob_reconcile",
            "kubetrain_leader 1",
        ] {
            assert!(metrics.contains(name), "{name} missing:\n{metrics}");
        }
        // An embedder's own readiness check takes the pod out of the Service.
        let warming = running.health().check("embedder");
        assert_eq!(
            get(endpoint, "/readyz").await.0,
            http::StatusCode::SERVICE_UNAVAILABLE
        );
        warming.set(true);

        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(30), running.wait())
            .await
            .expect("every part stops after the signal")
            .unwrap();
        assert!(tokio::net::TcpStream::connect(endpoint).await.is_err());
    }

    /// kube-runtime's graceful shutdown alone waits forever for a first list that a stop cut short.
    #[tokio::test]
    async fn a_stop_during_start_up_ends_the_controllers() {
        let server = FakeApiServer::start();
        let stopped = async {};
        let controller = crate::run(
            server.client(),
            Settings::default(),
            Leadership::always(),
            Arc::new(ControllerMetrics::default()),
            stopped,
        );
        tokio::time::timeout(Duration::from_secs(30), controller)
            .await
            .expect("the TrainJob controller stops")
            .unwrap();
        let finalizers = crate::runtime_finalizer::run(
            server.client(),
            Settings::default(),
            Leadership::always(),
            async {},
        );
        tokio::time::timeout(Duration::from_secs(30), finalizers)
            .await
            .expect("the runtime controllers stop");
    }

    #[tokio::test]
    async fn stop_ends_a_running_operator() {
        let server = FakeApiServer::start();
        let running = Operator::new(Settings::default())
            .start(server.client())
            .await
            .unwrap();
        assert!(running.endpoint_addrs().is_empty());
        running.stop();
        tokio::time::timeout(Duration::from_secs(30), running.wait())
            .await
            .expect("every part stops")
            .unwrap();
    }

    #[tokio::test]
    async fn contradictory_settings_fail_before_the_cluster_is_contacted() {
        let server = FakeApiServer::start();
        let status = StatusServerSettings {
            service: "kubetrain-operator".into(),
            namespace: None,
            ca_file: None,
        };
        let error = Operator::new(Settings::default())
            .trainjob_status(status.clone())
            .start(server.client())
            .await
            .unwrap_err();
        assert!(matches!(error, OperatorError::Config(_)), "{error}");
        assert!(error.to_string().contains("--trainjob-status"), "{error}");

        let certs = certificate();
        let error = Operator::new(Settings::default())
            .webhooks(0, certs.path())
            .unwrap()
            .trainjob_status(status)
            .start(server.client())
            .await
            .unwrap_err();
        assert!(error.to_string().contains("ca.crt"), "{error}");
        assert!(
            error.to_string().contains("--status-server-ca-file"),
            "{error}"
        );
    }

    #[test]
    fn the_builder_refuses_unsafe_timings_and_missing_certificates() {
        let inverted =
            ElectionConfig::new("", "lease", "me").renew_deadline(Duration::from_secs(20));
        let error = Operator::new(Settings::default())
            .leader_election(inverted)
            .unwrap_err();
        assert!(matches!(error, OperatorError::Election(_)), "{error}");
        assert!(
            error.to_string().contains("--leader-elect-renew-deadline"),
            "{error}"
        );

        let empty = tempfile::tempdir().unwrap();
        let error = Operator::new(Settings::default())
            .webhooks(9443, empty.path())
            .unwrap_err();
        assert!(error.to_string().contains(CERT_FILE), "{error}");
        assert!(error.to_string().contains("--webhook-cert-dir"), "{error}");
    }

    #[test]
    fn the_probe_address_is_served_once_when_it_equals_the_metrics_address() {
        let a: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let b: SocketAddr = "0.0.0.0:8081".parse().unwrap();
        assert_eq!(
            Operator::new(Settings::default()).endpoints(a, b).endpoints,
            [a, b]
        );
        assert_eq!(
            Operator::new(Settings::default()).endpoints(a, a).endpoints,
            [a]
        );
    }
}
