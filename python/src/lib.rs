//! `tessera._tessera`: the Python package's native layer, a thin wrapper of the `tessera`
//! facade. It compiles HLO text, describes an executable's parameters and results, runs it on
//! caller-owned byte buffers (numpy arrays viewed as bytes: `tessera/__init__.py` checks
//! shapes and dtypes and turns arrays into buffers and back), and compiles ahead of time.
//!
//! Buffers hold logical values in row-major order (what numpy's C order is); a parameter or
//! result whose module layout is another is relaid here, so Python never sees layouts. Long
//! work (compiling, running) releases the GIL.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use pyo3::buffer::PyUntypedBuffer;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use tessera::aot::{self, Tier};
use tessera::{Backend, Client, ClientOptions, CompileOptions, CpuTarget, LowerOptions, Parameter};
use tessera_codegen::aot::AotOptions;
use tessera_hlo::{ArrayShape, LayoutMap, Literal, Shape};

create_exception!(_tessera, TesseraError, PyException, "An error Tessera reported.");
create_exception!(_tessera, CompileError, TesseraError, "A module that does not parse, verify or compile.");
create_exception!(_tessera, RunError, TesseraError, "A run that failed (a failed check, a host function's error).");

/// Clients by backend and thread count.
type Clients = HashMap<(Backend, Option<usize>), Arc<Client>>;

/// One client per backend and thread count, shared by every compile that asks for it (a
/// client owns a thread pool).
fn client(backend: Backend, threads: Option<usize>) -> PyResult<Arc<Client>> {
    static CLIENTS: OnceLock<Mutex<Clients>> = OnceLock::new();
    let mut clients = CLIENTS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(client) = clients.get(&(backend, threads)) {
        return Ok(client.clone());
    }
    let options = ClientOptions { threads, ..ClientOptions::default() };
    let client = Arc::new(Client::with_options(backend, &options).map_err(|e| TesseraError::new_err(e.to_string()))?);
    clients.insert((backend, threads), client.clone());
    Ok(client)
}

fn backend(name: &str) -> PyResult<Backend> {
    Backend::from_name(name).ok_or_else(|| {
        PyValueError::new_err(format!("unknown backend '{name}' (expected llvm, cranelift, interp or tiered)"))
    })
}

/// An array leaf as Python sees it: dimensions and Tessera's dtype name.
fn leaf(shape: &ArrayShape) -> (Vec<i64>, String) {
    (shape.dims.clone(), shape.element_type.to_string())
}

/// A leaf in the row-major layout numpy's C order has.
fn row_major(shape: &ArrayShape) -> ArrayShape {
    let mut shape = shape.clone();
    shape.layout = None;
    shape.layout = Some(shape.layout_or_default());
    shape
}

/// A compiled module.
#[pyclass(frozen, module = "tessera._tessera")]
struct Executable {
    inner: tessera::Executable,
    /// Per parameter leaf, then per result leaf: whether its module layout is row-major (its
    /// bytes are then numpy's as they are).
    parameters_row_major: Vec<bool>,
    results_row_major: Vec<bool>,
    /// Bytes of each parameter leaf and each result leaf in row-major order.
    parameter_bytes: Vec<usize>,
    result_bytes: Vec<usize>,
}

#[pymethods]
impl Executable {
    /// Parameter leaves (entry parameters, tuples flattened depth-first): (dims, dtype).
    #[getter]
    fn parameters(&self) -> Vec<(Vec<i64>, String)> {
        self.inner.parameter_leaves().map(leaf).collect()
    }

    /// Result leaves (a tuple flattened depth-first): (dims, dtype).
    #[getter]
    fn results(&self) -> Vec<(Vec<i64>, String)> {
        self.inner.result_leaves().map(leaf).collect()
    }

    /// Whether the module's result is a tuple (its leaves then come back as a tuple).
    #[getter]
    fn result_is_tuple(&self) -> bool {
        matches!(self.inner.result_shape(), Shape::Tuple(_))
    }

    /// Wall time of the compile (parse to runnable), in seconds.
    #[getter]
    fn compile_seconds(&self) -> f64 {
        self.inner.compile_time().as_secs_f64()
    }

