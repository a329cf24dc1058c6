//! Arbitrary bytes as a YAML stream: parsing and validating must never panic.
#![no_main]

use kubetrain_api::validation::validate_document;
use kubetrain_api::{RuntimeCatalog, parse_documents};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(documents) = parse_documents(text) else { return };
    let mut catalog = RuntimeCatalog::new();
    for document in &documents {
        catalog.add_document(&document.document);
    }
    for document in &documents {
        let _ = validate_document(&document.document, &catalog);
    }
});
