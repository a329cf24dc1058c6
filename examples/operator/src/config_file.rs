//! `--config FILE`: upstream's controller `Configuration` under the flags. A flag given on the command line
//! or through its environment variable wins over the file; a flag left at its default takes the file's value
//! (upstream's rule: "command-line flags override configuration from this file").
//!
//! | file field | flag it sets |
//! |---|---|
//! | `webhook.port` | `--webhook-port` |
//! | `metrics.bindAddress` | `--metrics-bind-address` (`0`: metrics only on the probe address) |
//! | `health.healthProbeBindAddress` | `--health-probe-bind-address` |
//! | `leaderElection.*` | `--leader-elect`, `--leader-elect-lease-name`, `-namespace`, `-lease-duration`, `-renew-deadline`, `-retry-period` |
//! | `controller.groupKindConcurrency[TrainJob.trainer.kubeflow.org]` | `--concurrency` |
//! | `statusServer.port` | `--status-server-port` |
//! | `featureGates.TrainJobStatus` | `--trainjob-status` |
//! | `certManagement.enable` | built-in certificates unless `--webhook-cert-dir` is given |
//!
//! `webhook.host`, `metrics.secureServing`, `metrics.auth` and `tls` have no flag and come from the file only.

use std::net::SocketAddr;
use std::path::Path;

use clap::ArgMatches;
use clap::parser::ValueSource;
use kubetrain_controller::certs::CertManagement;
use kubetrain_controller::config::{Configuration, TRAINJOB_GROUP_KIND};
use kubetrain_controller::webhook::tls::TlsSettings;
use kubetrain_controller::{Operator, OperatorError};

use crate::cli::Cli;

/// The Configuration file read with the flags: which flags were given explicitly.
pub(crate) struct FileSettings {
    config: Configuration,
    /// Built-in certificates (the file's `certManagement.enable`, no explicit `--webhook-cert-dir`).
    builtin_certs: bool,
}

