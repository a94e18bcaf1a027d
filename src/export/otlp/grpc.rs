//! gRPC request metadata exactly as resolved.

use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};

use super::HeaderError;
use crate::config::OtlpTarget;

/// The resolved headers as gRPC metadata.
pub(super) fn metadata(target: &OtlpTarget) -> Result<MetadataMap, HeaderError> {
    let mut map = MetadataMap::new();
    for (key, value) in &target.headers {
        let name = MetadataKey::from_bytes(key.to_ascii_lowercase().as_bytes())
            .map_err(|_| HeaderError::Name(key.clone()))?;
        let value =
            MetadataValue::try_from(value.as_str()).map_err(|_| HeaderError::Value(key.clone()))?;
        map.insert(name, value);
    }
    Ok(map)
}

/// Sets every resolved header on each request, replacing what opentelemetry-otlp took from
/// the environment under the same name: code beats environment on the wire.
#[derive(Debug, Clone)]
pub(super) struct OverrideHeaders(pub(super) MetadataMap);

impl tonic::service::Interceptor for OverrideHeaders {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        let metadata = request.metadata_mut();
        for entry in self.0.iter() {
            if let tonic::metadata::KeyAndValueRef::Ascii(key, value) = entry {
                metadata.insert(key.clone(), value.clone());
            }
        }
        Ok(request)
    }
}
