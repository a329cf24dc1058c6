//! Flags of `kubetrain-operator` (every flag can also be set through its environment variable) and the
//! [`Operator`] and client they describe.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kubetrain_controller::election::{ElectionConfig, default_identity};
use kubetrain_controller::operator::StatusServerSettings;
use kubetrain_controller::{CountWriteBudget, Operator, OperatorError, Settings};

pub(crate) use crate::log_format::LogFormat;

/// The kubetrain operator: reconciles TrainJobs into JobSets, serves the trainer admission webhooks,
/// elects a leader with a Lease, and exposes probes and Prometheus metrics.
#[derive(Debug, Parser)]
#[command(
    name = "kubetrain-operator",
    version,
    about,
    after_help = "Log filtering: RUST_LOG (e.g. RUST_LOG=info,kubetrain_controller=debug; default info).\n\
                  Kubernetes access: in-cluster service account, else KUBECONFIG / ~/.kube/config (or --kubeconfig)."
)]
pub(crate) struct Cli {
    /// Address of the Prometheus endpoint (/metrics; /healthz and /readyz answer there too).
    #[arg(
        long,
        env = "KUBETRAIN_METRICS_BIND_ADDRESS",
        default_value = "0.0.0.0:8080"
    )]
    pub metrics_bind_address: SocketAddr,

    /// Address of the kubelet probes (/healthz, /readyz); may equal the metrics address.
    #[arg(
        long,
        env = "KUBETRAIN_HEALTH_PROBE_BIND_ADDRESS",
        default_value = "0.0.0.0:8081"
    )]
    pub health_probe_bind_address: SocketAddr,

    /// Port of the HTTPS admission webhook server (all interfaces).
    #[arg(long, env = "KUBETRAIN_WEBHOOK_PORT", default_value_t = 9443)]
    pub webhook_port: u16,

    /// Directory holding the webhook serving certificate as tls.crt and tls.key (reloaded when they change).
    #[arg(
        long,
        env = "KUBETRAIN_WEBHOOK_CERT_DIR",
        default_value = kubetrain_controller::webhook::tls::DEFAULT_CERT_DIR
    )]
    pub webhook_cert_dir: PathBuf,

    /// Port of the HTTPS TrainJob status server (upstream's statusServer.port; the webhook certificate; 0 = off).
    #[arg(long, env = "KUBETRAIN_STATUS_SERVER_PORT", default_value_t = kubetrain_controller::status_server::DEFAULT_PORT)]
    pub status_server_port: u16,

    /// Give trainer pods the status server's URL, CA and a token (upstream's TrainJobStatus feature gate).
    #[arg(long, env = "KUBETRAIN_TRAINJOB_STATUS")]
    pub trainjob_status: bool,

    /// Service in front of the status server, in the pods' status URL (with --trainjob-status).
    #[arg(
        long,
        env = "KUBETRAIN_STATUS_SERVER_SERVICE",
        default_value = "kubetrain-operator"
    )]
    pub status_server_service: String,

    /// CA certificate copied into each TrainJob's <job>-tls-config (with --trainjob-status); default
    /// <webhook-cert-dir>/ca.crt, as cert-manager's Secret holds it.
    #[arg(long, env = "KUBETRAIN_STATUS_SERVER_CA_FILE")]
    pub status_server_ca_file: Option<PathBuf>,

    /// Do not serve the admission webhooks (e.g. running locally without certificates).
    #[arg(long, env = "KUBETRAIN_DISABLE_WEBHOOKS")]
    pub disable_webhooks: bool,

    /// Elect a leader with a Lease before writing (true|false); only the leader writes.
    #[arg(long, env = "KUBETRAIN_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,

    /// Namespace of the leader Lease [default: the operator's namespace from the service account or
    /// kubeconfig].
    #[arg(long, env = "KUBETRAIN_LEADER_ELECT_NAMESPACE")]
    pub leader_elect_namespace: Option<String>,

    /// Name of the leader Lease.
    #[arg(
        long,
        env = "KUBETRAIN_LEADER_ELECT_LEASE_NAME",
        default_value = kubetrain_controller::election::DEFAULT_LEASE_NAME
    )]
    pub leader_elect_lease_name: String,

    /// How long a Lease is valid after its last renewal (e.g. 15s, 1m).
    #[arg(long, env = "KUBETRAIN_LEADER_ELECT_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub leader_elect_lease_duration: Duration,

    /// How long the leader keeps leading without a successful renewal; shorter than the lease duration.
    #[arg(long, env = "KUBETRAIN_LEADER_ELECT_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    pub leader_elect_renew_deadline: Duration,

    /// Time between attempts to acquire or renew the Lease; shorter than the renew deadline.
    #[arg(long, env = "KUBETRAIN_LEADER_ELECT_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration)]
    pub leader_elect_retry_period: Duration,

    /// This replica's holder identity in the Lease [default: POD_NAME or the host name, plus a per-process
    /// suffix].
    #[arg(long, env = "POD_NAME")]
    pub leader_elect_identity: Option<String>,

    /// Watch TrainJobs in this namespace only [default: all namespaces].
    #[arg(long, env = "KUBETRAIN_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,

    /// TrainJob reconciles that may run at once (0 = unbounded).
    #[arg(long, env = "KUBETRAIN_CONCURRENCY", default_value_t = 5)]
    pub concurrency: u16,

    /// Wait this long after a TrainJob's last watch event before reconciling it, so that a burst of events
    /// (a JobSet's status moving through its pods' counts) is reconciled once (0 = no wait).
    #[arg(long, env = "KUBETRAIN_DEBOUNCE", default_value = "100ms", value_parser = parse_duration)]
    pub debounce: Duration,

    /// Status writes that change only a TrainJob's jobsStatus counts share a budget: after a burst of
    /// --status-count-writes-burst, one more each period. Beyond it, count changes wait in line (oldest first)
    /// and most fold into the next condition's write; conditions never wait. 0 writes every change at once.
    #[arg(long, env = "KUBETRAIN_STATUS_COUNT_WRITES_PERIOD", default_value = "5s", value_parser = parse_duration)]
    pub status_count_writes_period: Duration,

    /// Count-only status writes that may go out at once after a quiet spell (see
    /// --status-count-writes-period).
    #[arg(long, env = "KUBETRAIN_STATUS_COUNT_WRITES_BURST", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub status_count_writes_burst: u32,

    /// Threads running the controller, webhooks and servers. 1 (the default) runs everything on one thread,
    /// which costs the least CPU: the work is waiting on the API server, and a second thread mostly adds
    /// hand-offs between them. 0 starts one per CPU.
    #[arg(long, env = "KUBETRAIN_WORKER_THREADS", default_value_t = 1)]
    pub worker_threads: usize,

    /// Reconcile every TrainJob at least this often, even when nothing changed (controller-runtime's
    /// SyncPeriod); 0 waits for changes only.
    #[arg(long, env = "KUBETRAIN_SYNC_PERIOD", default_value = "10h", value_parser = parse_duration)]
    pub sync_period: Duration,

    /// Field manager of every server-side apply and status write.
    #[arg(long, env = "KUBETRAIN_FIELD_MANAGER", default_value = kubetrain_controller::FIELD_MANAGER)]
    pub field_manager: String,

    /// The training policy's ConfigMap as NAMESPACE/NAME (key policy.yaml; watched, so a change applies
    /// without a restart; while it is absent nothing is refused, as upstream), or `none` to watch nothing
    /// [default: kubetrain-training-policy in the operator's namespace]. See docs/training-policy.md.
    #[arg(
        long,
        env = "KUBETRAIN_TRAINING_POLICY_CONFIGMAP",
        conflicts_with = "training_policy"
    )]
    pub training_policy_configmap: Option<kubetrain_controller::webhook::TrainingPolicySource>,

    /// Read the training policy from this file instead (a TrainingPolicy document or a ConfigMap holding
    /// one; read once at start).
    #[arg(long, env = "KUBETRAIN_TRAINING_POLICY")]
    pub training_policy: Option<PathBuf>,

    /// Write a JSON audit line for every TrainJob submission, admission decision, runtime change and Secret
    /// reference the webhooks review, to this file (appended) or `-` for stderr.
    #[arg(long, env = "KUBETRAIN_AUDIT_LOG")]
    pub audit_log: Option<PathBuf>,

    /// Publish a `TrainJobSubmitted` event for every admitted TrainJob (`true`: one API write more per
    /// TrainJob than upstream makes; the default `false` publishes it only for TrainJobs whose pods reference
    /// Secrets; denials, runtime changes and audit lines are the same either way).
    #[arg(long, env = "KUBETRAIN_SUBMISSION_EVENTS", default_value_t = false, action = clap::ArgAction::Set)]
    pub submission_events: bool,

    /// Log format.
    #[arg(long, env = "KUBETRAIN_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,

    /// Upstream's controller Configuration file (config.trainer.kubeflow.org/v1alpha1, as its Helm chart and
    /// kustomize base mount it); flags given on the command line or by environment variable override it.
    #[arg(long, env = "KUBETRAIN_CONFIG")]
    pub config: Option<PathBuf>,

    /// With --config: print the effective settings as YAML and exit 0, or the file's problems and exit 1,
    /// without contacting a cluster.
    #[arg(long, requires = "config")]
    pub check_config: bool,

    /// Kubeconfig file [default: in-cluster config, else KUBECONFIG or ~/.kube/config].
    #[arg(long, env = "KUBETRAIN_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context [default: the current context].
    #[arg(long, env = "KUBETRAIN_CONTEXT")]
    pub context: Option<String>,

    /// Upstream's manager flags (`--feature-gates`, `--zap-*`), so its Deployments start kubetrain unchanged.
    #[command(flatten)]
    pub upstream: crate::upstream_flags::UpstreamFlags,
}

