//! `KubeSchedulerConfiguration`: types, versions (v1beta1..v1 read, v1 written), defaults, validation.

pub mod catalog;
pub mod error;

pub use catalog::{ExtensionPoint, PluginAvailability, PluginCatalog};
pub use error::FieldError;
