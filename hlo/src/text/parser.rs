//! The HLO module grammar: `HloModule name, attrs...`, the optional stack-frame tables of an
//! optimized dump, computations (`[ENTRY] name [(params) -> shape] { instructions }`) and
//! instructions (`[ROOT] name = [shape] opcode(operands), attrs...`), including XLA's
//! conveniences: nested anonymous operands (`add(sqrt(x), y)`), compact tuple-element operands
//! (`%t#0`), omitted shapes that can be inferred, and the `X-start`/`X-update`/`X-done` sugar
//! for async ops wrapping a single instruction.
//!
//! The parser also makes the checks XLA makes while parsing (operand counts, declared operand
//! shapes, literal ranges, async chains, ...), so a module it returns is well formed enough for
//! the verifier to report the rest by instruction name.

use std::collections::{HashMap, HashSet};

use super::attr_parser::{parse_attr_value, CompRef, Parsed};
use super::cursor::{Cursor, ParseError, ParseResult};
use super::literal_text::parse_literal;
use super::shape_text::parse_shape;
use crate::element_type::ElementType;
use crate::ir::{
    AttrList, AttrValue, Attribute, CompId, Computation, InstId, Instruction, Module, Opcode, Payload, ProgramShape,
};
use crate::layout::Layout;
use crate::shape::Shape;
use crate::verify::{infer_shape, result_is_declared};

/// Nesting deeper than this (operands inside operands) is an error rather than a stack
/// overflow.
const MAX_DEPTH: usize = 128;

/// Inline computations nesting deeper than this are an error: each level costs the stack
/// a whole computation's parse, far more than a nested operand.
const MAX_INLINE_DEPTH: usize = 16;

/// Parses an HLO module in XLA's text format.
pub fn parse_module(text: &str) -> Result<Module, ParseError> {
    let mut p = Parser {
        c: Cursor::new(text),
        module: Module::new(""),
        comp_pos: HashMap::new(),
        fixups: Vec::new(),
        entry: None,
        async_checks: Vec::new(),
        incomplete: HashSet::new(),
        forward: None,
        last_in_text: None,
        inline_depth: 0,
    };
    p.module()?;
    Ok(p.module)
}

/// A computation reference inside an attribute, resolved once every computation is known.
struct Fixup {
    comp: CompId,
    inst: InstId,
    attr: usize,
    refs: CompRef,
}

/// An async-update/done (or sugared start) whose chain is checked once computations resolve.
struct AsyncCheck {
    comp: CompId,
    inst: InstId,
    pos: usize,
    /// The wrapped opcode a sugared update/done named (`custom-call` in `custom-call-done`).
    sugar_opcode: Option<String>,
    /// `calls=` given explicitly on an update/done.
    explicit_calls: Option<(String, usize)>,
}

struct Parser<'a> {
    c: Cursor<'a>,
    module: Module,
    comp_pos: HashMap<String, (CompId, usize)>,
    fixups: Vec<Fixup>,
    entry: Option<(CompId, usize)>,
    async_checks: Vec<AsyncCheck>,
    /// Computations whose ids are taken but whose bodies are not finished (being parsed, or
    /// waiting to be parsed again): their signatures are unknown.
    incomplete: HashSet<CompId>,
    /// Set when an omitted shape needs the signature of a computation not parsed yet; the
    /// error it comes with unwinds to the computation, which is parsed again later.
    forward: Option<Forward>,
    /// The computation written last, the entry when none says ENTRY.
    last_in_text: Option<CompId>,
    /// How many inline computations enclose the cursor.
    inline_depth: usize,
}

/// An omitted shape that depends on a computation not parsed yet.
struct Forward {
    needs: String,
    ref_pos: usize,
    op_pos: usize,
    op_word: String,
}

/// A computation to parse again once the computation it waits for is finished.
struct Deferred {
    id: CompId,
    start: usize,
    forward: Forward,
}

/// The computation being parsed.
/// An async-update/done (or explicit start) to check once computations resolve: the
/// instruction, its position, the opcode a sugared form names and an explicit `calls=`.
type PendingAsync = (InstId, usize, Option<String>, Option<(String, usize)>);

/// The part of an instruction read before its operands.
struct Head {
    shape: Option<Shape>,
    op_pos: usize,
    op_word: String,
    opcode: Opcode,
    /// The wrapped opcode of an `X-start`/`X-update`/`X-done`.
    sugar: Option<String>,
    payload: Payload,
}

/// Words XLA's lexer reads as keywords or numbers wherever they stand bare
/// (`HloLexer::LexIdentifier`), which therefore name no instruction: XLA refuses a module
/// defining one (`nan = f32[] ...`: "expects name"), and one defined as `%nan` would print in
/// the short form, without its `%`, as text that reads the keyword back.
const RESERVED_WORDS: [&str; 19] = [
    "ROOT",
    "ENTRY",
    "HloModule",
    "nan",
    "inf",
    "true",
    "false",
    "FileLocations",
    "FileNames",
    "FunctionNames",
    "StackFrames",
    "maximal",
    "replicated",
    "manual",
    "last_tile_dim_replicate",
    "shard_as",
    "shard_like",
    "unknown",
    "unreduced",
];

struct CompState {
    comp: Computation,
    names: HashMap<String, InstId>,
    root: Option<(InstId, usize)>,
    /// Control predecessors by name, resolved at the end of the computation.
    preds: Vec<(InstId, Vec<(String, usize)>)>,
    /// Compact tuple-element operands already materialized: (tuple, index) -> gte.
    gtes: HashMap<(InstId, i64), InstId>,
    params: HashMap<i64, usize>,
    /// Attributes whose computation references still need resolving: (inst, attr, refs).
    comp_refs: Vec<(InstId, usize, CompRef)>,
    /// Pending async checks of this computation.
    asyncs: Vec<PendingAsync>,
    /// Single-instruction text: operands that name nothing become parameters, as in XLA.
    make_params: bool,
    /// Wrapped computations created for sugared async starts, added after this one.
    wrapped: Vec<Computation>,
    /// Which wrapped computation (index into `wrapped`) each sugared start owns.
    wrapped_of: Vec<(InstId, usize)>,
}

impl CompState {
    fn new(name: &str) -> CompState {
        CompState {
            comp: Computation::new(name),
            names: HashMap::new(),
            root: None,
            preds: Vec::new(),
            gtes: HashMap::new(),
            params: HashMap::new(),
            comp_refs: Vec::new(),
            asyncs: Vec::new(),
            wrapped: Vec::new(),
            wrapped_of: Vec::new(),
            make_params: false,
        }
    }
}

fn is_word_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

impl<'a> Parser<'a> {
    fn err(&self, pos: usize, msg: impl Into<String>) -> ParseError {
        self.c.error_at(pos, msg)
    }

    fn pos(&mut self) -> usize {
        self.c.skip_trivia();
        self.c.pos()
    }

    /// Consumes `kw` when it is the next whole word.
    fn eat_keyword(&mut self, kw: &str) -> bool {
        let pos = self.pos();
        let rest = self.c.rest();
        if rest.starts_with(kw) && !rest.as_bytes().get(kw.len()).is_some_and(|&b| is_word_char(b)) {
            self.c.set_pos(pos + kw.len());
            true
        } else {
            false
        }
    }

    fn check_comment(&mut self) -> ParseResult<()> {
        let pos = self.pos();
        if self.c.rest().starts_with("/*") {
            return Err(self.err(pos, "unterminated /* comment: expects '*/' to close it"));
        }
        Ok(())
    }

    fn module(&mut self) -> ParseResult<()> {
        self.check_comment()?;
        // As in XLA, what the text starts with decides: a header or a computation makes it a
        // module, anything else is read as a single instruction wrapped in a module.
        let has_header = self.eat_keyword("HloModule");
        if !has_header && !self.computation_follows() {
            self.single_instruction()?;
            return self.finish_module();
        }
        if has_header {
            self.header()?;
        }
        self.stack_frame_tables()?;
        let mut deferred = Vec::new();
        loop {
            self.check_comment()?;
            if self.c.at_end() {
                break;
            }
            let start = self.pos();
            let (id, forward) = self.computation(None)?;
            self.last_in_text = Some(id);
            if let Some(forward) = forward {
                deferred.push(Deferred { id, start, forward });
            }
        }
        if self.module.computations.is_empty() {
            return Err(self.err(self.c.src().len(), "expects at least one computation"));
        }
        self.parse_deferred(deferred)?;
        self.module.entry = match (self.entry, self.last_in_text) {
            (Some((id, _)), _) | (None, Some(id)) => id,
            // Without an ENTRY keyword the last computation is the entry, as in XLA.
            (None, None) => CompId(self.module.computations.len() as u32 - 1),
        };
        if !has_header {
            self.module.name = format!("module_{}", self.module.comp(self.module.entry).name);
        }
        self.finish_module()
    }

