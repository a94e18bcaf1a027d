//! The macros expand with nothing imported, not even the prelude, and accept tracing's
//! field syntax.
#![no_implicit_prelude]

extern crate gpuspan;
extern crate std;

#[derive(Debug)]
struct Optimizer;

#[test]
fn every_form_compiles_and_runs() {
    let _e = gpuspan::epoch_span!(0);
    let _e2 = gpuspan::epoch_span!(1u64, lr = 0.1, ?Optimizer, name = "warmup");
    let _e3 = gpuspan::epoch_span!(2usize,);
    let _s = gpuspan::step_span!(3i32);
    let _s2 = gpuspan::step_span!(4u8, batch_size = 64, kind = %"display");
    let _m = gpuspan::memory_span!("eval");
    let m2 = gpuspan::memory_span!("checkpoint", shard = 3);
    let _span: &::tracing::Span = m2.span();
}
