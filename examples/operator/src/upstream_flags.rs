//! The flags of upstream's `trainer-controller-manager` (`cmd/trainer-controller-manager/main.go` in v2.3.0),
//! so that upstream's Deployments start kubetrain unchanged: its chart runs `/manager
//! --config=/controller_manager_config.yaml`, its kustomize base adds `--zap-log-level=2`.
//!
//! | upstream flag | in kubetrain |
//! |---|---|
//! | `--config` | the same flag (`cli.rs`) |
//! | `--kubeconfig` | the same flag (`cli.rs`) |
//! | `--feature-gates A=true,B=false` | over the file's `featureGates`: `TrainJobStatus` sets `--trainjob-status` unless that flag is given; `AllAlpha` turns it on; `AllBeta` accepted; unknown gates refused |
//! | `--zap-log-level` | `debug`, `info`, `error`, `panic` or a verbosity (integer > 0: debug); the log filter when `RUST_LOG` is unset |
//! | `--zap-encoder` | `console`: `--log-format text`, `json`: `--log-format json`, unless `--log-format` is given |
//! | `--zap-devel` | development logging: console and debug, unless `--log-format` / `--zap-log-level` say otherwise |
//! | `--zap-stacktrace-level`, `--zap-time-encoding` | checked, no effect (kubetrain's logs carry no stack traces and RFC 3339 times) |

use std::collections::BTreeMap;

use clap::Args;
use kubetrain_controller::config::FEATURE_GATES;

use crate::log_format::LogFormat;

/// Upstream's manager flags (see the module documentation).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct UpstreamFlags {
    /// Upstream's feature gates, `Name=true,Other=false`; over the Configuration file's featureGates
    /// (TrainJobStatus sets --trainjob-status unless given; AllAlpha turns it on; AllBeta is accepted).
    #[arg(long, env = "KUBETRAIN_FEATURE_GATES", value_parser = parse_feature_gates)]
    pub feature_gates: Option<FeatureGates>,

    /// Upstream's log level flag: debug, info, error, panic or a verbosity (an integer > 0 is debug); the
    /// log filter when RUST_LOG is unset.
    #[arg(long, env = "KUBETRAIN_ZAP_LOG_LEVEL", value_parser = parse_zap_level)]
    pub zap_log_level: Option<ZapLevel>,

    /// Upstream's log encoder flag: console (= --log-format text) or json, unless --log-format is given.
    #[arg(long, env = "KUBETRAIN_ZAP_ENCODER", value_parser = ["console", "json"])]
    pub zap_encoder: Option<String>,

    /// Upstream's development logging flag: console and debug unless --log-format / --zap-log-level say
    /// otherwise.
    #[arg(
        long,
        env = "KUBETRAIN_ZAP_DEVEL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub zap_devel: Option<bool>,

    /// Upstream's flag, checked and without effect (kubetrain's logs carry no stack traces).
    #[arg(long, env = "KUBETRAIN_ZAP_STACKTRACE_LEVEL", value_parser = ["info", "error", "panic"])]
    pub zap_stacktrace_level: Option<String>,

    /// Upstream's flag, checked and without effect (kubetrain's logs carry RFC 3339 times).
    #[arg(
        long,
        env = "KUBETRAIN_ZAP_TIME_ENCODING",
        value_parser = ["epoch", "millis", "nano", "iso8601", "rfc3339", "rfc3339nano"]
    )]
    pub zap_time_encoding: Option<String>,
}

/// `--feature-gates`, as given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FeatureGates(pub BTreeMap<String, bool>);

impl FeatureGates {
    /// Whether the gates decide `TrainJobStatus`: its own value, else `AllAlpha`'s.
    pub(crate) fn trainjob_status(&self) -> Option<bool> {
        self.0
            .get("TrainJobStatus")
            .or_else(|| self.0.get("AllAlpha"))
            .copied()
    }
}

/// Parses `Name=true,Other=false` as upstream's feature gate flag does; only known gates.
pub(crate) fn parse_feature_gates(text: &str) -> Result<FeatureGates, String> {
    let mut gates = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((name, value)) = pair.split_once('=') else {
            return Err(format!(
                "{pair:?}: missing bool value (Name=true or Name=false)"
            ));
        };
        let name = name.trim();
        let value = match value.trim() {
            "true" | "True" | "TRUE" | "1" | "t" | "T" => true,
            "false" | "False" | "FALSE" | "0" | "f" | "F" => false,
            other => return Err(format!("{name}: invalid value {other:?} (true or false)")),
        };
        if !FEATURE_GATES.contains(&name) {
            return Err(format!(
                "unrecognized feature gate {name:?} (known here: {})",
                FEATURE_GATES.join(", ")
            ));
        }
        gates.insert(name.to_owned(), value);
    }
    Ok(FeatureGates(gates))
}

/// A `--zap-log-level`, as a log level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ZapLevel {
    /// `debug` or a verbosity above 0.
    Debug,
    /// `info`.
    Info,
    /// `error` or `panic`.
    Error,
}

/// Parses controller-runtime's `--zap-log-level`: `debug`, `info`, `error`, `panic` or an integer > 0.
pub(crate) fn parse_zap_level(text: &str) -> Result<ZapLevel, String> {
    match text.to_ascii_lowercase().as_str() {
        "debug" => Ok(ZapLevel::Debug),
        "info" => Ok(ZapLevel::Info),
        "error" | "panic" => Ok(ZapLevel::Error),
        other => match other.parse::<i64>() {
            Ok(n) if n > 0 => Ok(ZapLevel::Debug),
            _ => Err(format!(
                "invalid log level {text:?} (debug, info, error, panic or an integer > 0)"
            )),
        },
    }
}

