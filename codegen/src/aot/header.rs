//! The C header written beside an object: the generic entry point, the sizes a caller
//! allocates, a typed wrapper, and for every argument and result its shape, element type and
//! layout, with the physical offset of each element spelled out so a caller can fill a tiled
//! buffer. It compiles as C99 and as C++.

use std::collections::HashSet;
use std::fmt::Write;

use tessera_hlo::layout_index::LayoutMap;
use tessera_hlo::{ArrayShape, ElementType};
use tessera_lower::{BufferId, Program};

use crate::entry::plan::{EntryPlan, ERROR_TEXTS};

/// What the header says about the object besides the program.
pub struct HeaderInfo<'a> {
    pub symbol: &'a str,
    /// Where the object came from, for the opening comment.
    pub source: &'a str,
    /// The object's file name, for the link line.
    pub object_name: &'a str,
    pub tier: &'a str,
    pub triple: &'a str,
    pub cpu: &'a str,
    /// Whether the object calls into `libtessera_rt.a` (else it links with libc and libm only).
    pub needs_runtime: bool,
    /// Whether kernels run through `tessera_rt_launch` (grids split across threads).
    pub parallel: bool,
}

/// Keywords of C99 and C++ (a symbol or parameter name may not be one).
const RESERVED: [&str; 53] = [
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "bool",
    "class",
    "delete",
    "new",
    "operator",
    "private",
    "protected",
    "public",
    "template",
    "this",
    "throw",
    "try",
    "catch",
    "virtual",
    "namespace",
    "using",
    "true",
    "false",
    "friend",
];

/// Whether `s` is a C identifier (what `--name` must be).
pub fn is_c_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !RESERVED.contains(&s)
}

/// The C element type a buffer of `et` is passed as (sub-byte and 8-bit float types as raw
/// bytes, 16-bit floats as raw bits, complex numbers as interleaved parts).
fn c_type(et: ElementType) -> &'static str {
    use ElementType as E;
    match et {
        E::F32 | E::C64 => "float",
        E::F64 | E::C128 => "double",
        E::S8 => "int8_t",
        E::S16 => "int16_t",
        E::S32 => "int32_t",
        E::S64 => "int64_t",
        E::U16 | E::F16 | E::BF16 => "uint16_t",
        E::U32 => "uint32_t",
        E::U64 => "uint64_t",
        _ => "uint8_t",
    }
}

/// How the bytes of an element of `et` read (for types C has no name for).
fn encoding(et: ElementType) -> Option<&'static str> {
    use ElementType as E;
    Some(match et {
        E::Pred => "one byte per element, 0 or 1",
        E::F16 => "IEEE half-precision bits",
        E::BF16 => "bfloat16 bits (the high half of an f32)",
        E::C64 | E::C128 => "each element is (real, imaginary), interleaved",
        _ if et.bit_width() < 8 => "sub-byte elements packed into bytes, low bits first",
        _ if et.bit_width() == 8 && et.is_float() => "8-bit float bits",
        _ => return None,
    })
}

/// A buffer's description: shape, element type, layout, and where each element sits.
fn describe(out: &mut String, shape: &ArrayShape, bytes: u64, memory_space: i64) {
    let et = shape.element_type;
    let text = tessera_hlo::Shape::Array(shape.clone());
    let _ = writeln!(out, " *   shape {text} ({} elements), {bytes} bytes", shape.dims.iter().product::<i64>());
    if let Some(e) = encoding(et) {
        let _ = writeln!(out, " *   element type {}: {e}", et.name());
    }
    if memory_space != 0 {
        let _ = writeln!(out, " *   memory space S({memory_space})");
    }
    match LayoutMap::new(shape) {
        Ok(map) if !map.is_identity() => {
            let terms: Vec<String> = map
                .physical_dims()
                .iter()
                .filter(|d| d.extent > 1)
                .map(|d| if d.stride == 1 { d.index.to_string() } else { format!("{}*{}", d.index, d.stride) })
                .collect();
            let terms = if terms.is_empty() { "0".to_string() } else { terms.join(" + ") };
            let _ = writeln!(
                out,
                " *   layout: element (i0, i1, ...) is at element offset {terms} ({} slots with padding;\n *   \
                 / is floor division, % the remainder, padding slots are ignored on input and undefined on output)",
                map.physical_element_count()
            );
        }
        Ok(_) => {
            let _ = writeln!(out, " *   layout: row-major (C order), no padding");
        }
        Err(e) => {
            let _ = writeln!(out, " *   layout: {e}");
        }
    }
}

