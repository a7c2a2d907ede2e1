//! Shapes named by index strings such as `"i,j,k"`, and the shapes of their compositions.
//!
//! Labelling each mode of an operand says how the modes of operands and result correspond,
//! which is all that is needed to work out a result shape:
//!
//! * [`permute`]: `out("j,i,k") = a("i,j,k")`, a transpose.
//! * [`elementwise`]: `out("j,i,k") = a("i,j,k") + b("i,j,k")`; the operands carry the same
//!   labels (in any order) with the same extents, the result is any ordering of them.
//! * [`product`] and [`contraction`]: `out("i,k") = a("i,j,k") * b("i,j,k")`. A label in both
//!   operands and in the output is a batch label (element-wise), in both operands but not the
//!   output a contracted label (summed over), in one operand and the output a free label. With
//!   no contracted labels this is a direct (outer) product, e.g.
//!   `out("i,j,k,l") = a("i,j,k") * b("i,j,l")`.
//!
//! [`plan_einsum`] is the entry point for lowering a binary einsum to a `dot_general` followed
//! by a `transpose`: [`Contraction`] gives the dimension numbers and the permutation.
//!
//! Extents are static here: a label names one extent, and operands that disagree on it are an
//! error, not a run-time check.

use std::fmt;
use std::str::FromStr;

use super::extents::Extents;
use super::functions::Shaped;

/// Which operand of a binary composition an error refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    /// The left (first) operand.
    Lhs,
    /// The right (second) operand.
    Rhs,
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operand::Lhs => "left",
            Operand::Rhs => "right",
        })
    }
}

/// Why an index string or a composition of indexed shapes was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IndexStringError {
    /// Two commas with nothing between them, or a trailing or leading comma.
    #[error("index string {spec:?}: label {position} is empty")]
    EmptyLabel {
        /// The whole index string.
        spec: String,
        /// Zero-based position of the empty label.
        position: usize,
    },
    /// A label that is not an identifier.
    #[error(
        "index string {spec:?}: label {label:?} is malformed (expected letters, digits and '_', \
         not starting with a digit)"
    )]
    MalformedLabel {
        /// The whole index string.
        spec: String,
        /// The offending label, trimmed.
        label: String,
    },
    /// A label used twice in one index string: that would be a diagonal or a trace, which
    /// these compositions do not express.
    #[error("index string {spec:?}: label {label:?} appears more than once (diagonals are not supported)")]
    RepeatedLabel {
        /// The whole index string.
        spec: String,
        /// The repeated label.
        label: String,
    },
    /// The number of labels differs from the number of extents.
    #[error("index string {spec:?} has {labels} labels for a shape of rank {rank}")]
    RankMismatch {
        /// The whole index string.
        spec: String,
        /// How many labels the string has.
        labels: usize,
        /// How many extents the shape has.
        rank: usize,
    },
    /// A label shared by both operands with different extents.
    #[error("label {label:?} has extent {lhs} in the left operand but {rhs} in the right")]
    ExtentMismatch {
        /// The label.
        label: String,
        /// Its extent in the left operand.
        lhs: u64,
        /// Its extent in the right operand.
        rhs: u64,
    },
    /// An output label that no operand has, so its extent is unknown.
    #[error("output label {label:?} appears in no operand")]
    UnknownOutputLabel {
        /// The label.
        label: String,
    },
    /// An operand label that the output drops although nothing sums over it: in a
    /// permutation or element-wise composition every label must reach the output, and in a
    /// product a label only one operand has must.
    #[error("label {label:?} of the {operand} operand is missing from the output")]
    MissingOutputLabel {
        /// The label.
        label: String,
        /// The operand that has it.
        operand: Operand,
    },
    /// An element-wise composition whose operands do not carry the same labels.
    #[error(
        "label {label:?} is in the {present} operand but not the other; element-wise operands need the same labels"
    )]
    LabelSetMismatch {
        /// The label.
        label: String,
        /// The operand that has it.
        present: Operand,
    },
}

/// A parsed index string: comma-separated labels, each an identifier (letters, digits and
/// `_`, not starting with a digit), whitespace around labels ignored, no label twice. The
/// empty string is rank 0.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IndexString {
    labels: Vec<String>,
}

impl IndexString {
    /// The labels, in mode order.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// The number of labels.
    pub fn rank(&self) -> usize {
        self.labels.len()
    }

    /// The mode a label names, if present.
    pub fn position(&self, label: &str) -> Option<usize> {
        self.labels.iter().position(|l| l == label)
    }
}

