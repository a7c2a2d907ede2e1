//! The text form of a [`Program`]: its buffer table, arenas, kernels and step tree, for
//! filetests and diagnostics. Kernels print in their own text form (`kernel::text`).
//!
//! ```text
//! program {
//!   B0 "p0": f32[1200]{0} param(0) bytes=4800 space=0
//!   B1 "out": f32[1200]{0} result(0) bytes=4800 space=0
//!   B2 "t": f32[1200]{0} temp bytes=4800 space=0 offset=0
//!   arena space=0 bytes=4800
//!
//!   kernel fused_add(...) grid g0 in 0..2 {
//!     ...
//!   }
//!
//!   launch fused_add(B0, B1)
//!   copy B2 -> B3
//!   while {
//!     launch cond(B3, B4)
//!   } pred B4 do {
//!     launch body(B3, B2)
//!     copy B2 -> B3
//!   }
//!   conditional B5 {
//!   branch 0:
//!     ...
//!   }
//!   custom-call "target" %name (B1, (B2, B3)) -> B6
//!   infeed %name -> (B7, B8)
//!   outfeed %name B6
//!   parameters B0
//!   results B1
//! }
//! ```

use std::fmt::{self, Write};

use tessera_hlo::Shape;

use crate::program::{BufferKind, HostOp, HostValue, Program, Step};

/// Constants longer than this print their first bytes only, followed by `...`.
const CONSTANT_BYTES_SHOWN: usize = 32;

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("program {\n")?;
        for (i, b) in self.buffers.iter().enumerate() {
            let shape = Shape::Array(b.shape.clone());
            write!(f, "  B{i} {:?}: {shape} ", b.name)?;
            match &b.kind {
                BufferKind::Parameter(n) => write!(f, "param({n})")?,
                BufferKind::Result(n) => write!(f, "result({n})")?,
                BufferKind::Temp => f.write_str("temp")?,
                BufferKind::Constant(data) => {
                    f.write_str("constant(0x")?;
                    for byte in data.iter().take(CONSTANT_BYTES_SHOWN) {
                        write!(f, "{byte:02x}")?;
                    }
                    if data.len() > CONSTANT_BYTES_SHOWN {
                        f.write_str("...")?;
                    }
                    f.write_char(')')?;
                }
            }
            write!(f, " bytes={} space={}", b.bytes, b.memory_space)?;
            if let Some(offset) = b.offset {
                write!(f, " offset={offset}")?;
            }
            f.write_char('\n')?;
        }
        for (space, bytes) in &self.arenas {
            writeln!(f, "  arena space={space} bytes={bytes}")?;
        }
        for k in &self.kernels {
            f.write_char('\n')?;
            for line in k.to_string().lines() {
                writeln!(f, "  {line}")?;
            }
        }
        if !self.steps.is_empty() {
            f.write_char('\n')?;
        }
        self.write_steps(f, &self.steps, 1)?;
        let list = |f: &mut fmt::Formatter<'_>, what: &str, ids: &[crate::BufferId]| -> fmt::Result {
            write!(f, "  {what}")?;
            for id in ids {
                write!(f, " B{}", id.0)?;
            }
            f.write_char('\n')
        };
        list(f, "parameters", &self.parameters)?;
        list(f, "results", &self.results)?;
        for (result, parameter) in &self.aliases {
            writeln!(f, "  alias result {result} <- parameter {parameter}")?;
        }
        f.write_str("}\n")
    }
}

