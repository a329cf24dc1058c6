//! The strict reading of a `Configuration` document: every unknown field and bad value is one problem,
//! and all of them are reported together.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{
    API_VERSION, ConfigErrors, Configuration, FEATURE_GATES, KIND, LeaderElectionConfig, TlsConfig,
    parse_bind_address, parse_go_duration, parse_host,
};

/// TLS versions upstream's `tls.minVersion` accepts.
const TLS_VERSIONS: &[&str] = &["1.0", "1.1", "1.2", "1.3"];
/// ALPN protocols that mean something to an HTTPS server.
const NEXT_PROTOS: &[&str] = &["h2", "http/1.1"];

pub(super) fn parse(text: &str) -> Result<Configuration, ConfigErrors> {
    let value: Value = if text.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        serde_saphyr::from_str(text)
            .map_err(|e| ConfigErrors(vec![format!("not a YAML document: {e}")]))?
    };
    let mut reader = Reader::default();
    let config = reader.configuration(&value);
    if reader.problems.is_empty() {
        Ok(config)
    } else {
        Err(ConfigErrors(reader.problems))
    }
}

#[derive(Default)]
struct Reader {
    problems: Vec<String>,
}

impl Reader {
    fn problem(&mut self, path: &str, message: impl std::fmt::Display) {
        self.problems.push(format!("{path}: {message}"));
    }