    /// The backend that compiled it.
    #[getter]
    fn backend(&self) -> &'static str {
        self.inner.backend().name()
    }

    /// What the compile cache did: `hit`, `miss`, `rejected` or `off`.
    #[getter]
    fn cache(&self) -> &'static str {
        self.inner.cache_outcome().name()
    }

    /// The (result, parameter) leaf pairs the program may write into one memory (the module's
    /// `input_output_alias`, where the program honors it): a result given the very buffer of
    /// its parameter is then updated in place.
    #[getter]
    fn donated_results(&self) -> Vec<(usize, usize)> {
        self.inner.donated_results()
    }

    /// Runs on `args` (one readable C-contiguous buffer per parameter leaf, its row-major
    /// bytes) into `results` (one writable C-contiguous buffer per result leaf). A result may be
    /// the very buffer of an argument (the caller donates it): it then holds the result after
    /// the run, written in place when the program honors the pair (`donated_results`), else
    /// written there after the run. Any other overlap is refused.
    fn run(&self, py: Python<'_>, args: Vec<Bound<'_, PyAny>>, results: Vec<Bound<'_, PyAny>>) -> PyResult<()> {
        let parameters: Vec<&ArrayShape> = self.inner.parameter_leaves().collect();
        let result_leaves: Vec<&ArrayShape> = self.inner.result_leaves().collect();
        if args.len() != parameters.len() {
            return Err(PyValueError::new_err(format!(
                "the executable takes {} arguments, got {}",
                parameters.len(),
                args.len()
            )));
        }
        if results.len() != result_leaves.len() {
            return Err(PyValueError::new_err(format!(
                "the executable has {} results, got {} result buffers",
                result_leaves.len(),
                results.len()
            )));
        }
        let arg_buffers = buffers(&args, &parameters, &self.parameter_bytes, "parameter", false)?;
        let result_buffers = buffers(&results, &result_leaves, &self.result_bytes, "result", true)?;
        let span = |b: &PyUntypedBuffer| (b.buf_ptr() as usize, b.buf_ptr() as usize + b.len_bytes());
        // The argument whose very buffer each result is (donated), if any.
        let shares: Vec<Option<usize>> = result_buffers
            .iter()
            .map(|r| match r.len_bytes() {
                0 => None,
                _ => arg_buffers.iter().position(|a| span(a) == span(r)),
            })
            .collect();
        // A result buffer overlapping any other buffer would be written while read.
        for (i, r) in result_buffers.iter().enumerate() {
            let (start, end) = span(r);
            let args = arg_buffers.iter().enumerate().filter(|&(j, _)| shares[i] != Some(j)).map(|(_, b)| b);
            let others = args.chain(result_buffers.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, b)| b));
            if start < end && others.map(span).any(|(s, e)| s < end && start < e) {
                return Err(PyValueError::new_err(format!(
                    "result {i}: the buffer overlaps another argument or result"
                )));
            }
        }
        // In place where the program honors the pair and nothing needs relaying: the entry
        // then gets one 64-byte aligned address for both.
        let honored = self.inner.donated_results();
        let in_place: Vec<Option<usize>> = shares
            .iter()
            .enumerate()
            .map(|(r, share)| {
                share.filter(|&p| {
                    honored.contains(&(r, p))
                        && self.results_row_major[r]
                        && self.parameters_row_major[p]
                        && arg_buffers[p].buf_ptr() as usize % 64 == 0
                })
            })
            .collect();
        let donated = |p: usize| in_place.contains(&Some(p));
        // SAFETY: `buffers` checked that each is a C-contiguous buffer of exactly the leaf's
        // byte size (and writable for results), and no result overlaps a buffer but the
        // argument it shares exactly. Each memory gets one slice for the run: a donated
        // argument a mutable one (its result's slot stays empty), another argument a shared
        // one, a result that shares an argument's buffer without donation none (it is written
        // into scratch and copied there after the run, once the arguments' slices are gone),
        // any other result a mutable one. The buffer views keep their objects alive and their
        // memory in place until they drop, after the run. Empty buffers become empty slices
        // (their pointer may be null).
        let mut inputs: Vec<Parameter<'_>> = arg_buffers
            .iter()
            .enumerate()
            .map(|(p, b)| match (b.len_bytes(), donated(p)) {
                (0, _) => Parameter::Lent(&[][..]),
                (n, true) => Parameter::Donated(unsafe { std::slice::from_raw_parts_mut(b.buf_ptr() as *mut u8, n) }),
                (n, false) => Parameter::Lent(unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const u8, n) }),
            })
            .collect();
        // Scratch only for a result that shares an argument's buffer but is not written in it.
        let scratch_bytes =
            |r: usize| if shares[r].is_some() && in_place[r].is_none() { self.result_bytes[r] } else { 0 };
        let mut scratch: Vec<Vec<u8>> = (0..shares.len()).map(|r| vec![0u8; scratch_bytes(r)]).collect();
        let mut outputs: Vec<&mut [u8]> = result_buffers
            .iter()
            .zip(&shares)
            .zip(&in_place)
            .zip(scratch.iter_mut())
            .map(|(((b, share), in_place), scratch)| match (share, in_place, b.len_bytes()) {
                (_, Some(_), _) | (_, _, 0) => &mut [][..],
                (Some(_), None, _) => scratch.as_mut_slice(),
                (None, _, n) => unsafe { std::slice::from_raw_parts_mut(b.buf_ptr() as *mut u8, n) },
            })
            .collect();
        let donating = in_place.iter().any(Option::is_some);
        py.detach(|| self.run_row_major(&parameters, &result_leaves, &mut inputs, &mut outputs, donating))
            .map_err(RunError::new_err)?;
        drop((inputs, outputs));
        for (r, share) in shares.iter().enumerate() {
            if share.is_some() && in_place[r].is_none() {
                let b = &result_buffers[r];
                // SAFETY: as above; no other slice of this memory is alive any more.
                unsafe { std::slice::from_raw_parts_mut(b.buf_ptr() as *mut u8, b.len_bytes()) }
                    .copy_from_slice(&scratch[r]);
            }
        }
        Ok(())
    }
}