/// Unique C names for a list of buffers, from their HLO names, avoiding `taken` (the typed
/// wrapper's other names).
fn c_names(program: &Program, ids: &[BufferId], fallback: &str, taken: &[String]) -> Vec<String> {
    let mut used: HashSet<String> = taken.iter().cloned().collect();
    used.extend(["args", "results", "temp"].map(String::from));
    ids.iter()
        .enumerate()
        .map(|(i, id)| {
            let raw = program.buffers.get(id.0 as usize).map_or("", |b| b.name.as_str());
            let mut name: String = raw.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
            if !is_c_identifier(&name) || name.starts_with("__") {
                name = format!("{fallback}{i}");
            }
            while used.contains(&name) {
                name.push('_');
            }
            used.insert(name.clone());
            name
        })
        .collect()
}

/// The header text for `program`, compiled into an object whose entry is `info.symbol`.
/// The header's sentence on donation: which results may be passed their argument's buffer.
fn donation_text(program: &Program) -> String {
    if program.aliases.is_empty() {
        return String::new();
    }
    let pairs: Vec<String> = program.aliases.iter().map(|(r, p)| format!("result {r} and argument {p}")).collect();
    format!(
        "\n * Except, by the module's input_output_alias: {} may be one buffer.\n * A caller that gives up \
         the argument passes it as the result too; the call updates it in place.",
        pairs.join(", ")
    )
}

