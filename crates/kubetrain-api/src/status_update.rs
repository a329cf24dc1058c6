//! The request body of the TrainJob status endpoint (`POST .../trainjobs/{name}/status`, upstream v2.3's
//! status server), read as upstream's Go server reads it (`encoding/json` into `UpdateTrainJobStatusRequest`),
//! checked against the CRD's rules for `status.trainerStatus`, and turned into the status merge patch and the
//! answers upstream sends.
//!
//! Pure, so that the operator's status server (`kubetrain_controller::status_server`) and the local runner's
//! loopback endpoint (`kubetrain_client::local::status`) answer the same body the same way.

use crate::{Metric, TrainerStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Map, Value, json};

/// Most metrics a `trainerStatus` may hold (the CRD's `maxItems`).
pub const MAX_METRICS: usize = 256;
/// Longest metric name or value, in characters (the CRD's `maxLength`).
pub const MAX_METRIC_LEN: usize = 64;

/// The body did not decode as an `UpdateTrainJobStatusRequest` (upstream: 422 `Invalid payload`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidPayload;

/// Reads a request body as Go's `json.Decoder.Decode` does: the first JSON value (trailing bytes are not
/// read), field names matched exactly or else case-insensitively, `null` anywhere meaning "absent", integers
/// that must fit an `int32` (no fractions or exponents), and `lastUpdatedTime` in RFC 3339.
///
/// `Ok(None)` is a body without `trainerStatus`, which upstream answers with 200 and writes nothing.
///
/// ```
/// use kubetrain_api::status_update::parse;
///
/// let status = parse(br#"{"trainerStatus": {"progressPercentage": 40,
///     "metrics": [{"name": "loss", "value": "0.25"}],
///     "lastUpdatedTime": "2026-12-01T14:00:00.5+01:00"}}"#).unwrap().unwrap();
/// assert_eq!(status.progress_percentage, Some(40));
/// assert_eq!(status.metrics[0].name, "loss");
/// assert!(parse(b"{}").unwrap().is_none());
/// assert!(parse(br#"{"trainerStatus": {"progressPercentage": 40.5}}"#).is_err());
/// assert!(parse(b"").is_err());
/// ```
pub fn parse(body: &[u8]) -> Result<Option<TrainerStatus>, InvalidPayload> {
    let first = serde_json::Deserializer::from_slice(body)
        .into_iter::<Value>()
        .next();
    let value = match first {
        Some(Ok(value)) => value,
        _ => return Err(InvalidPayload),
    };
    let object = match &value {
        Value::Null => return Ok(None),
        Value::Object(object) => object,
        _ => return Err(InvalidPayload),
    };
    let status = match field(object, "trainerStatus") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(status)) => status,
        Some(_) => return Err(InvalidPayload),
    };
    let metrics = match field(status, "metrics") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.iter().map(metric).collect::<Result<_, _>>()?,
        Some(_) => return Err(InvalidPayload),
    };
    let last_updated_time = match field(status, "lastUpdatedTime") {
        None | Some(Value::Null) => None,
        Some(text @ Value::String(_)) => {
            Some(serde_json::from_value::<Time>(text.clone()).map_err(|_| InvalidPayload)?)
        }
        Some(_) => return Err(InvalidPayload),
    };
    Ok(Some(TrainerStatus {
        progress_percentage: int32(field(status, "progressPercentage"))?,
        estimated_remaining_seconds: int32(field(status, "estimatedRemainingSeconds"))?,
        metrics,
        last_updated_time,
    }))
}

/// A struct field as Go finds it: the exact key, else the last key equal to it ignoring case.
fn field<'a>(object: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    object.get(name).or_else(|| {
        object
            .iter()
            .rfind(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value)
    })
}

fn int32(value: Option<&Value>) -> Result<Option<i32>, InvalidPayload> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .map(Some)
            .ok_or(InvalidPayload),
        Some(_) => Err(InvalidPayload),
    }
}

fn metric(value: &Value) -> Result<Metric, InvalidPayload> {
    let text = |v: Option<&Value>| match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(InvalidPayload),
    };
    match value {
        Value::Null => Ok(Metric::default()),
        Value::Object(m) => Ok(Metric {
            name: text(field(m, "name"))?,
            value: text(field(m, "value"))?,
        }),
        _ => Err(InvalidPayload),
    }
}