impl Program {
    fn write_steps(&self, f: &mut fmt::Formatter<'_>, steps: &[Step], depth: usize) -> fmt::Result {
        let pad = "  ".repeat(depth);
        for step in steps {
            f.write_str(&pad)?;
            match step {
                Step::Launch(l) => {
                    // A launch of a kernel that does not exist still prints, so diagnostics can
                    // show it.
                    match self.kernels.get(l.kernel) {
                        Some(k) => write!(f, "launch {}(", k.name)?,
                        None => write!(f, "launch <kernel {}>(", l.kernel)?,
                    }
                    for (i, a) in l.args.iter().enumerate() {
                        if i > 0 {
                            f.write_str(", ")?;
                        }
                        write!(f, "B{}", a.0)?;
                    }
                    f.write_str(")\n")?;
                }
                Step::Copy { src, dst } => writeln!(f, "copy B{} -> B{}", src.0, dst.0)?,
                Step::Check { value, equals, .. } => writeln!(f, "check B{} == {equals}", value.0)?,
                Step::While { cond, pred, body } => {
                    f.write_str("while {\n")?;
                    self.write_steps(f, cond, depth + 1)?;
                    writeln!(f, "{pad}}} pred B{} do {{", pred.0)?;
                    self.write_steps(f, body, depth + 1)?;
                    writeln!(f, "{pad}}}")?;
                }
                Step::Conditional { selector, branches } => {
                    writeln!(f, "conditional B{} {{", selector.0)?;
                    for (i, b) in branches.iter().enumerate() {
                        writeln!(f, "{pad}branch {i}:")?;
                        self.write_steps(f, b, depth + 1)?;
                    }
                    writeln!(f, "{pad}}}")?;
                }
                Step::Host(HostOp::CustomCall { name, target, operands, result }) => {
                    write!(f, "custom-call {target:?} %{name} (")?;
                    for (i, o) in operands.iter().enumerate() {
                        if i > 0 {
                            f.write_str(", ")?;
                        }
                        write_host_value(f, o)?;
                    }
                    f.write_str(") -> ")?;
                    write_host_value(f, result)?;
                    f.write_char('\n')?;
                }
                Step::Host(HostOp::Infeed { name, result }) => {
                    write!(f, "infeed %{name} -> ")?;
                    write_host_value(f, result)?;
                    f.write_char('\n')?;
                }
                Step::Host(HostOp::Outfeed { name, operand }) => {
                    write!(f, "outfeed %{name} ")?;
                    write_host_value(f, operand)?;
                    f.write_char('\n')?;
                }
            }
        }
        Ok(())
    }
}

/// A host value's buffers, grouped as its shape's tuples group them.
fn write_host_value(f: &mut fmt::Formatter<'_>, value: &HostValue) -> fmt::Result {
    fn go(f: &mut fmt::Formatter<'_>, shape: &Shape, ids: &mut std::slice::Iter<'_, crate::BufferId>) -> fmt::Result {
        match shape {
            Shape::Tuple(elems) => {
                f.write_char('(')?;
                for (i, e) in elems.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    go(f, e, ids)?;
                }
                f.write_char(')')
            }
            _ => match ids.next() {
                Some(id) => write!(f, "B{}", id.0),
                None => f.write_str("B?"),
            },
        }
    }
    go(f, &value.shape, &mut value.buffers.iter())
}

#[cfg(test)]
mod tests {
    use tessera_hlo::{ArrayShape, ElementType};

    use super::*;
    use crate::kernel::{IndexExpr, KernelBuilder, MemType, Ty};
    use crate::program::{Buffer, BufferId, Launch};
    use tessera_hlo::Shape;

    fn buffer(name: &str, dims: &[i64], kind: BufferKind, offset: Option<u64>) -> Buffer {
        let mut shape = ArrayShape::new(ElementType::F32, dims);
        shape.layout = Some(shape.layout_or_default());
        let bytes = 4 * dims.iter().product::<i64>() as u64;
        Buffer { name: name.into(), shape, bytes, memory_space: 0, kind, offset }
    }

