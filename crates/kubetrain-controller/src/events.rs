//! Kubernetes events the controller publishes about a TrainJob (upstream's reasons and actions), through
//! kube-runtime's events [`Recorder`] (`events.k8s.io/v1`, repeated events become a series).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};

/// Reason of the Warning event after rendering or applying the TrainJob's objects failed.
pub const RESOURCES_CREATION_FAILED: &str = "TrainJobResourcesCreationFailed";
/// Action of [`RESOURCES_CREATION_FAILED`].
pub const ACTION_RECONCILING: &str = "Reconciling";
/// Longest error text quoted in an event note (events are limited to 1 KiB; upstream cuts at 950 characters).
pub const MAX_QUOTED_ERROR: usize = 950;

/// The Warning event upstream emits when the TrainJob's objects could not be reconciled:
/// `TrainJob resources reconciliation failed: <error, cut at 950 characters>[ ...]`.
pub fn resources_creation_failed(error: &str) -> Event {
    let mut note = String::from("TrainJob resources reconciliation failed: ");
    match error.char_indices().nth(MAX_QUOTED_ERROR) {
        None => note.push_str(error),
        Some((cut, _)) => {
            note.push_str(&error[..cut]);
            note.push_str(" ...");
        }
    }
    Event {
        type_: EventType::Warning,
        reason: RESOURCES_CREATION_FAILED.to_owned(),
        note: Some(note),
        action: ACTION_RECONCILING.to_owned(),
        secondary: None,
    }
}

/// Publishes `event` about `reference`; a failure is logged, never fatal (events are best effort).
pub async fn publish(recorder: &Recorder, event: &Event, reference: &ObjectReference) {
    if let Err(error) = recorder.publish(event, reference).await {
        tracing::warn!(%error, reason = %event.reason, "publishing event failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_quote_the_error_up_to_950_characters() {
        let short = resources_creation_failed("boom");
        assert_eq!(
            short.note.as_deref(),
            Some("TrainJob resources reconciliation failed: boom")
        );
        assert_eq!(
            (short.reason.as_str(), short.action.as_str()),
            (RESOURCES_CREATION_FAILED, ACTION_RECONCILING)
        );
        assert_eq!(short.type_, EventType::Warning);

        let exact = "é".repeat(MAX_QUOTED_ERROR);
        let note = resources_creation_failed(&exact).note.unwrap();
        assert!(!note.ends_with(" ..."), "950 characters fit");

        let long = "x".repeat(2000);
        let note = resources_creation_failed(&long).note.unwrap();
        assert!(note.ends_with(" ..."));
        let quoted = note
            .trim_start_matches("TrainJob resources reconciliation failed: ")
            .trim_end_matches(" ...");
        assert_eq!(quoted.chars().count(), MAX_QUOTED_ERROR);
        assert!(note.len() < 1024, "fits the events API limit");
    }
}
