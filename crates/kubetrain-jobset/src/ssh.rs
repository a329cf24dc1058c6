//! SSH key material for the MPI plugin, in upstream's format.
//!
//! Upstream generates an ECDSA P-521 key (`ecdsa.GenerateKey(elliptic.P521(), rand.Reader)`), stores the
//! private key as a SEC1 PEM block `EC PRIVATE KEY` (`x509.MarshalECPrivateKey`) and the public key in
//! `authorized_keys` format (`ssh.MarshalAuthorizedKey`: `ecdsa-sha2-nistp521 <base64>\n`). We do the same
//! from an injected random source, so the CLI can be reproducible and the operator secure.
//!
//! ```
//! use kubetrain_jobset::ssh::{seeded_rng, SshKeyPair};
//! let key = SshKeyPair::generate(&mut seeded_rng(7));
//! assert!(key.private_key_pem.starts_with("-----BEGIN EC PRIVATE KEY-----\n"));
//! assert!(key.public_key.starts_with("ecdsa-sha2-nistp521 AAAA"));
//! assert_eq!(key, SshKeyPair::generate(&mut seeded_rng(7)));
//! ```

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use p521::elliptic_curve::sec1::ToEncodedPoint;
use p521::pkcs8::LineEnding;
use rand_core::{CryptoRng, RngCore, SeedableRng};

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
    pub fn generate<R: RngCore + CryptoRng>(rng: &mut R) -> Self {
        let secret = p521::SecretKey::random(rng);
        let private_key_pem = secret
            .to_sec1_pem(LineEnding::LF)
            .map(|pem| pem.to_string())
            // Encoding a valid P-521 scalar cannot fail; an empty string would make sshd reject the key.
            .unwrap_or_default();
        let point = secret.public_key().to_encoded_point(false);
        Self {
            private_key_pem,
            public_key: authorized_key_line(point.as_bytes()),
        }
    }
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

/// A deterministic RNG for reproducible output (tests, `kubetrain render --seed`).
pub fn seeded_rng(seed: u64) -> ChaCha20Rng {
    ChaCha20Rng::seed_from_u64(seed)
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
