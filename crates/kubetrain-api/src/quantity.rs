//! Kubernetes quantities (`resource.Quantity`: `500m`, `2`, `1.5Gi`, `1e3`): one exact parser, exact arithmetic,
//! Go's canonical text form, and the rounded readings validation and plugins need.
//!
//! Their home is the `kubetrain-quantity` crate (shared with the Kueue model, which needs no `k8s-openapi`);
//! this module re-exports its exact types, with `from_quantity` for `k8s-openapi`'s `Quantity`.
//!
//! - [`Amount`]: an exact value `mantissa × 10^exponent` with the format it prints in; sums and multiples (pod
//!   requests, PodGroup `minResources`) and [`Amount`]'s `Display`, which is Go's `Quantity.String()`: what the API
//!   server stores (`1000m` → `1`, `1.5Gi` → `1536Mi`).
//! - [`Nanos`]: a value in nano-units (`i128`), rounded up like Kubernetes does below a nano; for comparisons and
//!   `Value()` / `MilliValue()` readings.
//! - [`canonical`]: a quantity string in canonical form.
//!
//! ```
//! use kubetrain_api::quantity::{Amount, Nanos, canonical};
//! let cpu = Amount::parse("500m").unwrap().add(&Amount::parse("1.8").unwrap());
//! assert_eq!(cpu.to_string(), "2300m");
//! assert_eq!(Amount::parse("1Gi").unwrap().mul(3).to_string(), "3Gi");
//! assert_eq!(Amount::parse("2.5").unwrap().ceil(), 3);
//! assert_eq!(canonical("1000m").as_deref(), Some("1"));
//! assert_eq!(Nanos::parse("700m").map(Nanos::ceil_units), Ok(1));
//! let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity("1.5Gi".into());
//! assert_eq!(Amount::from_quantity(&q).map(|a| a.to_string()).as_deref(), Ok("1536Mi"));
//! ```

pub use kubetrain_quantity::{Amount, Format, InvalidQuantity, Nanos, QuantityError, canonical};