fn is_identifier(label: &str) -> bool {
    let mut chars = label.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_') && chars.all(|c| c.is_alphanumeric() || c == '_')
}

impl FromStr for IndexString {
    type Err = IndexStringError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        if spec.trim().is_empty() {
            return Ok(IndexString { labels: Vec::new() });
        }
        let mut labels: Vec<String> = Vec::new();
        for (position, raw) in spec.split(',').enumerate() {
            let label = raw.trim();
            if label.is_empty() {
                return Err(IndexStringError::EmptyLabel { spec: spec.to_owned(), position });
            }
            if !is_identifier(label) {
                return Err(IndexStringError::MalformedLabel { spec: spec.to_owned(), label: label.to_owned() });
            }
            if labels.iter().any(|l| l == label) {
                return Err(IndexStringError::RepeatedLabel { spec: spec.to_owned(), label: label.to_owned() });
            }
            labels.push(label.to_owned());
        }
        Ok(IndexString { labels })
    }
}

impl fmt::Display for IndexString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.labels.join(","))
    }
}

/// A static shape whose modes are named by an index string: the seed's `s0("i,j,k")`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IndexedShape {
    index: IndexString,
    extents: Vec<u64>,
}

impl IndexedShape {
    /// Names the modes of `extents` by the labels of `spec`, one label per mode.
    pub fn new(spec: &str, extents: &[u64]) -> Result<Self, IndexStringError> {
        let index: IndexString = spec.parse()?;
        if index.rank() != extents.len() {
            return Err(IndexStringError::RankMismatch {
                spec: spec.to_owned(),
                labels: index.rank(),
                rank: extents.len(),
            });
        }
        Ok(IndexedShape { index, extents: extents.to_vec() })
    }

    /// The labels, in mode order.
    pub fn labels(&self) -> &[String] {
        self.index.labels()
    }

    /// The extents, in mode order.
    pub fn extents(&self) -> &[u64] {
        &self.extents
    }

    /// The mode a label names, if present.
    pub fn position(&self, label: &str) -> Option<usize> {
        self.index.position(label)
    }

    /// The extent of the mode a label names, if present.
    pub fn extent_of(&self, label: &str) -> Option<u64> {
        self.find(label).map(|(_, extent)| extent)
    }

    /// The (mode, extent) a label names, if present.
    fn find(&self, label: &str) -> Option<(usize, u64)> {
        self.modes().find(|&(l, _, _)| l == label).map(|(_, mode, extent)| (mode, extent))
    }

    /// The (label, mode, extent) of every mode.
    fn modes(&self) -> impl Iterator<Item = (&str, usize, u64)> {
        self.labels()
            .iter()
            .zip(&self.extents)
            .enumerate()
            .map(|(mode, (label, &extent))| (label.as_str(), mode, extent))
    }
}

impl Shaped for IndexedShape {
    fn extents(&self) -> Extents {
        Extents::known(&self.extents)
    }
}

/// The transpose taking `input` to the mode order of `output`: entry `m` is the input mode
/// that becomes output mode `m` (XLA's `transpose` `dimensions`).
///
/// Errors name the single operand [`Operand::Lhs`]. The output must use exactly the input's
/// labels: an unknown label has no extent, and a dropped one would need a reduction.
pub fn permutation(input: &IndexedShape, output: &str) -> Result<Vec<usize>, IndexStringError> {
    let out: IndexString = output.parse()?;
    let dims = out
        .labels()
        .iter()
        .map(|label| input.position(label).ok_or_else(|| IndexStringError::UnknownOutputLabel { label: label.clone() }))
        .collect::<Result<Vec<_>, _>>()?;
    // Every output label is a distinct input label, so equal counts mean no input label is
    // dropped; otherwise name the first dropped one.
    if let Some(label) = input.labels().iter().find(|label| out.position(label).is_none()) {
        return Err(IndexStringError::MissingOutputLabel { label: label.clone(), operand: Operand::Lhs });
    }
    Ok(dims)
}

/// The extents of `out(output) = input`, a permutation of the input's modes.
pub fn permute(input: &IndexedShape, output: &str) -> Result<Vec<u64>, IndexStringError> {
    let dims = permutation(input, output)?;
    Ok(dims.into_iter().filter_map(|mode| input.extents().get(mode).copied()).collect())
}

