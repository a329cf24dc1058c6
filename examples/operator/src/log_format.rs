//! The log line format, shared by our `--log-format` and upstream's `--zap-encoder`/`--zap-devel`.

use clap::ValueEnum;

/// Log line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// One JSON object per line (for log collectors).
    Json,
    /// Human-readable lines.
    Text,
}