    fn finish_module(&mut self) -> ParseResult<()> {
        self.resolve_fixups()?;
        self.check_asyncs()?;
        self.add_entry_layout();
        Ok(())
    }

    /// Parses again the computations that stopped at an omitted shape calling a computation
    /// written after them, each once what it waits for is finished, so that any order of
    /// definition works without re-reading finished computations.
    fn parse_deferred(&mut self, deferred: Vec<Deferred>) -> ParseResult<()> {
        let mut waiting: HashMap<String, Vec<Deferred>> = HashMap::new();
        let mut ready = Vec::new();
        let park = |p: &Self, d: Deferred, ready: &mut Vec<Deferred>, waiting: &mut HashMap<String, Vec<Deferred>>| {
            if p.is_complete(&d.forward.needs) {
                ready.push(d);
            } else {
                waiting.entry(d.forward.needs.clone()).or_default().push(d);
            }
        };
        for d in deferred {
            park(self, d, &mut ready, &mut waiting);
        }
        while let Some(d) = ready.pop() {
            self.c.set_pos(d.start);
            match self.computation(Some(d.id))? {
                (id, None) => {
                    let name = self.module.comp(id).name.clone();
                    ready.extend(waiting.remove(&name).unwrap_or_default());
                }
                (id, Some(forward)) => park(self, Deferred { id, start: d.start, forward }, &mut ready, &mut waiting),
            }
        }
        let first = waiting.into_values().flatten().min_by_key(|d| d.forward.op_pos);
        match first {
            Some(d) => Err(self.unresolved(&d.forward)),
            None => Ok(()),
        }
    }

    fn is_complete(&self, name: &str) -> bool {
        self.comp_pos.get(name).is_some_and(|(id, _)| !self.incomplete.contains(id))
    }

    /// The error for an omitted shape whose computation never became known.
    fn unresolved(&self, f: &Forward) -> ParseError {
        if self.comp_pos.contains_key(&f.needs) {
            self.err(
                f.op_pos,
                format!(
                    "cannot infer the shape of `{}`: computation {} depends on this instruction's shape; write it",
                    f.op_word, f.needs
                ),
            )
        } else {
            self.err(f.ref_pos, format!("computation does not exist: {}", f.needs))
        }
    }

    /// Takes the next computation id for `name`; the computation stays a placeholder (and
    /// incomplete) until [`Parser::store`] fills it in.
    fn reserve(&mut self, name: &str, pos: usize) -> CompId {
        let id = CompId(self.module.computations.len() as u32);
        self.module.computations.push(Computation::new(name));
        self.incomplete.insert(id);
        self.comp_pos.insert(name.to_string(), (id, pos));
        id
    }

    /// A single instruction (XLA's `ParseSingleInstruction`): `[name =] [shape] opcode(...)`,
    /// whose operands that name nothing become parameters of the declared shapes. It becomes
    /// the root of an entry computation `_` in module `_`.
    fn single_instruction(&mut self) -> ParseResult<()> {
        self.module.name = "_".to_string();
        let start = self.pos();
        let id = self.reserve("_", start);
        let mut cs = CompState::new("_");
        cs.make_params = true;
        let root = if self.shape_follows() {
            self.rhs(&mut cs, Some(("_".to_string(), start)), None, 0)?
        } else {
            self.instruction(&mut cs, 0)?
        };
        self.check_comment()?;
        if !self.c.at_end() {
            return Err(self.err(
                self.c.pos(),
                "Syntax error:\nExpected eof after parsing single instruction. Did you mean to write an HLO module and forget the \"HloModule\" header?",
            ));
        }
        if let Some(f) = self.forward.take() {
            return Err(self.unresolved(&f));
        }
        cs.root = Some((root, start));
        self.close(&mut cs, start)?;
        self.store(id, cs, start);
        self.entry = Some((id, start));
        self.module.entry = id;
        Ok(())
    }

    /// True when a computation (`ENTRY`, or a name followed by a signature or `{`) starts here.
    fn computation_follows(&mut self) -> bool {
        let mut probe = self.c.clone();
        match probe.word() {
            Some("ENTRY") => true,
            Some(_) if probe.eat("(") => {
                // A signature `(p: shape, ...) -> shape`, not an instruction's operands.
                if probe.eat(")") {
                    return probe.looking_at("->");
                }
                probe.word().is_some() && probe.looking_at(":")
            }
            Some(_) => probe.looking_at("{"),
            None => false,
        }
    }

    /// `name, attr=value, ...` after `HloModule`.
    fn header(&mut self) -> ParseResult<()> {
        let name_pos = self.pos();
        let Some(name) = self.c.word() else {
            let found = self.c.describe_next();
            return Err(self.err(name_pos, format!("expects a module name, found {found}")));
        };
        self.module.name = name.trim_start_matches('%').to_string();
        // XLA's lexer reads `name:` as a name token; tolerate the colon.
        if self.c.rest().starts_with(':') {
            self.c.set_pos(self.c.pos() + 1);
        }
        while self.c.eat(",") {
            let attr_pos = self.pos();
            let Some(attr) = self.c.word() else {
                return Err(self.err(attr_pos, "expects attribute name"));
            };
            let attr = attr.to_string();
            self.c.expect("=")?;
            let value_pos = self.pos();
            let value = match parse_attr_value(&mut self.c, &attr)? {
                Parsed::Value(v) => v,
                Parsed::Computations(_) => return Err(self.err(attr_pos, format!("unexpected attribute \"{attr}\""))),
            };
            if let AttrValue::Raw(raw) = &value {
                match attr.as_str() {
                    "buffer_donor" => check_buffer_donor(raw).map_err(|(o, m)| self.err(value_pos + o, m))?,
                    "debug_attributes" => check_debug_attributes(raw).map_err(|m| self.err(value_pos, m))?,
                    _ => {}
                }
            }
            if self.module.attr(&attr).is_some() {
                return Err(self.err(attr_pos, format!("attribute {attr} already exists")));
            }
            self.module.attrs.push(Attribute { name: attr, value });
        }
        Ok(())
    }

    /// Keeps the `FileNames`/`FunctionNames`/`FileLocations`/`StackFrames` tables verbatim.
    fn stack_frame_tables(&mut self) -> ParseResult<()> {
        const TABLES: &[&str] = &["FileNames", "FunctionNames", "FileLocations", "StackFrames"];
        let start = self.pos();
        let mut end = start;
        loop {
            let probe_pos = self.pos();
            let mut probe = self.c.clone();
            match probe.word() {
                Some(w) if TABLES.contains(&w) => {
                    self.c = probe;
                    end = self.c.pos();
                }
                _ => {
                    if !matches!(self.c.peek(), Some(b'0'..=b'9')) || start == end {
                        break;
                    }
                    self.c.int()?;
                    if self.c.looking_at("\"") {
                        super::attr_parser::parse_string(&mut self.c)?;
                    } else if self.c.looking_at("{") {
                        let (value_end, closed) = super::attr_parser::raw_value_span(&mut self.c);
                        if !closed {
                            return Err(self.err(probe_pos, "expects a stack frame table entry to close its '{'"));
                        }
                        self.c.set_pos(value_end);
                    } else {
                        let found = self.c.describe_next();
                        return Err(self.err(
                            probe_pos,
                            format!("expects a string or '{{' in a stack frame table, found {found}"),
                        ));
                    }
                    end = self.c.pos();
                }
            }
        }
        if end > start {
            self.module.stack_frame_tables = Some(self.c.src()[start..end].to_string());
        }
        self.c.set_pos(end.max(self.c.pos()));
        Ok(())
    }

