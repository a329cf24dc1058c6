//! The built-in ClusterTrainingRuntimes (kubetrain-jobset's catalog) as an API server holds them.

use serde_json::Value;

use crate::FakeApiServer;

/// The built-in ClusterTrainingRuntime `name` as JSON; panics when there is none, which is a broken test.
pub fn builtin_runtime(name: &str) -> Value {
    let runtime = kubetrain_jobset::builtin::runtimes()
        .into_iter()
        .find(|r| r.name() == name)
        .unwrap_or_else(|| panic!("no built-in runtime {name}"));
    serde_json::to_value(runtime).unwrap_or_else(|e| panic!("runtime {name} as JSON: {e}"))
}

/// Stores every built-in ClusterTrainingRuntime in `server`.
pub fn insert_builtin_runtimes(server: &FakeApiServer) {
    for runtime in kubetrain_jobset::builtin::runtimes() {
        match serde_json::to_value(&runtime) {
            Ok(value) => server.insert(value),
            Err(e) => panic!("runtime {} as JSON: {e}", runtime.name()),
        }
    }
}
