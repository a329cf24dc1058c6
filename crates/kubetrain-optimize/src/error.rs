//! The crate's error type.

/// Why a study could not be built or could not suggest a trial.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A parameter's search space is invalid; `reason` says how and how to fix it.
    #[error("parameter {name:?}: {reason}")]
    InvalidParameter {
        /// The parameter's name.
        name: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// Two parameters share a name.
    #[error("parameter {name:?} is defined more than once: give each parameter a unique name")]
    DuplicateParameter {
        /// The repeated name.
        name: String,
    },
    /// A parameter has an empty name.
    #[error("a parameter has an empty name: name every parameter")]
    EmptyName,
    /// The study has no parameters to search.
    #[error("a study needs at least one parameter")]
    NoParameters,
    /// The study asks for zero trials.
    #[error("numTrials must be at least 1")]
    NoTrials,
    /// A grid search was asked for a point past the end of its grid.
    #[error("grid index {index} is past the grid's {size} points")]
    GridExhausted {
        /// The index asked for.
        index: u32,
        /// The number of points in the grid.
        size: u64,
    },
}