    /// Parses a computation into a new id, or with `retry` again into the id it took before.
    /// Returns the id, and what the computation waits for when an omitted shape in it needs
    /// a computation not parsed yet (its text is then skipped, to be parsed again).
    fn computation(&mut self, retry: Option<CompId>) -> ParseResult<(CompId, Option<Forward>)> {
        let start = self.pos();
        let is_entry = self.eat_keyword("ENTRY");
        let name_pos = self.pos();
        let Some(name) = self.c.word() else {
            let found = self.c.describe_next();
            return Err(self.err(name_pos, format!("expects computation name, found {found}")));
        };
        let name = name.trim_start_matches('%').to_string();
        if let (None, Some(&(_, prev))) = (retry, self.comp_pos.get(&name)) {
            let (line, col) = self.c.line_col(prev);
            let line_text = self.c.src()[prev..].lines().next().unwrap_or("");
            return Err(self.err(
                name_pos,
                format!(
                    "computation '{name}' is already defined; was parsing {line}:{col}: error: computation previously defined here\n{line_text}\n{}^",
                    " ".repeat(col.saturating_sub(1))
                ),
            ));
        }
        let mut declared_result = None;
        if self.c.looking_at("(") {
            self.c.list("(", ")", |c| {
                c.skip_trivia();
                let pos = c.pos();
                if c.word().is_none() {
                    return Err(c.error_at(pos, "expects parameter name"));
                }
                c.expect(":")?;
                parse_shape(c)
            })?;
            self.c.expect("->")?;
            declared_result = Some(parse_shape(&mut self.c)?);
        }
        let open = self.pos();
        self.c.expect("{")?;
        // Reserved before the body so the name is taken; the body cannot call itself.
        let id = match retry {
            Some(id) => id,
            None => self.reserve(&name, if is_entry { name_pos } else { start }),
        };
        let reserved = self.module.computations.len();
        let mut cs = CompState::new(&name);
        if let Err(e) = self.body(&mut cs, 0) {
            let Some(forward) = self.forward.take() else { return Err(e) };
            // Inline computations of this attempt already hold ids; parsing it again would
            // leave them behind, so this case asks for the shape instead.
            if self.module.computations.len() > reserved {
                return Err(self.err(
                    forward.op_pos,
                    format!(
                        "cannot infer the shape of `{}`: it calls computation {}, written after it, from a computation with inline computations; write the shape",
                        forward.op_word, forward.needs
                    ),
                ));
            }
            self.skip_block(open);
            self.execution_thread()?;
            if is_entry && retry.is_none() {
                self.register_entry(id, start)?;
            }
            return Ok((id, Some(forward)));
        }
        cs.comp.execution_thread = self.execution_thread()?;
        self.close(&mut cs, start)?;
        if let Some(declared) = declared_result {
            let root = cs.comp.root_inst();
            if !declared.compatible(&root.shape) {
                return Err(self.err(
                    name_pos,
                    format!(
                        "Shape of computation {name}, {}, is not compatible with that of its root instruction {}, {}",
                        declared.to_string_without_layout(),
                        root.name,
                        root.shape.to_string_without_layout()
                    ),
                ));
            }
        }
        if is_entry && retry.is_none() {
            self.register_entry(id, start)?;
        }
        self.store(id, cs, start);
        Ok((id, None))
    }

    fn register_entry(&mut self, id: CompId, start: usize) -> ParseResult<()> {
        if let Some((_, prev)) = self.entry {
            let (line, col) = self.c.line_col(prev);
            return Err(self.err(start, format!("expects only one ENTRY (the first is at {line}:{col})")));
        }
        self.entry = Some((id, start));
        Ok(())
    }

    /// Instructions up to and including the closing `}`.
    fn body(&mut self, cs: &mut CompState, depth: usize) -> ParseResult<()> {
        loop {
            self.check_comment()?;
            if self.c.eat("}") {
                return Ok(());
            }
            if self.c.at_end() {
                return Err(self.err(self.c.pos(), "expects '}' at the end of the computation"));
            }
            self.instruction(cs, depth)?;
        }
    }

    /// `, execution_thread="name"` after a computation's body.
    fn execution_thread(&mut self) -> ParseResult<Option<String>> {
        if !self.c.eat(",") {
            return Ok(None);
        }
        let pos = self.pos();
        if self.c.word() != Some("execution_thread") {
            return Err(self.err(pos, "expects execution_thread after a computation"));
        }
        self.c.expect("=")?;
        Ok(Some(super::attr_parser::parse_string(&mut self.c)?))
    }

