//! SSH key material for the MPI plugin, in upstream's format.
//!
//! Upstream generates an ECDSA P-521 key (`ecdsa.GenerateKey(elliptic.P521(), rand.Reader)`), stores the
//! private key as a SEC1 PEM block `EC PRIVATE KEY` (`x509.MarshalECPrivateKey`: version 1, the 66-byte
//! scalar, the curve OID `secp521r1` and the public point) and the public key in `authorized_keys` format
//! (`ssh.MarshalAuthorizedKey`: `ecdsa-sha2-nistp521 <base64>\n`). We do the same from an injected random
//! source, so the CLI can be reproducible (`--seed`) and the operator secure ([`os_rng`], `OsRng`).
//!
//! The public point is computed with a fixed-base comb over a table of multiples of the generator that is
//! built once per process (2,816 points, about 400 KiB, a few milliseconds), so a key costs about 0.1 ms
//! instead of the two generic scalar multiplications (about 1 ms) of `p521::SecretKey`'s encoders. The comb
//! is constant time: every table entry of a window is read and selected with `subtle`, and the point
//! additions use complete formulas.
//!
//! ```
//! use kubetrain_jobset::ssh::{seeded_rng, SshKeyPair};
//! let key = SshKeyPair::generate(&mut seeded_rng(7));
//! assert!(key.private_key_pem.starts_with("-----BEGIN EC PRIVATE KEY-----\n"));
//! assert!(key.public_key.starts_with("ecdsa-sha2-nistp521 AAAA"));
//! assert_eq!(key, SshKeyPair::generate(&mut seeded_rng(7)));
//! ```

use std::sync::OnceLock;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use p521::elliptic_curve::point::Double as _;
use p521::elliptic_curve::sec1::ToEncodedPoint;
use p521::elliptic_curve::subtle::{
    Choice, ConditionallyNegatable, ConditionallySelectable, ConstantTimeEq,
};
use p521::elliptic_curve::zeroize::Zeroizing;
use p521::{NonZeroScalar, ProjectivePoint, Scalar};
use rand_core::{CryptoRng, OsRng, RngCore, SeedableRng};

/// The random source used for key generation; any cryptographic RNG.
pub use rand_chacha::ChaCha20Rng;

/// An SSH key pair as upstream stores it in the `<job>-mpi-ssh-auth` Secret.
#[derive(Clone, PartialEq, Eq)]
pub struct SshKeyPair {
    /// `ssh-privatekey`: SEC1 PEM, `-----BEGIN EC PRIVATE KEY-----`.
    pub private_key_pem: String,
    /// `ssh-publickey`: one `authorized_keys` line, `ecdsa-sha2-nistp521 AAAA...\n`.
    pub public_key: String,
}

impl std::fmt::Debug for SshKeyPair {
    // Never print private key bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshKeyPair")
            .field("private_key_pem", &"<redacted>")
            .field("public_key", &self.public_key)
            .finish()
    }
}

impl SshKeyPair {
    /// Generates a fresh ECDSA P-521 key pair from `rng`.
    ///
    /// The secret scalar is drawn as `p521::SecretKey::random` draws it, so a seeded RNG gives the same key
    /// as before; the public point comes from the fixed-base comb (see the module documentation).
    pub fn generate<R: RngCore + CryptoRng>(rng: &mut R) -> Self {
        let secret = NonZeroScalar::random(rng);
        let point = mul_generator(&secret).to_affine().to_encoded_point(false);
        let scalar = Zeroizing::new(secret.to_bytes());
        Self {
            private_key_pem: sec1_pem(&scalar, point.as_bytes()),
            public_key: authorized_key_line(point.as_bytes()),
        }
    }
}