impl Cli {
    /// The TrainJob controller's settings these flags describe.
    fn settings(&self) -> Settings {
        Settings {
            field_manager: self.field_manager.clone(),
            namespace: self.watch_namespace.clone(),
            concurrency: self.concurrency,
            debounce: self.debounce,
            event_instance: self.leader_elect_identity.clone(),
            sync_period: Some(self.sync_period).filter(|p| !p.is_zero()),
            status_count_writes: Some(CountWriteBudget {
                period: self.status_count_writes_period,
                burst: self.status_count_writes_burst,
            })
            .filter(|b| !b.period.is_zero()),
            ..Settings::default()
        }
    }

    /// The operator these flags describe; fails on unsafe election timings or a certificate that cannot be
    /// loaded, before anything talks to the cluster.
    pub(crate) fn operator(&self) -> Result<Operator, OperatorError> {
        let settings = self.settings();
        let mut operator = Operator::new(settings)
            .endpoints(self.metrics_bind_address, self.health_probe_bind_address)
            .status_server_port(self.status_server_port);
        if self.leader_elect {
            // An empty namespace: the client's (the service account's in a pod).
            let namespace = self.leader_elect_namespace.clone().unwrap_or_default();
            let identity = default_identity(self.leader_elect_identity.as_deref());
            let config = ElectionConfig::new(namespace, &self.leader_elect_lease_name, identity)
                .lease_duration(self.leader_elect_lease_duration)
                .renew_deadline(self.leader_elect_renew_deadline)
                .retry_period(self.leader_elect_retry_period);
            operator = operator.leader_election(config)?;
        }
        if !self.disable_webhooks {
            operator = operator.webhooks(self.webhook_port, &self.webhook_cert_dir)?;
        }
        if let Some(path) = &self.training_policy {
            // Read now, so that a bad file fails before the cluster is contacted.
            kubetrain_controller::webhook::PolicyGate::from_file(path)
                .map_err(OperatorError::Config)?;
            operator = operator.training_policy(
                kubetrain_controller::webhook::TrainingPolicySource::File(path.clone()),
            );
        } else if let Some(source) = &self.training_policy_configmap {
            operator = operator.training_policy(source.clone());
        }
        if let Some(path) = &self.audit_log {
            let log = kubetrain_controller::audit::AuditLog::open(path).map_err(|e| {
                OperatorError::Config(format!("--audit-log {}: {e}", path.display()))
            })?;
            operator = operator.audit_log(log);
        }
        operator = operator.submission_events(self.submission_events);
        if self.trainjob_status {
            operator = operator.trainjob_status(StatusServerSettings {
                service: self.status_server_service.clone(),
                namespace: self.leader_elect_namespace.clone(),
                ca_file: self.status_server_ca_file.clone(),
            });
        }
        Ok(operator)
    }

