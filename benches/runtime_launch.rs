//! What the runtime adds per call and per launch (DESIGN.md section 7: nanoseconds per launch,
//! no allocation once warmed up): executables of empty hand-written kernels, run on one
//! thread so only the runtime's own work is measured.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use tessera_runtime::{
    AlignedBuffer, BufferEntry, BufferRole, Executable, ExecutableParts, LaunchEntry, MemorySpaces, StepEntry,
    ThreadPool,
};

unsafe extern "C" fn empty(_buffers: *const *mut u8, _lo: i64, _hi: i64) {}

/// `launches` launches of a kernel over (parameter, constant, temp, result).
fn executable(launches: usize) -> Executable {
    let entry = |name: &str, role| BufferEntry { name: name.into(), bytes: 64, role };
    let parts = ExecutableParts {
        buffers: vec![
            entry("p", BufferRole::Parameter(0)),
            entry("c", BufferRole::Constant(AlignedBuffer::zeroed(64).unwrap())),
            entry("t", BufferRole::Temp { space: 0, offset: 0 }),
            entry("r", BufferRole::Result(0)),
        ],
        launches: (0..launches)
            .map(|_| LaunchEntry {
                name: "empty".into(),
                function: empty,
                extent: 1,
                buffers: vec![0, 1, 2, 3],
                traffic: None,
            })
            .collect(),
        steps: StepEntry::in_order(launches),
        arenas: vec![(0, 64)],
        code: Box::new(()),
    };
    Executable::new(parts, &MemorySpaces::new(), Arc::new(ThreadPool::new(Some(1)).unwrap())).unwrap()
}

fn bench(c: &mut Criterion) {
    let input = AlignedBuffer::zeroed(64).unwrap();
    let mut output = AlignedBuffer::zeroed(64).unwrap();
    for launches in [1, 100] {
        let exe = executable(launches);
        c.bench_function(&format!("run, {launches} empty launches"), |b| {
            b.iter(|| exe.run(&[input.as_slice()], &mut [output.as_mut_slice()]).unwrap())
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
