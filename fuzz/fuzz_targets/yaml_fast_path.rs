//! Differential: the fast YAML reader against serde-saphyr on arbitrary text. The fast reader may decline; when
//! it answers, serde-saphyr must read the same value, and a TrainJob the fast path vouches for must be the TrainJob
//! serde-saphyr reads straight from the text (what `kubetrain render --no-validate` relies on).
#![no_main]

use kubetrain_api::TrainJob;
use kubetrain_yaml::fast;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some(fast) = fast::parse(text) else {
        return;
    };
    let full: serde_json::Value = match serde_saphyr::from_str(text) {
        Ok(value) => value,
        Err(e) => panic!("fast path read {fast} from text serde-saphyr rejects ({e}):\n{text}"),
    };
    assert_eq!(fast, full, "values differ for:\n{text}");
    if let Some(job) = fast::from_str_typed::<TrainJob>(text) {
        match serde_saphyr::from_str::<TrainJob>(text) {
            Ok(direct) => assert_eq!(job, direct, "TrainJobs differ for:\n{text}"),
            Err(e) => panic!(
                "TrainJob from the value, but serde-saphyr's typed read fails ({e}):\n{text}"
            ),
        }
    }
});