/// The CRD's rules for `status.trainerStatus`, which the API server would apply to the patch, worded as the
/// API server (v1.35) words them (`<field path>: <reason>`). Checked before writing so that an invalid update
/// never replaces a valid one waiting to be written.
///
/// As on the API server, a structural error (too long, too many, required) means the CEL rule
/// (`lastUpdatedTime` required) is not checked, and a last error says so. The API server lists the errors of
/// different fields in an order that varies from call to call (Go map iteration); here it is fixed: metrics,
/// progress, remaining time, then the rule.
///
/// ```
/// use kubetrain_api::TrainerStatus;
/// use kubetrain_api::status_update::validate;
///
/// let errors = validate(&TrainerStatus { progress_percentage: Some(101), ..Default::default() });
/// assert_eq!(errors, [
///     "status.trainerStatus.progressPercentage: Invalid value: 101: trainerStatus.progressPercentage in body should be less than or equal to 100",
///     "status.trainerStatus: Invalid value: lastUpdatedTime is required when trainerStatus is present",
/// ]);
/// ```
pub fn validate(status: &TrainerStatus) -> Vec<String> {
    const BASE: &str = "status.trainerStatus";
    let mut errors = Vec::new();
    let mut structural = false;
    if status.metrics.len() > MAX_METRICS {
        structural = true;
        errors.push(format!(
            "{BASE}.metrics: Too many: {}: must have at most {MAX_METRICS} items",
            status.metrics.len()
        ));
    }
    for (i, metric) in status.metrics.iter().enumerate() {
        for (name, value) in [("name", &metric.name), ("value", &metric.value)] {
            let path = format!("{BASE}.metrics[{i}].{name}");
            if value.is_empty() {
                // Upstream's Go types drop empty strings (omitempty), so the field is missing.
                structural = true;
                errors.push(format!("{path}: Required value"));
            } else if value.chars().count() > MAX_METRIC_LEN {
                // Characters, though the API server's message says bytes.
                structural = true;
                errors.push(format!(
                    "{path}: Too long: may not be more than {MAX_METRIC_LEN} bytes"
                ));
            }
        }
    }
    let mut range = |name: &str, value: Option<i32>, max: Option<i32>| {
        let Some(value) = value else { return };
        let path = format!("{BASE}.{name}");
        let in_body = format!("trainerStatus.{name}");
        if value < 0 {
            errors.push(format!(
                "{path}: Invalid value: {value}: {in_body} in body should be greater than or equal to 0"
            ));
        } else if let Some(max) = max.filter(|max| value > *max) {
            errors.push(format!(
                "{path}: Invalid value: {value}: {in_body} in body should be less than or equal to {max}"
            ));
        }
    };
    range("progressPercentage", status.progress_percentage, Some(100));
    range(
        "estimatedRemainingSeconds",
        status.estimated_remaining_seconds,
        None,
    );
    if structural {
        errors.push(
            "<nil>: Invalid value: null: some validation rules were not checked because the object was \
             invalid; correct the existing errors to complete validation"
                .to_owned(),
        );
    } else if status.last_updated_time.is_none() {
        errors.push(format!(
            "{BASE}: Invalid value: lastUpdatedTime is required when trainerStatus is present"
        ));
    }
    errors
}

/// The API server's message for a status that fails validation: `TrainJob.trainer.kubeflow.org "<name>" is
/// invalid: <error>`, several errors in brackets.
pub fn invalid_message(name: &str, errors: &[String]) -> String {
    let joined = match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    format!("TrainJob.trainer.kubeflow.org \"{name}\" is invalid: {joined}")
}

/// `status.trainerStatus` as upstream's server-side apply leaves it, written as a JSON merge patch: every
/// field the request leaves out is `null` (removed), as the apply of the field manager `trainer-status`
/// (the only one writing `trainerStatus`) drops the fields it no longer sets; `metrics` is replaced whole
/// (an atomic list); the time is written in whole seconds, UTC, as Go's `metav1.Time` encodes it.
///
/// ```
/// use kubetrain_api::TrainerStatus;
/// use kubetrain_api::status_update::{merge_patch, parse};
///
/// let status = parse(br#"{"trainerStatus": {"progressPercentage": 7,
///     "lastUpdatedTime": "2026-12-01T14:00:00.9+01:00"}}"#).unwrap().unwrap();
/// assert_eq!(merge_patch(&status), serde_json::json!({"status": {"trainerStatus": {
///     "progressPercentage": 7, "estimatedRemainingSeconds": null, "metrics": null,
///     "lastUpdatedTime": "2026-12-01T13:00:00Z"}}}));
/// ```
pub fn merge_patch(status: &TrainerStatus) -> Value {
    let metrics = if status.metrics.is_empty() {
        Value::Null
    } else {
        Value::Array(status.metrics.iter().map(metric_json).collect())
    };
    json!({"status": {"trainerStatus": {
        "progressPercentage": status.progress_percentage,
        "estimatedRemainingSeconds": status.estimated_remaining_seconds,
        "metrics": metrics,
        "lastUpdatedTime": status.last_updated_time,
    }}})
}

