//! `kubetrain-operator`: the TrainJob controller, the admission webhooks, Lease leader election and the
//! probe/metrics endpoints of `kubetrain-controller`, run side by side until SIGTERM or Ctrl-C.

use std::future::Future;
use std::net::{Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kubetrain_controller::election::{
    ElectionConfig, LeaderElector, default_identity, register_leader_gauge,
};
use kubetrain_controller::http::{Endpoints, Health};
use kubetrain_controller::status_server::{StatusMetrics, StatusServer};
use kubetrain_controller::webhook::tls::ReloadingCert;
use kubetrain_controller::webhook::{Admission, RuntimeCache, WebhookMetrics, WebhookServer};
use kubetrain_controller::{Leadership, Metrics, Settings};
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinSet;

mod cli;

use cli::{Cli, LogFormat};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    // One rustls provider for the kube client and the webhook server alike (ring, as the rest of the tree).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("kubetrain-operator: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(operate(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            eprintln!("kubetrain-operator: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.with_ansi(false).init(),
    }
}

/// A stop signal every task can wait on (set once by SIGTERM/Ctrl-C, or when the controller ends).
#[derive(Clone)]
struct Stop(watch::Sender<bool>);

impl Stop {
    fn trigger(&self) {
        self.0.send_replace(true);
    }

    fn signalled(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut stopped = self.0.subscribe();
        async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }
    }
}

