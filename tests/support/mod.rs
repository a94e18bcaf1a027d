#![allow(dead_code)]

pub mod fake_nvml;
pub mod receiver;
pub mod scripted;
pub mod setup;