/// The extents of `out(output) = lhs op rhs` for an element-wise `op` (`+`, `-`, Hadamard
/// `*` when all labels are kept): both operands carry the same labels, possibly in different
/// orders, with the same extents; the output orders them as it likes.
pub fn elementwise(lhs: &IndexedShape, rhs: &IndexedShape, output: &str) -> Result<Vec<u64>, IndexStringError> {
    for (label, _, lhs_extent) in lhs.modes() {
        let Some(rhs_extent) = rhs.extent_of(label) else {
            return Err(IndexStringError::LabelSetMismatch { label: label.to_owned(), present: Operand::Lhs });
        };
        if lhs_extent != rhs_extent {
            return Err(IndexStringError::ExtentMismatch { label: label.to_owned(), lhs: lhs_extent, rhs: rhs_extent });
        }
    }
    if let Some(label) = rhs.labels().iter().find(|l| lhs.position(l).is_none()) {
        return Err(IndexStringError::LabelSetMismatch { label: label.clone(), present: Operand::Rhs });
    }
    permute(lhs, output)
}

/// A label in both operands and the output: the operands are combined element by element
/// along it (a `dot_general` batch dimension).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BatchLabel {
    /// The label.
    pub label: String,
    /// Its extent.
    pub extent: u64,
    /// Its mode in the left operand.
    pub lhs: usize,
    /// Its mode in the right operand.
    pub rhs: usize,
    /// Its mode in the output.
    pub output: usize,
}

/// A label in both operands but not the output: summed over (a `dot_general` contracting
/// dimension).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContractingLabel {
    /// The label.
    pub label: String,
    /// Its extent.
    pub extent: u64,
    /// Its mode in the left operand.
    pub lhs: usize,
    /// Its mode in the right operand.
    pub rhs: usize,
}

/// A label in exactly one operand and in the output.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FreeLabel {
    /// The label.
    pub label: String,
    /// Its extent.
    pub extent: u64,
    /// Its mode in the operand that has it.
    pub operand: usize,
    /// Its mode in the output.
    pub output: usize,
}

/// The classified labels of `out(output) = lhs * rhs` and the output's extents.
///
/// The lists are ordered the way XLA's `dot_general` orders its result: batch labels in the
/// left operand's order, then the left free labels in the left operand's order, then the
/// right free labels in the right operand's order. Contracting labels are in the left
/// operand's order, which pairs `lhs_contracting_dims` with `rhs_contracting_dims`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Contraction {
    /// Labels in both operands and the output.
    pub batch: Vec<BatchLabel>,
    /// Labels in both operands, not the output.
    pub contracting: Vec<ContractingLabel>,
    /// Labels only the left operand has.
    pub lhs_free: Vec<FreeLabel>,
    /// Labels only the right operand has.
    pub rhs_free: Vec<FreeLabel>,
    /// The output's labels, in output order.
    pub output_labels: Vec<String>,
    /// The output's extents, in output order.
    pub output_extents: Vec<u64>,
}

impl Contraction {
    /// `dot_general`'s `lhs_batch_dims`.
    pub fn lhs_batch_dims(&self) -> Vec<usize> {
        self.batch.iter().map(|b| b.lhs).collect()
    }

    /// `dot_general`'s `rhs_batch_dims`, paired with [`Contraction::lhs_batch_dims`].
    pub fn rhs_batch_dims(&self) -> Vec<usize> {
        self.batch.iter().map(|b| b.rhs).collect()
    }

    /// `dot_general`'s `lhs_contracting_dims`.
    pub fn lhs_contracting_dims(&self) -> Vec<usize> {
        self.contracting.iter().map(|c| c.lhs).collect()
    }

    /// `dot_general`'s `rhs_contracting_dims`, paired with
    /// [`Contraction::lhs_contracting_dims`].
    pub fn rhs_contracting_dims(&self) -> Vec<usize> {
        self.contracting.iter().map(|c| c.rhs).collect()
    }

    /// The extents of the `dot_general` result: batch, left free, right free.
    pub fn dot_extents(&self) -> Vec<u64> {
        self.dot_order().map(|(extent, _)| extent).collect()
    }

    /// The `transpose` `dimensions` taking the `dot_general` result to the output order:
    /// entry `m` is the dot result mode that becomes output mode `m`. The identity when the
    /// output is already in dot order, in which case no transpose is needed.
    pub fn dot_to_output_permutation(&self) -> Vec<usize> {
        let mut permutation = vec![0; self.output_labels.len()];
        for (dot_mode, (_, output_mode)) in self.dot_order().enumerate() {
            if let Some(slot) = permutation.get_mut(output_mode) {
                *slot = dot_mode;
            }
        }
        permutation
    }

