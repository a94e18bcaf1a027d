#![allow(dead_code)]

pub mod example;
pub mod fake_nvml;
pub mod receiver;
pub mod sampling;
pub mod scripted;
pub mod setup;
