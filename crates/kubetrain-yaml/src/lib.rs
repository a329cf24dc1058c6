//! # kubetrain-yaml
//!
//! YAML for Kubernetes manifests, the one home of kubetrain's YAML code (no Kubernetes types: serde, serde_json
//! and serde-saphyr only):
//!
//! - [`fast`]: a reader for the plain YAML subset manifests are written in, straight to `serde_json::Value`
//!   (several times faster than a full YAML parser); it declines what it is not sure of, and
//!   [`fast::from_str`] then asks serde-saphyr, so callers always get serde-saphyr's value and errors. A
//!   property test and a differential fuzz target check the law "whenever it answers, serde-saphyr reads the same".
//! - [`writer`]: a block-YAML writer with sorted keys, literal blocks for scripts and quoting safe for YAML 1.1 and
//!   1.2 readers alike; [`Writer`] writes serializable objects without building a `Value` first.
//! - [`stream`]: multi-document streams: [`parse_stream`] reads any [`std::io::BufRead`] one document at a
//!   time, [`split_documents`] splits a whole string, both with the lines documents start on, the API server's
//!   3 MiB limit ([`MAX_DOCUMENT_BYTES`]) and syntax errors located in the whole stream ([`yaml_error`]).
//! - [`kept_keys`]: proves, without building its JSON form, that a typed object kept every key of the data it
//!   was read from (the fast path of an unknown-field check).
//!
//! ```
//! use kubetrain_yaml::{Writer, parse_stream};
//!
//! let input = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: hosts}\ndata: {hostfile: \"a slots=1\\n\"}\n---\n# empty\n";
//! let mut out = String::new();
//! let mut writer = Writer::default();
//! for document in parse_stream(input.as_bytes()) {
//!     let document = document.expect("valid YAML");
//!     writer.write(&mut out, &document.value).unwrap();
//! }
//! assert_eq!(out, "apiVersion: v1\ndata:\n  hostfile: |\n    a slots=1\nkind: ConfigMap\nmetadata:\n  name: hosts\n");
//! ```
//!
//! kubetrain-api reads trainer objects with it (`kubetrain_api::parse_documents`, whose re-exports of
//! [`split_documents`], [`yaml_error`], [`MAX_DOCUMENT_BYTES`] and [`document_too_large`] are these items), the
//! Kueue model reads its streams with it, and `kubetrain render` reads and writes with it.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod fast;
pub mod kept_keys;
pub mod stream;
pub mod writer;

pub use stream::{
    DocumentStream, MAX_DOCUMENT_BYTES, ParseStreamError, StreamDocument, TooLarge,
    document_too_large, parse_stream, split_documents, yaml_error,
};
pub use writer::{Writer, to_string};

// The README's example is compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
