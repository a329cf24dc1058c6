//! Checkpoints in S3 (a real S3 server on loopback): atomic objects under the prefix, the newest whole
//! one wins, a damaged one is skipped with a warning, pruning keeps the newest, and a missing server is
//! an error that names the location.

use kubetrain_acceptance::s3store::{S3Settings, S3Store};
use kubetrain_collective::checkpoint::{
    Checkpoint, CheckpointStore, load_latest, object_name, save,
};
use kubetrain_initializer::s3_server::S3Server;

fn ckpt(step: u64) -> Checkpoint {
    Checkpoint::new(
        step,
        vec![0.25, -1.5, step as f64],
        0.9,
        vec![0.0, 1e-9, -2.0],
        0.5,
    )
}

#[test]
fn checkpoints_round_trip_through_s3_and_damaged_ones_are_skipped() {
    let root = tempfile::tempdir().unwrap();
    let server = S3Server::start(root.path(), "AKID", "SECRET").unwrap();
    server.create_bucket("ckpt").unwrap();
    let settings = S3Settings {
        endpoint: Some(server.endpoint()),
        access_key_id: Some("AKID".into()),
        secret_access_key: Some("SECRET".into()),
        region: None,
    };
    let store = S3Store::new("s3://ckpt/runs/a", &settings).unwrap();
    assert_eq!(store.location(), "s3://ckpt/runs/a");
    assert_eq!(
        load_latest(&store).unwrap().0,
        None,
        "an empty prefix has none"
    );
    for step in [10, 20, 30] {
        save(&store, &ckpt(step), 2).unwrap();
    }
    let mut names = store.list().unwrap();
    names.sort();
    assert_eq!(
        names,
        [object_name(20), object_name(30)],
        "pruned to the newest 2"
    );
    // The objects really are under the prefix in the bucket.
    assert!(
        root.path()
            .join("ckpt/runs/a")
            .join(object_name(30))
            .exists()
    );

    let (found, warnings) = load_latest(&store).unwrap();
    assert_eq!(found.unwrap().1, ckpt(30));
    assert!(warnings.is_empty());

    // A damaged newest object: skipped with the reason, the older one is loaded.
    let mut bytes = store.get(&object_name(30)).unwrap();
    let i = bytes.len() - 4;
    bytes[i] ^= 0x10;
    store.put(&object_name(30), &bytes).unwrap();
    let (found, warnings) = load_latest(&store).unwrap();
    assert_eq!(found.unwrap().1.step, 20);
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].contains("s3://ckpt/runs/a") && warnings[0].contains("sha256 mismatch"),
        "{warnings:?}"
    );
}

#[test]
fn bad_locations_and_unreachable_servers_are_clear_errors() {
    let settings = S3Settings {
        endpoint: Some("http://127.0.0.1:9".into()),
        access_key_id: Some("a".into()),
        secret_access_key: Some("b".into()),
        region: None,
    };
    let err = S3Store::new("s3:///x", &settings)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("names no bucket"), "{err}");
    let store = S3Store::new("s3://b/p", &settings).unwrap();
    let err = store.list().unwrap_err().to_string();
    assert!(err.contains("listing s3://b/p"), "{err}");
}
