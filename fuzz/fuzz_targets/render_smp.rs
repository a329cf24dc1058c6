//! Arbitrary JSON pairs (original on the first line, patch on the rest) through the strategic-merge-patch
//! engine of runtime patches: errors are fine, panics are not.
#![no_main]

use kubetrain_merge::smp::{Schema, strategic_merge_patch};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (original, patch) = text.split_once('\n').unwrap_or((text, "{}"));
    let (Ok(original), Ok(patch)) = (
        serde_json::from_str::<Value>(original),
        serde_json::from_str::<Value>(patch),
    ) else {
        return;
    };
    let _ = strategic_merge_patch(&original, &patch, Schema::JobSetSpec);
});
