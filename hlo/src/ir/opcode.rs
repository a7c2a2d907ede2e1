//! Every opcode XLA prints, with its text name.

use std::fmt;

macro_rules! opcodes {
    ($($variant:ident => $name:literal,)*) => {
        /// An HLO opcode. Names are XLA's (`get-tuple-element`, `round-nearest-afz`, ...).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Opcode { $($variant,)* }

        impl Opcode {
            /// Every opcode, in XLA's (alphabetical) order.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$variant,)*];

            pub fn name(self) -> &'static str {
                match self { $(Opcode::$variant => $name,)* }
            }

            pub fn from_name(name: &str) -> Option<Opcode> {
                match name { $($name => Some(Opcode::$variant),)* _ => None }
            }
        }
    };
}

opcodes! {
    Abs => "abs",
    Add => "add",
    AddDependency => "add-dependency",
    AfterAll => "after-all",
    AllGather => "all-gather",
    AllGatherDone => "all-gather-done",
    AllGatherStart => "all-gather-start",
    AllReduce => "all-reduce",
    AllReduceDone => "all-reduce-done",
    AllReduceStart => "all-reduce-start",
    AllToAll => "all-to-all",
    And => "and",
    AsyncDone => "async-done",
    AsyncStart => "async-start",
    AsyncUpdate => "async-update",
    Atan2 => "atan2",
    BatchNormGrad => "batch-norm-grad",
    BatchNormInference => "batch-norm-inference",
    BatchNormTraining => "batch-norm-training",
    Bitcast => "bitcast",
    BitcastConvert => "bitcast-convert",
    Broadcast => "broadcast",
    Call => "call",
    Cbrt => "cbrt",
    Ceil => "ceil",
    Cholesky => "cholesky",
    Clamp => "clamp",
    Clz => "count-leading-zeros",
    CollectiveBroadcast => "collective-broadcast",
    CollectivePermute => "collective-permute",
    CollectivePermuteDone => "collective-permute-done",
    CollectivePermuteStart => "collective-permute-start",
    Compare => "compare",
    Complex => "complex",
    Concatenate => "concatenate",
    Conditional => "conditional",
    Constant => "constant",
    Convert => "convert",
    Convolution => "convolution",
    Copy => "copy",
    CopyDone => "copy-done",
    CopyStart => "copy-start",
    Cos => "cosine",
    CustomCall => "custom-call",
    Divide => "divide",
    Domain => "domain",
    Dot => "dot",
    DynamicReshape => "dynamic-reshape",
    DynamicSlice => "dynamic-slice",
    DynamicUpdateSlice => "dynamic-update-slice",
    Erf => "erf",
    Exp => "exponential",
    Expm1 => "exponential-minus-one",
    Fft => "fft",
    Floor => "floor",
    Fusion => "fusion",
    Gather => "gather",
    GetDimensionSize => "get-dimension-size",
    GetTupleElement => "get-tuple-element",
    Imag => "imag",
    Infeed => "infeed",
    Iota => "iota",
    IsFinite => "is-finite",
    Log => "log",
    Log1p => "log-plus-one",
    Logistic => "logistic",
    Map => "map",
    Maximum => "maximum",
    Minimum => "minimum",
    Multiply => "multiply",
    Negate => "negate",
    Not => "not",
    OptimizationBarrier => "opt-barrier",
    Or => "or",
    Outfeed => "outfeed",
    Pad => "pad",
    Parameter => "parameter",
    PartitionId => "partition-id",
    PopulationCount => "popcnt",
    Power => "power",
    RaggedAllToAll => "ragged-all-to-all",
    RaggedDot => "ragged-dot",
    Real => "real",
    Recv => "recv",
    RecvDone => "recv-done",
    Reduce => "reduce",
    ReducePrecision => "reduce-precision",
    ReduceScatter => "reduce-scatter",
    ReduceWindow => "reduce-window",
    Remainder => "remainder",
    ReplicaId => "replica-id",
    Reshape => "reshape",
    Reverse => "reverse",
    Rng => "rng",
    RngBitGenerator => "rng-bit-generator",
    RngGetAndUpdateState => "rng-get-and-update-state",
    RoundNearestAfz => "round-nearest-afz",
    RoundNearestEven => "round-nearest-even",
    Rsqrt => "rsqrt",
    ScaledDot => "scaled-dot",
    Scan => "scan",
    Scatter => "scatter",
    Select => "select",
    SelectAndScatter => "select-and-scatter",
    Send => "send",
    SendDone => "send-done",
    SetDimensionSize => "set-dimension-size",
    ShiftLeft => "shift-left",
    ShiftRightArithmetic => "shift-right-arithmetic",
    ShiftRightLogical => "shift-right-logical",
    Sign => "sign",
    Sin => "sine",
    Slice => "slice",
    Sort => "sort",
    Sqrt => "sqrt",
    StochasticConvert => "stochastic-convert",
    Subtract => "subtract",
    Tan => "tan",
    Tanh => "tanh",
    TopK => "topk",
    Transpose => "transpose",
    TriangularSolve => "triangular-solve",
    Tuple => "tuple",
    While => "while",
    Xor => "xor",
}

impl Opcode {
    /// Elementwise ops of one operand.
    pub fn is_elementwise_unary(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            Abs | Cbrt
                | Ceil
                | Clz
                | Convert
                | BitcastConvert
                | Copy
                | Cos
                | Erf
                | Exp
                | Expm1
                | Floor
                | Imag
                | IsFinite
                | Log
                | Log1p
                | Logistic
                | Negate
                | Not
                | PopulationCount
                | Real
                | ReducePrecision
                | RoundNearestAfz
                | RoundNearestEven
                | Rsqrt
                | Sign
                | Sin
                | Sqrt
                | Tan
                | Tanh
        )
    }

    /// Elementwise ops of two operands (compare included).
    pub fn is_elementwise_binary(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            Add | And
                | Atan2
                | Compare
                | Complex
                | Divide
                | Maximum
                | Minimum
                | Multiply
                | Or
                | Power
                | Remainder
                | ShiftLeft
                | ShiftRightArithmetic
                | ShiftRightLogical
                | Subtract
                | Xor
                | StochasticConvert
        )
    }

    /// Ops whose every output element depends only on the same-index elements of the operands.
    pub fn is_elementwise(self) -> bool {
        self.is_elementwise_unary() || self.is_elementwise_binary() || matches!(self, Opcode::Select | Opcode::Clamp)
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &op in Opcode::ALL {
            assert_eq!(Opcode::from_name(op.name()), Some(op));
        }
        assert_eq!(Opcode::from_name("le"), None);
    }
}