async fn operate(cli: Cli) -> anyhow::Result<()> {
    let election_timings = ElectionConfig::new("", "", "-")
        .lease_duration(cli.leader_elect_lease_duration)
        .renew_deadline(cli.leader_elect_renew_deadline)
        .retry_period(cli.leader_elect_retry_period);
    if cli.leader_elect {
        election_timings.validate()?;
    }
    // Load the certificate before anything talks to the cluster: a missing Secret mount is the most common
    // install mistake and should say so at once.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cert = if cli.disable_webhooks {
        None
    } else {
        Some(Arc::new(ReloadingCert::from_dir(
            &cli.webhook_cert_dir,
            provider.clone(),
        )?))
    };

    let client = client(&cli).await?;
    let version = client
        .apiserver_version()
        .await
        .context("cannot reach the Kubernetes API server")?;
    tracing::info!(
        server = %format!("{}.{}", version.major, version.minor),
        namespace = cli.watch_namespace.as_deref().unwrap_or("<all>"),
        "connected to the API server"
    );

    let stop = Stop(watch::channel(false).0);
    let mut tasks: JoinSet<anyhow::Result<()>> = JoinSet::new();
    {
        let stop = stop.clone();
        tasks.spawn(async move {
            tokio::select! {
                () = shutdown_signal() => {
                    tracing::info!("shutting down");
                    stop.trigger();
                }
                // The controller ended on its own: nothing left to wait for.
                () = stop.signalled() => {}
            }
            Ok(())
        });
    }

    let health = Health::new();
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let webhook_metrics = WebhookMetrics::register(&mut registry);
    let status_metrics = StatusMetrics::register(&mut registry);
    let leadership = if cli.leader_elect {
        let namespace = cli
            .leader_elect_namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned());
        let identity = default_identity(cli.leader_elect_identity.as_deref());
        let config = ElectionConfig {
            namespace,
            name: cli.leader_elect_lease_name.clone(),
            identity,
            ..election_timings
        };
        tracing::info!(lease = %format!("{}/{}", config.namespace, config.name), identity = %config.identity, "leader election on");
        let (elected, leadership) = Leadership::channel();
        let elector = LeaderElector::new(client.clone(), config);
        let stopped = stop.signalled();
        tasks.spawn(async move { Ok(elector.run(elected, stopped).await?) });
        leadership
    } else {
        tracing::info!("leader election off: this replica writes");
        Leadership::always()
    };
    register_leader_gauge(&mut registry, leadership.clone());
    let registry = Arc::new(registry);

    if let Some(cert) = cert.clone() {
        let ready = health.check("webhook");
        let addr = SocketAddr::from((Ipv6Addr::UNSPECIFIED, cli.webhook_port));
        // Runtimes for reviews come from watches, not a GET per review.
        let (runtimes, watches) = RuntimeCache::new(client.clone());
        let stopped = stop.signalled();
        tasks.spawn(async move {
            tokio::select! {
                () = watches => {}
                () = stopped => {}
            }
            Ok(())
        });
        let admission = || {
            Admission::new(client.clone())
                .with_cache(runtimes.clone())
                .with_metrics(webhook_metrics.clone())
        };
        let server =
            match WebhookServer::bind(addr, cert.clone(), provider.clone(), admission()).await {
                Ok(server) => server,
                // Hosts without IPv6 (some kind nodes, containers with IPv6 off): all IPv4 interfaces.
                Err(_) => {
                    let addr = SocketAddr::from(([0, 0, 0, 0], cli.webhook_port));
                    WebhookServer::bind(addr, cert, provider.clone(), admission()).await?
                }
            };
        tracing::info!(addr = %server.local_addr()?, "serving admission webhooks");
        ready.set(true);
        tasks.spawn(server.serve(stop.signalled()).map_ok());
    }

    // Upstream's status server: training pods report progress into status.trainerStatus, over TLS with the
    // webhook certificate (so it needs the webhooks on).
    match (&cert, cli.status_server_port) {
        (_, 0) => tracing::info!("status server off (--status-server-port 0)"),
        (None, _) => tracing::info!(
            "status server off: it serves the webhook certificate, and webhooks are disabled"
        ),
        (Some(cert), port) => {
            let server = match StatusServer::bind(
                SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)),
                cert.clone(),
                provider.clone(),
                client.clone(),
            )
            .await
            {
                Ok(server) => server,
                Err(_) => {
                    StatusServer::bind(
                        SocketAddr::from(([0, 0, 0, 0], port)),
                        cert.clone(),
                        provider.clone(),
                        client.clone(),
                    )
                    .await?
                }
            };
            let server = server.with_metrics(status_metrics);
            tracing::info!(addr = %server.local_addr()?, "serving the TrainJob status server");
            tasks.spawn(server.serve(stop.signalled()).map_ok());
        }
    }

    for addr in endpoint_addresses(&cli) {
        let endpoints = Endpoints::bind(addr, registry.clone(), health.clone()).await?;
        tracing::info!(%addr, "serving /healthz, /readyz and /metrics");
        tasks.spawn(endpoints.serve(stop.signalled()).map_ok());
    }

    let render = kubetrain_jobset::RenderOptions {
        trainjob_status: trainjob_status(&cli, &client)?,
    };
    let settings = Settings {
        render,
        field_manager: cli.field_manager.clone(),
        namespace: cli.watch_namespace.clone(),
        concurrency: cli.concurrency,
        event_instance: cli.leader_elect_identity.clone(),
        sync_period: Some(cli.sync_period).filter(|p| !p.is_zero()),
        ..Settings::default()
    };
    // Upstream v2.3's runtime controllers: drop the legacy resource-in-use finalizer from runtimes.
    let runtimes = kubetrain_controller::runtime_finalizer::run(
        client.clone(),
        settings.clone(),
        leadership.clone(),
        stop.signalled(),
    );
    tasks.spawn(async move {
        runtimes.await;
        Ok(())
    });
    let controller =
        kubetrain_controller::run(client, settings, leadership, metrics, stop.signalled());
    let outcome = controller.await.context("the TrainJob controller stopped");
    // Whatever ended the controller ends the rest: servers drain, the leader releases its Lease.
    stop.trigger();
    let mut first_error = outcome.err();
    while let Some(joined) = tasks.join_next().await {
        let result = joined.map_err(anyhow::Error::from).and_then(|r| r);
        if let Err(error) = result {
            tracing::warn!("{error:#}");
            first_error.get_or_insert(error);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// With `--trainjob-status`: where pods reach the status server, and the CA they trust (read once here).
fn trainjob_status(
    cli: &Cli,
    client: &Client,
) -> anyhow::Result<Option<kubetrain_jobset::TrainJobStatusOptions>> {
    if !cli.trainjob_status {
        return Ok(None);
    }
    if cli.disable_webhooks || cli.status_server_port == 0 {
        anyhow::bail!(
            "--trainjob-status needs the status server: drop --disable-webhooks and --status-server-port 0"
        );
    }
    let ca_file = cli
        .status_server_ca_file
        .clone()
        .unwrap_or_else(|| cli.webhook_cert_dir.join("ca.crt"));
    let ca_cert = std::fs::read_to_string(&ca_file).with_context(|| {
        format!(
            "--trainjob-status: cannot read the status server's CA certificate {} (set --status-server-ca-file)",
            ca_file.display()
        )
    })?;
    let server = kubetrain_jobset::StatusServer {
        service_name: cli.status_server_service.clone(),
        operator_namespace: cli
            .leader_elect_namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned()),
        port: i32::from(cli.status_server_port),
    };
    tracing::info!(url = %server.status_url("<namespace>", "<name>"), "trainer pods report to the status server");
    Ok(Some(kubetrain_jobset::TrainJobStatusOptions {
        server,
        ca_cert,
    }))
}

/// The metrics address and, when different, the probe address.
fn endpoint_addresses(cli: &Cli) -> Vec<SocketAddr> {
    let mut addresses = vec![cli.metrics_bind_address];
    if cli.health_probe_bind_address != cli.metrics_bind_address {
        addresses.push(cli.health_probe_bind_address);
    }
    addresses
}

async fn client(cli: &Cli) -> anyhow::Result<Client> {
    let config = if cli.kubeconfig.is_some() || cli.context.is_some() {
        let options = KubeConfigOptions {
            context: cli.context.clone(),
            ..KubeConfigOptions::default()
        };
        match &cli.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?
            }
            None => kube::Config::from_kubeconfig(&options).await?,
        }
    } else {
        kube::Config::infer().await.context(
            "no Kubernetes configuration (not in a cluster, no KUBECONFIG or ~/.kube/config)",
        )?
    };
    Ok(Client::try_from(config)?)
}

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

/// Tasks that end without an error of their own.
trait MapOk: Future<Output = ()> + Sized {
    fn map_ok(self) -> impl Future<Output = anyhow::Result<()>> + Send + 'static
    where
        Self: Send + 'static,
    {
        async move {
            self.await;
            Ok(())
        }
    }
}

impl<F: Future<Output = ()>> MapOk for F {}