    /// The object at `path` with only `known` keys (others are problems); `None` (and a problem) when the
    /// value is not an object. `null` reads as an empty object.
    fn object<'a>(
        &mut self,
        path: &str,
        value: &'a Value,
        known: &[&str],
    ) -> Option<&'a Map<String, Value>> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        let map = match value {
            Value::Object(map) => map,
            Value::Null => EMPTY.get_or_init(Map::new),
            other => {
                self.problem(path, format!("must be an object, got {}", kind(other)));
                return None;
            }
        };
        for key in map.keys() {
            if !known.contains(&key.as_str()) {
                let at = join(path, key);
                self.problem(
                    &at,
                    format!("unknown field (known here: {})", known.join(", ")),
                );
            }
        }
        Some(map)
    }

    fn string(&mut self, path: &str, value: &Value, max: usize) -> Option<String> {
        match value {
            Value::String(s) if s.len() > max => {
                self.problem(path, format!("at most {max} characters, got {}", s.len()));
                None
            }
            Value::String(s) => Some(s.clone()),
            other => {
                self.problem(path, format!("must be a string, got {}", kind(other)));
                None
            }
        }
    }

    fn boolean(&mut self, path: &str, value: &Value) -> Option<bool> {
        match value {
            Value::Bool(b) => Some(*b),
            other => {
                self.problem(path, format!("must be true or false, got {}", kind(other)));
                None
            }
        }
    }

    fn integer(&mut self, path: &str, value: &Value) -> Option<i64> {
        match value.as_i64() {
            Some(n) => Some(n),
            None => {
                self.problem(path, format!("must be an integer, got {}", kind(value)));
                None
            }
        }
    }

    fn port(&mut self, path: &str, value: &Value) -> Option<u16> {
        let n = self.integer(path, value)?;
        match u16::try_from(n) {
            Ok(port) if port >= 1 => Some(port),
            _ => {
                self.problem(path, format!("must be between 1 and 65535, got {n}"));
                None
            }
        }
    }

    fn non_negative_int(&mut self, path: &str, value: &Value) -> Option<u32> {
        let n = self.integer(path, value)?;
        match u32::try_from(n) {
            Ok(n) if i32::try_from(n).is_ok() => Some(n),
            _ => {
                self.problem(
                    path,
                    format!("must be greater than or equal to 0 (a 32-bit integer), got {n}"),
                );
                None
            }
        }
    }

    fn qps(&mut self, path: &str, value: &Value) -> Option<f32> {
        let Some(n) = value.as_f64() else {
            self.problem(path, format!("must be a number, got {}", kind(value)));
            return None;
        };
        if n < 0.0 || !n.is_finite() || n > f64::from(f32::MAX) {
            self.problem(path, format!("must be greater than or equal to 0, got {n}"));
            return None;
        }
        #[allow(
            clippy::cast_possible_truncation,
            reason = "range checked above; upstream's field is a float32"
        )]
        Some(n as f32)
    }

    fn bind_address(&mut self, path: &str, value: &Value) -> Option<String> {
        let text = self.string(path, value, 255)?;
        match parse_bind_address(&text) {
            Ok(_) => Some(text),
            Err(message) => {
                self.problem(path, message);
                None
            }
        }
    }

    fn endpoint_name(&mut self, path: &str, value: &Value, ours: &str) -> Option<String> {
        let name = self.string(path, value, 63)?;
        if name.is_empty() || name == ours {
            return Some(ours.to_owned());
        }
        self.problem(
            path,
            format!("kubetrain serves this probe at /{ours} only, got {name:?} (remove the field or set {ours:?})"),
        );
        None
    }

    fn configuration(&mut self, value: &Value) -> Configuration {
        let mut config = Configuration::default();
        let known = [
            "apiVersion",
            "kind",
            "webhook",
            "leaderElection",
            "metrics",
            "health",
            "controller",
            "certManagement",
            "clientConnection",
            "statusServer",
            "featureGates",
            "tls",
        ];
        let Some(map) = self.object("<root>", value, &known) else {
            return config;
        };
        self.type_meta(map);
        for (key, value) in map {
            match key.as_str() {
                "webhook" => self.webhook(value, &mut config),
                "leaderElection" => config.leader_election = self.leader_election(value),
                "metrics" => self.metrics(value, &mut config),
                "health" => self.health(value, &mut config),
                "controller" => self.controller(value, &mut config),
                "certManagement" => self.cert_management(value, &mut config),
                "clientConnection" => self.client_connection(value, &mut config),
                "statusServer" => self.status_server(value, &mut config),
                "featureGates" => self.feature_gates(value, &mut config),
                "tls" => config.tls = self.tls(value),
                _ => {}
            }
        }
        if config.metrics.auth.enabled && !config.metrics.secure_serving {
            self.problem(
                "metrics.auth.enabled",
                "needs metrics.secureServing: true (tokens are not sent over plain HTTP)",
            );
        }
        config
    }

    fn type_meta(&mut self, map: &Map<String, Value>) {
        match map.get("apiVersion") {
            Some(Value::String(v)) if v == API_VERSION => {}
            Some(other) => self.problem(
                "apiVersion",
                format!("must be {API_VERSION}, got {}", short(other)),
            ),
            None => self.problem("apiVersion", format!("missing (set it to {API_VERSION})")),
        }
        match map.get("kind") {
            Some(Value::String(v)) if v == KIND => {}
            Some(other) => self.problem("kind", format!("must be {KIND}, got {}", short(other))),
            None => self.problem("kind", format!("missing (set it to {KIND})")),
        }
    }

    fn webhook(&mut self, value: &Value, config: &mut Configuration) {
        let Some(map) = self.object("webhook", value, &["port", "host"]) else {
            return;
        };
        if let Some(v) = map.get("port")
            && let Some(port) = self.port("webhook.port", v)
        {
            config.webhook.port = port;
        }
        if let Some(v) = map.get("host")
            && let Some(host) = self.string("webhook.host", v, 253)
        {
            match parse_host(&host) {
                Ok(_) => config.webhook.host = host,
                Err(message) => self.problem("webhook.host", message),
            }
        }
    }

    fn leader_election(&mut self, value: &Value) -> Option<LeaderElectionConfig> {
        let known = [
            "leaderElect",
            "leaseDuration",
            "renewDeadline",
            "retryPeriod",
            "resourceLock",
            "resourceName",
            "resourceNamespace",
        ];
        let map = self.object("leaderElection", value, &known)?;
        let mut election = LeaderElectionConfig::default();
        for (key, value) in map {
            let path = format!("leaderElection.{key}");
            match key.as_str() {
                "leaderElect" => {
                    if let Some(b) = self.boolean(&path, value) {
                        election.leader_elect = b;
                    }
                }
                "resourceLock" => {
                    if let Some(lock) = self.string(&path, value, 63) {
                        if lock.is_empty() || lock == "leases" {
                            election.resource_lock = "leases".into();
                        } else {
                            self.problem(
                                &path,
                                format!("only \"leases\" is supported, got {lock:?}"),
                            );
                        }
                    }
                }
                "resourceName" => {
                    if let Some(name) = self.string(&path, value, 253)
                        && !name.is_empty()
                    {
                        election.resource_name = name;
                    }
                }
                "resourceNamespace" => {
                    if let Some(ns) = self.string(&path, value, 63) {
                        election.resource_namespace = ns;
                    }
                }
                "leaseDuration" | "renewDeadline" | "retryPeriod" => {
                    let Some(text) = self.string(&path, value, 64) else {
                        continue;
                    };
                    match parse_go_duration(&text) {
                        Ok(d) if d.is_zero() => {} // Unset in Go's zero value: the default stays.
                        Ok(d) if key == "leaseDuration" => election.lease_duration = d,
                        Ok(d) if key == "renewDeadline" => election.renew_deadline = d,
                        Ok(d) => election.retry_period = d,
                        Err(message) => self.problem(&path, message),
                    }
                }
                _ => {}
            }
        }
        if election.leader_elect {
            if election.renew_deadline >= election.lease_duration {
                self.problem(
                    "leaderElection.renewDeadline",
                    "must be shorter than leaderElection.leaseDuration",
                );
            }
            if election.retry_period >= election.renew_deadline {
                self.problem(
                    "leaderElection.retryPeriod",
                    "must be shorter than leaderElection.renewDeadline",
                );
            }
        }
        Some(election)
    }

    fn metrics(&mut self, value: &Value, config: &mut Configuration) {
        let known = ["bindAddress", "secureServing", "auth"];
        let Some(map) = self.object("metrics", value, &known) else {
            return;
        };
        if let Some(v) = map.get("bindAddress")
            && let Some(address) = self.bind_address("metrics.bindAddress", v)
            && !address.is_empty()
        {
            config.metrics.bind_address = address;
        }
        if let Some(v) = map.get("secureServing")
            && let Some(b) = self.boolean("metrics.secureServing", v)
        {
            config.metrics.secure_serving = b;
        }
        if let Some(v) = map.get("auth")
            && let Some(auth) = self.object("metrics.auth", v, &["enabled"])
            && let Some(v) = auth.get("enabled")
            && let Some(b) = self.boolean("metrics.auth.enabled", v)
        {
            config.metrics.auth.enabled = b;
        }
    }

    fn health(&mut self, value: &Value, config: &mut Configuration) {
        let known = [
            "healthProbeBindAddress",
            "readinessEndpointName",
            "livenessEndpointName",
        ];
        let Some(map) = self.object("health", value, &known) else {
            return;
        };
        if let Some(v) = map.get("healthProbeBindAddress")
            && let Some(address) = self.bind_address("health.healthProbeBindAddress", v)
            && !address.is_empty()
        {
            config.health.health_probe_bind_address = address;
        }
        if let Some(v) = map.get("readinessEndpointName")
            && let Some(name) = self.endpoint_name("health.readinessEndpointName", v, "readyz")
        {
            config.health.readiness_endpoint_name = name;
        }
        if let Some(v) = map.get("livenessEndpointName")
            && let Some(name) = self.endpoint_name("health.livenessEndpointName", v, "healthz")
        {
            config.health.liveness_endpoint_name = name;
        }
    }

    fn controller(&mut self, value: &Value, config: &mut Configuration) {
        let Some(map) = self.object("controller", value, &["groupKindConcurrency"]) else {
            return;
        };
        let Some(v) = map.get("groupKindConcurrency") else {
            return;
        };
        // Any Kind.group is a key (controller-runtime ignores kinds it has no controller for).
        let entries = match v {
            Value::Object(entries) => entries,
            Value::Null => return,
            other => {
                self.problem(
                    "controller.groupKindConcurrency",
                    format!(
                        "must be a map of Kind.group to a number, got {}",
                        kind(other)
                    ),
                );
                return;
            }
        };
        let mut out = BTreeMap::new();
        for (group_kind, value) in entries {
            let path = format!("controller.groupKindConcurrency[{group_kind}]");
            let Some(n) = self.integer(&path, value) else {
                continue;
            };
            match u32::try_from(n) {
                Ok(n) if n >= 1 => {
                    out.insert(group_kind.clone(), n);
                }
                _ => self.problem(&path, format!("must be greater than 0, got {n}")),
            }
        }
        config.controller.group_kind_concurrency = out;
    }

    fn cert_management(&mut self, value: &Value, config: &mut Configuration) {
        let known = ["enable", "webhookServiceName", "webhookSecretName"];
        let Some(map) = self.object("certManagement", value, &known) else {
            return;
        };
        let cert = &mut config.cert_management;
        if let Some(v) = map.get("enable")
            && let Some(b) = self.boolean("certManagement.enable", v)
        {
            cert.enable = b;
        }
        for (key, target) in [
            ("webhookServiceName", &mut cert.webhook_service_name),
            ("webhookSecretName", &mut cert.webhook_secret_name),
        ] {
            let path = format!("certManagement.{key}");
            if let Some(v) = map.get(key)
                && let Some(name) = self.string(&path, v, 253)
                && !name.is_empty()
            {
                if is_dns_subdomain(&name) {
                    *target = name;
                } else {
                    self.problems.push(format!(
                        "{path}: {name:?} is not a valid object name (lower-case letters, digits, '-' and '.')"
                    ));
                }
            }
        }
    }

    fn client_connection(&mut self, value: &Value, config: &mut Configuration) {
        let Some(map) = self.object("clientConnection", value, &["qps", "burst"]) else {
            return;
        };
        if let Some(v) = map.get("qps")
            && let Some(qps) = self.qps("clientConnection.qps", v)
        {
            config.client_connection.qps = qps;
        }
        if let Some(v) = map.get("burst")
            && let Some(burst) = self.non_negative_int("clientConnection.burst", v)
        {
            config.client_connection.burst = burst;
        }
    }

    fn status_server(&mut self, value: &Value, config: &mut Configuration) {
        let Some(map) = self.object("statusServer", value, &["port", "qps", "burst"]) else {
            return;
        };
        if let Some(v) = map.get("port")
            && let Some(port) = self.port("statusServer.port", v)
        {
            config.status_server.port = port;
        }
        if let Some(v) = map.get("qps")
            && let Some(qps) = self.qps("statusServer.qps", v)
        {
            config.status_server.qps = qps;
        }
        if let Some(v) = map.get("burst")
            && let Some(burst) = self.non_negative_int("statusServer.burst", v)
        {
            config.status_server.burst = burst;
        }
    }

    fn feature_gates(&mut self, value: &Value, config: &mut Configuration) {
        let entries = match value {
            Value::Object(entries) => entries,
            Value::Null => return,
            other => {
                self.problem(
                    "featureGates",
                    format!(
                        "must be a map of feature names to true/false, got {}",
                        kind(other)
                    ),
                );
                return;
            }
        };
        for (gate, value) in entries {
            let path = format!("featureGates.{gate}");
            if !FEATURE_GATES.contains(&gate.as_str()) {
                self.problem(
                    &path,
                    format!(
                        "unrecognized feature gate (known: {})",
                        FEATURE_GATES.join(", ")
                    ),
                );
                continue;
            }
            if let Some(b) = self.boolean(&path, value) {
                config.feature_gates.insert(gate.clone(), b);
            }
        }
    }

    fn tls(&mut self, value: &Value) -> Option<TlsConfig> {
        let known = ["minVersion", "cipherSuites", "nextProtos"];
        let map = self.object("tls", value, &known)?;
        let mut tls = TlsConfig::default();
        if let Some(v) = map.get("minVersion")
            && let Some(version) = self.string("tls.minVersion", v, 8)
        {
            if version.is_empty() || TLS_VERSIONS.contains(&version.as_str()) {
                tls.min_version = version;
            } else {
                self.problem(
                    "tls.minVersion",
                    format!(
                        "must be one of {}, got {version:?}",
                        TLS_VERSIONS.join(", ")
                    ),
                );
            }
        }
        if let Some(v) = map.get("cipherSuites") {
            tls.cipher_suites = self.strings("tls.cipherSuites", v, 100, |name| {
                crate::webhook::tls::cipher_suite_known(name)
                    .then_some(())
                    .ok_or_else(|| "unknown cipher suite (use IANA names such as TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)".to_owned())
            });
        }
        if let Some(v) = map.get("nextProtos") {
            tls.next_protos = self.strings("tls.nextProtos", v, 10, |proto| {
                NEXT_PROTOS
                    .contains(&proto)
                    .then_some(())
                    .ok_or_else(|| format!("must be one of {}", NEXT_PROTOS.join(", ")))
            });
        }
        Some(tls)
    }

    /// A list of strings, each checked by `check`; at most `max` items.
    fn strings(
        &mut self,
        path: &str,
        value: &Value,
        max: usize,
        check: impl Fn(&str) -> Result<(), String>,
    ) -> Vec<String> {
        let items = match value {
            Value::Array(items) => items,
            Value::Null => return Vec::new(),
            other => {
                self.problem(path, format!("must be a list, got {}", kind(other)));
                return Vec::new();
            }
        };
        if items.len() > max {
            self.problem(path, format!("at most {max} items, got {}", items.len()));
        }
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let at = format!("{path}[{i}]");
            if let Some(s) = self.string(&at, item, 100) {
                match check(&s) {
                    Ok(()) => out.push(s),
                    Err(message) => self.problem(&at, format!("{s:?}: {message}")),
                }
            }
        }
        out
    }
}

fn join(path: &str, key: &str) -> String {
    if path == "<root>" {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > 60 {
        format!("{}…", &text[..text.floor_char_boundary(60)])
    } else {
        text
    }
}

/// RFC 1123 subdomain, as Kubernetes object names.
fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}