    /// The Kubernetes client: `--kubeconfig`/`--context`, else in-cluster, `KUBECONFIG` or `~/.kube/config`.
    pub(crate) async fn client(&self) -> anyhow::Result<Client> {
        let config = if self.kubeconfig.is_some() || self.context.is_some() {
            let options = KubeConfigOptions {
                context: self.context.clone(),
                ..KubeConfigOptions::default()
            };
            match &self.kubeconfig {
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
}

/// Parses `500ms`, `15s`, `2m`, `1h` or plain seconds (`15`).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (examples: 500ms, 15s, 2m)"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use ms, s, m or h)"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_the_usual_units() {
        for (text, expected) in [
            ("15s", Duration::from_secs(15)),
            ("15", Duration::from_secs(15)),
            ("500ms", Duration::from_millis(500)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("1.5s", Duration::from_millis(1500)),
        ] {
            assert_eq!(parse_duration(text), Ok(expected), "{text}");
        }
        for bad in ["", "s", "fast", "10d", "-1s"] {
            let error = parse_duration(bad).unwrap_err();
            assert!(error.contains(bad) || bad.is_empty(), "{bad}: {error}");
        }
    }

    #[test]
    fn defaults_match_upstreams_manager() {
        let cli = Cli::try_parse_from(["kubetrain-operator"]).unwrap();
        assert_eq!(cli.webhook_port, 9443);
        assert_eq!(cli.status_server_port, 10443);
        assert_eq!(cli.health_probe_bind_address.port(), 8081);
        assert!(cli.leader_elect);
        assert_eq!(cli.leader_elect_lease_name, "trainer.kubeflow.org");
        assert_eq!(cli.leader_elect_lease_duration, Duration::from_secs(15));
        assert_eq!(cli.leader_elect_renew_deadline, Duration::from_secs(10));
        assert_eq!(cli.leader_elect_retry_period, Duration::from_secs(2));
        assert_eq!(cli.concurrency, 5);
        assert_eq!(cli.sync_period, Duration::from_secs(10 * 3600));
        assert_eq!(cli.log_format, LogFormat::Json);
        let off = Cli::try_parse_from(["kubetrain-operator", "--leader-elect=false"]).unwrap();
        assert!(!off.leader_elect);
    }

    /// The Deployment in examples/manifests/deploy passes flags this binary must accept.
    #[test]
    fn the_install_manifest_args_parse() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../manifests/deploy/operator.yaml"
        );
        let text = std::fs::read_to_string(path).expect("operator.yaml");
        let mut found = false;
        for document in serde_saphyr::from_multiple::<serde_json::Value>(&text).unwrap() {
            if document["kind"] != "Deployment" {
                continue;
            }
            let container = &document["spec"]["template"]["spec"]["containers"][0];
            let args: Vec<String> = container["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_owned())
                .collect();
            let cli =
                Cli::try_parse_from(std::iter::once("kubetrain-operator".to_owned()).chain(args))
                    .unwrap_or_else(|e| panic!("the Deployment's args do not parse: {e}"));
            assert_eq!(
                cli.webhook_cert_dir,
                std::path::Path::new(kubetrain_controller::webhook::tls::DEFAULT_CERT_DIR)
            );
            found = true;
        }
        assert!(found, "no Deployment in operator.yaml");
    }

    #[test]
    fn count_write_budget_flags_reach_the_settings_and_zero_turns_it_off() {
        let default = Cli::try_parse_from(["kubetrain-operator"]).unwrap();
        assert_eq!(
            default.settings().status_count_writes,
            Some(CountWriteBudget::default())
        );
        let tuned = Cli::try_parse_from([
            "kubetrain-operator",
            "--status-count-writes-period=1s",
            "--status-count-writes-burst=7",
        ])
        .unwrap();
        assert_eq!(
            tuned.settings().status_count_writes,
            Some(CountWriteBudget {
                period: Duration::from_secs(1),
                burst: 7
            })
        );
        let off = Cli::try_parse_from(["kubetrain-operator", "--status-count-writes-period", "0"])
            .unwrap();
        assert_eq!(off.settings().status_count_writes, None);
        let error = Cli::try_parse_from(["kubetrain-operator", "--status-count-writes-burst", "0"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("--status-count-writes-burst"), "{error}");
    }

    #[test]
    fn submission_events_for_every_trainjob_only_when_turned_on() {
        let default = Cli::try_parse_from(["kubetrain-operator"]).unwrap();
        assert!(!default.submission_events);
        let on =
            Cli::try_parse_from(["kubetrain-operator", "--submission-events", "true"]).unwrap();
        assert!(on.submission_events);
    }

    #[test]
    fn the_training_policy_flags_parse_and_a_bad_policy_file_fails_before_the_cluster() {
        use kubetrain_controller::webhook::TrainingPolicySource;

        let cli = Cli::try_parse_from([
            "kubetrain-operator",
            "--training-policy-configmap",
            "ops/gpu-policy",
            "--audit-log",
            "-",
        ])
        .unwrap();
        assert_eq!(
            cli.training_policy_configmap,
            Some(TrainingPolicySource::ConfigMap {
                namespace: "ops".into(),
                name: "gpu-policy".into()
            })
        );
        let off =
            Cli::try_parse_from(["kubetrain-operator", "--training-policy-configmap", "none"]);
        assert_eq!(
            off.unwrap().training_policy_configmap,
            Some(TrainingPolicySource::Off)
        );
        let bad = Cli::try_parse_from([
            "kubetrain-operator",
            "--training-policy-configmap",
            "no-slash",
        ]);
        assert!(
            bad.unwrap_err()
                .to_string()
                .contains("is not NAMESPACE/NAME")
        );
        let both = Cli::try_parse_from([
            "kubetrain-operator",
            "--training-policy-configmap",
            "a/b",
            "--training-policy",
            "p.yaml",
        ]);
        assert!(both.is_err(), "one source at a time");

        let file =
            std::env::temp_dir().join(format!("kubetrain-policy-{}.yaml", std::process::id()));
        std::fs::write(
            &file,
            "apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingPolicy\nspec: {registrys: []}\n",
        )
        .unwrap();
        let cli = Cli::try_parse_from([
            "kubetrain-operator",
            "--disable-webhooks",
            "--leader-elect=false",
            "--training-policy",
            file.to_str().unwrap(),
        ])
        .unwrap();
        let error = cli.operator().unwrap_err().to_string();
        std::fs::remove_file(&file).unwrap();
        assert!(error.contains("spec.registrys: unknown field"), "{error}");
    }
}