/// `x509.MarshalECPrivateKey` for P-521 as PEM: the DER of
/// `ECPrivateKey ::= SEQUENCE { version 1, privateKey OCTET STRING (66 bytes), [0] secp521r1, [1] BIT STRING Q }`
/// in an `EC PRIVATE KEY` block, base64 in 64-character lines, `\n` line ends.
///
/// OpenSSL (and so `ssh`) refuses a SEC1 key without the curve parameters, so they are always written.
fn sec1_pem(scalar: &[u8], point: &[u8]) -> String {
    /// `A0 07 06 05 2B 81 04 00 23`: `[0]` holding the OID 1.3.132.0.35 (secp521r1).
    const CURVE: [u8; 9] = [0xa0, 0x07, 0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23];
    debug_assert_eq!((scalar.len(), point.len()), (66, 133));
    let mut der = Zeroizing::new(Vec::with_capacity(223));
    // SEQUENCE of 220 bytes: 3 (version) + 68 (private key) + 9 (curve) + 140 (public key).
    der.extend_from_slice(&[0x30, 0x81, 0xdc, 0x02, 0x01, 0x01, 0x04, 0x42]);
    der.extend_from_slice(scalar);
    der.extend_from_slice(&CURVE);
    // [1] of 137 bytes holding a BIT STRING of 134 bytes (no unused bits, then the point).
    der.extend_from_slice(&[0xa1, 0x81, 0x89, 0x03, 0x81, 0x86, 0x00]);
    der.extend_from_slice(point);
    let body = Zeroizing::new(STANDARD.encode(der.as_slice()));
    let mut pem = String::with_capacity(body.len() + body.len() / 64 + 64);
    pem.push_str("-----BEGIN EC PRIVATE KEY-----\n");
    for line in body.as_bytes().chunks(64) {
        // Base64 output is ASCII, so every 64-byte chunk is valid UTF-8.
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END EC PRIVATE KEY-----\n");
    pem
}

/// Bits per comb window.
const WINDOW_BITS: usize = 6;
/// Table entries per window: the multiples 1..=32 of the window's base (signed digits cover -32..=32).
const WINDOW_ENTRIES: usize = 1 << (WINDOW_BITS - 1);
/// Windows: 88 × 6 = 528 bits, the 66 bytes of a scalar (below 2^521, so the top window takes only the carry).
const WINDOWS: usize = 66 * 8 / WINDOW_BITS;

/// `j · 2^(6i) · G` at index `i · 32 + j − 1`, built on first use.
fn comb_table() -> &'static [ProjectivePoint] {
    static TABLE: OnceLock<Box<[ProjectivePoint]>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = Vec::with_capacity(WINDOWS * WINDOW_ENTRIES);
        let mut base = ProjectivePoint::GENERATOR;
        for _ in 0..WINDOWS {
            let mut multiple = base;
            table.push(multiple);
            for _ in 1..WINDOW_ENTRIES {
                multiple += base;
                table.push(multiple);
            }
            // 32 · base doubled is the next window's base, 2^6 · base.
            base = multiple.double();
        }
        table.into_boxed_slice()
    })
}

/// Signed base-2^6 digits of a big-endian scalar, least significant first: `Σ dᵢ · 2^(6i)` with
/// `dᵢ ∈ [−32, 32]`. Branch-free in the scalar's value.
fn signed_digits(be: &[u8]) -> [i8; WINDOWS] {
    let bit = |i: usize| -> u32 { u32::from((be[be.len() - 1 - i / 8] >> (i % 8)) & 1) };
    let mut digits = [0i8; WINDOWS];
    let mut carry = 0u32;
    for (w, digit) in digits.iter_mut().enumerate() {
        let mut value = carry;
        for k in 0..WINDOW_BITS {
            value += bit(w * WINDOW_BITS + k) << k;
        }
        // value ∈ [0, 64]: at 32 or above, take value − 64 and carry one into the next window.
        carry = (value + WINDOW_ENTRIES as u32) >> WINDOW_BITS;
        // The result lies in [−32, 31] (or 32 in the top window), so it fits an i8.
        *digit = (value as i32 - ((carry as i32) << WINDOW_BITS)) as i8;
    }
    digits
}

