//! Element types and reduction operators, with the reduction kernels of the CPU backend.

use std::fmt;

use half::{bf16, f16};

/// The element type of a collective's buffers (nccl-tests names in [`ElementType::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementType {
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// 16-bit IEEE float.
    F16,
    /// 16-bit brain float.
    Bf16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// 8-bit unsigned integer.
    U8,
}

impl ElementType {
    /// Every data type, in a stable order.
    pub const ALL: [ElementType; 7] = [
        ElementType::F32,
        ElementType::F64,
        ElementType::F16,
        ElementType::Bf16,
        ElementType::I32,
        ElementType::I64,
        ElementType::U8,
    ];

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            ElementType::F32 | ElementType::I32 => 4,
            ElementType::F64 | ElementType::I64 => 8,
            ElementType::F16 | ElementType::Bf16 => 2,
            ElementType::U8 => 1,
        }
    }

    /// The short name nccl-tests prints (`float`, `double`, `half`, `bfloat16`, `int32`, `int64`, `uint8`).
    pub fn name(self) -> &'static str {
        match self {
            ElementType::F32 => "float",
            ElementType::F64 => "double",
            ElementType::F16 => "half",
            ElementType::Bf16 => "bfloat16",
            ElementType::I32 => "int32",
            ElementType::I64 => "int64",
            ElementType::U8 => "uint8",
        }
    }

    /// Whether the type is a floating-point type (reductions may differ from a naive sum in the last bits).
    pub fn is_float(self) -> bool {
        matches!(
            self,
            ElementType::F32 | ElementType::F64 | ElementType::F16 | ElementType::Bf16
        )
    }
}

impl fmt::Display for ElementType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A reduction operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (integers wrap on overflow).
    Sum,
    /// Product (integers wrap on overflow).
    Prod,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Sum divided by the world size at the end (integer division for integer types).
    Avg,
}

impl ReduceOp {
    /// Every operator, in a stable order.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
    ];

    /// The name nccl-tests prints (`sum`, `prod`, `min`, `max`, `avg`).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A type that collectives can move and reduce: `f32`, `f64`, [`half::f16`], [`half::bf16`], `i32`, `i64`, `u8`.
///
/// Sealed: the CPU backend's kernels and the NCCL type codes exist only for these.
pub trait Element:
    bytemuck::Pod + Send + Sync + PartialEq + PartialOrd + fmt::Debug + sealed::Sealed
{
    /// The matching [`ElementType`].
    const DTYPE: ElementType;

    /// `dst[i] = a[i] op b[i]`, with `a` the partial result that arrived and `b` the local contribution.
    fn reduce_into(op: ReduceOp, dst: &mut [Self], a: &[Self], b: &[Self]);

    /// `acc[i] = acc[i] op b[i]`.
    fn reduce_assign(op: ReduceOp, acc: &mut [Self], b: &[Self]);

    /// Divides every value by `n` (the last step of [`ReduceOp::Avg`]).
    fn div_assign(values: &mut [Self], n: usize);

    /// Converts a small whole number exactly (validation data); wraps for `u8`, rounds for 16-bit floats.
    fn from_i64(v: i64) -> Self;

    /// The value as `f64` (to compare floats with a tolerance).
    fn to_f64(self) -> f64;
}

/// Applies `op` to two values of a primitive type. Sum and product wrap for integers.
macro_rules! int_kernels {
    ($t:ty, $dt:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: ElementType = $dt;
            fn reduce_into(op: ReduceOp, dst: &mut [Self], a: &[Self], b: &[Self]) {
                let it = dst.iter_mut().zip(a.iter().zip(b));
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => {
                        it.for_each(|(d, (x, y))| *d = x.wrapping_add(*y))
                    }
                    ReduceOp::Prod => it.for_each(|(d, (x, y))| *d = x.wrapping_mul(*y)),
                    ReduceOp::Min => it.for_each(|(d, (x, y))| *d = (*x).min(*y)),
                    ReduceOp::Max => it.for_each(|(d, (x, y))| *d = (*x).max(*y)),
                }
            }
            fn reduce_assign(op: ReduceOp, acc: &mut [Self], b: &[Self]) {
                let it = acc.iter_mut().zip(b);
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => it.for_each(|(d, y)| *d = d.wrapping_add(*y)),
                    ReduceOp::Prod => it.for_each(|(d, y)| *d = d.wrapping_mul(*y)),
                    ReduceOp::Min => it.for_each(|(d, y)| *d = (*d).min(*y)),
                    ReduceOp::Max => it.for_each(|(d, y)| *d = (*d).max(*y)),
                }
            }
            fn div_assign(values: &mut [Self], n: usize) {
                // n is a world size, far below every type's maximum except u8's 255.
                let n = <$t>::try_from(n).unwrap_or(<$t>::MAX);
                values.iter_mut().for_each(|v| *v /= n);
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}

int_kernels!(i32, ElementType::I32);
int_kernels!(i64, ElementType::I64);
int_kernels!(u8, ElementType::U8);

