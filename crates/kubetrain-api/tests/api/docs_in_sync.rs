//! docs/crd-reference.md is generated; this test fails when the types change and the file was not regenerated
//! (`cargo run -p kubetrain-cli -- crd -o markdown > docs/crd-reference.md`).

#[test]
fn crd_reference_is_up_to_date() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/crd-reference.md");
    let written =
        std::fs::read_to_string(&path).expect("docs/crd-reference.md exists in the repository");
    assert!(
        written == kubetrain_api::crd::reference_markdown(),
        "docs/crd-reference.md is stale: run `cargo run -p kubetrain-cli -- crd -o markdown > docs/crd-reference.md`"
    );
}
