//! Reading specs: JSON from a file (or the embedded default), `--set path=value` overrides, and
//! errors that name the file, the field and what is allowed.

use crate::spec::{FieldError, Spec};
use serde_json::Value;
use std::path::Path;

/// A spec that could not be read, with where and why.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: {message}")]
pub struct SpecError {
    /// The file (or `<embedded default>`, `--set`).
    pub source_name: String,
    /// What is wrong, with the field's path.
    pub message: String,
}

impl SpecError {
    fn new(source_name: &str, message: impl Into<String>) -> Self {
        SpecError { source_name: source_name.to_string(), message: message.into() }
    }
}

/// Sets `path` (dotted; numbers index arrays) in `root` to `value`, creating objects as needed.
pub fn set_path(root: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let parts: Vec<&str> = path.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(format!("`{path}` is not a field path (use names separated by dots, e.g. network.latency_us)"));
    }
    let mut cur = root;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        if cur.is_null() {
            *cur = Value::Object(Default::default());
        }
        cur = match cur {
            Value::Array(items) => {
                let len = items.len();
                let k: usize = part.parse().map_err(|_| format!("`{path}`: `{part}` is not an index into a list"))?;
                let slot =
                    items.get_mut(k).ok_or_else(|| format!("`{path}`: index {k} is past the end ({len} items)"))?;
                if last {
                    *slot = value;
                    return Ok(());
                }
                slot
            }
            Value::Object(map) => {
                if last {
                    map.insert(part.to_string(), value);
                    return Ok(());
                }
                map.entry(part.to_string()).or_insert(Value::Null)
            }
            _ => return Err(format!("`{path}`: `{}` is not an object", parts[..i].join("."))),
        };
    }
    Ok(())
}

/// Parses `field=value`; the value is JSON if it parses as JSON, else a string.
pub fn parse_assignment(s: &str) -> Result<(String, Value), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("`{s}` is not of the form path.to.field=value"))?;
    let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()));
    Ok((k.trim().to_string(), value))
}

/// Builds a validated spec from JSON text plus overrides.
pub fn spec_from_str(source_name: &str, text: &str, sets: &[String]) -> Result<Spec, SpecError> {
    let mut value: Value =
        serde_json::from_str(text).map_err(|e| SpecError::new(source_name, format!("not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(SpecError::new(source_name, "a spec must be a JSON object"));
    }
    for s in sets {
        let (k, v) = parse_assignment(s).map_err(|e| SpecError::new("--set", e))?;
        set_path(&mut value, &k, v).map_err(|e| SpecError::new("--set", e))?;
    }
    spec_from_value(source_name, value)
}

/// Builds a validated spec from a JSON value.
pub fn spec_from_value(source_name: &str, value: Value) -> Result<Spec, SpecError> {
    let spec: Spec = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let inner = inner.split(" at line ").next().unwrap_or(&inner).to_string();
        if path == "." {
            SpecError::new(source_name, inner)
        } else {
            SpecError::new(source_name, format!("field `{path}`: {inner}"))
        }
    })?;
    spec.validate()
        .map_err(|FieldError { field, problem }| SpecError::new(source_name, format!("field `{field}`: {problem}")))?;
    Ok(spec)
}

/// Reads and validates a spec file.
pub fn spec_from_file(path: &Path, sets: &[String]) -> Result<Spec, SpecError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| SpecError::new(&name, format!("cannot read: {e}")))?;
    spec_from_str(&name, &text, sets)
}