    #[test]
    fn program_prints_buffers_kernels_and_launches() {
        let mut b = KernelBuilder::new("copy", 1);
        let src = b.buffer("p0", MemType::Scalar(Ty::F32), 2, false);
        let dst = b.buffer("out", MemType::Scalar(Ty::F32), 2, true);
        let v = b.begin_loop(0, 2);
        let x = b.load(src, IndexExpr::var(v, 1));
        b.store(dst, IndexExpr::var(v, 1), x);
        b.end_loop();
        let mut big = vec![0u8; 40];
        big[0] = 0xab;
        let program = Program {
            buffers: vec![
                buffer("p0", &[2], BufferKind::Parameter(0), None),
                buffer("out", &[2], BufferKind::Result(0), None),
                buffer("t", &[2], BufferKind::Temp, Some(64)),
                buffer("c", &[1], BufferKind::Constant(vec![0, 0, 0x80, 0x3f]), None),
                buffer("big", &[10], BufferKind::Constant(big), None),
            ],
            kernels: vec![b.finish()],
            steps: vec![
                Step::Launch(Launch { kernel: 0, args: vec![BufferId(0), BufferId(1)] }),
                Step::While {
                    cond: vec![Step::Copy { src: BufferId(3), dst: BufferId(2) }],
                    pred: BufferId(2),
                    body: vec![Step::Conditional {
                        selector: BufferId(2),
                        branches: vec![vec![Step::Launch(Launch { kernel: 3, args: vec![] })], vec![]],
                    }],
                },
                Step::Host(HostOp::CustomCall {
                    name: "cc".into(),
                    target: "host_fn".into(),
                    operands: vec![
                        HostValue {
                            shape: Shape::Array(ArrayShape::new(ElementType::F32, &[2])),
                            buffers: vec![BufferId(1)],
                        },
                        HostValue {
                            shape: Shape::Tuple(vec![
                                Shape::Array(ArrayShape::new(ElementType::F32, &[2])),
                                Shape::Array(ArrayShape::new(ElementType::F32, &[1])),
                            ]),
                            buffers: vec![BufferId(1), BufferId(3)],
                        },
                    ],
                    result: HostValue {
                        shape: Shape::Array(ArrayShape::new(ElementType::F32, &[2])),
                        buffers: vec![BufferId(2)],
                    },
                }),
                Step::Host(HostOp::Infeed {
                    name: "in".into(),
                    result: HostValue { shape: Shape::Tuple(vec![]), buffers: vec![] },
                }),
                Step::Host(HostOp::Outfeed {
                    name: "out".into(),
                    operand: HostValue {
                        shape: Shape::Array(ArrayShape::new(ElementType::F32, &[2])),
                        buffers: vec![BufferId(2)],
                    },
                }),
            ],
            parameters: vec![BufferId(0)],
            results: vec![BufferId(1)],
            arenas: vec![(0, 128)],
            aliases: vec![],
        };
        let expected = r#"program {
  B0 "p0": f32[2]{0} param(0) bytes=8 space=0
  B1 "out": f32[2]{0} result(0) bytes=8 space=0
  B2 "t": f32[2]{0} temp bytes=8 space=0 offset=64
  B3 "c": f32[1]{0} constant(0x0000803f) bytes=4 space=0
  B4 "big": f32[10]{0} constant(0xab00000000000000000000000000000000000000000000000000000000000000...) bytes=40 space=0
  arena space=0 bytes=128

  kernel copy(b0: f32[2] ro "p0", b1: f32[2] rw "out") grid g0 in 0..1 {
    for v1 in 0..2 {
      %0 = load.f32 b0[v1]
      store.f32 b1[v1], %0
    }
  }

  launch copy(B0, B1)
  while {
    copy B3 -> B2
  } pred B2 do {
    conditional B2 {
    branch 0:
      launch <kernel 3>()
    branch 1:
    }
  }
  custom-call "host_fn" %cc (B1, (B1, B3)) -> B2
  infeed %in -> ()
  outfeed %out B2
  parameters B0
  results B1
}
"#;
        assert_eq!(program.to_string(), expected);
    }

    #[test]
    fn empty_program_prints() {
        assert_eq!(Program::default().to_string(), "program {\n  parameters\n  results\n}\n");
    }
}