    /// (extent, output mode) of each dot_general result mode, in dot order.
    fn dot_order(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        let batch = self.batch.iter().map(|b| (b.extent, b.output));
        let free = self.lhs_free.iter().chain(&self.rhs_free);
        batch.chain(free.map(|f| (f.extent, f.output)))
    }
}

/// Classifies the labels of `out(output) = lhs * rhs`; see [`Contraction`].
///
/// Errors, checked in this order: a malformed or repeated output label; an output label no
/// operand has ([`IndexStringError::UnknownOutputLabel`]); a shared label with different
/// extents ([`IndexStringError::ExtentMismatch`], the first in the left operand's order); a
/// label only one operand has that the output drops
/// ([`IndexStringError::MissingOutputLabel`]), since summing over a single operand's mode is
/// a reduction, not part of a product.
pub fn contraction(lhs: &IndexedShape, rhs: &IndexedShape, output: &str) -> Result<Contraction, IndexStringError> {
    let out: IndexString = output.parse()?;
    let mut output_extents = Vec::with_capacity(out.rank());
    for label in out.labels() {
        let extent = lhs
            .extent_of(label)
            .or_else(|| rhs.extent_of(label))
            .ok_or_else(|| IndexStringError::UnknownOutputLabel { label: label.clone() })?;
        output_extents.push(extent);
    }

    let mut plan = Contraction {
        batch: Vec::new(),
        contracting: Vec::new(),
        lhs_free: Vec::new(),
        rhs_free: Vec::new(),
        output_labels: out.labels().to_vec(),
        output_extents,
    };
    for (label, lhs_mode, extent) in lhs.modes() {
        match (rhs.find(label), out.position(label)) {
            (Some((rhs_mode, rhs_extent)), output_mode) => {
                if rhs_extent != extent {
                    return Err(IndexStringError::ExtentMismatch {
                        label: label.to_owned(),
                        lhs: extent,
                        rhs: rhs_extent,
                    });
                }
                match output_mode {
                    Some(output) => plan.batch.push(BatchLabel {
                        label: label.to_owned(),
                        extent,
                        lhs: lhs_mode,
                        rhs: rhs_mode,
                        output,
                    }),
                    None => plan.contracting.push(ContractingLabel {
                        label: label.to_owned(),
                        extent,
                        lhs: lhs_mode,
                        rhs: rhs_mode,
                    }),
                }
            }
            (None, Some(output)) => {
                plan.lhs_free.push(FreeLabel { label: label.to_owned(), extent, operand: lhs_mode, output })
            }
            (None, None) => {
                return Err(IndexStringError::MissingOutputLabel { label: label.to_owned(), operand: Operand::Lhs })
            }
        }
    }
    for (label, rhs_mode, extent) in rhs.modes() {
        if lhs.position(label).is_some() {
            continue;
        }
        match out.position(label) {
            Some(output) => {
                plan.rhs_free.push(FreeLabel { label: label.to_owned(), extent, operand: rhs_mode, output })
            }
            None => {
                return Err(IndexStringError::MissingOutputLabel { label: label.to_owned(), operand: Operand::Rhs })
            }
        }
    }
    Ok(plan)
}

/// The extents of `out(output) = lhs * rhs`: contraction, direct product or a mix; see
/// [`contraction`] for the rules and errors.
pub fn product(lhs: &IndexedShape, rhs: &IndexedShape, output: &str) -> Result<Vec<u64>, IndexStringError> {
    contraction(lhs, rhs, output).map(|plan| plan.output_extents)
}

/// Plans a binary einsum such as `"i,j" (2x3), "j,k" (3x4) -> "i,k"` from the operands' index
/// strings and static extents and the output index string.
///
/// The result says which labels are batch (both operands and output), contracting (both
/// operands, not output) and free (one operand and output), where each sits in the operands
/// and output, and the output extents. A builder lowers the einsum to
/// `dot_general(lhs, rhs)` with [`Contraction::lhs_batch_dims`] and friends, followed by a
/// `transpose` by [`Contraction::dot_to_output_permutation`] unless that is the identity.
///
/// Errors: a malformed label, a label repeated within one index string (diagonals are not
/// supported), an index string whose label count differs from its operand's rank, then the
/// errors of [`contraction`].
pub fn plan_einsum(
    lhs_spec: &str,
    lhs_extents: &[u64],
    rhs_spec: &str,
    rhs_extents: &[u64],
    output_spec: &str,
) -> Result<Contraction, IndexStringError> {
    let lhs = IndexedShape::new(lhs_spec, lhs_extents)?;
    let rhs = IndexedShape::new(rhs_spec, rhs_extents)?;
    contraction(&lhs, &rhs, output_spec)
}
