//! Tessera's host API (DESIGN.md section 8): a [`Client`] for one backend compiles HLO modules
//! (text or built with `tessera_hlo::builder`) into [`Executable`]s that run on literals,
//! resident [`DeviceBuffer`]s or caller-owned physical buffers.
//!
//! ```no_run
//! use tessera::{Backend, Client, CompileOptions};
//! use tessera_hlo::Literal;
//!
//! let client = Client::new(Backend::Llvm)?;
//! let exe = client.compile_text(
//!     "HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(p)\n}\n",
//!     &CompileOptions::default(),
//! )?;
//! let out = exe.run(&[Literal::from_vec(&[4], vec![1f32, 2.0, 3.0, 4.0])?])?;
//! assert_eq!(out[0].to_vec::<f32>()?, vec![-1.0, -2.0, -3.0, -4.0]);
//! # Ok::<(), tessera::Error>(())
//! ```

pub mod aot;
mod cache;
mod client;
pub mod conformance;
mod device_buffer;
pub mod differential;
mod error;
mod executable;
pub mod table;
mod tiered;

pub use cache::{CacheOutcome, CacheSetting};
pub use client::{Backend, Client, ClientOptions, CompileOptions};
pub use device_buffer::DeviceBuffer;
pub use error::Error;
pub use executable::{Argument, Executable};
pub use tessera_codegen::CpuTarget;
pub use tessera_lower::{LowerOptions, Timings};
pub use tessera_runtime::Parameter;