    /// Moves past the braced block opening at `open`, minding strings and comments.
    fn skip_block(&mut self, open: usize) {
        self.c.set_pos(open);
        let mut depth = 0usize;
        loop {
            self.c.skip_trivia();
            let Some(b) = self.c.peek() else { return };
            if b == b'"' {
                if super::attr_parser::parse_string(&mut self.c).is_err() {
                    self.c.set_pos(self.c.src().len());
                    return;
                }
                continue;
            }
            let width = self.c.rest().chars().next().map_or(1, char::len_utf8);
            self.c.set_pos(self.c.pos() + width);
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return;
                    }
                }
                _ => {}
            }
        }
    }

    /// The root (the `ROOT` instruction, else the last) and control predecessors.
    fn close(&mut self, cs: &mut CompState, start: usize) -> ParseResult<()> {
        if cs.comp.instructions.is_empty() {
            return Err(self.err(start, format!("computation {} has no instructions", cs.comp.name)));
        }
        cs.comp.root = match cs.root {
            Some((r, _)) => r,
            None => InstId(cs.comp.instructions.len() as u32 - 1),
        };
        let mut pred_pos = Vec::new();
        for (inst, preds) in std::mem::take(&mut cs.preds) {
            for (pred, pos) in preds {
                let Some(&p) = cs.names.get(&pred) else {
                    return Err(self.err(pos, format!("'{pred}' is not defined")));
                };
                cs.comp.inst_mut(inst).control_predecessors.push(p);
                pred_pos.push((inst, pos));
            }
        }
        // Operands must be defined before use, so only control predecessors can close a
        // cycle; a module with one has no order to print in, so it is rejected here.
        if let Some(id) = cs.comp.find_cycle() {
            let pos = pred_pos.iter().find(|(inst, _)| *inst == id).map_or(start, |&(_, pos)| pos);
            let name = cs.comp.get(id).map_or("?", |i| i.name.as_str()).to_string();
            return Err(self.err(pos, format!("control predecessors form a cycle through '{name}'")));
        }
        Ok(())
    }

    /// Puts a finished computation in its reserved slot, with what it leaves to resolve later
    /// and the computations its sugared async starts wrap.
    fn store(&mut self, id: CompId, cs: CompState, start: usize) {
        let CompState { comp, comp_refs, asyncs, wrapped, wrapped_of, .. } = cs;
        if let Some(slot) = self.module.computations.get_mut(id.0 as usize) {
            *slot = comp;
        }
        self.incomplete.remove(&id);
        for (inst, attr, refs) in comp_refs {
            self.fixups.push(Fixup { comp: id, inst, attr, refs });
        }
        for (inst, pos, sugar_opcode, explicit_calls) in asyncs {
            self.async_checks.push(AsyncCheck { comp: id, inst, pos, sugar_opcode, explicit_calls });
        }
        for (inst, w) in wrapped_of {
            let Some(wrapped) = wrapped.get(w).cloned() else { continue };
            let mut wname = format!("{}.wrapped", wrapped.name);
            let mut n = 1;
            while self.comp_pos.contains_key(&wname) {
                wname = format!("{}.wrapped.{n}", wrapped.name);
                n += 1;
            }
            let wid = CompId(self.module.computations.len() as u32);
            self.comp_pos.insert(wname.clone(), (wid, start));
            self.module.computations.push(Computation { name: wname, ..wrapped });
            self.module
                .comp_mut(id)
                .inst_mut(inst)
                .attrs
                .push(Attribute { name: "calls".to_string(), value: AttrValue::Computation(wid) });
        }
    }

    /// `{ instructions }` as an attribute value: a computation of its own, named `_` (made
    /// unique), as XLA allows.
    fn inline_computation(&mut self, depth: usize) -> ParseResult<CompId> {
        let start = self.pos();
        if depth > MAX_DEPTH || self.inline_depth >= MAX_INLINE_DEPTH {
            return Err(self.err(start, format!("inline computations nest deeper than {MAX_INLINE_DEPTH} levels")));
        }
        self.c.expect("{")?;
        let mut name = "_".to_string();
        let mut n = 1;
        while self.comp_pos.contains_key(&name) {
            name = format!("_.{n}");
            n += 1;
        }
        let id = self.reserve(&name, start);
        let mut cs = CompState::new(&name);
        self.inline_depth += 1;
        let parsed = self.body(&mut cs, depth + 1);
        self.inline_depth -= 1;
        parsed?;
        self.close(&mut cs, start)?;
        self.store(id, cs, start);
        Ok(id)
    }

    /// True when `{` starts an inline computation (an instruction follows), not a list of
    /// computation names.
    fn inline_computation_follows(&mut self) -> bool {
        let saved = self.c.clone();
        let follows = self.c.eat("{")
            && (self.shape_follows()
                || self.eat_keyword("ROOT")
                || (self.c.word().is_some() && self.c.looking_at("=")));
        self.c = saved;
        follows
    }

    fn instruction(&mut self, cs: &mut CompState, depth: usize) -> ParseResult<InstId> {
        let start = self.pos();
        let is_root = self.eat_keyword("ROOT");
        let name_pos = self.pos();
        if self.shape_follows() {
            // XLA reads a shape as its own token, never as a name.
            let found = self.c.describe_next();
            return Err(self.err(name_pos, format!("expects name, found {found}")));
        }
        let mut probe = self.c.clone();
        let name = match probe.word() {
            Some(w) if probe.looking_at("=") => {
                self.c = probe;
                let name = w.trim_start_matches('%');
                if RESERVED_WORDS.contains(&name) {
                    return Err(self.err(name_pos, format!("'{name}' is a keyword, not an instruction name")));
                }
                name.to_string()
            }
            Some(_) => {
                self.c = probe;
                return Err(self.c.error("expects '=' in instruction"));
            }
            None => {
                let found = self.c.describe_next();
                return Err(self.err(name_pos, format!("expects name, found {found}")));
            }
        };
        self.c.expect("=")?;
        if cs.names.contains_key(&name) {
            return Err(self.err(name_pos, format!("instruction '{name}' is already defined")));
        }
        let id = self.rhs(cs, Some((name, name_pos)), None, depth)?;
        if is_root {
            if let Some((_, prev)) = cs.root {
                let (line, col) = self.c.line_col(prev);
                return Err(
                    self.err(start, format!("one computation should have only one ROOT (another is at {line}:{col})"))
                );
            }
            cs.root = Some((id, start));
        }
        Ok(id)
    }

    /// True when a shape starts at the cursor: a tuple `(` or an element type and `[`.
    fn shape_follows(&mut self) -> bool {
        if self.c.looking_at("(") {
            return true;
        }
        let mut probe = self.c.clone();
        match probe.word() {
            Some(w) => ElementType::from_name(w).is_some() && probe.rest().starts_with('['),
            None => false,
        }
    }

    fn shape(&mut self) -> ParseResult<Shape> {
        let pos = self.pos();
        let shape = parse_shape(&mut self.c)?;
        check_physical_shapes(&shape).map_err(|m| self.err(pos, m))?;
        Ok(with_default_layout(&shape))
    }

    /// Parses `[shape] opcode(operands), attrs` and adds the instruction. `name` is `None` for
    /// a nested anonymous instruction; `shape` is a shape already read in front of it.
    fn rhs(
        &mut self,
        cs: &mut CompState,
        name: Option<(String, usize)>,
        shape: Option<Shape>,
        depth: usize,
    ) -> ParseResult<InstId> {
        // This function recurses through `operand`; everything not needed across the
        // recursion lives in helpers so each level's stack frame stays small.
        if depth > MAX_DEPTH {
            return Err(self.c.error(format!("operands nest deeper than {MAX_DEPTH} levels")));
        }
        let head = self.head(cs, shape)?;
        let mut operands = Vec::new();
        if head.payload == Payload::None {
            self.c.expect("(")?;
            if !self.c.eat(")") {
                loop {
                    operands.push(self.operand(cs, depth)?);
                    if self.c.eat(")") {
                        break;
                    }
                    self.operand_separator()?;
                }
            }
        }
        self.finish(cs, name, head, operands, depth)
    }

    /// `[shape] opcode`, and the `(...)` of a parameter or constant.
    #[inline(never)]
    fn head(&mut self, cs: &mut CompState, shape: Option<Shape>) -> ParseResult<Head> {
        let shape = match shape {
            Some(s) => Some(s),
            None if self.shape_follows() => Some(self.shape()?),
            None => None,
        };
        let op_pos = self.pos();
        let op_word = match self.c.word() {
            Some(w) if !w.starts_with('%') => w.to_string(),
            _ => {
                let found = self.c.describe_next();
                return Err(self.err(op_pos, format!("expects opcode, found {found}")));
            }
        };
        let (opcode, sugar) = resolve_opcode(&op_word).map_err(|m| self.err(op_pos, m))?;
        if !self.c.looking_at("(") {
            let found = self.c.describe_next();
            return Err(self.c.error(format!("expects '(' after opcode {op_word}, found {found}")));
        }
        let mut payload = Payload::None;
        match opcode {
            Opcode::Parameter => {
                self.c.expect("(")?;
                let pos = self.pos();
                let n = self.c.int()?;
                if n < 0 {
                    return Err(self.err(pos, "parameter number must be >= 0"));
                }
                if let Some(&prev) = cs.params.get(&n) {
                    let (line, col) = self.c.line_col(prev);
                    return Err(self.err(pos, format!("Duplicate parameter number {n} (first used at {line}:{col})")));
                }
                cs.params.insert(n, pos);
                self.c.expect(")")?;
                payload = Payload::Parameter(n);
            }
            Opcode::Constant => {
                self.c.expect("(")?;
                let Some(s) = &shape else {
                    return Err(self.err(op_pos, "a constant needs a shape in front of its opcode"));
                };
                let lit = parse_literal(&mut self.c, s)?;
                self.c.expect(")")?;
                payload = Payload::Constant(lit);
            }
            _ => {}
        }
        Ok(Head { shape, op_pos, op_word, opcode, sugar: sugar.map(|s| s.0), payload })
    }

    #[inline(never)]
    fn operand_separator(&mut self) -> ParseResult<()> {
        if !self.c.looking_at(",") {
            let found = self.c.describe_next();
            return Err(self.c.error(format!("expects ',' or ')' after an operand, found {found}")));
        }
        self.c.expect(",")
    }

    /// Attributes, checks, the shape (inferred when omitted) and the name; adds the
    /// instruction to the computation.
    #[inline(never)]
    fn finish(
        &mut self,
        cs: &mut CompState,
        name: Option<(String, usize)>,
        head: Head,
        operands: Vec<InstId>,
        depth: usize,
    ) -> ParseResult<InstId> {
        let Head { shape, op_pos, op_word, opcode, sugar, payload } = head;
        let (attrs, preds, comp_refs, explicit_calls) = self.attributes(opcode, depth)?;
        let operand_shapes: Vec<Shape> = operands.iter().map(|&o: &InstId| cs.comp.inst(o).shape.clone()).collect();
        let mut inst = Instruction::new(String::new(), opcode, Shape::Tuple(Vec::new()), operands);
        inst.payload = payload;
        inst.attrs = attrs;
        check_instruction(&mut inst, &operand_shapes, shape.as_ref(), sugar.is_some())
            .map_err(|m| self.err(op_pos, m))?;
        inst.shape = match shape {
            Some(s) => s,
            None => self.infer_omitted(&inst, &operand_shapes, &comp_refs, op_pos, &op_word)?,
        };
        check_shape_rules(&inst).map_err(|m| self.err(op_pos, m))?;
        let name = match name {
            Some((n, _)) => n,
            None => unique_name(&cs.names, &format!("{}.anon", opcode.name())),
        };
        inst.name = name.clone();
        // A sugared start wraps its op (with the op's attributes) in a computation of its own.
        let mut wrapped = None;
        if let (Some(kind), Opcode::AsyncStart) = (&sugar, opcode) {
            wrapped = Some(self.wrap_async(&mut inst, kind, &operand_shapes).map_err(|m| self.err(op_pos, m))?);
        }
        if let Some(&taken) = cs.names.get(&name) {
            // A name generated while parsing this instruction's operands (a compact `%t#0`
            // element, an anonymous nested instruction) took the name written for this one:
            // the written name wins, the generated one moves aside.
            let fresh = unique_name(&cs.names, &name);
            cs.comp.inst_mut(taken).name = fresh.clone();
            cs.names.insert(fresh, taken);
        }
        let id = cs.comp.add(inst);
        cs.names.insert(name, id);
        if !preds.is_empty() {
            cs.preds.push((id, preds));
        }
        for (attr, refs) in comp_refs {
            cs.comp_refs.push((id, attr, refs));
        }
        if let Some(w) = wrapped {
            cs.wrapped.push(w);
            cs.wrapped_of.push((id, cs.wrapped.len() - 1));
        }
        if matches!(opcode, Opcode::AsyncUpdate | Opcode::AsyncDone)
            || (opcode == Opcode::AsyncStart && sugar.is_none())
        {
            cs.asyncs.push((id, op_pos, sugar, explicit_calls));
        }
        Ok(id)
    }

    /// The shape of an instruction written without one, by the verifier's rules, with the
    /// default layout. Computations it calls must be finished; when one is not (it is
    /// written later), `self.forward` says which, and the computation is parsed again later.
    #[inline(never)]
    fn infer_omitted(
        &mut self,
        inst: &Instruction,
        operand_shapes: &[Shape],
        comp_refs: &[(usize, CompRef)],
        op_pos: usize,
        op_word: &str,
    ) -> ParseResult<Shape> {
        if result_is_declared(inst.opcode) {
            return Err(self.err(op_pos, format!("cannot infer the shape of `{op_word}`; write it")));
        }
        let mut probe = inst.clone();
        // Stands for "no declared shape": not an array, so e.g. dot takes no preferred type.
        probe.shape = Shape::Tuple(Vec::new());
        for (attr, refs) in comp_refs {
            let mut ids = Vec::new();
            for (name, pos) in &refs.names {
                match self.comp_pos.get(name) {
                    Some(&(id, _)) if !self.incomplete.contains(&id) => ids.push(id),
                    _ => {
                        self.forward =
                            Some(Forward { needs: name.clone(), ref_pos: *pos, op_pos, op_word: op_word.to_string() });
                        return Err(self.err(op_pos, format!("cannot infer the shape of `{op_word}` yet")));
                    }
                }
            }
            let value = match (refs.list, ids.first()) {
                (false, Some(&id)) => AttrValue::Computation(id),
                _ => AttrValue::Computations(ids),
            };
            if let Some(a) = probe.attrs.get_mut(*attr) {
                a.value = value;
            }
        }
        let computations = &self.module.computations;
        let incomplete = &self.incomplete;
        let called = |id: CompId| -> Option<ProgramShape> {
            let comp = computations.get(id.0 as usize).filter(|_| !incomplete.contains(&id))?;
            comp.instructions.get(comp.root.0 as usize)?;
            Some(ProgramShape { parameters: comp.parameter_shapes(), result: comp.root_inst().shape.clone() })
        };
        let operands: Vec<&Shape> = operand_shapes.iter().collect();
        match infer_shape(&probe, &operands, &called) {
            Ok(s) => Ok(with_default_layout(&s)),
            Err(e) => Err(self.err(op_pos, format!("cannot infer the shape of `{op_word}`: {e}"))),
        }
    }

    /// Builds the computation a sugared `X-start` wraps: parameters for the operands and the
    /// op itself as root, carrying every attribute but the async ones.
    fn wrap_async(
        &mut self,
        inst: &mut Instruction,
        wrapped_op: &str,
        operand_shapes: &[Shape],
    ) -> Result<Computation, String> {
        let opcode = Opcode::from_name(wrapped_op).ok_or_else(|| format!("Unknown opcode: {wrapped_op}"))?;
        let result = match &inst.shape {
            Shape::Tuple(e) if e.len() >= 2 => e[1].clone(),
            _ => return Err(async_shape_message()),
        };
        let mut comp = Computation::new(inst.name.clone());
        let mut params = Vec::new();
        for (i, s) in operand_shapes.iter().enumerate() {
            let mut p = Instruction::new(format!("p{i}"), Opcode::Parameter, s.clone(), vec![]);
            p.payload = Payload::Parameter(i as i64);
            params.push(comp.add(p));
        }
        let (keep, moved): (Vec<Attribute>, Vec<Attribute>) =
            std::mem::take(&mut inst.attrs).into_iter().partition(|a| a.name == "async_execution_thread");
        inst.attrs = keep;
        let mut op = Instruction::new(wrapped_op.to_string(), opcode, result, params);
        op.attrs = moved;
        comp.root = comp.add(op);
        Ok(comp)
    }

    /// One operand: `[shape] name[#i#j...]` or a nested `[shape] opcode(...)`.
    fn operand(&mut self, cs: &mut CompState, depth: usize) -> ParseResult<InstId> {
        let pos = self.pos();
        let declared = if self.shape_follows() { Some(self.shape()?) } else { None };
        let word_pos = self.pos();
        let mut probe = self.c.clone();
        let word = probe.word();
        if let Some(w) = word {
            if !w.starts_with('%') && probe.rest().starts_with('(') && resolve_opcode(w).is_ok() {
                return self.rhs(cs, None, declared, depth + 1);
            }
        }
        self.reference(cs, pos, declared, word_pos)
    }

    /// An operand naming an earlier instruction, possibly through compact tuple-element
    /// indices, checked against its declared shape.
    #[inline(never)]
    fn reference(
        &mut self,
        cs: &mut CompState,
        pos: usize,
        declared: Option<Shape>,
        word_pos: usize,
    ) -> ParseResult<InstId> {
        let mut probe = self.c.clone();
        let word = probe.word();
        let name = match word {
            Some(w) => {
                self.c = probe;
                w.trim_start_matches('%')
            }
            None if cs.make_params && declared.is_some() => "",
            None => {
                let found = self.c.describe_next();
                return Err(self.err(word_pos, format!("expects name of an operand, found {found}")));
            }
        };
        let mut id = match cs.names.get(name) {
            Some(&id) => id,
            None if cs.make_params => return self.make_parameter(cs, name, declared, word_pos),
            None => return Err(self.err(word_pos, format!("instruction does not exist: {name}"))),
        };
        // Compact tuple-element operands: `%t#0#1` is get-tuple-element(get-tuple-element(t, 0), 1).
        while self.c.rest().starts_with('#') {
            self.c.set_pos(self.c.pos() + 1);
            let index_pos = self.c.pos();
            let index = self.c.int()?;
            let tuple = cs.comp.inst(id);
            let Shape::Tuple(elems) = &tuple.shape else {
                return Err(self.err(
                    index_pos,
                    format!("GTE operand must be tuple, but {} has shape {}", tuple.name, tuple.shape),
                ));
            };
            if index < 0 || index as usize >= elems.len() {
                return Err(self.err(
                    index_pos,
                    format!("GTE index {index} out of bounds for {} with {} elements", tuple.name, elems.len()),
                ));
            }
            if let Some(&g) = cs.gtes.get(&(id, index)) {
                id = g;
                continue;
            }
            let gte_name = unique_name(&cs.names, &format!("{}_{index}", tuple.name));
            let elem = elems[index as usize].clone();
            let gte = Instruction::new(gte_name.clone(), Opcode::GetTupleElement, elem, vec![id])
                .with_attr("index", AttrValue::Int(index));
            let g = cs.comp.add(gte);
            cs.names.insert(gte_name, g);
            cs.gtes.insert((id, index), g);
            id = g;
        }
        if let Some(d) = declared {
            let actual = &cs.comp.inst(id).shape;
            if !d.compatible(actual) {
                return Err(self.err(
                    pos,
                    format!(
                        "The declared operand shape {d} is not compatible with the shape of the operand instruction {actual}."
                    ),
                ));
            }
        }
        Ok(id)
    }

    /// In single-instruction text, an operand naming nothing becomes the next parameter, of
    /// the shape written with it (XLA's missing-instruction hook).
    #[inline(never)]
    fn make_parameter(
        &mut self,
        cs: &mut CompState,
        name: &str,
        declared: Option<Shape>,
        pos: usize,
    ) -> ParseResult<InstId> {
        let Some(shape) = declared else {
            return Err(self
                .err(pos, "Operand had no shape in HLO text; cannot create parameter for single-instruction module."));
        };
        if RESERVED_WORDS.contains(&name) {
            return Err(self.err(pos, format!("'{name}' is a keyword, not an operand name")));
        }
        let number = cs.comp.parameters().len() as i64;
        let name = if name.is_empty() { format!("_{number}") } else { name.to_string() };
        let mut p = Instruction::new(name.clone(), Opcode::Parameter, shape, vec![]);
        p.payload = Payload::Parameter(number);
        let id = cs.comp.add(p);
        cs.names.insert(name, id);
        cs.params.insert(number, pos);
        Ok(id)
    }

    /// `, name=value` pairs after the operands. In a nested instruction only pairs that are
    /// clearly attributes (`, word=`) belong to it; the rest belongs to the enclosing list.
    #[allow(clippy::type_complexity)]
    fn attributes(
        &mut self,
        opcode: Opcode,
        depth: usize,
    ) -> ParseResult<(Vec<Attribute>, Vec<(String, usize)>, Vec<(usize, CompRef)>, Option<(String, usize)>)> {
        let mut attrs: Vec<Attribute> = Vec::new();
        let mut preds = Vec::new();
        let mut comp_refs = Vec::new();
        let mut explicit_calls = None;
        loop {
            if !self.c.looking_at(",") {
                break;
            }
            if depth > 0 {
                let mut probe = self.c.clone();
                probe.eat(",");
                if !(probe.word().is_some() && probe.looking_at("=")) {
                    break;
                }
            } else {
                // A comma that starts the next instruction's ROOT or a computation suffix
                // never follows an instruction; every comma here introduces an attribute.
            }
            self.c.expect(",")?;
            let name_pos = self.pos();
            let Some(name) = self.c.word() else {
                let found = self.c.describe_next();
                return Err(self.err(name_pos, format!("expects attribute name, found {found}")));
            };
            let name = name.to_string();
            self.c.expect("=")?;
            if attrs.iter().any(|a| a.name == name) || (name == "control-predecessors" && !preds.is_empty()) {
                return Err(self.err(name_pos, format!("attribute {name} already exists")));
            }
            check_attr_allowed(opcode, &name).map_err(|m| self.err(name_pos, m))?;
            if name == "control-predecessors" {
                preds = self.c.list("{", "}", |c| {
                    c.skip_trivia();
                    let pos = c.pos();
                    match c.word() {
                        Some(w) => Ok((w.trim_start_matches('%').to_string(), pos)),
                        None => Err(c.error("expects instruction name")),
                    }
                })?;
                continue;
            }
            let value_pos = self.pos();
            if super::attr_parser::is_computation_attr(&name) && self.inline_computation_follows() {
                let id = self.inline_computation(depth)?;
                attrs.push(Attribute { name, value: AttrValue::Computation(id) });
                continue;
            }
            match parse_attr_value(&mut self.c, &name)? {
                Parsed::Value(v) => {
                    if let AttrValue::Raw(raw) = &v {
                        check_raw_attr(&name, raw).map_err(|m| self.err(value_pos, m))?;
                    }
                    attrs.push(Attribute { name, value: v });
                }
                Parsed::Computations(refs) => {
                    if name == "calls" && matches!(opcode, Opcode::AsyncUpdate | Opcode::AsyncDone) {
                        explicit_calls = refs.names.first().cloned();
                        continue;
                    }
                    comp_refs.push((attrs.len(), refs));
                    // A placeholder until every computation is known.
                    attrs.push(Attribute { name, value: AttrValue::Computations(Vec::new()) });
                }
            }
        }
        Ok((attrs, preds, comp_refs, explicit_calls))
    }

    fn resolve_fixups(&mut self) -> ParseResult<()> {
        for f in std::mem::take(&mut self.fixups) {
            let mut ids = Vec::new();
            for (name, pos) in &f.refs.names {
                match self.comp_pos.get(name) {
                    Some(&(id, _)) => ids.push(id),
                    None => return Err(self.err(*pos, format!("computation does not exist: {name}"))),
                }
            }
            let value = if f.refs.list { AttrValue::Computations(ids) } else { AttrValue::Computation(ids[0]) };
            if let Some(a) = self.module.comp_mut(f.comp).inst_mut(f.inst).attrs.get_mut(f.attr) {
                a.value = value;
            }
        }
        Ok(())
    }

    /// Checks async-start/update/done chains: operands, wrapped computations, threads.
    fn check_asyncs(&mut self) -> ParseResult<()> {
        let mut callers: HashMap<CompId, usize> = HashMap::new();
        for comp in &self.module.computations {
            for inst in &comp.instructions {
                if inst.opcode == Opcode::AsyncStart {
                    if let Some(c) = inst.called("calls") {
                        *callers.entry(c).or_default() += 1;
                    }
                }
            }
        }
        for check in std::mem::take(&mut self.async_checks) {
            let comp = self.module.comp(check.comp);
            let inst = comp.inst(check.inst);
            if inst.opcode == Opcode::AsyncStart {
                if let Some(c) = inst.called("calls") {
                    if callers.get(&c).copied().unwrap_or(0) > 1 {
                        let name = &self.module.comp(c).name;
                        return Err(
                            self.err(check.pos, format!("Computation {name} is called by more than one async op"))
                        );
                    }
                }
                continue;
            }
            let Some(&op) = inst.operands.first() else {
                return Err(self.err(check.pos, "No operand found for AsyncUpdate and AsyncDone"));
            };
            if inst.operands.len() != 1 {
                return Err(self.err(check.pos, "AsyncUpdate and AsyncDone expect exactly one operand"));
            }
            let mut start = op;
            while comp.inst(start).opcode == Opcode::AsyncUpdate {
                match comp.inst(start).operands.first() {
                    Some(&o) => start = o,
                    None => break,
                }
            }
            let start_inst = comp.inst(start);
            if !matches!(comp.inst(op).opcode, Opcode::AsyncStart | Opcode::AsyncUpdate)
                || start_inst.opcode != Opcode::AsyncStart
            {
                return Err(self.err(
                    check.pos,
                    "AsyncUpdate and AsyncDone expect an asynchronous operation as their first operand.",
                ));
            }
            let wrapped = start_inst.called("calls");
            if let Some(sugar) = &check.sugar_opcode {
                let actual = wrapped.map(|w| self.module.comp(w).root_inst().opcode.name()).unwrap_or("");
                if actual != sugar {
                    return Err(
                        self.err(check.pos, format!("Expect async wrapped opcode to be {actual}, but got {sugar}"))
                    );
                }
            }
            if let (Some((name, pos)), Some(w)) = (&check.explicit_calls, wrapped) {
                let expected = &self.module.comp(w).name;
                if expected != name {
                    return Err(
                        self.err(*pos, format!("Expect async_wrapped_computation to be {expected}, but got {name}"))
                    );
                }
            }
            let thread = |i: &Instruction| i.attr_word("async_execution_thread").map(str::to_string);
            let expected = thread(start_inst).unwrap_or_else(|| "main".to_string());
            // Updates and dones inherit the start's thread; one they state must agree.
            if let Some(got) = thread(inst).filter(|got| *got != expected) {
                return Err(
                    self.err(check.pos, format!("Expect async_execution_thread to be {expected}, but got {got}"))
                );
            }
        }
        // The thread lives on the start only; updates and dones inherit it.
        for comp in &mut self.module.computations {
            for inst in &mut comp.instructions {
                if matches!(inst.opcode, Opcode::AsyncUpdate | Opcode::AsyncDone) {
                    inst.attrs.retain(|a| a.name != "async_execution_thread");
                }
            }
        }
        Ok(())
    }

    /// XLA always prints `entry_computation_layout`; when the text has none, derive it from
    /// the entry computation and put it where XLA's printer would.
    fn add_entry_layout(&mut self) {
        if self.module.attr("entry_computation_layout").is_some() {
            return;
        }
        let entry = self.module.entry_comp();
        let layout = ProgramShape { parameters: entry.parameter_shapes(), result: entry.root_inst().shape.clone() };
        const BEFORE: &[&str] = &["is_scheduled", "input_output_alias", "buffer_donor", "alias_passthrough_params"];
        let at = self.module.attrs.iter().rposition(|a| BEFORE.contains(&a.name.as_str())).map_or(0, |i| i + 1);
        self.module.attrs.insert(
            at,
            Attribute { name: "entry_computation_layout".to_string(), value: AttrValue::ProgramShape(layout) },
        );
    }
}

