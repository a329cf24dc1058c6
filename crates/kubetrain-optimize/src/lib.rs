#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod median;
mod rng;
mod space;
mod study;
mod tpe;

pub use error::Error;
pub use median::EarlyStopping;
pub use space::{FLOAT_GRID_POINTS, Param, Space};
pub use study::{Algorithm, Direction, Study, TrialRecord, TrialState};

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