/// Whether the flag with clap id `id` was given on the command line or by its environment variable.
pub(crate) fn explicit(matches: &ArgMatches, id: &str) -> bool {
    matches!(
        matches.value_source(id),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

/// Reads `path`, then sets every flag the user left at its default from the file.
///
/// # Errors
///
/// Every problem in the file, one per line.
pub(crate) fn load(
    path: &Path,
    cli: &mut Cli,
    matches: &ArgMatches,
) -> Result<FileSettings, Vec<String>> {
    let config = Configuration::from_file(path).map_err(|errors| errors.0)?;
    let set = |id: &str| !explicit(matches, id);
    let mut problems = Vec::new();
    if set("webhook_port") {
        cli.webhook_port = config.webhook.port;
    }
    if set("metrics_bind_address") {
        match (config.metrics_addr(), config.health_addr()) {
            (Some(addr), _) | (None, Some(addr)) => cli.metrics_bind_address = addr,
            (None, None) => problems.push(
                "metrics.bindAddress and health.healthProbeBindAddress: kubetrain needs one of them (it serves /readyz)"
                    .to_owned(),
            ),
        }
    }
    if set("health_probe_bind_address") {
        cli.health_probe_bind_address = config.health_addr().unwrap_or(cli.metrics_bind_address);
    }
    apply_election(&config, cli, matches);
    if set("concurrency")
        && let Some(n) = config.trainjob_concurrency()
    {
        cli.concurrency = u16::try_from(n).unwrap_or(u16::MAX);
    }
    if set("status_server_port") {
        cli.status_server_port = config.status_server.port;
    }
    if set("trainjob_status") {
        cli.trainjob_status = config.feature_enabled("TrainJobStatus");
    }
    let builtin_certs = config.cert_management.enable
        && !explicit(matches, "webhook_cert_dir")
        && !cli.disable_webhooks;
    if problems.is_empty() {
        Ok(FileSettings {
            config,
            builtin_certs,
        })
    } else {
        Err(problems)
    }
}

fn apply_election(config: &Configuration, cli: &mut Cli, matches: &ArgMatches) {
    let set = |id: &str| !explicit(matches, id);
    let election = config.leader_election.clone().unwrap_or_default();
    if set("leader_elect") {
        cli.leader_elect = election.leader_elect;
    }
    if set("leader_elect_lease_name") {
        cli.leader_elect_lease_name = election.resource_name.clone();
    }
    if set("leader_elect_namespace") && !election.resource_namespace.is_empty() {
        cli.leader_elect_namespace = Some(election.resource_namespace.clone());
    }
    if set("leader_elect_lease_duration") {
        cli.leader_elect_lease_duration = election.lease_duration;
    }
    if set("leader_elect_renew_deadline") {
        cli.leader_elect_renew_deadline = election.renew_deadline;
    }
    if set("leader_elect_retry_period") {
        cli.leader_elect_retry_period = election.retry_period;
    }
}

impl FileSettings {
    /// The operator of `cli` (already merged with the file) plus what only the file says.
    pub(crate) fn operator(&self, cli: &mut Cli) -> Result<Operator, OperatorError> {
        let webhooks_off = cli.disable_webhooks;
        // Built-in certificates replace the certificate directory the flags would load.
        cli.disable_webhooks |= self.builtin_certs;
        let built = cli.operator();
        cli.disable_webhooks = webhooks_off;
        let mut operator = built?;
        let config = &self.config;
        if let Some(tls) = &config.tls {
            operator =
                operator.tls_settings(TlsSettings::new(&tls.min_version, &tls.cipher_suites));
        }
        if let Some(host) = host(config) {
            operator = operator.webhook_host(host);
        }
        if config.metrics.secure_serving {
            operator = operator.secure_metrics(config.metrics.auth.enabled);
        }
        if self.builtin_certs {
            let certs = self.cert_management(cli)?;
            operator = operator.webhooks_with_cert_management(cli.webhook_port, certs)?;
        }
        Ok(operator)
    }

    fn cert_management(&self, cli: &Cli) -> Result<CertManagement, OperatorError> {
        let cert = &self.config.cert_management;
        // The operator's namespace: the Lease's when given, else the client's (the service account's).
        let namespace = cli.leader_elect_namespace.clone().unwrap_or_default();
        CertManagement::new(
            &namespace,
            &cert.webhook_secret_name,
            &cert.webhook_service_name,
        )
        .from_env()
        .map_err(OperatorError::Config)
    }

    /// The effective settings: the file with the flags' final values written in.
    pub(crate) fn effective(&self, cli: &Cli) -> Configuration {
        let mut config = self.config.clone();
        config.webhook.port = cli.webhook_port;
        config.metrics.bind_address = go_address(cli.metrics_bind_address);
        config.health.health_probe_bind_address = go_address(cli.health_probe_bind_address);
        let mut election = config.leader_election.clone().unwrap_or_default();
        election.leader_elect = cli.leader_elect;
        election
            .resource_name
            .clone_from(&cli.leader_elect_lease_name);
        election.resource_namespace = cli.leader_elect_namespace.clone().unwrap_or_default();
        election.lease_duration = cli.leader_elect_lease_duration;
        election.renew_deadline = cli.leader_elect_renew_deadline;
        election.retry_period = cli.leader_elect_retry_period;
        config.leader_election = Some(election);
        config
            .controller
            .group_kind_concurrency
            .insert(TRAINJOB_GROUP_KIND.to_owned(), u32::from(cli.concurrency));
        config.status_server.port = cli.status_server_port;
        config.cert_management.enable = self.builtin_certs;
        config
            .feature_gates
            .insert("TrainJobStatus".to_owned(), cli.trainjob_status);
        config
    }
}

fn host(config: &Configuration) -> Option<std::net::IpAddr> {
    if config.webhook.host.is_empty() {
        None
    } else {
        Some(config.webhook_addr().ip())
    }
}

/// An address as Go writes it: `:8443` for all interfaces.
fn go_address(addr: SocketAddr) -> String {
    if addr.ip().is_unspecified() {
        format!(":{}", addr.port())
    } else {
        addr.to_string()
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, FromArgMatches};

    use super::*;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    fn parse(args: &[&str], path: &Path) -> Result<(Cli, FileSettings), Vec<String>> {
        let matches = Cli::command()
            .try_get_matches_from(std::iter::once("kubetrain-operator").chain(args.iter().copied()))
            .unwrap();
        let mut cli = Cli::from_arg_matches(&matches).unwrap();
        let settings = load(path, &mut cli, &matches)?;
        Ok((cli, settings))
    }

    const FILE: &str = "apiVersion: config.trainer.kubeflow.org/v1alpha1\nkind: Configuration\n\
        webhook: {port: 9555}\nmetrics: {bindAddress: \"127.0.0.1:18443\"}\n\
        leaderElection: {leaderElect: true, resourceName: from-file, leaseDuration: 30s}\n\
        controller: {groupKindConcurrency: {TrainJob.trainer.kubeflow.org: 9}}\n\
        statusServer: {port: 12443}\n";

    #[test]
    fn the_file_sets_what_the_flags_left_at_their_defaults() {
        let config = file(FILE);
        let (cli, settings) = parse(&[], config.path()).unwrap();
        assert_eq!(cli.webhook_port, 9555);
        assert_eq!(cli.metrics_bind_address, "127.0.0.1:18443".parse().unwrap());
        assert_eq!(cli.leader_elect_lease_name, "from-file");
        assert_eq!(cli.leader_elect_lease_duration.as_secs(), 30);
        assert_eq!(cli.concurrency, 9);
        assert_eq!(cli.status_server_port, 12443);
        assert!(
            settings.builtin_certs,
            "certManagement.enable defaults to true"
        );
        let effective = settings.effective(&cli);
        assert_eq!(effective.webhook.port, 9555);
        assert!(effective.cert_management.enable);
    }

    #[test]
    fn explicit_flags_win_over_the_file() {
        let config = file(FILE);
        let (cli, settings) = parse(
            &[
                "--webhook-port",
                "9666",
                "--concurrency",
                "2",
                "--leader-elect=false",
                "--webhook-cert-dir",
                "/certs",
            ],
            config.path(),
        )
        .unwrap();
        assert_eq!(cli.webhook_port, 9666);
        assert_eq!(cli.concurrency, 2);
        assert!(!cli.leader_elect);
        assert_eq!(cli.leader_elect_lease_name, "from-file");
        assert!(
            !settings.builtin_certs,
            "an explicit cert dir is cert-manager mode"
        );
        let effective = settings.effective(&cli);
        assert_eq!(effective.webhook.port, 9666);
        assert!(!effective.leader_elect());
        assert!(!effective.cert_management.enable);
    }

    #[test]
    fn problems_come_one_per_line() {
        let config = file("kind: Configuration\nwebhook: {port: 0}\n");
        let problems = parse(&[], config.path()).err().unwrap();
        assert_eq!(problems.len(), 2, "{problems:?}");
        let missing = Path::new("/no/such/config.yaml");
        let problems = parse(&[], missing).err().unwrap();
        assert!(problems[0].contains("/no/such/config.yaml"), "{problems:?}");
    }

    #[test]
    fn the_upstream_defaults_build_an_operator_offline() {
        let config =
            file("apiVersion: config.trainer.kubeflow.org/v1alpha1\nkind: Configuration\n");
        let (mut cli, settings) = parse(&[], config.path()).unwrap();
        assert_eq!(cli.metrics_bind_address, "0.0.0.0:8443".parse().unwrap());
        assert!(
            !cli.leader_elect,
            "no leaderElection section: off, as upstream"
        );
        // Built-in certificates: no certificate directory is read.
        settings.operator(&mut cli).unwrap();
    }
}
