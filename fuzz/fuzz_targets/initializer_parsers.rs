//! Fuzzes the initializer's parsers: STORAGE_URI, IGNORE_PATTERNS globs and remote paths.
#![no_main]

use std::path::{Component, Path};

use kubetrain_initializer::{Checksum, Kind, PatternSet, RemoteFile, StorageUri};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Split into a "pattern list" and a "name" at the first newline.
    let (patterns, name) = text.split_once('\n').unwrap_or((text, text));

    for kind in [Kind::Dataset, Kind::Model] {
        if let Ok(uri) = StorageUri::parse(text, kind) {
            // Printing and parsing again is stable.
            let again = StorageUri::parse(&uri.to_string(), kind).expect("display re-parses");
            assert_eq!(again, uri);
        }
    }

    let set = PatternSet::parse_list(patterns);
    let _ = set.matches(name);
    assert_eq!(PatternSet::parse_list(&set.to_string()).len(), set.len());

    if let Ok(file) = RemoteFile::new(name, name, None, Checksum::Unknown) {
        let dest = Path::new("/dest");
        let local = file.local_path(dest);
        assert!(local.starts_with(dest) && local != dest, "{local:?}");
        let inside = local.strip_prefix(dest).expect("below dest");
        assert!(
            inside
                .components()
                .all(|c| matches!(c, Component::Normal(_))),
            "{local:?}"
        );
    }
});
