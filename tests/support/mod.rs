#![allow(dead_code)]

pub mod example;
pub mod fake_nvml;
pub mod go_stack;
pub mod http;
pub mod jaeger_api;
pub mod mlflow;
pub mod prometheus_text;
pub mod receiver;
pub mod rotel_debug;
pub mod sampling;
pub mod scripted;
pub mod servers;
pub mod setup;