/// The `status.trainerStatus` that [`merge_patch`] leaves on a TrainJob (whatever it held before): the
/// fields sent, the time in whole seconds, UTC. What a client reads back after an accepted update.
///
/// ```
/// use kubetrain_api::status_update::{applied, parse};
///
/// let status = parse(br#"{"trainerStatus": {"progressPercentage": 7,
///     "lastUpdatedTime": "2026-12-01T14:00:00.9+01:00"}}"#).unwrap().unwrap();
/// let written = applied(&status);
/// assert_eq!(written.progress_percentage, Some(7));
/// assert_eq!(written.last_updated_time.unwrap().0.to_string(), "2026-12-01T13:00:00Z");
/// ```
pub fn applied(status: &TrainerStatus) -> TrainerStatus {
    // Read back from the patch itself, so the two can never disagree.
    let mut written = merge_patch(status)["status"]["trainerStatus"].take();
    if let Value::Object(fields) = &mut written {
        fields.retain(|_, value| !value.is_null());
    }
    serde_json::from_value(written).unwrap_or_else(|_| status.clone())
}

/// Upstream's 200 answer: the parsed request encoded again (Go's encoding: absent numbers and empty lists
/// left out, `lastUpdatedTime` always present, `null` when it was missing), followed by a newline.
pub fn echo(status: Option<&TrainerStatus>) -> Vec<u8> {
    let body = match status {
        None => json!({}),
        Some(status) => {
            let mut out = Map::new();
            if let Some(p) = status.progress_percentage {
                out.insert("progressPercentage".into(), json!(p));
            }
            if let Some(s) = status.estimated_remaining_seconds {
                out.insert("estimatedRemainingSeconds".into(), json!(s));
            }
            if !status.metrics.is_empty() {
                let metrics = status.metrics.iter().map(metric_json).collect();
                out.insert("metrics".into(), Value::Array(metrics));
            }
            out.insert("lastUpdatedTime".into(), json!(status.last_updated_time));
            json!({ "trainerStatus": out })
        }
    };
    let mut bytes = serde_json::to_vec(&body).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// A metric as Go encodes it: empty strings left out (`omitempty`).
fn metric_json(metric: &Metric) -> Value {
    let mut o = Map::new();
    if !metric.name.is_empty() {
        o.insert("name".into(), json!(metric.name));
    }
    if !metric.value.is_empty() {
        o.insert("value".into(), json!(metric.value));
    }
    Value::Object(o)
}

/// Upstream's error answer: a `metav1.Status` as Go encodes it (no kind or apiVersion, an empty
/// `metadata`), followed by a newline.
///
/// ```
/// use kubetrain_api::status_update::failure;
///
/// assert_eq!(
///     String::from_utf8(failure("Forbidden", "Forbidden", 403)).unwrap(),
///     "{\"metadata\":{},\"status\":\"Failure\",\"message\":\"Forbidden\",\"reason\":\"Forbidden\",\"code\":403}\n"
/// );
/// ```
pub fn failure(message: &str, reason: &str, code: u16) -> Vec<u8> {
    // Written by hand to keep Go's field order.
    let mut bytes = format!(
        "{{\"metadata\":{{}},\"status\":\"Failure\",\"message\":{},\"reason\":{},\"code\":{code}}}",
        Value::String(message.to_owned()),
        Value::String(reason.to_owned()),
    )
    .into_bytes();
    bytes.push(b'\n');
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn metric_strategy() -> impl Strategy<Value = Metric> {
        ("[a-z_]{0,70}", "[0-9.é]{0,70}").prop_map(|(name, value)| Metric { name, value })
    }

    proptest! {
        #[test]
        fn arbitrary_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(Some(status)) = parse(&body) {
                let _ = validate(&status);
                let _ = merge_patch(&status);
                let _ = echo(Some(&status));
            }
        }

        #[test]
        fn the_echo_reads_back_as_the_same_update(
            progress in proptest::option::of(-5i32..110),
            remaining in proptest::option::of(any::<i32>()),
            metrics in proptest::collection::vec(metric_strategy(), 0..4),
            seconds in proptest::option::of(0i64..4_000_000_000),
        ) {
            let last_updated_time = seconds.map(|s| {
                serde_json::from_value::<Time>(json!(k8s_openapi::jiff::Timestamp::from_second(s).unwrap().to_string()))
                    .unwrap()
            });
            let status = TrainerStatus {
                progress_percentage: progress,
                estimated_remaining_seconds: remaining,
                metrics,
                last_updated_time,
            };
            let again = parse(&echo(Some(&status))).unwrap().unwrap();
            prop_assert_eq!(&again, &status);
            // What is written is what was sent, nulls for what was not.
            let written = &merge_patch(&status)["status"]["trainerStatus"];
            prop_assert_eq!(written["progressPercentage"].as_i64(), progress.map(i64::from));
            prop_assert_eq!(validate(&status).is_empty(),
                progress.is_none_or(|p| (0..=100).contains(&p))
                    && remaining.is_none_or(|r| r >= 0)
                    && again.metrics.iter().all(|m| (1..=64).contains(&m.name.chars().count())
                        && (1..=64).contains(&m.value.chars().count()))
                    && seconds.is_some());
        }
    }

    #[test]
    fn go_decoding_rules() {
        let ok = |body: &str| parse(body.as_bytes()).unwrap();
        let bad = |body: &str| assert_eq!(parse(body.as_bytes()), Err(InvalidPayload), "{body}");
        assert!(ok("null").is_none());
        assert!(ok(r#"{"trainerStatus": null}"#).is_none());
        assert!(ok(r#"{"other": 1}"#).is_none());
        // Case-insensitive keys and trailing bytes, as encoding/json.
        let s = ok(r#"{"TRAINERSTATUS": {"ProgressPercentage": 3}} trailing"#).unwrap();
        assert_eq!(s.progress_percentage, Some(3));
        let s = ok(r#"{"trainerStatus": {"metrics": [null, {"name": "a"}]}}"#).unwrap();
        assert_eq!(s.metrics[0], Metric::default());
        assert_eq!(s.metrics[1].name, "a");
        for body in [
            "",
            "   ",
            "[]",
            "{",
            r#"{"trainerStatus": []}"#,
            r#"{"trainerStatus": {"progressPercentage": "5"}}"#,
            r#"{"trainerStatus": {"progressPercentage": 5.0}}"#,
            r#"{"trainerStatus": {"progressPercentage": 1e2}}"#,
            r#"{"trainerStatus": {"estimatedRemainingSeconds": 2147483648}}"#,
            r#"{"trainerStatus": {"metrics": {}}}"#,
            r#"{"trainerStatus": {"metrics": [{"name": 1}]}}"#,
            r#"{"trainerStatus": {"lastUpdatedTime": "yesterday"}}"#,
            r#"{"trainerStatus": {"lastUpdatedTime": 5}}"#,
        ] {
            bad(body);
        }
    }

    #[test]
    fn python_sdk_timestamps_are_written_in_whole_utc_seconds() {
        // datetime.now(timezone.utc).isoformat()
        let s =
            parse(br#"{"trainerStatus": {"lastUpdatedTime": "2026-12-01T14:38:32.123456+00:00"}}"#)
                .unwrap()
                .unwrap();
        let patch = merge_patch(&s);
        assert_eq!(
            patch["status"]["trainerStatus"]["lastUpdatedTime"],
            "2026-12-01T14:38:32Z"
        );
        assert_eq!(
            String::from_utf8(echo(Some(&s))).unwrap(),
            "{\"trainerStatus\":{\"lastUpdatedTime\":\"2026-12-01T14:38:32Z\"}}\n"
        );
        assert_eq!(echo(None), b"{}\n");
    }

    #[test]
    fn crd_rules() {
        let time = serde_json::from_value::<Time>(json!("2026-01-01T00:00:00Z")).ok();
        let valid = TrainerStatus {
            progress_percentage: Some(100),
            estimated_remaining_seconds: Some(0),
            metrics: vec![Metric {
                name: "loss".into(),
                value: "é".repeat(64),
            }],
            last_updated_time: time.clone(),
        };
        assert!(validate(&valid).is_empty());
        let many = TrainerStatus {
            metrics: vec![
                Metric {
                    name: "m".into(),
                    value: "1".into()
                };
                257
            ],
            last_updated_time: time.clone(),
            ..Default::default()
        };
        assert_eq!(
            validate(&many)[0],
            "status.trainerStatus.metrics: Too many: 257: must have at most 256 items"
        );
        let bad = TrainerStatus {
            estimated_remaining_seconds: Some(-1),
            metrics: vec![Metric {
                name: String::new(),
                value: "é".repeat(65),
            }],
            last_updated_time: time,
            ..Default::default()
        };
        let errors = validate(&bad);
        assert_eq!(
            errors,
            [
                "status.trainerStatus.metrics[0].name: Required value",
                "status.trainerStatus.metrics[0].value: Too long: may not be more than 64 bytes",
                "status.trainerStatus.estimatedRemainingSeconds: Invalid value: -1: trainerStatus.estimatedRemainingSeconds in body should be greater than or equal to 0",
                "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            ]
        );
        assert_eq!(
            invalid_message("job", &errors[2..3]),
            "TrainJob.trainer.kubeflow.org \"job\" is invalid: status.trainerStatus.estimatedRemainingSeconds: Invalid value: -1: trainerStatus.estimatedRemainingSeconds in body should be greater than or equal to 0"
        );
        assert!(invalid_message("job", &errors).contains(": [status."));
    }
}