macro_rules! float_kernels {
    ($t:ty, $dt:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: ElementType = $dt;
            fn reduce_into(op: ReduceOp, dst: &mut [Self], a: &[Self], b: &[Self]) {
                let it = dst.iter_mut().zip(a.iter().zip(b));
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => it.for_each(|(d, (x, y))| *d = x + y),
                    ReduceOp::Prod => it.for_each(|(d, (x, y))| *d = x * y),
                    ReduceOp::Min => it.for_each(|(d, (x, y))| *d = x.min(*y)),
                    ReduceOp::Max => it.for_each(|(d, (x, y))| *d = x.max(*y)),
                }
            }
            fn reduce_assign(op: ReduceOp, acc: &mut [Self], b: &[Self]) {
                let it = acc.iter_mut().zip(b);
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => it.for_each(|(d, y)| *d += y),
                    ReduceOp::Prod => it.for_each(|(d, y)| *d *= y),
                    ReduceOp::Min => it.for_each(|(d, y)| *d = d.min(*y)),
                    ReduceOp::Max => it.for_each(|(d, y)| *d = d.max(*y)),
                }
            }
            fn div_assign(values: &mut [Self], n: usize) {
                let n = n as $t;
                values.iter_mut().for_each(|v| *v /= n);
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}

float_kernels!(f32, ElementType::F32);
float_kernels!(f64, ElementType::F64);

/// 16-bit floats reduce in `f32` and round once per step, like NCCL's half kernels.
macro_rules! half_kernels {
    ($t:ty, $dt:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: ElementType = $dt;
            fn reduce_into(op: ReduceOp, dst: &mut [Self], a: &[Self], b: &[Self]) {
                for (d, (x, y)) in dst.iter_mut().zip(a.iter().zip(b)) {
                    *d = <$t>::from_f32(apply_f32(op, x.to_f32(), y.to_f32()));
                }
            }
            fn reduce_assign(op: ReduceOp, acc: &mut [Self], b: &[Self]) {
                for (d, y) in acc.iter_mut().zip(b) {
                    *d = <$t>::from_f32(apply_f32(op, d.to_f32(), y.to_f32()));
                }
            }
            fn div_assign(values: &mut [Self], n: usize) {
                let n = n as f32;
                values
                    .iter_mut()
                    .for_each(|v| *v = <$t>::from_f32(v.to_f32() / n));
            }
            fn from_i64(v: i64) -> Self {
                <$t>::from_f32(v as f32)
            }
            fn to_f64(self) -> f64 {
                self.to_f64()
            }
        }
    };
}

fn apply_f32(op: ReduceOp, x: f32, y: f32) -> f32 {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => x + y,
        ReduceOp::Prod => x * y,
        ReduceOp::Min => x.min(y),
        ReduceOp::Max => x.max(y),
    }
}

half_kernels!(f16, ElementType::F16);
half_kernels!(bf16, ElementType::Bf16);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_apply_each_operator() {
        let a = [3i32, -2, 7];
        let b = [5i32, 4, -1];
        let cases = [
            (ReduceOp::Sum, [8, 2, 6]),
            (ReduceOp::Prod, [15, -8, -7]),
            (ReduceOp::Min, [3, -2, -1]),
            (ReduceOp::Max, [5, 4, 7]),
        ];
        for (op, want) in cases {
            let mut dst = [0; 3];
            i32::reduce_into(op, &mut dst, &a, &b);
            assert_eq!(dst, want, "{op}");
            let mut acc = a;
            i32::reduce_assign(op, &mut acc, &b);
            assert_eq!(acc, want, "{op} assign");
        }
    }

    #[test]
    fn integer_overflow_wraps_instead_of_panicking() {
        let mut acc = [250u8, 16];
        u8::reduce_assign(ReduceOp::Sum, &mut acc, &[10, 16]);
        assert_eq!(acc, [4, 32]);
        let mut acc = [i64::MAX];
        i64::reduce_assign(ReduceOp::Prod, &mut acc, &[2]);
        assert_eq!(acc, [-2]);
    }

    #[test]
    fn avg_divides_by_world_size() {
        let mut v = [9i32, 10, -9];
        i32::div_assign(&mut v, 3);
        assert_eq!(v, [3, 3, -3]);
        let mut f = [3.0f32, 1.5];
        f32::div_assign(&mut f, 3);
        assert_eq!(f, [1.0, 0.5]);
        let mut h = [bf16::from_f32(6.0)];
        bf16::div_assign(&mut h, 4);
        assert_eq!(h[0].to_f32(), 1.5);
    }

    #[test]
    fn sizes_match_rust_types() {
        assert_eq!(ElementType::F32.size(), size_of::<f32>());
        assert_eq!(ElementType::Bf16.size(), size_of::<bf16>());
        assert_eq!(ElementType::I64.size(), size_of::<i64>());
        assert_eq!(<u8 as Element>::DTYPE, ElementType::U8);
        assert!(ElementType::F16.is_float() && !ElementType::I32.is_float());
    }
}
