#![allow(dead_code)]

pub mod example;
pub mod fake_nvml;
pub mod http;
pub mod python_otel;
pub mod raw_http;
pub mod receiver;
pub mod rotel_debug;
pub mod sampling;
pub mod scripted;
pub mod servers;
pub mod setup;
