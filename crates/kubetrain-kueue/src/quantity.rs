//! Kubernetes quantities as Kueue counts them: exact integers, cpu in milli-units, every other
//! resource in base units rounded up, saturating at an [`UNLIMITED`] sentinel (kueue.md §2.1).
//!
//! Re-exported from `kubetrain-quantity`, the one home of quantities (the same parser
//! `kubetrain-api` validates with), so the model needs no `k8s-openapi`.

pub use kubetrain_quantity::count::{Count, UNLIMITED, add, format_count, sub};
pub use kubetrain_quantity::{Amount, InvalidQuantity, Quantity, QuantityError};
