//! The initializers' integration tests in one binary (one link instead of four): S3 and Hugging Face
//! downloads against the crate's loopback servers, hardening against hostile servers, downloads that never hang, and properties.

mod downloads;
mod hardening;
mod hub;
mod properties;
mod s3;