/// `scalar · G` with the comb table: one constant-time table read and one complete addition per window.
fn mul_generator(scalar: &Scalar) -> ProjectivePoint {
    let table = comb_table();
    let digits = signed_digits(&scalar.to_bytes());
    let mut sum = ProjectivePoint::IDENTITY;
    for (window, &digit) in table.chunks_exact(WINDOW_ENTRIES).zip(digits.iter()) {
        let digit = i32::from(digit);
        let negative = (digit >> 31) & 1;
        let magnitude = ((digit ^ -negative) + negative) as u32;
        let mut term = ProjectivePoint::IDENTITY;
        for (j, multiple) in (1u32..).zip(window) {
            term.conditional_assign(multiple, magnitude.ct_eq(&j));
        }
        term.conditional_negate(Choice::from(negative as u8));
        sum += term;
    }
    sum
}

/// `ssh.MarshalAuthorizedKey` for an uncompressed P-521 point: the SSH wire encoding
/// (string "ecdsa-sha2-nistp521", string "nistp521", string Q), base64, and a newline.
fn authorized_key_line(point: &[u8]) -> String {
    const ALGORITHM: &str = "ecdsa-sha2-nistp521";
    let mut wire = Vec::with_capacity(4 + ALGORITHM.len() + 4 + 8 + 4 + point.len());
    for field in [ALGORITHM.as_bytes(), b"nistp521", point] {
        wire.extend_from_slice(&(field.len() as u32).to_be_bytes());
        wire.extend_from_slice(field);
    }
    format!("{ALGORITHM} {}\n", STANDARD.encode(wire))
}

/// A deterministic RNG for reproducible output (tests, `kubetrain render --seed`). Keys drawn from it are
/// not secret: anyone who knows the seed can draw them again.
pub fn seeded_rng(seed: u64) -> ChaCha20Rng {
    ChaCha20Rng::seed_from_u64(seed)
}

/// A ChaCha20 RNG seeded from the operating system's randomness (`getrandom`): one per process is enough
/// for any number of keys (what `kubetrain render` uses without `--seed`).
pub fn os_rng() -> Result<ChaCha20Rng, rand_core::Error> {
    ChaCha20Rng::from_rng(OsRng)
}

/// Where a render gets a new MPI SSH key pair: any cryptographic RNG (the key is generated on the
/// spot, so a seeded RNG gives reproducible keys) or a [`KeyPool`] (keys generated ahead from OS
/// randomness on other threads).
pub trait KeySource {
    /// A fresh key pair.
    fn key_pair(&mut self) -> SshKeyPair;
}

impl<R: RngCore + CryptoRng> KeySource for R {
    fn key_pair(&mut self) -> SshKeyPair {
        SshKeyPair::generate(self)
    }
}

/// MPI SSH keys generated ahead, off the render path: worker threads, each with its own
/// [`os_rng`], fill a bounded queue that [`KeySource::key_pair`] takes from. The workers start
/// with the first key taken (a stream without MPI TrainJobs costs nothing) and stop when the
/// pool is dropped. For streams of many MPI TrainJobs (`kubetrain render`), where the key is
/// most of a render's cost.
///
/// ```
/// use kubetrain_jobset::ssh::{KeyPool, KeySource};
/// let mut pool = KeyPool::new(1, 4);
/// assert_ne!(pool.key_pair(), pool.key_pair());
/// ```
pub struct KeyPool {
    workers: usize,
    capacity: usize,
    keys: Option<std::sync::mpsc::Receiver<SshKeyPair>>,
}

impl std::fmt::Debug for KeyPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPool")
            .field("workers", &self.workers)
            .field("capacity", &self.capacity)
            .field("started", &self.keys.is_some())
            .finish()
    }
}

impl KeyPool {
    /// A pool of `workers` threads (at least one) keeping up to `capacity` keys ready.
    pub fn new(workers: usize, capacity: usize) -> Self {
        Self {
            workers: workers.max(1),
            capacity,
            keys: None,
        }
    }

