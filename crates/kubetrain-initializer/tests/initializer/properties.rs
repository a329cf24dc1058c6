//! Laws of the parsers (the fuzz target `initializer_parsers` checks the same on arbitrary input).

use std::path::{Component, Path};

use kubetrain_initializer::{Checksum, Kind, Pattern, PatternSet, RemoteFile, StorageUri};
use proptest::prelude::*;

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_.\\-/ ]{0,24}"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_name_without_metacharacters_matches_only_itself(a in name(), b in name()) {
        prop_assert!(Pattern::new(&a).matches(&a) || a.ends_with('/'));
        if a != b && !a.ends_with('/') {
            prop_assert!(!Pattern::new(&a).matches(&b));
        }
    }

    #[test]
    fn star_suffix_matches_exactly_the_names_with_that_suffix(suffix in "[a-z.]{1,6}", name in name()) {
        let pattern = Pattern::new(&format!("*{suffix}"));
        prop_assert_eq!(pattern.matches(&name), name.ends_with(&suffix));
    }

    #[test]
    fn question_marks_match_names_of_that_length(n in 0usize..8, name in "[a-z/]{0,10}") {
        let pattern = Pattern::new(&"?".repeat(n));
        prop_assert_eq!(pattern.matches(&name), name.chars().count() == n);
    }

    #[test]
    fn pattern_lists_print_and_parse_back(list in "[a-z*?.,/ ]{0,40}") {
        let set = PatternSet::parse_list(&list);
        prop_assert_eq!(PatternSet::parse_list(&set.to_string()), set);
    }

    #[test]
    fn parsed_uris_print_and_parse_back(text in "(s3|hf|S3|gs)://[a-z0-9./\\-]{0,30}") {
        for kind in [Kind::Dataset, Kind::Model] {
            if let Ok(uri) = StorageUri::parse(&text, kind) {
                prop_assert_eq!(StorageUri::parse(&uri.to_string(), kind), Ok(uri));
            }
        }
    }

    #[test]
    fn accepted_remote_paths_stay_inside_the_destination(path in "[a./\\\\]{0,12}") {
        if let Ok(file) = RemoteFile::new(path.clone(), path, None, Checksum::Unknown) {
            let dest = Path::new("/dest");
            let local = file.local_path(dest);
            prop_assert!(local != dest);
            let inside = local.strip_prefix(dest).unwrap();
            prop_assert!(inside.components().all(|c| matches!(c, Component::Normal(_))));
        }
    }
}