/// The opcode of `word`, or the async sugar `X-start`/`X-update`/`X-done` it stands for
/// (returned as the wrapped opcode's name).
fn resolve_opcode(word: &str) -> Result<(Opcode, Option<(String,)>), String> {
    if let Some(op) = Opcode::from_name(word) {
        return Ok((op, None));
    }
    for (suffix, op) in [("-start", Opcode::AsyncStart), ("-update", Opcode::AsyncUpdate), ("-done", Opcode::AsyncDone)]
    {
        if let Some(base) = word.strip_suffix(suffix) {
            // Ops with async opcodes of their own have no sugar.
            const DEDICATED: &[&str] = &["all-reduce", "all-gather", "collective-permute", "copy", "send", "recv"];
            if Opcode::from_name(base).is_some() && !DEDICATED.contains(&base) {
                return Ok((op, Some((base.to_string(),))));
            }
        }
    }
    Err(format!("expects opcode but sees: {word}; Unknown opcode: {word}"))
}

fn unique_name(names: &HashMap<String, InstId>, base: &str) -> String {
    if !names.contains_key(base) {
        return base.to_string();
    }
    (1..).map(|n| format!("{base}.{n}")).find(|c| !names.contains_key(c)).unwrap_or_else(|| base.to_string())
}

/// Fills in XLA's default (row-major) layout wherever an array shape has none.
pub fn with_default_layout(shape: &Shape) -> Shape {
    match shape {
        Shape::Array(a) if a.layout.is_none() => {
            let mut a = a.clone();
            a.layout = Some(Layout::row_major(a.rank()));
            Shape::Array(a)
        }
        Shape::Tuple(e) => Shape::Tuple(e.iter().map(with_default_layout).collect()),
        s => s.clone(),
    }
}

