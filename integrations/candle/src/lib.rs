//! Nothing to link: this package holds the candle example (`examples/candle_loop.rs`) and
//! its test.
