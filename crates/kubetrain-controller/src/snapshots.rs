//! Runtime snapshots parsed once per distinct text. Every reconcile of a running TrainJob renders from its
//! runtime snapshot ConfigMap, and parsing that YAML each time was about 5 % of the operator's CPU under load
//! (a `perf` profile of 300 TrainJobs on kwok). TrainJobs of the same runtime have snapshots with the same text,
//! so the parsed runtime is kept by text: a thousand TrainJobs of one runtime cost one parse and one copy in
//! memory. A snapshot whose text differs (another runtime, a runtime edited between two TrainJobs, a ConfigMap
//! edited by hand) is parsed on its own, so what is rendered is always what is stored.
//!
//! Only parsing is saved: the owner and `runtimeRef` checks run on every reconcile, as upstream's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ConfigMap;

use crate::error::Result;
use crate::reconcile::{RUNTIME_KEY, SnapshotRuntime, parse_snapshot};

/// Distinct snapshot texts kept; past this the memory starts afresh (a cluster has a handful of runtimes).
const KEPT: usize = 64;

/// Parsed runtimes by the text of their snapshot.
#[derive(Debug, Default)]
pub(crate) struct ParsedSnapshots {
    parsed: Mutex<HashMap<String, Arc<SnapshotRuntime>>>,
}

impl ParsedSnapshots {
    /// The runtime in the snapshot ConfigMap `cm`: parsed before from the same text, or parsed now.
    pub(crate) fn get_or_parse(&self, cm: &ConfigMap) -> Result<Arc<SnapshotRuntime>> {
        let Some(text) = cm.data.as_ref().and_then(|d| d.get(RUNTIME_KEY)) else {
            // parse_snapshot says what is missing.
            return parse_snapshot(cm).map(Arc::new);
        };
        if let Some(runtime) = self.lock().get(text) {
            return Ok(runtime.clone());
        }
        let runtime = Arc::new(parse_snapshot(cm)?);
        let mut parsed = self.lock();
        if parsed.len() >= KEPT {
            parsed.clear();
        }
        parsed.insert(text.clone(), runtime.clone());
        Ok(runtime)
    }

    /// Distinct snapshot texts kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<SnapshotRuntime>>> {
        self.parsed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn snapshot(runtime_name: &str) -> ConfigMap {
        let yaml = format!(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\n\
             metadata: {{name: {runtime_name}}}\nspec:\n  template: {{spec: {{replicatedJobs: []}}}}\n"
        );
        ConfigMap {
            data: Some(BTreeMap::from([(RUNTIME_KEY.to_owned(), yaml)])),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn snapshots_of_the_same_text_share_one_parse_and_other_texts_are_parsed_on_their_own() {
        let parsed = ParsedSnapshots::default();
        let first = parsed.get_or_parse(&snapshot("torch")).unwrap();
        assert_eq!(
            (first.kind, first.name.as_str()),
            ("ClusterTrainingRuntime", "torch")
        );
        let same = parsed.get_or_parse(&snapshot("torch")).unwrap();
        assert!(Arc::ptr_eq(&first, &same), "the same text: parsed once");
        let other = parsed.get_or_parse(&snapshot("deepspeed")).unwrap();
        assert_eq!(other.name, "deepspeed", "another text: its own runtime");
        assert_eq!(parsed.len(), 2);
    }

    #[test]
    fn a_broken_snapshot_is_an_error_and_not_kept() {
        let parsed = ParsedSnapshots::default();
        let mut missing = snapshot("torch");
        missing.data = None;
        let error = parsed.get_or_parse(&missing).unwrap_err().to_string();
        assert!(error.contains("missing \"runtime\" data key"), "{error}");
        let mut garbage = snapshot("torch");
        garbage.data = Some(BTreeMap::from([(
            RUNTIME_KEY.to_owned(),
            "kind: [".to_owned(),
        )]));
        let error = parsed.get_or_parse(&garbage).unwrap_err().to_string();
        assert!(
            error.contains("unable to unmarshal the snapshot"),
            "{error}"
        );
        assert_eq!(parsed.len(), 0);
    }

    #[test]
    fn the_memory_stays_bounded() {
        let parsed = ParsedSnapshots::default();
        for i in 0..KEPT + 10 {
            let runtime = parsed.get_or_parse(&snapshot(&format!("r{i}"))).unwrap();
            assert_eq!(runtime.name, format!("r{i}"));
        }
        assert!(parsed.len() <= KEPT, "{} kept", parsed.len());
    }
}