fn check_physical_shapes(shape: &Shape) -> Result<(), String> {
    match shape {
        Shape::Array(a) => match &a.layout {
            Some(l) if l.physical_shape.is_some() && l.dim_levels.is_empty() => {
                Err("Layout has physical shape, but is not for a sparse array".to_string())
            }
            _ => Ok(()),
        },
        Shape::Tuple(e) => e.iter().try_for_each(check_physical_shapes),
        _ => Ok(()),
    }
}

fn async_shape_message() -> String {
    "AsyncStart and AsyncUpdate expect the shape to be in the form of ((operand0_shape, operand1_shape, ...), output_shape, ...)"
        .to_string()
}

/// Which computation-valued and opcode-specific attributes an opcode accepts.
fn check_attr_allowed(opcode: Opcode, name: &str) -> Result<(), String> {
    use Opcode::*;
    let ok = match name {
        "to_apply" => matches!(
            opcode,
            Map | Reduce
                | ReduceWindow
                | Sort
                | AllReduce
                | AllReduceStart
                | ReduceScatter
                | Scatter
                | Call
                | CustomCall
                | Scan
                | AsyncStart
                | AsyncUpdate
                | AsyncDone
        ),
        "calls" => matches!(opcode, Fusion | Call | AsyncStart | AsyncUpdate | AsyncDone | CustomCall),
        "condition" | "body" => opcode == While,
        "select" | "scatter" => opcode == SelectAndScatter,
        "true_computation" | "false_computation" | "branch_computations" => opcode == Conditional,
        "called_computations" => matches!(opcode, CustomCall | AsyncStart),
        "result_accuracy" => matches!(
            opcode,
            Exp | Expm1 | Log | Log1p | Rsqrt | Sqrt | Cbrt | Tanh | Sin | Cos | Tan | Logistic | Erf | AsyncStart
        ),
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("unexpected attribute \"{name}\" for {}", opcode.name()))
    }
}