impl UpstreamFlags {
    /// The log format: `explicit` (--log-format given) wins, then --zap-encoder, then --zap-devel.
    pub(crate) fn log_format(&self, flag: LogFormat, explicit: bool) -> LogFormat {
        if explicit {
            return flag;
        }
        match (self.zap_encoder.as_deref(), self.zap_devel) {
            (Some("console"), _) | (None, Some(true)) => LogFormat::Text,
            (Some(_), _) => LogFormat::Json,
            _ => flag,
        }
    }

    /// The log filter when RUST_LOG is unset: from --zap-log-level, else --zap-devel (debug), else info.
    pub(crate) fn log_filter(&self) -> &'static str {
        let level = self
            .zap_log_level
            .or(self.zap_devel.filter(|d| *d).map(|_| ZapLevel::Debug));
        match level {
            // The operator's own crates; the HTTP and TLS libraries' debug lines stay off.
            Some(ZapLevel::Debug) => {
                "info,kubetrain_controller=debug,kubetrain_operator=debug,kubetrain_jobset=debug"
            }
            Some(ZapLevel::Error) => "error",
            Some(ZapLevel::Info) | None => "info",
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// Upstream's flags as the operator's command line flattens them, with `--config` beside them
    /// (`tests/help.rs` checks the whole command line).
    #[derive(Debug, Parser)]
    struct Cli {
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        #[command(flatten)]
        upstream: UpstreamFlags,
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kubetrain-operator").chain(args.iter().copied()))
    }

    /// The args of upstream v2.3.0's Deployments: the chart's (charts/kubeflow-trainer/templates/manager/
    /// deployment.yaml) and the kustomize base's (manifests/base/manager/manager_config_patch.yaml).
    #[test]
    fn upstreams_deployment_args_parse() {
        let chart = parse(&["--config=/controller_manager_config.yaml"]).unwrap();
        assert_eq!(
            chart.config.as_deref(),
            Some(std::path::Path::new("/controller_manager_config.yaml"))
        );
        let kustomize = parse(&[
            "--config=/controller_manager_config.yaml",
            "--zap-log-level=2",
        ])
        .unwrap();
        assert_eq!(kustomize.upstream.zap_log_level, Some(ZapLevel::Debug));
        assert!(
            kustomize
                .upstream
                .log_filter()
                .contains("kubetrain_controller=debug")
        );
    }

    #[test]
    fn zap_levels_parse_as_controller_runtime() {
        assert_eq!(parse_zap_level("info"), Ok(ZapLevel::Info));
        assert_eq!(parse_zap_level("panic"), Ok(ZapLevel::Error));
        assert_eq!(parse_zap_level("5"), Ok(ZapLevel::Debug));
        for bad in ["0", "-1", "warn", ""] {
            let error = parse_zap_level(bad).unwrap_err();
            assert!(error.contains("invalid log level"), "{bad}: {error}");
        }
        let error = parse(&["--zap-log-level=loud"]).unwrap_err().to_string();
        assert!(
            error.contains("--zap-log-level") && error.contains("loud"),
            "{error}"
        );
    }

    #[test]
    fn zap_encoder_and_devel_pick_the_format_unless_log_format_is_given() {
        let console = parse(&["--zap-encoder", "console"]).unwrap().upstream;
        assert_eq!(console.log_format(LogFormat::Json, false), LogFormat::Text);
        assert_eq!(console.log_format(LogFormat::Json, true), LogFormat::Json);
        let devel = parse(&["--zap-devel"]).unwrap().upstream;
        assert_eq!(devel.log_format(LogFormat::Json, false), LogFormat::Text);
        assert_ne!(devel.log_filter(), "info");
        let off = parse(&["--zap-devel=false"]).unwrap().upstream;
        assert_eq!(off.log_format(LogFormat::Json, false), LogFormat::Json);
        assert_eq!(off.log_filter(), "info");
        // Accepted and checked only.
        assert!(
            parse(&[
                "--zap-stacktrace-level=error",
                "--zap-time-encoding=iso8601"
            ])
            .is_ok()
        );
        assert!(parse(&["--zap-time-encoding=sundial"]).is_err());
    }

    #[test]
    fn feature_gates_parse_known_gates_only() {
        let gates = parse_feature_gates("TrainJobStatus=true, AllBeta=false").unwrap();
        assert_eq!(gates.trainjob_status(), Some(true));
        assert_eq!(
            parse_feature_gates("AllAlpha=true")
                .unwrap()
                .trainjob_status(),
            Some(true)
        );
        assert_eq!(parse_feature_gates("").unwrap().trainjob_status(), None);
        let unknown = parse_feature_gates("Warp=true").unwrap_err();
        assert!(
            unknown.contains("unrecognized feature gate \"Warp\""),
            "{unknown}"
        );
        let bad = parse_feature_gates("TrainJobStatus=maybe").unwrap_err();
        assert!(
            bad.contains("TrainJobStatus") && bad.contains("maybe"),
            "{bad}"
        );
        assert!(parse_feature_gates("TrainJobStatus").is_err());
    }
}
