//! MPI SSH key generation (issue 13, item 9): one ECDSA P-521 key pair in upstream's format, as
//! `kubetrain_jobset::ssh::SshKeyPair::generate` makes it (fixed-base comb), against the generic `p521`
//! path it replaced (`SecretKey::random`, `to_sec1_pem`, `public_key()`: two generic scalar multiplications).
//!
//! Run: `cargo bench -p kubetrain-benches --bench ssh_keys`

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use kubetrain_jobset::ssh::{SshKeyPair, os_rng, seeded_rng};
use p521::elliptic_curve::sec1::ToEncodedPoint;

fn benches(c: &mut Criterion) {
    // The comb table is built on the first key of a process; report that once.
    let start = Instant::now();
    black_box(SshKeyPair::generate(&mut seeded_rng(0)));
    eprintln!(
        "first key in the process (builds the comb table): {:?}",
        start.elapsed()
    );

    let mut rng = os_rng().expect("OS randomness");
    c.bench_function("ssh_key/generate", |b| {
        b.iter(|| black_box(SshKeyPair::generate(&mut rng)));
    });
    c.bench_function("ssh_key/p521_generic_before", |b| {
        b.iter(|| {
            let secret = p521::SecretKey::random(&mut rng);
            let pem = secret
                .to_sec1_pem(p521::pkcs8::LineEnding::LF)
                .expect("encodes");
            let point = secret.public_key().to_encoded_point(false);
            black_box((pem, point));
        });
    });
}

criterion_group!(ssh_benches, benches);
criterion_main!(ssh_benches);