/// Validates attributes kept verbatim whose syntax XLA checks while parsing.
fn check_raw_attr(name: &str, raw: &str) -> Result<(), String> {
    match name {
        "result_accuracy" => check_result_accuracy(raw),
        "replica_groups" if raw.starts_with("mesh") => check_mesh_groups(raw),
        _ => Ok(()),
    }
}

fn check_result_accuracy(raw: &str) -> Result<(), String> {
    let mut c = Cursor::new(raw);
    c.expect("{").map_err(|e| e.message)?;
    let Some(field) = c.word() else {
        return Err("expects attribute name in result_accuracy".to_string());
    };
    match field {
        "mode" => {
            c.expect("=").map_err(|e| e.message)?;
            let mode = c.word().unwrap_or("");
            if !matches!(mode, "default" | "highest" | "DEFAULT" | "HIGHEST") {
                return Err(format!("expects ResultAccuracy type but sees: {mode}"));
            }
            Ok(())
        }
        "tolerance" => Ok(()),
        other => Err(format!("invalid attribute name in result_accuracy: {other}")),
    }
}

/// `mesh['a'=2,'b'=2, device_ids=(..)] {'a'}`: the axes named in braces must exist.
fn check_mesh_groups(raw: &str) -> Result<(), String> {
    let open = raw.find('[').ok_or("expects '[' after mesh")?;
    let close = raw.find(']').filter(|&c| c > open).ok_or("expects ']' closing the mesh")?;
    let body = &raw[open + 1..close];
    let mut axes: Vec<(String, i64)> = Vec::new();
    let mut device_ids: Option<usize> = None;
    let mut rest = body;
    while !rest.trim().is_empty() {
        let item_end = if rest.trim_start().starts_with("device_ids") {
            rest.find(')').map_or(rest.len(), |i| i + 1)
        } else {
            rest.find(',').unwrap_or(rest.len())
        };
        let item = rest[..item_end].trim();
        if let Some(ids) = item.strip_prefix("device_ids") {
            let ids = ids.trim_start_matches(['=', ' ', '(']).trim_end_matches(')');
            device_ids = Some(ids.split(',').filter(|s| !s.trim().is_empty()).count());
        } else if let Some((axis, size)) = item.split_once('=') {
            let size = size.trim().parse::<i64>().map_err(|_| format!("invalid mesh axis size in '{item}'"))?;
            axes.push((axis.trim().trim_matches('\'').to_string(), size));
        }
        rest = rest[item_end..].trim_start_matches([',', ' ']);
    }
    let total = axes
        .iter()
        .try_fold(1i64, |acc, a| acc.checked_mul(a.1))
        .ok_or_else(|| "the mesh's device count overflows".to_string())?;
    if let Some(n) = device_ids {
        if i64::try_from(n).ok() != Some(total) {
            return Err(format!("mesh has {total} devices but device_ids lists {n}"));
        }
    }
    let groups = raw[close + 1..].trim().trim_start_matches('{').trim_end_matches('}');
    for g in groups.split(',').map(|g| g.trim().trim_matches('\'')).filter(|g| !g.is_empty()) {
        let axis_name = g.split(':').next().unwrap_or(g);
        if axes.iter().any(|a| a.0 == axis_name) {
            continue;
        }
        match axis_name.parse::<usize>() {
            Ok(i) if i < axes.len() => {}
            Ok(i) => return Err(format!("axis index {i} is out of bounds for mesh with {} axes", axes.len())),
            Err(_) => return Err(format!("'{axis_name}' is not a valid axis name or index of the mesh")),
        }
    }
    Ok(())
}

/// `buffer_donor={ (0, {0}), (1, {}) }`
fn check_buffer_donor(raw: &str) -> Result<(), (usize, String)> {
    let mut c = Cursor::new(raw);
    let res: ParseResult<()> = (|| {
        c.expect("{")?;
        if c.eat("}") {
            return Ok(());
        }
        loop {
            c.expect("(")?;
            c.int()?;
            c.expect(",")?;
            c.list("{", "}", |c| c.int())?;
            c.expect(")")?;
            if c.eat("}") {
                return Ok(());
            }
            c.expect(",")?;
        }
    })();
    res.map_err(|e| (c.pos(), e.message))
}

