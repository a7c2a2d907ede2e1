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
use tessera::{Backend, Client, ClientOptions, CompileOptions, CpuTarget, LowerOptions};
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

    /// Runs on `args` (one readable C-contiguous buffer per parameter leaf, its row-major
    /// bytes) into `results` (one writable C-contiguous buffer per result leaf).
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
        // A result buffer shared with another buffer would be written while read.
        let span = |b: &PyUntypedBuffer| (b.buf_ptr() as usize, b.buf_ptr() as usize + b.len_bytes());
        for (i, r) in result_buffers.iter().enumerate() {
            let (start, end) = span(r);
            let others =
                arg_buffers.iter().chain(result_buffers.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, b)| b));
            if start < end && others.map(span).any(|(s, e)| s < end && start < e) {
                return Err(PyValueError::new_err(format!(
                    "result {i}: the buffer overlaps another argument or result"
                )));
            }
        }
        // SAFETY: `buffers` checked that each is a C-contiguous buffer of exactly the leaf's
        // byte size (and writable for results), and no result overlaps another buffer; the
        // buffer views keep their objects alive and their memory in place until they drop,
        // after the run. Empty buffers become empty slices (their pointer may be null).
        let inputs: Vec<&[u8]> = arg_buffers
            .iter()
            .map(|b| match b.len_bytes() {
                0 => &[][..],
                n => unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const u8, n) },
            })
            .collect();
        let mut outputs: Vec<&mut [u8]> = result_buffers
            .iter()
            .map(|b| match b.len_bytes() {
                0 => &mut [][..],
                n => unsafe { std::slice::from_raw_parts_mut(b.buf_ptr() as *mut u8, n) },
            })
            .collect();
        py.detach(|| self.run_row_major(&parameters, &result_leaves, &inputs, &mut outputs)).map_err(RunError::new_err)
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

    /// Runs on row-major bytes, relaying out the leaves whose module layout is another.
    fn run_row_major(
        &self,
        parameters: &[&ArrayShape],
        results: &[&ArrayShape],
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
    ) -> Result<(), String> {
        let relaid: Vec<Option<Vec<u8>>> = inputs
            .iter()
            .zip(parameters)
            .zip(&self.parameters_row_major)
            .map(|((bytes, shape), &row_major_already)| -> Result<Option<Vec<u8>>, String> {
                if row_major_already {
                    return Ok(None);
                }
                let logical = Literal::from_physical_bytes(Shape::Array(row_major(shape)), bytes.to_vec())
                    .and_then(|l| l.relayout_like(&Shape::Array((*shape).clone())))
                    .map_err(|e| e.to_string())?;
                Ok(Some(logical.physical_bytes().map_err(|e| e.to_string())?.to_vec()))
            })
            .collect::<Result<_, _>>()?;
        let args: Vec<&[u8]> = inputs.iter().zip(&relaid).map(|(b, r)| r.as_deref().unwrap_or(b)).collect();
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
            self.inner.run_raw(&args, &mut targets).map_err(|e| e.to_string())?;
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
