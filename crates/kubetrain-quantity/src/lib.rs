//! Kubernetes resource quantities (`resource.Quantity`: `500m`, `2`, `1.5Gi`, `1e3`), their one home in
//! [kubetrain](https://github.com/kubetrain/kubetrain): `kubetrain-api` re-exports the exact types, and the Kueue
//! model (`kubetrain-kueue`) counts with them without depending on `k8s-openapi`.
//!
//! - [`Amount`]: an exact value `mantissa × 10^exponent` with the format it prints in; sums and multiples (pod
//!   requests, PodGroup `minResources`) and [`Amount`]'s `Display`, which is Go's `Quantity.String()`: what the
//!   API server stores (`1000m` → `1`, `1.5Gi` → `1536Mi`).
//! - [`Nanos`]: a value in nano-units (`i128`), rounded up like Kubernetes does below a nano; for comparisons
//!   and `Value()` / `MilliValue()` readings.
//! - [`canonical`]: a quantity string in canonical form.
//! - [`Quantity`]: a quantity that keeps the text it was written as, and [`count`]: the integer counts Kueue
//!   keeps (milli-cpu, base units otherwise, saturating at [`count::UNLIMITED`]) and prints in its messages.
//!
//! One parser for all of them, and no floating point anywhere: every value Kubernetes accepts is held exactly.
//!
//! ```
//! use kubetrain_quantity::{Amount, Nanos, Quantity, canonical, count::format_count};
//! let cpu = Amount::parse("500m").unwrap().add(&Amount::parse("1.8").unwrap());
//! assert_eq!(cpu.to_string(), "2300m");
//! assert_eq!(Amount::parse("1Gi").unwrap().mul(3).to_string(), "3Gi");
//! assert_eq!(Amount::parse("2.5").unwrap().ceil(), 3);
//! assert_eq!(canonical("1000m").as_deref(), Some("1"));
//! assert_eq!(Nanos::parse("700m").map(Nanos::ceil_units), Ok(1));
//! let gpus = Quantity::parse("1500m").unwrap();
//! assert_eq!((gpus.count_for("nvidia.com/gpu"), gpus.text()), (2, "1500m"));
//! assert_eq!(format_count("memory", 3 << 30), "3Gi");
//! ```
//!
//! ## Features
//!
//! | feature | default | what it does |
//! |---|---|---|
//! | `serde` | no | `Serialize`/`Deserialize` for [`Quantity`]: a string, or a YAML/JSON number |
//! | `k8s-openapi` | no | `Amount::from_quantity` and `Nanos::from_quantity` for `k8s-openapi`'s `Quantity` (like every library here, it picks no Kubernetes version feature: the binary does) |
#![cfg_attr(docsrs, feature(doc_cfg))]

mod amount;
pub mod count;
mod quantity;

pub use amount::{Amount, Format, InvalidQuantity, Nanos, QuantityError, canonical};
pub use quantity::Quantity;

// The README's example is compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