fn check_debug_attributes(raw: &str) -> Result<(), String> {
    let mut rest = raw;
    while let Some(i) = rest.find("log_mode=") {
        let value: String = rest[i + 9..].chars().take_while(|ch| ch.is_ascii_alphanumeric() || *ch == '_').collect();
        if !matches!(value.as_str(), "default" | "fusion_debugger" | "none") {
            return Err(format!("Invalid debug_log_mode value: {value}"));
        }
        rest = &rest[i + 9..];
    }
    Ok(())
}

/// Operand counts and opcode rules XLA enforces while building instructions from text.
fn check_instruction(
    inst: &mut Instruction,
    operand_shapes: &[Shape],
    shape: Option<&Shape>,
    sugar: bool,
) -> Result<(), String> {
    use Opcode::*;
    let n = operand_shapes.len();
    let op = inst.opcode;
    let exact = |k: usize| -> Result<(), String> {
        if n == k {
            Ok(())
        } else {
            Err(format!("{} expects {k} operand(s), but has {n}", op.name()))
        }
    };
    let at_least = |k: usize| -> Result<(), String> {
        if n >= k {
            Ok(())
        } else {
            Err(format!("{} expects at least {k} operand(s), but has {n}", op.name()))
        }
    };
    if op.is_elementwise_unary() {
        exact(1)?;
    } else if op.is_elementwise_binary() {
        exact(2)?;
    }
    match op {
        Select | Clamp => exact(3)?,
        Broadcast
        | Reshape
        | Transpose
        | Reverse
        | Slice
        | Bitcast
        | GetTupleElement
        | Cholesky
        | Fft
        | OptimizationBarrier
        | Domain
        | GetDimensionSize
        | While
        | RecvDone
        | SendDone
        | CopyStart
        | CopyDone
        | AllGatherDone
        | AllReduceDone
        | CollectivePermuteDone
        | Infeed
        | RngBitGenerator
        | TopK => exact(1)?,
        Pad | Dot | Convolution | SetDimensionSize | AddDependency | Rng | Outfeed | Send | Gather
        | TriangularSolve => exact(2)?,
        BatchNormTraining => exact(3)?,
        BatchNormInference | BatchNormGrad => exact(5)?,
        Iota | ReplicaId | PartitionId | RngGetAndUpdateState => exact(0)?,
        DynamicSlice | Conditional | Sort | Map | AllReduce | AllGather | ReduceScatter | AllToAll | Recv => {
            at_least(1)?
        }
        DynamicReshape if n == 0 => return Err("DynamicReshape requires at least one operand.".to_string()),
        DynamicUpdateSlice => at_least(2)?,
        Reduce | ReduceWindow if n < 2 || !n.is_multiple_of(2) => {
            return Err(format!("{} expects an even number (at least 2) of operands, but has {n}", op.name()));
        }
        Scatter if n < 3 || n.is_multiple_of(2) => {
            return Err(format!("scatter expects an odd number (at least 3) of operands, but has {n}"));
        }
        _ => {}
    }
    let dims_empty = matches!(inst.attr("dimensions"), Some(AttrValue::Ints(d)) if d.is_empty());
    match op {
        Broadcast if inst.attr("dimensions").is_none() => {
            if operand_shapes[0].rank() == 0 && operand_shapes[0].is_array() {
                inst.attrs.insert(0, Attribute { name: "dimensions".to_string(), value: AttrValue::Ints(Vec::new()) });
            } else {
                return Err("broadcast of a non-scalar operand requires the 'dimensions' attribute".to_string());
            }
        }
        AllGather | AllGatherStart | ReduceScatter | GetDimensionSize | SetDimensionSize if dims_empty => {
            return Err(format!("{} requires exactly one entry in 'dimensions', found none", op.name()));
        }
        Scan => {
            if let Some(d) = inst.attr_ints("dimensions") {
                let rank = operand_shapes.first().map_or(0, Shape::rank) as i64;
                if d.iter().any(|&x| x < 0 || x >= rank) {
                    return Err(format!("scan dimension out of range for an operand of rank {rank}"));
                }
            }
        }
        Recv if shape.is_some_and(|s| !s.is_tuple()) => {
            return Err("recv expects a tuple shape (data, context, token)".to_string());
        }
        Infeed if shape.is_some_and(|s| !matches!(s, Shape::Tuple(e) if !e.is_empty())) => {
            return Err("infeed must have a non-empty tuple shape".to_string());
        }
        Conditional => {
            let selector = &operand_shapes[0];
            if selector.rank() != 0 || !selector.is_array() {
                return Err(format!("The first operand must be a scalar, but has shape {selector}"));
            }
            let named = |a: &str| inst.attr(a).is_some();
            match selector.element_type() {
                ElementType::Pred => {
                    if named("branch_computations") {
                        return Err(
                            "unexpected attribute \"branch_computations\" for a predicated conditional".to_string()
                        );
                    }
                    if !named("true_computation") || !named("false_computation") {
                        return Err(
                            "a predicated conditional requires true_computation and false_computation".to_string()
                        );
                    }
                }
                ElementType::S32 => {
                    if named("true_computation") || named("false_computation") {
                        return Err(
                            "an indexed conditional takes branch_computations, not true/false_computation".to_string()
                        );
                    }
                    if !named("branch_computations") {
                        return Err("an indexed conditional requires branch_computations".to_string());
                    }
                }
                t => return Err(format!("The first operand must be a scalar of PRED or S32, but has type {t}")),
            }
        }
        CustomCall => {
            if let Some(AttrValue::Shapes(constraints)) = inst.attr("operand_layout_constraints") {
                if constraints.len() != n {
                    return Err(format!("Expected {n} operand layout constraints, {} given", constraints.len()));
                }
                for (i, (c, s)) in constraints.iter().zip(operand_shapes).enumerate() {
                    if !c.compatible(s) {
                        return Err(format!(
                            "operand_layout_constraints: operand {i} is not compatible with operand shape {s}"
                        ));
                    }
                }
            }
            if let Some(v) = inst.attr_word("api_version") {
                match v {
                    "API_VERSION_ORIGINAL"
                    | "API_VERSION_STATUS_RETURNING"
                    | "API_VERSION_STATUS_RETURNING_UNIFIED"
                    | "API_VERSION_TYPED_FFI" => {}
                    "API_VERSION_UNSPECIFIED" => return Err(format!("Invalid API version: {v}")),
                    _ => return Err(format!("Unknown API version: {v}")),
                }
            }
        }
        AsyncStart | AsyncUpdate => {
            if let Some(s) = shape {
                let ok = match s {
                    Shape::Tuple(e) if e.len() >= 2 => match &e[0] {
                        Shape::Tuple(ops) if op == AsyncUpdate || ops.len() == n => {
                            op == AsyncUpdate || ops.iter().zip(operand_shapes).all(|(a, b)| a.compatible(b))
                        }
                        _ => false,
                    },
                    _ => false,
                };
                let ok = ok && (op == AsyncStart || operand_shapes.first().is_none_or(|o| o.compatible(s)));
                if !ok {
                    return Err(async_shape_message());
                }
            }
            if op == AsyncUpdate && n == 0 {
                return Err("No operand found for AsyncUpdate and AsyncDone".to_string());
            }
            if op == AsyncStart && !sugar && inst.attr("calls").is_none() {
                return Err("async-start requires a 'calls' attribute naming the wrapped computation".to_string());
            }
        }
        AsyncDone if n == 0 => return Err("No operand found for AsyncUpdate and AsyncDone".to_string()),
        _ => {}
    }
    Ok(())
}

/// Shape rules the parser enforces once the shape is known.
fn check_shape_rules(inst: &Instruction) -> Result<(), String> {
    if inst.opcode == Opcode::Parameter {
        if let Some(AttrValue::Enums(v)) = inst.attr("parameter_replication") {
            let leaves = inst.shape.leaves().len();
            if v.len() != leaves {
                return Err(format!(
                    "parameter has {leaves} leaf buffers, but parameter_replication has {} elements",
                    v.len()
                ));
            }
        }
    }
    Ok(())
}
