//! The discrete-event queue simulator, its generator and its reports.

pub mod generator;
pub mod scenario;
