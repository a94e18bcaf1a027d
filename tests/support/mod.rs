#![allow(dead_code)]

pub mod example;
pub mod fake_nvml;
pub mod http;
pub mod pictures;
pub mod receiver;
pub mod rotel_debug;
pub mod sampling;
pub mod scripted;
pub mod servers;
pub mod setup;