impl Executable {
    fn new(inner: tessera::Executable) -> PyResult<Executable> {
        let row_major_already = |shape: &ArrayShape| {
            let own = LayoutMap::new(shape);
            own.is_ok() && own.ok() == LayoutMap::new(&row_major(shape)).ok()
        };
        let bytes = |shape: &ArrayShape| {
            tessera::DeviceBuffer::zeroed(&row_major(shape))
                .map(|b| b.bytes().len())
                .map_err(|e| CompileError::new_err(e.to_string()))
        };
        Ok(Executable {
            parameters_row_major: inner.parameter_leaves().map(row_major_already).collect(),
            results_row_major: inner.result_leaves().map(row_major_already).collect(),
            parameter_bytes: inner.parameter_leaves().map(bytes).collect::<PyResult<_>>()?,
            result_bytes: inner.result_leaves().map(bytes).collect::<PyResult<_>>()?,
            inner,
        })
    }

    /// Runs on row-major bytes, relaying out the leaves whose module layout is another; with
    /// `donating`, some parameters are donated (row-major ones, whose results' slots are
    /// empty).
    fn run_row_major(
        &self,
        parameters: &[&ArrayShape],
        results: &[&ArrayShape],
        inputs: &mut [Parameter<'_>],
        outputs: &mut [&mut [u8]],
        donating: bool,
    ) -> Result<(), String> {
        let relaid: Vec<Option<Vec<u8>>> = inputs
            .iter()
            .zip(parameters)
            .zip(&self.parameters_row_major)
            .map(|((input, shape), &row_major_already)| -> Result<Option<Vec<u8>>, String> {
                if row_major_already {
                    return Ok(None);
                }
                let bytes = input.bytes().to_vec();
                let logical = Literal::from_physical_bytes(Shape::Array(row_major(shape)), bytes)
                    .and_then(|l| l.relayout_like(&Shape::Array((*shape).clone())))
                    .map_err(|e| e.to_string())?;
                Ok(Some(logical.physical_bytes().map_err(|e| e.to_string())?.to_vec()))
            })
            .collect::<Result<_, _>>()?;
        // Row-major results are written in place; the others into scratch in their module
        // layout, then relaid.
        let mut scratch: Vec<Vec<u8>> = results
            .iter()
            .zip(&self.results_row_major)
            .map(|(shape, &row_major_already)| match row_major_already {
                true => Ok(Vec::new()),
                false => tessera::DeviceBuffer::zeroed(shape).map(|b| b.bytes().to_vec()).map_err(|e| e.to_string()),
            })
            .collect::<Result<_, _>>()?;
        {
            let mut targets: Vec<&mut [u8]> = outputs
                .iter_mut()
                .zip(scratch.iter_mut())
                .zip(&self.results_row_major)
                .map(|((out, s), &row_major_already)| if row_major_already { &mut **out } else { s.as_mut_slice() })
                .collect();
            if donating {
                let mut args: Vec<Parameter<'_>> = inputs
                    .iter_mut()
                    .zip(&relaid)
                    .map(|(input, relaid)| match (input, relaid) {
                        (_, Some(r)) => Parameter::Lent(r.as_slice()),
                        (Parameter::Donated(bytes), None) => Parameter::Donated(&mut **bytes),
                        (Parameter::Lent(bytes), None) => Parameter::Lent(bytes),
                    })
                    .collect();
                self.inner.run_raw_donating(&mut args, &mut targets).map_err(|e| e.to_string())?;
            } else {
                let args: Vec<&[u8]> =
                    inputs.iter().zip(&relaid).map(|(input, r)| r.as_deref().unwrap_or(input.bytes())).collect();
                self.inner.run_raw(&args, &mut targets).map_err(|e| e.to_string())?;
            }
        }
        for (i, shape) in results.iter().enumerate() {
            if self.results_row_major[i] {
                continue;
            }
            let literal = Literal::from_physical_bytes(Shape::Array((*shape).clone()), std::mem::take(&mut scratch[i]))
                .and_then(|l| l.relayout_like(&Shape::Array(row_major(shape))))
                .map_err(|e| e.to_string())?;
            outputs[i].copy_from_slice(literal.physical_bytes().map_err(|e| e.to_string())?);
        }
        Ok(())
    }
}

/// Buffer views of `objects`, each C-contiguous with exactly its leaf's row-major byte size
/// (`sizes`), and writable if `writable`.
fn buffers(
    objects: &[Bound<'_, PyAny>],
    leaves: &[&ArrayShape],
    sizes: &[usize],
    what: &str,
    writable: bool,
) -> PyResult<Vec<PyUntypedBuffer>> {
    objects
        .iter()
        .zip(leaves.iter().zip(sizes))
        .enumerate()
        .map(|(i, (object, (shape, &want)))| {
            let buffer = PyUntypedBuffer::get(object)?;
            if !buffer.is_c_contiguous() {
                return Err(PyValueError::new_err(format!("{what} {i}: the buffer is not C-contiguous")));
            }
            if writable && buffer.readonly() {
                return Err(PyValueError::new_err(format!("{what} {i}: the buffer is read-only")));
            }
            if buffer.len_bytes() != want {
                return Err(PyValueError::new_err(format!(
                    "{what} {i}: {} needs {want} bytes, the buffer has {}",
                    Shape::Array(row_major(shape)).without_layout(),
                    buffer.len_bytes()
                )));
            }
            Ok(buffer)
        })
        .collect()
}

/// Compiles HLO text with `backend` on `threads` threads (default: all cores).
#[pyfunction]
#[pyo3(signature = (text, backend = "llvm", threads = None))]
fn compile(py: Python<'_>, text: &str, backend: &str, threads: Option<usize>) -> PyResult<Executable> {
    let client = client(self::backend(backend)?, threads)?;
    let text = text.to_string();
    let inner = py
        .detach(move || client.compile_text(&text, &CompileOptions::default()))
        .map_err(|e| CompileError::new_err(e.to_string()))?;
    Executable::new(inner)
}

/// Compiles HLO text ahead of time into `directory/name.o` and `directory/name.h`, as
/// `tessera compile` does; returns their paths.
#[pyfunction]
#[pyo3(signature = (text, name, directory, backend = "llvm", target = None, cpu = None))]
fn export(
    py: Python<'_>,
    text: &str,
    name: &str,
    directory: PathBuf,
    backend: &str,
    target: Option<String>,
    cpu: Option<String>,
) -> PyResult<(String, String)> {
    if !aot::is_c_identifier(name) {
        return Err(PyValueError::new_err(format!("'{name}' is not a valid C identifier for the entry symbol")));
    }
    let tier = match backend {
        "llvm" => Tier::Llvm,
        "cranelift" => Tier::Cranelift,
        other => {
            return Err(PyValueError::new_err(format!(
                "ahead-of-time compilation needs backend llvm or cranelift, not '{other}'"
            )))
        }
    };
    let object = directory.join(format!("{name}.o"));
    let header = directory.join(format!("{name}.h"));
    let options = AotOptions {
        tier,
        symbol: name.to_string(),
        triple: target,
        cpu: CpuTarget::parse(cpu.as_deref().unwrap_or(""), ""),
        source: format!("{name} (exported from Python)"),
        parallel: false,
        dump_dir: None,
        object_name: format!("{name}.o"),
    };
    let text = text.to_string();
    let (o, h) = (object.clone(), header.clone());
    py.detach(move || -> Result<(), tessera::Error> {
        let module = tessera_hlo::text::parse_module(&text)?;
        let artifacts = aot::compile(&module, &LowerOptions::default(), &options)?;
        aot::write(&artifacts, &o, &h)
    })
    .map_err(|e| CompileError::new_err(e.to_string()))?;
    Ok((object.display().to_string(), header.display().to_string()))
}

#[pymodule]
fn _tessera(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Executable>()?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(export, m)?)?;
    m.add("TesseraError", m.py().get_type::<TesseraError>())?;
    m.add("CompileError", m.py().get_type::<CompileError>())?;
    m.add("RunError", m.py().get_type::<RunError>())?;
    Ok(())
}