    /// One worker per CPU but one (the render keeps a CPU), at least one; 64 keys ready.
    pub fn for_this_machine() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        Self::new(cpus.saturating_sub(1), 64)
    }

    fn start(&self) -> std::sync::mpsc::Receiver<SshKeyPair> {
        let (sender, receiver) = std::sync::mpsc::sync_channel(self.capacity);
        for _ in 0..self.workers {
            let sender = sender.clone();
            // A worker that cannot start (or has no OS randomness) leaves the work to the others,
            // or, with none left, to `key_pair` itself.
            let _ = std::thread::Builder::new()
                .name("ssh-keys".into())
                .spawn(move || {
                    let Ok(mut rng) = os_rng() else { return };
                    // Ends when the pool (the receiver) is dropped.
                    while sender.send(SshKeyPair::generate(&mut rng)).is_ok() {}
                });
        }
        receiver
    }
}

impl KeySource for KeyPool {
    fn key_pair(&mut self) -> SshKeyPair {
        let keys = match &self.keys {
            Some(keys) => keys,
            None => self.keys.insert(self.start()),
        };
        keys.recv()
            .unwrap_or_else(|_| SshKeyPair::generate(&mut OsRng))
    }
}

/// A stable 64-bit seed derived from text (a TrainJob uid, or `namespace/name`): FNV-1a.
pub fn seed_from_text(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use p521::elliptic_curve::sec1::FromEncodedPoint;
    use p521::pkcs8::DecodePrivateKey as _;

    #[test]
    fn private_key_is_sec1_pem_of_the_public_key() {
        let key = SshKeyPair::generate(&mut seeded_rng(1));
        assert!(
            key.private_key_pem
                .starts_with("-----BEGIN EC PRIVATE KEY-----\n")
        );
        assert!(
            key.private_key_pem
                .ends_with("-----END EC PRIVATE KEY-----\n")
        );
        let secret = p521::SecretKey::from_sec1_pem(&key.private_key_pem).unwrap();
        // The PEM must not be PKCS#8 (Go writes SEC1).
        assert!(p521::SecretKey::from_pkcs8_pem(&key.private_key_pem).is_err());

        let line = key.public_key.strip_suffix('\n').unwrap();
        let (algo, b64) = line.split_once(' ').unwrap();
        assert_eq!(algo, "ecdsa-sha2-nistp521");
        let wire = STANDARD.decode(b64).unwrap();
        let mut fields = Vec::new();
        let mut rest = &wire[..];
        while !rest.is_empty() {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            fields.push(&rest[4..4 + len]);
            rest = &rest[4 + len..];
        }
        assert_eq!(fields.len(), 3);
        assert_eq!(fields[0], b"ecdsa-sha2-nistp521");
        assert_eq!(fields[1], b"nistp521");
        assert_eq!(fields[2].len(), 133, "uncompressed P-521 point");
        let point = p521::EncodedPoint::from_bytes(fields[2]).unwrap();
        let public = p521::PublicKey::from_encoded_point(&point).unwrap();
        assert_eq!(public, secret.public_key());
    }

    /// Go's `x509.MarshalECPrivateKey` layout, byte for byte: OpenSSL and `ssh` refuse the key without the
    /// curve OID (what `p521::SecretKey::to_sec1_pem` writes).
    #[test]
    fn private_key_der_is_gos_layout_with_the_curve_oid() {
        let key = SshKeyPair::generate(&mut seeded_rng(5));
        let body: String = key
            .private_key_pem
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        assert!(key.private_key_pem.lines().all(|l| l.len() <= 64));
        let der = STANDARD.decode(body).unwrap();
        assert_eq!(der.len(), 223);
        assert_eq!(der[..8], [0x30, 0x81, 0xdc, 0x02, 0x01, 0x01, 0x04, 0x42]);
        assert_eq!(
            der[74..90],
            [
                0xa0, 0x07, 0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23, 0xa1, 0x81, 0x89, 0x03, 0x81,
                0x86, 0x00
            ]
        );
        let secret = p521::SecretKey::from_slice(&der[8..74]).unwrap();
        assert_eq!(
            der[90..],
            *secret.public_key().to_encoded_point(false).as_bytes()
        );
    }

    /// The comb gives the generic scalar multiplication's point for edge and random scalars.
    #[test]
    fn comb_matches_generic_multiplication() {
        let mut scalars: Vec<Scalar> = [0u64, 1, 2, 31, 32, 33, 63, 64, 65, u64::MAX]
            .into_iter()
            .map(Scalar::from)
            .collect();
        scalars.extend([-Scalar::ONE, -Scalar::from(32u64), -Scalar::from(33u64)]);
        let mut rng = seeded_rng(11);
        scalars.extend((0..64).map(|_| *NonZeroScalar::random(&mut rng)));
        for scalar in scalars {
            assert_eq!(
                mul_generator(&scalar).to_affine(),
                (ProjectivePoint::GENERATOR * scalar).to_affine(),
                "{scalar:?}"
            );
        }
    }

    #[test]
    fn signed_digits_sum_to_the_scalar() {
        let mut rng = seeded_rng(3);
        for _ in 0..32 {
            let scalar = *NonZeroScalar::random(&mut rng);
            let digits = signed_digits(&scalar.to_bytes());
            assert!(digits.iter().all(|d| (-32..=32).contains(d)));
            let signed = digits.iter().rev().fold(Scalar::ZERO, |acc, &d| {
                let magnitude = Scalar::from(u64::from(d.unsigned_abs()));
                acc * Scalar::from(64u64) + if d < 0 { -magnitude } else { magnitude }
            });
            assert_eq!(signed, scalar);
        }
    }

    /// Seeded keys keep the public key the generic `p521` path gave, so `--seed` output stays comparable.
    #[test]
    fn seeded_public_keys_match_the_generic_path() {
        for seed in 0..8 {
            let key = SshKeyPair::generate(&mut seeded_rng(seed));
            let reference = p521::SecretKey::random(&mut seeded_rng(seed));
            assert_eq!(
                key.public_key,
                authorized_key_line(reference.public_key().to_encoded_point(false).as_bytes())
            );
        }
    }

    /// OpenSSH itself reads the private key and derives the same public key (skipped without `ssh-keygen`).
    #[test]
    fn ssh_keygen_reads_the_private_key() {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let key = SshKeyPair::generate(&mut seeded_rng(9));
        let path = std::env::temp_dir().join(format!("kubetrain-ssh-test-{}", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .unwrap();
        file.write_all(key.private_key_pem.as_bytes()).unwrap();
        drop(file);
        let out = std::process::Command::new("ssh-keygen")
            .args(["-y", "-f"])
            .arg(&path)
            .output();
        let _ = std::fs::remove_file(&path);
        let Ok(out) = out else {
            eprintln!("ssh-keygen not found: skipped");
            return;
        };
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let derived = String::from_utf8(out.stdout).unwrap();
        assert_eq!(
            derived.split_whitespace().take(2).collect::<Vec<_>>(),
            key.public_key.split_whitespace().collect::<Vec<_>>()
        );
    }

    #[test]
    fn rngs_and_pools_are_key_sources() {
        assert_eq!(
            seeded_rng(4).key_pair(),
            SshKeyPair::generate(&mut seeded_rng(4))
        );
        let mut pool = KeyPool::new(2, 2);
        let keys: Vec<SshKeyPair> = (0..6).map(|_| pool.key_pair()).collect();
        for (i, key) in keys.iter().enumerate() {
            let secret = p521::SecretKey::from_sec1_pem(&key.private_key_pem).unwrap();
            assert_eq!(
                key.public_key,
                authorized_key_line(secret.public_key().to_encoded_point(false).as_bytes())
            );
            assert!(keys[..i].iter().all(|other| other != key));
        }
    }

    #[test]
    fn os_rngs_differ() {
        let a = SshKeyPair::generate(&mut os_rng().unwrap());
        let b = SshKeyPair::generate(&mut os_rng().unwrap());
        assert_ne!(a, b);
    }

    #[test]
    fn seeds_are_deterministic_and_distinct() {
        let a = SshKeyPair::generate(&mut seeded_rng(seed_from_text("default/job-a")));
        let b = SshKeyPair::generate(&mut seeded_rng(seed_from_text("default/job-a")));
        let c = SshKeyPair::generate(&mut seeded_rng(seed_from_text("default/job-b")));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(!format!("{a:?}").contains("PRIVATE"));
    }
}