pub fn header(program: &Program, plan: &EntryPlan, info: &HeaderInfo<'_>) -> String {
    let sym = info.symbol;
    let upper = sym.to_ascii_uppercase();
    let mut h = String::new();
    // Text from outside (file names) must not end the comment it goes into.
    let comment_safe = |s: &str| s.replace("*/", "* /");
    let object = comment_safe(info.object_name);
    let link = if info.needs_runtime {
        format!(
            "gcc main.c {object} -Wl,--start-group target/release/libtessera_rt.a -Wl,--end-group \\\n *       \
             -lm -lpthread -ldl -lrt -lutil -lgcc_s"
        )
    } else {
        format!(
            "gcc main.c {object} -lm\n *   (this object calls nothing in libtessera_rt.a; linking it anyway, as for other\n *   \
             objects, changes nothing)"
        )
    };
    let _ = write!(
        h,
        "/* {sym}: generated by `tessera compile` from {source}; do not edit.\n *\n \
         * Tier {tier}, target {triple}, CPU {cpu}.\n *\n \
         * Link (main.c standing for your program):\n *   {link}\n *\n \
         * Calling: every argument and result is a caller-owned physical buffer in the layout given\n \
         * below (the bytes `tessera run --physical` reads and writes), aligned to {sym}_ALIGNMENT\n \
         * bytes; `temp` points to {sym}_TEMP_BYTES bytes of scratch, equally aligned (NULL when that\n \
         * is 0). A result buffer must not overlap another result, an argument or temp: the\n \
         * code is compiled knowing them apart.{donation}\n \
         * {threading}.\n \
         * It allocates nothing and may run concurrently with calls that use other temp blocks.\n */\n\
         #ifndef TESSERA_{upper}_H\n#define TESSERA_{upper}_H\n\n#include <stdint.h>\n\n\
         #ifdef __cplusplus\nextern \"C\" {{\n#endif\n\n\
         #if defined(__GNUC__)\n#define TESSERA_{upper}_UNUSED __attribute__((unused))\n#else\n#define TESSERA_{upper}_UNUSED\n#endif\n\n",
        source = comment_safe(info.source),
        threading = if info.parallel {
            "The call splits kernel grids across the threads tessera_rt_set_threads starts\n * (by default none: the calling thread does everything)"
        } else {
            "The call runs on the calling thread"
        },
        donation = donation_text(program),
        tier = info.tier,
        triple = info.triple,
        cpu = info.cpu,
    );
    let _ = writeln!(h, "#define {sym}_NUM_ARGS {}", plan.arg_bytes.len());
    let _ = writeln!(h, "#define {sym}_NUM_RESULTS {}", plan.result_bytes.len());
    let _ = writeln!(h, "#define {sym}_TEMP_BYTES {}", plan.temp_bytes);
    let _ = writeln!(h, "#define {sym}_ALIGNMENT {}\n", Program::ALIGNMENT);
    for (what, sizes) in [("ARG", &plan.arg_bytes), ("RESULT", &plan.result_bytes)] {
        // C has no empty arrays: a module without arguments still gets one (unused) entry.
        let list: Vec<String> =
            if sizes.is_empty() { vec!["0".into()] } else { sizes.iter().map(u64::to_string).collect() };
        let _ = writeln!(
            h,
            "/* Bytes of each {}. */\nstatic const uint64_t {sym}_{what}_BYTES[{}] TESSERA_{upper}_UNUSED = {{{}}};\n",
            if what == "ARG" { "argument" } else { "result" },
            list.len(),
            list.join(", ")
        );
    }
    let result_names: Vec<String> = (0..program.results.len()).map(|i| format!("result{i}")).collect();
    let arg_names = c_names(program, &program.parameters, "arg", &result_names);
    let mut params = Vec::new();
    for (role, ids, names, constness) in
        [("Argument", &program.parameters, &arg_names, "const "), ("Result", &program.results, &result_names, "")]
    {
        for (i, (id, name)) in ids.iter().zip(names).enumerate() {
            let Some(b) = program.buffers.get(id.0 as usize) else { continue };
            let macro_role = if role == "Argument" { "ARG" } else { "RESULT" };
            let _ = writeln!(h, "/* {role} {i} `{name}` (HLO `{}`):", b.name);
            describe(&mut h, &b.shape, b.bytes, b.memory_space);
            let _ = writeln!(h, " */");
            let _ = writeln!(h, "#define {sym}_{macro_role}{i}_RANK {}", b.shape.dims.len());
            for (d, n) in b.shape.dims.iter().enumerate() {
                let _ = writeln!(h, "#define {sym}_{macro_role}{i}_DIM{d} {n}");
            }
            let _ = writeln!(h);
            params.push(format!("{constness}{}* {name}", c_type(b.shape.element_type)));
        }
    }
    let _ = write!(
        h,
        "/* Runs the module. Returns 0 on success, otherwise a code {sym}_error_string explains. */\n\
         int32_t {sym}(const void* const* args, void* const* results, void* temp);\n\n"
    );
    if info.needs_runtime {
        let _ = write!(
            h,
            "/* From libtessera_rt.a: how many threads its GEMM and convolution routines use{}\n \
             * (default 1). Call it once at start-up; returns 0, or -1 if the threads cannot be\n \
             * started. */\n\
             int32_t tessera_rt_set_threads(int32_t threads);\n\n",
            if info.parallel { ", and this module's kernels" } else { "" }
        );
    }
    let args_list = if arg_names.is_empty() { "0".to_string() } else { arg_names.join(", ") };
    let results_list = if result_names.is_empty() { "0".to_string() } else { result_names.join(", ") };
    params.push("void* temp".into());
    let _ = write!(
        h,
        "/* {sym} with one typed pointer per argument and result, in order. */\n\
         static inline int32_t {sym}_run({}) {{\n  \
         const void* args[] = {{{args_list}}};\n  void* results[] = {{{results_list}}};\n  \
         return {sym}(args, results, temp);\n}}\n\n",
        params.join(", ")
    );
    let _ = write!(h, "/* What a nonzero return code of {sym} means. */\nstatic inline const char* {sym}_error_string(int32_t code) {{\n  switch (code) {{\n    case 0: return \"success\";\n");
    for (code, text) in ERROR_TEXTS {
        let _ = writeln!(h, "    case {code}: return \"{}\";", text.replace("the module's ", &format!("{sym}_")));
    }
    let _ = write!(
        h,
        "    default: return \"unknown error code\";\n  }}\n}}\n\n#ifdef __cplusplus\n}}\n#endif\n\n#endif /* TESSERA_{upper}_H */\n"
    );
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_identifiers() {
        for ok in ["mlp", "_x", "model_v2", "A1"] {
            assert!(is_c_identifier(ok), "{ok}");
        }
        for bad in ["", "1x", "my-model", "a b", "int", "caf\u{e9}", "x.y"] {
            assert!(!is_c_identifier(bad), "{bad}");
        }
    }
}
