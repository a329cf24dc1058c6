//! The discrete-event queue simulator, its generator and its reports.

pub mod engine;
mod generate;
pub mod generator;
pub mod random;
pub mod report;
pub mod scenario;
